/* models/mamba2.c — the Mamba-2 (HF Mamba2ForCausalLM) block kind of the
 * decoder skeleton (models/decoder.h: the embedding, the head, the residual
 * stream, activation sets).
 *
 * Units: 0 = embedding (backbone.embeddings.weight); 1..L = Mamba-2 blocks;
 * L+1 = norm_f (+ lm_head.weight, untied by default). A block's flat buffer,
 * in this order (names backbone.layers.{l}.*), with D = num_heads x head_dim
 * (= expand x hidden_size), G groups of S states, Cd = D + 2 G S the conv's
 * channels and Din = 2 D + 2 G S + nh the projection's rows:
 *   norm.weight (H) | mixer.in_proj.weight (Din, H) [| mixer.in_proj.bias (Din)] |
 *   mixer.conv1d.weight (Cd, 1, K) [| mixer.conv1d.bias (Cd)] | mixer.dt_bias (nh) |
 *   mixer.A_log (nh) | mixer.D (nh) | mixer.norm.weight (D) |
 *   mixer.out_proj.weight (H, D) [| mixer.out_proj.bias (H)]
 * The block (transformers' Mamba2Block over Mamba2Mixer.torch_forward):
 *   ln  = RMSNorm(x)                          norm.weight, layer_norm_epsilon
 *   zx  = ln W_in^T  = z (D) | xBC (Cd) | dt (nh)
 *   xbc = SiLU(causal depthwise conv(xBC))     = x (D) | B (G S) | C (G S)
 *   y   = SSD scan(x, dt, dt_bias, A_log, B, C, D)   (kernels.h ssd_fwd; head h reads group h / (nh/G))
 *   g   = y * SiLU(z)
 *   gn  = RMSNorm of g over each group's D/G channels, times mixer.norm.weight
 *   out = x + gn W_out^T
 * The gated norm is taken per group, as the original Mamba-2 (mamba_ssm's
 * RMSNormGated with group_size = d_inner / ngroups), llama.cpp and vLLM do;
 * transformers' Mamba2 takes it over the whole d_inner (transformers PR
 * #40861, open). The two agree at n_groups = 1 (docs/mamba.md).
 * Activation checkpointing: none keeps every activation; selective keeps the
 * GEMM, conv and scan outputs (ln, zx, xc, y and the scan's chunk states)
 * and recomputes xbc = SiLU(xc), g, gn and the gated norm's statistics;
 * full keeps only each block's input and recomputes the block. The
 * recomputations call the same kernels on the same inputs: bit-identical.
 * Tensor parallelism (heads and their groups over the TP ranks, a group
 * shared by several ranks when n_groups < --tp, + sequence parallelism):
 * above m2_spec. Document masking: the conv
 * and the scan restart at each document (m->seg). bf16 compute: the ops' bf16
 * layer; activations kept in fp32 buffers (bf16-valued where rounded).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "models/decoder.h"
#include "models/linear.h"

#define MAMBA2_SCAN_CHUNK 64 /* the scan's state checkpoint interval (docs/mamba.md) */

typedef struct {
  float *ln;    /* (N, H) the block norm's output */
  float *rstd;  /* (N) */
  float *zx;    /* (N, Din) in_proj output: z | xBC | dt */
  float *xc;    /* (N, Cd) the conv's output before SiLU */
  float *y;     /* (N, D) the scan's output */
  float *ckpt;  /* (B, nch, nh, P, S) the scan's states at chunk starts */
  float *xbc;   /* (N, Cd) SiLU(xc): x | B | C (recomputed under selective) */
  float *g;     /* (N, D) y * SiLU(z) (recomputed) */
  float *gn;    /* (N, D) the gated norm's output (recomputed) */
  float *grstd; /* (G, N) its statistics, group by group (recomputed) */
} m2_acts;

typedef struct {
  int64_t norm, w_in, b_in, w_conv, b_conv, dt_bias, a_log, dp, w_gn, w_out, b_out;
} m2_offsets;

typedef struct {
  const float *norm, *w_in, *b_in, *w_conv, *b_conv, *dt_bias, *a_log, *dp, *w_gn, *w_out, *b_out;
} m2_w;

