/* models/llama.c — Llama and Mistral as units over flat buffers.
 *
 * Units: 0 = embedding; 1..L = decoder blocks; L+1 = final norm + LM head.
 * A block's tensors are packed so that q/k/v and gate/up are each one
 * contiguous matrix and run as one GEMM:
 *   ln1 (C) | Wq (nh*hd, C) Wk (nkv*hd, C) Wv (nkv*hd, C) | Wo (C, nh*hd) |
 *   ln2 (C) | Wgate (I, C) Wup (I, C) | Wdown (C, I)
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
#include "models/llama_internal.h"
#include "models/rope.h"

static void llama_destroy(sl_model *m) {
  llama_priv *p = m->priv;
  if (!p) return;
  sl_act_sets_free(p->sets, p->nsets);
  if (p->inv_freq) m->ops->free(m->k, p->inv_freq);
  free(p->hvp);
  free(p);
  m->priv = NULL;
}

static void block_attn_core(sl_model *m, llama_priv *p, layer_acts *a) {
  m->ops->attention_fwd(m->k, a->att, a->lse, a->qkv, m->B, m->T, p->nh, p->nkv, p->hd, p->window,
                        1.0f / sqrtf((float)p->hd), m->seg);
}

/* buf (n) summed over the TP group (the row-parallel outputs, the input
 * gradients of the column-parallel GEMMs); nothing at T = 1. */
static int tp_sum(sl_model *m, float *buf, int64_t n) {
  if (m->tp_size == 1) return SL_OK;
  return m->access.tp.allreduce(m->access.tp.user, buf, n, SL_TP_SUM);
}

/* Sequence parallelism's g: the (n, C) rows of every rank into (N, C). */
static int sp_gather(sl_model *m, llama_priv *p, const float *rows, float *all) {
  return m->access.tp.allgather(m->access.tp.user, rows, all, p->n * p->C);
}

/* The partial sums (N, C) of a row-parallel GEMM into this rank's (n, C)
 * rows of their sum over the TP group: a reduce-scatter under sequence
 * parallelism (from the scratch part into rows), else an all-reduce in
 * place (part == rows). */
static int row_parallel_sum(sl_model *m, llama_priv *p, float *part, float *rows) {
  if (!p->sp) return tp_sum(m, rows, p->N * p->C);
  return m->access.tp.reducescatter(m->access.tp.user, part, rows, p->n * p->C);
}

/* RMSNorm of the stream's n rows into the (N, C) input of a column-parallel
 * GEMM: in place at T = 1 or without sp; under sp the local rows go to
 * p->xl and are all-gathered into out. */
static int norm_gathered(sl_model *m, llama_priv *p, float *out, float *rstd, const float *x, const float *w) {
  m->ops->rmsnorm_fwd(m->k, p->sp ? p->xl : out, rstd, x, w, p->n, p->C, p->C, p->eps);
  return p->sp ? sp_gather(m, p, p->xl, out) : SL_OK;
}

/* Forward of block l from x into a; writes the block output to out unless
 * out is NULL (recomputation only needs the activations). Under sequence
 * parallelism x, xmid and out hold this rank's n = N/T rows; ln1 and ln2
 * are kept all-gathered (N rows), the row-parallel partial sums go through
 * p->dln (free in forward) into their reduce-scatter. */
static int block_forward(sl_model *m, llama_priv *p, const float *flat, const float *x, layer_acts *a, float *out) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  blockw w = block_views(p, flat);
  int64_t N = p->N, C = p->C, n = p->n;
  int rc = norm_gathered(m, p, a->ln1, a->rstd1, x, w.ln1);
  if (rc) return rc;
  o->linear_fwd(k, a->qkv, a->ln1, w.wqkv, NULL, N, C, p->Q);
  o->rope_fwd(k, a->qkv, m->B, m->T, p->nh, p->nkv, p->hd, p->inv_freq, m->seg);
  block_attn_core(m, p, a);
  o->linear_fwd(k, p->sp ? p->dln : a->xmid, a->att, w.wo, NULL, N, p->A, C);
  if ((rc = row_parallel_sum(m, p, p->dln, a->xmid))) return rc;
  o->add_inplace(k, a->xmid, x, n * C);
  if ((rc = norm_gathered(m, p, a->ln2, a->rstd2, a->xmid, w.ln2))) return rc;
  o->linear_fwd(k, a->gu, a->ln2, w.wgu, NULL, N, C, 2 * p->I);
  o->swiglu_fwd(k, a->h, a->gu, N, p->I);
  if (out) {
    o->linear_fwd(k, p->sp ? p->dln : out, a->h, w.wd, NULL, N, p->I, C);
    if ((rc = row_parallel_sum(m, p, p->dln, out))) return rc;
    o->add_inplace(k, out, a->xmid, n * C);
  }
  return SL_OK;
}

