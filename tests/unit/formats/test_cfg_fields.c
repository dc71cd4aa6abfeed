/* tests/unit/formats/test_cfg_fields.c — the model half of the agreement
 * and checkpoint texts (sl_model_config.fields, engine/agree.c
 * sl_model_canonical) is complete by construction:
 *  - this program is built with formats/hfconfig.c compiled again with
 *    SL_CFG_TEST_FIELD, which makes the reader take one made-up field
 *    ("made_up_field", default 0.25): the text names it without a line
 *    written for it, and two configs differing only there disagree;
 *  - formats/hfconfig.c reads config.json through one accessor (the source
 *    has one json_object_get call);
 *  - every field the issue found missing from the old hand list now makes
 *    two configs disagree, naming the field;
 *  - one model spelled two ways (absent vs transformers' default, a
 *    config.json as --save writes it) gives one text, for every family, so a
 *    resume from a re-saved directory is accepted; Nemotron-H's legacy
 *    field names (mamba_n_groups, mamba_d_conv, attention_head_dim,
 *    layers_block_type, ...) give the text of the modern ones.
 * Prints one line per failure, then "N passed, M failed". */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/agree.h"
#include "formats/hfconfig.h"
#include "tests/lib/check.h"

#ifndef SL_CFG_TEST_FIELD
#error "build with formats/hfconfig.c and SL_CFG_TEST_FIELD (tests/CMakeLists.txt)"
#endif

static char g_dir[256];

static int parse(const char *json, sl_model_config *c) {
  return sl_hfconfig_parse("t/config.json", json, strlen(json), c);
}

/* the checkpoint text (with_init 0) of a config */
static int text_of(const char *json, char *buf, size_t cap) {
  sl_model_config c;
  int rc = parse(json, &c);
  return rc ? rc : sl_model_canonical(&c, 0, buf, cap);
}

/* the key of the first difference of two configs' texts ("" when equal) */
static const char *diff_key(const char *a, const char *b) {
  static char ta[SL_MODEL_CANON_MAX], tb[SL_MODEL_CANON_MAX], key[256];
  char va[512], vb[512];
  key[0] = 0;
  if (text_of(a, ta, sizeof ta) || text_of(b, tb, sizeof tb)) return "(parse failed)";
  if (!sl_canon_diff(ta, tb, key, sizeof key, va, vb, sizeof va)) key[0] = 0;
  return key;
}

#define LL "\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 4, \"vocab_size\": 100, "
/* Nemotron-H's fields but the ones transformers renamed (the layer kinds, head_dim, n_groups, conv_kernel, ...) */
#define NEMOTRON_H                                                                                                     \
  "{\"architectures\": [\"NemotronHForCausalLM\"], " LL "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "     \
  "\"mamba_num_heads\": 8, \"mamba_head_dim\": 8, \"ssm_state_size\": 8, \"use_conv_bias\": false, "
