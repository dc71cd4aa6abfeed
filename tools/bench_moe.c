/* tools/bench_moe.c — shardlm bench moe: figures of the mixture of experts,
 * measured and printed (plain lines plus one JSON line each), never asserted
 * (docs/moe.md, "Measured"):
 *   1. training tokens/s of a Mixtral-shaped model against the dense Llama
 *      with the same active parameters (intermediate = top-k x the expert's;
 *      the router's E x C per layer is the difference), one process each,
 *      from `shardlm train`'s metrics after 2 warm-up steps;
 *   2. the experts' forward GEMMs as the model runs them (one linear_fwd per
 *      expert and weight over its group of rows; groups from a balanced and
 *      a skewed routing) against one dense linear_fwd per weight over all N·k
 *      rows with the same weight shapes, through the CPU op table, checked
 *      against a double reference before timing; best of 5 after a warm-up;
 *   3. the share of the step rank 0 spends inside the all-to-all calls
 *      (sl_comm_alltoallv and its wait: the metrics' alltoall_s) at EP 2 and
 *      EP 4, world 4 (mpirun -np 4 shardlm train --ep E --zero 3). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "tools/tools.h"

typedef struct {
  int hidden, layers, heads, kv_heads, experts, topk, inter, vocab, batch, seq, steps, threads;
} moe_cfg;

static const struct {
  const char *flag;
  size_t off;
} FLAGS[] = {{"--hidden", offsetof(moe_cfg, hidden)},
             {"--layers", offsetof(moe_cfg, layers)},
             {"--heads", offsetof(moe_cfg, heads)},
             {"--kv-heads", offsetof(moe_cfg, kv_heads)},
             {"--experts", offsetof(moe_cfg, experts)},
             {"--top-k", offsetof(moe_cfg, topk)},
             {"--expert-intermediate", offsetof(moe_cfg, inter)},
             {"--vocab", offsetof(moe_cfg, vocab)},
             {"--batch", offsetof(moe_cfg, batch)},
             {"--seq", offsetof(moe_cfg, seq)},
             {"--steps", offsetof(moe_cfg, steps)},
             {"--threads", offsetof(moe_cfg, threads)}};
enum { NFLAGS = sizeof FLAGS / sizeof FLAGS[0], REPS = 5 };

static void usage(FILE *f) {
  fprintf(f, "usage: shardlm bench moe [--hidden 256] [--layers 2] [--heads 4] [--kv-heads 2] [--experts 8]\n"
             "                        [--top-k 2] [--expert-intermediate 256] [--vocab 4096] [--batch 4]\n"
             "                        [--seq 128] [--steps 4] [--threads 2]\n"
             "1. training tokens/s of a Mixtral-shaped model against the dense Llama with the same active\n"
             "   parameters (intermediate = top-k x expert intermediate), one process, --threads threads;\n"
             "2. the experts' grouped GEMMs (balanced and skewed groups) against one dense GEMM, GFLOP/s;\n"
             "3. the share of the step spent inside the all-to-all calls at EP 2 and EP 4, world 4\n"
             "   (mpirun -np 4, ZeRO-3, 1 thread per rank, --batch x --seq per rank).\n"
             "--steps: measured steps after 2 warm-up. --experts must be a multiple of 4 (EP 4).\n");
}

/* 0, -1 (--help), or 2 with the message printed. */
static int parse(moe_cfg *c, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return -1;
    int f = 0;
    while (f < NFLAGS && strcmp(argv[i], FLAGS[f].flag)) f++;
    if (f == NFLAGS) {
      fprintf(stderr, "shardlm bench moe: unknown flag '%s' (shardlm bench moe --help lists them)\n", argv[i]);
      return 2;
    }
    const char *v = i + 1 < argc ? argv[++i] : NULL;
    char *e = NULL;
    errno = 0;
    long x = v ? strtol(v, &e, 10) : 0;
    if (!v || e == v || *e || errno || x < 1 || x > (1 << 20)) {
      fprintf(stderr, "shardlm bench moe: %s expects an integer in [1, %d], found '%s'\n", FLAGS[f].flag, 1 << 20,
              v ? v : "");
      return 2;
    }
    *(int *)((char *)c + FLAGS[f].off) = (int)x;
  }
  const char *no = NULL;
  if (c->topk > c->experts) no = "--top-k: more than --experts";
  else if (c->experts % 4) no = "--experts: not a multiple of 4 (the all-to-all section runs EP 2 and EP 4)";
  else if (c->hidden % c->heads || (c->hidden / c->heads) % 2) no = "--heads: must divide --hidden into even heads";
  else if (c->heads % c->kv_heads) no = "--kv-heads: must divide --heads";
  if (no) fprintf(stderr, "shardlm bench moe: %s\n", no);
  return no ? 2 : 0;
}

