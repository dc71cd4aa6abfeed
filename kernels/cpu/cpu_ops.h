/* kernels/cpu/cpu_ops.h — the CPU backend's op functions, one per op-table
 * entry, named sl_cpu_<op> with exactly the table's signature. Internal to
 * kernels/cpu; everything else reaches them through sl_ops_cpu(). */
#ifndef SL_CPU_OPS_H
#define SL_CPU_OPS_H
#include "kernels/bf16.h"
#include "kernels/kernels.h"

sl_kctx *sl_cpu_ctx_create(int threads);
void sl_cpu_ctx_destroy(sl_kctx *ctx);
size_t sl_cpu_ctx_scratch_bytes(const sl_kctx *ctx);
void sl_cpu_embedding_fwd(sl_kctx *ctx, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C);
void sl_cpu_embedding_bwd(sl_kctx *ctx, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C);
void sl_cpu_rmsnorm_fwd(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                        int64_t ld, float eps);
void sl_cpu_rmsnorm_bwd(sl_kctx *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        const float *rstd, int64_t N, int64_t C, int64_t ld);
void sl_cpu_rmsnorm_rowsum(sl_kctx *ctx, float *out, const float *a, const float *b, const float *w, int64_t N,
                           int64_t C, int64_t ld);
void sl_cpu_rmsnorm_fwd_sum(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, const float *sums,
                            int64_t N, int64_t C, int64_t ld, int64_t Cw, float eps);
void sl_cpu_rmsnorm_bwd_sum(sl_kctx *ctx, float *dinp, const float *dout, const float *inp, const float *w,
                            const float *rstd, const float *dots, int64_t N, int64_t C, int64_t ld, int64_t Cw);
void sl_cpu_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                       int64_t IC, int64_t OC);
void sl_cpu_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int64_t N, int64_t IC, int64_t OC);
void sl_cpu_rope_fwd(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     const float *inv_freq, const int32_t *seg);
void sl_cpu_rope_bwd(sl_kctx *ctx, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     const float *inv_freq, const int32_t *seg);
void sl_cpu_attention_fwd(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                          int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap);
void sl_cpu_attention_bwd(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                          float scale, const int32_t *seg, float softcap);
void sl_cpu_swiglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H);
void sl_cpu_swiglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H);
void sl_cpu_geglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H);
void sl_cpu_geglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H);
void sl_cpu_add_inplace(sl_kctx *ctx, float *y, const float *x, int64_t n);
void sl_cpu_scale_add(sl_kctx *ctx, float *y, float alpha, float beta, int64_t n);
void sl_cpu_softcap(sl_kctx *ctx, float *y, float cap, int64_t n);
void sl_cpu_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                          const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap);
void sl_cpu_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                          const float *lse, float scale, int64_t N, int64_t C, int64_t V, float softcap);
void sl_cpu_adamw(sl_kctx *ctx, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2,
                  float eps, float wd, int64_t step, float grad_scale);
double sl_cpu_sumsq(sl_kctx *ctx, const float *x, int64_t n);
void sl_cpu_moe_route_fwd(sl_kctx *ctx, float *probs, int32_t *sel, float *wts, int32_t *offs, int32_t *perm,
                          int32_t *pos, float *lse, const float *logits, const float *bias, int64_t N, int64_t E,
                          int64_t k, int mode, float scale, int64_t cap);
void sl_cpu_moe_route_bwd(sl_kctx *ctx, float *dlogits, const float *dwts, const float *probs, const int32_t *sel,
                          const float *wts, const float *gp, const float *lse, float zg, int64_t N, int64_t E,
                          int64_t k, int mode, float scale);
void sl_cpu_moe_permute_fwd(sl_kctx *ctx, float *xp, const float *x, const int32_t *pos, int64_t N, int64_t k,
                            int64_t C);
void sl_cpu_moe_permute_bwd(sl_kctx *ctx, float *dx, const float *dxp, const int32_t *pos, int64_t N, int64_t k,
                            int64_t C);
void sl_cpu_moe_combine_fwd(sl_kctx *ctx, float *out, const float *yp, const float *wts, const int32_t *pos, int64_t N,
                            int64_t k, int64_t C);
void sl_cpu_moe_combine_bwd(sl_kctx *ctx, float *dyp, float *dwts, const float *dout, const float *yp, const float *wts,
                            const int32_t *pos, int64_t N, int64_t k, int64_t C);