typedef struct {
  int64_t N, H, D, nh, P, G, S, K, Cd, Din, chunk, nch; /* D, nh, G, Cd, Din: this TP rank's */
  int64_t Dw;                                           /* d_inner of the whole model (= D at T = 1) */
  int64_t Gw;                                           /* n_groups of the whole model */
  int64_t grep;  /* TP ranks sharing one group (T / n_groups when n_groups < T; else 1): its B / C replicated */
  int64_t gslot; /* grep > 1: the group this rank holds (rank / grep) */
  int64_t nrep;  /* grep > 1: the floats of one rank's replicated gradient regions (rep_grad_begin) */
  float *gsum;   /* grep > 1: (Gw, N) the gated norm's per-group sums, summed over TP */
  float *repsum; /* grep > 1: (Gw + 1) nrep: the replicated gradients' slots and the kept earlier sum */
  int fault_local; /* SL_FAULT_M2_NORM_LOCAL: the norm's sums not summed over TP (a negative control) */
  int sp;                                               /* sequence parallelism */
  int64_t n;                                            /* the stream's rows on this rank: N, or N/T under sp */
  float eps;
  float dt_lo, dt_hi;
  int use_bias, conv_bias;
  m2_offsets off;
  /* backward scratch (workspace), reused by every layer, besides the skeleton's dres and dln */
  float *dgn;       /* (N, D) out_proj's input gradient */
  float *dg;        /* (N, D) the gated norm's input gradient */
  float *dy;        /* (N, D) */
  float *dxbc;      /* (N, Cd) */
  float *dxc;       /* (N, Cd) */
  float *dzx;       /* (N, Din) */
  float *gnorm;     /* (H) under sp: the micro-batch's part of the block norm's weight gradient */
  sl_lin lin, lout; /* the projections (models/linear.h): in_proj (z | x | B | C | dt), out_proj */
  /* the family's names: Mamba2 / Nemotron-H backbone.layers.{l}.norm, .mixer.*; Granite 4.0-H
   * model.layers.{l / 2}.input_layernorm, .mamba.* (a decoder layer is half an HF layer) */
  const char *pre, *n_norm, *mod;
  int64_t div;
  float rmult; /* the output times this before the residual add (Granite's residual_multiplier; 1: none) */
} m2_priv;

static m2_w views(const m2_priv *p, const float *flat) {
  const m2_offsets *o = &p->off;
  m2_w w;
#define V_(f) w.f = o->f >= 0 ? flat + o->f : NULL
  V_(norm);
  V_(w_in);
  V_(b_in);
  V_(w_conv);
  V_(b_conv);
  V_(dt_bias);
  V_(a_log);
  V_(dp);
  V_(w_gn);
  V_(w_out);
  V_(b_out);
#undef V_
  return w;
}

/* NULL when T splits the heads and the groups (or each group over T / n_groups ranks), else why not. */
static const char *tp_misfit(const sl_model_config *c, int64_t T, char *why, size_t cap) {
  int64_t G = c->ssm_groups, nh = c->ssm_heads;
  if (nh % T == 0 && (G % T == 0 || T % G == 0)) return NULL;
  const char *pre = "Mamba-2 splits its heads over the TP ranks, each rank holding its heads' B/C group (a group "
                    "shared by --tp / n_groups ranks when n_groups < --tp)";
  if (nh % T)
    snprintf(why, cap, "%s: num_heads %lld is not divisible by --tp %lld (n_groups %lld)", pre, (long long)nh,
             (long long)T, (long long)G);
  else
    snprintf(why, cap, "%s: n_groups %lld is neither divisible by --tp %lld nor divides it", pre, (long long)G,
             (long long)T);
  return why;
}

/* grep > 1: the B and C rows of in_proj (and its bias) and channels of the
 * conv (and its bias) are replicated over the grep ranks holding the group;
 * each computed their gradient from its own heads, the sum over those ranks
 * is theirs. As llama.c's kv_grad_begin / kv_grad_sum: the regions'
 * earlier sum (--no-sync-accum) is moved aside and they are zeroed before
 * the weight gradients; after them each rank's regions go into its group's
 * slot of a zeroed (Gw slots) buffer, summed over TP, read back, the
 * earlier sum added. */
typedef struct {
  float *p;
  int64_t n;
} m2_region;

static int rep_regions(const m2_priv *p, const m2_w *g, m2_region r[4]) {
  int64_t D = p->D, S2 = 2 * p->S, H = p->H, n = 0;
  r[n++] = (m2_region){(float *)g->w_in + 2 * D * H, S2 * H};
  if (g->b_in) r[n++] = (m2_region){(float *)g->b_in + 2 * D, S2};
  r[n++] = (m2_region){(float *)g->w_conv + D * p->K, S2 * p->K};
  if (g->b_conv) r[n++] = (m2_region){(float *)g->b_conv + D, S2};
  return (int)n;
}

static void rep_grad_begin(sl_model *m, const m2_priv *p, const m2_w *g) {
  m2_region r[4];
  float *kept = p->repsum + p->Gw * p->nrep;
  for (int i = 0, n = rep_regions(p, g, r); i < n; kept += r[i].n, i++) {
    m->ops->copy(m->k, kept, r[i].p, (size_t)r[i].n * 4);
    m->ops->zero(m->k, r[i].p, (size_t)r[i].n * 4);
  }
}

static int rep_grad_sum(sl_model *m, const m2_priv *p, const m2_w *g) {
  m2_region r[4];
  int n = rep_regions(p, g, r);
  float *slot = p->repsum + p->gslot * p->nrep, *kept = p->repsum + p->Gw * p->nrep;
  m->ops->zero(m->k, p->repsum, (size_t)(p->Gw * p->nrep) * 4);
  for (int i = 0, o = 0; i < n; o += (int)r[i].n, i++) m->ops->copy(m->k, slot + o, r[i].p, (size_t)r[i].n * 4);
  int rc = sl_dec_tp_sum(m, p->repsum, p->Gw * p->nrep);
  if (rc) return rc;
  for (int i = 0; i < n; slot += r[i].n, kept += r[i].n, i++) {
    m->ops->copy(m->k, r[i].p, slot, (size_t)r[i].n * 4);
    m->ops->add_inplace(m->k, r[i].p, kept, r[i].n);
  }
  return SL_OK;
}