/* dir/config.json: the Mixtral (moe) or the dense Llama of the same active shape. */
static int write_config(const char *dir, const moe_cfg *c, int moe) {
  FILE *f = sl_bench_config_file(dir);
  if (!f) return -1;
  fprintf(f,
          "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"hidden_size\": %d, \"intermediate_size\": %d,\n"
          " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"num_hidden_layers\": %d, \"vocab_size\": %d,\n"
          " \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false",
          moe ? "MixtralForCausalLM" : "LlamaForCausalLM", moe ? "mixtral" : "llama", c->hidden,
          moe ? c->inter : c->topk * c->inter, c->heads, c->kv_heads, c->layers, c->vocab);
  if (moe) fprintf(f, ", \"num_local_experts\": %d, \"num_experts_per_tok\": %d", c->experts, c->topk);
  fprintf(f, "}\n");
  return fclose(f) ? -1 : 0;
}

typedef struct {
  double tps, step, a2a, wait; /* means over the measured steps */
  int n;
} run_fig;

/* One `shardlm train` of dir/model (np > 1: under mpirun, 1 thread per rank,
 * --ep ep, ZeRO-3); its metrics in dir/tag.jsonl, its log in dir/tag.log. */
static int train_run(const char *dir, const char *model, const char *tag, const moe_cfg *c, int np, int ep,
                     run_fig *out) {
  char cmd[16384], launch[256] = "", metrics[4200];
  int th = np > 1 ? 1 : c->threads;
  if (np > 1)
    snprintf(launch, sizeof launch, "mpirun %s --oversubscribe --bind-to none -np %d ",
             getuid() == 0 ? "--allow-run-as-root" : "", np);
  snprintf(metrics, sizeof metrics, "%s/%s.jsonl", dir, tag);
  fflush(stdout);
  snprintf(cmd, sizeof cmd,
           "OMP_NUM_THREADS=%d %s'%s' train --model %s/%s --init random --data %s/data --steps %d --micro-batch %d "
           "--seq-len %d "
           "--threads %d --zero %d --ep %d --summary false --plot false --log-every 1000 --metrics %s --out-dir "
           "%s/%s > %s/%s.log 2>&1",
           th, launch, sl_bench_self_exe(), dir, model, dir, c->steps + 2, c->batch, c->seq, th, np > 1 ? 3 : 0, ep,
           metrics, dir, tag, dir, tag);
  if (system(cmd) != 0) {
    fprintf(stderr, "shardlm bench moe: the %s run failed; see %s/%s.log\n", tag, dir, tag);
    return 1;
  }
  out->tps = sl_bench_metric_mean(metrics, "tokens_per_s", 2, &out->n);
  out->step = sl_bench_metric_mean(metrics, "step_time_s", 2, NULL);
  out->a2a = sl_bench_metric_mean(metrics, "alltoall_s", 2, NULL);
  out->wait = sl_bench_metric_mean(metrics, "comm_wait_s", 2, NULL);
  return 0;
}

/* Parameters: the dense Llama's, and the MoE model's active and total. */
static void param_counts(const moe_cfg *c, double *dense, double *active, double *total) {
  double C = c->hidden, hd = C / c->heads, I = c->inter, k = c->topk, E = c->experts, L = c->layers;
  double shared = 2.0 * c->vocab * C + C + L * (2 * C * C + 2 * C * c->kv_heads * hd + 2 * C);
  *dense = shared + L * 3 * C * k * I;
  *active = shared + L * (k * 3 * C * I + E * C);
  *total = shared + L * (E * 3 * C * I + E * C);
}

