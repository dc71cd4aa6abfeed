/* kernels/cuda/attention_tc.cu — the tensor-core variant of the fused
 * causal GQA attention (attention.cu), used under bf16 compute (the bf16
 * layer's attention ops, kernels/bf16.h): the same op, masks and saved lse,
 * with every matrix product on mma.sync m16n8k16 (kernels/cuda/mma.cuh), bf16
 * operands and fp32 accumulation. docs/cuda.md "Tensor-core attention".
 *
 * A block is 4 warps; a warp owns 16 rows (queries in forward and dQ, keys in
 * dK/dV), so a block covers 64 rows; the other side is staged in shared
 * memory in tiles of BC rows as bf16 (32, or 16 for head dim 256), rows
 * padded by 8 elements, once row-major and, where the product needs it the
 * other way round, transposed. head dim is padded with zeros to HDP = 64,
 * 128 or 256.
 * Rounding to bf16 (nearest even; what a CPU oracle must round): q, k, v,
 * dout as loaded; in forward P = exp(s - m) with m the running row maximum
 * before P.V (the row sum l adds the unrounded P); in backward P = exp(s -
 * lse) before dV += P^T dO and dS = P (dP - Dsum) cap' before dQ += dS K and
 * dK += dS^T Q. Scores are scale * (q . k) in fp32, capped (att_cap) before
 * mask and softmax. Dsum = dout . out in fp32 (attention.cu's kernel).
 * Masks, tile skipping and determinism as attention.cu: every output element
 * is written by one thread, no atomics. */
#include <math.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"

#define TC_NT 128  /* 4 warps */
#define TC_ROWS 64 /* rows per block: 16 per warp */

__device__ __forceinline__ bool tc_visible(int i, int j, int window, int dstart) {
  return j <= i && (window <= 0 || i - j < window) && j >= dstart;
}
__device__ __forceinline__ float tc_cap(float s, float cap) { return cap > 0.0f ? cap * tanhf(s / cap) : s; }
__device__ __forceinline__ float tc_dcap(float s, float cap) {
  if (cap <= 0.0f) return 1.0f;
  float t = tanhf(s / cap);
  return 1.0f - t * t;
}
/* max / sum over the 4 lanes of a group (the lanes sharing a fragment row) */
__device__ __forceinline__ float tc_row_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float tc_row_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* The warp's A fragments of rows r0..r0+15 of src (row stride `stride`),
 * all HDP / 16 k-steps; rows >= T and cols >= hd are zero. */
template <typename E, int KS>
__device__ __forceinline__ void tc_load_a(uint32_t a[KS][4], const E *src, int64_t stride, int r0, int T, int hd) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int kk = 0; kk < KS; kk++)
#pragma unroll
    for (int r = 0; r < 4; r++) {
      int row = r0 + g + 8 * (r & 1), col = kk * 16 + 2 * t + 8 * (r >> 1);
      bool in = row < T;
      float lo = in && col < hd ? sl_ld(src, (int64_t)row * stride + col) : 0.0f;
      float hi = in && col + 1 < hd ? sl_ld(src, (int64_t)row * stride + col + 1) : 0.0f;
      a[kk][r] = sl_pack_bf16x2(lo, hi);
    }
}

/* Rows r0..r0+R-1 of src as bf16 into rm (R x HDP, ld HDP + 8) and/or tr
 * (transposed, HDP x R, ld R + 8); either may be NULL. Zero outside. */
template <typename E, int R, int HDP>
__device__ __forceinline__ void tc_stage(uint16_t *rm, uint16_t *tr, const E *src, int64_t stride, int r0, int T,
                                         int hd) {
  for (int e = threadIdx.x; e < R * HDP; e += TC_NT) {
    int r = e / HDP, d = e % HDP;
    float v = (r0 + r < T && d < hd) ? sl_ld(src, (int64_t)(r0 + r) * stride + d) : 0.0f;
    uint16_t x = sl_dev_f32_to_bf16(v);
    if (rm) rm[r * (HDP + 8) + d] = x;
    if (tr) tr[d * (R + 8) + r] = x;
  }
}

