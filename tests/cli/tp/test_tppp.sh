#!/usr/bin/env bash
# Tensor and pipeline parallelism together (issue 14; engine/tensor_par.c,
# docs/pipeline.md "Tensor x pipeline parallelism"): at the global batch of
# one process, DP 2 x TP 2 x PP 2 (8 ranks, ZeRO-1 and ZeRO-3), DP 1 x TP 2
# x PP 2 with sequence parallelism, the interleaved schedule at TP 2 (ZeRO-0), Mamba,
# a tied-embedding Llama and a tied one with an odd vocabulary (padded
# slices) at TP 2 x PP 2 train to per-step losses and
# exported weights within 1e-5 relative of one process (TP changes the
# order of the sums, so not bit-identical), and so the held-out loss. The
# PP communicator's logged send/receive counts and bytes equal the static
# schedule's (`shardlm pp-schedule --json`, an independent computation in
# plan/) with --bytes = b*s*h*4 / T, with sequence parallelism (the rank's
# token rows) and without it (each TP rank sends 1/T of the replicated
# boundary, all-gathered over TP on receipt). Checkpoints written at DP 2
# x PP 2 resume at DP 1 x TP 2 x PP 2 and at DP 4; written at TP 2 x PP 2
# they resume in one process; the continued runs match the uninterrupted
# one within 1e-5, and `convert --to-hf` of it equals the run's --save.
# zb1p (the split backward, its TP collectives divided between B and W) at
# TP 2 x PP 2 equals --tp 2 alone with the same flags bit for bit: GQA with
# one KV head, tied with sequence parallelism and ZeRO-3, Mamba with SP.
# --no-sync-accum (issue 27) x TP 2 x SP, with and without PP 2 / DP 2,
# Llama, GQA (one KV head, also under zb1p) and Mamba against one process.
#
# --eps 1e-6: as in tests/cli/tp/test_tp_parity.sh, a few weights with gradients of
# ~1e-9 would otherwise turn TP's round-off into lr-sized Adam steps.
source "${SL_SRC:?}/tests/lib/parity.sh" tppp
RUN_FLAGS="--eps 1e-6"
tiny_models
counters() { # name P m bytes [pp-schedule flags...]  (4 steps)
  local name=$1 P=$2 m=$3 bytes=$4; shift 4
  pp_counters "$name" 4 --pp "$P" --micro-batches "$m" --bytes "$bytes" "$@"
}
E=(--split "90,10,0" --eval-every 2 --eval-samples 6)
# one process: the references (4 micro-batches of 2 samples)
run llama base 1 4
run llama ebase 1 4 "${E[@]}"
run tied tbase 1 4
run mamba mbase 1 4
# 1. DP 2 x TP 2 x PP 2 (8 ranks): ZeRO-1 with the held-out loss, ZeRO-3
run llama d2t2p2 8 2 --tp 2 --pp 2 --zero 1 "${E[@]}" && check d2t2p2 ebase --rtol 1e-5
if "$PY" - "$W/ebase/metrics.jsonl" "$W/d2t2p2/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["eval_loss"] for l in open(p) if "eval_loss" in l] for p in sys.argv[1:3])
ok = len(a) == 2 and len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b))
print("held-out losses", a, b); sys.exit(0 if ok else 1)
PY
then ok "held-out losses at DP 2 x TP 2 x PP 2 within 1e-5 of one process"; else bad "held-out losses differ"; fi
counters d2t2p2 2 2 $((2 * 16 * 32 * 4 / 2))
run llama d2t2p2z3 8 2 --tp 2 --pp 2 --zero 3 && check d2t2p2z3 base --rtol 1e-5
# 2. DP 1 x TP 2 x PP 2 with sequence parallelism (it also writes checkpoints
# for 4.); the interleaved schedule at TP 2; Mamba and tied embeddings
run llama sp 4 4 --tp 2 --pp 2 --sequence-parallel --ckpt-dir "$W/sp/ck" --ckpt-every 2 --keep-last 0 &&
  check sp base --rtol 1e-5
