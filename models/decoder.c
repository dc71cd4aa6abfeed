/* models/decoder.c — the decoder skeleton (models/decoder.h): the units
 * embedding | L blocks of one kind | final norm + LM head over the residual
 * stream, their activation sets, the pipeline boundary, the head dispatch
 * and the split backward's scaffolding; the block kind does the rest.
 *
 * Unit 0's backward is all weight gradient: the split's input half keeps
 * its output gradient (this rank's rows under sp) and the weight half runs
 * the embedding's backward on it. The head's halves are
 * models/lmhead_split.c. Under tensor parallelism (T > 1) the embedding and
 * the head split the vocabulary (models/vocab_parallel.h, padded to a
 * multiple of T); at T = 1 the whole-vocabulary path runs, bit for bit.
 */
#include "models/decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"

/* ---- the residual stream's TP collectives ------------------------------------ */
int sl_dec_tp_sum(sl_model *m, float *buf, int64_t n) {
  if (m->tp_size == 1) return SL_OK;
  return m->access.tp.allreduce(m->access.tp.user, buf, n, SL_TP_SUM);
}

int sl_dec_sp_gather(sl_model *m, const float *rows, float *all) {
  const sl_decoder *d = sl_dec(m);
  return m->access.tp.allgather(m->access.tp.user, rows, all, d->n * d->C);
}

int sl_dec_row_parallel_sum(sl_model *m, float *part, float *rows) {
  const sl_decoder *d = sl_dec(m);
  if (!d->sp) return sl_dec_tp_sum(m, rows, d->N * d->C);
  return m->access.tp.reducescatter(m->access.tp.user, part, rows, d->n * d->C);
}

int sl_dec_norm_gathered(sl_model *m, float *out, float *rstd, const float *x, const float *w, float eps) {
  const sl_decoder *d = sl_dec(m);
  m->ops->rmsnorm_fwd(m->k, d->sp ? d->xl : out, rstd, x, w, d->n, d->C, d->C, eps);
  return d->sp ? sl_dec_sp_gather(m, d->xl, out) : SL_OK;
}

float *sl_dec_norm_dw(sl_model *m, float *g, float *part) {
  return sl_dec(m)->sp ? sl_sp_norm_dw(m, part, sl_dec(m)->C) : g;
}

int sl_dec_norm_grad_sum(sl_model *m, float *g, float *part) {
  return sl_dec(m)->sp ? sl_sp_norm_dw_sum(m, g, part, sl_dec(m)->C) : SL_OK;
}

int sl_dec_tp_check(const sl_model *m, const char *(*misfit)(const sl_model_config *, int64_t, char *, size_t),
                    int64_t max) {
  char why[256], ok[256], tmp[256];
  if (!misfit(&m->cfg, m->tp_size, why, sizeof why)) return SL_OK;
  size_t n = 0;
  ok[0] = 0;
  for (int64_t t = 1; t <= max && n + 24 < sizeof ok; t++)
    if (!misfit(&m->cfg, t, tmp, sizeof tmp))
      n += (size_t)snprintf(ok + n, sizeof ok - n, "%s%lld", n ? ", " : "", (long long)t);
  return sl_fail(SL_EINPUT, "%s: %s; valid --tp values for this model: %s", m->cfg.arch_name, why, ok);
}

/* ---- bf16 activation storage ---------------------------------------------------- */
int sl_buf_recs_add(struct sl_buf_recs *rs, float *p, int64_t n, int bf16) {
  if (rs->n == rs->cap) {
    int nc = rs->cap ? 2 * rs->cap : 32;
    sl_buf_rec *r = realloc(rs->r, sizeof *r * (size_t)nc);
    if (!r) return SL_ENOMEM;
    rs->r = r, rs->cap = nc;
  }
  rs->r[rs->n++] = (sl_buf_rec){p, n, bf16};
  return SL_OK;
}

/* Layer l's kept tensors of the selected set: into its packed copy (dir 1,
 * after its forward) or back into the live buffers (dir -1). A bf16 buffer
 * takes n halves, any other its 4-byte words (at an even half). */
