#!/usr/bin/env bash
# The zero-bubble schedule (--pp-schedule zb1p; engine/schedule_pp.c,
# models/llama_split.c): the backward split into B (input gradient) and W
# (weight gradient) trains a tiny Llama to per-step losses and exported
# weights BIT-IDENTICAL to one process at P = 2, 3, 4 (m = 4, and m = 8 at
# P = 4), tied and untied, Mistral, Mamba, activation checkpointing
# (selective, full), ZeRO-3, --no-sync-accum, DP 2 x PP 2 (bit-identical to
# DP 2 alone); the PP communicator's counts and bytes equal the static
# schedule's; stage 0's acts arena is sets x (activations + stash); what is
# not split the same way (Mamba with --no-sync-accum) is refused with exit 2
# naming what to use instead.
source "${SL_SRC:?}/tests/lib/pp_common.sh"
Z="--pp-schedule zb1p"
# one process: the references (m = 4 micro-batches of 2 samples; m = 8)
run llama base 1 4
run tied tbase 1 4
run mistral mibase 1 4
run llama base8 1 8
for P in 2 3 4; do
  run llama z$P "$P" 4 --pp "$P" $Z && check z$P base --exact
done
counters z3 3 4 zb1p
counters z4 4 4 zb1p
run llama z4m8 4 8 --pp 4 $Z && check z4m8 base8 --exact
# tied embeddings: the head's part of unit 0's gradient, made in B, to rank 0
run tied tz2 2 4 --pp 2 $Z && check tz2 tbase --exact
run tied tz3 3 4 --pp 3 $Z --zero 2 && check tz3 tbase --exact
# Mistral (sliding window), ZeRO-3, --no-sync-accum
run mistral miz3 3 4 --pp 3 $Z && check miz3 mibase --exact
run llama zz3 3 4 --pp 3 $Z --zero 3 && check zz3 base --exact
run llama nsbase 1 4 --no-sync-accum && run llama nsz2 2 4 --pp 2 $Z --no-sync-accum && check nsz2 nsbase --exact
# activation checkpointing: B and W each recompute what the shared buffers lost
for AC in selective full; do
  run llama ac$AC 1 4 --activation-checkpoint $AC && run llama zac$AC 3 4 --pp 3 $Z --activation-checkpoint $AC &&
    check zac$AC ac$AC --exact
done
# Mamba (tied; the scan's parameter gradients made in B, added in W), and
# with selective checkpointing
run mamba mabase 1 4 && run mamba maz3 3 4 --pp 3 $Z && check maz3 mabase --exact
run mamba masel 1 4 --activation-checkpoint selective && run mamba mazsel 2 4 --pp 2 $Z --activation-checkpoint selective &&
  check mazsel masel --exact
# DP 2 x PP 2: the same global batch (2 ranks x 2 micro-batches)
run llama d2 2 2 && run llama d2z 4 2 --pp 2 $Z --zero 3 && check d2z d2 --exact
# activation arena of stage 0 = sets in flight (the builder's peak_inflight
# of rank 0: F to W) x (one micro-batch's activations of its units + the
# stash B keeps for W), from the shapes (N = 2x16 tokens, C 32, q|k|v 64,
# attention 32, 4 heads, I 64): per layer ln1, xmid, ln2 (N C), qkv (N 64),
# att (N 32), lse (N 4), rstd x2 (N), gate|up (N 128), h (N 64) floats and
# the k+1 residual-stream buffers; stash per layer N (4 C + 2 I + q|k|v),
# the embedding's N C
J=$("$B" pp-schedule --pp 2 --micro-batches 4 --pp-schedule zb1p --model "$W/llama" --bytes 1 --json)
k=$(echo "$J" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['layout'][0])")
sets=$(echo "$J" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['ranks'][0]['peak_inflight'])")
one=$(( 4 * (k * 32 * (3 * 32 + 64 + 32 + 4 + 2 + 128 + 64) + (k + 1) * 32 * 32) ))
stash=$(( 4 * (k * 32 * (4 * 32 + 2 * 64 + 64) + 32 * 32) ))
a=$(metric z2 '["arena_peak"]["acts"]')
if [ "$a" -eq $((sets * (one + stash))) ]; then
  ok "stage 0 acts arena = $sets sets x ($one activations + $stash stash) bytes ($k layers): $a"
else bad "stage 0 acts arena $a, expected $sets x ($one + $stash)"; fi
# refusals: exit 2 naming the model / flag and what to use instead
tiny_model "$W/mambau" mamba '"tie_word_embeddings": false'
refuse zbmambans "--no-sync-accum: not supported for MambaForCausalLM" --model "$W/mambau" --pp 2 --grad-accum 2 $Z \
  --no-sync-accum
finish
