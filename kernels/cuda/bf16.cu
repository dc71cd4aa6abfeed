/* kernels/cuda/bf16.cu — what the GPU gives the shared bf16-compute layer
 * (kernels/bf16.h, docs/bf16.md; the layer's wrappers run the fp32 ops and
 * round): in-place rounding of strided rows, and the GEMMs (linear, LM head)
 * under bf16 compute, which convert their operands to bf16 into the
 * context's stage buffer and run cuBLASLt with bf16 A/B, fp32 compute and
 * fp32 output (the layer rounds it). Attention under bf16 compute is the
 * tensor-core kernel (attention_tc.cu, given to the layer in ctx.cu).
 * Storage stays fp32 (bf16-valued): no memory is saved yet. */
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/lmhead_ce.cuh"

/* The stage buffer (at least `bytes`), valid for the current op; grows like
 * the scratch arena (synchronise, free, allocate with 25% headroom). */
static void *stage(sl_kctx *ctx, size_t bytes, const char *op) {
  if (bytes <= ctx->stage_bytes) return ctx->stage;
  size_t want = bytes + bytes / 4;
  want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
  cudaError_t e = sl_cuda_wait(ctx);
  if (e == cudaSuccess && ctx->stage) e = sl_cuda_dfree(ctx, ctx->stage);
  ctx->stage = NULL;
  ctx->stage_bytes = 0;
  if (e == cudaSuccess) e = sl_cuda_dmalloc(ctx, &ctx->stage, want);
  if (e != cudaSuccess) {
    ctx->stage = NULL;
    sl_cuda_fail(ctx, e == cudaErrorMemoryAllocation ? SL_ENOMEM : SL_EINTERNAL,
                 "%s: bf16 operand stage of %zu bytes: %s", op, want, cudaGetErrorString(e));
    return NULL;
  }
  ctx->stage_bytes = want;
  return ctx->stage;
}

/* Up to three bf16 copies of fp32 operands (n[i] elements; src NULL or
 * n 0: skipped, out NULL), each 256-byte aligned in the stage. 0 on success. */
static int stage3(sl_kctx *ctx, const char *op, const float *s0, int64_t n0, uint16_t **o0, const float *s1, int64_t n1,
                  uint16_t **o1, const float *s2, int64_t n2, uint16_t **o2) {
  const float *src[3] = {s0, s1, s2};
  int64_t n[3] = {s0 ? n0 : 0, s1 ? n1 : 0, s2 ? n2 : 0};
  uint16_t **out[3] = {o0, o1, o2};
  size_t off[3], tot = 0;
  for (int i = 0; i < 3; i++) {
    off[i] = tot;
    tot += sl_cuda_align((size_t)n[i] * 2);
  }
  char *base = (char *)stage(ctx, tot ? tot : 256, op);
  if (!base) return 1;
  for (int i = 0; i < 3; i++) {
    if (!out[i]) continue;
    *out[i] = src[i] ? (uint16_t *)(base + off[i]) : NULL;
    if (n[i] > 0) sl_cuda_f32_to_bf16(ctx, *out[i], src[i], n[i]);
  }
  return ctx->status != SL_OK;
}

static __global__ void round_rows_kernel(float *x, int64_t rows, int64_t cols, int64_t ld) {
  int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / cols, c = i - r * cols;
    x[r * ld + c] = sl_dev_bf16_to_f32(sl_dev_f32_to_bf16(x[r * ld + c]));
  }
}
/* x (rows, cols) with row stride ld, rounded to bf16 in place */
void sl_cuda_round_rows(sl_kctx *ctx, float *x, int64_t rows, int64_t cols, int64_t ld) {
  SL_CUDA_BEGIN(ctx);
  if (!x || rows <= 0 || cols <= 0) return;
  if (ld == cols) {
    sl_cuda_round_bf16(ctx, x, rows * cols);
    return;
  }
  round_rows_kernel<<<sl_cuda_blocks(rows * cols, 256), 256, 0, ctx->stream>>>(x, rows, cols, ld);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_bf16_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                             int64_t IC, int64_t OC) {
  SL_CUDA_BEGIN(ctx);
  uint16_t *x16 = NULL, *w16 = NULL;
  if (stage3(ctx, "linear_fwd", inp, N * IC, &x16, w, OC * IC, &w16, NULL, 0, NULL)) return;
  sl_cuda_linear_fwd_bf16(ctx, out, x16, w16, b, N, IC, OC);
}

void sl_cuda_bf16_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, int64_t N, int64_t IC, int64_t OC) {
  SL_CUDA_BEGIN(ctx);
  uint16_t *g16 = NULL, *x16 = NULL, *w16 = NULL;
  if (stage3(ctx, "linear_bwd", dout, N * OC, &g16, dw ? inp : NULL, N * IC, &x16, dinp ? w : NULL, OC * IC, &w16))
    return;
  sl_cuda_linear_bwd_bf16(ctx, dinp, dw, db, g16, x16, w16, N, IC, OC); /* dw, db fp32 */
}

void sl_cuda_bf16_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                                const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap) {
  SL_CUDA_BEGIN(ctx);
  uint16_t *x16 = NULL, *w16 = NULL;
  if (stage3(ctx, "lmhead_ce_fwd", x, N * C, &x16, w, V * C, &w16, NULL, 0, NULL)) return;
  sl_cuda_lmhead_ce_fwd_b16(ctx, losses, lse, x16, w16, targets, N, C, V, softcap);
}
void sl_cuda_bf16_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w,
                                const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V,
                                float softcap) {
  SL_CUDA_BEGIN(ctx);
  uint16_t *x16 = NULL, *w16 = NULL;
  if (stage3(ctx, "lmhead_ce_bwd", x, N * C, &x16, w, V * C, &w16, NULL, 0, NULL)) return;
  sl_cuda_lmhead_ce_bwd_b16(ctx, dx, dw, x16, w16, targets, lse, scale, N, C, V, softcap);
}
