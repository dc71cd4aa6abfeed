#!/usr/bin/env bash
# PyTorch reference test of the mixture of experts' routing options
# (--moe-capacity-factor, --moe-z-loss-coef, --moe-balance bias:
# models/llama_moe.c) against references written from Megatron-Core's
# capacity rule and z-loss and torchtitan's expert bias (tests/ref/
# moe_route_checks.py). Needs $SL_BUILD/shardlm and /usr/bin/python3 with
# torch; else exit 77. SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_moe_route moe_route_checks.py
