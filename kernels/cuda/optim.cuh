/* kernels/cuda/optim.cuh — host launchers of AdamW and the deterministic
 * sum of squares (gradient-norm clipping). Op-table signatures. */
#ifndef SL_CUDA_OPTIM_CUH
#define SL_CUDA_OPTIM_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_adamw(sl_kctx *ctx, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2,
                   float eps, float wd, int64_t step, float grad_scale);
/* Synchronises the stream (the result is returned to the host). */
double sl_cuda_sumsq(sl_kctx *ctx, const float *x, int64_t n);
#ifdef __cplusplus
}
#endif
#endif
