/* kernels/cpu/mamba2.c — CPU kernels of the Mamba-2 SSD recurrence
 * (ssd_fwd / ssd_bwd; contract in kernels/kernels.h, math in docs/mamba.md
 * "Mamba-2: the SSD scan"), written as a sequential scan with chunked state
 * checkpoints, the same scheme as Mamba v1's scan (kernels/cpu/mamba.c).
 *
 * Forward: one work item per (b, h), walking time; the state is (P, S).
 * Backward: chunks last to first, all (b, h) items of one chunk at a time:
 * each recomputes its chunk's states from ckpt (the forward's step
 * function, not inlined, so the states equal the forward's bit for bit),
 * then runs the reverse-time adjoint, carrying dL/ds across chunks in a
 * per-(b, h) buffer, and writes its dB / dC contributions of the chunk to
 * per-head partials; a second loop adds those into dBm / dCm summing the
 * heads of a group in head order. ddt_bias, dA_log, dDp: per-(b, h) totals
 * (time order), summed over b in order. Every sum has an order that
 * depends on the shapes only, so every output is the same bits for any
 * thread count, and for any chunk size. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mamba_math.h"

/* delta = clamp(softplus(v), lo, hi) (a NaN stays NaN) and its derivative
 * in v: 0 where the clamp bites, as torch.clamp's gradient (which passes at
 * lo <= softplus <= hi). */
static inline float ssd_delta_(float v, float lo, float hi) {
  const float d = softplusf_(v);
  return d < lo ? lo : d > hi ? hi : d;
}
static inline float ssd_ddelta_(float v, float lo, float hi) {
  const float d = softplusf_(v);
  return d >= lo && d <= hi ? dsoftplusf_(v) : 0.0f;
}
/* a document starts at t (the state is reset before step t) */
static inline int ssd_reset_(const int32_t *seg, int64_t b, int64_t T, int64_t t) {
  return t == 0 || (seg && seg[b * T + t] == t);
}

/* One time step of one head: hout[p,n] = decay * hin[p,n] + Bt[n] * delta * x[p]
 * (hin NULL: a reset, hout = Bt[n] * delta * x[p]). hout and hin never
 * overlap. Not inlined on purpose: forward and backward recompute run the
 * identical instruction sequence (kernels/cpu/mamba.c's scan_step_). */
__attribute__((noinline)) static void ssd_step_(float *hout, const float *hin, float decay, const float *Bt,
                                                const float *xt, float delta, int64_t P, int64_t S) {
  for (int64_t p = 0; p < P; p++) {
    const float dx = delta * xt[p];
    float *o = hout + p * S;
    if (hin) {
      const float *i = hin + p * S;
#pragma omp simd
      for (int64_t n = 0; n < S; n++) o[n] = decay * i[n] + Bt[n] * dx;
    } else {
#pragma omp simd
      for (int64_t n = 0; n < S; n++) o[n] = Bt[n] * dx;
    }
  }
}

static inline int64_t ssd_nchunks_(int64_t T, int64_t chunk) { return T > 0 ? (T + chunk - 1) / chunk : 0; }

void sl_cpu_ssd_fwd(sl_kctx *ctx, float *y, float *ckpt, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                    const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                    const float *Dp, const int32_t *seg, float dt_min, float dt_max, int64_t B, int64_t T, int64_t H,
                    int64_t P, int64_t G, int64_t S, int64_t chunk) {
  if (chunk < 1) chunk = 1;
  if (B <= 0 || T <= 0 || H <= 0 || P <= 0 || G <= 0 || S <= 0) return;
  const int64_t NC = ssd_nchunks_(T, chunk), PS = P * S, HG = H / G;
  const int nth = omp_get_max_threads();
  float *scratch = malloc((size_t)nth * 2 * (size_t)PS * sizeof(float));
  if (!scratch) {
    fprintf(stderr, "sl_cpu_ssd_fwd: out of memory (%d x %lld floats of state); y set to NaN\n", nth,
            (long long)(2 * PS));
    for (int64_t i = 0; i < B * T * H * P; i++) y[i] = NAN;
    return;
  }
#pragma omp parallel num_threads(nth)
  {
    float *h = scratch + (size_t)omp_get_thread_num() * 2 * (size_t)PS, *hn = h + PS;
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
      for (int64_t hh = 0; hh < H; hh++) {
        const float A = -expf(A_log[hh]), Dh = Dp[hh], bias = dt_bias[hh];
        const int64_t g = hh / HG;
        memset(h, 0, (size_t)PS * sizeof(float));
        for (int64_t t = 0; t < T; t++) {
          const int64_t r = b * T + t;
          if (t % chunk == 0) memcpy(ckpt + ((b * NC + t / chunk) * H + hh) * PS, h, (size_t)PS * sizeof(float));
          const float *xt = x + r * ldx + hh * P, *Bt = Bm + r * ldbc + g * S, *Ct = Cm + r * ldbc + g * S;
          const float delta = ssd_delta_(dt[r * lddt + hh] + bias, dt_min, dt_max);
          ssd_step_(hn, ssd_reset_(seg, b, T, t) ? NULL : h, exp_vf_(delta * A), Bt, xt, delta, P, S);
          float *yt = y + r * H * P + hh * P;
          for (int64_t p = 0; p < P; p++) {
            const float *s = hn + p * S;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t n = 0; n < S; n++) acc += Ct[n] * s[n];
            yt[p] = acc + Dh * xt[p];
          }
          float *tmp = h;
          h = hn;
          hn = tmp;
        }
      }
  }
  free(scratch);
}