static const struct {
  const char *name, *json;
} k_fam[] = {
    {"llama", "{\"architectures\": [\"LlamaForCausalLM\"], " LL "\"num_attention_heads\": 4}"},
    {"mistral", "{\"architectures\": [\"MistralForCausalLM\"], " LL "\"num_attention_heads\": 4, "
                "\"num_key_value_heads\": 2, \"sliding_window\": 8}"},
    {"qwen2", "{\"architectures\": [\"Qwen2ForCausalLM\"], " LL "\"num_attention_heads\": 4, "
              "\"num_key_value_heads\": 2, \"use_sliding_window\": false, \"sliding_window\": 32768, "
              "\"max_window_layers\": 21}"},
    {"qwen2 windowed", "{\"architectures\": [\"Qwen2ForCausalLM\"], " LL "\"num_attention_heads\": 4, "
                       "\"num_key_value_heads\": 2, \"use_sliding_window\": true, \"sliding_window\": 8, "
                       "\"max_window_layers\": 2}"},
    {"qwen3", "{\"architectures\": [\"Qwen3ForCausalLM\"], " LL "\"num_attention_heads\": 4, "
              "\"num_key_value_heads\": 2, \"head_dim\": 8, \"layer_types\": [\"full_attention\", "
              "\"full_attention\", \"full_attention\", \"full_attention\"]}"},
    {"mixtral", "{\"architectures\": [\"MixtralForCausalLM\"], " LL "\"num_attention_heads\": 4, "
                "\"num_key_value_heads\": 2, \"num_local_experts\": 4}"},
    {"qwen3_moe", "{\"architectures\": [\"Qwen3MoeForCausalLM\"], " LL "\"num_attention_heads\": 4, "
                  "\"num_key_value_heads\": 2, \"head_dim\": 8, \"num_experts\": 4, \"num_experts_per_tok\": 2, "
                  "\"moe_intermediate_size\": 16, \"mlp_only_layers\": []}"},
    {"gemma2", "{\"architectures\": [\"Gemma2ForCausalLM\"], " LL "\"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2, \"head_dim\": 8, \"sliding_window\": 8}"},
    {"gemma3_text", "{\"architectures\": [\"Gemma3ForCausalLM\"], " LL "\"num_attention_heads\": 4, "
                    "\"num_key_value_heads\": 2, \"head_dim\": 8, \"sliding_window\": 8, "
                    "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 8.0}}"},
    {"llama3 yarn", "{\"model_type\": \"llama\", " LL "\"num_attention_heads\": 4, \"max_position_embeddings\": 4096, "
                    "\"eos_token_id\": [5, 6], \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                    "\"mscale\": 0.707, \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 1024}}"},
    /* every field with a legacy spelling given, and none of them (an absent legacy name leaves no line: a
       config.json without chunk_size, expand, time_step_min ... re-saved reads the same) */
    {"nemotron_h",
     NEMOTRON_H "\"hybrid_override_pattern\": \"M*M-\", \"head_dim\": 8, \"n_groups\": 2, "
                "\"conv_kernel\": 4, \"chunk_size\": 16, \"expand\": 2, \"time_step_min\": 0.002, "
                "\"time_step_max\": 0.2, \"time_step_floor\": 0.0002, \"time_step_limit\": [0.0, Infinity]}"},
    {"nemotron_h bare", NEMOTRON_H "\"hybrid_override_pattern\": \"M*M-\", \"head_dim\": 8, \"n_groups\": 2}"},
    /* Granite 4.0-H: two decoder layers an HF layer, its multipliers */
    {"granitemoehybrid",
     "{\"architectures\": [\"GraniteMoeHybridForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 3, "
     "\"vocab_size\": 100, \"layer_types\": [\"mamba\", \"attention\", \"mamba\"], \"num_attention_heads\": 4, "
     "\"num_key_value_heads\": 2, \"shared_intermediate_size\": 48, \"num_local_experts\": 0, "
     "\"mamba_n_heads\": 8, \"mamba_d_state\": 8, \"embedding_multiplier\": 12, \"residual_multiplier\": 0.22, "
     "\"attention_multiplier\": 0.0625, \"logits_scaling\": 4, \"tie_word_embeddings\": true}"},
    {"mamba", "{\"architectures\": [\"MambaForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2, "
              "\"vocab_size\": 100, \"state_size\": 8}"},
    {"falcon_mamba", "{\"model_type\": \"falcon_mamba\", \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                     "\"vocab_size\": 100, \"state_size\": 8, \"mixer_rms_eps\": 1e-5}"},
    {"mamba2", "{\"model_type\": \"mamba2\", \"hidden_size\": 32, \"num_hidden_layers\": 2, \"vocab_size\": 100, "
               "\"state_size\": 8, \"num_heads\": 8, \"head_dim\": 8, \"n_groups\": 2, "
               "\"time_step_limit\": [0.0, Infinity], \"time_step_rank\": \"auto\"}"},
    {"mamba2 clamped", "{\"architectures\": [\"Mamba2ForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                       "\"vocab_size\": 100, \"state_size\": 8, \"num_heads\": 4, \"head_dim\": 16, "
                       "\"n_groups\": 1, \"time_step_limit\": [0.001, 0.1], \"note\": \"Infinity, NaN\"}"},
};

