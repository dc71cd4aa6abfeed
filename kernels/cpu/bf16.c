/* kernels/cpu/bf16.c — what the CPU gives the bf16-compute layer
 * (kernels/bf16.h, docs/bf16.md): in-place rounding of strided rows, and
 * its GEMMs under bf16 compute, which run the fp32 GEMM on bf16-rounded
 * copies of the operands in the context's stage buffers (the layer rounds
 * their outputs). The LM head rounds its logits / dlogits tiles inside
 * lmhead_ce.c (ctx->bf.on). Correct, not fast: the copies and extra passes
 * cost memory traffic the GPU does not pay. */
#include <omp.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

static float rnd(float v) { return sl_bf16_to_f32_scalar(sl_f32_to_bf16_scalar(v)); }

void sl_cpu_round_rows(sl_kctx *ctx, float *x, int64_t rows, int64_t cols, int64_t ld) {
  if (!x || rows <= 0 || cols <= 0) return;
  if (ld == cols) {
    sl_cpu_round_bf16(ctx, x, rows * cols);
    return;
  }
#pragma omp parallel for num_threads(rows *cols >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) x[r * ld + c] = rnd(x[r * ld + c]);
}

/* A bf16-rounded copy of x[0..n) in stage buffer `slot` (valid until the
 * slot is reused); NULL (message set) when it cannot be allocated. */
static const float *stage(sl_kctx *ctx, int slot, const float *x, int64_t n, const char *op) {
  if (n <= 0) return x;
  if ((size_t)n > ctx->stage_cap[slot]) {
    float *p = realloc(ctx->stage[slot], (size_t)n * sizeof(float));
    if (!p) {
      sl_fail(SL_ENOMEM, "kernels/cpu %s: cannot allocate a bf16 operand copy of %lld floats", op, (long long)n);
      sl_log(SL_LOG_ERROR, "%s", sl_errmsg());
      return NULL;
    }
    ctx->stage[slot] = p;
    ctx->stage_cap[slot] = (size_t)n;
  }
  float *s = ctx->stage[slot];
#pragma omp parallel for num_threads(n >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
  for (int64_t i = 0; i < n; i++) s[i] = rnd(x[i]);
  return s;
}

void sl_cpu_bf16_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                            int64_t IC, int64_t OC) {
  const float *xi = stage(ctx, 0, inp, N * IC, "linear_fwd"), *wi = stage(ctx, 1, w, OC * IC, "linear_fwd");
  if (!xi || !wi) {
    sl_cpu_poison(out, N * OC);
    return;
  }
  sl_cpu_linear_fwd(ctx, out, xi, wi, b, N, IC, OC);
}

void sl_cpu_bf16_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, int64_t N, int64_t IC, int64_t OC) {
  const float *go = stage(ctx, 0, dout, N * OC, "linear_bwd");
  const float *xi = dw ? stage(ctx, 1, inp, N * IC, "linear_bwd") : inp;
  const float *wi = dinp ? stage(ctx, 2, w, OC * IC, "linear_bwd") : w;
  if (!go || !xi || !wi) {
    sl_cpu_poison(dinp, N * IC);
    sl_cpu_poison(dw, OC * IC);
    sl_cpu_poison(db, OC);
    return;
  }
  sl_cpu_linear_bwd(ctx, dinp, dw, db, go, xi, wi, N, IC, OC);
}

void sl_cpu_bf16_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                               const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap) {
  const float *xi = stage(ctx, 0, x, N * C, "lmhead_ce_fwd"), *wi = stage(ctx, 1, w, V * C, "lmhead_ce_fwd");
  if (!xi || !wi) {
    sl_cpu_poison(losses, N);
    sl_cpu_poison(lse, N);
    return;
  }
  sl_cpu_lmhead_ce_fwd(ctx, losses, lse, xi, wi, targets, N, C, V, softcap); /* rounds the logits */
}

void sl_cpu_bf16_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w,
                               const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V,
                               float softcap) {
  const float *xi = stage(ctx, 0, x, N * C, "lmhead_ce_bwd"), *wi = stage(ctx, 1, w, V * C, "lmhead_ce_bwd");
  if (!xi || !wi) {
    sl_cpu_poison(dx, N * C);
    sl_cpu_poison(dw, V * C);
    return;
  }
  sl_cpu_lmhead_ce_bwd(ctx, dx, dw, xi, wi, targets, lse, scale, N, C, V, softcap); /* rounds logits, dlogits */
}
