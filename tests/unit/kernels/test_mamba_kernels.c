/* tests/unit/kernels/test_mamba_kernels.c — oracle tests of the CPU Mamba (v1) kernels
 * (kernels/cpu/mamba.c): forwards against naive double-precision references
 * written here (direct conv, sequential scan storing every state), every
 * backward against central finite differences of those references for every
 * input element, "adds into" semantics and untouched stride gaps, bitwise
 * identical gradients for every checkpoint chunk size, and run-to-run
 * determinism. The same for the Mamba-2 SSD scan (kernels/cpu/mamba2.c):
 * document resets, the dt clamp, strided x / dt / B|C, G = 1 and G > 1,
 * the same bits under 1, 2 and 3 threads, and negative controls (the
 * reference without the resets or the clamp must fail the tolerance).
 * Document resets of the conv and the scan (seg): the references restart at
 * every document start, a packed row gives the bits of its documents run
 * one by one (forward and every gradient), and the row without seg misses.
 * Nemotron-H's squared ReLU (relu2, beside SiLU in kernels/cpu/mamba.c):
 * forward and backward bit for bit against fp64 (x = +-0 and x < 0
 * included), finite differences, NaN, and two wrong derivatives as controls.
 * Prints one line per check and "N passed, M failed". */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"

static int g_pass, g_fail;

static void check(int ok, const char *what, double err, double tol) {
  printf("%s %-52s err=%.3e tol=%.1e\n", ok ? "PASS" : "FAIL", what, err, tol);
  if (ok) g_pass++;
  else g_fail++;
}

/* A negative control: a wrong variant must miss by more than `floor`
 * (printed without "err= tol=", so tests/lib/unit_margins.py, which reads
 * those as noise bounds, leaves it out). */
static void control(int ok, const char *what, double diff, double floor) {
  printf("%s %-52s diff=%.3e must exceed %.1e\n", ok ? "PASS" : "FAIL", what, diff, floor);
  if (ok) g_pass++;
  else g_fail++;
}

/* ---- helpers --------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* [0, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) / 9007199254740992.0;
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }
static float *fbuf(int64_t n, float lo, float hi) {
  float *p = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = frand(lo, hi);
  return p;
}
static float *fcopy(const float *x, int64_t n) {
  float *p = malloc((size_t)n * sizeof(float));
  memcpy(p, x, (size_t)n * sizeof(float));
  return p;
}
static double *dcopy(const float *x, int64_t n) {
  double *p = malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) p[i] = x[i];
  return p;
}

static double sig_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_d(double x) { return x * sig_d(x); }
static double softplus_d(double x) { return x > 20.0 ? x : log1p(exp(x)); }
static double relu_d(double x) { return x < 0.0 ? 0.0 : x; }
static double relu2_d(double x) { return relu_d(x) * relu_d(x); }

/* Compare a float tensor against a double reference: max |a-r| <= tol*max(1,max|r|). */
static void cmp_fwd(const char *what, const float *a, const double *r, int64_t n, double tol) {
  double e = 0, m = 1.0;
  for (int64_t i = 0; i < n; i++) {
    e = fmax(e, fabs((double)a[i] - r[i]));
    m = fmax(m, fabs(r[i]));
  }
  check(e <= tol * m && e == e, what, e / m, tol);
}

/* Finite-difference check of one (rows x cols, row stride ld) input.
 * grad_after - grad_before is the analytic gradient (backwards add into
 * their outputs); with check_gaps, entries outside the rows x cols window
 * (stride gaps) must be unchanged. loss() evaluates the double reference with param as
 * perturbed. */
typedef double (*loss_fn)(void *st);
static double fd_rel(loss_fn loss, void *st, double *param, int64_t rows, int64_t cols, int64_t ld,
                     const float *g_after, const float *g_before, int check_gaps, double *maxg_out, int *gaps_out) {
  const double h = 1e-5;
  double maxerr = 0, maxg = 0;
  int gaps_ok = 1;
  double *num = malloc((size_t)(rows * ld) * sizeof(double));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ld; c++) {
      int64_t i = r * ld + c;
      if (c >= cols) {
        if (check_gaps && g_after[i] != g_before[i]) gaps_ok = 0;
        continue;
      }
      double keep = param[i];
      param[i] = keep + h;
      double lp = loss(st);
      param[i] = keep - h;
      double lm = loss(st);
      param[i] = keep;
      num[i] = (lp - lm) / (2 * h);
      maxg = fmax(maxg, fabs(num[i]));
    }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      int64_t i = r * ld + c;
      double an = (double)g_after[i] - (double)g_before[i];
      maxerr = fmax(maxerr, fabs(an - num[i]));
    }
  free(num);
  *maxg_out = maxg;
  *gaps_out = gaps_ok;
  return maxerr / fmax(maxg, 1e-3);
}
static void fd_check(const char *what, loss_fn loss, void *st, double *param, int64_t rows, int64_t cols, int64_t ld,
                     const float *g_after, const float *g_before, int check_gaps) {
  double maxg;
  int gaps_ok;
  double rel = fd_rel(loss, st, param, rows, cols, ld, g_after, g_before, check_gaps, &maxg, &gaps_ok);
  char name[160];
  snprintf(name, sizeof name, "%s (max|g|=%.2e%s)", what, maxg, gaps_ok ? "" : ", GAP WRITTEN");
  check(rel <= 2e-5 && gaps_ok && maxg > 0, name, rel, 2e-5);
}

/* ---- conv1d ---------------------------------------------------------------- */

typedef struct {
  int64_t B, T, D, K, ldx;
  double *x, *w, *bias; /* x (B,T,ldx) ; w (D,K) ; bias (D) or NULL */
  const double *R;      /* (B,T,D) loss weights */
  const int32_t *seg;   /* document starts (B*T) or NULL */
} conv_st;

static void conv_ref(const conv_st *s, double *out) {
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t t = 0; t < s->T; t++)
      for (int64_t d = 0; d < s->D; d++) {
        double a = s->bias ? s->bias[d] : 0.0;
        for (int64_t k = 0; k < s->K; k++) {
          int64_t tt = t - (s->K - 1) + k;
          if (tt >= (s->seg ? s->seg[b * s->T + t] : 0)) a += s->w[d * s->K + k] * s->x[(b * s->T + tt) * s->ldx + d];
        }
        out[(b * s->T + t) * s->D + d] = a;
      }
}
static double conv_loss(void *p) {
  conv_st *s = p;
  int64_t n = s->B * s->T * s->D;
  double *o = malloc((size_t)n * sizeof(double)), L = 0;
  conv_ref(s, o);
  for (int64_t i = 0; i < n; i++) L += o[i] * s->R[i];
  free(o);
  return L;
}

