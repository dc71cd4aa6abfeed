#!/usr/bin/env bash
# Held-out evaluation: `shardlm eval` at 1 and 2 ranks vs a PyTorch forward,
# --eval-data / --split during a 2-rank ZeRO-3 run vs `shardlm eval` of the
# saved model, bad input (tests/torch_ref/eval_checks.py). Skips (77) without
# the binary or Debian's python3 with torch; runs the 2-rank checks when
# mpirun exists. With the argument "generate": tests/torch_ref/generate_checks.py
# instead (tests/test_generate.sh). SL_KEEP=1 keeps the work directory.
set -u
SL_SRC=${SL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
SL_BUILD=${SL_BUILD:-$SL_SRC/build}
PY=/usr/bin/python3
EXE="$SL_BUILD/shardlm"
[ -x "$EXE" ] || { echo "SKIP: $EXE not built"; exit 77; }
if [ ! -x "$PY" ] || ! "$PY" -c "import torch, numpy" 2>/dev/null; then
  echo "SKIP: $PY with torch and numpy not available"; exit 77
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sl_eval.XXXXXX")
if [ "${SL_KEEP:-0}" = "1" ]; then echo "work dir kept: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
if [ "${1:-}" = "generate" ]; then
  "$PY" "$SL_SRC/tests/torch_ref/generate_checks.py" --shardlm "$EXE" --work "$WORK"
  exit $?
fi
MPI=()
command -v mpirun >/dev/null 2>&1 && MPI=(--mpirun)
"$PY" "$SL_SRC/tests/torch_ref/eval_checks.py" --shardlm "$EXE" --work "$WORK" "${MPI[@]}"
