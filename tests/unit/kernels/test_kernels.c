/* tests/unit/kernels/test_kernels.c — the CPU backend's core ops against independent
 * double-precision reference implementations written here (forwards), and
 * every backward against central finite differences of those references
 * (L = sum(out * R) for a random R). Every backward also runs once more on
 * gradient buffers pre-filled with random values, which must come out as
 * pre-fill + gradient ("backward ADDS into its outputs").
 * Covers GQA, sliding windows, hd 8/16, T not a multiple of the attention
 * tile, the chunked LM head with ignored targets, one- and two-thread
 * contexts, and document masking (RoPE positions restarting per document,
 * block-diagonal causal attention: rope and attention with per-token
 * document starts), and the vocabulary-parallel ops (slices of a padded vocabulary,
 * combined here like the TP group would, against the whole-vocabulary ops
 * and by finite differences), and the mixture-of-experts ops (routing with
 * an idle expert, renormalised or not; permutation; weighted combine).
 * Prints one line per check; ends with
 * "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/kernels.h"

static int g_pass, g_fail;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static double rnd_unif(void) { return (double)(sl_splitmix64(&g_rng) >> 11) / 9007199254740992.0; }
static float rnd_sym(float a) { return (float)((2.0 * rnd_unif() - 1.0) * a); }

static float *fvec(int64_t n, float a) {
  float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) x[i] = rnd_sym(a);
  return x;
}
static double *dvec(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static double *to_d(const float *x, int64_t n) {
  double *d = dvec(n);
  for (int64_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
static float *fcopy(const float *x, int64_t n) {
  float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  memcpy(y, x, (size_t)n * sizeof(float));
  return y;
}

static void report(const char *name, double err, double tol) {
  int ok = err <= tol; /* NaN fails */
  printf("%-4s %-58s max_err %.3e tol %.1e\n", ok ? "ok" : "FAIL", name, err, tol);
  if (ok) g_pass++;
  else g_fail++;
}

/* max |a - r| / max(max |r|, floor) */
static double rel_err(const float *a, const double *r, int64_t n, double floor) {
  double m = floor, e = 0.0;
  for (int64_t i = 0; i < n; i++) m = fabs(r[i]) > m ? fabs(r[i]) : m;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - r[i]);
    if (!(d <= e)) e = d; /* propagates NaN */
  }
  return e / m;
}

/* ---- finite differences ------------------------------------------------- */
typedef double (*loss_fn)(void *st);

/* Central differences of f wrt up to `samples` coordinates of p (double
 * array f reads), against the analytic gradient g (n). Error relative to
 * the largest gradient magnitude seen. */
static void fd_check(const char *name, double *p, const float *g, int64_t n, loss_fn f, void *st, int samples,
                     double tol) {
  const double h = 1e-5;
  double emax = 0.0, gmax = 1e-12;
  for (int64_t i = 0; i < n; i++) gmax = fabs(g[i]) > gmax ? fabs(g[i]) : gmax;
  int all = n <= samples;
  int cnt = all ? (int)n : samples;
  for (int s = 0; s < cnt; s++) {
    int64_t k = all ? s : (s == 0 ? 0 : s == 1 ? n - 1 : (int64_t)(sl_splitmix64(&g_rng) % (uint64_t)n));
    double save = p[k];
    p[k] = save + h;
    double lp = f(st);
    p[k] = save - h;
    double lm = f(st);
    p[k] = save;
    double num = (lp - lm) / (2 * h);
    gmax = fabs(num) > gmax ? fabs(num) : gmax;
    double d = fabs(num - (double)g[k]);
    if (!(d <= emax)) emax = d;
  }
  char buf[160];
  snprintf(buf, sizeof buf, "%s (fd, %d coords)", name, cnt);
  report(buf, emax / gmax, tol);
}

/* prefill: returns a random buffer and a saved copy for later subtraction */
static float *prefill(int64_t n, float **saved) {
  float *g = fvec(n, 1.0f);
  *saved = fcopy(g, n);
  return g;
}
/* "Backward ADDS": g (the same backward run on the pre-filled buffer) must
 * equal saved (the pre-fill) + gz (the backward run on zeros), up to fp32
 * rounding of the additions (GEMMs may add in several K blocks). */
static void adds_check(const char *name, const float *g, const float *saved, const float *gz, int64_t n) {
  double e = 0.0, m = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)g[i] - ((double)saved[i] + (double)gz[i]));
    if (!(d <= e)) e = d;
    m = fmax(m, fabs(saved[i]) + fabs(gz[i]));
  }
  char buf[160];
  snprintf(buf, sizeof buf, "%s adds into prefilled output", name);
  report(buf, e / m, 1e-5);
}
static float *zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static double dot_r(const double *o, const double *R, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += o[i] * R[i];
  return s;
}

/* ---- embedding ------------------------------------------------------------ */
static void test_embedding(const sl_ops *ops, sl_kctx *ctx) {
  int64_t N = 300, C = 24, V = 17; /* repeated tokens */
  int32_t tok[300];
  for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)(sl_splitmix64(&g_rng) % V);
  float *wte = fvec(V * C, 1.0f), *out = fvec(N * C, 1.0f);
  ops->embedding_fwd(ctx, out, tok, wte, N, C);
  double *ref = dvec(N * C);
  for (int64_t i = 0; i < N; i++)
    for (int64_t c = 0; c < C; c++) ref[i * C + c] = wte[tok[i] * C + c];
  report("embedding_fwd vs gather", rel_err(out, ref, N * C, 1.0), 0.0);
  float *dout = fvec(N * C, 1.0f), *sv;
  float *dwte = prefill(V * C, &sv);
  ops->embedding_bwd(ctx, dwte, dout, tok, N, C);
  double *dref = dvec(V * C);
  for (int64_t i = 0; i < V * C; i++) dref[i] = sv[i];
  for (int64_t i = 0; i < N; i++)
    for (int64_t c = 0; c < C; c++) dref[tok[i] * C + c] += dout[i * C + c];
  report("embedding_bwd vs double scatter (prefilled)", rel_err(dwte, dref, V * C, 1.0), 2e-6);
  free(wte);
  free(out);
  free(ref);
  free(dout);
  free(sv);
  free(dwte);
  free(dref);
}

/* ---- RMSNorm -------------------------------------------------------------- */
typedef struct {
  double *x, *w, *R;
  int64_t N, C;
  double eps;
  double *o;
} rms_st;
static void rms_ref(double *o, const double *x, const double *w, int64_t N, int64_t C, double eps) {
  for (int64_t i = 0; i < N; i++) {
    double ss = 0;
    for (int64_t j = 0; j < C; j++) ss += x[i * C + j] * x[i * C + j];
    double r = 1.0 / sqrt(ss / C + eps);
    for (int64_t j = 0; j < C; j++) o[i * C + j] = w[j] * x[i * C + j] * r;
  }
}
static double rms_L(void *p) {
  rms_st *s = p;
  rms_ref(s->o, s->x, s->w, s->N, s->C, s->eps);
  return dot_r(s->o, s->R, s->N * s->C);
}
static void test_rmsnorm(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t C) {
  float eps = 1e-5f;
  float *x = fvec(N * C, 2.0f), *w = fvec(C, 1.5f), *R = fvec(N * C, 1.0f);
  float *out = malloc(N * C * 4), *rstd = malloc(N * 4);
  ops->rmsnorm_fwd(ctx, out, rstd, x, w, N, C, C, eps);
  rms_st s = {to_d(x, N * C), to_d(w, C), to_d(R, N * C), N, C, eps, dvec(N * C)};
  rms_ref(s.o, s.x, s.w, N, C, eps);
  char nm[128];
  snprintf(nm, sizeof nm, "rmsnorm_fwd N=%lld C=%lld vs double", (long long)N, (long long)C);
  report(nm, rel_err(out, s.o, N * C, 1e-3), 2e-6);
  float *sx, *sw, *px = prefill(N * C, &sx), *pw = prefill(C, &sw);
  float *dx = zeros(N * C), *dw = zeros(C);
  ops->rmsnorm_bwd(ctx, dx, dw, R, x, w, rstd, N, C, C);
  ops->rmsnorm_bwd(ctx, px, pw, R, x, w, rstd, N, C, C);
  adds_check("rmsnorm_bwd dinp", px, sx, dx, N * C);
  adds_check("rmsnorm_bwd dw", pw, sw, dw, C);
  free(px);
  free(pw);
  snprintf(nm, sizeof nm, "rmsnorm_bwd dinp C=%lld", (long long)C);
  fd_check(nm, s.x, dx, N * C, rms_L, &s, 200, 1e-5);
  snprintf(nm, sizeof nm, "rmsnorm_bwd dw C=%lld", (long long)C);
  fd_check(nm, s.w, dw, C, rms_L, &s, 200, 1e-5);
  free(x);
  free(w);
  free(R);
  free(out);
  free(rstd);
  free(sx);
  free(sw);
  free(dx);
  free(dw);
  free(s.x);
  free(s.w);
  free(s.R);
  free(s.o);
}

/* The split-row RMSNorm (rmsnorm_rowsum, rmsnorm_fwd_sum, rmsnorm_bwd_sum:
 * Mamba-2's gated norm when a group spans P TP ranks): each row's C
 * channels in P parts of C / P (rows at stride C, as one rank's slice is a
 * column block), the parts' sums added as the TP sum does, against the
 * whole-row rmsnorm_fwd / _bwd (the same arithmetic except the sums' float
 * rounding: a few ulps); P = 1 too. Negative control: each part normalised
 * by its own sums (what a missing TP sum gives) is far off. */
