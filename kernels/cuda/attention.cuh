/* kernels/cuda/attention.cuh — host launchers of the fused causal GQA
 * attention (FlashAttention-2 style); bf16 variants in cuda_backend.h. */
#ifndef SL_CUDA_ATTENTION_CUH
#define SL_CUDA_ATTENTION_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_attention_fwd(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                           int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap);
void sl_cuda_attention_bwd(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                           float scale, const int32_t *seg, float softcap);
/* SL_OK, or SL_EINPUT recorded for a shape the kernels do not take. */
int sl_cuda_attention_check(sl_kctx *ctx, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd);
/* Dsum (B, nh, T) = dout . out per row, queued into the op's scratch
 * (attention_bwd's first pass); NULL on failure (status recorded). */
float *sl_cuda_attention_dsum(sl_kctx *ctx, const float *dout, const float *out, int64_t B, int64_t T, int64_t nh,
                              int64_t hd);
#ifdef __cplusplus
}
#endif
#endif
