/* tests/unit/kernels/test_cuda_tcattn.c — the tensor-core attention
 * (kernels/cuda/attention_tc.cu) against a CPU reference written here: the
 * CPU twin's math (kernels/cpu/attention.c: causal GQA, sliding window,
 * document starts, logit softcap, the caller's scale) in double, with bf16
 * rounding (nearest even) where the kernel feeds the tensor cores: q, k, v,
 * dout; P before P.V (forward: relative to the row maximum); P before
 * dV += P^T dO; dS before dQ += dS K and dK += dS^T Q. Compared by
 * rel = max|kernel - ref| / max|ref| per output.
 * Tolerances (the worst case measured on the emulator, tests/cuda_emu, x >= 10):
 * forward out 2e-2 (measured 1.14e-3, hd 128 with documents: the kernel rounds P against the running
 * maximum of its key tile, the reference against the final one, so a P may
 * differ by one bf16 ulp), lse 1e-5 (measured 1.2e-7), dq / dk / dv 1e-4
 * (measured 1.3e-6; on a GPU the tensor cores' fp32 accumulation order adds
 * fp32 noise and may flip the bf16 rounding of a P or dS, hence the margin).
 * Negative control per case: the reference with an off-by-one mask (key
 * i - 1 hidden from query i) must miss the tolerance of out and of dq.
 * The reference's backward is checked by central differences of its forward
 * (rounding off). Also: under bf16 compute the op table's attention runs this kernel (its
 * lse bit-identical to the direct call). Exits 77 without CUDA or a device;
 * built as test_cuda_emu_tcattn against the emulator. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"

#ifndef SL_USE_CUDA
int main(void) {
  printf("test_cuda_tcattn: skipped (built without CUDA)\n");
  return 77;
}
#else
#include "kernels/cuda/cuda_backend.h"

#define TOL_OUT 2e-2
#define TOL_LSE 1e-5
#define TOL_GRAD 1e-4

static const sl_ops *gpu;
static sl_kctx *gc;
static int npass, nfail;
static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static float frand(void) { /* uniform [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static int g_exact; /* the reference without its bf16 rounding (finite-difference check) */
static double bf(double x) { return g_exact ? x : sl_bf16_to_f32_scalar(sl_f32_to_bf16_scalar((float)x)); }
static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}
static double *dcalloc(int64_t n) { return (double *)xcalloc((size_t)n, sizeof(double)); }

typedef struct {
  int64_t B, T, nh, nkv, hd, window;
  float scale, cap;
  const int32_t *seg; /* host */
  int shift;          /* negative control: key i - 1 hidden from query i */
} acase;

static int visible(const acase *c, int64_t b, int64_t i, int64_t j) {
  if (j > i || (c->window > 0 && i - j >= c->window)) return 0;
  if (c->seg && j < c->seg[b * c->T + i]) return 0;
  return !(c->shift && j == i - 1);
}
static double capf(double s, double cap) { return cap > 0 ? cap * tanh(s / cap) : s; }
static double dcapf(double s, double cap) { return cap > 0 ? 1.0 - tanh(s / cap) * tanh(s / cap) : 1.0; }
/* scale * q_i . k_j over bf16-rounded operands */
static double score(const acase *c, const float *qkv, int64_t b, int64_t h, int64_t i, int64_t j) {
  int64_t W = (c->nh + 2 * c->nkv) * c->hd, kvh = h / (c->nh / c->nkv);
  const float *q = qkv + (b * c->T + i) * W + h * c->hd, *k = qkv + (b * c->T + j) * W + (c->nh + kvh) * c->hd;
  double acc = 0;
  for (int64_t d = 0; d < c->hd; d++) acc += bf(q[d]) * bf(k[d]);
  return acc * c->scale;
}

