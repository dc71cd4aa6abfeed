/* kernels/cuda/optim.cu — AdamW (PyTorch single-tensor semantics, bias
 * corrections computed in double on the host) and sumsq: memops.cu's
 * two-pass reduction with a fixed grid (SL_CUDA_SUMSQ_BLOCKS x 256 threads)
 * and fixed summation order, accumulated in double, so the result is
 * bit-reproducible run to run and independent of the device's SM count. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/memops.cuh"
#include "kernels/cuda/optim.cuh"

static __global__ void adamw_kernel(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                                    float b2, float eps, float wd, float step_size, float bc2_sqrt, float grad_scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float gi = g[i] * grad_scale;
    float pi = p[i] * (1.0f - lr * wd);
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = pi - step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

void sl_cuda_adamw(sl_kctx *ctx, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2,
                   float eps, float wd, int64_t step, float grad_scale) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0 && step >= 1);
  if (n == 0) return;
  double bc1 = 1.0 - pow((double)b1, (double)step);
  double bc2 = 1.0 - pow((double)b2, (double)step);
  float step_size = (float)((double)lr / bc1);
  float bc2_sqrt = (float)sqrt(bc2);
  adamw_kernel<<<sl_cuda_blocks(n, 256), 256, 0, ctx->stream>>>(p, m, v, g, n, lr, b1, b2, eps, wd, step_size, bc2_sqrt,
                                                                grad_scale);
  CUDA_LAUNCH_CHECK(ctx);
}

/* The reduction is memops.cu's (sl_cuda_reduce_to), shared with sum. */
double sl_cuda_sumsq(sl_kctx *ctx, const float *x, int64_t n) { return sl_cuda_reduce_host(ctx, x, n, 1, "sumsq"); }
