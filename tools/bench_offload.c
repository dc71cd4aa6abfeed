/* tools/bench_offload.c — `shardlm bench adam|nvme`: throughput of the CPU
 * AdamW against the machine's memory bandwidth and PyTorch's CPU AdamW, and
 * of the NVMe store against raw O_DIRECT I/O. Prints readable lines and one
 * JSON line. Entry point: sl_bench_offload_main (the CLI dispatches to it).
 *
 *   bench adam [--n N] [--threads T] [--iters K] [--no-torch]
 *   bench nvme [--nvme-path DIR] [--bytes B] [--qd Q] [--block B] [--adam-n N]
 */
#define _GNU_SOURCE
#pragma GCC optimize("fp-contract=off") /* the validation loop is a scalar oracle */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "kernels/kernels.h"
#include "offload/offload.h"

typedef struct {
  const char *cmd;
  int64_t n; /* adam: parameters */
  int threads;
  int iters;
  int torch;
  const char *path; /* nvme: directory */
  int64_t bytes;    /* nvme: total bytes per direction */
  int qd;
  int64_t block;
  int64_t adam_n; /* nvme: parameters of the streamed AdamW step */
} bench_args;

static double now(void) { return sl_now_s(); }

/* ---- adam ------------------------------------------------------------------- */
/* The same traffic as AdamW (read p, m, v, g; write p, m, v = 28 B/param) with
 * trivial arithmetic: the memory-bandwidth bound of this access pattern. */
static void pattern_bw(float *p, float *m, float *v, const float *g, int64_t n) {
#pragma omp parallel
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    int64_t blocks = (n + 15) / 16;
    int64_t i0 = blocks * t / T * 16, i1 = blocks * (t + 1) / T * 16;
    if (i1 > n) i1 = n;
    for (int64_t i = i0; i < i1; i++) {
      float gi = g[i];
      p[i] += gi;
      m[i] += gi;
      v[i] -= gi;
    }
  }
}

/* STREAM triad a = b + s*c (reported for reference; 12 B/elem counted). */
static void triad(float *a, const float *b, const float *c, float s, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

static float *bench_buf(int64_t n) {
  float *x = NULL;
  if (posix_memalign((void **)&x, 4096, (size_t)n * sizeof(float)) != 0) return NULL;
  sl_host_first_touch(x, (size_t)n * sizeof(float)); /* pages near their threads */
  return x;
}

/* Validates the kernel on a slice against a scalar loop before timing. */
static int adam_validate(void) {
  enum { N = 4099 };
  static float p[N], m[N], v[N], g[N], rp[N], rm[N], rv[N];
  for (int i = 0; i < N; i++) {
    p[i] = rp[i] = sinf((float)i);
    m[i] = rm[i] = 0.01f * cosf((float)i);
    v[i] = rv[i] = 1e-4f * (1.0f + sinf(0.5f * (float)i));
    g[i] = 0.1f * cosf(0.3f * (float)i);
  }
  sl_ops_cpu()->adamw(NULL, p, m, v, g, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.9f);
  double bc1 = 1.0 - pow(0.9f, 7.0), bc2 = 1.0 - pow(0.95f, 7.0);
  float wdc = (float)(1.0 - (double)1e-3f * (double)0.1f);
  float a1 = (float)(1.0 - (double)0.9f), a2 = (float)(1.0 - (double)0.95f);
  float bs = (float)sqrt(bc2), nss = (float)(-(double)1e-3f / bc1);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    float gi = g[i] * 0.9f;
    float pi = rp[i] * wdc;
    float mi = rm[i] * 0.9f + a1 * gi;
    float vi = rv[i] * 0.95f + (a2 * gi) * gi;
    float den = sqrtf(vi) / bs + 1e-8f;
    pi = pi + (nss * mi) / den;
    bad += pi != p[i] || mi != m[i] || vi != v[i];
  }
  return bad;
}

static double torch_adam(int64_t n, int threads, int iters) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "OMP_NUM_THREADS=%d /usr/bin/python3 -c \""
           "import torch,time\n"
           "torch.set_num_threads(%d)\n"
           "n=%lld; k=16; sz=[n//k]*(k-1)+[n-(n//k)*(k-1)]\n"
           "ps=[torch.nn.Parameter(torch.randn(s)) for s in sz]\n"
           "for q in ps: q.grad=torch.randn_like(q)*0.01\n"
           "o=torch.optim.AdamW(ps,lr=1e-3,weight_decay=0.1,foreach=True)\n"
           "o.step()\n"
           "t=time.perf_counter()\n"
           "for _ in range(%d): o.step()\n"
           "print(n*%d/(time.perf_counter()-t))\n"
           "\" 2>/dev/null",
           threads, threads, (long long)n, iters, iters);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  double r = -1;
  if (fscanf(f, "%lf", &r) != 1) r = -1;
  pclose(f);
  return r;
}

