/* tests/unit/kernels/test_cuda_kernels.c — the CUDA backend against the CPU oracle.
 * Every op of the table (and the bf16 variants of cuda_backend.h) runs on the
 * same random inputs on sl_ops_cpu() and sl_ops_cuda(); outputs are compared
 * by rel = max|gpu - cpu| / max|cpu| with the per-op tolerance printed on each
 * line. Backward ops start from random (non-zero) gradients to check that
 * they ADD. Exits 77 (skip) when built without CUDA or no device exists.
 * Also built as test_cuda_emu against the CPU emulation of the CUDA backend
 * (tests/cuda_emu, docs/cuda.md "Emulated kernel tests").
 * Tolerances: element-wise fp32 1e-5; reductions, GEMMs, attention, scan, ssd 1e-4
 * (5e-3 for GEMM-based ops when SL_CUDA_TF32=1); bf16 casts and relu2 exact; bf16
 * variants 1e-2 (attention output stored in bf16) or 1e-4 (fp32 outputs of
 * bf16-exact products); bf16 compute (ctx_set_compute) one bf16 ulp of the
 * largest value, plus a check that every bf16-stored output is bf16-valued. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"

#ifndef SL_USE_CUDA
int main(void) {
  printf("test_cuda_kernels: skipped (built without CUDA)\n");
  return 77;
}
#else
#include "kernels/cuda/cuda_backend.h"

static const sl_ops *cpu, *gpu;
static sl_kctx *cc, *gc;
static int npass, nfail;
static int g_b16; /* the shared tests rerun with both contexts in bf16 compute */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float TOL_GEMM = 1e-4f;

static float frand(void) { /* uniform [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* A tensor with a host (CPU backend) and a device (CUDA backend) copy. */
typedef struct {
  float *h, *d;
  int64_t n;
} buf;

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}
static void *dev_copy(const void *h, size_t bytes) {
  void *d = sl_cuda_malloc(gc, bytes);
  if (!d || sl_cuda_upload(gc, d, h, bytes)) {
    fprintf(stderr, "device copy failed: %s\n", sl_cuda_last_error(gc));
    exit(1);
  }
  return d;
}
/* random values in [lo, hi) */
static buf mk(int64_t n, float lo, float hi) {
  buf b = {(float *)xmalloc((size_t)n * 4), NULL, n};
  for (int64_t i = 0; i < n; i++) b.h[i] = lo + (hi - lo) * 0.5f * (frand() + 1.0f);
  b.d = (float *)dev_copy(b.h, (size_t)n * 4);
  return b;
}
static buf mk0(int64_t n) {
  buf b = {(float *)calloc((size_t)(n ? n : 1), 4), NULL, n};
  b.d = (float *)dev_copy(b.h, (size_t)n * 4);
  return b;
}
static void freeb(buf *b) {
  free(b->h);
  sl_cuda_free(gc, b->d);
  b->h = b->d = NULL;
}
/* the RoPE frequency table (models/rope.c's rule), host and device copies */
static buf mk_inv(int64_t hd, float theta) {
  buf b = {(float *)xmalloc((size_t)(hd / 2) * 4), NULL, hd / 2};
  for (int64_t i = 0; i < hd / 2; i++) b.h[i] = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
  b.d = (float *)dev_copy(b.h, (size_t)(hd / 2) * 4);
  return b;
}
static int32_t *mk_tok(int64_t n, int32_t V, int with_ignored, int32_t **dev) {
  int32_t *t = (int32_t *)xmalloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) {
    t[i] = (int32_t)((frand() + 1.0f) * 0.5f * (float)V);
    if (t[i] >= V) t[i] = V - 1;
    if (with_ignored && i % 7 == 3) t[i] = -1;
  }
  *dev = (int32_t *)dev_copy(t, (size_t)n * 4);
  return t;
}

static void report(const char *name, int64_t n, double maxabs, double rel, double tol, int ok) {
  printf("%s%-30s n=%-8lld max_abs=%.3e rel=%.3e tol=%.0e  %s\n", g_b16 ? "bf16c " : "", name, (long long)n, maxabs,
         rel, tol, ok ? "PASS" : "FAIL");
  if (ok) npass++;
  else nfail++;
}
/* compares the device copy of b with its host (CPU) copy */
static void check(const char *name, const buf *b, double tol) {
  float *g = (float *)xmalloc((size_t)b->n * 4);
  int st = sl_cuda_download(gc, g, b->d, (size_t)b->n * 4);
  double maxabs = 0, ref = 0;
  int finite = 1;
  for (int64_t i = 0; i < b->n; i++) {
    if (!isfinite(g[i]) && isfinite(b->h[i])) finite = 0;
    double e = fabs((double)g[i] - (double)b->h[i]);
    if (e > maxabs || isnan(e)) maxabs = isnan(e) ? INFINITY : e;
    if (fabs(b->h[i]) > ref) ref = fabs(b->h[i]);
  }
  double rel = maxabs / (ref > 1e-30 ? ref : 1e-30);
  int ok = st == SL_OK && finite && rel <= tol;
  if (st != SL_OK) printf("  cuda status %d: %s\n", st, sl_cuda_last_error(gc));
  report(name, b->n, maxabs, rel, tol, ok);
  free(g);
}

/* An output a bf16 engine stores in bf16: under g_b16 it must be
 * bf16-valued and within one bf16 ulp (check_b16, below), else tol. */
static void check_b16(const char *name, const buf *b);
static void check_r(const char *name, const buf *b, double tol) {
  if (g_b16) check_b16(name, b);
  else check(name, b, tol);
}
#define TOL_B16 7.9e-3
#define TOL_R(t) (g_b16 ? TOL_B16 : (t)) /* rounded outputs in strided rows */

static void test_embedding(void) {
  int64_t N = 37, C = 40;
  int32_t V = 50, *tokd;
  int32_t *tok = mk_tok(N, V, 0, &tokd);
  buf wte = mk(V * C, -1, 1), out = mk0(N * C), dout = mk(N * C, -1, 1), dwte = mk(V * C, -1, 1);
  cpu->embedding_fwd(cc, out.h, tok, wte.h, N, C);
  gpu->embedding_fwd(gc, out.d, tokd, wte.d, N, C);
  check("embedding_fwd", &out, 0);
  cpu->embedding_bwd(cc, dwte.h, dout.h, tok, N, C);
  gpu->embedding_bwd(gc, dwte.d, dout.d, tokd, N, C);
  check("embedding_bwd", &dwte, 1e-5);
  freeb(&wte), freeb(&out), freeb(&dout), freeb(&dwte);
  free(tok), sl_cuda_free(gc, tokd);
}

static void test_rmsnorm(void) {
  int64_t N = 70, C = 200;
  buf x = mk(N * C, -2, 2), w = mk(C, 0.5f, 1.5f), out = mk0(N * C), rstd = mk0(N);
  buf dout = mk(N * C, -1, 1), dx = mk(N * C, -1, 1), dw = mk(C, -1, 1);
  cpu->rmsnorm_fwd(cc, out.h, rstd.h, x.h, w.h, N, C, C, 1e-5f);
  gpu->rmsnorm_fwd(gc, out.d, rstd.d, x.d, w.d, N, C, C, 1e-5f);
  check("rmsnorm_fwd out", &out, 1e-5);
  check("rmsnorm_fwd rstd", &rstd, 1e-5);
  cpu->rmsnorm_bwd(cc, dx.h, dw.h, dout.h, x.h, w.h, rstd.h, N, C, C);
  gpu->rmsnorm_bwd(gc, dx.d, dw.d, dout.d, x.d, w.d, rstd.d, N, C, C);
  check("rmsnorm_bwd dinp", &dx, 1e-4);
  check("rmsnorm_bwd dw", &dw, 1e-4);
  freeb(&x), freeb(&w), freeb(&out), freeb(&rstd), freeb(&dout), freeb(&dx), freeb(&dw);
}

/* rows at a stride ld > C (one 64-wide head of each 200-wide row, as a
 * per-head norm reads packed qkv; N > 64 rows so dw takes two row groups);
 * the whole buffers are compared, so the gaps must come out as they went in
 * on both sides */
static void test_rmsnorm_strided(void) {
  int64_t N = 130, C = 64, ld = 200;
  buf x = mk(N * ld, -2, 2), w = mk(C, 0.5f, 1.5f), out = mk(N * ld, -1, 1), rstd = mk0(N);
  buf dout = mk(N * ld, -1, 1), dx = mk(N * ld, -1, 1), dw = mk(C, -1, 1);
  cpu->rmsnorm_fwd(cc, out.h, rstd.h, x.h, w.h, N, C, ld, 1e-5f);
  gpu->rmsnorm_fwd(gc, out.d, rstd.d, x.d, w.d, N, C, ld, 1e-5f);
  check("rmsnorm_fwd ld>C out", &out, 1e-5);
  check("rmsnorm_fwd ld>C rstd", &rstd, 1e-5);
  cpu->rmsnorm_bwd(cc, dx.h, dw.h, dout.h, x.h, w.h, rstd.h, N, C, ld);
  gpu->rmsnorm_bwd(gc, dx.d, dw.d, dout.d, x.d, w.d, rstd.d, N, C, ld);
  check("rmsnorm_bwd ld>C dinp", &dx, 1e-4);
  check("rmsnorm_bwd ld>C dw", &dw, 1e-4);
  freeb(&x), freeb(&w), freeb(&out), freeb(&rstd), freeb(&dout), freeb(&dx), freeb(&dw);
}

/* the weightless norm (w NULL, Falcon-Mamba's dt/B/C) at a stride: no dw */
static void test_rmsnorm_weightless(void) {
  int64_t N = 70, C = 16, ld = 32;
  buf x = mk(N * ld, -2, 2), out = mk(N * ld, -1, 1), rstd = mk0(N), dout = mk(N * ld, -1, 1), dx = mk(N * ld, -1, 1);
  cpu->rmsnorm_fwd(cc, out.h, rstd.h, x.h, NULL, N, C, ld, 1e-6f);
  gpu->rmsnorm_fwd(gc, out.d, rstd.d, x.d, NULL, N, C, ld, 1e-6f);
  check("rmsnorm_fwd weightless out", &out, 1e-5);
  check("rmsnorm_fwd weightless rstd", &rstd, 1e-5);
  cpu->rmsnorm_bwd(cc, dx.h, NULL, dout.h, x.h, NULL, rstd.h, N, C, ld);
  gpu->rmsnorm_bwd(gc, dx.d, NULL, dout.d, x.d, NULL, rstd.d, N, C, ld);
  check("rmsnorm_bwd weightless dinp", &dx, 1e-4);
  freeb(&x), freeb(&out), freeb(&rstd), freeb(&dout), freeb(&dx);
}

/* the split-row RMSNorm ops (Mamba-2's gated norm shared by TP ranks): one
 * 64-wide part of 200-wide rows, the sums given as the TP sum leaves them */
