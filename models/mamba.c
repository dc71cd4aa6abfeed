/* models/mamba.c — the Mamba (v1, HF MambaForCausalLM) block kind of the
 * decoder skeleton (models/decoder.h, which owns the embedding, the head,
 * the residual stream, activation sets and the split backward's
 * scaffolding).
 *
 * Units: 0 = embedding (backbone.embeddings.weight; backbone.embedding.weight
 * for a state-spaces checkpoint); 1..L = Mamba blocks; L+1 = norm_f (+
 * lm_head.weight when untied; tied by default: the head then reads unit 0's
 * parameters and adds into unit 0's gradient through m->access).
 * A block's flat buffer, in this order (names backbone.layers.{l}.*):
 *   norm.weight (H) | mixer.in_proj.weight (2D, H) [| mixer.in_proj.bias (2D)] |
 *   mixer.conv1d.weight (D, 1, K) [| mixer.conv1d.bias (D)] |
 *   mixer.x_proj.weight (R + 2S, D) | mixer.dt_proj.weight (D, R) |
 *   mixer.dt_proj.bias (D) | mixer.A_log (D, S) | mixer.D (D) |
 *   mixer.out_proj.weight (H, D) [| mixer.out_proj.bias (H)]
 * Block math and kernels: docs/mamba.md; memory per checkpoint mode:
 * docs/models.md. Activation checkpointing: none keeps every block's
 * activations; selective keeps the expensive ones (the scan output y and its
 * chunk checkpoints, the GEMM outputs xz, dtr, bc) and recomputes u = SiLU(xcp),
 * dtv = dt_proj(dtr) and g = y * SiLU(z) in backward; full keeps only each
 * block's input and recomputes the block. The recomputation calls the same
 * kernels on the same inputs, so all three modes are bit-identical.
 * Tensor parallelism over T ranks (m->access.tp): the d_inner channels are
 * split, D below is this rank's D/T; the derivation is in "Tensor
 * parallelism" further down and in docs/models.md.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "models/mamba_internal.h"

/* ---- Tensor parallelism -------------------------------------------------------
 * T ranks split the d_inner channels (D = Dw/T per rank, rank r holding
 * channels [r·D, r·D + D)): in_proj is column-parallel over the rows of both
 * of its stacked halves (x rows r·D.., z rows Dw + r·D..; sl_unit_add_stacked),
 * conv1d, dt_proj (weight rows, bias), A_log and D are split over their d_inner
 * dim 0, x_proj (R+2S, Dw) and out_proj (H, Dw) are row-parallel (split over
 * their input columns). The norms are whole on every rank; the embedding
 * and the head split the vocabulary (below).
 * Every channel's conv, SiLU, scan and gate depend only on that channel and on
 * the per-token dt_low (R), Bm (S), Cm (S) shared by all channels, so:
 * Forward, per layer (elements per micro-batch, N = b·s tokens):
 *   xz_r = ln·W_in,r^T            local (ln whole on every rank)
 *   u_r  = SiLU(conv(x_r))        local
 *   dbl  = sum_r u_r·W_x,r^T      all-reduce #1: N·(R + 2S)  (dtr | Bm | Cm)
 *   dt_r = dtr·W_dt,r^T + b_dt,r  local (dtr whole)
 *   y_r  = scan_r(u_r, dt_r, A_r, Bm, Cm, D_r); g_r = y_r·SiLU(z_r)   local
 *   out  = sum_r g_r·W_out,r^T (+ b_out, added by rank 0 only)
 *                                 all-reduce #2: N·H
 * Backward, given dout (whole, the same on every rank):
 *   dg_r = dout·W_out,r, dW_out,r = dout^T·g_r, db_out = sum dout (every rank:
 *     b_out is replicated and its gradient the same bits everywhere)
 *   gate and scan backward are per channel: dy_r, dz_r, du_r, ddt_r, dA_r,
 *     dD_r are exact; but the scan's dBm, dCm sum over channels, so rank r
 *     holds only its channels' part dBm_r, dCm_r; likewise dt_proj's input
 *     gradient ddtr_r = ddt_r·W_dt,r (dW_dt,r = ddt_r^T·dtr is exact).
 *   ddbl = sum_r (ddtr_r | dBm_r | dCm_r)   all-reduce #3: N·(R + 2S)
 *     (x_proj's output gradient; it must be whole before x_proj's backward:
 *     dW_x,r = ddbl^T·u_r and du_r += ddbl·W_x,r both need every channel's part)
 *   conv, SiLU backward local -> dxz_r; dW_in,r = dxz_r^T·ln exact
 *   dln  = sum_r dxz_r·W_in,r     all-reduce #4: N·H (Megatron's f operator)
 *   then the norm's backward on the whole dln (its gradient the same bits on
 *   every rank).
 * So a layer all-reduces N·(R+2S) and N·H forward and the same backward:
 * against an attention sublayer (one N·H each way), one more small
 * all-reduce each way, of (R + 2S) per token. Full checkpointing repeats #1
 * when it recomputes the block (the forward's out_proj is not recomputed).
 * At T > 1 the embedding and the LM head split the vocabulary
 * (models/vocab_parallel.h, padded to a multiple of T, tied or not).
 * Sequence parallelism (m->sp): the residual stream, the norm and its
 * statistics hold this rank's n = N/T token rows; the norm's output is
 * all-gathered (N, H) before in_proj (the causal conv and the scan then see
 * whole sequences) and kept gathered for in_proj's weight gradient;
 * out_proj's partial sums are reduce-scattered instead of all-reduced (#2);
 * in backward the block-output gradient is all-gathered before out_proj's
 * backward and in_proj's input gradient reduce-scattered (#4); the x_proj
 * all-reduces (#1, #3) stay; the norm's weight gradient (partial over rows)
 * is summed over TP. */

