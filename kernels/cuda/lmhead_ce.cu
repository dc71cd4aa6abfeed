/* kernels/cuda/lmhead_ce.cu — LM head + softmax cross-entropy, chunked over
 * rows so that at most a (R, V) block of logits exists (in the scratch arena,
 * R * V * 4 <= SL_CE_CHUNK_BYTES, R >= 1). Per chunk: logits = x_c @ w^T via
 * cuBLASLt, then one 256-thread block per row does max / sum-exp (fixed-order
 * block reductions) and the loss. Backward recomputes each chunk's logits,
 * turns them in place into dlogits = (softmax - onehot) * scale (zero rows
 * for ignored targets), and issues dx_c += dlogits @ w and
 * dw += dlogits^T @ x_c (both beta = 1). The chunk loops and row kernels
 * (sl_cuda_ce_{fwd,bwd}_core) also run the loss-parallel head of
 * vocab_parallel.cu: w is then a vocabulary slice whose row 0 is id v0.
 * With bf16 operands (ab = CUDA_R_16BF: the _b16 variants of bf16 compute,
 * bf16.cu) the logits are rounded to bf16 after the GEMM and backward feeds
 * bf16 dlogits to its two GEMMs. softcap > 0 (Gemma 2's final logit cap):
 * the row kernels cap the logits (c = cap tanh(l / cap)) before the loss, and
 * backward multiplies dlogits by 1 - (c / cap)^2, as lmhead_ce.c. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/lmhead_ce.cuh"

#define SL_CE_CHUNK_BYTES ((int64_t)128 << 20)
#define CE_NT 256

static int64_t ce_chunk_rows(int64_t N, int64_t V) {
  int64_t r = SL_CE_CHUNK_BYTES / (V * (int64_t)sizeof(float));
  if (r < 1) r = 1;
  if (r > N) r = N;
  return r;
}

/* One row of logits (V entries, ids v0 + c). Whole head (st == NULL): lse and
 * loss, a target outside [0, V) ignored. Slice (loss-parallel): the slice's
 * max, sum-exp relative to it and the target's logit (0 outside the slice). */
static __global__ void ce_fwd_kernel(float *losses, float *lse, float *lmax, float *st, float *logits,
                                     const int32_t *targets, int64_t V, int64_t v0, float cap) {
  __shared__ float sh[33];
  int64_t r = blockIdx.x;
  float *z = logits + r * V;
  if (cap > 0.0f) { /* final-logit softcap, in place (each thread its own entries) */
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) z[c] = cap * tanhf(z[c] / cap);
    __syncthreads(); /* thread 0 reads z[t] below */
  }
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) mx = fmaxf(mx, z[c]);
  mx = sl_block_max(mx, sh);
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) s += expf(z[c] - mx);
  s = sl_block_sum(s, sh);
  if (threadIdx.x == 0) {
    int64_t t = (int64_t)targets[r] - v0;
    bool in = t >= 0 && t < V;
    if (st) {
      lmax[r] = mx;
      st[2 * r] = s;
      st[2 * r + 1] = in ? z[t] : 0.0f;
      return;
    }
    float L = mx + logf(s);
    lse[r] = L;
    losses[r] = in ? L - z[t] : 0.0f;
  }
}

/* In place: logits row -> (softmax - onehot) * scale, or 0 when ignored
 * (target < 0; for the whole head also a target outside [0, V)). */
static __global__ void ce_bwd_kernel(float *logits, const int32_t *targets, const float *lse, float scale, int64_t V,
                                     int64_t v0, bool slice, float cap) {
  int64_t r = blockIdx.x;
  float *z = logits + r * V;
  int64_t t = (int64_t)targets[r] - v0;
  bool use = targets[r] >= 0 && (slice || t < V);
  float L = lse[r];
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    float g = 0.0f;
    if (use && cap > 0.0f) { /* capped logit k = cap tanh(z / cap); dk/dz = 1 - (k / cap)^2 */
      float k = cap * tanhf(z[c] / cap), u = k / cap;
      g = (expf(k - L) - (c == t ? 1.0f : 0.0f)) * scale * (1.0f - u * u);
    } else if (use) {
      g = (expf(z[c] - L) - (c == t ? 1.0f : 0.0f)) * scale;
    }
    z[c] = g;
  }
}

/* x, w of type ab (fp32, or bf16 for bf16 compute; then the scratch holds
 * R x V fp32 logits + R x V bf16 dlogits in backward). */
static void ce_fwd_core_any(sl_kctx *ctx, const void *x, const void *w, const int32_t *targets, int64_t N, int64_t C,
                            int64_t V, int64_t v0, float *losses, float *lse, float *lmax, float *st, cudaDataType_t ab,
                            const char *op, float softcap) {
  size_t es = ab == CUDA_R_16BF ? 2 : 4;
  int64_t R = ce_chunk_rows(N, V);
  float *logits = (float *)sl_cuda_scratch(ctx, (size_t)(R * V) * sizeof(float), op);
  if (!logits) return;
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    int64_t rc = N - r0 < R ? N - r0 : R;
    if (sl_cuda_rm_xwT(ctx, logits, (const char *)x + (size_t)(r0 * C) * es, w, rc, C, V, 0.0f, ab)) return;
    if (ab == CUDA_R_16BF) sl_cuda_round_bf16(ctx, logits, rc * V);
    ce_fwd_kernel<<<(unsigned)rc, CE_NT, 0, ctx->stream>>>(st ? NULL : losses + r0, st ? NULL : lse + r0,
                                                           st ? lmax + r0 : NULL, st ? st + 2 * r0 : NULL, logits,
                                                           targets + r0, V, v0, softcap);
    CUDA_LAUNCH_CHECK(ctx);
  }
}