static void test_rmsnorm_sum(void) {
  int64_t N = 70, C = 64, ld = 200, Cw = 128;
  buf x = mk(N * ld, -2, 2), w = mk(C, 0.5f, 1.5f), out = mk(N * ld, -1, 1), rstd = mk0(N), ss = mk0(N);
  buf dout = mk(N * ld, -1, 1), dx = mk(N * ld, -1, 1), dots = mk0(N), sums = mk(N, 20, 60), dsum = mk(N, -5, 5);
  cpu->rmsnorm_rowsum(cc, ss.h, x.h, x.h, NULL, N, C, ld);
  gpu->rmsnorm_rowsum(gc, ss.d, x.d, x.d, NULL, N, C, ld);
  check("rmsnorm_rowsum (sum of squares)", &ss, 1e-5);
  cpu->rmsnorm_rowsum(cc, dots.h, dout.h, x.h, w.h, N, C, ld);
  gpu->rmsnorm_rowsum(gc, dots.d, dout.d, x.d, w.d, N, C, ld);
  check("rmsnorm_rowsum (weighted dot)", &dots, 1e-5);
  cpu->rmsnorm_fwd_sum(cc, out.h, rstd.h, x.h, w.h, sums.h, N, C, ld, Cw, 1e-5f);
  gpu->rmsnorm_fwd_sum(gc, out.d, rstd.d, x.d, w.d, sums.d, N, C, ld, Cw, 1e-5f);
  check("rmsnorm_fwd_sum out", &out, 1e-5);
  check("rmsnorm_fwd_sum rstd", &rstd, 1e-5);
  cpu->rmsnorm_bwd_sum(cc, dx.h, dout.h, x.h, w.h, rstd.h, dsum.h, N, C, ld, Cw);
  gpu->rmsnorm_bwd_sum(gc, dx.d, dout.d, x.d, w.d, rstd.d, dsum.d, N, C, ld, Cw);
  check("rmsnorm_bwd_sum dinp", &dx, 1e-4);
  freeb(&x), freeb(&w), freeb(&out), freeb(&rstd), freeb(&ss), freeb(&dout), freeb(&dx), freeb(&dots);
  freeb(&sums), freeb(&dsum);
}

static void test_linear(void) {
  int64_t N = 37, IC = 65, OC = 47;
  buf x = mk(N * IC, -1, 1), w = mk(OC * IC, -0.5f, 0.5f), b = mk(OC, -1, 1), out = mk0(N * OC);
  buf dout = mk(N * OC, -1, 1), dx = mk(N * IC, -1, 1), dw = mk(OC * IC, -1, 1), db = mk(OC, -1, 1);
  cpu->linear_fwd(cc, out.h, x.h, w.h, b.h, N, IC, OC);
  gpu->linear_fwd(gc, out.d, x.d, w.d, b.d, N, IC, OC);
  check("linear_fwd (bias)", &out, TOL_GEMM);
  cpu->linear_fwd(cc, out.h, x.h, w.h, NULL, N, IC, OC);
  gpu->linear_fwd(gc, out.d, x.d, w.d, NULL, N, IC, OC);
  check("linear_fwd (no bias)", &out, TOL_GEMM);
  cpu->linear_bwd(cc, dx.h, dw.h, db.h, dout.h, x.h, w.h, N, IC, OC);
  gpu->linear_bwd(gc, dx.d, dw.d, db.d, dout.d, x.d, w.d, N, IC, OC);
  check("linear_bwd dinp", &dx, TOL_GEMM);
  check("linear_bwd dw", &dw, TOL_GEMM);
  check("linear_bwd db", &db, 1e-5);
  cpu->linear_bwd(cc, NULL, dw.h, NULL, dout.h, x.h, w.h, N, IC, OC);
  gpu->linear_bwd(gc, NULL, dw.d, NULL, dout.d, x.d, w.d, N, IC, OC);
  check("linear_bwd dw only", &dw, TOL_GEMM);
  /* operands 4 bytes off a 256-byte boundary (rows of a flat buffer, LM-head
   * chunks): cuBLASLt must be told the alignment they have */
  buf xo = mk(N * IC + 1, -1, 1), oo = mk0(N * OC + 1), go = mk(N * OC + 1, -1, 1);
  buf dxo = mk(N * IC + 1, -1, 1);
  cpu->linear_fwd(cc, oo.h + 1, xo.h + 1, w.h, NULL, N, IC, OC);
  gpu->linear_fwd(gc, oo.d + 1, xo.d + 1, w.d, NULL, N, IC, OC);
  check("linear_fwd (unaligned)", &oo, TOL_GEMM);
  cpu->linear_bwd(cc, dxo.h + 1, dw.h, NULL, go.h + 1, xo.h + 1, w.h, N, IC, OC);
  gpu->linear_bwd(gc, dxo.d + 1, dw.d, NULL, go.d + 1, xo.d + 1, w.d, N, IC, OC);
  check("linear_bwd (unaligned) dinp", &dxo, TOL_GEMM);
  check("linear_bwd (unaligned) dw", &dw, TOL_GEMM);
  freeb(&xo), freeb(&oo), freeb(&go), freeb(&dxo);

  /* bf16 storage: same products on bf16-rounded inputs, fp32 accumulation */
  uint16_t *xb = (uint16_t *)xmalloc((size_t)(N * IC) * 2), *wb = (uint16_t *)xmalloc((size_t)(OC * IC) * 2);
  uint16_t *gb = (uint16_t *)xmalloc((size_t)(N * OC) * 2);
  for (int64_t i = 0; i < N * IC; i++) xb[i] = sl_f32_to_bf16_scalar(x.h[i]), x.h[i] = sl_bf16_to_f32_scalar(xb[i]);
  for (int64_t i = 0; i < OC * IC; i++) wb[i] = sl_f32_to_bf16_scalar(w.h[i]), w.h[i] = sl_bf16_to_f32_scalar(wb[i]);
  for (int64_t i = 0; i < N * OC; i++)
    gb[i] = sl_f32_to_bf16_scalar(dout.h[i]), dout.h[i] = sl_bf16_to_f32_scalar(gb[i]);
  uint16_t *xbd = (uint16_t *)dev_copy(xb, (size_t)(N * IC) * 2),
           *wbd = (uint16_t *)dev_copy(wb, (size_t)(OC * IC) * 2);
  uint16_t *gbd = (uint16_t *)dev_copy(gb, (size_t)(N * OC) * 2);
  cpu->linear_fwd(cc, out.h, x.h, w.h, b.h, N, IC, OC);
  sl_cuda_linear_fwd_bf16(gc, out.d, xbd, wbd, b.d, N, IC, OC);
  check("linear_fwd_bf16", &out, 1e-4);
  /* the bf16 backward adds to the CPU's gradients, not to device copies that
   * carry the fp32 calls' TF32 error (SL_CUDA_TF32=1) */
  if (sl_cuda_upload(gc, dx.d, dx.h, (size_t)dx.n * 4) || sl_cuda_upload(gc, dw.d, dw.h, (size_t)dw.n * 4) ||
      sl_cuda_upload(gc, db.d, db.h, (size_t)db.n * 4))
    nfail++;
  cpu->linear_bwd(cc, dx.h, dw.h, db.h, dout.h, x.h, w.h, N, IC, OC);
  sl_cuda_linear_bwd_bf16(gc, dx.d, dw.d, db.d, gbd, xbd, wbd, N, IC, OC);
  check("linear_bwd_bf16 dinp", &dx, 1e-4);
  check("linear_bwd_bf16 dw", &dw, 1e-4);
  check("linear_bwd_bf16 db", &db, 1e-5);
  free(xb), free(wb), free(gb);
  sl_cuda_free(gc, xbd), sl_cuda_free(gc, wbd), sl_cuda_free(gc, gbd);
  freeb(&x), freeb(&w), freeb(&b), freeb(&out), freeb(&dout), freeb(&dx), freeb(&dw), freeb(&db);
}

/* rope fwd on q and bwd on g, CPU vs GPU; seg / dseg (host / device) NULL:
 * no document masking */
static void rope_case(buf *q, buf *g, const buf *inv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                      const int32_t *seg, const int32_t *dseg) {
  cpu->rope_fwd(cc, q->h, B, T, nh, nkv, hd, inv->h, seg);
  gpu->rope_fwd(gc, q->d, B, T, nh, nkv, hd, inv->d, dseg);
  check(seg ? "rope_fwd docs" : "rope_fwd", q, 1e-5);
  cpu->rope_bwd(cc, g->h, B, T, nh, nkv, hd, inv->h, seg);
  gpu->rope_bwd(gc, g->d, B, T, nh, nkv, hd, inv->d, dseg);
  check(seg ? "rope_bwd docs" : "rope_bwd", g, 1e-5);
}

static void test_rope(void) {
  int64_t B = 2, T = 19, nh = 4, nkv = 2, hd = 16, n = B * T * (nh + 2 * nkv) * hd;
  buf q = mk(n, -1, 1), g = mk(n, -1, 1), inv = mk_inv(hd, 10000.0f);
  rope_case(&q, &g, &inv, B, T, nh, nkv, hd, NULL, NULL);
  freeb(&q), freeb(&g), freeb(&inv);
}

static void test_attention(int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window, float cap) {
  char name[96];
  int64_t W = (nh + 2 * nkv) * hd;
  float sc = 1.0f / sqrtf((float)hd);
  buf qkv = mk(B * T * W, -1, 1), out = mk0(B * T * nh * hd), lse = mk0(B * nh * T);
  buf dout = mk(B * T * nh * hd, -1, 1), dqkv = mk(B * T * W, -1, 1);
  cpu->attention_fwd(cc, out.h, lse.h, qkv.h, B, T, nh, nkv, hd, window, sc, NULL, cap);
  gpu->attention_fwd(gc, out.d, lse.d, qkv.d, B, T, nh, nkv, hd, window, sc, NULL, cap);
  snprintf(name, sizeof name, "attn_fwd hd%lld w%lld cap%g out", (long long)hd, (long long)window, (double)cap);
  check(name, &out, 1e-4);
  snprintf(name, sizeof name, "attn_fwd hd%lld w%lld lse", (long long)hd, (long long)window);
  check(name, &lse, 1e-5);
  /* backward from the CPU's out and lse on both sides */
  if (sl_cuda_upload(gc, out.d, out.h, (size_t)out.n * 4) || sl_cuda_upload(gc, lse.d, lse.h, (size_t)lse.n * 4))
    nfail++;
  cpu->attention_bwd(cc, dqkv.h, dout.h, qkv.h, out.h, lse.h, B, T, nh, nkv, hd, window, sc, NULL, cap);
  gpu->attention_bwd(gc, dqkv.d, dout.d, qkv.d, out.d, lse.d, B, T, nh, nkv, hd, window, sc, NULL, cap);
  snprintf(name, sizeof name, "attn_bwd hd%lld w%lld cap%g dqkv", (long long)hd, (long long)window, (double)cap);
  check(name, &dqkv, 1e-4);

  /* bf16 storage of qkv / out / dout: CPU on the rounded values */
  int64_t nq = qkv.n, no = out.n;
  uint16_t *qb = (uint16_t *)xmalloc((size_t)nq * 2), *gb = (uint16_t *)xmalloc((size_t)no * 2);
  uint16_t *ob = (uint16_t *)xmalloc((size_t)no * 2);
  for (int64_t i = 0; i < nq; i++) qb[i] = sl_f32_to_bf16_scalar(qkv.h[i]), qkv.h[i] = sl_bf16_to_f32_scalar(qb[i]);
  for (int64_t i = 0; i < no; i++) gb[i] = sl_f32_to_bf16_scalar(dout.h[i]), dout.h[i] = sl_bf16_to_f32_scalar(gb[i]);
  uint16_t *qbd = (uint16_t *)dev_copy(qb, (size_t)nq * 2), *gbd = (uint16_t *)dev_copy(gb, (size_t)no * 2);
  uint16_t *obd = (uint16_t *)sl_cuda_malloc(gc, (size_t)no * 2);
  cpu->attention_fwd(cc, out.h, lse.h, qkv.h, B, T, nh, nkv, hd, window, sc, NULL, cap);
  sl_cuda_attention_fwd_bf16(gc, obd, lse.d, qbd, B, T, nh, nkv, hd, window, sc, NULL, cap);
  gpu->bf16_to_f32(gc, out.d, obd, no);
  snprintf(name, sizeof name, "attn_fwd_bf16 hd%lld out", (long long)hd);
  check(name, &out, 1e-2);
  snprintf(name, sizeof name, "attn_fwd_bf16 hd%lld lse", (long long)hd);
  check(name, &lse, 1e-4);
  for (int64_t i = 0; i < no; i++) ob[i] = sl_f32_to_bf16_scalar(out.h[i]), out.h[i] = sl_bf16_to_f32_scalar(ob[i]);
  if (sl_cuda_upload(gc, obd, ob, (size_t)no * 2) || sl_cuda_upload(gc, lse.d, lse.h, (size_t)lse.n * 4)) nfail++;
  cpu->attention_bwd(cc, dqkv.h, dout.h, qkv.h, out.h, lse.h, B, T, nh, nkv, hd, window, sc, NULL, cap);
  sl_cuda_attention_bwd_bf16(gc, dqkv.d, gbd, qbd, obd, lse.d, B, T, nh, nkv, hd, window, sc, NULL, cap);
  snprintf(name, sizeof name, "attn_bwd_bf16 hd%lld dqkv", (long long)hd);
  check(name, &dqkv, 1e-2);
  free(qb), free(gb), free(ob);
  sl_cuda_free(gc, qbd), sl_cuda_free(gc, gbd), sl_cuda_free(gc, obd);
  freeb(&qkv), freeb(&out), freeb(&lse), freeb(&dout), freeb(&dqkv);
}

