#!/usr/bin/env bash
# `shardlm generate`: greedy continuations (KV cache, sliding window, Mamba
# state) vs PyTorch full recompute, sampling, bad input
# (tests/ref/generate_checks.py). Skips (77) without the binary or Debian's
# python3 with torch. SL_KEEP=1 keeps the work directory.
source "${SL_SRC:?}/tests/lib/run.sh" generate torch
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$PY" "$SL_SRC/tests/ref/generate_checks.py" --shardlm "$B" --work "$W"
