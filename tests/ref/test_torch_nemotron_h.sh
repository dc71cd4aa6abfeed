#!/usr/bin/env bash
# PyTorch reference test of Nemotron-H (HF NemotronHForCausalLM, the layer kinds
# of hybrid_override_pattern: 'M' Mamba-2, '*' attention without RoPE, '-' relu^2
# MLP, 'E' mixture of experts): `shardlm dump` / `shardlm train` vs the
# plain-PyTorch oracle tests/ref/nemotron_h_ref.py (mamba2_ref's mixer, llama_ref's
# attention, the MoE written from NemotronHMoE / DeepseekV3TopkRouter), driven
# by the Llama test's helpers (tests/ref/engine_checks.py: same data, batch, 10
# AdamW steps). Checks, one line each, then "N passed, M failed":
#  - "M*M-" (two groups, d_inner = mamba_num_heads * mamba_head_dim != expand *
#    hidden, GQA 4/2 heads of head_dim 16, untied, conv bias) and "M-*" (one
#    group, tied, in/out_proj, MLP and attention biases, no conv bias, MQA, a
#    time_step_limit that clamps at both ends): logits, loss and every gradient
#    to 2e-5 relative (engine_checks DUMP_TOL; the key biases' gradients,
#    analytically zero without RoPE, to 2e-5 of the largest gradient);
#    checkpointing none/selective/full bit-identical; 10 AdamW steps (loss 1e-4
#    abs, lr, grad_norm, final weights) at 1 rank, 2 ranks ZeRO-3, --tp 2 with and
#    without sequence parallelism, --pp 2 (1f1b and zb1p), ZeRO-3 with the CPU
#    optimizer and under full checkpointing ("M*M-"); 1 rank and --pp 2 ("M-*");
#  - "M*EME" (two 'E' layers: 4 routed experts top-2 of width 24, the shared
#    expert of width 40, sigmoid router with a nonzero e_score_correction_bias,
#    routed_scaling_factor 2.5, norm_topk_prob, n_group 1): the same dump and
#    checkpointing checks (router, every expert's and the shared expert's
#    gradients), 10 steps at every layout above and at 2 ranks --ep 2; the
#    reference routes unevenly and the bias changes some tokens' experts; no
#    near-tie at the top-k boundary along the dump and the 10 steps (smallest
#    gap of choice scores >= max(5e-5, 20x its fp32-vs-fp64 difference); a
#    negative control: a seed with a near-tie is caught); the engine's per-step
#    moe_load equals the reference's selections (1 rank);
#  - negative controls: the reference with RoPE in its attention layers, and
#    with transformers' Mamba2 whole-width gated norm at n_groups 2, are far from
#    the engine; for "M*EME": softmax router scores instead of the sigmoid,
#    routed_scaling_factor ignored, e_score_correction_bias ignored;
#  - HF round trip (--steps 0 --save byte-identical, config.json with Python's
#    Infinity read back; "M*EME": the MoE fields and the routers' biases); the
#    family from model_type alone; Nemotron-H-8B's attention_head_dim for
#    head_dim;
#  - --doc-attention-mask (the three models): a packed row of several documents
#    equals each document run on its own (logits, loss, every gradient);
#    checkpointing modes bit-identical; a negative control (the row run without
#    resets) far off.
# The oracle's own checks (vs mamba2_ref, fp32 vs fp64, finite differences, the
# MoE layer vs a token-by-token loop): tests/ref/nemotron_h_selfcheck.py.
# Needs $SL_BUILD/shardlm, mpirun and /usr/bin/python3 with torch; else exit 77.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_nemotron_h nemotron_h_checks.py
