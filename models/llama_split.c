/* models/llama_split.c — the backward of the Llama/Mistral units split into
 * their input-gradient half (B) and weight-gradient half (W), as zero-bubble
 * pipeline schedules run them (--pp-schedule zb1p, engine/schedule_pp.c;
 * models/model.h: stash_numel, bwd_input, bwd_weight).
 *
 * B runs llama_bwd's sequence of kernels with every weight-gradient output
 * NULL and keeps, per micro-batch and unit, the stash W needs: the output
 * gradients of the linears and the gradients reaching the norms' outputs.
 * W runs the weight-gradient GEMMs and the norms' weight gradients from the
 * stash and the micro-batch's activation set (a bias gradient with its
 * weight GEMM, the same linear_bwd call; the q/k norms' weight gradients
 * from dqn). Each weight gradient is then
 * computed by the same kernel call on the same inputs into the same buffer
 * as llama_bwd computes it (linear_bwd's dW GEMM is its own call whether or
 * not the input gradient is asked for; rmsnorm_bwd's and lmhead_ce_bwd's
 * weight parts do not depend on the input part): the bits of bwd.
 *
 * Stash of a block, floats, in this order (N tokens of the micro-batch):
 *   dmlp (N, C) gradient of the block output (dout of Wdown)
 *   dgu  (N, 2I) gradient of gate|up (dout of Wgate|Wup); a mixture of
 *        experts' layer: its own stash there (models/llama_moe.c
 *        sl_llama_moe_stash_numel), then the shared expert's gate|up
 *        gradient (N, gw Is); the region is the larger of the two
 *   dln2 (N, C) gradient of the second norm's output
 *   datt (N, C) gradient of the attention's residual (dout of Wo)
 *   dqkv (N, Q) gradient of q|k|v after RoPE's backward (dout of Wqkv)
 *   dln1 (N, C) gradient of the first norm's output
 *   dqn  (N, Q) Qwen3's q_norm/k_norm only: the gradient of q|k|v after the
 *        norms (their weight gradients' dout)
 *   Gemma only: dpf, dpa (n, C) the gradients reaching the post-feedforward
 *   and post-attention norms' outputs (their weight gradients' inputs);
 *   dmlp and datt are then the post norms' input gradients
 * The embedding's and the head's halves are the skeleton's
 * (models/decoder.c, models/lmhead_split.c).
 * Activation checkpointing: what the unsplit backward recomputes (the
 * attention core under selective, the whole block under full) lives in
 * buffers every layer and set shares, so B and W each recompute it (the
 * same kernels on the same inputs: the same bits); W's is the price.
 * Tensor parallelism (models/llama.c): B runs the input-gradient
 * collectives where llama_bwd runs them (the all-gather of the block
 * output's gradient under sequence parallelism, the row-parallel sums of the
 * qkv / gate|up input gradients; the loss-parallel head's sum of dln), W the
 * weight-gradient ones (a replicated k/v slice's sum when T > nkv, the
 * norms' weight gradients under sp; the vocabulary-parallel embedding's
 * all-gather of its output gradient under sp). Under sp dmlp and datt are
 * the all-gathered (N, C) gradients the dW GEMMs read; dln2, dln1 and the
 * head's stash this rank's (n, C) rows (the stash is sized for N rows).
 */
#include <math.h>
#include <stdint.h>

#include "base/base.h"
#include "models/llama_internal.h"

/* The dgu region: the dense MLP's gate|up gradient, or a MoE layer's stash and its shared expert's. */
static int64_t ffn_stash(const sl_model *m, const llama_priv *p) {
  int64_t dense = p->dense_ffn ? p->N * p->gw * p->I : 0;
  int64_t moe = p->E ? sl_llama_moe_stash_numel(m, p) + p->N * p->gw * p->Is : 0;
  return dense > moe ? dense : moe;
}

int64_t sl_llama_stash_numel(const sl_model *m) {
  const llama_priv *p = sl_dec(m)->blk;
  return p->N * ((p->gemma ? 5 : 3) * p->C + p->Q + (p->qkn ? p->Q : 0)) + p->N * p->C + ffn_stash(m, p);
}

