/* kernels/cpu/memops.c — the CPU backend's memory ops (op-table section
 * "memory"): backend memory is plain host memory, so alloc is sl_alloc
 * (64-byte aligned, zeroed), copies are memcpy and there is nothing to wait
 * for. The CUDA twins live in kernels/cuda/memops.cu. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void *sl_cpu_alloc(sl_kctx *ctx, size_t bytes) {
  (void)ctx;
  return sl_alloc(bytes, "cpu ops alloc");
}

void sl_cpu_free(sl_kctx *ctx, void *p) {
  (void)ctx;
  sl_free(p);
}

void sl_cpu_zero(sl_kctx *ctx, void *p, size_t bytes) {
  (void)ctx;
  if (bytes) memset(p, 0, bytes);
}

void sl_cpu_copy(sl_kctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  if (bytes && dst != src) memcpy(dst, src, bytes);
}

void sl_cpu_upload(sl_kctx *ctx, void *dst, const void *host_src, size_t bytes) {
  sl_cpu_copy(ctx, dst, host_src, bytes);
}

void sl_cpu_download(sl_kctx *ctx, void *host_dst, const void *src, size_t bytes) {
  sl_cpu_copy(ctx, host_dst, src, bytes);
}

/* Serial, in index order: deterministic and independent of the thread
 * count. Used for scalars (loss sums, norms of small tensors), not for
 * bandwidth-bound work. */
double sl_cpu_sum(sl_kctx *ctx, const float *x, int64_t n) {
  (void)ctx;
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += (double)x[i];
  return s;
}

int sl_cpu_sync(sl_kctx *ctx) {
  (void)ctx;
  return SL_OK;
}

int sl_cpu_is_device(void) { return 0; }

void *sl_cpu_stream(sl_kctx *ctx) {
  (void)ctx;
  return 0;
}

/* The scalar slots are host doubles: each op is the synchronous sum / sumsq
 * added at once, the same arithmetic in the same order as adding their
 * results on the caller's side. */
int sl_cpu_scalars_reserve(sl_kctx *ctx, int n) {
  if (n < 0) return sl_fail(SL_EINPUT, "kernels/cpu: scalars_reserve: %d slots; expected >= 0", n);
  if (n <= ctx->nscal) return SL_OK;
  double *p = realloc(ctx->scal, sizeof *p * (size_t)n);
  if (!p) return sl_fail(SL_ENOMEM, "kernels/cpu: out of memory for %d scalar slots", n);
  for (int i = ctx->nscal; i < n; i++) p[i] = 0.0;
  ctx->scal = p;
  ctx->nscal = n;
  return SL_OK;
}

static double *slot_at(sl_kctx *ctx, int slot, const char *op) {
  if (slot >= 0 && slot < ctx->nscal) return &ctx->scal[slot];
  sl_fail(SL_EINTERNAL, "kernels/cpu: %s: slot %d outside the %d reserved", op, slot, ctx->nscal);
  sl_log(SL_LOG_ERROR, "%s", sl_errmsg());
  return NULL;
}

void sl_cpu_scalar_acc(sl_kctx *ctx, int slot, const float *x, int64_t n, int square) {
  double *s = slot_at(ctx, slot, "scalar_acc");
  if (s) *s += square ? sl_cpu_sumsq(ctx, x, n) : sl_cpu_sum(ctx, x, n);
}

void sl_cpu_scalar_add(sl_kctx *ctx, int slot, double v) {
  double *s = slot_at(ctx, slot, "scalar_add");
  if (s) *s += v;
}

int sl_cpu_scalars_fetch(sl_kctx *ctx, double *host, int n) {
  if (n < 0 || n > ctx->nscal)
    return sl_fail(SL_EINTERNAL, "kernels/cpu: scalars_fetch of %d slots; %d reserved", n, ctx->nscal);
  for (int i = 0; i < n; i++) {
    host[i] = ctx->scal[i];
    ctx->scal[i] = 0.0;
  }
  return SL_OK;
}

void sl_cpu_dev_stats(sl_kctx *ctx, sl_dev_stats *out) {
  (void)ctx;
  memset(out, 0, sizeof *out);
}
