/* kernels/cpu/mamba.c — CPU kernels of the Mamba (v1) block: causal depthwise
 * conv1d, SiLU, the SiLU(z) gate and the selective scan with chunked state
 * checkpoints (forward stores the state at the start of every chunk; backward
 * recomputes one chunk of states at a time from its checkpoint). Also the
 * squared ReLU (relu2) of Nemotron-H's MLP, an element-wise activation kept
 * beside SiLU.
 *
 * Parallelism: conv over (b, t) rows for outputs and over channel blocks for
 * dw / dbias; scan over (b, d) in forward and over d (per sample) in backward,
 * with per-thread dBm / dCm accumulators reduced in thread order. Every sum
 * has a fixed order for a given thread count, so results are bitwise
 * reproducible run to run, and backward gives bitwise identical gradients
 * for every chunk size (the recompute calls the very same step function as
 * the forward).
 *
 * Math and layout: docs/mamba.md. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mamba_math.h"

/* ---- conv1d ------------------------------------------------------------------ */

void sl_cpu_conv1d_fwd(sl_kctx *ctx, float *out, const float *x, int64_t ldx, const float *w, const float *bias,
                       int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      float *o = out + (b * T + t) * D;
      const int64_t lo = seg ? seg[b * T + t] : 0; /* t's document starts here: earlier inputs count as 0 */
      for (int64_t d = 0; d < D; d++) o[d] = bias ? bias[d] : 0.0f;
      for (int64_t k = 0; k < K; k++) {
        int64_t tt = t - (K - 1) + k;
        if (tt < lo) continue;
        const float *xr = x + (b * T + tt) * ldx;
        for (int64_t d = 0; d < D; d++) o[d] += w[d * K + k] * xr[d];
      }
    }
}

#define SL_CONV_CB 32 /* channels per dw / dbias block */

/* dbias, dw (NULL: skipped) += the block's double sums, rounded; the sums = 0 */
static void conv_flush_(float *dw, float *dbias, double *accw, double *accb, int64_t d0, int64_t d1, int64_t K) {
  for (int64_t d = d0; d < d1; d++) {
    if (dbias) dbias[d] += (float)accb[d - d0];
    if (dw)
      for (int64_t k = 0; k < K; k++) dw[d * K + k] += (float)accw[(d - d0) * K + k];
    accb[d - d0] = 0.0;
    for (int64_t k = 0; k < K; k++) accw[(d - d0) * K + k] = 0.0;
  }
}

void sl_cpu_conv1d_bwd(sl_kctx *ctx, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout, const float *x,
                       int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg) {
  /* dx[b,t',d] += sum_k w[d,k] * dout[b, t'+(K-1)-k, d] (t'+(K-1)-k < T, and
   * in t''s document: seg[to] <= t') */
  if (dx) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) {
        float *dr = dx + (b * T + t) * ldx;
        for (int64_t k = 0; k < K; k++) {
          int64_t to = t + (K - 1) - k;
          if (to >= T || (seg && seg[b * T + to] > t)) continue;
          const float *gr = dout + (b * T + to) * D;
          for (int64_t d = 0; d < D; d++) dr[d] += w[d * K + k] * gr[d];
        }
      }
  }
  if (!dw && !dbias) return;
  /* dw[d,k] += sum_{b,t} dout[b,t,d] * x[b,t-(K-1)+k,d] ; dbias[d] += sum dout.
   * One thread owns a block of channels; sums in double, fixed order. With
   * seg, the sums of each document (of the output t) are added on their own,
   * in document order: the bits of the documents run one by one. */
  int64_t nblk = (D + SL_CONV_CB - 1) / SL_CONV_CB;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t d0 = blk * SL_CONV_CB, d1 = d0 + SL_CONV_CB < D ? d0 + SL_CONV_CB : D;
    double accb[SL_CONV_CB];
    double accw[SL_CONV_CB * (K > 0 ? K : 1)]; /* VLA: K is the conv width */
    memset(accb, 0, sizeof accb);
    memset(accw, 0, sizeof accw);
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) {
        const int64_t lo = seg ? seg[b * T + t] : 0;
        if (seg && lo == t && (b > 0 || t > 0)) conv_flush_(dw, dbias, accw, accb, d0, d1, K); /* a new document */
        const float *gr = dout + (b * T + t) * D;
        for (int64_t d = d0; d < d1; d++) accb[d - d0] += gr[d];
        for (int64_t k = 0; k < K; k++) {
          int64_t tt = t - (K - 1) + k;
          if (tt < lo) continue;
          const float *xr = x + (b * T + tt) * ldx_in;
          for (int64_t d = d0; d < d1; d++) accw[(d - d0) * K + k] += (double)gr[d] * (double)xr[d];
        }
      }
    conv_flush_(dw, dbias, accw, accb, d0, d1, K);
  }
}

