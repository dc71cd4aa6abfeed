/* kernels/cpu/linear.c — the CPU linear layer: out = inp @ w^T + b and its
 * backward. Each product is one sgemm over the whole (N, .) block with the
 * transposes folded into the call (no copies), split across threads by
 * sl_cpu_sgemm (ctx.c). */
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void sl_cpu_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                       int64_t IC, int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  float beta = 0.0f;
  if (b) {
#pragma omp parallel for num_threads(N *OC >= SL_CPU_PAR_MIN ? ctx->threads : 1)
    for (int64_t i = 0; i < N; i++) memcpy(out + i * OC, b, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  /* out (N, OC) = inp (N, IC) . w (OC, IC)^T */
  sl_cpu_sgemm(ctx, 0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, beta, out, OC);
}

void sl_cpu_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int64_t N, int64_t IC, int64_t OC) {
  if (N <= 0 || OC <= 0 || IC <= 0) return;
  /* dinp (N, IC) += dout (N, OC) . w (OC, IC) */
  if (dinp) sl_cpu_sgemm(ctx, 0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC);
  /* dw (OC, IC) += dout (N, OC)^T . inp (N, IC) */
  if (dw) sl_cpu_sgemm(ctx, 1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
  /* db (OC) += colsum(dout): threads split the columns (deterministic) */
  if (db) {
    int nt = N * OC >= SL_CPU_PAR_MIN ? ctx->threads : 1;
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), n = omp_get_num_threads();
      int64_t c0 = OC * t / n, c1 = OC * (t + 1) / n;
      for (int64_t i = 0; i < N; i++)
        for (int64_t c = c0; c < c1; c++) db[c] += dout[i * OC + c];
    }
  }
}
