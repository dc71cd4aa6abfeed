/* kernels/cpu/ctx.c — the CPU backend context: thread count, the growable
 * scratch block (with its high-water mark) that ops borrow, and the GEMM
 * threading policy (sl_cpu_sgemm): one OpenMP pool for everything, OpenBLAS
 * kept single-threaded. A context is used by one caller thread at a time. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include <cblas.h>

#include "base/base.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

sl_kctx *sl_cpu_ctx_create(int threads) {
  sl_kctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) {
    sl_fail(SL_ENOMEM, "kernels/cpu: cannot allocate the context (%zu bytes)", sizeof *ctx);
    return NULL;
  }
  if (threads <= 0) threads = omp_get_max_threads();
  if (threads < 1) threads = 1;
  ctx->threads = threads;
  ctx->bf = sl_bf16_state_init(&sl_cpu_bf16_impl);
  /* OpenBLAS (pthread build) keeps its own pool; give GEMMs the same count. */
  /* One thread pool only: OpenBLAS (pthread build) runs single-threaded and
   * GEMMs are split across OpenMP threads by sl_cpu_sgemm. Two pools on the
   * same cores (OpenBLAS workers spinning while OpenMP threads run and vice
   * versa) measured slower on 2 cores. Process-wide setting. */
  openblas_set_num_threads(1);
  return ctx;
}

void sl_cpu_ctx_destroy(sl_kctx *ctx) {
  if (!ctx) return;
  free(ctx->scratch);
  free(ctx->rope_tab);
  for (int i = 0; i < 3; i++) free(ctx->stage[i]);
  free(ctx->scal);
  free(ctx);
}

size_t sl_cpu_ctx_scratch_bytes(const sl_kctx *ctx) {
  if (!ctx) return 0;
  size_t rope = ctx->rope_tab ? (size_t)(ctx->rope_T * ctx->rope_hd) * sizeof(float) : 0;
  size_t stage = 0;
  for (int i = 0; i < 3; i++) stage += ctx->stage_cap[i] * sizeof(float);
  return ctx->scratch_hwm + rope + stage;
}

float *sl_cpu_scratch(sl_kctx *ctx, size_t nfloats, const char *op) {
  size_t bytes = nfloats * sizeof(float);
  if (nfloats != 0 && bytes / sizeof(float) != nfloats) {
    sl_fail(SL_ENOMEM, "kernels/cpu %s: scratch of %zu floats overflows size_t", op, nfloats);
    sl_log(SL_LOG_ERROR, "%s", sl_errmsg());
    return NULL;
  }
  if (bytes > ctx->scratch_hwm) ctx->scratch_hwm = bytes;
  if (bytes <= ctx->scratch_cap && ctx->scratch) return ctx->scratch;
  /* Exact size (64-byte multiple): a training step repeats the same
   * requests, so after the first step nothing grows and the bytes held equal
   * the reported high-water mark. */
  size_t cap = bytes ? (bytes + 63) & ~(size_t)63 : 64;
  void *p = aligned_alloc(64, cap);
  if (!p) {
    sl_fail(SL_ENOMEM, "kernels/cpu %s: cannot grow scratch to %zu bytes (had %zu)", op, cap, ctx->scratch_cap);
    sl_log(SL_LOG_ERROR, "%s", sl_errmsg());
    return NULL;
  }
  free(ctx->scratch);
  ctx->scratch = p;
  ctx->scratch_cap = cap;
  return p;
}

void sl_cpu_poison(float *x, int64_t n) {
  if (!x) return;
  for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

/* Row-major C (M, N) = alpha op(A) op(B) + beta C. OpenMP threads each run
 * a single-threaded sgemm on a slab of C, split along the longer of M and N
 * at multiples of 16; products under ~4 MFLOP stay on the calling thread. */
void sl_cpu_sgemm(sl_kctx *ctx, int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  int nt = ctx->threads;
  if ((double)M * (double)N * (double)K < 4e6 || nt < 2) nt = 1;
  if (nt > 1) {
    int along_m = M >= N;
    int64_t L = along_m ? M : N;
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), n = omp_get_num_threads();
      int64_t lo = (L * t / n) & ~(int64_t)15;
      int64_t hi = t == n - 1 ? L : (L * (t + 1) / n) & ~(int64_t)15;
      if (hi > lo) {
        if (along_m)
          cblas_sgemm(CblasRowMajor, TA, TB, (int)(hi - lo), (int)N, (int)K, alpha, ta ? A + lo : A + lo * lda,
                      (int)lda, B, (int)ldb, beta, C + lo * ldc, (int)ldc);
        else
          cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)(hi - lo), (int)K, alpha, A, (int)lda,
                      tb ? B + lo * ldb : B + lo, (int)ldb, beta, C + lo, (int)ldc);
      }
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
