/* kernels/bf16.c — the bf16-compute wrappers shared by the backends
 * (kernels/bf16.h, docs/bf16.md "Rounding points"): each runs the backend's
 * fp32 op (or, for the GEMMs under bf16 compute, the backend's bf16-operand
 * GEMM) and rounds in place what a bf16 engine stores in bf16. */
#include "kernels/bf16.h"

#include "base/base.h"

/* The context's layer state; NULL (message set) without a context. */
static const sl_bf16_state *st(sl_kctx *ctx, const char *op) {
  if (!ctx) sl_fail(SL_EINPUT, "kernels: %s called without a context", op);
  return (const sl_bf16_state *)(void *)ctx;
}
#define F(s) ((s)->impl->fp32)
/* x (rows, cols) of row stride ld rounded when the context computes in bf16 */
static void rnd_rows(sl_kctx *ctx, const sl_bf16_state *s, float *x, int64_t rows, int64_t cols, int64_t ld) {
  if (s->on && x) s->impl->round_rows(ctx, x, rows, cols, ld);
}
static void rnd(sl_kctx *ctx, const sl_bf16_state *s, float *x, int64_t n) { rnd_rows(ctx, s, x, 1, n, n); }
#define QKV_N(B, T, nh, nkv, hd) ((B) * (T) * ((nh) + 2 * (nkv)) * (hd))

static int set_compute(sl_kctx *ctx, int compute) {
  int dt = compute & ~SL_COMPUTE_TF32;
  if (!ctx || (dt != SL_COMPUTE_FP32 && dt != SL_COMPUTE_BF16))
    return sl_fail(SL_EINPUT,
                   "kernels: compute dtype must be SL_COMPUTE_FP32 (0) or SL_COMPUTE_BF16 (1), optionally | "
                   "SL_COMPUTE_TF32, found %d%s",
                   compute, ctx ? "" : " (and no context)");
  sl_bf16_state *s = (sl_bf16_state *)(void *)ctx;
  if ((compute & SL_COMPUTE_TF32) && !s->impl->tf32)
    return sl_fail(SL_EINPUT, "kernels: TF32 GEMMs need a backend with tensor cores (this one computes fp32 exactly)");
  s->on = dt == SL_COMPUTE_BF16;
  s->tf32 = (compute & SL_COMPUTE_TF32) != 0;
  return SL_OK;
}

static void rmsnorm_fwd(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                        int64_t ld, float eps) {
  const sl_bf16_state *s = st(ctx, "rmsnorm_fwd");
  if (!s) return;
  F(s)->rmsnorm_fwd(ctx, out, rstd, inp, w, N, C, ld, eps);
  rnd_rows(ctx, s, out, N, C, ld); /* rstd stays fp32 */
}

static void rmsnorm_fwd_sum(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, const float *sums,
                            int64_t N, int64_t C, int64_t ld, int64_t Cw, float eps) {
  const sl_bf16_state *s = st(ctx, "rmsnorm_fwd_sum");
  if (!s) return;
  F(s)->rmsnorm_fwd_sum(ctx, out, rstd, inp, w, sums, N, C, ld, Cw, eps);
  rnd_rows(ctx, s, out, N, C, ld); /* as rmsnorm_fwd */
}

static void linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                       int64_t IC, int64_t OC) {
  const sl_bf16_state *s = st(ctx, "linear_fwd");
  if (!s) return;
  if (!s->on) {
    F(s)->linear_fwd(ctx, out, inp, w, b, N, IC, OC);
    return;
  }
  s->impl->linear_fwd(ctx, out, inp, w, b, N, IC, OC);
  rnd(ctx, s, out, N * OC);
}
static void linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int64_t N, int64_t IC, int64_t OC) {
  const sl_bf16_state *s = st(ctx, "linear_bwd");
  if (!s) return;
  if (!s->on) {
    F(s)->linear_bwd(ctx, dinp, dw, db, dout, inp, w, N, IC, OC);
    return;
  }
  s->impl->linear_bwd(ctx, dinp, dw, db, dout, inp, w, N, IC, OC);
  rnd(ctx, s, dinp, N * IC); /* dw, db: fp32 weight gradients */
}

static void rope_fwd(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     const float *inv_freq, const int32_t *seg) {
  const sl_bf16_state *s = st(ctx, "rope_fwd");
  if (!s) return;
  F(s)->rope_fwd(ctx, qkv, B, T, nh, nkv, hd, inv_freq, seg);
  rnd(ctx, s, qkv, QKV_N(B, T, nh, nkv, hd));
}
static void rope_bwd(sl_kctx *ctx, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     const float *inv_freq, const int32_t *seg) {
  const sl_bf16_state *s = st(ctx, "rope_bwd");
  if (!s) return;
  F(s)->rope_bwd(ctx, dqkv, B, T, nh, nkv, hd, inv_freq, seg);
  rnd(ctx, s, dqkv, QKV_N(B, T, nh, nkv, hd));
}