/* out (B, T, nh, hd), lse (B, nh, T) */
static void ref_fwd(const acase *c, const float *qkv, double *out, double *lse) {
  int64_t T = c->T, hd = c->hd, W = (c->nh + 2 * c->nkv) * hd;
  double *cs = dcalloc(T);
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < c->nh; h++)
      for (int64_t i = 0; i < T; i++) {
        int64_t voff = (c->nh + c->nkv + h / (c->nh / c->nkv)) * hd;
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j <= i; j++) {
          cs[j] = visible(c, b, i, j) ? capf(score(c, qkv, b, h, i, j), c->cap) : -INFINITY;
          if (cs[j] > m) m = cs[j];
        }
        for (int64_t j = 0; j <= i; j++) l += cs[j] == -INFINITY ? 0 : exp(cs[j] - m);
        double *o = out + ((b * T + i) * c->nh + h) * hd;
        for (int64_t d = 0; d < hd; d++) o[d] = 0;
        for (int64_t j = 0; j <= i; j++) {
          if (cs[j] == -INFINITY) continue;
          double p = bf(exp(cs[j] - m));
          for (int64_t d = 0; d < hd; d++) o[d] += p * bf(qkv[(b * T + j) * W + voff + d]);
        }
        for (int64_t d = 0; d < hd; d++) o[d] /= l;
        lse[(b * c->nh + h) * T + i] = m + log(l);
      }
  free(cs);
}

/* dqkv (packed like qkv) = gradient from dout, given the op's out and lse */
static void ref_bwd(const acase *c, const float *qkv, const float *dout, const float *out, const float *lse,
                    double *dqkv) {
  int64_t T = c->T, hd = c->hd, W = (c->nh + 2 * c->nkv) * hd;
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < c->nh; h++) {
      int64_t kvh = h / (c->nh / c->nkv), koff = (c->nh + kvh) * hd, voff = (c->nh + c->nkv + kvh) * hd;
      for (int64_t i = 0; i < T; i++) {
        const float *g = dout + ((b * T + i) * c->nh + h) * hd, *o = out + ((b * T + i) * c->nh + h) * hd;
        const float *q = qkv + (b * T + i) * W + h * hd;
        double D = 0, L = lse[(b * c->nh + h) * T + i];
        for (int64_t d = 0; d < hd; d++) D += (double)g[d] * o[d];
        for (int64_t j = 0; j <= i; j++) {
          if (!visible(c, b, i, j)) continue;
          const float *k = qkv + (b * T + j) * W + koff, *v = qkv + (b * T + j) * W + voff;
          double s = score(c, qkv, b, h, i, j), p = exp(capf(s, c->cap) - L), dp = 0;
          for (int64_t d = 0; d < hd; d++) dp += bf(g[d]) * bf(v[d]);
          double ds = bf(p * (dp - D) * dcapf(s, c->cap)), pb = bf(p);
          double *dq = dqkv + (b * T + i) * W + h * hd, *dk = dqkv + (b * T + j) * W + koff;
          double *dv = dqkv + (b * T + j) * W + voff;
          for (int64_t d = 0; d < hd; d++) {
            dq[d] += c->scale * ds * bf(k[d]);
            dk[d] += c->scale * ds * bf(q[d]);
            dv[d] += pb * bf(g[d]);
          }
        }
      }
    }
}

static double rel_err(const float *got, const double *ref, int64_t n) {
  double e = 0, mx = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    if (!(d <= e)) e = d; /* NaN propagates */
    if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
  }
  return mx > 0 ? e / mx : e;
}
static void report(const char *name, double err, double tol, int ok) {
  printf("%-58s rel %.3e  tol %.1e  %s\n", name, err, tol, ok ? "PASS" : "FAIL");
  ok ? npass++ : nfail++;
}
static void *up(const void *h, size_t bytes) {
  void *d = sl_cuda_malloc(gc, bytes);
  if (!d || sl_cuda_upload(gc, d, h, bytes)) {
    fprintf(stderr, "device copy failed: %s\n", sl_errmsg());
    exit(1);
  }
  return d;
}
static void down(void *h, const void *d, size_t bytes) {
  if (sl_cuda_download(gc, h, d, bytes)) {
    fprintf(stderr, "download failed: %s\n", sl_errmsg());
    exit(1);
  }
}
static float *bf16_vals(int64_t n, float amp) { /* bf16-valued host data */
  float *x = (float *)xcalloc((size_t)n, 4);
  for (int64_t i = 0; i < n; i++) x[i] = (float)bf(amp * frand());
  return x;
}
/* rel of columns [c0, c1) of rows of width W */
static double rel_cols(const float *got, const double *ref, int64_t rows, int64_t W, int64_t c0, int64_t c1) {
  double e = 0, mx = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = c0; k < c1; k++) {
      double d = fabs((double)got[r * W + k] - ref[r * W + k]);
      if (!(d <= e)) e = d;
      if (fabs(ref[r * W + k]) > mx) mx = fabs(ref[r * W + k]);
    }
  return mx > 0 ? e / mx : e;
}

