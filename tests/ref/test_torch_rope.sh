#!/usr/bin/env bash
# PyTorch reference test of rope_scaling (linear, llama3, yarn): shardlm dump
# vs the transformers rules in tests/ref/llama_ref.py (tests/ref/rope_checks.py),
# with a negative control. Skips (77) without the binary or Debian's python3
# with torch. SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_rope rope_checks.py