/* B, T: sizes (D = 5, K = 4); seg: document starts (NULL: none) */
static void test_conv(int with_bias, int64_t B, int64_t T, const int32_t *seg) {
  const int64_t D = 5, K = 4, ldx = 2 * D + 1, lddx = 2 * D;
  const int64_t N = B * T;
  char name[160];
  float *x = fbuf(N * ldx, -1, 1), *w = fbuf(D * K, -1, 1), *bias = fbuf(D, -1, 1);
  float *R = fbuf(N * D, -1, 1), *out = fbuf(N * D, 0, 0);
  conv_st st = {
      B, T, D, K, ldx, dcopy(x, N * ldx), dcopy(w, D * K), with_bias ? dcopy(bias, D) : NULL, dcopy(R, N * D), seg};
  double *ref = malloc((size_t)(N * D) * sizeof(double));
  conv_ref(&st, ref);
  sl_cpu_conv1d_fwd(NULL, out, x, ldx, w, with_bias ? bias : NULL, B, T, D, K, seg);
  snprintf(name, sizeof name, "conv1d_fwd vs direct (%s, ldx>D%s)", with_bias ? "bias" : "no bias",
           seg ? ", documents" : "");
  cmp_fwd(name, out, ref, N * D, 1e-6);
  if (seg) { /* negative control: the reference without the resets */
    conv_st nr = st;
    nr.seg = NULL;
    double *rn = malloc((size_t)(N * D) * sizeof(double)), e = 0, m = 1;
    conv_ref(&nr, rn);
    for (int64_t i = 0; i < N * D; i++) e = fmax(e, fabs(out[i] - rn[i])), m = fmax(m, fabs(rn[i]));
    control(e / m > 1e3 * 1e-6, "conv1d negative control: ignoring the resets is caught", e / m, 1e3 * 1e-6);
    free(rn);
  }
  /* backward into pre-filled grads (checks "adds into") */
  float *dx0 = fbuf(N * lddx, -1, 1), *dw0 = fbuf(D * K, -1, 1), *db0 = fbuf(D, -1, 1);
  float *dx = fcopy(dx0, N * lddx), *dw = fcopy(dw0, D * K), *db = fcopy(db0, D);
  sl_cpu_conv1d_bwd(NULL, dx, lddx, dw, with_bias ? db : NULL, R, x, ldx, w, B, T, D, K, seg);
  /* dx has row stride lddx while x has ldx: map the FD (on x's layout) onto dx's */
  float *dxa = fcopy(x, N * ldx), *dxb = fcopy(x, N * ldx);
  for (int64_t r = 0; r < N; r++)
    for (int64_t d = 0; d < D; d++) {
      dxa[r * ldx + d] = dx[r * lddx + d];
      dxb[r * ldx + d] = dx0[r * lddx + d];
    }
  int gap_ok = 1;
  for (int64_t r = 0; r < N; r++)
    for (int64_t c = D; c < lddx; c++) gap_ok &= dx[r * lddx + c] == dx0[r * lddx + c];
  check(gap_ok, "conv1d_bwd leaves dx stride gap untouched", 0, 0);
  snprintf(name, sizeof name, "conv1d_bwd dx FD (%s%s)", with_bias ? "bias" : "no bias", seg ? ", documents" : "");
  fd_check(name, conv_loss, &st, st.x, N, D, ldx, dxa, dxb, 1);
  fd_check(seg ? "conv1d_bwd dw FD (documents)" : "conv1d_bwd dw FD", conv_loss, &st, st.w, D, K, K, dw, dw0, 1);
  if (with_bias)
    fd_check(seg ? "conv1d_bwd dbias FD (documents)" : "conv1d_bwd dbias FD", conv_loss, &st, st.bias, 1, D, D, db, db0,
             1);
  else {
    int same = memcmp(db, db0, (size_t)D * sizeof(float)) == 0;
    check(same, "conv1d_bwd dbias NULL skipped", 0, 0);
  }
  free(x);
  free(w);
  free(bias);
  free(R);
  free(out);
  free(ref);
  free(dx0);
  free(dw0);
  free(db0);
  free(dx);
  free(dw);
  free(db);
  free(dxa);
  free(dxb);
  free(st.x);
  free(st.w);
  free(st.bias);
  free((void *)st.R);
}

/* the end of the document of sample b that starts at t0 (seg: document starts) */
static int64_t doc_end(const int32_t *seg, int64_t b, int64_t T, int64_t t0) {
  int64_t e = t0 + 1;
  while (e < T && seg[b * T + e] == seg[b * T + t0]) e++;
  return e;
}

/* The key property of the resets: a packed row (seg) gives, bit for bit,
 * what its documents give run one by one (B = 1, T = the document's length,
 * seg NULL), with dw and dbias added into in document order; and without seg
 * the row differs by far more than any tolerance. */
static void test_conv_docs(int64_t B, int64_t T, const int32_t *seg) {
  const int64_t D = 37, K = 4, ldx = D + 3, lddx = D + 1, N = B * T; /* D: two dw blocks of channels */
  char name[160];
  float *x = fbuf(N * ldx, -1, 1), *w = fbuf(D * K, -1, 1), *bias = fbuf(D, -1, 1), *dout = fbuf(N * D, -1, 1);
  float *dx0 = fbuf(N * lddx, -1, 1), *dw0 = fbuf(D * K, -1, 1), *db0 = fbuf(D, -1, 1);
  float *op = fbuf(N * D, 0, 0), *dxp = fcopy(dx0, N * lddx), *dwp = fcopy(dw0, D * K), *dbp = fcopy(db0, D);
  float *os = fbuf(N * D, 0, 0), *dxs = fcopy(dx0, N * lddx), *dws = fcopy(dw0, D * K), *dbs = fcopy(db0, D);
  float *on = fbuf(N * D, 0, 0), *dxn = fcopy(dx0, N * lddx);
  sl_cpu_conv1d_fwd(NULL, op, x, ldx, w, bias, B, T, D, K, seg);
  sl_cpu_conv1d_bwd(NULL, dxp, lddx, dwp, dbp, dout, x, ldx, w, B, T, D, K, seg);
  int ndoc = 0, shortest = (int)T;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t0 = 0; t0 < T; t0 = doc_end(seg, b, T, t0)) {
      const int64_t L = doc_end(seg, b, T, t0) - t0, r = b * T + t0;
      sl_cpu_conv1d_fwd(NULL, os + r * D, x + r * ldx, ldx, w, bias, 1, L, D, K, NULL);
      sl_cpu_conv1d_bwd(NULL, dxs + r * lddx, lddx, dws, dbs, dout + r * D, x + r * ldx, ldx, w, 1, L, D, K, NULL);
      ndoc++;
      if (L < shortest) shortest = (int)L;
    }
  int same = !memcmp(op, os, (size_t)(N * D) * 4) && !memcmp(dxp, dxs, (size_t)(N * lddx) * 4) &&
             !memcmp(dwp, dws, (size_t)(D * K) * 4) && !memcmp(dbp, dbs, (size_t)D * 4);
  snprintf(name, sizeof name, "conv1d packed = %d documents one by one (shortest %d < K): out, dx, dw, dbias bitwise",
           ndoc, shortest);
  check(same, name, 0, 0);
  /* negative control: the packed row without seg */
  sl_cpu_conv1d_fwd(NULL, on, x, ldx, w, bias, B, T, D, K, NULL);
  sl_cpu_conv1d_bwd(NULL, dxn, lddx, NULL, NULL, dout, x, ldx, w, B, T, D, K, NULL);
  double eo = 0, ed = 0, m = 1;
  for (int64_t i = 0; i < N * D; i++) eo = fmax(eo, fabs(on[i] - op[i])), m = fmax(m, fabs(op[i]));
  for (int64_t i = 0; i < N * lddx; i++) ed = fmax(ed, fabs(dxn[i] - dxp[i]));
  control(eo / m > 1e3 * 1e-6 && ed / m > 1e3 * 1e-6, "conv1d negative control: the row without seg (out, dx)",
          fmin(eo, ed) / m, 1e3 * 1e-6);
  free(x), free(w), free(bias), free(dout), free(dx0), free(dw0), free(db0);
  free(op), free(dxp), free(dwp), free(dbp), free(os), free(dxs), free(dws), free(dbs), free(on), free(dxn);
}