/* Document masking: rope and attention with per-token document
 * starts (documents crossing the kernels' tiles, a 1-token document). */
static void test_doc(int64_t hd, int64_t window, float cap) {
  char name[96];
  int64_t B = 2, T = 75, nh = 4, nkv = 2, W = (nh + 2 * nkv) * hd;
  float sc = 1.0f / sqrtf((float)hd);
  int32_t seg[2 * 75];
  for (int64_t t = 0; t < T; t++) {
    seg[t] = t < 3 ? 0 : t < 4 ? 3 : t < 41 ? 4 : 41;
    seg[T + t] = t < 33 ? 0 : 33;
  }
  int32_t *dseg = (int32_t *)dev_copy(seg, sizeof seg);
  buf q = mk(B * T * W, -1, 1), g = mk(B * T * W, -1, 1), inv = mk_inv(hd, 10000.0f);
  rope_case(&q, &g, &inv, B, T, nh, nkv, hd, seg, dseg);
  freeb(&inv);
  buf out = mk0(B * T * nh * hd), lse = mk0(B * nh * T), dout = mk(B * T * nh * hd, -1, 1);
  buf dqkv = mk(B * T * W, -1, 1);
  cpu->attention_fwd(cc, out.h, lse.h, q.h, B, T, nh, nkv, hd, window, sc, seg, cap);
  gpu->attention_fwd(gc, out.d, lse.d, q.d, B, T, nh, nkv, hd, window, sc, dseg, cap);
  snprintf(name, sizeof name, "attn_doc_fwd hd%lld w%lld out", (long long)hd, (long long)window);
  check(name, &out, 1e-4);
  snprintf(name, sizeof name, "attn_doc_fwd hd%lld w%lld lse", (long long)hd, (long long)window);
  check(name, &lse, 1e-5);
  if (sl_cuda_upload(gc, out.d, out.h, (size_t)out.n * 4) || sl_cuda_upload(gc, lse.d, lse.h, (size_t)lse.n * 4))
    nfail++;
  cpu->attention_bwd(cc, dqkv.h, dout.h, q.h, out.h, lse.h, B, T, nh, nkv, hd, window, sc, seg, cap);
  gpu->attention_bwd(gc, dqkv.d, dout.d, q.d, out.d, lse.d, B, T, nh, nkv, hd, window, sc, dseg, cap);
  snprintf(name, sizeof name, "attn_doc_bwd hd%lld w%lld cap%g dqkv", (long long)hd, (long long)window, (double)cap);
  check(name, &dqkv, 1e-4);
  sl_cuda_free(gc, dseg);
  freeb(&q), freeb(&g), freeb(&out), freeb(&lse), freeb(&dout), freeb(&dqkv);
}

/* int32 outputs of the two backends equal (mismatches counted) */
static void check_i32(const char *name, const int32_t *h, const int32_t *d, int64_t n) {
  int32_t *g = (int32_t *)xmalloc((size_t)n * 4);
  int st = sl_cuda_download(gc, g, d, (size_t)n * 4);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += g[i] != h[i];
  report(name, n, (double)bad, (double)bad, 0, st == SL_OK && !bad);
  free(g);
}
/* The MoE ops: routing (one expert idle: an empty group; with the expert
 * bias, a capacity of cap slots (0: dropless), the logsumexp; mode
 * SL_MOE_NORM | SL_MOE_SIGMOID, the routed scaling factor), grouping, rows,
 * combine, and the backwards (+ the aux and z-loss gradients; sigmoid
 * mode: the aux loss's only, it has no logsumexp). */
static void test_moe(int64_t N, int64_t E, int64_t k, int64_t C, int mode, float scale, int64_t cap, int with_bias) {
  int sig = mode & SL_MOE_SIGMOID;
  buf lg = mk(N * E, -3, 3), probs = mk0(N * E), wts = mk0(N * k), dl = mk(N * E, -1, 1), dw = mk(N * k, -1, 1);
  buf lse = mk0(N), bias = mk(E, -0.3f, 0.3f);
  for (int64_t t = 0; t < N; t++) lg.h[t * E + E - 1] = -40.0f;
  if (sl_cuda_upload(gc, lg.d, lg.h, (size_t)lg.n * 4)) nfail++;
  size_t ib = (size_t)(N * k) * 4 * 3 + (size_t)(2 * E + 1) * 4;
  int32_t *hs = (int32_t *)xmalloc(ib), *hp = hs + N * k, *hq = hp + N * k, *ho = hq + N * k;
  int32_t *ds = (int32_t *)sl_cuda_malloc(gc, ib), *dp = ds + N * k, *dq = dp + N * k, *dof = dq + N * k;
  cpu->moe_route_fwd(cc, probs.h, hs, wts.h, ho, hp, hq, sig ? NULL : lse.h, lg.h, with_bias ? bias.h : NULL, N, E, k,
                     mode, scale, cap);
  gpu->moe_route_fwd(gc, probs.d, ds, wts.d, dof, dp, dq, sig ? NULL : lse.d, lg.d, with_bias ? bias.d : NULL, N, E, k,
                     mode, scale, cap);
  printf("  moe routing N %lld E %lld k %lld mode %d scale %g cap %lld bias %d: %d slots dropped\n", (long long)N,
         (long long)E, (long long)k, mode, (double)scale, (long long)cap, with_bias, (int)(N * k - ho[E]));
  check("moe_route_fwd probs", &probs, 1e-5);
  if (!sig) check("moe_route_fwd lse", &lse, 1e-5);
  check("moe_route_fwd wts (dropped: 0)", &wts, 1e-5);
  check_i32("moe_route_fwd sel (dropped: -1 - e)", hs, ds, N * k);
  check_i32("moe_route_fwd offs (idle expert; the dropped groups)", ho, dof, 2 * E + 1);
  check_i32("moe_route_fwd perm", hp, dp, N * k);
  check_i32("moe_route_fwd pos", hq, dq, N * k);
  cpu->moe_route_bwd(cc, dl.h, dw.h, probs.h, hs, wts.h, NULL, NULL, 0.0f, N, E, k, mode, scale);
  gpu->moe_route_bwd(gc, dl.d, dw.d, probs.d, ds, wts.d, NULL, NULL, 0.0f, N, E, k, mode, scale);
  check("moe_route_bwd", &dl, 1e-5);
  buf gp = mk(E, -1, 1); /* the aux loss's gradient on every probability, the z-loss's on the logsumexp */
  cpu->moe_route_bwd(cc, dl.h, dw.h, probs.h, hs, wts.h, gp.h, sig ? NULL : lse.h, sig ? 0.0f : 0.3f, N, E, k, mode,
                     scale);
  gpu->moe_route_bwd(gc, dl.d, dw.d, probs.d, ds, wts.d, gp.d, sig ? NULL : lse.d, sig ? 0.0f : 0.3f, N, E, k, mode,
                     scale);
  check(sig ? "moe_route_bwd + gp" : "moe_route_bwd + gp + z", &dl, 1e-5);
  freeb(&gp), freeb(&lse), freeb(&bias);
  buf x = mk(N * C, -1, 1), xp = mk0(N * k * C), dxp = mk(N * k * C, -1, 1), dx = mk(N * C, -1, 1);
  cpu->moe_permute_fwd(cc, xp.h, x.h, hq, N, k, C);
  gpu->moe_permute_fwd(gc, xp.d, x.d, dq, N, k, C);
  check("moe_permute_fwd", &xp, 0);
  cpu->moe_permute_bwd(cc, dx.h, dxp.h, hq, N, k, C);
  gpu->moe_permute_bwd(gc, dx.d, dxp.d, dq, N, k, C);
  check("moe_permute_bwd", &dx, 1e-6);
  buf out = mk0(N * C), dyp = mk(N * k * C, -1, 1);
  cpu->moe_combine_fwd(cc, out.h, dxp.h, wts.h, hq, N, k, C);
  gpu->moe_combine_fwd(gc, out.d, dxp.d, wts.d, dq, N, k, C);
  check("moe_combine_fwd", &out, 1e-6);
  cpu->moe_combine_bwd(cc, dyp.h, dw.h, x.h, xp.h, wts.h, hq, N, k, C);
  gpu->moe_combine_bwd(gc, dyp.d, dw.d, x.d, xp.d, wts.d, dq, N, k, C);
  check("moe_combine_bwd dyp", &dyp, 1e-6);
  check("moe_combine_bwd dwts", &dw, 1e-5);
  free(hs), sl_cuda_free(gc, ds);
  freeb(&lg), freeb(&probs), freeb(&wts), freeb(&dl), freeb(&dw), freeb(&x), freeb(&xp), freeb(&dxp), freeb(&dx);
  freeb(&out), freeb(&dyp);
}

