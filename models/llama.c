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
 * summed over the ranks sharing it. Norms, embedding and LM head are whole
 * on every rank; their inputs and gradients are then identical everywhere.
 * Activation checkpointing: none keeps every block's activations; selective
 * recomputes the attention core (out, lse) in backward; full keeps only each
 * block's input and recomputes the block.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "models/model.h"

typedef struct {
  float *ln1;   /* (N, C) */
  float *rstd1; /* (N) */
  float *qkv;   /* (N, Q) after RoPE */
  float *att;   /* (N, A) attention output before Wo */
  float *lse;   /* (B, nh, T) */
  float *xmid;  /* (N, C) residual after attention */
  float *ln2;   /* (N, C) */
  float *rstd2; /* (N) */
  float *gu;    /* (N, 2I) gate | up */
  float *h;     /* (N, I) silu(gate) * up */
} layer_acts;

typedef struct {
  int64_t N, C, nh, nkv, hd, Q, A, I, V, L, window; /* nh, nkv, Q, A, I: this TP rank's */
  int64_t kvrep, kvslot, kvgroups; /* k/v slice shared by kvrep TP ranks; its index of kvgroups */
  float *kvsum;     /* (kvgroups, 2*nkv*hd*C) replicated k/v gradient exchange (kvrep > 1) */
  float eps, theta;
  int tied;
  /* the selected activation set's views (sets[m->act]) */
  float **stream;   /* (L+1) x (N, C): input of block l; stream[L] feeds the head */
  layer_acts *la;   /* (L) */
  sl_lm_head head;  /* final norm + LM head + cross-entropy */
  sl_act_set *sets;  /* (nsets) one per micro-batch in flight (models/model.h) */
  int nsets;
  layer_acts shared; /* recomputed in backward, shared by every layer and set (selective: att, lse; full: all) */
  /* backward scratch (workspace) */
  float *dres;      /* (N, C) gradient of the residual stream */
  float *dln;       /* (N, C) */
  float *dh;        /* (N, I) */
  float *dgu;       /* (N, 2I) */
  float *datt;      /* (N, A) */
  float *dqkv;      /* (N, Q) */
} llama_priv;


static void llama_destroy(sl_model *m) {
  llama_priv *p = m->priv;
  if (!p) return;
  sl_act_sets_free(p->sets, p->nsets);
  free(p);
  m->priv = NULL;
}

/* parameter views of a block's flat buffer */
typedef struct {
  const float *ln1, *wqkv, *wo, *ln2, *wgu, *wd;
} blockw;

static blockw block_views(const llama_priv *p, const float *flat) {
  blockw w;
  int64_t C = p->C;
  w.ln1 = flat;
  w.wqkv = w.ln1 + C;
  w.wo = w.wqkv + p->Q * C;
  w.ln2 = w.wo + C * p->A;
  w.wgu = w.ln2 + C;
  w.wd = w.wgu + 2 * p->I * C;
  return w;
}

static void block_attn_core(sl_model *m, llama_priv *p, layer_acts *a) {
  m->ops->attention_doc_fwd(m->k, a->att, a->lse, a->qkv, m->B, m->T, p->nh, p->nkv, p->hd, p->window, m->seg);
}

/* buf (n) summed over the TP group (the row-parallel outputs, the input
 * gradients of the column-parallel GEMMs); nothing at T = 1. */
static int tp_sum(sl_model *m, float *buf, int64_t n) {
  if (m->tp_size == 1) return SL_OK;
  return m->access.tp.allreduce(m->access.tp.user, buf, n, SL_TP_SUM);
}

/* Forward of block l from x into a; writes the block output to out unless
 * out is NULL (recomputation only needs the activations). */
static int block_forward(sl_model *m, llama_priv *p, const float *flat, const float *x,
                         layer_acts *a, float *out) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  blockw w = block_views(p, flat);
  int64_t N = p->N, C = p->C;
  o->rmsnorm_fwd(k, a->ln1, a->rstd1, x, w.ln1, N, C, p->eps);
  o->linear_fwd(k, a->qkv, a->ln1, w.wqkv, NULL, N, C, p->Q);
  o->rope_doc_fwd(k, a->qkv, m->B, m->T, p->nh, p->nkv, p->hd, p->theta, m->seg);
  block_attn_core(m, p, a);
  o->linear_fwd(k, a->xmid, a->att, w.wo, NULL, N, p->A, C);
  int rc = tp_sum(m, a->xmid, N * C);
  if (rc) return rc;
  o->add_inplace(k, a->xmid, x, N * C);
  o->rmsnorm_fwd(k, a->ln2, a->rstd2, a->xmid, w.ln2, N, C, p->eps);
  o->linear_fwd(k, a->gu, a->ln2, w.wgu, NULL, N, C, 2 * p->I);
  o->swiglu_fwd(k, a->h, a->gu, N, p->I);
  if (out) {
    o->linear_fwd(k, out, a->h, w.wd, NULL, N, p->I, C);
    if ((rc = tp_sum(m, out, N * C))) return rc;
    o->add_inplace(k, out, a->xmid, N * C);
  }
  return SL_OK;
}