/* ---- silu and gate ----------------------------------------------------------- */

typedef struct {
  int64_t N, D, ldz;
  double *x, *y, *z;
  const double *R;
  int op; /* 0: silu over x (N*D), 1: y * silu(z), 2: relu2 over x */
} ew_st;
static double ew_loss(void *p) {
  ew_st *s = p;
  double L = 0;
  for (int64_t i = 0; i < s->N; i++)
    for (int64_t d = 0; d < s->D; d++) {
      double o = s->op == 1   ? s->y[i * s->D + d] * silu_d(s->z[i * s->ldz + d])
                 : s->op == 2 ? relu2_d(s->x[i * s->D + d])
                              : silu_d(s->x[i * s->D + d]);
      L += o * s->R[i * s->D + d];
    }
  return L;
}

static void test_silu_gate(void) {
  const int64_t N = 9, D = 6, ldz = 2 * D, n = N * D;
  float *x = fbuf(n, -6, 6), *R = fbuf(n, -1, 1), *out = fbuf(n, 0, 0);
  x[0] = -100.0f;
  x[1] = 100.0f;
  x[2] = 0.0f; /* saturation without NaN */
  ew_st st = {N, D, D, dcopy(x, n), NULL, NULL, dcopy(R, n), 0};
  double *ref = malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) ref[i] = silu_d(st.x[i]);
  sl_cpu_silu_fwd(NULL, out, x, n);
  cmp_fwd("silu_fwd vs reference (incl. +-100)", out, ref, n, 1e-6);
  float *dx0 = fbuf(n, -1, 1), *dx = fcopy(dx0, n);
  sl_cpu_silu_bwd(NULL, dx, R, x, n);
  fd_check("silu_bwd dx FD", ew_loss, &st, st.x, N, D, D, dx, dx0, 1);

  float *y = fbuf(n, -2, 2), *z = fbuf(N * ldz, -6, 6);
  z[0] = -100.0f;
  z[ldz + 1] = 100.0f;
  ew_st gs = {N, D, ldz, NULL, dcopy(y, n), dcopy(z, N * ldz), st.R, 1};
  for (int64_t i = 0; i < N; i++)
    for (int64_t d = 0; d < D; d++) ref[i * D + d] = gs.y[i * D + d] * silu_d(gs.z[i * ldz + d]);
  sl_cpu_gate_fwd(NULL, out, y, z, ldz, N, D);
  cmp_fwd("gate_fwd vs reference (ldz>D)", out, ref, n, 1e-6);
  float *dy0 = fbuf(n, -1, 1), *dy = fcopy(dy0, n);
  float *dz0 = fbuf(N * ldz, -1, 1), *dz = fcopy(dz0, N * ldz);
  sl_cpu_gate_bwd(NULL, dy, dz, ldz, R, y, z, N, D);
  fd_check("gate_bwd dy FD", ew_loss, &gs, gs.y, N, D, D, dy, dy0, 1);
  fd_check("gate_bwd dz FD (stride, gap untouched)", ew_loss, &gs, gs.z, N, D, ldz, dz, dz0, 1);
  free(x);
  free(R);
  free(out);
  free(ref);
  free(dx0);
  free(dx);
  free(y);
  free(z);
  free(dy0);
  free(dy);
  free(dz0);
  free(dz);
  free(st.x);
  free((void *)st.R);
  free(gs.y);
  free(gs.z);
}

/* ---- relu2 (Nemotron-H's squared-ReLU MLP) ------------------------------------ */

/* a + b rounded once to fp32 (to nearest even): TwoSum gives the sum exactly
 * as s + e; (float)s is that rounding unless s is a tie of two floats that e
 * breaks */
static float add_rn_f32(double a, double b) {
  double s = a + b, bb = s - a, e = (a - (s - bb)) + (b - bb);
  float f = (float)s;
  if (e != 0.0 && (double)f != s) {
    float g = nextafterf(f, s > (double)f ? INFINITY : -INFINITY); /* the float on s's other side */
    if (s == 0.5 * ((double)f + (double)g) && (e > 0.0) == (g > f)) f = g;
  }
  return f;
}

/* Bitwise, since each output is one rounding of an exact value:
 * forward: x*x of a float is exact in double (48 of 53 bits), so
 * (float)relu(x)^2 is the correctly rounded square, as the fp32 product r*r
 * is; backward from dx = 0: the fmaf rounds dout*2r (exact in double) once;
 * backward into a random dx (the += semantics): the fmaf rounds dx0 +
 * dout*2r once, add_rn_f32's reference, and where x <= 0 dx keeps its bits.
 * Then central differences of the double loss, NaN, and two wrong
 * derivatives that the same finite-difference check must reject. */
static void test_relu2(void) {
  const int64_t N = 9, D = 6, n = N * D;
  float *x = fbuf(n, -6, 6), *R = fbuf(n, -1, 1), *out = fbuf(n, 0, 0);
  /* exact zeros of both signs, tiny (the square underflows to 0 or to a
   * subnormal), +-10 */
  const float special[] = {0.0f, -0.0f, -10.0f, 10.0f, 1e-7f, -1e-7f, 1e-30f, 1e-20f, -3.0f};
  for (int i = 0; i < 9; i++) x[i * 5] = special[i];
  ew_st st = {N, D, D, dcopy(x, n), NULL, NULL, dcopy(R, n), 2};

  sl_cpu_relu2_fwd(NULL, out, x, n);
  int64_t bad = 0, nonpos = 0;
  for (int64_t i = 0; i < n; i++) {
    bad += out[i] != (float)relu2_d(x[i]) || signbit(out[i]);
    nonpos += x[i] <= 0.0f;
  }
  check(bad == 0 && nonpos >= 12, "relu2_fwd bitwise vs (float)relu(x)^2 in fp64", (double)bad, 0);

  float *dz = fbuf(n, 0, 0);
  sl_cpu_relu2_bwd(NULL, dz, R, x, n);
  bad = 0;
  for (int64_t i = 0; i < n; i++) bad += dz[i] != (float)(2.0 * relu_d(x[i]) * (double)R[i]);
  check(bad == 0, "relu2_bwd from 0 bitwise vs 2 relu(x) dout (fp64)", (double)bad, 0);

  float *dx0 = fbuf(n, -1, 1), *dx = fcopy(dx0, n);
  sl_cpu_relu2_bwd(NULL, dx, R, x, n);
  bad = 0;
  for (int64_t i = 0; i < n; i++) {
    bad += dx[i] != add_rn_f32(dx0[i], 2.0 * relu_d(x[i]) * (double)R[i]);
    bad += x[i] <= 0.0f && memcmp(&dx[i], &dx0[i], sizeof(float)) != 0;
  }
  check(bad == 0, "relu2_bwd += bitwise vs dx0 + 2 relu(x) dout", (double)bad, 0);
  fd_check("relu2_bwd dx FD (incl. 0, -0, +-10)", ew_loss, &st, st.x, N, D, D, dx, dx0, 1);

  float nan_x = NAN, nan_o = 0.0f, nan_d = 0.0f, one = 1.0f;
  sl_cpu_relu2_fwd(NULL, &nan_o, &nan_x, 1);
  sl_cpu_relu2_bwd(NULL, &nan_d, &one, &nan_x, 1);
  check(isnan(nan_o) && isnan(nan_d), "relu2 keeps NaN (fwd, bwd), as torch.relu", 0, 0);

  /* negative controls: the FD check on 2x dout (no relu mask: a gradient
   * where x < 0) and on relu(x) dout (the factor 2 lost) must miss its bound
   * 1000 times over */
  float *zero = fbuf(n, 0, 0), *wrong = fbuf(n, 0, 0);
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t i = 0; i < n; i++) wrong[i] = (pass ? (float)relu_d(x[i]) : 2.0f * x[i]) * R[i];
    double maxg;
    int gaps;
    double rel = fd_rel(ew_loss, &st, st.x, N, D, D, wrong, zero, 0, &maxg, &gaps);
    control(rel > 1e3 * 2e-5,
            pass ? "relu2_bwd negative control: relu(x) dout, no 2"
                 : "relu2_bwd negative control: 2x dout, no relu mask",
            rel, 1e3 * 2e-5);
  }
  free(x), free(R), free(out), free(dz), free(dx0), free(dx), free(zero), free(wrong), free(st.x), free((void *)st.R);
}