typedef struct {
  float *dmlp, *dgu, *dln2, *datt, *dqkv, *dln1, *dqn, *dpf, *dpa;
} block_stash;

static block_stash stash_views(const sl_model *m, const llama_priv *p, const float *s) {
  block_stash b;
  int64_t N = p->N, C = p->C;
  b.dmlp = (float *)s;
  b.dgu = b.dmlp + N * C;
  b.dln2 = b.dgu + ffn_stash(m, p);
  b.datt = b.dln2 + N * C;
  b.dqkv = b.datt + N * C;
  b.dln1 = b.dqkv + N * p->Q;
  b.dqn = p->qkn ? b.dln1 + N * C : NULL;
  b.dpf = p->gemma ? b.dln1 + N * C + (p->qkn ? N * p->Q : 0) : NULL;
  b.dpa = p->gemma ? b.dpf + N * C : NULL;
  return b;
}

/* B's part of a Gemma post norm: keeps dres (its output gradient) in keep,
 * its input gradient (all-gathered under sp) in dout. */
static int post_norm_input(sl_model *m, llama_priv *p, float *keep, float *dout, const float *y, const float *w,
                           int slot, const float *rstd) {
  sl_decoder *d = sl_dec(m);
  size_t nc = (size_t)(p->n * p->C) * 4;
  m->ops->copy(m->k, keep, d->dres, nc);
  m->ops->zero(m->k, p->dpost, nc);
  if (p->no_post) m->ops->add_inplace(m->k, p->dpost, d->dres, p->n * p->C); /* SL_TEST_GEMMA_OFF: the identity */
  else m->ops->rmsnorm_bwd(m->k, p->dpost, NULL, d->dres, y, sl_llama_norm_w(m, p, w, slot), rstd, p->n, p->C, p->C);
  if (p->sp) return sl_dec_sp_gather(m, p->dpost, dout);
  m->ops->copy(m->k, dout, p->dpost, nc);
  return SL_OK;
}

