/* kernels/cuda/mamba.cuh — host launchers of the Mamba (v1) ops: depthwise
 * causal conv1d and the selective scan (silu and gate live in
 * elementwise.cuh). Op-table signatures. */
#ifndef SL_CUDA_MAMBA_CUH
#define SL_CUDA_MAMBA_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_conv1d_fwd(sl_kctx *ctx, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                        int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg);
void sl_cuda_conv1d_bwd(sl_kctx *ctx, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout,
                        const float *x, int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K,
                        const int32_t *seg);
void sl_cuda_scan_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                      const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, int64_t B,
                      int64_t T, int64_t D, int64_t S, int64_t chunk);
void sl_cuda_scan_bwd(sl_kctx *ctx, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                      const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                      const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, const float *ckpt, int64_t B,
                      int64_t T, int64_t D, int64_t S, int64_t chunk);
#ifdef __cplusplus
}
#endif
#endif