/* the gradient reference from d0 (the op adds) */
static double *ref_grad(const acase *c, const float *qkv, const float *dout, const float *out, const float *lse,
                        const float *d0, int64_t nq) {
  double *r = dcalloc(nq);
  for (int64_t i = 0; i < nq; i++) r[i] = d0[i];
  ref_bwd(c, qkv, dout, out, lse, r);
  return r;
}

static void run_case(const char *name, acase c) {
  int64_t W = (c.nh + 2 * c.nkv) * c.hd, nq = c.B * c.T * W, no = c.B * c.T * c.nh * c.hd, nl = c.B * c.nh * c.T;
  float *qkv = bf16_vals(nq, 2.0f), *dout = bf16_vals(no, 1.0f), *d0 = bf16_vals(nq, 0.01f);
  float *ko = (float *)xcalloc((size_t)no, 4), *kl = (float *)xcalloc((size_t)nl, 4),
        *kd = (float *)xcalloc((size_t)nq, 4);
  float *qd = (float *)up(qkv, (size_t)nq * 4), *gd = (float *)up(dout, (size_t)no * 4),
        *dd = (float *)up(d0, (size_t)nq * 4);
  float *od = (float *)up(ko, (size_t)no * 4), *ld = (float *)up(kl, (size_t)nl * 4);
  int32_t *sd = c.seg ? (int32_t *)up(c.seg, (size_t)(c.B * c.T) * 4) : NULL;
  sl_cuda_attention_fwd_tc(gc, od, ld, qd, c.B, c.T, c.nh, c.nkv, c.hd, c.window, c.scale, sd, c.cap);
  sl_cuda_attention_bwd_tc(gc, dd, gd, qd, od, ld, c.B, c.T, c.nh, c.nkv, c.hd, c.window, c.scale, sd, c.cap);
  down(ko, od, (size_t)no * 4), down(kl, ld, (size_t)nl * 4), down(kd, dd, (size_t)nq * 4);
  if (sl_cuda_last_status(gc)) fprintf(stderr, "%s: %s\n", name, sl_errmsg());
  double *ro = dcalloc(no), *rl = dcalloc(nl);
  ref_fwd(&c, qkv, ro, rl);
  double *rd = ref_grad(&c, qkv, dout, ko, kl, d0, nq); /* the backward's inputs: the kernel's out and lse */
  acase cn = c;
  cn.shift = 1; /* the negative control */
  double *no_o = dcalloc(no), *no_l = dcalloc(nl);
  ref_fwd(&cn, qkv, no_o, no_l);
  double *no_d = ref_grad(&cn, qkv, dout, ko, kl, d0, nq);
  int64_t rows = c.B * c.T, qe = c.nh * c.hd, ke = (c.nh + c.nkv) * c.hd;
  char nm[160];
  double e[5] = {rel_err(ko, ro, no), rel_err(kl, rl, nl), rel_cols(kd, rd, rows, W, 0, qe),
                 rel_cols(kd, rd, rows, W, qe, ke), rel_cols(kd, rd, rows, W, ke, W)};
  static const char *const what[5] = {"out", "lse", "dq", "dk", "dv"};
  static const double tol[5] = {TOL_OUT, TOL_LSE, TOL_GRAD, TOL_GRAD, TOL_GRAD};
  for (int k = 0; k < 5; k++) {
    snprintf(nm, sizeof nm, "%s %s", name, what[k]);
    report(nm, e[k], tol[k], e[k] <= tol[k]);
  }
  double en = rel_err(ko, no_o, no), ed = rel_cols(kd, no_d, rows, W, 0, qe);
  snprintf(nm, sizeof nm, "%s control: mask off by one, out", name);
  report(nm, en, TOL_OUT, en > TOL_OUT);
  snprintf(nm, sizeof nm, "%s control: mask off by one, dq", name);
  report(nm, ed, TOL_GRAD, ed > TOL_GRAD);
  free(qkv), free(dout), free(d0), free(ko), free(kl), free(kd);
  free(ro), free(rl), free(rd), free(no_o), free(no_l), free(no_d);
  sl_cuda_free(gc, qd), sl_cuda_free(gc, gd), sl_cuda_free(gc, dd), sl_cuda_free(gc, od), sl_cuda_free(gc, ld);
  if (sd) sl_cuda_free(gc, sd);
}

