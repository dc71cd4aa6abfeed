/* kernels/cpu/moe.c — the CPU backend's mixture-of-experts ops
 * (kernels/kernels.h): the router's scores and top-k with the expert
 * grouping of the slots, the permutation of token rows into expert groups,
 * and the weighted combine back. The experts' GEMMs are linear_fwd /
 * linear_bwd over each group (the caller's grouped GEMM). fp32, the
 * transformers semantics of MixtralSparseMoeBlock (softmax in fp32, topk,
 * renormalised weights) or DeepseekV3MoE (sigmoid scores, the routed
 * scaling factor); Megatron-Core's capacity. OpenMP over tokens; the
 * grouping is one serial counting sort (deterministic). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"
#define SL_MOE_FN static inline
#include "kernels/moe_rows.h"

static int nthr(const sl_kctx *ctx, int64_t work) { return work >= SL_CPU_PAR_MIN ? ctx->threads : 1; }

/* Counting sort of the slots by group (sl_moe_key; G groups), tokens
 * ascending within a group: offs (G+1), perm, pos. */
static void group_slots(int32_t *offs, int32_t *perm, int32_t *pos, const int32_t *sel, int64_t S, int64_t E,
                        int64_t G) {
  memset(offs, 0, (size_t)(G + 1) * sizeof *offs);
  for (int64_t s = 0; s < S; s++) offs[sl_moe_key(sel[s], E) + 1]++;
  for (int64_t g = 0; g < G; g++) offs[g + 1] += offs[g];
  for (int64_t g = 0; g < G; g++) {
    int32_t r = offs[g];
    for (int64_t s = 0; s < S; s++)
      if (sl_moe_key(sel[s], E) == g) {
        perm[r] = (int32_t)s;
        pos[s] = r++;
      }
  }
}

/* The capacity: in each expert's group (offs, perm: the dropless grouping)
 * the rows of rank >= cap are dropped (sel = -1 - e), then their wts = 0. */
static void drop_slots(sl_kctx *ctx, int32_t *sel, float *wts, const int32_t *offs, const int32_t *perm, int64_t S,
                       int64_t E, int64_t cap) {
#pragma omp parallel for num_threads(nthr(ctx, S)) schedule(static)
  for (int64_t r = 0; r < S; r++) {
    int64_t e = 0;
    while (offs[e + 1] <= r) e++;
    if (sl_moe_rank(wts, perm, offs[e], offs[e + 1], r) >= cap) sel[perm[r]] = (int32_t)(-1 - e);
  }
  for (int64_t s = 0; s < S; s++)
    if (sel[s] < 0) wts[s] = 0.0f;
}

void sl_cpu_moe_route_fwd(sl_kctx *ctx, float *probs, int32_t *sel, float *wts, int32_t *offs, int32_t *perm,
                          int32_t *pos, float *lse, const float *logits, const float *bias, int64_t N, int64_t E,
                          int64_t k, int mode, float scale, int64_t cap) {
#pragma omp parallel for num_threads(nthr(ctx, N *E)) schedule(static)
  for (int64_t t = 0; t < N; t++)
    sl_moe_route_row(probs + t * E, sel + t * k, wts + t * k, lse ? lse + t : NULL, logits + t * E, bias, E, k, mode,
                     scale);
  if (cap > 0 && cap < N) { /* an expert takes at most N slots (one a token): cap >= N drops nothing */
    group_slots(offs, perm, pos, sel, N * k, E, E);
    drop_slots(ctx, sel, wts, offs, perm, N * k, E, cap);
  }
  group_slots(offs, perm, pos, sel, N * k, E, 2 * E);
}

void sl_cpu_moe_route_bwd(sl_kctx *ctx, float *dlogits, const float *dwts, const float *probs, const int32_t *sel,
                          const float *wts, const float *gp, const float *lse, float zg, int64_t N, int64_t E,
                          int64_t k, int mode, float scale) {
#pragma omp parallel for num_threads(nthr(ctx, N *E)) schedule(static)
  for (int64_t t = 0; t < N; t++)
    sl_moe_route_bwd_row(dlogits + t * E, dwts + t * k, probs + t * E, sel + t * k, wts + t * k, gp,
                         lse ? zg * lse[t] : 0.0f, E, k, mode, scale);
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