/* grep > 1: this rank's (N) partial sums of the gated norm's group, in its
 * group's row of gsum (zeroed), summed over TP: the group's sums. */
static const float *group_sums(sl_model *m, const m2_priv *p, const float *a, const float *b, const float *w,
                               int *rc) {
  float *mine = p->gsum + p->gslot * p->N;
  m->ops->zero(m->k, p->gsum, (size_t)(p->Gw * p->N) * 4);
  m->ops->rmsnorm_rowsum(m->k, mine, a, b, w, p->N, p->D, p->D);
  *rc = p->fault_local ? SL_OK : sl_dec_tp_sum(m, p->gsum, p->Gw * p->N);
  return mine;
}

static void zero(sl_model *m, float *x, int64_t n) { m->ops->zero(m->k, x, (size_t)n * sizeof(float)); }

/* g, gn and the gated norm's statistics from y and zx (xbc = SiLU(xc) is
 * made before the scan). A group spread over grep > 1 ranks (this rank's D
 * channels of its Dw / Gw): its sums of squares summed over them. */
static int gate_norm_fwd(sl_model *m, const m2_priv *p, const m2_w *w, m2_acts *a) {
  const sl_ops *o = m->ops;
  int64_t N = p->N, D = p->D, Dg = p->D / p->G;
  o->gate_fwd(m->k, a->g, a->y, a->zx, p->Din, N, D);
  if (p->grep > 1) {
    int rc;
    const float *ss = group_sums(m, p, a->g, a->g, NULL, &rc);
    if (rc) return rc;
    o->rmsnorm_fwd_sum(m->k, a->gn, a->grstd, a->g, w->w_gn, ss, N, D, D, p->Dw / p->Gw, p->eps);
    return SL_OK;
  }
  for (int64_t gi = 0; gi < p->G; gi++)
    o->rmsnorm_fwd(m->k, a->gn + gi * Dg, a->grstd + gi * N, a->g + gi * Dg, w->w_gn + gi * Dg, N, Dg, D, p->eps);
  return SL_OK;
}

static int block_forward(sl_model *m, int l, const float *flat, const float *x, void *layer, float *out) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  m2_priv *p = sl_dec(m)->blk;
  m2_acts *a = layer;
  m2_w w = views(p, flat);
  int64_t N = p->N, H = p->H, D = p->D, GS = p->G * p->S;
  (void)l;
  int rc = sl_dec_norm_gathered(m, a->ln, a->rstd, x, w.norm, p->eps);
  if (rc) return rc;
  sl_lin_fwd(m, &p->lin, a->zx, a->ln, w.w_in, w.b_in, N);
  o->conv1d_fwd(k, a->xc, a->zx + D, p->Din, w.w_conv, w.b_conv, m->B, m->T, p->Cd, p->K, m->seg);
  o->silu_fwd(k, a->xbc, a->xc, N * p->Cd);
  o->ssd_fwd(k, a->y, a->ckpt, a->xbc, p->Cd, a->zx + 2 * D + 2 * GS, p->Din, w.dt_bias, w.a_log, a->xbc + D,
             a->xbc + D + GS, p->Cd, w.dp, m->seg, p->dt_lo, p->dt_hi, m->B, m->T, p->nh, p->P, p->G, p->S, p->chunk);
  if ((rc = gate_norm_fwd(m, p, &w, a))) return rc;
  if (out) { /* out_proj's partial sums (row-parallel) summed over TP: reduce-scattered under sp */
    float *dln = sl_dec(m)->dln;
    sl_lin_fwd(m, &p->lout, p->sp ? dln : out, a->gn, w.w_out, w.b_out, N);
    if ((rc = sl_dec_row_parallel_sum(m, dln, out))) return rc;
    if (p->rmult != 1.0f) o->scale_add(k, out, p->rmult, 0.0f, p->n * H);
    o->add_inplace(k, out, x, p->n * H);
  }
  return SL_OK;
}

static int m2_recompute(sl_model *m, int l, const float *flat) {
  m2_priv *p = sl_dec(m)->blk;
  m2_acts *a = sl_dec_layer(m, l);
  if (m->ac == SL_AC_FULL) return block_forward(m, l, flat, sl_dec(m)->stream[l], a, NULL);
  if (m->ac == SL_AC_SELECTIVE) {
    m2_w w = views(p, flat);
    m->ops->silu_fwd(m->k, a->xbc, a->xc, p->N * p->Cd);
    return gate_norm_fwd(m, p, &w, a);
  }
  return SL_OK;
}

/* ---- backward, whole or split (zb1p) --------------------------------------------
 * The split backward's input half (B) runs the same kernels as the whole
 * backward with every weight-gradient output NULL and keeps, per
 * micro-batch and unit, what the weight half (W) needs: the output
 * gradients of out_proj, the gated norm, the conv and in_proj, and the
 * block norm's input gradient (this rank's rows); the scan's parameter
 * gradients (dt_bias, A_log, D) come out of ssd_bwd with its input
 * gradients, so B writes them into a zeroed part of the stash and W adds
 * them (0 + x = x: the runtime zeroes the gradient buffer per micro-batch;
 * the executor refuses --no-sync-accum for this kind, zb_split_accum 0). */
typedef struct {
  float *dout, *dgn, *dxc, *dzx, *dln, *ddtb, *dalog, *ddp;
} m2_stash;

