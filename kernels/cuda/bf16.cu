/* kernels/cuda/bf16.cu — bf16 compute on the GPU (ctx_set_compute,
 * docs/bf16.md): the same rounding points as the CPU mirror
 * (kernels/cpu/bf16.c). Each wrapper runs the fp32 op and rounds, in place,
 * what a bf16 engine stores in bf16; with fp32 compute it only calls the
 * fp32 op. GEMMs (linear, LM head) convert their operands to bf16 into the
 * context's stage buffer and run cuBLASLt with bf16 A/B, fp32 compute and
 * fp32 output, which is then rounded. Attention keeps the fp32 kernel: its
 * inputs are already bf16-valued (rope's rounding), its output is rounded.
 * Storage stays fp32 (bf16-valued): no memory is saved yet. */
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/lmhead_ce.cuh"
#include "kernels/cuda/mamba.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"

int sl_cuda_ctx_set_compute(sl_kctx *ctx, int compute) {
  if (!ctx || (compute != SL_COMPUTE_FP32 && compute != SL_COMPUTE_BF16))
    return sl_fail(SL_EINPUT, "cuda: compute dtype must be SL_COMPUTE_FP32 (0) or SL_COMPUTE_BF16 (1), found %d",
                   compute);
  ctx->bf16 = compute == SL_COMPUTE_BF16;
  return SL_OK;
}

/* The stage buffer (at least `bytes`), valid for the current op; grows like
 * the scratch arena (synchronise, free, allocate with 25% headroom). */
static void *stage(sl_kctx *ctx, size_t bytes, const char *op) {
  if (bytes <= ctx->stage_bytes) return ctx->stage;
  size_t want = bytes + bytes / 4;
  want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
  cudaError_t e = cudaStreamSynchronize(ctx->stream);
  if (e == cudaSuccess && ctx->stage) e = cudaFree(ctx->stage);
  ctx->stage = NULL;
  ctx->stage_bytes = 0;
  if (e == cudaSuccess) e = cudaMalloc(&ctx->stage, want);
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
static void round_rows(sl_kctx *ctx, float *x, int64_t rows, int64_t cols, int64_t ld) {
  SL_CUDA_BEGIN(ctx);
  if (!x || rows <= 0 || cols <= 0) return;
  if (ld == cols) {
    sl_cuda_round_bf16(ctx, x, rows * cols);
    return;
  }
  round_rows_kernel<<<sl_cuda_blocks(rows * cols, 256), 256, 0, ctx->stream>>>(x, rows, cols, ld);
  CUDA_LAUNCH_CHECK(ctx);
}
#define RND(x, n)                                                                                                      \
  do {                                                                                                                 \
    if (ctx->bf16) sl_cuda_round_bf16(ctx, (x), (n));                                                                  \
  } while (0)
#define QKV_N(B, T, nh, nkv, hd) ((B) * (T) * ((nh) + 2 * (nkv)) * (hd))

void sl_cuda_bf_rmsnorm_fwd(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, int64_t N,
                            int64_t C, int64_t ld, float eps) {
  sl_cuda_rmsnorm_fwd(ctx, out, rstd, inp, w, N, C, ld, eps);
  if (ctx && ctx->bf16) round_rows(ctx, out, N, C, ld);
}

void sl_cuda_bf_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                           int64_t IC, int64_t OC) {
  if (!ctx || !ctx->bf16) {
    sl_cuda_linear_fwd(ctx, out, inp, w, b, N, IC, OC);
    return;
  }
  SL_CUDA_BEGIN(ctx);
  uint16_t *x16 = NULL, *w16 = NULL;
  if (stage3(ctx, "linear_fwd", inp, N * IC, &x16, w, OC * IC, &w16, NULL, 0, NULL)) return;
  sl_cuda_linear_fwd_bf16(ctx, out, x16, w16, b, N, IC, OC);
  sl_cuda_round_bf16(ctx, out, N * OC);
}

void sl_cuda_bf_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, int64_t N, int64_t IC, int64_t OC) {
  if (!ctx || !ctx->bf16) {
    sl_cuda_linear_bwd(ctx, dinp, dw, db, dout, inp, w, N, IC, OC);
    return;
  }
  SL_CUDA_BEGIN(ctx);
  uint16_t *g16 = NULL, *x16 = NULL, *w16 = NULL;
  if (stage3(ctx, "linear_bwd", dout, N * OC, &g16, dw ? inp : NULL, N * IC, &x16, dinp ? w : NULL, OC * IC, &w16))
    return;
  sl_cuda_linear_bwd_bf16(ctx, dinp, dw, db, g16, x16, w16, N, IC, OC); /* dw, db fp32 */
  if (dinp) sl_cuda_round_bf16(ctx, dinp, N * IC);
}

void sl_cuda_bf_rope_fwd(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                         const float *inv_freq, const int32_t *seg) {
  sl_cuda_rope_fwd(ctx, qkv, B, T, nh, nkv, hd, inv_freq, seg);
  if (ctx) RND(qkv, QKV_N(B, T, nh, nkv, hd));
}
void sl_cuda_bf_rope_bwd(sl_kctx *ctx, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                         const float *inv_freq, const int32_t *seg) {
  sl_cuda_rope_bwd(ctx, dqkv, B, T, nh, nkv, hd, inv_freq, seg);
  if (ctx) RND(dqkv, QKV_N(B, T, nh, nkv, hd));
}

