/* kernels/cuda/vocab_parallel.cuh — host launchers of the vocabulary-parallel
 * ops: embedding over a vocabulary slice and the loss-parallel LM head. */
#ifndef SL_CUDA_VOCAB_PARALLEL_CUH
#define SL_CUDA_VOCAB_PARALLEL_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void sl_cuda_vocab_embedding_fwd(sl_kctx *ctx, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C,
                                 int64_t v0, int64_t Vl);
void sl_cuda_vocab_embedding_bwd(sl_kctx *ctx, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C,
                                 int64_t v0, int64_t Vl);
void sl_cuda_lmhead_vp_fwd(sl_kctx *ctx, float *lmax, float *st, const float *x, const float *w, const int32_t *targets,
                           int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid, float softcap);
void sl_cuda_lmhead_vp_rescale(sl_kctx *ctx, float *st, const float *lmax, const float *gmax, int64_t N);
void sl_cuda_lmhead_vp_loss(sl_kctx *ctx, float *losses, float *lse, const float *st, const float *gmax,
                            const int32_t *targets, int64_t N);
void sl_cuda_lmhead_vp_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                           const float *lse, float scale, int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid,
                           float softcap);
#ifdef __cplusplus
}
#endif
#endif
