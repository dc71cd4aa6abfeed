#!/usr/bin/env bash
# Pipeline parallelism through the CLI (issue 14; engine/schedule_pp.c): at a
# fixed global batch and --grad-accum m, every --pp P and schedule (gpipe,
# 1f1b, interleaved) trains a tiny Llama to per-step losses and exported
# weights BIT-IDENTICAL to one process, tied and untied; Mistral and Mamba
# likewise; DP 2 x PP 2 bit-identical to DP 2 alone and within 1e-5 of one
# process. The PP communicator's send/receive counts and bytes equal the
# static schedule's (`shardlm pp-schedule --json`, an independent
# computation in plan/); ZeRO-3 moves ZeRO-2's bytes; stage 0's activation
# arena is the in-flight micro-batches x one micro-batch's activations;
# checkpoints written at PP 2 resume at PP 1 and 3 bit-identically.
# Refusals exit 2 with the builder's message.
source "${SL_SRC:?}/tests/lib/pp_common.sh"
# one process: the references (m = 4 micro-batches of 2 samples)
run llama base 1 4
run tied tbase 1 4
for P in 2 3; do
  run llama g$P "$P" 4 --pp "$P" --pp-schedule gpipe && check g$P base --exact
done
for P in 2 4; do
  run llama f$P "$P" 4 --pp "$P" --pp-schedule 1f1b && check f$P base --exact
done
counters g3 3 4 gpipe
counters f4 4 4 1f1b
run llama i2 2 4 --pp 2 --pp-schedule interleaved --pp-virtual 2 && check i2 base --exact
counters i2 2 4 interleaved 2
run llama lay 3 4 --pp 3 --pp-layout 0,3,1 --zero 3 && check lay base --exact
# tied embeddings: the head's gradient part reaches rank 0 per micro-batch
run tied tf2 2 4 --pp 2 && check tf2 tbase --exact
run tied ti2 2 4 --pp 2 --pp-schedule interleaved --pp-virtual 2 --zero 2 && check ti2 tbase --exact
# --no-sync-accum (one reduction per step; one chunk per rank, untied)
run llama nsbase 1 4 --no-sync-accum && run llama ns3 3 4 --pp 3 --no-sync-accum && check ns3 nsbase --exact
# held-out evaluation: each window through the stages, the loss from the last
E="--split 90,10,0 --eval-every 2 --eval-samples 6"
run llama ebase 1 4 $E && run llama e3 3 4 --pp 3 $E && check e3 ebase --exact
if [ -n "$(grep -o '"eval_loss": [0-9.]*' "$W/ebase/metrics.jsonl")" ] &&
   [ "$(grep -o '"eval_loss": [0-9.]*' "$W/ebase/metrics.jsonl")" = "$(grep -o '"eval_loss": [0-9.]*' "$W/e3/metrics.jsonl")" ]; then
  ok "held-out losses at --pp 3 equal one process's"
else bad "held-out losses differ at --pp 3"; fi
# Mistral and Mamba (tied)
run mistral mibase 1 4 && run mistral mi3 3 4 --pp 3 && check mi3 mibase --exact
run mamba mabase 1 4 && run mamba ma2 2 4 --pp 2 --pp-schedule gpipe && check ma2 mabase --exact
# DP 2 x PP 2: the same global batch (2 ranks x 2 micro-batches)
run llama d2 2 2 && run llama d2p2 4 2 --pp 2 --zero 3 && check d2p2 d2 --exact && check d2p2 base --rtol 1e-5
run llama d2p2z2 4 2 --pp 2 --zero 2 && check d2p2z2 d2 --exact
# ZeRO-3 under PP gathers each unit once per step (not per micro-batch): the
# step moves exactly ZeRO-2's bytes (gather + reduce-scatter volumes equal)
if [ "$(metric d2p2 '["comm_bytes"]')" = "$(metric d2p2z2 '["comm_bytes"]')" ]; then
  ok "ZeRO-3 x PP moves ZeRO-2's bytes per step ($(metric d2p2 '["comm_bytes"]'))"