static void act_pack(sl_model *m, int64_t l, int dir) {
  const sl_decoder *d = sl_dec(m);
  int kk = d->lk ? d->lk[l] : 0;
  if (!d->live_la[kk]) return;
  uint16_t *h = (uint16_t *)d->packs[(int64_t)m->act * d->L + l];
  int64_t o = 0;
  for (int i = 0; i < d->live[kk].n; i++) {
    const sl_buf_rec *r = &d->live[kk].r[i];
    if (r->bf16 && dir > 0) m->ops->f32_to_bf16(m->k, h + o, r->p, r->n);
    else if (r->bf16) m->ops->bf16_to_f32(m->k, r->p, h + o, r->n);
    if (r->bf16) {
      o += r->n;
      continue;
    }
    o += o & 1;
    if (dir > 0) m->ops->copy(m->k, h + o, r->p, (size_t)r->n * 4);
    else m->ops->copy(m->k, r->p, h + o, (size_t)r->n * 4);
    o += 2 * r->n;
  }
}

/* The kind's first local layer's alloc_layer (the union of its layers'
 * buffers: l = -1), recorded: its buffers become the kind's live ones when
 * some are bf16. */
static int alloc_live(sl_model *m, int kk, void *la) {
  sl_decoder *d = sl_dec(m);
  m->rec = &d->live[kk];
  int rc = d->kind->alloc_layer(m, -1, la, 0, d->shared[kk]);
  m->rec = NULL;
  if (rc) return rc;
  int64_t o = 0, any = 0, all = sl_env_bool("SL_FAULT_ACT_BF16"); /* a negative control: every buffer, lossy */
  for (int i = 0; i < d->live[kk].n; i++) {
    sl_buf_rec *r = &d->live[kk].r[i];
    r->bf16 |= all;
    any |= r->bf16;
    o += r->bf16 ? r->n : (o & 1) + 2 * r->n;
  }
  d->live_off[kk] = !any;
  if (!any) return SL_OK;
  d->pack_floats[kk] = (o + 1) / 2;
  if (!(d->live_la[kk] = malloc(d->layer_size))) return sl_fail(SL_ENOMEM, "out of memory");
  memcpy(d->live_la[kk], la, d->layer_size);
  return SL_OK;
}

/* Layer l's kept buffers in set `set`: its own, or under bf16 storage its
 * kind's live ones and a packed copy (layer l's kind selected). */
static int alloc_kept(sl_model *m, int set, int64_t l, void *la) {
  sl_decoder *d = sl_dec(m);
  int kk = d->lk ? d->lk[l] : 0;
  if (!m->act_bf16 || d->live_off[kk] || !m->caps.bf16_acts) return d->kind->alloc_layer(m, l, la, 0, d->shared[kk]);
  if (!d->live_la[kk]) {
    int rc = alloc_live(m, kk, la);
    if (rc || d->live_off[kk]) return rc;
  } else memcpy(la, d->live_la[kk], d->layer_size);
  if (set >= d->npack_sets) {
    float **pk = realloc(d->packs, sizeof *pk * (size_t)((set + 1) * d->L));
    if (!pk) return sl_fail(SL_ENOMEM, "out of memory");
    memset(pk + d->npack_sets * d->L, 0, sizeof *pk * (size_t)((set + 1 - d->npack_sets) * d->L));
    d->packs = pk, d->npack_sets = set + 1;
  }
  return (d->packs[(int64_t)set * d->L + l] = sl_model_buf(m, d->pack_floats[kk], SL_ARENA_ACTS)) ? SL_OK : SL_ENOMEM;
}

/* The streams of a bf16 residual under bf16 storage (d->slive_of, before set 0's streams). */
static int stream_live(sl_model *m) {
  sl_decoder *d = sl_dec(m);
  if (!m->act_bf16 || !m->res_bf16 || d->slive_of) return SL_OK;
  if (!(d->slive_of = calloc((size_t)(d->L + 1), sizeof *d->slive_of))) return sl_fail(SL_ENOMEM, "out of memory");
  for (int64_t s = 0; s < d->L; s++) {
    if (!sl_model_is_local(m, (int)s) || !sl_model_is_local(m, (int)s + 1)) continue; /* a boundary: per set */
    float **b = &d->slive[s & 1];
    if (!*b && !(*b = sl_model_buf(m, d->n * d->C, SL_ARENA_WORKSPACE))) return SL_ENOMEM;
    d->slive_of[s] = *b;
  }
  return SL_OK;
}

