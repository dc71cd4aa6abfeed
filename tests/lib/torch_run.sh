#!/usr/bin/env bash
# tests/lib/torch_run.sh NAME CHECKS.py [NEED...] — the shared driver of a PyTorch
# reference test: the shared helper tests/lib/run.sh (skips without the CLI
# or Debian's /usr/bin/python3 with torch and numpy, or a NEED of run.sh; a work directory, kept
# with SL_KEEP=1), then tests/ref/CHECKS.py --shardlm EXE --work DIR.
NAME=$1 CHECKS=$2
shift 2
# shellcheck source=tests/lib/run.sh
source "$(dirname "${BASH_SOURCE[0]}")/run.sh" "$NAME" torch "$@"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
"$PY" "$SL_SRC/tests/ref/$CHECKS" --shardlm "$B" --work "$W"
