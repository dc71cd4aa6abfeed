/* kernels/count/ops_count.c — the counting backend: every op of sl_ops with
 * its exact signature, doing no arithmetic and touching no data, only
 * adding up the FLOPs it would do (docs/planner.md, "Engine check").
 *
 * Memory: alloc maps address space with MAP_NORESERVE and never touches it
 * (the block's size is kept in a table keyed by its address, not in the
 * block), so the pages stay uncommitted: RSS does not grow with the model
 * or the layer count (past the 128 TiB of address space a process has,
 * distinct addresses nothing can map: see virtual_span). Sizes are checked
 * for overflow; a request beyond 2^63 bytes is refused (SL_EINPUT). zero / copy / upload /
 * download move nothing; sum and sumsq return 0. The arena accounting is
 * the callers' (shard/fsdp.c, models/model.c, the trainer), exactly as with
 * the real backends, which is what makes the engine check exact. */
#define _GNU_SOURCE
#include "kernels/count/ops_count.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"

typedef struct {
  uintptr_t p; /* 0: empty slot */
  size_t len;  /* bytes reserved (mmap length, or the virtual span) */
  size_t bytes;
  int virt;
} vblock;

/* Bookkeeping: an open-addressing table keyed by address (no header page
 * in the block, so nothing is touched and RSS is independent of the sizes
 * counted: a few dozen bytes per live block). */
struct sl_kctx {
  sl_count_stats st;
  vblock *v; /* capv slots, a power of two; nv used */
  size_t nv, capv;
};

/* When the address space itself runs out (a search candidate with a
 * thousand-sample micro-batch of a 70B model asks for more than the 128 TiB
 * a process can map), alloc hands out addresses in a range no process can
 * map (non-canonical on x86-64 and AArch64): distinct, aligned, and never
 * dereferenced, since nothing in counting mode touches backend memory. The
 * range is finite (VBASE..VEND, 6 EiB): a request past it is refused, and
 * the cursor rewinds once no virtual block is live. */
#define VBASE ((uintptr_t)0xa000000000000000ull)
#define VEND ((uintptr_t)0xfffffff000000000ull)
static uintptr_t g_vnext = VBASE;
static int64_t g_vlive; /* live virtual blocks, all contexts */
static pthread_mutex_t g_vmu = PTHREAD_MUTEX_INITIALIZER;

#define PAGE ((size_t)4096)
static void virtual_release(void);

static void add(sl_kctx *k, double flops, double mm) {
  if (!k) return;
  k->st.calls++;
  k->st.flops += flops + mm;
  k->st.matmul_flops += mm;
}
#define D(x) ((double)(x))

static sl_kctx *c_ctx_create(int threads) {
  (void)threads;
  sl_kctx *k = calloc(1, sizeof *k);
  if (!k) sl_fail(SL_ENOMEM, "kernels/count: out of memory for the context");
  return k;
}
static void c_ctx_destroy(sl_kctx *k) {
  if (!k) return;
  for (size_t i = 0; i < k->capv; i++) /* blocks the caller did not free */
    if (k->v[i].p) {
      if (k->v[i].virt) virtual_release();
      else munmap((void *)k->v[i].p, k->v[i].len);
    }
  free(k->v);
  free(k);
}
static size_t c_scratch(const sl_kctx *k) {
  (void)k;
  return 0;
}

