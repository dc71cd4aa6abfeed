/* kernels/cuda/ctx.cu — the CUDA context (stream, cuBLASLt handle, scratch
 * arena), error recording, device memory helpers, and the op table itself. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/lmhead_ce.cuh"
#include "kernels/cuda/mamba.cuh"
#include "kernels/cuda/mamba2.cuh"
#include "kernels/cuda/memops.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/optim.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/vocab_parallel.cuh"

int sl_cuda_fail(sl_kctx *ctx, int code, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (ctx && ctx->status == SL_OK) {
    ctx->status = code;
    snprintf(ctx->msg, sizeof ctx->msg, "%s", buf);
  }
  return sl_fail(code, "cuda: %s", buf);
}

int sl_cuda_last_status(sl_kctx *ctx) { return ctx ? ctx->status : SL_EINPUT; }
const char *sl_cuda_last_error(sl_kctx *ctx) { return ctx ? ctx->msg : "no context"; }
void sl_cuda_clear_status(sl_kctx *ctx) {
  if (!ctx) return;
  ctx->status = SL_OK;
  ctx->msg[0] = 0;
  (void)cudaGetLastError(); /* drop a non-sticky launch error */
}
int sl_cuda_sync(sl_kctx *ctx) {
  if (!ctx) return SL_EINPUT;
  cudaError_t e = sl_cuda_wait(ctx);
  if (e != cudaSuccess) sl_cuda_fail(ctx, SL_EINTERNAL, "sl_cuda_sync: stream failed: %s", cudaGetErrorString(e));
  return ctx->status;
}

void *sl_cuda_scratch(sl_kctx *ctx, size_t bytes, const char *op) {
  if (bytes <= ctx->ws_bytes) return ctx->ws;
  size_t want = bytes + bytes / 4; /* headroom against many small regrowths */
  want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
  cudaError_t e = sl_cuda_wait(ctx);
  if (e == cudaSuccess && ctx->ws) e = sl_cuda_dfree(ctx, ctx->ws);
  ctx->ws = NULL;
  ctx->ws_bytes = 0;
  if (e == cudaSuccess) e = sl_cuda_dmalloc(ctx, &ctx->ws, want);
  if (e != cudaSuccess) {
    ctx->ws = NULL;
    sl_cuda_fail(ctx, e == cudaErrorMemoryAllocation ? SL_ENOMEM : SL_EINTERNAL, "%s: scratch of %zu bytes: %s", op,
                 want, cudaGetErrorString(e));
    return NULL;
  }
  ctx->ws_bytes = want;
  sl_log(SL_LOG_DEBUG, "cuda: scratch grown to %zu bytes by %s", want, op);
  return ctx->ws;
}

static void ctx_free(sl_kctx *c) {
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->ws) cudaFree(c->ws);
  if (c->stage) cudaFree(c->stage);
  if (c->lt_ws) cudaFree(c->lt_ws);
  if (c->sumsq_dev) cudaFree(c->sumsq_dev);
  if (c->sumsq_part) cudaFree(c->sumsq_part);
  if (c->sumsq_host) cudaFreeHost(c->sumsq_host);
  if (c->scal) cudaFree(c->scal);
  sl_cuda_gemm_plans_free(c);
  if (c->lt) cublasLtDestroy(c->lt);
  if (c->stream) cudaStreamDestroy(c->stream);
  free(c);
}

static const sl_bf16_impl *cuda_bf16_impl(void); /* the table's, below */

