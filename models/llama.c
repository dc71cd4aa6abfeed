/* models/llama.c — the Llama / Mistral / Qwen2 / Qwen3 block kind of the
 * decoder skeleton (models/decoder.h, which owns the embedding, the head,
 * the residual stream, activation sets and the split backward's scaffolding).
 *
 * Units: 0 = embedding; 1..L = decoder blocks; L+1 = final norm + LM head.
 * A block's tensors are packed so that q/k/v and gate/up are each one
 * contiguous matrix and run as one GEMM ([...]: only when the config has it):
 *   ln1 (C) | Wq (nh*hd, C) Wk (nkv*hd, C) Wv (nkv*hd, C) | [bq (nh*hd) bk (nkv*hd)
 *   bv (nkv*hd): Qwen2, attention_bias] | Wo (C, nh*hd) | [bo (C): attention_bias,
 *   not Qwen2] | [q_norm (hd) k_norm (hd): Qwen3] | ln2 (C) | Wgate (I, C) Wup (I, C) |
 *   [bgate (I) bup (I): mlp_bias] | Wdown (C, I) | [bdown (C): mlp_bias]
 * A row-parallel projection's bias (bo, bdown) is whole on every TP rank;
 * rank 0 adds it to its partial sum (models/linear.h SL_LIN_ROW), so the sum holds it
 * once, and every rank takes its gradient from the whole output gradient.
 * Tensor parallelism over T ranks (Megatron, m->access.tp): heads split by T,
 * so a rank's block holds its nh/T query heads' rows of Wq, its k/v heads'
 * rows of Wk/Wv (one shared KV group when nkv < T: replicated over the T/nkv
 * ranks whose query heads use it), I/T rows of Wgate/Wup (column-parallel)
 * and the matching columns of Wo and Wdown (row-parallel), packed as above.
 * Forward: the outputs of Wo and Wdown are all-reduced (partial sums);
 * backward: the input gradient of the qkv and gate/up GEMMs is all-reduced
 * (Megatron's f / g operators), and a replicated k/v slice's gradient is
 * summed over the ranks sharing it. Norms are whole on every rank; the
 * embedding and the LM head split the vocabulary (models/vocab_parallel.h,
 * padded to a multiple of T; the loss-parallel head never holds full
 * logits). Sequence parallelism (m->sp): the residual stream, xmid and the
 * norm statistics hold this rank's n = N/T token rows; the Wo / Wdown
 * partial sums are reduce-scattered (not all-reduced), the norms' outputs
 * all-gathered before qkv / gate|up (kept gathered for backward), and in
 * backward the block-output gradient is all-gathered before the Wdown / Wo
 * GEMMs and the qkv / gate|up input gradients reduce-scattered; the norms'
 * weight gradients (partial over rows) are summed over TP, only the
 * micro-batch's part (a unit's gradient buffer may hold the earlier
 * micro-batches' sum: --no-sync-accum). At T = 1 the
 * original whole-vocabulary path runs, bit for bit.
 * Activation checkpointing: none keeps every block's activations; selective
 * recomputes the attention core (out, lse) in backward; full keeps only each
 * block's input and recomputes the block.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "models/llama_internal.h"
#include "models/rope.h"
#include "models/vocab_parallel.h"

static void llama_destroy(sl_model *m) {
  llama_priv *p = sl_dec(m)->blk;
  free(p->hoffs);
  free(p->load);
  free(p->ecnt);
  free(p->acnt);
  free(p->lwin);
  free(p->parts);
  free(p->moel);
  free(p->aprob);
  free(p->hprob);
  sl_llama_moe_free(m, p);
  if (p->gp) m->ops->free(m->k, p->gp);
  if (p->inv_freq) m->ops->free(m->k, p->inv_freq);
  if (p->inv_freq_local) m->ops->free(m->k, p->inv_freq_local);
}

/* Layer l's attention window (0: full causal), the config's per-layer type
 * (sl_cfg_layer_window: Mistral's window on every layer, Gemma's pattern,
 * Qwen2 / Qwen3's max_window_layers or layer_types). */
int64_t sl_llama_layer_window(const llama_priv *p, int l) { return p->lwin[l]; }

/* Layer l's RoPE table: Gemma 3's sliding layers use rope_local_base_freq's. */
const float *sl_llama_layer_freq(const llama_priv *p, int l) {
  return p->inv_freq_local && sl_llama_layer_window(p, l) > 0 ? p->inv_freq_local : p->inv_freq;
}

static void block_attn_core(sl_model *m, llama_priv *p, layer_acts *a, int l) {
  m->ops->attention_fwd(m->k, a->att, a->lse, a->qkv, m->B, m->T, p->nh, p->nkv, p->hd, sl_llama_layer_window(p, l),
                        p->scale, m->seg, p->softcap);
}

/* The weight a norm multiplies by: w itself, or Gemma's 1 + w (computed into
 * slot `slot` of the block's w1 workspace; its gradient is w's). */
const float *sl_llama_norm_w(sl_model *m, const llama_priv *p, const float *w, int slot) {
  if (!p->plus_one) return w;
  float *o = p->w1 + slot * p->C;
  m->ops->copy(m->k, o, w, (size_t)p->C * 4);
  m->ops->scale_add(m->k, o, 1.0f, 1.0f, p->C);
  return o;
}

/* Gemma's sandwich: out = res + norm(y) with y's statistics kept (rstd);
 * out = res + y when SL_TEST_GEMMA_OFF=post_norms (p->no_post). */
static void post_norm(sl_model *m, const llama_priv *p, float *out, float *rstd, const float *y, const float *w,
                      int slot, const float *res) {
  if (p->no_post) m->ops->copy(m->k, out, y, (size_t)(p->n * p->C) * 4);
  else m->ops->rmsnorm_fwd(m->k, out, rstd, y, sl_llama_norm_w(m, p, w, slot), p->n, p->C, p->C, p->eps);
  if (res) m->ops->add_inplace(m->k, out, res, p->n * p->C);
}

/* Qwen3's per-head RMSNorm of q and k over head_dim (transformers'
 * Qwen3Attention: q_norm / k_norm after the projection, before RoPE). A
 * token's q (then k) heads are hd-wide slices of its Q-wide row of packed
 * q|k|v: one strided rmsnorm (ld = Q) per head over the N tokens. v is not
 * normalised: qkr keeps the projection's output, qkv gets the normalised
 * q/k heads. */
static void qk_norm_fwd(sl_model *m, const llama_priv *p, layer_acts *a, const blockw *w) {
  int64_t N = p->N, hd = p->hd;
  const float *qw = sl_llama_qk_norm_w(m, p, w);
  m->ops->copy(m->k, a->qkr, a->qkv, (size_t)(N * p->Q) * 4);
  for (int64_t h = 0; h < p->nh + p->nkv; h++)
    m->ops->rmsnorm_fwd(m->k, a->qkv + h * hd, a->qkrs + h * N, a->qkr + h * hd, h < p->nh ? qw : qw + hd, N, hd, p->Q,
                        p->eps);
}

/* The q/k norms' weights (q's hd, then k's): w->qn itself, or Gemma 3's
 * 1 + w (into w1 after the block norms' four slots; its gradient is w's). */
