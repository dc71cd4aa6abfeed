/* kernels/cpu/attention.c — causal grouped-query attention (optional sliding
 * window) on packed qkv, fp32.
 *
 * Work is cut into query tiles of SL_ATT_TQ rows of one (batch, head); a tile
 * only multiplies against its visible key range [k0, i1) (the causal upper
 * triangle beyond the tile and keys left of the window are skipped), so the
 * score block is at most (TQ, TQ + window) or (TQ, T). Scores come from
 * cblas_sgemm straight out of the packed layout (row stride (nh+2nkv)*hd),
 * the softmax is one tight row loop, and lse is saved so backward recomputes
 * P = exp(S - lse) (FlashAttention-style):
 *   dP = dO V^T, dS = P * (dP - rowsum(dO * O)),
 *   dQ += scale dS K, dK += scale dS^T Q, dV += P^T dO.
 *
 * Threading: OpenMP threads take whole items (forward: query tiles;
 * backward: one (batch, kv-head) group each, so dK/dV have one writer), each
 * calling sgemm single-threaded (the backend keeps OpenBLAS at one thread,
 * see ctx.c). With fewer items than threads, items run on the calling
 * thread.
 *
 * Document masking (seg != NULL): seg[b*T + i] is where query i's
 * document starts; key j is visible iff seg[i] <= j <= i (and the window).
 * seg is non-decreasing along a sample, so a tile's first query has its
 * smallest visible key and the tile structure is unchanged.
 */
/* Lets gcc if-convert the clamps in sl_cpu_expf and vectorize exp loops
 * (no FP-exception semantics are relied on anywhere in the backend). */
#pragma GCC optimize("no-trapping-math")
#include <math.h>
#include <omp.h>

#include <cblas.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

#define SL_ATT_TQ 64 /* query rows per tile */

typedef struct {
  const float *qkv;   /* (B, T, (nh+2nkv)*hd) */
  const int32_t *seg; /* (B*T) document start of each query, or NULL */
  int64_t B, T, nh, nkv, hd, window;
  int64_t ld;    /* row stride of qkv: (nh + 2*nkv) * hd */
  int64_t ldo;   /* row stride of out / dout: nh * hd */
  int64_t ntile; /* query tiles per (b, h) */
  float scale;   /* of the scores q.k (the caller's, e.g. 1/sqrt(hd)) */
  float cap;     /* logit softcap (> 0: c = cap tanh(s / cap)), 0: none */
} att_shape;

static att_shape att_make(const float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                          float scale, const int32_t *seg, float cap) {
  att_shape s = {qkv,   seg, B, T, nh, nkv, hd, window, (nh + 2 * nkv) * hd, nh * hd, (T + SL_ATT_TQ - 1) / SL_ATT_TQ,
                 scale, cap};
  return s;
}

/* First key visible to query i of sample b. */
static int64_t first_key(const att_shape *a, int64_t b, int64_t i) {
  int64_t k = (a->window > 0 && i - a->window + 1 > 0) ? i - a->window + 1 : 0;
  int64_t d = a->seg ? a->seg[b * a->T + i] : 0;
  return d > k ? d : k;
}

/* Softmax of s[lo, hi) in place; s[0, lo) and s[hi, n) set to 0. Returns
 * the log-sum-exp of s[lo, hi). */
SL_CPU_HOT static float softmax_row(float *s, int64_t n, int64_t lo, int64_t hi) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t j = lo; j < hi; j++) m = s[j] > m ? s[j] : m;
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = lo; j < hi; j++) {
    float e = sl_cpu_expf(s[j] - m);
    s[j] = e;
    sum += (double)e;
  }
  float inv = (float)(1.0 / sum);
  for (int64_t j = lo; j < hi; j++) s[j] *= inv;
  for (int64_t j = 0; j < lo; j++) s[j] = 0.0f;
  for (int64_t j = hi; j < n; j++) s[j] = 0.0f;
  return m + (float)log(sum);
}