/* The reference's own backward (rounding off, in double) against central
 * differences of its forward, loss = sum(out * dout), over every element
 * of qkv: GQA, window, documents and softcap at once. Tolerance 1e-6
 * (measured 4.7e-8 with h = 1e-4: O(h^2) truncation, fp32 out / lse). */
static void test_ref_fd(const int32_t *seg) {
  acase c = {1, 20, 2, 1, 16, 7, 0.25f, 0.5f, seg, 0};
  int64_t W = (c.nh + 2 * c.nkv) * c.hd, nq = c.T * W, no = c.T * c.nh * c.hd, nl = c.nh * c.T;
  g_exact = 1;
  float *qkv = bf16_vals(nq, 2.0f), *dout = bf16_vals(no, 1.0f), *z = (float *)xcalloc((size_t)nq, 4);
  float *of = (float *)xcalloc((size_t)no, 4), *lf = (float *)xcalloc((size_t)nl, 4);
  double *o = dcalloc(no), *l = dcalloc(nl), *fd = dcalloc(nq);
  ref_fwd(&c, qkv, o, l);
  for (int64_t i = 0; i < no; i++) of[i] = (float)o[i];
  for (int64_t i = 0; i < nl; i++) lf[i] = (float)l[i];
  double *an = ref_grad(&c, qkv, dout, of, lf, z, nq);
  const double h = 1e-4;
  for (int64_t k = 0; k < nq; k++) {
    float x = qkv[k];
    double lp = 0, lm = 0;
    qkv[k] = (float)(x + h), ref_fwd(&c, qkv, o, l);
    for (int64_t i = 0; i < no; i++) lp += o[i] * dout[i];
    qkv[k] = (float)(x - h), ref_fwd(&c, qkv, o, l);
    for (int64_t i = 0; i < no; i++) lm += o[i] * dout[i];
    qkv[k] = x;
    fd[k] = (lp - lm) / ((double)(float)(x + h) - (double)(float)(x - h));
  }
  g_exact = 0;
  float *anf = (float *)xcalloc((size_t)nq, 4);
  for (int64_t k = 0; k < nq; k++) anf[k] = (float)an[k];
  double e = rel_err(anf, fd, nq);
  report("reference backward vs finite differences (rounding off)", e, 1e-6, e <= 1e-6);
  free(qkv), free(dout), free(z), free(of), free(lf), free(o), free(l), free(fd), free(an), free(anf);
}

/* documents of `len` tokens (the last one shorter) in every sample */
static int32_t *docs(int64_t B, int64_t T, int64_t len) {
  int32_t *s = (int32_t *)xcalloc((size_t)(B * T), 4);
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < T; i++) s[b * T + i] = (int32_t)(i / (len + b) * (len + b));
  return s;
}