static void ce_bwd_core_any(sl_kctx *ctx, float *dx, float *dw, const void *x, const void *w, const int32_t *targets,
                            const float *lse, float scale, int64_t N, int64_t C, int64_t V, int64_t v0, int slice,
                            cudaDataType_t ab, const char *op, float softcap) {
  int b16 = ab == CUDA_R_16BF;
  size_t es = b16 ? 2 : 4;
  int64_t R = ce_chunk_rows(N, V);
  size_t lbytes = sl_cuda_align((size_t)(R * V) * sizeof(float));
  size_t need = b16 ? lbytes + (size_t)(R * V) * 2 : (size_t)(R * V) * sizeof(float);
  char *ws = (char *)sl_cuda_scratch(ctx, need, op);
  if (!ws) return;
  float *logits = (float *)ws;
  uint16_t *dl16 = (uint16_t *)(ws + lbytes);
  const void *dl = b16 ? (const void *)dl16 : (const void *)logits;
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    int64_t rc = N - r0 < R ? N - r0 : R;
    const void *xc = (const char *)x + (size_t)(r0 * C) * es;
    if (sl_cuda_rm_xwT(ctx, logits, xc, w, rc, C, V, 0.0f, ab)) return;
    if (b16) sl_cuda_round_bf16(ctx, logits, rc * V);
    ce_bwd_kernel<<<(unsigned)rc, CE_NT, 0, ctx->stream>>>(logits, targets + r0, lse + r0, scale, V, v0, slice != 0,
                                                           softcap);
    CUDA_LAUNCH_CHECK(ctx);
    if (b16) sl_cuda_f32_to_bf16(ctx, dl16, logits, rc * V); /* dlogits stored in bf16 */
    /* dlogits (rc, V) plays dout (N, OC = V) of a linear layer with IC = C */
    if (dx && sl_cuda_rm_dx(ctx, dx + r0 * C, dl, w, rc, C, V, ab)) return;
    if (dw && sl_cuda_rm_dw(ctx, dw, dl, xc, rc, C, V, ab)) return;
  }
}

void sl_cuda_ce_fwd_core(sl_kctx *ctx, const float *x, const float *w, const int32_t *targets, int64_t N, int64_t C,
                         int64_t V, int64_t v0, float *losses, float *lse, float *lmax, float *st, const char *op,
                         float softcap) {
  ce_fwd_core_any(ctx, x, w, targets, N, C, V, v0, losses, lse, lmax, st, CUDA_R_32F, op, softcap);
}

void sl_cuda_ce_bwd_core(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                         const float *lse, float scale, int64_t N, int64_t C, int64_t V, int64_t v0, int slice,
                         const char *op, float softcap) {
  ce_bwd_core_any(ctx, dx, dw, x, w, targets, lse, scale, N, C, V, v0, slice, CUDA_R_32F, op, softcap);
}

static void ce_fwd_any(sl_kctx *ctx, float *losses, float *lse, const void *x, const void *w, const int32_t *targets,
                       int64_t N, int64_t C, int64_t V, cudaDataType_t ab, float softcap) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && V > 0);
  if (N == 0) return;
  ce_fwd_core_any(ctx, x, w, targets, N, C, V, 0, losses, lse, NULL, NULL, ab, "lmhead_ce_fwd", softcap);
}

static void ce_bwd_any(sl_kctx *ctx, float *dx, float *dw, const void *x, const void *w, const int32_t *targets,
                       const float *lse, float scale, int64_t N, int64_t C, int64_t V, cudaDataType_t ab,
                       float softcap) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C > 0 && V > 0);
  if (N == 0 || (!dx && !dw)) return;
  ce_bwd_core_any(ctx, dx, dw, x, w, targets, lse, scale, N, C, V, 0, 0, ab, "lmhead_ce_bwd", softcap);
}

void sl_cuda_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                           const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap) {
  ce_fwd_any(ctx, losses, lse, x, w, targets, N, C, V, CUDA_R_32F, softcap);
}
void sl_cuda_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                           const float *lse, float scale, int64_t N, int64_t C, int64_t V, float softcap) {
  ce_bwd_any(ctx, dx, dw, x, w, targets, lse, scale, N, C, V, CUDA_R_32F, softcap);
}
void sl_cuda_lmhead_ce_fwd_b16(sl_kctx *ctx, float *losses, float *lse, const uint16_t *x, const uint16_t *w,
                               const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap) {
  ce_fwd_any(ctx, losses, lse, x, w, targets, N, C, V, CUDA_R_16BF, softcap);
}
void sl_cuda_lmhead_ce_bwd_b16(sl_kctx *ctx, float *dx, float *dw, const uint16_t *x, const uint16_t *w,
                               const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V,
                               float softcap) {
  ce_bwd_any(ctx, dx, dw, x, w, targets, lse, scale, N, C, V, CUDA_R_16BF, softcap);
}
