/* kernels/bf16.h — the one bf16-compute layer (ctx_set_compute,
 * docs/bf16.md), shared by the backends that compute (cpu, cuda).
 *
 * A backend writes its op table with fp32 compute ops only and hands it to
 * sl_bf16_ops, which returns the table it publishes: the same, except that
 * every op whose results a bf16 engine stores in bf16 is a wrapper here that
 * runs the backend's fp32 op and then rounds (to nearest even, in place)
 * what it stores, and ctx_set_compute is the layer's. With fp32 compute a
 * wrapper calls the fp32 op and nothing else (bit-identical). The rounding
 * points are docs/bf16.md's table; the wrappers are its only copy.
 *
 * What the backend supplies besides its fp32 table (sl_bf16_impl): the
 * in-place rounding of strided rows, and its GEMM ops under bf16 compute
 * (operands rounded or converted to bf16, fp32 accumulation: only the
 * backend knows how its GEMMs take bf16 operands); the layer rounds their
 * out / dinp / dx. Its context struct starts with an sl_bf16_state, which
 * its ctx_create fills (sl_bf16_state_init) and the wrappers read. */
#ifndef SL_KERNELS_BF16_H
#define SL_KERNELS_BF16_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_bf16_impl {
  const sl_ops *fp32; /* the backend's table of fp32 ops (what sl_bf16_ops got) */
  /* x (rows, cols), row stride ld >= cols, rounded to bf16 in place */
  void (*round_rows)(sl_kctx *, float *x, int64_t rows, int64_t cols, int64_t ld);
  /* The table's GEMM ops with bf16 operands (inp / w, dout / inp / w, x / w
   * as a bf16 engine holds them) and fp32 accumulation; outputs unrounded
   * except the LM head's logits / dlogits tiles, which the backend rounds
   * inside (they never leave the op). Called only under bf16 compute. */
  void (*linear_fwd)(sl_kctx *, float *out, const float *inp, const float *w, const float *b, int64_t N, int64_t IC,
                     int64_t OC);
  void (*linear_bwd)(sl_kctx *, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                     int64_t N, int64_t IC, int64_t OC);
  void (*lmhead_ce_fwd)(sl_kctx *, float *losses, float *lse, const float *x, const float *w, const int32_t *targets,
                        int64_t N, int64_t C, int64_t V, float softcap);
  void (*lmhead_ce_bwd)(sl_kctx *, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                        const float *lse, float scale, int64_t N, int64_t C, int64_t V, float softcap);
  /* Optional (NULL: the fp32 op): attention with bf16 operands and fp32
   * accumulation (the CUDA backend's tensor-core kernels); the layer rounds
   * out and dqkv as after the fp32 op. Called only under bf16 compute. */
  void (*attention_fwd)(sl_kctx *, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                        int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap);
  void (*attention_bwd)(sl_kctx *, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                        int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window, float scale,
                        const int32_t *seg, float softcap);
  /* 1: the backend's fp32 GEMMs have a TF32 tensor-core mode, which they
   * take when sl_bf16_state tf32 is set (ctx_set_compute SL_COMPUTE_TF32);
   * 0: the layer refuses SL_COMPUTE_TF32. */
  int tf32;
} sl_bf16_impl;

/* The first member of the context struct of a backend that uses the layer. */
typedef struct sl_bf16_state {
  const sl_bf16_impl *impl;
  int on;   /* compute dtype is SL_COMPUTE_BF16 */
  int tf32; /* SL_COMPUTE_TF32 was set: fp32 GEMMs on TF32 tensor cores */
} sl_bf16_state;

/* The state a new context starts with: fp32 compute. */
static inline sl_bf16_state sl_bf16_state_init(const sl_bf16_impl *impl) {
  sl_bf16_state s = {impl, 0, 0};
  return s;
}

/* fp32 with its bf16-rounded ops replaced by the layer's wrappers and
 * ctx_set_compute set. fp32's own ctx_set_compute is ignored. */
sl_ops sl_bf16_ops(const sl_ops *fp32);

#ifdef __cplusplus
}
#endif
#endif /* SL_KERNELS_BF16_H */
