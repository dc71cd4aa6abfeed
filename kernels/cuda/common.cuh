/* kernels/cuda/common.cuh — what every CUDA op file shares: the context
 * struct, the error-check macro generator, the workspace arena, launch
 * helpers and small device functions. Internal to kernels/cuda. */
#ifndef SL_CUDA_COMMON_CUH
#define SL_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "kernels/bf16.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"

struct sl_kctx {
  sl_bf16_state bf;    /* first: the bf16-compute layer's (kernels/bf16.h) */
  int device;          /* CUDA device ordinal the context was made on */
  cudaStream_t stream; /* every op is queued here */
  cublasLtHandle_t lt; /* cuBLASLt handle */
  void *lt_ws;         /* cuBLASLt workspace (lt_ws_bytes) */
  size_t lt_ws_bytes;
  void *ws; /* op scratch arena (ws_bytes), contents per op */
  size_t ws_bytes;
  double *sumsq_dev;          /* (1) device result of sumsq */
  double *sumsq_part;         /* (SL_CUDA_SUMSQ_BLOCKS) per-block partials */
  double *sumsq_host;         /* (1) pinned host copy */
  int tf32;                   /* SL_CUDA_TF32=1: GEMMs with TF32 tensor cores */
  int status;                 /* SL_OK or the first error (sticky) */
  char msg[512];              /* message of the first error */
  struct sl_gemm_plan *plans; /* (nplans) cuBLASLt descriptors + algorithm per shape (gemm.cu) */
  int nplans, next_evict;
  void *stage; /* bf16 copies of GEMM operands (stage_bytes), per op (bf16.cu) */
  size_t stage_bytes;
  double *scal; /* (nscal) the scalar slots (memops.cu) */
  int nscal;
  sl_dev_stats dev; /* every allocation, free and host wait below, counted (ops dev_stats) */
};

#define SL_CUDA_SUMSQ_BLOCKS 256
#define SL_CUDA_LT_WS_BYTES ((size_t)32 << 20)

/* Records the first error of the context (and sl_fail's message). */
int sl_cuda_fail(sl_kctx *ctx, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The context's calls that cost the host, counted in ctx->dev: every
 * cudaMalloc / cudaFree / cudaMallocHost / cudaFreeHost and stream wait of
 * the backend goes through these (docs/cuda.md, "Per-step syncs and
 * allocations"). */
static inline cudaError_t sl_cuda_wait(sl_kctx *ctx) {
  ctx->dev.syncs++;
  return cudaStreamSynchronize(ctx->stream);
}
static inline cudaError_t sl_cuda_dmalloc(sl_kctx *ctx, void **p, size_t bytes) {
  ctx->dev.allocs++;
  return cudaMalloc(p, bytes);
}
static inline cudaError_t sl_cuda_dfree(sl_kctx *ctx, void *p) {
  ctx->dev.frees++;
  return cudaFree(p);
}

/* Queues dst = (add ? dst : 0) + the sum of x[i] (square 0) or x[i]^2
 * (square 1) over n > 0 elements, in double: two passes, a fixed grid
 * (SL_CUDA_SUMSQ_BLOCKS x 256) and a fixed order, so bit-reproducible and
 * independent of the SM count. Uses ctx->sumsq_part (free between ops). */
void sl_cuda_reduce_to(sl_kctx *ctx, double *dst, const float *x, int64_t n, int square, int add);

/* Scratch of at least `bytes` bytes, valid until the next op on the context.
 * Grows (after synchronising the stream) only when a call needs more than
 * any call before: after warm-up no allocation happens inside ops.
 * NULL on failure (status recorded). */
void *sl_cuda_scratch(sl_kctx *ctx, size_t bytes, const char *op);

/* ---- error-check generator (ggml CUDA_CHECK_GEN style) ---------------------
 * On failure: record "op: call failed: <reason> (file:line)" and return from
 * the calling function with the given value (nothing for void). */
#define SL_CUDA_CHECK_GEN(ctx, call, okval, strfn, ...)                                                                \
  do {                                                                                                                 \
    auto sl_e_ = (call);                                                                                               \
    if (sl_e_ != (okval)) {                                                                                            \
      sl_cuda_fail((ctx), SL_EINTERNAL, "%s: %s failed: %s (%s:%d)", __func__, #call, strfn(sl_e_), __FILE__,          \
                   __LINE__);                                                                                          \
      return __VA_ARGS__;                                                                                              \
    }                                                                                                                  \
  } while (0)
#define CUDA_CHECK(ctx, call, ...) SL_CUDA_CHECK_GEN(ctx, call, cudaSuccess, cudaGetErrorString, __VA_ARGS__)
#define CUBLAS_CHECK(ctx, call, ...)                                                                                   \
  SL_CUDA_CHECK_GEN(ctx, call, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusString, __VA_ARGS__)
/* After a kernel launch. */
#define CUDA_LAUNCH_CHECK(ctx, ...) CUDA_CHECK(ctx, cudaGetLastError(), __VA_ARGS__)

/* Op prologue: skip when the context already failed. */
#define SL_CUDA_BEGIN(ctx, ...)                                                                                        \
  do {                                                                                                                 \
    if (!(ctx) || (ctx)->status) return __VA_ARGS__;                                                                   \
  } while (0)
/* Argument check: records SL_EINPUT and returns. */
#define SL_CUDA_REQUIRE(ctx, cond, ...)                                                                                \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      sl_cuda_fail((ctx), SL_EINPUT, "%s: expected %s (%s:%d)", __func__, #cond, __FILE__, __LINE__);                  \
      return;                                                                                                          \
    }                                                                                                                  \
  } while (0)