/* One model, two spellings: the config as given and as --save writes it. */
static void test_saved_is_same(void) {
  for (size_t i = 0; i < sizeof k_fam / sizeof k_fam[0]; i++) {
    sl_model_config a, b;
    char p[512];
    snprintf(p, sizeof p, "%s/%zu.json", g_dir, i);
    int rc = parse(k_fam[i].json, &a);
    rc = rc ? rc : sl_hfconfig_save(p, &a);
    rc = rc ? rc : sl_hfconfig_load(p, &b);
    CHECK(rc == 0 && !strcmp(a.fields, b.fields),
          "%s: the fields read from a config.json --save wrote equal the "
          "original's\n--- original\n%s--- saved\n%s",
          k_fam[i].name, a.fields, rc ? "" : b.fields);
  }
  /* absent = transformers' default (MixtralConfig: rope_theta 1e6, rms_norm_eps 1e-5) */
  CHECK(!*diff_key(k_fam[5].json, "{\"architectures\": [\"MixtralForCausalLM\"], " LL
                                  "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_local_experts\": 4, "
                                  "\"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-05}"),
        "mixtral: absent rope_theta / rms_norm_eps = MixtralConfig's 1e6 / 1e-5 in the text");
}

/* Nemotron-H's legacy spellings (NemotronHConfig.__post_init__ renames mamba_n_groups, mamba_d_conv, mamba_chunk_size,
 * mamba_conv_bias, mamba_dt_*; older configs say attention_head_dim; layers_block_type / layer_types, with the old
 * or transformers 5's kind names, instead of hybrid_override_pattern): the same model, the same text. */
static void test_nemotron_legacy(void) {
  const char *modern = NEMOTRON_H "\"hybrid_override_pattern\": \"M*M-\", \"head_dim\": 8, \"n_groups\": 2, "
                                  "\"conv_kernel\": 4, \"chunk_size\": 16, \"expand\": 2, \"time_step_min\": 0.002, "
                                  "\"time_step_max\": 0.2, \"time_step_floor\": 0.0002}";
  static const struct {
    const char *name, *json;
  } k[] = {
      {"mamba_n_groups, mamba_d_conv, attention_head_dim, layers_block_type (mamba / attention / mlp)",
       "{\"architectures\": [\"NemotronHForCausalLM\"], " LL "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
       "\"mamba_num_heads\": 8, \"mamba_head_dim\": 8, \"ssm_state_size\": 8, \"mamba_conv_bias\": false, "
       "\"layers_block_type\": [\"mamba\", \"attention\", \"mamba\", \"mlp\"], \"attention_head_dim\": 8, "
       "\"mamba_n_groups\": 2, \"mamba_d_conv\": 4, \"mamba_chunk_size\": 16, \"mamba_expand\": 2, "
       "\"mamba_dt_min\": 0.002, \"mamba_dt_max\": 0.2, \"mamba_dt_init_floor\": 0.0002}"},
      {"layer_types (linear_attention / full_attention / mlp)",
       NEMOTRON_H "\"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\", \"mlp\"], "
                  "\"head_dim\": 8, \"n_groups\": 2, \"conv_kernel\": 4, \"chunk_size\": 16, \"expand\": 2, "
                  "\"time_step_min\": 0.002, \"time_step_max\": 0.2, \"time_step_floor\": 0.0002}"},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    const char *d = diff_key(modern, k[i].json);
    CHECK(!*d, "nemotron_h: %s = the modern names (the texts differ at '%s')", k[i].name, d);
  }
  /* the control: one layer kind changed in the legacy list is another model (the texts differ at the pattern) */
  const char *other =
      "{\"architectures\": [\"NemotronHForCausalLM\"], " LL "\"num_attention_heads\": 4, "
      "\"num_key_value_heads\": 2, \"mamba_num_heads\": 8, \"mamba_head_dim\": 8, \"ssm_state_size\": 8, "
      "\"mamba_conv_bias\": false, \"layers_block_type\": [\"mamba\", \"mlp\", \"mamba\", \"mlp\"], "
      "\"attention_head_dim\": 8, \"mamba_n_groups\": 2, \"mamba_d_conv\": 4, \"mamba_chunk_size\": 16, "
      "\"mamba_expand\": 2, \"mamba_dt_min\": 0.002, \"mamba_dt_max\": 0.2, \"mamba_dt_init_floor\": 0.0002}";
  CHECK(!strcmp(diff_key(modern, other), "model.hybrid_override_pattern"),
        "nemotron_h: another layer list is another model (the texts differ at '%s')", diff_key(modern, other));
}