/* ---- selective scan ------------------------------------------------------------- */

typedef struct {
  int64_t B, T, D, S, ldbc;
  double *u, *dt, *A_log, *bc, *Dp; /* bc (B,T,ldbc): Bm at column off, Cm at off+S */
  int64_t off;
  const double *R;
  const int32_t *seg; /* document starts (B*T) or NULL */
} scan_st;

/* Sequential scan keeping all states hs (B,T,D,S) (NULL: not kept). */
static void scan_ref(const scan_st *s, double *y, double *hs) {
  const int64_t S = s->S, D = s->D, T = s->T;
  double *h = malloc((size_t)S * sizeof(double));
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t d = 0; d < D; d++) {
      for (int64_t k = 0; k < S; k++) h[k] = 0;
      for (int64_t t = 0; t < T; t++) {
        int64_t i = (b * T + t) * D + d;
        if (s->seg && s->seg[b * T + t] == t)
          for (int64_t k = 0; k < S; k++) h[k] = 0; /* a document starts */
        const double *Bt = s->bc + (b * T + t) * s->ldbc + s->off, *Ct = Bt + S;
        double delta = softplus_d(s->dt[i]), acc = 0;
        for (int64_t k = 0; k < S; k++) {
          double A = -exp(s->A_log[d * S + k]);
          h[k] = exp(delta * A) * h[k] + delta * Bt[k] * s->u[i];
          acc += Ct[k] * h[k];
          if (hs) hs[i * S + k] = h[k];
        }
        y[i] = acc + s->Dp[d] * s->u[i];
      }
    }
  free(h);
}
static double scan_loss(void *p) {
  scan_st *s = p;
  int64_t n = s->B * s->T * s->D;
  double *y = malloc((size_t)n * sizeof(double)), L = 0;
  scan_ref(s, y, NULL);
  for (int64_t i = 0; i < n; i++) L += y[i] * s->R[i];
  free(y);
  return L;
}

typedef struct {
  float *y, *ckpt, *du, *ddt, *dA, *dbc, *dDp;
} scan_out;

static void run_scan(scan_out *o, int64_t chunk, const float *u, const float *dt, const float *A_log, const float *bc,
                     int64_t off, int64_t ldbc, const float *Dp, const float *dy, const float *g0_bc, const float *g0_u,
                     const float *g0_dt, const float *g0_A, const float *g0_Dp, int64_t B, int64_t T, int64_t D,
                     int64_t S, const int32_t *seg) {
  int64_t NC = (T + chunk - 1) / chunk, n = B * T * D;
  o->y = fbuf(n, 0, 0);
  o->ckpt = fbuf(B * NC * D * S, 0, 0);
  o->du = fcopy(g0_u, n);
  o->ddt = fcopy(g0_dt, n);
  o->dA = fcopy(g0_A, D * S);
  o->dbc = fcopy(g0_bc, B * T * ldbc);
  o->dDp = fcopy(g0_Dp, D);
  sl_cpu_scan_fwd(NULL, o->y, o->ckpt, u, dt, A_log, bc + off, bc + off + S, ldbc, Dp, seg, B, T, D, S, chunk);
  sl_cpu_scan_bwd(NULL, o->du, o->ddt, o->dA, o->dbc + off, o->dbc + off + S, o->dDp, dy, u, dt, A_log, bc + off,
                  bc + off + S, ldbc, Dp, seg, o->ckpt, B, T, D, S, chunk);
}
static void free_scan(scan_out *o) {
  free(o->y);
  free(o->ckpt);
  free(o->du);
  free(o->ddt);
  free(o->dA);
  free(o->dbc);
  free(o->dDp);
}
static int same_scan(const scan_out *a, const scan_out *b, int64_t B, int64_t T, int64_t D, int64_t S, int64_t ldbc) {
  int64_t n = B * T * D;
  return !memcmp(a->y, b->y, (size_t)n * 4) && !memcmp(a->du, b->du, (size_t)n * 4) &&
         !memcmp(a->ddt, b->ddt, (size_t)n * 4) && !memcmp(a->dA, b->dA, (size_t)(D * S) * 4) &&
         !memcmp(a->dbc, b->dbc, (size_t)(B * T * ldbc) * 4) && !memcmp(a->dDp, b->dDp, (size_t)D * 4);
}

/* B,T,D,S: sizes; fd: also run the finite-difference checks; seg: document
 * starts (NULL: none). */
