/* kernels/cpu/ctx.c — the CPU backend context: thread count and the
 * growable scratch block (with its high-water mark) that ops borrow. */
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
    sl_fail(SL_ENOMEM, "kernels/cpu: cannot allocate the context (%zu bytes)",
            sizeof *ctx);
    return NULL;
  }
  if (threads <= 0) threads = omp_get_max_threads();
  if (threads < 1) threads = 1;
  ctx->threads = threads;
  /* OpenBLAS (pthread build) keeps its own pool; give GEMMs the same count. */
  openblas_set_num_threads(threads);
  return ctx;
}

void sl_cpu_ctx_destroy(sl_kctx *ctx) {
  if (!ctx) return;
  free(ctx->scratch);
  free(ctx->rope_tab);
  free(ctx);
}

size_t sl_cpu_ctx_scratch_bytes(const sl_kctx *ctx) {
  if (!ctx) return 0;
  size_t rope = ctx->rope_tab ? (size_t)(ctx->rope_T * ctx->rope_hd) * sizeof(float) : 0;
  return ctx->scratch_hwm + rope;
}

float *sl_cpu_scratch(sl_kctx *ctx, size_t nfloats, const char *op) {
  size_t bytes = nfloats * sizeof(float);
  if (nfloats != 0 && bytes / sizeof(float) != nfloats) {
    sl_fail(SL_ENOMEM, "kernels/cpu %s: scratch of %zu floats overflows size_t",
            op, nfloats);
    sl_log(SL_LOG_ERROR, "%s", sl_errmsg());
    return NULL;
  }
  if (bytes > ctx->scratch_hwm) ctx->scratch_hwm = bytes;
  if (bytes <= ctx->scratch_cap && ctx->scratch) return ctx->scratch;
  size_t cap = ctx->scratch_cap ? ctx->scratch_cap : 4096;
  while (cap < bytes) cap = cap > SIZE_MAX / 2 ? bytes : cap * 2;
  cap = (cap + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, cap);
  if (!p) {
    sl_fail(SL_ENOMEM,
            "kernels/cpu %s: cannot grow scratch to %zu bytes (had %zu)", op,
            cap, ctx->scratch_cap);
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