/* NULL when T splits d_inner, else why not. */
static const char *tp_misfit(const sl_model_config *c, int64_t T, char *why, size_t cap) {
  if (c->intermediate_size % T == 0) return NULL;
  snprintf(why, cap, "intermediate_size (d_inner = expand x hidden_size) %lld is not divisible by --tp %lld",
           (long long)c->intermediate_size, (long long)T);
  return why;
}

/* Forward of block l from x into a; writes the block output to out unless
 * out is NULL (recomputation for full checkpointing). Under sp x and out
 * hold this rank's n rows, a->ln all N (gathered through the skeleton's
 * xl), and out_proj's partial sums go through its dln (free in forward). */
static int block_forward(sl_model *m, int l, const float *flat, const float *x, void *layer, float *out) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  mamba_priv *p = sl_dec(m)->blk;
  float *dln = sl_dec(m)->dln;
  mlayer_acts *a = layer;
  mblockw w = block_views(p, flat);
  int64_t N = p->N, H = p->H, D = p->D, S = p->S, R = p->R;
  (void)l;
  int rc = sl_dec_norm_gathered(m, a->ln, a->rstd, x, w.norm, p->eps);
  if (rc) return rc;
  sl_lin_fwd(m, &p->lin, a->xz, a->ln, w.w_in, w.b_in, N);
  o->conv1d_fwd(k, a->xcp, a->xz, 2 * D, w.w_conv, w.b_conv, m->B, m->T, D, p->K, m->seg);
  o->silu_fwd(k, a->u, a->xcp, N * D);
  sl_lin_fwd(m, &p->lxdt, a->dtr, a->u, w.w_x, NULL, N);
  sl_lin_fwd(m, &p->lxbc, a->bc, a->u, w.w_x + R * D, NULL, N);
  if ((rc = sl_dec_tp_sum(m, a->dtr, N * (R + 2 * S)))) return rc; /* #1: dtr | bc, one buffer */
  sl_mamba_mixer_norm_fwd(m, a);
  const float *bc = mamba_bc_in(p, a);
  sl_lin_fwd(m, &p->ldt, a->dtv, mamba_dt_in(p, a), w.w_dt, w.b_dt, N);
  o->scan_fwd(k, a->y, a->ckpt, a->u, a->dtv, w.a_log, bc, bc + S, 2 * S, w.dp, m->seg, m->B, m->T, D, S, p->chunk);
  o->gate_fwd(k, a->g, a->y, a->xz + D, 2 * D, N, D);
  if (out) {
    sl_lin_fwd(m, &p->lout, p->sp ? dln : out, a->g, w.w_out, w.b_out, N);
    if ((rc = sl_dec_row_parallel_sum(m, dln, out))) return rc; /* #2 */
    o->add_inplace(k, out, x, p->n * H);
  }
  return SL_OK;
}

