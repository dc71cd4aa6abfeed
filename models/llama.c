/* models/llama.c — Llama and Mistral as units over flat buffers.
 *
 * Units: 0 = embedding; 1..L = decoder blocks; L+1 = final norm + LM head.
 * A block's tensors are packed so that q/k/v and gate/up are each one
 * contiguous matrix and run as one GEMM:
 *   ln1 (C) | Wq (nh*hd, C) Wk (nkv*hd, C) Wv (nkv*hd, C) | Wo (C, nh*hd) |
 *   ln2 (C) | Wgate (I, C) Wup (I, C) | Wdown (C, I)
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
  int64_t N, C, nh, nkv, hd, Q, A, I, V, L, window;
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

/* Forward of block l from x into a; writes the block output to out unless
 * out is NULL (recomputation only needs the activations). */
static void block_forward(sl_model *m, llama_priv *p, const float *flat, const float *x,
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
  o->add_inplace(k, a->xmid, x, N * C);
  o->rmsnorm_fwd(k, a->ln2, a->rstd2, a->xmid, w.ln2, N, C, p->eps);
  o->linear_fwd(k, a->gu, a->ln2, w.wgu, NULL, N, C, 2 * p->I);
  o->swiglu_fwd(k, a->h, a->gu, N, p->I);
  if (out) {
    o->linear_fwd(k, out, a->h, w.wd, NULL, N, p->I, C);
    o->add_inplace(k, out, a->xmid, N * C);
  }
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
    block_forward(m, p, flat, p->stream[l], &p->la[l], p->stream[l + 1]);
    return SL_OK;
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
  if (m->ac == SL_AC_FULL) block_forward(m, p, flat, x, a, NULL);
  else if (m->ac == SL_AC_SELECTIVE) block_attn_core(m, p, a);
  /* MLP */
  m->ops->zero(m->k, p->dh, (size_t)(N * p->I) * 4);
  o->linear_bwd(k, p->dh, (float *)g.wd, NULL, p->dres, a->h, w.wd, N, p->I, C);
  m->ops->zero(m->k, p->dgu, (size_t)(N * 2 * p->I) * 4);
  o->swiglu_bwd(k, p->dgu, p->dh, a->gu, N, p->I);
  m->ops->zero(m->k, p->dln, (size_t)(N * C) * 4);
  o->linear_bwd(k, p->dln, (float *)g.wgu, NULL, p->dgu, a->ln2, w.wgu, N, C, 2 * p->I);
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
  o->rmsnorm_bwd(k, p->dres, (float *)g.ln1, p->dln, x, w.ln1, a->rstd1, N, C);
  return SL_OK;
}

static int llama_logits(sl_model *m, float *out) {
  llama_priv *p = m->priv;
  return sl_lm_head_logits(m, &p->head, out);
}

static int64_t llama_flops(const sl_model *m, int64_t T) {
  const llama_priv *p = m->priv;
  /* 6 N + 12 l h s (field guide convention): N = parameters of the matmuls
   * (blocks + LM head, the embedding lookup excluded), attention counted
   * without the causal halving. Recomputation not counted. */
  int64_t per_layer = p->C * p->Q + p->A * p->C + 3 * p->C * p->I;
  int64_t Nmm = p->L * per_layer + p->V * p->C;
  return 6 * Nmm + 12 * p->L * p->nh * p->hd * T;
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
      if (!sl_model_is_local(m, (int)l + 1)) continue; /* another pipeline stage's */
      if (alloc_layer(m, p, &la[l], m->ac == SL_AC_NONE, 1)) return SL_ENOMEM;
      if (m->ac == SL_AC_SELECTIVE) {
        la[l].att = p->shared.att;
        la[l].lse = p->shared.lse;
      }
    }
  }
  if (sl_model_is_local(m, (int)p->L + 1) &&
      sl_lm_head_init(m, &a->head, p->C, p->V, p->eps, p->tied, (int)p->L + 1))
    return SL_ENOMEM;
  return SL_OK;
}

static void llama_use_acts(sl_model *m, int set) {
  llama_priv *p = m->priv;
  p->stream = p->sets[set].stream;
  p->la = p->sets[set].layers;
  p->head = p->sets[set].head;
}

static int llama_boundary(sl_model *m, int u, float **act, float **grad, int64_t *n) {
  llama_priv *p = m->priv;
  *act = p->stream[u - 1];
  *grad = p->dres;
  *n = p->N * p->C;
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
};

int sl_llama_create(sl_model *m) {
  const sl_model_config *c = &m->cfg;
  llama_priv *p = calloc(1, sizeof *p);
  if (!p) return sl_fail(SL_ENOMEM, "out of memory");
  m->priv = p;
  m->vt = &llama_vt;
  p->N = m->B * m->T;
  p->C = c->hidden_size;
  p->nh = c->num_attention_heads;
  p->nkv = c->num_key_value_heads;
  p->hd = c->head_dim;
  p->Q = (p->nh + 2 * p->nkv) * p->hd;
  p->A = p->nh * p->hd;
  p->I = c->intermediate_size;
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
#define ADD(suffix, nd, d0, d1, decay, init)                                      \
  snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, suffix);          \
  sl_unit_add(b, nm, nd, d0, d1, 0, decay, init, std)
    ADD("input_layernorm.weight", 1, C, 0, 0, SL_INIT_ONES);
    ADD("self_attn.q_proj.weight", 2, p->nh * p->hd, C, 1, SL_INIT_NORMAL);
    ADD("self_attn.k_proj.weight", 2, p->nkv * p->hd, C, 1, SL_INIT_NORMAL);
    ADD("self_attn.v_proj.weight", 2, p->nkv * p->hd, C, 1, SL_INIT_NORMAL);
    ADD("self_attn.o_proj.weight", 2, C, p->A, 1, SL_INIT_NORMAL);
    ADD("post_attention_layernorm.weight", 1, C, 0, 0, SL_INIT_ONES);
    ADD("mlp.gate_proj.weight", 2, p->I, C, 1, SL_INIT_NORMAL);
    ADD("mlp.up_proj.weight", 2, p->I, C, 1, SL_INIT_NORMAL);
    ADD("mlp.down_proj.weight", 2, C, p->I, 1, SL_INIT_NORMAL);
#undef ADD
  }
  sl_lm_head_spec(m, "model.norm.weight", C, p->V, p->tied, SL_INIT_NORMAL, std);

  if (m->B == 0) return SL_OK; /* specs only */
  /* activations: set 0, then the backward scratch every set shares */
  int64_t N = p->N;
  int rc = llama_alloc_acts(m, 0);
  if (rc) return rc;
  llama_use_acts(m, 0);
  if (!(p->dres = sl_model_buf(m, N * C, SL_ARENA_WORKSPACE)) ||
      !(p->dln = sl_model_buf(m, N * C, SL_ARENA_WORKSPACE)) ||
      !(p->dh = sl_model_buf(m, N * p->I, SL_ARENA_WORKSPACE)) ||
      !(p->dgu = sl_model_buf(m, N * 2 * p->I, SL_ARENA_WORKSPACE)) ||
      !(p->datt = sl_model_buf(m, N * p->A, SL_ARENA_WORKSPACE)) ||
      !(p->dqkv = sl_model_buf(m, N * p->Q, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  return SL_OK;
}
