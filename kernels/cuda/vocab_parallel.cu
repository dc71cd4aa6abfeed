/* kernels/cuda/vocab_parallel.cu — vocabulary-parallel ops (CUDA twins of
 * kernels/cpu/vocab_parallel.c; semantics in kernels/kernels.h): the
 * embedding over a vocabulary slice [v0, v0 + Vl) (gather with zero rows for
 * tokens outside it; backward one thread per column walking the rows in
 * order, deterministic) and the loss-parallel LM head. The head runs the
 * chunk loops of lmhead_ce.cu (at most a (R, Vvalid) block of logits in the
 * scratch arena) over the first Vvalid rows of the slice only, so padding
 * rows are never read and get no gradient: forward one 256-thread block per
 * row reduces max / sum-exp (fixed order) and picks the target's logit;
 * backward turns each chunk's logits in place into dlogits with the global
 * lse, then dx_c += dlogits @ w and dw += dlogits^T @ x_c. The rescale and
 * loss steps between the TP all-reduces are one thread per row. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/lmhead_ce.cuh"
#include "kernels/cuda/vocab_parallel.cuh"

#define VP_NT 256

/* ---- embedding ----------------------------------------------------------------- */
static __global__ void vp_emb_fwd_kernel(float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C,
                                         int64_t v0, int64_t Vl) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * C; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / C, c = i - r * C, j = (int64_t)tok[r] - v0;
    out[i] = (j >= 0 && j < Vl) ? wte[j * C + c] : 0.0f;
  }
}
static __global__ void vp_emb_bwd_kernel(float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C,
                                         int64_t v0, int64_t Vl) {
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x)
    for (int64_t r = 0; r < N; r++) {
      int64_t j = (int64_t)tok[r] - v0;
      if (j >= 0 && j < Vl) dwte[j * C + c] += dout[r * C + c];
    }
}

void sl_cuda_vocab_embedding_fwd(sl_kctx *ctx, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C,
                                 int64_t v0, int64_t Vl) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C >= 0 && v0 >= 0 && Vl >= 0);
  if (N * C == 0) return;
  vp_emb_fwd_kernel<<<sl_cuda_blocks(N * C, VP_NT), VP_NT, 0, ctx->stream>>>(out, tok, wte, N, C, v0, Vl);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_vocab_embedding_bwd(sl_kctx *ctx, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C,
                                 int64_t v0, int64_t Vl) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C >= 0 && v0 >= 0 && Vl >= 0);
  if (N * C == 0 || Vl == 0) return;
  vp_emb_bwd_kernel<<<sl_cuda_blocks(C, 128), 128, 0, ctx->stream>>>(dwte, dout, tok, N, C, v0, Vl);
  CUDA_LAUNCH_CHECK(ctx);
}

/* ---- loss-parallel head -------------------------------------------------------- */
/* A slice of padding only (Vvalid = 0): max -inf, nothing summed. */
static __global__ void vp_empty_kernel(float *lmax, float *st, int64_t N) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
    lmax[i] = -INFINITY;
    st[2 * i] = 0.0f;
    st[2 * i + 1] = 0.0f;
  }
}
static __global__ void vp_rescale_kernel(float *st, const float *lmax, const float *gmax, int64_t N) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x)
    st[2 * i] = lmax[i] == -INFINITY ? 0.0f : st[2 * i] * (float)exp((double)lmax[i] - (double)gmax[i]);
}
static __global__ void vp_loss_kernel(float *losses, float *lse, const float *st, const float *gmax,
                                      const int32_t *targets, int64_t N) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
    float z = gmax[i] + (float)log((double)st[2 * i]);
    lse[i] = z;
    losses[i] = targets[i] >= 0 ? z - st[2 * i + 1] : 0.0f;
  }
}
void sl_cuda_lmhead_vp_fwd(sl_kctx *ctx, float *lmax, float *st, const float *x, const float *w, const int32_t *targets,
                           int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid, float softcap) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && v0 >= 0 && Vvalid >= 0 && Vvalid <= Vl);
  if (N == 0) return;
  if (Vvalid == 0) {
    vp_empty_kernel<<<sl_cuda_blocks(N, VP_NT), VP_NT, 0, ctx->stream>>>(lmax, st, N);
    CUDA_LAUNCH_CHECK(ctx);
    return;
  }
  sl_cuda_ce_fwd_core(ctx, x, w, targets, N, C, Vvalid, v0, NULL, NULL, lmax, st, "lmhead_vp_fwd", softcap);
}

void sl_cuda_lmhead_vp_rescale(sl_kctx *ctx, float *st, const float *lmax, const float *gmax, int64_t N) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0);
  if (N == 0) return;
  vp_rescale_kernel<<<sl_cuda_blocks(N, VP_NT), VP_NT, 0, ctx->stream>>>(st, lmax, gmax, N);
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_lmhead_vp_loss(sl_kctx *ctx, float *losses, float *lse, const float *st, const float *gmax,
                            const int32_t *targets, int64_t N) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0);
  if (N == 0) return;
  vp_loss_kernel<<<sl_cuda_blocks(N, VP_NT), VP_NT, 0, ctx->stream>>>(losses, lse, st, gmax, targets, N);
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_lmhead_vp_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                           const float *lse, float scale, int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid,
                           float softcap) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && v0 >= 0 && Vvalid >= 0 && Vvalid <= Vl);
  if (N == 0 || Vvalid == 0 || (!dx && !dw)) return;
  sl_cuda_ce_bwd_core(ctx, dx, dw, x, w, targets, lse, scale, N, C, Vvalid, v0, 1, "lmhead_vp_bwd", softcap);
}