/* Set `set`'s packed copies of the streams that live in slive. */
static int stream_packs(sl_model *m, int set) {
  sl_decoder *d = sl_dec(m);
  if (!d->slive_of) return SL_OK;
  int64_t S = d->L + 1;
  float **pk = realloc(d->spk, sizeof *pk * (size_t)((set + 1) * S));
  if (!pk) return sl_fail(SL_ENOMEM, "out of memory");
  memset(pk + set * S, 0, sizeof *pk * (size_t)S);
  d->spk = pk, d->nspk_sets = set + 1;
  for (int64_t s = 0; s < S; s++)
    if (d->slive_of[s] && !(pk[set * S + s] = sl_model_buf(m, (d->n * d->C + 1) / 2, SL_ARENA_ACTS))) return SL_ENOMEM;
  return SL_OK;
}

/* Stream s of the selected set into its packed copy (dir 1) or back into
 * its live buffer (dir -1); nothing for a stream kept per set. */
static void stream_pack(sl_model *m, int64_t s, int dir) {
  const sl_decoder *d = sl_dec(m);
  if (!d->slive_of || !d->slive_of[s]) return;
  uint16_t *h = (uint16_t *)d->spk[(int64_t)m->act * (d->L + 1) + s];
  if (dir > 0) m->ops->f32_to_bf16(m->k, h, d->slive_of[s], d->n * d->C);
  else m->ops->bf16_to_f32(m->k, d->slive_of[s], h, d->n * d->C);
}

/* A unit's output into the stream: rounded to bf16 under a bf16 residual, packed when it lives in slive. */
static void stream_out(sl_model *m, int64_t s) {
  sl_decoder *d = sl_dec(m);
  if (m->res_bf16) m->ops->round_bf16(m->k, d->stream[s], d->n * d->C);
  stream_pack(m, s, 1);
}

/* Before block l's recompute / backward (or a half of it): its kept tensors and its input. */
static void block_unpack(sl_model *m, int64_t l) {
  act_pack(m, l, -1);
  stream_pack(m, l, -1);
}

/* ---- units --------------------------------------------------------------------- */
static int dec_fwd(sl_model *m, int u, const float *flat) {
  sl_decoder *d = sl_dec(m);
  if (u > d->L + 1) return SL_OK; /* a companion: computed by the unit it rides with */
  if (u == 0) {
    int rc = SL_OK;
    if (d->vp) rc = sl_vp_embedding_fwd(m, &d->vs, d->stream[0], flat, d->N, d->C, d->sp ? d->dln : NULL);
    else m->ops->embedding_fwd(m->k, d->stream[0], m->tokens, flat, d->N, d->C);
    if (!rc && d->embed_scale > 0) m->ops->scale_add(m->k, d->stream[0], d->embed_scale, 0.0f, d->n * d->C);
    if (!rc) stream_out(m, 0);
    return rc;
  }
  if (u <= d->L) {
    int rc = sl_dec_use(d, u - 1)->fwd(m, u - 1, flat, d->stream[u - 1], sl_dec_layer(m, u - 1), d->stream[u]);
    if (!rc) act_pack(m, u - 1, 1);
    if (!rc) stream_out(m, u);
    return rc;
  }
  int rc = SL_OK;
  for (int kk = 0; kk < d->nkinds && !rc; kk++)
    if (sl_dec_use_kind(d, kk)->loss_term) rc = d->kind->loss_term(m);
  if (rc) return rc;
  if (d->vp) return sl_lm_head_vp_fwd(m, d->hv, flat, d->stream[d->L]);
  return sl_lm_head_fwd(m, &d->head, flat, d->stream[d->L]);
}

