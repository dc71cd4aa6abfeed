#!/usr/bin/env bash
# PyTorch reference test of Gemma 2 (models/llama.c's Gemma options):
# `shardlm dump` / `shardlm train` vs the plain-PyTorch oracle
# tests/ref/llama_ref.py (Gemma2ForCausalLM config), driven by the Llama
# test's helpers (tests/ref/engine_checks.py). Checks: tests/ref/gemma2_checks.py.
# Needs $SL_BUILD/shardlm and /usr/bin/python3 with torch; else exit 77.
# SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_gemma2 gemma2_checks.py
