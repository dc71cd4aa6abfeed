#!/usr/bin/env bash
# bf16 compute: shardlm dump --compute-dtype bf16 (the CPU mirror of the GPU's
# rounding points) vs a PyTorch bf16 reference with explicit casts
# (tests/ref/bf16_checks.py, docs/bf16.md) for tiny Llama (untied, tied),
# Qwen3, Gemma 2, Gemma 3, Mamba, Falcon-Mamba, Mamba-2 (2 groups untied;
# 1 group tied with biases), Nemotron-H ("M*M-" untied; "M-*" tied with
# biases), Granite 4.0-H (config_hybrid, residual_multiplier 0.7), Granite 3
# (Llama's layers with the four multipliers; control: rounding after each
# multiplier) and the mixtures of experts, Mixtral (4 SwiGLU experts top-2,
# softmax router), Nemotron-H's config_moe ("M*EME": sigmoid router with
# e_score_correction_bias, routed_scaling_factor, relu2 experts, the shared
# expert) and Granite 4.0-H's config_moe (the shared SwiGLU MLP beside 4
# fused SwiGLU experts top-2; control: the shared expert's swiglu unrounded),
# each MoE row with a routing margin (no near-tie at the top-k) and a negative
# control, plus 6 bf16 training steps (Llama, Mamba-2, Nemotron-H).
# Skips (77) without $SL_BUILD/shardlm or /usr/bin/python3 with torch; SL_KEEP=1 keeps the work dir.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_bf16 bf16_checks.py
