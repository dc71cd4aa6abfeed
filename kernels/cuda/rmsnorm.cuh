/* kernels/cuda/rmsnorm.cuh — host launchers of RMSNorm forward/backward. */
#ifndef SL_CUDA_RMSNORM_CUH
#define SL_CUDA_RMSNORM_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_rmsnorm_fwd(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                         int64_t ld, float eps);
void sl_cuda_rmsnorm_bwd(sl_kctx *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int64_t N, int64_t C, int64_t ld);
void sl_cuda_rmsnorm_rowsum(sl_kctx *ctx, float *out, const float *a, const float *b, const float *w, int64_t N,
                            int64_t C, int64_t ld);
void sl_cuda_rmsnorm_fwd_sum(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, const float *sums,
                             int64_t N, int64_t C, int64_t ld, int64_t Cw, float eps);
void sl_cuda_rmsnorm_bwd_sum(sl_kctx *ctx, float *dinp, const float *dout, const float *inp, const float *w,
                             const float *rstd, const float *dots, int64_t N, int64_t C, int64_t ld, int64_t Cw);
#ifdef __cplusplus
}
#endif
#endif