static void test_pointwise(void) {
  int64_t N = 33, H = 70, n = 1000;
  buf gu = mk(N * 2 * H, -4, 4), out = mk0(N * H), dout = mk(N * H, -1, 1), dgu = mk(N * 2 * H, -1, 1);
  cpu->swiglu_fwd(cc, out.h, gu.h, N, H);
  gpu->swiglu_fwd(gc, out.d, gu.d, N, H);
  check_r("swiglu_fwd", &out, 1e-5);
  cpu->swiglu_bwd(cc, dgu.h, dout.h, gu.h, N, H);
  gpu->swiglu_bwd(gc, dgu.d, dout.d, gu.d, N, H);
  check_r("swiglu_bwd", &dgu, 1e-5);
  cpu->geglu_fwd(cc, out.h, gu.h, N, H);
  gpu->geglu_fwd(gc, out.d, gu.d, N, H);
  check_r("geglu_fwd", &out, 1e-5);
  cpu->geglu_bwd(cc, dgu.h, dout.h, gu.h, N, H);
  gpu->geglu_bwd(gc, dgu.d, dout.d, gu.d, N, H);
  check_r("geglu_bwd", &dgu, 1e-5);
  buf y = mk(n, -1, 1), x = mk(n, -1, 1);
  cpu->add_inplace(cc, y.h, x.h, n);
  gpu->add_inplace(gc, y.d, x.d, n);
  check("add_inplace", &y, 0);
  cpu->scale_add(cc, y.h, -0.37f, 2.5f, n);
  gpu->scale_add(gc, y.d, -0.37f, 2.5f, n);
  check("scale_add", &y, 0);
  cpu->softcap(cc, y.h, 0.7f, n);
  gpu->softcap(gc, y.d, 0.7f, n);
  check("softcap", &y, 1e-6);
  buf s = mk0(n), dx = mk(n, -1, 1), xs = mk(n, -6, 6);
  cpu->silu_fwd(cc, s.h, xs.h, n);
  gpu->silu_fwd(gc, s.d, xs.d, n);
  check_r("silu_fwd", &s, 1e-5);
  cpu->silu_bwd(cc, dx.h, x.h, xs.h, n);
  gpu->silu_bwd(gc, dx.d, x.d, xs.d, n);
  check_r("silu_bwd", &dx, 1e-5);
  /* relu2: exact (one product; the backward one fmaf on both sides); x holds
   * zeros of both signs and negatives (gradient 0), dx starts non-zero (+=) */
  buf xr = mk(n, -4, 4), r2 = mk0(n), dr = mk(n, -1, 1);
  for (int64_t i = 0; i < n; i += 97) xr.h[i] = i % 2 ? 0.0f : -0.0f;
  if (sl_cuda_upload(gc, xr.d, xr.h, (size_t)n * 4)) exit(1);
  cpu->relu2_fwd(cc, r2.h, xr.h, n);
  gpu->relu2_fwd(gc, r2.d, xr.d, n);
  check_r("relu2_fwd", &r2, 0);
  cpu->relu2_bwd(cc, dr.h, x.h, xr.h, n);
  gpu->relu2_bwd(gc, dr.d, x.d, xr.d, n);
  check_r("relu2_bwd", &dr, 0);
  /* gate: z is a column slice of a wider row (ldz = 2D) */
  int64_t D = 50, ldz = 2 * D;
  buf yy = mk(N * D, -1, 1), z = mk(N * ldz, -4, 4), go = mk0(N * D), gg = mk(N * D, -1, 1);
  buf dy = mk(N * D, -1, 1), dz = mk(N * ldz, -1, 1);
  cpu->gate_fwd(cc, go.h, yy.h, z.h + D, ldz, N, D);
  gpu->gate_fwd(gc, go.d, yy.d, z.d + D, ldz, N, D);
  check_r("gate_fwd", &go, 1e-5);
  cpu->gate_bwd(cc, dy.h, dz.h + D, ldz, gg.h, yy.h, z.h + D, N, D);
  gpu->gate_bwd(gc, dy.d, dz.d + D, ldz, gg.d, yy.d, z.d + D, N, D);
  check_r("gate_bwd dy", &dy, 1e-5);
  check("gate_bwd dz", &dz, TOL_R(1e-5));
  freeb(&gu), freeb(&out), freeb(&dout), freeb(&dgu), freeb(&y), freeb(&x), freeb(&s), freeb(&dx);
  freeb(&xs), freeb(&yy), freeb(&z), freeb(&go), freeb(&gg), freeb(&dy), freeb(&dz), freeb(&xr), freeb(&r2);
  freeb(&dr);
}

static void test_lmhead(float cap) {
  int64_t N = 29, C = 48, V = 301;
  int32_t *td, *tg = mk_tok(N, (int32_t)V, 1, &td);
  buf x = mk(N * C, -1, 1), w = mk(V * C, -0.5f, 0.5f), loss = mk0(N), lse = mk0(N);
  buf dx = mk(N * C, -1, 1), dw = mk(V * C, -1, 1);
  cpu->lmhead_ce_fwd(cc, loss.h, lse.h, x.h, w.h, tg, N, C, V, cap);
  gpu->lmhead_ce_fwd(gc, loss.d, lse.d, x.d, w.d, td, N, C, V, cap);
  check(cap > 0 ? "lmhead_ce_fwd losses (softcap)" : "lmhead_ce_fwd losses", &loss, TOL_GEMM);
  check(cap > 0 ? "lmhead_ce_fwd lse (softcap)" : "lmhead_ce_fwd lse", &lse, TOL_GEMM);
  if (sl_cuda_upload(gc, lse.d, lse.h, (size_t)N * 4)) nfail++;
  cpu->lmhead_ce_bwd(cc, dx.h, dw.h, x.h, w.h, tg, lse.h, 1.0f / (float)N, N, C, V, cap);
  gpu->lmhead_ce_bwd(gc, dx.d, dw.d, x.d, w.d, td, lse.d, 1.0f / (float)N, N, C, V, cap);
  check(cap > 0 ? "lmhead_ce_bwd dx (softcap)" : "lmhead_ce_bwd dx", &dx, TOL_GEMM);
  check(cap > 0 ? "lmhead_ce_bwd dw (softcap)" : "lmhead_ce_bwd dw", &dw, TOL_GEMM);
  free(tg), sl_cuda_free(gc, td);
  freeb(&x), freeb(&w), freeb(&loss), freeb(&lse), freeb(&dx), freeb(&dw);
}