const float *sl_llama_qk_norm_w(sl_model *m, const llama_priv *p, const blockw *w) {
  if (!p->plus_one) return w->qn;
  float *o = p->w1 + 4 * p->C;
  m->ops->copy(m->k, o, w->qn, (size_t)p->qkn * 4);
  m->ops->scale_add(m->k, o, 1.0f, 1.0f, p->qkn);
  return o;
}

/* The input half: dy = dqkv (the gradient after the norms); the q/k heads
 * of dqkv are zeroed (a norm with weight 0 writes exact zeros over the finite
 * qkr), then receive rmsnorm_bwd's input gradient from dy; v's stay. */
void sl_llama_qk_norm_bwd_input(sl_model *m, const layer_acts *a, const blockw *w, float *dy) {
  llama_priv *p = sl_dec(m)->blk;
  int64_t N = p->N, hd = p->hd, Q = p->Q;
  const float *qw = sl_llama_qk_norm_w(m, p, w);
  m->ops->copy(m->k, dy, p->dqkv, (size_t)(N * Q) * 4);
  m->ops->zero(m->k, p->zhd, (size_t)hd * 4);
  for (int64_t h = 0; h < p->nh + p->nkv; h++) {
    m->ops->rmsnorm_fwd(m->k, p->dqkv + h * hd, p->rjunk, a->qkr + h * hd, p->zhd, N, hd, Q, p->eps);
    m->ops->rmsnorm_bwd(m->k, p->dqkv + h * hd, NULL, dy + h * hd, a->qkr + h * hd, h < p->nh ? qw : qw + hd,
                        a->qkrs + h * N, N, hd, Q);
  }
}

/* The weight half: g.qn, g.kn (contiguous, 2*hd) += the norms' weight
 * gradients from dy. Under TP a rank's heads give a part of them (a k/v
 * slice shared by kvrep ranks: each its query heads' part), summed over the
 * TP group through gqk (only this micro-batch's: sl_sp_norm_dw). */
int sl_llama_qk_norm_bwd_weight(sl_model *m, const layer_acts *a, const blockw *w, const blockw *g, const float *dy) {
  llama_priv *p = sl_dec(m)->blk;
  int64_t N = p->N, hd = p->hd;
  float *gw = m->tp_size > 1 ? sl_sp_norm_dw(m, p->gqk, 2 * hd) : (float *)g->qn;
  const float *qw = sl_llama_qk_norm_w(m, p, w);
  for (int64_t h = 0; h < p->nh + p->nkv; h++)
    m->ops->rmsnorm_bwd(m->k, NULL, h < p->nh ? gw : gw + hd, dy + h * hd, a->qkr + h * hd, h < p->nh ? qw : qw + hd,
                        a->qkrs + h * N, N, hd, p->Q);
  return m->tp_size > 1 ? sl_sp_norm_dw_sum(m, (float *)g->qn, p->gqk, 2 * hd) : SL_OK;
}

/* Forward of block l from x into a; writes the block output to out unless
 * out is NULL (recomputation only needs the activations). Under sequence
 * parallelism x, xmid and out hold this rank's n = N/T rows; ln1 and ln2
 * are kept all-gathered (N rows), the row-parallel partial sums go through
 * the skeleton's dln (free in forward) into their reduce-scatter. */
static int block_forward(sl_model *m, int l, const float *flat, const float *x, void *layer, float *out) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  llama_priv *p = sl_dec(m)->blk;
  float *dln = sl_dec(m)->dln;
  layer_acts *a = layer;
  blockw w = block_views(p, flat, l);
  int64_t N = p->N, C = p->C, n = p->n;
  int parts = llama_parts(p, l), rc;
  const float *xm = x; /* the MLP's input: xmid after the attention, x without it */
  if (parts & LP_ATTN) {
    if ((rc = sl_dec_norm_gathered(m, a->ln1, a->rstd1, x, sl_llama_norm_w(m, p, w.ln1, 0), p->eps))) return rc;
    sl_lin_fwd(m, &p->lqkv, a->qkv, a->ln1, w.wqkv, w.bqkv, N);
    if (p->qkn) qk_norm_fwd(m, p, a, &w);
    if (!p->no_rope) o->rope_fwd(k, a->qkv, m->B, m->T, p->nh, p->nkv, p->hd, sl_llama_layer_freq(p, l), m->seg);
    block_attn_core(m, p, a, l);
    float *ao = p->gemma ? a->ao : a->xmid; /* Gemma: xmid = x + norm(ao) */
    sl_lin_fwd(m, &p->lo, p->sp ? dln : ao, a->att, w.wo, w.bo, N);
    if ((rc = sl_dec_row_parallel_sum(m, dln, ao))) return rc;
    if (p->rmult != 1.0f) o->scale_add(k, ao, p->rmult, 0.0f, n * C); /* Granite's residual_multiplier */
    if (p->gemma) post_norm(m, p, a->xmid, a->rstd3, ao, w.lnpa, 1, x);
    else o->add_inplace(k, a->xmid, x, n * C);
    if (m->res_bf16) o->round_bf16(k, a->xmid, n * C); /* a bf16 residual stream (the block output: models/decoder.c) */
    xm = a->xmid;
    if (!(parts & LP_MLP)) { /* an attention layer alone (Nemotron-H '*') */
      if (out) o->copy(k, out, a->xmid, (size_t)(n * C) * 4);
      return SL_OK;
    }
  }
  if ((rc = sl_dec_norm_gathered(m, a->ln2, a->rstd2, xm, sl_llama_norm_w(m, p, w.ln2, 2), p->eps))) return rc;
  if (llama_moe_at(p, l)) { /* the sparse MLP (models/llama_moe.c): its experts' partial sums under TP, as the dense MLP's */
    float *y = out ? (p->sp ? dln : out) : NULL;
    if ((rc = sl_llama_moe_fwd(m, p, l, a, &w, y))) return rc;
    if (p->Is) { /* the shared expert (Nemotron-H) on the same input, added to the routed experts' output */
      sl_lin_fwd(m, &p->lsgu, a->sgu, a->ln2, w.wgu, w.bgu, N);
      if (p->relu2) o->relu2_fwd(k, a->sh, a->sgu, N * p->Is);
      else o->swiglu_fwd(k, a->sh, a->sgu, N, p->Is);
      if (y) {
        sl_lin_fwd(m, &p->lsdown, p->sy, a->sh, w.wd, w.bd, N);
        o->add_inplace(k, y, p->sy, N * C);
      }
    }
    if (!out) return SL_OK;
    if ((rc = sl_dec_row_parallel_sum(m, dln, out))) return rc;
    if (p->rmult != 1.0f) o->scale_add(k, out, p->rmult, 0.0f, n * C);
    o->add_inplace(k, out, xm, n * C);
    return SL_OK;
  }
  sl_lin_fwd(m, &p->lgu, a->gu, a->ln2, w.wgu, w.bgu, N);
  if (p->relu2) o->relu2_fwd(k, a->h, a->gu, N * p->I);
  else (p->gemma ? o->geglu_fwd : o->swiglu_fwd)(k, a->h, a->gu, N, p->I);
  if (p->gemma) { /* out = xmid + norm(mo); recomputation keeps mo and its statistics for backward */
    sl_lin_fwd(m, &p->ldown, p->sp ? dln : a->mo, a->h, w.wd, w.bd, N);
    if ((rc = sl_dec_row_parallel_sum(m, dln, a->mo))) return rc;
    post_norm(m, p, out ? out : dln, a->rstd4, a->mo, w.lnpf, 3, out ? a->xmid : NULL);
    return SL_OK;
  }
  if (out) {
    sl_lin_fwd(m, &p->ldown, p->sp ? dln : out, a->h, w.wd, w.bd, N);
    if ((rc = sl_dec_row_parallel_sum(m, dln, out))) return rc;
    if (p->rmult != 1.0f) o->scale_add(k, out, p->rmult, 0.0f, n * C);
    o->add_inplace(k, out, xm, n * C);
  }
  return SL_OK;
}