static int embedding_bwd(sl_model *m, float *grads, const float *dout) {
  sl_decoder *d = sl_dec(m);
  if (d->vp) return sl_vp_embedding_bwd(m, &d->vs, grads, dout, d->N, d->C, d->sp ? d->dln : NULL);
  m->ops->embedding_bwd(m->k, grads, dout, m->tokens, d->N, d->C);
  return SL_OK;
}

static int dec_bwd(sl_model *m, int u, const float *flat, float *grads) {
  sl_decoder *d = sl_dec(m);
  if (u > d->L + 1) return SL_OK; /* a companion */
  if (u == d->L + 1 && !d->vp) /* head: starts the backward pass */
    return sl_lm_head_bwd(m, &d->head, flat, grads, d->stream[d->L], d->dres, d->dln);
  if (u == d->L + 1) return sl_lm_head_vp_bwd(m, d->hv, flat, grads, d->stream[d->L], d->dres, d->dln);
  if (u == 0 && d->embed_scale > 0) m->ops->scale_add(m->k, d->dres, d->embed_scale, 0.0f, d->n * d->C);
  if (u == 0) return embedding_bwd(m, grads, d->dres);
  block_unpack(m, u - 1);
  int rc = sl_dec_use(d, u - 1)->recompute(m, u - 1, flat);
  return rc ? rc : d->kind->bwd(m, u - 1, flat, grads);
}

static int dec_logits(sl_model *m, float *out) {
  sl_decoder *d = sl_dec(m);
  if (d->vp) return sl_lm_head_vp_logits(m, d->hv, out);
  return sl_lm_head_logits(m, &d->head, out);
}

static int dec_init_custom(sl_model *m, int u, int ti, float *dst, uint64_t seed) {
  sl_decoder *d = sl_dec(m);
  int l = m->units[u].layer;
  if (l >= 0 && l < d->L) sl_dec_use(d, l);
  else sl_dec_use_kind(d, 0);
  if (!d->kind->init_custom) return sl_fail(SL_EINPUT, "no custom init for tensor %s", m->units[u].t[ti].name);
  return d->kind->init_custom(m, u, ti, dst, seed);
}

/* One kind: its whole-model figure; several: each layer's, plus the head's 6 V C. */
static int64_t dec_flops(const sl_model *m, int64_t T) {
  sl_decoder *d = sl_dec(m);
  if (d->nkinds == 1) return sl_dec_use_kind(d, 0)->flops_per_token(m, T);
  int64_t f = 6 * d->V * d->C;
  for (int64_t l = 0; l < d->L; l++) f += sl_dec_use(d, l)->layer_flops(m, l, T);
  return f;
}

int sl_model_layer_flops(sl_model *m, int64_t T, double *out) {
  sl_decoder *d = sl_dec(m);
  if (!d || d->nkinds == 1) return 0;
  for (int64_t l = 0; l < d->L; l++) out[l] = (double)sl_dec_use(d, l)->layer_flops(m, l, T);
  return 1;
}

/* The kind of a model's MoE hooks: the first with one (NULL: a dense model). */
static const sl_block_kind *moe_kind(sl_model *m, size_t off) {
  sl_decoder *d = sl_dec(m);
  for (int kk = 0; d && kk < d->nkinds; kk++)
    if (*(void *const *)((const char *)d->kinds[kk] + off)) return sl_dec_use_kind(d, kk);
  return NULL;
}
#define MOE_KIND(m, fn) moe_kind(m, offsetof(sl_block_kind, fn))

int64_t sl_model_moe_load(sl_model *m, int64_t *out) {
  const sl_block_kind *kd = MOE_KIND(m, moe_load);
  return kd ? kd->moe_load(m, out) : 0;
}

int64_t sl_model_moe_stats(sl_model *m, double *out) {
  const sl_block_kind *kd = MOE_KIND(m, moe_stats);
  return kd ? kd->moe_stats(m, out) : 0;
}

float *sl_model_moe_bias(sl_model *m, int64_t *n) {
  const sl_block_kind *kd = MOE_KIND(m, moe_bias);
  *n = 0;
  return kd ? kd->moe_bias(m, n) : NULL;
}