static int section_tokens(const char *dir, const moe_cfg *c) {
  run_fig m, d;
  double pd, pa, pt;
  param_counts(c, &pd, &pa, &pt);
  printf("1. training tokens/s, one process, %d thread(s) (mean of %d steps after 2 warm-up)\n", c->threads, c->steps);
  printf("   MoE: Mixtral, %d experts top-%d, expert intermediate %d: %.3fM parameters, %.3fM active\n", c->experts,
         c->topk, c->inter, pt * 1e-6, pa * 1e-6);
  printf("   dense: Llama, intermediate %d (= top-%d x %d): %.3fM parameters; the MoE's active ones differ only by\n"
         "   its router's E x C = %d per layer (%d in all)\n",
         c->topk * c->inter, c->topk, c->inter, pd * 1e-6, c->experts * c->hidden, c->experts * c->hidden * c->layers);
  if (train_run(dir, "moe", "moe", c, 1, 1, &m) || train_run(dir, "dense", "dense", c, 1, 1, &d)) return 1;
  double r = d.tps > 0 ? m.tps / d.tps : 0;
  printf("   MoE   %10.0f tokens/s  %8.4f s/step\n   dense %10.0f tokens/s  %8.4f s/step\n   MoE / dense %.3f\n", m.tps,
         m.step, d.tps, d.step, r);
  printf("{\"bench\": \"moe\", \"section\": \"tokens\", \"moe_tokens_per_s\": %.1f, \"dense_tokens_per_s\": %.1f, "
         "\"ratio\": %.4f, \"moe_params\": %.0f, \"moe_active_params\": %.0f, \"dense_params\": %.0f, "
         "\"router_params_per_layer\": %d, \"steps\": %d}\n",
         m.tps, d.tps, r, pt, pa, pd, c->experts * c->hidden, m.n);
  return 0;
}

/* ---- 2. the grouped GEMM ------------------------------------------------------ */
typedef struct {
  const sl_ops *o;
  sl_kctx *k;
  int64_t R, C, I, E; /* rows (N·k slots), hidden, expert intermediate, experts */
  float *x, *h;       /* (R, C) the permuted rows; (R, I) the down projection's input */
  float *gu, *y;      /* (R, 2I) gate|up out; (R, C) down out */
  float *w;           /* (E, 3·C·I) every expert's w1|w3 (2I, C) then w2 (C, I), as the experts unit */
} gemm_ctx;

/* The experts' forward GEMMs over groups of cnt[e] consecutive rows (cnt
 * NULL: one dense call per weight over all R rows with expert 0's weights);
 * returns the seconds it took. */
static double experts_gemms(const gemm_ctx *g, const int64_t *cnt) {
  int64_t C = g->C, I = g->I, ng = cnt ? g->E : 1;
  double t0 = sl_now_s();
  for (int64_t e = 0, r0 = 0; e < ng; r0 += cnt ? cnt[e] : g->R, e++) {
    int64_t n = cnt ? cnt[e] : g->R;
    if (n > 0) g->o->linear_fwd(g->k, g->gu + r0 * 2 * I, g->x + r0 * C, g->w + e * 3 * C * I, NULL, n, C, 2 * I);
  }
  for (int64_t e = 0, r0 = 0; e < ng; r0 += cnt ? cnt[e] : g->R, e++) {
    int64_t n = cnt ? cnt[e] : g->R;
    if (n > 0) g->o->linear_fwd(g->k, g->y + r0 * C, g->h + r0 * I, g->w + e * 3 * C * I + 2 * I * C, NULL, n, I, C);
  }
  return sl_now_s() - t0;
}

/* out[o] == sum_i in[i] w[o, i] (double), each output within 1e-4 of sum |terms|. */
static int row_ok(const float *out, const float *in, const float *w, int64_t IC, int64_t OC) {
  for (int64_t o = 0; o < OC; o++) {
    double s = 0, a = 0;
    for (int64_t i = 0; i < IC; i++) s += (double)in[i] * w[o * IC + i], a += fabs((double)in[i] * w[o * IC + i]);
    if (fabs(out[o] - s) > 1e-4 * a + 1e-6) return 0;
  }
  return 1;
}

