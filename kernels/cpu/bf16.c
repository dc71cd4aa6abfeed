/* kernels/cpu/bf16.c — the CPU mirror of bf16 compute (ctx_set_compute,
 * docs/bf16.md): every op of the table whose results a bf16 engine stores in
 * bf16 goes through a wrapper here that runs the fp32 op and rounds (to
 * nearest even) what it stores; GEMM operands are rounded copies in the
 * context's stage buffers. With the default fp32 compute every wrapper calls
 * the fp32 op and nothing else (bit-identical). The LM head rounds its
 * logits / dlogits tiles inside lmhead_ce.c (ctx->bf16). Correct, not fast:
 * the copies and extra passes cost memory traffic the GPU does not pay. */
#include <omp.h>
#include <stdlib.h>

#include "base/base.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

static float rnd(float v) { return sl_bf16_to_f32_scalar(sl_f32_to_bf16_scalar(v)); }

int sl_cpu_ctx_set_compute(sl_kctx *ctx, int compute) {
  if (!ctx || (compute != SL_COMPUTE_FP32 && compute != SL_COMPUTE_BF16))
    return sl_fail(SL_EINPUT, "kernels/cpu: compute dtype must be SL_COMPUTE_FP32 (0) or SL_COMPUTE_BF16 (1), found %d",
                   compute);
  ctx->bf16 = compute == SL_COMPUTE_BF16;
  return SL_OK;
}

void sl_cpu_round_rows(sl_kctx *ctx, float *x, int64_t rows, int64_t cols, int64_t ld) {
  if (!x || rows <= 0 || cols <= 0) return;
  if (ld == cols) {
    sl_cpu_round_bf16(ctx, x, rows * cols);
    return;
  }
#pragma omp parallel for num_threads(rows *cols >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) x[r * ld + c] = rnd(x[r * ld + c]);
}

/* A bf16-rounded copy of x[0..n) in stage buffer `slot` (valid until the
 * slot is reused); NULL (message set) when it cannot be allocated. */
static const float *stage(sl_kctx *ctx, int slot, const float *x, int64_t n, const char *op) {
  if (n <= 0) return x;
  if ((size_t)n > ctx->stage_cap[slot]) {
    float *p = realloc(ctx->stage[slot], (size_t)n * sizeof(float));
    if (!p) {
      sl_fail(SL_ENOMEM, "kernels/cpu %s: cannot allocate a bf16 operand copy of %lld floats", op, (long long)n);
      sl_log(SL_LOG_ERROR, "%s", sl_errmsg());
      return NULL;
    }
    ctx->stage[slot] = p;
    ctx->stage_cap[slot] = (size_t)n;
  }
  float *s = ctx->stage[slot];
#pragma omp parallel for num_threads(n >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
  for (int64_t i = 0; i < n; i++) s[i] = rnd(x[i]);
  return s;
}

void sl_cpu_bf_rmsnorm_fwd(sl_kctx *ctx, float *out, float *rstd, const float *inp, const float *w, int64_t N,
                           int64_t C, int64_t ld, float eps) {
  sl_cpu_rmsnorm_fwd(ctx, out, rstd, inp, w, N, C, ld, eps);
  if (ctx->bf16) sl_cpu_round_rows(ctx, out, N, C, ld);
}

void sl_cpu_bf_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                          int64_t IC, int64_t OC) {
  if (!ctx->bf16) {
    sl_cpu_linear_fwd(ctx, out, inp, w, b, N, IC, OC);
    return;
  }
  const float *xi = stage(ctx, 0, inp, N * IC, "linear_fwd"), *wi = stage(ctx, 1, w, OC * IC, "linear_fwd");
  if (!xi || !wi) {
    sl_cpu_poison(out, N * OC);
    return;
  }
  sl_cpu_linear_fwd(ctx, out, xi, wi, b, N, IC, OC);
  sl_cpu_round_bf16(ctx, out, N * OC);
}

void sl_cpu_bf_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, int64_t N, int64_t IC, int64_t OC) {
  if (!ctx->bf16) {
    sl_cpu_linear_bwd(ctx, dinp, dw, db, dout, inp, w, N, IC, OC);
    return;
  }
  const float *go = stage(ctx, 0, dout, N * OC, "linear_bwd");
  const float *xi = dw ? stage(ctx, 1, inp, N * IC, "linear_bwd") : inp;
  const float *wi = dinp ? stage(ctx, 2, w, OC * IC, "linear_bwd") : w;
  if (!go || !xi || !wi) {
    sl_cpu_poison(dinp, N * IC);
    sl_cpu_poison(dw, OC * IC);
    sl_cpu_poison(db, OC);
    return;
  }
  sl_cpu_linear_bwd(ctx, dinp, dw, db, go, xi, wi, N, IC, OC);
  if (dinp) sl_cpu_round_bf16(ctx, dinp, N * IC); /* dw, db: fp32 weight gradients */
}

#define QKV_N(B, T, nh, nkv, hd) ((B) * (T) * ((nh) + 2 * (nkv)) * (hd))

void sl_cpu_bf_rope_fwd(sl_kctx *ctx, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                        const float *inv_freq, const int32_t *seg) {
  sl_cpu_rope_fwd(ctx, qkv, B, T, nh, nkv, hd, inv_freq, seg);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, qkv, QKV_N(B, T, nh, nkv, hd));
}
void sl_cpu_bf_rope_bwd(sl_kctx *ctx, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                        const float *inv_freq, const int32_t *seg) {
  sl_cpu_rope_bwd(ctx, dqkv, B, T, nh, nkv, hd, inv_freq, seg);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, dqkv, QKV_N(B, T, nh, nkv, hd));
}