int sl_model_moe_bias_set(sl_model *m, const float *b) {
  if (m->cfg.moe_balance == SL_MOE_BALANCE_NONE && !m->cfg.moe_sigmoid) return SL_OK; /* no bias in this run
                                                                                    (Nemotron-H's is the model's) */
  const sl_block_kind *kd = MOE_KIND(m, moe_bias_set);
  return kd ? kd->moe_bias_set(m, b) : SL_OK;
}

int sl_model_moe_bias_load(sl_model *m, const sl_st_set *w, int *found) {
  int64_t n = m->cfg.num_hidden_layers * m->cfg.moe_experts;
  *found = 0;
  if (!MOE_KIND(m, moe_bias_set) || !n) return SL_OK;
  float *b = calloc((size_t)n, sizeof *b);
  if (!b) return sl_fail(SL_ENOMEM, "out of memory");
  int rc = sl_model_moe_bias_read(&m->cfg, w, b, found);
  if (!rc && *found) rc = sl_model_moe_bias_set(m, b);
  free(b);
  return rc;
}

int sl_model_moe_bias_step(sl_model *m, const int64_t *load) {
  const sl_block_kind *kd = MOE_KIND(m, moe_bias_step);
  return kd ? kd->moe_bias_step(m, load) : SL_OK;
}

static void dec_destroy(sl_model *m) {
  sl_decoder *d = m->priv;
  if (!d) return;
  for (int kk = 0; kk < d->nkinds; kk++) {
    if (d->blks[kk] && sl_dec_use_kind(d, kk)->destroy) d->kind->destroy(m);
    free(d->blks[kk]);
    free(d->shared[kk]);
    free(d->live[kk].r);
    free(d->live_la[kk]);
  }
  free(d->lk);
  sl_act_sets_free(d->sets, d->nsets);
  free(d->packs);
  free(d->slive_of);
  free(d->spk);
  free(d->hvp);
  free(d);
  m->priv = NULL;
  m->vt = NULL; /* it was d->vt */
}

/* ---- activation sets and the pipeline boundary ---------------------------------- */
/* Set `set`: the residual stream, each block's kept tensors (the recomputed
 * ones are d->shared, allocated with set 0) and the head's. */
/* Whether a local layer is of kind kk (its recomputed buffers are then needed on this rank). */
static int kind_local(const sl_model *m, const sl_decoder *d, int kk) {
  for (int64_t l = 0; l < d->L; l++)
    if ((d->lk ? d->lk[l] : 0) == kk && sl_model_is_local(m, (int)l + 1)) return 1;
  return 0;
}

static int dec_alloc_acts(sl_model *m, int set) {
  sl_decoder *d = sl_dec(m);
  int rc = stream_live(m);
  if (rc) return rc;
  sl_act_set *a = sl_act_set_new(m, &d->sets, &d->nsets, set, d->L, d->C, d->layer_size, d->slive_of);
  if (!a || stream_packs(m, set)) return sl_fail(SL_ENOMEM, "out of memory");
  for (int kk = 0; set == 0 && m->ac != SL_AC_NONE && kk < d->nkinds; kk++) {
    if (d->nkinds > 1 && !kind_local(m, d, kk)) continue; /* one kind: allocated as before, whatever is local */
    if (!(d->shared[kk] = calloc(1, d->layer_size))) return sl_fail(SL_ENOMEM, "out of memory");
    if (sl_dec_use_kind(d, kk)->alloc_layer(m, -1, d->shared[kk], 1, NULL)) return SL_ENOMEM;
  }
  for (int64_t l = 0; l < d->L; l++) {
    void *la = (char *)a->layers + (size_t)l * d->layer_size;
    int kk = d->lk ? d->lk[l] : 0;
    sl_dec_use(d, l);
    if (m->ac == SL_AC_FULL) {
      if (d->shared[kk]) memcpy(la, d->shared[kk], d->layer_size);
    } else if (sl_model_is_local(m, (int)l + 1) && alloc_kept(m, set, l, la))
      return SL_ENOMEM;
  }
  if (!sl_model_is_local(m, (int)d->L + 1)) return SL_OK; /* the head is another pipeline stage's */
  if (!d->vp) {
    if (sl_lm_head_init(m, &a->head, d->C, d->V, d->eps, d->tied, (int)d->L + 1)) return SL_ENOMEM;
    a->head.softcap = d->final_softcap;
    a->head.w1 = d->w1;
    a->head.lscale = d->logit_div > 0 ? 1.0f / d->logit_div : 0.0f;
    return SL_OK;
  }
  rc = sl_lm_head_vp_set_init(m, &d->hvp, &d->hv, d->nsets, set, &a->head, &d->vs, d->C, d->eps, d->tied, (int)d->L + 1,
                              d->sp);
  if (!rc) { /* the loss-parallel head's own copy */
    d->hvp[set].h.softcap = a->head.softcap = d->final_softcap;
    d->hvp[set].h.w1 = a->head.w1 = d->w1;
    d->hvp[set].h.lscale = a->head.lscale = d->logit_div > 0 ? 1.0f / d->logit_div : 0.0f;
  }
  return rc;
}

