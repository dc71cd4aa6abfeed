/* kernels/cuda/mamba2.cuh — host launchers of the Mamba-2 SSD scan
 * (ssd_fwd / ssd_bwd). Op-table signatures (kernels/kernels.h). */
#ifndef SL_CUDA_MAMBA2_CUH
#define SL_CUDA_MAMBA2_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_ssd_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                     const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                     const float *Dp, const int32_t *seg, float dt_min, float dt_max, int64_t B, int64_t T, int64_t H,
                     int64_t P, int64_t G, int64_t S, int64_t chunk);
void sl_cuda_ssd_bwd(sl_kctx *ctx, float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
                     float *dDp, const float *dy, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                     const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                     const float *Dp, const int32_t *seg, const float *ckpt, float dt_min, float dt_max, int64_t B,
                     int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, int64_t chunk);
#ifdef __cplusplus
}
#endif
#endif
