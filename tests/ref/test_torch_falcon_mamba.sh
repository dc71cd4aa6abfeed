#!/usr/bin/env bash
# PyTorch reference test of Falcon-Mamba (models/mamba.c with the weightless
# dt/B/C RMSNorm, cfg.mixer_rms): `shardlm dump` / `shardlm train` / convert
# vs the plain-PyTorch oracle tests/ref/mamba_ref.py (FalconMambaForCausalLM
# config), driven by the Llama test's helpers (tests/ref/engine_checks.py).
# Checks: tests/ref/falcon_mamba_checks.py.
# Needs $SL_BUILD/shardlm and /usr/bin/python3 with torch; else exit 77.
# SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_falcon_mamba falcon_mamba_checks.py