/* ---- SiLU and gate --------------------------------------------------------- */

void sl_cpu_silu_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = x[i] * sigmoidf_(x[i]);
}

void sl_cpu_silu_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float s = sigmoidf_(x[i]);
    dx[i] += dout[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

void sl_cpu_gate_fwd(sl_kctx *ctx, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    for (int64_t d = 0; d < D; d++) {
      float zv = z[i * ldz + d];
      out[i * D + d] = y[i * D + d] * zv * sigmoidf_(zv);
    }
}

void sl_cpu_gate_bwd(sl_kctx *ctx, float *dy, float *dz, int64_t ldz, const float *dout, const float *y, const float *z,
                     int64_t N, int64_t D) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; i++)
    for (int64_t d = 0; d < D; d++) {
      float zv = z[i * ldz + d], s = sigmoidf_(zv), g = dout[i * D + d];
      if (dy) dy[i * D + d] += g * zv * s;
      if (dz) dz[i * ldz + d] += g * y[i * D + d] * s * (1.0f + zv * (1.0f - s));
    }
}

/* ---- squared ReLU (Nemotron-H's MLP) ----------------------------------------- */

/* relu(x) = x < 0 ? 0 : x: NaN stays NaN (as torch.relu), -0 stays -0 (its
 * square is +0). The backward's one fmaf is the CUDA twin's: the same bits. */
static inline float reluf_(float x) { return x < 0.0f ? 0.0f : x; }

void sl_cpu_relu2_fwd(sl_kctx *ctx, float *out, const float *x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float r = reluf_(x[i]);
    out[i] = r * r;
  }
}

void sl_cpu_relu2_bwd(sl_kctx *ctx, float *dx, const float *dout, const float *x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) dx[i] = fmaf(dout[i], 2.0f * reluf_(x[i]), dx[i]);
}

/* ---- selective scan ---------------------------------------------------------- */

/* Channels per work item. A thread walks time for a block of SL_SCAN_DB
 * channels at once so that each (b, t) row of u / dt / y is touched as one
 * contiguous run instead of one cache line per channel; the arithmetic per
 * (b, d) is exactly the per-channel recursion. */
#define SL_SCAN_DB 16

/* One time step of one channel: hout[s] = exp(delta*A[s]) * hin[s] + Bt[s]*du
 * with du = delta*u. hout and hin never overlap. Not inlined on purpose: the
 * forward and the backward recompute must run the identical instruction
 * sequence so that recomputed states equal the forward's bit for bit. */
__attribute__((noinline)) static void scan_step_(float *hout, const float *hin, const float *A, float delta,
                                                 const float *Bt, float du, int64_t S) {
#pragma omp simd
  for (int64_t s = 0; s < S; s++) hout[s] = exp_vf_(delta * A[s]) * hin[s] + Bt[s] * du;
}

static inline int64_t nchunks_(int64_t T, int64_t chunk) { return T > 0 ? (T + chunk - 1) / chunk : 0; }
/* a document starts at t > 0 (the state is reset to 0 before step t; at
 * t = 0 it is 0 already) */
static inline int reset_(const int32_t *seg, int64_t b, int64_t T, int64_t t) {
  return seg && t > 0 && seg[b * T + t] == t;
}