/* A k/v slice several TP ranks hold (nkv < T): each computed its gradient
 * from its own query heads; the slice's gradient is the sum over the kvrep
 * ranks sharing it. gkv (2*nkv*hd*C, k then v rows) holds only this
 * micro-batch's part (the runtime zeroes a unit's gradient per micro-batch
 * and only this block writes it): placed in its group's slot of a zeroed
 * buffer of every group, summed over the TP group, read back. */
static int kv_grad_sum(sl_model *m, llama_priv *p, float *gkv) {
  int64_t n = 2 * p->nkv * p->hd * p->C;
  float *slot = p->kvsum + p->kvslot * n;
  m->ops->zero(m->k, p->kvsum, (size_t)(p->kvgroups * n) * 4);
  m->ops->copy(m->k, slot, gkv, (size_t)n * 4);
  int rc = tp_sum(m, p->kvsum, p->kvgroups * n);
  if (!rc) m->ops->copy(m->k, gkv, slot, (size_t)n * 4);
  return rc;
}


static int llama_fwd(sl_model *m, int u, const float *flat) {
  llama_priv *p = m->priv;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  if (u == 0) {
    o->embedding_fwd(k, p->stream[0], m->tokens, flat, N, C);
    return SL_OK;
  }
  if (u <= p->L) {
    int l = u - 1;
    return block_forward(m, p, flat, p->stream[l], &p->la[l], p->stream[l + 1]);
  }
  return sl_lm_head_fwd(m, &p->head, flat, p->stream[p->L]);
}

static int llama_bwd(sl_model *m, int u, const float *flat, float *grads) {
  llama_priv *p = m->priv;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  if (u == p->L + 1) /* head: starts the backward pass */
    return sl_lm_head_bwd(m, &p->head, flat, grads, p->stream[p->L], p->dres, p->dln);
  if (u == 0) {
    o->embedding_bwd(k, grads, p->dres, m->tokens, N, C);
    return SL_OK;
  }
  int l = u - 1;
  layer_acts *a = &p->la[l];
  const float *x = p->stream[l];
  blockw w = block_views(p, flat);
  blockw g = block_views(p, grads);
  int rc = SL_OK;
  if (m->ac == SL_AC_FULL) rc = block_forward(m, p, flat, x, a, NULL);
  else if (m->ac == SL_AC_SELECTIVE) block_attn_core(m, p, a);
  if (rc) return rc;
  /* MLP */
  m->ops->zero(m->k, p->dh, (size_t)(N * p->I) * 4);
  o->linear_bwd(k, p->dh, (float *)g.wd, NULL, p->dres, a->h, w.wd, N, p->I, C);
  m->ops->zero(m->k, p->dgu, (size_t)(N * 2 * p->I) * 4);
  o->swiglu_bwd(k, p->dgu, p->dh, a->gu, N, p->I);
  m->ops->zero(m->k, p->dln, (size_t)(N * C) * 4);
  o->linear_bwd(k, p->dln, (float *)g.wgu, NULL, p->dgu, a->ln2, w.wgu, N, C, 2 * p->I);
  if ((rc = tp_sum(m, p->dln, N * C))) return rc;
  o->rmsnorm_bwd(k, p->dres, (float *)g.ln2, p->dln, a->xmid, w.ln2, a->rstd2, N, C);
  /* attention */
  m->ops->zero(m->k, p->datt, (size_t)(N * p->A) * 4);
  o->linear_bwd(k, p->datt, (float *)g.wo, NULL, p->dres, a->att, w.wo, N, p->A, C);
  m->ops->zero(m->k, p->dqkv, (size_t)(N * p->Q) * 4);
  o->attention_doc_bwd(k, p->dqkv, p->datt, a->qkv, a->att, a->lse, m->B, m->T, p->nh, p->nkv, p->hd,
                       p->window, m->seg);
  o->rope_doc_bwd(k, p->dqkv, m->B, m->T, p->nh, p->nkv, p->hd, p->theta, m->seg);
  m->ops->zero(m->k, p->dln, (size_t)(N * C) * 4);
  o->linear_bwd(k, p->dln, (float *)g.wqkv, NULL, p->dqkv, a->ln1, w.wqkv, N, C, p->Q);
  if ((rc = tp_sum(m, p->dln, N * C))) return rc;
  if (p->kvrep > 1 && (rc = kv_grad_sum(m, p, (float *)g.wqkv + p->nh * p->hd * C))) return rc;
  o->rmsnorm_bwd(k, p->dres, (float *)g.ln1, p->dln, x, w.ln1, a->rstd1, N, C);
  return SL_OK;
}

