/* tests/unit/models/test_actsets.c — a model's activation sets (models/model.h,
 * sl_model_set_nacts / sl_model_use_acts), the seam a pipeline schedule
 * keeps several micro-batches in flight with. Oracle: two micro-batches run
 * one after the other in one set (what the "single" schedule does). The same
 * two run interleaved in two sets (forward A in set 0, forward B in set 1,
 * backward B, backward A, as 1F1B/GPipe order them) must give bit-identical
 * losses and gradients, for Llama (untied), Mistral (tied: the head adds
 * into unit 0 through m->access) and Mamba, under every activation-
 * checkpoint mode. Also: the second set's bytes (exactly twice the first
 * without checkpointing), and refusals (a set out of range, a specs-only
 * model). One process, CPU backend, no FSDP.
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

enum { B = 2, T = 8, NMB = 2 };

static int fwd_all(sl_model *m, world *w) {
  int rc = SL_OK;
  for (int u = 0; u < m->nunits && !rc; u++) rc = m->vt->fwd(m, u, w->params[u]);
  return rc;
}
static int bwd_all(sl_model *m, world *w, float **grads) {
  int rc = SL_OK;
  w->grads = grads;
  for (int u = m->nunits - 1; u >= 0 && !rc; u--) rc = m->vt->bwd(m, u, w->params[u], grads[u]);
  return rc;
}

static int64_t ndiff(float *const *a, float *const *b, const sl_model *m) {
  int64_t d = 0;
  for (int u = 0; u < m->nunits; u++) d += memcmp(a[u], b[u], (size_t)m->units[u].numel * 4) != 0;
  return d;
}

static float **grad_set(const sl_model *m) {
  float **g = calloc((size_t)m->nunits, sizeof *g);
  for (int u = 0; u < m->nunits; u++) g[u] = sl_alloc((size_t)m->units[u].numel * 4, "grads");
  return g;
}
static void free_set(float **g, int U) {
  for (int u = 0; u < U; u++) sl_free(g[u]);
  free(g);
}

static void check_model(const char *label, const char *json, sl_actckpt ac) {
  sl_model_config cfg;
  if (sl_hfconfig_parse(label, json, strlen(json), &cfg)) {
    CHECK(0, "%s: config", label);
    return;
  }
  const sl_ops *o = sl_ops_cpu();
  sl_kctx *k = o->ctx_create(1);
  sl_model *m = NULL;
  int rc = sl_model_create(&cfg, o, k, B, T, ac, &m);
  CHECK(rc == SL_OK && m->nacts == 1 && m->act == 0, "%s ac %d: create with one set", label, (int)ac);
  if (rc) {
    o->ctx_destroy(k);
    return;
  }
  int U = m->nunits;
  int64_t one = m->act_bytes;
  rc = sl_model_set_nacts(m, NMB);
  CHECK(rc == SL_OK && m->nacts == NMB, "%s ac %d: two sets", label, (int)ac);
  CHECK(m->act_bytes > one && m->act_bytes < 2 * one + 1, "%s ac %d: second set adds %lld bytes to %lld", label,
        (int)ac, (long long)(m->act_bytes - one), (long long)one);
  if (ac == SL_AC_NONE)
    CHECK(m->act_bytes == 2 * one, "%s: without checkpointing a set is %lld bytes, the second %lld", label,
          (long long)one, (long long)(m->act_bytes - one));
  CHECK(sl_model_set_nacts(m, 1) == SL_OK && m->nacts == NMB, "%s: fewer sets keeps them", label);
  CHECK(sl_model_use_acts(m, NMB) != SL_OK && sl_model_use_acts(m, -1) != SL_OK, "%s: set out of range", label);

  world w = {calloc((size_t)U, sizeof(float *)), NULL};
  for (int u = 0; u < U; u++) {
    w.params[u] = sl_alloc((size_t)m->units[u].numel * 4, "params");
    sl_model_unit_load(m, u, NULL, 1234, w.params[u]);
  }
  m->access = (sl_unit_access){&w, acc_params, acc_grads, sl_tp_single(), {.rank = 0, .size = 1}};
  int32_t tok[NMB][B * T], tgt[NMB][B * T];
  uint64_t s = 99;
  for (int mb = 0; mb < NMB; mb++)
    for (int i = 0; i < B * T; i++) {
      tok[mb][i] = (int32_t)(sl_splitmix64(&s) % 300);
      tgt[mb][i] = i % 5 == 3 ? -1 : (int32_t)(sl_splitmix64(&s) % 300);
    }
  const float scale = 1.0f / (NMB * B * T);
  /* oracle: one after the other in set 0 */
  float **ref[NMB], **got[NMB];
  double loss_ref[NMB], loss_got[NMB];
  for (int mb = 0; mb < NMB; mb++) {
    ref[mb] = grad_set(m);
    got[mb] = grad_set(m);
  }
  for (int mb = 0; mb < NMB && !rc; mb++) {
    rc = sl_model_use_acts(m, 0);
    sl_model_set_batch(m, tok[mb], tgt[mb], scale);
    if (!rc) rc = fwd_all(m, &w);
    loss_ref[mb] = m->loss_sum;
    if (!rc) rc = bwd_all(m, &w, ref[mb]);
  }
  /* interleaved: forward A (set 0), forward B (set 1), backward B, backward A */
  for (int mb = 0; mb < NMB && !rc; mb++) {
    rc = sl_model_use_acts(m, mb);
    sl_model_set_batch(m, tok[mb], tgt[mb], scale);
    if (!rc) rc = fwd_all(m, &w);
  }
  for (int mb = NMB - 1; mb >= 0 && !rc; mb--) {
    rc = sl_model_use_acts(m, mb);
    loss_got[mb] = m->loss_sum; /* the set's own, kept while the other ran */
    if (!rc) rc = bwd_all(m, &w, got[mb]);
  }
  CHECK(rc == SL_OK, "%s ac %d: runs", label, (int)ac);
  for (int mb = 0; mb < NMB && !rc; mb++) {
    CHECK(loss_got[mb] == loss_ref[mb], "%s ac %d mb %d: loss %.17g interleaved, %.17g in order", label, (int)ac, mb,
          loss_got[mb], loss_ref[mb]);
    int64_t d = ndiff(got[mb], ref[mb], m);
    CHECK(d == 0, "%s ac %d mb %d: %lld units' gradients differ from the in-order run", label, (int)ac, mb,
          (long long)d);
  }
  CHECK(loss_ref[0] != loss_ref[1], "%s: the two micro-batches differ (the test can fail)", label);
  for (int mb = 0; mb < NMB; mb++) {
    free_set(ref[mb], U);
    free_set(got[mb], U);
  }
  free_set(w.params, U);
  sl_model_destroy(m);
  o->ctx_destroy(k);
}

int main(void) {
  sl_actckpt modes[3] = {SL_AC_NONE, SL_AC_SELECTIVE, SL_AC_FULL};
  for (int i = 0; i < 3; i++) {
    check_model("llama", LLAMA, modes[i]);
    check_model("mistral", MISTRAL, modes[i]);
    check_model("mamba", MAMBA, modes[i]);
  }
  sl_model_config cfg;
  sl_model *spec = NULL;
  if (sl_hfconfig_parse("llama", LLAMA, strlen(LLAMA), &cfg) == SL_OK && sl_model_create_specs(&cfg, &spec) == SL_OK) {
    CHECK(spec->nacts == 0 && sl_model_set_nacts(spec, 2) == SL_EINPUT, "specs-only model: no activation sets");
    sl_model_destroy(spec);
  } else {
    CHECK(0, "specs-only model");
  }
  return CHECK_SUMMARY();
}
