/* models/lmhead_split.c — the LM head's backward (sl_lm_head_bwd, models/
 * model.c) split into its input-gradient half and its weight-gradient half
 * for zero-bubble pipeline schedules (models/model.h: bwd_input /
 * bwd_weight; used by the decoder skeleton, models/decoder.c).
 *
 * Input half: the residual gradient as sl_lm_head_bwd leaves it, the final
 * norm's output gradient (N, C) kept in the stash; a tied head also makes
 * its part of unit 0's gradient here, in the same lmhead_ce_bwd call as
 * sl_lm_head_bwd (into the caller's buffer, zeroed here). Weight half: the
 * LM head's weight GEMM (untied: lmhead_ce_bwd with dx NULL computes the
 * logits again, tile by tile) and the final norm's weight gradient
 * (rmsnorm_bwd with the input gradient NULL): each the same kernel on the
 * same inputs as sl_lm_head_bwd's, the same bits.
 * Under tensor parallelism the loss-parallel head (sl_lm_head_vp_bwd,
 * models/vocab_parallel.c) splits the same way: its input half also sums
 * the norm-output gradient over the TP group; its weight half, under
 * sequence parallelism, sums the norm's weight gradient (sl_sp_norm_dw_sum).
 */
#include "base/base.h"
#include "models/model.h"
#include "models/vocab_parallel.h"

int sl_lm_head_bwd_input(sl_model *m, sl_lm_head *h, const float *flat, const float *x, float *dres, float *dln,
                         float *stash, float *tied) {
  const float *W = flat + h->C;
  if (h->tied && !tied) return sl_fail(SL_EINTERNAL, "split backward of a tied head without its gradient buffer");
  if (h->tied) {
    int rc = m->access.params(m->access.user, 0, &W);
    if (rc) return rc;
    m->ops->zero(m->k, tied, (size_t)(h->V * h->C) * 4);
  }
  size_t bytes = (size_t)(h->N * h->C) * 4;
  m->ops->zero(m->k, dres, bytes);
  m->ops->zero(m->k, dln, bytes);
  m->ops->lmhead_ce_bwd(m->k, dln, h->tied ? tied : NULL, h->lnf, W, m->targets, h->lse, m->loss_scale, h->N, h->C,
                        h->V, h->softcap);
  sl_lm_head_lscale(m, h, dln, h->N);
  m->ops->rmsnorm_bwd(m->k, dres, NULL, dln, x, sl_lm_head_norm_w(m, h, flat), h->rstdf, h->N, h->C, h->C);
  m->ops->copy(m->k, stash, dln, bytes);
  return SL_OK;
}

int sl_lm_head_bwd_weight(sl_model *m, sl_lm_head *h, const float *flat, float *grads, const float *x,
                          const float *stash) {
  if (!h->tied)
    m->ops->lmhead_ce_bwd(m->k, NULL, grads + h->C, h->lnf, flat + h->C, m->targets, h->lse, m->loss_scale, h->N, h->C,
                          h->V, h->softcap);
  m->ops->rmsnorm_bwd(m->k, NULL, grads, stash, x, sl_lm_head_norm_w(m, h, flat), h->rstdf, h->N, h->C, h->C);
  return SL_OK;
}

/* ---- the loss-parallel head (tensor parallelism, models/vocab_parallel.h) ---- */
int sl_lm_head_vp_bwd_input(sl_model *m, sl_lm_head_vp *hv, const float *flat, const float *x, float *dres, float *dln,
                            float *stash, float *tied) {
  sl_lm_head *h = &hv->h;
  const sl_vocab_split *vs = &hv->vs;
  const sl_tp_group *g = &m->access.tp;
  const float *W = flat + h->C;
  int rc = h->tied && !tied ? sl_fail(SL_EINTERNAL, "split backward of a tied head without its gradient buffer") : 0;
  if (!rc && h->tied) rc = m->access.params(m->access.user, 0, &W);
  if (rc) return rc;
  if (h->tied) m->ops->zero(m->k, tied, (size_t)(vs->Vl * h->C) * 4);
  int64_t n = hv->sp ? h->N / vs->T : h->N;
  float *dn = hv->sp ? hv->xl : dln; /* the summed gradient of the norm's output, this rank's rows */
  m->ops->zero(m->k, dres, (size_t)(n * h->C) * 4);
  m->ops->zero(m->k, dln, (size_t)(h->N * h->C) * 4);
  m->ops->lmhead_vp_bwd(m->k, dln, h->tied ? tied : NULL, h->lnf, W, m->targets, h->lse, m->loss_scale, h->N, h->C,
                        vs->v0, vs->Vl, vs->valid, h->softcap);
  rc = hv->sp ? g->reducescatter(g->user, dln, dn, n * h->C) : g->allreduce(g->user, dln, h->N * h->C, SL_TP_SUM);
  if (rc) return rc;
  sl_lm_head_lscale(m, h, dn, n);
  m->ops->rmsnorm_bwd(m->k, dres, NULL, dn, x, sl_lm_head_norm_w(m, h, flat), h->rstdf, n, h->C, h->C);
  m->ops->copy(m->k, stash, dn, (size_t)(n * h->C) * 4);
  return SL_OK;
}

int sl_lm_head_vp_bwd_weight(sl_model *m, sl_lm_head_vp *hv, const float *flat, float *grads, const float *x,
                             const float *stash) {
  sl_lm_head *h = &hv->h;
  const sl_vocab_split *vs = &hv->vs;
  if (!h->tied)
    m->ops->lmhead_vp_bwd(m->k, NULL, grads + h->C, h->lnf, flat + h->C, m->targets, h->lse, m->loss_scale, h->N, h->C,
                          vs->v0, vs->Vl, vs->valid, h->softcap);
  float *dw = hv->sp ? sl_sp_norm_dw(m, hv->gw, h->C) : grads;
  m->ops->rmsnorm_bwd(m->k, NULL, dw, stash, x, sl_lm_head_norm_w(m, h, flat), h->rstdf, hv->sp ? h->N / vs->T : h->N,
                      h->C, h->C);
  return hv->sp ? sl_sp_norm_dw_sum(m, grads, hv->gw, h->C) : SL_OK;
}