# 3. under SP a boundary transfer is this rank's 1/T of the token rows
counters sp 2 4 $((2 * 16 * 32 * 4 / 2))
if "$B" pp-schedule --pp 2 --micro-batches 4 --micro-batch 2 --seq-len 16 --hidden 32 --tp 2 --sequence-parallel \
     --json | cmp -s - "$W/sp.json"; then ok "pp-schedule --tp 2 --sequence-parallel = --bytes b*s*h*4/2"
else bad "pp-schedule --tp 2 --sequence-parallel differs from --bytes b*s*h*4/2"; fi
run llama il 4 4 --tp 2 --pp 2 --pp-schedule interleaved --pp-virtual 2 --zero 0 && check il base --rtol 1e-5
counters il 2 4 $((2 * 16 * 32 * 4 / 2)) --pp-schedule interleaved --pp-virtual 2
if "$B" pp-schedule --pp 2 --micro-batches 4 --micro-batch 2 --seq-len 16 --hidden 32 --tp 2 --pp-schedule interleaved \
     --pp-virtual 2 --json | cmp -s - "$W/il.json"; then ok "pp-schedule --tp 2 (no SP) = --bytes b*s*h*4/2"
else bad "pp-schedule --tp 2 (no SP) differs from --bytes b*s*h*4/2"; fi
run mamba mtp 4 4 --tp 2 --pp 2 --sequence-parallel && check mtp mbase --rtol 1e-5
run tied ttp 4 4 --tp 2 --pp 2 && check ttp tbase --rtol 1e-5 && planted ttp tbase 1e-5
# an odd vocabulary (259: the TP 2 slices padded), tied: the padded slice's head gradient crosses the pipeline
tiny_model "$W/v259" tied '"vocab_size": 259'
run v259 vbase 1 4 && run v259 vtp 4 4 --tp 2 --pp 2 --sequence-parallel --pp-schedule gpipe --zero 2 &&
  check vtp vbase --rtol 1e-5
