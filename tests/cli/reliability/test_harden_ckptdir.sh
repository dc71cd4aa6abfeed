#!/bin/bash
# tests/cli/reliability/test_harden_ckptdir.sh — issue 11 case 3: a fresh run (no --resume)
# refuses a --ckpt-dir that holds a complete checkpoint (exit 2, naming
# --resume and a new directory) and leaves it untouched; --resume continues
# it; a directory with only leftovers (.tmp-*, no step-N/manifest.json) is
# not a run. A run holds an exclusive lock on CKPT_DIR/.lock for its life:
# a second run on the directory (1 or 2 ranks) is refused with exit 2 while
# the first runs, and starts once it is gone, even after a SIGKILL.
source "${SL_SRC:?}/tests/lib/harden.sh"
manifests() { cat $1/step-*/manifest.json | md5sum; }

$TRAIN --steps 4 --out-dir $W/o --ckpt-dir $W/ck --ckpt-every 2 > $W/1.log 2>&1
rc_is "first run writes checkpoints" $? 0 $W/1.log
before=$(manifests $W/ck)

# 1. a fresh run on that directory is refused, the checkpoints untouched
$TRAIN --steps 4 --out-dir $W/o --ckpt-dir $W/ck > $W/2.log 2>&1
rc_is "fresh run on another run's checkpoints refused" $? 2 $W/2.log "pass --resume to continue from it, or choose a new --ckpt-dir"
check "the checkpoints are untouched" test "$(manifests $W/ck) $(cat $W/ck/latest)" = "$before step-000004"
if [ -n "$MPI2" ]; then
  $MPI2 --steps 4 --out-dir $W/o --ckpt-dir $W/ck > $W/3.log 2>&1
  rc_is "2 ranks: refused too" $? 2 $W/3.log "already holds 2 checkpoints (newest: step 4)"
fi

# 2. --resume continues it
$TRAIN --steps 6 --out-dir $W/o --ckpt-dir $W/ck --ckpt-every 2 --resume > $W/4.log 2>&1
rc_is "--resume continues the run" $? 0 $W/4.log "resumed from"
check "step 6 committed" test "$(cat $W/ck/latest)" = step-000006

# 3. leftovers only: not a run
mkdir -p $W/left/.tmp-step-2-00 $W/empty
$TRAIN --steps 2 --out-dir $W/o --ckpt-dir $W/left > $W/5.log 2>&1
rc_is "a directory with only a .tmp-* leftover is usable" $? 0 $W/5.log
$TRAIN --steps 2 --out-dir $W/o --ckpt-dir $W/empty > $W/6.log 2>&1
rc_is "an existing empty directory is usable" $? 0 $W/6.log

# 4. the lock: a running job holds it
$TRAIN --steps 1000000 --out-dir $W/bg --ckpt-dir $W/ck --ckpt-every 1000000 --resume > $W/bg.log 2>&1 &
bg=$!
for i in $(seq 1 300); do [ -s $W/bg/metrics.jsonl ] && break; sleep 0.1; done
check "the background run is training" test -s $W/bg/metrics.jsonl
$TRAIN --steps 8 --out-dir $W/o --ckpt-dir $W/ck --resume > $W/7.log 2>&1
rc_is "a second run on a locked directory is refused" $? 2 $W/7.log "is in use by another run"
if [ -n "$MPI2" ]; then
  $MPI2 --steps 8 --out-dir $W/o --ckpt-dir $W/ck --resume > $W/8.log 2>&1
  rc_is "2 ranks: refused too" $? 2 $W/8.log "is in use by another run"
fi
check "the running job was not disturbed" kill -0 $bg
kill -KILL $bg; wait $bg 2>/dev/null
$TRAIN --steps 8 --out-dir $W/o --ckpt-dir $W/ck --resume > $W/9.log 2>&1
rc_is "after the holder was SIGKILLed the directory is free" $? 0 $W/9.log "resumed from"
finish
