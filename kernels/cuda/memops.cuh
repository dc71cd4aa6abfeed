/* kernels/cuda/memops.cuh — host functions of the op table's memory section
 * on CUDA (device memory, the context's stream). Op-table signatures. */
#ifndef SL_CUDA_MEMOPS_CUH
#define SL_CUDA_MEMOPS_CUH
#include "kernels/kernels.h"
#ifdef __cplusplus
extern "C" {
#endif
void *sl_cuda_mem_alloc(sl_kctx *ctx, size_t bytes);
void sl_cuda_mem_free(sl_kctx *ctx, void *p);
void sl_cuda_mem_zero(sl_kctx *ctx, void *p, size_t bytes);
void sl_cuda_mem_copy(sl_kctx *ctx, void *dst, const void *src, size_t bytes);
void sl_cuda_mem_upload(sl_kctx *ctx, void *dst, const void *host_src, size_t bytes);
void sl_cuda_mem_download(sl_kctx *ctx, void *host_dst, const void *src, size_t bytes);
/* Synchronises the stream (the result is returned to the host). */
double sl_cuda_mem_sum(sl_kctx *ctx, const float *x, int64_t n);
/* sum (square 0) or sumsq (square 1) of x, waited for; op names errors */
double sl_cuda_reduce_host(sl_kctx *ctx, const float *x, int64_t n, int square, const char *op);
int sl_cuda_scalars_reserve(sl_kctx *ctx, int n);
void sl_cuda_scalar_acc(sl_kctx *ctx, int slot, const float *x, int64_t n, int square);
void sl_cuda_scalar_add(sl_kctx *ctx, int slot, double v);
int sl_cuda_scalars_fetch(sl_kctx *ctx, double *host, int n);
void sl_cuda_dev_stats(sl_kctx *ctx, sl_dev_stats *out);
int sl_cuda_mem_sync(sl_kctx *ctx);
int sl_cuda_mem_is_device(void);
int sl_cuda_mem_info(sl_kctx *ctx, size_t *free_bytes, size_t *total_bytes);
#ifdef __cplusplus
}
#endif
#endif
