#!/usr/bin/env bash
# --max-restarts (issue 5, test 4): rank 1 is SIGKILLed (SL_CKPT_FAULT, once)
# after computing step 12, while the job saves its step-12 checkpoint; the
# supervisor (tools/supervise.c) restarts the job with --resume from step 8,
# the run completes, and every step's loss equals an uninterrupted run's.
source "${SL_SRC:?}/tests/lib/run.sh" ckpt_restart mpi
tiny_model "$W/model" llama '"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1,
 "num_hidden_layers": 2, "vocab_size": 320, "max_position_embeddings": 64, "initializer_range": 0.02'
ARGS="train --nproc 2 --model $W/model --init random --seq-len 16 --micro-batch 2 --data-order shuffled --threads 1 --peak-tflops 1
 --steps 20 --warmup 3 --zero 3 --out-dir $W/o"
$B $ARGS --metrics $W/a.jsonl > $W/a.log 2>&1 || { cat $W/a.log; exit 1; }
SL_CKPT_FAULT=file-written SL_CKPT_FAULT_RANK=1 SL_CKPT_FAULT_STEP=12 SL_CKPT_FAULT_ONCE=$W/fired \
  $B $ARGS --ckpt-dir $W/ck --ckpt-every 4 --max-restarts 2 --metrics $W/b.jsonl > $W/b.log 2>&1
rc=$?
[ $rc = 0 ] || { echo "supervised run failed ($rc)"; cat $W/b.log; exit 1; }
[ -f $W/fired ] && grep -q "restarting from the latest checkpoint (restart 1 of 2)" $W/b.log \
  && grep -q "resumed from .* at step 8" $W/b.log || { echo "no restart seen"; cat $W/b.log; exit 1; }
if out=$("$PY" - $W/a.jsonl $W/b.jsonl <<'PY'
import json, sys
load = lambda p: {j["step"]: j["loss"] for j in map(json.loads, open(p))}
a, b = load(sys.argv[1]), load(sys.argv[2])
# the metrics file is appended on resume: steps 1-12 of the first attempt,
# then 9-20 again from the restart (the later line wins)
ok = sorted(b) == list(range(1, 21)) and all(a[s] == b[s] for s in b)
print(f"rank 1 killed at step 12, job restarted from step 8 and completed; losses of steps 1-20 bit-identical to the uninterrupted run: {ok}")
sys.exit(0 if ok else 1)
PY
); then ok "$out"; else bad "${out:-the loss comparison failed (the error is above)}"; fi
finish