/* Falcon-Mamba's weightless RMSNorm of dt (over R), B and C (each over S),
 * read from x_proj's whole (TP-summed) outputs: the same on every TP rank. */
void sl_mamba_mixer_norm_fwd(sl_model *m, mlayer_acts *a) {
  mamba_priv *p = sl_dec(m)->blk;
  int64_t N = p->N, S = p->S, R = p->R;
  if (!p->mrms) return;
  m->ops->rmsnorm_fwd(m->k, a->dtn, a->nrstd, a->dtr, NULL, N, R, R, p->meps);
  m->ops->rmsnorm_fwd(m->k, a->bcn, a->nrstd + N, a->bc, NULL, N, S, 2 * S, p->meps);
  m->ops->rmsnorm_fwd(m->k, a->bcn + S, a->nrstd + 2 * N, a->bc + S, NULL, N, S, 2 * S, p->meps);
}

/* Its backward, after the TP sum of ddtr | dbc (the normed values' gradients,
 * whole): x_proj's output gradient, in p->dxp; without the norm ddtr | dbc itself. */
const float *sl_mamba_mixer_norm_bwd(sl_model *m, const mlayer_acts *a) {
  mamba_priv *p = sl_dec(m)->blk;
  int64_t N = p->N, S = p->S, R = p->R;
  if (!p->mrms) return p->ddtr;
  m->ops->zero(m->k, p->dxp, (size_t)(N * (R + 2 * S)) * sizeof(float));
  float *dbc = p->dxp + N * R;
  m->ops->rmsnorm_bwd(m->k, p->dxp, NULL, p->ddtr, a->dtr, NULL, a->nrstd, N, R, R);
  m->ops->rmsnorm_bwd(m->k, dbc, NULL, p->dbc, a->bc, NULL, a->nrstd + N, N, S, 2 * S);
  m->ops->rmsnorm_bwd(m->k, dbc + S, NULL, p->dbc + S, a->bc + S, NULL, a->nrstd + 2 * N, N, S, 2 * S);
  return p->dxp;
}

/* Selective checkpointing: the cheap recomputations before a block's backward
 * (same kernels, same inputs as the forward: bit-identical). */
static void block_recompute_cheap(sl_model *m, mamba_priv *p, const float *flat, mlayer_acts *a) {
  const sl_ops *o = m->ops;
  mblockw w = block_views(p, flat);
  int64_t N = p->N, D = p->D;
  o->silu_fwd(m->k, a->u, a->xcp, N * D);
  sl_lin_fwd(m, &p->ldt, a->dtv, mamba_dt_in(p, a), w.w_dt, w.b_dt, N);
  o->gate_fwd(m->k, a->g, a->y, a->xz + D, 2 * D, N, D);
}

static void zero(sl_model *m, float *x, int64_t n) { m->ops->zero(m->k, x, (size_t)n * sizeof(float)); }

/* Block l's backward (after mamba_recompute): dres holds the gradient of
 * the block output and receives that of its input. */
