#!/usr/bin/env bash
# PyTorch reference test of Qwen3 (models/llama.c with q/k norms) and Llama attention_bias / mlp_bias:
# `shardlm dump` / `shardlm train` vs the plain-PyTorch oracle
# tests/ref/llama_ref.py (Qwen3ForCausalLM and biased Llama configs), driven by the Llama
# test's helpers (tests/ref/engine_checks.py). Checks: tests/ref/qwen3_checks.py.
# Needs $SL_BUILD/shardlm and /usr/bin/python3 with torch; else exit 77.
# SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_qwen3 qwen3_checks.py
