/* kernels/cuda/mamba.cu — Mamba (v1) conv1d and selective scan.
 *
 * conv1d: forward and dx are one thread per output element; dw/dbias are a
 * deterministic two-pass reduction over the B*T rows (row groups of 64 ->
 * partials in scratch -> ordered sum).
 *
 * Selective scan: one thread per (b, d) channel, 128 channels per block,
 * sequential in time, the S-wide state h[] and A[] in registers (S <= 64,
 * compile-time bound SMAX in {16, 32, 64}). Forward writes the state at the
 * start of every chunk to ckpt. Backward walks chunks in reverse: it
 * recomputes the chunk's states from ckpt forward into scratch (the states
 * before each step, (B, chunk, S, D), coalesced over d), then steps back
 * through the chunk carrying dh[]. Cross-channel sums are deterministic:
 *  - dBm/dCm (sum over d): per step a warp xor-shuffle reduction plus a fixed
 *    order sum over the block's 4 warps -> partials (B, nblk, T, 2S) ->
 *    ordered sum over the nblk channel blocks;
 *  - dA_log, dDp (sum over b): per-thread totals (B, D, S) and (B, D) ->
 *    ordered sum over b.
 * Scratch for backward: 4 * (B*chunk*S*D + B*nblk*T*2S + B*D*(S+1)) bytes.
 * Document resets (seg, kernels.h): the conv skips the taps before t's
 * document start (forward, dx and dw alike); the scan zeroes its state before
 * a document's first step (the recompute stores that 0 as the state the step
 * decays) and cuts the carried dh there. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mamba.cuh"

#define CONV_ROWS_PER_PART 64
#define SCAN_NT 128

/* ---- conv1d ------------------------------------------------------------------ */
static __global__ void conv1d_fwd_kernel(float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                                         int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg) {
  int64_t n = B * T * D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % D, bt = i / D, t = bt % T, b = bt / T;
    const int64_t lo = seg ? seg[bt] : 0; /* t's document start */
    float acc = bias ? bias[d] : 0.0f;
    for (int64_t k = 0; k < K; k++) {
      int64_t ts = t - (K - 1) + k;
      if (ts >= lo) acc += w[d * K + k] * x[(b * T + ts) * ldx + d];
    }
    out[i] = acc;
  }
}

static __global__ void conv1d_bwd_dx_kernel(float *dx, int64_t ldx, const float *dout, const float *w, int64_t B,
                                            int64_t T, int64_t D, int64_t K, const int32_t *seg) {
  int64_t n = B * T * D;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i % D, bs = i / D, s = bs % T, b = bs / T;
    float acc = 0.0f;
    for (int64_t k = 0; k < K; k++) {
      int64_t t = s + (K - 1) - k; /* the output that read x[s] through tap k */
      if (t < T && !(seg && seg[b * T + t] > s)) acc += w[d * K + k] * dout[(b * T + t) * D + d];
    }
    dx[(b * T + s) * ldx + d] += acc;
  }
}

/* part[p][d*(K+1) + k] = sum over rows of group p of dout * x-tap (k < K),
 * part[p][d*(K+1) + K] = sum of dout. */
static __global__ void conv1d_bwd_dw_pass1(float *part, const float *dout, const float *x, int64_t ldx, int64_t B,
                                           int64_t T, int64_t D, int64_t K, const int32_t *seg) {
  int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t p = blockIdx.y;
  if (d >= D) return;
  int64_t r0 = p * CONV_ROWS_PER_PART, r1 = min(B * T, r0 + CONV_ROWS_PER_PART);
  float *dst = part + (p * D + d) * (K + 1);
  for (int64_t k = 0; k <= K; k++) {
    float s = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
      int64_t t = r % T, b = r / T;
      float g = dout[r * D + d];
      if (k == K) {
        s += g;
      } else {
        int64_t ts = t - (K - 1) + k;
        if (ts >= (seg ? seg[r] : 0)) s += g * x[(b * T + ts) * ldx + d];
      }
    }
    dst[k] = s;
  }
}
static __global__ void conv1d_bwd_dw_pass2(float *dw, float *dbias, const float *part, int64_t P, int64_t D,
                                           int64_t K) {
  int64_t n = D * (K + 1);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int64_t p = 0; p < P; p++) s += part[p * n + i];
    int64_t d = i / (K + 1), k = i % (K + 1);
    if (k < K) {
      if (dw) dw[d * K + k] += s;
    } else if (dbias) {
      dbias[d] += s;
    }
  }
}

