#!/usr/bin/env bash
# PyTorch reference test of the whole Llama model: shardlm dump / train vs a
# plain-PyTorch oracle (tests/torch_ref/engine_checks.py). Needs
# $SL_BUILD/shardlm and Debian's /usr/bin/python3 with torch; exits 77
# (skipped) when either is missing. Set SL_KEEP=1 to keep the work directory.
SL_SRC=${SL_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
exec bash "$SL_SRC/tests/lib/torch_run.sh" torch_llama engine_checks.py
