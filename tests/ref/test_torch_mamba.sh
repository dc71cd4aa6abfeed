#!/usr/bin/env bash
# PyTorch reference test of the whole Mamba (v1) model (models/mamba.c):
# `shardlm dump` / `shardlm train` vs the plain-PyTorch oracle
# tests/ref/mamba_ref.py, driven by the Llama test's helpers
# (tests/ref/engine_checks.py: same data, batch, 10 AdamW steps).
# Checks, one line each, then "N passed, M failed":
#  - HF tied (default) and HF untied with in/out_proj biases and no conv bias:
#    logits, loss and every gradient to 1e-5 relative; 10 AdamW steps (loss
#    1e-4 abs, lr, grad_norm, final weights); activation checkpointing
#    none/selective/full bit-identical (dumps, step losses, saved weights);
#  - a state-spaces checkpoint (config d_model/n_layer/ssm_cfg/
#    pad_vocab_size_multiple/tie_embeddings, backbone.embedding.weight):
#    vocab padding, dump and training vs PyTorch;
#  - HF round trip: --steps 0 --save, and convert HF -> ckpt -> HF, give
#    byte-identical tensors;
#  - init from seed (config.json only): the HF Mamba init rules, determinism,
#    and the engine's dump of its own init vs PyTorch on the saved weights.
# Needs $SL_BUILD/shardlm and /usr/bin/python3 with torch; else exit 77.
# SL_KEEP=1 keeps the work directory.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_mamba mamba_checks.py