void sl_cpu_f32_to_bf16(sl_kctx *ctx, uint16_t *out, const float *in, int64_t n);
void sl_cpu_bf16_to_f32(sl_kctx *ctx, float *out, const uint16_t *in, int64_t n);
void sl_cpu_conv1d_fwd(sl_kctx *ctx, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                       int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg);
void sl_cpu_conv1d_bwd(sl_kctx *ctx, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout, const float *x,
                       int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg);
void sl_cpu_silu_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n);
void sl_cpu_silu_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n);
void sl_cpu_relu2_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n);
void sl_cpu_relu2_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n);
void sl_cpu_gate_fwd(sl_kctx *ctx, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D);
void sl_cpu_gate_bwd(sl_kctx *ctx, float *dy, float *dz, int64_t ldz, const float *dout, const float *y, const float *z,
                     int64_t N, int64_t D);
void sl_cpu_scan_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                     const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, int64_t B,
                     int64_t T, int64_t D, int64_t S, int64_t chunk);
void sl_cpu_scan_bwd(sl_kctx *ctx, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                     const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                     const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, const float *ckpt, int64_t B,
                     int64_t T, int64_t D, int64_t S, int64_t chunk);
/* Mamba-2's SSD scan (kernels/cpu/mamba2.c) */
void sl_cpu_ssd_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                    const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                    const float *Dp, const int32_t *seg, float dt_min, float dt_max, int64_t B, int64_t T, int64_t H,
                    int64_t P, int64_t G, int64_t S, int64_t chunk);
void sl_cpu_ssd_bwd(sl_kctx *ctx, float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
                    float *dDp, const float *dy, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                    const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                    const float *Dp, const int32_t *seg, const float *ckpt, float dt_min, float dt_max, int64_t B,
                    int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, int64_t chunk);

/* vocabulary parallelism (kernels/cpu/vocab_parallel.c) */
void sl_cpu_vocab_embedding_fwd(sl_kctx *ctx, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C,
                                int64_t v0, int64_t Vl);
void sl_cpu_vocab_embedding_bwd(sl_kctx *ctx, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C,
                                int64_t v0, int64_t Vl);
void sl_cpu_lmhead_vp_fwd(sl_kctx *ctx, float *lmax, float *st, const float *x, const float *w, const int32_t *targets,
                          int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid, float softcap);
void sl_cpu_lmhead_vp_rescale(sl_kctx *ctx, float *st, const float *lmax, const float *gmax, int64_t N);
void sl_cpu_lmhead_vp_loss(sl_kctx *ctx, float *losses, float *lse, const float *st, const float *gmax,
                           const int32_t *targets, int64_t N);
void sl_cpu_lmhead_vp_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                          const float *lse, float scale, int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid,
                          float softcap);

/* memory section (kernels/cpu/memops.c) */
void *sl_cpu_alloc(sl_kctx *ctx, size_t bytes);
void sl_cpu_free(sl_kctx *ctx, void *p);
void sl_cpu_zero(sl_kctx *ctx, void *p, size_t bytes);
void sl_cpu_copy(sl_kctx *ctx, void *dst, const void *src, size_t bytes);
void sl_cpu_upload(sl_kctx *ctx, void *dst, const void *host_src, size_t bytes);
void sl_cpu_download(sl_kctx *ctx, void *host_dst, const void *src, size_t bytes);
double sl_cpu_sum(sl_kctx *ctx, const float *x, int64_t n);
int sl_cpu_sync(sl_kctx *ctx);
int sl_cpu_is_device(void);
void *sl_cpu_stream(sl_kctx *ctx);
int sl_cpu_scalars_reserve(sl_kctx *ctx, int n);
void sl_cpu_scalar_acc(sl_kctx *ctx, int slot, const float *x, int64_t n, int square);
void sl_cpu_scalar_add(sl_kctx *ctx, int slot, double v);
int sl_cpu_scalars_fetch(sl_kctx *ctx, double *host, int n);
void sl_cpu_dev_stats(sl_kctx *ctx, sl_dev_stats *out);

/* bf16 compute (kernels/cpu/bf16.c): what the CPU gives the bf16 layer
 * (kernels/bf16.h): the GEMMs on bf16-rounded operand copies */
void sl_cpu_bf16_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                            int64_t IC, int64_t OC);
void sl_cpu_bf16_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, int64_t N, int64_t IC, int64_t OC);
void sl_cpu_bf16_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                               const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap);
void sl_cpu_bf16_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w,
                               const int32_t *targets, const float *lse, float scale, int64_t N, int64_t C, int64_t V,
                               float softcap);
/* the CPU's part of the bf16 layer (ops_table.c), set by ctx_create */
extern const sl_bf16_impl sl_cpu_bf16_impl;

#endif
