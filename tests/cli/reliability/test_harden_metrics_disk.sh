#!/bin/bash
# tests/cli/reliability/test_harden_metrics_disk.sh — issue 11 case 5: every metrics write
# is checked. A metrics file on a full disk (/dev/full; a tmpfs that fills
# mid-run when root) ends the run with exit 1 and a message naming the file,
# on one rank and on two.
source "${SL_SRC:?}/tests/lib/harden.sh"

$TRAIN --steps 3 --out-dir $W/o --metrics /dev/full > $W/1.log 2>&1
rc_is "/dev/full: the first line fails" $? 1 $W/1.log "/dev/full: writing the metrics failed: No space left on device"
check "/dev/full: no 'trained' summary" eval '! grep -q "^trained" $W/1.log'
if [ -n "$MPI2" ]; then
  $MPI2 --steps 3 --out-dir $W/o --metrics /dev/full > $W/2.log 2>&1
  rc_is "2 ranks, /dev/full" $? 1 $W/2.log "/dev/full: writing the metrics failed"
fi
if small_fs $W/fs 8; then
  $TRAIN --steps 40 --out-dir $W/o --metrics $W/fs/m.jsonl --save $W/model.out > $W/3.log 2>&1
  rc_is "a tmpfs filling mid-run" $? 1 $W/3.log "$W/fs/m.jsonl: writing the metrics failed: No space left on device"
  n=$(grep -c . $W/fs/m.jsonl)
  check "it failed mid-run ($n lines written before) and saved no model" test "$n" -gt 3 -a "$n" -lt 40 -a ! -e $W/model.out
else echo "(not root: the tmpfs case is skipped)"; fi
# the same run with room completes (the limit above is what failed)
$TRAIN --steps 40 --out-dir $W/o --metrics $W/m.jsonl > $W/4.log 2>&1
rc_is "with room the same run completes" $? 0 $W/4.log
check "40 lines, strict JSON" test "$(grep -c . $W/m.jsonl)" = 40 -a "$(jsonl_strict $W/m.jsonl && echo y)" = y
finish
