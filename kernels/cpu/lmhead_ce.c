/* kernels/cpu/lmhead_ce.c — fused LM head + softmax cross-entropy.
 *
 * Logits exist one (rows, vocab) tile at a time, never more than
 * SL_CE_BLOCK_FLOATS floats (4 MiB): rows in chunks of up to SL_CE_ROWS, the
 * vocabulary in chunks filling the rest of the block. Tiling both ways keeps
 * every cblas_sgemm large in M, N and K (chunking rows alone makes OpenBLAS
 * re-pack the whole (V, C) head weight for every small row chunk, which cost
 * ~30% at V = 8192). Forward keeps an online log-sum-exp per row (running
 * max, sum rescaled in double) across vocabulary chunks; backward recomputes
 * each tile's logits, turns them into dlogits = (softmax - onehot) * scale in
 * place and feeds two more sgemms (dx += dlogits w, dw += dlogits^T x).
 * bf16 compute (kernels/bf16.h) rounds the logits and dlogits tiles to bf16.
 * softcap > 0 (Gemma 2's final_logit_softcapping) caps each tile after its
 * GEMM (c = cap tanh(l / cap)); backward multiplies dlogits by 1 - (c/cap)^2.
 * Row loops are OpenMP; GEMMs run on OpenBLAS's threads. The two loops
 * (sl_cpu_ce_{fwd,bwd}_core) also serve the loss-parallel head of
 * vocab_parallel.c: w is then a slice whose row 0 is vocabulary id voff. */
/* Lets gcc if-convert the clamps in sl_cpu_expf and vectorize exp loops
 * (no FP-exception semantics are relied on anywhere in the backend). */
#pragma GCC optimize("no-trapping-math")
#include <math.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

#ifndef SL_CE_BLOCK_FLOATS
#define SL_CE_BLOCK_FLOATS (1 << 20) /* 4 MiB of logits per tile */
#endif
#ifndef SL_CE_ROWS
#define SL_CE_ROWS 1024 /* rows per tile (fewer if N is smaller) */
#endif

typedef struct {
  int64_t rows; /* rows per tile */
  int64_t vc;   /* vocabulary entries per tile */
} ce_tiles;

static ce_tiles ce_plan(int64_t N, int64_t V) {
  ce_tiles t;
  t.rows = N < SL_CE_ROWS ? N : SL_CE_ROWS;
  if (t.rows < 1) t.rows = 1;
  t.vc = SL_CE_BLOCK_FLOATS / t.rows;
  if (t.vc < 64) t.vc = 64;
  if (t.vc > V) t.vc = V;
  return t;
}

/* Online log-sum-exp update of one row with a tile l[0, n):
 * (*m, *sum) -> (max(*m, max l), sum * exp(m_old - m_new) + sum exp(l - m_new))
 */
SL_CPU_HOT static void lse_update(const float *l, int64_t n, float *m, double *sum) {
  float bm = -INFINITY;
#pragma omp simd reduction(max : bm)
  for (int64_t j = 0; j < n; j++) bm = l[j] > bm ? l[j] : bm;
  if (bm > *m) {
    *sum *= exp((double)*m - (double)bm); /* 0 when *m = -inf */
    *m = bm;
  }
  float mm = *m;
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; j++) s += (double)sl_cpu_expf(l[j] - mm);
  *sum += s;
}

/* l[0, n) <- exp(l - lse) * scale */
SL_CPU_HOT static void softmax_scaled(float *l, int64_t n, float lse, float scale) {
  for (int64_t j = 0; j < n; j++) l[j] = sl_cpu_expf(l[j] - lse) * scale;
}

/* Final-logit softcap (Gemma 2): the (m, n) tile l <- cap * tanh(l / cap). */
static void cap_tile(sl_kctx *ctx, float *l, int64_t n, float cap) {
#pragma omp parallel for num_threads(n >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
  for (int64_t j = 0; j < n; j++) l[j] = cap * tanhf(l[j] / cap);
}

/* l[0, n) holds capped logits c = cap tanh(raw / cap); l <- dloss/draw =
 * (exp(c - lse) - onehot(t)) * scale * (1 - (c / cap)^2). */
SL_CPU_HOT static void dsoftmax_capped(float *l, int64_t n, int64_t t, float lse, float scale, float cap) {
  for (int64_t j = 0; j < n; j++) {
    float c = l[j], u = c / cap;
    float g = (sl_cpu_expf(c - lse) - (j == t ? 1.0f : 0.0f)) * scale;
    l[j] = g * (1.0f - u * u);
  }
}

