/* models/mamba_internal.h — the private state of the Mamba block kind
 * (models/mamba.c), shared with the split backward of zero-bubble pipeline
 * schedules (models/mamba_split.c). Not part of the model interface. */
#ifndef SL_MAMBA_INTERNAL_H
#define SL_MAMBA_INTERNAL_H

#include <stdint.h>

#include "models/decoder.h"
#include "models/linear.h"

#define MAMBA_SCAN_CHUNK 64 /* scan state checkpoint interval (docs/mamba.md) */

typedef struct {
  float *ln;   /* (N, H) RMSNorm output */
  float *rstd; /* (N) */
  float *xz;   /* (N, 2D) in_proj output: x | z */
  float *xcp;  /* (N, D) conv1d output before SiLU */
  float *u;    /* (N, D) SiLU(xcp): scan input */
  float *dtr;  /* (N, R) x_proj rows 0..R-1 */
  float *bc;   /* (N, 2S) x_proj rows R..R+2S-1: Bm | Cm; = dtr + N*R (one buffer: one TP all-reduce) */
  float *dtv;  /* (N, D) dt_proj output (softplus is inside the scan) */
  float *y;    /* (N, D) scan output */
  float *g;    /* (N, D) y * SiLU(z) */
  float *ckpt; /* (B, ceil(T/chunk), D, S) scan states at chunk starts */
  /* Falcon-Mamba (p->mrms) only, else NULL: */
  float *dtn;   /* (N, R) weightless RMSNorm of dtr: dt_proj's input */
  float *bcn;   /* (N, 2S) those of Bm and Cm (each over S): the scan's; = dtn + N*R */
  float *nrstd; /* (3N) their rstd: dt | B | C */
} mlayer_acts;

/* offsets of a block's tensors in its flat buffer (-1: absent) */
typedef struct {
  int64_t norm, w_in, b_in, w_conv, b_conv, w_x, w_dt, b_dt, a_log, dp, w_out, b_out;
} block_offsets;

/* The block kind's state (sl_dec(m)->blk); the skeleton's (the residual
 * stream, activation sets, head, dres, dln, xl) is models/decoder.h's. */
typedef struct {
  int64_t N, H, D, S, R, K, chunk, nch; /* D: this TP rank's d_inner channels */
  int64_t Dw;                           /* d_inner of the whole model (= D at T = 1) */
  float eps;
  int use_bias, conv_bias;
  int mrms;   /* Falcon-Mamba: weightless RMSNorm of dt, B and C after x_proj */
  float meps; /* its eps (mixer_rms_eps) */
  block_offsets off;
  int sp;    /* sequence parallelism (rows n = N/T of the stream per rank) */
  int64_t n; /* token rows of the residual stream and the norm on this rank: N, or N/T under sp */
  /* backward scratch (workspace), reused by every layer, besides the skeleton's dres (the
   * residual gradient) and dln ((N, H); under sp also the out_proj partial sums (forward) and
   * the all-gathered block-output gradient (backward)) */
  float *dgx;   /* (N, D) dg, then (after gate_bwd) dxcp */
  float *dy;    /* (N, D) */
  float *du;    /* (N, D) */
  float *ddtv;  /* (N, D) */
  float *dxz;   /* (N, 2D) */
  float *ddtr;  /* (N, R) */
  float *dbc;   /* (N, 2S); = ddtr + N*R (one buffer: one TP all-reduce) */
  float *gnorm; /* (H) under sp: the micro-batch's part of the norm's weight gradient */
  float *dxp;   /* (N, R + 2S) under mrms: x_proj's output gradient (ddtr | dbc are the normed values') */
  /* the projections (models/linear.h): in_proj (x | z), x_proj's dt rows and its B | C rows (two GEMMs),
   * dt_proj, out_proj */
  sl_lin lin, lxdt, lxbc, ldt, lout;
} mamba_priv;

/* parameter views of a block's flat buffer (NULL for absent biases) */
typedef struct {
  const float *norm, *w_in, *b_in, *w_conv, *b_conv, *w_x, *w_dt, *b_dt, *a_log, *dp, *w_out, *b_out;
} mblockw;

static inline mblockw block_views(const mamba_priv *p, const float *flat) {
  const block_offsets *o = &p->off;
  mblockw w;
#define V_(f) w.f = o->f >= 0 ? flat + o->f : NULL
  V_(norm);
  V_(w_in);
  V_(b_in);
  V_(w_conv);
  V_(b_conv);
  V_(w_x);
  V_(w_dt);
  V_(b_dt);
  V_(a_log);
  V_(dp);
  V_(w_out);
  V_(b_out);
#undef V_
  return w;
}

/* dt_proj's input and the scan's B | C: the x_proj outputs, or under mrms their norms. */
static inline const float *mamba_dt_in(const mamba_priv *p, const mlayer_acts *a) { return p->mrms ? a->dtn : a->dtr; }
static inline const float *mamba_bc_in(const mamba_priv *p, const mlayer_acts *a) { return p->mrms ? a->bcn : a->bc; }
void sl_mamba_mixer_norm_fwd(sl_model *m, mlayer_acts *a);
const float *sl_mamba_mixer_norm_bwd(sl_model *m, const mlayer_acts *a);

/* The block's kept activations of layer l in the selected set. */
static inline mlayer_acts *mamba_layer(const sl_model *m, int l) { return sl_dec_layer(m, l); }
/* The split backward's block halves (models/mamba_split.c): sl_block_kind's. */
int64_t sl_mamba_stash_numel(const sl_model *m);
int sl_mamba_bwd_input(sl_model *m, int l, const float *flat, float *stash);
int sl_mamba_bwd_weight(sl_model *m, int l, const float *flat, float *grads, const float *stash);

#endif /* SL_MAMBA_INTERNAL_H */
