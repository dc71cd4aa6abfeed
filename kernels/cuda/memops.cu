/* kernels/cuda/memops.cu — the op table's memory section on CUDA: device
 * allocation (cudaMalloc, zeroed on the stream), stream-ordered zero / copy,
 * host<->device transfers that return once the host data is consumed or
 * delivered, the stream wait, and a deterministic sum (two passes with a
 * fixed grid and fixed summation order, in double, like sumsq in optim.cu;
 * it reuses the context's sumsq buffers, which are free between ops).
 *
 * alloc reports failure with sl_fail only (no sticky context status): an
 * out-of-memory is something a caller may handle, not a broken stream. */
#include <math.h>

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
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e == cudaSuccess) e = cudaMemsetAsync(p, 0, bytes ? bytes : 1, ctx->stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* an allocation failure is not sticky */
    if (p) cudaFree(p);
    sl_fail(e == cudaErrorMemoryAllocation ? SL_ENOMEM : SL_EINTERNAL,
            "cuda: alloc of %zu bytes of device memory failed: %s", bytes, cudaGetErrorString(e));
    return NULL;
  }
  return p;
}

void sl_cuda_mem_free(sl_kctx *ctx, void *p) {
  if (!p) return;
  if (ctx) (void)cudaStreamSynchronize(ctx->stream);
  cudaError_t e = cudaFree(p);
  if (e != cudaSuccess && ctx)
    sl_cuda_fail(ctx, SL_EINTERNAL, "free: cudaFree(%p) failed: %s", p, cudaGetErrorString(e));
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
  CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream));
}

void sl_cuda_mem_download(sl_kctx *ctx, void *host_dst, const void *src, size_t bytes) {
  SL_CUDA_BEGIN(ctx);
  if (!bytes) return;
  SL_CUDA_REQUIRE(ctx, host_dst != NULL && src != NULL);
  CUDA_CHECK(ctx, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
  CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream));
}

/* Pass 1: block b sums elements b*256+tid, stepping by the whole grid. */
static __global__ void sum_pass1(double *part, const float *x, int64_t n) {
  __shared__ double sh[33];
  double acc = 0.0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    acc += (double)x[i];
  acc = sl_block_sum(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}
/* Pass 2: one block of SL_CUDA_SUMSQ_BLOCKS threads. */
static __global__ void sum_pass2(double *out, const double *part) {
  __shared__ double sh[33];
  double v = sl_block_sum(part[threadIdx.x], sh);
  if (threadIdx.x == 0) *out = v;
}

double sl_cuda_mem_sum(sl_kctx *ctx, const float *x, int64_t n) {
  SL_CUDA_BEGIN(ctx, NAN);
  if (n <= 0) return 0.0;
  if (!x) {
    sl_cuda_fail(ctx, SL_EINPUT, "sum: x is NULL for %lld elements", (long long)n);
    return NAN;
  }
  sum_pass1<<<SL_CUDA_SUMSQ_BLOCKS, 256, 0, ctx->stream>>>(ctx->sumsq_part, x, n);
  CUDA_LAUNCH_CHECK(ctx, NAN);
  sum_pass2<<<1, SL_CUDA_SUMSQ_BLOCKS, 0, ctx->stream>>>(ctx->sumsq_dev, ctx->sumsq_part);
  CUDA_LAUNCH_CHECK(ctx, NAN);
  CUDA_CHECK(ctx, cudaMemcpyAsync(ctx->sumsq_host, ctx->sumsq_dev, sizeof(double), cudaMemcpyDeviceToHost, ctx->stream),
             NAN);
  CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream), NAN);
  return *ctx->sumsq_host;
}

int sl_cuda_mem_sync(sl_kctx *ctx) { return sl_cuda_sync(ctx); }

int sl_cuda_mem_is_device(void) { return 1; }

int sl_cuda_mem_info(sl_kctx *ctx, size_t *free_bytes, size_t *total_bytes) {
  CUDA_CHECK(ctx, cudaMemGetInfo(free_bytes, total_bytes), SL_EINTERNAL);
  return SL_OK;
}