static void test_rmsnorm_split(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t C, int64_t P) {
  float eps = 1e-5f;
  int64_t c = C / P;
  float *x = fvec(N * C, 2.0f), *w = fvec(C, 1.5f), *R = fvec(N * C, 1.0f);
  float *out = zeros(N * C), *rstd = zeros(N), *dx = zeros(N * C), *dw = zeros(C);
  float *po = zeros(N * C), *prs = zeros(N), *pdx = zeros(N * C), *pdw = zeros(C), *lo = zeros(N * C);
  float *ss = zeros(N), *dots = zeros(N), *part = zeros(N), *lrs = zeros(N);
  ops->rmsnorm_fwd(ctx, out, rstd, x, w, N, C, C, eps);
  ops->rmsnorm_bwd(ctx, dx, dw, R, x, w, rstd, N, C, C);
  for (int64_t q = 0; q < P; q++) {
    ops->rmsnorm_rowsum(ctx, part, x + q * c, x + q * c, NULL, N, c, C);
    for (int64_t i = 0; i < N; i++) ss[i] += part[i];
    ops->rmsnorm_fwd_sum(ctx, lo + q * c, lrs, x + q * c, w + q * c, part, N, c, C, C, eps); /* the control */
  }
  for (int64_t q = 0; q < P; q++) ops->rmsnorm_fwd_sum(ctx, po + q * c, prs, x + q * c, w + q * c, ss, N, c, C, C, eps);
  for (int64_t q = 0; q < P; q++) {
    ops->rmsnorm_rowsum(ctx, part, R + q * c, x + q * c, w + q * c, N, c, C);
    for (int64_t i = 0; i < N; i++) dots[i] += part[i];
  }
  for (int64_t q = 0; q < P; q++) {
    ops->rmsnorm_bwd_sum(ctx, pdx + q * c, R + q * c, x + q * c, w + q * c, prs, dots, N, c, C, C);
    ops->rmsnorm_bwd(ctx, NULL, pdw + q * c, R + q * c, x + q * c, w + q * c, prs, N, c, C);
  }
  double *d_out = to_d(out, N * C), *d_rs = to_d(rstd, N), *d_dx = to_d(dx, N * C), *d_dw = to_d(dw, C);
  char nm[128];
  snprintf(nm, sizeof nm, "rmsnorm split in %lld: out vs whole row", (long long)P);
  report(nm, rel_err(po, d_out, N * C, 1e-3), 2e-6);
  snprintf(nm, sizeof nm, "rmsnorm split in %lld: rstd vs whole row", (long long)P);
  report(nm, rel_err(prs, d_rs, N, 1e-3), 2e-6);
  snprintf(nm, sizeof nm, "rmsnorm split in %lld: dinp vs whole row", (long long)P);
  report(nm, rel_err(pdx, d_dx, N * C, 1e-3), 2e-6);
  snprintf(nm, sizeof nm, "rmsnorm split in %lld: dw vs whole row", (long long)P);
  report(nm, rel_err(pdw, d_dw, C, 1e-3), 2e-6);
  if (P > 1) {
    double e = rel_err(lo, d_out, N * C, 1e-3);
    snprintf(nm, sizeof nm, "rmsnorm split in %lld: control, parts' own sums (must be > 1e-2)", (long long)P);
    report(nm, e > 1e-2 ? 0.0 : 1.0 - e, 0.0);
    printf("     (the control's error: %.3e)\n", e);
  }
  free(x), free(w), free(R), free(out), free(rstd), free(dx), free(dw), free(po), free(prs), free(pdx), free(pdw);
  free(lo), free(ss), free(dots), free(part), free(lrs), free(d_out), free(d_rs), free(d_dx), free(d_dw);
}

/* rmsnorm over rows at a stride ld > C (rows inside a wider buffer, as a
 * per-head norm reads one head of each packed qkv row): the same bits as the
 * packed (N, C) op on the gathered rows; the elements between rows are
 * neither read (NaN there) nor written. The figure is the number of
 * elements whose bits differ. */
static int64_t bits_diff(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}
/* rows r of the packed (N, C) src to dst + r * ld */
static void to_rows(float *dst, const float *src, int64_t N, int64_t C, int64_t ld) {
  for (int64_t r = 0; r < N; r++) memcpy(dst + r * ld, src + r * C, (size_t)C * 4);
}
static void test_rmsnorm_strided(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t C, int64_t ld) {
  float eps = 1e-5f;
  float *x = fvec(N * C, 2.0f), *w = fvec(C, 1.5f), *R = fvec(N * C, 1.0f), *g0 = fvec(N * C, 1.0f);
  float *out = zeros(N * C), *rstd = zeros(N), *dx = fcopy(g0, N * C), *dw = fvec(C, 1.0f), *dw_s = fcopy(dw, C);
  float *xs = malloc((size_t)(N * ld) * 4), *Rs = malloc((size_t)(N * ld) * 4), *os = malloc((size_t)(N * ld) * 4);
  float *dxs = malloc((size_t)(N * ld) * 4), *rstd_s = zeros(N);
  float *pad = fvec(N * ld, 3.0f); /* what the gaps of the outputs hold before and must hold after */
  for (int64_t i = 0; i < N * ld; i++) {
    xs[i] = Rs[i] = NAN;
    os[i] = dxs[i] = pad[i];
  }
  to_rows(xs, x, N, C, ld);
  to_rows(Rs, R, N, C, ld);
  to_rows(dxs, g0, N, C, ld);
  ops->rmsnorm_fwd(ctx, out, rstd, x, w, N, C, C, eps);
  ops->rmsnorm_fwd(ctx, os, rstd_s, xs, w, N, C, ld, eps);
  ops->rmsnorm_bwd(ctx, dx, dw, R, x, w, rstd, N, C, C);
  ops->rmsnorm_bwd(ctx, dxs, dw_s, Rs, xs, w, rstd_s, N, C, ld);
  int64_t d_out = 0, d_dx = 0, d_gap = 0;
  for (int64_t r = 0; r < N; r++) {
    d_out += bits_diff(os + r * ld, out + r * C, C);
    d_dx += bits_diff(dxs + r * ld, dx + r * C, C);
    d_gap +=
        bits_diff(os + r * ld + C, pad + r * ld + C, ld - C) + bits_diff(dxs + r * ld + C, pad + r * ld + C, ld - C);
  }
  char nm[128];
  snprintf(nm, sizeof nm, "rmsnorm_fwd ld=%lld N=%lld C=%lld out vs packed (bitwise)", (long long)ld, (long long)N,
           (long long)C);
  report(nm, (double)d_out, 0.0);
  report("rmsnorm_fwd strided rstd vs packed (bitwise)", (double)bits_diff(rstd_s, rstd, N), 0.0);
  report("rmsnorm_bwd strided dinp vs packed (bitwise)", (double)d_dx, 0.0);
  report("rmsnorm_bwd strided dw vs packed (bitwise)", (double)bits_diff(dw_s, dw, C), 0.0);
  report("rmsnorm strided: gaps between rows untouched", (double)d_gap, 0.0);
  free(x), free(w), free(R), free(g0), free(out), free(rstd), free(dx), free(dw), free(dw_s);
  free(xs), free(Rs), free(os), free(dxs), free(rstd_s), free(pad);
}

/* The weightless norm (w NULL: Falcon-Mamba's dt, B, C norms), rows at a
 * stride ld >= C: the same bits as the weighted op with w = 1 on packed
 * rows (1 * v is exact), no dw written, and its dinp against central
 * differences of the double reference with w = 1. */
static void test_rmsnorm_weightless(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t C, int64_t ld) {
  float eps = 1e-6f;
  float *x = fvec(N * C, 2.0f), *R = fvec(N * C, 1.0f), *one = malloc((size_t)C * 4), *dw = zeros(C);
  float *out = zeros(N * C), *rstd = zeros(N), *dx = zeros(N * C), *dxp = zeros(N * C);
  float *xs = fvec(N * ld, 1.0f), *Rs = fvec(N * ld, 1.0f), *os = zeros(N * ld), *dxs = zeros(N * ld);
  float *rstd_s = zeros(N);
  for (int64_t j = 0; j < C; j++) one[j] = 1.0f;
  to_rows(xs, x, N, C, ld);
  to_rows(Rs, R, N, C, ld);
  ops->rmsnorm_fwd(ctx, out, rstd, x, one, N, C, C, eps);
  ops->rmsnorm_fwd(ctx, os, rstd_s, xs, NULL, N, C, ld, eps);
  ops->rmsnorm_bwd(ctx, dx, dw, R, x, one, rstd, N, C, C);
  ops->rmsnorm_bwd(ctx, dxs, NULL, Rs, xs, NULL, rstd_s, N, C, ld);
  ops->rmsnorm_bwd(ctx, dxp, NULL, R, x, NULL, rstd, N, C, C);
  int64_t d_out = 0, d_dx = 0;
  for (int64_t r = 0; r < N; r++) {
    d_out += bits_diff(os + r * ld, out + r * C, C);
    d_dx += bits_diff(dxs + r * ld, dx + r * C, C);
  }
  char nm[128];
  snprintf(nm, sizeof nm, "rmsnorm_fwd weightless ld=%lld C=%lld vs w = 1 packed (bitwise)", (long long)ld,
           (long long)C);
  report(nm, (double)(d_out + bits_diff(rstd_s, rstd, N)), 0.0);
  report("rmsnorm_bwd weightless dinp vs w = 1 packed (bitwise)", (double)d_dx, 0.0);
  rms_st st = {to_d(x, N * C), to_d(one, C), to_d(R, N * C), N, C, eps, dvec(N * C)};
  snprintf(nm, sizeof nm, "rmsnorm_bwd weightless dinp C=%lld", (long long)C);
  fd_check(nm, st.x, dxp, N * C, rms_L, &st, 200, 1e-5);
  free(x), free(R), free(one), free(dw), free(out), free(rstd), free(dx), free(dxp);
  free(xs), free(Rs), free(os), free(dxs), free(rstd_s), free(st.x), free(st.w), free(st.R), free(st.o);
}

/* ---- linear --------------------------------------------------------------- */
typedef struct {
  double *x, *w, *b, *R, *o;
  int64_t N, IC, OC;
} lin_st;
static void lin_ref(double *o, const double *x, const double *w, const double *b, int64_t N, int64_t IC, int64_t OC) {
  for (int64_t i = 0; i < N; i++)
    for (int64_t k = 0; k < OC; k++) {
      double s = b ? b[k] : 0.0;
      for (int64_t j = 0; j < IC; j++) s += x[i * IC + j] * w[k * IC + j];
      o[i * OC + k] = s;
    }
}
static double lin_L(void *p) {
  lin_st *s = p;
  lin_ref(s->o, s->x, s->w, s->b, s->N, s->IC, s->OC);
  return dot_r(s->o, s->R, s->N * s->OC);
}
static void test_linear(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t IC, int64_t OC, int bias) {
  float *x = fvec(N * IC, 1.0f), *w = fvec(OC * IC, 0.5f), *b = bias ? fvec(OC, 1.0f) : NULL;
  float *R = fvec(N * OC, 1.0f), *out = fvec(N * OC, 9.0f);
  ops->linear_fwd(ctx, out, x, w, b, N, IC, OC);
  lin_st s = {to_d(x, N * IC), to_d(w, OC * IC), bias ? to_d(b, OC) : NULL, to_d(R, N * OC), dvec(N * OC), N, IC, OC};
  lin_ref(s.o, s.x, s.w, s.b, N, IC, OC);
  char nm[128];
  snprintf(nm, sizeof nm, "linear_fwd %lldx%lldx%lld bias=%d vs double", (long long)N, (long long)IC, (long long)OC,
           bias);
  report(nm, rel_err(out, s.o, N * OC, 1e-3), 2e-6);
  float *sx, *sw, *sb = NULL;
  float *px = prefill(N * IC, &sx), *pw = prefill(OC * IC, &sw), *pb = bias ? prefill(OC, &sb) : NULL;
  float *dx = zeros(N * IC), *dw = zeros(OC * IC), *db = bias ? zeros(OC) : NULL;
  ops->linear_bwd(ctx, dx, dw, db, R, x, w, N, IC, OC);
  ops->linear_bwd(ctx, px, pw, pb, R, x, w, N, IC, OC);
  adds_check("linear_bwd dinp", px, sx, dx, N * IC);
  adds_check("linear_bwd dw", pw, sw, dw, OC * IC);
  if (bias) adds_check("linear_bwd db", pb, sb, db, OC);
  free(px);
  free(pw);
  free(pb);
  snprintf(nm, sizeof nm, "linear_bwd dinp %lldx%lldx%lld", (long long)N, (long long)IC, (long long)OC);
  fd_check(nm, s.x, dx, N * IC, lin_L, &s, 100, 1e-5);
  snprintf(nm, sizeof nm, "linear_bwd dw %lldx%lldx%lld", (long long)N, (long long)IC, (long long)OC);
  fd_check(nm, s.w, dw, OC * IC, lin_L, &s, 100, 1e-5);
  if (bias) {
    fd_check("linear_bwd db", s.b, db, OC, lin_L, &s, 100, 1e-5);
  }
  /* NULL outputs are skipped; dw alone must still be right */
  float *dw2 = calloc(OC * IC, 4);
  ops->linear_bwd(ctx, NULL, dw2, NULL, R, x, w, N, IC, OC);
  double e = 0;
  for (int64_t i = 0; i < OC * IC; i++) e = fmax(e, fabs(dw2[i] - dw[i]));
  report("linear_bwd dinp=NULL db=NULL: dw unchanged", e, 1e-5);
  free(x);
  free(w);
  free(b);
  free(R);
  free(out);
  free(sx);
  free(sw);
  free(sb);
  free(dx);
  free(dw);
  free(db);
  free(dw2);
  free(s.x);
  free(s.w);
  free(s.b);
  free(s.R);
  free(s.o);
}

