/* kernels/cpu/lmhead_ce.c — fused LM head + softmax cross-entropy, chunked
 * over rows: a (chunk, V) block of logits (about SL_CE_BLOCK_FLOATS floats)
 * is the most that ever exists. Logits come from one cblas_sgemm per chunk,
 * the per-row log-sum-exp / softmax are OpenMP row loops, and backward
 * recomputes each chunk's logits and feeds dlogits to two more sgemms
 * (dx += dlogits w, dw += dlogits^T x). */
#include <math.h>
#include <omp.h>

#include <cblas.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

#define SL_CE_BLOCK_FLOATS (1 << 20) /* 4 MiB of logits per chunk */

/* Rows per chunk for vocabulary V: ~SL_CE_BLOCK_FLOATS / V, at least 8. */
static int64_t ce_chunk(int64_t N, int64_t V) {
  int64_t ch = SL_CE_BLOCK_FLOATS / (V > 0 ? V : 1);
  if (ch < 8) ch = 8;
  return ch < N ? ch : N;
}

SL_CPU_HOT static float lse_row(const float *l, int64_t V) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; j++) m = l[j] > m ? l[j] : m;
  double sum = 0.0; /* double: V terms, lse feeds every backward prob */
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < V; j++) sum += (double)sl_cpu_expf(l[j] - m);
  return m + (float)log(sum);
}

/* l <- (softmax(l) - onehot(t)) * scale, given lse of the row */
SL_CPU_HOT static void dlogits_row(float *l, int64_t V, int32_t t, float lse,
                                   float scale) {
  float et = sl_cpu_expf(l[t] - lse);
  for (int64_t j = 0; j < V; j++) l[j] = sl_cpu_expf(l[j] - lse) * scale;
  l[t] = (et - 1.0f) * scale;
}

void sl_cpu_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse,
                          const float *x, const float *w,
                          const int32_t *targets, int64_t N, int64_t C,
                          int64_t V) {
  if (N <= 0) return;
  int64_t ch = ce_chunk(N, V);
  float *L = sl_cpu_scratch(ctx, (size_t)(ch * V), "lmhead_ce_fwd");
  if (!L) {
    sl_cpu_poison(losses, N);
    sl_cpu_poison(lse, N);
    return;
  }
  for (int64_t r0 = 0; r0 < N; r0 += ch) {
    int64_t m = N - r0 < ch ? N - r0 : ch;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)V,
                (int)C, 1.0f, x + r0 * C, (int)C, w, (int)C, 0.0f, L, (int)V);
#pragma omp parallel for num_threads(m * V >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
    for (int64_t r = 0; r < m; r++) {
      const float *l = L + r * V;
      float z = lse_row(l, V);
      int32_t t = targets[r0 + r];
      lse[r0 + r] = z;
      losses[r0 + r] = t >= 0 ? z - l[t] : 0.0f;
    }
  }
}

void sl_cpu_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x,
                          const float *w, const int32_t *targets,
                          const float *lse, float scale, int64_t N, int64_t C,
                          int64_t V) {
  if (N <= 0 || (!dx && !dw)) return;
  int64_t ch = ce_chunk(N, V);
  float *L = sl_cpu_scratch(ctx, (size_t)(ch * V), "lmhead_ce_bwd");
  if (!L) {
    sl_cpu_poison(dx, N * C);
    sl_cpu_poison(dw, V * C);
    return;
  }
  for (int64_t r0 = 0; r0 < N; r0 += ch) {
    int64_t m = N - r0 < ch ? N - r0 : ch;
    int any = 0;
    for (int64_t r = 0; r < m; r++) any |= targets[r0 + r] >= 0;
    if (!any) continue;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)V,
                (int)C, 1.0f, x + r0 * C, (int)C, w, (int)C, 0.0f, L, (int)V);
#pragma omp parallel for num_threads(m * V >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
    for (int64_t r = 0; r < m; r++) {
      int32_t t = targets[r0 + r];
      if (t >= 0)
        dlogits_row(L + r * V, V, t, lse[r0 + r], scale);
      else
        memset(L + r * V, 0, (size_t)V * sizeof(float));
    }
    if (dx)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)C,
                  (int)V, 1.0f, L, (int)V, w, (int)C, 1.0f, dx + r0 * C,
                  (int)C);
    if (dw)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)V, (int)C,
                  (int)m, 1.0f, L, (int)V, x + r0 * C, (int)C, 1.0f, dw,
                  (int)C);
  }
}
