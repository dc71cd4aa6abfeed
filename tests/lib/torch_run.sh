#!/usr/bin/env bash
# tests/lib/torch_run.sh NAME CHECKS.py — the shared driver of a PyTorch
# reference test: skips (77) without $SL_BUILD/shardlm or Debian's
# /usr/bin/python3 with torch and numpy, makes a work directory (kept with
# SL_KEEP=1) and runs tests/torch_ref/CHECKS.py --shardlm EXE --work DIR.
set -u
NAME=$1 CHECKS=$2
SL_SRC=${SL_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
SL_BUILD=${SL_BUILD:-$SL_SRC/build}
PY=/usr/bin/python3
EXE="$SL_BUILD/shardlm"
if [ ! -x "$EXE" ]; then
  echo "SKIP: $EXE not built"; exit 77
fi
if [ ! -x "$PY" ] || ! "$PY" -c "import torch, numpy" 2>/dev/null; then
  echo "SKIP: $PY with torch and numpy not available"; exit 77
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sl_$NAME.XXXXXX")
if [ "${SL_KEEP:-0}" = "1" ]; then
  echo "work dir kept: $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
"$PY" "$SL_SRC/tests/torch_ref/$CHECKS" --shardlm "$EXE" --work "$WORK"