/* The gradient a part's last projection takes, dout (the block output's, all-gathered under sp), times the
 * residual multiplier (Granite): scaled in place when it is dln's gather, else copied into dln first. */
const float *sl_llama_rmult_grad(sl_model *m, const llama_priv *p, const float *dout) {
  if (p->rmult == 1.0f) return dout;
  float *dln = sl_dec(m)->dln;
  int64_t rows = p->sp ? p->N : p->n;
  if (dout != dln) m->ops->copy(m->k, dln, dout, (size_t)(rows * p->C) * 4);
  m->ops->scale_add(m->k, dln, p->rmult, 0.0f, rows * p->C);
  return dln;
}

/* A k/v slice several TP ranks hold (nkv < T): each computed its gradient
 * from its own query heads; the slice's gradient is the sum over the kvrep
 * ranks sharing it. Its two parts in the gradient buffer g: the weights
 * (n = 2*nkv*hd*C floats, k then v rows) and, with Qwen2's q/k/v biases,
 * the k and v biases (nb = 2*nkv*hd after bq). They may hold the earlier
 * micro-batches' sum (--no-sync-accum keeps a unit's gradient across the
 * step), which must not be summed again: kv_grad_begin moves it aside (to
 * kvsum's last n + nb floats) and zeroes the parts before the weight GEMM
 * adds this micro-batch's; kv_grad_sum places them in its group's slot of
 * a zeroed buffer of every group (n + nb floats a slot), sums it over the
 * TP group, reads them back and adds the earlier sum (0 when the runtime
 * zeroed the buffer for the micro-batch, the default: the bits of the part
 * alone). */
static int64_t kv_bias_numel(const llama_priv *p) { return p->qb ? 2 * p->nkv * p->hd : 0; }

static void kv_grad_begin(sl_model *m, llama_priv *p, const blockw *g) {
  int64_t n = 2 * p->nkv * p->hd * p->C, nb = kv_bias_numel(p);
  float *gkv = (float *)g->wqkv + p->nh * p->hd * p->C, *kept = p->kvsum + p->kvgroups * (n + nb);
  m->ops->copy(m->k, kept, gkv, (size_t)n * 4);
  m->ops->zero(m->k, gkv, (size_t)n * 4);
  if (nb) {
    m->ops->copy(m->k, kept + n, g->bqkv + p->A, (size_t)nb * 4);
    m->ops->zero(m->k, (float *)g->bqkv + p->A, (size_t)nb * 4);
  }
}

static int kv_grad_sum(sl_model *m, llama_priv *p, const blockw *g) {
  int64_t n = 2 * p->nkv * p->hd * p->C, nb = kv_bias_numel(p), G = p->kvgroups * (n + nb);
  float *gkv = (float *)g->wqkv + p->nh * p->hd * p->C, *gkb = nb ? (float *)g->bqkv + p->A : NULL;
  float *slot = p->kvsum + p->kvslot * (n + nb), *kept = p->kvsum + G;
  m->ops->zero(m->k, p->kvsum, (size_t)G * 4);
  m->ops->copy(m->k, slot, gkv, (size_t)n * 4);
  if (nb) m->ops->copy(m->k, slot + n, gkb, (size_t)nb * 4);
  int rc = sl_dec_tp_sum(m, p->kvsum, G);
  if (rc) return rc;
  m->ops->copy(m->k, gkv, slot, (size_t)n * 4);
  m->ops->add_inplace(m->k, gkv, kept, n);
  if (nb) {
    m->ops->copy(m->k, gkb, slot + n, (size_t)nb * 4);
    m->ops->add_inplace(m->k, gkb, kept + n, nb);
  }
  return SL_OK;
}

/* Gemma's post-norm in backward: the gradient of its input y (this rank's
 * n rows) into dpost, given dres (the gradient of res + norm(y), which stays
 * in dres for the residual path); the norm's weight gradient into gw (under
 * sp its micro-batch part in gnorm's slot, summed over TP at the end). The
 * gradient the row-parallel GEMM before the norm takes: dpost, all-gathered
 * into dln under sp; NULL when the gather fails. */
static const float *post_norm_bwd(sl_model *m, llama_priv *p, float *gw, const float *y, const float *w, int slot,
                                  const float *rstd) {
  sl_decoder *d = sl_dec(m);
  float *dw = sl_dec_norm_dw(m, gw, p->gnorm + slot * p->C);
  m->ops->zero(m->k, p->dpost, (size_t)(p->n * p->C) * 4);
  if (p->no_post) m->ops->add_inplace(m->k, p->dpost, d->dres, p->n * p->C); /* the identity's gradient */
  else m->ops->rmsnorm_bwd(m->k, p->dpost, dw, d->dres, y, sl_llama_norm_w(m, p, w, slot), rstd, p->n, p->C, p->C);
  if (!p->sp) return p->dpost;
  return sl_dec_sp_gather(m, p->dpost, d->dln) ? NULL : d->dln;
}

/* Block l's backward (after llama_recompute): dres holds the gradient of
 * the block output and receives that of its input. */
