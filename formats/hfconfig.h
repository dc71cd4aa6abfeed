/* formats/hfconfig.h — the model config: a Hugging Face config.json (Llama,
 * Mistral, Qwen2, Mamba; also the original state-spaces Mamba config) parsed and
 * validated into sl_model_config, and written back in the form transformers
 * 4.x loads. Field meanings and defaults: docs/formats.md.
 */
#ifndef SL_HFCONFIG_H
#define SL_HFCONFIG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SL_ARCH_UNKNOWN = 0,
  SL_ARCH_LLAMA,
  SL_ARCH_MISTRAL,
  SL_ARCH_MAMBA,
  SL_ARCH_QWEN2,
  SL_ARCH_QWEN3,
  SL_ARCH_MIXTRAL,
  SL_ARCH_QWEN3_MOE,
  SL_ARCH_GEMMA2,
  SL_ARCH_GEMMA3, /* Gemma3ForCausalLM (gemma3_text) */
  SL_ARCH_MAMBA2, /* Mamba2ForCausalLM (mamba2) */
  SL_ARCH_NEMOTRON_H, /* NemotronHForCausalLM (nemotron_h): Mamba-2, attention and MLP layers */
  SL_ARCH_GRANITE_H,  /* GraniteMoeHybridForCausalLM (granitemoehybrid): Granite 4.0-H, dense or with experts */
  SL_ARCH_GRANITE     /* GraniteForCausalLM (granite): Granite 3.x, Llama's layers with the muP multipliers */
} sl_arch;

/* config.json's rope_scaling (docs/formats.md): the rules of transformers'
 * modeling_rope_utils.py that give fixed frequencies. "dynamic" (NTK, which
 * changes with the sequence length at inference) and others are refused. */
typedef enum { SL_ROPE_DEFAULT = 0, SL_ROPE_LINEAR, SL_ROPE_LLAMA3, SL_ROPE_YARN } sl_rope_type;

typedef struct {
  sl_rope_type type;                        /* SL_ROPE_DEFAULT: absent, null, or "default" */
  double factor;                            /* linear, llama3, yarn */
  double low_freq_factor, high_freq_factor; /* llama3 */
  int64_t original_max_position_embeddings; /* llama3 (required); yarn (else max_position_embeddings) */
  double beta_fast, beta_slow;              /* yarn: default 32, 1 */
  int truncate;                             /* yarn: floor/ceil the correction range (default true) */
  double attention_factor;                  /* yarn: cos/sin multiplier, as HF derives it */
  int attention_factor_given;               /* yarn: the file set attention_factor */
  double mscale, mscale_all_dim;            /* yarn: 0 = absent */
} sl_rope_scaling;

const char *sl_rope_type_name(sl_rope_type t); /* "default", "linear", "llama3", "yarn" */

#define SL_MAX_EOS 8           /* eos_token_id entries kept */
#define SL_CFG_MAX_LAYERS 1024 /* num_hidden_layers' bound (sl_hfconfig_validate) */
#define SL_CFG_FIELDS_MAX 4096 /* sl_model_config.fields' capacity */