static void test_optim(void) {
  int64_t n = 1000;
  buf p = mk(n, -1, 1), m = mk(n, -0.1f, 0.1f), v = mk(n, 0, 0.01f), g = mk(n, -1, 1);
  for (int step = 1; step <= 3; step++) {
    cpu->adamw(cc, p.h, m.h, v.h, g.h, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
    gpu->adamw(gc, p.d, m.d, v.d, g.d, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
  }
  check("adamw p", &p, 1e-5);
  check("adamw m", &m, 1e-5);
  check("adamw v", &v, 1e-5);
  int64_t ns = 100003;
  buf x = mk(ns, -3, 3);
  double a = cpu->sumsq(cc, x.h, ns), b = gpu->sumsq(gc, x.d, ns), b2 = gpu->sumsq(gc, x.d, ns);
  double rel = fabs(a - b) / a;
  /* double sums in another order: 1.6e-13 measured (emulator, every
   * OPENBLAS_CORETYPE); n * eps = 1.1e-11 is the worst case; a float
   * accumulation would be ~1e-7 */
  report("sumsq", ns, fabs(a - b), rel, 1e-11, rel <= 1e-11 && sl_cuda_last_status(gc) == SL_OK);
  report("sumsq deterministic", ns, fabs(b - b2), 0, 0, b == b2);
  /* bf16 casts: exact, with ties, specials and NaN */
  float sp[8] = {1.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.00390625f, 1.01171875f, 3.4e38f};
  for (int i = 0; i < 8; i++) x.h[i] = sp[i];
  if (sl_cuda_upload(gc, x.d, x.h, 8 * 4)) nfail++;
  uint16_t *hb = (uint16_t *)xmalloc((size_t)ns * 2), *gbh = (uint16_t *)xmalloc((size_t)ns * 2);
  uint16_t *gbd = (uint16_t *)sl_cuda_malloc(gc, (size_t)ns * 2);
  cpu->f32_to_bf16(cc, hb, x.h, ns);
  gpu->f32_to_bf16(gc, gbd, x.d, ns);
  sl_cuda_download(gc, gbh, gbd, (size_t)ns * 2);
  int64_t bad = 0;
  for (int64_t i = 0; i < ns; i++) bad += hb[i] != gbh[i];
  report("f32_to_bf16 (bit-exact)", ns, (double)bad, 0, 0, bad == 0);
  buf y = mk0(ns);
  cpu->bf16_to_f32(cc, y.h, hb, ns);
  gpu->bf16_to_f32(gc, y.d, gbd, ns);
  float *yh = (float *)xmalloc((size_t)ns * 4);
  sl_cuda_download(gc, yh, y.d, (size_t)ns * 4);
  report("bf16_to_f32 (bit-exact)", ns, 0, 0, 0, memcmp(yh, y.h, (size_t)ns * 4) == 0);
  for (int64_t i = 0; i < ns; i++) x.h[i] = sl_bf16_to_f32_scalar(sl_f32_to_bf16_scalar(x.h[i]));
  sl_cuda_round_bf16(gc, x.d, ns);
  sl_cuda_download(gc, yh, x.d, (size_t)ns * 4);
  report("round_bf16 (bit-exact)", ns, 0, 0, 0, memcmp(yh, x.h, (size_t)ns * 4) == 0);
  free(hb), free(gbh), free(yh), sl_cuda_free(gc, gbd);
  freeb(&p), freeb(&m), freeb(&v), freeb(&g), freeb(&x), freeb(&y);
}

/* The scalar slots: scalar_acc adds exactly the double sum / sumsq return
 * (bit for bit, on both backends), scalar_add a host term, one fetch
 * returns every slot and zeroes them; the counters see one download and one
 * wait for it, none for the queued ops, and an allocation for the reserve. */
static void test_scalars(void) {
  int64_t n = 70001;
  buf x = mk(n, -2, 2);
  const sl_ops *be[2] = {cpu, gpu};
  sl_kctx *kc[2] = {cc, gc};
  const float *px[2] = {x.h, x.d};
  for (int i = 0; i < 2; i++) {
    sl_dev_stats s0, s1, s2;
    be[i]->dev_stats(kc[i], &s0);
    int rc = be[i]->scalars_reserve(kc[i], 3);
    be[i]->dev_stats(kc[i], &s1);
    double want0 = 0.0, want1 = 0.0, got[3] = {-1, -1, -1}, again[3] = {-1, -1, -1};
    want0 += be[i]->sum(kc[i], px[i], n);
    want0 += 0.25;
    want0 += be[i]->sum(kc[i], px[i], 5);
    want1 += be[i]->sumsq(kc[i], px[i], n);
    be[i]->scalar_acc(kc[i], 0, px[i], n, 0);
    be[i]->scalar_add(kc[i], 0, 0.25);
    be[i]->scalar_acc(kc[i], 0, px[i], 5, 0);
    be[i]->scalar_acc(kc[i], 1, px[i], n, 1);
    be[i]->dev_stats(kc[i], &s2);
    int queued = s2.syncs == s1.syncs + 3 && s2.downloads == s1.downloads + 3; /* the three sum / sumsq only */
    if (!rc) rc = be[i]->scalars_fetch(kc[i], got, 3);
    sl_dev_stats s3;
    be[i]->dev_stats(kc[i], &s3);
    if (!rc) rc = be[i]->scalars_fetch(kc[i], again, 3);
    int ok = !rc && got[0] == want0 && got[1] == want1 && got[2] == 0.0 && again[0] == 0.0 && again[1] == 0.0;
    if (i == 1)
      ok = ok && queued && s1.allocs == s0.allocs + 1 && s3.downloads == s2.downloads + 1 && s3.syncs == s2.syncs + 1 &&
           s3.allocs == s2.allocs && s3.frees == s2.frees;
    else ok = ok && s3.syncs == 0 && s3.allocs == 0 && s3.downloads == 0;
    report(i ? "scalars cuda (bit-exact, 1 wait)" : "scalars cpu (bit-exact, 0s)", n, fabs(got[0] - want0), 0, 0, ok);
  }
  /* a fetch past the reserved slots is refused with the counts */
  double big[4];
  int rc = gpu->scalars_fetch(gc, big, 4);
  report("scalars_fetch past the reserve", 4, 0, 0, 0, rc == SL_EINPUT && strstr(sl_cuda_last_error(gc), "3 reserved"));
  sl_cuda_clear_status(gc);
  freeb(&x);
}

/* seg (host, *dev: device copy) of B samples of T steps: documents start at
 * 0, s1 + b and s2 (s2 <= s1 + b: none) */
static int32_t *mk_docs(int64_t B, int64_t T, int64_t s1, int64_t s2, int32_t **dev) {
  int32_t *seg = (int32_t *)xmalloc((size_t)(B * T) * 4);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) seg[b * T + t] = (int32_t)(s2 > s1 + b && t >= s2 ? s2 : t >= s1 + b ? s1 + b : 0);
  *dev = (int32_t *)dev_copy(seg, (size_t)(B * T) * 4);
  return seg;
}

/* docs: three documents in sample 0 (0, 9, 11: the second shorter than K),
 * two in sample 1 (0, 10) */
static void test_conv1d(int docs) {
  int64_t B = 2, T = 23, D = 24, K = 4, ldx = 40;
  int32_t *seg = NULL, *segd = NULL;
  if (docs) seg = mk_docs(B, T, 9, 11, &segd);
  buf x = mk(B * T * ldx, -1, 1), w = mk(D * K, -1, 1), bias = mk(D, -1, 1), out = mk0(B * T * D);
  buf dout = mk(B * T * D, -1, 1), dx = mk(B * T * ldx, -1, 1), dw = mk(D * K, -1, 1), db = mk(D, -1, 1);
  cpu->conv1d_fwd(cc, out.h, x.h + 3, ldx, w.h, bias.h, B, T, D, K, seg);
  gpu->conv1d_fwd(gc, out.d, x.d + 3, ldx, w.d, bias.d, B, T, D, K, segd);
  check_r(docs ? "conv1d_fwd docs" : "conv1d_fwd", &out, 1e-5);
  cpu->conv1d_bwd(cc, dx.h + 3, ldx, dw.h, db.h, dout.h, x.h + 3, ldx, w.h, B, T, D, K, seg);
  gpu->conv1d_bwd(gc, dx.d + 3, ldx, dw.d, db.d, dout.d, x.d + 3, ldx, w.d, B, T, D, K, segd);
  check(docs ? "conv1d_bwd docs dx" : "conv1d_bwd dx", &dx, TOL_R(1e-5));
  check(docs ? "conv1d_bwd docs dw" : "conv1d_bwd dw", &dw, 1e-5);
  check(docs ? "conv1d_bwd docs dbias" : "conv1d_bwd dbias", &db, 1e-5);
  freeb(&x), freeb(&w), freeb(&bias), freeb(&out), freeb(&dout), freeb(&dx), freeb(&dw), freeb(&db);
  if (docs) free(seg), sl_cuda_free(gc, segd);
}

/* docs: documents start at T/3 + b (mid-chunk for these sizes) and at the
 * chunk start after 2T/3 (when chunk < T) */
static void test_scan(int64_t B, int64_t T, int64_t D, int64_t S, int64_t chunk, int docs) {
  char name[96];
  int64_t ldbc = 2 * S + 5, nck = (T + chunk - 1) / chunk;
  int32_t *seg = NULL, *segd = NULL;
  if (docs) seg = mk_docs(B, T, T / 3, (2 * T / 3 + chunk - 1) / chunk * chunk, &segd);
  buf u = mk(B * T * D, -1, 1), dt = mk(B * T * D, -3, 1), Al = mk(D * S, -1, 1.5f);
  buf bc = mk(B * T * ldbc, -1, 1), Dp = mk(D, -1, 1), y = mk0(B * T * D), ck = mk0(B * nck * D * S);
  buf dy = mk(B * T * D, -1, 1), du = mk(B * T * D, -1, 1), ddt = mk(B * T * D, -1, 1);
  buf dAl = mk(D * S, -1, 1), dbc = mk(B * T * ldbc, -1, 1), dDp = mk(D, -1, 1);
  cpu->scan_fwd(cc, y.h, ck.h, u.h, dt.h, Al.h, bc.h, bc.h + S, ldbc, Dp.h, seg, B, T, D, S, chunk);
  gpu->scan_fwd(gc, y.d, ck.d, u.d, dt.d, Al.d, bc.d, bc.d + S, ldbc, Dp.d, segd, B, T, D, S, chunk);
  snprintf(name, sizeof name, "scan_fwd S%lld ck%lld%s y", (long long)S, (long long)chunk, docs ? " docs" : "");
  check_r(name, &y, 1e-4);
  snprintf(name, sizeof name, "scan_fwd S%lld ck%lld ckpt", (long long)S, (long long)chunk);
  check(name, &ck, 1e-4);
  if (sl_cuda_upload(gc, ck.d, ck.h, (size_t)ck.n * 4)) nfail++;
  cpu->scan_bwd(cc, du.h, ddt.h, dAl.h, dbc.h, dbc.h + S, dDp.h, dy.h, u.h, dt.h, Al.h, bc.h, bc.h + S, ldbc, Dp.h, seg,
                ck.h, B, T, D, S, chunk);
  gpu->scan_bwd(gc, du.d, ddt.d, dAl.d, dbc.d, dbc.d + S, dDp.d, dy.d, u.d, dt.d, Al.d, bc.d, bc.d + S, ldbc, Dp.d,
                segd, ck.d, B, T, D, S, chunk);
  snprintf(name, sizeof name, "scan_bwd S%lld du", (long long)S);
  check_r(name, &du, 1e-4);
  snprintf(name, sizeof name, "scan_bwd S%lld ddt", (long long)S);
  check_r(name, &ddt, 1e-4);
  snprintf(name, sizeof name, "scan_bwd S%lld dA_log", (long long)S);
  check(name, &dAl, 1e-4);
  snprintf(name, sizeof name, "scan_bwd S%lld dBm+dCm", (long long)S);
  check(name, &dbc, TOL_R(1e-4));
  snprintf(name, sizeof name, "scan_bwd S%lld dDp", (long long)S);
  check(name, &dDp, 1e-4);
  freeb(&u), freeb(&dt), freeb(&Al), freeb(&bc), freeb(&Dp), freeb(&y), freeb(&ck), freeb(&dy);
  freeb(&du), freeb(&ddt), freeb(&dAl), freeb(&dbc), freeb(&dDp);
  if (docs) free(seg), sl_cuda_free(gc, segd);
}

/* device buffers a and b: bit for bit (tol 0) or within rel = max|a - b| /
 * max|a| <= tol */
static void check_dd(const char *name, const float *a_d, const float *b_d, int64_t n, double tol) {
  float *a = (float *)xmalloc((size_t)n * 4), *b = (float *)xmalloc((size_t)n * 4);
  int st = sl_cuda_download(gc, a, a_d, (size_t)n * 4) | sl_cuda_download(gc, b, b_d, (size_t)n * 4);
  double maxabs = 0, ref = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - (double)b[i]);
    if (e > maxabs || isnan(e)) maxabs = isnan(e) ? INFINITY : e;
    if (fabs(a[i]) > ref) ref = fabs(a[i]);
  }
  double rel = maxabs / (ref > 1e-30 ? ref : 1e-30);
  report(name, n, maxabs, rel, tol, st == SL_OK && (tol > 0 ? rel <= tol : !memcmp(a, b, (size_t)n * 4)));
  free(a), free(b);
}

/* The resets' key property on the device: a packed row gives what its
 * documents give run one by one (B = 1, seg NULL): the per-position outputs
 * bit for bit, the weight gradients (summed in another order here) within
 * the tolerance. The documents of test_conv1d / test_scan. */
static void test_docs_split(void) {
  int64_t B = 2, T = 37, D = 150, K = 4, S = 16, chunk = 8, ldbc = 2 * S + 3, N = B * T, nck = (T + chunk - 1) / chunk;
  int32_t *segd, *segc = mk_docs(B, T, 9, 11, &segd), *segsd, *segs = mk_docs(B, T, 12, 24, &segsd);
  buf x = mk(N * D, -1, 1), w = mk(D * K, -1, 1), bias = mk(D, -1, 1), dout = mk(N * D, -1, 1);
  buf op = mk0(N * D), dxp = mk0(N * D), dwp = mk0(D * K), dbp = mk0(D);
  buf os = mk0(N * D), dxs = mk0(N * D), dws = mk0(D * K), dbs = mk0(D);
  gpu->conv1d_fwd(gc, op.d, x.d, D, w.d, bias.d, B, T, D, K, segd);
  gpu->conv1d_bwd(gc, dxp.d, D, dwp.d, dbp.d, dout.d, x.d, D, w.d, B, T, D, K, segd);
  /* the scan: u = x, dy = dout (any values do) */
  buf dt = mk(N * D, -3, 1), Al = mk(D * S, -1, 1.5f), bc = mk(N * ldbc, -1, 1), Dp = mk(D, -1, 1);
  buf y = mk0(N * D), ck = mk0(B * nck * D * S), du = mk0(N * D), ddt = mk0(N * D), dA = mk0(D * S);
  buf dbc = mk0(N * ldbc), dD = mk0(D);
  buf ys = mk0(N * D), cks = mk0(nck * D * S), dus = mk0(N * D), ddts = mk0(N * D), dAs = mk0(D * S);
  buf dbcs = mk0(N * ldbc), dDs = mk0(D);
  gpu->scan_fwd(gc, y.d, ck.d, x.d, dt.d, Al.d, bc.d, bc.d + S, ldbc, Dp.d, segsd, B, T, D, S, chunk);
  gpu->scan_bwd(gc, du.d, ddt.d, dA.d, dbc.d, dbc.d + S, dD.d, dout.d, x.d, dt.d, Al.d, bc.d, bc.d + S, ldbc, Dp.d,
                segsd, ck.d, B, T, D, S, chunk);
  for (int pass = 0; pass < 2; pass++) {
    const int32_t *seg = pass ? segs : segc;
    for (int64_t b = 0; b < B; b++)
      for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && seg[b * T + t1] == seg[b * T + t0]) t1++;
        const int64_t L = t1 - t0, r = b * T + t0;
        if (!pass) {
          gpu->conv1d_fwd(gc, os.d + r * D, x.d + r * D, D, w.d, bias.d, 1, L, D, K, NULL);
          gpu->conv1d_bwd(gc, dxs.d + r * D, D, dws.d, dbs.d, dout.d + r * D, x.d + r * D, D, w.d, 1, L, D, K, NULL);
        } else {
          const float *Bm = bc.d + r * ldbc;
          gpu->scan_fwd(gc, ys.d + r * D, cks.d, x.d + r * D, dt.d + r * D, Al.d, Bm, Bm + S, ldbc, Dp.d, NULL, 1, L, D,
                        S, chunk);
          gpu->scan_bwd(gc, dus.d + r * D, ddts.d + r * D, dAs.d, dbcs.d + r * ldbc, dbcs.d + r * ldbc + S, dDs.d,
                        dout.d + r * D, x.d + r * D, dt.d + r * D, Al.d, Bm, Bm + S, ldbc, Dp.d, NULL, cks.d, 1, L, D,
                        S, chunk);
        }
        t0 = t1;
      }
  }
  check_dd("conv1d packed = docs: out (bitwise)", op.d, os.d, N * D, 0);
  check_dd("conv1d packed = docs: dx (bitwise)", dxp.d, dxs.d, N * D, 0);
  check_dd("conv1d packed = docs: dw", dwp.d, dws.d, D * K, 1e-5);
  check_dd("conv1d packed = docs: dbias", dbp.d, dbs.d, D, 1e-5);
  check_dd("scan packed = docs: y (bitwise)", y.d, ys.d, N * D, 0);
  check_dd("scan packed = docs: du (bitwise)", du.d, dus.d, N * D, 0);
  check_dd("scan packed = docs: ddt (bitwise)", ddt.d, ddts.d, N * D, 0);
  check_dd("scan packed = docs: dBm+dCm (bitwise)", dbc.d, dbcs.d, N * ldbc, 0);
  check_dd("scan packed = docs: dA_log", dA.d, dAs.d, D * S, 1e-4);
  check_dd("scan packed = docs: dDp", dD.d, dDs.d, D, 1e-4);
  buf *all[] = {&x,  &w, &bias, &dout, &op,  &dxp, &dwp, &dbp, &os, &dxs, &dws, &dbs,  &dt,  &Al,   &bc,
                &Dp, &y, &ck,   &du,   &ddt, &dA,  &dbc, &dD,  &ys, &cks, &dus, &ddts, &dAs, &dbcs, &dDs};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) freeb(all[i]);
  free(segc), free(segs), sl_cuda_free(gc, segd), sl_cuda_free(gc, segsd);
}

