/* kernels/cuda/moe.cuh — host launchers of the mixture-of-experts ops
 * (routing, permutation, combine). Signatures are the op table's
 * (kernels/kernels.h); pointers are device. */
#ifndef SL_CUDA_MOE_CUH
#define SL_CUDA_MOE_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_moe_route_fwd(sl_kctx *ctx, float *probs, int32_t *sel, float *wts, int32_t *offs, int32_t *perm,
                           int32_t *pos, float *lse, const float *logits, const float *bias, int64_t N, int64_t E,
                           int64_t k, int mode, float scale, int64_t cap);
void sl_cuda_moe_route_bwd(sl_kctx *ctx, float *dlogits, const float *dwts, const float *probs, const int32_t *sel,
                           const float *wts, const float *gp, const float *lse, float zg, int64_t N, int64_t E,
                           int64_t k, int mode, float scale);
void sl_cuda_moe_permute_fwd(sl_kctx *ctx, float *xp, const float *x, const int32_t *pos, int64_t N, int64_t k,
                             int64_t C);
void sl_cuda_moe_permute_bwd(sl_kctx *ctx, float *dx, const float *dxp, const int32_t *pos, int64_t N, int64_t k,
                             int64_t C);
void sl_cuda_moe_combine_fwd(sl_kctx *ctx, float *out, const float *yp, const float *wts, const int32_t *pos, int64_t N,
                             int64_t k, int64_t C);
void sl_cuda_moe_combine_bwd(sl_kctx *ctx, float *dyp, float *dwts, const float *dout, const float *yp,
                             const float *wts, const int32_t *pos, int64_t N, int64_t k, int64_t C);
#ifdef __cplusplus
}
#endif
#endif