typedef struct {
  sl_arch arch;
  char arch_name[64]; /* "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                         "MambaForCausalLM", "FalconMambaForCausalLM" (arch SL_ARCH_MAMBA with mixer_rms) */
  /* common */
  int64_t hidden_size;                /* H */
  int64_t intermediate_size;          /* MLP width (Llama/Mistral); expand*H (Mamba) */
  int64_t num_hidden_layers;          /* L */
  int64_t vocab_size;                 /* V (state-spaces: rounded up to pad_vocab_size_multiple) */
  int64_t max_position_embeddings;    /* informational (RoPE has no table) */
  int tie_word_embeddings;            /* lm_head shares the embedding */
  double initializer_range;           /* std of normal init (default 0.02) */
  int64_t bos_token_id, eos_token_id; /* -1 = unset; eos: the first when the file gives a list */
  int64_t eos_token_ids[SL_MAX_EOS];  /* eos_token_id as a list (Llama 3.x Instruct), n_eos of them */
  int n_eos;                          /* 0: unset; 1: an integer; more: a list */
  /* Llama / Mistral / Qwen2 */
  int64_t num_attention_heads;  /* nh */
  int64_t num_key_value_heads;  /* nkv (default nh); nh % nkv == 0 */
  int64_t head_dim;             /* hd (default H / nh), even */
  double rms_norm_eps;          /* default 1e-6 */
  double rope_theta;            /* default 10000 */
  sl_rope_scaling rope_scaling; /* default: none */
  int64_t sliding_window;       /* the window of a sliding layer (layer_sliding); 0 = none (also for null;
                                   Qwen2 / Qwen3: 0 unless use_sliding_window) */
  int qkv_bias;                 /* q/k/v projections have a bias (Qwen2; Llama/Qwen3 attention_bias) */
  int o_bias;                   /* o_proj has a bias (Llama/Qwen3 attention_bias; never Qwen2) */
  int mlp_bias;                 /* gate/up/down projections have a bias (Llama mlp_bias) */
  int qk_norm;                  /* per-head RMSNorm of q and k over head_dim before RoPE (Qwen3) */
  /* mixture of experts (Mixtral; docs/models.md): 0 experts = a dense MLP */
  int64_t moe_experts;      /* E: num_local_experts */
  int64_t moe_topk;         /* k: num_experts_per_tok */
  int64_t moe_intermediate; /* an expert's MLP width (Mixtral: intermediate_size; Qwen3-MoE: moe_intermediate_size) */
  int moe_norm_topk; /* renormalise the k routing weights to sum 1 (Mixtral: always; Qwen3-MoE: norm_topk_prob) */
  /* Nemotron-H's MoE layers ('E': transformers' NemotronHMoE, DeepSeek-V3's router): sigmoid scores, the routed
     weights times routed_scaling_factor, a shared expert beside the routed ones; the others: 0, 0, 0 */
  int moe_sigmoid;                 /* the router's scores are sigmoid(logits), not their softmax */
  int moe_fused;                   /* the experts' weights are fused HF tensors, one per projection holding every
                                      expert (Granite 4.0-H: block_sparse_moe.input_linear (E, 2I, C) gate | up,
                                      output_linear (E, C, I)), not one tensor per expert and projection */
  double moe_routed_scale;         /* routed_scaling_factor (0: 1) */
  int64_t moe_shared_intermediate; /* moe_shared_expert_intermediate_size: the shared expert's width (0: none) */
  double router_aux_loss_coef; /* kept and written back; the aux loss runs only with output_router_logits */
  int output_router_logits;    /* transformers adds the load-balancing loss only then (refused: not implemented) */
  /* the engine's routing options (the trainer's --moe-* flags; never read from or written to config.json) */
  double moe_capacity_factor; /* Megatron-Core's capacity factor (0: dropless) */
  double moe_z_loss_coef;     /* the router z-loss's coefficient (0: none) */
  int moe_balance;            /* SL_MOE_BALANCE_AUX (0) | _BIAS | _NONE */
  double moe_bias_rate;       /* _BIAS: the expert bias's update rate */
  /* Gemma 2 / Gemma 3 text (models/llama.c's Gemma options, docs/models.md) */
  int gemma;                      /* (1 + w) norms, four per layer, embeddings * sqrt(H), tanh-GELU GeGLU */
  double attn_logit_softcapping;  /* 0 = none (also for null) */
  double final_logit_softcapping; /* 0 = none (also for null) */
  double query_pre_attn_scalar;   /* scores * this^-0.5; 0 = head_dim */
  int window_every;               /* 0: sliding_window on every layer; k: on layers i with (i+1) % k != 0
                                     (Gemma 2: 2; Gemma 3: sliding_window_pattern, 6) */
  double rope_local_base_freq;    /* Gemma 3: the sliding layers' RoPE base (no rope_scaling); 0: none */
  /* per-layer attention type (transformers' layer_types): 1 = "sliding_attention" (keys within
     sliding_window), 0 = "full_attention". Mistral / Mixtral: every layer when sliding_window > 0;
     Gemma: window_every's pattern or layer_types; Qwen2 / Qwen3: use_sliding_window with layers
     i >= max_window_layers, or layer_types. Read through sl_cfg_layer_window. */
  unsigned char layer_sliding[SL_CFG_MAX_LAYERS];
  int64_t max_window_layers; /* Qwen2 / Qwen3: kept for the saved config.json (default 28) */
  /* Mamba */
  int64_t state_size;                                                    /* N (d_state), default 16 */
  int64_t expand;                                                        /* default 2 */
  int64_t conv_kernel;                                                   /* d_conv, default 4 */
  int64_t time_step_rank;                                                /* R (dt_rank); "auto" = ceil(H / 16) */
  double layer_norm_epsilon;                                             /* RMSNorm eps, default 1e-5 */
  int use_bias;                                                          /* in_proj/out_proj bias, default false */
  int use_conv_bias;                                                     /* default true */
  int residual_in_fp32;                                                  /* default true */
  double time_step_min, time_step_max, time_step_floor, time_step_scale; /* dt init */
  int ssm_original_format;         /* 1: state-spaces config.json (d_model, n_layer, ...);
                                      tensors named backbone.embedding.weight */
  int64_t pad_vocab_size_multiple; /* state-spaces only (1 otherwise) */
  int mixer_rms;                   /* Falcon-Mamba (FalconMambaForCausalLM): weightless RMSNorm of dt, B, C */
  double mixer_rms_eps;            /* its eps (mixer_rms_eps, default 1e-6) */
  /* Mamba-2 (Mamba2ForCausalLM; also state_size, expand, conv_kernel, layer_norm_epsilon, use_bias,
     use_conv_bias, residual_in_fp32 and the dt init fields above) */
  int64_t ssm_heads;    /* num_heads (default 128); ssm_heads * ssm_head_dim = intermediate_size */
  int64_t ssm_head_dim; /* head_dim (default 64) */
  int64_t ssm_groups;   /* n_groups (default 8): heads share B and C by groups of ssm_heads / ssm_groups */
  int64_t ssm_chunk;    /* chunk_size (default 256): kept and written back (the scan's own chunk is the engine's) */
  double dt_limit[2];   /* time_step_limit (default [0, Infinity]): the clamp of softplus(dt + dt_bias) */
  /* hybrids (Nemotron-H): each layer's kind as Megatron-Core's --hybrid-layer-pattern letters, 'M' Mamba-2,
     '*' attention, '-' MLP, 'E' MoE; "" for a family with one kind of layer */
  char layer_pattern[SL_CFG_MAX_LAYERS + 1];
  int mlp_relu2; /* the MLP is up_proj -> relu(x)^2 -> down_proj, no gate (Nemotron-H's mlp_hidden_act relu2) */
  int no_rope;   /* attention without position embeddings (Nemotron-H, Granite 4.0-H's "nope") */
  /* Granite 4.0-H: each HF layer is two decoder layers (layer_div 2: a mixer sub-layer, Mamba-2 or attention,
     then an MLP sub-layer), so num_hidden_layers and layer_pattern count the decoder's and hf_layers the
     file's; its muP multipliers (0 or 1: none) */
  int layer_div;        /* decoder layers per HF layer (0: 1) */
  int64_t hf_layers;    /* config.json's num_hidden_layers when layer_div > 1 */
  double residual_mult; /* residual_multiplier: each sub-layer's output times it before the residual add */
  double embedding_mult; /* embedding_multiplier */
  double attention_mult; /* attention_multiplier: the attention scores' scale (instead of head_dim^-0.5) */
  double logits_scaling; /* the logits divided by it */
  /* Every config.json field the reader looked at, as sorted "key=value\n" lines: numbers and
     booleans after defaults ("rms_norm_eps=1.0000000000000001e-05", "tie_word_embeddings=0"),
     anything else as compact JSON or "absent" (long lists as a hash); nested objects' fields as
     "rope_scaling.factor=...". The model half of the rank agreement and checkpoint texts
     (engine/agree.c): complete by construction, since every read of config.json goes through one
     accessor (formats/hfconfig.c, jget) that records it; a field a new family reads is in the text
     without a line written for it. */
  char fields[SL_CFG_FIELDS_MAX];
} sl_model_config;
enum { SL_MOE_BALANCE_AUX = 0, SL_MOE_BALANCE_BIAS = 1, SL_MOE_BALANCE_NONE = 2 };