/* ---- launch helpers --------------------------------------------------------- */
static inline unsigned sl_cuda_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b > 65535LL * 16) b = 65535LL * 16; /* kernels grid-stride beyond this */
  return (unsigned)(b < 1 ? 1 : b);
}
static inline size_t sl_cuda_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* ---- device helpers ----------------------------------------------------------- */
__device__ __forceinline__ float sl_dev_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float sl_dev_silu(float x) { return x / (1.0f + expf(-x)); }
/* relu with NaN kept NaN (torch.relu's), kernels/cpu/mamba.c's reluf_ */
__device__ __forceinline__ float sl_dev_relu(float x) { return x < 0.0f ? 0.0f : x; }
__device__ __forceinline__ float sl_dev_dsilu(float x) {
  float s = sl_dev_sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}
/* PyTorch's gelu(approximate="tanh") and its derivative (kernels/cpu/basic.c's twin). */
__device__ __forceinline__ float sl_dev_gelu_t(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float sl_dev_dgelu_t(float x) {
  float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}
/* PyTorch softplus (beta 1, threshold 20) and its derivative. */
__device__ __forceinline__ float sl_dev_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float sl_dev_dsoftplus(float x) { return x > 20.0f ? 1.0f : sl_dev_sigmoid(x); }
/* Round to nearest even, NaN kept quiet; bit-identical to
 * sl_f32_to_bf16_scalar in kernels.h. */
__device__ __forceinline__ uint16_t sl_dev_f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40u);
  uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(r >> 16);
}
__device__ __forceinline__ float sl_dev_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
/* Uniform loads: fp32 or bf16 storage, fp32 math. */
__device__ __forceinline__ float sl_ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float sl_ld(const uint16_t *p, int64_t i) { return sl_dev_bf16_to_f32(p[i]); }
__device__ __forceinline__ void sl_st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void sl_st(uint16_t *p, int64_t i, float v) { p[i] = sl_dev_f32_to_bf16(v); }

/* Sum over a block of blockDim.x threads (multiple of 32, <= 1024), fixed
 * order (deterministic). Every thread gets the result. `sh` >= 33 floats. */
template <typename T> __device__ __forceinline__ T sl_block_sum(T v, T *sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads(); /* sh may still be read by a previous call */
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T x = lane < nw ? sh[lane] : (T)0;
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    if (lane == 0) sh[32] = x;
  }
  __syncthreads();
  return sh[32];
}
template <typename T> __device__ __forceinline__ T sl_block_max(T v, T *sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T x = lane < nw ? sh[lane] : (T)-INFINITY;
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    if (lane == 0) sh[32] = x;
  }
  __syncthreads();
  return sh[32];
}

/* dst[c] += sum_p part[p * ncols + c] over p = 0..P-1 in order (deterministic
 * second pass of the column reductions). Queued on ctx's stream. */
void sl_cuda_colsum_partials(sl_kctx *ctx, float *dst, const float *part, int64_t P, int64_t ncols);

#endif /* SL_CUDA_COMMON_CUH */