static int bench_adam(const bench_args *a) {
  int64_t n = a->n;
  if (a->threads > 0) omp_set_num_threads(a->threads);
  int T = omp_get_max_threads();
  int bad = adam_validate();
  if (bad) {
    fprintf(stderr, "bench adam: kernel disagrees with the scalar loop on %d elements\n", bad);
    return 1;
  }
  float *p = bench_buf(n), *m = bench_buf(n), *v = bench_buf(n), *g = bench_buf(n);
  if (!p || !m || !v || !g) {
    fprintf(stderr, "bench adam: cannot allocate 4 x %lld floats\n", (long long)n);
    return 1;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    p[i] = 0.01f * (float)(i % 1000);
    g[i] = 1e-3f * (float)(i % 777) - 0.3f;
  }
  const sl_ops *ops = sl_ops_cpu();
  const char *isa = sl_env_str("SL_ADAMW_ISA");
  ops->adamw(NULL, p, m, v, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1, 1.0f); /* warm-up */
  double t0 = now();
  for (int it = 0; it < a->iters; it++) ops->adamw(NULL, p, m, v, g, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 2 + it, 1.0f);
  double t_adam = (now() - t0) / a->iters;
  pattern_bw(p, m, v, g, n);
  t0 = now();
  for (int it = 0; it < a->iters; it++) pattern_bw(p, m, v, g, n);
  double t_bw = (now() - t0) / a->iters;
  triad(p, m, v, 0.5f, n);
  t0 = now();
  for (int it = 0; it < a->iters; it++) triad(p, m, v, 0.5f, n);
  double t_triad = (now() - t0) / a->iters;
  free(p), free(m), free(v), free(g);

  double adam_ps = (double)n / t_adam, adam_bps = 28.0 * (double)n / t_adam;
  double bw = 28.0 * (double)n / t_bw, triad_bw = 12.0 * (double)n / t_triad;
  printf("bench adam: n=%lld params, %d threads, %d iterations (isa cap: %s)\n", (long long)n, T, a->iters,
         isa ? isa : "auto");
  printf("  CPU AdamW          %8.3f Gparams/s  %7.2f GB/s (28 B/param)\n", adam_ps / 1e9, adam_bps / 1e9);
  printf("  same-pattern bound %8.3f Gparams/s  %7.2f GB/s (read 4, write 3 arrays)\n", bw / 28.0 / 1e9, bw / 1e9);
  printf("  STREAM triad                         %7.2f GB/s (12 B/elem counted)\n", triad_bw / 1e9);
  printf("  fraction of the bandwidth bound: %.1f%%\n", 100.0 * adam_bps / bw);
  double tps = -1;
  if (a->torch) {
    tps = torch_adam(n, T, a->iters);
    if (tps > 0) printf("  PyTorch AdamW(foreach=True) %8.3f Gparams/s  -> ours is %.2fx\n", tps / 1e9, adam_ps / tps);
    else printf("  PyTorch AdamW: not measured (/usr/bin/python3 with torch unavailable)\n");
  }
  printf("{\"bench\":\"adam\",\"n\":%lld,\"threads\":%d,\"adam_params_per_s\":%.4g,"
         "\"adam_bytes_per_s\":%.4g,\"bw_bytes_per_s\":%.4g,\"triad_bytes_per_s\":%.4g,"
         "\"frac_of_bw\":%.4f,\"torch_params_per_s\":%.4g,\"speedup_vs_torch\":%.4g}\n",
         (long long)n, T, adam_ps, adam_bps, bw, triad_bw, adam_bps / bw, tps, tps > 0 ? adam_ps / tps : -1.0);
  return 0;
}