void sl_cuda_bf_attention_fwd(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                              int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg) {
  sl_cuda_attention_fwd(ctx, out, lse, qkv, B, T, nh, nkv, hd, window, scale, seg);
  if (ctx) RND(out, B * T * nh * hd); /* lse stays fp32 */
}
void sl_cuda_bf_attention_bwd(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                              int64_t window, float scale, const int32_t *seg) {
  sl_cuda_attention_bwd(ctx, dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window, scale, seg);
  if (ctx) RND(dqkv, QKV_N(B, T, nh, nkv, hd));
}

void sl_cuda_bf_swiglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  sl_cuda_swiglu_fwd(ctx, out, gu, N, H);
  if (ctx) RND(out, N * H);
}
void sl_cuda_bf_swiglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  sl_cuda_swiglu_bwd(ctx, dgu, dout, gu, N, H);
  if (ctx) RND(dgu, N * 2 * H);
}

void sl_cuda_bf_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                              const int32_t *targets, int64_t N, int64_t C, int64_t V) {
  if (!ctx || !ctx->bf16) {
    sl_cuda_lmhead_ce_fwd(ctx, losses, lse, x, w, targets, N, C, V);
    return;
  }
  SL_CUDA_BEGIN(ctx);
  uint16_t *x16 = NULL, *w16 = NULL;
  if (stage3(ctx, "lmhead_ce_fwd", x, N * C, &x16, w, V * C, &w16, NULL, 0, NULL)) return;
  sl_cuda_lmhead_ce_fwd_b16(ctx, losses, lse, x16, w16, targets, N, C, V);
}
void sl_cuda_bf_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w,
                              const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V) {
  if (!ctx || !ctx->bf16) {
    sl_cuda_lmhead_ce_bwd(ctx, dx, dw, x, w, targets, lse, scale, N, C, V);
    return;
  }
  SL_CUDA_BEGIN(ctx);
  uint16_t *x16 = NULL, *w16 = NULL;
  if (stage3(ctx, "lmhead_ce_bwd", x, N * C, &x16, w, V * C, &w16, NULL, 0, NULL)) return;
  sl_cuda_lmhead_ce_bwd_b16(ctx, dx, dw, x16, w16, targets, lse, scale, N, C, V);
  if (dx) sl_cuda_round_bf16(ctx, dx, N * C);
}

/* ---- Mamba ---------------------------------------------------------------- */
void sl_cuda_bf_conv1d_fwd(sl_kctx *ctx, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                           int64_t B, int64_t T, int64_t D, int64_t K) {
  sl_cuda_conv1d_fwd(ctx, out, x, ldx, w, bias, B, T, D, K);
  if (ctx) RND(out, B * T * D);
}
void sl_cuda_bf_conv1d_bwd(sl_kctx *ctx, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout,
                           const float *x, int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K) {
  sl_cuda_conv1d_bwd(ctx, dx, ldx, dw, dbias, dout, x, ldx_in, w, B, T, D, K);
  if (ctx && ctx->bf16) round_rows(ctx, dx, B * T, D, ldx);
}
void sl_cuda_bf_silu_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n) {
  sl_cuda_silu_fwd(ctx, out, x, n);
  if (ctx) RND(out, n);
}
void sl_cuda_bf_silu_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n) {
  sl_cuda_silu_bwd(ctx, dx, dout, x, n);
  if (ctx) RND(dx, n);
}
void sl_cuda_bf_gate_fwd(sl_kctx *ctx, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D) {
  sl_cuda_gate_fwd(ctx, out, y, z, ldz, N, D);
  if (ctx) RND(out, N * D);
}
void sl_cuda_bf_gate_bwd(sl_kctx *ctx, float *dy, float *dz, int64_t ldz, const float *dout, const float *y,
                         const float *z, int64_t N, int64_t D) {
  sl_cuda_gate_bwd(ctx, dy, dz, ldz, dout, y, z, N, D);
  if (ctx && ctx->bf16) {
    sl_cuda_round_bf16(ctx, dy, N * D);
    round_rows(ctx, dz, N, D, ldz);
  }
}
void sl_cuda_bf_scan_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                         const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, int64_t B, int64_t T,
                         int64_t D, int64_t S, int64_t chunk) {
  sl_cuda_scan_fwd(ctx, y, ckpt, u, dt, A_log, Bm, Cm, ldbc, Dp, B, T, D, S, chunk);
  if (ctx) RND(y, B * T * D); /* ckpt: fp32 state */
}
void sl_cuda_bf_scan_bwd(sl_kctx *ctx, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                         const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                         const float *Cm, int64_t ldbc, const float *Dp, const float *ckpt, int64_t B, int64_t T,
                         int64_t D, int64_t S, int64_t chunk) {
  sl_cuda_scan_bwd(ctx, du, ddt, dA_log, dBm, dCm, dDp, dy, u, dt, A_log, Bm, Cm, ldbc, Dp, ckpt, B, T, D, S, chunk);
  if (ctx && ctx->bf16) { /* dA_log, dDp: fp32 weight gradients */
    sl_cuda_round_bf16(ctx, du, B * T * D);
    sl_cuda_round_bf16(ctx, ddt, B * T * D);
    round_rows(ctx, dBm, B * T, S, ldbc);
    round_rows(ctx, dCm, B * T, S, ldbc);
  }
}
