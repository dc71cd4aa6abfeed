/* models/vocab_parallel.c — the vocabulary-parallel embedding and the
 * loss-parallel LM head + cross-entropy (models/vocab_parallel.h): the
 * kernels' slice ops (kernels/kernels.h vocab_embedding_*, lmhead_vp_*)
 * combined through the TP group's all-reduces of m->access.tp. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "models/vocab_parallel.h"
#include "models/linear.h"

#include "base/base.h"

int sl_vocab_split_make(int64_t V, int T, int rank, sl_vocab_split *out) {
  if (V < 1) return sl_fail(SL_EINPUT, "vocabulary split: vocab_size must be >= 1, found %lld", (long long)V);
  if (T < 1) return sl_fail(SL_EINPUT, "vocabulary split: the TP degree must be >= 1, found %d", T);
  if (rank < 0 || rank >= T)
    return sl_fail(SL_EINPUT, "vocabulary split: TP rank must be in [0, %d), found %d", T, rank);
  sl_vocab_split s = {.V = V, .T = T, .rank = rank};
  s.Vl = (V + T - 1) / T;
  s.Vp = s.Vl * T;
  s.v0 = s.Vl * rank;
  s.valid = V - s.v0 < 0 ? 0 : V - s.v0 > s.Vl ? s.Vl : V - s.v0;
  *out = s;
  return SL_OK;
}

/* The model's TP group must be the one the split was made for. */
static int group_matches(const sl_model *m, const sl_vocab_split *vs, const char *what) {
  const sl_tp_group *g = &m->access.tp;
  if (g->size != vs->T || g->rank != vs->rank)
    return sl_fail(SL_EINTERNAL,
                   "%s: the vocabulary is split for TP rank %lld of %lld but the model's TP group is rank %d of %d",
                   what, (long long)vs->rank, (long long)vs->T, g->rank, g->size);
  return SL_OK;
}

static int tp_allreduce(sl_model *m, float *buf, int64_t n, sl_tp_op op) {
  const sl_tp_group *g = &m->access.tp;
  return g->allreduce(g->user, buf, n, op);
}

/* Sequence parallelism splits the N token rows into T blocks of N/T. */
static int sp_rows(const sl_vocab_split *vs, int64_t N, const char *what) {
  if (N % vs->T)
    return sl_fail(SL_EINPUT,
                   "%s: sequence parallelism needs the micro-batch's %lld token rows divisible by the TP degree %lld",
                   what, (long long)N, (long long)vs->T);
  return SL_OK;
}

float *sl_sp_norm_dw(sl_model *m, float *part, int64_t n) {
  m->ops->zero(m->k, part, (size_t)n * sizeof(float));
  return part;
}

int sl_sp_norm_dw_sum(sl_model *m, float *g, float *part, int64_t n) {
  int rc = tp_allreduce(m, part, n, SL_TP_SUM);
  if (!rc) m->ops->add_inplace(m->k, g, part, n);
  return rc;
}

int sl_vp_embedding_fwd(sl_model *m, const sl_vocab_split *vs, float *out, const float *wte, int64_t N, int64_t C,
                        float *sp_partial) {
  const char *what = "vocabulary-parallel embedding";
  if (vs->T == 1) sp_partial = NULL; /* one rank: its rows are all rows */
  int rc = group_matches(m, vs, what);
  if (!rc && sp_partial) rc = sp_rows(vs, N, what);
  if (rc) return rc;
  m->ops->vocab_embedding_fwd(m->k, sp_partial ? sp_partial : out, m->tokens, wte, N, C, vs->v0, vs->Vl);
  if (!sp_partial) return tp_allreduce(m, out, N * C, SL_TP_SUM);
  const sl_tp_group *g = &m->access.tp;
  return g->reducescatter(g->user, sp_partial, out, N / vs->T * C);
}

int sl_vp_embedding_bwd(sl_model *m, const sl_vocab_split *vs, float *dwte, const float *dout, int64_t N, int64_t C,
                        float *sp_gathered) {
  const char *what = "vocabulary-parallel embedding";
  if (vs->T == 1) sp_gathered = NULL;
  int rc = group_matches(m, vs, what);
  if (!rc && sp_gathered) rc = sp_rows(vs, N, what);
  if (rc) return rc;
  if (sp_gathered) {
    const sl_tp_group *g = &m->access.tp;
    if ((rc = g->allgather(g->user, dout, sp_gathered, N / vs->T * C))) return rc;
    dout = sp_gathered;
  }
  m->ops->vocab_embedding_bwd(m->k, dwte, dout, m->tokens, N, C, vs->v0, vs->Vl);
  return SL_OK;
}