/* The first and last row of each nonempty group against the double reference. */
static int gemms_ok(const gemm_ctx *g, const int64_t *cnt) {
  int64_t C = g->C, I = g->I, ng = cnt ? g->E : 1;
  for (int64_t e = 0, r0 = 0; e < ng; r0 += cnt ? cnt[e] : g->R, e++) {
    int64_t n = cnt ? cnt[e] : g->R;
    const float *w = g->w + e * 3 * C * I;
    for (int64_t r = r0; n > 0 && r<r0 + n; r += n> 1 ? n - 1 : 1)
      if (!row_ok(g->gu + r * 2 * I, g->x + r * C, w, C, 2 * I) ||
          !row_ok(g->y + r * C, g->h + r * I, w + 2 * I * C, I, C))
        return 0;
  }
  return 1;
}

/* Best of REPS after one warm-up (which is checked). */
static double best_s(const gemm_ctx *g, const int64_t *cnt, int *ok) {
  experts_gemms(g, cnt);
  *ok = gemms_ok(g, cnt);
  double best = 1e30;
  for (int r = 0; r < REPS; r++) {
    double t = experts_gemms(g, cnt);
    best = t < best ? t : best;
  }
  return best;
}

/* Rows per expert: balanced (R/E each), or skewed (expert e gets R/2^(e+1), the last the rest). */
static void routing(int64_t R, int64_t E, int skewed, int64_t *cnt) {
  int64_t left = R;
  for (int64_t e = 0; e < E; e++) {
    cnt[e] = skewed ? (e == E - 1 ? left : left / 2) : R / E + (e < R % E);
    left -= cnt[e];
  }
}

static int section_gemm(const moe_cfg *c) {
  gemm_ctx g = {
      .o = sl_ops_cpu(), .R = (int64_t)c->batch * c->seq * c->topk, .C = c->hidden, .I = c->inter, .E = c->experts};
  g.k = g.o->ctx_create(c->threads);
  size_t nw = (size_t)(g.E * 3 * g.C * g.I), nx = (size_t)(g.R * g.C), nh = (size_t)(g.R * g.I);
  g.x = sl_alloc(nx * 4, "bench moe rows"), g.y = sl_alloc(nx * 4, "bench moe out");
  g.h = sl_alloc(nh * 4, "bench moe h"), g.gu = sl_alloc(2 * nh * 4, "bench moe gate|up");
  g.w = sl_alloc(nw * 4, "bench moe experts");
  int64_t *cnt = calloc((size_t)g.E, sizeof *cnt);
  int rc = !g.k || !g.x || !g.y || !g.h || !g.gu || !g.w || !cnt;
  for (size_t i = 0; !rc && i < nw; i++) g.w[i] = (float)((i * 2654435761u) % 1000) * 2e-4f - 0.1f;
  for (size_t i = 0; !rc && i < nx; i++) g.x[i] = (float)((i * 40503u) % 997) * 2e-3f - 1.0f;
  for (size_t i = 0; !rc && i < nh; i++) g.h[i] = (float)((i * 7919u) % 991) * 2e-3f - 1.0f;
  double flop = 6.0 * (double)g.R * (double)g.C * (double)g.I;
  if (!rc)
    printf("2. the experts' forward GEMMs (gate|up %lld -> %lld, down %lld -> %lld) over N x k = %lld rows, %d "
           "thread(s), best of %d after a warm-up\n",
           (long long)g.C, (long long)(2 * g.I), (long long)g.I, (long long)g.C, (long long)g.R, c->threads, REPS);
  int ok = 1, k1;
  double td = rc ? 0 : best_s(&g, NULL, &ok);
  for (int sk = 0; !rc && sk < 2; sk++) {
    routing(g.R, g.E, sk, cnt);
    double tg = best_s(&g, cnt, &k1), mx = 0;
    ok &= k1;
    for (int64_t e = 0; e < g.E; e++) mx = cnt[e] > mx ? (double)cnt[e] : mx;
    const char *name = sk ? "skewed" : "balanced";
    printf("   %-8s groups (max/mean %.2f): grouped %8.2f GFLOP/s (%d calls), dense %8.2f GFLOP/s (2 calls), grouped / "
           "dense %.3f\n",
           name, mx * g.E / g.R, flop / tg * 1e-9, 2 * c->experts, flop / td * 1e-9, td / tg);
    printf("{\"bench\": \"moe\", \"section\": \"gemm\", \"routing\": \"%s\", \"grouped_gflops\": %.3f, "
           "\"dense_gflops\": %.3f, \"ratio\": %.4f, \"max_over_mean\": %.3f, \"rows\": %lld}\n",
           name, flop / tg * 1e-9, flop / td * 1e-9, td / tg, mx * g.E / g.R, (long long)g.R);
  }
  if (!rc && !ok) fprintf(stderr, "shardlm bench moe: a GEMM output differs from the double reference\n");
  float *bufs[] = {g.x, g.y, g.h, g.gu, g.w};
  for (int i = 0; i < 5; i++) sl_free(bufs[i]);
  free(cnt);
  if (g.k) g.o->ctx_destroy(g.k);
  return rc || !ok;
}