static int llama_bwd(sl_model *m, int l, const float *flat, float *grads) {
  sl_decoder *d = sl_dec(m);
  llama_priv *p = d->blk;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  int rc = SL_OK;
  layer_acts *a = llama_layer(m, l);
  const float *x = d->stream[l];
  blockw w = block_views(p, flat, l);
  blockw g = block_views(p, grads, l);
  int64_t n = p->n;
  int parts = llama_parts(p, l);
  float *dln = d->dln, *dn = p->sp ? d->xl : d->dln; /* dn: a norm's output gradient, this rank's rows */
  const float *dout = d->dres;                       /* the gradient of the block output, all-gathered under sp */
  if (!(parts & LP_MLP)) goto attention;
  /* MLP (under sp dln holds the gathered gradient until the GEMM that overwrites it) */
  if (p->gemma && !(dout = post_norm_bwd(m, p, (float *)g.lnpf, a->mo, w.lnpf, 3, a->rstd4))) return SL_ECOMM;
  else if (!p->gemma && p->sp && (rc = sl_dec_sp_gather(m, d->dres, (float *)(dout = dln)))) return rc;
  dout = sl_llama_rmult_grad(m, p, dout);
  if (llama_moe_at(p, l)) {
    int64_t Is = p->Is;
    if (Is) { /* the shared expert's output half first: under sp dout is dln, which the sparse MLP's backward reuses */
      m->ops->zero(m->k, p->dh, (size_t)(N * Is) * 4);
      sl_lin_bwd(m, &p->lsdown, p->dh, (float *)g.wd, (float *)g.bd, dout, a->sh, w.wd, N);
      m->ops->zero(m->k, p->dsgu, (size_t)(N * p->gw * Is) * 4);
      if (p->relu2) o->relu2_bwd(k, p->dsgu, p->dh, a->sgu, N * Is);
      else o->swiglu_bwd(k, p->dsgu, p->dh, a->sgu, N, Is);
    }
    if ((rc = sl_llama_moe_bwd(m, p, l, a, &w, &g, dout, dln))) return rc;
    if (Is) sl_lin_bwd(m, &p->lsgu, dln, (float *)g.wgu, (float *)g.bgu, p->dsgu, a->ln2, w.wgu, N);
  } else {
    m->ops->zero(m->k, p->dh, (size_t)(N * p->I) * 4);
    sl_lin_bwd(m, &p->ldown, p->dh, (float *)g.wd, (float *)g.bd, dout, a->h, w.wd, N);
    m->ops->zero(m->k, p->dgu, (size_t)(N * p->gw * p->I) * 4);
    if (p->relu2) o->relu2_bwd(k, p->dgu, p->dh, a->gu, N * p->I);
    else (p->gemma ? o->geglu_bwd : o->swiglu_bwd)(k, p->dgu, p->dh, a->gu, N, p->I);
    m->ops->zero(m->k, dln, (size_t)(N * C) * 4);
    sl_lin_bwd(m, &p->lgu, dln, (float *)g.wgu, (float *)g.bgu, p->dgu, a->ln2, w.wgu, N);
  }
  if ((rc = sl_dec_row_parallel_sum(m, dln, dn))) return rc;
  o->rmsnorm_bwd(k, d->dres, sl_dec_norm_dw(m, (float *)g.ln2, p->gnorm + (p->gemma ? 2 : 1) * C), dn,
                 parts & LP_ATTN ? a->xmid : x, sl_llama_norm_w(m, p, w.ln2, 2), a->rstd2, n, C, C);
  if (!(parts & LP_ATTN)) return sl_dec_norm_grad_sum(m, (float *)g.ln2, p->gnorm + C);
attention:
  dout = d->dres; /* the attention part's output gradient (the MLP part's dout may be dln, spent by now) */
  if (p->gemma && !(dout = post_norm_bwd(m, p, (float *)g.lnpa, a->ao, w.lnpa, 1, a->rstd3))) return SL_ECOMM;
  else if (!p->gemma && p->sp && (rc = sl_dec_sp_gather(m, d->dres, (float *)(dout = dln)))) return rc;
  dout = sl_llama_rmult_grad(m, p, dout);
  m->ops->zero(m->k, p->datt, (size_t)(N * p->A) * 4);
  sl_lin_bwd(m, &p->lo, p->datt, (float *)g.wo, (float *)g.bo, dout, a->att, w.wo, N);
  m->ops->zero(m->k, p->dqkv, (size_t)(N * p->Q) * 4);
  o->attention_bwd(k, p->dqkv, p->datt, a->qkv, a->att, a->lse, m->B, m->T, p->nh, p->nkv, p->hd,
                   sl_llama_layer_window(p, l), p->scale, m->seg, p->softcap);
  if (!p->no_rope) o->rope_bwd(k, p->dqkv, m->B, m->T, p->nh, p->nkv, p->hd, sl_llama_layer_freq(p, l), m->seg);
  if (p->qkn) {
    sl_llama_qk_norm_bwd_input(m, a, &w, p->dqn);
    if ((rc = sl_llama_qk_norm_bwd_weight(m, a, &w, &g, p->dqn))) return rc;
  }
  m->ops->zero(m->k, dln, (size_t)(N * C) * 4);
  if (p->kvrep > 1) kv_grad_begin(m, p, &g);
  sl_lin_bwd(m, &p->lqkv, dln, (float *)g.wqkv, (float *)g.bqkv, p->dqkv, a->ln1, w.wqkv, N);
  if ((rc = sl_dec_row_parallel_sum(m, dln, dn))) return rc;
  if (p->kvrep > 1 && (rc = kv_grad_sum(m, p, &g))) return rc;
  o->rmsnorm_bwd(k, d->dres, sl_dec_norm_dw(m, (float *)g.ln1, p->gnorm), dn, x, sl_llama_norm_w(m, p, w.ln1, 0),
                 a->rstd1, n, C, C);
  if ((rc = sl_dec_norm_grad_sum(m, (float *)g.ln1, p->gnorm))) return rc;
  if (p->gemma && ((rc = sl_dec_norm_grad_sum(m, (float *)g.lnpa, p->gnorm + 1 * C)) ||
                   (rc = sl_dec_norm_grad_sum(m, (float *)g.lnpf, p->gnorm + 3 * C))))
    return rc;
  if (!(parts & LP_MLP)) return SL_OK;
  return sl_dec_norm_grad_sum(m, (float *)g.ln2, p->gnorm + (p->gemma ? 2 : 1) * C);
}

/* A replicated k/v slice's gradient, for the split (models/llama_split.c). */
void sl_llama_kv_grad_begin(sl_model *m, const blockw *g) { kv_grad_begin(m, sl_dec(m)->blk, g); }
int sl_llama_kv_grad_sum(sl_model *m, const blockw *g) { return kv_grad_sum(m, sl_dec(m)->blk, g); }

/* What activation checkpointing recomputes before block l's backward (and
 * before each half of the split backward: models/llama_split.c). */
static int llama_recompute(sl_model *m, int l, const float *flat) {
  llama_priv *p = sl_dec(m)->blk;
  layer_acts *a = llama_layer(m, l);
  if (m->ac == SL_AC_FULL) return block_forward(m, l, flat, sl_dec(m)->stream[l], a, NULL);
  if (m->ac == SL_AC_SELECTIVE && llama_parts(p, l) & LP_ATTN) block_attn_core(m, p, a, l);
  return SL_OK;
}

/* Layer l's (a hybrid's layer of some parts: models/decoder.c sums them). */
static int64_t llama_layer_flops(const sl_model *m, int64_t l, int64_t T) {
  const llama_priv *p = sl_dec(m)->blk;
  const sl_model_config *c = &m->cfg;
  int parts = llama_parts(p, l);
  int64_t nh = c->num_attention_heads, Q = (nh + 2 * c->num_key_value_heads) * p->hd, A = nh * p->hd;
  int64_t attn = parts & LP_ATTN ? 6 * (p->C * Q + A * p->C) + 12 * nh * p->hd * T : 0;
  if (!(parts & LP_MLP)) return attn;
  if (!llama_moe_at(p, l)) return attn + 6 * (p->gw + 1) * p->C * c->intermediate_size;
  /* the router, k active experts, the shared expert */
  return attn + 6 * (p->E * p->C + (p->gw + 1) * p->C * (p->k * c->moe_intermediate + c->moe_shared_intermediate));
}

