/* kernels/cuda/bf16.cuh — the CUDA part of the bf16-compute layer
 * (kernels/bf16.h: sl_bf16_impl's rounding and GEMMs). */
#ifndef SL_CUDA_BF16_CUH
#define SL_CUDA_BF16_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
/* x (rows, cols), row stride ld, rounded to bf16 in place */
void sl_cuda_round_rows(sl_kctx *ctx, float *x, int64_t rows, int64_t cols, int64_t ld);
/* the GEMMs with bf16 operands (sl_bf16_impl's; outputs unrounded) */
void sl_cuda_bf16_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                             int64_t IC, int64_t OC);
void sl_cuda_bf16_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, int64_t N, int64_t IC, int64_t OC);
void sl_cuda_bf16_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                                const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap);
void sl_cuda_bf16_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w,
                                const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V,
                                float softcap);
#ifdef __cplusplus
}
#endif
#endif