void sl_cpu_scan_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                     const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, int64_t B,
                     int64_t T, int64_t D, int64_t S, int64_t chunk) {
  if (chunk < 1) chunk = 1;
  if (B <= 0 || T <= 0 || D <= 0 || S <= 0) return;
  const int64_t NC = nchunks_(T, chunk);
  const int64_t nblk = (D + SL_SCAN_DB - 1) / SL_SCAN_DB;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; b++)
    for (int64_t blk = 0; blk < nblk; blk++) {
      const int64_t d0 = blk * SL_SCAN_DB;
      const int64_t nd = D - d0 < SL_SCAN_DB ? D - d0 : SL_SCAN_DB;
      /* VLAs of SL_SCAN_DB * S floats: S is the (small) state size */
      float A[SL_SCAN_DB * S], h0[SL_SCAN_DB * S], h1[SL_SCAN_DB * S], z[SL_SCAN_DB * S];
      float *h = h0, *hn = h1; /* (nd, S) states before / after step t */
      for (int64_t j = 0; j < nd * S; j++) {
        A[j] = -expf(A_log[d0 * S + j]);
        h[j] = 0.0f;
        z[j] = 0.0f; /* the state a document starts from */
      }
      for (int64_t c = 0; c < NC; c++) {
        for (int64_t j = 0; j < nd; j++)
          memcpy(ckpt + ((b * NC + c) * D + d0 + j) * S, h + j * S, (size_t)S * sizeof(float));
        const int64_t t1 = (c + 1) * chunk < T ? (c + 1) * chunk : T;
        for (int64_t t = c * chunk; t < t1; t++) {
          const float *Bt = Bm + (b * T + t) * ldbc, *Ct = Cm + (b * T + t) * ldbc;
          const float *hi = reset_(seg, b, T, t) ? z : h;
          for (int64_t j = 0; j < nd; j++) {
            const int64_t i = (b * T + t) * D + d0 + j;
            const float delta = softplusf_(dt[i]), ut = u[i];
            float *hj = hn + j * S;
            scan_step_(hj, hi + j * S, A + j * S, delta, Bt, delta * ut, S);
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t s = 0; s < S; s++) acc += Ct[s] * hj[s];
            y[i] = acc + Dp[d0 + j] * ut;
          }
          float *tmp = h;
          h = hn;
          hn = tmp;
        }
      }
    }
}

/* dDp, dA_log += the channel block's sums of one document (or sample); the
 * sums and the carried dL/dh g = 0 */
static void scan_flush_(float *dA_log, float *dDp, float *dAacc, float *dDacc, float *g, const float *A, int64_t d0,
                        int64_t nd, int64_t S) {
  for (int64_t j = 0; j < nd; j++) {
    dDp[d0 + j] += dDacc[j];
    dDacc[j] = 0.0f;
    for (int64_t s = 0; s < S; s++) {
      dA_log[(d0 + j) * S + s] += dAacc[j * S + s] * A[j * S + s];
      dAacc[j * S + s] = 0.0f;
      g[j * S + s] = 0.0f;
    }
  }
}