void sl_cuda_conv1d_fwd(sl_kctx *ctx, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                        int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && D >= 0 && K >= 1 && ldx >= D);
  int64_t n = B * T * D;
  if (n == 0) return;
  conv1d_fwd_kernel<<<sl_cuda_blocks(n, 256), 256, 0, ctx->stream>>>(out, x, ldx, w, bias, B, T, D, K, seg);
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_conv1d_bwd(sl_kctx *ctx, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout,
                        const float *x, int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K,
                        const int32_t *seg) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && D >= 0 && K >= 1 && ldx_in >= D);
  SL_CUDA_REQUIRE(ctx, !dx || ldx >= D);
  int64_t n = B * T * D;
  if (n == 0) return;
  if (dx) {
    conv1d_bwd_dx_kernel<<<sl_cuda_blocks(n, 256), 256, 0, ctx->stream>>>(dx, ldx, dout, w, B, T, D, K, seg);
    CUDA_LAUNCH_CHECK(ctx);
  }
  if (dw || dbias) {
    int64_t P = (B * T + CONV_ROWS_PER_PART - 1) / CONV_ROWS_PER_PART;
    SL_CUDA_REQUIRE(ctx, P <= 65535);
    float *part = (float *)sl_cuda_scratch(ctx, (size_t)(P * D * (K + 1)) * sizeof(float), "conv1d_bwd");
    if (!part) return;
    dim3 grid((unsigned)((D + 127) / 128), (unsigned)P);
    conv1d_bwd_dw_pass1<<<grid, 128, 0, ctx->stream>>>(part, dout, x, ldx_in, B, T, D, K, seg);
    CUDA_LAUNCH_CHECK(ctx);
    conv1d_bwd_dw_pass2<<<sl_cuda_blocks(D * (K + 1), 256), 256, 0, ctx->stream>>>(dw, dbias, part, P, D, K);
    CUDA_LAUNCH_CHECK(ctx);
  }
}

/* ---- selective scan: forward --------------------------------------------------- */
/* a document starts at t > 0: the state is reset to 0 before step t */
__device__ __forceinline__ bool scan_reset(const int32_t *seg, int64_t bt, int t) {
  return seg && t > 0 && seg[bt] == t;
}

template <int SMAX>
static __global__ void __launch_bounds__(SCAN_NT)
    scan_fwd_kernel(float *y, float *ckpt, const float *u, const float *dt, const float *A_log, const float *Bm,
                    const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, int T, int D, int S,
                    int chunk) {
  const int d = blockIdx.x * SCAN_NT + threadIdx.x, b = blockIdx.y;
  if (d >= D) return; /* no block-wide synchronisation below */
  const int nck = (T + chunk - 1) / chunk;
  float A[SMAX], h[SMAX];
#pragma unroll
  for (int s = 0; s < SMAX; s++) {
    A[s] = s < S ? -expf(A_log[(int64_t)d * S + s]) : 0.0f;
    h[s] = 0.0f;
  }
  const float Dd = Dp ? Dp[d] : 0.0f;
  for (int t = 0; t < T; t++) {
    if (ckpt && t % chunk == 0) {
      float *cp = ckpt + (((int64_t)b * nck + t / chunk) * D + d) * S;
#pragma unroll
      for (int s = 0; s < SMAX; s++)
        if (s < S) cp[s] = h[s];
    }
    const int64_t bt = (int64_t)b * T + t;
    const float dl = sl_dev_softplus(dt[bt * D + d]), uu = u[bt * D + d];
    const float *Bt = Bm + bt * ldbc, *Ct = Cm + bt * ldbc;
    if (scan_reset(seg, bt, t)) {
#pragma unroll
      for (int s = 0; s < SMAX; s++) h[s] = 0.0f; /* a document starts: the state it starts from */
    }
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < SMAX; s++) {
      if (s < S) {
        h[s] = expf(dl * A[s]) * h[s] + dl * Bt[s] * uu;
        acc += Ct[s] * h[s];
      }
    }
    y[bt * D + d] = acc + Dd * uu;
  }
}