/* Sizes where the backend splits GEMMs across threads (along M and along
 * N): forward and backward against double formulas (semantics are already
 * pinned by the finite-difference checks above). */
static void test_linear_big(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t IC, int64_t OC) {
  float *x = fvec(N * IC, 1.0f), *w = fvec(OC * IC, 0.5f), *b = fvec(OC, 1.0f);
  float *dy = fvec(N * OC, 1.0f), *out = fvec(N * OC, 9.0f);
  ops->linear_fwd(ctx, out, x, w, b, N, IC, OC);
  double *o = dvec(N * OC), *dx = dvec(N * IC), *dw = dvec(OC * IC), *db = dvec(OC);
  for (int64_t i = 0; i < N; i++)
    for (int64_t k = 0; k < OC; k++) {
      double s = b[k];
      for (int64_t j = 0; j < IC; j++) s += (double)x[i * IC + j] * w[k * IC + j];
      o[i * OC + k] = s;
      db[k] += dy[i * OC + k];
      for (int64_t j = 0; j < IC; j++) {
        dx[i * IC + j] += (double)dy[i * OC + k] * w[k * IC + j];
        dw[k * IC + j] += (double)dy[i * OC + k] * x[i * IC + j];
      }
    }
  char nm[128];
  snprintf(nm, sizeof nm, "linear_fwd %lldx%lldx%lld (split gemm) vs double", (long long)N, (long long)IC,
           (long long)OC);
  report(nm, rel_err(out, o, N * OC, 1.0), 1e-5);
  float *gx = zeros(N * IC), *gw = zeros(OC * IC), *gb = zeros(OC);
  ops->linear_bwd(ctx, gx, gw, gb, dy, x, w, N, IC, OC);
  snprintf(nm, sizeof nm, "linear_bwd %lldx%lldx%lld dinp vs double", (long long)N, (long long)IC, (long long)OC);
  report(nm, rel_err(gx, dx, N * IC, 1.0), 1e-5);
  snprintf(nm, sizeof nm, "linear_bwd %lldx%lldx%lld dw vs double", (long long)N, (long long)IC, (long long)OC);
  report(nm, rel_err(gw, dw, OC * IC, 1.0), 1e-5);
  snprintf(nm, sizeof nm, "linear_bwd %lldx%lldx%lld db vs double", (long long)N, (long long)IC, (long long)OC);
  report(nm, rel_err(gb, db, OC, 1.0), 1e-5);
  free(x);
  free(w);
  free(b);
  free(dy);
  free(out);
  free(o);
  free(dx);
  free(dw);
  free(db);
  free(gx);
  free(gw);
  free(gb);
}

/* ---- RoPE ----------------------------------------------------------------- */
typedef struct {
  double *x, *R, *o;
  int64_t B, T, nh, nkv, hd;
  const float *inv; /* (hd/2) inv_freq */
  const int32_t *seg;
} rope_st;
/* HF: inv_freq = 1/(base ** (arange(0,dim,2).float()/dim)) in fp32
 * (rope_inv below; what models/rope.c computes), freqs = t * inv_freq (fp32),
 * emb = cat(freqs, freqs),
 * out = x*cos(emb) + rotate_half(x)*sin(emb), rotate_half = cat(-x2, x1). */
/* seg (B*T) or NULL: token t's position is t - seg[t] (document masking). */
static float *rope_inv(int64_t hd, float theta) {
  float *inv = malloc((size_t)(hd / 2) * sizeof(float));
  for (int64_t i = 0; i < hd / 2; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
  return inv;
}
static void rope_ref(double *o, const double *x, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     const float *inv_freq, const int32_t *seg) {
  int64_t row = (nh + 2 * nkv) * hd, h2 = hd / 2;
  memcpy(o, x, (size_t)(B * T * row) * sizeof(double));
  double *rot = dvec(hd);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t h = 0; h < nh + nkv; h++) {
        const double *xi = x + (b * T + t) * row + h * hd;
        double *oi = o + (b * T + t) * row + h * hd;
        for (int64_t j = 0; j < hd; j++) rot[j] = j < h2 ? -xi[j + h2] : xi[j - h2];
        for (int64_t j = 0; j < hd; j++) {
          float inv = inv_freq[j % h2];
          float ang = (float)(t - (seg ? seg[b * T + t] : 0)) * inv;
          oi[j] = xi[j] * cos((double)ang) + rot[j] * sin((double)ang);
        }
      }
  free(rot);
}
static double rope_L(void *p) {
  rope_st *s = p;
  rope_ref(s->o, s->x, s->B, s->T, s->nh, s->nkv, s->hd, s->inv, s->seg);
  return dot_r(s->o, s->R, s->B * s->T * (s->nh + 2 * s->nkv) * s->hd);
}
static void test_rope(const sl_ops *ops, sl_kctx *ctx, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                      float theta, int scaled, const int32_t *seg) {
  int64_t n = B * T * (nh + 2 * nkv) * hd;
  float *x = fvec(n, 1.0f), *R = fvec(n, 1.0f), *y = fcopy(x, n);
  /* scaled: the upper half of the frequencies divided by 8 (a stand-in for a
   * rope_scaling rule): the kernel must rotate by the table, not by theta */
  float *inv = rope_inv(hd, theta);
  for (int64_t i = hd / 4; scaled && i < hd / 2; i++) inv[i] /= 8.0f;
  ops->rope_fwd(ctx, y, B, T, nh, nkv, hd, inv, seg);
  rope_st s = {to_d(x, n), to_d(R, n), dvec(n), B, T, nh, nkv, hd, inv, seg};
  rope_ref(s.o, s.x, B, T, nh, nkv, hd, inv, seg);
  char nm[128];
  snprintf(nm, sizeof nm, "rope_fwd%s B=%lld T=%lld nh=%lld nkv=%lld hd=%lld%s vs HF formula", seg ? " docs" : "",
           (long long)B, (long long)T, (long long)nh, (long long)nkv, (long long)hd, scaled ? " scaled" : "");
  report(nm, rel_err(y, s.o, n, 1.0), 2e-6);
  float *g = fcopy(R, n); /* rope_bwd is in place: dqkv := J^T dqkv */
  ops->rope_bwd(ctx, g, B, T, nh, nkv, hd, inv, seg);
  snprintf(nm, sizeof nm, "rope_bwd%s hd=%lld", seg ? " docs" : "", (long long)hd);
  fd_check(nm, s.x, g, n, rope_L, &s, 150, 1e-6);
  free(inv);
  free(x);
  free(R);
  free(y);
  free(g);
  free(s.x);
  free(s.R);
  free(s.o);
}

/* ---- attention ------------------------------------------------------------ */
typedef struct {
  double *qkv, *R, *o, *lse;
  int64_t B, T, nh, nkv, hd, win;
  const int32_t *seg;
  double cap; /* logit softcap (Gemma 2), 0: none */
} att_st;
/* Explicit full (T, T) score matrix per (b, h), softcapped (cap > 0: cap *
 * tanh(s / cap), as HF's Gemma 2 eager attention), masked, softmaxed. seg
 * (B*T) or NULL: query i also hides keys before its document start seg[i]. */
static void att_ref(double *o, double *lse, const double *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                    int64_t hd, int64_t win, const int32_t *seg, double cap) {
  int64_t row = (nh + 2 * nkv) * hd;
  double *S = dvec(T * T);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < nh; h++) {
      int64_t g = h / (nh / nkv);
      for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) {
          int vis = j <= i && (win <= 0 || i - j < win) && (!seg || j >= seg[b * T + i]);
          double s = 0;
          for (int64_t d = 0; d < hd; d++)
            s += qkv[(b * T + i) * row + h * hd + d] * qkv[(b * T + j) * row + (nh + g) * hd + d];
          s /= sqrt((double)hd);
          if (cap > 0) s = cap * tanh(s / cap);
          S[i * T + j] = vis ? s : -INFINITY;
        }
      for (int64_t i = 0; i < T; i++) {
        double m = -INFINITY, z = 0;
        for (int64_t j = 0; j < T; j++) m = fmax(m, S[i * T + j]);
        for (int64_t j = 0; j < T; j++) z += exp(S[i * T + j] - m);
        if (lse) lse[(b * nh + h) * T + i] = m + log(z);
        for (int64_t j = 0; j < T; j++) S[i * T + j] = exp(S[i * T + j] - m) / z; /* P */
        for (int64_t d = 0; d < hd; d++) {
          double acc = 0;
          for (int64_t j = 0; j < T; j++) acc += S[i * T + j] * qkv[(b * T + j) * row + (nh + nkv + g) * hd + d];
          o[(b * T + i) * nh * hd + h * hd + d] = acc;
        }
      }
    }
  free(S);
}
static double att_L(void *p) {
  att_st *s = p;
  att_ref(s->o, NULL, s->qkv, s->B, s->T, s->nh, s->nkv, s->hd, s->win, s->seg, s->cap);
  return dot_r(s->o, s->R, s->B * s->T * s->nh * s->hd);
}
static void test_attention(const sl_ops *ops, sl_kctx *ctx, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                           int64_t win, int samples, const int32_t *seg, float cap) {
  int64_t n = B * T * (nh + 2 * nkv) * hd, no = B * T * nh * hd;
  float *qkv = fvec(n, 1.5f), *R = fvec(no, 1.0f), *out = fvec(no, 9.0f), *lse = fvec(B * nh * T, 9.0f);
  ops->attention_fwd(ctx, out, lse, qkv, B, T, nh, nkv, hd, win, 1.0f / sqrtf((float)hd), seg, cap);
  att_st s = {to_d(qkv, n), to_d(R, no), dvec(no), dvec(B * nh * T), B, T, nh, nkv, hd, win, seg, cap};
  att_ref(s.o, s.lse, s.qkv, B, T, nh, nkv, hd, win, seg, cap);
  char nm[160], tag[128];
  snprintf(tag, sizeof tag, "%sB=%lld T=%lld nh=%lld nkv=%lld hd=%lld win=%lld cap=%g", seg ? "docs " : "",
           (long long)B, (long long)T, (long long)nh, (long long)nkv, (long long)hd, (long long)win, (double)cap);
  snprintf(nm, sizeof nm, "attention_fwd out %s", tag);
  report(nm, rel_err(out, s.o, no, 1e-3), 1e-5);
  snprintf(nm, sizeof nm, "attention_fwd lse %s", tag);
  report(nm, rel_err(lse, s.lse, B * nh * T, 1e-3), 1e-6);
  float *sv, *pg = prefill(n, &sv), *g = zeros(n);
  ops->attention_bwd(ctx, g, R, qkv, out, lse, B, T, nh, nkv, hd, win, 1.0f / sqrtf((float)hd), seg, cap);
  ops->attention_bwd(ctx, pg, R, qkv, out, lse, B, T, nh, nkv, hd, win, 1.0f / sqrtf((float)hd), seg, cap);
  snprintf(nm, sizeof nm, "attention_bwd %s", tag);
  adds_check(nm, pg, sv, g, n);
  free(pg);
  snprintf(nm, sizeof nm, "attention_bwd %s", tag);
  fd_check(nm, s.qkv, g, n, att_L, &s, samples, 2e-5);
  free(qkv);
  free(R);
  free(out);
  free(lse);
  free(sv);
  free(g);
  free(s.qkv);
  free(s.R);
  free(s.o);
  free(s.lse);
}