static void test_scan(int64_t B, int64_t T, int64_t D, int64_t S, int fd, const int32_t *seg) {
  const int64_t R_ = 3, off = R_, ldbc = R_ + 2 * S + 1; /* x_proj row: dt(R) | B | C | pad */
  const int64_t n = B * T * D;
  char name[160];
  float *u = fbuf(n, -1.5f, 1.5f), *dt = fbuf(n, -4.0f, 1.5f);
  float *A_log = fbuf(D * S, -1.0f, 1.5f), *bc = fbuf(B * T * ldbc, -1, 1);
  float *Dp = fbuf(D, -1, 1), *dy = fbuf(n, -1, 1);
  dt[0] = 22.0f; /* softplus threshold branch (with A_log[0] below: exp clamp) */
  dt[1] = 23.0f;
  dt[n - 1] = 21.5f;
  A_log[0] = 3.5f; /* strong decay: delta*A can reach ~ -700 (exp clamp path) */
  float *g0_u = fbuf(n, -1, 1), *g0_dt = fbuf(n, -1, 1), *g0_A = fbuf(D * S, -1, 1);
  float *g0_bc = fbuf(B * T * ldbc, -1, 1), *g0_Dp = fbuf(D, -1, 1);

  scan_st st = {B,
                T,
                D,
                S,
                ldbc,
                dcopy(u, n),
                dcopy(dt, n),
                dcopy(A_log, D * S),
                dcopy(bc, B * T * ldbc),
                dcopy(Dp, D),
                off,
                dcopy(dy, n),
                seg};
  double *yref = malloc((size_t)n * sizeof(double));
  double *hs = malloc((size_t)(n * S) * sizeof(double));
  scan_ref(&st, yref, hs);

  const int64_t chunks[4] = {1, 3, T, T + 5};
  scan_out o[4];
  for (int c = 0; c < 4; c++)
    run_scan(&o[c], chunks[c], u, dt, A_log, bc, off, ldbc, Dp, dy, g0_bc, g0_u, g0_dt, g0_A, g0_Dp, B, T, D, S, seg);

  snprintf(name, sizeof name, "scan_fwd y vs sequential ref B%lld T%lld D%lld S%lld%s", (long long)B, (long long)T,
           (long long)D, (long long)S, seg ? " docs" : "");
  cmp_fwd(name, o[1].y, yref, n, 2e-5);
  if (seg) { /* negative control: the reference without the resets */
    scan_st nr = st;
    nr.seg = NULL;
    double *yn = malloc((size_t)n * sizeof(double)), e = 0, m = 1;
    scan_ref(&nr, yn, NULL);
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(o[1].y[i] - yn[i])), m = fmax(m, fabs(yn[i]));
    control(e / m > 1e3 * 2e-5, "scan negative control: ignoring the resets is caught", e / m, 1e3 * 2e-5);
    free(yn);
  }
  /* checkpoints equal the reference states at every chunk start (before a
   * reset at that step) */
  {
    const int64_t ck = chunks[1], NC = (T + ck - 1) / ck;
    double e = 0, m = 1.0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t c = 0; c < NC; c++)
        for (int64_t d = 0; d < D; d++)
          for (int64_t s = 0; s < S; s++) {
            double r = c == 0 ? 0.0 : hs[((b * T + c * ck - 1) * D + d) * S + s];
            e = fmax(e, fabs(o[1].ckpt[((b * NC + c) * D + d) * S + s] - r));
            m = fmax(m, fabs(r));
          }
    check(e <= 2e-5 * m, "scan_fwd ckpt = reference state at chunk starts (chunk 3)", e / m, 2e-5);
  }
  int same = 1;
  for (int c = 1; c < 4; c++) same &= same_scan(&o[0], &o[c], B, T, D, S, ldbc);
  snprintf(name, sizeof name, "scan chunk 1/3/T/T+5 bitwise identical (T=%lld)", (long long)T);
  check(same, name, 0, 0);
  {
    scan_out again;
    run_scan(&again, 3, u, dt, A_log, bc, off, ldbc, Dp, dy, g0_bc, g0_u, g0_dt, g0_A, g0_Dp, B, T, D, S, seg);
    check(same_scan(&o[1], &again, B, T, D, S, ldbc), "scan run-to-run bitwise deterministic", 0, 0);
    free_scan(&again);
  }
  {
    /* one thread vs the default: same math, only dBm/dCm summation order differs */
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    scan_out one;
    run_scan(&one, 3, u, dt, A_log, bc, off, ldbc, Dp, dy, g0_bc, g0_u, g0_dt, g0_A, g0_Dp, B, T, D, S, seg);
    omp_set_num_threads(nt);
    double e = 0, m = 1;
    for (int64_t i = 0; i < B * T * ldbc; i++) {
      e = fmax(e, fabs(one.dbc[i] - o[1].dbc[i]));
      m = fmax(m, fabs(one.dbc[i]));
    }
    int rest = !memcmp(one.du, o[1].du, (size_t)n * 4) && !memcmp(one.dA, o[1].dA, (size_t)(D * S) * 4);
    snprintf(name, sizeof name, "scan 1 thread vs %d threads (du,dA bitwise; dBC close)", nt);
    check(rest && e <= 1e-5 * m, name, e / m, 1e-5);
    free_scan(&one);
  }
  if (fd) {
    scan_out *a = &o[2]; /* chunk T+... all identical anyway; use chunk = T */
#define SCAN_NM(what) (snprintf(name, sizeof name, "%s%s", what, seg ? " docs" : ""), name)
    fd_check(SCAN_NM("scan_bwd du FD"), scan_loss, &st, st.u, B * T, D, D, a->du, g0_u, 1);
    fd_check(SCAN_NM("scan_bwd ddt FD (incl. dt > 20)"), scan_loss, &st, st.dt, B * T, D, D, a->ddt, g0_dt, 1);
    fd_check(SCAN_NM("scan_bwd dA_log FD"), scan_loss, &st, st.A_log, D, S, S, a->dA, g0_A, 1);
    fd_check(SCAN_NM("scan_bwd dDp FD"), scan_loss, &st, st.Dp, 1, D, D, a->dDp, g0_Dp, 1);
    /* dBm and dCm share the x_proj-like rows; check each window, the gap
     * columns (dt part and pad) must stay untouched */
    double *pbc = st.bc + off;
    fd_check(SCAN_NM("scan_bwd dBm FD (ldbc > S)"), scan_loss, &st, pbc, B * T, S, ldbc, a->dbc + off, g0_bc + off, 0);
    fd_check(SCAN_NM("scan_bwd dCm FD (ldbc > S)"), scan_loss, &st, pbc + S, B * T, S, ldbc, a->dbc + off + S,
             g0_bc + off + S, 0);
    int gap_ok = 1;
    for (int64_t r = 0; r < B * T; r++)
      for (int64_t c = 0; c < ldbc; c++)
        if (c < off || c >= off + 2 * S) gap_ok &= a->dbc[r * ldbc + c] == g0_bc[r * ldbc + c];
    check(gap_ok, "scan_bwd leaves x_proj dt/pad columns untouched", 0, 0);
#undef SCAN_NM
  }
  for (int c = 0; c < 4; c++) free_scan(&o[c]);
  free(u);
  free(dt);
  free(A_log);
  free(bc);
  free(Dp);
  free(dy);
  free(g0_u);
  free(g0_dt);
  free(g0_A);
  free(g0_bc);
  free(g0_Dp);
  free(st.u);
  free(st.dt);
  free(st.A_log);
  free(st.bc);
  free(st.Dp);
  free((void *)st.R);
  free(yref);
  free(hs);
}

/* The key property for the scan: a packed row (seg) gives the bits of its
 * documents run one by one (B = 1, seg NULL, their own checkpoints), dA_log
 * and dDp added into in the order the backward visits the documents
 * (samples in order, a sample's documents last to first); without seg the
 * row differs by far more than any tolerance. */