/* ---- selective scan: backward --------------------------------------------------- */
template <int SMAX>
static __global__ void __launch_bounds__(SCAN_NT)
    scan_bwd_kernel(float *du, float *ddt, float *hs, float *pBC, float *pA, float *pD, const float *dy, const float *u,
                    const float *dt, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                    const float *Dp, const int32_t *seg, const float *ckpt, int T, int D, int S, int chunk) {
  constexpr int NW = SCAN_NT / 32;
  __shared__ float red[2][NW][2 * SMAX];
  const int blk = blockIdx.x, nblk = gridDim.x, b = blockIdx.y;
  const int d = blk * SCAN_NT + threadIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool act = d < D; /* inactive lanes still join the block reductions */
  const int nck = (T + chunk - 1) / chunk;
  float A[SMAX], dh[SMAX], dA[SMAX], h[SMAX];
#pragma unroll
  for (int s = 0; s < SMAX; s++) {
    A[s] = (act && s < S) ? -expf(A_log[(int64_t)d * S + s]) : 0.0f;
    dh[s] = 0.0f;
    dA[s] = 0.0f;
  }
  const float Dd = (act && Dp) ? Dp[d] : 0.0f;
  float dD = 0.0f;
  int par = 0;
  for (int c = nck - 1; c >= 0; c--) {
    const int t0 = c * chunk, t1 = min(T, t0 + chunk);
    if (act) {
      const float *cp = ckpt + (((int64_t)b * nck + c) * D + d) * S;
#pragma unroll
      for (int s = 0; s < SMAX; s++) h[s] = s < S ? cp[s] : 0.0f;
      for (int t = t0; t < t1; t++) {
        const int64_t bt = (int64_t)b * T + t;
        const float dl = sl_dev_softplus(dt[bt * D + d]), uu = u[bt * D + d];
        const float *Bt = Bm + bt * ldbc;
        float *hrow = hs + (((int64_t)b * chunk + (t - t0)) * S) * D + d;
        if (scan_reset(seg, bt, t)) {
#pragma unroll
          for (int s = 0; s < SMAX; s++) h[s] = 0.0f;
        }
#pragma unroll
        for (int s = 0; s < SMAX; s++) {
          if (s < S) {
            hrow[(int64_t)s * D] = h[s]; /* the state step t decays (0 at a document start) */
            h[s] = expf(dl * A[s]) * h[s] + dl * Bt[s] * uu;
          }
        }
      }
    }
    for (int t = t1 - 1; t >= t0; t--) {
      const int64_t bt = (int64_t)b * T + t;
      float dtr = 0.0f, dl = 0.0f, uu = 0.0f, gy = 0.0f;
      if (act) {
        dtr = dt[bt * D + d];
        dl = sl_dev_softplus(dtr);
        uu = u[bt * D + d];
        gy = dy[bt * D + d];
      }
      const float *Bt = Bm + bt * ldbc, *Ct = Cm + bt * ldbc;
      const float *hrow = hs + (((int64_t)b * chunk + (t - t0)) * S) * D + d;
      const bool rs = scan_reset(seg, bt, t);
      dD += gy * uu;
      float du_acc = Dd * gy, ddl = 0.0f;
      float dBc[SMAX], dCc[SMAX];
#pragma unroll
      for (int s = 0; s < SMAX; s++) {
        dBc[s] = 0.0f;
        dCc[s] = 0.0f;
        if (s < S) {
          const float hp = act ? hrow[(int64_t)s * D] : 0.0f;
          const float a = expf(dl * A[s]);
          const float Bs = Bt[s], Cs = Ct[s];
          const float ht = a * hp + dl * Bs * uu;
          dCc[s] = gy * ht;
          dh[s] += Cs * gy; /* dL/dh_t: from y_t plus the carry from t+1 */
          dBc[s] = dh[s] * dl * uu;
          du_acc += dh[s] * dl * Bs;
          ddl += dh[s] * (A[s] * a * hp + Bs * uu);
          dA[s] += dh[s] * dl * a * hp;
          dh[s] = rs ? 0.0f : dh[s] * a; /* carry to h_{t-1}; cut at a document start */
        }
      }
      if (act) {
        if (du) du[bt * D + d] += du_acc;
        if (ddt) ddt[bt * D + d] += ddl * sl_dev_dsoftplus(dtr);
      }
      /* block sum over channels of dBc, dCc -> pBC[b, blk, t, 0..2S) */
#pragma unroll
      for (int s = 0; s < SMAX; s++) {
        if (s < S) {
          float vb = dBc[s], vc = dCc[s];
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) {
            vb += __shfl_xor_sync(0xffffffffu, vb, o);
            vc += __shfl_xor_sync(0xffffffffu, vc, o);
          }
          if (lane == 0) {
            red[par][warp][s] = vb;
            red[par][warp][S + s] = vc;
          }
        }
      }
      __syncthreads(); /* double-buffered red: one barrier per step suffices */
      if (threadIdx.x < 2 * S) {
        float acc = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) acc += red[par][w][threadIdx.x];
        pBC[(((int64_t)b * nblk + blk) * T + t) * 2 * S + threadIdx.x] = acc;
      }
      par ^= 1;
    }
  }
  if (act) {
#pragma unroll
    for (int s = 0; s < SMAX; s++)
      if (s < S) pA[((int64_t)b * D + d) * S + s] = dA[s];
    pD[(int64_t)b * D + d] = dD;
  }
}

