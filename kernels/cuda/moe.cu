/* kernels/cuda/moe.cu — the mixture-of-experts ops (kernels/kernels.h): a
 * thread per token for the router's scores (softmax or sigmoid) / top-k and its backward (the
 * CPU twin's loops, kernels/cpu/moe.c; the capacity's rank, a thread per slot), a thread per group for the
 * grouping (each walks the slots in order: deterministic, tokens ascending
 * in its group, no atomics) after one thread's prefix sum of the counts,
 * grid-stride loops for the row moves. 64-bit indexing. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.cuh"
#define SL_MOE_FN static __device__ inline
#include "kernels/moe_rows.h"

#define GRID_STRIDE(i, n)                                                                                              \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
#define NT 256

static __global__ void route_kernel(float *probs, int32_t *sel, float *wts, float *lse, const float *logits,
                                    const float *bias, int64_t N, int64_t E, int64_t k, int mode, float scale) {
  GRID_STRIDE(t, N)
  sl_moe_route_row(probs + t * E, sel + t * k, wts + t * k, lse ? lse + t : NULL, logits + t * E, bias, E, k, mode,
                   scale);
}
/* The slots' groups (sl_moe_key, G of them): counts, prefix sum, then a thread per group walks the slots in order. */
static __global__ void count_kernel(int32_t *offs, const int32_t *sel, int64_t S, int64_t E, int64_t G) {
  GRID_STRIDE(g, G) {
    int32_t n = 0;
    for (int64_t s = 0; s < S; s++) n += sl_moe_key(sel[s], E) == g;
    offs[g + 1] = n;
  }
}
static __global__ void prefix_kernel(int32_t *offs, int64_t G) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    offs[0] = 0;
    for (int64_t g = 0; g < G; g++) offs[g + 1] += offs[g];
  }
}
static __global__ void group_kernel(int32_t *perm, int32_t *pos, const int32_t *offs, const int32_t *sel, int64_t S,
                                    int64_t E, int64_t G) {
  GRID_STRIDE(g, G) {
    int32_t r = offs[g];
    for (int64_t s = 0; s < S; s++)
      if (sl_moe_key(sel[s], E) == g) {
        perm[r] = (int32_t)s;
        pos[s] = r++;
      }
  }
}
static void group_slots(sl_kctx *ctx, int32_t *offs, int32_t *perm, int32_t *pos, const int32_t *sel, int64_t S,
                        int64_t E, int64_t G) {
  count_kernel<<<sl_cuda_blocks(G, 64), 64, 0, ctx->stream>>>(offs, sel, S, E, G);
  prefix_kernel<<<1, 1, 0, ctx->stream>>>(offs, G);
  group_kernel<<<sl_cuda_blocks(G, 64), 64, 0, ctx->stream>>>(perm, pos, offs, sel, S, E, G);
}
/* The capacity (the CPU's drop_slots): a thread per permuted row of the dropless grouping, then per slot. */
static __global__ void drop_kernel(int32_t *sel, const float *wts, const int32_t *offs, const int32_t *perm, int64_t S,
                                   int64_t cap) {
  GRID_STRIDE(r, S) {
    int64_t e = 0;
    while (offs[e + 1] <= r) e++;
    if (sl_moe_rank(wts, perm, offs[e], offs[e + 1], r) >= cap) sel[perm[r]] = (int32_t)(-1 - e);
  }
}
static __global__ void drop_wts_kernel(float *wts, const int32_t *sel, int64_t S) {
  GRID_STRIDE(s, S) if (sel[s] < 0) wts[s] = 0.0f;
}
void sl_cuda_moe_route_fwd(sl_kctx *ctx, float *probs, int32_t *sel, float *wts, int32_t *offs, int32_t *perm,
                           int32_t *pos, float *lse, const float *logits, const float *bias, int64_t N, int64_t E,
                           int64_t k, int mode, float scale, int64_t cap) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && E >= 1 && k >= 1 && k <= E && cap >= 0 && !((mode & SL_MOE_SIGMOID) && lse));
  int64_t S = N * k;
  if (N > 0)
    route_kernel<<<sl_cuda_blocks(N, 128), 128, 0, ctx->stream>>>(probs, sel, wts, lse, logits, bias, N, E, k, mode,
                                                                  scale);
  if (cap > 0 && cap < N && S > 0) {
    group_slots(ctx, offs, perm, pos, sel, S, E, E);
    drop_kernel<<<sl_cuda_blocks(S, 128), 128, 0, ctx->stream>>>(sel, wts, offs, perm, S, cap);
    drop_wts_kernel<<<sl_cuda_blocks(S, NT), NT, 0, ctx->stream>>>(wts, sel, S);
  }
  group_slots(ctx, offs, perm, pos, sel, S, E, 2 * E);
  CUDA_LAUNCH_CHECK(ctx);
}