static m2_stash stash_views(const m2_priv *p, const float *st) {
  m2_stash b;
  b.dout = (float *)st;
  b.dgn = b.dout + p->N * p->H;
  b.dxc = b.dgn + p->N * p->D;
  b.dzx = b.dxc + p->N * p->Cd;
  b.dln = b.dzx + p->N * p->Din;
  b.ddtb = b.dln + p->n * p->H;
  b.dalog = b.ddtb + p->nh;
  b.ddp = b.dalog + p->nh;
  return b;
}

static int64_t m2_stash_numel(const sl_model *m) {
  const m2_priv *p = sl_dec(m)->blk;
  return p->N * (p->H + p->D + p->Cd + p->Din) + p->n * p->H + 3 * p->nh;
}

static void copy(sl_model *m, float *dst, const float *src, int64_t n) {
  m->ops->copy(m->k, dst, src, (size_t)n * sizeof(float));
}

/* Block l's backward (after m2_recompute): dres holds the gradient of the
 * block output and receives that of its input. g: the weight gradients to
 * add into (the whole backward), or NULL with st the stash (B). */
static int bwd_pass(sl_model *m, int l, const float *flat, const m2_w *g, const m2_stash *st) {
  sl_decoder *d = sl_dec(m);
  m2_priv *p = d->blk;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, H = p->H, D = p->D, GS = p->G * p->S, Dg = p->D / p->G;
  m2_acts *a = sl_dec_layer(m, l);
  m2_w w = views(p, flat);
#define G_(f) (g ? (float *)g->f : NULL)
  int rc = SL_OK;
  /* out_proj: dres is the gradient of the block output (the residual passes it to x unchanged); under sp
   * it is all-gathered (into dln, which in_proj's backward overwrites later, or into the stash). out_proj.bias
   * is whole on every rank and its gradient the same bits everywhere (from the whole output gradient). */
  const float *dout = st ? st->dout : d->dres;
  if (p->sp) rc = sl_dec_sp_gather(m, d->dres, (float *)(dout = st ? st->dout : d->dln));
  else if (st) copy(m, st->dout, d->dres, N * H);
  if (rc) return rc;
  if (p->rmult != 1.0f) { /* Granite's residual multiplier: out_proj's output gradient is rmult dres */
    if (dout == d->dres) copy(m, d->dln, d->dres, N * H), dout = d->dln; /* dln: free until in_proj's backward */
    o->scale_add(k, (float *)dout, p->rmult, 0.0f, N * H);
  }
  zero(m, p->dgn, N * D);
  sl_lin_bwd(m, &p->lout, p->dgn, G_(w_out), G_(b_out), dout, a->gn, w.w_out, N);
  if (st) copy(m, st->dgn, p->dgn, N * D);
  if (g && p->grep > 1) rep_grad_begin(m, p, g);
  /* the gated norm, group by group (a group spread over grep ranks: backward's dot product summed over them) */
  zero(m, p->dg, N * D);
  if (p->grep > 1) {
    const float *dots = group_sums(m, p, p->dgn, a->g, w.w_gn, &rc);
    if (rc) return rc;
    o->rmsnorm_bwd_sum(k, p->dg, p->dgn, a->g, w.w_gn, a->grstd, dots, N, D, D, p->Dw / p->Gw);
    if (g) o->rmsnorm_bwd(k, NULL, (float *)g->w_gn, p->dgn, a->g, w.w_gn, a->grstd, N, D, D);
  } else
    for (int64_t gi = 0; gi < p->G; gi++)
    o->rmsnorm_bwd(k, p->dg + gi * Dg, g ? (float *)g->w_gn + gi * Dg : NULL, p->dgn + gi * Dg, a->g + gi * Dg,
                   w.w_gn + gi * Dg, a->grstd + gi * N, N, Dg, D);
  /* the gate: dy, and dz into the z columns of dzx */
  zero(m, p->dy, N * D);
  zero(m, p->dzx, N * p->Din);
  o->gate_bwd(k, p->dy, p->dzx, p->Din, p->dg, a->y, a->zx, N, D);
  /* the scan: dx, dB, dC into dxbc; ddt into the dt columns of dzx; its parameter gradients */
  zero(m, p->dxbc, N * p->Cd);
  if (st) zero(m, st->ddtb, 3 * p->nh);
  o->ssd_bwd(k, p->dxbc, p->dzx + 2 * D + 2 * GS, st ? st->ddtb : G_(dt_bias), st ? st->dalog : G_(a_log), p->dxbc + D,
             p->dxbc + D + GS, st ? st->ddp : G_(dp), p->dy, a->xbc, p->Cd, a->zx + 2 * D + 2 * GS, p->Din, w.dt_bias,
             w.a_log, a->xbc + D, a->xbc + D + GS, p->Cd, w.dp, m->seg, a->ckpt, p->dt_lo, p->dt_hi, m->B, m->T, p->nh,
             p->P, p->G, p->S, p->chunk);
  /* SiLU, then the conv into the xBC columns of dzx */
  zero(m, p->dxc, N * p->Cd);
  o->silu_bwd(k, p->dxc, p->dxbc, a->xc, N * p->Cd);
  if (st) copy(m, st->dxc, p->dxc, N * p->Cd);
  o->conv1d_bwd(k, p->dzx + D, p->Din, G_(w_conv), G_(b_conv), p->dxc, a->zx + D, p->Din, w.w_conv, m->B, m->T, p->Cd,
                p->K, m->seg);
  if (st) copy(m, st->dzx, p->dzx, N * p->Din);
  /* in_proj and the block norm */
  float *dln = d->dln;
  zero(m, dln, N * H);
  sl_lin_bwd(m, &p->lin, dln, G_(w_in), G_(b_in), p->dzx, a->ln, w.w_in, N);
  float *dnorm = p->sp ? d->xl : dln;
  if ((rc = sl_dec_row_parallel_sum(m, dln, dnorm))) return rc; /* Megatron's f: in_proj is column-parallel */
  if (g && p->grep > 1 && (rc = rep_grad_sum(m, p, g))) return rc;
  if (st) copy(m, st->dln, dnorm, p->n * H);
  o->rmsnorm_bwd(k, d->dres, g ? sl_dec_norm_dw(m, (float *)g->norm, p->gnorm) : NULL, dnorm, d->stream[l], w.norm,
                 a->rstd, p->n, H, H);
#undef G_
  return g ? sl_dec_norm_grad_sum(m, (float *)g->norm, p->gnorm) : SL_OK;
}

