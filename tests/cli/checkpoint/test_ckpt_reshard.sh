#!/usr/bin/env bash
# Resharding (issue 5, test 2). A run at world size A (12 steps, checkpoint
# every 6) is resumed from its step-6 checkpoint at world size B with a
# different ZeRO stage / shard group. Global batch fixed at 12 samples
# (micro-batch x grad-accum x world), so the runs are the same computation.
# Checks: (1) what B loaded (SL_CKPT_DUMP: unpadded master, exp_avg,
# exp_avg_sq of every tensor) is bit-identical to what A itself loads;
# (2) master equals `convert --to-hf` of the checkpoint, tensor by tensor;
# (3) the continued losses (steps 7..12) match the uninterrupted run to 1e-5.
# All 12 ordered pairs of world sizes 1-4, each loading with a different
# ZeRO stage than the source wrote (and hybrid sharding, shard group 2, for
# two of the pairs into world 4); odd sizes that do not divide the units'
# padded lengths are included.
source "${SL_SRC:?}/tests/lib/run.sh" ckpt_reshard mpi
tiny_model "$W/model" llama '"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1,
 "num_hidden_layers": 2, "vocab_size": 320, "max_position_embeddings": 64, "initializer_range": 0.02'
CLI=$B # the pair loop below reuses A and B for the world sizes
accum() { case $1 in 1) echo "--micro-batch 2 --grad-accum 6";; 2) echo "--micro-batch 2 --grad-accum 3";;
          3) echo "--micro-batch 2 --grad-accum 2";; 4) echo "--micro-batch 3 --grad-accum 1";; esac; }
run() { # np zero extra...
  local np=$1 z=$2; shift 2
  $MPI -np $np $CLI train --model $W/model --init random --seq-len 16 \
    $(accum $np) --data-order sequential --threads 1 --peak-tflops 1 --steps 12 --warmup 2 --zero $z "$@"
}
cmp_py() { "$PY" - "$@" <<'PY'
import json, struct, sys
def st(path):
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]] for k, v in h.items()}
mode = sys.argv[1]
if mode == "dump":
    a, b = st(sys.argv[2]), st(sys.argv[3])
    ok = a.keys() == b.keys() and all(a[k] == b[k] for k in a)
    print(f"loaded state ({len(a)} tensors: master/exp_avg/exp_avg_sq) bit-identical to the source's: {ok}")
elif mode == "master":
    a, h = st(sys.argv[2]), st(sys.argv[3])
    ok = all(a["master." + k] == h[k] for k in h) and len(h) * 3 == len(a)
    print(f"master == convert --to-hf of the checkpoint: {ok}")
else:
    load = lambda p: {j["step"]: j["loss"] for j in map(json.loads, open(p))}
    a, b = load(sys.argv[2]), load(sys.argv[3])
    assert sorted(b) == list(range(7, 13)), sorted(b)
    d = max(abs(a[s] - b[s]) for s in b)
    ok = d <= 1e-5
    print(f"continued losses (steps 7-12) max |diff| vs uninterrupted = {d:.3g} (<= 1e-5: {ok})")
sys.exit(0 if ok else 1)
PY
}
# check CMD...: ok, or bad, with the line CMD prints
check() { local out; if out=$("$@"); then ok "$out"; else bad "${out:-$*}"; fi; }
declare -A ZOF=([1]=0 [2]=1 [3]=3 [4]=3)
for A in 1 2 3 4; do # source runs, and what each source loads itself
  z=${ZOF[$A]}
  run $A $z --ckpt-dir $W/ck$A --ckpt-every 6 --keep-last 0 --metrics $W/full$A.jsonl --out-dir $W/o > $W/full$A.log 2>&1 \
    || { echo "run at $A failed"; cat $W/full$A.log; exit 1; }
  rm -rf $W/ck$A/step-000012 $W/ck$A/latest
  cp -r $W/ck$A $W/self$A
  SL_CKPT_DUMP=$W/dump$A.$A.safetensors run $A $z --ckpt-dir $W/self$A --resume --steps 6 --metrics $W/x.jsonl \
    --out-dir $W/o > $W/self$A.log 2>&1 || { echo "self-load at $A failed"; cat $W/self$A.log; exit 1; }
  $CLI convert --from-ckpt $W/ck$A --model-config $W/model --to-hf $W/hf$A > /dev/null || exit 1
  check cmp_py master $W/dump$A.$A.safetensors $W/hf$A/model.safetensors
done
for pair in "1 2 3" "1 3 3" "1 4 2 --shard-group 2" "2 1 3" "2 3 0" "2 4 2 --shard-group 2" \
            "3 1 1" "3 2 1" "3 4 0" "4 1 0" "4 2 2" "4 3 1"; do
  set -- $pair; A=$1; B=$2; ZB=$3; shift 3
  echo "world $A (ZeRO-${ZOF[$A]}) -> world $B (ZeRO-$ZB $*):"
  rm -rf $W/ckr; cp -r $W/ck$A $W/ckr
  SL_CKPT_DUMP=$W/dump$A.$B.safetensors run $B $ZB "$@" --ckpt-dir $W/ckr --resume --metrics $W/r$A$B.jsonl \
    --out-dir $W/o > $W/r$A$B.log 2>&1 || { echo "resume failed"; cat $W/r$A$B.log; exit 1; }
  grep -q "resumed from .* at step 6" $W/r$A$B.log || { echo "did not resume at step 6"; cat $W/r$A$B.log; exit 1; }
  check cmp_py dump $W/dump$A.$A.safetensors $W/dump$A.$B.safetensors
  check cmp_py loss $W/full$A.jsonl $W/r$A$B.jsonl
done
finish
