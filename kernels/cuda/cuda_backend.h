/* kernels/cuda/cuda_backend.h — the CUDA backend's extras beyond the op table:
 * error status of a context, device memory helpers (for tests and the
 * engine's wiring), the stream, and bf16-storage fast-path variants of linear
 * and attention. Plain C declarations: no CUDA types leak into callers.
 * Only link against these when the build defines SL_USE_CUDA. */
#ifndef SL_CUDA_BACKEND_H
#define SL_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status --------------------------------------------------------------
 * The first failing CUDA / cuBLASLt call or bad argument inside an op records
 * a status code (base/base.h SL_E*) and a message (also passed to sl_fail);
 * that op returns without doing the rest of its work, and every later op on
 * the context is a no-op until sl_cuda_clear_status. Kernel launches are
 * asynchronous: sl_cuda_sync surfaces errors of work already queued. */
int sl_cuda_last_status(sl_kctx *ctx);        /* SL_OK or the first error */
const char *sl_cuda_last_error(sl_kctx *ctx); /* "" when SL_OK */
void sl_cuda_clear_status(sl_kctx *ctx);
int sl_cuda_sync(sl_kctx *ctx); /* waits for the stream; returns the status */

/* ---- device memory and stream ---------------------------------------------- */
void *sl_cuda_malloc(sl_kctx *ctx, size_t bytes); /* NULL on failure */
void sl_cuda_free(sl_kctx *ctx, void *p);
/* Stream-ordered copies; they wait for completion, so host buffers may be
 * reused on return. Return the status. */
int sl_cuda_upload(sl_kctx *ctx, void *dst_dev, const void *src_host, size_t bytes);
int sl_cuda_download(sl_kctx *ctx, void *dst_host, const void *src_dev, size_t bytes);
int sl_cuda_memset0(sl_kctx *ctx, void *dst_dev, size_t bytes);
void *sl_cuda_stream(sl_kctx *ctx);           /* the context's cudaStream_t */
int sl_cuda_tf32_enabled(const sl_kctx *ctx); /* 1 when SL_CUDA_TF32=1 or SL_COMPUTE_TF32 is set */

/* x[0..n) rounded to bf16 (nearest even) in place: the bf16 compute
 * wrappers' rounding, bit-identical to sl_f32_to_bf16_scalar (no op of the
 * table; declared here for the tests) */
void sl_cuda_round_bf16(sl_kctx *ctx, float *x, int64_t n);

/* ---- bf16-storage variants (uint16_t = bf16 bits) ---------------------------
 * Same math and layouts as the table's fp32 ops; inputs stored as bf16,
 * accumulation in fp32. */
/* out (N, OC) fp32 = inp (N, IC) bf16 @ w (OC, IC)^T bf16 (+ b (OC) fp32) */
void sl_cuda_linear_fwd_bf16(sl_kctx *ctx, float *out, const uint16_t *inp, const uint16_t *w, const float *b,
                             int64_t N, int64_t IC, int64_t OC);
/* dinp (N, IC) fp32 += dout @ w ; dw (OC, IC) fp32 += dout^T @ inp ;
 * db (OC) += colsum(dout). dout, inp, w bf16. Any output may be NULL. */
void sl_cuda_linear_bwd_bf16(sl_kctx *ctx, float *dinp, float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                             const uint16_t *w, int64_t N, int64_t IC, int64_t OC);
/* Attention with qkv and out in bf16; lse (B, nh, T) fp32. */
void sl_cuda_attention_fwd_bf16(sl_kctx *ctx, uint16_t *out, float *lse, const uint16_t *qkv, int64_t B, int64_t T,
                                int64_t nh, int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg,
                                float softcap);
/* dqkv fp32 (packed like qkv) += gradient; dout, qkv, out bf16. */
void sl_cuda_attention_bwd_bf16(sl_kctx *ctx, float *dqkv, const uint16_t *dout, const uint16_t *qkv,
                                const uint16_t *out, const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                                int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap);

/* ---- tensor-core attention (attention_tc.cu, sm_80+ mma.sync) --------------
 * The table's attention ops (same arguments and outputs) with bf16 operands
 * and fp32 accumulation: what the bf16 layer runs under bf16 compute. */
void sl_cuda_attention_fwd_tc(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                              int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg,
                              float softcap);
void sl_cuda_attention_bwd_tc(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                              int64_t window, float scale, const int32_t *seg, float softcap);

#ifdef __cplusplus
}
#endif
#endif /* SL_CUDA_BACKEND_H */
