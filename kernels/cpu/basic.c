/* kernels/cpu/basic.c — the CPU backend's row and elementwise ops:
 * embedding, RMSNorm, RoPE, SwiGLU, add, sumsq, the bf16 casts and in-place rounding.
 * fp32 with HF Llama semantics; OpenMP over rows (or columns where a
 * reduction across rows must stay deterministic). */
/* Lets gcc if-convert the clamps in sl_cpu_expf and vectorize exp loops
 * (no FP-exception semantics are relied on anywhere in the backend). */
#pragma GCC optimize("no-trapping-math")
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

/* Number of threads worth using for `work` elements. */
static int nthr(const sl_kctx *ctx, int64_t work) { return work >= SL_CPU_PAR_MIN ? ctx->threads : 1; }

/* [lo, hi) of `n` items for part `t` of `nt`. */
static void split(int64_t n, int t, int nt, int64_t *lo, int64_t *hi) {
  *lo = n * t / nt;
  *hi = n * (t + 1) / nt;
}

/* ---- embedding ----------------------------------------------------------- */

void sl_cpu_embedding_fwd(sl_kctx *ctx, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C) {
#pragma omp parallel for num_threads(nthr(ctx, N *C)) schedule(static)
  for (int64_t i = 0; i < N; i++) memcpy(out + i * C, wte + (int64_t)tok[i] * C, (size_t)C * sizeof(float));
}

/* Threads split the columns, so every row of dwte is summed in token order
 * by one thread: deterministic and race-free. */
void sl_cpu_embedding_bwd(sl_kctx *ctx, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C) {
  int nt = nthr(ctx, N * C);
  if (nt > C) nt = (int)C;
#pragma omp parallel num_threads(nt)
  {
    int64_t c0, c1;
    split(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
    for (int64_t i = 0; i < N; i++) {
      float *d = dwte + (int64_t)tok[i] * C;
      const float *s = dout + i * C;
      for (int64_t c = c0; c < c1; c++) d[c] += s[c];
    }
  }
}

/* ---- RMSNorm ------------------------------------------------------------- */

SL_CPU_HOT static float rms_fwd_row(float *o, const float *x, const float *w, int64_t C, float eps) {
  double ss = 0.0;
  for (int64_t j = 0; j < C; j++) ss += (double)x[j] * (double)x[j];
  float var = (float)(ss / (double)C);
  float r = 1.0f / sqrtf(var + eps);
  if (!w) { /* weightless (Falcon-Mamba's dt, B, C norms): w = 1 */
    for (int64_t j = 0; j < C; j++) o[j] = x[j] * r;
    return r;
  }
  for (int64_t j = 0; j < C; j++) o[j] = w[j] * (x[j] * r);
  return r;
}

void sl_cpu_rmsnorm_fwd(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                        int64_t ld, float eps) {
#pragma omp parallel for num_threads(nthr(ctx, N *C)) schedule(static)
  for (int64_t i = 0; i < N; i++) rstd[i] = rms_fwd_row(out + i * ld, inp + i * ld, w, C, eps);
}

/* dx += r*w*dy - x * r^3 * sum(w*dy*x)/C ; dwp += dy*x*r (w NULL: w = 1, no dwp) */
SL_CPU_HOT static void rms_bwd_row(float *dx, float *dwp, const float *dy, const float *x, const float *w, float r,
                                   int64_t C) {
  double dot = 0.0;
  if (!w) {
    for (int64_t j = 0; j < C; j++) dot += (double)dy[j] * (double)x[j];
    float c = (float)((double)r * r * r * dot / (double)C);
    if (dx)
      for (int64_t j = 0; j < C; j++) dx[j] += r * dy[j] - c * x[j];
    return;
  }
  for (int64_t j = 0; j < C; j++) dot += (double)(w[j] * dy[j]) * (double)x[j];
  float c = (float)((double)r * r * r * dot / (double)C);
  for (int64_t j = 0; j < C; j++) {
    if (dx) dx[j] += r * (w[j] * dy[j]) - c * x[j];
    if (dwp) dwp[j] += dy[j] * (x[j] * r);
  }
}

void sl_cpu_rmsnorm_bwd(sl_kctx *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        const float *rstd, int64_t N, int64_t C, int64_t ld) {
  int nt = nthr(ctx, N * C);
  float *part = NULL;
  if (dw && nt > 1) {
    part = sl_cpu_scratch(ctx, (size_t)nt * (size_t)C, "rmsnorm_bwd");
    if (!part) nt = 1; /* fall back to accumulating serially into dw */
  }
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num(), n = omp_get_num_threads();
    int64_t r0, r1;
    split(N, t, n, &r0, &r1);
    float *dwp = NULL;
    if (dw) {
      dwp = part ? part + (int64_t)t * C : dw;
      if (part) memset(dwp, 0, (size_t)C * sizeof(float));
    }
    for (int64_t i = r0; i < r1; i++)
      rms_bwd_row(dinp ? dinp + i * ld : NULL, dwp, dout + i * ld, inp + i * ld, w, rstd[i], C);
    if (part) {
#pragma omp barrier
      int64_t c0, c1;
      split(C, t, n, &c0, &c1);
      for (int p = 0; p < n; p++)
        for (int64_t c = c0; c < c1; c++) dw[c] += part[(int64_t)p * C + c];
    }
  }
}