/* ---- SwiGLU, GeGLU (tanh-GELU) -------------------------------------------- */
typedef struct {
  double *gu, *R, *o;
  int64_t N, H;
  int gelu; /* 0: silu (swiglu), 1: tanh-approximated gelu (geglu) */
} sw_st;
static void sw_ref(double *o, const double *gu, int64_t N, int64_t H, int gelu) {
  const double k = sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < H; j++) {
      double g = gu[i * 2 * H + j], u = gu[i * 2 * H + H + j];
      double a = gelu ? 0.5 * g * (1.0 + tanh(k * (g + 0.044715 * g * g * g))) : g / (1.0 + exp(-g));
      o[i * H + j] = a * u;
    }
}
static double sw_L(void *p) {
  sw_st *s = p;
  sw_ref(s->o, s->gu, s->N, s->H, s->gelu);
  return dot_r(s->o, s->R, s->N * s->H);
}
static void test_glu(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t H, int gelu) {
  const char *nm[2][3] = {{"swiglu_fwd vs double", "swiglu_bwd", "swiglu_bwd"},
                          {"geglu_fwd vs double", "geglu_bwd", "geglu_bwd"}};
  void (*fwd)(sl_kctx *, float *, const float *, int64_t, int64_t) = gelu ? ops->geglu_fwd : ops->swiglu_fwd;
  void (*bwd)(sl_kctx *, float *, const float *, const float *, int64_t, int64_t) =
      gelu ? ops->geglu_bwd : ops->swiglu_bwd;
  float *gu = fvec(N * 2 * H, 6.0f), *R = fvec(N * H, 1.0f), *out = malloc(N * H * 4);
  gu[0] = -95.0f;
  gu[1] = 95.0f; /* saturated sigmoid / tanh */
  fwd(ctx, out, gu, N, H);
  sw_st s = {to_d(gu, N * 2 * H), to_d(R, N * H), dvec(N * H), N, H, gelu};
  sw_ref(s.o, s.gu, N, H, gelu);
  report(nm[gelu][0], rel_err(out, s.o, N * H, 1.0), 2e-6);
  float *sv, *pg = prefill(N * 2 * H, &sv), *g = zeros(N * 2 * H);
  bwd(ctx, g, R, gu, N, H);
  bwd(ctx, pg, R, gu, N, H);
  adds_check(nm[gelu][1], pg, sv, g, N * 2 * H);
  free(pg);
  fd_check(nm[gelu][2], s.gu, g, N * 2 * H, sw_L, &s, 300, 1e-5);
  free(gu);
  free(R);
  free(out);
  free(sv);
  free(g);
  free(s.gu);
  free(s.R);
  free(s.o);
}

/* ---- LM head + cross-entropy ---------------------------------------------- */
typedef struct {
  double *x, *w;
  const int32_t *t;
  int64_t N, C, V;
  double scale;
  double *lse, *loss;
  double cap; /* final-logit softcap (Gemma 2), 0: none */
} ce_st;
static double ce_ref(ce_st *s) {
  double L = 0;
  double *l = dvec(s->V);
  for (int64_t i = 0; i < s->N; i++) {
    double m = -INFINITY, z = 0;
    for (int64_t v = 0; v < s->V; v++) {
      double a = 0;
      for (int64_t c = 0; c < s->C; c++) a += s->x[i * s->C + c] * s->w[v * s->C + c];
      if (s->cap > 0) a = s->cap * tanh(a / s->cap);
      l[v] = a;
      m = fmax(m, a);
    }
    for (int64_t v = 0; v < s->V; v++) z += exp(l[v] - m);
    double lse = m + log(z), loss = s->t[i] >= 0 ? lse - l[s->t[i]] : 0.0;
    if (s->lse) s->lse[i] = lse;
    if (s->loss) s->loss[i] = loss;
    L += loss;
  }
  free(l);
  return L * s->scale;
}
static double ce_L(void *p) { return ce_ref(p); }
static void test_ce(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t C, int64_t V, int sx_n, int sw_n, float cap) {
  float *x = fvec(N * C, 1.0f), *w = fvec(V * C, 1.0f);
  int32_t *t = malloc(N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) t[i] = (i % 7 == 3) ? -1 : (int32_t)(sl_splitmix64(&g_rng) % V);
  t[N - 1] = (int32_t)(V - 1);
  float *loss = fvec(N, 9.0f), *lse = fvec(N, 9.0f);
  ops->lmhead_ce_fwd(ctx, loss, lse, x, w, t, N, C, V, cap);
  ce_st s = {to_d(x, N * C), to_d(w, V * C), t, N, C, V, 1.0 / (double)N, dvec(N), dvec(N), cap};
  ce_ref(&s);
  char nm[160], tag[96];
  snprintf(tag, sizeof tag, "N=%lld C=%lld V=%lld cap=%g", (long long)N, (long long)C, (long long)V, (double)cap);
  snprintf(nm, sizeof nm, "lmhead_ce_fwd losses (ignored rows = 0) %s", tag);
  report(nm, rel_err(loss, s.loss, N, 1.0), 2e-6);
  snprintf(nm, sizeof nm, "lmhead_ce_fwd lse %s", tag);
  report(nm, rel_err(lse, s.lse, N, 1.0), 2e-6);
  free(s.lse);
  free(s.loss);
  s.lse = s.loss = NULL;
  float *sx, *sw, *px = prefill(N * C, &sx), *pw = prefill(V * C, &sw);
  float *dx = zeros(N * C), *dw = zeros(V * C);
  ops->lmhead_ce_bwd(ctx, dx, dw, x, w, t, lse, (float)s.scale, N, C, V, cap);
  ops->lmhead_ce_bwd(ctx, px, pw, x, w, t, lse, (float)s.scale, N, C, V, cap);
  adds_check("lmhead_ce_bwd dx", px, sx, dx, N * C);
  adds_check("lmhead_ce_bwd dw", pw, sw, dw, V * C);
  free(px);
  free(pw);
  double e = 0;
  for (int64_t i = 0; i < N; i++)
    if (t[i] < 0)
      for (int64_t c = 0; c < C; c++) e = fmax(e, fabs(dx[i * C + c]));
  report("lmhead_ce_bwd: ignored rows get zero dx", e, 0.0);
  snprintf(nm, sizeof nm, "lmhead_ce_bwd dx %s", tag);
  fd_check(nm, s.x, dx, N * C, ce_L, &s, sx_n, 1e-5);
  snprintf(nm, sizeof nm, "lmhead_ce_bwd dw %s", tag);
  fd_check(nm, s.w, dw, V * C, ce_L, &s, sw_n, 1e-5);
  free(x);
  free(w);
  free(t);
  free(loss);
  free(lse);
  free(sx);
  free(sw);
  free(dx);
  free(dw);
  free(s.x);
  free(s.w);
}

/* ---- vocabulary parallelism ------------------------------------------------ */
/* V padded to a multiple of T: rank r holds rows [r Vl, r Vl + Vl), the first
 * *valid of them real. The T slices run one after the other on one context
 * and are combined here; padding rows hold NaN, so any read of one shows. */
static void vsplit(int64_t V, int64_t T, int64_t r, int64_t *v0, int64_t *Vl, int64_t *valid) {
  *Vl = (V + T - 1) / T;
  *v0 = r * *Vl;
  *valid = V - *v0 < 0 ? 0 : V - *v0 > *Vl ? *Vl : V - *v0;
}
/* (T Vl, C): the real rows of w (V, C), NaN padding */
static float *pad_rows(const float *w, int64_t V, int64_t C, int64_t T) {
  int64_t Vl = (V + T - 1) / T;
  float *p = malloc((size_t)(T * Vl * C) * sizeof(float));
  for (int64_t i = 0; i < T * Vl * C; i++) p[i] = i < V * C ? w[i] : NAN;
  return p;
}
static int32_t *rand_tokens(int64_t N, int64_t V, int ignored) {
  int32_t *t = malloc((size_t)N * sizeof(int32_t));
  for (int64_t i = 0; i < N; i++) t[i] = (ignored && i % 7 == 3) ? -1 : (int32_t)(sl_splitmix64(&g_rng) % (uint64_t)V);
  t[0] = 0;
  t[N - 1] = (int32_t)(V - 1);
  return t;
}

