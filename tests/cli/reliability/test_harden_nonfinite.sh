#!/bin/bash
# tests/cli/reliability/test_harden_nonfinite.sh — issue 11 case 1: a NaN/inf loss or
# gradient norm is caught on every step, all ranks agree. Default policy
# (--on-nonfinite stop): exit 4 naming the step, no --save output, no
# checkpoint of the non-finite state, the newest finite checkpoint kept,
# metrics.jsonl strict JSON (null for non-finite values). --on-nonfinite
# skip: the step's update is dropped (the checkpoint after the skipped step
# holds the same parameters as the one before it, the data position moves
# on), skips are counted in the metrics, --max-skips consecutive skips stop
# the run with exit 4. Faults: --lr 1e6, --lr nan, --beta2 1, --eps 0, a NaN
# in the input weights, and SL_FAULT_NONFINITE (a NaN loss on one rank).
source "${SL_SRC:?}/tests/lib/harden.sh"

# 1. --lr 1e6 diverges: exit 4 at some step N; checkpoints every step, keep 2
$TRAIN --steps 12 --lr 1e6 --out-dir $W/a --ckpt-dir $W/a/ck --ckpt-every 1 --keep-last 2 --save $W/a/model \
  > $W/a.log 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--lr" $W/a.log; then ok "--lr 1e6 refused up front (exit 2)"
else
  rc_is "--lr 1e6 stops" $rc 4 $W/a.log "the loss is"
  N=$(sed -n 's/.*shardlm: step \([0-9]*\): the loss.*/\1/p' $W/a.log)
  check "the message names step $N, the metrics end at it with null" test -n "$N" -a "$(jfield $W/a/metrics.jsonl "$N" loss)" = None
  check "metrics.jsonl is strict JSON" jsonl_strict $W/a/metrics.jsonl
  check "no --save directory" test ! -e $W/a/model
  check "newest checkpoint is step $((N - 1)) (the last finite state)" test "$(cat $W/a/ck/latest)" = "step-$(printf %06d $((N - 1)))"
  $CLI convert --from-ckpt $W/a/ck --model-config $W/model --to-hf $W/a/last > $W/a.conv 2>&1
  check "the newest checkpoint's parameters are finite" st_finite $W/a/last/model.safetensors
fi

# 2. inputs that make the first update NaN: stopped at step 2 (or refused up front)
i=0
for f in "--lr nan" "--beta2 1" "--eps 0"; do
  d=$W/f$((++i))
  $TRAIN --steps 4 $f --out-dir $d --save $d/model > $d.log 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -q -- "${f%% *}" $d.log; then ok "$f refused up front (exit 2)"; continue; fi
  rc_is "$f stops" $rc 4 $d.log "step 2: the loss is nan"
  check "$f: no --save output, strict JSON metrics" test ! -e $d/model -a "$(jsonl_strict $d/metrics.jsonl && echo y)" = y
done

# 2b. the last step's update makes the state NaN (its loss was finite): the
# state check refuses the final checkpoint and --save (1 and 2 ranks)
$TRAIN --steps 1 --beta2 1 --out-dir $W/l --ckpt-dir $W/l/ck --save $W/l/model > $W/l.log 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--beta2" $W/l.log; then ok "--beta2 1 refused up front (exit 2)"
else
  rc_is "a NaN state after the last step is not checkpointed" $rc 4 $W/l.log "after step 1 the optimizer state holds non-finite values"
  check "no checkpoint, no --save output" test -z "$(ls $W/l/ck | grep step-)" -a ! -e $W/l/model
  $TRAIN --steps 1 --beta2 1 --out-dir $W/l2 --save $W/l2/model > $W/l2.log 2>&1
  rc_is "... nor saved with --save" $? 4 $W/l2.log "the --save directory was not written"
  check "no --save output" test ! -e $W/l2/model
  if [ -n "$MPI2" ]; then
    $MPI2 --steps 1 --beta2 1 --out-dir $W/l3 --ckpt-dir $W/l3/ck > $W/l3.log 2>&1
    rc_is "2 ranks: both refuse the checkpoint" $? 4 $W/l3.log "holds non-finite values on 2 ranks"
  fi
fi

# 3. a NaN in an input weight file: refused at load (exit 2, the tensor named), no checkpoint
$TRAIN --steps 1 --out-dir $W/w --save $W/nanmodel > $W/w.log 2>&1 || bad "saving a model to poison"
"$PY" - $W/nanmodel/model.safetensors <<'P'
import json, struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
lo = h["model.layers.0.mlp.down_proj.weight"]["data_offsets"][0]
b[8 + n + lo + 12:8 + n + lo + 16] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)
P
$CLI train ${ARGS/$W\/model/$W/nanmodel} --init hf --steps 3 --out-dir $W/w2 --ckpt-dir $W/w2/ck --ckpt-every 1 > $W/w2.log 2>&1
rc_is "NaN in the input weights refused at load (issue 27: names the tensor)" $? 2 $W/w2.log "tensor 'model.layers.0.mlp.down_proj.weight' has a non-finite value (nan) at element 3"
check "no checkpoint written" test -z "$(ls $W/w2/ck 2>/dev/null | grep step-)"

