/* kernels/cuda/mamba2.cu — the Mamba-2 SSD scan (ssd_fwd / ssd_bwd), the
 * CUDA twin of kernels/cpu/mamba2.c (contract: kernels/kernels.h).
 *
 * One block per (h, b), one thread per channel p of the head (P <= 256,
 * 32 * ceil(P / 32) threads), sequential in time, the thread's S-wide state
 * row s[p, :] in registers (S <= 128, compile-time bound SMAX in
 * {16, 32, 64, 128}). Forward writes the state at the start of every chunk
 * to ckpt (B, nck, H, P, S). Backward walks chunks in reverse: it recomputes
 * the chunk's states from ckpt into scratch (the states before each step,
 * (B, H, chunk, S, P), coalesced over p), then steps back through the chunk
 * carrying ds[] (cut to 0 at a document start). The recompute runs over the
 * chunk once per pass of RT states (8 at SMAX 16, 16 at SMAX 64, 32 at
 * SMAX 32 and 128), so only RT states are live beside ds[]: that keeps
 * the backward free of register spills up to S = 128 (before, ds[] and the
 * whole recomputed row were live together: 612 B spilled per thread at
 * SMAX 128 on sm_90). A channel's states are independent, so the passes
 * change no value; forward and recompute both step a state with ssd_next
 * (explicit fma / mul intrinsics), so the recomputed states are the
 * forward's bit for bit (test_cuda_kernels: every gradient at chunk k equals
 * chunk 1's, which reads every state from the forward). Every summation
 * order below is as it was before the passes. Sums over threads are
 * deterministic (no atomics):
 *  - per step, dB / dC (over p) and ddelta (over p and n): a warp
 *    xor-shuffle reduction plus a fixed-order sum over the block's warps;
 *    dB / dC go to partials (B, T, H, 2S), then an ordered sum over the
 *    heads of each group (ssd_bc_reduce); ddt is written by one thread;
 *  - dA_log, dDp, ddt_bias (over b, t, p): per-block totals (B, H, 3) in a
 *    fixed order, then an ordered sum over b (ssd_h_reduce).
 * Scratch for backward: 4 * (B H chunk S P + B T H 2S + 3 B H) bytes. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mamba2.cuh"

#define SSD_PMAX 256 /* channels per head: threads per block */
#define SSD_NWMAX (SSD_PMAX / 32)

/* delta = clamp(softplus(v), lo, hi) and its derivative in v (0 where the
 * clamp bites, as torch.clamp's gradient) */
__device__ __forceinline__ float ssd_delta(float v, float lo, float hi) {
  const float d = sl_dev_softplus(v);
  return d < lo ? lo : d > hi ? hi : d;
}
__device__ __forceinline__ float ssd_ddelta(float v, float lo, float hi) {
  const float d = sl_dev_softplus(v);
  return d >= lo && d <= hi ? sl_dev_dsoftplus(v) : 0.0f;
}
__device__ __forceinline__ bool ssd_reset(const int32_t *seg, int64_t bt, int t) {
  return t == 0 || (seg && seg[bt] == t);
}

/* One step of one state: a s + B dx (a reset drops s). Rounding pinned by the
 * intrinsics (no contraction choice left to the compiler): the forward and
 * the backward's recompute both call it, so their states agree bit for bit. */
__device__ __forceinline__ float ssd_next(float s, float decay, float Bn, float dx, bool rs) {
  return __fmaf_rn(Bn, dx, rs ? 0.0f : __fmul_rn(decay, s));
}

/* ---- forward --------------------------------------------------------------------- */
template <int SMAX>
static __global__ void __launch_bounds__(SSD_PMAX)
    ssd_fwd_kernel(float *y, float *ckpt, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                   const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                   const float *Dp, const int32_t *seg, float lo, float hi, int T, int H, int P, int G, int S,
                   int chunk) {
  const int h = blockIdx.x, b = blockIdx.y, p = threadIdx.x;
  if (p >= P) return; /* no block-wide synchronisation below */
  const int g = h / (H / G), nck = (T + chunk - 1) / chunk;
  const float A = -expf(A_log[h]), Dh = Dp[h], bias = dt_bias[h];
  float s[SMAX];
#pragma unroll
  for (int n = 0; n < SMAX; n++) s[n] = 0.0f;
  for (int t = 0; t < T; t++) {
    const int64_t bt = (int64_t)b * T + t;
    if (ckpt && t % chunk == 0) {
      float *cp = ckpt + ((((int64_t)b * nck + t / chunk) * H + h) * P + p) * S;
#pragma unroll
      for (int n = 0; n < SMAX; n++)
        if (n < S) cp[n] = s[n];
    }
    const float delta = ssd_delta(dt[bt * lddt + h] + bias, lo, hi);
    const float decay = expf(delta * A), xv = x[bt * ldx + (int64_t)h * P + p], dx = delta * xv;
    const bool rs = ssd_reset(seg, bt, t);
    const float *Bt = Bm + bt * ldbc + (int64_t)g * S, *Ct = Cm + bt * ldbc + (int64_t)g * S;
    float acc = 0.0f;
#pragma unroll
    for (int n = 0; n < SMAX; n++) {
      if (n < S) {
        s[n] = ssd_next(s[n], decay, Bt[n], dx, rs);
        acc += Ct[n] * s[n];
      }
    }
    y[bt * H * P + (int64_t)h * P + p] = acc + Dh * xv;
  }
}

