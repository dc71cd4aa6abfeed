#!/usr/bin/env bash
# The parity contract across ranks for the other architectures (Mistral with
# a sliding window and GQA; Qwen2 with q/k/v biases and a per-layer window
# (layer 1 slides: max_window_layers 1, window 6 < seq-len 16); Mamba v1 with tied
# embeddings, and untied with biases): world sizes 1, 2, 3 with ZeRO 0 and 3 train the same model as one
# process (per-step losses and final parameters to 1e-5 relative, through
# tests/lib/compare.py), and at a fixed world size ZeRO 0 and 3 are
# bit-identical. Same runtime path as tests/cli/sharding/test_mpi_parity.sh (Llama): the
# sharding layer sees only unit sizes and the pinned (tied) unit. Qwen2 also
# under TP 2 and 4 (its biases split with their weights' rows, a replicated
# k/v bias's gradient summed; 1e-5) and PP 2 with 1f1b and zb1p (the bias
# gradient in W; bit-identical). Qwen3 (q/k norms, head_dim 12 != 32/4, with
# attention_bias: q/k/v/o biases) at DP 2 ZeRO-3, DP 2 x TP 2 with SP, TP 4 >
# num_key_value_heads, ZeRO-3 with the optimizer on the CPU (1e-5), PP 2 1f1b
# and zb1p (bit-identical); Llama with attention_bias and mlp_bias at DP 2 x
# TP 2 with SP (1e-5) and PP 2 zb1p (bit-identical). Falcon-Mamba (the dt/B/C norms, untied): DP 2
# ZeRO-3 and DP 2 x TP 2 with SP (1e-5), PP 2 with 1f1b and zb1p
# (the norms' backward in B; bit-identical), ZeRO-3 with the optimizer on
# the CPU (bit-identical to ZeRO-3).
# Mixtral (4 experts, top 2): DP 1-3 x ZeRO 0/3 at 1e-5 (measured: weights
# 5.1e-07 relative L2 at DP 3), PP 2 1f1b and zb1p bit-identical, also with a
# capacity and the expert bias (MoE under --tp: tests/cli/sharding/test_mpi_ep.sh); with the load-balancing loss DP 2 ZeRO-3 (1e-5), --pp
# refused. Qwen3-MoE (norm_topk_prob true) at DP 2 ZeRO-3 (1e-5).
# Gemma 2 (sandwich (1 + w) norms, softcaps, a window on even layers): DP 2 ZeRO 3 with CPU
# optimizer offload at 1e-5, PP 2 1f1b and zb1p bit-identical, DP 2 x TP 2
# with SP at 1e-5. Gemma 3 ((1 + w) q/k norms, layer 0 sliding on the local
# RoPE base, layer 1 global with linear rope_scaling) the same way. Granite 4.0-H dense and Granite 3 (the muP
# multipliers): DP 2 x TP 2 with SP and ZeRO-3 with CPU optimizer offload at 1e-5, PP 2 1f1b and zb1p
# bit-identical.
source "${SL_SRC:?}/tests/lib/run.sh" mpi_parity_arch mpi numpy
tiny_model "$W/mistral" mistral '"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2'
tiny_model "$W/qwen2" llama '"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 2,
 "use_sliding_window": true, "sliding_window": 6, "max_window_layers": 1'
tiny_model "$W/mamba" mamba '"num_hidden_layers": 2'
tiny_model "$W/mixtral" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2'
tiny_model "$W/mixtral_aux" llama '"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
 "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2, "output_router_logits": true, "router_aux_loss_coef": 0.5'
tiny_model "$W/qwen3moe" llama '"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 2,
 "head_dim": 12, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm_topk_prob": true'
tiny_model "$W/qwen3" llama '"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2,
 "head_dim": 12, "attention_bias": true'
tiny_model "$W/llama_b" llama '"num_hidden_layers": 2, "attention_bias": true, "mlp_bias": true'
tiny_model "$W/gemma2" tied '"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "num_hidden_layers": 2,
 "head_dim": 8, "sliding_window": 6, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0,
 "query_pre_attn_scalar": 8, "hidden_activation": "gelu_pytorch_tanh"'
tiny_model "$W/gemma3" tied '"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "num_hidden_layers": 2,
 "head_dim": 8, "sliding_window": 6, "sliding_window_pattern": 2, "rope_local_base_freq": 100.0, "rope_theta": 10000.0,
 "rope_scaling": {"rope_type": "linear", "factor": 4.0}, "query_pre_attn_scalar": 8'
tiny_model "$W/mamba_ub" mamba '"num_hidden_layers": 2, "conv_kernel": 3, "time_step_rank": 3,
 "use_bias": true, "use_conv_bias": false, "tie_word_embeddings": false, "layer_norm_epsilon": null'
tiny_model "$W/falcon" mamba '"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba",
 "num_hidden_layers": 2, "tie_word_embeddings": false, "mixer_rms_eps": 1e-5'