else bad "ZeRO-3 x PP comm bytes $(metric d2p2 '["comm_bytes"]') != ZeRO-2's $(metric d2p2z2 '["comm_bytes"]')"; fi
# activation arena of stage 0 = (micro-batches in flight) x one micro-batch's
# activations of its units: gpipe m=4 holds 4, 1f1b m=4 holds 2 (the
# builder's peak_inflight of rank 0), gpipe m=1 holds 1
run llama g2m1 2 1 --pp 2 --pp-schedule gpipe
a4=$(metric g2 '["arena_peak"]["acts"]'); a2=$(metric f2 '["arena_peak"]["acts"]'); a1=$(metric g2m1 '["arena_peak"]["acts"]')
# one micro-batch on stage 0 (its k layers from the planner's layout): per
# layer (N = 2x16 tokens, C 32, q|k|v 64, attention 32, 4 heads, I 64) ln1,
# xmid, ln2 (N C each), qkv (N 64), att (N 32), lse (N 4), rstd x2 (N),
# gate|up (N 128), h (N 64) floats; plus the k+1 residual-stream buffers
k=$("$B" pp-schedule --pp 2 --micro-batches 4 --model "$W/llama" --bytes 1 --json | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['layout'][0])")
one=$(( 4 * (k * 32 * (3 * 32 + 64 + 32 + 4 + 2 + 128 + 64) + (k + 1) * 32 * 32) ))
if [ "$a4" -eq $((4 * one)) ] && [ "$a2" -eq $((2 * one)) ] && [ "$a1" -eq "$one" ]; then
  ok "stage 0 acts arena = micro-batches in flight (4/2/1) x $one bytes ($k layers): $a4/$a2/$a1"
else bad "stage 0 acts arena $a4/$a2/$a1, expected 4/2/1 x $one"; fi
# checkpoints: per-unit ranges, so a checkpoint written at PP 2 resumes at
# PP 1 and at PP 3 x ZeRO-3 (and tied at PP 1): the continued run equals the
# uninterrupted one bit for bit (the step-4 checkpoint removed: resume at 2)
ckpt() { # model base name resume-world resume-flags...
  local model=$1 ref=$2 name=$3 np=$4; shift 4
  rm -rf "$W/$name.src"
  run "$model" "$name.src" 2 4 --pp 2 --ckpt-dir "$W/$name.src/ck" --ckpt-every 2 --keep-last 0 || return
  rm -rf "$W/$name.src/ck/step-000004" "$W/$name.src/ck/latest"
  cp -r "$W/$name.src" "$W/$name"
  run "$model" "$name" "$np" 4 --ckpt-dir "$W/$name/ck" --resume "$@" || return
  grep -q "resumed from .* at step 2" "$W/$name.log" || { bad "$name did not resume at step 2"; return; }
  check "$name" "$ref" --exact
}
ckpt llama base ck1 1
ckpt llama base ck3 3 --pp 3 --zero 3
ckpt tied tbase tck1 1
# refusals: exit 2 with the reason
refuse mlessp "at least as many micro-batches as stages" --pp 2 --grad-accum 1
refuse playout "must sum to" --pp 2 --grad-accum 2 --pp-layout 1,2
refuse nosynctied "untied embeddings only" --model "$W/tied" --pp 2 --grad-accum 2 --no-sync-accum
refuse zb1pmlessp "at least as many micro-batches as stages" --pp 2 --grad-accum 1 --pp-schedule zb1p
timeout 60 $MPI -np 8 "$B" train --model "$W/llama" --init random --data "$W/data" --steps 1 --seq-len 16 \
  --micro-batch 1 --grad-accum 8 --threads 1 --out-dir "$W/big" --pp 8 > "$W/big.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "units" "$W/big.log"; then ok "refused P > units: $(grep units "$W/big.log" | head -1 | cut -c1-160)"
else bad "P > units: exit $rc"; tail -3 "$W/big.log"; fi
finish