/* ---- nvme --------------------------------------------------------------------- */
static int raw_io(const char *dir, int64_t bytes, char *buf, int64_t chunk, double *wr, double *rd) {
  char path[4200];
  snprintf(path, sizeof path, "%s/sl_bench_raw.bin", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0) {
    fprintf(stderr, "bench nvme: %s: %s\n", path, strerror(errno));
    return 1;
  }
  int rc = 0;
  double t0 = now();
  for (int64_t at = 0; at < bytes && !rc; at += chunk) rc = pwrite(fd, buf + at, (size_t)chunk, at) != chunk;
  rc |= fsync(fd) != 0;
  *wr = (double)bytes / (now() - t0);
  t0 = now();
  for (int64_t at = 0; at < bytes && !rc; at += chunk) rc = pread(fd, buf + at, (size_t)chunk, at) != chunk;
  *rd = (double)bytes / (now() - t0);
  close(fd);
  unlink(path);
  if (rc) fprintf(stderr, "bench nvme: raw I/O on %s failed: %s\n", path, strerror(errno));
  return rc;
}

static int store_io(const bench_args *a, char *buf, int64_t chunk, double *wr, double *rd, const char **backend) {
  sl_nvme *s = NULL;
  if (sl_nvme_open(a->path, "sl_bench_store.bin", a->bytes, a->block, a->qd, &s)) {
    fprintf(stderr, "bench nvme: %s\n", sl_errmsg());
    return 1;
  }
  *backend = sl_nvme_backend(s);
  uint64_t t;
  int rc = 0;
  double t0 = now();
  for (int64_t at = 0; at < a->bytes && !rc; at += chunk) rc = sl_nvme_write_async(s, at, buf + at, chunk, &t);
  rc = rc ? rc : sl_nvme_fsync(s);
  *wr = (double)a->bytes / (now() - t0);
  t0 = now();
  for (int64_t at = 0; at < a->bytes && !rc; at += chunk) rc = sl_nvme_read_async(s, at, buf + at, chunk, &t);
  rc = rc ? rc : sl_nvme_wait_all(s);
  *rd = (double)a->bytes / (now() - t0);
  if (rc) fprintf(stderr, "bench nvme: %s\n", sl_errmsg());
  sl_nvme_close(s, 1);
  return rc;
}

static int bench_nvme(const bench_args *a) {
  const int64_t chunk = (int64_t)64 << 20;
  bench_args b = *a;
  b.bytes = (a->bytes + chunk - 1) / chunk * chunk;
  char *buf = NULL;
  if (posix_memalign((void **)&buf, 4096, (size_t)b.bytes) != 0) {
    fprintf(stderr, "bench nvme: cannot allocate %lld bytes\n", (long long)b.bytes);
    return 1;
  }
  for (int64_t i = 0; i < b.bytes; i += 8) *(uint64_t *)(buf + i) = (uint64_t)i * 0x9E3779B97F4A7C15ull;
  double rw = 0, rr = 0, sw = 0, sr = 0;
  const char *backend = "?";
  int rc = raw_io(b.path, b.bytes, buf, chunk, &rw, &rr);
  rc = rc ? rc : store_io(&b, buf, chunk, &sw, &sr, &backend);
  free(buf);
  if (rc) return 1;
  printf("bench nvme: %s, %.2f GiB per direction, store block %lld, qd %d, backend %s\n", b.path,
         (double)b.bytes / (1 << 30), (long long)(b.block > 0 ? b.block : 1 << 20), b.qd > 0 ? b.qd : 32, backend);
  printf("  raw O_DIRECT (64 MiB calls) write %6.2f GB/s  read %6.2f GB/s\n", rw / 1e9, rr / 1e9);
  printf("  offload store                   write %6.2f GB/s  read %6.2f GB/s\n", sw / 1e9, sr / 1e9);
  printf("  store / raw: write %.1f%%  read %.1f%%\n", 100 * sw / rw, 100 * sr / rr);
  /* the streamed AdamW step over an NVMe-resident state */
  double step_ps = -1, step_bps = -1;
  if (a->adam_n > 0) {
    int64_t n = a->adam_n;
    sl_optstate *st = NULL;
    sl_optstate_cfg c = {.tier = SL_TIER_NVME,
                         .n = n,
                         .name = "sl_bench_optstate.bin",
                         .nvme_dir = b.path,
                         .qd = b.qd,
                         .block_bytes = b.block};
    float *p = bench_buf(n), *g = bench_buf(n);
    if (p && g && sl_optstate_create(&c, &st) == SL_OK && sl_optstate_init_master(st, p) == SL_OK) {
      for (int64_t i = 0; i < n; i++) g[i] = 1e-3f * (float)(i % 101) - 0.05f;
      sl_adam_hyper h = {.lr = 1e-3f,
                         .beta1 = 0.9f,
                         .beta2 = 0.999f,
                         .eps = 1e-8f,
                         .weight_decay = 0.1f,
                         .step = 1,
                         .grad_scale = 1.0f};
      double t0 = now();
      int ok = 1;
      for (int it = 0; it < 2 && ok; it++, h.step++) ok = sl_optstate_step(st, g, NULL, 0, &h, p, NULL) == SL_OK;
      double dt = (now() - t0) / 2;
      if (ok) {
        step_ps = (double)n / dt;
        step_bps = 24.0 * (double)n / dt; /* 12 B/param read + 12 written */
        printf("  streamed NVMe AdamW: n=%lld, host buffers %.1f MiB: %.3f Mparams/s, %.2f GB/s "
               "of state I/O (read+write)\n",
               (long long)n, (double)sl_optstate_host_bytes(st) / (1 << 20), step_ps / 1e6, step_bps / 1e9);
      } else {
        fprintf(stderr, "bench nvme: adam step: %s\n", sl_errmsg());
      }
    } else {
      fprintf(stderr, "bench nvme: adam state: %s\n", sl_errmsg());
    }
    sl_optstate_destroy(st);
    free(p), free(g);
  }
  printf("{\"bench\":\"nvme\",\"path\":\"%s\",\"bytes\":%lld,\"backend\":\"%s\","
         "\"raw_write_Bps\":%.4g,\"raw_read_Bps\":%.4g,\"store_write_Bps\":%.4g,"
         "\"store_read_Bps\":%.4g,\"write_ratio\":%.4f,\"read_ratio\":%.4f,"
         "\"nvme_adam_params_per_s\":%.4g,\"nvme_adam_io_Bps\":%.4g}\n",
         b.path, (long long)b.bytes, backend, rw, rr, sw, sr, sw / rw, sr / rr, step_ps, step_bps);
  return 0;
}