static void test_scan_docs(int64_t B, int64_t T, int64_t D, int64_t S, int64_t chunk, const int32_t *seg) {
  const int64_t off = 2, ldbc = 2 * S + 3, n = B * T * D;
  char name[200];
  float *u = fbuf(n, -1.5f, 1.5f), *dt = fbuf(n, -4.0f, 1.5f), *A_log = fbuf(D * S, -1.0f, 1.5f);
  float *bc = fbuf(B * T * ldbc, -1, 1), *Dp = fbuf(D, -1, 1), *dy = fbuf(n, -1, 1);
  float *g0_u = fbuf(n, -1, 1), *g0_dt = fbuf(n, -1, 1), *g0_A = fbuf(D * S, -1, 1);
  float *g0_bc = fbuf(B * T * ldbc, -1, 1), *g0_Dp = fbuf(D, -1, 1);
  scan_out p, q, nos;
  run_scan(&p, chunk, u, dt, A_log, bc, off, ldbc, Dp, dy, g0_bc, g0_u, g0_dt, g0_A, g0_Dp, B, T, D, S, seg);
  run_scan(&nos, chunk, u, dt, A_log, bc, off, ldbc, Dp, dy, g0_bc, g0_u, g0_dt, g0_A, g0_Dp, B, T, D, S, NULL);
  q.y = fbuf(n, 0, 0);
  q.ckpt = NULL;
  q.du = fcopy(g0_u, n), q.ddt = fcopy(g0_dt, n), q.dA = fcopy(g0_A, D * S);
  q.dbc = fcopy(g0_bc, B * T * ldbc), q.dDp = fcopy(g0_Dp, D);
  int ndoc = 0, mid = 0, edge = 0;
  for (int64_t b = 0; b < B; b++) {
    int64_t starts[64], ns = 0;
    for (int64_t t0 = 0; t0 < T && ns < 64; t0 = doc_end(seg, b, T, t0)) starts[ns++] = t0;
    for (int64_t k = ns - 1; k >= 0; k--) { /* last to first: the backward's order */
      const int64_t t0 = starts[k], L = doc_end(seg, b, T, t0) - t0, r = b * T + t0;
      float *ck = fbuf(((L + chunk - 1) / chunk) * D * S, 0, 0);
      const float *Bm = bc + r * ldbc + off;
      sl_cpu_scan_fwd(NULL, q.y + r * D, ck, u + r * D, dt + r * D, A_log, Bm, Bm + S, ldbc, Dp, NULL, 1, L, D, S,
                      chunk);
      sl_cpu_scan_bwd(NULL, q.du + r * D, q.ddt + r * D, q.dA, q.dbc + r * ldbc + off, q.dbc + r * ldbc + off + S,
                      q.dDp, dy + r * D, u + r * D, dt + r * D, A_log, Bm, Bm + S, ldbc, Dp, NULL, ck, 1, L, D, S,
                      chunk);
      free(ck);
      ndoc++;
      if (t0 > 0 && t0 % chunk) mid++;
      else if (t0 > 0) edge++;
    }
  }
  snprintf(name, sizeof name,
           "scan packed = %d documents one by one (chunk %lld: %d starts mid-chunk, %d at a chunk start): every "
           "output bitwise",
           ndoc, (long long)chunk, mid, edge);
  check(same_scan(&p, &q, B, T, D, S, ldbc) && mid > 0 && edge > 0, name, 0, 0);
  double ey = 0, eu = 0, m = 1;
  for (int64_t i = 0; i < n; i++) {
    ey = fmax(ey, fabs(nos.y[i] - p.y[i]));
    eu = fmax(eu, fabs(nos.du[i] - p.du[i]));
    m = fmax(m, fabs(p.y[i]));
  }
  control(ey / m > 1e3 * 2e-5 && eu / m > 1e3 * 2e-5, "scan negative control: the row without seg (y, du)",
          fmin(ey, eu) / m, 1e3 * 2e-5);
  free_scan(&p), free_scan(&q), free_scan(&nos);
  free(u), free(dt), free(A_log), free(bc), free(Dp), free(dy);
  free(g0_u), free(g0_dt), free(g0_A), free(g0_bc), free(g0_Dp);
}

/* ---- Mamba-2 SSD scan -------------------------------------------------------- */

/* The double reference straight from kernels.h's formula: a sequential
 * recurrence per (b, h, p, n) keeping every state. x, dt, bm, cm point at
 * the first element of their (strided) windows. */
typedef struct {
  int64_t B, T, H, P, G, S, ldx, lddt, ldbc;
  double *x, *dt, *dtb, *Al, *bm, *cm, *Dp;
  const int32_t *seg; /* NULL: no document starts */
  double lo, hi;      /* the clamp on delta */
  const double *R;    /* (B, T, H*P) loss weights */
} ssd_st;

/* y (B, T, H*P); hs (B, T, H, P, S): the state after each step, or NULL */
static void ssd_ref(const ssd_st *s, double *y, double *hs) {
  const int64_t T = s->T, H = s->H, P = s->P, S = s->S, HP = H * P;
  double *st = malloc((size_t)(P * S) * sizeof(double));
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t g = h / (H / s->G);
      const double A = -exp(s->Al[h]);
      for (int64_t t = 0; t < T; t++) {
        const int64_t r = b * T + t;
        if (t == 0 || (s->seg && s->seg[r] == t))
          for (int64_t j = 0; j < P * S; j++) st[j] = 0;
        double delta = softplus_d(s->dt[r * s->lddt + h] + s->dtb[h]);
        delta = delta < s->lo ? s->lo : delta > s->hi ? s->hi : delta;
        const double *Bt = s->bm + r * s->ldbc + g * S, *Ct = s->cm + r * s->ldbc + g * S;
        for (int64_t p = 0; p < P; p++) {
          const double xv = s->x[r * s->ldx + h * P + p];
          double acc = 0;
          for (int64_t n = 0; n < S; n++) {
            double *v = st + p * S + n;
            *v = exp(delta * A) * *v + delta * Bt[n] * xv;
            acc += Ct[n] * *v;
            if (hs) hs[(r * H + h) * P * S + p * S + n] = *v;
          }
          y[r * HP + h * P + p] = acc + s->Dp[h] * xv;
        }
      }
    }
  free(st);
}
static double ssd_loss(void *p) {
  ssd_st *s = p;
  int64_t n = s->B * s->T * s->H * s->P;
  double *y = malloc((size_t)n * sizeof(double)), L = 0;
  ssd_ref(s, y, NULL);
  for (int64_t i = 0; i < n; i++) L += y[i] * s->R[i];
  free(y);
  return L;
}

/* the kernel's inputs: x, dt, B|C each in rows wider than the data (at
 * column ox, odt, ob; C at ob + G*S), and the starting gradients */
typedef struct {
  int64_t B, T, H, P, G, S, ldx, ox, lddt, odt, ldbc, ob;
  float *x, *dt, *dtb, *Al, *bc, *Dp, *dy, lo, hi;
  int32_t *seg;
  float *g0x, *g0dt, *g0dtb, *g0A, *g0bc, *g0D;
} ssd_in;
typedef struct {
  float *y, *ck, *dx, *ddt, *dtb, *dA, *dbc, *dD;
} ssd_out;