/* The split-row RMSNorm (kernels.h rmsnorm_rowsum): rms_fwd_row's and
 * rms_bwd_row's arithmetic with the row's sums given. */
void sl_cpu_rmsnorm_rowsum(sl_kctx *ctx, float *out, const float *a, const float *b, const float *w, int64_t N,
                           int64_t C, int64_t ld) {
#pragma omp parallel for num_threads(nthr(ctx, N *C)) schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const float *x = a + i * ld, *y = b + i * ld;
    double s = 0.0;
    if (w)
      for (int64_t j = 0; j < C; j++) s += (double)(w[j] * x[j]) * (double)y[j];
    else
      for (int64_t j = 0; j < C; j++) s += (double)x[j] * (double)y[j];
    out[i] = (float)s;
  }
}

void sl_cpu_rmsnorm_fwd_sum(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, const float *sums,
                            int64_t N, int64_t C, int64_t ld, int64_t Cw, float eps) {
#pragma omp parallel for num_threads(nthr(ctx, N *C)) schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const float *x = inp + i * ld;
    float *o = out + i * ld;
    float r = 1.0f / sqrtf((float)((double)sums[i] / (double)Cw) + eps);
    rstd[i] = r;
    if (w)
      for (int64_t j = 0; j < C; j++) o[j] = w[j] * (x[j] * r);
    else
      for (int64_t j = 0; j < C; j++) o[j] = x[j] * r;
  }
}

void sl_cpu_rmsnorm_bwd_sum(sl_kctx *ctx, float *dinp, const float *dout, const float *inp, const float *w,
                            const float *rstd, const float *dots, int64_t N, int64_t C, int64_t ld, int64_t Cw) {
#pragma omp parallel for num_threads(nthr(ctx, N *C)) schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const float *x = inp + i * ld, *dy = dout + i * ld;
    float *dx = dinp + i * ld, r = rstd[i];
    float c = (float)((double)r * r * r * (double)dots[i] / (double)Cw);
    for (int64_t j = 0; j < C; j++) dx[j] += r * ((w ? w[j] : 1.0f) * dy[j]) - c * x[j];
  }
}

/* ---- RoPE ---------------------------------------------------------------- */

/* (T, hd/2) pairs of (cos, sin) as torch computes them in fp32:
 * angle = t * inv_freq[i] in fp32, cos / sin in double. Cached in ctx for
 * the last (T, hd, inv_freq values); the values are kept after the table. */
static const float *rope_table(sl_kctx *ctx, int64_t T, int64_t hd, const float *inv_freq) {
  int64_t h2 = hd / 2;
  if (ctx->rope_tab && ctx->rope_T >= T && ctx->rope_hd == hd &&
      !memcmp(ctx->rope_tab + ctx->rope_T * h2 * 2, inv_freq, (size_t)h2 * sizeof(float)))
    return ctx->rope_tab;
  float *tab = malloc((size_t)(T * h2 * 2 + h2) * sizeof(float));
  if (!tab) {
    sl_fail(SL_ENOMEM,
            "kernels/cpu rope: cannot allocate the (%lld, %lld) "
            "cos/sin table",
            (long long)T, (long long)h2);
    sl_log(SL_LOG_ERROR, "%s", sl_errmsg());
    return NULL;
  }
  for (int64_t i = 0; i < h2; i++) {
    float inv = inv_freq[i];
    for (int64_t t = 0; t < T; t++) {
      float a = (float)t * inv;
      tab[(t * h2 + i) * 2 + 0] = (float)cos((double)a);
      tab[(t * h2 + i) * 2 + 1] = (float)sin((double)a);
    }
  }
  memcpy(tab + T * h2 * 2, inv_freq, (size_t)h2 * sizeof(float));
  free(ctx->rope_tab);
  ctx->rope_tab = tab;
  ctx->rope_T = T;
  ctx->rope_hd = hd;
  return tab;
}