static int mamba_bwd(sl_model *m, int l, const float *flat, float *grads) {
  sl_decoder *d = sl_dec(m);
  mamba_priv *p = d->blk;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, H = p->H, D = p->D, S = p->S, R = p->R;
  int rc = SL_OK;
  mlayer_acts *a = mamba_layer(m, l);
  const float *x = d->stream[l];
  mblockw w = block_views(p, flat);
  mblockw g = block_views(p, grads);
  float *dln = d->dln;
  const float *dout = d->dres; /* the gradient of the block output, all-gathered under sp */
  /* out_proj: dres is the gradient of the block output (the residual passes
   * it through to x unchanged; rmsnorm_bwd adds the branch below); under sp
   * dln holds it all-gathered until in_proj's backward overwrites it */
  if (p->sp && (rc = sl_dec_sp_gather(m, d->dres, (float *)(dout = dln)))) return rc;
  float *dg = p->dgx;
  zero(m, dg, N * D);
  sl_lin_bwd(m, &p->lout, dg, (float *)g.w_out, (float *)g.b_out, dout, a->g, w.w_out, N);
  /* gate: dy, and dz into the z half of dxz */
  zero(m, p->dy, N * D);
  zero(m, p->dxz, N * 2 * D);
  o->gate_bwd(k, p->dy, p->dxz + D, 2 * D, dg, a->y, a->xz + D, N, D);
  /* scan */
  zero(m, p->du, N * D);
  zero(m, p->ddtv, N * D);
  zero(m, p->dbc, N * 2 * S);
  const float *bc = mamba_bc_in(p, a);
  o->scan_bwd(k, p->du, p->ddtv, (float *)g.a_log, p->dbc, p->dbc + S, (float *)g.dp, p->dy, a->u, a->dtv, w.a_log, bc,
              bc + S, 2 * S, w.dp, m->seg, a->ckpt, m->B, m->T, D, S, p->chunk);
  /* dt_proj */
  zero(m, p->ddtr, N * R);
  sl_lin_bwd(m, &p->ldt, p->ddtr, (float *)g.w_dt, (float *)g.b_dt, p->ddtv, mamba_dt_in(p, a), w.w_dt, N);
  if ((rc = sl_dec_tp_sum(m, p->ddtr, N * (R + 2 * S)))) return rc; /* #3: ddtr | dbc, one buffer */
  const float *dxp = sl_mamba_mixer_norm_bwd(m, a);                 /* x_proj's output gradient */
  /* x_proj, both row blocks add into du */
  sl_lin_bwd(m, &p->lxdt, p->du, (float *)g.w_x, NULL, dxp, a->u, w.w_x, N);
  sl_lin_bwd(m, &p->lxbc, p->du, (float *)g.w_x + R * D, NULL, dxp + N * R, a->u, w.w_x + R * D, N);
  /* SiLU after the conv; dg is dead after gate_bwd: reuse it as dxcp */
  float *dxcp = p->dgx;
  zero(m, dxcp, N * D);
  o->silu_bwd(k, dxcp, p->du, a->xcp, N * D);
  /* conv1d into the x half of dxz */
  o->conv1d_bwd(k, p->dxz, 2 * D, (float *)g.w_conv, (float *)g.b_conv, dxcp, a->xz, 2 * D, w.w_conv, m->B, m->T, D,
                p->K, m->seg);
  /* in_proj and the norm */
  zero(m, dln, N * H);
  sl_lin_bwd(m, &p->lin, dln, (float *)g.w_in, (float *)g.b_in, p->dxz, a->ln, w.w_in, N);
  float *dnorm = p->sp ? d->xl : dln;
  if ((rc = sl_dec_row_parallel_sum(m, dln, dnorm))) return rc; /* #4 */
  o->rmsnorm_bwd(k, d->dres, sl_dec_norm_dw(m, (float *)g.norm, p->gnorm), dnorm, x, w.norm, a->rstd, p->n, H, H);
  return sl_dec_norm_grad_sum(m, (float *)g.norm, p->gnorm);
}

/* What activation checkpointing recomputes before block l's backward (and
 * before each half of the split backward: models/mamba_split.c). */
