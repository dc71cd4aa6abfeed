/* tests/unit/models/test_caps.c — what each architecture declares it
 * supports (models/model.h sl_model_caps, sl_model_caps_of): the flags the
 * engine and planner ask instead of testing the architecture. Llama and
 * Mistral attend, mask documents and split their backward under
 * --no-sync-accum too, --tp divides their heads; Mamba and Mamba-2 are
 * recurrent, have no attention, restart their state at documents, split
 * their backward but not under --no-sync-accum, --tp divides d_inner
 * (Mamba) or, for Mamba-2, its heads (n_groups a power of two: a group is
 * split or shared by the TP ranks) or their gcd with n_groups (another
 * count). Nemotron-H (Mamba-2, attention and MLP
 * layers in one model) has the merge of both kinds' caps
 * (models/decoder.c sl_dec_caps_merge): it attends and is recurrent, splits
 * its backward but not under --no-sync-accum, --tp divides both kinds'
 * widths (their gcd); a pattern of Mamba-2 layers
 * only has Mamba-2's caps. A built model carries the same
 * caps, and its split entries exist exactly when zb_split says so; an
 * unknown architecture is refused naming it.
 */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "formats/hfconfig.h"
#include "models/model.h"
#include "tests/lib/check.h"
#include "tests/lib/tiny_models.h"

static void one(const char *label, const char *json, int attention, int64_t tp_width) {
  sl_model_config cfg;
  sl_model_caps c;
  sl_model *m = NULL;
  if (sl_hfconfig_parse(label, json, strlen(json), &cfg)) {
    CHECK(0, "%s: config parses", label);
    return;
  }
  CHECK(sl_model_caps_of(&cfg, &c) == SL_OK, "%s: caps from the config", label);
  /* every family takes document masks: attention masks across documents, a recurrent state restarts at them */
  CHECK(c.attention == attention && c.doc_mask && c.recurrent == !attention, "%s: attention %d", label, attention);
  CHECK(c.zb_split && c.zb_split_accum == attention, "%s: zb1p split (with --no-sync-accum: %d)", label, attention);
  CHECK(c.tp_width == tp_width, "%s: --tp divides %lld (found %lld)", label, (long long)tp_width,
        (long long)c.tp_width);
  CHECK(sl_model_create_specs(&cfg, &m) == SL_OK, "%s: specs", label);
  if (!m) return;
  CHECK(!memcmp(&m->caps, &c, sizeof c), "%s: the model's caps are the config's", label);
  CHECK(!m->vt->bwd_input == !c.zb_split && !m->vt->bwd_weight == !c.zb_split, "%s: split entries", label);
  sl_model_destroy(m);
}

/* A model of several block kinds (Nemotron-H): every field of its caps as the merge of its kinds' gives it (Llama's:
 * attention, doc masks, split also under --no-sync-accum, bf16 compute, acts and stream, --tp divides the heads;
 * Mamba-2's: recurrent, doc masks, split but not under --no-sync-accum, bf16 compute, fp32 acts and stream, --tp
 * divides the heads (n_groups a power of two)); the built model carries the same caps and its split entries. */