static int m2_bwd(sl_model *m, int l, const float *flat, float *grads) {
  m2_w g = views(sl_dec(m)->blk, grads);
  return bwd_pass(m, l, flat, &g, NULL);
}

static int m2_bwd_input(sl_model *m, int l, const float *flat, float *stash) {
  m2_stash st = stash_views(sl_dec(m)->blk, stash);
  return bwd_pass(m, l, flat, NULL, &st);
}

/* W: the weight-gradient calls of the whole backward on B's stash. */
static int m2_bwd_weight(sl_model *m, int l, const float *flat, float *grads, const float *stash) {
  sl_decoder *d = sl_dec(m);
  m2_priv *p = d->blk;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, H = p->H, D = p->D, Dg = p->D / p->G;
  m2_acts *a = sl_dec_layer(m, l);
  m2_w w = views(p, flat), g = views(p, grads);
  m2_stash st = stash_views(p, stash);
  int rc;
  if (p->grep > 1) rep_grad_begin(m, p, &g);
  sl_lin_bwd(m, &p->lout, NULL, (float *)g.w_out, (float *)g.b_out, st.dout, a->gn, w.w_out, N);
  for (int64_t gi = 0; gi < p->G; gi++)
    o->rmsnorm_bwd(k, NULL, (float *)g.w_gn + gi * Dg, st.dgn + gi * Dg, a->g + gi * Dg, w.w_gn + gi * Dg,
                   a->grstd + gi * N, N, Dg, D);
  o->add_inplace(k, (float *)g.dt_bias, st.ddtb, p->nh);
  o->add_inplace(k, (float *)g.a_log, st.dalog, p->nh);
  o->add_inplace(k, (float *)g.dp, st.ddp, p->nh);
  o->conv1d_bwd(k, NULL, p->Din, (float *)g.w_conv, (float *)g.b_conv, st.dxc, a->zx + D, p->Din, w.w_conv, m->B, m->T,
                p->Cd, p->K, m->seg);
  sl_lin_bwd(m, &p->lin, NULL, (float *)g.w_in, (float *)g.b_in, st.dzx, a->ln, w.w_in, N);
  if (p->grep > 1 && (rc = rep_grad_sum(m, p, &g))) return rc;
  o->rmsnorm_bwd(k, NULL, sl_dec_norm_dw(m, (float *)g.norm, p->gnorm), st.dln, d->stream[l], w.norm, a->rstd, p->n, H,
                 H);
  return sl_dec_norm_grad_sum(m, (float *)g.norm, p->gnorm);
}

/* One layer's (a hybrid's: models/decoder.c sums them), as m2_flops counts it. */
static int64_t m2_layer_flops(const sl_model *m, int64_t l, int64_t T) {
  const m2_priv *p = sl_dec(m)->blk;
  (void)l, (void)T;
  int64_t GSw = p->Gw * p->S, Dinw = 2 * p->Dw + 2 * GSw + p->nh * m->tp_size, Cdw = p->Dw + 2 * GSw;
  return 6 * (Dinw * p->H + p->Dw * p->H) + 6 * p->K * Cdw + 15 * p->Dw * p->S; /* the whole model's */
}

static int64_t m2_flops(const sl_model *m, int64_t T) {
  const sl_decoder *dc = sl_dec(m);
  const m2_priv *p = dc->blk;
  (void)T; /* linear in T: no attention term */
  /* 6 x (the matmuls' parameters: in_proj, out_proj, the LM head) + the
   * depthwise conv (2 K per channel, x3 for training) + the scan (per
   * channel and state: the decay product, the input term and the C
   * contraction, 5 FLOPs forward; x3 for training). Recomputation not
   * counted. */
  int64_t GSw = p->Gw * p->S, Dinw = 2 * p->Dw + 2 * GSw + p->nh * m->tp_size, Cdw = p->Dw + 2 * GSw;
  int64_t per_layer = Dinw * p->H + p->Dw * p->H; /* the whole model's (B / C once where TP ranks share them) */
  int64_t Nmm = dc->L * per_layer + dc->V * p->H;
  return 6 * Nmm + dc->L * (6 * p->K * Cdw + 15 * p->Dw * p->S);
}

