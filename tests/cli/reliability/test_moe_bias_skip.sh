#!/bin/bash
# tests/cli/reliability/test_moe_bias_skip.sh — issue 43 item 3: a step that
# --on-nonfinite skip drops leaves every piece of training state as it was,
# the expert bias of --moe-balance bias included (its update ran before the
# skip decision). Two ranks, a NaN loss planted on rank 1 at step 2
# (SL_FAULT_NONFINITE): the checkpoint after step 2 holds the bytes of the
# one after step 1 (parameters and Adam moments of both ranks) and the same
# expert bias; the bias moved at step 1 and moves again at step 3 (the
# control: the comparison sees an update).
source "${SL_SRC:?}/tests/lib/run.sh" moe_bias_skip mpi
tiny_model "$W/moe" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_data "$W/data" 20000
SL_FAULT_NONFINITE=2 SL_FAULT_NONFINITE_RANK=1 $MPI -np 2 "$B" train --model "$W/moe" --init random --data "$W/data" --seq-len 16 \
  --micro-batch 2 --threads 1 --summary false --plot false --steps 3 --moe-balance bias --moe-bias-rate 0.05 \
  --on-nonfinite skip --out-dir "$W/s" --ckpt-dir "$W/s/ck" --ckpt-every 1 --keep-last 0 > "$W/s.log" 2>&1
rc_is "a NaN loss on rank 1 at step 2 is skipped, the run completes" $? 0 "$W/s.log" "update skipped"
ck() { echo "$W/s/ck/step-00000$1"; }
# bias K: the expert bias of step K's checkpoint
bias() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1] + "/manifest.json")).get("moe_expert_bias"))' "$(ck "$1")"; }
for r in 0 1; do
  if cmp -s "$(ck 1)/rank-0000$r.bin" "$(ck 2)/rank-0000$r.bin"; then ok "rank $r: the state after the skipped step 2 = after step 1 (parameters, Adam moments)"
  else bad "rank $r: the state after the skipped step 2 differs from step 1's"; fi
done
b1=$(bias 1) b2=$(bias 2) b3=$(bias 3)
if [ "$b1" = "$b2" ]; then ok "the expert bias after the skipped step 2 = after step 1"
else bad "the expert bias moved on the skipped step 2: $b1 -> $b2"; fi
if "$PY" -c 'import sys; b1, b2, b3 = map(eval, sys.argv[1:]); sys.exit(0 if any(b1) and b3 != b2 else 1)' "$b1" "$b2" "$b3"; then
  ok "the control: the bias moved at step 1 and again at step 3"
else bad "the control: bias at steps 1, 2, 3: $b1 / $b2 / $b3"; fi
finish