void sl_cpu_scan_bwd(sl_kctx *ctx, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp,
                     const float *dy, const float *u, const float *dt, const float *A_log, const float *Bm,
                     const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, const float *ckpt, int64_t B,
                     int64_t T, int64_t D, int64_t S, int64_t chunk) {
  if (chunk < 1) chunk = 1;
  if (B <= 0 || T <= 0 || D <= 0 || S <= 0) return;
  const int64_t NC = nchunks_(T, chunk);
  const int64_t Lc = chunk < T ? chunk : T;
  const int64_t nblk = (D + SL_SCAN_DB - 1) / SL_SCAN_DB;
  const int nth = omp_get_max_threads();
  /* per thread: one chunk of states (Lc, SL_SCAN_DB, S), dBm and dCm partials
   * of the current sample (T, S) each */
  const size_t hsz = (size_t)Lc * SL_SCAN_DB * (size_t)S;
  const size_t per = hsz + (size_t)(2 * T) * (size_t)S;
  float *scratch = malloc((size_t)nth * per * sizeof(float));
  if (!scratch) {
    /* The op table has no status return: make the failure impossible to miss
     * downstream (NaN grads) and say why. */
    fprintf(stderr,
            "sl_cpu_scan_bwd: out of memory allocating %zu bytes of scratch "
            "(threads=%d, T=%lld, S=%lld, chunk=%lld); gradients set to NaN\n",
            (size_t)nth * per * sizeof(float), nth, (long long)T, (long long)S, (long long)chunk);
    for (int64_t i = 0; i < B * T * D; i++) du[i] = NAN;
    return;
  }
#pragma omp parallel num_threads(nth)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    float *hb = scratch + (size_t)tid * per; /* (Lc, nd, S) states of one chunk */
    float *dBl = hb + hsz;                   /* (T, S) this thread's dBm[b] */
    float *dCl = dBl + T * S;                /* (T, S) this thread's dCm[b] */
    float A[SL_SCAN_DB * S], g[SL_SCAN_DB * S], dAacc[SL_SCAN_DB * S], dAt[S], z[SL_SCAN_DB * S];
    float dDacc[SL_SCAN_DB];
    for (int64_t j = 0; j < SL_SCAN_DB * S; j++) z[j] = 0.0f; /* the state a document starts from */
    for (int64_t b = 0; b < B; b++) {
      memset(dBl, 0, (size_t)(2 * T * S) * sizeof(float));
#pragma omp for schedule(static)
      for (int64_t blk = 0; blk < nblk; blk++) {
        const int64_t d0 = blk * SL_SCAN_DB;
        const int64_t nd = D - d0 < SL_SCAN_DB ? D - d0 : SL_SCAN_DB;
        for (int64_t j = 0; j < nd * S; j++) {
          A[j] = -expf(A_log[d0 * S + j]);
          g[j] = 0.0f; /* carried dL/dh */
          dAacc[j] = 0.0f;
        }
        for (int64_t j = 0; j < nd; j++) dDacc[j] = 0.0f;
        for (int64_t c = NC - 1; c >= 0; c--) {
          const int64_t t0 = c * chunk, t1 = t0 + chunk < T ? t0 + chunk : T;
          const float *hc = ckpt + ((b * NC + c) * D + d0) * S; /* (nd, S) h_{t0-1} */
          /* recompute the chunk's states, exactly as the forward did */
          for (int64_t t = t0; t < t1; t++) {
            const float *Bt = Bm + (b * T + t) * ldbc;
            float *ho = hb + (t - t0) * nd * S;
            const float *hi = reset_(seg, b, T, t) ? z : t == t0 ? hc : ho - nd * S;
            for (int64_t j = 0; j < nd; j++) {
              const int64_t i = (b * T + t) * D + d0 + j;
              const float delta = softplusf_(dt[i]);
              scan_step_(ho + j * S, hi + j * S, A + j * S, delta, Bt, delta * u[i], S);
            }
          }
          /* reverse-time adjoint recursion within the chunk */
          for (int64_t t = t1 - 1; t >= t0; t--) {
            const float *Bt = Bm + (b * T + t) * ldbc, *Ct = Cm + (b * T + t) * ldbc;
            const float *ht = hb + (t - t0) * nd * S;
            const int rs = reset_(seg, b, T, t);
            const float *hpt = rs ? z : t == t0 ? hc : ht - nd * S; /* the state step t decayed */
            float *dBt = dBl + t * S, *dCt = dCl + t * S;
            for (int64_t j = 0; j < nd; j++) {
              const int64_t i = (b * T + t) * D + d0 + j;
              const float delta = softplusf_(dt[i]), ut = u[i], gy = dy[i];
              const float *h = ht + j * S, *hp = hpt + j * S, *Aj = A + j * S;
              float *gj = g + j * S, *dAj = dAacc + j * S;
              const float du_ = delta * ut;
              float dut = gy * Dp[d0 + j], ddel = 0.0f;
              dDacc[j] += gy * ut;
#pragma omp simd
              for (int64_t s = 0; s < S; s++) dAt[s] = exp_vf_(delta * Aj[s]);
#pragma omp simd reduction(+ : dut, ddel)
              for (int64_t s = 0; s < S; s++) {
                float gs = gj[s] + Ct[s] * gy; /* dL/dh_t */
                dCt[s] += gy * h[s];
                dBt[s] += gs * du_;
                dut += gs * delta * Bt[s];
                float ahp = dAt[s] * hp[s];
                ddel += gs * (Aj[s] * ahp + Bt[s] * ut);
                dAj[s] += gs * delta * ahp;
                gj[s] = gs * dAt[s]; /* dL/dh_{t-1} through the decay */
              }
              du[i] += dut;
              ddt[i] += ddel * dsoftplusf_(dt[i]);
            }
            if (rs) /* a document starts: no gradient flows into the one before; its sums are added on their own */
              scan_flush_(dA_log, dDp, dAacc, dDacc, g, A, d0, nd, S);
          }
        }
        scan_flush_(dA_log, dDp, dAacc, dDacc, g, A, d0, nd, S);
      } /* implicit barrier: every thread's partials for sample b are final */
#pragma omp for schedule(static)
      for (int64_t idx = 0; idx < T * S; idx++) {
        float sb = 0.0f, sc = 0.0f;
        for (int j = 0; j < nt; j++) {
          const float *p = scratch + (size_t)j * per + hsz;
          sb += p[idx];
          sc += p[T * S + idx];
        }
        const int64_t t = idx / S, s = idx % S;
        dBm[(b * T + t) * ldbc + s] += sb;
        dCm[(b * T + t) * ldbc + s] += sc;
      } /* implicit barrier before the partials are cleared for b+1 */
    }
  }
  free(scratch);
}