static sl_kctx *cuda_ctx_create(int threads) {
  (void)threads;
  sl_kctx *c = (sl_kctx *)calloc(1, sizeof *c);
  if (!c) {
    sl_fail(SL_ENOMEM, "cuda: ctx_create: out of host memory");
    return NULL;
  }
  c->bf = sl_bf16_state_init(cuda_bf16_impl());
  c->tf32 = sl_env_int("SL_CUDA_TF32") == 1;
  /* SL_CUDA_DEVICE (set by sl_backend_bind_local_rank from the rank's local
   * index unless set) picks the device; otherwise the current one */
  const char *dev = sl_env_str("SL_CUDA_DEVICE");
  const char *what = "cudaSetDevice";
  cudaError_t e = cudaSuccess;
  if (dev && *dev) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) e = cudaSetDevice(atoi(dev) % ndev);
  }
  if (e == cudaSuccess) what = "cudaGetDevice", e = cudaGetDevice(&c->device);
  cublasStatus_t be = CUBLAS_STATUS_SUCCESS;
  if (e == cudaSuccess) what = "cudaStreamCreate", e = cudaStreamCreate(&c->stream);
  if (e == cudaSuccess) what = "cudaMalloc(cuBLASLt workspace)", e = sl_cuda_dmalloc(c, &c->lt_ws, SL_CUDA_LT_WS_BYTES);
  if (e == cudaSuccess) c->lt_ws_bytes = SL_CUDA_LT_WS_BYTES;
  if (e == cudaSuccess) what = "cudaMalloc(sumsq)", e = sl_cuda_dmalloc(c, (void **)&c->sumsq_dev, sizeof(double));
  if (e == cudaSuccess)
    what = "cudaMalloc(sumsq partials)",
    e = sl_cuda_dmalloc(c, (void **)&c->sumsq_part, SL_CUDA_SUMSQ_BLOCKS * sizeof(double));
  if (e == cudaSuccess) what = "cudaMallocHost(sumsq)", e = cudaMallocHost((void **)&c->sumsq_host, sizeof(double));
  if (e == cudaSuccess) c->dev.allocs++; /* the pinned one, counted like sl_cuda_dmalloc's */
  if (e != cudaSuccess) {
    sl_fail(SL_EINTERNAL, "cuda: ctx_create: %s failed: %s", what, cudaGetErrorString(e));
    ctx_free(c);
    return NULL;
  }
  be = cublasLtCreate(&c->lt);
  if (be != CUBLAS_STATUS_SUCCESS) {
    c->lt = NULL;
    sl_fail(SL_EINTERNAL, "cuda: ctx_create: cublasLtCreate failed: %s", cublasLtGetStatusString(be));
    ctx_free(c);
    return NULL;
  }
  return c;
}

static void cuda_ctx_destroy(sl_kctx *ctx) {
  if (ctx) ctx_free(ctx);
}

/* Device bytes the context holds beyond the caller's tensors: the op
 * scratch high-water (+ the bf16 operand stage) plus the fixed cuBLASLt workspace, sumsq buffers and scalar slots. */
static size_t cuda_ctx_scratch_bytes(const sl_kctx *ctx) {
  if (!ctx) return 0;
  return ctx->ws_bytes + ctx->stage_bytes + ctx->lt_ws_bytes + (SL_CUDA_SUMSQ_BLOCKS + 1 + ctx->nscal) * sizeof(double);
}

void *sl_cuda_malloc(sl_kctx *ctx, size_t bytes) {
  void *p = NULL;
  cudaError_t e = ctx ? sl_cuda_dmalloc(ctx, &p, bytes ? bytes : 1) : cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    sl_cuda_fail(ctx, SL_ENOMEM, "sl_cuda_malloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    return NULL;
  }
  return p;
}
void sl_cuda_free(sl_kctx *ctx, void *p) {
  if (!p) return;
  if (!ctx) {
    cudaFree(p);
    return;
  }
  (void)sl_cuda_wait(ctx);
  (void)sl_cuda_dfree(ctx, p);
}
int sl_cuda_upload(sl_kctx *ctx, void *dst, const void *src, size_t bytes) {
  SL_CUDA_BEGIN(ctx, ctx ? ctx->status : SL_EINPUT);
  CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream), ctx->status);
  ctx->dev.uploads++;
  return sl_cuda_sync(ctx);
}
int sl_cuda_download(sl_kctx *ctx, void *dst, const void *src, size_t bytes) {
  SL_CUDA_BEGIN(ctx, ctx ? ctx->status : SL_EINPUT);
  CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream), ctx->status);
  ctx->dev.downloads++;
  return sl_cuda_sync(ctx);
}
int sl_cuda_memset0(sl_kctx *ctx, void *dst, size_t bytes) {
  SL_CUDA_BEGIN(ctx, ctx ? ctx->status : SL_EINPUT);
  CUDA_CHECK(ctx, cudaMemsetAsync(dst, 0, bytes, ctx->stream), ctx->status);
  return ctx->status;
}
void *sl_cuda_stream(sl_kctx *ctx) { return ctx ? (void *)ctx->stream : NULL; }
int sl_cuda_tf32_enabled(const sl_kctx *ctx) { return ctx ? ctx->tf32 || ctx->bf.tf32 : 0; }