void sl_cpu_bf_attention_fwd(sl_kctx *ctx, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                             int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg) {
  sl_cpu_attention_fwd(ctx, out, lse, qkv, B, T, nh, nkv, hd, window, scale, seg);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, out, B * T * nh * hd); /* lse stays fp32 */
}
void sl_cpu_bf_attention_bwd(sl_kctx *ctx, float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                             int64_t window, float scale, const int32_t *seg) {
  sl_cpu_attention_bwd(ctx, dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, window, scale, seg);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, dqkv, QKV_N(B, T, nh, nkv, hd));
}

void sl_cpu_bf_swiglu_fwd(sl_kctx *ctx, float *out, const float *gu, int64_t N, int64_t H) {
  sl_cpu_swiglu_fwd(ctx, out, gu, N, H);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, out, N * H);
}
void sl_cpu_bf_swiglu_bwd(sl_kctx *ctx, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H) {
  sl_cpu_swiglu_bwd(ctx, dgu, dout, gu, N, H);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, dgu, N * 2 * H);
}

void sl_cpu_bf_lmhead_ce_fwd(sl_kctx *ctx, float *losses, float *lse, const float *x, const float *w,
                             const int32_t *targets, int64_t N, int64_t C, int64_t V) {
  if (!ctx->bf16) {
    sl_cpu_lmhead_ce_fwd(ctx, losses, lse, x, w, targets, N, C, V);
    return;
  }
  const float *xi = stage(ctx, 0, x, N * C, "lmhead_ce_fwd"), *wi = stage(ctx, 1, w, V * C, "lmhead_ce_fwd");
  if (!xi || !wi) {
    sl_cpu_poison(losses, N);
    sl_cpu_poison(lse, N);
    return;
  }
  sl_cpu_lmhead_ce_fwd(ctx, losses, lse, xi, wi, targets, N, C, V); /* rounds the logits */
}
void sl_cpu_bf_lmhead_ce_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                             const float *lse, float scale, int64_t N, int64_t C, int64_t V) {
  if (!ctx->bf16) {
    sl_cpu_lmhead_ce_bwd(ctx, dx, dw, x, w, targets, lse, scale, N, C, V);
    return;
  }
  const float *xi = stage(ctx, 0, x, N * C, "lmhead_ce_bwd"), *wi = stage(ctx, 1, w, V * C, "lmhead_ce_bwd");
  if (!xi || !wi) {
    sl_cpu_poison(dx, N * C);
    sl_cpu_poison(dw, V * C);
    return;
  }
  sl_cpu_lmhead_ce_bwd(ctx, dx, dw, xi, wi, targets, lse, scale, N, C, V); /* rounds logits, dlogits */
  if (dx) sl_cpu_round_bf16(ctx, dx, N * C);
}

/* ---- Mamba ---------------------------------------------------------------- */
void sl_cpu_bf_conv1d_fwd(sl_kctx *ctx, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                          int64_t B, int64_t T, int64_t D, int64_t K) {
  sl_cpu_conv1d_fwd(ctx, out, x, ldx, w, bias, B, T, D, K);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, out, B * T * D);
}
void sl_cpu_bf_conv1d_bwd(sl_kctx *ctx, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout,
                          const float *x, int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K) {
  sl_cpu_conv1d_bwd(ctx, dx, ldx, dw, dbias, dout, x, ldx_in, w, B, T, D, K);
  if (ctx->bf16) sl_cpu_round_rows(ctx, dx, B * T, D, ldx);
}
void sl_cpu_bf_silu_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n) {
  sl_cpu_silu_fwd(ctx, out, x, n);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, out, n);
}
void sl_cpu_bf_silu_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n) {
  sl_cpu_silu_bwd(ctx, dx, dout, x, n);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, dx, n);
}
void sl_cpu_bf_gate_fwd(sl_kctx *ctx, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D) {
  sl_cpu_gate_fwd(ctx, out, y, z, ldz, N, D);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, out, N * D);
}
void sl_cpu_bf_gate_bwd(sl_kctx *ctx, float *dy, float *dz, int64_t ldz, const float *dout, const float *y,
                        const float *z, int64_t N, int64_t D) {
  sl_cpu_gate_bwd(ctx, dy, dz, ldz, dout, y, z, N, D);
  if (ctx->bf16) {
    sl_cpu_round_bf16(ctx, dy, N * D);
    sl_cpu_round_rows(ctx, dz, N, D, ldz);
  }
}
void sl_cpu_bf_scan_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                        const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, int64_t B, int64_t T,
                        int64_t D, int64_t S, int64_t chunk) {
  sl_cpu_scan_fwd(ctx, y, ckpt, u, dt, A_log, Bm, Cm, ldbc, Dp, B, T, D, S, chunk);
  if (ctx->bf16) sl_cpu_round_bf16(ctx, y, B * T * D); /* ckpt: fp32 state */
}
void sl_cpu_bf_scan_bwd(sl_kctx *ctx, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                        const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                        const float *Cm, int64_t ldbc, const float *Dp, const float *ckpt, int64_t B, int64_t T,
                        int64_t D, int64_t S, int64_t chunk) {
  sl_cpu_scan_bwd(ctx, du, ddt, dA_log, dBm, dCm, dDp, dy, u, dt, A_log, Bm, Cm, ldbc, Dp, ckpt, B, T, D, S, chunk);
  if (ctx->bf16) { /* dA_log, dDp: fp32 weight gradients */
    sl_cpu_round_bf16(ctx, du, B * T * D);
    sl_cpu_round_bf16(ctx, ddt, B * T * D);
    sl_cpu_round_rows(ctx, dBm, B * T, S, ldbc);
    sl_cpu_round_rows(ctx, dCm, B * T, S, ldbc);
  }
}