static void dec_use_acts(sl_model *m, int set) {
  sl_decoder *d = sl_dec(m);
  d->stream = d->sets[set].stream;
  d->la = d->sets[set].layers;
  d->head = d->sets[set].head;
  if (d->vp && d->hvp) d->hv = &d->hvp[set];
}

static int dec_boundary(sl_model *m, int u, float **act, float **grad, int64_t *n) {
  sl_decoder *d = sl_dec(m);
  *act = d->stream[u - 1];
  *grad = d->dres;
  *n = d->n * d->C; /* this rank's token rows: N/T of them under sequence parallelism */
  return SL_OK;
}

/* ---- the split backward (zero-bubble schedules) ------------------------------------ */
static int64_t dec_stash_numel(const sl_model *m, int u) {
  const sl_decoder *d = sl_dec(m);
  if (u == 0 || u == d->L + 1) return d->N * d->C;
  if (u > d->L + 1) return 0; /* a companion: its gradients come from the unit it rides with */
  return sl_dec_use((sl_decoder *)d, u - 1)->stash_numel(m);
}

static int dec_bwd_input(sl_model *m, int u, const float *flat, float *stash, float *tied) {
  sl_decoder *d = sl_dec(m);
  if (u > d->L + 1) return SL_OK; /* a companion */
  if (u == 0) {
    m->ops->copy(m->k, stash, d->dres, (size_t)(d->n * d->C) * 4);
    if (d->embed_scale > 0) m->ops->scale_add(m->k, stash, d->embed_scale, 0.0f, d->n * d->C);
    return SL_OK;
  }
  if (u == d->L + 1 && d->vp) /* models/lmhead_split.c */
    return sl_lm_head_vp_bwd_input(m, d->hv, flat, d->stream[d->L], d->dres, d->dln, stash, tied);
  if (u == d->L + 1) return sl_lm_head_bwd_input(m, &d->head, flat, d->stream[d->L], d->dres, d->dln, stash, tied);
  block_unpack(m, u - 1);
  int rc = sl_dec_use(d, u - 1)->recompute(m, u - 1, flat);
  return rc ? rc : d->kind->bwd_input(m, u - 1, flat, stash);
}

static int dec_bwd_weight(sl_model *m, int u, const float *flat, float *grads, const float *stash) {
  sl_decoder *d = sl_dec(m);
  if (u > d->L + 1) return SL_OK; /* a companion */
  if (u == 0) return embedding_bwd(m, grads, stash);
  if (u == d->L + 1 && d->vp) return sl_lm_head_vp_bwd_weight(m, d->hv, flat, grads, d->stream[d->L], stash);
  if (u == d->L + 1) return sl_lm_head_bwd_weight(m, &d->head, flat, grads, d->stream[d->L], stash);
  /* again: what the input half recomputed lives in shared buffers, since overwritten (and so may the live ones) */
  block_unpack(m, u - 1);
  int rc = sl_dec_use(d, u - 1)->recompute(m, u - 1, flat);
  return rc ? rc : d->kind->bwd_weight(m, u - 1, flat, grads, stash);
}