int sl_lm_head_vp_init(sl_model *m, sl_lm_head_vp *hv, const sl_vocab_split *vs, int64_t C, float eps, int tied,
                       int unit, int sp) {
  hv->vs = *vs;
  hv->sp = sp && vs->T > 1; /* one rank: its rows are all rows */
  int rc = sl_lm_head_init(m, &hv->h, C, vs->V, eps, tied, unit);
  if (!rc && sp) rc = sp_rows(vs, hv->h.N, "loss-parallel LM head");
  if (rc) return rc;
  int64_t N = hv->h.N;
  if (!(hv->lmax = sl_model_buf(m, N, SL_ARENA_WORKSPACE)) || !(hv->gmax = sl_model_buf(m, N, SL_ARENA_WORKSPACE)) ||
      !(hv->st = sl_model_buf(m, 2 * N, SL_ARENA_WORKSPACE)) ||
      (sp && !(hv->xl = sl_model_buf(m, N / vs->T * C, SL_ARENA_WORKSPACE))) ||
      (sp && !(hv->gw = sl_model_buf(m, C, SL_ARENA_WORKSPACE))))
    return SL_ENOMEM;
  return SL_OK;
}

int sl_lm_head_vp_set_init(sl_model *m, sl_lm_head_vp **hvp, sl_lm_head_vp **hv, int nsets, int set, sl_lm_head *head,
                           const sl_vocab_split *vs, int64_t C, float eps, int tied, int unit, int sp) {
  ptrdiff_t cur = *hv ? *hv - *hvp : 0;
  sl_lm_head_vp *a = realloc(*hvp, sizeof *a * (size_t)nsets);
  if (!a) return sl_fail(SL_ENOMEM, "out of memory");
  *hvp = a;
  if (*hv) *hv = a + cur; /* the selected set's, moved with the array */
  memset(&a[set], 0, sizeof *a);
  int rc = sl_lm_head_vp_init(m, &a[set], vs, C, eps, tied, unit, sp);
  if (!rc) *head = a[set].h;
  return rc;
}

/* The slice the head reads: after the norm in its own flat buffer, or unit 0's. */
static int slice_weight(sl_model *m, const sl_lm_head *h, const float *flat, const float **W) {
  if (!h->tied) {
    *W = flat + h->C;
    return SL_OK;
  }
  return m->access.params(m->access.user, 0, W);
}

int sl_lm_head_vp_fwd(sl_model *m, sl_lm_head_vp *hv, const float *flat, const float *x) {
  sl_lm_head *h = &hv->h;
  const sl_vocab_split *vs = &hv->vs;
  const sl_ops *o = m->ops;
  const float *W;
  int rc = group_matches(m, vs, "loss-parallel LM head");
  if (!rc) rc = slice_weight(m, h, flat, &W);
  if (rc) return rc;
  int64_t N = h->N, n = hv->sp ? N / vs->T : N;
  o->rmsnorm_fwd(m->k, hv->sp ? hv->xl : h->lnf, h->rstdf, x, sl_lm_head_norm_w(m, h, flat), n, h->C, h->C, h->eps);
  if (hv->sp && (rc = m->access.tp.allgather(m->access.tp.user, hv->xl, h->lnf, n * h->C))) return rc;
  sl_lm_head_lscale(m, h, h->lnf, N);
  o->lmhead_vp_fwd(m->k, hv->lmax, hv->st, h->lnf, W, m->targets, N, h->C, vs->v0, vs->Vl, vs->valid, h->softcap);
  o->copy(m->k, hv->gmax, hv->lmax, (size_t)N * sizeof(float));
  if ((rc = tp_allreduce(m, hv->gmax, N, SL_TP_MAX))) return rc;
  o->lmhead_vp_rescale(m->k, hv->st, hv->lmax, hv->gmax, N);
  if ((rc = tp_allreduce(m, hv->st, 2 * N, SL_TP_SUM))) return rc;
  o->lmhead_vp_loss(m->k, h->losses, h->lse, hv->st, hv->gmax, m->targets, N);
  sl_model_loss_add(m, h->losses, N);
  return SL_OK;
}

