/* kernels/cuda/rope.cu — rotary embedding, HF rotate-half layout, in place on
 * the q and k heads of packed qkv. One thread per (token, head, i < hd/2)
 * pair. Angles follow torch (and the CPU backend) exactly: inv_freq (hd/2,
 * device memory) is the model's table (models/rope.h), angle = (float)t *
 * inv_freq[i] in fp32, then cos / sin in double rounded to fp32. seg (B*T,
 * or NULL): position t - seg[t], restarting per document. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/rope.cuh"

/* dir = +1: forward rotation; -1: its transpose (backward). */
static __global__ void rope_kernel(float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                                   const float *inv_freq, int dir, const int32_t *seg) {
  int64_t half = hd / 2, nrot = nh + nkv, width = (nh + 2 * nkv) * hd;
  int64_t total = B * T * nrot * half;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t f = i % half;
    int64_t rest = i / half;
    int64_t head = rest % nrot;
    int64_t bt = rest / nrot;
    int64_t t = bt % T - (seg ? seg[bt] : 0);
    float ang = (float)t * inv_freq[f];
    double s, c;
    sincos((double)ang, &s, &c);
    float cs = (float)c, sn = (float)s * (float)dir;
    float *x = qkv + bt * width + head * hd;
    float a = x[f], b = x[f + half];
    x[f] = a * cs - b * sn;
    x[f + half] = b * cs + a * sn;
  }
}

static void rope_any(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     const float *inv_freq, int dir, const int32_t *seg) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && nh >= 0 && nkv >= 0 && hd > 0 && hd % 2 == 0);
  int64_t total = B * T * (nh + nkv) * (hd / 2);
  if (total == 0) return;
  SL_CUDA_REQUIRE(ctx, inv_freq != NULL);
  rope_kernel<<<sl_cuda_blocks(total, 256), 256, 0, ctx->stream>>>(qkv, B, T, nh, nkv, hd, inv_freq, dir, seg);
  CUDA_LAUNCH_CHECK(ctx);
}

void sl_cuda_rope_fwd(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                      const float *inv_freq, const int32_t *seg) {
  rope_any(ctx, qkv, B, T, nh, nkv, hd, inv_freq, 1, seg);
}
void sl_cuda_rope_bwd(sl_kctx *ctx, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                      const float *inv_freq, const int32_t *seg) {
  rope_any(ctx, dqkv, B, T, nh, nkv, hd, inv_freq, -1, seg);
}
