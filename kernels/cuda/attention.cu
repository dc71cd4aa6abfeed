/* kernels/cuda/attention.cu — fused causal grouped-query attention, forward
 * and backward, FlashAttention-2 style: tiled over keys with an online
 * softmax, reading the packed qkv (B, T, (nh + 2 nkv) hd) directly, never
 * materialising a T x T matrix.
 *
 * Thread layout (128 threads per block): a group of TPR consecutive lanes owns
 * one row (a query in forward / dQ, a key in dK/dV); lane `sub` of the group
 * holds the interleaved dims d = dd*TPR + sub (dd < DPT = HDP/TPR), so the
 * group reads a shared-memory row at TPR consecutive addresses (no bank
 * conflicts) and a dot product is DPT FMAs plus log2(TPR) xor-shuffles.
 * The other side is staged in shared memory in tiles of BC rows.
 *   HDP (head dim padded)  32   64   128  256     (hd 64, 128 exact; others
 *   TPR                     4    4     8   16      padded with zeros: the
 *   rows per block         32   32    16    8      generic fallback, hd<=256)
 *   BC                     32   32    32   16      smem 8..32 KiB
 * Sliding window / causality: a block only visits key tiles that intersect
 * [q0 - window + 1, q_last] (fully masked tiles are skipped); partially
 * masked tiles mask per element.
 * Backward: (1) Dsum_i = dout_i . out_i; (2) dQ kernel per query tile
 * (recomputes P from lse); (3) dK/dV kernel per key tile looping over the
 * query heads of its kv group and the query tiles that can see it. Every
 * gradient element is written by one thread: deterministic, no atomics.
 * Storage type E = float or uint16_t (bf16 bits); all math in fp32. The
 * score scale is the caller's (kernels/kernels.h); softcap > 0 caps the scaled
 * scores (att_cap) before the mask and softmax, and backward multiplies dS by
 * the cap's derivative.
 * Document masking: seg (B*T, or NULL) gives where each query's document
 * starts; key j is visible to query i only when j >= seg[i] (seg is
 * non-decreasing along a sample, so a query block starts its key loop at the
 * document start of its first query). */
#include <math.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"

#define ATT_NT 128

template <int TPR> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = TPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, TPR);
  return v;
}

__device__ __forceinline__ bool att_visible(int i, int j, int window) {
  return j <= i && (window <= 0 || i - j < window);
}

/* Logit softcapping (Gemma 2): c = cap * tanh(s / cap) on the scaled score
 * s; cap <= 0: c = s. att_dcap: dc/ds = 1 - tanh^2 (1 without a cap). */
__device__ __forceinline__ float att_cap(float s, float cap) { return cap > 0.0f ? cap * tanhf(s / cap) : s; }
__device__ __forceinline__ float att_dcap(float s, float cap) {
  if (cap <= 0.0f) return 1.0f;
  float t = tanhf(s / cap);
  return 1.0f - t * t;
}