/* dBm / dCm (b, t, s) += ordered sum over channel blocks */
static __global__ void scan_bc_reduce(float *dBm, float *dCm, int64_t ldbc, const float *pBC, int64_t B, int64_t T,
                                      int64_t S, int64_t nblk) {
  int64_t n = B * T * 2 * S;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t j = i % (2 * S), bt = i / (2 * S), t = bt % T, b = bt / T;
    float acc = 0.0f;
    for (int64_t k = 0; k < nblk; k++) acc += pBC[((b * nblk + k) * T + t) * 2 * S + j];
    if (j < S) {
      if (dBm) dBm[bt * ldbc + j] += acc;
    } else if (dCm) {
      dCm[bt * ldbc + (j - S)] += acc;
    }
  }
}

/* dA_log (d, s) += A * sum_b pA ; dDp (d) += sum_b pD */
static __global__ void scan_ad_reduce(float *dA_log, float *dDp, const float *A_log, const float *pA, const float *pD,
                                      int64_t B, int64_t D, int64_t S) {
  int64_t n = D * (S + 1);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t d = i / (S + 1), s = i % (S + 1);
    float acc = 0.0f;
    if (s < S) {
      for (int64_t b = 0; b < B; b++) acc += pA[(b * D + d) * S + s];
      if (dA_log) dA_log[d * S + s] += acc * -expf(A_log[d * S + s]);
    } else {
      for (int64_t b = 0; b < B; b++) acc += pD[b * D + d];
      if (dDp) dDp[d] += acc;
    }
  }
}

static int scan_check(sl_kctx *ctx, int64_t B, int64_t T, int64_t D, int64_t S, int64_t chunk, int64_t ldbc) {
  if (B < 0 || T < 0 || D < 0 || S < 1 || S > 64 || chunk < 1 || ldbc < S || B > 65535 || T > 0x7fffffffLL ||
      D > 0x7fffffffLL)
    return sl_cuda_fail(ctx, SL_EINPUT,
                        "scan: unsupported shape B %lld T %lld D %lld S %lld chunk %lld ldbc %lld "
                        "(expected 1 <= S <= 64, chunk >= 1, ldbc >= S)",
                        (long long)B, (long long)T, (long long)D, (long long)S, (long long)chunk, (long long)ldbc);
  return SL_OK;
}

