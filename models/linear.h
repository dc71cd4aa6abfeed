/* models/linear.h — the one helper every projection of a model (a GEMM with
 * its weight and optional bias) goes through: y = x W^T (+ b) forward, and
 * dx += dy W, dW += dy^T x, db += colsum(dy) backward.
 *
 * A projection is described once, when its block kind is set up (sl_lin):
 * this rank's shapes, how tensor parallelism splits it, and the Hugging Face
 * modules whose weights its output rows stack (q_proj | k_proj | v_proj,
 * gate_proj | up_proj, one module otherwise). Every call site then passes
 * only the tensors of the call. What a projection gains later is added here
 * once instead of at each call site: adapters per HF module (LoRA, issue
 * 39: the modules name what a target list matches and which output rows an
 * adapter's B writes), the device's GEMM choices (issue 37: bf16 outputs,
 * bias epilogues, beta-0 input gradients), per-projection counting.
 *
 * Tensor parallelism, the two rules a call site used to spell out:
 *  - row-parallel (SL_LIN_ROW): the input columns are this rank's slice, the
 *    product a partial sum the caller reduces over the TP group; a bias is
 *    whole on every rank and added by TP rank 0 only (so the sum holds it
 *    once); its gradient, from the whole output gradient, the same on every
 *    rank;
 *  - replicated (SL_LIN_REPLICATED): the weight is whole on every rank and
 *    so is the input; the caller sums the input gradient over the TP group,
 *    so TP rank 0 alone adds the projection's part (an MoE router).
 * Column-parallel projections (SL_LIN_COL, the default) need no rule: each
 * rank's output columns are its own. */
#ifndef SL_MODELS_LINEAR_H
#define SL_MODELS_LINEAR_H

#include <stdint.h>

#include "models/model.h"

#define SL_LIN_MODULES 3 /* HF modules stacked in one projection's output rows */

typedef enum { SL_LIN_COL = 0, SL_LIN_ROW, SL_LIN_REPLICATED } sl_lin_tp;

typedef struct {
  const char *name; /* the projection, for messages and counts: "qkv", "o_proj", "experts.down", ... */
  int64_t in, out;  /* this rank's input columns and output rows */
  sl_lin_tp tp;
  int nmod;                            /* HF modules stacked in the output rows, in order (0: none named) */
  const char *module[SL_LIN_MODULES];  /* e.g. "self_attn.q_proj" */
  int64_t module_rows[SL_LIN_MODULES]; /* this rank's output rows of each */
} sl_lin;

/* A projection of one HF module (rows = out), or of none yet (module NULL: the caller appends its stacked
 * modules with sl_lin_module). */
sl_lin sl_lin_one(const char *name, const char *module, int64_t in, int64_t out, sl_lin_tp tp);
/* Appends a module of `rows` output rows to l (the modules' rows sum to l->out). */
void sl_lin_module(sl_lin *l, const char *module, int64_t rows);

/* out (N, l->out) = x (N, l->in) W^T (+ b): w (out, in), b (out) or NULL. */
void sl_lin_fwd(sl_model *m, const sl_lin *l, float *out, const float *x, const float *w, const float *b, int64_t N);
/* dx (N, in) += dy W; dw (out, in) += dy^T x; db (out) += colsum(dy); any of dx, dw, db NULL: not computed
 * (the split backward's halves: dx alone, then dw and db alone, the same bits as one call). */
void sl_lin_bwd(sl_model *m, const sl_lin *l, float *dx, float *dw, float *db, const float *dy, const float *x,
                const float *w, int64_t N);

#endif /* SL_MODELS_LINEAR_H */
