/* kernels/cuda/rmsnorm.cu — RMSNorm in fp32. Forward and the dinp part of
 * backward use one 256-thread block per row (block reduction in fixed order).
 * dw is a deterministic two-pass column reduction: pass 1 gives each of P row
 * groups a partial (P, C) in scratch, pass 2 adds them in order. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rmsnorm.cuh"

#define RT 256
#define ROWS_PER_PART 64 /* rows summed by one pass-1 partial of dw */

static __global__ void rmsnorm_fwd_kernel(float *out, float *rstd, const float *inp, const float *w, int64_t C,
                                          int64_t ld, float eps) {
  __shared__ float sh[33];
  int64_t r = blockIdx.x;
  const float *x = inp + r * ld;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  ss = sl_block_sum(ss, sh);
  float rs = 1.0f / sqrtf(ss / (float)C + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[r * ld + c] = w ? x[c] * rs * w[c] : x[c] * rs;
  if (threadIdx.x == 0 && rstd) rstd[r] = rs;
}

/* dinp = rs*w*g - x * rs^3/C * sum(g*w*x); w NULL: weightless (w = 1) */
static __global__ void rmsnorm_bwd_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                               const float *rstd, int64_t C, int64_t ld) {
  __shared__ float sh[33];
  int64_t r = blockIdx.x;
  const float *x = inp + r * ld, *g = dout + r * ld;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += (w ? g[c] * w[c] : g[c]) * x[c];
  dot = sl_block_sum(dot, sh);
  float rs = rstd[r];
  float k = dot * rs * rs * rs / (float)C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dinp[r * ld + c] += rs * (w ? w[c] : 1.0f) * g[c] - x[c] * k;
}

/* part[p][c] = sum over rows of group p of g*x*rstd */
static __global__ void rmsnorm_bwd_dw_pass1(float *part, const float *dout, const float *inp, const float *rstd,
                                            int64_t N, int64_t C, int64_t ld) {
  int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t p = blockIdx.y;
  if (c >= C) return;
  int64_t r0 = p * ROWS_PER_PART, r1 = min(N, r0 + ROWS_PER_PART);
  float s = 0.0f;
  for (int64_t r = r0; r < r1; r++) s += dout[r * ld + c] * inp[r * ld + c] * rstd[r];
  part[p * C + c] = s;
}

void sl_cuda_rmsnorm_fwd(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                         int64_t ld, float eps) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && ld >= C && N <= 0x7fffffffLL);
  if (N == 0) return;
  rmsnorm_fwd_kernel<<<(unsigned)N, RT, 0, ctx->stream>>>(out, rstd, inp, w, C, ld, eps);
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_rmsnorm_bwd(sl_kctx *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int64_t N, int64_t C, int64_t ld) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && ld >= C && N <= 0x7fffffffLL);
  if (N == 0) return;
  if (dinp) {
    rmsnorm_bwd_dinp_kernel<<<(unsigned)N, RT, 0, ctx->stream>>>(dinp, dout, inp, w, rstd, C, ld);
    CUDA_LAUNCH_CHECK(ctx);
  }
  if (dw && w) { /* a weightless norm has no weight gradient */
    int64_t P = (N + ROWS_PER_PART - 1) / ROWS_PER_PART;
    SL_CUDA_REQUIRE(ctx, P <= 65535);
    float *part = (float *)sl_cuda_scratch(ctx, (size_t)(P * C) * sizeof(float), "rmsnorm_bwd");
    if (!part) return;
    dim3 grid((unsigned)((C + 127) / 128), (unsigned)P);
    rmsnorm_bwd_dw_pass1<<<grid, 128, 0, ctx->stream>>>(part, dout, inp, rstd, N, C, ld);
    CUDA_LAUNCH_CHECK(ctx);
    sl_cuda_colsum_partials(ctx, dw, part, P, C);
  }
}

/* ---- the split-row RMSNorm (kernels.h rmsnorm_rowsum): one block per row ---- */
static __global__ void rowsum_kernel(float *out, const float *a, const float *b, const float *w, int64_t C,
                                     int64_t ld) {
  __shared__ float sh[33];
  int64_t r = blockIdx.x;
  const float *x = a + r * ld, *y = b + r * ld;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += (w ? w[c] * x[c] : x[c]) * y[c];
  s = sl_block_sum(s, sh);
  if (threadIdx.x == 0) out[r] = s;
}

static __global__ void fwd_sum_kernel(float *out, float *rstd, const float *inp, const float *w, const float *sums,
                                      int64_t C, int64_t ld, int64_t Cw, float eps) {
  int64_t r = blockIdx.x;
  const float *x = inp + r * ld;
  float rs = 1.0f / sqrtf(sums[r] / (float)Cw + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[r * ld + c] = w ? x[c] * rs * w[c] : x[c] * rs;
  if (threadIdx.x == 0) rstd[r] = rs;
}

static __global__ void bwd_sum_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                      const float *rstd, const float *dots, int64_t C, int64_t ld, int64_t Cw) {
  int64_t r = blockIdx.x;
  const float *x = inp + r * ld, *g = dout + r * ld;
  float rs = rstd[r], k = dots[r] * rs * rs * rs / (float)Cw;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dinp[r * ld + c] += rs * (w ? w[c] : 1.0f) * g[c] - x[c] * k;
}

void sl_cuda_rmsnorm_rowsum(sl_kctx *ctx, float *out, const float *a, const float *b, const float *w, int64_t N,
                            int64_t C, int64_t ld) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && ld >= C && N <= 0x7fffffffLL);
  if (N == 0) return;
  rowsum_kernel<<<(unsigned)N, RT, 0, ctx->stream>>>(out, a, b, w, C, ld);
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_rmsnorm_fwd_sum(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, const float *sums,
                             int64_t N, int64_t C, int64_t ld, int64_t Cw, float eps) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && ld >= C && Cw >= C && N <= 0x7fffffffLL);
  if (N == 0) return;
  fwd_sum_kernel<<<(unsigned)N, RT, 0, ctx->stream>>>(out, rstd, inp, w, sums, C, ld, Cw, eps);
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_rmsnorm_bwd_sum(sl_kctx *ctx, float *dinp, const float *dout, const float *inp, const float *w,
                             const float *rstd, const float *dots, int64_t N, int64_t C, int64_t ld, int64_t Cw) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && ld >= C && Cw >= C && N <= 0x7fffffffLL);
  if (N == 0) return;
  bwd_sum_kernel<<<(unsigned)N, RT, 0, ctx->stream>>>(dinp, dout, inp, w, rstd, dots, C, ld, Cw);
  CUDA_LAUNCH_CHECK(ctx);
}