static int64_t parse_size(const char *s) {
  char *end;
  double x = strtod(s, &end);
  switch (*end) {
  case 'k':
  case 'K': x *= 1024; break;
  case 'm':
  case 'M': x *= 1024 * 1024; break;
  case 'g':
  case 'G': x *= 1024.0 * 1024 * 1024; break;
  default: break;
  }
  return (int64_t)x;
}

int sl_bench_offload_main(int argc, char **argv) {
  bench_args a = {.cmd = NULL,
                  .n = (int64_t)64 << 20,
                  .threads = 0,
                  .iters = 5,
                  .torch = 1,
                  .path = NULL,
                  .bytes = (int64_t)1 << 30,
                  .qd = 32,
                  .block = 1 << 20,
                  .adam_n = (int64_t)32 << 20};
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(s, "adam") || !strcmp(s, "nvme")) a.cmd = s;
    else if (!strcmp(s, "--no-torch")) a.torch = 0;
    else if (val && !strcmp(s, "--n") && ++i) a.n = parse_size(val);
    else if (val && !strcmp(s, "--threads") && ++i) a.threads = atoi(val);
    else if (val && !strcmp(s, "--iters") && ++i) a.iters = atoi(val);
    else if (val && !strcmp(s, "--nvme-path") && ++i) a.path = val;
    else if (val && !strcmp(s, "--bytes") && ++i) a.bytes = parse_size(val);
    else if (val && !strcmp(s, "--qd") && ++i) a.qd = atoi(val);
    else if (val && !strcmp(s, "--block") && ++i) a.block = parse_size(val);
    else if (val && !strcmp(s, "--adam-n") && ++i) a.adam_n = parse_size(val);
    else if (i > 0 && s[0] == '-') {
      fprintf(stderr, "bench: unknown option %s\n", s);
      return 2;
    }
  }
  if (!a.cmd) {
    fprintf(stderr, "usage: shardlm bench adam [--n N] [--threads T] [--iters K] [--no-torch]\n"
                    "       shardlm bench nvme [--nvme-path DIR] [--bytes B] [--qd Q] "
                    "[--block B] [--adam-n N]\n");
    return 2;
  }
  if (a.n <= 0 || a.iters <= 0 || a.bytes <= 0) {
    fprintf(stderr, "bench: --n, --iters and --bytes must be > 0\n");
    return 2;
  }
  if (!a.path) {
    const char *td = getenv("TMPDIR");
    a.path = td && *td ? td : "/tmp";
  }
  return strcmp(a.cmd, "adam") == 0 ? bench_adam(&a) : bench_nvme(&a);
}