typedef struct {
  double *w;
  const int32_t *tok;
  const float *R;
  int64_t N, C;
} vemb_st;
static double vemb_L(void *p) { /* sum(embedding(w) * R) */
  vemb_st *s = p;
  double L = 0;
  for (int64_t i = 0; i < s->N; i++)
    for (int64_t c = 0; c < s->C; c++) L += s->w[s->tok[i] * s->C + c] * s->R[i * s->C + c];
  return L;
}
static void test_vocab_embedding(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t C, int64_t V, int64_t T) {
  int64_t v0, Vl, valid;
  vsplit(V, T, 0, &v0, &Vl, &valid);
  float *w = fvec(V * C, 1.0f), *wp = pad_rows(w, V, C, T), *R = fvec(N * C, 1.0f);
  int32_t *tok = rand_tokens(N, V, 0);
  float *ref = zeros(N * C), *sum = zeros(N * C), *out = fvec(N * C, 9.0f);
  ops->embedding_fwd(ctx, ref, tok, w, N, C);
  for (int64_t r = 0; r < T; r++) {
    vsplit(V, T, r, &v0, &Vl, &valid);
    ops->vocab_embedding_fwd(ctx, out, tok, wp + v0 * C, N, C, v0, Vl); /* overwrites out */
    for (int64_t i = 0; i < N * C; i++) sum[i] += out[i];
  }
  char nm[128], tag[64];
  snprintf(tag, sizeof tag, "N=%lld C=%lld V=%lld T=%lld", (long long)N, (long long)C, (long long)V, (long long)T);
  double *dref = to_d(ref, N * C);
  snprintf(nm, sizeof nm, "vocab_embedding_fwd sum of slices = embedding_fwd %s", tag);
  report(nm, rel_err(sum, dref, N * C, 1.0), 0.0);
  /* backward: slices of a prefilled padded gradient; padding rows untouched */
  float *sv, *dp = prefill(T * Vl * C, &sv), *dz = zeros(T * Vl * C), *dfull = zeros(V * C);
  for (int64_t r = 0; r < T; r++) {
    vsplit(V, T, r, &v0, &Vl, &valid);
    ops->vocab_embedding_bwd(ctx, dp + v0 * C, R, tok, N, C, v0, Vl);
    ops->vocab_embedding_bwd(ctx, dz + v0 * C, R, tok, N, C, v0, Vl);
  }
  adds_check("vocab_embedding_bwd", dp, sv, dz, T * Vl * C);
  double pad = 0;
  for (int64_t i = V * C; i < T * Vl * C; i++) pad = fmax(pad, fabs(dz[i]));
  snprintf(nm, sizeof nm, "vocab_embedding_bwd padding rows get no gradient %s", tag);
  report(nm, pad, 0.0);
  ops->embedding_bwd(ctx, dfull, R, tok, N, C);
  double *dd = to_d(dfull, V * C);
  snprintf(nm, sizeof nm, "vocab_embedding_bwd slices = embedding_bwd %s", tag);
  report(nm, rel_err(dz, dd, V * C, 1.0), 0.0);
  vemb_st s = {to_d(w, V * C), tok, R, N, C};
  snprintf(nm, sizeof nm, "vocab_embedding_bwd %s", tag);
  fd_check(nm, s.w, dz, V * C, vemb_L, &s, 200, 1e-6);
  free(w);
  free(wp);
  free(R);
  free(tok);
  free(ref);
  free(sum);
  free(out);
  free(dref);
  free(sv);
  free(dp);
  free(dz);
  free(dfull);
  free(dd);
  free(s.w);
}

/* Loss-parallel head over T slices vs lmhead_ce (same op table) and the
 * double reference; the backward by finite differences of the reference. */
static void test_lmhead_vp(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t C, int64_t V, int64_t T, int sx_n,
                           int sw_n, float cap) {
  int64_t v0, Vl, valid;
  vsplit(V, T, 0, &v0, &Vl, &valid);
  float *x = fvec(N * C, 1.0f), *w = fvec(V * C, 1.0f), *wp = pad_rows(w, V, C, T);
  int32_t *t = rand_tokens(N, V, 1);
  float *loss0 = zeros(N), *lse0 = zeros(N);
  ops->lmhead_ce_fwd(ctx, loss0, lse0, x, w, t, N, C, V, cap);
  float *lmax = zeros(T * N), *st = zeros(T * 2 * N), *gmax = zeros(N), *S = zeros(2 * N);
  for (int64_t r = 0; r < T; r++) {
    vsplit(V, T, r, &v0, &Vl, &valid);
    ops->lmhead_vp_fwd(ctx, lmax + r * N, st + r * 2 * N, x, wp + v0 * C, t, N, C, v0, Vl, valid, cap);
  }
  for (int64_t i = 0; i < N; i++) { /* the TP group's allreduce MAX */
    gmax[i] = -INFINITY;
    for (int64_t r = 0; r < T; r++) gmax[i] = fmaxf(gmax[i], lmax[r * N + i]);
  }
  for (int64_t r = 0; r < T; r++) ops->lmhead_vp_rescale(ctx, st + r * 2 * N, lmax + r * N, gmax, N);
  for (int64_t r = 0; r < T; r++) /* allreduce SUM */
    for (int64_t i = 0; i < 2 * N; i++) S[i] += st[r * 2 * N + i];
  float *loss = fvec(N, 9.0f), *lse = fvec(N, 9.0f);
  ops->lmhead_vp_loss(ctx, loss, lse, S, gmax, t, N);
  ce_st s = {to_d(x, N * C), to_d(w, V * C), t, N, C, V, 1.0 / (double)N, dvec(N), dvec(N), cap};
  ce_ref(&s);
  char nm[160], tag[96];
  snprintf(tag, sizeof tag, "N=%lld C=%lld V=%lld T=%lld cap=%g", (long long)N, (long long)C, (long long)V,
           (long long)T, (double)cap);
  double *d0 = to_d(loss0, N), *z0 = to_d(lse0, N);
  snprintf(nm, sizeof nm, "lmhead_vp losses = lmhead_ce_fwd %s", tag);
  report(nm, rel_err(loss, d0, N, 1.0), 1e-5);
  snprintf(nm, sizeof nm, "lmhead_vp lse = lmhead_ce_fwd %s", tag);
  report(nm, rel_err(lse, z0, N, 1.0), 1e-5);
  snprintf(nm, sizeof nm, "lmhead_vp losses vs double reference %s", tag);
  report(nm, rel_err(loss, s.loss, N, 1.0), 2e-6);
  free(s.lse);
  free(s.loss);
  s.lse = s.loss = NULL;
  /* backward: dx summed over the slices, dw slices into a padded gradient */
  float *dx0 = zeros(N * C), *dw0 = zeros(V * C), *dx = zeros(N * C), *dxr = zeros(N * C);
  float *dwp = zeros(T * Vl * C), *sx, *sw, *px = prefill(N * C, &sx), *pw = prefill(Vl * C, &sw);
  ops->lmhead_ce_bwd(ctx, dx0, dw0, x, w, t, lse0, (float)s.scale, N, C, V, cap);
  for (int64_t r = 0; r < T; r++) {
    vsplit(V, T, r, &v0, &Vl, &valid);
    memset(dxr, 0, (size_t)(N * C) * sizeof(float));
    ops->lmhead_vp_bwd(ctx, dxr, dwp + v0 * C, x, wp + v0 * C, t, lse, (float)s.scale, N, C, v0, Vl, valid, cap);
    for (int64_t i = 0; i < N * C; i++) dx[i] += dxr[i];
    if (r == T - 1) { /* the last slice, padding included, adds into prefilled buffers */
      ops->lmhead_vp_bwd(ctx, px, pw, x, wp + v0 * C, t, lse, (float)s.scale, N, C, v0, Vl, valid, cap);
      adds_check("lmhead_vp_bwd dx", px, sx, dxr, N * C);
      adds_check("lmhead_vp_bwd dw", pw, sw, dwp + v0 * C, Vl * C);
    }
  }
  double pad = 0, ign = 0;
  for (int64_t i = V * C; i < T * Vl * C; i++) pad = fmax(pad, fabs(dwp[i]));
  for (int64_t i = 0; i < N; i++)
    if (t[i] < 0)
      for (int64_t c = 0; c < C; c++) ign = fmax(ign, fabs(dx[i * C + c]));
  snprintf(nm, sizeof nm, "lmhead_vp_bwd padding rows get no gradient %s", tag);
  report(nm, pad, 0.0);
  report("lmhead_vp_bwd: ignored rows get zero dx", ign, 0.0);
  double *dd = to_d(dx0, N * C), *dwd = to_d(dw0, V * C);
  snprintf(nm, sizeof nm, "lmhead_vp_bwd dx (sum of slices) = lmhead_ce_bwd %s", tag);
  report(nm, rel_err(dx, dd, N * C, 1e-3), 1e-5);
  snprintf(nm, sizeof nm, "lmhead_vp_bwd dw (slices) = lmhead_ce_bwd %s", tag);
  report(nm, rel_err(dwp, dwd, V * C, 1e-3), 1e-5);
  snprintf(nm, sizeof nm, "lmhead_vp_bwd dx %s", tag);
  fd_check(nm, s.x, dx, N * C, ce_L, &s, sx_n, 1e-5);
  snprintf(nm, sizeof nm, "lmhead_vp_bwd dw %s", tag);
  fd_check(nm, s.w, dwp, V * C, ce_L, &s, sw_n, 1e-5);
  free(x);
  free(w);
  free(wp);
  free(t);
  free(loss0);
  free(lse0);
  free(lmax);
  free(st);
  free(gmax);
  free(S);
  free(loss);
  free(lse);
  free(s.x);
  free(s.w);
  free(d0);
  free(z0);
  free(dx0);
  free(dw0);
  free(dx);
  free(dxr);
  free(dwp);
  free(sx);
  free(sw);
  free(px);
  free(pw);
  free(dd);
  free(dwd);
}

/* ---- elementwise, reductions, bf16 ---------------------------------------- */
/* Independent bf16 oracle: the nearest of the two bracketing bf16 values
 * (computed in double), ties to the even mantissa. Finite inputs only. */