/* A k/v slice several TP ranks hold (nkv < T): each computed its gradient
 * from its own query heads; the slice's gradient is the sum over the kvrep
 * ranks sharing it. gkv (2*nkv*hd*C, k then v rows) may hold the earlier
 * micro-batches' sum (--no-sync-accum keeps a unit's gradient across the
 * step), which must not be summed again: kv_grad_begin moves it aside (to
 * kvsum's last n floats) and zeroes gkv before the weight GEMM adds this
 * micro-batch's part; kv_grad_sum places that part in its group's slot of a
 * zeroed buffer of every group, sums it over the TP group, reads it back
 * and adds the earlier sum (0 when the runtime zeroed the buffer for the
 * micro-batch, the default: the bits of the part alone). */
static void kv_grad_begin(sl_model *m, llama_priv *p, float *gkv) {
  int64_t n = 2 * p->nkv * p->hd * p->C;
  m->ops->copy(m->k, p->kvsum + p->kvgroups * n, gkv, (size_t)n * 4);
  m->ops->zero(m->k, gkv, (size_t)n * 4);
}

static int kv_grad_sum(sl_model *m, llama_priv *p, float *gkv) {
  int64_t n = 2 * p->nkv * p->hd * p->C;
  float *slot = p->kvsum + p->kvslot * n;
  m->ops->zero(m->k, p->kvsum, (size_t)(p->kvgroups * n) * 4);
  m->ops->copy(m->k, slot, gkv, (size_t)n * 4);
  int rc = tp_sum(m, p->kvsum, p->kvgroups * n);
  if (rc) return rc;
  m->ops->copy(m->k, gkv, slot, (size_t)n * 4);
  m->ops->add_inplace(m->k, gkv, p->kvsum + p->kvgroups * n, n);
  return SL_OK;
}

static int llama_fwd(sl_model *m, int u, const float *flat) {
  llama_priv *p = m->priv;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  if (u == 0) {
    if (p->vp) return sl_vp_embedding_fwd(m, &p->vs, p->stream[0], flat, N, C, p->sp ? p->dln : NULL);
    o->embedding_fwd(k, p->stream[0], m->tokens, flat, N, C);
    return SL_OK;
  }
  if (u <= p->L) {
    int l = u - 1;
    return block_forward(m, p, flat, p->stream[l], &p->la[l], p->stream[l + 1]);
  }
  if (p->vp) return sl_lm_head_vp_fwd(m, p->hv, flat, p->stream[p->L]);
  return sl_lm_head_fwd(m, &p->head, flat, p->stream[p->L]);
}

/* Where rmsnorm_bwd writes a norm's weight gradient g (C): g itself, or
 * under sequence parallelism (this rank's rows' part) the zeroed scratch
 * part, which norm_grad_sum sums over the TP group and adds into g
 * (models/vocab_parallel.h sl_sp_norm_dw: g may hold the earlier
 * micro-batches' sum under --no-sync-accum). */
static float *norm_dw(sl_model *m, llama_priv *p, float *g, float *part) {
  return p->sp ? sl_sp_norm_dw(m, part, p->C) : g;
}
static int norm_grad_sum(sl_model *m, llama_priv *p, float *g, float *part) {
  return p->sp ? sl_sp_norm_dw_sum(m, g, part, p->C) : SL_OK;
}

