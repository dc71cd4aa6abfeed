/* kernels/cuda/bf16.cuh — bf16 compute (ctx_set_compute, docs/bf16.md):
 * the op-table wrappers sl_cuda_bf_<op> = sl_cuda_<op> + the bf16 rounding
 * points, identical to kernels/cpu/bf16.c. */
#ifndef SL_CUDA_BF16_CUH
#define SL_CUDA_BF16_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
int sl_cuda_ctx_set_compute(sl_kctx *ctx, int compute);
void sl_cuda_bf_rmsnorm_fwd(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, int64_t N,
                            int64_t C, int64_t ld, float eps);
void sl_cuda_bf_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                           int64_t IC, int64_t OC);
void sl_cuda_bf_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, int64_t N, int64_t IC, int64_t OC);
void sl_cuda_bf_rope_fwd(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                         const float *inv_freq, const int32_t *seg);
void sl_cuda_bf_rope_bwd(sl_kctx *ctx, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                         const float *inv_freq, const int32_t *seg);
void sl_cuda_bf_attention_fwd(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                              int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg);
void sl_cuda_bf_attention_bwd(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                              int64_t window, float scale, const int32_t *seg);
void sl_cuda_bf_swiglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H);
void sl_cuda_bf_swiglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H);
void sl_cuda_bf_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                              const int32_t *targets, int64_t N, int64_t C, int64_t V);
void sl_cuda_bf_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w,
                              const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V);
void sl_cuda_bf_conv1d_fwd(sl_kctx *ctx, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                           int64_t B, int64_t T, int64_t D, int64_t K);
void sl_cuda_bf_conv1d_bwd(sl_kctx *ctx, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout,
                           const float *x, int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K);
void sl_cuda_bf_silu_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n);
void sl_cuda_bf_silu_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n);
void sl_cuda_bf_gate_fwd(sl_kctx *ctx, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D);
void sl_cuda_bf_gate_bwd(sl_kctx *ctx, float *dy, float *dz, int64_t ldz, const float *dout, const float *y,
                         const float *z, int64_t N, int64_t D);
void sl_cuda_bf_scan_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                         const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, int64_t B, int64_t T,
                         int64_t D, int64_t S, int64_t chunk);
void sl_cuda_bf_scan_bwd(sl_kctx *ctx, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                         const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                         const float *Cm, int64_t ldbc, const float *Dp, const float *ckpt, int64_t B, int64_t T,
                         int64_t D, int64_t S, int64_t chunk);
#ifdef __cplusplus
}
#endif
#endif