/* dir = +1: out = x*cos + rotate_half(x)*sin ; dir = -1: the transpose. */
static void rope_apply(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                       const float *inv_freq, float dir, const int32_t *seg) {
  const float *tab = rope_table(ctx, T, hd, inv_freq);
  int64_t row = (nh + 2 * nkv) * hd, nrot = nh + nkv, h2 = hd / 2;
  if (!tab) {
    sl_cpu_poison(qkv, B * T * row);
    return;
  }
#pragma omp parallel for num_threads(nthr(ctx, B *T *nrot *hd)) schedule(static)
  for (int64_t bt = 0; bt < B * T; bt++) {
    /* position: t, or t minus its document's start (seg) */
    const float *cs = tab + (bt % T - (seg ? seg[bt] : 0)) * h2 * 2;
    float *x = qkv + bt * row;
    for (int64_t h = 0; h < nrot; h++, x += hd) {
      for (int64_t i = 0; i < h2; i++) {
        float c = cs[2 * i], s = dir * cs[2 * i + 1];
        float x1 = x[i], x2 = x[i + h2];
        x[i] = x1 * c + (-x2) * s;
        x[i + h2] = x2 * c + x1 * s;
      }
    }
  }
}

void sl_cpu_rope_fwd(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     const float *inv_freq, const int32_t *seg) {
  rope_apply(ctx, qkv, B, T, nh, nkv, hd, inv_freq, 1.0f, seg);
}

void sl_cpu_rope_bwd(sl_kctx *ctx, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     const float *inv_freq, const int32_t *seg) {
  rope_apply(ctx, dqkv, B, T, nh, nkv, hd, inv_freq, -1.0f, seg);
}

/* ---- SwiGLU -------------------------------------------------------------- */

SL_CPU_HOT static void swiglu_fwd_row(float *o, const float *g, const float *u, int64_t H) {
  for (int64_t j = 0; j < H; j++) {
    float x = g[j];
    o[j] = x / (1.0f + sl_cpu_expf(-x)) * u[j];
  }
}

/* silu(g) = g*s, s = sigmoid(g); d silu/dg = s * (1 + g*(1-s)) */
SL_CPU_HOT static void swiglu_bwd_row(float *dg, float *du, const float *dy, const float *g, const float *u,
                                      int64_t H) {
  for (int64_t j = 0; j < H; j++) {
    float x = g[j];
    float s = 1.0f / (1.0f + sl_cpu_expf(-x));
    float d = dy[j];
    dg[j] += d * u[j] * (s * (1.0f + x * (1.0f - s)));
    du[j] += d * (x * s);
  }
}

typedef void (*glu_fwd_row)(float *o, const float *g, const float *u, int64_t H);
typedef void (*glu_bwd_row)(float *dg, float *du, const float *dy, const float *g, const float *u, int64_t H);

/* act(gu[:, :H]) * gu[:, H:] row by row (swiglu, geglu), and its backward */
static void glu_fwd(sl_kctx *ctx, glu_fwd_row row, float *out, const float *gu, int64_t N, int64_t H) {
#pragma omp parallel for num_threads(nthr(ctx, N *H)) schedule(static)
  for (int64_t i = 0; i < N; i++) row(out + i * H, gu + i * 2 * H, gu + i * 2 * H + H, H);
}
static void glu_bwd(sl_kctx *ctx, glu_bwd_row row, float *dgu, const float *dout, const float *gu, int64_t N,
                    int64_t H) {
#pragma omp parallel for num_threads(nthr(ctx, N *H)) schedule(static)
  for (int64_t i = 0; i < N; i++)
    row(dgu + i * 2 * H, dgu + i * 2 * H + H, dout + i * H, gu + i * 2 * H, gu + i * 2 * H + H, H);
}