static int64_t llama_flops(const sl_model *m, int64_t T) {
  const sl_decoder *d = sl_dec(m);
  const llama_priv *p = d->blk;
  const sl_model_config *c = &m->cfg;
  /* 6 N + 12 l h s (field guide convention): N = parameters of the matmuls
   * (blocks + LM head, the embedding lookup excluded), attention counted
   * without the causal halving. Recomputation not counted. The whole
   * model's (every TP rank's slices together). */
  if (p->parts) { /* a hybrid of this kind's layers alone (Nemotron-H without 'M'): each layer's parts */
    int64_t f = 6 * d->V * p->C;
    for (int64_t l = 0; l < d->L; l++) f += llama_layer_flops(m, l, T);
    return f;
  }
  int64_t nh = c->num_attention_heads, Q = (nh + 2 * c->num_key_value_heads) * p->hd, A = nh * p->hd;
  int64_t per_layer = p->C * Q + A * p->C + 3 * p->C * c->intermediate_size;
  if (p->E)
    per_layer =
        p->C * Q + A * p->C + p->E * p->C + p->k * 3 * p->C * c->moe_intermediate; /* the router, k active experts */
  int64_t Nmm = d->L * per_layer + d->V * p->C;
  return 6 * Nmm + 12 * d->L * nh * p->hd * T;
}

/* NULL when T splits the model's heads, KV heads and MLP width, else why not. */
static const char *tp_misfit(const sl_model_config *c, int64_t T, char *why, size_t cap) {
  int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, I = c->intermediate_size;
  if (T > nh) snprintf(why, cap, "--tp %lld is more than num_attention_heads %lld", (long long)T, (long long)nh);
  else if (nh % T)
    snprintf(why, cap, "num_attention_heads %lld is not divisible by --tp %lld", (long long)nh, (long long)T);
  else if (nkv >= T && nkv % T)
    snprintf(why, cap, "num_key_value_heads %lld is not divisible by --tp %lld", (long long)nkv, (long long)T);
  else if (nkv < T && T % nkv)
    snprintf(why, cap,
             "--tp %lld is not a multiple of num_key_value_heads %lld (each rank must hold one whole KV "
             "group)",
             (long long)T, (long long)nkv);
  else if (I % T)
    snprintf(why, cap, "intermediate_size %lld is not divisible by --tp %lld", (long long)I, (long long)T);
  else if (c->moe_shared_intermediate % T)
    snprintf(why, cap, "the shared expert's intermediate size %lld is not divisible by --tp %lld",
             (long long)c->moe_shared_intermediate, (long long)T);
  else if (c->moe_experts && c->moe_intermediate % T)
    snprintf(why, cap, "the experts' intermediate size %lld is not divisible by --tp %lld",
             (long long)c->moe_intermediate, (long long)T);
  else return NULL;
  return why;
}

/* recomputed: what checkpointing recomputes (selective: att, lse; full:
 * all); else a layer's kept tensors (none: all; selective: all but att, lse,
 * which are shared's). */