static int llama_bwd(sl_model *m, int u, const float *flat, float *grads) {
  llama_priv *p = m->priv;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  int rc = SL_OK;
  if (u == p->L + 1 && !p->vp) /* head: starts the backward pass */
    return sl_lm_head_bwd(m, &p->head, flat, grads, p->stream[p->L], p->dres, p->dln);
  if (u == p->L + 1) return sl_lm_head_vp_bwd(m, p->hv, flat, grads, p->stream[p->L], p->dres, p->dln);
  if (u == 0) {
    if (p->vp) return sl_vp_embedding_bwd(m, &p->vs, grads, p->dres, N, C, p->sp ? p->dln : NULL);
    o->embedding_bwd(k, grads, p->dres, m->tokens, N, C);
    return SL_OK;
  }
  int l = u - 1;
  layer_acts *a = &p->la[l];
  const float *x = p->stream[l];
  blockw w = block_views(p, flat);
  blockw g = block_views(p, grads);
  int64_t n = p->n;
  const float *dout = p->dres; /* the gradient of the block output, all-gathered under sp */
  if (m->ac == SL_AC_FULL) rc = block_forward(m, p, flat, x, a, NULL);
  else if (m->ac == SL_AC_SELECTIVE) block_attn_core(m, p, a);
  if (rc) return rc;
  /* MLP (under sp p->dln holds the gathered gradient until the GEMM that overwrites it) */
  if (p->sp && (rc = sp_gather(m, p, p->dres, (float *)(dout = p->dln)))) return rc;
  m->ops->zero(m->k, p->dh, (size_t)(N * p->I) * 4);
  o->linear_bwd(k, p->dh, (float *)g.wd, NULL, dout, a->h, w.wd, N, p->I, C);
  m->ops->zero(m->k, p->dgu, (size_t)(N * 2 * p->I) * 4);
  o->swiglu_bwd(k, p->dgu, p->dh, a->gu, N, p->I);
  m->ops->zero(m->k, p->dln, (size_t)(N * C) * 4);
  o->linear_bwd(k, p->dln, (float *)g.wgu, NULL, p->dgu, a->ln2, w.wgu, N, C, 2 * p->I);
  if ((rc = row_parallel_sum(m, p, p->dln, p->sp ? p->xl : p->dln))) return rc;
  o->rmsnorm_bwd(k, p->dres, norm_dw(m, p, (float *)g.ln2, p->gnorm + C), p->sp ? p->xl : p->dln, a->xmid, w.ln2,
                 a->rstd2, n, C, C);
  /* attention */
  if (p->sp && (rc = sp_gather(m, p, p->dres, (float *)(dout = p->dln)))) return rc;
  m->ops->zero(m->k, p->datt, (size_t)(N * p->A) * 4);
  o->linear_bwd(k, p->datt, (float *)g.wo, NULL, dout, a->att, w.wo, N, p->A, C);
  m->ops->zero(m->k, p->dqkv, (size_t)(N * p->Q) * 4);
  o->attention_bwd(k, p->dqkv, p->datt, a->qkv, a->att, a->lse, m->B, m->T, p->nh, p->nkv, p->hd, p->window,
                   1.0f / sqrtf((float)p->hd), m->seg);
  o->rope_bwd(k, p->dqkv, m->B, m->T, p->nh, p->nkv, p->hd, p->inv_freq, m->seg);
  m->ops->zero(m->k, p->dln, (size_t)(N * C) * 4);
  if (p->kvrep > 1) kv_grad_begin(m, p, (float *)g.wqkv + p->nh * p->hd * C);
  o->linear_bwd(k, p->dln, (float *)g.wqkv, NULL, p->dqkv, a->ln1, w.wqkv, N, C, p->Q);
  if ((rc = row_parallel_sum(m, p, p->dln, p->sp ? p->xl : p->dln))) return rc;
  if (p->kvrep > 1 && (rc = kv_grad_sum(m, p, (float *)g.wqkv + p->nh * p->hd * C))) return rc;
  o->rmsnorm_bwd(k, p->dres, norm_dw(m, p, (float *)g.ln1, p->gnorm), p->sp ? p->xl : p->dln, x, w.ln1, a->rstd1, n, C,
                 C);
  if ((rc = norm_grad_sum(m, p, (float *)g.ln1, p->gnorm))) return rc;
  return norm_grad_sum(m, p, (float *)g.ln2, p->gnorm + C);
}