static int mamba_recompute(sl_model *m, int l, const float *flat) {
  mamba_priv *p = sl_dec(m)->blk;
  mlayer_acts *a = mamba_layer(m, l);
  if (m->ac == SL_AC_FULL) return block_forward(m, l, flat, sl_dec(m)->stream[l], a, NULL);
  if (m->ac == SL_AC_SELECTIVE) block_recompute_cheap(m, p, flat, a);
  return SL_OK;
}

static int64_t mamba_flops(const sl_model *m, int64_t T) {
  const sl_decoder *dc = sl_dec(m);
  const mamba_priv *p = dc->blk;
  (void)T; /* linear in T: no attention term */
  /* 6 x (parameters of the matmuls: in/x/dt/out projections + LM head, the
   * embedding lookup excluded) + the depthwise conv (2K per channel, x3 for
   * training) + the scan (9 D S forward per token as in the Mamba paper's
   * count: discretisation, state update, C contraction; x3 for training).
   * Recomputation not counted. The whole model's (every TP rank's slices
   * together). */
  int64_t D = p->Dw;
  int64_t per_layer = 2 * D * p->H + (p->R + 2 * p->S) * D + p->R * D + D * p->H;
  int64_t Nmm = dc->L * per_layer + dc->V * p->H;
  return 6 * Nmm + dc->L * (6 * p->K * D + 27 * D * p->S);
}

/* ---- init from seed (HF MambaPreTrainedModel._init_weights) ---------------- */
static double unif01(uint64_t *s) { return (double)(sl_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); }

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

/* Tensors with SL_INIT_CUSTOM: A_log = log(1..S) per channel; dt_proj.bias =
 * softplus^-1(dt), dt log-uniform in [time_step_min, time_step_max] floored
 * at time_step_floor; dt_proj.weight uniform +-R^-0.5 * time_step_scale;
 * the other projections (in/x/out_proj, lm_head) and the conv keep PyTorch's
 * default nn.Linear / nn.Conv1d init, uniform +-1/sqrt(fan_in), which HF
 * does not override (fan_in: H, D, D, H; K for the depthwise conv and its
 * bias). Deterministic from the seed (already mixed with the tensor name).
 * dst is the whole tensor (t->full; the loader cuts a TP rank's slice). */
static int mamba_init_custom(sl_model *m, int u, int ti, float *dst, uint64_t seed) {
  const sl_model_config *c = &m->cfg;
  const sl_tensor_spec *t = &m->units[u].t[ti];
  uint64_t s = seed;
  int64_t numel = t->full[0] * t->full[1] * t->full[2];
  if (ends_with(t->name, "mixer.A_log")) {
    for (int64_t d = 0; d < t->full[0]; d++)
      for (int64_t j = 0; j < t->full[1]; j++) dst[d * t->full[1] + j] = logf((float)(j + 1));
    return SL_OK;
  }
  if (ends_with(t->name, "dt_proj.bias")) {
    double lo = log(c->time_step_min), hi = log(c->time_step_max);
    for (int64_t i = 0; i < numel; i++) {
      double dt = exp(unif01(&s) * (hi - lo) + lo);
      if (dt < c->time_step_floor) dt = c->time_step_floor;
      dst[i] = (float)(dt + log(-expm1(-dt))); /* inverse softplus */
    }
    return SL_OK;
  }
  double bound;
  if (ends_with(t->name, "dt_proj.weight")) bound = pow((double)c->time_step_rank, -0.5) * c->time_step_scale;
  else if (ends_with(t->name, "conv1d.weight") || ends_with(t->name, "conv1d.bias"))
    bound = 1.0 / sqrt((double)c->conv_kernel);
  else if (t->ndim == 2) bound = 1.0 / sqrt((double)t->full[1]); /* nn.Linear: fan_in */
  else return sl_fail(SL_EINPUT, "mamba: no custom init for tensor %s", t->name);
  for (int64_t i = 0; i < numel; i++) dst[i] = (float)((2.0 * unif01(&s) - 1.0) * bound);
  return SL_OK;
}

