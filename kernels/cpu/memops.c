/* kernels/cpu/memops.c — the CPU backend's memory ops (op-table section
 * "memory"): backend memory is plain host memory, so alloc is sl_alloc
 * (64-byte aligned, zeroed), copies are memcpy and there is nothing to wait
 * for. The CUDA twins live in kernels/cuda/memops.cu. */
#include <string.h>

#include "base/base.h"
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