static void run_ssd(ssd_out *o, const ssd_in *in, int64_t chunk) {
  const int64_t B = in->B, T = in->T, H = in->H, P = in->P, G = in->G, S = in->S, N = B * T;
  const int64_t NC = (T + chunk - 1) / chunk, bo = in->ob, co = in->ob + G * S;
  o->y = fbuf(N * H * P, 0, 0);
  o->ck = fbuf(B * NC * H * P * S, 0, 0);
  o->dx = fcopy(in->g0x, N * in->ldx);
  o->ddt = fcopy(in->g0dt, N * in->lddt);
  o->dtb = fcopy(in->g0dtb, H);
  o->dA = fcopy(in->g0A, H);
  o->dbc = fcopy(in->g0bc, N * in->ldbc);
  o->dD = fcopy(in->g0D, H);
  sl_cpu_ssd_fwd(NULL, o->y, o->ck, in->x + in->ox, in->ldx, in->dt + in->odt, in->lddt, in->dtb, in->Al, in->bc + bo,
                 in->bc + co, in->ldbc, in->Dp, in->seg, in->lo, in->hi, B, T, H, P, G, S, chunk);
  sl_cpu_ssd_bwd(NULL, o->dx + in->ox, o->ddt + in->odt, o->dtb, o->dA, o->dbc + bo, o->dbc + co, o->dD, in->dy,
                 in->x + in->ox, in->ldx, in->dt + in->odt, in->lddt, in->dtb, in->Al, in->bc + bo, in->bc + co,
                 in->ldbc, in->Dp, in->seg, o->ck, in->lo, in->hi, B, T, H, P, G, S, chunk);
}
static void free_ssd(ssd_out *o) {
  free(o->y), free(o->ck), free(o->dx), free(o->ddt), free(o->dtb), free(o->dA), free(o->dbc), free(o->dD);
}
/* every output bit for bit (the checkpoints only when the chunk is the same) */
static int same_ssd(const ssd_out *a, const ssd_out *b, const ssd_in *in, int with_ck) {
  const int64_t N = in->B * in->T, H = in->H;
  const int64_t nck = in->B * ((in->T + 2) / 3) * H * in->P * in->S; /* chunk 3's */
  return !memcmp(a->y, b->y, (size_t)(N * H * in->P) * 4) && !memcmp(a->dx, b->dx, (size_t)(N * in->ldx) * 4) &&
         !memcmp(a->ddt, b->ddt, (size_t)(N * in->lddt) * 4) && !memcmp(a->dtb, b->dtb, (size_t)H * 4) &&
         !memcmp(a->dA, b->dA, (size_t)H * 4) && !memcmp(a->dbc, b->dbc, (size_t)(N * in->ldbc) * 4) &&
         !memcmp(a->dD, b->dD, (size_t)H * 4) && (!with_ck || !memcmp(a->ck, b->ck, (size_t)nck * 4));
}
/* the columns outside [off, off + cols) of every row kept their values */
static int gaps_kept(const float *after, const float *before, int64_t rows, int64_t ld, int64_t off, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < ld; c++)
      if ((c < off || c >= off + cols) && after[r * ld + c] != before[r * ld + c]) return 0;
  return 1;
}

/* B, T, H, P, G, S: sizes; seg: document starts (NULL: none); lo, hi: the
 * clamp; fd: run the finite-difference checks. */
static void test_ssd(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, const int32_t *seg, float lo,
                     float hi, int fd) {
  char name[160];
  ssd_in in = {.B = B,
               .T = T,
               .H = H,
               .P = P,
               .G = G,
               .S = S,
               .ldx = H * P + 3,
               .ox = 1,
               .lddt = H + 2,
               .odt = 2,
               .ldbc = 2 * G * S + 4,
               .ob = 3};
  const int64_t N = B * T, HP = H * P, ny = N * HP;
  in.x = fbuf(N * in.ldx, -1.5f, 1.5f);
  in.dt = fbuf(N * in.lddt, -4.0f, 2.0f);
  in.dtb = fbuf(H, -0.5f, 0.5f);
  in.Al = fbuf(H, -1.0f, 1.5f);
  in.bc = fbuf(N * in.ldbc, -1, 1);
  in.Dp = fbuf(H, -1, 1);
  in.dy = fbuf(ny, -1, 1);
  in.seg = (int32_t *)seg;
  in.lo = lo;
  in.hi = hi;
  if (!isfinite(hi)) { /* softplus's threshold branch (dt + bias > 20) */
    in.dt[in.odt] = 22.0f;
    in.dt[(N - 1) * in.lddt + in.odt + H - 1] = 21.5f;
  }
  /* no softplus value within 1e-3 of a clamp bound: the finite differences
   * (h = 1e-5) must not straddle a kink */
  int bites_lo = 0, bites_hi = 0;
  for (int64_t r = 0; r < N; r++)
    for (int64_t h = 0; h < H; h++) {
      float *v = in.dt + r * in.lddt + in.odt + h;
      while (fabs(softplus_d((double)*v + in.dtb[h]) - lo) < 1e-3 ||
             fabs(softplus_d((double)*v + in.dtb[h]) - hi) < 1e-3)
        *v += 3e-3f;
      double sp = softplus_d((double)*v + in.dtb[h]);
      bites_lo += sp < lo;
      bites_hi += sp > hi;
    }
  in.g0x = fbuf(N * in.ldx, -1, 1);
  in.g0dt = fbuf(N * in.lddt, -1, 1);
  in.g0dtb = fbuf(H, -1, 1);
  in.g0A = fbuf(H, -1, 1);
  in.g0bc = fbuf(N * in.ldbc, -1, 1);
  in.g0D = fbuf(H, -1, 1);
  ssd_st st = {B,
               T,
               H,
               P,
               G,
               S,
               in.ldx,
               in.lddt,
               in.ldbc,
               dcopy(in.x + in.ox, N * in.ldx - in.ox),
               dcopy(in.dt + in.odt, N * in.lddt - in.odt),
               dcopy(in.dtb, H),
               dcopy(in.Al, H),
               dcopy(in.bc + in.ob, N * in.ldbc - in.ob),
               NULL,
               dcopy(in.Dp, H),
               seg,
               lo,
               hi,
               dcopy(in.dy, ny)};
  st.cm = st.bm + G * S;
  double *yref = malloc((size_t)ny * sizeof(double)), *hs = malloc((size_t)(ny * S) * sizeof(double));
  ssd_ref(&st, yref, hs);

  const int64_t chunks[4] = {1, 3, T, T + 5};
  ssd_out o[4];
  for (int c = 0; c < 4; c++) run_ssd(&o[c], &in, chunks[c]);
  snprintf(name, sizeof name, "ssd_fwd y vs sequential ref B%lld T%lld H%lld P%lld G%lld S%lld", (long long)B,
           (long long)T, (long long)H, (long long)P, (long long)G, (long long)S);
  cmp_fwd(name, o[1].y, yref, ny, 2e-5);
  {
    /* checkpoints: the reference state after step c*3 - 1 (before a reset at c*3) */
    const int64_t NC = (T + 2) / 3;
    double e = 0, m = 1.0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t c = 0; c < NC; c++)
        for (int64_t j = 0; j < H * P * S; j++) {
          double r = c == 0 ? 0.0 : hs[(b * T + c * 3 - 1) * H * P * S + j];
          e = fmax(e, fabs(o[1].ck[(b * NC + c) * H * P * S + j] - r));
          m = fmax(m, fabs(r));
        }
    check(e <= 2e-5 * m, "ssd_fwd ckpt = reference state at chunk starts (chunk 3)", e / m, 2e-5);
  }
  int same = 1;
  for (int c = 1; c < 4; c++) same &= same_ssd(&o[0], &o[c], &in, 0);
  snprintf(name, sizeof name, "ssd chunk 1/3/T/T+5 bitwise identical (T=%lld)", (long long)T);
  check(same, name, 0, 0);
  {
    /* the contract: the same bits for any thread count (and run to run) */
    const int nt = omp_get_max_threads();
    int ok = 1;
    for (int th = 1; th <= 3; th++) {
      omp_set_num_threads(th);
      ssd_out again;
      run_ssd(&again, &in, 3);
      ok &= same_ssd(&o[1], &again, &in, 1);
      free_ssd(&again);
    }
    omp_set_num_threads(nt);
    snprintf(name, sizeof name, "ssd 1, 2, 3 threads vs %d: every output bitwise", nt);
    check(ok, name, 0, 0);
  }
  {
    /* negative controls: the same reference without the resets, and
     * without the clamp, must be far off (these inputs exercise both) */
    ssd_st nr = st;
    double *yn = malloc((size_t)ny * sizeof(double));
    if (seg) {
      nr.seg = NULL;
      ssd_ref(&nr, yn, NULL);
      double e = 0, m = 1;
      for (int64_t i = 0; i < ny; i++) e = fmax(e, fabs(o[1].y[i] - yn[i])), m = fmax(m, fabs(yn[i]));
      control(e / m > 1e3 * 2e-5, "ssd negative control: ignoring the resets is caught", e / m, 1e3 * 2e-5);
    }
    if (bites_lo + bites_hi) {
      nr = st;
      nr.lo = 0.0;
      nr.hi = INFINITY;
      ssd_ref(&nr, yn, NULL);
      double e = 0, m = 1;
      for (int64_t i = 0; i < ny; i++) e = fmax(e, fabs(o[1].y[i] - yn[i])), m = fmax(m, fabs(yn[i]));
      snprintf(name, sizeof name, "ssd negative control: no clamp is caught (%d below, %d above)", bites_lo, bites_hi);
      control(e / m > 1e3 * 2e-5, name, e / m, 1e3 * 2e-5);
    }
    free(yn);
  }
  if (fd) {
    ssd_out *a = &o[2];
    const int64_t bo = in.ob, co = in.ob + G * S;
    fd_check("ssd_bwd dx FD (ldx > H*P)", ssd_loss, &st, st.x, N, HP, in.ldx, a->dx + in.ox, in.g0x + in.ox, 0);
    fd_check(isfinite(hi) ? "ssd_bwd ddt FD (lddt > H, clamp bites)" : "ssd_bwd ddt FD (lddt > H, dt > 20)", ssd_loss,
             &st, st.dt, N, H, in.lddt, a->ddt + in.odt, in.g0dt + in.odt, 0);
    fd_check("ssd_bwd ddt_bias FD", ssd_loss, &st, st.dtb, 1, H, H, a->dtb, in.g0dtb, 1);
    fd_check("ssd_bwd dA_log FD", ssd_loss, &st, st.Al, 1, H, H, a->dA, in.g0A, 1);
    fd_check("ssd_bwd dDp FD", ssd_loss, &st, st.Dp, 1, H, H, a->dD, in.g0D, 1);
    fd_check("ssd_bwd dBm FD (ldbc > 2GS)", ssd_loss, &st, st.bm, N, G * S, in.ldbc, a->dbc + bo, in.g0bc + bo, 0);
    fd_check("ssd_bwd dCm FD (ldbc > 2GS)", ssd_loss, &st, st.cm, N, G * S, in.ldbc, a->dbc + co, in.g0bc + co, 0);
    int gaps = gaps_kept(a->dx, in.g0x, N, in.ldx, in.ox, HP) && gaps_kept(a->ddt, in.g0dt, N, in.lddt, in.odt, H) &&
               gaps_kept(a->dbc, in.g0bc, N, in.ldbc, bo, 2 * G * S);
    check(gaps, "ssd_bwd leaves the gaps of dx, ddt, dB|dC rows untouched", 0, 0);
  }
  for (int c = 0; c < 4; c++) free_ssd(&o[c]);
  free(in.x), free(in.dt), free(in.dtb), free(in.Al), free(in.bc), free(in.Dp), free(in.dy);
  free(in.g0x), free(in.g0dt), free(in.g0dtb), free(in.g0A), free(in.g0bc), free(in.g0D);
  free(st.x), free(st.dt), free(st.dtb), free(st.Al), free(st.bm), free(st.Dp), free((void *)st.R);
  free(yref), free(hs);
}