static void attention_fwd(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                          int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap) {
  const sl_bf16_state *s = st(ctx, "attention_fwd");
  if (!s) return;
  if (s->on && s->impl->attention_fwd)
    s->impl->attention_fwd(ctx, out, lse, qkv, B, T, nh, nkv, hd, window, scale, seg, softcap);
  else F(s)->attention_fwd(ctx, out, lse, qkv, B, T, nh, nkv, hd, window, scale, seg, softcap);
  rnd(ctx, s, out, B * T * nh * hd); /* lse stays fp32 */
}
static void attention_bwd(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window,
                          float scale, const int32_t *seg, float softcap) {
  const sl_bf16_state *s = st(ctx, "attention_bwd");
  if (!s) return;
  if (s->on && s->impl->attention_bwd)
    s->impl->attention_bwd(ctx, dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window, scale, seg, softcap);
  else F(s)->attention_bwd(ctx, dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window, scale, seg, softcap);
  rnd(ctx, s, dqkv, QKV_N(B, T, nh, nkv, hd));
}

static void swiglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  const sl_bf16_state *s = st(ctx, "swiglu_fwd");
  if (!s) return;
  F(s)->swiglu_fwd(ctx, out, gu, N, H);
  rnd(ctx, s, out, N * H);
}
static void swiglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  const sl_bf16_state *s = st(ctx, "swiglu_bwd");
  if (!s) return;
  F(s)->swiglu_bwd(ctx, dgu, dout, gu, N, H);
  rnd(ctx, s, dgu, N * 2 * H);
}

static void geglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  const sl_bf16_state *s = st(ctx, "geglu_fwd");
  if (!s) return;
  F(s)->geglu_fwd(ctx, out, gu, N, H);
  rnd(ctx, s, out, N * H);
}
static void geglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  const sl_bf16_state *s = st(ctx, "geglu_bwd");
  if (!s) return;
  F(s)->geglu_bwd(ctx, dgu, dout, gu, N, H);
  rnd(ctx, s, dgu, N * 2 * H);
}

static void lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                          const int32_t *targets, int64_t N, int64_t C, int64_t V, float softcap) {
  const sl_bf16_state *s = st(ctx, "lmhead_ce_fwd");
  if (!s) return;
  if (s->on) s->impl->lmhead_ce_fwd(ctx, losses, lse, x, w, targets, N, C, V, softcap); /* rounds the logits */
  else F(s)->lmhead_ce_fwd(ctx, losses, lse, x, w, targets, N, C, V, softcap);
}
static void lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                          const float *lse, float scale, int64_t N, int64_t C, int64_t V, float softcap) {
  const sl_bf16_state *s = st(ctx, "lmhead_ce_bwd");
  if (!s) return;
  if (!s->on) {
    F(s)->lmhead_ce_bwd(ctx, dx, dw, x, w, targets, lse, scale, N, C, V, softcap);
    return;
  }
  s->impl->lmhead_ce_bwd(ctx, dx, dw, x, w, targets, lse, scale, N, C, V, softcap); /* rounds logits, dlogits */
  rnd(ctx, s, dx, N * C);                                                           /* dw: fp32 */
}

/* ---- Mamba ---------------------------------------------------------------- */
static void conv1d_fwd(sl_kctx *ctx, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                       int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg) {
  const sl_bf16_state *s = st(ctx, "conv1d_fwd");
  if (!s) return;
  F(s)->conv1d_fwd(ctx, out, x, ldx, w, bias, B, T, D, K, seg);
  rnd(ctx, s, out, B * T * D);
}
static void conv1d_bwd(sl_kctx *ctx, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout, const float *x,
                       int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg) {
  const sl_bf16_state *s = st(ctx, "conv1d_bwd");
  if (!s) return;
  F(s)->conv1d_bwd(ctx, dx, ldx, dw, dbias, dout, x, ldx_in, w, B, T, D, K, seg);
  rnd_rows(ctx, s, dx, B * T, D, ldx); /* dw, dbias: fp32 */
}
/* The two wrappers of an element-wise activation NAME (silu, relu2): out
 * and dx (n) rounded. */
#define ACT_WRAPPERS(NAME)                                                                                             \
  static void NAME##_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n) {                                        \
    const sl_bf16_state *s = st(ctx, #NAME "_fwd");                                                                    \
    if (!s) return;                                                                                                    \
    F(s)->NAME##_fwd(ctx, out, x, n);                                                                                  \
    rnd(ctx, s, out, n);                                                                                               \
  }                                                                                                                    \
  static void NAME##_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n) {                      \
    const sl_bf16_state *s = st(ctx, #NAME "_bwd");                                                                    \
    if (!s) return;                                                                                                    \
    F(s)->NAME##_bwd(ctx, dx, dout, x, n);                                                                             \
    rnd(ctx, s, dx, n);                                                                                                \
  }