/* ---- backward -------------------------------------------------------------------- */
/* the block's sum of v (every thread calls it; the result in thread 0) */
__device__ __forceinline__ float ssd_block_sum(float v, float *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float acc = 0.0f;
  if (threadIdx.x == 0)
    for (int w = 0; w < nw; w++) acc += sh[w];
  return acc;
}

template <int SMAX>
static __global__ void __launch_bounds__(SSD_PMAX)
    ssd_bwd_kernel(float *dx, float *ddt, float *hs, float *pBC, float *pH, const float *dy, const float *x,
                   int64_t ldx, const float *dt, int64_t lddt, const float *dt_bias, const float *A_log,
                   const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg,
                   const float *ckpt, float lo, float hi, int T, int H, int P, int G, int S, int chunk) {
  __shared__ float red[2][SSD_NWMAX][2 * SMAX + 1];
  __shared__ float tail[SSD_NWMAX];
  const int h = blockIdx.x, b = blockIdx.y, p = threadIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const bool act = p < P; /* inactive lanes still join the block reductions */
  const int g = h / (H / G), nck = (T + chunk - 1) / chunk, R = 2 * S + 1;
  const float A = -expf(A_log[h]), Dh = Dp[h], bias = dt_bias[h];
  /* states per recompute pass, picked from ptxas -v (8 / 16 / 32 tried) as
   * the largest with no spills on sm_80 and sm_90: at SMAX 64, 32 makes
   * ptxas aim at 128 registers and spill 180 B; at SMAX 16 on sm_80, 16
   * spills 12 B (docs/cuda.md, "Mamba-2 SSD scan: registers") */
  constexpr int RT = SMAX == 16 ? 8 : SMAX == 64 ? 16 : 32;
  float ds[SMAX];
#pragma unroll
  for (int n = 0; n < SMAX; n++) ds[n] = 0.0f;
  float accA = 0.0f, accD = 0.0f, accT = 0.0f; /* dA (before the chain rule through A_log), dDp, ddt_bias */
  int par = 0;
  for (int c = nck - 1; c >= 0; c--) {
    const int t0 = c * chunk, t1 = min(T, t0 + chunk);
    float *hsb = hs + ((int64_t)b * H + h) * chunk * S * P + p; /* (chunk, S, P) */
    /* recompute in passes of RT states (the states of a channel are
     * independent), so that only RT of them are live beside ds[] */
    if (act) {
      const float *cp = ckpt + ((((int64_t)b * nck + c) * H + h) * P + p) * S;
#pragma unroll 1
      for (int n0 = 0; n0 < S; n0 += RT) {
        float sv[RT];
#pragma unroll
        for (int k = 0; k < RT; k++) sv[k] = n0 + k < S ? cp[n0 + k] : 0.0f;
        for (int t = t0; t < t1; t++) {
          const int64_t bt = (int64_t)b * T + t;
          const float delta = ssd_delta(dt[bt * lddt + h] + bias, lo, hi);
          const float decay = expf(delta * A), dxv = delta * x[bt * ldx + (int64_t)h * P + p];
          const bool rs = ssd_reset(seg, bt, t);
          const float *Bt = Bm + bt * ldbc + (int64_t)g * S + n0;
          float *row = hsb + ((int64_t)(t - t0) * S + n0) * P;
#pragma unroll
          for (int k = 0; k < RT; k++) {
            if (n0 + k < S) {
              row[(int64_t)k * P] = sv[k]; /* the state before step t (before a reset) */
              sv[k] = ssd_next(sv[k], decay, Bt[k], dxv, rs);
            }
          }
        }
      }
    }
    for (int t = t1 - 1; t >= t0; t--) {
      const int64_t bt = (int64_t)b * T + t;
      const float v = dt[bt * lddt + h] + bias, delta = ssd_delta(v, lo, hi), decay = expf(delta * A);
      const bool rs = ssd_reset(seg, bt, t);
      const float xv = act ? x[bt * ldx + (int64_t)h * P + p] : 0.0f;
      const float gy = act ? dy[bt * H * P + (int64_t)h * P + p] : 0.0f, dxv = delta * xv;
      const float *Bt = Bm + bt * ldbc + (int64_t)g * S, *Ct = Cm + bt * ldbc + (int64_t)g * S;
      const float *row = hsb + (int64_t)(t - t0) * S * P;
      float sB = 0.0f, q = 0.0f;
      /* per state n: this channel's dB, dC terms, summed over the warp at
       * once (-> red, then pBC[b, t, h, 0..2S)); no per-n arrays live */
#pragma unroll
      for (int n = 0; n < SMAX; n++) {
        if (n < S) {
          const float hp = (act && !rs) ? row[(int64_t)n * P] : 0.0f; /* the state the step decayed */
          const float Bn = Bt[n];
          const float ht = decay * hp + Bn * dxv;
          const float gs = ds[n] + Ct[n] * gy; /* dL/ds_t: from y_t plus the carry from t+1 */
          float vc = gy * ht, vb = gs * dxv;
          sB += gs * Bn;
          q += gs * hp;
          ds[n] = rs ? 0.0f : gs * decay; /* dL/ds_{t-1}; cut at a document start */
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) {
            vb += __shfl_xor_sync(0xffffffffu, vb, o);
            vc += __shfl_xor_sync(0xffffffffu, vc, o);
          }
          if (lane == 0) {
            red[par][warp][n] = vb;
            red[par][warp][S + n] = vc;
          }
        }
      }
      if (act) dx[bt * ldx + (int64_t)h * P + p] += gy * Dh + delta * sB;
      accA += delta * decay * q;
      accD += gy * xv;
      const float part = A * decay * q + xv * sB; /* this channel's share of dL/ddelta (-> ddt) */
      float vp = part;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) vp += __shfl_xor_sync(0xffffffffu, vp, o);
      if (lane == 0) red[par][warp][2 * S] = vp;
      __syncthreads(); /* double-buffered red: one barrier per step suffices */
      for (int j = threadIdx.x; j < R; j += blockDim.x) {
        float acc = 0.0f;
        for (int w = 0; w < nw; w++) acc += red[par][w][j];
        if (j < 2 * S) {
          pBC[(bt * H + h) * 2 * S + j] = acc;
        } else {
          const float dv = acc * ssd_ddelta(v, lo, hi);
          ddt[bt * lddt + h] += dv;
          accT += dv; /* always the same thread (j = 2S) */
        }
      }
      par ^= 1;
    }
  }
  const float sA = ssd_block_sum(accA, tail);
  const float sD = ssd_block_sum(accD, tail);
  float *ph = pH + ((int64_t)b * H + h) * 3;
  if (threadIdx.x == 0) {
    ph[1] = sA;
    ph[2] = sD;
  }
  if (threadIdx.x == (2 * S) % blockDim.x) ph[0] = accT;
}