static void c_embedding_fwd(sl_kctx *k, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C) {
  (void)out;
  (void)tok;
  (void)wte;
  add(k, D(N) * D(C) * 0, 0); /* a lookup: no arithmetic */
}
static void c_embedding_bwd(sl_kctx *k, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C) {
  (void)dwte;
  (void)dout;
  (void)tok;
  add(k, D(N) * D(C), 0);
}
static void c_rmsnorm_fwd(sl_kctx *k, float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                          int64_t ld, float eps) {
  (void)out;
  (void)ld;
  (void)rstd;
  (void)inp;
  (void)w;
  (void)eps;
  add(k, 4 * D(N) * D(C), 0);
}
static void c_rmsnorm_bwd(sl_kctx *k, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                          const float *rstd, int64_t N, int64_t C, int64_t ld) {
  (void)dinp;
  (void)ld;
  (void)dw;
  (void)dout;
  (void)inp;
  (void)w;
  (void)rstd;
  add(k, 8 * D(N) * D(C), 0);
}
static void c_rmsnorm_rowsum(sl_kctx *k, float *out, const float *a, const float *b, const float *w, int64_t N,
                             int64_t C, int64_t ld) {
  (void)out, (void)a, (void)b, (void)w, (void)ld;
  add(k, 2 * D(N) * D(C), 0);
}
static void c_rmsnorm_fwd_sum(sl_kctx *k, float *out, float *rstd, const float *inp, const float *w, const float *sums,
                              int64_t N, int64_t C, int64_t ld, int64_t Cw, float eps) {
  (void)out, (void)rstd, (void)inp, (void)w, (void)sums, (void)ld, (void)Cw, (void)eps;
  add(k, 2 * D(N) * D(C), 0);
}
static void c_rmsnorm_bwd_sum(sl_kctx *k, float *dinp, const float *dout, const float *inp, const float *w,
                              const float *rstd, const float *dots, int64_t N, int64_t C, int64_t ld, int64_t Cw) {
  (void)dinp, (void)dout, (void)inp, (void)w, (void)rstd, (void)dots, (void)ld, (void)Cw;
  add(k, 4 * D(N) * D(C), 0);
}
static void c_linear_fwd(sl_kctx *k, float *out, const float *inp, const float *w, const float *b, int64_t N,
                         int64_t IC, int64_t OC) {
  (void)out;
  (void)inp;
  (void)w;
  add(k, b ? D(N) * D(OC) : 0, 2 * D(N) * D(IC) * D(OC));
}
static void c_linear_bwd(sl_kctx *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                         const float *w, int64_t N, int64_t IC, int64_t OC) {
  (void)dout;
  (void)inp;
  (void)w;
  add(k, db ? D(N) * D(OC) : 0, ((dinp ? 2 : 0) + (dw ? 2 : 0)) * D(N) * D(IC) * D(OC));
}
static void c_rope_fwd(sl_kctx *k, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                       const float *inv_freq, const int32_t *seg) {
  (void)qkv;
  (void)inv_freq;
  (void)seg;
  add(k, 3 * D(B) * D(T) * D(nh + nkv) * D(hd), 0);
}
/* scores and values without the causal halving: the 12 l h s convention */
static void c_attention_fwd(sl_kctx *k, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                            int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap) {
  (void)out;
  (void)softcap; /* the tanh per score is not counted */
  (void)scale;
  (void)seg;
  (void)lse;
  (void)qkv;
  (void)nkv;
  (void)window;
  add(k, 5 * D(B) * D(nh) * D(T) * D(T), 4 * D(B) * D(T) * D(T) * D(nh) * D(hd));
}
static void c_attention_bwd(sl_kctx *k, float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                            float scale, const int32_t *seg, float softcap) {
  (void)dqkv;
  (void)softcap;
  (void)scale;
  (void)seg;
  (void)dout;
  (void)qkv;
  (void)out;
  (void)lse;
  (void)nkv;
  (void)window;
  /* recomputed scores (2) + dV, dP, dQ, dK (8) */
  add(k, 5 * D(B) * D(nh) * D(T) * D(T), 10 * D(B) * D(T) * D(T) * D(nh) * D(hd));
}
static void c_swiglu_fwd(sl_kctx *k, float *out, const float *gu, int64_t N, int64_t H) {
  (void)out;
  (void)gu;
  add(k, 5 * D(N) * D(H), 0);
}
static void c_swiglu_bwd(sl_kctx *k, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  (void)dgu;
  (void)dout;
  (void)gu;
  add(k, 10 * D(N) * D(H), 0);
}
/* the MoE ops: the router's scores and top-k (about 5 E + k E a token: the
 * softmax's exp, sum, divide, or the sigmoid's negate, exp, add, divide), the
 * routed scaling (k a token), the row moves (no FLOPs), the combine's
 * multiply-add (2 k C a token) */
