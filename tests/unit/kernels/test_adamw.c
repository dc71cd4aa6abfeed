/* tests/unit/kernels/test_adamw.c — the CPU AdamW op (sl_ops_cpu()->adamw) and its fused
 * bf16-copy variant against three oracles:
 *   1. a plain scalar C loop doing the same float operations in the same
 *      order: bit-identical, for every SIMD path (the test re-runs itself
 *      with SL_ADAMW_ISA=scalar|avx2|avx512, whichever the CPU supports),
 *      odd and tiny n;
 *   2. the formula evaluated in double precision over several steps
 *      (tolerance);
 *   3. PyTorch's torch.optim.AdamW(foreach=False) run by /usr/bin/python3:
 *      bit-exact against torch with ATEN_CPU_CAPABILITY=default (its scalar
 *      ATen kernels, no FMA), within a few ulp against torch's default AVX2
 *      kernels (which use FMA in add_). Skipped with a message when torch is
 *      not importable.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "offload/offload.h"

static int g_pass, g_fail;
#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    if (cond) {                                                                                                        \
      g_pass++;                                                                                                        \
    } else {                                                                                                           \
      g_fail++;                                                                                                        \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                      \
      printf(__VA_ARGS__);                                                                                             \
      printf("\n");                                                                                                    \
    }                                                                                                                  \
  } while (0)

/* ---- deterministic data ----------------------------------------------------- */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* ---- oracle 1: the scalar loop, PyTorch 1.13 ATen order ----------------------- */
static void ref_adamw(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2, float eps,
                      float wd, int64_t step, float gs) {
  const double bc1 = 1.0 - pow((double)b1, (double)step);
  const double bc2 = 1.0 - pow((double)b2, (double)step);
  const float wdc = (float)(1.0 - (double)lr * (double)wd);
  const float a1 = (float)(1.0 - (double)b1), a2 = (float)(1.0 - (double)b2);
  const float bc2s = (float)sqrt(bc2);
  const float nss = (float)(-((double)lr / bc1));
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] * gs;
    p[i] = p[i] * wdc;                 /* param.mul_(1 - lr*wd) */
    m[i] = m[i] * b1 + a1 * gi;        /* exp_avg.mul_(b1).add_(g, alpha=1-b1) */
    v[i] = v[i] * b2 + (a2 * gi) * gi; /* exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2) */
    float den = sqrtf(v[i]) / bc2s + eps;
    p[i] = p[i] + (nss * m[i]) / den; /* param.addcdiv_(m, den, value=-step_size) */
  }
}

static int64_t count_diff(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

static void fill(float *x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; i++) x[i] = frand() * scale;
}

/* One ISA's bit-identity checks (run in a child with SL_ADAMW_ISA set). */
static void check_bitwise(void) {
  const sl_ops *ops = sl_ops_cpu();
  static const int64_t sizes[] = {1000003, 0, 1, 7, 8, 15, 16, 17, 31, 33, 65537};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
    int64_t n = sizes[si];
    size_t nb = (size_t)(n > 0 ? n : 1) * sizeof(float);
    float *p = malloc(nb), *m = malloc(nb), *v = malloc(nb), *g = malloc(nb);
    float *rp = malloc(nb), *rm = malloc(nb), *rv = malloc(nb);
    float *bp = malloc(nb), *bm = malloc(nb), *bv = malloc(nb);
    uint16_t *b16 = malloc((size_t)(n > 0 ? n : 1) * 2);
    fill(p, n, 1.0f);
    memset(m, 0, nb);
    memset(v, 0, nb);
    memcpy(rp, p, nb), memcpy(rm, m, nb), memcpy(rv, v, nb);
    memcpy(bp, p, nb), memcpy(bm, m, nb), memcpy(bv, v, nb);
    int64_t dp = 0, dm = 0, dv = 0, db = 0, dbp = 0;
    for (int64_t step = 1; step <= 3; step++) {
      fill(g, n, 0.05f * (float)step);
      if (n > 3) g[0] = 0.0f, g[1] = 1e-30f, g[2] = -3e4f; /* zero, denormal-ish, large */
      float lr = 1e-3f * (float)step, wd = step == 2 ? 0.0f : 0.1f;
      float gs = step == 3 ? 0.6180339f : 1.0f;
      ops->adamw(NULL, p, m, v, g, n, lr, 0.9f, 0.95f, 1e-8f, wd, step, gs);
      ref_adamw(rp, rm, rv, g, n, lr, 0.9f, 0.95f, 1e-8f, wd, step, gs);
      sl_adamw_bf16copy(bp, bm, bv, g, n, lr, 0.9f, 0.95f, 1e-8f, wd, step, gs, b16);
      dp += count_diff(p, rp, n), dm += count_diff(m, rm, n), dv += count_diff(v, rv, n);
      dbp += count_diff(bp, p, n) + count_diff(bm, m, n) + count_diff(bv, v, n);
      for (int64_t i = 0; i < n; i++) db += b16[i] != sl_f32_to_bf16_scalar(bp[i]);
    }
    CHECK(dp == 0 && dm == 0 && dv == 0, "n=%lld: kernel vs scalar loop differs in %lld p, %lld m, %lld v elements",
          (long long)n, (long long)dp, (long long)dm, (long long)dv);
    CHECK(dbp == 0 && db == 0,
          "n=%lld: bf16copy variant: %lld p/m/v elements differ from "
          "the op, %lld bf16 values differ from rounding p",
          (long long)n, (long long)dbp, (long long)db);
    free(p), free(m), free(v), free(g), free(rp), free(rm), free(rv);
    free(bp), free(bm), free(bv), free(b16);
  }
  /* NaN propagation in the bf16 copy: quiet NaN like sl_f32_to_bf16_scalar */
  {
    float p[24], m[24], v[24], g[24];
    uint16_t b[24];
    for (int i = 0; i < 24; i++) p[i] = 0.5f, m[i] = v[i] = 0.0f, g[i] = (i % 5 == 0) ? NAN : 0.25f;
    sl_adamw_bf16copy(p, m, v, g, 24, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f, b);
    int bad = 0;
    for (int i = 0; i < 24; i++) bad += b[i] != sl_f32_to_bf16_scalar(p[i]);
    CHECK(bad == 0, "bf16 copy of NaN/normal lanes: %d mismatches", bad);
  }
}