tiny_data "$W/data"
ARCH_STEPS=12
tiny_model "$W/granite_h" granite_moe '"num_local_experts": 0, "num_experts_per_tok": null, "intermediate_size": null'
tiny_model "$W/granite3" llama '"architectures": ["GraniteForCausalLM"], "model_type": "granite", "num_hidden_layers": 2,
 "embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.2, "logits_scaling": 2.5'
run() { arch_run "$@"; }     # arch name world micro accum [flags...] (tests/lib/run.sh)
check() { arch_check "$@"; } # arch a b [compare flags]
# Qwen2's k_proj biases: their gradient is nearly zero (exactly zero without RoPE: softmax ignores
# a constant per query), so AdamW's normalised step carries their summation-order noise. Their relative L2
# between layouts measured up to 4.4e-05 (DP 2 and 3, TP 2 and 4; 3 steps; SkylakeX, Haswell at 1
# thread, Sandybridge at 2): bound over 10x that, on
# their own line (tests/lib/compare.py --wtol-tensor). Every other tensor keeps 5e-5.
KB="--wtol-tensor k_proj.bias:5e-4"
for arch in mistral qwen2 mixtral mamba mamba_ub; do
  own=; [ $arch = qwen2 ] && own=$KB
  # G = 12 samples per step for every world size; seeds from config (no weights)
  run $arch base 1 3 4 --zero 0
  run $arch w1z3 1 3 4 --zero 3 && check $arch w1z3 base --exact
  for np in 2 3; do
    case $np in 2) mb=3; ga=2;; 3) mb=2; ga=2;; esac
    for z in 0 3; do run $arch w${np}z$z "$np" $mb $ga --zero $z && check $arch w${np}z$z base --rtol 1e-5 $own; done
    check $arch w${np}z3 w${np}z0 --exact
  done
done
# Qwen2: TP 2 (num_key_value_heads 2: one k/v head per rank), PP 2 (1f1b, zb1p)
run qwen2 tp2 2 3 4 --tp 2 --zero 3 && check qwen2 tp2 base --rtol 1e-5 $KB
for s in 1f1b zb1p; do run qwen2 pp2$s 2 3 4 --pp 2 --pp-schedule $s && check qwen2 pp2$s base --exact; done
# TP 4 > num_key_value_heads 2: each k/v head (weights and bias) on 2 ranks, their gradients summed
run qwen2 tp4 4 3 4 --tp 4 --zero 3 && check qwen2 tp4 base --rtol 1e-5 $KB
run qwen2 tp4ns 4 3 4 --tp 4 --no-sync-accum && check qwen2 tp4ns base --rtol 1e-5 $KB
# Qwen3-MoE (q/k norms + the sparse MLP): DP 2 ZeRO-3 vs one rank
run qwen3moe base 1 3 4 --zero 0
run qwen3moe w2z3 2 3 2 --zero 3 && check qwen3moe w2z3 base --rtol 1e-5
# the load-balancing loss (per micro-batch): DP 2 x 2 micro-batches of 3 = one rank's 4 of 3 (1e-5); --pp refused
run mixtral_aux base 1 3 4 --zero 0
run mixtral_aux w2z3 2 3 2 --zero 3 && check mixtral_aux w2z3 base --rtol 1e-5
$MPI -np 2 "$B" train --model "$W/mixtral_aux" --init random --data "$W/data" --steps 1 --seq-len 16 --micro-batch 2 --grad-accum 2 \
  --threads 1 --summary false --plot false --out-dir "$W/mixtral-refused" --pp 2 > "$W/mixtral-refused.log" 2>&1
rc_is "Mixtral aux loss --pp 2 refused" $? 2 "$W/mixtral-refused.log" "load-balancing loss (output_router_logits true)"
# Mixtral: PP 2 1f1b and zb1p (the sparse MLP's split backward: its W half adds the unsplit bits) bit-identical
run mixtral pp21f1b 2 3 4 --pp 2 --pp-schedule 1f1b && check mixtral pp21f1b base --exact
run mixtral pp2zb1p 2 3 4 --pp 2 --pp-schedule zb1p && check mixtral pp2zb1p base --exact
# with a capacity and the expert bias (each stage's drops; the bias from every stage's loads): PP 2 bit-identical
MO="--moe-capacity-factor 1.0 --moe-balance bias --moe-bias-rate 0.02"
run mixtral obase 1 3 4 --zero 0 $MO
run mixtral opp2 2 3 4 --pp 2 --pp-schedule 1f1b $MO && check mixtral opp2 obase --exact
run mixtral ozb2 2 3 4 --pp 2 --pp-schedule zb1p $MO && check mixtral ozb2 obase --exact
# Qwen3: the q/k norm weights replicated over TP (their gradients summed), under SP too
run qwen3 base 1 3 4 --zero 0
run qwen3 w2z3 2 3 2 --zero 3 && check qwen3 w2z3 base --rtol 1e-5
run qwen3 tp2sp 4 3 2 --tp 2 --zero 3 --sequence-parallel && check qwen3 tp2sp base --rtol 1e-5
run qwen3 tp2spac 4 3 2 --tp 2 --zero 3 --sequence-parallel --activation-checkpoint full &&
  check qwen3 tp2spac tp2sp --exact
