/* models/mamba_split.c — the backward of the Mamba units split into their
 * input-gradient half (B) and weight-gradient half (W) for zero-bubble
 * pipeline schedules (--pp-schedule zb1p; models/model.h: stash_numel,
 * bwd_input, bwd_weight; the head's halves are models/lmhead_split.c).
 *
 * B runs mamba_bwd's kernels with every weight-gradient output NULL and
 * keeps, per micro-batch and unit, the output gradients of the block's
 * linears and of its conv and norm; W runs the weight GEMMs (linear_bwd
 * with the input gradient NULL, biases included), conv1d_bwd's weight part
 * and rmsnorm_bwd's weight part on them: the same kernel calls on the same
 * inputs as mamba_bwd's, the same bits. The scan's parameter gradients
 * (A_log, D) come out of scan_bwd together with its input gradients, so B
 * computes them into a zeroed part of the stash and W adds that to the
 * gradient buffer: 0 + x = x when the runtime zeroed the buffer for the
 * micro-batch (the default per-micro-batch reduction); under
 * --no-sync-accum the buffer holds the earlier micro-batches' sum and the
 * additions would associate differently (the executor refuses that).
 *
 * Stash of a block, floats, in this order (N tokens, H hidden, D d_inner):
 *   dout (N, H) block output gradient (out_proj)   dxz (N, 2D) in_proj's
 *   ddtv (N, D) dt_proj's                          ddtr (N, R), dbc (N, 2S) x_proj's
 *   (Falcon-Mamba: x_proj's output gradient, after the dt/B/C norms' backward, which B runs)
 *   dxcp (N, D) conv1d's                           dln (N, H) the norm output's
 *   dalog (D, S), ddp (D) the scan's parameter gradients
 * The embedding's and the head's halves are the skeleton's
 * (models/decoder.c). Activation checkpointing: B and W each recompute what
 * the shared buffers lost (the skeleton calls the kind's recompute first).
 * Tensor parallelism (models/mamba.c): B runs the input-gradient
 * collectives (the block output's gradient all-gathered under sequence
 * parallelism, into dout: W's out_proj GEMM reads the gathered (N, H); the
 * x_proj output gradient's sum #3, kept summed in ddtr | dbc; in_proj's
 * input-gradient sum #4, dln holding this rank's summed rows), W the norm's
 * weight-gradient sum under sp.
 */
#include <stdint.h>

#include "base/base.h"
#include "models/mamba_internal.h"

typedef struct {
  float *dout, *dxz, *ddtv, *ddtr, *dbc, *dxcp, *dln, *dalog, *ddp;
} mstash;

static mstash stash_views(const mamba_priv *p, const float *s) {
  mstash b;
  int64_t N = p->N, H = p->H, D = p->D;
  b.dout = (float *)s;
  b.dxz = b.dout + N * H;
  b.ddtv = b.dxz + N * 2 * D;
  b.ddtr = b.ddtv + N * D;
  b.dbc = b.ddtr + N * p->R;
  b.dxcp = b.dbc + N * 2 * p->S;
  b.dln = b.dxcp + N * D;
  b.dalog = b.dln + N * H;
  b.ddp = b.dalog + D * p->S;
  return b;
}

int64_t sl_mamba_stash_numel(const sl_model *m) {
  const mamba_priv *p = sl_dec(m)->blk;
  return p->N * (2 * p->H + 4 * p->D + p->R + 2 * p->S) + p->D * p->S + p->D;
}

static void zero(sl_model *m, float *x, int64_t n) { m->ops->zero(m->k, x, (size_t)n * sizeof(float)); }
static void copy(sl_model *m, float *dst, const float *src, int64_t n) {
  m->ops->copy(m->k, dst, src, (size_t)n * sizeof(float));
}