/* Block l's input half, after the skeleton's recompute. */
int sl_llama_bwd_input(sl_model *m, int l, const float *flat, float *stash) {
  sl_decoder *d = sl_dec(m);
  llama_priv *p = d->blk;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C, n = p->n;
  size_t nc = (size_t)(n * C) * 4;
  int rc = SL_OK;
  layer_acts *a = llama_layer(m, l);
  blockw w = block_views(p, flat, l);
  block_stash s = stash_views(m, p, stash);
  int parts = llama_parts(p, l);
  float *dln = d->dln, *dn = p->sp ? d->xl : d->dln; /* a norm's output gradient, summed over TP: this rank's rows */
  if (!(parts & LP_MLP)) goto attention;
  /* MLP */
  if (p->gemma) rc = post_norm_input(m, p, s.dpf, s.dmlp, a->mo, w.lnpf, 3, a->rstd4);
  else if (p->sp) rc = sl_dec_sp_gather(m, d->dres, s.dmlp);
  else o->copy(k, s.dmlp, d->dres, nc);
  if (rc) return rc;
  if (p->rmult != 1.0f) o->scale_add(k, s.dmlp, p->rmult, 0.0f, (p->sp ? N : n) * C); /* Granite */
  if (llama_moe_at(p, l)) { /* the shared expert's input half, then the sparse MLP's (models/llama_moe.c) */
    int64_t Is = p->Is;
    float *dsgu = s.dgu + sl_llama_moe_stash_numel(m, p);
    if (Is) {
      o->zero(k, p->dh, (size_t)(N * Is) * 4);
      sl_lin_bwd(m, &p->lsdown, p->dh, NULL, NULL, s.dmlp, a->sh, w.wd, N);
      o->zero(k, dsgu, (size_t)(N * p->gw * Is) * 4);
      if (p->relu2) o->relu2_bwd(k, dsgu, p->dh, a->sgu, N * Is);
      else o->swiglu_bwd(k, dsgu, p->dh, a->sgu, N, Is);
    }
    if ((rc = sl_llama_moe_bwd_input(m, p, l, a, &w, s.dmlp, dln, s.dgu))) return rc;
    if (Is) sl_lin_bwd(m, &p->lsgu, dln, NULL, NULL, dsgu, a->ln2, w.wgu, N);
    goto mlp_norm;
  }
  o->zero(k, p->dh, (size_t)(N * p->I) * 4);
  sl_lin_bwd(m, &p->ldown, p->dh, NULL, NULL, s.dmlp, a->h, w.wd, N);
  o->zero(k, p->dgu, (size_t)(N * p->gw * p->I) * 4);
  if (p->relu2) o->relu2_bwd(k, p->dgu, p->dh, a->gu, N * p->I);
  else (p->gemma ? o->geglu_bwd : o->swiglu_bwd)(k, p->dgu, p->dh, a->gu, N, p->I);
  o->copy(k, s.dgu, p->dgu, (size_t)(N * p->gw * p->I) * 4);
  o->zero(k, dln, (size_t)(N * C) * 4);
  sl_lin_bwd(m, &p->lgu, dln, NULL, NULL, p->dgu, a->ln2, w.wgu, N);
mlp_norm:
  if ((rc = sl_dec_row_parallel_sum(m, dln, dn))) return rc;
  o->copy(k, s.dln2, dn, nc);
  o->rmsnorm_bwd(k, d->dres, NULL, dn, parts & LP_ATTN ? a->xmid : d->stream[l], sl_llama_norm_w(m, p, w.ln2, 2),
                 a->rstd2, n, C, C);
  if (!(parts & LP_ATTN)) return SL_OK;
attention:
  if (p->gemma) rc = post_norm_input(m, p, s.dpa, s.datt, a->ao, w.lnpa, 1, a->rstd3);
  else if (p->sp) rc = sl_dec_sp_gather(m, d->dres, s.datt);
  else o->copy(k, s.datt, d->dres, nc);
  if (rc) return rc;
  if (p->rmult != 1.0f) o->scale_add(k, s.datt, p->rmult, 0.0f, (p->sp ? N : n) * C);
  o->zero(k, p->datt, (size_t)(N * p->A) * 4);
  sl_lin_bwd(m, &p->lo, p->datt, NULL, NULL, s.datt, a->att, w.wo, N);
  o->zero(k, p->dqkv, (size_t)(N * p->Q) * 4);
  o->attention_bwd(k, p->dqkv, p->datt, a->qkv, a->att, a->lse, m->B, m->T, p->nh, p->nkv, p->hd,
                   sl_llama_layer_window(p, l), p->scale, m->seg, p->softcap);
  if (!p->no_rope) o->rope_bwd(k, p->dqkv, m->B, m->T, p->nh, p->nkv, p->hd, sl_llama_layer_freq(p, l), m->seg);
  if (p->qkn) sl_llama_qk_norm_bwd_input(m, a, &w, s.dqn);
  o->copy(k, s.dqkv, p->dqkv, (size_t)(N * p->Q) * 4);
  o->zero(k, dln, (size_t)(N * C) * 4);
  sl_lin_bwd(m, &p->lqkv, dln, NULL, NULL, p->dqkv, a->ln1, w.wqkv, N);
  if ((rc = sl_dec_row_parallel_sum(m, dln, dn))) return rc;
  o->copy(k, s.dln1, dn, nc);
  o->rmsnorm_bwd(k, d->dres, NULL, dn, d->stream[l], sl_llama_norm_w(m, p, w.ln1, 0), a->rstd1, n, C, C);
  return SL_OK;
}

/* Block l's weight half, after the skeleton's recompute (again: the input
 * half's recomputed tensors are shared, gone). */