# 4. two ranks, a NaN loss on rank 1 only at step 3: every rank stops with 4
if [ -n "$MPI2" ]; then
  SL_FAULT_NONFINITE=3 SL_FAULT_NONFINITE_RANK=1 $MPI2 --steps 6 --out-dir $W/m --save $W/m/model > $W/m.log 2>&1
  rc_is "2 ranks: NaN on rank 1 at step 3 stops the job" $? 4 $W/m.log "step 3: the loss is nan"
  check "2 ranks: metrics hold steps 1-3, no --save" test "$(steps $W/m/metrics.jsonl)" = "1 2 3" -a ! -e $W/m/model
  SL_FAULT_NONFINITE=3 SL_FAULT_NONFINITE_RANK=1 $MPI2 --steps 5 --on-nonfinite skip --out-dir $W/m2 > $W/m2.log 2>&1
  rc_is "2 ranks: skip policy, NaN on rank 1 at step 3, run completes" $? 0 $W/m2.log
  check "2 ranks: step 3 skipped (loss null, 1 skip counted)" test "$(jfield $W/m2/metrics.jsonl 3 loss) $(jfield $W/m2/metrics.jsonl 5 skipped_steps)" = "None 1"
else echo "(no mpirun: 2-rank cases skipped)"; fi

# 5. skip policy, one rank: the skipped step leaves the state unchanged
SL_FAULT_NONFINITE=3 $TRAIN --steps 5 --on-nonfinite skip --out-dir $W/s --ckpt-dir $W/s/ck --ckpt-every 1 \
  --keep-last 0 > $W/s.log 2>&1
rc_is "skip: a NaN at step 3 is skipped, the run completes" $? 0 $W/s.log "update skipped"
for k in 2 3 4; do
  $CLI convert --from-ckpt $W/s/ck/step-00000$k --model-config $W/model --to-hf $W/s/hf$k > /dev/null 2>&1 || bad "convert step $k"
done
check "skip: parameters after step 3 == after step 2" cmp -s $W/s/hf2/model.safetensors $W/s/hf3/model.safetensors
check "skip: step 4 updates again" eval '! cmp -s $W/s/hf3/model.safetensors $W/s/hf4/model.safetensors'
ns() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["next_sample"])' $W/s/ck/step-00000$1/manifest.json; }
check "skip: the data position moves on (next_sample 4, 6, 8)" test "$(ns 2) $(ns 3) $(ns 4)" = "4 6 8"
check "skip: metrics count the skip (step 3 null, skipped_steps 0 1 1)" test \
  "$(jfield $W/s/metrics.jsonl 3 loss) $(jfield $W/s/metrics.jsonl 2 skipped_steps) $(jfield $W/s/metrics.jsonl 3 skipped_steps) $(jfield $W/s/metrics.jsonl 5 skipped_steps)" = "None 0 1 1"
check "skip: metrics.jsonl is strict JSON" jsonl_strict $W/s/metrics.jsonl

# 6. --max-skips: consecutive skips stop the run, separated ones do not
SL_FAULT_NONFINITE=3,4 $TRAIN --steps 6 --on-nonfinite skip --max-skips 2 --out-dir $W/x --save $W/x/model > $W/x.log 2>&1
rc_is "--max-skips 2: NaN at steps 3 and 4 stops" $? 4 $W/x.log "step 4: the loss is nan and the gradient norm"
check "--max-skips 2: no --save output" test ! -e $W/x/model
SL_FAULT_NONFINITE=3,5 $TRAIN --steps 6 --on-nonfinite skip --max-skips 2 --out-dir $W/y --save $W/y/model > $W/y.log 2>&1
rc_is "--max-skips 2: NaN at steps 3 and 5 (not consecutive) completes" $? 0 $W/y.log
check "two skips counted, model saved" test "$(jfield $W/y/metrics.jsonl 6 skipped_steps)" = 2 -a -f $W/y/model/model.safetensors
check "default --max-skips is 3" eval '$CLI train --help | grep -q "max-skips.*default: 3"'

# 6b. the --max-restarts supervisor does not retry a non-finite stop
if [ -n "$MPI2" ]; then
  SL_FAULT_NONFINITE=2 $TRAIN --steps 4 --nproc 2 --max-restarts 2 --out-dir $W/r --ckpt-dir $W/r/ck > $W/r.log 2>&1
  rc_is "--max-restarts: a non-finite stop ends the job" $? 4 $W/r.log "step 2: the loss is nan"
  check "... without a restart" eval '! grep -q "restarting from the latest checkpoint" $W/r.log'
fi

# 7. bad policy flags
$TRAIN --steps 1 --on-nonfinite ignore --out-dir $W/b > $W/b.log 2>&1
rc_is "--on-nonfinite ignore refused" $? 2 $W/b.log "--on-nonfinite must be stop or skip"
$TRAIN --steps 1 --max-skips 0 --out-dir $W/b > $W/b.log 2>&1
rc_is "--max-skips 0 refused" $? 2 $W/b.log "--max-skips must be"
finish