static int section_alltoall(const char *dir, const moe_cfg *c) {
  printf("3. the all-to-all at world 4 (mpirun -np 4, ZeRO-3, 1 thread per rank, batch %d x %d per rank): rank 0's\n"
         "   wall time inside the all-to-all calls (issue + wait, the counts exchanges included) per step, mean of\n"
         "   %d steps after 2 warm-up; the wait includes the slowest rank's lag (oversubscribed cores show here)\n",
         c->batch, c->seq, c->steps);
  printf("   %-4s %10s %14s %7s %18s %10s\n", "EP", "step (s)", "all-to-all (s)", "share", "FSDP blocked (s)",
         "tokens/s");
  for (int ep = 2; ep <= 4; ep += 2) {
    run_fig f;
    char tag[16];
    snprintf(tag, sizeof tag, "ep%d", ep);
    if (train_run(dir, "moe", tag, c, 4, ep, &f)) return 1;
    double share = f.step > 0 ? f.a2a / f.step : 0;
    printf("   %-4d %10.4f %14.4f %6.1f%% %18.4f %10.0f\n", ep, f.step, f.a2a, 100 * share, f.wait, f.tps);
    printf("{\"bench\": \"moe\", \"section\": \"alltoall\", \"ep\": %d, \"world\": 4, \"step_s\": %.5f, "
           "\"alltoall_s\": %.5f, \"alltoall_frac\": %.4f, \"fsdp_wait_s\": %.5f, \"tokens_per_s\": %.1f}\n",
           ep, f.step, f.a2a, share, f.wait, f.tps);
  }
  return 0;
}

int sl_tool_bench_moe(int argc, char **argv) {
  moe_cfg c = {256, 2, 4, 2, 8, 2, 256, 4096, 4, 128, 4, 2};
  int rc = parse(&c, argc, argv);
  if (rc) {
    if (rc < 0) usage(stdout);
    return rc < 0 ? 0 : 2;
  }
  if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK")) {
    fprintf(stderr, "shardlm bench moe: run it without a launcher (it starts mpirun -np 4 itself)\n");
    return 2;
  }
  char dir[] = "/tmp/shardlm-bench.XXXXXX", p[4200];
  if (!mkdtemp(dir)) return 1;
  printf("model: hidden %d, %d layers, %d/%d heads, vocab %d; batch %d x %d\n", c.hidden, c.layers, c.heads, c.kv_heads,
         c.vocab, c.batch, c.seq);
  snprintf(p, sizeof p, "%s/data", dir);
  rc = sl_bench_write_data(p, c.vocab);
  snprintf(p, sizeof p, "%s/moe", dir);
  rc = rc || write_config(p, &c, 1);
  snprintf(p, sizeof p, "%s/dense", dir);
  if (rc || write_config(p, &c, 0)) {
    fprintf(stderr, "shardlm bench moe: cannot write the benchmark inputs in %s: %s\n", dir, sl_errmsg());
    return 1;
  }
  fflush(stdout);
  rc = section_tokens(dir, &c) || section_gemm(&c) || section_alltoall(dir, &c);
  fflush(stdout);
  if (!rc) {
    snprintf(p, sizeof p, "rm -rf '%s'", dir);
    if (system(p) != 0) fprintf(stderr, "shardlm bench moe: cannot remove %s\n", dir);
  }
  return rc;
}