ACT_WRAPPERS(silu)
ACT_WRAPPERS(relu2)
static void gate_fwd(sl_kctx *ctx, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D) {
  const sl_bf16_state *s = st(ctx, "gate_fwd");
  if (!s) return;
  F(s)->gate_fwd(ctx, out, y, z, ldz, N, D);
  rnd(ctx, s, out, N * D);
}
static void gate_bwd(sl_kctx *ctx, float *dy, float *dz, int64_t ldz, const float *dout, const float *y, const float *z,
                     int64_t N, int64_t D) {
  const sl_bf16_state *s = st(ctx, "gate_bwd");
  if (!s) return;
  F(s)->gate_bwd(ctx, dy, dz, ldz, dout, y, z, N, D);
  rnd(ctx, s, dy, N * D);
  rnd_rows(ctx, s, dz, N, D, ldz);
}
static void scan_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                     const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, int64_t B,
                     int64_t T, int64_t D, int64_t S, int64_t chunk) {
  const sl_bf16_state *s = st(ctx, "scan_fwd");
  if (!s) return;
  F(s)->scan_fwd(ctx, y, ckpt, u, dt, A_log, Bm, Cm, ldbc, Dp, seg, B, T, D, S, chunk);
  rnd(ctx, s, y, B * T * D); /* ckpt: fp32 state */
}
static void scan_bwd(sl_kctx *ctx, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                     const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                     const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, const float *ckpt, int64_t B,
                     int64_t T, int64_t D, int64_t S, int64_t chunk) {
  const sl_bf16_state *s = st(ctx, "scan_bwd");
  if (!s) return;
  F(s)->scan_bwd(ctx, du, ddt, dA_log, dBm, dCm, dDp, dy, u, dt, A_log, Bm, Cm, ldbc, Dp, seg, ckpt, B, T, D, S, chunk);
  rnd(ctx, s, du, B * T * D); /* dA_log, dDp: fp32 weight gradients */
  rnd(ctx, s, ddt, B * T * D);
  rnd_rows(ctx, s, dBm, B * T, S, ldbc);
  rnd_rows(ctx, s, dCm, B * T, S, ldbc);
}

static void ssd_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                    const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                    const float *Dp, const int32_t *seg, float dt_min, float dt_max, int64_t B, int64_t T, int64_t H,
                    int64_t P, int64_t G, int64_t S, int64_t chunk) {
  const sl_bf16_state *s = st(ctx, "ssd_fwd");
  if (!s) return;
  F(s)->ssd_fwd(ctx, y, ckpt, x, ldx, dt, lddt, dt_bias, A_log, Bm, Cm, ldbc, Dp, seg, dt_min, dt_max, B, T, H, P, G, S,
                chunk);
  rnd(ctx, s, y, B * T * H * P); /* ckpt: fp32 state */
}
static void ssd_bwd(sl_kctx *ctx, float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
                    float *dDp, const float *dy, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                    const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                    const float *Dp, const int32_t *seg, const float *ckpt, float dt_min, float dt_max, int64_t B,
                    int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, int64_t chunk) {
  const sl_bf16_state *s = st(ctx, "ssd_bwd");
  if (!s) return;
  F(s)->ssd_bwd(ctx, dx, ddt, ddt_bias, dA_log, dBm, dCm, dDp, dy, x, ldx, dt, lddt, dt_bias, A_log, Bm, Cm, ldbc, Dp,
                seg, ckpt, dt_min, dt_max, B, T, H, P, G, S, chunk);
  rnd_rows(ctx, s, dx, B * T, H * P, ldx); /* ddt_bias, dA_log, dDp: fp32 weight gradients */
  rnd_rows(ctx, s, ddt, B * T, H, lddt);
  rnd_rows(ctx, s, dBm, B * T, G * S, ldbc);
  rnd_rows(ctx, s, dCm, B * T, G * S, ldbc);
}

sl_ops sl_bf16_ops(const sl_ops *fp32) {
  sl_ops o = *fp32;
  o.ctx_set_compute = set_compute;
  o.rmsnorm_fwd = rmsnorm_fwd;
  o.rmsnorm_fwd_sum = rmsnorm_fwd_sum;
  o.linear_fwd = linear_fwd;
  o.linear_bwd = linear_bwd;
  o.rope_fwd = rope_fwd;
  o.rope_bwd = rope_bwd;
  o.attention_fwd = attention_fwd;
  o.attention_bwd = attention_bwd;
  o.swiglu_fwd = swiglu_fwd;
  o.swiglu_bwd = swiglu_bwd;
  o.geglu_fwd = geglu_fwd;
  o.geglu_bwd = geglu_bwd;
  o.lmhead_ce_fwd = lmhead_ce_fwd;
  o.lmhead_ce_bwd = lmhead_ce_bwd;
  o.conv1d_fwd = conv1d_fwd;
  o.conv1d_bwd = conv1d_bwd;
  o.silu_fwd = silu_fwd;
  o.silu_bwd = silu_bwd;
  o.relu2_fwd = relu2_fwd;
  o.relu2_bwd = relu2_bwd;
  o.gate_fwd = gate_fwd;
  o.gate_bwd = gate_bwd;
  o.scan_fwd = scan_fwd;
  o.scan_bwd = scan_bwd;
  o.ssd_fwd = ssd_fwd;
  o.ssd_bwd = ssd_bwd;
  return o;
}