static uint16_t bf16_oracle(float f) {
  union {
    float f;
    uint32_t u;
  } a = {f};
  uint16_t lo = (uint16_t)(a.u >> 16), hi = (uint16_t)(lo + 1);
  union {
    uint32_t u;
    float f;
  } L = {(uint32_t)lo << 16}, H = {(uint32_t)hi << 16};
  double dl = fabs((double)f - (double)L.f), dh = fabs((double)H.f - (double)f);
  if ((hi & 0x7f80) == 0x7f80 && !((lo & 0x7f80) == 0x7f80)) {
    /* next is inf: the halfway point to 2^128 decides */
    double top = ldexp(1.0, 128);
    dh = fabs(top - (double)f);
  }
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}
static void test_elementwise(const sl_ops *ops, sl_kctx *ctx) {
  int64_t n = 100003;
  float *x = fvec(n, 3.0f), *y = fvec(n, 3.0f), *y0 = fcopy(y, n);
  ops->add_inplace(ctx, y, x, n);
  double e = 0;
  /* one IEEE float add / multiply per element: the same arithmetic as the
   * scalar loop below, so bit for bit (any other summation, an FMA, a
   * reassociation would show) */
  for (int64_t i = 0; i < n; i++) {
    volatile float want = y0[i] + x[i];
    e = fmax(e, fabs((double)y[i] - (double)want));
  }
  report("add_inplace vs float add (bitwise)", e, 0.0);
  /* scale_add: one fused multiply-add, the double result rounded once */
  const float sa[3][2] = {{48.0f, 0.0f}, {1.0f, 1.0f}, {-0.37f, 2.5f}};
  for (int c = 0; c < 3; c++) {
    float *z = fcopy(y, n);
    ops->scale_add(ctx, z, sa[c][0], sa[c][1], n);
    double ez = 0;
    for (int64_t i = 0; i < n; i++) {
      float want = (float)((double)sa[c][0] * (double)y[i] + (double)sa[c][1]);
      ez = fmax(ez, fabs((double)z[i] - (double)want));
    }
    char nm[96];
    snprintf(nm, sizeof nm, "scale_add alpha %g beta %g vs double rounded once (bitwise)", sa[c][0], sa[c][1]);
    report(nm, ez, 0.0);
    free(z);
  }
  { /* softcap: cap tanh(y / cap) against double */
    float *z = fcopy(y, n);
    ops->softcap(ctx, z, 2.0f, n);
    double ez = 0;
    for (int64_t i = 0; i < n; i++) ez = fmax(ez, fabs((double)z[i] - 2.0 * tanh((double)y[i] / 2.0)));
    report("softcap cap 2 vs double", ez, 2e-6); /* 1.98e-7 measured */
    free(z);
  }
  double ss = ops->sumsq(ctx, x, n), ref = 0;
  for (int64_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
  report("sumsq vs double (relative)", fabs(ss - ref) / ref, 1e-12);
  report("sumsq small n=5",
         fabs(ops->sumsq(ctx, x, 5) - (x[0] * (double)x[0] + x[1] * (double)x[1] + x[2] * (double)x[2] +
                                       x[3] * (double)x[3] + x[4] * (double)x[4])),
         1e-12);

  /* bf16: random values over many binades plus ties and specials */
  int64_t m = 70000;
  float *v = malloc(m * 4);
  for (int64_t i = 0; i < m; i++) v[i] = (float)ldexp(rnd_sym(1.0f), (int)(sl_splitmix64(&g_rng) % 200) - 100);
  v[0] = 1.0f + ldexpf(1.0f, -8);     /* tie -> 1.0 (even) */
  v[1] = 1.0f + 3 * ldexpf(1.0f, -8); /* tie -> 1 + 2^-6 (even) */
  v[2] = -(1.0f + ldexpf(1.0f, -8));
  v[3] = 3.3895e38f; /* rounds to inf */
  v[4] = 0.0f;
  v[5] = -0.0f;
  v[6] = 1e-40f; /* denormal */
  uint16_t *hb = malloc(m * 2);
  ops->f32_to_bf16(ctx, hb, v, m);
  int64_t bad = 0;
  for (int64_t i = 0; i < m; i++) bad += hb[i] != bf16_oracle(v[i]);
  report("f32_to_bf16 vs nearest-even oracle (mismatches)", (double)bad, 0);
  report("f32_to_bf16 ties: 1+2^-8 -> 0x3f80, 1+3*2^-8 -> 0x3f82",
         (double)((hb[0] != 0x3f80) + (hb[1] != 0x3f82) + (hb[2] != 0xbf80)), 0);
  float sp[3] = {INFINITY, -INFINITY, NAN};
  uint16_t hs[3];
  ops->f32_to_bf16(ctx, hs, sp, 3);
  report("f32_to_bf16 inf/-inf/NaN",
         (double)((hs[0] != 0x7f80) + (hs[1] != 0xff80) + !((hs[2] & 0x7f80) == 0x7f80 && (hs[2] & 0x7f))), 0);
  float *back = malloc(m * 4);
  ops->bf16_to_f32(ctx, back, hb, m);
  bad = 0;
  for (int64_t i = 0; i < m; i++) {
    union {
      uint32_t u;
      float f;
    } c = {(uint32_t)hb[i] << 16};
    bad += memcmp(&back[i], &c.f, 4) != 0;
  }
  report("bf16_to_f32 exact widening (mismatches)", (double)bad, 0);
  float *r = fcopy(v, m);
  sl_cpu_round_bf16(ctx, r, m); /* the bf16 compute wrappers' rounding (no op of the table) */
  bad = 0;
  for (int64_t i = 0; i < m; i++) bad += memcmp(&r[i], &back[i], 4) != 0;
  report("round_bf16 == bf16_to_f32(f32_to_bf16) (mismatches)", (double)bad, 0);
  free(x);
  free(y);
  free(y0);
  free(v);
  free(hb);
  free(back);
  free(r);
}

/* ---- mixture of experts: routing, permutation, combine ---------------------- */
typedef struct {
  double *lg, *R, *yp, *wts, *Ry, *gp; /* gp (E): a gradient on every probability (NULL: none) */
  const int32_t *sel, *pos;            /* sel: e, or -1 - e for a slot the capacity dropped (weight 0) */
  int64_t N, E, k, C;
  int mode;     /* SL_MOE_NORM | SL_MOE_SIGMOID */
  double zg;    /* + zg/2 * lse^2 a token (the z-loss's shape; 0: none; softmax only) */
  double scale; /* the routed scaling factor */
} moe_st;
/* A token's scores in double: the softmax (and *lse), or the sigmoid (SL_MOE_SIGMOID). */
static void moe_p_ref(double *p, double *lse, const double *lg, int64_t E, int mode) {
  if (mode & SL_MOE_SIGMOID) {
    for (int64_t e = 0; e < E; e++) p[e] = 1.0 / (1.0 + exp(-lg[e]));
    *lse = 0;
    return;
  }
  double mx = lg[0], sum = 0;
  for (int64_t e = 1; e < E; e++) mx = fmax(mx, lg[e]);
  for (int64_t e = 0; e < E; e++) sum += exp(lg[e] - mx);
  for (int64_t e = 0; e < E; e++) p[e] = exp(lg[e] - mx) / sum;
  *lse = mx + log(sum);
}
/* The k weights of token t from logits in double with the selection fixed
 * (a small perturbation does not change a top-k without near ties):
 * renormalised with SL_MOE_NORM (sigmoid: by the sum + 1e-20, as the op),
 * times scale. */
static void moe_w_ref(double *w, const double *lg, const int32_t *sel, int64_t E, int64_t k, int mode, double scale) {
  double p[64], lse, ws = 0;
  moe_p_ref(p, &lse, lg, E, mode);
  for (int64_t j = 0; j < k; j++) ws += w[j] = p[sel[j] < 0 ? -1 - sel[j] : sel[j]];
  if (mode & SL_MOE_SIGMOID) ws += 1e-20;
  for (int64_t j = 0; (mode & SL_MOE_NORM) && j < k; j++) w[j] /= ws;
  for (int64_t j = 0; j < k; j++) w[j] *= scale;
}
static double moe_route_L(void *p) {
  moe_st *s = p;
  double L = 0, w[64], pr[64], lse;
  for (int64_t t = 0; t < s->N; t++) {
    moe_w_ref(w, s->lg + t * s->E, s->sel + t * s->k, s->E, s->k, s->mode, s->scale);
    for (int64_t j = 0; j < s->k; j++) L += s->sel[t * s->k + j] < 0 ? 0 : w[j] * s->R[t * s->k + j];
    moe_p_ref(pr, &lse, s->lg + t * s->E, s->E, s->mode);
    for (int64_t e = 0; s->gp && e < s->E; e++) L += s->gp[e] * pr[e];
    L += 0.5 * s->zg * lse * lse;
  }
  return L;
}
/* L = sum over tokens of Ry . (sum_j wts_j * yp row pos[t*k + j]) */
static double moe_comb_L(void *p) {
  moe_st *s = p;
  double L = 0;
  for (int64_t t = 0; t < s->N; t++)
    for (int64_t j = 0; j < s->k; j++)
      for (int64_t c = 0; c < s->C; c++)
        L += s->wts[t * s->k + j] * s->yp[(int64_t)s->pos[t * s->k + j] * s->C + c] * s->Ry[t * s->C + c];
  return L;
}
/* route_fwd's scores (the softmax, or the sigmoid with SL_MOE_SIGMOID),
 * top-k (an idle expert: the last one's logits are far below, a zero-token
 * group; with the expert bias, its bias too), the weights (renormalised
 * with SL_MOE_NORM, times scale), grouping; route_bwd by finite
 * differences (with gp: the aux loss's gradient on every probability). */
static void test_moe_route(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t E, int64_t k, int mode, float scale,
                           int with_gp, int with_bias) {
  float *lg = fvec(N * E, 3.0f), *probs = malloc(N * E * 4), *wts = malloc(N * k * 4), *R = fvec(N * k, 1.0f);
  float *bias = with_bias ? fvec(E, 0.2f) : NULL;
  int32_t *sel = malloc(N * k * 4), *perm = malloc(N * k * 4), *pos = malloc(N * k * 4),
          *offs = malloc((2 * E + 1) * 4);
  for (int64_t t = 0; t < N; t++) lg[t * E + E - 1] = -40.0f;
  if (bias) bias[E - 1] = -1.0f; /* sigmoid: p_{E-1} ~ 4e-18, every other p + bias > 0.04 - 0.2 > -1 */
  ops->moe_route_fwd(ctx, probs, sel, wts, offs, perm, pos, NULL, lg, bias, N, E, k, mode, scale, 0);
  double perr = 0, werr = 0, w[64], pr[64], lse, *lgd = to_d(lg, N * E);
  int64_t bad = 0;
  for (int64_t t = 0; t < N; t++) {
    moe_p_ref(pr, &lse, lgd + t * E, E, mode);
    for (int64_t e = 0; e < E; e++) perr = fmax(perr, fabs(probs[t * E + e] - pr[e]));
    for (int64_t j = 0; j < k; j++) /* the j-th choice: exactly j logits (with a bias: scores p + bias) above it */
      for (int64_t e = 0, above = 0; e < E; e++, above = 0) {
        if (e != sel[t * k + j]) continue;
        for (int64_t f = 0; f < E; f++)
          above += bias ? probs[t * E + f] + bias[f] > probs[t * E + e] + bias[e] : lg[t * E + f] > lg[t * E + e];
        bad += above != j;
      }
    moe_w_ref(w, lgd + t * E, sel + t * k, E, k, mode, scale);
    for (int64_t j = 0; j < k; j++) werr = fmax(werr, fabs(wts[t * k + j] - w[j]) / scale);
  }
  for (int64_t e = 0; e < E; e++)
    for (int64_t r = offs[e]; r < offs[e + 1]; r++)
      bad += sel[perm[r]] != e || pos[perm[r]] != r || (r > offs[e] && perm[r] <= perm[r - 1]);
  bad += offs[0] != 0 || offs[E] != N * k || offs[E - 1] != offs[E]; /* the idle expert's group is empty */
  char nm[128], opt[64];
  snprintf(opt, sizeof opt, "%s%s, scale %g%s", mode & SL_MOE_SIGMOID ? "sigmoid" : "softmax",
           mode & SL_MOE_NORM ? " renormalised" : "", (double)scale, bias ? ", bias" : "");
  /* probs <= 1 and weights / scale <= 1: a few fp32 roundings (~6e-8 each) of values below 1; measured at most
   * 1.14e-7 (softmax renormalised, Haswell at 1 thread) over four core types at 1 and 2 threads: 2e-6 is 17x */
  snprintf(nm, sizeof nm, "moe_route_fwd probs, weights/scale vs double (%s)", opt);
  report(nm, fmax(perr, werr), 2e-6);
  snprintf(nm, sizeof nm, "moe_route_fwd top-k order, groups, inverse, idle expert (%s; mismatches)", opt);
  report(nm, (double)bad, 0);
  float *gp = with_gp ? fvec(E, 1.0f) : NULL; /* the load-balancing loss's gradient on every probability */
  moe_st s = {lgd, to_d(R, N * k), NULL, NULL, NULL, gp ? to_d(gp, E) : NULL, sel, pos, N, E, k, 0, mode, 0, scale};
  float *sv, *pg = prefill(N * E, &sv), *g = zeros(N * E);
  ops->moe_route_bwd(ctx, g, R, probs, sel, wts, gp, NULL, 0.0f, N, E, k, mode, scale);
  ops->moe_route_bwd(ctx, pg, R, probs, sel, wts, gp, NULL, 0.0f, N, E, k, mode, scale);
  adds_check("moe_route_bwd", pg, sv, g, N * E);
  snprintf(nm, sizeof nm, "moe_route_bwd (%s%s)", opt, gp ? ", + gp" : "");
  fd_check(nm, s.lg, g, N * E, moe_route_L, &s, 300, 1e-5);
  free(gp), free(s.gp), free(bias);
  free(lg), free(probs), free(wts), free(R), free(sel), free(perm), free(pos), free(offs), free(sv), free(pg);
  free(g), free(s.lg), free(s.R);
}
/* Hand-computed routing: the expert bias moves the selection, not the
 * weights; a capacity keeps an expert's largest weights (ties: earlier). */
static void test_moe_hand(const sl_ops *ops, sl_kctx *ctx) {
  float lg[16] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)}, bias[4] = {0, 0, 0.25f, 0}, p[16], w[8], lse[4];
  int32_t sel[8], perm[8], pos[8], offs[9];
  ops->moe_route_fwd(ctx, p, sel, w, offs, perm, pos, lse, lg, NULL, 1, 4, 2, SL_MOE_NORM, 1.0f, 0);
  double bad = sel[0] != 0 || sel[1] != 1 || fabs(w[0] - 0.4 / 0.7) > 1e-6 || fabs(lse[0]) > 1e-6;
  ops->moe_route_fwd(ctx, p, sel, w, offs, perm, pos, NULL, lg, bias, 1, 4, 2, SL_MOE_NORM, 1.0f, 0); /* .45 > .4 */
  bad += sel[0] != 2 || sel[1] != 0 || fabs(w[0] - 0.2 / 0.6) > 1e-6 || fabs(w[1] - 0.4 / 0.6) > 1e-6;
  report("moe_route_fwd hand case: bias [0, 0, .25, 0] selects experts 2, 0 with weights .2/.6, .4/.6", bad, 0);
  /* 4 tokens, 2 experts, k 1, all to expert 0 with p .9 .6 .8 .7: capacity ceil(4/2 * 1.0) = 2 keeps tokens 0, 2 */
  const float q[4] = {0.9f, 0.6f, 0.8f, 0.7f};
  for (int t = 0; t < 4; t++) lg[2 * t] = logf(q[t]), lg[2 * t + 1] = logf(1 - q[t]);
  ops->moe_route_fwd(ctx, p, sel, w, offs, perm, pos, NULL, lg, NULL, 4, 2, 1, 0, 1.0f, 2);
  static const int32_t want_sel[4] = {0, -1, 0, -1}, want_offs[5] = {0, 2, 2, 4, 4}, want_perm[4] = {0, 2, 1, 3};
  bad = memcmp(sel, want_sel, 16) || memcmp(offs, want_offs, 20) || memcmp(perm, want_perm, 16) || w[1] != 0 ||
        w[3] != 0 || fabs(w[0] - 0.9) > 1e-6 || fabs(w[2] - 0.8) > 1e-6;
  ops->moe_route_fwd(ctx, p, sel, w, offs, perm, pos, NULL, lg, NULL, 4, 2, 1, SL_MOE_NORM, 1.0f, 2); /* all 1: a tie */
  bad += sel[0] != 0 || sel[1] != 0 || sel[2] != -1 || sel[3] != -1;
  report("moe_route_fwd hand case: capacity 2 drops tokens 1, 3 (by weight), or 2, 3 (a tie: by token)", bad, 0);
}

