#!/usr/bin/env bash
# Held-out evaluation: `shardlm eval` at 1 and 2 ranks vs a PyTorch forward,
# --eval-data / --split during a 2-rank ZeRO-3 run vs `shardlm eval` of the
# saved model, bad input (tests/ref/eval_checks.py). Skips (77) without
# the binary or Debian's python3 with torch; runs the 2-rank checks when
# mpirun exists. `shardlm generate` is tests/cli/eval/test_generate.sh.
# SL_KEEP=1 keeps the work directory.
source "${SL_SRC:?}/tests/lib/run.sh" eval torch
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
MPIRUN=()
command -v mpirun >/dev/null 2>&1 && MPIRUN=(--mpirun)
"$PY" "$SL_SRC/tests/ref/eval_checks.py" --shardlm "$B" --work "$W" "${MPIRUN[@]}"