/* acc (16 x NS*8) = A (16 x HDP, fragments a) times B^T, B's rows staged
 * row-major in s (ld HDP + 8): Q K^T, dO V^T, K Q^T, V dO^T. */
template <int KS, int NS>
__device__ __forceinline__ void tc_scores(float acc[NS][4], const uint32_t a[KS][4], const uint16_t *s) {
#pragma unroll
  for (int n = 0; n < NS; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) acc[n][i] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KS; kk++)
#pragma unroll
    for (int n = 0; n < NS; n++) {
      uint32_t b[2];
      sl_frag_b(b, s, KS * 16 + 8, n * 8, kk * 16);
      sl_mma_bf16_16816(acc[n], a[kk], b, acc[n]);
    }
}

/* acc (16 x HDP) += P (16 x BC, as NS C fragments, rounded to bf16 here)
 * times M (BC x HDP), staged transposed in t (HDP x BC, ld BC + 8). */
template <int NO, int NS>
__device__ __forceinline__ void tc_pv(float acc[NO][4], const float p[NS][4], const uint16_t *t) {
#pragma unroll
  for (int ks = 0; ks < NS / 2; ks++) {
    uint32_t a[4];
    sl_frag_c2a(a, p[2 * ks], p[2 * ks + 1]);
#pragma unroll
    for (int n = 0; n < NO; n++) {
      uint32_t b[2];
      sl_frag_b(b, t, NS * 8 + 8, n * 8, ks * 16);
      sl_mma_bf16_16816(acc[n], a, b, acc[n]);
    }
  }
}

/* The first key a query block [q0, q0 + 64) can see, rounded down to a tile. */
__device__ __forceinline__ int tc_kstart(const int32_t *seg, int64_t segrow, int q0, int window, int BC) {
  int k = window > 0 ? max(0, q0 - window + 1) : 0;
  if (seg) k = max(k, (int)seg[segrow + q0]);
  return (k / BC) * BC;
}

/* ---- forward ----------------------------------------------------------------- */
template <typename E, int HDP, int BC>
static __global__ void __launch_bounds__(TC_NT)
    tc_fwd_kernel(E *out, float *lse, const E *qkv, const int32_t *seg, int T, int nh, int nkv, int hd, int window,
                  float scale, float cap) {
  constexpr int KS = HDP / 16, NO = HDP / 8, NS = BC / 8;
  __shared__ __align__(16) uint16_t Ks[BC * (HDP + 8)];
  __shared__ __align__(16) uint16_t Vt[HDP * (BC + 8)];
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * TC_ROWS;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, r0 = q0 + (threadIdx.x >> 5) * 16;
  const int64_t W = (int64_t)(nh + 2 * nkv) * hd;
  const int kvh = h / (nh / nkv);
  const E *base = qkv + (int64_t)b * T * W;
  uint32_t qa[KS][4];
  tc_load_a<E, KS>(qa, base + (int64_t)h * hd, W, r0, T, hd);
  float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  const int rows[2] = {r0 + g, r0 + g + 8};
  int dst[2];
  for (int r = 0; r < 2; r++) dst[r] = seg && rows[r] < T ? seg[(int64_t)b * T + rows[r]] : 0;
  const int qlast = min(q0 + TC_ROWS, T) - 1;
  for (int k0 = tc_kstart(seg, (int64_t)b * T, q0, window, BC); k0 <= qlast; k0 += BC) {
    __syncthreads(); /* the previous tile is consumed */
    tc_stage<E, BC, HDP>(Ks, NULL, base + (int64_t)(nh + kvh) * hd, W, k0, T, hd);
    tc_stage<E, BC, HDP>(NULL, Vt, base + (int64_t)(nh + nkv + kvh) * hd, W, k0, T, hd);
    __syncthreads();
    float s[NS][4], mt[2] = {-INFINITY, -INFINITY};
    tc_scores<KS, NS>(s, qa, Ks);
#pragma unroll
    for (int n = 0; n < NS; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        int r = i >> 1, key = k0 + n * 8 + 2 * t + (i & 1);
        bool ok = rows[r] < T && tc_visible(rows[r], key, window, dst[r]);
        s[n][i] = ok ? tc_cap(s[n][i] * scale, cap) : -INFINITY;
        mt[r] = fmaxf(mt[r], s[n][i]);
      }
    float alpha[2];
    for (int r = 0; r < 2; r++) {
      float mnew = fmaxf(m[r], tc_row_max(mt[r]));
      alpha[r] = mnew == -INFINITY ? 1.0f : expf(m[r] - mnew);
      m[r] = mnew;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < NS; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        float p = s[n][i] == -INFINITY ? 0.0f : expf(s[n][i] - m[i >> 1]);
        s[n][i] = p;
        l[i >> 1] += p;
      }
#pragma unroll
    for (int n = 0; n < NO; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) o[n][i] *= alpha[i >> 1];
    tc_pv<NO, NS>(o, s, Vt);
  }
  for (int r = 0; r < 2; r++) l[r] = tc_row_sum(l[r]);
#pragma unroll
  for (int n = 0; n < NO; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      int row = rows[i >> 1], col = n * 8 + 2 * t + (i & 1);
      if (row < T && col < hd) sl_st(out, (((int64_t)b * T + row) * nh + h) * hd + col, o[n][i] / l[i >> 1]);
    }
  for (int r = 0; r < 2; r++)
    if (t == 0 && rows[r] < T) lse[((int64_t)b * nh + h) * T + rows[r]] = m[r] + logf(l[r]);
}