/* recomputed: what checkpointing recomputes (selective: u, dtv, g, the
 * cheap ones; full: all); else a layer's kept tensors (none: all;
 * selective: the big ones, u, dtv and g being shared's). */
static int mamba_alloc_layer(sl_model *m, int64_t l, void *layer, int recomputed, const void *shared) {
  (void)l; /* every layer alike */
  mamba_priv *p = sl_dec(m)->blk;
  mlayer_acts *a = layer;
  int64_t N = p->N, H = p->H, D = p->D, B = m->B;
  int big = !recomputed || m->ac == SL_AC_FULL, cheap = recomputed || m->ac == SL_AC_NONE;
  /* bf16-valued under bf16 compute (docs/bf16.md): every GEMM, norm, conv,
   * SiLU, scan and gate output; x_proj's (dtr) only at TP 1 (a TP sum after) */
  float *(*bf)(sl_model *, int64_t, sl_arena) = sl_model_buf_bf16;
  float *(*dtr_buf)(sl_model *, int64_t, sl_arena) = m->tp_size == 1 ? sl_model_buf_bf16 : sl_model_buf;
  if (big) {
    if (!(a->ln = bf(m, N * H, SL_ARENA_ACTS)) || !(a->rstd = sl_model_buf(m, p->n, SL_ARENA_ACTS)) ||
        !(a->xz = bf(m, N * 2 * D, SL_ARENA_ACTS)) || !(a->xcp = bf(m, N * D, SL_ARENA_ACTS)) ||
        !(a->dtr = dtr_buf(m, N * (p->R + 2 * p->S), SL_ARENA_ACTS)) || !(a->y = bf(m, N * D, SL_ARENA_ACTS)) ||
        !(a->ckpt = sl_model_buf(m, B * p->nch * D * p->S, SL_ARENA_ACTS)))
      return SL_ENOMEM;
    a->bc = a->dtr + N * p->R;
    if (p->mrms) {
      if (!(a->dtn = bf(m, N * (p->R + 2 * p->S), SL_ARENA_ACTS)) ||
          !(a->nrstd = sl_model_buf(m, 3 * N, SL_ARENA_ACTS)))
        return SL_ENOMEM;
      a->bcn = a->dtn + N * p->R;
    }
  }
  if (cheap) {
    if (!(a->u = bf(m, N * D, SL_ARENA_ACTS)) || !(a->dtv = bf(m, N * D, SL_ARENA_ACTS)) ||
        !(a->g = bf(m, N * D, SL_ARENA_ACTS)))
      return SL_ENOMEM;
  } else {
    const mlayer_acts *sh = shared;
    a->u = sh->u;
    a->dtv = sh->dtv;
    a->g = sh->g;
  }
  return SL_OK;
}

