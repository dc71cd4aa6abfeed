/* kernels/cuda/lmhead_ce.cuh — host launchers of the fused LM head +
 * softmax cross-entropy (chunked over rows). */
#ifndef SL_CUDA_LMHEAD_CE_CUH
#define SL_CUDA_LMHEAD_CE_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                           const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap);
void sl_cuda_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                           const float *lse, float scale, int64_t N, int64_t C, int64_t V, float softcap);
/* The chunk loops over w (V, C) whose row 0 is vocabulary id v0 (0 for the
 * whole head), shared with the loss-parallel head (vocab_parallel.cu).
 * Forward: st == NULL writes losses and lse (lmhead_ce_fwd), else lmax (N)
 * and st (N, 2) (lmhead_vp_fwd). Backward: slice = 0 ignores a target
 * outside [0, V) (lmhead_ce_bwd); slice = 1 gives such a row only the
 * softmax term (lmhead_vp_bwd). Arguments already checked; N, V >= 1. */
void sl_cuda_ce_fwd_core(sl_kctx *ctx, const float *x, const float *w, const int32_t *targets, int64_t N, int64_t C,
                         int64_t V, int64_t v0, float *losses, float *lse, float *lmax, float *st, const char *op,
                         float softcap);
void sl_cuda_ce_bwd_core(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                         const float *lse, float scale, int64_t N, int64_t C, int64_t V, int64_t v0, int slice,
                         const char *op, float softcap);
/* bf16 compute (bf16.cu): x, w bf16; logits and dlogits rounded to bf16 */
void sl_cuda_lmhead_ce_fwd_b16(sl_kctx *ctx, float *losses, float *lse, const uint16_t *x, const uint16_t *w,
                               const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap);
void sl_cuda_lmhead_ce_bwd_b16(sl_kctx *ctx, float *dx, float *dw, const uint16_t *x, const uint16_t *w,
                               const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V,
                               float softcap);
#ifdef __cplusplus
}
#endif
#endif