/* ---- backward (dQ per query tile) ---------------------------------------------- */
template <typename E, int HDP, int BC>
static __global__ void __launch_bounds__(TC_NT)
    tc_dq_kernel(float *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum, const int32_t *seg,
                 int T, int nh, int nkv, int hd, int window, float scale, float cap) {
  constexpr int KS = HDP / 16, NO = HDP / 8, NS = BC / 8;
  __shared__ __align__(16) uint16_t Ks[BC * (HDP + 8)];
  __shared__ __align__(16) uint16_t Vs[BC * (HDP + 8)];
  __shared__ __align__(16) uint16_t Kt[HDP * (BC + 8)];
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * TC_ROWS;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, r0 = q0 + (threadIdx.x >> 5) * 16;
  const int64_t W = (int64_t)(nh + 2 * nkv) * hd;
  const int kvh = h / (nh / nkv);
  const E *base = qkv + (int64_t)b * T * W;
  uint32_t qa[KS][4], ga[KS][4];
  tc_load_a<E, KS>(qa, base + (int64_t)h * hd, W, r0, T, hd);
  tc_load_a<E, KS>(ga, dout + ((int64_t)b * T * nh + h) * hd, (int64_t)nh * hd, r0, T, hd);
  float dq[NO][4];
#pragma unroll
  for (int n = 0; n < NO; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
  const int rows[2] = {r0 + g, r0 + g + 8};
  int dst[2];
  float L[2], D[2];
  for (int r = 0; r < 2; r++) {
    bool in = rows[r] < T;
    int64_t li = ((int64_t)b * nh + h) * T + (in ? rows[r] : 0);
    dst[r] = seg && in ? seg[(int64_t)b * T + rows[r]] : 0;
    L[r] = in ? lse[li] : 0.0f;
    D[r] = in ? dsum[li] : 0.0f;
  }
  const int qlast = min(q0 + TC_ROWS, T) - 1;
  for (int k0 = tc_kstart(seg, (int64_t)b * T, q0, window, BC); k0 <= qlast; k0 += BC) {
    __syncthreads();
    tc_stage<E, BC, HDP>(Ks, Kt, base + (int64_t)(nh + kvh) * hd, W, k0, T, hd);
    tc_stage<E, BC, HDP>(Vs, NULL, base + (int64_t)(nh + nkv + kvh) * hd, W, k0, T, hd);
    __syncthreads();
    float s[NS][4], dp[NS][4];
    tc_scores<KS, NS>(s, qa, Ks);
    tc_scores<KS, NS>(dp, ga, Vs);
#pragma unroll
    for (int n = 0; n < NS; n++)
#pragma unroll
      for (int i = 0; i < 4; i++) {
        int r = i >> 1, key = k0 + n * 8 + 2 * t + (i & 1);
        bool ok = rows[r] < T && tc_visible(rows[r], key, window, dst[r]);
        float sc = s[n][i] * scale;
        float p = ok ? expf(tc_cap(sc, cap) - L[r]) : 0.0f;
        s[n][i] = ok ? p * (dp[n][i] - D[r]) * tc_dcap(sc, cap) : 0.0f; /* dS */
      }
    tc_pv<NO, NS>(dq, s, Kt);
  }
#pragma unroll
  for (int n = 0; n < NO; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      int row = rows[i >> 1], col = n * 8 + 2 * t + (i & 1);
      if (row < T && col < hd) dqkv[((int64_t)b * T + row) * W + (int64_t)h * hd + col] += dq[n][i] * scale;
    }
}

/* ---- backward (dK, dV per key tile) --------------------------------------------- */
/* The staged query tile's P^T and dS^T for the warp's 16 keys, from
 * st = K Q^T and dpt = V dO^T (overwritten with P^T and dS^T). */
template <int NS>
__device__ __forceinline__ void tc_dkv_probs(float st[NS][4], float dpt[NS][4], const int keys[2], int i0, int T,
                                             int window, float scale, float cap, const float *Ls, const float *Ds,
                                             const int *Ss) {
  int t = threadIdx.x & 3;
#pragma unroll
  for (int n = 0; n < NS; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      int key = keys[i >> 1], qr = n * 8 + 2 * t + (i & 1), qi = i0 + qr;
      bool ok = key < T && qi < T && tc_visible(qi, key, window, Ss[qr]);
      float sc = st[n][i] * scale;
      float p = ok ? expf(tc_cap(sc, cap) - Ls[qr]) : 0.0f;
      st[n][i] = p;
      dpt[n][i] = ok ? p * (dpt[n][i] - Ds[qr]) * tc_dcap(sc, cap) : 0.0f;
    }
}

template <typename E, int HDP, int BC>
static __global__ void __launch_bounds__(TC_NT)
    tc_dkv_kernel(float *dqkv, const E *dout, const E *qkv, const float *lse, const float *dsum, const int32_t *seg,
                  int T, int nh, int nkv, int hd, int window, float scale, float cap) {
  constexpr int KS = HDP / 16, NO = HDP / 8, NS = BC / 8;
  __shared__ __align__(16) uint16_t Qs[BC * (HDP + 8)];
  __shared__ __align__(16) uint16_t Gs[BC * (HDP + 8)];
  __shared__ __align__(16) uint16_t Qt[HDP * (BC + 8)];
  __shared__ __align__(16) uint16_t Gt[HDP * (BC + 8)];
  __shared__ float Ls[BC], Ds[BC];
  __shared__ int Ss[BC]; /* document start of each staged query */
  const int b = blockIdx.z, kvh = blockIdx.y, k0 = blockIdx.x * TC_ROWS;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, r0 = k0 + (threadIdx.x >> 5) * 16;
  const int64_t W = (int64_t)(nh + 2 * nkv) * hd;
  const int64_t koff = (int64_t)(nh + kvh) * hd, voff = (int64_t)(nh + nkv + kvh) * hd;
  const E *base = qkv + (int64_t)b * T * W;
  uint32_t ka[KS][4], va[KS][4];
  tc_load_a<E, KS>(ka, base + koff, W, r0, T, hd);
  tc_load_a<E, KS>(va, base + voff, W, r0, T, hd);
  float dk[NO][4], dv[NO][4];
#pragma unroll
  for (int n = 0; n < NO; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) dk[n][i] = dv[n][i] = 0.0f;
  const int keys[2] = {r0 + g, r0 + g + 8};
  const int jlast = min(k0 + TC_ROWS, T) - 1, group = nh / nkv;
  const int qend = window > 0 ? min(T - 1, jlast + window - 1) : T - 1;
  for (int hq = kvh * group; hq < (kvh + 1) * group; hq++) {
    const int64_t lrow = ((int64_t)b * nh + hq) * T;
    for (int i0 = (k0 / BC) * BC; i0 <= qend; i0 += BC) {
      __syncthreads();
      tc_stage<E, BC, HDP>(Qs, Qt, base + (int64_t)hq * hd, W, i0, T, hd);
      tc_stage<E, BC, HDP>(Gs, Gt, dout + ((int64_t)b * T * nh + hq) * hd, (int64_t)nh * hd, i0, T, hd);
      for (int r = threadIdx.x; r < BC; r += TC_NT) {
        int qi = i0 + r;
        Ls[r] = qi < T ? lse[lrow + qi] : 0.0f;
        Ds[r] = qi < T ? dsum[lrow + qi] : 0.0f;
        Ss[r] = (seg && qi < T) ? seg[(int64_t)b * T + qi] : 0;
      }
      __syncthreads();
      float st[NS][4], dpt[NS][4];
      tc_scores<KS, NS>(st, ka, Qs);
      tc_scores<KS, NS>(dpt, va, Gs);
      tc_dkv_probs<NS>(st, dpt, keys, i0, T, window, scale, cap, Ls, Ds, Ss);
      tc_pv<NO, NS>(dv, st, Gt);
      tc_pv<NO, NS>(dk, dpt, Qt);
    }
  }
#pragma unroll
  for (int n = 0; n < NO; n++)
#pragma unroll
    for (int i = 0; i < 4; i++) {
      int key = keys[i >> 1], col = n * 8 + 2 * t + (i & 1);
      if (key >= T || col >= hd) continue;
      float *drow = dqkv + ((int64_t)b * T + key) * W;
      drow[koff + col] += dk[n][i] * scale;
      drow[voff + col] += dv[n][i];
    }
}

/* ---- dispatch ---------------------------------------------------------------------- */
#define TC_DISPATCH(hd, LAUNCH)                                                                                        \
  do {                                                                                                                 \
    if ((hd) <= 64) LAUNCH(64, 32);                                                                                    \
    else if ((hd) <= 128) LAUNCH(128, 32);                                                                             \
    else LAUNCH(256, 16);                                                                                              \
  } while (0)
#define TC_GRID(T, heads, B) dim3((unsigned)(((T) + TC_ROWS - 1) / TC_ROWS), (unsigned)(heads), (unsigned)(B))

void sl_cuda_attention_fwd_tc(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                              int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap) {
  SL_CUDA_BEGIN(ctx);
  if (sl_cuda_attention_check(ctx, B, T, nh, nkv, hd)) return;
  if (B == 0 || T == 0) return;
  int win = window > 0 ? (int)(window < T ? window : T + 1) : 0;
#define FWD(HDP, BC)                                                                                                   \
  tc_fwd_kernel<float, HDP, BC><<<TC_GRID(T, nh, B), TC_NT, 0, ctx->stream>>>(out, lse, qkv, seg, (int)T, (int)nh,     \
                                                                              (int)nkv, (int)hd, win, scale, softcap)
  TC_DISPATCH(hd, FWD);
#undef FWD
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_attention_bwd_tc(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                              int64_t window, float scale, const int32_t *seg, float softcap) {
  SL_CUDA_BEGIN(ctx);
  if (sl_cuda_attention_check(ctx, B, T, nh, nkv, hd)) return;
  if (B == 0 || T == 0) return;
  int win = window > 0 ? (int)(window < T ? window : T + 1) : 0;
  float *dsum = sl_cuda_attention_dsum(ctx, dout, out, B, T, nh, hd);
  if (!dsum) return;
#define DQ(HDP, BC)                                                                                                    \
  tc_dq_kernel<float, HDP, BC><<<TC_GRID(T, nh, B), TC_NT, 0, ctx->stream>>>(                                          \
      dqkv, dout, qkv, lse, dsum, seg, (int)T, (int)nh, (int)nkv, (int)hd, win, scale, softcap)
  TC_DISPATCH(hd, DQ);
#undef DQ
  CUDA_LAUNCH_CHECK(ctx);
#define DKV(HDP, BC)                                                                                                   \
  tc_dkv_kernel<float, HDP, BC><<<TC_GRID(T, nkv, B), TC_NT, 0, ctx->stream>>>(                                        \
      dqkv, dout, qkv, lse, dsum, seg, (int)T, (int)nh, (int)nkv, (int)hd, win, scale, softcap)
  TC_DISPATCH(hd, DKV);
#undef DKV
  CUDA_LAUNCH_CHECK(ctx);
}