/* ---- oracle 2: double precision, several steps ---------------------------------- */
static void check_double(void) {
  const sl_ops *ops = sl_ops_cpu();
  const int64_t n = 4099;
  float *p = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4), *g = malloc(n * 4);
  double *P = malloc(n * 8), *M = calloc(n, 8), *V = calloc(n, 8);
  double *MA = calloc(n, 8), *LR = calloc(n, 8);
  fill(p, n, 1.0f);
  for (int64_t i = 0; i < n; i++) P[i] = p[i];
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.05f;
  double worst_p = 0, worst_mv = 0;
  for (int64_t step = 1; step <= 6; step++) {
    fill(g, n, 0.1f);
    float lr = 2e-3f / (float)step, gs = 0.8f;
    ops->adamw(NULL, p, m, v, g, n, lr, b1, b2, eps, wd, step, gs);
    double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
    for (int64_t i = 0; i < n; i++) {
      double gi = (double)g[i] * gs;
      P[i] *= 1.0 - (double)lr * wd;
      M[i] = b1 * M[i] + (1.0 - b1) * gi;
      V[i] = b2 * V[i] + (1.0 - b2) * gi * gi;
      P[i] -= (double)lr / bc1 * M[i] / (sqrt(V[i]) / sqrt(bc2) + eps);
      /* p: a few ulp of |p| plus float error of the accumulated updates */
      /* m can cancel: its float error scales with sum |terms| (MA), not |m| */
      MA[i] = b1 * MA[i] + (1.0 - b1) * fabs(gi);
      LR[i] += lr;
      double ep = fabs(p[i] - P[i]) / (fabs(P[i]) * 1.2e-7 * (double)step + 1e-5 * LR[i]);
      double em = fabs(m[i] - M[i]) / (MA[i] * 1e-6 + 1e-30);
      double ev = fabs(v[i] - V[i]) / (fabs(V[i]) * 1e-6 + 1e-30);
      if (ep > worst_p) worst_p = ep;
      if (em > worst_mv) worst_mv = em;
      if (ev > worst_mv) worst_mv = ev;
    }
  }
  CHECK(worst_p <= 1.0 && worst_mv <= 1.0,
        "float kernel vs double formula over 6 steps: worst normalised error p %.3g, m/v %.3g "
        "(must be <= 1)",
        worst_p, worst_mv);
  /* the oracle must be able to fail: drop the bias correction of v */
  {
    double Pw = 1.0, Mw = 0.0, Vw = 0.0, gw = 0.3;
    Mw = 0.1 * gw, Vw = 0.001 * gw * gw;
    Pw -= 1e-3 / 0.1 * Mw / (sqrt(Vw) + 1e-8);
    float pf = 1.0f, mf = 0.0f, vf = 0.0f, gf = 0.3f;
    ops->adamw(NULL, &pf, &mf, &vf, &gf, 1, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f);
    CHECK(fabs(pf - Pw) > 1e-4, "a wrong formula (no bc2) was not detected: %g vs %g", pf, Pw);
  }
  free(p), free(m), free(v), free(g), free(P), free(M), free(V), free(MA), free(LR);
}