static int llama_logits(sl_model *m, float *out) {
  llama_priv *p = m->priv;
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
  else if (nh % T) snprintf(why, cap, "num_attention_heads %lld is not divisible by --tp %lld", (long long)nh, (long long)T);
  else if (nkv >= T && nkv % T)
    snprintf(why, cap, "num_key_value_heads %lld is not divisible by --tp %lld", (long long)nkv, (long long)T);
  else if (nkv < T && T % nkv)
    snprintf(why, cap, "--tp %lld is not a multiple of num_key_value_heads %lld (each rank must hold one whole KV "
             "group)", (long long)T, (long long)nkv);
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
    if (!tp_misfit(&m->cfg, t, tmp, sizeof tmp)) n += (size_t)snprintf(ok + n, sizeof ok - n, "%s%lld", n ? ", " : "", (long long)t);
  return sl_fail(SL_EINPUT, "%s: %s; valid --tp values for this model: %s", m->cfg.arch_name, why, ok);
}

static int alloc_layer(sl_model *m, llama_priv *p, layer_acts *a, int attn, int rest) {
  int64_t N = p->N;
  if (attn) {
    if (!(a->att = sl_model_buf(m, N * p->A, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->lse = sl_model_buf(m, N * p->nh, SL_ARENA_ACTS))) return SL_ENOMEM;
  }
  if (rest) {
    if (!(a->ln1 = sl_model_buf(m, N * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->rstd1 = sl_model_buf(m, N, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->qkv = sl_model_buf(m, N * p->Q, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->xmid = sl_model_buf(m, N * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->ln2 = sl_model_buf(m, N * p->C, SL_ARENA_ACTS))) return SL_ENOMEM;
    if (!(a->rstd2 = sl_model_buf(m, N, SL_ARENA_ACTS))) return SL_ENOMEM;
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
      if (alloc_layer(m, p, &la[l], m->ac == SL_AC_NONE, 1)) return SL_ENOMEM;
      if (m->ac == SL_AC_SELECTIVE) {
        la[l].att = p->shared.att;
        la[l].lse = p->shared.lse;
      }
    }
  }
  if (sl_lm_head_init(m, &a->head, p->C, p->V, p->eps, p->tied, (int)p->L + 1)) return SL_ENOMEM;
  return SL_OK;
}

static void llama_use_acts(sl_model *m, int set) {
  llama_priv *p = m->priv;
  p->stream = p->sets[set].stream;
  p->la = p->sets[set].layers;
  p->head = p->sets[set].head;
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
  p->theta = (float)c->rope_theta;
  p->tied = c->tie_word_embeddings;
  float std = c->initializer_range > 0 ? (float)c->initializer_range : 0.02f;

  m->nunits = (int)p->L + 2;
  m->units = calloc((size_t)m->nunits, sizeof(sl_unit_spec));
  m->pinned = calloc((size_t)m->nunits, sizeof(int));
  if (!m->units || !m->pinned) return sl_fail(SL_ENOMEM, "out of memory");
  int64_t C = p->C;
  sl_unit_spec *e = &m->units[0];
  snprintf(e->kind, sizeof e->kind, "embedding");
  e->layer = -1;
  sl_unit_add(e, "model.embed_tokens.weight", 2, p->V, C, 0, 1, SL_INIT_NORMAL, std);
  for (int64_t l = 0; l < p->L; l++) {
    sl_unit_spec *b = &m->units[1 + l];
    snprintf(b->kind, sizeof b->kind, "llama_block");
    b->layer = (int)l;
    char nm[SL_TENSOR_NAME_MAX];
    int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, I = c->intermediate_size;
#define ADD(suffix, nd, d0, d1, decay, init, split, parts)                      \
  snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix);       \
  sl_unit_add_split(m, b, nm, nd, d0, d1, decay, init, std, split, parts)
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
  sl_lm_head_spec(m, "model.norm.weight", C, p->V, p->tied, SL_INIT_NORMAL, std);

  if (m->B == 0) return SL_OK; /* specs only */
  /* activations: set 0, then the backward scratch every set shares */
  int64_t N = p->N;
  rc = llama_alloc_acts(m, 0);
  if (rc) return rc;
  llama_use_acts(m, 0);
  if (!(p->dres = sl_model_buf(m, N * C, SL_ARENA_WORKSPACE)) ||
      !(p->dln = sl_model_buf(m, N * C, SL_ARENA_WORKSPACE)) ||
      !(p->dh = sl_model_buf(m, N * p->I, SL_ARENA_WORKSPACE)) ||
      !(p->dgu = sl_model_buf(m, N * 2 * p->I, SL_ARENA_WORKSPACE)) ||
      !(p->datt = sl_model_buf(m, N * p->A, SL_ARENA_WORKSPACE)) ||
      !(p->dqkv = sl_model_buf(m, N * p->Q, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  if (p->kvrep > 1 && !(p->kvsum = sl_model_buf(m, p->kvgroups * 2 * p->nkv * p->hd * C, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  return SL_OK;
}
