/* kernels/cpu/adamw.c — the CPU AdamW op (sl_cpu_adamw) and its fused
 * variant that also writes a bf16 copy of the updated parameters
 * (sl_cpu_adamw_bf16, used by offload/cpu_adam.c).
 *
 * Semantics: PyTorch 1.13 torch.optim.AdamW, single-tensor path, with the
 * exact operation order of its ATen kernels (checked against torch run with
 * ATEN_CPU_CAPABILITY=default, where it is bit-identical):
 *   g   = g * grad_scale
 *   p   = p * (float)(1 - lr*wd)                      param.mul_(1 - lr*wd)
 *   m   = m * b1 + (float)(1-b1) * g                  exp_avg.mul_(b1).add_(g, alpha=1-b1)
 *   v   = v * b2 + ((float)(1-b2) * g) * g            exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
 *   den = sqrt(v) / (float)sqrt(bc2) + eps            (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
 *   p   = p + ((float)(-lr/bc1) * m) / den            param.addcdiv_(m, den, value=-step_size)
 * with bc1 = 1 - b1^step, bc2 = 1 - b2^step and every scalar computed in
 * double from the float arguments, then rounded to float once (what ATen does
 * with a Python float applied to a float32 tensor).
 *
 * Every SIMD path (AVX-512F, AVX2, scalar; chosen at run time) performs the
 * same IEEE single-precision mul/add/div/sqrt in the same order, without FMA
 * contraction, so results are bit-identical to a plain scalar C loop whatever
 * width runs. Threads: OpenMP, each thread one contiguous, 64-byte aligned
 * range (one streaming sweep per thread; the op is memory-bound).
 */
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "kernels/cpu/cpu_ops.h"

/* Prototype of the fused entry point (exported to offload/; the lead may move
 * it into cpu_ops.h). */
void sl_cpu_adamw_bf16(sl_kctx *ctx, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                       float b2, float eps, float wd, int64_t step, float grad_scale, uint16_t *p_bf16);

/* The float scalars of one step, derived once. */
typedef struct {
  float gs;   /* grad_scale */
  float wdc;  /* 1 - lr*wd */
  float b1;   /* beta1 */
  float omb1; /* 1 - beta1 */
  float b2;   /* beta2 */
  float omb2; /* 1 - beta2 */
  float bc2s; /* sqrt(1 - beta2^step) */
  float eps;
  float nss; /* -lr / (1 - beta1^step) */
} adam_scalars;

static adam_scalars adam_make_scalars(float lr, float b1, float b2, float eps, float wd, int64_t step,
                                      float grad_scale) {
  adam_scalars s;
  double st = (double)step;
  double bc1 = 1.0 - pow((double)b1, st);
  double bc2 = 1.0 - pow((double)b2, st);
  s.gs = grad_scale;
  s.wdc = (float)(1.0 - (double)lr * (double)wd);
  s.b1 = b1;
  s.omb1 = (float)(1.0 - (double)b1);
  s.b2 = b2;
  s.omb2 = (float)(1.0 - (double)b2);
  s.bc2s = (float)sqrt(bc2);
  s.eps = eps;
  s.nss = (float)(-((double)lr / bc1));
  return s;
}

/* One element, the reference order. Also the tail of the SIMD paths. */
static inline void adam_one(const adam_scalars *s, float *p, float *m, float *v, const float *g, uint16_t *pb,
                            int64_t i) {
  float gi = g[i] * s->gs;
  float pi = p[i] * s->wdc;
  float mi = m[i] * s->b1 + s->omb1 * gi;
  float vi = v[i] * s->b2 + (s->omb2 * gi) * gi;
  float den = sqrtf(vi) / s->bc2s + s->eps;
  pi = pi + (s->nss * mi) / den;
  p[i] = pi;
  m[i] = mi;
  v[i] = vi;
  if (pb) pb[i] = sl_f32_to_bf16_scalar(pi);
}

static void adam_range_scalar(const adam_scalars *s, float *p, float *m, float *v, const float *g, uint16_t *pb,
                              int64_t n) {
  for (int64_t i = 0; i < n; i++) adam_one(s, p, m, v, g, pb, i);
}

/* ---- AVX2 ------------------------------------------------------------------ */
__attribute__((target("avx2"))) static inline __m128i bf16_round8_avx2(__m256 x) {
  /* round-to-nearest-even to the upper 16 bits; NaN -> quiet NaN (| 0x40) */
  __m256i u = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  __m256i qn = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  r = _mm256_blendv_epi8(r, qn, nan);
  r = _mm256_srli_epi32(r, 16);
  __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
  return _mm_packus_epi32(lo, hi);
}