/* Block l's halves, after the skeleton's recompute (models/decoder.c). */
int sl_mamba_bwd_input(sl_model *m, int l, const float *flat, float *stash) {
  sl_decoder *d = sl_dec(m);
  mamba_priv *p = d->blk;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, H = p->H, D = p->D, S = p->S, R = p->R;
  mlayer_acts *a = mamba_layer(m, l);
  mblockw w = block_views(p, flat);
  mstash s = stash_views(p, stash);
  float *dln = d->dln;
  int rc = SL_OK;
  if (p->sp) rc = sl_dec_sp_gather(m, d->dres, s.dout); /* the block output's gradient, all-gathered */
  else copy(m, s.dout, d->dres, N * H);
  if (rc) return rc;
  float *dg = p->dgx;
  zero(m, dg, N * D);
  sl_lin_bwd(m, &p->lout, dg, NULL, NULL, s.dout, a->g, w.w_out, N);
  zero(m, p->dy, N * D);
  zero(m, p->dxz, N * 2 * D);
  o->gate_bwd(k, p->dy, p->dxz + D, 2 * D, dg, a->y, a->xz + D, N, D);
  zero(m, p->du, N * D);
  zero(m, p->ddtv, N * D);
  zero(m, p->dbc, N * 2 * S);
  zero(m, s.dalog, D * S);
  zero(m, s.ddp, D);
  const float *bc = mamba_bc_in(p, a);
  o->scan_bwd(k, p->du, p->ddtv, s.dalog, p->dbc, p->dbc + S, s.ddp, p->dy, a->u, a->dtv, w.a_log, bc, bc + S, 2 * S,
              w.dp, m->seg, a->ckpt, m->B, m->T, D, S, p->chunk);
  copy(m, s.ddtv, p->ddtv, N * D);
  zero(m, p->ddtr, N * R);
  sl_lin_bwd(m, &p->ldt, p->ddtr, NULL, NULL, p->ddtv, mamba_dt_in(p, a), w.w_dt, N);
  if ((rc = sl_dec_tp_sum(m, p->ddtr, N * (R + 2 * S)))) return rc; /* ddtr | dbc, one buffer */
  const float *dxp = sl_mamba_mixer_norm_bwd(m, a); /* x_proj's output gradient (Falcon-Mamba: through the norms) */
  copy(m, s.ddtr, dxp, N * R);
  copy(m, s.dbc, dxp + N * R, N * 2 * S);
  sl_lin_bwd(m, &p->lxdt, p->du, NULL, NULL, dxp, a->u, w.w_x, N);
  sl_lin_bwd(m, &p->lxbc, p->du, NULL, NULL, dxp + N * R, a->u, w.w_x + R * D, N);
  float *dxcp = p->dgx;
  zero(m, dxcp, N * D);
  o->silu_bwd(k, dxcp, p->du, a->xcp, N * D);
  copy(m, s.dxcp, dxcp, N * D);
  o->conv1d_bwd(k, p->dxz, 2 * D, NULL, NULL, dxcp, a->xz, 2 * D, w.w_conv, m->B, m->T, D, p->K, m->seg);
  copy(m, s.dxz, p->dxz, N * 2 * D);
  zero(m, dln, N * H);
  sl_lin_bwd(m, &p->lin, dln, NULL, NULL, p->dxz, a->ln, w.w_in, N);
  float *dnorm = p->sp ? d->xl : dln; /* summed over TP: this rank's rows */
  if ((rc = sl_dec_row_parallel_sum(m, dln, dnorm))) return rc;
  copy(m, s.dln, dnorm, p->n * H);
  o->rmsnorm_bwd(k, d->dres, NULL, dnorm, d->stream[l], w.norm, a->rstd, p->n, H, H);
  return SL_OK;
}

int sl_mamba_bwd_weight(sl_model *m, int l, const float *flat, float *grads, const float *stash) {
  sl_decoder *d = sl_dec(m);
  mamba_priv *p = d->blk;
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, H = p->H, D = p->D, S = p->S, R = p->R;
  mlayer_acts *a = mamba_layer(m, l);
  mblockw w = block_views(p, flat), g = block_views(p, grads);
  mstash s = stash_views(p, stash);
  sl_lin_bwd(m, &p->lout, NULL, (float *)g.w_out, (float *)g.b_out, s.dout, a->g, w.w_out, N);
  o->add_inplace(k, (float *)g.a_log, s.dalog, D * S);
  o->add_inplace(k, (float *)g.dp, s.ddp, D);
  sl_lin_bwd(m, &p->ldt, NULL, (float *)g.w_dt, (float *)g.b_dt, s.ddtv, mamba_dt_in(p, a), w.w_dt, N);
  sl_lin_bwd(m, &p->lxdt, NULL, (float *)g.w_x, NULL, s.ddtr, a->u, w.w_x, N);
  sl_lin_bwd(m, &p->lxbc, NULL, (float *)g.w_x + R * D, NULL, s.dbc, a->u, w.w_x + R * D, N);
  o->conv1d_bwd(k, NULL, 2 * D, (float *)g.w_conv, (float *)g.b_conv, s.dxcp, a->xz, 2 * D, w.w_conv, m->B, m->T, D,
                p->K, m->seg);
  sl_lin_bwd(m, &p->lin, NULL, (float *)g.w_in, (float *)g.b_in, s.dxz, a->ln, w.w_in, N);
  o->rmsnorm_bwd(k, NULL, sl_dec_norm_dw(m, (float *)g.norm, p->gnorm), s.dln, d->stream[l], w.norm, a->rstd, p->n, H,
                 H);
  return sl_dec_norm_grad_sum(m, (float *)g.norm, p->gnorm);
}
