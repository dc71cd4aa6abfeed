#!/usr/bin/env bash
# PyTorch reference test of the mixture of experts (Mixtral: models/llama.c
# with cfg.moe_experts, models/llama_moe.c): `shardlm dump` / `shardlm train`
# vs the plain-PyTorch oracle tests/ref/llama_ref.py (SparseMoeBlock), driven
# by the Llama test's helpers. Checks: tests/ref/moe_checks.py.
# Needs $SL_BUILD/shardlm and /usr/bin/python3 with torch; else exit 77.
# SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_moe moe_checks.py