/* ---- oracle 3: PyTorch -------------------------------------------------------------- */
static const char *k_torch_script =
    "import sys, struct, torch\n"
    "inp, out = sys.argv[1], sys.argv[2]\n"
    "n1, n2, nsteps = 1000, 37, 4\n"
    "b1, b2, eps, wd = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])\n"
    "lrs = [float(x) for x in sys.argv[7].split(',')]\n"
    "gss = [float(x) for x in sys.argv[8].split(',')]\n"
    "raw = torch.frombuffer(bytearray(open(inp,'rb').read()), dtype=torch.float32)\n"
    "n = n1 + n2\n"
    "p0 = raw[:n]; gsl = raw[n:].view(nsteps, n)\n"
    "a = torch.nn.Parameter(p0[:n1].clone()); b = torch.nn.Parameter(p0[n1:].clone())\n"
    "opt = torch.optim.AdamW([{'params':[a],'weight_decay':wd},{'params':[b],'weight_decay':0.0}],\n"
    "                        lr=lrs[0], betas=(b1,b2), eps=eps, foreach=False)\n"
    "for s in range(nsteps):\n"
    "    for grp in opt.param_groups: grp['lr'] = lrs[s]\n"
    "    sc = torch.tensor(gss[s], dtype=torch.float32)\n"
    "    a.grad = gsl[s,:n1].clone().mul_(sc); b.grad = gsl[s,n1:].clone().mul_(sc)\n"
    "    opt.step()\n"
    "res = []\n"
    "for t in (a, b): st = opt.state[t]; res += [t.detach(), st['exp_avg'], st['exp_avg_sq']]\n"
    "with open(out,'wb') as f:\n"
    "    for i in (0,3,1,4,2,5): f.write(res[i].contiguous().numpy().tobytes())\n";

static int run_torch(const char *dir, const char *cap, const char *args, float *out, int64_t n) {
  char script[512], outp[512], cmd[4096];
  snprintf(script, sizeof script, "%s/adamw_ref.py", dir);
  snprintf(outp, sizeof outp, "%s/torch_%s.bin", dir, cap ? cap : "native");
  FILE *f = fopen(script, "w");
  if (!f) return -1;
  fputs(k_torch_script, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s%s%s OMP_NUM_THREADS=1 /usr/bin/python3 %s %s/in.bin %s %s",
           cap ? "ATEN_CPU_CAPABILITY=" : "", cap ? cap : "", cap ? "" : "", script, dir, outp, args);
  if (system(cmd) != 0) return -1;
  f = fopen(outp, "rb");
  if (!f) return -1;
  size_t got = fread(out, sizeof(float), (size_t)(3 * n), f);
  fclose(f);
  return got == (size_t)(3 * n) ? 0 : -1;
}