/* Mamba-2's SSD scan: x, dt and B|C each inside rows wider than the data
 * (slices of one in_proj / conv output row), the dt clamp biting, and with
 * `docs` two documents per sample, one starting mid-chunk. */
static void test_ssd(int64_t B, int64_t T, int64_t H, int64_t P, int64_t G, int64_t S, int64_t chunk, int docs) {
  char name[96];
  const int64_t HP = H * P, ldx = HP + 7, lddt = H + 3, ldbc = 2 * G * S + 5, nck = (T + chunk - 1) / chunk;
  const int64_t N = B * T, ox = 2, odt = 1;
  const float lo = 0.05f, hi = 3.0f; /* softplus of [-4, 3] spans [0.018, 3.05] */
  int32_t *seg = NULL, *segd = NULL;
  if (docs) {
    seg = (int32_t *)xmalloc((size_t)N * 4);
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) seg[b * T + t] = (int32_t)(t < T / 2 + b ? 0 : T / 2 + b);
    segd = (int32_t *)dev_copy(seg, (size_t)N * 4);
  }
  buf x = mk(N * ldx, -1, 1), dt = mk(N * lddt, -4, 3), dtb = mk(H, -0.5f, 0.5f), Al = mk(H, -1, 1.5f);
  buf bc = mk(N * ldbc, -1, 1), Dp = mk(H, -1, 1), y = mk0(N * HP), ck = mk0(B * nck * HP * S);
  buf dy = mk(N * HP, -1, 1), dx = mk(N * ldx, -1, 1), ddt = mk(N * lddt, -1, 1), ddtb = mk(H, -1, 1);
  buf dAl = mk(H, -1, 1), dbc = mk(N * ldbc, -1, 1), dDp = mk(H, -1, 1);
  const float *bo = bc.h, *co = bc.h + G * S, *bod = bc.d, *cod = bc.d + G * S;
  cpu->ssd_fwd(cc, y.h, ck.h, x.h + ox, ldx, dt.h + odt, lddt, dtb.h, Al.h, bo, co, ldbc, Dp.h, seg, lo, hi, B, T, H, P,
               G, S, chunk);
  gpu->ssd_fwd(gc, y.d, ck.d, x.d + ox, ldx, dt.d + odt, lddt, dtb.d, Al.d, bod, cod, ldbc, Dp.d, segd, lo, hi, B, T, H,
               P, G, S, chunk);
  snprintf(name, sizeof name, "ssd_fwd G%lld S%lld ck%lld%s y", (long long)G, (long long)S, (long long)chunk,
           docs ? " docs" : "");
  check_r(name, &y, 1e-4);
  snprintf(name, sizeof name, "ssd_fwd G%lld S%lld ck%lld ckpt", (long long)G, (long long)S, (long long)chunk);
  check(name, &ck, 1e-4);
  if (sl_cuda_upload(gc, ck.d, ck.h, (size_t)ck.n * 4)) nfail++;
  buf *gr[6] = {&dx, &ddt, &ddtb, &dAl, &dbc, &dDp};
  float *g0[6]; /* the gradients' start values, for the chunk-1 run below */
  for (int i = 0; i < 6; i++) {
    g0[i] = (float *)xmalloc((size_t)gr[i]->n * 4);
    memcpy(g0[i], gr[i]->h, (size_t)gr[i]->n * 4);
  }
  cpu->ssd_bwd(cc, dx.h + ox, ddt.h + odt, ddtb.h, dAl.h, dbc.h, dbc.h + G * S, dDp.h, dy.h, x.h + ox, ldx, dt.h + odt,
               lddt, dtb.h, Al.h, bo, co, ldbc, Dp.h, seg, ck.h, lo, hi, B, T, H, P, G, S, chunk);
  gpu->ssd_bwd(gc, dx.d + ox, ddt.d + odt, ddtb.d, dAl.d, dbc.d, dbc.d + G * S, dDp.d, dy.d, x.d + ox, ldx, dt.d + odt,
               lddt, dtb.d, Al.d, bod, cod, ldbc, Dp.d, segd, ck.d, lo, hi, B, T, H, P, G, S, chunk);
  snprintf(name, sizeof name, "ssd_bwd G%lld S%lld dx", (long long)G, (long long)S);
  check(name, &dx, TOL_R(1e-4));
  snprintf(name, sizeof name, "ssd_bwd G%lld S%lld ddt", (long long)G, (long long)S);
  check(name, &ddt, TOL_R(1e-4));
  snprintf(name, sizeof name, "ssd_bwd G%lld S%lld ddt_bias", (long long)G, (long long)S);
  check(name, &ddtb, 1e-4);
  snprintf(name, sizeof name, "ssd_bwd G%lld S%lld dA_log", (long long)G, (long long)S);
  check(name, &dAl, 1e-4);
  snprintf(name, sizeof name, "ssd_bwd G%lld S%lld dBm+dCm", (long long)G, (long long)S);
  check(name, &dbc, TOL_R(1e-4));
  snprintf(name, sizeof name, "ssd_bwd G%lld S%lld dDp", (long long)G, (long long)S);
  check(name, &dDp, 1e-4);
  if (chunk > 1) {
    /* the device's own forward and backward at `chunk` and at chunk 1 (the
     * checks above ran on the CPU's ckpt): chunk 1 reads every state from the
     * forward's ckpt (no recompute) and no summation order depends on the
     * chunk, so the gradients are the same bits exactly when the recomputed
     * states are the forward's */
    float *g1[2][6];
    for (int r = 0; r < 2; r++) {
      const int64_t ckr = r ? 1 : chunk;
      buf y1 = mk0(N * HP), ck1 = mk0(B * ((T + ckr - 1) / ckr) * HP * S);
      for (int i = 0; i < 6; i++) g1[r][i] = (float *)dev_copy(g0[i], (size_t)gr[i]->n * 4);
      gpu->ssd_fwd(gc, y1.d, ck1.d, x.d + ox, ldx, dt.d + odt, lddt, dtb.d, Al.d, bod, cod, ldbc, Dp.d, segd, lo, hi,
                   B, T, H, P, G, S, ckr);
      gpu->ssd_bwd(gc, g1[r][0] + ox, g1[r][1] + odt, g1[r][2], g1[r][3], g1[r][4], g1[r][4] + G * S, g1[r][5], dy.d,
                   x.d + ox, ldx, dt.d + odt, lddt, dtb.d, Al.d, bod, cod, ldbc, Dp.d, segd, ck1.d, lo, hi, B, T, H, P,
                   G, S, ckr);
      freeb(&y1), freeb(&ck1);
    }
    int same = 1;
    for (int i = 0; i < 6; i++) {
      float *a = (float *)xmalloc((size_t)gr[i]->n * 8), *c = a + gr[i]->n;
      if (sl_cuda_download(gc, a, g1[0][i], (size_t)gr[i]->n * 4) ||
          sl_cuda_download(gc, c, g1[1][i], (size_t)gr[i]->n * 4) || memcmp(a, c, (size_t)gr[i]->n * 4))
        same = 0;
      free(a);
      sl_cuda_free(gc, g1[0][i]), sl_cuda_free(gc, g1[1][i]);
    }
    snprintf(name, sizeof name, "ssd_bwd S%lld ck%lld = ck1 (bits)", (long long)S, (long long)chunk);
    report(name, N * HP, 0, 0, 0, same);
  }
  for (int i = 0; i < 6; i++) free(g0[i]);
  freeb(&x), freeb(&dt), freeb(&dtb), freeb(&Al), freeb(&bc), freeb(&Dp), freeb(&y), freeb(&ck), freeb(&dy);
  freeb(&dx), freeb(&ddt), freeb(&ddtb), freeb(&dAl), freeb(&dbc), freeb(&dDp);
  if (docs) free(seg), sl_cuda_free(gc, segd);
}

/* The vocabulary-parallel ops on every slice of a vocabulary padded to a
 * multiple of T (padding rows NaN: a read of one shows), each op against its
 * CPU twin on the same inputs. */
