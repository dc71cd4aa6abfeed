/* tests/test_split_bwd.c — the backward split into its input- and weight-
 * gradient halves (models/model.h: stash_numel, bwd_input, bwd_weight;
 * models/llama_split.c, mamba_split.c, lmhead_split.c), which the zb1p
 * pipeline schedule runs. Oracle: the unsplit bwd of every unit. Two
 * micro-batches in two activation sets run forward A, forward B, then the
 * input halves of A and of B (each keeping its own stash), then the weight
 * halves of A and of B, as zb1p defers W: every unit's gradient must equal
 * the unsplit backward's bit for bit, for Llama (untied), Mistral (tied:
 * the head's part of unit 0's gradient comes out of its input half, as the
 * executor sends it to rank 0), Mamba tied and untied with biases, under
 * every activation-checkpoint mode, with 1 and 2 threads. One process, CPU
 * backend, no FSDP (the executor's part: tests/test_pp_zb1p.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "formats/hfconfig.h"
#include "kernels/kernels.h"
#include "models/model.h"
#include "tests/lib/check.h"
#include "tests/lib/tiny_models.h"

static const char *MAMBA_BIAS =
    "{\"architectures\": [\"MambaForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2,"
    " \"state_size\": 8, \"expand\": 2, \"conv_kernel\": 4, \"time_step_rank\": 4, \"vocab_size\": 300,"
    " \"layer_norm_epsilon\": 1e-5, \"use_bias\": true, \"tie_word_embeddings\": false}";

enum { B = 2, T = 8, NMB = 2 };

static float **grad_set(const sl_model *m) {
  float **g = calloc((size_t)m->nunits, sizeof *g);
  for (int u = 0; u < m->nunits; u++) {
    g[u] = sl_alloc((size_t)m->units[u].numel * 4, "grads");
    memset(g[u], 0, (size_t)m->units[u].numel * 4);
  }
  return g;
}
static void free_set(float **g, int U) {
  for (int u = 0; u < U; u++) sl_free(g[u]);
  free(g);
}

static int fwd_mb(sl_model *m, world *w, int set, const int32_t *tok, const int32_t *tgt, float scale) {
  int rc = sl_model_use_acts(m, set);
  sl_model_set_batch(m, tok, tgt, scale);
  for (int u = 0; u < m->nunits && !rc; u++) rc = m->vt->fwd(m, u, w->params[u]);
  return rc;
}

static void check_model(const char *label, const char *json, sl_actckpt ac, int threads) {
  sl_model_config cfg;
  if (sl_hfconfig_parse(label, json, strlen(json), &cfg)) {
    CHECK(0, "%s: config", label);
    return;
  }
  const sl_ops *o = sl_ops_cpu();
  sl_kctx *k = o->ctx_create(threads);
  sl_model *m = NULL;
  int rc = sl_model_create(&cfg, o, k, B, T, ac, &m);
  if (!rc) rc = sl_model_set_nacts(m, NMB);
  CHECK(rc == SL_OK && m->vt->bwd_input && m->vt->bwd_weight && m->vt->stash_numel, "%s: a split backward", label);
  if (rc || !m->vt->bwd_input) {
    sl_model_destroy(m);
    o->ctx_destroy(k);
    return;
  }
  int U = m->nunits, tied = cfg.tie_word_embeddings;
  if (U > 8) {
    CHECK(0, "%s: %d units, the test holds 8", label, U);
    sl_model_destroy(m);
    o->ctx_destroy(k);
    return;
  }
  world w = {calloc((size_t)U, sizeof(float *)), NULL};
  for (int u = 0; u < U; u++) {
    w.params[u] = sl_alloc((size_t)m->units[u].numel * 4, "params");
    sl_model_unit_load(m, u, NULL, 4321, w.params[u]);
  }
  m->access = (sl_unit_access){&w, acc_params, acc_grads, sl_tp_single()};
  int32_t tok[NMB][B * T], tgt[NMB][B * T];
  uint64_t s = 7;
  for (int mb = 0; mb < NMB; mb++)
    for (int i = 0; i < B * T; i++) {
      tok[mb][i] = (int32_t)(sl_splitmix64(&s) % 300);
      tgt[mb][i] = i % 7 == 2 ? -1 : (int32_t)(sl_splitmix64(&s) % 300);
    }
  const float scale = 1.0f / (NMB * B * T);
  float **ref[NMB], **got[NMB], *stash[NMB][8], *tbuf[NMB];
  int64_t head_n = m->units[0].numel;
  for (int mb = 0; mb < NMB; mb++) {
    ref[mb] = grad_set(m);
    got[mb] = grad_set(m);
    tbuf[mb] = sl_alloc((size_t)head_n * 4, "tied");
    for (int u = 0; u < U; u++) stash[mb][u] = sl_alloc((size_t)m->vt->stash_numel(m, u) * 4, "stash");
  }
  /* oracle: forward and unsplit backward of each micro-batch in set 0 */
  for (int mb = 0; mb < NMB && !rc; mb++) {
    rc = fwd_mb(m, &w, 0, tok[mb], tgt[mb], scale);
    w.grads = ref[mb];
    for (int u = U - 1; u >= 0 && !rc; u--) rc = m->vt->bwd(m, u, w.params[u], ref[mb][u]);
  }
  /* split, as zb1p runs it: F A, F B, B A, B B, W A, W B */
  for (int mb = 0; mb < NMB && !rc; mb++) rc = fwd_mb(m, &w, mb, tok[mb], tgt[mb], scale);
  for (int mb = 0; mb < NMB && !rc; mb++) {
    rc = sl_model_use_acts(m, mb);
    w.grads = NULL; /* the input half touches no gradient buffer */
    for (int u = U - 1; u >= 0 && !rc; u--)
      rc = m->vt->bwd_input(m, u, w.params[u], stash[mb][u], u == U - 1 && tied ? tbuf[mb] : NULL);
  }
  for (int mb = 0; mb < NMB && !rc; mb++) {
    rc = sl_model_use_acts(m, mb);
    if (tied) memcpy(got[mb][0], tbuf[mb], (size_t)head_n * 4); /* the head's part first, as rank 0 does */
    for (int u = U - 1; u >= 0 && !rc; u--) rc = m->vt->bwd_weight(m, u, w.params[u], got[mb][u], stash[mb][u]);
  }
  CHECK(rc == SL_OK, "%s ac %d threads %d: runs", label, (int)ac, threads);
  for (int mb = 0; mb < NMB && !rc; mb++)
    for (int u = 0; u < U; u++) {
      int64_t n = m->units[u].numel, bad = 0, nz = 0;
      for (int64_t i = 0; i < n; i++) {
        bad += memcmp(&got[mb][u][i], &ref[mb][u][i], 4) != 0;
        nz += ref[mb][u][i] != 0.0f;
      }
      CHECK(bad == 0 && nz > 0, "%s ac %d threads %d mb %d unit %d: %lld of %lld gradient values differ (%lld nonzero)",
            label, (int)ac, threads, mb, u, (long long)bad, (long long)n, (long long)nz);
    }
  for (int mb = 0; mb < NMB; mb++) {
    free_set(ref[mb], U);
    free_set(got[mb], U);
    sl_free(tbuf[mb]);
    for (int u = 0; u < U; u++) sl_free(stash[mb][u]);
  }
  free_set(w.params, U);
  sl_model_destroy(m);
  o->ctx_destroy(k);
}

int main(void) {
  sl_actckpt modes[3] = {SL_AC_NONE, SL_AC_SELECTIVE, SL_AC_FULL};
  for (int th = 1; th <= 2; th++)
    for (int i = 0; i < 3; i++) {
      check_model("llama", LLAMA, modes[i], th);
      check_model("mistral", MISTRAL, modes[i], th);
      check_model("mamba", MAMBA, modes[i], th);
      check_model("mamba-bias", MAMBA_BIAS, modes[i], th);
    }
  return CHECK_SUMMARY();
}
