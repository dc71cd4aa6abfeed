#!/usr/bin/env bash
# PyTorch reference test of Granite 4.0-H (HF GraniteMoeHybridForCausalLM,
# model_type granitemoehybrid, dense: num_local_experts 0; layer_types "mamba" /
# "attention", each layer followed by its shared SwiGLU MLP, residual updates
# scaled by residual_multiplier, embeddings by embedding_multiplier, attention
# scores by attention_multiplier, logits divided by logits_scaling, no RoPE):
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
#  - negative controls: the reference without residual_multiplier, without
#    logits_scaling (both configs), and with RoPE, far from the engine;
#  - HF round trip (--steps 0 --save byte-identical, config.json read back); the
#    family from model_type alone; no position_embedding_type (None: NoPE);
#  - --doc-attention-mask: a packed row of several documents equals each
#    document run on its own (logits, loss, every gradient); checkpointing modes
#    bit-identical; a negative control (the row run without resets) far off.
# The oracle's own checks (vs transformers' formulas written out, fp32 vs fp64,
# finite differences): tests/ref/granite_h_selfcheck.py.
# Needs $SL_BUILD/shardlm, mpirun and /usr/bin/python3 with torch; else exit 77.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_granite_h granite_h_checks.py