static void c_moe_route_fwd(sl_kctx *k, float *probs, int32_t *sel, float *wts, int32_t *offs, int32_t *perm,
                            int32_t *pos, float *lse, const float *logits, const float *bias, int64_t N, int64_t E,
                            int64_t kk, int mode, float scale, int64_t cap) {
  (void)probs, (void)sel, (void)wts, (void)offs, (void)perm, (void)pos, (void)lse, (void)logits, (void)bias, (void)mode;
  (void)cap; /* the capacity's ranks and the z-loss: not counted (the planner's closed forms have no term for them) */
  add(k, D(N) * D(E) * (5 + D(kk)) + (scale != 1.0f ? D(N) * D(kk) : 0), 0);
}
/* its backward: about 2 E + 6 k a token (the softmax's, or the sigmoid's p (1 - p) g: 3 E), + k for the scale */
static void c_moe_route_bwd(sl_kctx *k, float *dlogits, const float *dwts, const float *probs, const int32_t *sel,
                            const float *wts, const float *gp, const float *lse, float zg, int64_t N, int64_t E,
                            int64_t kk, int mode, float scale) {
  (void)dlogits, (void)dwts, (void)probs, (void)sel, (void)wts, (void)gp, (void)lse, (void)zg;
  double per_tok = (mode & SL_MOE_SIGMOID ? 3 * D(E) : 2 * D(E)) + 6 * D(kk) + (scale != 1.0f ? D(kk) : 0);
  add(k, D(N) * per_tok, 0);
}
static void c_moe_permute_fwd(sl_kctx *k, float *xp, const float *x, const int32_t *pos, int64_t N, int64_t kk,
                              int64_t C) {
  (void)xp, (void)x, (void)pos, (void)N, (void)kk, (void)C;
  add(k, 0, 0);
}
static void c_moe_permute_bwd(sl_kctx *k, float *dx, const float *dxp, const int32_t *pos, int64_t N, int64_t kk,
                              int64_t C) {
  (void)dx, (void)dxp, (void)pos;
  add(k, D(N) * D(kk) * D(C), 0);
}
static void c_moe_combine_fwd(sl_kctx *k, float *out, const float *yp, const float *wts, const int32_t *pos, int64_t N,
                              int64_t kk, int64_t C) {
  (void)out, (void)yp, (void)wts, (void)pos;
  add(k, 2 * D(N) * D(kk) * D(C), 0);
}
static void c_moe_combine_bwd(sl_kctx *k, float *dyp, float *dwts, const float *dout, const float *yp, const float *wts,
                              const int32_t *pos, int64_t N, int64_t kk, int64_t C) {
  (void)dyp, (void)dwts, (void)dout, (void)yp, (void)wts, (void)pos;
  add(k, 4 * D(N) * D(kk) * D(C), 0);
}
/* tanh-GELU: about twice the pointwise work of silu */
static void c_geglu_fwd(sl_kctx *k, float *out, const float *gu, int64_t N, int64_t H) {
  (void)out;
  (void)gu;
  add(k, 10 * D(N) * D(H), 0);
}
static void c_geglu_bwd(sl_kctx *k, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  (void)dgu;
  (void)dout;
  (void)gu;
  add(k, 20 * D(N) * D(H), 0);
}
static void c_add_inplace(sl_kctx *k, float *y, const float *x, int64_t n) {
  (void)y;
  (void)x;
  add(k, D(n), 0);
}
static void c_scale_add(sl_kctx *k, float *y, float alpha, float beta, int64_t n) {
  (void)y;
  (void)alpha;
  (void)beta;
  add(k, 2 * D(n), 0);
}
static void c_softcap(sl_kctx *k, float *y, float cap, int64_t n) {
  (void)y;
  (void)cap;
  add(k, 3 * D(n), 0);
}
static void c_lmhead_ce_fwd(sl_kctx *k, float *losses, float *lse, const float *x, const float *w,
                            const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap) {
  (void)softcap;
  (void)losses;
  (void)lse;
  (void)x;
  (void)w;
  (void)targets;
  add(k, 4 * D(N) * D(V), 2 * D(N) * D(C) * D(V));
}
static void c_lmhead_ce_bwd(sl_kctx *k, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                            const float *lse, float scale, int64_t N, int64_t C, int64_t V, float softcap) {
  (void)softcap;
  (void)dx;
  (void)dw;
  (void)x;
  (void)w;
  (void)targets;
  (void)lse;
  (void)scale;
  add(k, 4 * D(N) * D(V), 6 * D(N) * D(C) * D(V)); /* logits recomputed, then dx and dw */
}
/* vocabulary-parallel ops: the same counts as their whole-vocabulary twins
 * over this rank's slice (Vvalid rows) */