# 5. zb1p (B and W split) at TP 2 x PP 2: bit-identical to --tp 2 alone with
# the same flags: Llama with GQA at num_key_value_heads 1 < T (the
# replicated k/v slice's gradient summed in W) without SP, tied with SP and
# ZeRO-3, Mamba with SP; the PP counters equal zb1p's static schedule
tiny_model "$W/gqa" llama '"num_key_value_heads": 1'
Z=(--pp-schedule zb1p)
SP=(--tp 2 --sequence-parallel)
run gqa zgt 2 4 --tp 2 && run gqa zgb 4 4 --tp 2 --pp 2 "${Z[@]}" && check zgb zgt --exact
counters zgb 2 4 $((2 * 16 * 32 * 4 / 2)) "${Z[@]}"
run tied ztt 2 4 "${SP[@]}" && run tied ztb 4 4 "${SP[@]}" --pp 2 "${Z[@]}" --zero 3 && check ztb ztt --exact
run mamba zmt 2 4 "${SP[@]}" && run mamba zmb 4 4 "${SP[@]}" --pp 2 "${Z[@]}" && check zmb zmt --exact
# 1f1b too: TP 2 x PP 2 is bit-identical to TP 2 alone (the pipeline changes
# no arithmetic; what differs from one process is TP's round-off)
check mtp zmt --exact
run llama t2sp 2 4 "${SP[@]}" && check sp t2sp --exact
# 6. --no-sync-accum (each rank sums its micro-batches locally, one reduction
# per step) crossed with TP 2 x SP, with and without PP 2 and DP 2 (ZeRO-3),
# Llama (a replicated KV slice too: GQA with one KV head, also under zb1p)
# and Mamba (untied: PP refuses tied with --no-sync-accum), against one
# process with --no-sync-accum; TP x PP equals TP alone bit for bit. The TP
# sums of the norms' weight gradients (SP) and of a replicated k/v slice's
# must take only the micro-batch's part, not the running sum: summing the
# running sum put the weights 3.6e-3 to 9.6e-2 relative off one process.
# Tolerance: compare.py's (losses 1e-5, weights 2e-5 relative L2, 10x the
# worst noise measured; docs/CONTRIBUTING.md).
tiny_model "$W/mu" mamba '"tie_word_embeddings": false'
N=(--no-sync-accum)
NR=1e-5
run llama nbase 1 4 "${N[@]}"
run llama ns_t2 2 4 "${SP[@]}" "${N[@]}" && check ns_t2 nbase --rtol "$NR"
run llama ns_t2p2 4 4 "${SP[@]}" --pp 2 "${N[@]}" && check ns_t2p2 nbase --rtol "$NR" && check ns_t2p2 ns_t2 --exact
run llama ns_d2t2 4 2 "${SP[@]}" --zero 3 "${N[@]}" && check ns_d2t2 nbase --rtol "$NR"
run gqa ngbase 1 4 "${N[@]}"
run gqa ng_t2 2 4 --tp 2 "${N[@]}" && check ng_t2 ngbase --rtol "$NR"
run gqa ng_t2sp 2 4 "${SP[@]}" "${N[@]}" && check ng_t2sp ngbase --rtol "$NR"
run gqa ng_zb 4 4 "${SP[@]}" --pp 2 "${Z[@]}" "${N[@]}" && check ng_zb ngbase --rtol "$NR" && check ng_zb ng_t2sp --exact
run mu mnbase 1 4 "${N[@]}"
run mu mns_t2 2 4 "${SP[@]}" "${N[@]}" && check mns_t2 mnbase --rtol "$NR"
run mu mns_t2p2 4 4 "${SP[@]}" --pp 2 "${N[@]}" && check mns_t2p2 mnbase --rtol "$NR" && check mns_t2p2 mns_t2 --exact
# 4. checkpoints hold whole tensors whatever the layout: written at DP 2 x
# PP 2, resumed at DP 1 x TP 2 x PP 2 and DP 4; written at TP 2 x PP 2 (sp),
# resumed in one process (the step-4 checkpoint removed: resume at step 2)
resume() { # src name world accum flags...
  local src=$1 name=$2 np=$3 ga=$4; shift 4
  rm -rf "${W:?}/$name"
  cp -r "$W/$src" "$W/$name"
  rm -rf "$W/$name/ck/step-000004" "$W/$name/ck/latest"
  run llama "$name" "$np" "$ga" --ckpt-dir "$W/$name/ck" --resume "$@" || return
  grep -q "resumed from .* at step 2" "$W/$name.log" || { bad "$name did not resume at step 2"; return; }
  check "$name" base --rtol 1e-5
}
run llama src 4 2 --pp 2 --ckpt-dir "$W/src/ck" --ckpt-every 2 --keep-last 0 && check src base --rtol 1e-5
resume src rtp 4 4 --tp 2 --pp 2
resume src rdp 4 1
resume sp rone 1 4
# the step-4 checkpoint written at TP 2 x PP 2 converts to the run's --save, bit for bit
if "$B" convert --from-ckpt "$W/sp/ck" --model-config "$W/llama" --to-hf "$W/sp_hf" > "$W/sp_hf.log" 2>&1 &&
   "$PY" - "$W/sp_hf/model.safetensors" "$W/sp/model/model.safetensors" <<'PY'
import sys
import json, struct
def read(p):
    d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
    return {k: d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = read(sys.argv[1]), read(sys.argv[2])
sys.exit(0 if a and a == b else 1)
PY
then ok "convert --to-hf of the TP 2 x PP 2 checkpoint = its --save (bit for bit)"
else bad "convert --to-hf of the TP 2 x PP 2 checkpoint differs from its --save"; fi
finish