static void merged(const char *label, const char *json, int attention, int64_t tp_width) {
  sl_model_config cfg;
  sl_model_caps c;
  sl_model *m = NULL;
  if (sl_hfconfig_parse(label, json, strlen(json), &cfg)) {
    CHECK(0, "%s: config parses: %s", label, sl_errmsg());
    return;
  }
  CHECK(sl_model_caps_of(&cfg, &c) == SL_OK, "%s: caps from the config", label);
  const sl_model_caps want = {.attention = attention,
                              .doc_mask = 1,
                              .recurrent = 1,
                              .zb_split = 1,
                              .zb_split_accum = 0,
                              .bf16 = 1,
                              .bf16_acts = attention, /* a kind with bf16 buffers packs them */
                              .bf16_stream = 0,
                              .tp_width = tp_width};
  CHECK(c.attention == want.attention && c.doc_mask == want.doc_mask && c.recurrent == want.recurrent,
        "%s: attention %d recurrent %d doc_mask %d (want %d 1 1)", label, c.attention, c.recurrent, c.doc_mask,
        attention);
  CHECK(c.zb_split == want.zb_split && c.zb_split_accum == want.zb_split_accum,
        "%s: zb1p split %d, with --no-sync-accum %d (want 1, 0)", label, c.zb_split, c.zb_split_accum);
  CHECK(c.bf16 == want.bf16 && c.bf16_acts == want.bf16_acts && c.bf16_stream == want.bf16_stream,
        "%s: bf16 %d acts %d stream %d (want 1 %d 0)", label, c.bf16, c.bf16_acts, c.bf16_stream, attention);
  CHECK(c.tp_width == tp_width, "%s: --tp divides %lld (found %lld)", label, (long long)tp_width,
        (long long)c.tp_width);
  CHECK(sl_model_create_specs(&cfg, &m) == SL_OK, "%s: specs", label);
  if (!m) return;
  CHECK(!memcmp(&m->caps, &c, sizeof c), "%s: the model's caps are the config's", label);
  CHECK(m->vt->bwd_input && m->vt->bwd_weight && m->vt->stash_numel, "%s: split entries", label);
  sl_model_destroy(m);
}

int main(void) {
  one("llama", LLAMA, 1, 4);
  one("mistral", MISTRAL, 1, 4);
  one("mamba", MAMBA, 0, 64);
  /* Mamba-2: a power-of-two --tp must divide the heads (n_groups 4, a power of two: T 2 and 4 split the groups, T 8
   * shares each over 2 ranks) */
  one("mamba2", "{\"architectures\": [\"Mamba2ForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_heads\": 8, "
      "\"head_dim\": 8, \"n_groups\": 4, \"state_size\": 8, \"vocab_size\": 300}",
      0, 8);
  /* n_groups 6 of 12 heads: T 2 splits the groups, T 4 neither divides 6 nor is a multiple of it (tp_misfit): 6 */
  one("mamba2 g6", "{\"architectures\": [\"Mamba2ForCausalLM\"], \"hidden_size\": 48, \"num_hidden_layers\": 2, "
      "\"num_heads\": 12, \"head_dim\": 8, \"n_groups\": 6, \"state_size\": 8, \"vocab_size\": 300}",
      0, 6);
  /* Nemotron-H: the merge of the Llama kind's caps (attention, 6 heads) and Mamba-2's (recurrent, 8 heads in 4
   * groups): gcd(6, 8) */
  const char *nh = "{\"architectures\": [\"NemotronHForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48, "
                   "\"hybrid_override_pattern\": \"M*M-\", \"num_attention_heads\": 6, \"num_key_value_heads\": 2, "
                   "\"head_dim\": 8, \"mamba_num_heads\": 8, \"mamba_head_dim\": 8, \"n_groups\": 4, "
                   "\"ssm_state_size\": 8, \"vocab_size\": 300}";
  merged("nemotron-h", nh, 1, 2);
  /* Mamba-2 layers only: one block kind, Mamba-2's caps (--tp divides its 8 heads) */
  const char *nhm = "{\"architectures\": [\"NemotronHForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48, "
                    "\"hybrid_override_pattern\": \"MM\", \"num_attention_heads\": 6, \"num_key_value_heads\": 2, "
                    "\"head_dim\": 8, \"mamba_num_heads\": 8, \"mamba_head_dim\": 8, \"n_groups\": 4, "
                    "\"ssm_state_size\": 8, \"vocab_size\": 300}";
  merged("nemotron-h MM", nhm, 0, 8);
  sl_model_config cfg;
  sl_model_caps c;
  sl_hfconfig_parse("llama", LLAMA, strlen(LLAMA), &cfg);
  cfg.arch = SL_ARCH_UNKNOWN;
  snprintf(cfg.arch_name, sizeof cfg.arch_name, "GPTNeoXForCausalLM");
  CHECK(sl_model_caps_of(&cfg, &c) == SL_EINPUT && strstr(sl_errmsg(), "GPTNeoXForCausalLM"),
        "unknown architecture refused, named");
  return CHECK_SUMMARY();
}