/* Every field the old hand list missed now tells two models apart. */
static void test_fields_differ(void) {
  static const struct {
    int fam;
    const char *add, *key;
  } k[] = {
      {5, ", \"num_experts_per_tok\": 1}", "model.num_experts_per_tok"},
      {6, ", \"norm_topk_prob\": true}", "model.norm_topk_prob"},
      {7, ", \"attn_logit_softcapping\": 20.0}", "model.attn_logit_softcapping"},
      {7, ", \"final_logit_softcapping\": 20.0}", "model.final_logit_softcapping"},
      {7, ", \"query_pre_attn_scalar\": 64}", "model.query_pre_attn_scalar"},
      {8, ", \"rope_local_base_freq\": 20000.0}", "model.rope_local_base_freq"},
      {8, ", \"sliding_window_pattern\": 2}", "model.layer_types"},
      {5, ", \"router_aux_loss_coef\": 0.5}", "model.router_aux_loss_coef"},
      {5, ", \"output_router_logits\": true}", "model.output_router_logits"},
      {0, ", \"bos_token_id\": 7}", "model.bos_token_id"},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    const char *base = k_fam[k[i].fam].json;
    char mod[2048];
    snprintf(mod, sizeof mod, "%.*s%s", (int)(strlen(base) - 1), base, k[i].add);
    const char *got = diff_key(base, mod);
    CHECK(!strcmp(got, k[i].key), "%s%s: the texts differ at '%s' (want '%s')", k_fam[k[i].fam].name, k[i].add, got,
          k[i].key);
  }
  /* YaRN: mscale and attention_factor reach the text through the attention factor they give */
  const char *y = k_fam[9].json;
  char mod[2048];
  const char *m = strstr(y, "0.707");
  snprintf(mod, sizeof mod, "%.*s0.8%s", (int)(m - y), y, m + 5);
  CHECK(!strcmp(diff_key(y, mod), "model.rope_scaling.attention_factor"), "yarn mscale: differ at %s",
        diff_key(y, mod));
}

/* transformers 5 writes rope_parameters (rope_theta inside it) instead of
 * rope_theta + rope_scaling: the same model, the same text. */
static void test_rope_parameters(void) {
#define LLAMA "{\"architectures\": [\"LlamaForCausalLM\"], " LL "\"num_attention_heads\": 4, "
  const char *v4 = LLAMA "\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                         "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                         "\"original_max_position_embeddings\": 8192}}";
  const char *v5 = LLAMA "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, "
                         "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                         "\"original_max_position_embeddings\": 8192}}";
  CHECK(!*diff_key(v4, v5), "llama3: rope_parameters (transformers 5) = rope_theta + rope_scaling (differ at '%s')",
        diff_key(v4, v5));
  const char *p4 = LLAMA "\"rope_theta\": 500000.0}", *p5 = LLAMA "\"rope_parameters\": {\"rope_type\": \"default\", "
                                                                  "\"rope_theta\": 500000.0}}";
  CHECK(!*diff_key(p4, p5), "plain: rope_parameters' rope_theta = the top-level rope_theta (differ at '%s')",
        diff_key(p4, p5));
  sl_model_config c;
  CHECK(parse(p5, &c) == 0 && c.rope_theta == 500000.0, "rope_parameters.rope_theta is the model's theta (%g)",
        c.rope_theta);
  const char *both = LLAMA "\"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_type\": \"default\", "
                           "\"rope_theta\": 500000.0}}";
  CHECK(parse(both, &c) == SL_EINPUT && strstr(sl_errmsg(), "disagree"), "rope_theta and rope_parameters.rope_theta "
                                                                         "disagreeing: refused");
  const char *g4 = "{\"architectures\": [\"Gemma3ForCausalLM\"], " LL "\"num_attention_heads\": 4, "
                   "\"num_key_value_heads\": 2, \"head_dim\": 8, \"rope_theta\": 1000000.0, \"rope_local_base_freq\": "
                   "10000.0, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}}";
  const char *g5 = "{\"architectures\": [\"Gemma3ForCausalLM\"], " LL "\"num_attention_heads\": 4, "
                   "\"num_key_value_heads\": 2, \"head_dim\": 8, \"rope_parameters\": {\"full_attention\": "
                   "{\"rope_type\": \"linear\", \"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\": "
                   "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}}}";
  CHECK(!*diff_key(g4, g5), "gemma3: rope_parameters per layer type = the transformers 4 fields (differ at '%s')",
        diff_key(g4, g5));
  const char *g5b = "{\"architectures\": [\"Gemma3ForCausalLM\"], " LL "\"num_attention_heads\": 4, "
                    "\"num_key_value_heads\": 2, \"head_dim\": 8, \"rope_parameters\": {\"full_attention\": "
                    "{\"rope_type\": \"linear\", \"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\": "
                    "{\"rope_type\": \"default\", \"rope_theta\": 20000.0}}}";
  CHECK(!strcmp(diff_key(g4, g5b), "model.rope_local_base_freq"), "gemma3: the local layers' theta differs (at '%s')",
        diff_key(g4, g5b));
#undef LLAMA
}

