/* tools/bench_gpu.c — shardlm bench gpu: a Llama-2-7B-shaped layer stack
 * (hidden 4096, 32 heads, intermediate 11008, vocab 32000; --layers layers)
 * on the CUDA backend, once per sequence length of --seqs (default
 * 1024,4096). Per length, one human line and one JSON line with:
 *   tokens_per_s, mfu   the training run's metrics.jsonl, mean after 2 warmup
 *   attn_tflops         the backend's attention_fwd + attention_bwd alone on
 *                       the run's shapes (causal), FlashAttention's count:
 *                       forward 4 B H S^2 hd halved for causal, forward +
 *                       backward 3.5 x the forward
 *   gemm_tflops         the backend's linear_fwd on the stack's largest GEMM
 *                       (the fused gate|up projection: tokens x hidden ->
 *                       2 x intermediate, 2 N C OC FLOPs), compute dtype of
 *                       the run
 *   comm_exposed        mean comm_wait_s / mean step_time_s after warmup
 *   peak_bytes          the metrics' peak_bytes (the sum of arenas, high-water)
 *   peak_predicted      the engine check (engine/dryrun.c, what shardlm plan
 *                       --engine-check runs) on the train flags of the run
 *   arenas_equal        every arena the engine check models equal to the
 *                       run's peak (arenas_differ names the others)
 *   scratch_bytes       the arena the engine check does not model: the CUDA
 *                       context's own device bytes (op scratch high-water,
 *                       bf16 operand stage, cuBLASLt workspace, sumsq), in
 *                       peak_bytes, not in peak_predicted
 * Kernel timings: one warmup call, then REPS calls between two syncs. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "engine/dryrun.h"
#include "formats/hfconfig.h"
#include "formats/traincfg.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "tools/tools.h"

enum { MAX_SEQS = 8, REPS = 3, MAX_ARGS = 48 };

typedef struct {
  int hidden, layers, heads, kv_heads, inter, vocab, batch, steps, threads;
  int seqs[MAX_SEQS], nseq;
  char out_dir[1024];
} gpu_cfg;

static const struct {
  const char *flag;
  size_t off;
  int min;
} FLAGS[] = {{"--hidden", offsetof(gpu_cfg, hidden), 1},      {"--layers", offsetof(gpu_cfg, layers), 1},
             {"--heads", offsetof(gpu_cfg, heads), 1},        {"--kv-heads", offsetof(gpu_cfg, kv_heads), 1},
             {"--intermediate", offsetof(gpu_cfg, inter), 1}, {"--vocab", offsetof(gpu_cfg, vocab), 2},
             {"--batch", offsetof(gpu_cfg, batch), 1},        {"--steps", offsetof(gpu_cfg, steps), 1},
             {"--threads", offsetof(gpu_cfg, threads), 0}};
enum { NFLAGS = sizeof FLAGS / sizeof FLAGS[0] };

/* The run's precision (env), MFU's peak. */
typedef struct {
  int bf16;
  double peak;
  const char *name, *what;
} precision;

static precision get_precision(void) {
  const char *bc = sl_env_str("SL_BENCH_COMPUTE");
  if (sl_env_int("SL_CUDA_TF32") != 0) return (precision){0, 494.0, "tf32", "TF32 tensor-core"};
  if (bc && !strcmp(bc, "fp32")) return (precision){0, 67.0, "fp32", "fp32 CUDA-core"};
  return (precision){1, 989.0, "bf16", "bf16 tensor-core"};
}

static void usage(FILE *f) {
  fprintf(f, "usage: shardlm bench gpu [--seqs 1024,4096 | --seq N] [--layers 4] [--batch 1] [--steps 5]\n"
             "                        [--hidden 4096] [--heads 32] [--kv-heads 32] [--intermediate 11008]\n"
             "                        [--vocab 32000] [--threads 0] [--out-dir runs/bench-gpu]\n"
             "per sequence length: training tokens/s and MFU on --backend cuda (mean of --steps after 2\n"
             "warmup), the attention op's and the largest GEMM's TFLOP/s alone, the exposed communication\n"
             "share of the step, the measured peak bytes against the engine check's prediction.\n"
             "bf16 compute, MFU against 989 TFLOPS; SL_CUDA_TF32=1: TF32 (494), SL_BENCH_COMPUTE=fp32 (67)\n");
}