/* The routing options on random logits: the bias's selection, the
 * capacity (on the scaled weights) against a sort per expert, the groups
 * (kept, then dropped), the logsumexp; the backward with drops, gp and zg
 * (softmax only: sigmoid mode has no logsumexp) by finite differences. */
static void test_moe_opts(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t E, int64_t k, int mode, float scale,
                          int64_t cap) {
  int norm = mode & SL_MOE_NORM, sig = mode & SL_MOE_SIGMOID;
  float *lg = fvec(N * E, 3.0f), *bias = fvec(E, 0.2f), *probs = malloc(N * E * 4), *wts = malloc(N * k * 4);
  float *lse = malloc(N * 4), *R = fvec(N * k, 1.0f), *gp = fvec(E, 1.0f);
  int32_t *sel = malloc(N * k * 4), *perm = malloc(N * k * 4), *pos = malloc(N * k * 4),
          *offs = malloc((2 * E + 1) * 4), *ex = malloc(N * k * 4);
  ops->moe_route_fwd(ctx, probs, sel, wts, offs, perm, pos, sig ? NULL : lse, lg, bias, N, E, k, mode, scale, cap);
  double lerr = 0, bad = 0;
  for (int64_t t = 0; t < N; t++) {
    double mx = -1e30, sum = 0;
    for (int64_t e = 0; e < E; e++) mx = fmax(mx, lg[t * E + e]);
    for (int64_t e = 0; e < E; e++) sum += exp(lg[t * E + e] - mx);
    lerr = sig ? 0 : fmax(lerr, fabs(lse[t] - (mx + log(sum))));
    for (int64_t j = 0; j < k; j++) { /* the j-th choice: exactly j scores p + bias above it */
      int32_t e = ex[t * k + j] = sel[t * k + j] < 0 ? -1 - sel[t * k + j] : sel[t * k + j];
      int64_t above = 0;
      for (int64_t f = 0; f < E; f++) above += probs[t * E + f] + bias[f] > probs[t * E + e] + bias[e];
      bad += above != j;
    }
  }
  float *wp = malloc(N * k * 4); /* the weights before the capacity, as the kernel computes them */
  for (int64_t t = 0; t < N; t++) {
    float ws = 0;
    for (int64_t j = 0; j < k; j++) ws += wp[t * k + j] = probs[t * E + ex[t * k + j]];
    if (sig) ws += 1e-20f;
    for (int64_t j = 0; norm && j < k; j++) wp[t * k + j] /= ws;
    for (int64_t j = 0; j < k; j++) wp[t * k + j] *= scale;
  }
  int64_t dropped = 0;
  for (int64_t s = 0; s < N * k; s++) { /* kept iff fewer than cap slots of its expert rank before it */
    int64_t rank = 0;
    for (int64_t q = 0; q < N * k; q++) rank += ex[q] == ex[s] && (wp[q] > wp[s] || (wp[q] == wp[s] && q < s));
    bad += (sel[s] < 0) != (rank >= cap) || (sel[s] < 0 && wts[s] != 0);
    dropped += sel[s] < 0;
  }
  for (int64_t g = 0; g < 2 * E; g++)
    for (int64_t r = offs[g]; r < offs[g + 1]; r++)
      bad += (g < E ? sel[perm[r]] != g : sel[perm[r]] != -1 - (g - E)) || pos[perm[r]] != r ||
             (r > offs[g] && perm[r] <= perm[r - 1]);
  bad += offs[0] != 0 || offs[2 * E] != N * k || offs[E] != N * k - dropped || dropped == 0;
  char nm[160], opt[48] = "";
  if (sig || scale != 1.0f) snprintf(opt, sizeof opt, ", %s scale %g", sig ? "sigmoid" : "softmax", (double)scale);
  snprintf(nm, sizeof nm, "moe_route_fwd bias, capacity %lld (%lld of %lld dropped), groups%s (mismatches)",
           (long long)cap, (long long)dropped, (long long)(N * k), opt);
  report(nm, bad, 0);
  if (!sig) report("moe_route_fwd logsumexp vs double", lerr, 1e-5);
  for (int64_t s = 0; s < N * k; s++) R[s] = sel[s] < 0 ? 0.0f : R[s]; /* a dropped slot's dwts (the combine's) */
  /* sigmoid mode: no z-loss (no logsumexp) */
  double zg = sig ? 0 : 0.7;
  moe_st st = {to_d(lg, N * E), to_d(R, N * k), NULL, NULL, NULL, to_d(gp, E), sel, pos, N, E, k, 0, mode, zg, scale};
  float *g = zeros(N * E);
  ops->moe_route_bwd(ctx, g, R, probs, sel, wts, gp, sig ? NULL : lse, (float)zg, N, E, k, mode, scale);
  snprintf(nm, sizeof nm, "moe_route_bwd with drops, gp%s (norm %d%s)", sig ? "" : " and the z-loss", norm ? 1 : 0,
           opt);
  fd_check(nm, st.lg, g, N * E, moe_route_L, &st, 300, 1e-5);
  free(lg), free(bias), free(probs), free(wts), free(lse), free(R), free(gp), free(sel), free(perm), free(pos);
  free(offs), free(ex), free(wp), free(g), free(st.lg), free(st.R), free(st.gp);
}
/* permute / combine on a given grouping: forwards exact or vs double, backwards by finite differences. */
static void test_moe_rows(const sl_ops *ops, sl_kctx *ctx, int64_t N, int64_t E, int64_t k, int64_t C) {
  float *lg = fvec(N * E, 3.0f), *probs = malloc(N * E * 4), *wts = malloc(N * k * 4);
  int32_t *sel = malloc(N * k * 4), *perm = malloc(N * k * 4), *pos = malloc(N * k * 4),
          *offs = malloc((2 * E + 1) * 4);
  ops->moe_route_fwd(ctx, probs, sel, wts, offs, perm, pos, NULL, lg, NULL, N, E, k, SL_MOE_NORM, 1.0f, 0);
  float *x = fvec(N * C, 1.0f), *xp = malloc(N * k * C * 4), *dxp = fvec(N * k * C, 1.0f), *dx = zeros(N * C);
  ops->moe_permute_fwd(ctx, xp, x, pos, N, k, C);
  int64_t bad = 0;
  for (int64_t r = 0; r < N * k; r++) bad += memcmp(xp + r * C, x + (perm[r] / k) * C, (size_t)C * 4) != 0;
  report("moe_permute_fwd rows (mismatches)", (double)bad, 0);
  ops->moe_permute_bwd(ctx, dx, dxp, pos, N, k, C);
  double e1 = 0;
  for (int64_t t = 0; t < N; t++)
    for (int64_t c = 0; c < C; c++) {
      double want = 0;
      for (int64_t j = 0; j < k; j++) want += dxp[(int64_t)pos[t * k + j] * C + c];
      e1 = fmax(e1, fabs(dx[t * C + c] - want));
    }
  report("moe_permute_bwd = sum of a token's k rows", e1, 1e-6);
  float *yp = fvec(N * k * C, 1.0f), *out = malloc(N * C * 4), *Ry = fvec(N * C, 1.0f);
  ops->moe_combine_fwd(ctx, out, yp, wts, pos, N, k, C);
  moe_st s = {NULL, NULL, to_d(yp, N * k * C), to_d(wts, N * k), to_d(Ry, N * C), NULL, sel, pos, N, E, k, C, 0, 0, 1};
  double e2 = 0;
  for (int64_t t = 0; t < N; t++)
    for (int64_t c = 0; c < C; c++) {
      double want = 0;
      for (int64_t j = 0; j < k; j++) want += s.wts[t * k + j] * s.yp[(int64_t)pos[t * k + j] * C + c];
      e2 = fmax(e2, fabs(out[t * C + c] - want));
    }
  report("moe_combine_fwd vs double", e2, 1e-6);
  float *dyp = zeros(N * k * C), *dw = zeros(N * k), *sv, *pg = prefill(N * k * C, &sv);
  ops->moe_combine_bwd(ctx, dyp, dw, Ry, yp, wts, pos, N, k, C);
  float *sv2, *pw = prefill(N * k, &sv2);
  ops->moe_combine_bwd(ctx, pg, pw, Ry, yp, wts, pos, N, k, C);
  adds_check("moe_combine_bwd dyp", pg, sv, dyp, N * k * C);
  adds_check("moe_combine_bwd dwts", pw, sv2, dw, N * k);
  fd_check("moe_combine_bwd dyp", s.yp, dyp, N * k * C, moe_comb_L, &s, 200, 1e-5);
  fd_check("moe_combine_bwd dwts", s.wts, dw, N * k, moe_comb_L, &s, 200, 1e-5);
  free(lg), free(probs), free(wts), free(sel), free(perm), free(pos), free(offs), free(x), free(xp), free(dxp);
  free(dx), free(yp), free(out), free(Ry), free(dyp), free(dw), free(sv), free(pg), free(sv2), free(pw);
  free(s.yp), free(s.wts), free(s.Ry);
}