/* ---- init from seed (HF Mamba2PreTrainedModel._init_weights) --------------- */
static double unif01(uint64_t *s) { return (double)(sl_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); }

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

/* A_log = log(1..nh); dt_bias = softplus^-1(dt), dt log-uniform in
 * [time_step_min, time_step_max] floored at time_step_floor; the conv and
 * out_proj Kaiming-uniform (a = sqrt(5): +-1/sqrt(fan_in), fan_in K and D). */
static int m2_init_custom(sl_model *m, int u, int ti, float *dst, uint64_t seed) {
  const sl_model_config *c = &m->cfg;
  const sl_tensor_spec *t = &m->units[u].t[ti];
  uint64_t s = seed;
  int64_t numel = t->full[0] * (t->ndim > 1 ? t->full[1] : 1) * (t->ndim > 2 ? t->full[2] : 1);
  if (ends_with(t->name, ".A_log")) {
    for (int64_t h = 0; h < numel; h++) dst[h] = logf((float)(h + 1));
    return SL_OK;
  }
  if (ends_with(t->name, ".dt_bias")) {
    double lo = log(c->time_step_min), hi = log(c->time_step_max);
    for (int64_t i = 0; i < numel; i++) {
      double dt = exp(unif01(&s) * (hi - lo) + lo);
      if (dt < c->time_step_floor) dt = c->time_step_floor;
      dst[i] = (float)(dt + log(-expm1(-dt)));
    }
    return SL_OK;
  }
  double bound;
  if (ends_with(t->name, "conv1d.weight")) bound = 1.0 / sqrt((double)c->conv_kernel);
  else if (ends_with(t->name, "out_proj.weight")) bound = 1.0 / sqrt((double)t->full[1]);
  else return sl_fail(SL_EINPUT, "mamba2: no custom init for tensor %s", t->name);
  for (int64_t i = 0; i < numel; i++) dst[i] = (float)((2.0 * unif01(&s) - 1.0) * bound);
  return SL_OK;
}

static int m2_alloc_layer(sl_model *m, int64_t l, void *layer, int recomputed, const void *shared) {
  (void)l; /* every layer alike */
  m2_priv *p = sl_dec(m)->blk;
  m2_acts *a = layer;
  int64_t N = p->N, D = p->D;
  int big = !recomputed || m->ac == SL_AC_FULL, cheap = recomputed || m->ac == SL_AC_NONE;
  if (big) {
    if (!(a->ln = sl_model_buf(m, N * p->H, SL_ARENA_ACTS)) || !(a->rstd = sl_model_buf(m, p->n, SL_ARENA_ACTS)) ||
        !(a->zx = sl_model_buf(m, N * p->Din, SL_ARENA_ACTS)) || !(a->xc = sl_model_buf(m, N * p->Cd, SL_ARENA_ACTS)) ||
        !(a->y = sl_model_buf(m, N * D, SL_ARENA_ACTS)) ||
        !(a->ckpt = sl_model_buf(m, m->B * p->nch * D * p->S, SL_ARENA_ACTS)))
      return SL_ENOMEM;
  }
  if (cheap) {
    if (!(a->xbc = sl_model_buf(m, N * p->Cd, SL_ARENA_ACTS)) || !(a->g = sl_model_buf(m, N * D, SL_ARENA_ACTS)) ||
        !(a->gn = sl_model_buf(m, N * D, SL_ARENA_ACTS)) || !(a->grstd = sl_model_buf(m, p->G * N, SL_ARENA_ACTS)))
      return SL_ENOMEM;
  } else {
    const m2_acts *sh = shared;
    a->xbc = sh->xbc;
    a->g = sh->g;
    a->gn = sh->gn;
    a->grstd = sh->grstd;
  }
  return SL_OK;
}

/* Tensor parallelism over T ranks splits the heads and their groups (T
 * divides both): rank r holds heads [r nh/T, ..) and groups [r G/T, ..), so
 * every row of in_proj's parts z | x | B | C | dt, of the conv's x | B | C
 * channels, of dt_bias, A_log, D and the gated norm that they use
 * (sl_unit_add_parts: each part split on its own), and the matching columns
 * of out_proj (row-parallel). The conv, the scan, the gate and the gated
 * norm (per group: a group's channels are on one rank) are local; out_proj's
 * partial sums are summed (reduce-scattered under sp) and in_proj's input
 * gradient too: one N x H collective each way, like an attention sublayer.
 * n_groups < T (T a multiple of it): rank r holds its nh/T heads and group
 * r / grep, whose B and C rows of in_proj and channels of the conv are
 * replicated over its grep = T / n_groups ranks (sl_unit_add_parts' reps;
 * gradients summed over them: rep_grad_sum), and the gated norm's group
 * spans those ranks: its sums summed over TP (group_sums). */
