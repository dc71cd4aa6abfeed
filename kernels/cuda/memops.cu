/* kernels/cuda/memops.cu — the op table's memory section on CUDA: device
 * allocation (cudaMalloc, zeroed on the stream), stream-ordered zero / copy,
 * host<->device transfers that return once the host data is consumed or
 * delivered, the stream wait, the deterministic reduction of sum and sumsq
 * (two passes with a fixed grid and fixed summation order, in double, in
 * the context's sumsq buffers, which are free between ops) and the scalar
 * slots (queued reductions into device doubles, fetched together).
 *
 * alloc reports failure with sl_fail only (no sticky context status): an
 * out-of-memory is something a caller may handle, not a broken stream. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/memops.cuh"

void *sl_cuda_mem_alloc(sl_kctx *ctx, size_t bytes) {
  if (!ctx) {
    sl_fail(SL_EINPUT, "cuda: alloc(%zu bytes): no context", bytes);
    return NULL;
  }
  if (ctx->status) {
    sl_fail(ctx->status, "cuda: alloc(%zu bytes): the context failed earlier: %s", bytes, ctx->msg);
    return NULL;
  }
  void *p = NULL;
  cudaError_t e = sl_cuda_dmalloc(ctx, &p, bytes ? bytes : 1);
  if (e == cudaSuccess) e = cudaMemsetAsync(p, 0, bytes ? bytes : 1, ctx->stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* an allocation failure is not sticky */
    if (p) sl_cuda_dfree(ctx, p);
    sl_fail(e == cudaErrorMemoryAllocation ? SL_ENOMEM : SL_EINTERNAL,
            "cuda: alloc of %zu bytes of device memory failed: %s", bytes, cudaGetErrorString(e));
    return NULL;
  }
  return p;
}

void sl_cuda_mem_free(sl_kctx *ctx, void *p) {
  if (!p) return;
  if (!ctx) {
    (void)cudaFree(p);
    return;
  }
  (void)sl_cuda_wait(ctx);
  cudaError_t e = sl_cuda_dfree(ctx, p);
  if (e != cudaSuccess) sl_cuda_fail(ctx, SL_EINTERNAL, "free: cudaFree(%p) failed: %s", p, cudaGetErrorString(e));
}

void sl_cuda_mem_zero(sl_kctx *ctx, void *p, size_t bytes) {
  SL_CUDA_BEGIN(ctx);
  if (!bytes) return;
  SL_CUDA_REQUIRE(ctx, p != NULL);
  CUDA_CHECK(ctx, cudaMemsetAsync(p, 0, bytes, ctx->stream));
}

void sl_cuda_mem_copy(sl_kctx *ctx, void *dst, const void *src, size_t bytes) {
  SL_CUDA_BEGIN(ctx);
  if (!bytes || dst == src) return;
  SL_CUDA_REQUIRE(ctx, dst != NULL && src != NULL);
  CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
}

void sl_cuda_mem_upload(sl_kctx *ctx, void *dst, const void *host_src, size_t bytes) {
  SL_CUDA_BEGIN(ctx);
  if (!bytes) return;
  SL_CUDA_REQUIRE(ctx, dst != NULL && host_src != NULL);
  CUDA_CHECK(ctx, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, ctx->stream));
  ctx->dev.uploads++;
  CUDA_CHECK(ctx, sl_cuda_wait(ctx));
}