int sl_lm_head_vp_bwd(sl_model *m, sl_lm_head_vp *hv, const float *flat, float *grads, const float *x, float *dres,
                      float *dln) {
  sl_lm_head *h = &hv->h;
  const sl_vocab_split *vs = &hv->vs;
  const float *W;
  float *dW = grads + h->C;
  int rc = group_matches(m, vs, "loss-parallel LM head");
  if (!rc) rc = slice_weight(m, h, flat, &W);
  if (!rc && h->tied) rc = m->access.grads(m->access.user, 0, &dW);
  if (rc) return rc;
  int64_t n = hv->sp ? h->N / vs->T : h->N;
  m->ops->zero(m->k, dres, (size_t)(n * h->C) * sizeof(float));
  m->ops->zero(m->k, dln, (size_t)(h->N * h->C) * sizeof(float));
  m->ops->lmhead_vp_bwd(m->k, dln, dW, h->lnf, W, m->targets, h->lse, m->loss_scale, h->N, h->C, vs->v0, vs->Vl,
                        vs->valid, h->softcap);
  if (hv->sp) rc = m->access.tp.reducescatter(m->access.tp.user, dln, hv->xl, n * h->C);
  else rc = tp_allreduce(m, dln, h->N * h->C, SL_TP_SUM);
  if (rc) return rc;
  sl_lm_head_lscale(m, h, hv->sp ? hv->xl : dln, n);
  float *dw = hv->sp ? sl_sp_norm_dw(m, hv->gw, h->C) : grads;
  m->ops->rmsnorm_bwd(m->k, dres, dw, hv->sp ? hv->xl : dln, x, sl_lm_head_norm_w(m, h, flat), h->rstdf, n, h->C, h->C);
  return hv->sp ? sl_sp_norm_dw_sum(m, grads, hv->gw, h->C) : SL_OK;
}

int sl_lm_head_vp_logits(sl_model *m, sl_lm_head_vp *hv, float *out) {
  sl_lm_head *h = &hv->h;
  const sl_vocab_split *vs = &hv->vs;
  const sl_tp_group *g = &m->access.tp;
  const float *W;
  int rc = group_matches(m, vs, "loss-parallel LM head logits");
  if (!rc) rc = m->access.params(m->access.user, h->tied ? 0 : h->unit, &W);
  if (rc) return rc;
  if (!h->tied) W += h->C;
  int64_t N = h->N, n = N * vs->Vl;
  if (vs->T == 1) {
    sl_lin head = sl_lin_one("lm_head", "lm_head", h->C, vs->V, SL_LIN_COL);
    sl_lin_fwd(m, &head, out, h->lnf, W, NULL, N);
    if (h->softcap > 0) m->ops->softcap(m->k, out, h->softcap, N * vs->V);
    return SL_OK;
  }
  /* local (N, valid) logits, gathered as T blocks of N*Vl, then laid out as
   * rows of V: rank r's valid columns of row i go to out[i, r Vl ...) */
  float *loc = m->ops->alloc(m->k, (size_t)n * sizeof(float));
  float *all = m->ops->alloc(m->k, (size_t)(n * vs->T) * sizeof(float));
  if (!loc || !all) {
    rc =
        sl_fail(SL_ENOMEM, "loss-parallel LM head logits: out of memory for %lld floats", (long long)(n * (vs->T + 1)));
    goto done;
  }
  sl_lin head = sl_lin_one("lm_head", "lm_head", h->C, vs->valid, SL_LIN_COL); /* this rank's valid rows */
  if (vs->valid) sl_lin_fwd(m, &head, loc, h->lnf, W, NULL, N);
  if ((rc = g->allgather(g->user, loc, all, n))) goto done;
  for (int r = 0; r < vs->T; r++) {
    sl_vocab_split s;
    if ((rc = sl_vocab_split_make(vs->V, (int)vs->T, r, &s))) goto done;
    for (int64_t i = 0; i < N && s.valid; i++)
      m->ops->copy(m->k, out + i * vs->V + s.v0, all + r * n + i * s.valid, (size_t)s.valid * sizeof(float));
  }
  if (h->softcap > 0) m->ops->softcap(m->k, out, h->softcap, N * vs->V); /* the logits the loss sees */
done:
  m->ops->free(m->k, loc);
  m->ops->free(m->k, all);
  return rc;
}
