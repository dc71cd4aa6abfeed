/* kernels/cuda/lmhead_ce.cuh — host launchers of the fused LM head +
 * softmax cross-entropy (chunked over rows). */
#ifndef SL_CUDA_LMHEAD_CE_CUH
#define SL_CUDA_LMHEAD_CE_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w, const int32_t *targets, int64_t N, int64_t C, int64_t V);
void sl_cuda_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V);
/* bf16 compute (bf16.cu): x, w bf16; logits and dlogits rounded to bf16 */
void sl_cuda_lmhead_ce_fwd_b16(sl_kctx *ctx, float *losses, float *lse, const uint16_t *x, const uint16_t *w, const int32_t *targets, int64_t N, int64_t C, int64_t V);
void sl_cuda_lmhead_ce_bwd_b16(sl_kctx *ctx, float *dx, float *dw, const uint16_t *x, const uint16_t *w, const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V);
#ifdef __cplusplus
}
#endif
#endif
