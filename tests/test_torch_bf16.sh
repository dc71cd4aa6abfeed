#!/usr/bin/env bash
# bf16 compute: shardlm dump --compute-dtype bf16 (the CPU mirror of the GPU's
# rounding points) vs a PyTorch bf16 reference with explicit casts
# (tests/torch_ref/bf16_checks.py, docs/bf16.md). Skips (77) without
# $SL_BUILD/shardlm or /usr/bin/python3 with torch; SL_KEEP=1 keeps the work dir.
SL_SRC=${SL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
exec bash "$SL_SRC/tests/lib/torch_run.sh" torch_bf16 bf16_checks.py