/* Whether decoder layer l's feed-forward is a mixture of experts: every layer of Mixtral / Qwen3-MoE, a
   hybrid's 'E' layers (Nemotron-H); 0 for a dense model. */
int sl_cfg_moe_layer(const sl_model_config *c, int64_t l);
/* Its count over the decoder's layers. */
int64_t sl_cfg_moe_layers(const sl_model_config *c);

/* Layer l's attention window: sliding_window on a sliding layer, else 0 (full causal). */
int64_t sl_cfg_layer_window(const sl_model_config *c, int64_t l);

const char *
sl_arch_name(sl_arch a); /* "llama", "mistral", "qwen2", "qwen3", "mamba", "gemma2", "gemma3_text", "mamba2" */

/* Parses and validates config.json text (len bytes, need not be 0-terminated).
 * path_for_msgs is only used in messages. This is the fuzzing entry point. */
int sl_hfconfig_parse(const char *path_for_msgs, const char *json_text, size_t len, sl_model_config *out);
/* Reads path (a config.json) and parses it. */
int sl_hfconfig_load(const char *path, sl_model_config *out);
/* Checks the derived invariants of a filled config (parse calls it too). */
int sl_hfconfig_validate(const char *path_for_msgs, const sl_model_config *cfg);
/* Writes a config.json transformers 4.x loads for cfg's architecture (always
 * the HF form, also for a state-spaces input), atomically. */
int sl_hfconfig_save(const char *path, const sl_model_config *cfg);
/* The same with torch_dtype "float32" | "bfloat16" | "float16" (the saved
 * weights' dtype; sl_hfconfig_save writes "float32"). */
int sl_hfconfig_save_as(const char *path, const sl_model_config *cfg, const char *torch_dtype);

#ifdef __cplusplus
}
#endif
#endif /* SL_HFCONFIG_H */