static int llama_alloc_layer(sl_model *m, int64_t l, void *layer, int recomputed, const void *shared) {
  llama_priv *p = sl_dec(m)->blk;
  layer_acts *a = layer;
  int64_t N = p->N, n = p->n; /* n: the stream's rows on this rank (N/T under sp) */
  /* gate|up and h: a MoE layer's experts' rows (the N*k slots; under EP the rows received), a dense MLP's N */
  int moe = llama_moe_at(p, l), dense = l < 0 ? p->dense_ffn : !moe;
  int64_t ffn = moe ? sl_llama_moe_rows(m, p) * p->Ie : 0;
  if (dense && N * p->I > ffn) ffn = N * p->I;
  int parts = llama_parts(p, l), at = parts & LP_ATTN, ml = parts & LP_MLP;
  int attn = recomputed || m->ac == SL_AC_NONE, rest = !recomputed || m->ac == SL_AC_FULL;
  if (!at) { /* an MLP layer alone: no attention tensors (selective's shared pair never read) */
  } else if (attn) {
    if (!(a->att = sl_model_buf_bf16(m, N * p->A, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->lse = sl_model_buf(m, N * p->nh, SL_ARENA_ACTS))) return SL_ENOMEM;
  } else {
    a->att = ((const layer_acts *)shared)->att;
    a->lse = ((const layer_acts *)shared)->lse;
  }
  if (rest && at) {
    if (!(a->ln1 = sl_model_buf_bf16(m, N * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->rstd1 = sl_model_buf(m, n, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->qkv = sl_model_buf_bf16(m, N * p->Q, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->xmid = (m->res_bf16 ? sl_model_buf_bf16 : sl_model_buf)(m, n * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
  }
  if (rest && ml) {
    if (!(a->ln2 = sl_model_buf_bf16(m, N * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->rstd2 = sl_model_buf(m, n, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->gu = sl_model_buf_bf16(m, ffn * p->gw, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->h = sl_model_buf_bf16(m, ffn, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (moe && p->Is && (!(a->sgu = sl_model_buf_bf16(m, N * p->gw * p->Is, SL_ARENA_ACTS)) ||
                         !(a->sh = sl_model_buf_bf16(m, N * p->Is, SL_ARENA_ACTS))))
      return SL_ENOMEM;
  }
  if (rest) {
    if (moe && sl_llama_moe_alloc_layer(m, p, a)) return SL_ENOMEM;
    if (p->qkn && !(a->qkr = sl_model_buf_bf16(m, N * p->Q, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (p->qkn && !(a->qkrs = sl_model_buf(m, N * (p->nh + p->nkv), SL_ARENA_ACTS))) return SL_ENOMEM;
    /* Gemma's ao, mo: GEMM outputs, bf16 unless a TP sum (of bf16 parts) */
    float *(*ao_buf)(sl_model *, int64_t, sl_arena) = m->tp_size == 1 ? sl_model_buf_bf16 : sl_model_buf;
    if (p->gemma && (!(a->ao = ao_buf(m, n * p->C, SL_ARENA_ACTS)) || !(a->rstd3 = sl_model_buf(m, n, SL_ARENA_ACTS)) ||
                     !(a->mo = ao_buf(m, n * p->C, SL_ARENA_ACTS)) || !(a->rstd4 = sl_model_buf(m, n, SL_ARENA_ACTS))))
      return SL_ENOMEM;
  }
  return SL_OK;
}

static int llama_alloc_scratch(sl_model *m) {
  llama_priv *p = sl_dec(m)->blk;
  int64_t N = p->N, C = p->C;
  int64_t ffn = p->E ? sl_llama_moe_rows(m, p) * p->Ie : 0; /* the widest MLP's rows x width */
  if (p->dense_ffn && N * p->I > ffn) ffn = N * p->I;
  if (N * p->Is > ffn) ffn = N * p->Is;
  if (p->E && sl_llama_moe_alloc_scratch(m, p)) return SL_ENOMEM;
  if (p->Is && (!(p->dsgu = sl_model_buf(m, N * p->gw * p->Is, SL_ARENA_WORKSPACE)) ||
                !(p->sy = sl_model_buf(m, N * C, SL_ARENA_WORKSPACE))))
    return SL_ENOMEM;
  if (!(p->dh = sl_model_buf(m, ffn, SL_ARENA_WORKSPACE)) ||
      !(p->dgu = sl_model_buf(m, ffn * p->gw, SL_ARENA_WORKSPACE)) ||
      !(p->datt = sl_model_buf(m, N * p->A, SL_ARENA_WORKSPACE)) ||
      !(p->dqkv = sl_model_buf(m, N * p->Q, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  if (p->sp && !(p->gnorm = sl_model_buf(m, (p->gemma ? 4 : 2) * C, SL_ARENA_WORKSPACE))) return SL_ENOMEM;
  if (p->gemma && (!(p->w1 = sl_model_buf(m, 4 * C + p->qkn, SL_ARENA_WORKSPACE)) ||
                   !(p->dpost = sl_model_buf(m, N * C, SL_ARENA_WORKSPACE))))
    return SL_ENOMEM;
  if (p->qkn &&
      (!(p->dqn = sl_model_buf(m, N * p->Q, SL_ARENA_WORKSPACE)) ||
       !(p->zhd = sl_model_buf(m, p->hd, SL_ARENA_WORKSPACE)) || !(p->rjunk = sl_model_buf(m, N, SL_ARENA_WORKSPACE)) ||
       (m->tp_size > 1 && !(p->gqk = sl_model_buf(m, 2 * p->hd, SL_ARENA_WORKSPACE)))))
    return SL_ENOMEM;
  if (p->kvrep > 1 && !(p->kvsum = sl_model_buf(m, (p->kvgroups + 1) * (2 * p->nkv * p->hd * C + kv_bias_numel(p)),
                                                SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  return SL_OK;
}

/* Decoder layer l's tensors. */
static int llama_spec(sl_model *m, sl_unit_spec *b, int64_t l) {
  const sl_model_config *c = &m->cfg;
  const sl_decoder *d = sl_dec(m);
  const llama_priv *p = d->blk;
  int64_t T = m->tp_size, C = p->C, nkv_parts = c->num_key_value_heads < T ? c->num_key_value_heads : T;
  float std = d->std;
  int rc;
  char nm[SL_TENSOR_NAME_MAX];
  int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, I = c->intermediate_size;
  /* the family's names (llama_init): a hybrid's layer of one part (Nemotron-H: norm, mixer.*; Granite 4.0-H:
   * HF layer l / 2's input_layernorm, self_attn.* or post_attention_layernorm, shared_mlp.*) */
  int lp = llama_parts(p, l);
  const char *at = p->m_att, *ml = p->m_mlp;
  char sfx[SL_TENSOR_NAME_MAX];
#define ADD(suffix, nd, d0, d1, decay, init, split, parts)                                                             \
  snprintf(nm, sizeof nm, "%s.%lld.%s", p->pre, (long long)(l / p->div), suffix);                                      \
  if ((rc = sl_unit_add_split(m, b, nm, nd, d0, d1, decay, init, std, split, parts))) return rc
#define MOD(mod, rest) (snprintf(sfx, sizeof sfx, "%s.%s", mod, rest), sfx)
  sl_init_kind ni = c->gemma ? SL_INIT_ZEROS : SL_INIT_ONES; /* Gemma's norms multiply by 1 + w */
  if (!(lp & LP_ATTN)) goto mlp;
  ADD(p->n_ln1, 1, C, 0, 0, ni, SL_SPLIT_NONE, 1);
  ADD(MOD(at, "q_proj.weight"), 2, nh * p->hd, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, T);
  ADD(MOD(at, "k_proj.weight"), 2, nkv * p->hd, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, nkv_parts);
  ADD(MOD(at, "v_proj.weight"), 2, nkv * p->hd, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, nkv_parts);
  if (c->qkv_bias) { /* split with their weights' rows; zero-initialised and not decayed, as transformers does */
    ADD(MOD(at, "q_proj.bias"), 1, nh * p->hd, 0, 0, SL_INIT_ZEROS, SL_SPLIT_COL, T);
    ADD(MOD(at, "k_proj.bias"), 1, nkv * p->hd, 0, 0, SL_INIT_ZEROS, SL_SPLIT_COL, nkv_parts);
    ADD(MOD(at, "v_proj.bias"), 1, nkv * p->hd, 0, 0, SL_INIT_ZEROS, SL_SPLIT_COL, nkv_parts);
  }
  ADD(MOD(at, "o_proj.weight"), 2, C, nh * p->hd, 1, SL_INIT_NORMAL, SL_SPLIT_ROW, T);
  /* a row-parallel projection's bias is whole on every rank (added once: SL_LIN_ROW) */
  if (c->o_bias) {
    ADD(MOD(at, "o_proj.bias"), 1, C, 0, 0, SL_INIT_ZEROS, SL_SPLIT_NONE, 1);
  }
  if (c->qk_norm) { /* replicated over TP; their gradients summed over it */
    ADD("self_attn.q_norm.weight", 1, p->hd, 0, 0, ni, SL_SPLIT_NONE, 1);
    ADD("self_attn.k_norm.weight", 1, p->hd, 0, 0, ni, SL_SPLIT_NONE, 1);
  }
mlp:
  if (!(lp & LP_MLP)) return SL_OK;
  ADD(p->n_ln2, 1, C, 0, 0, ni, SL_SPLIT_NONE, 1);
  if (c->gemma) {
    ADD("pre_feedforward_layernorm.weight", 1, C, 0, 0, ni, SL_SPLIT_NONE, 1);
  }
  if (llama_moe_at(p, l)) {
    if ((rc = sl_llama_moe_spec(m, b, l, std)) || !p->Is) return rc;
    if (!p->packed_gu) ml = "mixer.shared_experts"; /* Granite 4.0-H's is its shared_mlp */
    I = c->moe_shared_intermediate;                 /* the shared expert: a dense MLP of its width */
  }
  if (p->packed_gu) { /* one HF tensor of two stacked parts (gate | up rows), each column-split */
    snprintf(nm, sizeof nm, "%s.%lld.%s", p->pre, (long long)(l / p->div), MOD(ml, "input_linear.weight"));
    if ((rc = sl_unit_add_stacked(m, b, nm, 2, 2 * I, C, 0, 1, SL_INIT_NORMAL, std, 2))) return rc;
    ADD(MOD(ml, "output_linear.weight"), 2, C, I, 1, SL_INIT_NORMAL, SL_SPLIT_ROW, T);
    return SL_OK;
  }
  if (!p->relu2) {
    ADD(MOD(ml, "gate_proj.weight"), 2, I, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, T);
  }
  ADD(MOD(ml, "up_proj.weight"), 2, I, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, T);
  if (c->mlp_bias && !p->relu2) {
    ADD(MOD(ml, "gate_proj.bias"), 1, I, 0, 0, SL_INIT_ZEROS, SL_SPLIT_COL, T);
  }
  if (c->mlp_bias) {
    ADD(MOD(ml, "up_proj.bias"), 1, I, 0, 0, SL_INIT_ZEROS, SL_SPLIT_COL, T);
  }
  ADD(MOD(ml, "down_proj.weight"), 2, C, I, 1, SL_INIT_NORMAL, SL_SPLIT_ROW, T);
  if (c->mlp_bias) {
    ADD(MOD(ml, "down_proj.bias"), 1, C, 0, 0, SL_INIT_ZEROS, SL_SPLIT_NONE, 1);
  }
  if (c->gemma) {
    ADD("post_feedforward_layernorm.weight", 1, C, 0, 0, ni, SL_SPLIT_NONE, 1);
  }
#undef ADD
#undef MOD
  return SL_OK;
}

/* The RoPE frequencies, once, in backend memory. */
static int llama_prepare(sl_model *m) {
  llama_priv *p = sl_dec(m)->blk;
  float *inv = malloc((size_t)(p->hd / 2 + 1) * sizeof(float));
  if (!inv) return sl_fail(SL_ENOMEM, "out of memory");
  sl_rope_inv_freq_cfg(inv, &m->cfg); /* c->rope_scaling's rule */
  p->inv_freq = sl_rope_table_upload(m->ops, m->k, inv, p->hd);
  if (p->inv_freq && m->cfg.rope_local_base_freq > 0) { /* Gemma 3's sliding layers: plain RoPE, their own base */
    sl_rope_inv_freq(inv, p->hd, (float)m->cfg.rope_local_base_freq);
    p->inv_freq_local = sl_rope_table_upload(m->ops, m->k, inv, p->hd);
  }
  free(inv);
  return p->inv_freq && (p->inv_freq_local || !(m->cfg.rope_local_base_freq > 0)) ? SL_OK : SL_ENOMEM;
}

/* SL_TEST_GEMMA_OFF (base/env.c, a test hook): Gemma without one of its
 * features, for the negative controls of tests/ref/gemma2_checks.py:
 * embed_scale (embeddings not times sqrt(hidden)), post_norms (the
 * post-attention / post-feedforward norms are the identity) or plus_one
 * (every norm multiplies by w, not 1 + w). */
static int gemma_test_off(sl_decoder *d, llama_priv *p) {
  const char *v = sl_env_str("SL_TEST_GEMMA_OFF");
  if (!v || !*v) return SL_OK;
  if (!strcmp(v, "embed_scale")) d->embed_scale = 0;
  else if (!strcmp(v, "post_norms")) p->no_post = 1;
  else if (!strcmp(v, "plus_one")) d->plus_one = p->plus_one = 0;
  else
    return sl_fail(SL_EINPUT,
                   "environment variable SL_TEST_GEMMA_OFF = '%s' (expected embed_scale, post_norms or plus_one)", v);
  sl_log(SL_LOG_WARN, "SL_TEST_GEMMA_OFF=%s: Gemma without that feature (a test hook)", v);
  return SL_OK;
}

static int llama_init(sl_model *m, sl_decoder *d) {
  const sl_model_config *c = &m->cfg;
  llama_priv *p = calloc(1, sizeof *p);
  if (!p) return sl_fail(SL_ENOMEM, "out of memory");
  d->blk = p;
  int rc = sl_dec_tp_check(m, tp_misfit, m->cfg.num_attention_heads);
  if (rc) return rc;
  int64_t T = m->tp_size, nkv_parts = c->num_key_value_heads < T ? c->num_key_value_heads : T;
  p->N = d->N;
  p->C = d->C;
  p->nh = c->num_attention_heads / T;
  p->nkv = c->num_key_value_heads / nkv_parts;
  p->kvrep = T / nkv_parts;
  p->kvgroups = nkv_parts;
  p->kvslot = m->tp_rank / p->kvrep;
  p->hd = c->head_dim;
  p->Q = (p->nh + 2 * p->nkv) * p->hd;
  p->qb = c->qkv_bias ? p->Q : 0;
  p->ob = c->o_bias ? p->C : 0;
  p->qkn = c->qk_norm ? 2 * c->head_dim : 0;
  p->relu2 = c->mlp_relu2;
  p->gw = p->relu2 ? 1 : 2;
  p->no_rope = c->no_rope;
  p->mbias = c->mlp_bias;
  p->mb = c->mlp_bias ? p->gw * (c->intermediate_size / T) : 0;
  p->db = c->mlp_bias ? p->C : 0;
  p->A = p->nh * p->hd;
  p->I = c->intermediate_size / T;
  if (!(p->lwin = calloc((size_t)d->L, sizeof *p->lwin))) return sl_fail(SL_ENOMEM, "out of memory");
  for (int64_t l = 0; l < d->L; l++) p->lwin[l] = sl_cfg_layer_window(c, l);
  int hybrid = c->layer_pattern[0] != 0; /* the hybrids: '*' and '-' layers are this kind's, one part each */
  int granite = c->arch == SL_ARCH_GRANITE_H, nemo = hybrid && !granite;
  if (hybrid && !(p->parts = calloc((size_t)d->L, 1))) return sl_fail(SL_ENOMEM, "out of memory");
  for (int64_t l = 0; hybrid && l < d->L; l++)
    p->parts[l] = c->layer_pattern[l] == '*' ? LP_ATTN : strchr("-E", c->layer_pattern[l]) ? LP_MLP : 0;
  p->pre = nemo ? "backbone.layers" : "model.layers";
  p->div = c->layer_div > 1 ? c->layer_div : 1;
  p->n_ln1 = nemo ? "norm.weight" : "input_layernorm.weight";
  p->n_ln2 = nemo ? "norm.weight" : "post_attention_layernorm.weight";
  p->m_att = nemo ? "mixer" : "self_attn";
  p->m_mlp = nemo ? "mixer" : granite ? "shared_mlp" : "mlp";
  p->packed_gu = granite;
  p->rmult = c->residual_mult > 0 ? (float)c->residual_mult : 1.0f;
  p->gemma = c->gemma;
  p->softcap = (float)c->attn_logit_softcapping;
  p->dense_ffn = !c->moe_experts;
  if ((p->E = c->moe_experts)) {
    p->k = c->moe_topk;
    p->norm_topk = c->moe_norm_topk;
    p->moe_mode = c->moe_norm_topk ? SL_MOE_NORM : 0;
    p->moe_mode |= c->moe_sigmoid ? SL_MOE_SIGMOID : 0;
    p->rscale = c->moe_routed_scale > 0 ? (float)c->moe_routed_scale : 1.0f;
    p->Ie = c->moe_intermediate / T; /* each expert's gate|up column-split, down row-split, as the dense MLP */
    p->Is = c->moe_shared_intermediate / T;
    if (hybrid) { /* a hybrid's 'E' layers are sparse, its '-' layers dense */
      if (!(p->moel = calloc((size_t)d->L, 1))) return sl_fail(SL_ENOMEM, "out of memory");
      for (int64_t l = 0; l < d->L; l++) {
        p->moel[l] = (unsigned char)sl_cfg_moe_layer(c, l);
        p->dense_ffn |= !p->moel[l] && (p->parts[l] & LP_MLP);
      }
    }
    if (!(p->hoffs = calloc((size_t)(2 * p->E + 1), sizeof *p->hoffs)) ||
        !(p->load = calloc((size_t)(d->L * p->E), sizeof *p->load)) ||
        !(p->ecnt = calloc((size_t)(2 * p->E + 2 * m->ep_size), sizeof *p->ecnt)))
      return sl_fail(SL_ENOMEM, "out of memory");
    if ((rc = sl_llama_moe_init(m, p))) return rc;
  }
  /* the projections: q | k | v and gate | up stacked (one GEMM each); o_proj and down_proj row-parallel */
  p->lqkv = sl_lin_one("qkv", NULL, p->C, p->Q, SL_LIN_COL);
  sl_lin_module(&p->lqkv, nemo ? "mixer.q_proj" : "self_attn.q_proj", p->nh * p->hd);
  sl_lin_module(&p->lqkv, nemo ? "mixer.k_proj" : "self_attn.k_proj", p->nkv * p->hd);
  sl_lin_module(&p->lqkv, nemo ? "mixer.v_proj" : "self_attn.v_proj", p->nkv * p->hd);
  p->lo = sl_lin_one("o_proj", nemo ? "mixer.o_proj" : "self_attn.o_proj", p->A, p->C, SL_LIN_ROW);
  if (p->E) { /* Mixtral: block_sparse_moe.{gate, experts.e.w1|w3|w2}; Qwen3-MoE: mlp.{gate, experts.e.*_proj};
                Nemotron-H: mixer.{gate, experts.e.up_proj|down_proj, shared_experts.up_proj|down_proj} */
    int q3 = c->arch == SL_ARCH_QWEN3_MOE;
    p->lrouter = sl_lin_one("router",
                            nemo      ? "mixer.gate"
                            : q3      ? "mlp.gate"
                            : granite ? "block_sparse_moe.router.layer"
                                      : "block_sparse_moe.gate",
                            p->C, p->E, SL_LIN_REPLICATED);
    if (granite) { /* Granite 4.0-H: fused experts (gate | up rows), the shared MLP beside them */
      p->legu = sl_lin_one("experts.gate_up", "block_sparse_moe.input_linear", p->C, 2 * p->Ie, SL_LIN_COL);
      p->ledown = sl_lin_one("experts.down", "block_sparse_moe.output_linear", p->Ie, p->C, SL_LIN_ROW);
      p->lsgu = sl_lin_one("shared.gate_up", "shared_mlp.input_linear", p->C, 2 * p->Is, SL_LIN_COL);
      p->lsdown = sl_lin_one("shared.down", "shared_mlp.output_linear", p->Is, p->C, SL_LIN_ROW);
    } else if (p->relu2) {
      p->legu = sl_lin_one("experts.up", "experts.up_proj", p->C, p->Ie, SL_LIN_COL);
      p->ledown = sl_lin_one("experts.down", "experts.down_proj", p->Ie, p->C, SL_LIN_ROW);
      p->lsgu = sl_lin_one("shared.up", "mixer.shared_experts.up_proj", p->C, p->Is, SL_LIN_COL);
      p->lsdown = sl_lin_one("shared.down", "mixer.shared_experts.down_proj", p->Is, p->C, SL_LIN_ROW);
    } else {
      p->legu = sl_lin_one("experts.gate_up", NULL, p->C, 2 * p->Ie, SL_LIN_COL);
      sl_lin_module(&p->legu, q3 ? "experts.gate_proj" : "experts.w1", p->Ie);
      sl_lin_module(&p->legu, q3 ? "experts.up_proj" : "experts.w3", p->Ie);
      p->ledown = sl_lin_one("experts.down", q3 ? "experts.down_proj" : "experts.w2", p->Ie, p->C, SL_LIN_ROW);
    }
  }
  if (p->E && !p->dense_ffn) {
  } else if (p->relu2) { /* Nemotron-H: up_proj alone */
    p->lgu = sl_lin_one("up_proj", nemo ? "mixer.up_proj" : "mlp.up_proj", p->C, p->I, SL_LIN_COL);
    p->ldown = sl_lin_one("down_proj", nemo ? "mixer.down_proj" : "mlp.down_proj", p->I, p->C, SL_LIN_ROW);
  } else if (granite) { /* shared_mlp.input_linear (gate | up rows), output_linear */
    p->lgu = sl_lin_one("gate_up", "shared_mlp.input_linear", p->C, 2 * p->I, SL_LIN_COL);
    p->ldown = sl_lin_one("down_proj", "shared_mlp.output_linear", p->I, p->C, SL_LIN_ROW);
  } else {
    p->lgu = sl_lin_one("gate_up", NULL, p->C, 2 * p->I, SL_LIN_COL);
    sl_lin_module(&p->lgu, "mlp.gate_proj", p->I);
    sl_lin_module(&p->lgu, "mlp.up_proj", p->I);
    p->ldown = sl_lin_one("down_proj", "mlp.down_proj", p->I, p->C, SL_LIN_ROW);
  }
  p->scale = c->query_pre_attn_scalar > 0 ? (float)(sl_rope_score_factor(c) / sqrt(c->query_pre_attn_scalar))
                                          : sl_rope_score_scale(c); /* YaRN's attention_factor^2 in each */
  if (c->attention_mult > 0) /* Granite's muP (only its readers set it), times YaRN's attention_factor^2 as the
                               rotary tables of transformers carry it */
    p->scale = (float)(c->attention_mult * sl_rope_score_factor(c));
  p->eps = (float)c->rms_norm_eps;
  p->sp = d->sp;
  p->n = d->n;
  d->eps = p->eps;
  d->std = c->initializer_range > 0 ? (float)c->initializer_range : 0.02f;
  d->embed_name = nemo ? "backbone.embeddings.weight" : "model.embed_tokens.weight";
  d->norm_name = nemo ? "backbone.norm_f.weight" : "model.norm.weight";
  if (c->embedding_mult > 0 && c->embedding_mult != 1) d->embed_scale = (float)c->embedding_mult; /* Granite */
  if (c->logits_scaling > 0 && c->logits_scaling != 1) d->logit_div = (float)c->logits_scaling;
  d->head_init = SL_INIT_NORMAL;
  if (c->gemma) { /* the skeleton's Gemma options: (1 + w) final norm, scaled embeddings, final-logit softcap */
    d->plus_one = p->plus_one = 1;
    p->no_post = 0;
    d->embed_scale = (float)sqrt((double)c->hidden_size);
    d->final_softcap = (float)c->final_logit_softcapping;
    return gemma_test_off(d, p);
  }
  return SL_OK;
}

static void llama_caps(const sl_model_config *c, sl_model_caps *out) {
  *out = (sl_model_caps){.attention = !c->layer_pattern[0] || strchr(c->layer_pattern, '*') != NULL, /* a hybrid's */
                         .doc_mask = 1,
                         .recurrent = 0,
                         .zb_split = 1, /* models/llama_split.c, the MoE MLP's halves models/llama_moe.c */
                         .zb_split_accum = 1,
                         .bf16 = 1, /* Gemma 2 / 3 too: tests/ref/bf16_ref.py mirrors their ops */
                         .bf16_stream = 1,
                         .bf16_acts = 1,
                         .tp_width = c->num_attention_heads};
}

const sl_block_kind sl_llama_block = {
    .unit_kind = "llama_block",
    .layer_size = sizeof(layer_acts),
    .caps = llama_caps,
    .init = llama_init,
    .spec = llama_spec,
    .prepare = llama_prepare,
    .alloc_layer = llama_alloc_layer,
    .alloc_scratch = llama_alloc_scratch,
    .fwd = block_forward,
    .recompute = llama_recompute,
    .bwd = llama_bwd,
    .stash_numel = sl_llama_stash_numel,
    .bwd_input = sl_llama_bwd_input,
    .bwd_weight = sl_llama_bwd_weight,
    .flops_per_token = llama_flops,
    .layer_flops = llama_layer_flops,
    .destroy = llama_destroy,
    .moe_load = sl_llama_moe_load,
    .moe_stats = sl_llama_moe_stats,
    .moe_bias_step = sl_llama_moe_bias_step,
    .moe_bias = sl_llama_moe_bias,
    .moe_bias_set = sl_llama_moe_bias_set,
    .loss_term = sl_llama_moe_loss_term,
    .has_companions = sl_llama_moe_has_experts,
    .companion_spec = sl_llama_moe_experts_spec,
};