/* seg (B*T): documents of sample b start at the listed positions */
static int32_t *mk_seg(int64_t B, int64_t T, const int64_t *starts, int64_t nstarts, int64_t per_b) {
  int32_t *s = malloc((size_t)(B * T) * sizeof(int32_t));
  for (int64_t b = 0; b < B; b++) {
    int64_t cur = 0;
    for (int64_t t = 0; t < T; t++) {
      for (int64_t k = 0; k < per_b && b * per_b + k < nstarts; k++)
        if (starts[b * per_b + k] == t) cur = t;
      s[b * T + t] = (int32_t)cur;
    }
  }
  return s;
}

int main(void) {
  test_conv(1, 2, 7, NULL);
  test_conv(0, 2, 7, NULL);
  test_silu_gate();
  test_relu2();
  test_scan(2, 7, 3, 4, 1, NULL);    /* T not a multiple of 3; D < / > threads */
  test_scan(1, 10, 1, 5, 1, NULL);   /* one channel: idle threads still reduce */
  test_scan(3, 50, 37, 16, 0, NULL); /* realistic S: vectorised path, many chunks */
  {
    /* Mamba-2: sample 0 has documents at 0, 4 (mid-chunk for chunk 3) and
     * 9 (one step), sample 1 at 0 and 6 (a chunk start: the checkpoint is
     * the state before the reset) */
    const int64_t st2[6] = {0, 4, 9, 0, 6, 6}, st3[6] = {0, 17, 30, 0, 1, 45};
    int32_t *seg2 = mk_seg(2, 11, st2, 6, 3), *seg3 = mk_seg(2, 50, st3, 6, 3);
    test_ssd(2, 11, 4, 5, 2, 3, seg2, 0.25f, 2.0f, 1);    /* G > 1, resets, the clamp bites at both ends */
    test_ssd(1, 10, 3, 7, 1, 5, NULL, 0.0f, INFINITY, 1); /* G = 1, HF's default limit, dt > 20 */
    test_ssd(2, 50, 6, 16, 3, 16, seg3, 0.01f, 8.0f, 0);  /* vectorised sizes, many chunks */
    free(seg2);
    free(seg3);
  }
  {
    /* Mamba (v1) resets. The conv (K = 4): sample 0 has documents at 0, 5
     * (two steps: shorter than K) and 7, sample 1 at 0 and 6. The scan
     * (chunk 3 in the checks): sample 0 at 0, 4 (mid-chunk) and 9 (a chunk
     * start: the checkpoint is the state before the reset), sample 1 at 0
     * and 7 (mid-chunk); at 50 steps also a one-step document (sample 1's
     * first) and starts at a chunk start for chunk 3 and 8 (24). */
    const int64_t sc[6] = {0, 5, 7, 0, 6, 6}, ss[6] = {0, 4, 9, 0, 7, 7}, sl[9] = {0, 17, 30, 0, 1, 45, 0, 24, 24};
    int32_t *segc = mk_seg(2, 12, sc, 6, 3), *segs = mk_seg(2, 13, ss, 6, 3), *segl = mk_seg(3, 50, sl, 9, 3);
    test_conv(1, 2, 12, segc);
    test_conv(0, 2, 12, segc);
    test_conv_docs(2, 12, segc);
    test_scan(2, 13, 3, 4, 1, segs);
    test_scan(3, 50, 37, 16, 0, segl);
    test_scan_docs(2, 13, 3, 4, 3, segs);
    test_scan_docs(3, 50, 37, 16, 3, segl); /* several channel blocks and threads; documents of 1 step */
    test_scan_docs(3, 50, 37, 16, 8, segl);
    free(segc), free(segs), free(segl);
  }
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