static const sl_model_vt dec_vt = {
    .fwd = dec_fwd,
    .bwd = dec_bwd,
    .logits = dec_logits,
    .init_custom = dec_init_custom,
    .destroy = dec_destroy,
    .flops_per_token = dec_flops,
    .alloc_acts = dec_alloc_acts,
    .use_acts = dec_use_acts,
    .boundary = dec_boundary,
    .stash_numel = dec_stash_numel,
    .bwd_input = dec_bwd_input,
    .bwd_weight = dec_bwd_weight,
};

/* ---- construction ------------------------------------------------------------------ */
int sl_dec_companion(const sl_model *m, int64_t l) {
  const sl_decoder *d = sl_dec(m);
  for (int u = (int)d->L + 2; u < m->nunits; u++)
    if (m->units[u].companion_of == 1 + l) return u;
  return -1;
}

/* Whether layer l has a companion unit (its kind's has_companions). */
static int has_companion(sl_decoder *d, const sl_model *m, int64_t l) {
  const sl_block_kind *k = sl_dec_use(d, l);
  return k->has_companions && k->has_companions(m, l);
}

static int companion_specs(sl_model *m, sl_decoder *d) {
  int rc = SL_OK;
  for (int u = (int)d->L + 2; u < m->nunits && !rc; u++) {
    int64_t l = m->units[u].companion_of - 1;
    sl_unit_spec *b = &m->units[u];
    b->layer = (int)l;
    rc = sl_dec_use(d, l)->companion_spec(m, b, l);
  }
  return rc;
}

static int dec_specs(sl_model *m, sl_decoder *d) {
  int64_t T = m->tp_size;
  int comp = 0;
  for (int64_t l = 0; l < d->L; l++) comp += has_companion(d, m, l);
  m->nunits = (int)(d->L + 2 + comp);
  m->units = calloc((size_t)m->nunits, sizeof(sl_unit_spec));
  m->pinned = calloc((size_t)m->nunits, sizeof(int));
  if (!m->units || !m->pinned) return sl_fail(SL_ENOMEM, "out of memory");
  for (int u = 0; u < m->nunits; u++) m->units[u].companion_of = -1;
  for (int64_t l = 0, u = d->L + 2; l < d->L; l++) /* the companions in layer order */
    if (has_companion(d, m, l)) m->units[u++].companion_of = (int)(1 + l);
  sl_unit_spec *e = &m->units[0];
  snprintf(e->kind, sizeof e->kind, "embedding");
  e->layer = -1;
  int rc = sl_unit_add_split(m, e, d->embed_name, 2, d->V, d->C, 1, SL_INIT_NORMAL, d->std, SL_SPLIT_VOCAB, T);
  for (int64_t l = 0; l < d->L && !rc; l++) {
    sl_unit_spec *b = &m->units[1 + l];
    snprintf(b->kind, sizeof b->kind, "%s", sl_dec_use(d, l)->unit_kind);
    b->layer = (int)l;
    rc = d->kind->spec(m, b, l);
  }
  if (rc) return rc;
  rc = sl_lm_head_spec_split(m, d->norm_name, d->C, d->V, d->tied, d->head_init, d->std,
                             d->vp ? SL_SPLIT_VOCAB : SL_SPLIT_NONE);
  if (!rc && d->plus_one) m->units[d->L + 1].t[0].init = SL_INIT_ZEROS; /* the final norm: 1 + w */
  if (!rc && comp) rc = companion_specs(m, d);
  for (int u = 0; u < m->nunits && !rc; u++)
    if (!m->units[u].expert) m->units[u].hold_lo = 0, m->units[u].hold_n = m->units[u].numel;
  return rc;
}