void sl_cuda_mem_download(sl_kctx *ctx, void *host_dst, const void *src, size_t bytes) {
  SL_CUDA_BEGIN(ctx);
  if (!bytes) return;
  SL_CUDA_REQUIRE(ctx, host_dst != NULL && src != NULL);
  CUDA_CHECK(ctx, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
  ctx->dev.downloads++;
  CUDA_CHECK(ctx, sl_cuda_wait(ctx));
}

/* Pass 1: block b sums elements b*256+tid (or their squares), stepping by the whole grid. */
template <int SQ> static __global__ void reduce_pass1(double *part, const float *x, int64_t n) {
  __shared__ double sh[33];
  double acc = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    double xi = (double)x[i];
    if (SQ) acc += xi * xi;
    else acc += xi;
  }
  acc = sl_block_sum(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}
/* Pass 2: one block of SL_CUDA_SUMSQ_BLOCKS threads. */
static __global__ void reduce_pass2(double *out, const double *part, int add) {
  __shared__ double sh[33];
  double v = sl_block_sum(part[threadIdx.x], sh);
  if (threadIdx.x == 0) *out = add ? *out + v : v;
}

void sl_cuda_reduce_to(sl_kctx *ctx, double *dst, const float *x, int64_t n, int square, int add) {
  if (square) reduce_pass1<1><<<SL_CUDA_SUMSQ_BLOCKS, 256, 0, ctx->stream>>>(ctx->sumsq_part, x, n);
  else reduce_pass1<0><<<SL_CUDA_SUMSQ_BLOCKS, 256, 0, ctx->stream>>>(ctx->sumsq_part, x, n);
  CUDA_LAUNCH_CHECK(ctx);
  reduce_pass2<<<1, SL_CUDA_SUMSQ_BLOCKS, 0, ctx->stream>>>(dst, ctx->sumsq_part, add);
  CUDA_LAUNCH_CHECK(ctx);
}

/* sum / sumsq: the reduction into the context's one double, brought to the host. */
double sl_cuda_reduce_host(sl_kctx *ctx, const float *x, int64_t n, int square, const char *op) {
  SL_CUDA_BEGIN(ctx, NAN);
  if (n <= 0) return 0.0;
  if (!x) {
    sl_cuda_fail(ctx, SL_EINPUT, "%s: x is NULL for %lld elements", op, (long long)n);
    return NAN;
  }
  sl_cuda_reduce_to(ctx, ctx->sumsq_dev, x, n, square, 0);
  if (ctx->status) return NAN;
  CUDA_CHECK(ctx, cudaMemcpyAsync(ctx->sumsq_host, ctx->sumsq_dev, sizeof(double), cudaMemcpyDeviceToHost, ctx->stream),
             NAN);
  ctx->dev.downloads++;
  CUDA_CHECK(ctx, sl_cuda_wait(ctx), NAN);
  return *ctx->sumsq_host;
}

double sl_cuda_mem_sum(sl_kctx *ctx, const float *x, int64_t n) { return sl_cuda_reduce_host(ctx, x, n, 0, "sum"); }

/* ---- the scalar slots: device doubles, fetched together ---------------------- */
int sl_cuda_scalars_reserve(sl_kctx *ctx, int n) {
  SL_CUDA_BEGIN(ctx, ctx ? ctx->status : SL_EINPUT);
  if (n < 0) return sl_fail(SL_EINPUT, "cuda: scalars_reserve: %d slots; expected >= 0", n);
  if (n <= ctx->nscal) return SL_OK;
  double *p = NULL;
  cudaError_t e = sl_cuda_dmalloc(ctx, (void **)&p, sizeof(double) * (size_t)n);
  if (e == cudaSuccess) e = cudaMemsetAsync(p, 0, sizeof(double) * (size_t)n, ctx->stream);
  if (e == cudaSuccess && ctx->scal)
    e = cudaMemcpyAsync(p, ctx->scal, sizeof(double) * (size_t)ctx->nscal, cudaMemcpyDeviceToDevice, ctx->stream);
  if (e == cudaSuccess && ctx->scal) e = sl_cuda_wait(ctx);
  if (e == cudaSuccess && ctx->scal) e = sl_cuda_dfree(ctx, ctx->scal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (p) (void)sl_cuda_dfree(ctx, p);
    return sl_fail(e == cudaErrorMemoryAllocation ? SL_ENOMEM : SL_EINTERNAL, "cuda: %d scalar slots: %s", n,
                   cudaGetErrorString(e));
  }
  ctx->scal = p;
  ctx->nscal = n;
  return SL_OK;
}

static __global__ void scalar_add_kernel(double *s, double v) { *s += v; }

void sl_cuda_scalar_acc(sl_kctx *ctx, int slot, const float *x, int64_t n, int square) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, slot >= 0 && slot < ctx->nscal);
  if (n <= 0) return;
  SL_CUDA_REQUIRE(ctx, x != NULL);
  sl_cuda_reduce_to(ctx, ctx->scal + slot, x, n, square, 1);
}

void sl_cuda_scalar_add(sl_kctx *ctx, int slot, double v) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, slot >= 0 && slot < ctx->nscal);
  scalar_add_kernel<<<1, 1, 0, ctx->stream>>>(ctx->scal + slot, v);
  CUDA_LAUNCH_CHECK(ctx);
}

int sl_cuda_scalars_fetch(sl_kctx *ctx, double *host, int n) {
  SL_CUDA_BEGIN(ctx, ctx ? ctx->status : SL_EINPUT);
  if (n < 0 || n > ctx->nscal)
    return sl_cuda_fail(ctx, SL_EINPUT, "scalars_fetch: %d slots; %d reserved", n, ctx->nscal);
  if (n == 0) return SL_OK;
  size_t bytes = sizeof(double) * (size_t)n;
  CUDA_CHECK(ctx, cudaMemcpyAsync(host, ctx->scal, bytes, cudaMemcpyDeviceToHost, ctx->stream), ctx->status);
  CUDA_CHECK(ctx, cudaMemsetAsync(ctx->scal, 0, bytes, ctx->stream), ctx->status);
  ctx->dev.downloads++;
  return sl_cuda_sync(ctx); /* the one wait */
}

void sl_cuda_dev_stats(sl_kctx *ctx, sl_dev_stats *out) {
  if (ctx) *out = ctx->dev;
  else memset(out, 0, sizeof *out);
}

int sl_cuda_mem_sync(sl_kctx *ctx) { return sl_cuda_sync(ctx); }

int sl_cuda_mem_is_device(void) { return 1; }

int sl_cuda_mem_info(sl_kctx *ctx, size_t *free_bytes, size_t *total_bytes) {
  CUDA_CHECK(ctx, cudaMemGetInfo(free_bytes, total_bytes), SL_EINTERNAL);
  return SL_OK;
}