int sl_llama_bwd_weight(sl_model *m, int l, const float *flat, float *grads, const float *stash) {
  sl_decoder *d = sl_dec(m);
  llama_priv *p = d->blk;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  int rc;
  layer_acts *a = llama_layer(m, l);
  blockw w = block_views(p, flat, l), g = block_views(p, grads, l);
  block_stash s = stash_views(m, p, stash);
  int parts = llama_parts(p, l);
  int64_t n2 = (p->gemma ? 2 : 1) * C; /* ln2's slot of gnorm (Gemma: ln1, lnpa, ln2, lnpf) */
  if (!(parts & LP_MLP)) goto attention;
  float *dpf = p->gemma ? sl_dec_norm_dw(m, (float *)g.lnpf, p->gnorm + 3 * C) : NULL;
  if (p->gemma && !p->no_post)
    o->rmsnorm_bwd(k, NULL, dpf, s.dpf, a->mo, sl_llama_norm_w(m, p, w.lnpf, 3), a->rstd4, p->n, C, C);
  if (llama_moe_at(p, l)) { /* the shared expert's weight half, then the sparse MLP's */
    if (p->Is) {
      sl_lin_bwd(m, &p->lsdown, NULL, (float *)g.wd, (float *)g.bd, s.dmlp, a->sh, w.wd, N);
      sl_lin_bwd(m, &p->lsgu, NULL, (float *)g.wgu, (float *)g.bgu, s.dgu + sl_llama_moe_stash_numel(m, p), a->ln2,
                 w.wgu, N);
    }
    if ((rc = sl_llama_moe_bwd_weight(m, p, l, a, &w, &g, s.dgu))) return rc;
  } else {
    sl_lin_bwd(m, &p->ldown, NULL, (float *)g.wd, (float *)g.bd, s.dmlp, a->h, w.wd, N);
    sl_lin_bwd(m, &p->lgu, NULL, (float *)g.wgu, (float *)g.bgu, s.dgu, a->ln2, w.wgu, N);
  }
  o->rmsnorm_bwd(k, NULL, sl_dec_norm_dw(m, (float *)g.ln2, p->gnorm + n2), s.dln2,
                 parts & LP_ATTN ? a->xmid : d->stream[l], sl_llama_norm_w(m, p, w.ln2, 2), a->rstd2, p->n, C, C);
  if (!(parts & LP_ATTN)) return sl_dec_norm_grad_sum(m, (float *)g.ln2, p->gnorm + n2);
attention:;
  float *dpa = p->gemma ? sl_dec_norm_dw(m, (float *)g.lnpa, p->gnorm + C) : NULL;
  if (p->gemma && !p->no_post)
    o->rmsnorm_bwd(k, NULL, dpa, s.dpa, a->ao, sl_llama_norm_w(m, p, w.lnpa, 1), a->rstd3, p->n, C, C);
  sl_lin_bwd(m, &p->lo, NULL, (float *)g.wo, (float *)g.bo, s.datt, a->att, w.wo, N);
  if (p->qkn && (rc = sl_llama_qk_norm_bwd_weight(m, a, &w, &g, s.dqn))) return rc;
  if (p->kvrep > 1) sl_llama_kv_grad_begin(m, &g);
  sl_lin_bwd(m, &p->lqkv, NULL, (float *)g.wqkv, (float *)g.bqkv, s.dqkv, a->ln1, w.wqkv, N);
  if (p->kvrep > 1 && (rc = sl_llama_kv_grad_sum(m, &g))) return rc;
  o->rmsnorm_bwd(k, NULL, sl_dec_norm_dw(m, (float *)g.ln1, p->gnorm), s.dln1, d->stream[l],
                 sl_llama_norm_w(m, p, w.ln1, 0), a->rstd1, p->n, C, C);
  if ((rc = sl_dec_norm_grad_sum(m, (float *)g.ln1, p->gnorm))) return rc;
  if (p->gemma && ((rc = sl_dec_norm_grad_sum(m, (float *)g.lnpa, p->gnorm + C)) ||
                   (rc = sl_dec_norm_grad_sum(m, (float *)g.lnpf, p->gnorm + 3 * C))))
    return rc;
  if (!(parts & LP_MLP)) return SL_OK;
  return sl_dec_norm_grad_sum(m, (float *)g.ln2, p->gnorm + n2);
}