/* ---- forward ----------------------------------------------------------------- */
template <typename E, int HDP, int TPR, int BC>
static __global__ void __launch_bounds__(ATT_NT)
    att_fwd_kernel(E *out, float *lse, const E *qkv, const int32_t *seg, int T, int nh, int nkv, int hd, int window,
                   float scale, float cap) {
  constexpr int DPT = HDP / TPR, RPB = ATT_NT / TPR;
  __shared__ float Ks[BC][HDP];
  __shared__ float Vs[BC][HDP];
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * RPB;
  const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
  const int i = q0 + row;
  const bool valid = i < T;
  const int kvh = h / (nh / nkv);
  const int64_t W = (int64_t)(nh + 2 * nkv) * hd;
  const E *base = qkv + (int64_t)b * T * W;
  const int64_t koff = (int64_t)(nh + kvh) * hd, voff = (int64_t)(nh + nkv + kvh) * hd;

  float q[DPT], o[DPT];
#pragma unroll
  for (int dd = 0; dd < DPT; dd++) {
    int d = dd * TPR + sub;
    q[dd] = (valid && d < hd) ? sl_ld(base, (int64_t)i * W + (int64_t)h * hd + d) * scale : 0.0f;
    o[dd] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int qlast = min(q0 + RPB, T) - 1;
  const int dstart = (seg && valid) ? seg[(int64_t)b * T + i] : 0;
  int kstart = window > 0 ? max(0, q0 - window + 1) : 0;
  if (seg) kstart = max(kstart, (int)seg[(int64_t)b * T + q0]);
  kstart = (kstart / BC) * BC;
  for (int k0 = kstart; k0 <= qlast; k0 += BC) {
    __syncthreads(); /* the previous tile is consumed */
    for (int e = threadIdx.x; e < BC * HDP; e += ATT_NT) {
      int j = e / HDP, d = e % HDP, kj = k0 + j;
      float kv = 0.0f, vv = 0.0f;
      if (kj < T && d < hd) {
        kv = sl_ld(base, (int64_t)kj * W + koff + d);
        vv = sl_ld(base, (int64_t)kj * W + voff + d);
      }
      Ks[j][d] = kv;
      Vs[j][d] = vv;
    }
    __syncthreads();
    float s[BC];
    float mt = -INFINITY;
#pragma unroll
    for (int j = 0; j < BC; j++) {
      float acc = 0.0f;
#pragma unroll
      for (int dd = 0; dd < DPT; dd++) acc += q[dd] * Ks[j][dd * TPR + sub];
      acc = group_sum<TPR>(acc);
      bool ok = valid && att_visible(i, k0 + j, window) && k0 + j >= dstart;
      s[j] = ok ? att_cap(acc, cap) : -INFINITY;
      mt = fmaxf(mt, s[j]);
    }
    float mnew = fmaxf(m, mt);
    if (mnew != -INFINITY) { /* uniform within a row group; no shuffles inside */
      float alpha = expf(m - mnew);
      float psum = 0.0f;
#pragma unroll
      for (int j = 0; j < BC; j++) {
        s[j] = expf(s[j] - mnew);
        psum += s[j];
      }
      l = l * alpha + psum;
#pragma unroll
      for (int dd = 0; dd < DPT; dd++) {
        float acc = o[dd] * alpha;
#pragma unroll
        for (int j = 0; j < BC; j++) acc += s[j] * Vs[j][dd * TPR + sub];
        o[dd] = acc;
      }
      m = mnew;
    }
  }
  if (valid) {
    float inv = 1.0f / l;
    int64_t ob = (((int64_t)b * T + i) * nh + h) * hd;
#pragma unroll
    for (int dd = 0; dd < DPT; dd++) {
      int d = dd * TPR + sub;
      if (d < hd) sl_st(out, ob + d, o[dd] * inv);
    }
    if (sub == 0) lse[((int64_t)b * nh + h) * T + i] = m + logf(l);
  }
}

/* ---- backward (1): Dsum[b, h, i] = dout . out (one warp per row) ------------------ */
template <typename E>
static __global__ void att_dsum_kernel(float *dsum, const E *dout, const E *out, int64_t rows, int T, int nh, int hd) {
  int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; /* (b, i, h) */
  int lane = threadIdx.x & 31;
  if (r >= rows) return; /* whole warps exit together */
  float acc = 0.0f;
  for (int d = lane; d < hd; d += 32) acc += sl_ld(dout, r * hd + d) * sl_ld(out, r * hd + d);
  acc = group_sum<32>(acc);
  if (lane == 0) {
    int64_t h = r % nh, bi = r / nh, i = bi % T, b = bi / T;
    dsum[(b * nh + h) * T + i] = acc;
  }
}

/* ---- backward (2): dQ per query tile ---------------------------------------------- */
template <typename E, int HDP, int TPR, int BC>
static __global__ void __launch_bounds__(ATT_NT)
    att_dq_kernel(float *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum, const int32_t *seg,
                  int T, int nh, int nkv, int hd, int window, float scale, float cap) {
  constexpr int DPT = HDP / TPR, RPB = ATT_NT / TPR;
  __shared__ float Ks[BC][HDP];
  __shared__ float Vs[BC][HDP];
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * RPB;
  const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
  const int i = q0 + row;
  const bool valid = i < T;
  const int kvh = h / (nh / nkv);
  const int64_t W = (int64_t)(nh + 2 * nkv) * hd;
  const E *base = qkv + (int64_t)b * T * W;
  const int64_t koff = (int64_t)(nh + kvh) * hd, voff = (int64_t)(nh + nkv + kvh) * hd;
  const int64_t orow = (((int64_t)b * T + (valid ? i : 0)) * nh + h) * hd;

  float q[DPT], g[DPT], dq[DPT];
#pragma unroll
  for (int dd = 0; dd < DPT; dd++) {
    int d = dd * TPR + sub;
    bool in = valid && d < hd;
    q[dd] = in ? sl_ld(base, (int64_t)i * W + (int64_t)h * hd + d) * scale : 0.0f;
    g[dd] = in ? sl_ld(dout, orow + d) : 0.0f;
    dq[dd] = 0.0f;
  }
  const int64_t li = ((int64_t)b * nh + h) * T + (valid ? i : 0);
  const float L = valid ? lse[li] : 0.0f, Di = valid ? dsum[li] : 0.0f;
  const int qlast = min(q0 + RPB, T) - 1;
  const int dstart = (seg && valid) ? seg[(int64_t)b * T + i] : 0;
  int kstart = window > 0 ? max(0, q0 - window + 1) : 0;
  if (seg) kstart = max(kstart, (int)seg[(int64_t)b * T + q0]);
  kstart = (kstart / BC) * BC;
  for (int k0 = kstart; k0 <= qlast; k0 += BC) {
    __syncthreads();
    for (int e = threadIdx.x; e < BC * HDP; e += ATT_NT) {
      int j = e / HDP, d = e % HDP, kj = k0 + j;
      float kv = 0.0f, vv = 0.0f;
      if (kj < T && d < hd) {
        kv = sl_ld(base, (int64_t)kj * W + koff + d);
        vv = sl_ld(base, (int64_t)kj * W + voff + d);
      }
      Ks[j][d] = kv;
      Vs[j][d] = vv;
    }
    __syncthreads();
    /* per key: ds = P (dP - Dsum), folded into dq at once (no BC-wide array:
     * keeps the kernel free of register spills) */
#pragma unroll 4
    for (int j = 0; j < BC; j++) {
      float sacc = 0.0f, pacc = 0.0f;
#pragma unroll
      for (int dd = 0; dd < DPT; dd++) {
        sacc += q[dd] * Ks[j][dd * TPR + sub];
        pacc += g[dd] * Vs[j][dd * TPR + sub];
      }
      sacc = group_sum<TPR>(sacc);
      pacc = group_sum<TPR>(pacc);
      bool ok = valid && att_visible(i, k0 + j, window) && k0 + j >= dstart;
      float ds = ok ? expf(att_cap(sacc, cap) - L) * (pacc - Di) * att_dcap(sacc, cap) : 0.0f;
#pragma unroll
      for (int dd = 0; dd < DPT; dd++) dq[dd] += ds * Ks[j][dd * TPR + sub];
    }
  }
  if (valid) {
    float *dqrow = dqkv + ((int64_t)b * T + i) * W + (int64_t)h * hd;
#pragma unroll
    for (int dd = 0; dd < DPT; dd++) {
      int d = dd * TPR + sub;
      if (d < hd) dqrow[d] += dq[dd] * scale;
    }
  }
}

/* ---- backward (3): dK, dV per key tile --------------------------------------------- */
template <typename E, int HDP, int TPR, int BC>
static __global__ void __launch_bounds__(ATT_NT)
    att_dkv_kernel(float *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum, const int32_t *seg,
                   int T, int nh, int nkv, int hd, int window, float scale, float cap) {
  constexpr int DPT = HDP / TPR, RPB = ATT_NT / TPR;
  __shared__ float Qs[BC][HDP];
  __shared__ float Gs[BC][HDP];
  __shared__ float Ls[BC], Ds[BC];
  __shared__ int Ss[BC]; /* document start of each staged query */
  const int b = blockIdx.z, kvh = blockIdx.y, k0 = blockIdx.x * RPB;
  const int row = threadIdx.x / TPR, sub = threadIdx.x % TPR;
  const int j = k0 + row;
  const bool valid = j < T;
  const int group = nh / nkv;
  const int64_t W = (int64_t)(nh + 2 * nkv) * hd;
  const E *base = qkv + (int64_t)b * T * W;
  const int64_t koff = (int64_t)(nh + kvh) * hd, voff = (int64_t)(nh + nkv + kvh) * hd;

  float kk[DPT], vv[DPT], dk[DPT], dv[DPT];
#pragma unroll
  for (int dd = 0; dd < DPT; dd++) {
    int d = dd * TPR + sub;
    bool in = valid && d < hd;
    kk[dd] = in ? sl_ld(base, (int64_t)j * W + koff + d) * scale : 0.0f;
    vv[dd] = in ? sl_ld(base, (int64_t)j * W + voff + d) : 0.0f;
    dk[dd] = 0.0f;
    dv[dd] = 0.0f;
  }
  const int jlast = min(k0 + RPB, T) - 1;
  const int qstart = (k0 / BC) * BC;
  const int qend = window > 0 ? min(T - 1, jlast + window - 1) : T - 1;
  for (int hq = kvh * group; hq < (kvh + 1) * group; hq++) {
    const int64_t lrow = ((int64_t)b * nh + hq) * T;
    for (int i0 = qstart; i0 <= qend; i0 += BC) {
      __syncthreads();
      for (int e = threadIdx.x; e < BC * HDP; e += ATT_NT) {
        int r = e / HDP, d = e % HDP, qi = i0 + r;
        float qv = 0.0f, gv = 0.0f;
        if (qi < T && d < hd) {
          qv = sl_ld(base, (int64_t)qi * W + (int64_t)hq * hd + d);
          gv = sl_ld(dout, (((int64_t)b * T + qi) * nh + hq) * hd + d);
        }
        Qs[r][d] = qv;
        Gs[r][d] = gv;
      }
      for (int r = threadIdx.x; r < BC; r += ATT_NT) {
        int qi = i0 + r;
        Ls[r] = qi < T ? lse[lrow + qi] : 0.0f;
        Ds[r] = qi < T ? dsum[lrow + qi] : 0.0f;
        Ss[r] = (seg && qi < T) ? seg[(int64_t)b * T + qi] : 0;
      }
      __syncthreads();
#pragma unroll 4
      for (int r = 0; r < BC; r++) {
        float sacc = 0.0f, pacc = 0.0f;
#pragma unroll
        for (int dd = 0; dd < DPT; dd++) {
          sacc += kk[dd] * Qs[r][dd * TPR + sub];
          pacc += vv[dd] * Gs[r][dd * TPR + sub];
        }
        sacc = group_sum<TPR>(sacc);
        pacc = group_sum<TPR>(pacc);
        int qi = i0 + r;
        bool ok = valid && qi < T && att_visible(qi, j, window) && j >= Ss[r];
        float p = ok ? expf(att_cap(sacc, cap) - Ls[r]) : 0.0f;
        float ds = ok ? p * (pacc - Ds[r]) * att_dcap(sacc, cap) : 0.0f;
#pragma unroll
        for (int dd = 0; dd < DPT; dd++) {
          dv[dd] += p * Gs[r][dd * TPR + sub];
          dk[dd] += ds * Qs[r][dd * TPR + sub];
        }
      }
    }
  }
  if (valid) {
    float *drow = dqkv + ((int64_t)b * T + j) * W;
#pragma unroll
    for (int dd = 0; dd < DPT; dd++) {
      int d = dd * TPR + sub;
      if (d < hd) {
        drow[koff + d] += dk[dd] * scale;
        drow[voff + d] += dv[dd];
      }
    }
  }
}

/* ---- dispatch ---------------------------------------------------------------------- */
int sl_cuda_attention_check(sl_kctx *ctx, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd) {
  if (B < 0 || T < 0 || nh <= 0 || nkv <= 0 || hd <= 0 || nh % nkv != 0 || T > 0x7fffffffLL || nh > 65535 ||
      B > 65535 || hd > 256)
    return sl_cuda_fail(ctx, SL_EINPUT,
                        "attention: unsupported shape B %lld T %lld nh %lld nkv %lld hd %lld "
                        "(expected nh %% nkv == 0, hd <= 256)",
                        (long long)B, (long long)T, (long long)nh, (long long)nkv, (long long)hd);
  return SL_OK;
}

#define ATT_DISPATCH(hd, LAUNCH)                                                                                       \
  do {                                                                                                                 \
    if ((hd) <= 32) LAUNCH(32, 4, 32);                                                                                 \
    else if ((hd) <= 64) LAUNCH(64, 4, 32);                                                                            \
    else if ((hd) <= 128) LAUNCH(128, 8, 32);                                                                          \
    else LAUNCH(256, 16, 16);                                                                                          \
  } while (0)

template <typename E>
static void att_fwd_any(sl_kctx *ctx, E *out, float *lse, const E *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                        int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap) {
  SL_CUDA_BEGIN(ctx);
  if (sl_cuda_attention_check(ctx, B, T, nh, nkv, hd)) return;
  if (B == 0 || T == 0) return;
  int win = window > 0 ? (int)(window < T ? window : T + 1) : 0;
#define FWD(HDP, TPR, BC)                                                                                              \
  att_fwd_kernel<E, HDP, TPR, BC>                                                                                      \
      <<<dim3((unsigned)((T + ATT_NT / TPR - 1) / (ATT_NT / TPR)), (unsigned)nh, (unsigned)B), ATT_NT, 0,              \
         ctx->stream>>>(out, lse, qkv, seg, (int)T, (int)nh, (int)nkv, (int)hd, win, scale, softcap)
  ATT_DISPATCH(hd, FWD);
#undef FWD
  CUDA_LAUNCH_CHECK(ctx);
}

template <typename E>
static void att_bwd_any(sl_kctx *ctx, float *dqkv, const E *dout, const E *qkv, const E *out, const float *lse,
                        int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window, float scale,
                        const int32_t *seg, float softcap) {
  SL_CUDA_BEGIN(ctx);
  if (sl_cuda_attention_check(ctx, B, T, nh, nkv, hd)) return;
  if (B == 0 || T == 0) return;
  int win = window > 0 ? (int)(window < T ? window : T + 1) : 0;
  int64_t rows = B * T * nh;
  float *dsum = (float *)sl_cuda_scratch(ctx, (size_t)rows * sizeof(float), "attention_bwd");
  if (!dsum) return;
  att_dsum_kernel<E>
      <<<(unsigned)((rows + 7) / 8), 256, 0, ctx->stream>>>(dsum, dout, out, rows, (int)T, (int)nh, (int)hd);
  CUDA_LAUNCH_CHECK(ctx);
#define DQ(HDP, TPR, BC)                                                                                               \
  att_dq_kernel<E, HDP, TPR, BC>                                                                                       \
      <<<dim3((unsigned)((T + ATT_NT / TPR - 1) / (ATT_NT / TPR)), (unsigned)nh, (unsigned)B), ATT_NT, 0,              \
         ctx->stream>>>(dqkv, dout, qkv, lse, dsum, seg, (int)T, (int)nh, (int)nkv, (int)hd, win, scale, softcap)
  ATT_DISPATCH(hd, DQ);
#undef DQ
  CUDA_LAUNCH_CHECK(ctx);
#define DKV(HDP, TPR, BC)                                                                                              \
  att_dkv_kernel<E, HDP, TPR, BC>                                                                                      \
      <<<dim3((unsigned)((T + ATT_NT / TPR - 1) / (ATT_NT / TPR)), (unsigned)nkv, (unsigned)B), ATT_NT, 0,             \
         ctx->stream>>>(dqkv, dout, qkv, lse, dsum, seg, (int)T, (int)nh, (int)nkv, (int)hd, win, scale, softcap)
  ATT_DISPATCH(hd, DKV);
#undef DKV
  CUDA_LAUNCH_CHECK(ctx);
}

float *sl_cuda_attention_dsum(sl_kctx *ctx, const float *dout, const float *out, int64_t B, int64_t T, int64_t nh,
                              int64_t hd) {
  int64_t rows = B * T * nh;
  float *dsum = (float *)sl_cuda_scratch(ctx, (size_t)rows * sizeof(float), "attention_bwd");
  if (!dsum) return NULL;
  att_dsum_kernel<float>
      <<<(unsigned)((rows + 7) / 8), 256, 0, ctx->stream>>>(dsum, dout, out, rows, (int)T, (int)nh, (int)hd);
  CUDA_LAUNCH_CHECK(ctx, NULL);
  return dsum;
}

void sl_cuda_attention_fwd(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                           int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap) {
  att_fwd_any<float>(ctx, out, lse, qkv, B, T, nh, nkv, hd, window, scale, seg, softcap);
}
void sl_cuda_attention_bwd(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                           float scale, const int32_t *seg, float softcap) {
  att_bwd_any<float>(ctx, dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window, scale, seg, softcap);
}
void sl_cuda_attention_fwd_bf16(sl_kctx *ctx, uint16_t *out, float *lse, const uint16_t *qkv, int64_t B, int64_t T,
                                int64_t nh, int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg,
                                float softcap) {
  att_fwd_any<uint16_t>(ctx, out, lse, qkv, B, T, nh, nkv, hd, window, scale, seg, softcap);
}
void sl_cuda_attention_bwd_bf16(sl_kctx *ctx, float *dqkv, const uint16_t *dout, const uint16_t *qkv,
                                const uint16_t *out, const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                                int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap) {
  att_bwd_any<uint16_t>(ctx, dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window, scale, seg, softcap);
}
