#!/usr/bin/env bash
# PyTorch reference test of Granite 4.0-H (HF GraniteMoeHybridForCausalLM,
# model_type granitemoehybrid, dense (num_local_experts 0) and mixture of
# experts (num_local_experts > 0: block_sparse_moe beside the shared MLP in
# every layer, top-k of the router logits, softmax over the k, SwiGLU experts
# stored as (E, 2I, C) / (E, C, I)); layer_types "mamba" / "attention", each
# layer followed by its shared SwiGLU MLP, residual updates scaled by
# residual_multiplier, embeddings by embedding_multiplier, attention scores by
# attention_multiplier, logits divided by logits_scaling, no RoPE):
# `shardlm dump` / `shardlm train` vs the plain-PyTorch oracle
# tests/ref/granite_h_ref.py (mamba2_ref's mixer with one norm group,
# llama_ref's attention), driven by the Llama test's helpers
# (tests/ref/engine_checks.py via hybrid_checks.py: same data, batch, 10 AdamW
# steps). Checks, one line each, then "N passed, M failed":
#  - mamba/attention/mamba (8 Mamba heads of 8 in one group, GQA 4/2 heads,
#    untied, conv bias) and attention/mamba (MQA, tied, attention and in/out_proj
#    biases, no conv bias), every multiplier != 1: logits, loss and every
#    gradient to 2e-5 relative (the key biases' gradients, analytically zero
#    without RoPE, to 2e-5 of the largest gradient); checkpointing
#    none/selective/full bit-identical; 10 AdamW steps (loss 1e-4 abs, lr,
#    grad_norm, final weights) at 1 rank, 2 ranks ZeRO-3, --tp 2 with and
#    without sequence parallelism (one Mamba group, as every Granite 4.0-H,
#    shared by both TP ranks), --pp 2 (1f1b and zb1p), ZeRO-3 with the CPU
#    optimizer and under full checkpointing (the first); 1 rank and --pp 2
#    (the second);
#  - moe: mamba/attention/mamba, every layer 4 experts top-2 of width 24 beside
#    the shared MLP of width 40, router_aux_loss_coef 0.001 with
#    output_router_logits false (no load-balancing loss): the same dump and
#    training checks (router and expert gradients included) at every layout
#    above and --ep 2; the reference routes unevenly; no near-tie: along the
#    dump and the 10 steps the smallest gap between a token's k-th and
#    (k+1)-th router logits >= max(1e-4, 20 x their fp32-vs-fp64 difference),
#    a negative control seed whose near-tie the guard catches; at every step
#    moe_load (a row per engine decoder layer: HF layer i's mixer 2i, zeros,
#    its FFN 2i+1) equals the reference's tokens per expert;
#  - negative controls: the reference without residual_multiplier, without
#    logits_scaling (both dense configs), with RoPE, and (moe) with the k
#    weights not renormalised (softmax over all experts), without the shared
#    MLP, with input_linear's gate / up halves swapped, far from the engine;
#  - HF round trip (--steps 0 --save byte-identical, config.json read back;
#    moe: the MoE fields and 3-D expert tensors); the family from model_type
#    alone; no position_embedding_type (None: NoPE);
#  - --doc-attention-mask: a packed row of several documents equals each
#    document run on its own (logits, loss, every gradient), dense and moe;
#    checkpointing modes bit-identical; a negative control (the row run
#    without resets) far off.
# The oracle's own checks (vs transformers' formulas written out, the MoE layer
# vs a token-by-token loop, fp32 vs fp64, finite differences):
# tests/ref/granite_h_selfcheck.py.
# Needs $SL_BUILD/shardlm, mpirun and /usr/bin/python3 with torch; else exit 77.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_granite_h granite_h_checks.py