/* dBm / dCm (b, t, g, n) += the ordered sum over the heads of group g */
static __global__ void ssd_bc_reduce(float *dBm, float *dCm, int64_t ldbc, const float *pBC, int64_t BT, int64_t H,
                                     int64_t G, int64_t S) {
  const int64_t n2 = BT * G * 2 * S, HG = H / G;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n2; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = i % (2 * S), g = (i / (2 * S)) % G, bt = i / (2 * S * G);
    float acc = 0.0f;
    for (int64_t h = g * HG; h < (g + 1) * HG; h++) acc += pBC[(bt * H + h) * 2 * S + j];
    if (j < S) dBm[bt * ldbc + g * S + j] += acc;
    else dCm[bt * ldbc + g * S + (j - S)] += acc;
  }
}

/* ddt_bias, dA_log (through A = -exp(A_log)), dDp (h) += the ordered sum over b */
static __global__ void ssd_h_reduce(float *ddt_bias, float *dA_log, float *dDp, const float *A_log, const float *pH,
                                    int64_t B, int64_t H) {
  for (int64_t h = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; h < H; h += (int64_t)gridDim.x * blockDim.x) {
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
    for (int64_t b = 0; b < B; b++) {
      a0 += pH[(b * H + h) * 3];
      a1 += pH[(b * H + h) * 3 + 1];
      a2 += pH[(b * H + h) * 3 + 2];
    }
    ddt_bias[h] += a0;
    dA_log[h] += a1 * -expf(A_log[h]);
    dDp[h] += a2;
  }
}