/* s[j] = cap tanh(s[j] / cap) on [lo, hi) (Gemma 2's logit softcap). */
static void cap_row(float *s, int64_t lo, int64_t hi, float cap) {
  for (int64_t j = lo; j < hi; j++) s[j] = cap * tanhf(s[j] / cap);
}

/* p[j] = exp(c(s[j]) - lse) on [lo, hi), 0 elsewhere; dp[j] = p[j]*(dp[j]-D)
 * * c'(s[j]), where c is the softcap (identity when cap <= 0) and
 * c' = 1 - tanh^2. */
SL_CPU_HOT static void dsoftmax_row(float *p, float *dp, int64_t n, int64_t lo, int64_t hi, float lse, float D,
                                    float cap) {
  for (int64_t j = 0; j < lo; j++) p[j] = dp[j] = 0.0f;
  if (cap > 0.0f) {
    for (int64_t j = lo; j < hi; j++) {
      float t = tanhf(p[j] / cap);
      float e = sl_cpu_expf(cap * t - lse);
      p[j] = e;
      dp[j] = e * (dp[j] - D) * (1.0f - t * t);
    }
  } else {
    for (int64_t j = lo; j < hi; j++) {
      float e = sl_cpu_expf(p[j] - lse);
      p[j] = e;
      dp[j] = e * (dp[j] - D);
    }
  }
  for (int64_t j = hi; j < n; j++) p[j] = dp[j] = 0.0f;
}

SL_CPU_HOT static float dot_row(const float *x, const float *y, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; j++) s += x[j] * y[j];
  return s;
}

/* Forward of query tile `tile` of (b, h). S: (TQ, T) scratch. */
static void fwd_tile(const att_shape *a, float *out, float *lse, int64_t b, int64_t h, int64_t tile, float *S) {
  int64_t T = a->T, hd = a->hd, ld = a->ld, g = h / (a->nh / a->nkv);
  const float *base = a->qkv + b * T * ld;
  const float *q = base + h * hd, *k = base + (a->nh + g) * hd, *v = base + (a->nh + a->nkv + g) * hd;
  int64_t i0 = tile * SL_ATT_TQ, i1 = i0 + SL_ATT_TQ < T ? i0 + SL_ATT_TQ : T;
  int64_t m = i1 - i0, k0 = first_key(a, b, i0), kn = i1 - k0;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)kn, (int)hd, a->scale, q + i0 * ld, (int)ld,
              k + k0 * ld, (int)ld, 0.0f, S, (int)kn);
  float *l = lse + (b * a->nh + h) * T;
  for (int64_t r = 0; r < m; r++) {
    int64_t i = i0 + r, lo = first_key(a, b, i) - k0;
    if (a->cap > 0.0f) cap_row(S + r * kn, lo, i + 1 - k0, a->cap);
    l[i] = softmax_row(S + r * kn, kn, lo, i + 1 - k0);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)hd, (int)kn, 1.0f, S, (int)kn, v + k0 * ld,
              (int)ld, 0.0f, out + (b * T + i0) * a->ldo + h * hd, (int)a->ldo);
}