/* "1024,4096" into c->seqs; 2 with the message printed. */
static int parse_seqs(gpu_cfg *c, const char *v) {
  const char *s = v ? v : "";
  c->nseq = 0;
  while (1) {
    char *e = NULL;
    errno = 0;
    long x = strtol(s, &e, 10);
    if (e == s || errno || x < 1 || x > (1 << 20) || (*e && *e != ',') || c->nseq == MAX_SEQS) {
      fprintf(stderr,
              "shardlm bench gpu: --seqs expects a comma-separated list of at most %d sequence lengths, integers "
              "in [1, %d], found '%s'\n",
              MAX_SEQS, 1 << 20, v ? v : "");
      return 2;
    }
    c->seqs[c->nseq++] = (int)x;
    if (!*e) return 0;
    s = e + 1;
  }
}

/* 0, -1 (--help), or 2 with the message printed. */
static int parse(gpu_cfg *c, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return -1;
    if (!strcmp(a, "--seqs") || !strcmp(a, "--seq")) {
      if (parse_seqs(c, v)) return 2;
      if (!strcmp(a, "--seq") && c->nseq != 1) { /* --seq: one length */
        fprintf(stderr, "shardlm bench gpu: --seq expects one sequence length, found '%s' (a list: --seqs)\n", v);
        return 2;
      }
      i++;
      continue;
    }
    if (!strcmp(a, "--out-dir") && v) {
      snprintf(c->out_dir, sizeof c->out_dir, "%s", argv[++i]);
      continue;
    }
    int f = 0;
    while (f < NFLAGS && strcmp(a, FLAGS[f].flag)) f++;
    if (f == NFLAGS) {
      fprintf(stderr, "shardlm bench gpu: unknown flag '%s' (shardlm bench gpu --help lists them)\n", a);
      return 2;
    }
    char *e = NULL;
    errno = 0;
    long x = v ? strtol(v, &e, 10) : 0;
    if (!v || e == v || *e || errno || x < FLAGS[f].min || x > (1 << 20)) {
      fprintf(stderr, "shardlm bench gpu: %s expects an integer in [%d, %d], found '%s'\n", a, FLAGS[f].min, 1 << 20,
              v ? v : "");
      return 2;
    }
    *(int *)((char *)c + FLAGS[f].off) = (int)x;
    i++;
  }
  const char *no = NULL;
  if (c->hidden % c->heads || (c->hidden / c->heads) % 2) no = "--heads must divide --hidden into even-sized heads";
  else if (c->heads % c->kv_heads) no = "--kv-heads must divide --heads";
  if (no)
    fprintf(stderr, "shardlm bench gpu: %s (found --hidden %d, --heads %d, --kv-heads %d)\n", no, c->hidden, c->heads,
            c->kv_heads);
  return no ? 2 : 0;
}

/* The train flags of one run (also what the engine check parses). */
typedef struct {
  char *v[MAX_ARGS];
  int n;
  char buf[MAX_ARGS][1100];
} train_args;