void sl_cpu_ssd_bwd(sl_kctx *ctx, float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
                    float *dDp, const float *dy, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                    const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                    const float *Dp, const int32_t *seg, const float *ckpt, float dt_min, float dt_max, int64_t B,
                    int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, int64_t chunk) {
  if (chunk < 1) chunk = 1;
  if (B <= 0 || T <= 0 || H <= 0 || P <= 0 || G <= 0 || S <= 0) return;
  const int64_t NC = ssd_nchunks_(T, chunk), Lc = chunk < T ? chunk : T, PS = P * S, HG = H / G, BH = B * H;
  const int nth = omp_get_max_threads();
  /* per thread: one chunk of states (Lc, P, S); shared: the carried dL/ds
   * (B*H, P, S), the chunk's dB and dC per head (B, Lc, H, S) each, and the
   * per-(b, h) totals of ddt_bias, dA (before the chain rule through A_log)
   * and dDp */
  const size_t per = (size_t)Lc * (size_t)PS + (size_t)S; /* states, then a row of zeros */
  const size_t n_hb = (size_t)nth * per, n_g = (size_t)BH * (size_t)PS;
  const size_t n_bc = (size_t)B * (size_t)Lc * (size_t)H * (size_t)S, n_tot = 3 * (size_t)BH;
  float *scratch = malloc((n_hb + n_g + 2 * n_bc + n_tot) * sizeof(float));
  if (!scratch) {
    fprintf(stderr,
            "sl_cpu_ssd_bwd: out of memory allocating %zu bytes of scratch (threads=%d, chunk=%lld); dx set to "
            "NaN\n",
            (n_hb + n_g + 2 * n_bc + n_tot) * sizeof(float), nth, (long long)chunk);
    for (int64_t r = 0; r < B * T; r++)
      for (int64_t j = 0; j < H * P; j++) dx[r * ldx + j] = NAN;
    return;
  }
  float *gs_all = scratch + n_hb, *pB = gs_all + n_g, *pC = pB + n_bc, *tot = pC + n_bc;
  memset(gs_all, 0, (n_g + 2 * n_bc + n_tot) * sizeof(float));
#pragma omp parallel num_threads(nth)
  {
    float *hb = scratch + (size_t)omp_get_thread_num() * per, *zrow = hb + (size_t)Lc * (size_t)PS;
    memset(zrow, 0, (size_t)S * sizeof(float));
    for (int64_t c = NC - 1; c >= 0; c--) {
      const int64_t t0 = c * chunk, t1 = t0 + chunk < T ? t0 + chunk : T;
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < BH; bh++) {
        const int64_t b = bh / H, hh = bh % H, g = hh / HG;
        const float A = -expf(A_log[hh]), Dh = Dp[hh], bias = dt_bias[hh];
        const float *hc = ckpt + ((b * NC + c) * H + hh) * PS; /* the state before step t0 */
        float *gc = gs_all + (size_t)bh * (size_t)PS;          /* dL/ds carried from step t1 */
        float *tt = tot + 3 * bh;                              /* ddt_bias, dA, dDp of (b, h) */
        /* recompute the chunk's states, exactly as the forward did */
        for (int64_t t = t0; t < t1; t++) {
          const int64_t r = b * T + t;
          const float delta = ssd_delta_(dt[r * lddt + hh] + bias, dt_min, dt_max);
          const float *hi = t == t0 ? hc : hb + (t - t0 - 1) * PS;
          ssd_step_(hb + (t - t0) * PS, ssd_reset_(seg, b, T, t) ? NULL : hi, exp_vf_(delta * A), Bm + r * ldbc + g * S,
                    x + r * ldx + hh * P, delta, P, S);
        }
        /* reverse-time adjoint within the chunk */
        for (int64_t t = t1 - 1; t >= t0; t--) {
          const int64_t r = b * T + t;
          const int rs = ssd_reset_(seg, b, T, t);
          const float v = dt[r * lddt + hh] + bias, delta = ssd_delta_(v, dt_min, dt_max);
          const float decay = exp_vf_(delta * A);
          const float *xt = x + r * ldx + hh * P, *gy = dy + r * H * P + hh * P;
          const float *Bt = Bm + r * ldbc + g * S, *Ct = Cm + r * ldbc + g * S;
          const float *ht = hb + (t - t0) * PS;
          const float *hp = rs ? NULL : t == t0 ? hc : ht - PS; /* the state the step decayed (NULL: reset) */
          float *dBh = pB + ((b * Lc + (t - t0)) * H + hh) * S, *dCh = pC + ((b * Lc + (t - t0)) * H + hh) * S;
          float *dxt = dx + r * ldx + hh * P;
          float q = 0.0f, xsb = 0.0f, dD = 0.0f; /* sum gs*hp ; sum_p x * (sum_n gs*B) ; sum_p dy*x */
          for (int64_t p = 0; p < P; p++) {
            const float gyp = gy[p], xp = xt[p], dxp = delta * xp;
            const float *h = ht + p * S, *hq = hp ? hp + p * S : zrow;
            float *gp = gc + p * S;
            float sB = 0.0f, qp = 0.0f;
#pragma omp simd reduction(+ : sB, qp)
            for (int64_t n = 0; n < S; n++) {
              const float gsn = gp[n] + Ct[n] * gyp; /* dL/ds_t */
              dCh[n] += gyp * h[n];
              dBh[n] += gsn * dxp;
              sB += gsn * Bt[n];
              qp += gsn * hq[n];
              gp[n] = gsn * decay; /* dL/ds_{t-1} */
            }
            if (rs) memset(gp, 0, (size_t)S * sizeof(float)); /* cut at a document start: s_{t-1} was reset */
            dxt[p] += gyp * Dh + delta * sB;
            q += qp;
            xsb += xp * sB;
            dD += gyp * xp;
          }
          const float dq = decay * q; /* d(loss)/d(decay) = q; d decay / d(delta*A) = decay */
          const float ddel = A * dq + xsb, dv = ddel * ssd_ddelta_(v, dt_min, dt_max);
          ddt[r * lddt + hh] += dv;
          tt[0] += dv;
          tt[1] += delta * dq;
          tt[2] += dD;
        }
      } /* implicit barrier: the chunk's per-head partials are final */
      const int64_t len = t1 - t0;
#pragma omp for collapse(2) schedule(static)
      for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < len * G; j++) {
          const int64_t t = j / G, g = j % G, r = b * T + t0 + t;
          const float *sb = pB + (b * Lc + t) * H * S, *sc = pC + (b * Lc + t) * H * S;
          for (int64_t n = 0; n < S; n++) {
            float accb = 0.0f, accc = 0.0f;
            for (int64_t hh = g * HG; hh < (g + 1) * HG; hh++) { /* head order */
              accb += sb[hh * S + n];
              accc += sc[hh * S + n];
            }
            dBm[r * ldbc + g * S + n] += accb;
            dCm[r * ldbc + g * S + n] += accc;
          }
          memset(pB + (b * Lc + t) * H * S + g * HG * S, 0, (size_t)(HG * S) * sizeof(float));
          memset(pC + (b * Lc + t) * H * S + g * HG * S, 0, (size_t)(HG * S) * sizeof(float));
        } /* implicit barrier before the next chunk writes the partials */
    }
#pragma omp for schedule(static)
    for (int64_t hh = 0; hh < H; hh++) {
      float sdt = 0.0f, sA = 0.0f, sD = 0.0f;
      for (int64_t b = 0; b < B; b++) { /* sample order */
        sdt += tot[3 * (b * H + hh)];
        sA += tot[3 * (b * H + hh) + 1];
        sD += tot[3 * (b * H + hh) + 2];
      }
      ddt_bias[hh] += sdt;
      dA_log[hh] += sA * -expf(A_log[hh]); /* dA/dA_log = A */
      dDp[hh] += sD;
    }
  }
  free(scratch);
}
