#!/usr/bin/env bash
# Loss masks (PREFIX.lmask) and --doc-attention-mask vs the PyTorch oracle,
# at 1, 2 and 3 ranks (tests/torch_ref/mask_checks.py). Needs
# $SL_BUILD/shardlm, mpirun and /usr/bin/python3 with torch; exits 77
# (skipped) otherwise. SL_KEEP=1 keeps the work directory.
set -u
SL_SRC=${SL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
SL_BUILD=${SL_BUILD:-$SL_SRC/build}
PY=/usr/bin/python3
EXE="$SL_BUILD/shardlm"
[ -x "$EXE" ] || { echo "SKIP: $EXE not built"; exit 77; }
command -v mpirun > /dev/null || { echo "SKIP: no mpirun"; exit 77; }
if [ ! -x "$PY" ] || ! "$PY" -c "import torch, numpy" 2>/dev/null; then
  echo "SKIP: $PY with torch and numpy not available"; exit 77
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sl_torch_masks.XXXXXX")
if [ "${SL_KEEP:-0}" = "1" ]; then echo "work dir kept: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$PY" "$SL_SRC/tests/torch_ref/mask_checks.py" --shardlm "$EXE" --work "$WORK"
