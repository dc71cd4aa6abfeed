#!/usr/bin/env bash
# Crash during save (issue 5, test 3): SIGKILL (SL_CKPT_FAULT) at every stage
# of the save protocol of the step-8 checkpoint, with step 4 committed
# before. The next start must load step 8 if the kill came after the rename
# of its directory, else step 4 — never a partial one — and remove the
# .tmp-* leftovers. Then ENOSPC: the checkpoint directory on a 700 KiB tmpfs
# (mount -t tmpfs; skipped when mounting is not permitted): the failing save
# names the file and the errno text on every rank, and step 4 stays loadable.
source "${SL_SRC:?}/tests/lib/run.sh" ckpt_crash mpi
MNT=""
on_exit '[ -n "$MNT" ] && umount "$MNT"'
tiny_model "$W/model" llama '"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 1,
 "num_hidden_layers": 2, "vocab_size": 320, "max_position_embeddings": 64, "initializer_range": 0.02'
RUN="$MPI -np 2 $B train --model $W/model --init random --seq-len 16
 --micro-batch 2 --data-order sequential --threads 1 --peak-tflops 1 --steps 8 --zero 3 --out-dir $W/o --metrics $W/m.jsonl"
# stage  rank-to-kill  step-expected-at-restart
for case in "file-written 1 4" "file-fsynced 0 4" "files-agreed 1 4" "manifest-written 0 4" "tmpdir-fsynced 0 4" \
            "before-rename 0 4" "after-rename 0 8" "after-dir-fsync 0 8" "before-latest-rename 0 8" \
            "after-latest 0 8" "retained 0 8"; do
  set -- $case
  rm -rf $W/ck
  SL_CKPT_FAULT=$1 SL_CKPT_FAULT_RANK=$2 SL_CKPT_FAULT_STEP=8 $RUN --ckpt-dir $W/ck --ckpt-every 4 --keep-last 1 \
    > $W/kill.log 2>&1 && { bad "$1: the run was not killed"; continue; }
  grep -q "killing the process at save stage '$1'" $W/kill.log || { bad "$1: fault not reached"; cat $W/kill.log; continue; }
  $RUN --ckpt-dir $W/ck --ckpt-every 100 --resume --steps $3 > $W/res.log 2>&1 || { bad "$1: restart failed"; cat $W/res.log; continue; }
  got=$(sed -n 's/.*loaded .*step-0*\([0-9]*\): step.*/\1/p' $W/res.log)
  left=$(ls -A $W/ck | grep -c '^\.tmp-')
  if [ "$got" = "$3" ] && [ "$left" = 0 ]; then ok "killed at $1 (rank $2): restart loaded step $got, no .tmp-* left"
  else bad "killed at $1: restart loaded step '$got' (expected $3), $left .tmp-* left"; fi
done
# ENOSPC
mkdir -p $W/small
if mount -t tmpfs -o size=700k tmpfs $W/small 2>/dev/null; then
  MNT=$W/small
  $RUN --ckpt-dir $W/small/ck --ckpt-every 4 --keep-last 2 > $W/full.log 2>&1 && bad "ENOSPC: the save did not fail"
  if grep -q "rank 0.*rank-0000[01].bin: write failed: No space left on device" $W/full.log &&
     grep -q "rank 1.*rank-0000[01].bin: write failed: No space left on device" $W/full.log &&
     grep -q "earlier checkpoints are untouched" $W/full.log; then
    ok "ENOSPC: every rank reports: $(grep -m1 'No space left' $W/full.log | cut -c1-200)"
  else bad "ENOSPC: message missing"; cat $W/full.log; fi
  $RUN --ckpt-dir $W/small/ck --resume --steps 4 > $W/res.log 2>&1 && grep -q "loaded .*step-000004" $W/res.log \
    && ok "ENOSPC: step 4 still loads" || { bad "ENOSPC: step 4 does not load"; cat $W/res.log; }
else
  echo "ENOSPC part skipped: cannot mount a tmpfs here"
fi
finish
