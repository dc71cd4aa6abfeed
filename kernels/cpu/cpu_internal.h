/* kernels/cpu/cpu_internal.h — what the CPU backend's op files share: the
 * context struct (threads, growable scratch), the scratch accessor, the
 * element-count threshold below which loops stay single-threaded, and a
 * branch-free, vectorizable expf. Internal to kernels/cpu. */
#ifndef SL_CPU_INTERNAL_H
#define SL_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

struct sl_kctx {
  sl_bf16_state bf;        /* first: the bf16-compute layer's (kernels/bf16.h) */
  int threads;             /* OpenMP threads for elementwise/row loops (>= 1) */
  void *scratch;           /* growable scratch block, 64-byte aligned */
  size_t scratch_cap;      /* bytes allocated in scratch */
  size_t scratch_hwm;      /* high-water mark of bytes requested */
  float *rope_tab;         /* (rope_T, rope_hd/2, 2) cos,sin cache for rope, then
                              the (rope_hd/2) inv_freq it was built for */
  int64_t rope_T, rope_hd; /* shape the cache was built for (0 = none) */
  float *stage[3];         /* bf16-rounded copies of GEMM operands (bf16.c) */
  size_t stage_cap[3];     /* floats allocated in stage[i] */
  double *scal;            /* the scalar slots (nscal; memops.c) */
  int nscal;
};

/* Hot row kernels get an AVX2+FMA clone picked at load time (ifunc); the
 * default build targets baseline x86-64. Off under sanitizers. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) &&               \
    !defined(SL_CPU_NO_CLONES)
#define SL_CPU_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SL_CPU_HOT
#endif

/* Loops over fewer elements than this run on the calling thread only. */
#define SL_CPU_PAR_MIN 32768

/* Returns scratch of at least nfloats floats (contents undefined), valid until
 * the next call on this ctx. NULL on allocation failure: the message is set
 * (naming op) and logged; the op then poisons its outputs with NaN. */
float *sl_cpu_scratch(sl_kctx *ctx, size_t nfloats, const char *op);
/* Row-major sgemm C (M, N) = alpha op(A) op(B) + beta C, op = transpose
 * when ta / tb. Threading policy lives here (see ctx.c). */
void sl_cpu_sgemm(sl_kctx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* bf16 compute: x[0..n) rounded to bf16 in place (basic.c); the rows x
 * (rows, cols) of row stride ld likewise (bf16.c). */
void sl_cpu_round_bf16(sl_kctx *ctx, float *x, int64_t n);
void sl_cpu_round_rows(sl_kctx *ctx, float *x, int64_t rows, int64_t cols, int64_t ld);
/* Fills x[0..n) with NaN (used when an op cannot run). */
void sl_cpu_poison(float *x, int64_t n);

/* The tiled LM head + cross-entropy loops (lmhead_ce.c) over w (V, C) whose
 * row 0 is vocabulary id voff (0 for the whole head; a rank's first id for
 * the loss-parallel head, vocab_parallel.c). Forward writes lse and losses
 * when st is NULL (lmhead_ce_fwd), else the slice statistics lmax (N) and
 * st (N, 2) of lmhead_vp_fwd. Backward is lmhead_ce_bwd with targets taken
 * relative to voff (a target outside the slice only has no one-hot term).
 * op names the caller in a scratch-failure message. */
void sl_cpu_ce_fwd_core(sl_kctx *ctx, const float *x, const float *w, const int32_t *targets, int64_t N, int64_t C,
                        int64_t V, int64_t voff, float *losses, float *lse, float *lmax, float *st, const char *op,
                        float softcap);
void sl_cpu_ce_bwd_core(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                        const float *lse, float scale, int64_t N, int64_t C, int64_t V, int64_t voff, const char *op,
                        float softcap);

/* expf with ~1-2 ulp error, no branches, vectorizable (Cephes polynomial,
 * Cody-Waite reduction). Inputs are clamped to [-87.3, 88.7]: results
 * below 2^-126 are returned as ~1.2e-38, never denormal or 0, never inf. */
static inline float sl_cpu_expf(float x) {
  x = x < -87.33654f ? -87.33654f : x;
  x = x > 88.72283f ? 88.72283f : x;
  /* n = rint(x / ln2) via the 1.5*2^23 trick (default rounding mode) */
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * (r * r) + r + 1.0f;
  int32_t e = ((int32_t)n + 127) << 23;
  float s;
  memcpy(&s, &e, sizeof s);
  return y * s;
}

#endif /* SL_CPU_INTERNAL_H */