/* llama_bwd's TP collectives, for its split (models/llama_split.c). */
int sl_llama_sp_gather(sl_model *m, const float *rows, float *all) { return sp_gather(m, m->priv, rows, all); }
int sl_llama_row_parallel_sum(sl_model *m, float *part, float *rows) {
  return row_parallel_sum(m, m->priv, part, rows);
}
void sl_llama_kv_grad_begin(sl_model *m, float *gkv) { kv_grad_begin(m, m->priv, gkv); }
int sl_llama_kv_grad_sum(sl_model *m, float *gkv) { return kv_grad_sum(m, m->priv, gkv); }
float *sl_llama_norm_dw(sl_model *m, float *g, float *part) { return norm_dw(m, m->priv, g, part); }
int sl_llama_norm_grad_sum(sl_model *m, float *g, float *part) { return norm_grad_sum(m, m->priv, g, part); }

/* What activation checkpointing recomputes before block u's backward (both
 * halves of the split backward run it: models/llama_split.c). */
int sl_llama_recompute(sl_model *m, int u, const float *flat) {
  llama_priv *p = m->priv;
  layer_acts *a = &p->la[u - 1];
  if (m->ac == SL_AC_FULL) return block_forward(m, p, flat, p->stream[u - 1], a, NULL);
  if (m->ac == SL_AC_SELECTIVE) block_attn_core(m, p, a);
  return SL_OK;
}

static int llama_logits(sl_model *m, float *out) {
  llama_priv *p = m->priv;
  if (p->vp) return sl_lm_head_vp_logits(m, p->hv, out);
  return sl_lm_head_logits(m, &p->head, out);
}

static int64_t llama_flops(const sl_model *m, int64_t T) {
  const llama_priv *p = m->priv;
  const sl_model_config *c = &m->cfg;
  /* 6 N + 12 l h s (field guide convention): N = parameters of the matmuls
   * (blocks + LM head, the embedding lookup excluded), attention counted
   * without the causal halving. Recomputation not counted. The whole
   * model's (every TP rank's slices together). */
  int64_t nh = c->num_attention_heads, Q = (nh + 2 * c->num_key_value_heads) * p->hd, A = nh * p->hd;
  int64_t per_layer = p->C * Q + A * p->C + 3 * p->C * c->intermediate_size;
  int64_t Nmm = p->L * per_layer + p->V * p->C;
  return 6 * Nmm + 12 * p->L * nh * p->hd * T;
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
  else return NULL;
  return why;
}

static int tp_check(const sl_model *m) {
  char why[256], ok[256], tmp[256];
  if (!tp_misfit(&m->cfg, m->tp_size, why, sizeof why)) return SL_OK;
  size_t n = 0;
  ok[0] = 0;
  for (int64_t t = 1; t <= m->cfg.num_attention_heads && n + 24 < sizeof ok; t++)
    if (!tp_misfit(&m->cfg, t, tmp, sizeof tmp))
      n += (size_t)snprintf(ok + n, sizeof ok - n, "%s%lld", n ? ", " : "", (long long)t);
  return sl_fail(SL_EINPUT, "%s: %s; valid --tp values for this model: %s", m->cfg.arch_name, why, ok);
}