void sl_cpu_swiglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  glu_fwd(ctx, swiglu_fwd_row, out, gu, N, H);
}
void sl_cpu_swiglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  glu_bwd(ctx, swiglu_bwd_row, dgu, dout, gu, N, H);
}

/* ---- GeGLU (tanh-approximated GELU) -------------------------------------- */

#define SL_GELU_K 0.7978845608028654f /* sqrt(2/pi), PyTorch's kBeta */
#define SL_GELU_C 0.044715f

SL_CPU_HOT static void geglu_fwd_row(float *o, const float *g, const float *u, int64_t H) {
  for (int64_t j = 0; j < H; j++) {
    float x = g[j];
    o[j] = 0.5f * x * (1.0f + tanhf(SL_GELU_K * (x + SL_GELU_C * x * x * x))) * u[j];
  }
}

/* gelu(g) = 0.5 g (1 + t), t = tanh(k (g + c g^3));
 * d gelu/dg = 0.5 (1 + t) + 0.5 g (1 - t^2) k (1 + 3 c g^2) */
SL_CPU_HOT static void geglu_bwd_row(float *dg, float *du, const float *dy, const float *g, const float *u, int64_t H) {
  for (int64_t j = 0; j < H; j++) {
    float x = g[j];
    float t = tanhf(SL_GELU_K * (x + SL_GELU_C * x * x * x));
    float d = dy[j];
    float dgelu = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * SL_GELU_K * (1.0f + 3.0f * SL_GELU_C * x * x);
    dg[j] += d * u[j] * dgelu;
    du[j] += d * (0.5f * x * (1.0f + t));
  }
}

void sl_cpu_geglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  glu_fwd(ctx, geglu_fwd_row, out, gu, N, H);
}
void sl_cpu_geglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  glu_bwd(ctx, geglu_bwd_row, dgu, dout, gu, N, H);
}

/* ---- elementwise --------------------------------------------------------- */

SL_CPU_HOT static void add_range(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void sl_cpu_add_inplace(sl_kctx *ctx, float *y, const float *x, int64_t n) {
#pragma omp parallel num_threads(nthr(ctx, n))
  {
    int64_t lo, hi;
    split(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
    add_range(y + lo, x + lo, hi - lo);
  }
}

void sl_cpu_scale_add(sl_kctx *ctx, float *y, float alpha, float beta, int64_t n) {
#pragma omp parallel for num_threads(nthr(ctx, n)) schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = fmaf(alpha, y[i], beta);
}

void sl_cpu_softcap(sl_kctx *ctx, float *y, float cap, int64_t n) {
#pragma omp parallel for num_threads(nthr(ctx, n)) schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = cap * tanhf(y[i] / cap);
}

SL_CPU_HOT static double sumsq_range(const float *x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
  return s;
}

/* Per-thread partials combined in thread order: deterministic for a given
 * thread count. */
double sl_cpu_sumsq(sl_kctx *ctx, const float *x, int64_t n) {
  double part[64] = {0};
  int nt = nthr(ctx, n);
  if (nt > 64) nt = 64;
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num();
    int64_t lo, hi;
    split(n, t, omp_get_num_threads(), &lo, &hi);
    part[t] = sumsq_range(x + lo, hi - lo);
  }
  double s = 0.0;
  for (int t = 0; t < 64; t++) s += part[t];
  return s;
}

/* ---- bf16 ---------------------------------------------------------------- */

void sl_cpu_f32_to_bf16(sl_kctx *ctx, uint16_t *out, const float *in, int64_t n) {
#pragma omp parallel for num_threads(nthr(ctx, n)) schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = sl_f32_to_bf16_scalar(in[i]);
}

void sl_cpu_bf16_to_f32(sl_kctx *ctx, float *out, const uint16_t *in, int64_t n) {
#pragma omp parallel for num_threads(nthr(ctx, n)) schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = sl_bf16_to_f32_scalar(in[i]);
}

void sl_cpu_round_bf16(sl_kctx *ctx, float *x, int64_t n) {
#pragma omp parallel for num_threads(nthr(ctx, n)) schedule(static)
  for (int64_t i = 0; i < n; i++) x[i] = sl_bf16_to_f32_scalar(sl_f32_to_bf16_scalar(x[i]));
}
