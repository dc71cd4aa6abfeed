/* models/llama_split.c — the backward of the Llama/Mistral units split into
 * their input-gradient half (B) and weight-gradient half (W), as zero-bubble
 * pipeline schedules run them (--pp-schedule zb1p, engine/schedule_pp.c;
 * models/model.h: stash_numel, bwd_input, bwd_weight).
 *
 * B runs llama_bwd's sequence of kernels with every weight-gradient output
 * NULL and keeps, per micro-batch and unit, the stash W needs: the output
 * gradients of the linears and the gradients reaching the norms' outputs.
 * W runs the weight-gradient GEMMs and the norms' weight gradients from the
 * stash and the micro-batch's activation set. Each weight gradient is then
 * computed by the same kernel call on the same inputs into the same buffer
 * as llama_bwd computes it (linear_bwd's dW GEMM is its own call whether or
 * not the input gradient is asked for; rmsnorm_bwd's and lmhead_ce_bwd's
 * weight parts do not depend on the input part): the bits of bwd.
 *
 * Stash of a block, floats, in this order (N tokens of the micro-batch):
 *   dmlp (N, C) gradient of the block output (dout of Wdown)
 *   dgu  (N, 2I) gradient of gate|up (dout of Wgate|Wup)
 *   dln2 (N, C) gradient of the second norm's output
 *   datt (N, C) gradient of the attention's residual (dout of Wo)
 *   dqkv (N, Q) gradient of q|k|v after RoPE's backward (dout of Wqkv)
 *   dln1 (N, C) gradient of the first norm's output
 * Head: dln (N, C) gradient of the final norm's output (W recomputes the
 * logits for the LM head's weight GEMM; tied: the head's part of unit 0's
 * gradient is computed in B, into the caller's buffer). Embedding: the
 * gradient of its output (N, C); its whole backward is W.
 * Activation checkpointing: what the unsplit backward recomputes (the
 * attention core under selective, the whole block under full) lives in
 * buffers every layer and set shares, so B and W each recompute it (the
 * same kernels on the same inputs: the same bits); W's is the price.
 * Not split: tensor parallelism (SL_EINPUT).
 */
#include <stdint.h>

#include "base/base.h"
#include "models/llama_internal.h"

static int split_supported(const sl_model *m) {
  if (m->tp_size > 1)
    return sl_fail(SL_EINPUT, "%s: the split backward (zero-bubble pipeline) does not run under --tp %d",
                   m->cfg.arch_name, m->tp_size);
  return SL_OK;
}

int64_t sl_llama_stash_numel(const sl_model *m, int u) {
  const llama_priv *p = m->priv;
  if (u == 0 || u == p->L + 1) return p->N * p->C;
  return p->N * (4 * p->C + 2 * p->I + p->Q);
}

typedef struct {
  float *dmlp, *dgu, *dln2, *datt, *dqkv, *dln1;
} block_stash;

static block_stash stash_views(const llama_priv *p, const float *s) {
  block_stash b;
  int64_t N = p->N, C = p->C;
  b.dmlp = (float *)s;
  b.dgu = b.dmlp + N * C;
  b.dln2 = b.dgu + N * 2 * p->I;
  b.datt = b.dln2 + N * C;
  b.dqkv = b.datt + N * C;
  b.dln1 = b.dqkv + N * p->Q;
  return b;
}