/* appends flag and its value (printf-formatted) */
static void flag(train_args *t, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void flag(train_args *t, const char *name, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  snprintf(t->buf[t->n], sizeof t->buf[0], "%s", name);
  vsnprintf(t->buf[t->n + 1], sizeof t->buf[0], fmt, ap);
  va_end(ap);
  t->v[t->n] = t->buf[t->n];
  t->v[t->n + 1] = t->buf[t->n + 1];
  t->n += 2;
}

static void train_flags(train_args *t, const gpu_cfg *c, const precision *p, const char *dir, const char *run,
                        int seq) {
  t->n = 0;
  const char *kv[][2] = {{"--backend", "cuda"},
                         {"--zero", "3"},
                         {"--activation-checkpoint", "selective"},
                         {"--grad-accum", "1"},
                         {"--summary", "true"},
                         {"--plot", "false"},
                         {"--log-every", "1000"},
                         {"--compute-dtype", p->bf16 ? "bf16" : "fp32"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) flag(t, kv[i][0], "%s", kv[i][1]);
  flag(t, "--model", "%s/model", dir);
  flag(t, "--init", "random"); /* a config without weights */
  flag(t, "--data", "%s/data", dir);
  flag(t, "--steps", "%d", c->steps + 2);
  flag(t, "--micro-batch", "%d", c->batch);
  flag(t, "--seq-len", "%d", seq);
  flag(t, "--peak-tflops", "%g", p->peak);
  flag(t, "--metrics", "%s/metrics.jsonl", run);
  flag(t, "--out-dir", "%s", run);
  if (c->threads > 0) flag(t, "--threads", "%d", c->threads);
}

/* exe train ARGS > run/train.log 2>&1, each argument single-quoted; failure: the log's tail on stderr. */
static int run_train(const train_args *t, const char *run) {
  static char cmd[65536];
  int o = snprintf(cmd, sizeof cmd, "'%s' train", sl_bench_self_exe());
  for (int i = 0; i < t->n && o < (int)sizeof cmd - 8; i++) {
    o += snprintf(cmd + o, sizeof cmd - o, " '");
    for (const char *s = t->v[i]; *s && o < (int)sizeof cmd - 8; s++)
      o += *s == '\'' ? snprintf(cmd + o, sizeof cmd - o, "'\\''") : snprintf(cmd + o, sizeof cmd - o, "%c", *s);
    o += snprintf(cmd + o, sizeof cmd - o, "'");
  }
  snprintf(cmd + o, sizeof cmd - o, " > '%s/train.log' 2>&1", run);
  fflush(stdout);
  if (system(cmd) == 0) return 0;
  fprintf(stderr, "shardlm bench gpu: the run failed; its log is %s/train.log, which ends:\n", run);
  snprintf(cmd, sizeof cmd, "tail -n 20 '%s/train.log' >&2", run);
  if (system(cmd) != 0) fprintf(stderr, "(cannot read it)\n");
  return 1;
}

/* The run's figures from its metrics. */
typedef struct {
  double tps, mfu, step, wait;
  int n;
  int64_t arena[SL_ARENA_COUNT], total;
} run_figs;

/* arena peaks and peak_bytes of the last line (peaks are over every step: reset once, before the first) */
static int read_metrics(const char *path, int skip, run_figs *r) {
  r->tps = sl_bench_metric_mean(path, "tokens_per_s", skip, &r->n);
  r->mfu = sl_bench_metric_mean(path, "mfu", skip, NULL);
  r->step = sl_bench_metric_mean(path, "step_time_s", skip, NULL);
  r->wait = sl_bench_metric_mean(path, "comm_wait_s", skip, NULL);
  FILE *f = fopen(path, "r");
  char line[16384], last[16384] = "";
  while (f && fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
  if (f) fclose(f);
  json_t *o = json_loads(last, 0, NULL), *ap = o ? json_object_get(o, "arena_peak") : NULL;
  int ok = ap && r->n > 0 && r->step > 0 && json_is_integer(json_object_get(o, "peak_bytes"));
  for (int a = 0; ok && a < SL_ARENA_COUNT; a++) {
    json_t *v = json_object_get(ap, sl_arena_name((sl_arena)a));
    ok = json_is_integer(v);
    if (ok) r->arena[a] = (int64_t)json_integer_value(v);
  }
  if (ok) r->total = (int64_t)json_integer_value(json_object_get(o, "peak_bytes"));
  json_decref(o);
  if (!ok)
    fprintf(stderr,
            "shardlm bench gpu: %s: expected metrics lines after %d warmup with step_time_s, peak_bytes and "
            "arena_peak for every arena; found none usable\n",
            path, skip);
  return ok ? 0 : 1;
}

/* n floats of backend memory, a pattern in [-scale, scale], uploaded in chunks. */
static float *dev_fill(const sl_ops *ops, sl_kctx *k, int64_t n, float scale) {
  float *p = ops->alloc(k, (size_t)n * 4); /* zeroed */
  enum { CH = 1 << 18 };
  if (!p || scale == 0.0f) return p;
  float *h = malloc(CH * 4);
  if (!h) {
    ops->free(k, p);
    return NULL;
  }
  for (int64_t i = 0; i < CH; i++) h[i] = scale * ((float)((i * 7919) % 2001) / 1000.0f - 1.0f);
  for (int64_t o = 0; o < n; o += CH) ops->upload(k, p + o, h, (size_t)(n - o < CH ? n - o : CH) * 4);
  free(h);
  return p;
}

typedef struct {
  int64_t B, T, nh, nkv, hd, N, C, OC;
  float *x[5];
} kshape;

static void attn_once(const sl_ops *o, sl_kctx *k, kshape *s) { /* x: qkv, out, lse, dout, dqkv */
  float sc = 1.0f / sqrtf((float)s->hd);
  o->attention_fwd(k, s->x[1], s->x[2], s->x[0], s->B, s->T, s->nh, s->nkv, s->hd, 0, sc, NULL, 0.0f);
  o->attention_bwd(k, s->x[4], s->x[3], s->x[0], s->x[1], s->x[2], s->B, s->T, s->nh, s->nkv, s->hd, 0, sc, NULL, 0.0f);
}
static void gemm_once(const sl_ops *o, sl_kctx *k, kshape *s) { /* x: inp, w, out */
  o->linear_fwd(k, s->x[2], s->x[0], s->x[1], NULL, s->N, s->C, s->OC);
}

/* TFLOP/s of REPS calls after one warmup, a sync on either side of the clock; -1 on a backend error. */
static double time_op(const sl_ops *o, sl_kctx *k, kshape *s, void (*once)(const sl_ops *, sl_kctx *, kshape *),
                      double flops) {
  once(o, k, s);
  if (o->sync(k)) return -1;
  double t0 = sl_now_s();
  for (int r = 0; r < REPS; r++) once(o, k, s);
  if (o->sync(k)) return -1;
  double dt = sl_now_s() - t0;
  return dt > 0 ? flops * REPS / dt * 1e-12 : -1;
}

/* attention and GEMM TFLOP/s on the run's shapes; 1 with a message on failure */
static int time_kernels(const gpu_cfg *c, const precision *p, int seq, double *attn, double *gemm) {
  const sl_ops *o = sl_backend_get("cuda");
  sl_kctx *k = o ? o->ctx_create(c->threads) : NULL;
  if (!k || o->ctx_set_compute(k, p->bf16 ? SL_COMPUTE_BF16 : SL_COMPUTE_FP32)) {
    fprintf(stderr, "shardlm bench gpu: the CUDA backend for the kernel timings: %s\n", sl_errmsg());
    if (k) o->ctx_destroy(k);
    return 1;
  }
  kshape s = {.B = c->batch, .T = seq, .nh = c->heads, .nkv = c->kv_heads, .hd = c->hidden / c->heads};
  s.N = s.B * s.T, s.C = c->hidden, s.OC = 2 * (int64_t)c->inter; /* the fused gate|up projection */
  int64_t W = (s.nh + 2 * s.nkv) * s.hd, A = s.nh * s.hd;
  int64_t na[5] = {s.N * W, s.N * A, s.B * s.nh * s.T, s.N * A, s.N * W}, ng[3] = {s.N * s.C, s.OC * s.C, s.N * s.OC};
  int rc = 0;
  for (int i = 0; i < 5 && !rc; i++) rc = !(s.x[i] = dev_fill(o, k, na[i], i == 3 ? 0.01f : i == 0 ? 1.0f : 0.0f));
  /* FlashAttention's count: forward 4 B H S^2 hd, halved for causal; forward + backward 3.5 x forward */
  double fa = 3.5 * (4.0 * s.B * s.nh * (double)s.T * s.T * s.hd / 2);
  *attn = rc ? -1 : time_op(o, k, &s, attn_once, fa);
  for (int i = 0; i < 5; i++) {
    o->free(k, s.x[i]);
    s.x[i] = NULL;
  }
  for (int i = 0; i < 3 && !rc; i++) rc = !(s.x[i] = dev_fill(o, k, ng[i], i == 2 ? 0.0f : 0.5f));
  *gemm = rc ? -1 : time_op(o, k, &s, gemm_once, 2.0 * s.N * s.C * s.OC);
  for (int i = 0; i < 3; i++) o->free(k, s.x[i]);
  if (rc || *attn < 0 || *gemm < 0)
    fprintf(stderr, "shardlm bench gpu: the kernel timings at seq %d failed: %s\n", seq, sl_errmsg());
  o->ctx_destroy(k);
  return rc || *attn < 0 || *gemm < 0;
}

/* The engine check of the run: its own train flags parsed by train's parser, the dry run at world 1. */
static int predict(const train_args *t, const char *dir, sl_dry_result *pm) {
  sl_train_cfg tc;
  sl_model_config mc;
  char path[1200];
  snprintf(path, sizeof path, "%s/model/config.json", dir);
  sl_train_cfg_defaults(&tc);
  int level = sl_log_get_level(), rc = sl_train_cfg_parse_args(&tc, t->n, (char **)t->v);
  if (!rc) rc = sl_hfconfig_load(path, &mc);
  if (level < SL_LOG_DEBUG) sl_log_set_level(SL_LOG_WARN); /* the counted run's lines are not the run's */
  if (!rc) rc = sl_train_dry_run(&tc, &mc, 1, 0, pm);
  sl_log_set_level(level);
  if (rc) fprintf(stderr, "shardlm bench gpu: the engine check of the run: %s\n", sl_errmsg());
  return rc ? 1 : 0;
}

static void report(const gpu_cfg *c, const precision *p, int seq, const run_figs *r, double attn, double gemm,
                   const sl_dry_result *pm) {
  char differ[256] = "";
  for (int a = 0; a < SL_ARENA_COUNT; a++)
    if (a != SL_ARENA_SCRATCH && r->arena[a] != pm->peak[a])
      snprintf(differ + strlen(differ), sizeof differ - strlen(differ), "%s%s", differ[0] ? "," : "",
               sl_arena_name((sl_arena)a));
  double gib = 1.0 / 1073741824.0, comm = r->wait / r->step;
  int64_t scratch = r->arena[SL_ARENA_SCRATCH];
  printf("seq %d: %.0f tokens/s, MFU %.1f%% of %.0f TFLOPS (%s peak) (mean of %d steps after 2 warmup); attention "
         "%.1f TFLOP/s, GEMM %lldx%lldx%lld %.1f TFLOP/s; comm exposed %.1f%% of the step; peak %.2f GiB, "
         "predicted %.2f GiB + %.2f GiB CUDA context scratch (not modelled); arenas %s%s\n",
         seq, r->tps, 100 * r->mfu, p->peak, p->what, r->n, attn, (long long)c->batch * seq, (long long)c->hidden,
         2 * (long long)c->inter, gemm, 100 * comm, r->total * gib, pm->total_peak * gib, scratch * gib,
         differ[0] ? "differ: " : "equal", differ);
  printf("{\"bench\": \"gpu\", \"seq\": %d, \"batch\": %d, \"layers\": %d, \"tokens_per_s\": %.1f, \"mfu\": %.4f, "
         "\"attn_tflops\": %.4g, \"gemm_tflops\": %.4g, \"comm_exposed\": %.4f, \"peak_bytes\": %lld, "
         "\"peak_predicted\": %lld, \"arenas_equal\": %s, \"arenas_differ\": \"%s\", \"scratch_bytes\": %lld, "
         "\"peak_tflops\": %.0f, \"precision\": \"%s\", \"mfu_vs_bf16_989\": %.4f}\n",
         seq, c->batch, c->layers, r->tps, r->mfu, attn, gemm, comm, (long long)r->total, (long long)pm->total_peak,
         differ[0] ? "false" : "true", differ, (long long)scratch, p->peak, p->name, r->mfu * p->peak / 989.0);
  fflush(stdout);
}

static int bench_seq(const gpu_cfg *c, const precision *p, const char *dir, int seq) {
  char run[1100], metrics[1200];
  snprintf(run, sizeof run, "%s/s%d", dir, seq);
  snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run);
  if (sl_mkdirs(run) != SL_OK) {
    fprintf(stderr, "shardlm bench gpu: %s\n", sl_errmsg());
    return 2;
  }
  remove(metrics);
  static train_args t;
  train_flags(&t, c, p, dir, run, seq);
  run_figs r = {0};
  sl_dry_result pm;
  double attn = -1, gemm = -1;
  if (run_train(&t, run) || read_metrics(metrics, 2, &r) || time_kernels(c, p, seq, &attn, &gemm) ||
      predict(&t, dir, &pm))
    return 1;
  report(c, p, seq, &r, attn, gemm, &pm);
  return 0;
}

int sl_bench_gpu_main(int argc, char **argv) {
  gpu_cfg c = {4096, 4, 32, 32, 11008, 32000, 1, 5, 0, {1024, 4096}, 2, ""};
  int rc = parse(&c, argc, argv);
  if (rc) {
    if (rc < 0) usage(stdout);
    return rc < 0 ? 0 : rc;
  }
  char dir[1100];
  snprintf(dir, sizeof dir, "%s", c.out_dir[0] ? c.out_dir : "runs/bench-gpu");
  if (sl_mkdirs(dir) != SL_OK) {
    fprintf(stderr, "shardlm bench gpu: %s\n", sl_errmsg());
    return 2;
  }
  char model[1200], data[1200];
  snprintf(model, sizeof model, "%s/model", dir);
  snprintf(data, sizeof data, "%s/data", dir);
  precision p = get_precision();
  if (sl_bench_write_llama(model, c.hidden, c.inter, c.heads, c.kv_heads, c.layers, c.vocab) ||
      sl_bench_write_data(data, c.vocab)) {
    fprintf(stderr, "shardlm bench gpu: cannot write the benchmark inputs in %s: %s\n", dir, sl_errmsg());
    return 1;
  }
  printf("model: Llama hidden %d, %d layers, %d/%d heads, intermediate %d, vocab %d; batch %d; CUDA backend, %s "
         "GEMMs; run directories %s/s<seq>\n",
         c.hidden, c.layers, c.heads, c.kv_heads, c.inter, c.vocab, c.batch, p.name, dir);
  for (int i = 0; i < c.nseq; i++)
    if ((rc = bench_seq(&c, &p, dir, c.seqs[i]))) return rc;
  return 0;
}