/* ---- deterministic second pass of column reductions ----------------------- */
static __global__ void colsum_partials_kernel(float *dst, const float *part, int64_t P, int64_t ncols) {
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < ncols; c += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int64_t p = 0; p < P; p++) s += part[p * ncols + c];
    dst[c] += s;
  }
}
void sl_cuda_colsum_partials(sl_kctx *ctx, float *dst, const float *part, int64_t P, int64_t ncols) {
  SL_CUDA_BEGIN(ctx);
  if (ncols <= 0) return;
  colsum_partials_kernel<<<sl_cuda_blocks(ncols, 256), 256, 0, ctx->stream>>>(dst, part, P, ncols);
  CUDA_LAUNCH_CHECK(ctx);
}

/* ---- the table --------------------------------------------------------------- */
/* The fp32 ops, filled by field name (nvcc's C++17 has no designated
 * initialisers out of C order): a function with the same signature cannot
 * land in another op's slot. A field left NULL is an op this backend does
 * not support; sl_ops_check (run by the probe below) names it. The table
 * sl_ops_cuda returns is this one wrapped by the bf16-compute layer
 * (kernels/bf16.h). */
static sl_ops make_cuda_fp32() {
  sl_ops o{};
  o.name = "cuda";
  o.ctx_create = cuda_ctx_create;
  o.ctx_destroy = cuda_ctx_destroy;
  o.ctx_scratch_bytes = cuda_ctx_scratch_bytes;
  o.embedding_fwd = sl_cuda_embedding_fwd;
  o.embedding_bwd = sl_cuda_embedding_bwd;
  o.rmsnorm_fwd = sl_cuda_rmsnorm_fwd;
  o.rmsnorm_bwd = sl_cuda_rmsnorm_bwd;
  o.rmsnorm_rowsum = sl_cuda_rmsnorm_rowsum;
  o.rmsnorm_fwd_sum = sl_cuda_rmsnorm_fwd_sum;
  o.rmsnorm_bwd_sum = sl_cuda_rmsnorm_bwd_sum;
  o.linear_fwd = sl_cuda_linear_fwd;
  o.linear_bwd = sl_cuda_linear_bwd;
  o.rope_fwd = sl_cuda_rope_fwd;
  o.rope_bwd = sl_cuda_rope_bwd;
  o.attention_fwd = sl_cuda_attention_fwd;
  o.attention_bwd = sl_cuda_attention_bwd;
  o.swiglu_fwd = sl_cuda_swiglu_fwd;
  o.swiglu_bwd = sl_cuda_swiglu_bwd;
  o.geglu_fwd = sl_cuda_geglu_fwd;
  o.geglu_bwd = sl_cuda_geglu_bwd;
  o.add_inplace = sl_cuda_add_inplace;
  o.scale_add = sl_cuda_scale_add;
  o.softcap = sl_cuda_softcap;
  o.lmhead_ce_fwd = sl_cuda_lmhead_ce_fwd;
  o.lmhead_ce_bwd = sl_cuda_lmhead_ce_bwd;
  o.adamw = sl_cuda_adamw;
  o.sumsq = sl_cuda_sumsq;
  o.f32_to_bf16 = sl_cuda_f32_to_bf16;
  o.bf16_to_f32 = sl_cuda_bf16_to_f32;
  o.round_bf16 = sl_cuda_round_bf16;
  o.conv1d_fwd = sl_cuda_conv1d_fwd;
  o.conv1d_bwd = sl_cuda_conv1d_bwd;
  o.silu_fwd = sl_cuda_silu_fwd;
  o.silu_bwd = sl_cuda_silu_bwd;
  o.relu2_fwd = sl_cuda_relu2_fwd;
  o.relu2_bwd = sl_cuda_relu2_bwd;
  o.gate_fwd = sl_cuda_gate_fwd;
  o.gate_bwd = sl_cuda_gate_bwd;
  o.scan_fwd = sl_cuda_scan_fwd;
  o.scan_bwd = sl_cuda_scan_bwd;
  o.ssd_fwd = sl_cuda_ssd_fwd;
  o.ssd_bwd = sl_cuda_ssd_bwd;
  o.alloc = sl_cuda_mem_alloc;
  o.free = sl_cuda_mem_free;
  o.zero = sl_cuda_mem_zero;
  o.copy = sl_cuda_mem_copy;
  o.upload = sl_cuda_mem_upload;
  o.download = sl_cuda_mem_download;
  o.sum = sl_cuda_mem_sum;
  o.sync = sl_cuda_mem_sync;
  o.is_device = sl_cuda_mem_is_device;
  o.stream = sl_cuda_stream;
  o.mem_info = sl_cuda_mem_info;
  o.scalars_reserve = sl_cuda_scalars_reserve;
  o.scalar_acc = sl_cuda_scalar_acc;
  o.scalar_add = sl_cuda_scalar_add;
  o.scalars_fetch = sl_cuda_scalars_fetch;
  o.dev_stats = sl_cuda_dev_stats;
  o.vocab_embedding_fwd = sl_cuda_vocab_embedding_fwd;
  o.vocab_embedding_bwd = sl_cuda_vocab_embedding_bwd;
  o.lmhead_vp_fwd = sl_cuda_lmhead_vp_fwd;
  o.lmhead_vp_rescale = sl_cuda_lmhead_vp_rescale;
  o.lmhead_vp_loss = sl_cuda_lmhead_vp_loss;
  o.lmhead_vp_bwd = sl_cuda_lmhead_vp_bwd;
  o.moe_route_fwd = sl_cuda_moe_route_fwd;
  o.moe_route_bwd = sl_cuda_moe_route_bwd;
  o.moe_permute_fwd = sl_cuda_moe_permute_fwd;
  o.moe_permute_bwd = sl_cuda_moe_permute_bwd;
  o.moe_combine_fwd = sl_cuda_moe_combine_fwd;
  o.moe_combine_bwd = sl_cuda_moe_combine_bwd;
  return o;
}
static const sl_ops g_cuda_fp32 = make_cuda_fp32();
static const sl_bf16_impl g_cuda_bf16 = {&g_cuda_fp32,
                                         sl_cuda_round_rows,
                                         sl_cuda_bf16_linear_fwd,
                                         sl_cuda_bf16_linear_bwd,
                                         sl_cuda_bf16_lmhead_ce_fwd,
                                         sl_cuda_bf16_lmhead_ce_bwd,
                                         sl_cuda_attention_fwd_tc,
                                         sl_cuda_attention_bwd_tc,
                                         1};
static const sl_ops g_cuda_ops = sl_bf16_ops(&g_cuda_fp32);
static const sl_bf16_impl *cuda_bf16_impl(void) { return &g_cuda_bf16; }

/* NULL when no CUDA device is usable, so CPU-only machines never touch one;
 * then sl_errmsg() says why (the CUDA error of cudaGetDeviceCount, or no
 * device). The probe runs once; a benign race at worst probes twice. */
extern "C" const sl_ops *sl_ops_cuda(void) {
  static int probed = 0, present = 0;
  static char why[300];
  if (!probed) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(why, sizeof why, "no usable CUDA device: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(e),
               cudaGetErrorString(e));
    } else if (n <= 0) {
      snprintf(why, sizeof why, "no CUDA device: cudaGetDeviceCount found 0");
    }
    present = (e == cudaSuccess && n > 0);
    if (present && sl_ops_check(&g_cuda_ops) != SL_OK) {
      snprintf(why, sizeof why, "%s", sl_errmsg());
      present = 0;
    }
    probed = 1;
  }
  if (!present) sl_fail(SL_EINPUT, "%s", why);
  return present ? &g_cuda_ops : NULL;
}