static int block_input(sl_model *m, int u, const float *flat, float *stash) {
  llama_priv *p = m->priv;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  size_t nc = (size_t)(N * C) * 4;
  int rc;
  int l = u - 1;
  layer_acts *a = &p->la[l];
  blockw w = block_views(p, flat);
  block_stash s = stash_views(p, stash);
  if ((rc = sl_llama_recompute(m, u, flat))) return rc;
  /* MLP */
  o->copy(k, s.dmlp, p->dres, nc);
  o->zero(k, p->dh, (size_t)(N * p->I) * 4);
  o->linear_bwd(k, p->dh, NULL, NULL, p->dres, a->h, w.wd, N, p->I, C);
  o->zero(k, p->dgu, (size_t)(N * 2 * p->I) * 4);
  o->swiglu_bwd(k, p->dgu, p->dh, a->gu, N, p->I);
  o->copy(k, s.dgu, p->dgu, (size_t)(N * 2 * p->I) * 4);
  o->zero(k, p->dln, nc);
  o->linear_bwd(k, p->dln, NULL, NULL, p->dgu, a->ln2, w.wgu, N, C, 2 * p->I);
  o->copy(k, s.dln2, p->dln, nc);
  o->rmsnorm_bwd(k, p->dres, NULL, p->dln, a->xmid, w.ln2, a->rstd2, N, C);
  /* attention */
  o->copy(k, s.datt, p->dres, nc);
  o->zero(k, p->datt, (size_t)(N * p->A) * 4);
  o->linear_bwd(k, p->datt, NULL, NULL, p->dres, a->att, w.wo, N, p->A, C);
  o->zero(k, p->dqkv, (size_t)(N * p->Q) * 4);
  o->attention_doc_bwd(k, p->dqkv, p->datt, a->qkv, a->att, a->lse, m->B, m->T, p->nh, p->nkv, p->hd, p->window,
                       m->seg);
  o->rope_doc_bwd(k, p->dqkv, m->B, m->T, p->nh, p->nkv, p->hd, p->theta, m->seg);
  o->copy(k, s.dqkv, p->dqkv, (size_t)(N * p->Q) * 4);
  o->zero(k, p->dln, nc);
  o->linear_bwd(k, p->dln, NULL, NULL, p->dqkv, a->ln1, w.wqkv, N, C, p->Q);
  o->copy(k, s.dln1, p->dln, nc);
  o->rmsnorm_bwd(k, p->dres, NULL, p->dln, p->stream[l], w.ln1, a->rstd1, N, C);
  return SL_OK;
}

static int block_weight(sl_model *m, int u, const float *flat, float *grads, const float *stash) {
  llama_priv *p = m->priv;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  int rc;
  int l = u - 1;
  layer_acts *a = &p->la[l];
  blockw w = block_views(p, flat), g = block_views(p, grads);
  block_stash s = stash_views(p, stash);
  if ((rc = sl_llama_recompute(m, u, flat))) return rc; /* again: B's recomputed tensors are shared, gone */
  o->linear_bwd(k, NULL, (float *)g.wd, NULL, s.dmlp, a->h, w.wd, N, p->I, C);
  o->linear_bwd(k, NULL, (float *)g.wgu, NULL, s.dgu, a->ln2, w.wgu, N, C, 2 * p->I);
  o->rmsnorm_bwd(k, NULL, (float *)g.ln2, s.dln2, a->xmid, w.ln2, a->rstd2, N, C);
  o->linear_bwd(k, NULL, (float *)g.wo, NULL, s.datt, a->att, w.wo, N, p->A, C);
  o->linear_bwd(k, NULL, (float *)g.wqkv, NULL, s.dqkv, a->ln1, w.wqkv, N, C, p->Q);
  o->rmsnorm_bwd(k, NULL, (float *)g.ln1, s.dln1, p->stream[l], w.ln1, a->rstd1, N, C);
  return SL_OK;
}

/* Unit 0's backward is all weight gradient: B keeps its output gradient. */
int sl_llama_bwd_input(sl_model *m, int u, const float *flat, float *stash, float *tied) {
  llama_priv *p = m->priv;
  int rc = split_supported(m);
  if (rc || u == 0) {
    if (!rc) m->ops->copy(m->k, stash, p->dres, (size_t)(p->N * p->C) * 4);
    return rc;
  }
  if (u == p->L + 1) /* models/lmhead_split.c */
    return sl_lm_head_bwd_input(m, &p->head, flat, p->stream[p->L], p->dres, p->dln, stash, tied);
  return block_input(m, u, flat, stash);
}

int sl_llama_bwd_weight(sl_model *m, int u, const float *flat, float *grads, const float *stash) {
  llama_priv *p = m->priv;
  int rc = split_supported(m);
  if (rc) return rc;
  if (u == 0) {
    m->ops->embedding_bwd(m->k, grads, stash, m->tokens, p->N, p->C);
    return SL_OK;
  }
  if (u == p->L + 1) return sl_lm_head_bwd_weight(m, &p->head, flat, grads, p->stream[p->L], stash);
  return block_weight(m, u, flat, grads, stash);
}
