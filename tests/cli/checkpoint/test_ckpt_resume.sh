#!/usr/bin/env bash
# Exact resume (issue 5, test 1): 20 steps straight vs a run killed right
# after committing its step-8 checkpoint (SL_CKPT_FAULT) and resumed to 20:
# per-step losses and final parameters bit-identical; world size 2, ZeRO 1 and 3.
source "${SL_SRC:?}/tests/lib/run.sh" ckpt_resume mpi
tiny_model "$W/model" llama '"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1,
 "num_hidden_layers": 2, "vocab_size": 320, "max_position_embeddings": 64, "initializer_range": 0.02'
RUN="$MPI -np 2 $B train --model $W/model --init random --seq-len 16
 --micro-batch 2 --data-order shuffled --threads 1 --peak-tflops 1 --steps 20 --warmup 3"
for Z in 1 3; do
  D="$W/z$Z"; mkdir -p "$D"
  $RUN --zero $Z --out-dir "$D/a" --metrics "$D/a.jsonl" --save "$D/saveA" > "$D/a.log" 2>&1 || { echo "straight run failed"; cat "$D/a.log"; exit 1; }
  SL_CKPT_FAULT=after-latest SL_CKPT_FAULT_STEP=8 SL_CKPT_FAULT_RANK=0 \
    $RUN --zero $Z --out-dir "$D/b" --ckpt-dir "$D/ck" --ckpt-every 4 --metrics "$D/b1.jsonl" > "$D/b1.log" 2>&1 \
    && { echo "ZeRO-$Z: the faulted run did not die"; exit 1; }
  grep -q "SL_CKPT_FAULT: killing" "$D/b1.log" || { echo "fault not reached"; cat "$D/b1.log"; exit 1; }
  $RUN --zero $Z --out-dir "$D/b" --ckpt-dir "$D/ck" --ckpt-every 4 --resume --metrics "$D/b2.jsonl" --save "$D/saveB" \
    > "$D/b2.log" 2>&1 || { echo "resumed run failed"; cat "$D/b2.log"; exit 1; }
  grep -q "resumed from .* at step 8" "$D/b2.log" || { echo "did not resume at step 8"; cat "$D/b2.log"; exit 1; }
  if out=$("$PY" - "$D" "$Z" <<'PY'
import json, sys
d, z = sys.argv[1], sys.argv[2]
load = lambda p: {j["step"]: j["loss"] for j in map(json.loads, open(p))}
a, b1, b2 = load(d + "/a.jsonl"), load(d + "/b1.jsonl"), load(d + "/b2.jsonl")
assert sorted(b2) == list(range(9, 21)), sorted(b2)
bad = [(s, a[s], l) for part in (b1, b2) for s, l in part.items() if a[s] != l]
print(f"ZeRO-{z}: {len(b1)} steps before the kill + {len(b2)} after resume, losses bit-identical: {not bad}")
sys.exit(1 if bad else 0)
PY
  ); then ok "$out"; else bad "${out:-the loss comparison failed (the error is above)}"; fi
  if cmp -s "$D/saveA/model.safetensors" "$D/saveB/model.safetensors"; then ok "ZeRO-$Z: final parameters bit-identical"
  else bad "ZeRO-$Z: final parameters differ"; fi
done
finish