static void c_vocab_embedding_fwd(sl_kctx *k, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C,
                                  int64_t v0, int64_t Vl) {
  (void)out;
  (void)tok;
  (void)wte;
  (void)v0;
  (void)Vl;
  add(k, 0, 0); /* a lookup: no arithmetic */
}
static void c_vocab_embedding_bwd(sl_kctx *k, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C,
                                  int64_t v0, int64_t Vl) {
  (void)dwte;
  (void)dout;
  (void)tok;
  (void)v0;
  (void)Vl;
  add(k, D(N) * D(C), 0);
}
static void c_lmhead_vp_fwd(sl_kctx *k, float *lmax, float *st, const float *x, const float *w, const int32_t *targets,
                            int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid, float softcap) {
  (void)softcap;
  (void)lmax;
  (void)st;
  (void)x;
  (void)w;
  (void)targets;
  (void)v0;
  (void)Vl;
  add(k, 4 * D(N) * D(Vvalid), 2 * D(N) * D(C) * D(Vvalid));
}
static void c_lmhead_vp_rescale(sl_kctx *k, float *st, const float *lmax, const float *gmax, int64_t N) {
  (void)st;
  (void)lmax;
  (void)gmax;
  add(k, 2 * D(N), 0);
}
static void c_lmhead_vp_loss(sl_kctx *k, float *losses, float *lse, const float *st, const float *gmax,
                             const int32_t *targets, int64_t N) {
  (void)losses;
  (void)lse;
  (void)st;
  (void)gmax;
  (void)targets;
  add(k, 3 * D(N), 0);
}
static void c_lmhead_vp_bwd(sl_kctx *k, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                            const float *lse, float scale, int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid,
                            float softcap) {
  (void)softcap;
  (void)dx;
  (void)dw;
  (void)x;
  (void)w;
  (void)targets;
  (void)lse;
  (void)scale;
  (void)v0;
  (void)Vl;
  add(k, 4 * D(N) * D(Vvalid), 6 * D(N) * D(C) * D(Vvalid));
}
/* bf16 compute changes no count: FLOPs and bytes are the same ops' */
static int c_ctx_set_compute(sl_kctx *k, int compute) {
  (void)k;
  int dt = compute & ~SL_COMPUTE_TF32; /* TF32 changes no count either */
  return dt == SL_COMPUTE_FP32 || dt == SL_COMPUTE_BF16 ? SL_OK
                                                        : sl_fail(SL_EINPUT, "unknown compute dtype %d", compute);
}
static void c_adamw(sl_kctx *k, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2,
                    float eps, float wd, int64_t step, float grad_scale) {
  (void)p;
  (void)m;
  (void)v;
  (void)g;
  (void)lr;
  (void)b1;
  (void)b2;
  (void)eps;
  (void)wd;
  (void)step;
  (void)grad_scale;
  add(k, 14 * D(n), 0);
}
static double c_sumsq(sl_kctx *k, const float *x, int64_t n) {
  (void)x;
  add(k, 2 * D(n), 0);
  return 0.0;
}
static void c_f32_to_bf16(sl_kctx *k, uint16_t *out, const float *in, int64_t n) {
  (void)out;
  (void)in;
  add(k, D(n), 0);
}
static void c_bf16_to_f32(sl_kctx *k, float *out, const uint16_t *in, int64_t n) {
  (void)out;
  (void)in;
  add(k, D(n), 0);
}
static void c_round_bf16(sl_kctx *k, float *x, int64_t n) {
  (void)x;
  add(k, 2 * D(n), 0);
}
static void c_conv1d_fwd(sl_kctx *k, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                         int64_t B, int64_t T, int64_t D_, int64_t K, const int32_t *seg) {
  (void)seg; /* document starts drop a few taps: counted as all K */
  (void)out;
  (void)x;
  (void)ldx;
  (void)w;
  (void)bias;
  add(k, 2 * D(B) * D(T) * D(D_) * D(K), 0);
}
static void c_conv1d_bwd(sl_kctx *k, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout, const float *x,
                         int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D_, int64_t K,
                         const int32_t *seg) {
  (void)seg;
  (void)dx;
  (void)ldx;
  (void)dw;
  (void)dbias;
  (void)dout;
  (void)x;
  (void)ldx_in;
  (void)w;
  add(k, 4 * D(B) * D(T) * D(D_) * D(K), 0);
}
static void c_silu_fwd(sl_kctx *k, float *out, const float *x, int64_t n) {
  (void)out;
  (void)x;
  add(k, 4 * D(n), 0);
}
static void c_silu_bwd(sl_kctx *k, float *dx, const float *dout, const float *x, int64_t n) {
  (void)dx;
  (void)dout;
  (void)x;
  add(k, 6 * D(n), 0);
}
/* relu2: the select and the square; backward the select, the doubling and the fma (2) */
static void c_relu2_fwd(sl_kctx *k, float *out, const float *x, int64_t n) {
  (void)out;
  (void)x;
  add(k, 2 * D(n), 0);
}
static void c_relu2_bwd(sl_kctx *k, float *dx, const float *dout, const float *x, int64_t n) {
  (void)dx;
  (void)dout;
  (void)x;
  add(k, 4 * D(n), 0);
}
static void c_gate_fwd(sl_kctx *k, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D_) {
  (void)out;
  (void)y;
  (void)z;
  (void)ldz;
  add(k, 5 * D(N) * D(D_), 0);
}
static void c_gate_bwd(sl_kctx *k, float *dy, float *dz, int64_t ldz, const float *dout, const float *y, const float *z,
                       int64_t N, int64_t D_) {
  (void)dy;
  (void)dz;
  (void)ldz;
  (void)dout;
  (void)y;
  (void)z;
  add(k, 10 * D(N) * D(D_), 0);
}
static void c_scan_fwd(sl_kctx *k, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                       const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, int64_t B,
                       int64_t T, int64_t D_, int64_t S, int64_t chunk) {
  (void)seg;
  (void)y;
  (void)ckpt;
  (void)u;
  (void)dt;
  (void)A_log;
  (void)Bm;
  (void)Cm;
  (void)ldbc;
  (void)Dp;
  (void)chunk;
  add(k, 9 * D(B) * D(T) * D(D_) * D(S), 0);
}
static void c_scan_bwd(sl_kctx *k, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                       const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                       const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, const float *ckpt, int64_t B,
                       int64_t T, int64_t D_, int64_t S, int64_t chunk) {
  (void)seg;
  (void)du;
  (void)ddt;
  (void)dA_log;
  (void)dBm;
  (void)dCm;
  (void)dDp;
  (void)dy;
  (void)u;
  (void)dt;
  (void)A_log;
  (void)Bm;
  (void)Cm;
  (void)ldbc;
  (void)Dp;
  (void)ckpt;
  (void)chunk;
  add(k, 27 * D(B) * D(T) * D(D_) * D(S), 0); /* states recomputed from the checkpoints, then the gradients */
}

