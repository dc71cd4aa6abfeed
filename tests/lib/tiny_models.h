/* tests/lib/tiny_models.h — for C tests of the models (test_actsets.c,
 * test_split_bwd.c): tiny configs of each architecture (Llama untied,
 * Mistral tied with a sliding window, Mamba tied) and a unit-access world
 * that hands a model other units' parameters and gradients (tied weights)
 * from plain host arrays. */
#ifndef SL_TESTS_TINY_MODELS_H
#define SL_TESTS_TINY_MODELS_H

#include "base/base.h"

static const char *const LLAMA =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 300,"
    " \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false}";
static const char *const MISTRAL =
    "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 300,"
    " \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"sliding_window\": 5, \"tie_word_embeddings\": true}";
static const char *const MAMBA =
    "{\"architectures\": [\"MambaForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2,"
    " \"state_size\": 8, \"expand\": 2, \"conv_kernel\": 4, \"time_step_rank\": 4, \"vocab_size\": 300,"
    " \"layer_norm_epsilon\": 1e-5, \"tie_word_embeddings\": true}";

/* Parameters and the gradients of the micro-batch being run (tied weights). */
typedef struct {
  float **params; /* (U) */
  float **grads;  /* (U) the current micro-batch's */
} world;

static inline int acc_params(void *user, int u, const float **p) {
  *p = ((world *)user)->params[u];
  return SL_OK;
}
static inline int acc_grads(void *user, int u, float **g) {
  *g = ((world *)user)->grads[u];
  return SL_OK;
}

#endif /* SL_TESTS_TINY_MODELS_H */