static void test_vocab_parallel(int64_t N, int64_t C, int64_t V, int64_t T, float cap) {
  int64_t Vl = (V + T - 1) / T;
  int32_t *td, *tg = mk_tok(N, (int32_t)V, 1, &td);
  buf x = mk(N * C, -1, 1), wp = mk(T * Vl * C, -0.5f, 0.5f), dout = mk(N * C, -1, 1);
  for (int64_t i = V * C; i < T * Vl * C; i++) wp.h[i] = NAN;
  if (sl_cuda_upload(gc, wp.d, wp.h, (size_t)(T * Vl * C) * 4)) nfail++;
  for (int64_t r = 0; r < T; r++) {
    int64_t v0 = r * Vl, valid = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
    float *w_h = wp.h + v0 * C, *w_d = wp.d + v0 * C;
    char nm[64];
    buf out = mk(N * C, -1, 1), dwte = mk(Vl * C, -1, 1);
    cpu->vocab_embedding_fwd(cc, out.h, tg, w_h, N, C, v0, Vl);
    gpu->vocab_embedding_fwd(gc, out.d, td, w_d, N, C, v0, Vl);
    snprintf(nm, sizeof nm, "vocab_embedding_fwd r%lld/%lld", (long long)r, (long long)T);
    check(nm, &out, 0);
    cpu->vocab_embedding_bwd(cc, dwte.h, dout.h, tg, N, C, v0, Vl);
    gpu->vocab_embedding_bwd(gc, dwte.d, dout.d, td, N, C, v0, Vl);
    snprintf(nm, sizeof nm, "vocab_embedding_bwd r%lld/%lld", (long long)r, (long long)T);
    check(nm, &dwte, 1e-5);
    buf lmax = mk0(N), st = mk0(2 * N), gmax = mk0(N), loss = mk0(N), lse = mk0(N);
    cpu->lmhead_vp_fwd(cc, lmax.h, st.h, x.h, w_h, tg, N, C, v0, Vl, valid, cap);
    gpu->lmhead_vp_fwd(gc, lmax.d, st.d, x.d, w_d, td, N, C, v0, Vl, valid, cap);
    snprintf(nm, sizeof nm, "lmhead_vp_fwd st cap%g r%lld/%lld", (double)cap, (long long)r, (long long)T);
    check(nm, &st, TOL_GEMM);
    if (valid) {
      snprintf(nm, sizeof nm, "lmhead_vp_fwd lmax r%lld/%lld", (long long)r, (long long)T);
      check(nm, &lmax, TOL_GEMM);
    } else { /* -inf - -inf is NaN for check(): compare exactly */
      float *g = (float *)xmalloc((size_t)N * 4);
      int ok = sl_cuda_download(gc, g, lmax.d, (size_t)N * 4) == SL_OK;
      for (int64_t i = 0; i < N; i++) ok &= g[i] == -INFINITY && lmax.h[i] == -INFINITY;
      report("lmhead_vp_fwd lmax = -inf (padding slice)", N, 0, 0, 0, ok);
      free(g);
    }
    /* a global max at or above this slice's, the same on both sides */
    for (int64_t i = 0; i < N; i++) gmax.h[i] = (valid ? lmax.h[i] : 0.0f) + 0.5f * (frand() + 1.0f);
    if (sl_cuda_upload(gc, gmax.d, gmax.h, (size_t)N * 4) || sl_cuda_upload(gc, st.d, st.h, (size_t)N * 8) ||
        sl_cuda_upload(gc, lmax.d, lmax.h, (size_t)N * 4))
      nfail++;
    cpu->lmhead_vp_rescale(cc, st.h, lmax.h, gmax.h, N);
    gpu->lmhead_vp_rescale(gc, st.d, lmax.d, gmax.d, N);
    snprintf(nm, sizeof nm, "lmhead_vp_rescale r%lld/%lld", (long long)r, (long long)T);
    check(nm, &st, 1e-5);
    for (int64_t i = 0; i < N; i++) st.h[2 * i] += 0.25f; /* as if summed with other ranks' */
    if (sl_cuda_upload(gc, st.d, st.h, (size_t)N * 8)) nfail++;
    cpu->lmhead_vp_loss(cc, loss.h, lse.h, st.h, gmax.h, tg, N);
    gpu->lmhead_vp_loss(gc, loss.d, lse.d, st.d, gmax.d, td, N);
    snprintf(nm, sizeof nm, "lmhead_vp_loss losses r%lld/%lld", (long long)r, (long long)T);
    check(nm, &loss, 1e-5);
    snprintf(nm, sizeof nm, "lmhead_vp_loss lse r%lld/%lld", (long long)r, (long long)T);
    check(nm, &lse, 1e-5);
    if (sl_cuda_upload(gc, lse.d, lse.h, (size_t)N * 4)) nfail++;
    buf dx = mk(N * C, -1, 1), dw = mk(Vl * C, -1, 1);
    cpu->lmhead_vp_bwd(cc, dx.h, dw.h, x.h, w_h, tg, lse.h, 1.0f / (float)N, N, C, v0, Vl, valid, cap);
    gpu->lmhead_vp_bwd(gc, dx.d, dw.d, x.d, w_d, td, lse.d, 1.0f / (float)N, N, C, v0, Vl, valid, cap);
    snprintf(nm, sizeof nm, "lmhead_vp_bwd dx cap%g r%lld/%lld", (double)cap, (long long)r, (long long)T);
    check(nm, &dx, TOL_GEMM);
    snprintf(nm, sizeof nm, "lmhead_vp_bwd dw cap%g r%lld/%lld", (double)cap, (long long)r, (long long)T);
    check(nm, &dw, TOL_GEMM);
    freeb(&out), freeb(&dwte), freeb(&lmax), freeb(&st), freeb(&gmax), freeb(&loss), freeb(&lse);
    freeb(&dx), freeb(&dw);
  }
  free(tg), sl_cuda_free(gc, td);
  freeb(&x), freeb(&wp), freeb(&dout);
}

/* Bad arguments leave a status and a message instead of aborting; scratch
 * stops growing after warm-up. */
static void test_errors_and_scratch(void) {
  buf q = mk(4 * 3 * 300, -1, 1), o = mk0(4 * 300), l = mk0(4);
  gpu->attention_fwd(gc, o.d, l.d, q.d, 1, 4, 1, 1, 300, 0, 1.0f / sqrtf(300.0f), NULL, 0.0f); /* hd 300 > 256 */
  int st = sl_cuda_last_status(gc);
  report("error path (hd 300 -> SL_EINPUT)", 0, 0, 0, 0, st == SL_EINPUT && strlen(sl_cuda_last_error(gc)) > 0);
  sl_cuda_clear_status(gc);
  freeb(&q), freeb(&o), freeb(&l);
  size_t s0 = gpu->ctx_scratch_bytes(gc);
  test_scan(2, 37, 150, 16, 8, 0); /* same shapes as before: no growth expected */
  size_t s1 = gpu->ctx_scratch_bytes(gc);
  report("scratch stable after warm-up", (int64_t)s1, (double)s1 - (double)s0, 0, 0, s1 == s0);
}

/* ---- bf16 compute (ctx_set_compute, docs/bf16.md) ----------------------------
 * Both contexts switched to SL_COMPUTE_BF16; the ops through the tables.
 * Outputs stored in bf16 must be bf16-valued on both sides (the rounding
 * points happen) and agree within one bf16 ulp of the largest value
 * (TOL_B16 = 2^-7: an fp32 difference in accumulation order may flip one
 * rounding); fp32 outputs computed from identical bf16 operands (weight
 * gradients, rstd) keep the fp32 tolerances. */
static void check_b16(const char *name, const buf *b) {
  float *g = (float *)xmalloc((size_t)b->n * 4);
  int st = sl_cuda_download(gc, g, b->d, (size_t)b->n * 4);
  int64_t odd = 0;
  for (int64_t i = 0; i < b->n; i++) {
    uint32_t u, v;
    memcpy(&u, &g[i], 4);
    memcpy(&v, &b->h[i], 4);
    odd += (u & 0xffffu) != 0 || (v & 0xffffu) != 0;
  }
  free(g);
  char nm[96];
  snprintf(nm, sizeof nm, "%s (bf16-valued)", name);
  report(nm, b->n, (double)odd, 0, 0, st == SL_OK && odd == 0);
  check(name, b, TOL_B16);
}

/* bf16 compute: rope + attention (GQA), with the window, softcap and RoPE base given
 * (Gemma's local layers: a window, cap > 0, a small base). */
static void bf16_attention(int64_t window, float cap, float base) {
  int64_t B = 2, T = 33, nh = 4, nkv = 2, hd = 64, nq = B * T * (nh + 2 * nkv) * hd, no = B * T * nh * hd;
  buf qkv = mk(nq, -1, 1), att = mk0(no), lse = mk0(B * nh * T), datt = mk(no, -1, 1), dqkv = mk0(nq);
  buf inv = mk_inv(hd, base);
  float sc = 1.0f / sqrtf((float)hd);
  cpu->rope_fwd(cc, qkv.h, B, T, nh, nkv, hd, inv.h, NULL);
  gpu->rope_fwd(gc, qkv.d, B, T, nh, nkv, hd, inv.d, NULL);
  check_b16("bf16c rope_fwd", &qkv);
  if (sl_cuda_upload(gc, qkv.d, qkv.h, (size_t)nq * 4)) nfail++;
  cpu->attention_fwd(cc, att.h, lse.h, qkv.h, B, T, nh, nkv, hd, window, sc, NULL, cap);
  gpu->attention_fwd(gc, att.d, lse.d, qkv.d, B, T, nh, nkv, hd, window, sc, NULL, cap);
  check_b16("bf16c attention_fwd out", &att);
  check("bf16c attention_fwd lse (fp32)", &lse, 1e-4);
  if (sl_cuda_upload(gc, att.d, att.h, (size_t)no * 4) || sl_cuda_upload(gc, lse.d, lse.h, (size_t)(B * nh * T) * 4))
    nfail++;
  for (int64_t i = 0; i < no; i++) datt.h[i] = sl_bf16_to_f32_scalar(sl_f32_to_bf16_scalar(datt.h[i]));
  if (sl_cuda_upload(gc, datt.d, datt.h, (size_t)no * 4)) nfail++;
  cpu->attention_bwd(cc, dqkv.h, datt.h, qkv.h, att.h, lse.h, B, T, nh, nkv, hd, window, sc, NULL, cap);
  gpu->attention_bwd(gc, dqkv.d, datt.d, qkv.d, att.d, lse.d, B, T, nh, nkv, hd, window, sc, NULL, cap);
  check_b16("bf16c attention_bwd dqkv", &dqkv);
  if (sl_cuda_upload(gc, dqkv.d, dqkv.h, (size_t)nq * 4)) nfail++;
  cpu->rope_bwd(cc, dqkv.h, B, T, nh, nkv, hd, inv.h, NULL);
  gpu->rope_bwd(gc, dqkv.d, B, T, nh, nkv, hd, inv.d, NULL);
  check_b16("bf16c rope_bwd", &dqkv);
  freeb(&inv);
  freeb(&qkv), freeb(&att), freeb(&lse), freeb(&datt), freeb(&dqkv);
}

/* bf16 compute: the LM head (cap > 0: Gemma 2's final softcap, on the rounded logits). */
static void bf16_lmhead(int64_t N, int64_t C, float cap) {
  /* logits, dlogits, dx rounded; losses, lse, dw fp32 */
  int64_t V = 301;
  int32_t *td, *tg = mk_tok(N, (int32_t)V, 1, &td);
  buf hx = mk(N * C, -1, 1), hw = mk(V * C, -0.5f, 0.5f), loss = mk0(N), hl = mk0(N);
  buf hdx = mk0(N * C), hdw = mk(V * C, -1, 1);
  cpu->lmhead_ce_fwd(cc, loss.h, hl.h, hx.h, hw.h, tg, N, C, V, cap);
  gpu->lmhead_ce_fwd(gc, loss.d, hl.d, hx.d, hw.d, td, N, C, V, cap);
  check("bf16c lmhead_ce_fwd losses", &loss, TOL_B16);
  check("bf16c lmhead_ce_fwd lse", &hl, TOL_B16);
  if (sl_cuda_upload(gc, hl.d, hl.h, (size_t)N * 4)) nfail++;
  cpu->lmhead_ce_bwd(cc, hdx.h, hdw.h, hx.h, hw.h, tg, hl.h, 1.0f / (float)N, N, C, V, cap);
  gpu->lmhead_ce_bwd(gc, hdx.d, hdw.d, hx.d, hw.d, td, hl.d, 1.0f / (float)N, N, C, V, cap);
  check_b16("bf16c lmhead_ce_bwd dx", &hdx);
  check("bf16c lmhead_ce_bwd dw (fp32)", &hdw, TOL_B16);
  free(tg), sl_cuda_free(gc, td);
  freeb(&hx), freeb(&hw), freeb(&loss), freeb(&hl), freeb(&hdx), freeb(&hdw);
}