#define SCAN_DISPATCH(S, LAUNCH)                                                                                       \
  do {                                                                                                                 \
    if ((S) <= 16) LAUNCH(16);                                                                                         \
    else if ((S) <= 32) LAUNCH(32);                                                                                    \
    else LAUNCH(64);                                                                                                   \
  } while (0)

void sl_cuda_scan_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                      const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, int64_t B,
                      int64_t T, int64_t D, int64_t S, int64_t chunk) {
  SL_CUDA_BEGIN(ctx);
  if (scan_check(ctx, B, T, D, S, chunk, ldbc)) return;
  if (B == 0 || T == 0 || D == 0) return;
  /* chunk > T and chunk = T give the same ckpt layout (one chunk) */
  int ck = (int)(chunk < T ? chunk : T);
  dim3 grid((unsigned)((D + SCAN_NT - 1) / SCAN_NT), (unsigned)B);
#define FWD(SM)                                                                                                        \
  scan_fwd_kernel<SM>                                                                                                  \
      <<<grid, SCAN_NT, 0, ctx->stream>>>(y, ckpt, u, dt, A_log, Bm, Cm, ldbc, Dp, seg, (int)T, (int)D, (int)S, ck)
  SCAN_DISPATCH(S, FWD);
#undef FWD
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_scan_bwd(sl_kctx *ctx, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                      const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                      const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, const float *ckpt, int64_t B,
                      int64_t T, int64_t D, int64_t S, int64_t chunk) {
  SL_CUDA_BEGIN(ctx);
  if (scan_check(ctx, B, T, D, S, chunk, ldbc)) return;
  if (B == 0 || T == 0 || D == 0) return;
  int ck = (int)(chunk < T ? chunk : T);
  int64_t nblk = (D + SCAN_NT - 1) / SCAN_NT;
  size_t b_hs = sl_cuda_align((size_t)(B * ck * S * D) * sizeof(float));
  size_t b_bc = sl_cuda_align((size_t)(B * nblk * T * 2 * S) * sizeof(float));
  size_t b_a = sl_cuda_align((size_t)(B * D * S) * sizeof(float));
  size_t b_d = sl_cuda_align((size_t)(B * D) * sizeof(float));
  char *ws = (char *)sl_cuda_scratch(ctx, b_hs + b_bc + b_a + b_d, "scan_bwd");
  if (!ws) return;
  float *hs = (float *)ws, *pBC = (float *)(ws + b_hs), *pA = (float *)(ws + b_hs + b_bc),
        *pD = (float *)(ws + b_hs + b_bc + b_a);
  dim3 grid((unsigned)nblk, (unsigned)B);
#define BWD(SM)                                                                                                        \
  scan_bwd_kernel<SM><<<grid, SCAN_NT, 0, ctx->stream>>>(du, ddt, hs, pBC, pA, pD, dy, u, dt, A_log, Bm, Cm, ldbc, Dp, \
                                                         seg, ckpt, (int)T, (int)D, (int)S, ck)
  SCAN_DISPATCH(S, BWD);
#undef BWD
  CUDA_LAUNCH_CHECK(ctx);
  if (dBm || dCm) {
    scan_bc_reduce<<<sl_cuda_blocks(B * T * 2 * S, 256), 256, 0, ctx->stream>>>(dBm, dCm, ldbc, pBC, B, T, S, nblk);
    CUDA_LAUNCH_CHECK(ctx);
  }
  if (dA_log || dDp) {
    scan_ad_reduce<<<sl_cuda_blocks(D * (S + 1), 256), 256, 0, ctx->stream>>>(dA_log, dDp, A_log, pA, pD, B, D, S);
    CUDA_LAUNCH_CHECK(ctx);
  }
}