/* The reader takes a field it has never taken before: the text has it. */
static void test_made_up_field(void) {
  char t[SL_MODEL_CANON_MAX];
  CHECK(text_of(k_fam[0].json, t, sizeof t) == 0 && strstr(t, "\nmodel.made_up_field=0.25\n"),
        "a made-up field the reader takes is in the text without a line written for it:\n%s", t);
  char mod[2048];
  snprintf(mod, sizeof mod, "%.*s, \"made_up_field\": 0.5}", (int)(strlen(k_fam[0].json) - 1), k_fam[0].json);
  CHECK(!strcmp(diff_key(k_fam[0].json, mod), "model.made_up_field"),
        "two configs differing only in the made-up field disagree (at '%s')", diff_key(k_fam[0].json, mod));
}

/* The one accessor: formats/hfconfig.c reads config.json's members only through jget. */
static void test_one_accessor(void) {
  const char *src = getenv("SL_SRC");
  char p[1024];
  snprintf(p, sizeof p, "%s/formats/hfconfig.c", src ? src : ".");
  FILE *f = fopen(p, "r");
  int calls = 0, foreach = 0;
  char line[4096];
  while (f && fgets(line, sizeof line, f)) {
    calls += strstr(line, "json_object_get(") != NULL;
    foreach
      += strstr(line, "json_object_foreach") != NULL || strstr(line, "json_object_iter") != NULL;
  }
  if (f) fclose(f);
  CHECK(f && calls == 1 && foreach == 0,
        "%s reads config.json members in one place (json_object_get calls: %d, iterations: %d)", p, calls, foreach);
}

/* Python's bare Infinity / NaN (Mamba-2's time_step_limit): read as numbers
 * outside strings, left alone inside them, refused by a field that must be
 * finite (naming it). */
static void test_nonfinite(void) {
  sl_model_config c;
  const char *m2 = k_fam[sizeof k_fam / sizeof k_fam[0] - 2].json,
             *m2c = k_fam[sizeof k_fam / sizeof k_fam[0] - 1].json;
  CHECK(parse(m2, &c) == 0 && c.arch == SL_ARCH_MAMBA2 && c.dt_limit[0] == 0.0 && isinf(c.dt_limit[1]) &&
            c.ssm_heads == 8 && c.ssm_groups == 2 && c.intermediate_size == 64,
        "mamba2: time_step_limit [0.0, Infinity] read as (0, inf), model_type gives the family");
  CHECK(parse(m2c, &c) == 0 && c.dt_limit[0] == 0.001 && c.dt_limit[1] == 0.1,
        "mamba2: a finite time_step_limit, and Infinity / NaN inside a string stay a string");
  int rc = parse("{\"architectures\": [\"Mamba2ForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2, "
                 "\"vocab_size\": 100, \"num_heads\": 8, \"head_dim\": 8, \"layer_norm_epsilon\": NaN}",
                 &c);
  CHECK(rc == SL_EINPUT && strstr(sl_errmsg(), "layer_norm_epsilon") && strstr(sl_errmsg(), "finite"),
        "a NaN where a finite number is needed is refused naming the field: %s", sl_errmsg());
  rc = parse("{\"architectures\": [\"Mamba2ForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2, "
             "\"vocab_size\": 100, \"num_heads\": 6, \"head_dim\": 8}",
             &c);
  CHECK(rc == SL_EINPUT && strstr(sl_errmsg(), "num_heads"),
        "num_heads x head_dim other than expand x hidden_size is refused: %s", sl_errmsg());
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/sl_cfg_fields.XXXXXX");
  if (!mkdtemp(g_dir)) return 1;
  test_saved_is_same();
  test_fields_differ();
  test_nemotron_legacy();
  test_rope_parameters();
  test_made_up_field();
  test_one_accessor();
  test_nonfinite();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  if (system(cmd)) printf("note: could not remove %s\n", g_dir);
  return CHECK_SUMMARY();
}