static void test_bf16_compute(void) {
  if (cpu->ctx_set_compute(cc, SL_COMPUTE_BF16) || gpu->ctx_set_compute(gc, SL_COMPUTE_BF16)) {
    report("ctx_set_compute bf16", 0, 0, 0, 0, 0);
    return;
  }
  report("ctx_set_compute(7) refused", 0, 0, 0, 0,
         cpu->ctx_set_compute(cc, 7) == SL_EINPUT && gpu->ctx_set_compute(gc, 7) == SL_EINPUT);
  /* linear with bias: fp32 operands rounded by the op; dw, db fp32 */
  int64_t N = 37, IC = 65, OC = 47;
  buf x = mk(N * IC, -1, 1), w = mk(OC * IC, -0.5f, 0.5f), b = mk(OC, -1, 1), out = mk0(N * OC);
  buf dout = mk(N * OC, -1, 1), dx = mk0(N * IC), dw = mk(OC * IC, -1, 1), db = mk(OC, -1, 1);
  cpu->linear_fwd(cc, out.h, x.h, w.h, b.h, N, IC, OC);
  gpu->linear_fwd(gc, out.d, x.d, w.d, b.d, N, IC, OC);
  check_b16("bf16c linear_fwd", &out);
  cpu->linear_bwd(cc, dx.h, dw.h, db.h, dout.h, x.h, w.h, N, IC, OC);
  gpu->linear_bwd(gc, dx.d, dw.d, db.d, dout.d, x.d, w.d, N, IC, OC);
  check_b16("bf16c linear_bwd dinp", &dx);
  check("bf16c linear_bwd dw (fp32)", &dw, TOL_GEMM);
  check("bf16c linear_bwd db (fp32)", &db, 1e-5);
  freeb(&x), freeb(&w), freeb(&b), freeb(&out), freeb(&dout), freeb(&dx), freeb(&dw), freeb(&db);
  /* rmsnorm -> out rounded, rstd fp32 */
  int64_t C = 96;
  buf xn = mk(N * C, -2, 2), wn = mk(C, 0.5f, 1.5f), on = mk0(N * C), rs = mk0(N);
  cpu->rmsnorm_fwd(cc, on.h, rs.h, xn.h, wn.h, N, C, C, 1e-5f);
  gpu->rmsnorm_fwd(gc, on.d, rs.d, xn.d, wn.d, N, C, C, 1e-5f);
  check_b16("bf16c rmsnorm_fwd out", &on);
  check("bf16c rmsnorm_fwd rstd (fp32)", &rs, 1e-5);
  freeb(&xn), freeb(&wn), freeb(&on), freeb(&rs);
  /* rmsnorm at a row stride: the rows rounded, the gaps between them as they were */
  {
    int64_t ld = C + 40;
    buf xs = mk(N * ld, -2, 2), ws = mk(C, 0.5f, 1.5f), os = mk(N * ld, -1, 1), rss = mk0(N);
    float *pad = (float *)xmalloc((size_t)(N * ld) * 4), *g = (float *)xmalloc((size_t)(N * ld) * 4);
    memcpy(pad, os.h, (size_t)(N * ld) * 4);
    cpu->rmsnorm_fwd(cc, os.h, rss.h, xs.h, ws.h, N, C, ld, 1e-5f);
    gpu->rmsnorm_fwd(gc, os.d, rss.d, xs.d, ws.d, N, C, ld, 1e-5f);
    int st = sl_cuda_download(gc, g, os.d, (size_t)(N * ld) * 4);
    int64_t bad = 0;
    for (int64_t i = 0; i < N * ld; i++) {
      uint32_t u, v;
      memcpy(&u, &g[i], 4);
      memcpy(&v, &os.h[i], 4);
      if (i % ld < C) bad += (u & 0xffffu) != 0 || (v & 0xffffu) != 0;
      else bad += memcmp(&g[i], &pad[i], 4) != 0 || memcmp(&os.h[i], &pad[i], 4) != 0;
    }
    report("bf16c rmsnorm_fwd ld>C rows rounded, gaps kept", N * ld, (double)bad, 0, 0, st == SL_OK && bad == 0);
    check("bf16c rmsnorm_fwd ld>C out", &os, TOL_B16);
    free(pad), free(g);
    freeb(&xs), freeb(&ws), freeb(&os), freeb(&rss);
  }
  bf16_attention(0, 0.0f, 10000.0f);
  bf16_attention(9, 0.5f, 100.0f); /* Gemma: a window, the attention softcap, a local RoPE base */
  bf16_lmhead(N, C, 0.0f);
  bf16_lmhead(N, C, 0.8f); /* Gemma 2's final softcap */
  /* the element-wise, conv1d and scan tests again, in bf16 compute */
  g_b16 = 1;
  test_pointwise();
  test_conv1d(0);
  test_scan(2, 37, 150, 16, 8, 0);
  test_ssd(2, 29, 4, 37, 2, 16, 8, 1);
  g_b16 = 0;
  cpu->ctx_set_compute(cc, SL_COMPUTE_FP32);
  gpu->ctx_set_compute(gc, SL_COMPUTE_FP32);
}

int main(void) {
  cpu = sl_ops_cpu();
  gpu = sl_ops_cuda();
  if (!gpu) {
    printf("test_cuda_kernels: skipped (no CUDA device)\n");
    return 77;
  }
  cc = cpu->ctx_create(0);
  gc = gpu->ctx_create(0);
  if (!cc || !gc) {
    fprintf(stderr, "ctx_create failed: %s\n", sl_errmsg());
    return 1;
  }
  if (sl_cuda_tf32_enabled(gc)) TOL_GEMM = 5e-3f;
  test_embedding();
  test_rmsnorm();
  test_rmsnorm_strided();
  test_rmsnorm_weightless();
  test_linear();
  test_rope();
  test_attention(2, 67, 4, 2, 64, 0, 0.0f);
  test_attention(2, 67, 4, 2, 64, 17, 0.0f);
  test_attention(1, 53, 2, 1, 128, 0, 0.0f);
  test_attention(1, 45, 4, 4, 128, 9, 0.0f);
  test_attention(2, 40, 3, 1, 40, 0, 0.0f);   /* generic fallback (padded to 64) */
  test_attention(1, 33, 2, 2, 200, 12, 0.0f); /* generic fallback (padded to 256) */
  /* Gemma 2's logit softcap; caps near the scores' spread (~0.3) so tanh bends them */
  test_attention(2, 67, 4, 2, 64, 17, 0.5f);
  test_attention(1, 53, 2, 1, 128, 0, 0.3f);
  test_doc(64, 0, 0.0f);
  test_doc(64, 20, 0.0f);
  test_doc(32, 0, 0.0f);
  test_doc(64, 20, 0.4f); /* softcap inside documents and a window */
  test_pointwise();
  test_moe(37, 6, 2, 24, SL_MOE_NORM, 1.0f, 0, 0);
  test_moe(9, 4, 3, 8, 0, 1.0f, 0, 0);
  test_moe(37, 6, 2, 24, SL_MOE_NORM, 1.0f, 8, 1); /* a capacity of 8 slots (of 74 over 5 live experts), the bias */
  test_moe(9, 4, 3, 8, 0, 1.0f, 5, 0);
  test_lmhead(0.0f);
  test_lmhead(1.0f);                         /* Gemma 2's final-logit softcap (logits spread ~1) */
  test_vocab_parallel(29, 48, 301, 4, 0.0f); /* 301 = 4 x 76 - 3: padding in the last slice */
  test_vocab_parallel(29, 48, 301, 4, 1.0f); /* with the final-logit softcap */
  test_vocab_parallel(11, 16, 5, 4, 0.0f);   /* the last slice is padding only */
  test_optim();
  test_scalars();
  test_conv1d(0);
  test_scan(2, 37, 150, 16, 8, 0);
  test_scan(1, 29, 40, 5, 64, 0); /* chunk > T, S < 16 */
  test_scan(2, 20, 33, 24, 3, 0);
  test_ssd(2, 29, 4, 37, 2, 16, 8, 1);  /* G > 1, P and T odd, documents */
  test_ssd(1, 23, 3, 5, 1, 7, 64, 0);   /* G = 1, chunk > T, one warp */
  test_ssd(2, 20, 2, 70, 2, 100, 3, 1); /* S = 100 (SMAX 128), P over 2 warps */
  /* the state sizes of Mamba-Codestral / Nemotron-H / Granite 4.0-H; S not a
   * multiple of the backward's recompute pass (8 / 16 / 32 states at SMAX
   * 16 / 64 / 128: S = 7, 50, 100) */
  test_ssd(1, 13, 2, 64, 1, 128, 5, 1);  /* S = 128, P = 64 */
  test_ssd(1, 9, 2, 128, 2, 128, 4, 0);  /* S = 128, P = 128 */
  test_ssd(2, 11, 2, 33, 1, 50, 4, 1);   /* S = 50 (SMAX 64) */
  test_bf16_compute();
  test_errors_and_scratch();
  /* Mamba (v1) document resets (last: the inputs of the tests above stay
   * what they were), fp32 then bf16 compute */
  test_conv1d(1);
  test_scan(2, 37, 150, 16, 8, 1); /* documents at 12 / 13 (mid-chunk) and 24 (a chunk start) */
  test_scan(1, 29, 40, 5, 64, 1);  /* a document at 9 */
  test_scan(2, 20, 33, 24, 3, 1);  /* documents at 6 (a chunk start) / 7 and 15 */
  test_docs_split();
  /* the router's scaling factor and DeepSeek-V3 / Nemotron-H's sigmoid scores (last, as above) */
  test_moe(37, 6, 2, 24, SL_MOE_NORM, 2.5f, 8, 1);
  test_moe(37, 6, 2, 24, SL_MOE_SIGMOID | SL_MOE_NORM, 2.5f, 0, 1);
  test_moe(37, 8, 3, 24, SL_MOE_SIGMOID | SL_MOE_NORM, 2.5f, 8, 1);
  test_moe(9, 4, 3, 8, SL_MOE_SIGMOID, 1.0f, 5, 0);
  test_moe(9, 4, 3, 8, SL_MOE_SIGMOID, 2.5f, 0, 1);
  if (!cpu->ctx_set_compute(cc, SL_COMPUTE_BF16) && !gpu->ctx_set_compute(gc, SL_COMPUTE_BF16)) {
    g_b16 = 1;
    test_conv1d(1);
    test_scan(2, 37, 150, 16, 8, 1);
    g_b16 = 0;
  } else {
    report("ctx_set_compute(SL_COMPUTE_BF16)", 0, 0, 0, 0, 0);
  }
  cpu->ctx_set_compute(cc, SL_COMPUTE_FP32);
  gpu->ctx_set_compute(gc, SL_COMPUTE_FP32);
  test_rmsnorm_sum(); /* last: the earlier cases keep their random inputs */
  printf("cuda scratch high-water: %zu bytes\n", gpu->ctx_scratch_bytes(gc));
  gpu->ctx_destroy(gc);
  cpu->ctx_destroy(cc);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
#endif
