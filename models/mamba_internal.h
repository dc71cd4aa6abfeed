/* models/mamba_internal.h — the private state of the Mamba units
 * (models/mamba.c), shared with the split backward of zero-bubble pipeline
 * schedules (models/mamba_split.c). Not part of the model interface. */
#ifndef SL_MAMBA_INTERNAL_H
#define SL_MAMBA_INTERNAL_H

#include <stdint.h>

#include "models/model.h"
#include "models/vocab_parallel.h"

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
} mlayer_acts;

/* offsets of a block's tensors in its flat buffer (-1: absent) */
typedef struct {
  int64_t norm, w_in, b_in, w_conv, b_conv, w_x, w_dt, b_dt, a_log, dp, w_out, b_out;
} block_offsets;

typedef struct {
  int64_t N, H, D, S, R, K, V, L, chunk, nch; /* D: this TP rank's d_inner channels */
  int64_t Dw;                                 /* d_inner of the whole model (= D at T = 1) */
  float eps;
  int tied, use_bias, conv_bias;
  block_offsets off;
  /* the selected activation set's views (sets[m->act]) */
  float **stream;  /* (L+1) x (N, H): input of block l; stream[L] feeds the head */
  mlayer_acts *la; /* (L) */
  sl_lm_head head; /* final norm + LM head + cross-entropy */
  /* T > 1: vocabulary-parallel embedding and loss-parallel head (models/vocab_parallel.h) */
  int vp, sp; /* vp: T > 1; sp: sequence parallelism (rows n = N/T of the stream per rank) */
  int64_t n;  /* token rows of the residual stream and the norm on this rank: N, or N/T under sp */
  sl_vocab_split vs;
  sl_lm_head_vp *hvp; /* (nsets) the loss-parallel head of each activation set (vp) */
  sl_lm_head_vp *hv;  /* the selected set's */
  float *xl;          /* (n, H) under sp: the norm's local output before its all-gather, the
                         reduce-scattered in_proj input gradient in backward */
  sl_act_set *sets;   /* (nsets) one per micro-batch in flight (models/model.h) */
  int nsets;
  mlayer_acts shared; /* recomputed in backward, shared by every layer and set (selective: u, dtv, g; full: all) */
  /* backward scratch (workspace), reused by every layer */
  float *dres;  /* (n, H) gradient of the residual stream (N rows allocated) */
  float *dln;   /* (N, H); under sp also the out_proj partial sums (forward) and the
                        all-gathered block-output gradient (backward) */
  float *dgx;   /* (N, D) dg, then (after gate_bwd) dxcp */
  float *dy;    /* (N, D) */
  float *du;    /* (N, D) */
  float *ddtv;  /* (N, D) */
  float *dxz;   /* (N, 2D) */
  float *ddtr;  /* (N, R) */
  float *dbc;   /* (N, 2S); = ddtr + N*R (one buffer: one TP all-reduce) */
  float *gnorm; /* (H) under sp: the micro-batch's part of the norm's weight gradient */
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

/* Activation checkpointing's recomputation before block u's backward
 * (models/mamba.c). */
int sl_mamba_recompute(sl_model *m, int u, const float *flat);
/* mamba_bwd's tensor-parallel collectives (models/mamba.c): a sum over the
 * TP group in place; sequence parallelism's all-gather of the (n, H) rows
 * into (N, H); a row-parallel GEMM's partial sums into this rank's rows
 * (reduce-scatter under sp, else an all-reduce in place); the norm's weight
 * gradient summed over TP under sp. */
int sl_mamba_tp_sum(sl_model *m, float *buf, int64_t n);
int sl_mamba_sp_gather(sl_model *m, const float *rows, float *all);
int sl_mamba_row_parallel_sum(sl_model *m, float *part, float *rows);
float *sl_mamba_norm_dw(sl_model *m, float *g);
int sl_mamba_norm_grad_sum(sl_model *m, float *g);
/* Split backward (models/mamba_split.c): the vt entries of models/model.h. */
int64_t sl_mamba_stash_numel(const sl_model *m, int u);
int sl_mamba_bwd_input(sl_model *m, int u, const float *flat, float *stash, float *tied);
int sl_mamba_bwd_weight(sl_model *m, int u, const float *flat, float *grads, const float *stash);

#endif /* SL_MAMBA_INTERNAL_H */