int main(void) {
  const sl_ops *ops = sl_ops_cpu();
  sl_kctx *c2 = ops->ctx_create(2), *c1 = ops->ctx_create(1), *c0 = ops->ctx_create(0);
  if (!c2 || !c1 || !c0) {
    printf("FAIL ctx_create\n1 passed, 1 failed\n");
    return 1;
  }
  test_embedding(ops, c2);
  test_rmsnorm(ops, c2, 37, 64);
  test_rmsnorm(ops, c1, 5, 7);
  test_linear(ops, c2, 33, 20, 17, 1);
  test_linear(ops, c1, 9, 8, 5, 0);
  test_linear_big(ops, c2, 40, 301, 700); /* wide: split along N */
  test_linear_big(ops, c2, 700, 301, 40); /* tall: split along M */
  test_rmsnorm_strided(ops, c2, 37, 64, 80);
  test_rmsnorm_strided(ops, c1, 40, 8, 48); /* 8-wide heads of a 48-wide row */
  test_rmsnorm_weightless(ops, c2, 37, 8, 16); /* Falcon-Mamba's B (S = 8) in a B | C row */
  test_rmsnorm_weightless(ops, c1, 9, 5, 5);   /* its dt, packed (R = 5) */
  test_rope(ops, c2, 2, 19, 4, 2, 8, 10000.0f, 0, NULL);
  test_rope(ops, c1, 1, 300, 2, 1, 16, 500000.0f, 0, NULL);
  test_rope(ops, c2, 2, 19, 4, 2, 8, 10000.0f, 1, NULL); /* same shape, new values: the cos/sin cache rebuilt */
  /* GQA, T not a multiple of the tile, windows, hd 8/16, both thread paths */
  test_attention(ops, c2, 2, 70, 4, 2, 8, 0, 120, NULL, 0.0f);
  test_attention(ops, c2, 1, 150, 2, 1, 16, 0, 60, NULL, 0.0f);  /* 1 kv item: serial bwd */
  test_attention(ops, c2, 2, 100, 4, 2, 16, 37, 80, NULL, 0.0f); /* sliding window */
  test_attention(ops, c1, 1, 90, 3, 3, 8, 64, 60, NULL, 0.0f);   /* MHA, window = tile */
  test_attention(ops, c0, 1, 20, 4, 1, 8, 500, 60, NULL, 0.0f);  /* window > T */
  /* Gemma 2's logit softcap, a small cap so tanh bends the scores (|s| up to ~6) */
  test_attention(ops, c2, 2, 70, 4, 2, 8, 0, 120, NULL, 2.0f);
  test_attention(ops, c1, 2, 100, 4, 2, 16, 37, 80, NULL, 3.0f); /* with a sliding window */
  /* document masking: documents crossing tile edges, a 1-token document,
   * one whole-sample document (b = 1 of the first), with and without window */
  {
    enum { DT = 150 };
    int32_t seg[2 * DT];
    for (int t = 0; t < DT; t++) {
      seg[t] = t < 5 ? 0 : t < 6 ? 5 : t < 70 ? 6 : t < 131 ? 70 : 131;
      seg[DT + t] = 0;
    }
    test_rope(ops, c2, 2, DT, 2, 1, 8, 10000.0f, 0, seg);
    test_attention(ops, c2, 2, DT, 4, 2, 8, 0, 120, seg, 0.0f);
    test_attention(ops, c1, 2, DT, 2, 2, 8, 40, 80, seg, 0.0f); /* window inside documents */
    test_attention(ops, c2, 2, DT, 2, 1, 8, 0, 60, seg, 2.5f);  /* softcap with documents */
  }
  test_glu(ops, c2, 41, 96, 0);
  test_glu(ops, c2, 41, 96, 1);
  test_moe_route(ops, c2, 37, 6, 2, SL_MOE_NORM, 1.0f, 0, 0);
  test_moe_route(ops, c1, 23, 5, 3, 0, 1.0f, 0, 0);
  test_moe_route(ops, c2, 37, 6, 2, SL_MOE_NORM, 1.0f, 1, 0); /* + the aux loss's gradient on every probability */
  test_moe_route(ops, c1, 23, 5, 3, 0, 1.0f, 1, 0);

  test_moe_rows(ops, c2, 37, 6, 2, 24);
  test_moe_rows(ops, c1, 9, 4, 1, 8);
  test_moe_hand(ops, c1);
  test_moe_opts(ops, c2, 37, 6, 2, SL_MOE_NORM, 1.0f, 10); /* 74 slots, 12.3 an expert */
  test_moe_opts(ops, c1, 23, 5, 3, 0, 1.0f, 12);
  test_ce(ops, c2, 37, 16, 300, 150, 150, 0.0f);
  test_ce(ops, c2, 1100, 4, 2100, 24, 16, 0.0f);  /* 2 row x 3 vocab tiles */
  test_vocab_embedding(ops, c2, 300, 24, 211, 4); /* V % T != 0 */
  test_vocab_embedding(ops, c1, 40, 8, 5, 4);     /* a slice of padding only */
  test_lmhead_vp(ops, c2, 37, 16, 300, 4, 150, 150, 0.0f);
  test_lmhead_vp(ops, c2, 37, 16, 211, 2, 100, 100, 0.0f);
  test_lmhead_vp(ops, c1, 23, 8, 5, 4, 60, 40, 0.0f);      /* rank 3 holds padding only */
  test_lmhead_vp(ops, c2, 1100, 4, 2100, 2, 24, 16, 0.0f); /* 2 row x 2 vocab tiles per slice */
  /* Gemma 2's final-logit softcap; cap 1.5 bends logits of spread ~1.3 */
  test_ce(ops, c2, 37, 16, 300, 150, 150, 1.5f);
  test_ce(ops, c2, 1100, 4, 2100, 24, 16, 1.5f); /* across row and vocab tiles */
  test_lmhead_vp(ops, c2, 37, 16, 211, 2, 100, 100, 1.5f);
  test_lmhead_vp(ops, c1, 23, 8, 5, 4, 60, 40, 1.5f);
  test_elementwise(ops, c2);
  /* The router's scaling factor and DeepSeek-V3 / Nemotron-H's sigmoid scores (after the
   * others, so that their random inputs stay as before): softmax with a scale; sigmoid with and
   * without the renormalisation, the expert bias, scale 2.5, gp; the capacity on scaled weights. */
  test_moe_route(ops, c2, 37, 6, 2, SL_MOE_NORM, 2.5f, 1, 1);
  test_moe_route(ops, c1, 23, 5, 3, 0, 0.75f, 0, 0);
  test_moe_route(ops, c2, 37, 6, 2, SL_MOE_SIGMOID | SL_MOE_NORM, 1.0f, 0, 0);
  test_moe_route(ops, c1, 23, 5, 3, SL_MOE_SIGMOID, 1.0f, 0, 0);
  test_moe_route(ops, c2, 37, 8, 3, SL_MOE_SIGMOID | SL_MOE_NORM, 2.5f, 1, 1);
  test_moe_route(ops, c1, 23, 6, 2, SL_MOE_SIGMOID, 2.5f, 1, 1);
  test_moe_route(ops, c2, 41, 7, 4, SL_MOE_SIGMOID | SL_MOE_NORM, 2.5f, 0, 1);
  test_moe_opts(ops, c2, 37, 6, 2, SL_MOE_SIGMOID | SL_MOE_NORM, 2.5f, 10);
  test_moe_opts(ops, c1, 23, 5, 3, SL_MOE_SIGMOID, 2.5f, 12);
  test_moe_opts(ops, c2, 37, 6, 2, SL_MOE_NORM, 2.5f, 10);
  /* Mamba-2's gated norm split over TP ranks (last: the earlier cases keep their random inputs) */
  test_rmsnorm_split(ops, c2, 37, 64, 2);
  test_rmsnorm_split(ops, c1, 9, 48, 4);
  test_rmsnorm_split(ops, c2, 11, 40, 1);
  size_t sb = ops->ctx_scratch_bytes(c2);
  report("ctx_scratch_bytes > 0 after use (reported as err = !ok)", sb > 0 ? 0.0 : 1.0, 0);
  ops->ctx_destroy(c2);
  ops->ctx_destroy(c1);
  ops->ctx_destroy(c0);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
