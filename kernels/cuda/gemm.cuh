/* kernels/cuda/gemm.cuh — the cuBLASLt matmul wrapper and the linear layer
 * launchers (fp32 table ops; the bf16 variants are in cuda_backend.h). */
#ifndef SL_CUDA_GEMM_CUH
#define SL_CUDA_GEMM_CUH
#include <library_types.h>

#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                        int64_t IC, int64_t OC);
void sl_cuda_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int64_t N, int64_t IC, int64_t OC);
#ifdef __cplusplus
}
#endif

/* Column-major GEMM, D = alpha * op(A) op(B) + beta * D, D (m, n) fp32 with
 * leading dimension ldd; A, B of type ab (CUDA_R_32F or CUDA_R_16BF),
 * op(A) (m, k), op(B) (k, n); ta/tb: 0 = as stored, 1 = transposed.
 * Compute in fp32 (TF32 tensor cores for fp32 inputs when ctx->tf32).
 * Returns the status (recorded in ctx on failure). */
int sl_cuda_gemm(sl_kctx *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                 const void *B, int64_t ldb, float *D, int64_t ldd, float alpha, float beta, cudaDataType_t ab);
/* Frees the per-shape plan cache (ctx destroy). */
void sl_cuda_gemm_plans_free(sl_kctx *ctx);
/* Row-major helpers shared by linear and lmhead_ce (dtype of x, w, dout = ab):
 *   out (N, OC) (+)= x (N, IC) @ w (OC, IC)^T      (beta 0 or 1)
 *   dx (N, IC) += dout (N, OC) @ w (OC, IC)
 *   dw (OC, IC) += dout (N, OC)^T @ x (N, IC) */
int sl_cuda_rm_xwT(sl_kctx *ctx, float *out, const void *x, const void *w, int64_t N, int64_t IC, int64_t OC,
                   float beta, cudaDataType_t ab);
int sl_cuda_rm_dx(sl_kctx *ctx, float *dx, const void *dout, const void *w, int64_t N, int64_t IC, int64_t OC,
                  cudaDataType_t ab);
int sl_cuda_rm_dw(sl_kctx *ctx, float *dw, const void *dout, const void *x, int64_t N, int64_t IC, int64_t OC,
                  cudaDataType_t ab);
#endif