static int m2_spec(sl_model *m, sl_unit_spec *b, int64_t l) {
  m2_priv *p = sl_dec(m)->blk;
  float std = sl_dec(m)->std;
  int64_t T = m->tp_size, Dw = p->Dw, GSw = p->Gw * p->S, nhw = p->nh * T;
  int64_t in_parts[5] = {Dw, Dw, GSw, GSw, nhw}, conv_parts[3] = {Dw, GSw, GSw};
  int R = (int)p->grep, in_reps[5] = {1, 1, R, R, 1}, conv_reps[3] = {1, R, R}; /* B, C: grep copies */
  int rc;
  char nm[SL_TENSOR_NAME_MAX];
  m2_offsets *o = &p->off;
  /* split: 0 whole; 5 / 3 in_proj's / the conv's parts; 1 split over dim 0; -1 row (out_proj) */
#define ADD(field, suffix, nd, d0, d1, d2, decay, init, split)                                                         \
  snprintf(nm, sizeof nm, "%s.%lld.%s.%s", p->pre, (long long)(l / p->div), p->mod, suffix);                           \
  o->field = b->numel;                                                                                                 \
  rc = (split) > 1                                                                                                     \
           ? sl_unit_add_parts(m, b, nm, nd, (split) == 5 ? in_parts : conv_parts, (split) == 5 ? in_reps : conv_reps, \
                               (split), d1, d2, decay, init, std)                                                      \
       : (split) == 1 ? sl_unit_add_stacked(m, b, nm, nd, d0, d1, d2, decay, init, std, 1)                             \
       : (split) < 0  ? sl_unit_add_split(m, b, nm, nd, d0, d1, decay, init, std, SL_SPLIT_ROW, T)                     \
                      : sl_unit_add(b, nm, nd, d0, d1, d2, decay, init, std);                                           \
  if (rc) return rc
  o->b_in = o->b_conv = o->b_out = -1;
  o->norm = b->numel; /* the block norm: outside the mixer's module */
  snprintf(nm, sizeof nm, "%s.%lld.%s", p->pre, (long long)(l / p->div), p->n_norm);
  if ((rc = sl_unit_add(b, nm, 1, p->H, 0, 0, 0, SL_INIT_ONES, std))) return rc;
  ADD(w_in, "in_proj.weight", 2, 0, p->H, 0, 1, SL_INIT_NORMAL, 5);
  if (p->use_bias) {
    ADD(b_in, "in_proj.bias", 1, 0, 1, 1, 0, SL_INIT_ZEROS, 5);
  }
  ADD(w_conv, "conv1d.weight", 3, 0, 1, p->K, 1, SL_INIT_CUSTOM, 3);
  if (p->conv_bias) {
    ADD(b_conv, "conv1d.bias", 1, 0, 1, 1, 0, SL_INIT_ZEROS, 3);
  }
  ADD(dt_bias, "dt_bias", 1, nhw, 0, 0, 0, SL_INIT_CUSTOM, 1);
  ADD(a_log, "A_log", 1, nhw, 0, 0, 0, SL_INIT_CUSTOM, 1);
  ADD(dp, "D", 1, nhw, 0, 0, 0, SL_INIT_ONES, 1);
  ADD(w_gn, "norm.weight", 1, Dw, 0, 0, 0, SL_INIT_ONES, 1);
  ADD(w_out, "out_proj.weight", 2, p->H, Dw, 0, 1, SL_INIT_CUSTOM, -1);
  if (p->use_bias) {
    ADD(b_out, "out_proj.bias", 1, p->H, 0, 0, 0, SL_INIT_ZEROS, 0);
  }
#undef ADD
  return SL_OK;
}