static int alloc_layer(sl_model *m, llama_priv *p, layer_acts *a, int attn, int rest) {
  int64_t N = p->N, n = p->n; /* n: the stream's rows on this rank (N/T under sp) */
  if (attn) {
    if (!(a->att = sl_model_buf(m, N * p->A, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->lse = sl_model_buf(m, N * p->nh, SL_ARENA_ACTS))) return SL_ENOMEM;
  }
  if (rest) {
    if (!(a->ln1 = sl_model_buf(m, N * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->rstd1 = sl_model_buf(m, n, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->qkv = sl_model_buf(m, N * p->Q, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->xmid = sl_model_buf(m, n * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->ln2 = sl_model_buf(m, N * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->rstd2 = sl_model_buf(m, n, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->gu = sl_model_buf(m, N * 2 * p->I, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->h = sl_model_buf(m, N * p->I, SL_ARENA_ACTS))) return SL_ENOMEM;
  }
  return SL_OK;
}

/* Activation set `set`: the residual stream, each block's kept tensors (the
 * recomputed ones are p->shared, allocated with set 0) and the head's. */
static int llama_alloc_acts(sl_model *m, int set) {
  llama_priv *p = m->priv;
  sl_act_set *a = sl_act_set_new(m, &p->sets, &p->nsets, set, p->L, p->C, sizeof(layer_acts));
  if (!a) return sl_fail(SL_ENOMEM, "out of memory");
  layer_acts *la = a->layers;
  if (set == 0 && m->ac != SL_AC_NONE && alloc_layer(m, p, &p->shared, 1, m->ac == SL_AC_FULL)) return SL_ENOMEM;
  if (m->ac == SL_AC_FULL) {
    for (int64_t l = 0; l < p->L; l++) la[l] = p->shared;
  } else {
    for (int64_t l = 0; l < p->L; l++) {
      if (!sl_model_is_local(m, (int)l + 1)) continue; /* another pipeline stage's */
      if (alloc_layer(m, p, &la[l], m->ac == SL_AC_NONE, 1)) return SL_ENOMEM;
      if (m->ac == SL_AC_SELECTIVE) {
        la[l].att = p->shared.att;
        la[l].lse = p->shared.lse;
      }
    }
  }
  if (!sl_model_is_local(m, (int)p->L + 1)) return SL_OK; /* the head is another pipeline stage's */
  if (!p->vp) return sl_lm_head_init(m, &a->head, p->C, p->V, p->eps, p->tied, (int)p->L + 1) ? SL_ENOMEM : SL_OK;
  return sl_lm_head_vp_set_init(m, &p->hvp, &p->hv, p->nsets, set, &a->head, &p->vs, p->C, p->eps, p->tied,
                                (int)p->L + 1, p->sp);
}

static void llama_use_acts(sl_model *m, int set) {
  llama_priv *p = m->priv;
  p->stream = p->sets[set].stream;
  p->la = p->sets[set].layers;
  p->head = p->sets[set].head;
  if (p->vp && p->hvp) p->hv = &p->hvp[set];
}

static int llama_boundary(sl_model *m, int u, float **act, float **grad, int64_t *n) {
  llama_priv *p = m->priv;
  *act = p->stream[u - 1];
  *grad = p->dres;
  *n = p->n * p->C; /* this rank's token rows: N/T of them under sequence parallelism */
  return SL_OK;
}

static const sl_model_vt llama_vt = {
    .fwd = llama_fwd,
    .bwd = llama_bwd,
    .logits = llama_logits,
    .init_custom = NULL,
    .destroy = llama_destroy,
    .flops_per_token = llama_flops,
    .alloc_acts = llama_alloc_acts,
    .use_acts = llama_use_acts,
    .boundary = llama_boundary,
    .stash_numel = sl_llama_stash_numel,
    .bwd_input = sl_llama_bwd_input,
    .bwd_weight = sl_llama_bwd_weight,
};

int sl_llama_create(sl_model *m) {
  const sl_model_config *c = &m->cfg;
  llama_priv *p = calloc(1, sizeof *p);
  if (!p) return sl_fail(SL_ENOMEM, "out of memory");
  m->priv = p;
  m->vt = &llama_vt;
  int rc = tp_check(m);
  if (rc) return rc;
  int64_t T = m->tp_size, nkv_parts = c->num_key_value_heads < T ? c->num_key_value_heads : T;
  p->N = m->B * m->T;
  p->C = c->hidden_size;
  p->nh = c->num_attention_heads / T;
  p->nkv = c->num_key_value_heads / nkv_parts;
  p->kvrep = T / nkv_parts;
  p->kvgroups = nkv_parts;
  p->kvslot = m->tp_rank / p->kvrep;
  p->hd = c->head_dim;
  p->Q = (p->nh + 2 * p->nkv) * p->hd;
  p->A = p->nh * p->hd;
  p->I = c->intermediate_size / T;
  p->V = c->vocab_size;
  p->L = c->num_hidden_layers;
  p->window = c->arch == SL_ARCH_MISTRAL ? c->sliding_window : 0;
  p->eps = (float)c->rms_norm_eps;
  p->tied = c->tie_word_embeddings;
  p->vp = T > 1;
  p->sp = m->sp;
  p->n = p->sp ? p->N / T : p->N;
  if (p->vp && (rc = sl_vocab_split_make(p->V, (int)T, m->tp_rank, &p->vs))) return rc;
  float std = c->initializer_range > 0 ? (float)c->initializer_range : 0.02f;

  m->nunits = (int)p->L + 2;
  m->units = calloc((size_t)m->nunits, sizeof(sl_unit_spec));
  m->pinned = calloc((size_t)m->nunits, sizeof(int));
  if (!m->units || !m->pinned) return sl_fail(SL_ENOMEM, "out of memory");
  int64_t C = p->C;
  sl_unit_spec *e = &m->units[0];
  snprintf(e->kind, sizeof e->kind, "embedding");
  e->layer = -1;
  if ((rc =
           sl_unit_add_split(m, e, "model.embed_tokens.weight", 2, p->V, C, 1, SL_INIT_NORMAL, std, SL_SPLIT_VOCAB, T)))
    return rc;
  for (int64_t l = 0; l < p->L; l++) {
    sl_unit_spec *b = &m->units[1 + l];
    snprintf(b->kind, sizeof b->kind, "llama_block");
    b->layer = (int)l;
    char nm[SL_TENSOR_NAME_MAX];
    int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, I = c->intermediate_size;
#define ADD(suffix, nd, d0, d1, decay, init, split, parts)                                                             \
  snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix);                                               \
  if ((rc = sl_unit_add_split(m, b, nm, nd, d0, d1, decay, init, std, split, parts))) return rc
    ADD("input_layernorm.weight", 1, C, 0, 0, SL_INIT_ONES, SL_SPLIT_NONE, 1);
    ADD("self_attn.q_proj.weight", 2, nh * p->hd, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, T);
    ADD("self_attn.k_proj.weight", 2, nkv * p->hd, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, nkv_parts);
    ADD("self_attn.v_proj.weight", 2, nkv * p->hd, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, nkv_parts);
    ADD("self_attn.o_proj.weight", 2, C, nh * p->hd, 1, SL_INIT_NORMAL, SL_SPLIT_ROW, T);
    ADD("post_attention_layernorm.weight", 1, C, 0, 0, SL_INIT_ONES, SL_SPLIT_NONE, 1);
    ADD("mlp.gate_proj.weight", 2, I, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, T);
    ADD("mlp.up_proj.weight", 2, I, C, 1, SL_INIT_NORMAL, SL_SPLIT_COL, T);
    ADD("mlp.down_proj.weight", 2, C, I, 1, SL_INIT_NORMAL, SL_SPLIT_ROW, T);
#undef ADD
  }
  if ((rc = sl_lm_head_spec_split(m, "model.norm.weight", C, p->V, p->tied, SL_INIT_NORMAL, std,
                                  p->vp ? SL_SPLIT_VOCAB : SL_SPLIT_NONE)))
    return rc;

  if (m->B == 0) return SL_OK; /* specs only */
  /* the RoPE frequencies, once, in backend memory */
  float *inv = malloc((size_t)(p->hd / 2 + 1) * sizeof(float));
  if (!inv) return sl_fail(SL_ENOMEM, "out of memory");
  sl_rope_inv_freq_cfg(inv, c); /* c->rope_scaling's rule */
  p->inv_freq = sl_rope_table_upload(m->ops, m->k, inv, p->hd);
  free(inv);
  if (!p->inv_freq) return SL_ENOMEM;
  /* activations: set 0, then the backward scratch every set shares */
  int64_t N = p->N;
  if ((rc = llama_alloc_acts(m, 0))) return rc;
  llama_use_acts(m, 0);
  if (!(p->dres = sl_model_buf(m, N * C, SL_ARENA_WORKSPACE)) ||
      !(p->dln = sl_model_buf(m, N * C, SL_ARENA_WORKSPACE)) ||
      !(p->dh = sl_model_buf(m, N * p->I, SL_ARENA_WORKSPACE)) ||
      !(p->dgu = sl_model_buf(m, N * 2 * p->I, SL_ARENA_WORKSPACE)) ||
      !(p->datt = sl_model_buf(m, N * p->A, SL_ARENA_WORKSPACE)) ||
      !(p->dqkv = sl_model_buf(m, N * p->Q, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  if (p->sp && (!(p->xl = sl_model_buf(m, p->n * C, SL_ARENA_WORKSPACE)) ||
                !(p->gnorm = sl_model_buf(m, 2 * C, SL_ARENA_WORKSPACE))))
    return SL_ENOMEM;
  if (p->kvrep > 1 && !(p->kvsum = sl_model_buf(m, (p->kvgroups + 1) * 2 * p->nkv * p->hd * C, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  return SL_OK;
}