__attribute__((target("avx2"))) static void adam_range_avx2(const adam_scalars *s, float *p, float *m, float *v,
                                                            const float *g, uint16_t *pb, int64_t n) {
  const __m256 gs = _mm256_set1_ps(s->gs), wdc = _mm256_set1_ps(s->wdc);
  const __m256 b1 = _mm256_set1_ps(s->b1), omb1 = _mm256_set1_ps(s->omb1);
  const __m256 b2 = _mm256_set1_ps(s->b2), omb2 = _mm256_set1_ps(s->omb2);
  const __m256 bc2s = _mm256_set1_ps(s->bc2s), eps = _mm256_set1_ps(s->eps);
  const __m256 nss = _mm256_set1_ps(s->nss);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), gs);
    __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), wdc);
    __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(omb1, gi));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2), _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
    __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2s), eps);
    pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(nss, mi), den));
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    if (pb) _mm_storeu_si128((__m128i *)(pb + i), bf16_round8_avx2(pi));
  }
  for (; i < n; i++) adam_one(s, p, m, v, g, pb, i);
}

/* ---- AVX-512F ---------------------------------------------------------------- */
__attribute__((target("avx512f"))) static inline __m256i bf16_round16_avx512(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
  r = _mm512_srli_epi32(r, 16);
  return _mm512_cvtepi32_epi16(r); /* values < 65536: plain truncation */
}

__attribute__((target("avx512f"))) static void adam_range_avx512(const adam_scalars *s, float *p, float *m, float *v,
                                                                 const float *g, uint16_t *pb, int64_t n) {
  const __m512 gs = _mm512_set1_ps(s->gs), wdc = _mm512_set1_ps(s->wdc);
  const __m512 b1 = _mm512_set1_ps(s->b1), omb1 = _mm512_set1_ps(s->omb1);
  const __m512 b2 = _mm512_set1_ps(s->b2), omb2 = _mm512_set1_ps(s->omb2);
  const __m512 bc2s = _mm512_set1_ps(s->bc2s), eps = _mm512_set1_ps(s->eps);
  const __m512 nss = _mm512_set1_ps(s->nss);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 gi = _mm512_mul_ps(_mm512_loadu_ps(g + i), gs);
    __m512 pi = _mm512_mul_ps(_mm512_loadu_ps(p + i), wdc);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), b1), _mm512_mul_ps(omb1, gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), b2), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2s), eps);
    pi = _mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(nss, mi), den));
    _mm512_storeu_ps(p + i, pi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    if (pb) _mm256_storeu_si256((__m256i *)(pb + i), bf16_round16_avx512(pi));
  }
  for (; i < n; i++) adam_one(s, p, m, v, g, pb, i);
}

/* ---- dispatch ---------------------------------------------------------------- */
typedef void (*adam_range_fn)(const adam_scalars *, float *, float *, float *, const float *, uint16_t *, int64_t);

/* SL_ADAMW_ISA=scalar|avx2|avx512 caps the path (tests, benchmarks). */
static adam_range_fn adam_pick(void) {
  static adam_range_fn chosen; /* benign race: every thread computes the same */
  adam_range_fn f = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
  if (f) return f;
  __builtin_cpu_init();
  int cap = 2;
  const char *e = sl_env_str("SL_ADAMW_ISA");
  if (e && strcmp(e, "scalar") == 0) cap = 0;
  else if (e && strcmp(e, "avx2") == 0) cap = 1;
  if (cap >= 2 && __builtin_cpu_supports("avx512f")) f = adam_range_avx512;
  else if (cap >= 1 && __builtin_cpu_supports("avx2")) f = adam_range_avx2;
  else f = adam_range_scalar;
  __atomic_store_n(&chosen, f, __ATOMIC_RELEASE);
  return f;
}

static void adam_run(float *p, float *m, float *v, const float *g, int64_t n, const adam_scalars *s, uint16_t *pb) {
  if (n <= 0) return;
  adam_range_fn f = adam_pick();
  int nt = omp_get_max_threads();
  /* below ~64K elements (1.8 MB moved) the fork/join costs more than it saves */
  if (nt <= 1 || n < 65536 || omp_in_parallel()) {
    f(s, p, m, v, g, pb, n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    /* contiguous ranges, boundaries on 16-element (64-byte) multiples */
    int64_t blocks = (n + 15) / 16;
    int64_t b0 = blocks * t / T, b1 = blocks * (t + 1) / T;
    int64_t i0 = b0 * 16, i1 = b1 * 16 < n ? b1 * 16 : n;
    if (i1 > i0) f(s, p + i0, m + i0, v + i0, g + i0, pb ? pb + i0 : NULL, i1 - i0);
  }
}

void sl_cpu_adamw(sl_kctx *ctx, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2,
                  float eps, float wd, int64_t step, float grad_scale) {
  (void)ctx;
  adam_scalars s = adam_make_scalars(lr, b1, b2, eps, wd, step, grad_scale);
  adam_run(p, m, v, g, n, &s, NULL);
}

void sl_cpu_adamw_bf16(sl_kctx *ctx, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                       float b2, float eps, float wd, int64_t step, float grad_scale, uint16_t *p_bf16) {
  (void)ctx;
  adam_scalars s = adam_make_scalars(lr, b1, b2, eps, wd, step, grad_scale);
  adam_run(p, m, v, g, n, &s, p_bf16);
}
