#!/usr/bin/env bash
# PyTorch reference test of Mistral (models/llama.c with the sliding window):
# `shardlm dump` / `shardlm train` vs the plain-PyTorch oracle
# tests/ref/llama_ref.py (MistralForCausalLM config: attention of query
# i limited to keys j with 0 <= i - j < sliding_window), driven by the Llama
# test's helpers (tests/ref/engine_checks.py).
# Checks, one line each, then "N passed, M failed":
#  - GQA (4 heads, 2 kv heads), window 5 < seq-len 16, untied and tied:
#    logits, loss and every gradient to 1e-5 relative; 10 AdamW steps (loss
#    1e-4 abs, lr, grad_norm, final weights); checkpointing none/selective/
#    full bit-identical;
#  - the window is really applied: the engine's logits differ from the
#    oracle's without a window and with window 4 and 6 (off by one);
#  - HF round trip: --steps 0 --save, and convert HF -> ckpt -> HF, give
#    byte-identical tensors; config keeps MistralForCausalLM + sliding_window.
# Needs $SL_BUILD/shardlm and /usr/bin/python3 with torch; else exit 77.
# SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_mistral mistral_checks.py