/* Mamba-2's SSD scan, per (b, t, h, p): forward 5S + 3 (the state update
 * decay * s + B * dx, 3 per state; y's C . s, 2 per state; dx = delta * x,
 * D * x and its add); backward 16S + 9 (the recomputed update, 3 per state;
 * the adjoint's dL/ds, dC, dB, the B . dL/ds and s . dL/ds sums and the
 * carried decay, 13 per state; dx, the x . (B . dL/ds) and dy . x sums) plus
 * 2S per (b, t, h) for the sum of dB / dC over the heads of a group. The
 * per-(t, h) softplus / exp are left out (P * S times fewer). docs/mamba.md. */
static void c_ssd_fwd(sl_kctx *k, float *y, float *ckpt, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                      const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                      const float *Dp, const int32_t *seg, float dt_min, float dt_max, int64_t B, int64_t T, int64_t H,
                      int64_t P, int64_t G, int64_t S, int64_t chunk) {
  (void)y, (void)ckpt, (void)x, (void)ldx, (void)dt, (void)lddt, (void)dt_bias, (void)A_log, (void)Bm, (void)Cm;
  (void)ldbc, (void)Dp, (void)seg, (void)dt_min, (void)dt_max, (void)G, (void)chunk;
  add(k, D(B) * D(T) * D(H) * D(P) * (5 * D(S) + 3), 0);
}
static void c_ssd_bwd(sl_kctx *k, float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
                      float *dDp, const float *dy, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                      const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                      const float *Dp, const int32_t *seg, const float *ckpt, float dt_min, float dt_max, int64_t B,
                      int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, int64_t chunk) {
  (void)dx, (void)ddt, (void)ddt_bias, (void)dA_log, (void)dBm, (void)dCm, (void)dDp, (void)dy, (void)x, (void)ldx;
  (void)dt, (void)lddt, (void)dt_bias, (void)A_log, (void)Bm, (void)Cm, (void)ldbc, (void)Dp, (void)seg, (void)ckpt;
  (void)dt_min, (void)dt_max, (void)G, (void)chunk;
  add(k, D(B) * D(T) * D(H) * (D(P) * (16 * D(S) + 9) + 2 * D(S)), 0);
}

