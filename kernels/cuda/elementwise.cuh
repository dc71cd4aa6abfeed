/* kernels/cuda/elementwise.cuh — host launchers of the element-wise and
 * gather/scatter ops: embedding, swiglu, add, bf16 casts, silu, relu2, gate, and the
 * in-place bf16 rounding the bf16 compute wrappers use.
 * Signatures are the op table's (kernels/kernels.h); pointers are device. */
#ifndef SL_CUDA_ELEMENTWISE_CUH
#define SL_CUDA_ELEMENTWISE_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_embedding_fwd(sl_kctx *ctx, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C);
void sl_cuda_embedding_bwd(sl_kctx *ctx, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C);
void sl_cuda_swiglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H);
void sl_cuda_swiglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H);
void sl_cuda_geglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H);
void sl_cuda_geglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H);
void sl_cuda_add_inplace(sl_kctx *ctx, float *y, const float *x, int64_t n);
void sl_cuda_scale_add(sl_kctx *ctx, float *y, float alpha, float beta, int64_t n);
void sl_cuda_softcap(sl_kctx *ctx, float *y, float cap, int64_t n);
void sl_cuda_f32_to_bf16(sl_kctx *ctx, uint16_t *out, const float *in, int64_t n);
void sl_cuda_bf16_to_f32(sl_kctx *ctx, float *out, const uint16_t *in, int64_t n);
void sl_cuda_round_bf16(sl_kctx *ctx, float *x, int64_t n);
void sl_cuda_silu_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n);
void sl_cuda_silu_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n);
void sl_cuda_relu2_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n);
void sl_cuda_relu2_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n);
void sl_cuda_gate_fwd(sl_kctx *ctx, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D);
void sl_cuda_gate_bwd(sl_kctx *ctx, float *dy, float *dz, int64_t ldz, const float *dout, const float *y,
                      const float *z, int64_t N, int64_t D);
/* out (N, C) += b (C) broadcast over rows (bias of the linear layers) */
void sl_cuda_add_bias(sl_kctx *ctx, float *out, const float *b, int64_t N, int64_t C);
#ifdef __cplusplus
}
#endif
#endif