/* Under bf16 compute the table's attention_fwd is this kernel: lse
 * bit-identical to the direct call, out its bf16 rounding. */
static void test_routing(void) {
  acase c = {1, 40, 2, 1, 64, 0, 0.125f, 0.0f, NULL, 0};
  int64_t nq = c.T * 4 * c.hd, no = c.T * 2 * c.hd, nl = 2 * c.T;
  float *qkv = bf16_vals(nq, 2.0f), *o1 = (float *)xcalloc((size_t)no, 4), *o2 = (float *)xcalloc((size_t)no, 4);
  float *l1 = (float *)xcalloc((size_t)nl, 4), *l2 = (float *)xcalloc((size_t)nl, 4);
  float *qd = (float *)up(qkv, (size_t)nq * 4), *od = (float *)up(o1, (size_t)no * 4),
        *ld = (float *)up(l1, (size_t)nl * 4);
  sl_cuda_attention_fwd_tc(gc, od, ld, qd, c.B, c.T, c.nh, c.nkv, c.hd, 0, c.scale, NULL, 0.0f);
  down(o1, od, (size_t)no * 4), down(l1, ld, (size_t)nl * 4);
  int ok = gpu->ctx_set_compute(gc, SL_COMPUTE_BF16) == SL_OK;
  gpu->attention_fwd(gc, od, ld, qd, c.B, c.T, c.nh, c.nkv, c.hd, 0, c.scale, NULL, 0.0f);
  down(o2, od, (size_t)no * 4), down(l2, ld, (size_t)nl * 4);
  ok = ok && gpu->ctx_set_compute(gc, SL_COMPUTE_FP32) == SL_OK && memcmp(l1, l2, (size_t)nl * 4) == 0;
  for (int64_t i = 0; i < no; i++) ok = ok && o2[i] == (float)bf(o1[i]);
  report("bf16 compute: the table's attention_fwd is the tc kernel", 0, 0, ok);
  free(qkv), free(o1), free(o2), free(l1), free(l2);
  sl_cuda_free(gc, qd), sl_cuda_free(gc, od), sl_cuda_free(gc, ld);
}

int main(void) {
  gpu = sl_ops_cuda();
  if (!gpu) {
    printf("test_cuda_tcattn: skipped (no CUDA device)\n");
    return 77;
  }
  gc = gpu->ctx_create(0);
  if (!gc) {
    fprintf(stderr, "ctx_create failed: %s\n", sl_errmsg());
    return 1;
  }
  int32_t *s1 = docs(1, 64, 23), *s2 = docs(2, 37, 11), *s3 = docs(1, 40, 15), *s4 = docs(1, 20, 8);
  test_ref_fd(s4);
  /* B T nh nkv hd window scale cap seg */
  run_case("hd64 T64 GQA 2:1 causal", (acase){1, 64, 2, 1, 64, 0, 0.125f, 0.0f, NULL, 0});
  run_case("hd64 T50 window 13 softcap 0.5", (acase){1, 50, 2, 2, 64, 13, 0.125f, 0.5f, NULL, 0});
  run_case("hd128 T64 GQA 2:1 documents", (acase){1, 64, 2, 1, 128, 0, 0.0884f, 0.0f, s1, 0});
  run_case("hd128 B2 T37 window 9 documents softcap 0.3", (acase){2, 37, 1, 1, 128, 9, 0.0884f, 0.3f, s2, 0});
  run_case("hd256 T40 GQA 2:1 documents softcap 0.4", (acase){1, 40, 2, 1, 256, 0, 0.0625f, 0.4f, s3, 0});
  run_case("hd256 T64 window 20", (acase){1, 64, 1, 1, 256, 20, 0.0625f, 0.0f, NULL, 0});
  run_case("hd40 (padded to 64) B2 T33 scale 0.3", (acase){2, 33, 1, 1, 40, 0, 0.3f, 0.0f, NULL, 0});
  test_routing();
  free(s1), free(s2), free(s3), free(s4);
  gpu->ctx_destroy(gc);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
#endif