/* Decoder layer l's unit: its tensors and their offsets (p->off, the same in every layer). */
static int mamba_spec(sl_model *m, sl_unit_spec *b, int64_t l) {
  mamba_priv *p = sl_dec(m)->blk;
  int64_t T = m->tp_size, H = p->H, Dw = p->Dw, S = p->S, R = p->R, K = p->K;
  float std = sl_dec(m)->std;
  int rc;
  char nm[SL_TENSOR_NAME_MAX];
  block_offsets *o = &p->off;
  /* split: 0 whole, 1 / 2 column over d_inner (dim 0, in 1 / 2 stacked parts), -1 row (x_proj, out_proj) */
#define ADD(field, suffix, nd, d0, d1, d2, decay, init, split)                                                         \
  snprintf(nm, sizeof nm, "backbone.layers.%lld.%s", (long long)l, suffix);                                            \
  o->field = b->numel;                                                                                                 \
  rc = (split) > 0   ? sl_unit_add_stacked(m, b, nm, nd, d0, d1, d2, decay, init, std, (split))                        \
       : (split) < 0 ? sl_unit_add_split(m, b, nm, nd, d0, d1, decay, init, std, SL_SPLIT_ROW, T)                      \
                     : sl_unit_add(b, nm, nd, d0, d1, d2, decay, init, std);                                           \
  if (rc) return rc
  o->b_in = o->b_conv = o->b_out = -1;
  ADD(norm, "norm.weight", 1, H, 0, 0, 0, SL_INIT_ONES, 0);
  ADD(w_in, "mixer.in_proj.weight", 2, 2 * Dw, H, 0, 1, SL_INIT_CUSTOM, 2);
  if (p->use_bias) {
    ADD(b_in, "mixer.in_proj.bias", 1, 2 * Dw, 0, 0, 0, SL_INIT_ZEROS, 2);
  }
  ADD(w_conv, "mixer.conv1d.weight", 3, Dw, 1, K, 1, SL_INIT_CUSTOM, 1);
  if (p->conv_bias) {
    ADD(b_conv, "mixer.conv1d.bias", 1, Dw, 0, 0, 0, SL_INIT_CUSTOM, 1);
  }
  ADD(w_x, "mixer.x_proj.weight", 2, R + 2 * S, Dw, 0, 1, SL_INIT_CUSTOM, -1);
  ADD(w_dt, "mixer.dt_proj.weight", 2, Dw, R, 0, 1, SL_INIT_CUSTOM, 1);
  ADD(b_dt, "mixer.dt_proj.bias", 1, Dw, 0, 0, 0, SL_INIT_CUSTOM, 1);
  ADD(a_log, "mixer.A_log", 2, Dw, S, 0, 0, SL_INIT_CUSTOM, 1); /* 2-dim, no decay */
  ADD(dp, "mixer.D", 1, Dw, 0, 0, 0, SL_INIT_ONES, 1);
  ADD(w_out, "mixer.out_proj.weight", 2, H, Dw, 0, 1, SL_INIT_CUSTOM, -1);
  if (p->use_bias) {
    ADD(b_out, "mixer.out_proj.bias", 1, H, 0, 0, 0, SL_INIT_ZEROS, 0);
  }
#undef ADD
  return SL_OK;
}