/* Backward of every query head of kv group (b, g). P, dP: (TQ, T) scratch. */
static void bwd_group(const att_shape *a, float *dqkv, const float *dout, const float *out, const float *lse, int64_t b,
                      int64_t g, float *P, float *dP) {
  int64_t T = a->T, hd = a->hd, ld = a->ld, ldo = a->ldo;
  int64_t rep = a->nh / a->nkv;
  const float *base = a->qkv + b * T * ld;
  float *dbase = dqkv + b * T * ld;
  const float *k = base + (a->nh + g) * hd, *v = base + (a->nh + a->nkv + g) * hd;
  float *dk = dbase + (a->nh + g) * hd, *dv = dbase + (a->nh + a->nkv + g) * hd;
  for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
    const float *q = base + h * hd;
    float *dq = dbase + h * hd;
    const float *o = out + b * T * ldo + h * hd, *dO = dout + b * T * ldo + h * hd;
    const float *l = lse + (b * a->nh + h) * T;
    for (int64_t tile = 0; tile < a->ntile; tile++) {
      int64_t i0 = tile * SL_ATT_TQ, i1 = i0 + SL_ATT_TQ < T ? i0 + SL_ATT_TQ : T;
      int64_t m = i1 - i0, k0 = first_key(a, b, i0), kn = i1 - k0;
      /* P <- S = scale Q K^T ; dP = dO V^T */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)kn, (int)hd, a->scale, q + i0 * ld, (int)ld,
                  k + k0 * ld, (int)ld, 0.0f, P, (int)kn);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)kn, (int)hd, 1.0f, dO + i0 * ldo, (int)ldo,
                  v + k0 * ld, (int)ld, 0.0f, dP, (int)kn);
      for (int64_t r = 0; r < m; r++) {
        int64_t i = i0 + r;
        float D = dot_row(dO + i * ldo, o + i * ldo, hd);
        dsoftmax_row(P + r * kn, dP + r * kn, kn, first_key(a, b, i) - k0, i + 1 - k0, l[i], D, a->cap);
      }
      /* dQ += scale dS K ; dK += scale dS^T Q ; dV += P^T dO */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)hd, (int)kn, a->scale, dP, (int)kn,
                  k + k0 * ld, (int)ld, 1.0f, dq + i0 * ld, (int)ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)kn, (int)hd, (int)m, a->scale, dP, (int)kn, q + i0 * ld,
                  (int)ld, 1.0f, dk + k0 * ld, (int)ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)kn, (int)hd, (int)m, 1.0f, P, (int)kn, dO + i0 * ldo,
                  (int)ldo, 1.0f, dv + k0 * ld, (int)ld);
    }
  }
}

/* Widest key range of any tile: TQ + window - 1, capped at T. */
static int64_t max_keys(const att_shape *a) {
  int64_t kn = a->T;
  if (a->window > 0 && SL_ATT_TQ + a->window - 1 < kn) kn = SL_ATT_TQ + a->window - 1;
  return kn;
}

void sl_cpu_attention_fwd(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                          int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap) {
  if (B <= 0 || T <= 0) return;
  att_shape a = att_make(qkv, B, T, nh, nkv, hd, window, scale, seg, softcap);
  int64_t items = B * nh * a.ntile, per = SL_ATT_TQ * max_keys(&a);
  int nt = items >= ctx->threads ? ctx->threads : 1;
  float *S = sl_cpu_scratch(ctx, (size_t)(per * nt), "attention_fwd");
  if (!S) {
    sl_cpu_poison(out, B * T * nh * hd);
    sl_cpu_poison(lse, B * nh * T);
    return;
  }
  if (nt == 1) {
    for (int64_t it = 0; it < items; it++)
      fwd_tile(&a, out, lse, it / (nh * a.ntile), it / a.ntile % nh, it % a.ntile, S);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    float *St = S + per * omp_get_thread_num();
    /* longest tiles (last in each (b, h)) first */
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      int64_t tile = a.ntile - 1 - it % a.ntile, bh = it / a.ntile;
      fwd_tile(&a, out, lse, bh / nh, bh % nh, tile, St);
    }
  }
}

void sl_cpu_attention_bwd(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                          float scale, const int32_t *seg, float softcap) {
  if (B <= 0 || T <= 0) return;
  att_shape a = att_make(qkv, B, T, nh, nkv, hd, window, scale, seg, softcap);
  int64_t items = B * nkv, per = SL_ATT_TQ * max_keys(&a);
  int nt = items >= ctx->threads ? ctx->threads : 1;
  float *S = sl_cpu_scratch(ctx, (size_t)(2 * per * nt), "attention_bwd");
  if (!S) {
    sl_cpu_poison(dqkv, B * T * a.ld);
    return;
  }
  if (nt == 1) {
    for (int64_t it = 0; it < items; it++) bwd_group(&a, dqkv, dout, out, lse, it / nkv, it % nkv, S, S + per);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    float *Pt = S + 2 * per * omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) bwd_group(&a, dqkv, dout, out, lse, it / nkv, it % nkv, Pt, Pt + per);
  }
}