static int ssd_check(sl_kctx *ctx, int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, int64_t chunk,
                     int64_t ldx, int64_t lddt, int64_t ldbc) {
  if (B < 0 || T < 0 || H < 0 || G < 1 || H % G || P < 1 || P > SSD_PMAX || S < 1 || S > 128 || chunk < 1 ||
      ldx < H * P || lddt < H || ldbc < G * S || B > 65535 || H > 0x7fffffffLL || T > 0x7fffffffLL)
    return sl_cuda_fail(ctx, SL_EINPUT,
                        "ssd: unsupported shape B %lld T %lld H %lld P %lld G %lld S %lld chunk %lld ldx %lld lddt "
                        "%lld ldbc %lld (expected 1 <= P <= 256, 1 <= S <= 128, H a multiple of G, chunk >= 1, "
                        "ldx >= H*P, lddt >= H, ldbc >= G*S)",
                        (long long)B, (long long)T, (long long)H, (long long)P, (long long)G, (long long)S,
                        (long long)chunk, (long long)ldx, (long long)lddt, (long long)ldbc);
  return SL_OK;
}

#define SSD_DISPATCH(S, LAUNCH)                                                                                        \
  do {                                                                                                                 \
    if ((S) <= 16) LAUNCH(16);                                                                                         \
    else if ((S) <= 32) LAUNCH(32);                                                                                    \
    else if ((S) <= 64) LAUNCH(64);                                                                                    \
    else LAUNCH(128);                                                                                                  \
  } while (0)

void sl_cuda_ssd_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                     const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                     const float *Dp, const int32_t *seg, float dt_min, float dt_max, int64_t B, int64_t T, int64_t H,
                     int64_t P, int64_t G, int64_t S, int64_t chunk) {
  SL_CUDA_BEGIN(ctx);
  if (ssd_check(ctx, B, T, H, P, G, S, chunk, ldx, lddt, ldbc)) return;
  if (B == 0 || T == 0 || H == 0) return;
  /* chunk > T and chunk = T give the same ckpt layout (one chunk) */
  const int ck = (int)(chunk < T ? chunk : T), nt = (int)((P + 31) / 32 * 32);
  dim3 grid((unsigned)H, (unsigned)B);
#define FWD(SM)                                                                                                        \
  ssd_fwd_kernel<SM><<<grid, nt, 0, ctx->stream>>>(y, ckpt, x, ldx, dt, lddt, dt_bias, A_log, Bm, Cm, ldbc, Dp, seg,   \
                                                   dt_min, dt_max, (int)T, (int)H, (int)P, (int)G, (int)S, ck)
  SSD_DISPATCH(S, FWD);
#undef FWD
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_ssd_bwd(sl_kctx *ctx, float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
                     float *dDp, const float *dy, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                     const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                     const float *Dp, const int32_t *seg, const float *ckpt, float dt_min, float dt_max, int64_t B,
                     int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, int64_t chunk) {
  SL_CUDA_BEGIN(ctx);
  if (ssd_check(ctx, B, T, H, P, G, S, chunk, ldx, lddt, ldbc)) return;
  if (B == 0 || T == 0 || H == 0) return;
  const int ck = (int)(chunk < T ? chunk : T), nt = (int)((P + 31) / 32 * 32);
  size_t b_hs = sl_cuda_align((size_t)(B * H * ck * S * P) * sizeof(float));
  size_t b_bc = sl_cuda_align((size_t)(B * T * H * 2 * S) * sizeof(float));
  size_t b_h = sl_cuda_align((size_t)(B * H * 3) * sizeof(float));
  char *ws = (char *)sl_cuda_scratch(ctx, b_hs + b_bc + b_h, "ssd_bwd");
  if (!ws) return;
  float *hs = (float *)ws, *pBC = (float *)(ws + b_hs), *pH = (float *)(ws + b_hs + b_bc);
  dim3 grid((unsigned)H, (unsigned)B);
#define BWD(SM)                                                                                                        \
  ssd_bwd_kernel<SM><<<grid, nt, 0, ctx->stream>>>(dx, ddt, hs, pBC, pH, dy, x, ldx, dt, lddt, dt_bias, A_log, Bm, Cm, \
                                                   ldbc, Dp, seg, ckpt, dt_min, dt_max, (int)T, (int)H, (int)P,        \
                                                   (int)G, (int)S, ck)
  SSD_DISPATCH(S, BWD);
#undef BWD
  CUDA_LAUNCH_CHECK(ctx);
  ssd_bc_reduce<<<sl_cuda_blocks(B * T * G * 2 * S, 256), 256, 0, ctx->stream>>>(dBm, dCm, ldbc, pBC, B * T, H, G, S);
  CUDA_LAUNCH_CHECK(ctx);
  ssd_h_reduce<<<sl_cuda_blocks(H, 256), 256, 0, ctx->stream>>>(ddt_bias, dA_log, dDp, A_log, pH, B, H);
  CUDA_LAUNCH_CHECK(ctx);
}