void sl_cpu_ce_fwd_core(sl_kctx *ctx, const float *x, const float *w, const int32_t *targets, int64_t N, int64_t C,
                        int64_t V, int64_t voff, float *losses, float *lse, float *lmax, float *st, const char *op,
                        float softcap) {
  if (N <= 0) return;
  ce_tiles tp = ce_plan(N, V);
  /* scratch: sums (rows doubles, first: 8-byte aligned for any row count) |
   * logits tile | running max (rows) | target logit (rows) */
  float *S = sl_cpu_scratch(ctx, (size_t)(tp.rows * tp.vc + 4 * tp.rows), op);
  if (!S) {
    sl_cpu_poison(st ? lmax : losses, N);
    sl_cpu_poison(st ? st : lse, st ? 2 * N : N);
    return;
  }
  double *rsum = (double *)S;
  float *L = S + 2 * tp.rows, *rmax = L + tp.rows * tp.vc, *tl = rmax + tp.rows;
  for (int64_t r0 = 0; r0 < N; r0 += tp.rows) {
    int64_t m = N - r0 < tp.rows ? N - r0 : tp.rows;
    for (int64_t r = 0; r < m; r++) {
      rmax[r] = -INFINITY;
      rsum[r] = 0.0;
      tl[r] = 0.0f;
    }
    for (int64_t v0 = 0; v0 < V; v0 += tp.vc) {
      int64_t vn = V - v0 < tp.vc ? V - v0 : tp.vc;
      /* L (m, vn) = x[r0:r0+m] (m, C) . w[v0:v0+vn] (vn, C)^T */
      sl_cpu_sgemm(ctx, 0, 1, m, vn, C, 1.0f, x + r0 * C, C, w + v0 * C, C, 0.0f, L, vn);
      if (ctx->bf.on) /* bf16 compute: logits are a bf16 GEMM output */
        sl_cpu_round_rows(ctx, L, m, vn, vn);
      if (softcap > 0.0f) cap_tile(ctx, L, m * vn, softcap);
#pragma omp parallel for num_threads(m *vn >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
      for (int64_t r = 0; r < m; r++) {
        const float *l = L + r * vn;
        lse_update(l, vn, &rmax[r], &rsum[r]);
        int64_t t = (int64_t)targets[r0 + r] - voff;
        if (t >= v0 && t < v0 + vn) tl[r] = l[t - v0];
      }
    }
    for (int64_t r = 0; st && r < m; r++) {
      lmax[r0 + r] = rmax[r];
      st[2 * (r0 + r)] = (float)rsum[r];
      st[2 * (r0 + r) + 1] = tl[r];
    }
    for (int64_t r = 0; !st && r < m; r++) {
      float z = rmax[r] + (float)log(rsum[r]);
      lse[r0 + r] = z;
      losses[r0 + r] = targets[r0 + r] >= 0 ? z - tl[r] : 0.0f;
    }
  }
}

void sl_cpu_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                          const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap) {
  sl_cpu_ce_fwd_core(ctx, x, w, targets, N, C, V, 0, losses, lse, NULL, NULL, "lmhead_ce_fwd", softcap);
}

void sl_cpu_ce_bwd_core(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                        const float *lse, float scale, int64_t N, int64_t C, int64_t V, int64_t voff, const char *op,
                        float softcap) {
  if (N <= 0 || (!dx && !dw)) return;
  ce_tiles tp = ce_plan(N, V);
  float *L = sl_cpu_scratch(ctx, (size_t)(tp.rows * tp.vc), op);
  if (!L) {
    sl_cpu_poison(dx, N * C);
    sl_cpu_poison(dw, V * C);
    return;
  }
  for (int64_t r0 = 0; r0 < N; r0 += tp.rows) {
    int64_t m = N - r0 < tp.rows ? N - r0 : tp.rows;
    int any = 0;
    for (int64_t r = 0; r < m; r++) any |= targets[r0 + r] >= 0;
    if (!any) continue; /* every row ignored: no gradient */
    for (int64_t v0 = 0; v0 < V; v0 += tp.vc) {
      int64_t vn = V - v0 < tp.vc ? V - v0 : tp.vc;
      sl_cpu_sgemm(ctx, 0, 1, m, vn, C, 1.0f, x + r0 * C, C, w + v0 * C, C, 0.0f, L, vn);
      if (ctx->bf.on) sl_cpu_round_rows(ctx, L, m, vn, vn);
      if (softcap > 0.0f) cap_tile(ctx, L, m * vn, softcap);
#pragma omp parallel for num_threads(m *vn >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
      for (int64_t r = 0; r < m; r++) {
        float *l = L + r * vn;
        if (targets[r0 + r] < 0) {
          memset(l, 0, (size_t)vn * sizeof(float));
          continue;
        }
        int64_t t = (int64_t)targets[r0 + r] - voff;
        float z = lse[r0 + r];
        if (softcap > 0.0f) {
          dsoftmax_capped(l, vn, t - v0, z, scale, softcap);
          continue;
        }
        float pt = t >= v0 && t < v0 + vn ? sl_cpu_expf(l[t - v0] - z) : 0.0f;
        softmax_scaled(l, vn, z, scale);
        if (t >= v0 && t < v0 + vn) l[t - v0] = (pt - 1.0f) * scale;
      }
      if (ctx->bf.on) /* dlogits stored in bf16, the operand of two GEMMs */
        sl_cpu_round_rows(ctx, L, m, vn, vn);
      /* dx[r0:] (m, C) += L (m, vn) . w[v0:] (vn, C) */
      if (dx) sl_cpu_sgemm(ctx, 0, 0, m, C, vn, 1.0f, L, vn, w + v0 * C, C, 1.0f, dx + r0 * C, C);
      /* dw[v0:] (vn, C) += L^T (vn, m) . x[r0:] (m, C) */
      if (dw) sl_cpu_sgemm(ctx, 1, 0, vn, C, m, 1.0f, L, vn, x + r0 * C, C, 1.0f, dw + v0 * C, C);
    }
  }
}

void sl_cpu_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                          const float *lse, float scale, int64_t N, int64_t C, int64_t V, float softcap) {
  sl_cpu_ce_bwd_core(ctx, dx, dw, x, w, targets, lse, scale, N, C, V, 0, "lmhead_ce_bwd", softcap);
}
