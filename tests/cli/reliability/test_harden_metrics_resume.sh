#!/bin/bash
# tests/cli/reliability/test_harden_metrics_resume.sh — issue 11 case 6: on resume the
# metrics continue from the checkpoint's step with no step twice (lines past
# it, and a line cut by a crash, are removed), and a SIGKILL right after a
# checkpoint commits loses no line of a step it holds (a step's line is
# written and fsynced before its checkpoint). Oracle: an uninterrupted run's
# per-step losses (the resumed runs are bit-identical).
source "${SL_SRC:?}/tests/lib/harden.sh"
# same_as_straight FILE [RANKS]: steps exactly 1..12 once each, losses equal to the straight run's
same_as_straight() {
  "$PY" - $W/a${2:-1}.jsonl "$1" <<'P'
import json, sys
a = {j["step"]: j["loss"] for j in map(json.loads, open(sys.argv[1]))}
b = [json.loads(l) for l in open(sys.argv[2])]
steps = [j["step"] for j in b]
ok = steps == list(range(1, 13)) and all(j["loss"] == a[j["step"]] for j in b)
if not ok: print("     steps", steps)
sys.exit(0 if ok else 1)
P
}
R="--steps 12 --ckpt-every 4 --keep-last 0 --data-order sequential"
$TRAIN $R --out-dir $W/o --metrics $W/a1.jsonl > $W/a.log 2>&1 || bad "straight run"
[ -n "$MPI2" ] && { $MPI2 $R --out-dir $W/o --metrics $W/a2.jsonl > $W/a.log 2>&1 || bad "straight run, 2 ranks"; }

# stage killed at step 8 | rank count | checkpoint the resume starts from
for case in "before-rename 1 4" "after-latest 1 8" "after-latest 2 8" "file-written 2 4"; do
  set -- $case
  [ $2 = 2 ] && { [ -n "$MPI2" ] || continue; RUN=$MPI2; } || RUN=$TRAIN
  d=$W/$1-$2; mkdir -p $d
  (SL_CKPT_FAULT=$1 SL_CKPT_FAULT_STEP=8 SL_CKPT_FAULT_RANK=0 $RUN $R --out-dir $d --ckpt-dir $d/ck --metrics $d/m.jsonl \
    > $d/1.log 2>&1) 2> /dev/null && bad "$1: not killed"
  check "killed at '$1' of step 8 ($2 rank(s)): the metrics hold steps 1-8" test "$(steps $d/m.jsonl)" = "1 2 3 4 5 6 7 8"
  printf '{"step": 9, "loss": 1.2' >> $d/m.jsonl # a line cut by the crash
  $RUN $R --out-dir $d --ckpt-dir $d/ck --metrics $d/m.jsonl --resume > $d/2.log 2>&1
  rc_is "$1 ($2 rank(s)): resumed at step $3" $? 0 $d/2.log "resumed from $d/ck at step $3"
  check "$1 ($2 rank(s)): metrics steps 1-12 once each, losses as the straight run" same_as_straight $d/m.jsonl $2
done

# a resume that finds no checkpoint starts at step 0: the old lines go
cp $W/a1.jsonl $W/n.jsonl
$TRAIN $R --out-dir $W/o --ckpt-dir $W/none --metrics $W/n.jsonl --resume > $W/n.log 2>&1
rc_is "--resume with no checkpoint" $? 0 $W/n.log "no checkpoint in"
check "its metrics hold steps 1-12 once each" same_as_straight $W/n.jsonl
finish