static int m2_alloc_scratch(sl_model *m) {
  m2_priv *p = sl_dec(m)->blk;
  int64_t N = p->N, D = p->D;
  if (!(p->dgn = sl_model_buf(m, N * D, SL_ARENA_WORKSPACE)) || !(p->dg = sl_model_buf(m, N * D, SL_ARENA_WORKSPACE)) ||
      !(p->dy = sl_model_buf(m, N * D, SL_ARENA_WORKSPACE)) ||
      !(p->dxbc = sl_model_buf(m, N * p->Cd, SL_ARENA_WORKSPACE)) ||
      !(p->dxc = sl_model_buf(m, N * p->Cd, SL_ARENA_WORKSPACE)) ||
      !(p->dzx = sl_model_buf(m, N * p->Din, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  if (p->sp && !(p->gnorm = sl_model_buf(m, p->H, SL_ARENA_WORKSPACE))) return SL_ENOMEM;
  if (p->grep > 1 && (!(p->gsum = sl_model_buf(m, p->Gw * N, SL_ARENA_WORKSPACE)) ||
                      !(p->repsum = sl_model_buf(m, (p->Gw + 1) * p->nrep, SL_ARENA_WORKSPACE))))
    return SL_ENOMEM;
  return SL_OK;
}

static int m2_init(sl_model *m, sl_decoder *d) {
  const sl_model_config *c = &m->cfg;
  m2_priv *p = calloc(1, sizeof *p);
  if (!p) return sl_fail(SL_ENOMEM, "out of memory");
  d->blk = p;
  int64_t T = m->tp_size;
  int rc = c->ssm_groups <= 0 || c->ssm_heads <= 0 ? SL_OK : sl_dec_tp_check(m, tp_misfit, c->ssm_heads);
  if (rc) return rc;
  p->N = d->N;
  p->sp = d->sp;
  p->n = d->n;
  p->H = c->hidden_size;
  p->Dw = c->ssm_heads * c->ssm_head_dim; /* Mamba2: = expand x hidden_size (checked); Nemotron-H: its own */
  p->D = p->Dw / T;
  p->nh = c->ssm_heads / T;
  p->P = c->ssm_head_dim;
  p->Gw = c->ssm_groups;
  p->grep = p->Gw > 0 && p->Gw < T ? T / p->Gw : 1; /* tp_misfit: T a multiple of n_groups */
  p->G = p->grep > 1 ? 1 : p->Gw / T;
  p->gslot = m->tp_rank / p->grep;
  p->S = c->state_size;
  p->K = c->conv_kernel;
  if (p->H <= 0 || p->D <= 0 || p->nh <= 0 || p->P <= 0 || p->G <= 0 || p->S <= 0 || p->K <= 0 ||
      p->nh * p->P != p->D || p->nh % p->G != 0 || d->V <= 0 || d->L <= 0)
    return sl_fail(SL_EINPUT,
                   "mamba2 config: hidden_size %lld, num_heads %lld x head_dim %lld = d_inner %lld, "
                   "n_groups %lld dividing num_heads, state_size %lld, conv_kernel %lld, vocab_size %lld, "
                   "num_hidden_layers %lld",
                   (long long)p->H, (long long)p->nh, (long long)p->P, (long long)p->D, (long long)p->G,
                   (long long)p->S, (long long)p->K, (long long)d->V, (long long)d->L);
  p->Cd = p->D + 2 * p->G * p->S;
  p->nrep = 2 * p->S * (p->H + p->K + (c->use_bias != 0) + (c->use_conv_bias != 0));
  p->fault_local = p->grep > 1 && sl_env_bool("SL_FAULT_M2_NORM_LOCAL");
  p->Din = p->D + p->Cd + p->nh;
  p->eps = (float)c->layer_norm_epsilon;
  p->dt_lo = (float)c->dt_limit[0];
  p->dt_hi = (float)c->dt_limit[1];
  p->use_bias = c->use_bias;
  p->conv_bias = c->use_conv_bias;
  int granite = c->arch == SL_ARCH_GRANITE_H;
  p->pre = granite ? "model.layers" : "backbone.layers";
  p->n_norm = granite ? "input_layernorm.weight" : "norm.weight";
  p->mod = granite ? "mamba" : "mixer";
  p->div = c->layer_div > 1 ? c->layer_div : 1;
  p->rmult = c->residual_mult > 0 ? (float)c->residual_mult : 1.0f;
  p->lin = sl_lin_one("in_proj", granite ? "mamba.in_proj" : "mixer.in_proj", p->H, p->Din, SL_LIN_COL);
  p->lout = sl_lin_one("out_proj", granite ? "mamba.out_proj" : "mixer.out_proj", p->D, p->H, SL_LIN_ROW);
  p->chunk = MAMBA2_SCAN_CHUNK;
  p->nch = m->T > 0 ? (m->T + p->chunk - 1) / p->chunk : 0;
  d->eps = p->eps;
  d->std = c->initializer_range > 0 ? (float)c->initializer_range : 0.1f;
  d->embed_name = granite                  ? "model.embed_tokens.weight"
                  : c->ssm_original_format ? "backbone.embedding.weight"
                                           : "backbone.embeddings.weight";
  d->norm_name = granite ? "model.norm.weight" : "backbone.norm_f.weight";
  d->head_init = SL_INIT_NORMAL;
  return SL_OK;
}

/* What --tp must divide for tp_misfit to accept it, over the planner's powers of two: the heads when n_groups is a
 * power of two (a power of two T either divides it or is a multiple of it: split or shared groups), else what the
 * heads and n_groups have in common (T must divide the groups; none of them is shared by T / n_groups ranks). */
static int64_t m2_tp_width(const sl_model_config *c) {
  int64_t G = c->ssm_groups > 0 ? c->ssm_groups : 1, nh = c->ssm_heads > 0 ? c->ssm_heads : 1, a = nh, b = G;
  if (!(G & (G - 1))) return nh;
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

static void m2_caps(const sl_model_config *c, sl_model_caps *out) {
  *out = (sl_model_caps){.attention = 0,
                         .doc_mask = 1, /* the conv and the scan restart at each document (m->seg) */
                         .recurrent = 1,
                         .zb_split = 1,
                         .zb_split_accum = 0,
                         .bf16 = 1, /* tests/ref/bf16_ref.py mirrors its ops (test_torch_bf16) */
                         .bf16_acts = 0,
                         .tp_width = m2_tp_width(c)};
}

const sl_block_kind sl_mamba2_block = {
    .unit_kind = "mamba2_block",
    .layer_size = sizeof(m2_acts),
    .caps = m2_caps,
    .init = m2_init,
    .spec = m2_spec,
    .alloc_layer = m2_alloc_layer,
    .alloc_scratch = m2_alloc_scratch,
    .fwd = block_forward,
    .recompute = m2_recompute,
    .bwd = m2_bwd,
    .stash_numel = m2_stash_numel,
    .bwd_input = m2_bwd_input,
    .bwd_weight = m2_bwd_weight,
    .flops_per_token = m2_flops,
    .layer_flops = m2_layer_flops,
    .init_custom = m2_init_custom,
};
