/* kernels/cuda/elementwise.cu — element-wise and gather/scatter kernels:
 * embedding (deterministic column-serial scatter for backward), swiglu, add,
 * bf16 casts and in-place rounding, silu, gate, relu2, bias broadcast. Grid-stride loops, 256
 * threads per block, 64-bit indexing. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"

#define GRID_STRIDE(i, n)                                                                                              \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
#define NT 256

/* ---- embedding --------------------------------------------------------------- */
static __global__ void embedding_fwd_kernel(float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C) {
  GRID_STRIDE(i, N * C) {
    int64_t r = i / C, c = i - r * C;
    out[i] = wte[(int64_t)tok[r] * C + c];
  }
}
/* One thread per column c walks all rows in order: no atomics, deterministic,
 * coalesced across the threads of a warp. */
static __global__ void embedding_bwd_kernel(float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C) {
  GRID_STRIDE(c, C) {
    for (int64_t r = 0; r < N; r++) dwte[(int64_t)tok[r] * C + c] += dout[r * C + c];
  }
}
void sl_cuda_embedding_fwd(sl_kctx *ctx, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C >= 0);
  if (N * C == 0) return;
  embedding_fwd_kernel<<<sl_cuda_blocks(N * C, NT), NT, 0, ctx->stream>>>(out, tok, wte, N, C);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_embedding_bwd(sl_kctx *ctx, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && C >= 0);
  if (N * C == 0) return;
  embedding_bwd_kernel<<<sl_cuda_blocks(C, 128), 128, 0, ctx->stream>>>(dwte, dout, tok, N, C);
  CUDA_LAUNCH_CHECK(ctx);
}

/* ---- swiglu, geglu: act(gate) * up ------------------------------------------ */
enum { GLU_SILU, GLU_GELU_TANH };
template <int ACT> __device__ __forceinline__ float glu_act(float g) {
  return ACT == GLU_SILU ? sl_dev_silu(g) : sl_dev_gelu_t(g);
}
template <int ACT> __device__ __forceinline__ float glu_dact(float g) {
  return ACT == GLU_SILU ? sl_dev_dsilu(g) : sl_dev_dgelu_t(g);
}
template <int ACT> static __global__ void glu_fwd_kernel(float *out, const float *gu, int64_t N, int64_t H) {
  GRID_STRIDE(i, N * H) {
    int64_t r = i / H, c = i - r * H;
    float g = gu[r * 2 * H + c], u = gu[r * 2 * H + H + c];
    out[i] = glu_act<ACT>(g) * u;
  }
}
template <int ACT>
static __global__ void glu_bwd_kernel(float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  GRID_STRIDE(i, N * H) {
    int64_t r = i / H, c = i - r * H;
    float g = gu[r * 2 * H + c], u = gu[r * 2 * H + H + c], d = dout[i];
    dgu[r * 2 * H + c] += d * u * glu_dact<ACT>(g);
    dgu[r * 2 * H + H + c] += d * glu_act<ACT>(g);
  }
}
template <int ACT> static void glu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && H >= 0);
  if (N * H == 0) return;
  glu_fwd_kernel<ACT><<<sl_cuda_blocks(N * H, NT), NT, 0, ctx->stream>>>(out, gu, N, H);
  CUDA_LAUNCH_CHECK(ctx);
}
template <int ACT>
static void glu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && H >= 0);
  if (N * H == 0) return;
  glu_bwd_kernel<ACT><<<sl_cuda_blocks(N * H, NT), NT, 0, ctx->stream>>>(dgu, dout, gu, N, H);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_swiglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  glu_fwd<GLU_SILU>(ctx, out, gu, N, H);
}
void sl_cuda_swiglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  glu_bwd<GLU_SILU>(ctx, dgu, dout, gu, N, H);
}
void sl_cuda_geglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  glu_fwd<GLU_GELU_TANH>(ctx, out, gu, N, H);
}
void sl_cuda_geglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  glu_bwd<GLU_GELU_TANH>(ctx, dgu, dout, gu, N, H);
}

/* ---- add, bias -------------------------------------------------------- */
static __global__ void add_kernel(float *y, const float *x, int64_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }
static __global__ void add_bias_kernel(float *out, const float *b, int64_t N, int64_t C) {
  GRID_STRIDE(i, N * C) out[i] += b[i % C];
}
void sl_cuda_add_inplace(sl_kctx *ctx, float *y, const float *x, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  add_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(y, x, n);
  CUDA_LAUNCH_CHECK(ctx);
}
static __global__ void scale_add_kernel(float *y, float alpha, float beta, int64_t n) {
  GRID_STRIDE(i, n) y[i] = fmaf(alpha, y[i], beta);
}
void sl_cuda_scale_add(sl_kctx *ctx, float *y, float alpha, float beta, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  scale_add_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(y, alpha, beta, n);
  CUDA_LAUNCH_CHECK(ctx);
}
static __global__ void softcap_kernel(float *y, float cap, int64_t n) {
  GRID_STRIDE(i, n) y[i] = cap * tanhf(y[i] / cap);
}
void sl_cuda_softcap(sl_kctx *ctx, float *y, float cap, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0 && cap > 0);
  if (n == 0) return;
  softcap_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(y, cap, n);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_add_bias(sl_kctx *ctx, float *out, const float *b, int64_t N, int64_t C) {
  SL_CUDA_BEGIN(ctx);
  if (N * C <= 0 || !b) return;
  add_bias_kernel<<<sl_cuda_blocks(N * C, NT), NT, 0, ctx->stream>>>(out, b, N, C);
  CUDA_LAUNCH_CHECK(ctx);
}