/* Activations: set 0, then the backward scratch every set shares. */
int sl_decoder_buffers(sl_model *m) {
  sl_decoder *d = sl_dec(m);
  int rc = SL_OK;
  for (int kk = 0; kk < d->nkinds && !rc; kk++)
    if (sl_dec_use_kind(d, kk)->prepare) rc = d->kind->prepare(m);
  if (!rc && d->plus_one && !(d->w1 = sl_model_buf(m, d->C, SL_ARENA_WORKSPACE))) rc = SL_ENOMEM;
  if (!rc) rc = dec_alloc_acts(m, 0);
  if (rc) return rc;
  dec_use_acts(m, 0);
  if (!(d->dres = sl_model_buf(m, d->N * d->C, SL_ARENA_WORKSPACE)) ||
      !(d->dln = sl_model_buf(m, d->N * d->C, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  if (d->sp && !(d->xl = sl_model_buf(m, d->n * d->C, SL_ARENA_WORKSPACE))) return SL_ENOMEM;
  for (int kk = 0; kk < d->nkinds && !rc; kk++) rc = sl_dec_use_kind(d, kk)->alloc_scratch(m);
  return rc;
}

/* What a model of several kinds supports: what all of them support (its
 * attention and recurrent state if any kind has one; --tp must divide each
 * kind's width). */
void sl_dec_caps_merge(sl_model_caps *acc, const sl_model_caps *k, int first) {
  if (first) {
    *acc = *k;
    return;
  }
  acc->attention |= k->attention;
  acc->recurrent |= k->recurrent;
  acc->doc_mask &= k->doc_mask;
  acc->zb_split &= k->zb_split;
  acc->zb_split_accum &= k->zb_split_accum;
  acc->bf16 &= k->bf16;
  acc->bf16_acts |= k->bf16_acts; /* per kind: a kind without bf16 buffers packs nothing (live_off) */
  acc->bf16_stream &= k->bf16_stream;
  int64_t a = acc->tp_width, b = k->tp_width;
  while (b) { /* the gcd: a --tp dividing it divides both */
    int64_t t = a % b;
    a = b, b = t;
  }
  acc->tp_width = a;
}

int sl_decoder_create(sl_model *m, const sl_block_kind *const *kinds, int nk, const unsigned char *lk) {
  const sl_model_config *c = &m->cfg;
  sl_decoder *d = calloc(1, sizeof *d);
  if (!d) return sl_fail(SL_ENOMEM, "out of memory");
  m->priv = d;
  d->vt = dec_vt;
  if (nk < 1 || nk > SL_DEC_MAX_KINDS) return sl_fail(SL_EINTERNAL, "decoder: %d block kinds", nk);
  int split = 1;
  for (int kk = 0; kk < nk; kk++) {
    sl_model_caps kc;
    kinds[kk]->caps(c, &kc);
    sl_dec_caps_merge(&m->caps, &kc, kk == 0);
    split &= kinds[kk]->bwd_input != NULL;
    d->kinds[kk] = kinds[kk];
    if (kinds[kk]->layer_size > d->layer_size) d->layer_size = kinds[kk]->layer_size;
  }
  d->nkinds = nk;
  m->res_bf16 &= m->caps.bf16_stream; /* Mamba: fp32 (its residual_in_fp32) */
  if (!split || !m->caps.zb_split)    /* no split (for this config) */
    d->vt.stash_numel = NULL, d->vt.bwd_input = NULL, d->vt.bwd_weight = NULL;
  m->vt = &d->vt;
  int64_t T = m->tp_size;
  d->N = m->B * m->T;
  d->C = c->hidden_size;
  d->V = c->vocab_size;
  d->L = c->num_hidden_layers;
  d->tied = c->tie_word_embeddings;
  d->vp = T > 1;
  d->sp = m->sp;
  d->n = d->sp ? d->N / T : d->N;
  if (lk && !(d->lk = malloc((size_t)(d->L > 0 ? d->L : 1)))) return sl_fail(SL_ENOMEM, "out of memory");
  if (lk) memcpy(d->lk, lk, (size_t)d->L);
  int rc = SL_OK;
  for (int kk = 0; kk < nk && !rc; kk++) { /* each kind's state, selected as d->blk from now on */
    d->kind = kinds[kk];
    d->blk = NULL;
    rc = kinds[kk]->init(m, d);
    d->blks[kk] = d->blk;
  }
  if (!rc) sl_dec_use_kind(d, 0);
  if (!rc && d->vp) rc = sl_vocab_split_make(d->V, (int)T, m->tp_rank, &d->vs);
  return rc ? rc : dec_specs(m, d);
}
