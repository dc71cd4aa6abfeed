/* kernels/cpu/moe.c — the CPU backend's mixture-of-experts ops
 * (kernels/kernels.h): the router's softmax and top-k with the expert
 * grouping of the slots, the permutation of token rows into expert groups,
 * and the weighted combine back. The experts' GEMMs are linear_fwd /
 * linear_bwd over each group (the caller's grouped GEMM). fp32, the
 * transformers semantics of MixtralSparseMoeBlock (softmax in fp32, topk,
 * renormalised weights). OpenMP over tokens; the grouping is one serial
 * counting sort (deterministic). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"
#define SL_MOE_FN static inline
#include "kernels/moe_rows.h"

static int nthr(const sl_kctx *ctx, int64_t work) { return work >= SL_CPU_PAR_MIN ? ctx->threads : 1; }

void sl_cpu_moe_route_fwd(sl_kctx *ctx, float *probs, int32_t *sel, float *wts, int32_t *offs, int32_t *perm,
                          int32_t *pos, const float *logits, int64_t N, int64_t E, int64_t k, int norm) {
#pragma omp parallel for num_threads(nthr(ctx, N *E)) schedule(static)
  for (int64_t t = 0; t < N; t++) sl_moe_route_row(probs + t * E, sel + t * k, wts + t * k, logits + t * E, E, k, norm);
  /* counting sort of the slots by expert, tokens ascending within a group */
  memset(offs, 0, (size_t)(E + 1) * sizeof *offs);
  for (int64_t s = 0; s < N * k; s++) offs[sel[s] + 1]++;
  for (int64_t e = 0; e < E; e++) offs[e + 1] += offs[e];
  for (int64_t e = 0; e < E; e++) {
    int32_t r = offs[e];
    for (int64_t s = 0; s < N * k; s++)
      if (sel[s] == (int32_t)e) {
        perm[r] = (int32_t)s;
        pos[s] = r++;
      }
  }
}

void sl_cpu_moe_route_bwd(sl_kctx *ctx, float *dlogits, const float *dwts, const float *probs, const int32_t *sel,
                          const float *wts, const float *gp, int64_t N, int64_t E, int64_t k, int norm) {
#pragma omp parallel for num_threads(nthr(ctx, N *E)) schedule(static)
  for (int64_t t = 0; t < N; t++)
    sl_moe_route_bwd_row(dlogits + t * E, dwts + t * k, probs + t * E, sel + t * k, wts + t * k, gp, E, k, norm);
}

void sl_cpu_moe_permute_fwd(sl_kctx *ctx, float *xp, const float *x, const int32_t *pos, int64_t N, int64_t k,
                            int64_t C) {
#pragma omp parallel for num_threads(nthr(ctx, N *k *C)) schedule(static)
  for (int64_t s = 0; s < N * k; s++) memcpy(xp + (int64_t)pos[s] * C, x + (s / k) * C, (size_t)C * sizeof(float));
}

void sl_cpu_moe_permute_bwd(sl_kctx *ctx, float *dx, const float *dxp, const int32_t *pos, int64_t N, int64_t k,
                            int64_t C) {
#pragma omp parallel for num_threads(nthr(ctx, N *k *C)) schedule(static)
  for (int64_t t = 0; t < N; t++)
    for (int64_t j = 0; j < k; j++) {
      const float *g = dxp + (int64_t)pos[t * k + j] * C;
      float *d = dx + t * C;
      for (int64_t c = 0; c < C; c++) d[c] += g[c];
    }
}

void sl_cpu_moe_combine_fwd(sl_kctx *ctx, float *out, const float *yp, const float *wts, const int32_t *pos, int64_t N,
                            int64_t k, int64_t C) {
#pragma omp parallel for num_threads(nthr(ctx, N *k *C)) schedule(static)
  for (int64_t t = 0; t < N; t++) {
    float *o = out + t * C;
    memset(o, 0, (size_t)C * sizeof(float));
    for (int64_t j = 0; j < k; j++) {
      const float *y = yp + (int64_t)pos[t * k + j] * C, w = wts[t * k + j];
      for (int64_t c = 0; c < C; c++) o[c] += w * y[c];
    }
  }
}

void sl_cpu_moe_combine_bwd(sl_kctx *ctx, float *dyp, float *dwts, const float *dout, const float *yp, const float *wts,
                            const int32_t *pos, int64_t N, int64_t k, int64_t C) {
#pragma omp parallel for num_threads(nthr(ctx, N *k *C)) schedule(static)
  for (int64_t s = 0; s < N * k; s++) {
    const float *g = dout + (s / k) * C, *y = yp + (int64_t)pos[s] * C;
    float *dy = dyp + (int64_t)pos[s] * C, w = wts[s], dot = 0;
    for (int64_t c = 0; c < C; c++) {
      dy[c] += w * g[c];
      dot += g[c] * y[c];
    }
    dwts[s] += dot;
  }
}