/* ---- bf16 -------------------------------------------------------------------- */
static __global__ void f32_to_bf16_kernel(uint16_t *out, const float *in, int64_t n) {
  GRID_STRIDE(i, n) out[i] = sl_dev_f32_to_bf16(in[i]);
}
static __global__ void bf16_to_f32_kernel(float *out, const uint16_t *in, int64_t n) {
  GRID_STRIDE(i, n) out[i] = sl_dev_bf16_to_f32(in[i]);
}
static __global__ void round_bf16_kernel(float *x, int64_t n) {
  GRID_STRIDE(i, n) x[i] = sl_dev_bf16_to_f32(sl_dev_f32_to_bf16(x[i]));
}
void sl_cuda_f32_to_bf16(sl_kctx *ctx, uint16_t *out, const float *in, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  f32_to_bf16_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(out, in, n);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_bf16_to_f32(sl_kctx *ctx, float *out, const uint16_t *in, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  bf16_to_f32_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(out, in, n);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_round_bf16(sl_kctx *ctx, float *x, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  round_bf16_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(x, n);
  CUDA_LAUNCH_CHECK(ctx);
}

/* ---- silu, gate (Mamba) --------------------------------------------------------- */
static __global__ void silu_fwd_kernel(float *out, const float *x, int64_t n) {
  GRID_STRIDE(i, n) out[i] = sl_dev_silu(x[i]);
}
static __global__ void silu_bwd_kernel(float *dx, const float *dout, const float *x, int64_t n) {
  GRID_STRIDE(i, n) dx[i] += dout[i] * sl_dev_dsilu(x[i]);
}
static __global__ void gate_fwd_kernel(float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D) {
  GRID_STRIDE(i, N * D) {
    int64_t r = i / D, c = i - r * D;
    out[i] = y[i] * sl_dev_silu(z[r * ldz + c]);
  }
}
static __global__ void gate_bwd_kernel(float *dy, float *dz, int64_t ldz, const float *dout, const float *y,
                                       const float *z, int64_t N, int64_t D) {
  GRID_STRIDE(i, N * D) {
    int64_t r = i / D, c = i - r * D;
    float zz = z[r * ldz + c], g = dout[i];
    if (dy) dy[i] += g * sl_dev_silu(zz);
    if (dz) dz[r * ldz + c] += g * y[i] * sl_dev_dsilu(zz);
  }
}
void sl_cuda_silu_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  silu_fwd_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(out, x, n);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_silu_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  silu_bwd_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(dx, dout, x, n);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_gate_fwd(sl_kctx *ctx, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && D >= 0 && ldz >= D);
  if (N * D == 0) return;
  gate_fwd_kernel<<<sl_cuda_blocks(N * D, NT), NT, 0, ctx->stream>>>(out, y, z, ldz, N, D);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_gate_bwd(sl_kctx *ctx, float *dy, float *dz, int64_t ldz, const float *dout, const float *y,
                      const float *z, int64_t N, int64_t D) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && D >= 0 && ldz >= D);
  if (N * D == 0) return;
  gate_bwd_kernel<<<sl_cuda_blocks(N * D, NT), NT, 0, ctx->stream>>>(dy, dz, ldz, dout, y, z, N, D);
  CUDA_LAUNCH_CHECK(ctx);
}

/* ---- relu2: squared ReLU (Nemotron-H's MLP) ------------------------------------- */
/* kernels/cpu/mamba.c's twin: one product forward, one fmaf backward, the same bits */
static __global__ void relu2_fwd_kernel(float *out, const float *x, int64_t n) {
  GRID_STRIDE(i, n) {
    float r = sl_dev_relu(x[i]);
    out[i] = r * r;
  }
}
static __global__ void relu2_bwd_kernel(float *dx, const float *dout, const float *x, int64_t n) {
  GRID_STRIDE(i, n) dx[i] = fmaf(dout[i], 2.0f * sl_dev_relu(x[i]), dx[i]);
}
void sl_cuda_relu2_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  relu2_fwd_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(out, x, n);
  CUDA_LAUNCH_CHECK(ctx);
}
void sl_cuda_relu2_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, n >= 0);
  if (n == 0) return;
  relu2_bwd_kernel<<<sl_cuda_blocks(n, NT), NT, 0, ctx->stream>>>(dx, dout, x, n);
  CUDA_LAUNCH_CHECK(ctx);
}
