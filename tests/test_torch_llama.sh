#!/usr/bin/env bash
# PyTorch reference test of the whole Llama model: shardlm dump / train vs a
# plain-PyTorch oracle (tests/torch_ref). Needs $SL_BUILD/shardlm and Debian's
# /usr/bin/python3 with torch; exits 77 (skipped) when either is missing.
# Set SL_KEEP=1 to keep the work directory.
set -u
SL_SRC=${SL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
SL_BUILD=${SL_BUILD:-$SL_SRC/build}
PY=/usr/bin/python3
EXE="$SL_BUILD/shardlm"
if [ ! -x "$EXE" ]; then
  echo "SKIP: $EXE not built"; exit 77
fi
if [ ! -x "$PY" ] || ! "$PY" -c "import torch, numpy" 2>/dev/null; then
  echo "SKIP: $PY with torch and numpy not available"; exit 77
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sl_torch_llama.XXXXXX")
if [ "${SL_KEEP:-0}" = "1" ]; then
  echo "work dir kept: $WORK"
else
  trap 'rm -rf "$WORK"' EXIT
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
"$PY" "$SL_SRC/tests/torch_ref/engine_checks.py" --shardlm "$EXE" --work "$WORK"
