/* kernels/cuda/rope.cuh — host launchers of rotary embedding fwd/bwd. */
#ifndef SL_CUDA_ROPE_CUH
#define SL_CUDA_ROPE_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_rope_fwd(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                      const float *inv_freq, const int32_t *seg);
void sl_cuda_rope_bwd(sl_kctx *ctx, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                      const float *inv_freq, const int32_t *seg);
#ifdef __cplusplus
}
#endif
#endif