/* The block's backward scratch, after the skeleton's dres, dln and xl. */
static int mamba_alloc_scratch(sl_model *m) {
  mamba_priv *p = sl_dec(m)->blk;
  int64_t N = p->N, D = p->D, H = p->H, S = p->S, R = p->R;
  if (!(p->dgx = sl_model_buf(m, N * D, SL_ARENA_WORKSPACE)) || !(p->dy = sl_model_buf(m, N * D, SL_ARENA_WORKSPACE)) ||
      !(p->du = sl_model_buf(m, N * D, SL_ARENA_WORKSPACE)) ||
      !(p->ddtv = sl_model_buf(m, N * D, SL_ARENA_WORKSPACE)) ||
      !(p->dxz = sl_model_buf(m, N * 2 * D, SL_ARENA_WORKSPACE)) ||
      !(p->ddtr = sl_model_buf(m, N * (R + 2 * S), SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  p->dbc = p->ddtr + N * R;
  if (p->sp && !(p->gnorm = sl_model_buf(m, H, SL_ARENA_WORKSPACE))) return SL_ENOMEM;
  if (p->mrms && !(p->dxp = sl_model_buf(m, N * (R + 2 * S), SL_ARENA_WORKSPACE))) return SL_ENOMEM;
  return SL_OK;
}

static int mamba_init(sl_model *m, sl_decoder *d) {
  const sl_model_config *c = &m->cfg;
  mamba_priv *p = calloc(1, sizeof *p);
  if (!p) return sl_fail(SL_ENOMEM, "out of memory");
  d->blk = p;
  int64_t T = m->tp_size, tmax = c->intermediate_size < 4096 ? c->intermediate_size : 4096;
  int rc = c->intermediate_size <= 0 ? SL_OK : sl_dec_tp_check(m, tp_misfit, tmax);
  if (rc) return rc;
  p->N = d->N;
  p->H = c->hidden_size;
  p->Dw = c->intermediate_size;
  p->D = c->intermediate_size / T;
  p->S = c->state_size;
  p->R = c->time_step_rank;
  p->K = c->conv_kernel;
  p->eps = (float)c->layer_norm_epsilon;
  p->use_bias = c->use_bias;
  p->conv_bias = c->use_conv_bias;
  p->mrms = c->mixer_rms;
  p->meps = (float)c->mixer_rms_eps;
  p->chunk = MAMBA_SCAN_CHUNK;
  p->nch = m->T > 0 ? (m->T + p->chunk - 1) / p->chunk : 0;
  p->sp = d->sp;
  p->n = d->n;
  if (p->H <= 0 || p->Dw <= 0 || p->S <= 0 || p->R <= 0 || p->K <= 0 || d->V <= 0 || d->L <= 0)
    return sl_fail(SL_EINPUT,
                   "mamba config: hidden_size %lld, intermediate_size %lld, state_size "
                   "%lld, time_step_rank %lld, conv_kernel %lld, vocab_size %lld, "
                   "num_hidden_layers %lld must all be positive",
                   (long long)p->H, (long long)p->Dw, (long long)p->S, (long long)p->R, (long long)p->K,
                   (long long)d->V, (long long)d->L);
  p->lin = sl_lin_one("in_proj", "mixer.in_proj", p->H, 2 * p->D, SL_LIN_COL);
  p->lxdt = sl_lin_one("x_proj.dt", "mixer.x_proj", p->D, p->R, SL_LIN_ROW);     /* x_proj's rows 0..R-1 */
  p->lxbc = sl_lin_one("x_proj.bc", "mixer.x_proj", p->D, 2 * p->S, SL_LIN_ROW); /* and its rows R.. (B | C) */
  p->ldt = sl_lin_one("dt_proj", "mixer.dt_proj", p->R, p->D, SL_LIN_COL);
  p->lout = sl_lin_one("out_proj", "mixer.out_proj", p->D, p->H, SL_LIN_ROW);
  d->eps = p->eps;
  d->std = c->initializer_range > 0 ? (float)c->initializer_range : 0.1f;
  d->embed_name = c->ssm_original_format ? "backbone.embedding.weight" : "backbone.embeddings.weight";
  d->norm_name = "backbone.norm_f.weight";
  d->head_init = SL_INIT_CUSTOM;
  return SL_OK;
}

/* Document masking: the conv and the scan restart at each document start
 * (kernels.h seg), so a packed row trains as its documents run separately.
 * The scan's parameter gradients come out of the input half
 * (models/mamba_split.c), so the split is not for --no-sync-accum. */
static void mamba_caps(const sl_model_config *c, sl_model_caps *out) {
  *out = (sl_model_caps){.attention = 0,
                         .doc_mask = 1, /* the conv and the scan restart at each document (m->seg) */
                         .recurrent = 1,
                         .zb_split = 1,
                         .zb_split_accum = 0,
                         .bf16 = 1,
                         .bf16_acts = 1,
                         .tp_width = c->intermediate_size > 0 ? c->intermediate_size : c->expand * c->hidden_size};
}

const sl_block_kind sl_mamba_block = {
    .unit_kind = "mamba_block",
    .layer_size = sizeof(mlayer_acts),
    .caps = mamba_caps,
    .init = mamba_init,
    .spec = mamba_spec,
    .alloc_layer = mamba_alloc_layer,
    .alloc_scratch = mamba_alloc_scratch,
    .fwd = block_forward,
    .recompute = mamba_recompute,
    .bwd = mamba_bwd,
    .stash_numel = sl_mamba_stash_numel,
    .bwd_input = sl_mamba_bwd_input,
    .bwd_weight = sl_mamba_bwd_weight,
    .flops_per_token = mamba_flops,
    .init_custom = mamba_init_custom,
};