run qwen3 tp4 4 3 4 --tp 4 --zero 3 && check qwen3 tp4 base --rtol 1e-5
run qwen3 off 2 3 2 --zero 3 --offload-optimizer cpu && check qwen3 off w2z3 --exact
for s in 1f1b zb1p; do run qwen3 pp2$s 2 3 4 --pp 2 --pp-schedule $s && check qwen3 pp2$s base --exact; done
# Llama attention_bias + mlp_bias (k_proj.bias: Qwen2's bound, KB above): o_proj / down_proj biases added once after the row-parallel sum
run llama_b base 1 3 4 --zero 0
run llama_b tp2sp 4 3 2 --tp 2 --zero 3 --sequence-parallel && check llama_b tp2sp base --rtol 1e-5 $KB
run llama_b pp2zb1p 2 3 4 --pp 2 --pp-schedule zb1p && check llama_b pp2zb1p base --exact
# Gemma 2: ZeRO 3 + CPU offload on 2 ranks, DP 2 x TP 2 with SP (the four replicated norms' weight
# gradients summed over TP), PP 2 1f1b and zb1p (the post norms' weight gradients in W)
run gemma2 base 1 3 4 --zero 0
run gemma2 w2z3off 2 3 2 --zero 3 --offload-optimizer cpu && check gemma2 w2z3off base --rtol 1e-5
run gemma2 tp2sp 4 3 2 --tp 2 --sequence-parallel --zero 3 && check gemma2 tp2sp base --rtol 1e-5
for s in 1f1b zb1p; do run gemma2 pp2$s 2 3 4 --pp 2 --pp-schedule $s && check gemma2 pp2$s base --exact; done
run gemma2 tp2pp2zb 4 3 4 --tp 2 --sequence-parallel --pp 2 --pp-schedule zb1p && check gemma2 tp2pp2zb base --rtol 1e-5
# Gemma 3: the (1 + w) q/k norms replicated over TP (their gradients summed), two RoPE tables
run gemma3 base 1 3 4 --zero 0
run gemma3 w2z3off 2 3 2 --zero 3 --offload-optimizer cpu && check gemma3 w2z3off base --rtol 1e-5
run gemma3 tp2sp 4 3 2 --tp 2 --sequence-parallel --zero 3 && check gemma3 tp2sp base --rtol 1e-5
for s in 1f1b zb1p; do run gemma3 pp2$s 2 3 4 --pp 2 --pp-schedule $s && check gemma3 pp2$s base --exact; done
# Mamba, checkpointing under ZeRO-3 on 2 ranks: selective/full bit-identical to none
run mamba acsel 2 3 2 --zero 3 --activation-checkpoint selective && check mamba acsel w2z3 --exact
run mamba acfull 2 3 2 --zero 3 --activation-checkpoint full && check mamba acfull w2z3 --exact
# Falcon-Mamba
run falcon base 1 3 4 --zero 0
run falcon w2z3 2 3 2 --zero 3 && check falcon w2z3 base --rtol 1e-5
run falcon dp2tp2sp 4 3 2 --tp 2 --sequence-parallel --zero 3 && check falcon dp2tp2sp base --rtol 1e-5
for s in 1f1b zb1p; do run falcon pp2$s 2 3 4 --pp 2 --pp-schedule $s && check falcon pp2$s base --exact; done
run falcon w2z3off 2 3 2 --zero 3 --offload-optimizer cpu && check falcon w2z3off w2z3 --exact
# Granite 4.0-H dense (a mixer and the shared MLP a decoder layer each, the multipliers) and Granite 3 (Llama's
# attention and MLP in one layer, residual_multiplier on both: the attention part's backward takes its own output
# gradient): DP 2 x TP 2 with SP, ZeRO-3 with the optimizer on the CPU (1e-5), PP 2 1f1b and zb1p (bit-identical)
for arch in granite_h granite3; do
  run $arch base 1 3 4 --zero 0
  run $arch w2z3off 2 3 2 --zero 3 --offload-optimizer cpu && check $arch w2z3off base --rtol 1e-5
  run $arch dp2tp2sp 4 3 2 --tp 2 --sequence-parallel --zero 3 && check $arch dp2tp2sp base --rtol 1e-5
  for s in 1f1b zb1p; do run $arch pp2$s 2 3 4 --pp 2 --pp-schedule $s && check $arch pp2$s base --exact; done
done
finish