static __global__ void route_bwd_kernel(float *dlogits, const float *dwts, const float *probs, const int32_t *sel,
                                        const float *wts, const float *gp, const float *lse, float zg, int64_t N,
                                        int64_t E, int64_t k, int mode, float scale) {
  GRID_STRIDE(t, N)
  sl_moe_route_bwd_row(dlogits + t * E, dwts + t * k, probs + t * E, sel + t * k, wts + t * k, gp,
                       lse ? zg * lse[t] : 0.0f, E, k, mode, scale);
}
void sl_cuda_moe_route_bwd(sl_kctx *ctx, float *dlogits, const float *dwts, const float *probs, const int32_t *sel,
                           const float *wts, const float *gp, const float *lse, float zg, int64_t N, int64_t E,
                           int64_t k, int mode, float scale) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && E >= 1 && k >= 1 && k <= 64 && !((mode & SL_MOE_SIGMOID) && (lse || zg != 0.0f)));
  if (N == 0) return;
  route_bwd_kernel<<<sl_cuda_blocks(N, 128), 128, 0, ctx->stream>>>(dlogits, dwts, probs, sel, wts, gp, lse, zg, N, E,
                                                                    k, mode, scale);
  CUDA_LAUNCH_CHECK(ctx);
}

static __global__ void permute_fwd_kernel(float *xp, const float *x, const int32_t *pos, int64_t S, int64_t k,
                                          int64_t C) {
  GRID_STRIDE(i, S * C) {
    int64_t s = i / C, c = i - s * C;
    xp[(int64_t)pos[s] * C + c] = x[(s / k) * C + c];
  }
}
static __global__ void permute_bwd_kernel(float *dx, const float *dxp, const int32_t *pos, int64_t N, int64_t k,
                                          int64_t C) {
  GRID_STRIDE(i, N * C) {
    int64_t t = i / C, c = i - t * C;
    float acc = dx[i];
    for (int64_t j = 0; j < k; j++) acc += dxp[(int64_t)pos[t * k + j] * C + c];
    dx[i] = acc;
  }
}
void sl_cuda_moe_permute_fwd(sl_kctx *ctx, float *xp, const float *x, const int32_t *pos, int64_t N, int64_t k,
                             int64_t C) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && k >= 1 && C >= 0);
  if (N * k * C == 0) return;
  permute_fwd_kernel<<<sl_cuda_blocks(N * k * C, NT), NT, 0, ctx->stream>>>(xp, x, pos, N * k, k, C);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_moe_permute_bwd(sl_kctx *ctx, float *dx, const float *dxp, const int32_t *pos, int64_t N, int64_t k,
                             int64_t C) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && k >= 1 && C >= 0);
  if (N * C == 0) return;
  permute_bwd_kernel<<<sl_cuda_blocks(N * C, NT), NT, 0, ctx->stream>>>(dx, dxp, pos, N, k, C);
  CUDA_LAUNCH_CHECK(ctx);
}

static __global__ void combine_fwd_kernel(float *out, const float *yp, const float *wts, const int32_t *pos, int64_t N,
                                          int64_t k, int64_t C) {
  GRID_STRIDE(i, N * C) {
    int64_t t = i / C, c = i - t * C;
    float acc = 0;
    for (int64_t j = 0; j < k; j++) acc += wts[t * k + j] * yp[(int64_t)pos[t * k + j] * C + c];
    out[i] = acc;
  }
}
static __global__ void combine_dyp_kernel(float *dyp, const float *dout, const float *wts, const int32_t *pos,
                                          int64_t S, int64_t k, int64_t C) {
  GRID_STRIDE(i, S * C) {
    int64_t s = i / C, c = i - s * C;
    dyp[(int64_t)pos[s] * C + c] += wts[s] * dout[(s / k) * C + c];
  }
}
static __global__ void combine_dw_kernel(float *dwts, const float *dout, const float *yp, const int32_t *pos, int64_t S,
                                         int64_t k, int64_t C) {
  GRID_STRIDE(s, S) {
    const float *g = dout + (s / k) * C, *y = yp + (int64_t)pos[s] * C;
    float dot = 0;
    for (int64_t c = 0; c < C; c++) dot += g[c] * y[c];
    dwts[s] += dot;
  }
}
void sl_cuda_moe_combine_fwd(sl_kctx *ctx, float *out, const float *yp, const float *wts, const int32_t *pos, int64_t N,
                             int64_t k, int64_t C) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && k >= 1 && C >= 0);
  if (N * C == 0) return;
  combine_fwd_kernel<<<sl_cuda_blocks(N * C, NT), NT, 0, ctx->stream>>>(out, yp, wts, pos, N, k, C);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_moe_combine_bwd(sl_kctx *ctx, float *dyp, float *dwts, const float *dout, const float *yp,
                             const float *wts, const int32_t *pos, int64_t N, int64_t k, int64_t C) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && k >= 1 && C >= 0);
  if (N * k * C == 0) return;
  combine_dyp_kernel<<<sl_cuda_blocks(N * k * C, NT), NT, 0, ctx->stream>>>(dyp, dout, wts, pos, N * k, k, C);
  combine_dw_kernel<<<sl_cuda_blocks(N * k, 128), 128, 0, ctx->stream>>>(dwts, dout, yp, pos, N * k, k, C);
  CUDA_LAUNCH_CHECK(ctx);
}
