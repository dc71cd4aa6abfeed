/* tests/unit/models/test_caps.c — what each architecture declares it
 * supports (models/model.h sl_model_caps, sl_model_caps_of): the flags the
 * engine and planner ask instead of testing the architecture. Llama and
 * Mistral attend, mask documents and split their backward under
 * --no-sync-accum too, --tp divides their heads; Mamba and Mamba-2 are
 * recurrent, have no attention, restart their state at documents, split
 * their backward but not under --no-sync-accum, --tp divides d_inner
 * (Mamba) or n_groups (Mamba-2). A built model carries the same
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

int main(void) {
  one("llama", LLAMA, 1, 4);
  one("mistral", MISTRAL, 1, 4);
  one("mamba", MAMBA, 0, 64);
  one("mamba2", /* --tp must divide n_groups */
      "{\"architectures\": [\"Mamba2ForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_heads\": 8, "
      "\"head_dim\": 8, \"n_groups\": 4, \"state_size\": 8, \"vocab_size\": 300}",
      0, 4);
  sl_model_config cfg;
  sl_model_caps c;
  sl_hfconfig_parse("llama", LLAMA, strlen(LLAMA), &cfg);
  cfg.arch = SL_ARCH_UNKNOWN;
  snprintf(cfg.arch_name, sizeof cfg.arch_name, "GPTNeoXForCausalLM");
  CHECK(sl_model_caps_of(&cfg, &c) == SL_EINPUT && strstr(sl_errmsg(), "GPTNeoXForCausalLM"),
        "unknown architecture refused, named");
  return CHECK_SUMMARY();
}