/* ---- memory: address space only ------------------------------------------- */
static void count_bytes(sl_kctx *k, int64_t bytes) {
  k->st.calls++;
  k->st.live_bytes += bytes;
  if (k->st.live_bytes > k->st.peak_bytes) k->st.peak_bytes = k->st.live_bytes;
}

static size_t slot_of(const sl_kctx *k, uintptr_t p) {
  uint64_t h = (uint64_t)(p >> 12) * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 20) & (k->capv - 1);
}

static int table_put(sl_kctx *k, vblock b) {
  if (2 * (k->nv + 1) > k->capv) { /* grow at half full */
    size_t nc = k->capv ? 2 * k->capv : 256;
    vblock *nb = calloc(nc, sizeof *nb), *old = k->v;
    if (!nb) return SL_ENOMEM;
    size_t oc = k->capv;
    k->v = nb;
    k->capv = nc;
    for (size_t i = 0; i < oc; i++)
      if (old[i].p) {
        size_t j = slot_of(k, old[i].p);
        while (k->v[j].p) j = (j + 1) & (nc - 1);
        k->v[j] = old[i];
      }
    free(old);
  }
  size_t j = slot_of(k, b.p);
  while (k->v[j].p) j = (j + 1) & (k->capv - 1);
  k->v[j] = b;
  k->nv++;
  return SL_OK;
}

/* Removes p's entry (backward-shift deletion); 0 when p is not in the table. */
static int table_take(sl_kctx *k, uintptr_t p, vblock *out) {
  if (!k->capv) return 0;
  size_t m = k->capv - 1, i = slot_of(k, p);
  while (k->v[i].p && k->v[i].p != p) i = (i + 1) & m;
  if (!k->v[i].p) return 0;
  *out = k->v[i];
  for (size_t j = (i + 1) & m; k->v[j].p; j = (j + 1) & m) {
    size_t h = slot_of(k, k->v[j].p);
    if (((j - h) & m) >= ((j - i) & m)) { /* j's home is at or before the hole */
      k->v[i] = k->v[j];
      i = j;
    }
  }
  k->v[i].p = 0;
  k->nv--;
  return 1;
}

static uintptr_t virtual_span(size_t len) {
  pthread_mutex_lock(&g_vmu);
  uintptr_t p = 0;
  if (len <= VEND - g_vnext) {
    p = g_vnext;
    g_vnext += len;
    g_vlive++;
  }
  pthread_mutex_unlock(&g_vmu);
  return p;
}

static void virtual_release(void) {
  pthread_mutex_lock(&g_vmu);
  if (--g_vlive == 0) g_vnext = VBASE;
  pthread_mutex_unlock(&g_vmu);
}