static void check_torch(void) {
  if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    printf("SKIP PyTorch comparison: /usr/bin/python3 cannot import torch\n");
    return;
  }
  const sl_ops *ops = sl_ops_cpu();
  enum { N1 = 1000, N2 = 37, N = N1 + N2, STEPS = 4 };
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  const float lrs[STEPS] = {3e-3f, 2.5e-3f, 1e-3f, 7e-4f};
  const float gss[STEPS] = {1.0f, 0.5f, 0.8373f, 1.0f};
  static float p[N], m[N], v[N], gsteps[STEPS][N], g[N], ref[3 * N];
  fill(p, N, 1.0f);
  for (int s = 0; s < STEPS; s++) fill(gsteps[s], N, 0.02f * (float)(s + 1));
  char dir[] = "/tmp/sl_test_adamw_XXXXXX";
  const char *td = getenv("TMPDIR");
  char dirbuf[512];
  snprintf(dirbuf, sizeof dirbuf, "%s/sl_test_adamw_XXXXXX", td && *td ? td : "/tmp");
  char *d = mkdtemp(dirbuf);
  if (!d) d = mkdtemp(dir);
  CHECK(d != NULL, "cannot create a temp dir");
  if (!d) return;
  char path[600];
  snprintf(path, sizeof path, "%s/in.bin", d);
  FILE *f = fopen(path, "wb");
  fwrite(p, sizeof(float), N, f);
  fwrite(gsteps, sizeof(float), (size_t)STEPS * N, f);
  fclose(f);
  /* hyper-parameters passed as the exact doubles of our floats */
  char args[1024];
  snprintf(args, sizeof args, "%.17g %.17g %.17g %.17g %.17g,%.17g,%.17g,%.17g %.17g,%.17g,%.17g,%.17g", b1, b2, eps,
           wd, lrs[0], lrs[1], lrs[2], lrs[3], gss[0], gss[1], gss[2], gss[3]);
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < N; i++) g[i] = gsteps[s][i];
    ops->adamw(NULL, p, m, v, g, N1, lrs[s], b1, b2, eps, wd, s + 1, gss[s]);
    ops->adamw(NULL, p + N1, m + N1, v + N1, g + N1, N2, lrs[s], b1, b2, eps, 0.0f, s + 1, gss[s]);
  }
  const float *ours[3] = {p, m, v};
  const char *names[3] = {"param", "exp_avg", "exp_avg_sq"};
  /* (a) torch's scalar ATen kernels: bit-exact */
  if (run_torch(d, "default", args, ref, N) == 0) {
    for (int k = 0; k < 3; k++) {
      int64_t diff = count_diff(ours[k], ref + (size_t)k * N, N);
      CHECK(diff == 0, "vs torch (ATEN_CPU_CAPABILITY=default) %s: %lld of %d differ (bit-exact expected)", names[k],
            (long long)diff, N);
    }
    printf("PyTorch (ATEN_CPU_CAPABILITY=default, 4 steps, 2 groups): bit-exact comparison done\n");
  } else {
    CHECK(0, "running PyTorch with ATEN_CPU_CAPABILITY=default failed");
  }
  /* (b) torch's vectorised kernels: add_ is an FMA there, so m differs by the
   * skipped rounding of (1-b1)*g; when m cancels that is many ulp of m but
   * always a few ulp of sum_s b1^(S-s) (1-b1) |g_s| (ma). p and v: few ulp. */
  static double ma[N];
  for (int s = 0; s < STEPS; s++)
    for (int i = 0; i < N; i++) ma[i] = b1 * ma[i] + (1.0 - b1) * fabs((double)(gsteps[s][i] * gss[s]));
  if (run_torch(d, NULL, args, ref, N) == 0) {
    for (int k = 0; k < 3; k++) {
      double worst = 0, worst_ma = 0;
      int64_t exact = 0;
      for (int i = 0; i < N; i++) {
        float a = ours[k][i], b = ref[(size_t)k * N + i];
        double ulp = nextafterf(fabsf(b), INFINITY) - fabsf(b);
        double e = fabs((double)a - (double)b) / ulp;
        double e_ma = fabs((double)a - (double)b) / (ma[i] * 0x1p-23);
        exact += a == b;
        if (e > worst) worst = e;
        if (e_ma > worst_ma) worst_ma = e_ma;
      }
      if (k == 1)
        CHECK(worst_ma <= 4.0,
              "vs torch (native capability) exp_avg: worst %.2f ulp of sum|terms| "
              "(<= 4 expected)",
              worst_ma);
      else CHECK(worst <= 4.0, "vs torch (native capability) %s: worst %.1f ulp (<= 4 expected)", names[k], worst);
      printf("PyTorch (native capability) %s: %lld/%d bit-exact, worst %.1f ulp%s\n", names[k], (long long)exact, N,
             k == 1 ? worst_ma : worst, k == 1 ? " of sum|terms|" : "");
    }
  } else {
    CHECK(0, "running PyTorch failed");
  }
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
  if (system(cmd) != 0) printf("note: could not remove %s\n", d);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--bitwise-child") == 0) {
    check_bitwise();
    printf("  [%s] %d passed, %d failed\n", getenv("SL_ADAMW_ISA"), g_pass, g_fail);
    return g_fail ? 1 : 0;
  }
  /* 1. every SIMD path this CPU has, each in its own process (dispatch is
   *    decided once per process) */
  __builtin_cpu_init();
  const char *isas[3] = {"scalar", "avx2", "avx512"};
  int have[3] = {1, __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f")};
  for (int k = 0; k < 3; k++) {
    if (!have[k]) {
      printf("SKIP bit-identity on %s: not supported by this CPU\n", isas[k]);
      continue;
    }
    /* this executable's own path (in the shell, /proc/self/exe is the shell) */
    char self[4096], cmd[4200];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len > 0 ? len : 0] = 0;
    snprintf(cmd, sizeof cmd, "SL_ADAMW_ISA=%s '%s' --bitwise-child", isas[k], len > 0 ? self : argv[0]);
    int rc = system(cmd);
    CHECK(rc == 0, "bit-identity checks on the %s path failed (exit %d)", isas[k], rc);
  }
  /* 2. */
  check_double();
  /* 3. */
  check_torch();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
