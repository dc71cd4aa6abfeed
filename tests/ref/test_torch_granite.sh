#!/usr/bin/env bash
# PyTorch reference test of Granite 3.x (HF GraniteForCausalLM, model_type granite: Llama's layers with
# the four muP multipliers: embeddings times embedding_multiplier, each residual update times
# residual_multiplier, attention scores times attention_multiplier (not head_dim^-0.5), logits divided
# by logits_scaling; RoPE on rope_theta / rope_scaling as Llama's): `shardlm dump` / `shardlm train` /
# `shardlm generate` vs the plain-PyTorch oracle tests/ref/granite_ref.py (llama_ref's attention with
# an explicit score scale, its MLP, norms and RoPE), driven by the Llama test's helpers
# (tests/ref/engine_checks.py via hybrid_checks.py: same data, batch, 10 AdamW steps).
# Checks (tests/ref/granite_checks.py), one line each, then "N passed, M failed":
#  - the oracle's self-checks (granite_ref.py: vs transformers' forward written out 1e-12 in fp64, each
#    variant too; fp32 vs fp64; autograd vs finite differences; config defaults and forms);
#  - untied (2 layers, GQA 4/2 heads of 16, no biases, default RoPE) and tied (3 layers, MQA 3/1,
#    attention_bias and mlp_bias, llama3 rope_scaling), every multiplier != 1: logits, loss and every
#    gradient to 2e-5 relative; checkpointing none/selective/full dumps bit-identical; 10 AdamW steps
#    (loss 1e-4 abs, lr, grad_norm, final weights) at 1 rank, 2 ranks ZeRO-3, --tp 2 with and without
#    sequence parallelism, --pp 2 and 1 rank under full checkpointing (untied); 1 rank and --pp 2
#    (tied); the saved config is GraniteForCausalLM;
#  - negative controls: the reference without each multiplier (taken as 1; attention_multiplier as
#    head_dim^-0.5) and (tied) without rope_scaling, far (> 100x the bound) from the engine;
#  - HF round trip (--steps 0 --save byte-identical, config.json read back the same); the family from
#    model_type alone; rope_parameters (transformers 5) in place of rope_theta + rope_scaling (dump
#    bit-identical); no multipliers in config.json = transformers' defaults 1.0 (score scale 1.0);
#  - YaRN (factor 4): the dump with the scores times attention_multiplier x attention_factor^2, as
#    transformers' rotary tables carry the factor; negative control: the reference with attention_factor
#    1 (what the engine computed before) misses the engine's dump;
#  - --doc-attention-mask: a packed row = its documents run separately (untied), checkpointing
#    modes bit-identical, the row run whole far off;
#  - greedy: `shardlm generate` of 16 tokens = the reference's greedy full recompute (both configs,
#    init std 0.3), not vacuous (without the embedding, residual or attention multiplier, or (tied)
#    the rope scaling, the reference's continuation differs).
# Needs $SL_BUILD/shardlm, mpirun and /usr/bin/python3 with torch; else exit 77.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_granite granite_checks.py mpi