static void *c_alloc(sl_kctx *k, size_t bytes) {
  if (!k) {
    sl_fail(SL_EINTERNAL, "kernels/count: alloc without a context");
    return NULL;
  }
  /* every size checked before it is rounded or added up */
  if (bytes > (size_t)INT64_MAX - PAGE || (int64_t)bytes > INT64_MAX - k->st.live_bytes) {
    sl_fail(SL_EINPUT,
            "kernels/count: an allocation of %zu bytes with %lld bytes already live overflows the 2^63-byte count "
            "(the sizes asked for are beyond any machine)",
            bytes, (long long)k->st.live_bytes);
    return NULL;
  }
  size_t len = bytes ? (bytes + PAGE - 1) / PAGE * PAGE : PAGE;
  vblock b = {0, len, bytes, 0};
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) {
    b.p = (uintptr_t)p;
  } else if ((b.p = virtual_span(len))) {
    b.virt = 1;
  } else {
    sl_fail(SL_EINPUT,
            "kernels/count: an allocation of %zu bytes does not fit the %.1f EiB of addresses the counting backend "
            "hands out (%lld bytes already live): beyond any machine",
            bytes, (double)(VEND - VBASE) / 1152921504606846976.0, (long long)k->st.live_bytes);
    return NULL;
  }
  if (table_put(k, b)) {
    if (b.virt) virtual_release();
    else munmap(p, len);
    sl_fail(SL_ENOMEM, "kernels/count: out of memory for the block table");
    return NULL;
  }
  count_bytes(k, (int64_t)bytes);
  return (void *)b.p;
}

static void c_free(sl_kctx *k, void *ptr) {
  vblock b;
  if (!ptr || !k || !table_take(k, (uintptr_t)ptr, &b)) return;
  count_bytes(k, -(int64_t)b.bytes);
  if (b.virt) virtual_release();
  else munmap(ptr, b.len);
}
static void c_zero(sl_kctx *k, void *p, size_t bytes) {
  (void)p;
  (void)bytes;
  add(k, 0, 0);
}
static void c_copy(sl_kctx *k, void *dst, const void *src, size_t bytes) {
  (void)dst;
  (void)src;
  (void)bytes;
  add(k, 0, 0);
}
static void c_upload(sl_kctx *k, void *dst, const void *src, size_t bytes) { c_copy(k, dst, src, bytes); }
static void c_download(sl_kctx *k, void *dst, const void *src, size_t bytes) { c_copy(k, dst, src, bytes); }
static double c_sum(sl_kctx *k, const float *x, int64_t n) {
  (void)x;
  add(k, D(n), 0);
  return 0.0;
}
static int c_sync(sl_kctx *k) {
  (void)k;
  return SL_OK;
}
/* The scalar slots: the FLOPs of the sum / sumsq they replace; every slot
 * reads 0, like sum and sumsq. */
static int c_scalars_reserve(sl_kctx *k, int n) {
  (void)k;
  return n < 0 ? sl_fail(SL_EINPUT, "kernels/count: scalars_reserve: %d slots; expected >= 0", n) : SL_OK;
}
static void c_scalar_acc(sl_kctx *k, int slot, const float *x, int64_t n, int square) {
  (void)slot;
  (void)x;
  add(k, (square ? 2 : 1) * D(n), 0);
}
static void c_scalar_add(sl_kctx *k, int slot, double v) {
  (void)k;
  (void)slot;
  (void)v;
}
static int c_scalars_fetch(sl_kctx *k, double *host, int n) {
  (void)k;
  for (int i = 0; i < n; i++) host[i] = 0.0;
  return SL_OK;
}
static void c_dev_stats(sl_kctx *k, sl_dev_stats *out) {
  (void)k;
  memset(out, 0, sizeof *out);
}
static int c_is_device(void) { return 0; } /* host-side comms: the counting communicator */
static void *c_stream(sl_kctx *k) {
  (void)k;
  return NULL;
}

