#!/usr/bin/env bash
# PyTorch reference test of the whole Llama model: shardlm dump / train vs a
# plain-PyTorch oracle (tests/ref/engine_checks.py). Needs
# $SL_BUILD/shardlm and Debian's /usr/bin/python3 with torch; exits 77
# (skipped) when either is missing. Set SL_KEEP=1 to keep the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_llama engine_checks.py
