#!/usr/bin/env bash
# PyTorch reference test of the Mamba-2 model (models/mamba2.c, HF
# Mamba2ForCausalLM): `shardlm dump` / `shardlm train` vs the plain-PyTorch
# oracle tests/ref/mamba2_ref.py (transformers' chunked SSD torch_forward),
# driven by the Llama test's helpers (tests/ref/engine_checks.py: same data,
# batch, 10 AdamW steps). Checks, one line each, then "N passed, M failed":
#  - two groups (untied, conv bias) and one group (tied, in/out_proj biases,
#    no conv bias, a time_step_limit that clamps at both ends): logits, loss
#    and every gradient to 2e-5 relative (engine_checks DUMP_TOL); checkpointing none/selective/full
#    bit-identical; 10 AdamW steps (loss 1e-4 abs, lr, grad_norm, final
#    weights) at 1 rank, 2 ranks ZeRO-3, --tp 2 with and without sequence
#    parallelism, --pp 2 (1f1b and zb1p), ZeRO-3 with the CPU
#    optimizer, and under full checkpointing;
#  - negative control: transformers' whole-width gated norm at n_groups 2 is
#    far from the engine (the per-group norm is the original Mamba-2's);
#  - HF round trip (--steps 0 --save byte-identical, config.json with
#    Python's Infinity read back), the family from model_type alone;
#  - a state-spaces (mamba_ssm) Mamba2 config and checkpoint: dump vs
#    PyTorch, the padded vocabulary, --save to the HF form;
#  - --doc-attention-mask: a packed row of several documents equals each
#    document run on its own (logits, loss, every gradient), for Mamba-2
#    and Mamba (v1); checkpointing modes bit-identical; a negative control
#    (the row run without resets) far off;
#  - n_groups 1 at --tp 2 with and without sequence parallelism (the group
#    shared by both ranks); --tp 3 (not dividing num_heads 4) refused by
#    name (--compute-dtype bf16 is checked by tests/ref/test_torch_bf16.sh).
# Needs $SL_BUILD/shardlm, mpirun and /usr/bin/python3 with torch; else exit 77.
exec bash "$(dirname "$0")/../lib/torch_run.sh" torch_mamba2 mamba2_checks.py