static const sl_ops g_count_ops = {
    .name = "count",
    .ctx_create = c_ctx_create,
    .ctx_destroy = c_ctx_destroy,
    .ctx_scratch_bytes = c_scratch,
    .embedding_fwd = c_embedding_fwd,
    .embedding_bwd = c_embedding_bwd,
    .rmsnorm_fwd = c_rmsnorm_fwd,
    .rmsnorm_bwd = c_rmsnorm_bwd,
    .rmsnorm_rowsum = c_rmsnorm_rowsum,
    .rmsnorm_fwd_sum = c_rmsnorm_fwd_sum,
    .rmsnorm_bwd_sum = c_rmsnorm_bwd_sum,
    .linear_fwd = c_linear_fwd,
    .linear_bwd = c_linear_bwd,
    .rope_fwd = c_rope_fwd,
    .rope_bwd = c_rope_fwd, /* the same work transposed */
    .attention_fwd = c_attention_fwd,
    .attention_bwd = c_attention_bwd,
    .swiglu_fwd = c_swiglu_fwd,
    .swiglu_bwd = c_swiglu_bwd,
    .moe_route_fwd = c_moe_route_fwd,
    .moe_route_bwd = c_moe_route_bwd,
    .moe_permute_fwd = c_moe_permute_fwd,
    .moe_permute_bwd = c_moe_permute_bwd,
    .moe_combine_fwd = c_moe_combine_fwd,
    .moe_combine_bwd = c_moe_combine_bwd,
    .geglu_fwd = c_geglu_fwd,
    .geglu_bwd = c_geglu_bwd,
    .add_inplace = c_add_inplace,
    .scale_add = c_scale_add,
    .softcap = c_softcap,
    .lmhead_ce_fwd = c_lmhead_ce_fwd,
    .lmhead_ce_bwd = c_lmhead_ce_bwd,
    .vocab_embedding_fwd = c_vocab_embedding_fwd,
    .vocab_embedding_bwd = c_vocab_embedding_bwd,
    .lmhead_vp_fwd = c_lmhead_vp_fwd,
    .lmhead_vp_rescale = c_lmhead_vp_rescale,
    .lmhead_vp_loss = c_lmhead_vp_loss,
    .lmhead_vp_bwd = c_lmhead_vp_bwd,
    .ctx_set_compute = c_ctx_set_compute,
    .adamw = c_adamw,
    .sumsq = c_sumsq,
    .f32_to_bf16 = c_f32_to_bf16,
    .bf16_to_f32 = c_bf16_to_f32,
    .round_bf16 = c_round_bf16,
    .conv1d_fwd = c_conv1d_fwd,
    .conv1d_bwd = c_conv1d_bwd,
    .silu_fwd = c_silu_fwd,
    .silu_bwd = c_silu_bwd,
    .relu2_fwd = c_relu2_fwd,
    .relu2_bwd = c_relu2_bwd,
    .gate_fwd = c_gate_fwd,
    .gate_bwd = c_gate_bwd,
    .scan_fwd = c_scan_fwd,
    .scan_bwd = c_scan_bwd,
    .ssd_fwd = c_ssd_fwd,
    .ssd_bwd = c_ssd_bwd,
    .alloc = c_alloc,
    .free = c_free,
    .zero = c_zero,
    .copy = c_copy,
    .upload = c_upload,
    .download = c_download,
    .sum = c_sum,
    .sync = c_sync,
    .is_device = c_is_device,
    .stream = c_stream,
    .mem_info = NULL, /* address space, not a device: nothing to report */
    .scalars_reserve = c_scalars_reserve,
    .scalar_acc = c_scalar_acc,
    .scalar_add = c_scalar_add,
    .scalars_fetch = c_scalars_fetch,
    .dev_stats = c_dev_stats,
};

const sl_ops *sl_ops_count(void) { return &g_count_ops; }

void sl_count_get(const sl_kctx *k, sl_count_stats *out) {
  if (k) *out = k->st;
  else memset(out, 0, sizeof *out);
}

void sl_count_reset(sl_kctx *k) {
  if (!k) return;
  int64_t live = k->st.live_bytes;
  memset(&k->st, 0, sizeof k->st);
  k->st.live_bytes = k->st.peak_bytes = live;
}
