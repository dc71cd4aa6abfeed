#!/usr/bin/env bash
# `shardlm generate`: greedy continuations (KV cache, sliding window, Mamba
# state) vs PyTorch full recompute, sampling, bad input
# (tests/torch_ref/generate_checks.py, run by tests/test_eval.sh).
exec bash "$(dirname "$0")/test_eval.sh" generate
