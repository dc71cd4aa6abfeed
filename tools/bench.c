/* tools/bench.c — shardlm bench: figures are measured and printed, never
 * asserted (tests check behaviour).
 *   train  tokens/s and MFU of the CPU backend for a Llama (default ~20M
 *          parameters) next to PyTorch eager on the same threads and batch,
 *          both started from this process
 *   zero   ZeRO-0 vs ZeRO-3 at world size 2: step time, time blocked on
 *          communication, bytes moved, peak bytes per arena
 *   adam | nvme   see tools/bench_offload.c
 *   moe    see tools/bench_moe.c; pipeline see tools/bench_pipeline.c
 *   gpu    see tools/bench_gpu.c
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "formats/dataset.h"
#include "kernels/kernels.h"
#include "shard/comm.h"
#include "tools/tools.h"

int sl_bench_offload_main(int argc, char **argv) __attribute__((weak)); /* tools/bench_offload.c */
int sl_bench_pipeline_main(int argc, char **argv);                      /* tools/bench_pipeline.c */

typedef struct {
  int hidden, layers, heads, kv_heads, inter, vocab, batch, seq, steps, threads, world;
  char src[1024]; /* source tree (for tools/bench_torch.py) */
} bench_cfg;

const char *sl_bench_self_exe(void) {
  static char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "shardlm";
  buf[n] = 0;
  return buf;
}

FILE *sl_bench_config_file(const char *dir) {
  char p[4200];
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/config.json", dir);
  return fopen(p, "w");
}

int sl_bench_write_llama(const char *dir, int hidden, int inter, int heads, int kv_heads, int layers, int vocab) {
  FILE *f = sl_bench_config_file(dir);
  if (!f) return -1;
  fprintf(f,
          "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %d, \"intermediate_size\": %d,\n"
          " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"num_hidden_layers\": %d,\n"
          " \"vocab_size\": %d, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": false}\n",
          hidden, inter, heads, kv_heads, layers, vocab);
  fclose(f);
  return 0;
}

static int write_model(const bench_cfg *b, const char *dir) {
  return sl_bench_write_llama(dir, b->hidden, b->inter, b->heads, b->kv_heads, b->layers, b->vocab);
}

int sl_bench_write_data(const char *prefix, int vocab) {
  sl_dataset_builder *db;
  if (sl_dataset_builder_create(prefix, vocab <= 65535 ? 8 : 4, &db)) return -1;
  int32_t doc[4096];
  uint64_t s = 12345;
  for (int d = 0; d < 64; d++) {
    for (int i = 0; i < 4096; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      doc[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
    if (sl_dataset_builder_add_document(db, doc, 4096)) return -1;
  }
  return sl_dataset_builder_finish(db);
}

/* mean of key over metrics lines after the first `skip` */
double sl_bench_metric_mean(const char *path, const char *key, int skip, int *n_out) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[8192];
  double sum = 0;
  int n = 0, i = 0;
  while (fgets(line, sizeof line, f)) {
    if (i++ < skip) continue;
    json_t *o = json_loads(line, 0, NULL);
    if (!o) continue;
    json_t *v = json_object_get(o, key);
    if (v && json_is_number(v)) {
      sum += json_number_value(v);
      n++;
    }
    json_decref(o);
  }
  fclose(f);
  if (n_out) *n_out = n;
  return n ? sum / n : 0;
}

static int64_t metric_last_arena(const char *path, const char *arena) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[8192], last[8192] = "";
  while (fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
  fclose(f);
  json_t *o = json_loads(last, 0, NULL);
  int64_t v = 0;
  if (o) {
    json_t *a = json_object_get(o, "arena_peak");
    if (a) v = (int64_t)json_number_value(json_object_get(a, arena));
    json_decref(o);
  }
  return v;
}

static int parse(bench_cfg *b, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    int *dst = NULL;
    const char *a = argv[i];
    if (!strcmp(a, "--hidden")) dst = &b->hidden;
    else if (!strcmp(a, "--layers")) dst = &b->layers;
    else if (!strcmp(a, "--heads")) dst = &b->heads;
    else if (!strcmp(a, "--kv-heads")) dst = &b->kv_heads;
    else if (!strcmp(a, "--intermediate")) dst = &b->inter;
    else if (!strcmp(a, "--vocab")) dst = &b->vocab;
    else if (!strcmp(a, "--batch")) dst = &b->batch;
    else if (!strcmp(a, "--seq")) dst = &b->seq;
    else if (!strcmp(a, "--steps")) dst = &b->steps;
    else if (!strcmp(a, "--threads")) dst = &b->threads;
    else if (!strcmp(a, "--src") && i + 1 < argc) {
      snprintf(b->src, sizeof b->src, "%s", argv[++i]);
      continue;
    }
    if (!dst || i + 1 >= argc) {
      fprintf(stderr, "shardlm bench: unknown or incomplete flag '%s'\n", a);
      return 2;
    }
    *dst = atoi(argv[++i]);
  }
  return 0;
}

static int bench_train(bench_cfg *b) {
  char dir[] = "/tmp/shardlm-bench.XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char model[4200], data[4200], metrics[4200], cmd[16384];
  snprintf(model, sizeof model, "%s/model", dir);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
  if (write_model(b, model) || sl_bench_write_data(data, b->vocab)) {
    fprintf(stderr, "shardlm bench: cannot write the benchmark inputs in %s: %s\n", dir, sl_errmsg());
    return 1;
  }
  int steps = b->steps + 2;
  printf("model: Llama hidden %d, %d layers, %d/%d heads, intermediate %d, vocab %d; batch %d x %d; %d threads\n",
         b->hidden, b->layers, b->heads, b->kv_heads, b->inter, b->vocab, b->batch, b->seq, b->threads);
  snprintf(cmd, sizeof cmd,
           "OMP_NUM_THREADS=%d '%s' train --model %s --init random --data %s --steps %d --micro-batch %d --seq-len %d "
           "--threads %d --zero 0 --summary false --plot false --log-every 1000 --metrics %s --out-dir %s > "
           "%s/train.log 2>&1",
           b->threads, sl_bench_self_exe(), model, data, steps, b->batch, b->seq, b->threads, metrics, dir, dir);
  int rc = system(cmd);
  if (rc != 0) {
    fprintf(stderr, "shardlm bench: the shardlm run failed; see %s/train.log\n", dir);
    return 1;
  }
  int n = 0;
  double tps = sl_bench_metric_mean(metrics, "tokens_per_s", 2, &n),
         mfu = sl_bench_metric_mean(metrics, "mfu", 2, NULL);
  printf("shardlm  (CPU backend): %8.0f tokens/s  MFU %5.1f%% of the measured GEMM peak  (mean of %d steps after 2 "
         "warmup)\n",
         tps, 100 * mfu, n);
  char torch_py[2048];
  snprintf(torch_py, sizeof torch_py, "%s/tools/bench_torch.py", b->src);
  if (access(torch_py, R_OK) != 0) {
    printf("pytorch: %s not found (pass --src SOURCE_DIR); ratio not measured\n", torch_py);
    return 0;
  }
  snprintf(cmd, sizeof cmd,
           "OMP_NUM_THREADS=%d /usr/bin/python3 %s --hidden %d --layers %d --heads %d --kv-heads %d "
           "--intermediate %d --vocab %d --batch %d --seq %d --steps %d --threads %d 2>%s/torch.log | tail -1",
           b->threads, torch_py, b->hidden, b->layers, b->heads, b->kv_heads, b->inter, b->vocab, b->batch, b->seq,
           b->steps, b->threads, dir);
  FILE *p = popen(cmd, "r");
  char line[4096] = "";
  if (p) {
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    pclose(p);
  }
  json_t *o = json_loads(line, 0, NULL);
  if (!o) {
    printf("pytorch: no result (see %s/torch.log)\n", dir);
    return 0;
  }
  double ttps = json_number_value(json_object_get(o, "tokens_per_s"));
  json_decref(o);
  printf("pytorch  (eager, fp32): %8.0f tokens/s\n", ttps);
  printf("ratio shardlm / pytorch: %.2fx\n", ttps > 0 ? tps / ttps : 0);
  printf("{\"bench\": \"train\", \"shardlm_tokens_per_s\": %.1f, \"torch_tokens_per_s\": %.1f, \"ratio\": %.3f, "
         "\"mfu\": %.4f}\n",
         tps, ttps, ttps > 0 ? tps / ttps : 0, mfu);
  return 0;
}

static int bench_zero(bench_cfg *b) {
  char dir[] = "/tmp/shardlm-bench.XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char model[4200], data[4200];
  snprintf(model, sizeof model, "%s/model", dir);
  snprintf(data, sizeof data, "%s/data", dir);
  if (write_model(b, model) || sl_bench_write_data(data, b->vocab)) return 1;
  printf("model: Llama hidden %d, %d layers, vocab %d; world size 2, batch %d x %d per rank, %d thread(s) per rank\n",
         b->hidden, b->layers, b->vocab, b->batch, b->seq, b->threads);
  printf("%-7s %10s %12s %10s %12s | peak MiB: %8s %8s %8s %8s %8s\n", "stage", "step (s)", "blocked (s)", "blocked %",
         "MiB moved", "params", "grads", "optim", "gather", "acts");
  for (int z = 0; z <= 3; z += 3) {
    char metrics[4200], cmd[16384];
    snprintf(metrics, sizeof metrics, "%s/metrics-z%d.jsonl", dir, z);
    snprintf(cmd, sizeof cmd,
             "mpirun %s --oversubscribe --bind-to none -np 2 '%s' train --model %s --init random --data %s --steps %d "
             "--micro-batch %d --seq-len %d --threads %d --zero %d --prefetch 1 --summary false --plot false "
             "--log-every 1000 --metrics %s --out-dir %s > %s/train-z%d.log 2>&1",
             getuid() == 0 ? "--allow-run-as-root" : "", sl_bench_self_exe(), model, data, b->steps + 2, b->batch,
             b->seq, b->threads, z, metrics, dir, dir, z);
    if (system(cmd) != 0) {
      fprintf(stderr, "shardlm bench: run failed, see %s/train-z%d.log\n", dir, z);
      return 1;
    }
    double st = sl_bench_metric_mean(metrics, "step_time_s", 2, NULL),
           wt = sl_bench_metric_mean(metrics, "comm_wait_s", 2, NULL);
    double by = sl_bench_metric_mean(metrics, "comm_bytes", 2, NULL);
    double mb = 1.0 / (1 << 20);
    printf("ZeRO-%d  %10.4f %12.4f %9.1f%% %12.2f | %17.2f %8.2f %8.2f %8.2f %8.2f\n", z, st, wt, 100 * wt / st,
           by * mb, metric_last_arena(metrics, "params") * mb, metric_last_arena(metrics, "grads") * mb,
           metric_last_arena(metrics, "optim") * mb, metric_last_arena(metrics, "gather") * mb,
           metric_last_arena(metrics, "acts") * mb);
    printf("{\"bench\": \"zero\", \"zero\": %d, \"step_s\": %.5f, \"blocked_s\": %.5f, \"blocked_frac\": %.4f, "
           "\"bytes_per_step\": %.0f}\n",
           z, st, wt, wt / st, by);
  }
  return 0;
}

/* Merges {key: value} into the JSON object in path (created if absent). */
static void merge_out(const char *path, const char *key, double value) {
  if (!path) return;
  json_t *o = json_load_file(path, 0, NULL);
  if (!o || !json_is_object(o)) {
    if (o) json_decref(o);
    o = json_object();
  }
  json_object_set_new(o, key, json_real(value));
  if (json_dump_file(o, path, JSON_INDENT(2)) != 0) fprintf(stderr, "shardlm bench: cannot write %s\n", path);
  else printf("wrote \"%s\": %.4g to %s (shardlm plan --measured %s)\n", key, value, path, path);
  json_decref(o);
}

static const char *flag_value(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return NULL;
}

/* A ~20M-parameter Mamba (hidden 512, 10 layers, state 16, vocab 8192, tied):
 * training tokens/s of the CPU backend, and the selective scan's share of
 * the step, from the scan kernels timed alone at the model's shapes. */
static int bench_mamba(bench_cfg *b) {
  char dir[] = "/tmp/shardlm-bench.XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char model[4200], data[4200], metrics[4200], cmd[16384], p[4300];
  snprintf(model, sizeof model, "%s/model", dir);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
  mkdir(model, 0755);
  snprintf(p, sizeof p, "%s/config.json", model);
  FILE *f = fopen(p, "w");
  if (!f) return 1;
  int H = 512, L = 10, S = 16, E = 2, K = 4, V = 8192, D = E * H;
  fprintf(f,
          "{\"architectures\": [\"MambaForCausalLM\"], \"model_type\": \"mamba\", \"hidden_size\": %d,\n"
          " \"num_hidden_layers\": %d, \"state_size\": %d, \"expand\": %d, \"conv_kernel\": %d,\n"
          " \"vocab_size\": %d, \"tie_word_embeddings\": true}\n",
          H, L, S, E, K, V);
  fclose(f);
  b->vocab = V;
  if (sl_bench_write_data(data, b->vocab)) return 1;
  printf("model: Mamba hidden %d, %d layers, state %d, expand %d, vocab %d (tied); batch %d x %d; %d threads\n", H, L,
         S, E, V, b->batch, b->seq, b->threads);
  snprintf(cmd, sizeof cmd,
           "OMP_NUM_THREADS=%d '%s' train --model %s --init random --data %s --steps %d --micro-batch %d --seq-len %d "
           "--threads %d --zero 0 --summary false --plot false --log-every 1000 --metrics %s --out-dir %s > "
           "%s/train.log 2>&1",
           b->threads, sl_bench_self_exe(), model, data, b->steps + 2, b->batch, b->seq, b->threads, metrics, dir, dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "shardlm bench: the shardlm run failed; see %s/train.log\n", dir);
    return 1;
  }
  int n = 0;
  double tps = sl_bench_metric_mean(metrics, "tokens_per_s", 2, &n),
         step = sl_bench_metric_mean(metrics, "step_time_s", 2, NULL);
  /* the scan kernels alone, at the model's shapes, same threads */
  const sl_ops *ops = sl_ops_cpu();
  sl_kctx *k = ops->ctx_create(b->threads);
  int64_t B = b->batch, T = b->seq, chunk = 64, nch = (T + chunk - 1) / chunk;
  size_t nd = (size_t)(B * T * D), ns = (size_t)(B * T * 2 * S);
  float *u = sl_alloc(nd * 4, "u"), *dt = sl_alloc(nd * 4, "dt"), *y = sl_alloc(nd * 4, "y"),
        *dy = sl_alloc(nd * 4, "dy"), *du = sl_alloc(nd * 4, "du"), *ddt = sl_alloc(nd * 4, "ddt"),
        *bc = sl_alloc(ns * 4, "bc"), *dbc = sl_alloc(ns * 4, "dbc"), *al = sl_alloc((size_t)(D * S) * 4, "A"),
        *dal = sl_alloc((size_t)(D * S) * 4, "dA"), *dp = sl_alloc((size_t)D * 4, "D"),
        *ddp = sl_alloc((size_t)D * 4, "dD"), *ck = sl_alloc((size_t)(B * nch * D * S) * 4, "ckpt");
  if (!u || !dt || !y || !dy || !du || !ddt || !bc || !dbc || !al || !dal || !dp || !ddp || !ck) return 1;
  for (size_t i = 0; i < nd; i++) {
    u[i] = (float)((i * 37) % 101) * 0.01f - 0.5f;
    dt[i] = -2.0f;
    dy[i] = 0.01f;
  }
  for (size_t i = 0; i < ns; i++) bc[i] = (float)((i * 13) % 29) * 0.02f - 0.3f;
  for (int64_t i = 0; i < D * S; i++) al[i] = logf((float)(i % S + 1));
  double tf = 1e30, tb = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    double t0 = sl_now_s();
    ops->scan_fwd(k, y, ck, u, dt, al, bc, bc + S, 2 * S, dp, NULL, B, T, D, S, chunk);
    double t1 = sl_now_s();
    ops->scan_bwd(k, du, ddt, dal, dbc, dbc + S, ddp, dy, u, dt, al, bc, bc + S, 2 * S, dp, NULL, ck, B, T, D, S,
                  chunk);
    double t2 = sl_now_s();
    if (t1 - t0 < tf) tf = t1 - t0;
    if (t2 - t1 < tb) tb = t2 - t1;
  }
  double scan = L * (tf + tb); /* forward + backward per layer, no recomputation */
  printf("shardlm  (CPU backend): %8.0f tokens/s, %.3f s per step (mean of %d steps after 2 warmup)\n", tps, step, n);
  printf("selective scan alone:   fwd %.4f s + bwd %.4f s per layer, x %d layers = %.3f s = %.0f%% of the step\n", tf,
         tb, L, scan, 100 * scan / step);
  printf("{\"bench\": \"mamba\", \"tokens_per_s\": %.1f, \"step_s\": %.4f, \"scan_s\": %.4f, \"scan_share\": %.3f}\n",
         tps, step, scan, scan / step);
  float *bufs[] = {u, dt, y, dy, du, ddt, bc, dbc, al, dal, dp, ddp, ck};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) sl_free(bufs[i]);
  ops->ctx_destroy(k);
  return 0;
}

/* GEMM rate of the CPU backend (what MFU and the planner divide by). */
static int bench_gemm(int argc, char **argv) {
  const sl_ops *ops = sl_ops_cpu();
  const char *th = flag_value(argc, argv, "--threads");
  sl_kctx *k = ops->ctx_create(th ? atoi(th) : 0);
  double best = 0;
  int sizes[] = {512, 1024, 2048};
  for (int si = 0; si < 3; si++) {
    int64_t n = sizes[si];
    float *a = sl_alloc((size_t)(n * n) * 4, "a"), *b = sl_alloc((size_t)(n * n) * 4, "b"),
          *c = sl_alloc((size_t)(n * n) * 4, "c");
    if (!a || !b || !c) return 1;
    for (int64_t i = 0; i < n * n; i++) a[i] = b[i] = (float)((i * 7) % 13) * 0.01f;
    double rate = 0;
    for (int rep = 0; rep < 4; rep++) {
      double t0 = sl_now_s();
      ops->linear_fwd(k, c, a, b, NULL, n, n, n);
      double dt = sl_now_s() - t0, r = 2.0 * n * n * n / dt;
      if (rep > 0 && r > rate) rate = r;
    }
    printf("sgemm %5lld^3: %7.1f GFLOP/s\n", (long long)n, rate * 1e-9);
    if (rate > best) best = rate;
    sl_free(a);
    sl_free(b);
    sl_free(c);
  }
  ops->ctx_destroy(k);
  printf("{\"bench\": \"gemm\", \"tflops\": %.6f}\n", best * 1e-12);
  merge_out(flag_value(argc, argv, "--out"), "tflops", best * 1e-12);
  return 0;
}

/* Bus bandwidth of all-gather and reduce-scatter between local ranks. */
static int bench_comm(int argc, char **argv) {
  if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("SLURM_PROCID")) {
    char **args = calloc((size_t)argc + 12, sizeof(char *));
    int k = 0;
    args[k++] = "mpirun";
    if (getuid() == 0) args[k++] = "--allow-run-as-root";
    args[k++] = "--oversubscribe";
    args[k++] = "-np";
    args[k++] = "2";
    args[k++] = (char *)sl_bench_self_exe();
    args[k++] = "bench";
    for (int i = 0; i < argc; i++) args[k++] = argv[i];
    fflush(stdout);
    execvp("mpirun", args);
    fprintf(stderr, "shardlm bench comm: cannot start mpirun\n");
    return 1;
  }
  sl_comm *w;
  if (sl_comm_world_init(&argc, &argv, 120, &w) != SL_COMM_OK) return 1;
  int r = sl_comm_rank(w), n = sl_comm_size(w);
  int64_t count = (int64_t)16 << 20; /* floats per rank block: 64 MiB */
  float *full = sl_alloc((size_t)(count * n) * 4, "comm bench");
  if (!full) return 1;
  double best_ag = 0, best_rs = 0;
  for (int rep = 0; rep < 4; rep++) {
    sl_comm_barrier_sync(w);
    double t0 = sl_now_s();
    sl_comm_allgather_sync(w, full + r * count, full, count, SL_F32);
    double ag = sl_now_s() - t0;
    sl_comm_req *q;
    sl_comm_barrier_sync(w);
    t0 = sl_now_s();
    sl_comm_reduce_scatter(w, full, full + r * count, count, SL_F32, &q);
    sl_comm_wait(q);
    double rs = sl_now_s() - t0;
    double bytes = (double)(n - 1) * count * 4; /* bus bytes per rank */
    if (rep > 0 && bytes / ag > best_ag) best_ag = bytes / ag;
    if (rep > 0 && bytes / rs > best_rs) best_rs = bytes / rs;
  }
  if (r == 0) {
    printf("%d ranks, %lld MiB per rank: all-gather %.2f GB/s, reduce-scatter %.2f GB/s (bus bandwidth)\n", n,
           (long long)(count * 4 >> 20), best_ag * 1e-9, best_rs * 1e-9);
    double bw = (best_ag < best_rs ? best_ag : best_rs) * 1e-9;
    printf("{\"bench\": \"comm\", \"intra_bw_gbs\": %.4f}\n", bw);
    merge_out(flag_value(argc, argv, "--out"), "intra_bw_gbs", bw);
  }
  sl_free(full);
  sl_comm_destroy(w);
  sl_comm_world_finalize();
  return 0;
}

int sl_tool_bench(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fprintf(stderr,
            "usage: shardlm bench train|zero|mamba|gpu|gemm|comm|pipeline|moe|adam|nvme|tokenizer [flags]\n"
            "  pipeline: the pipeline schedules over real send/recv (shardlm bench pipeline --help)\n"
            "  moe: MoE vs dense tokens/s, grouped vs dense GEMM, the all-to-all's share at EP 2 and 4\n"
            "       (shardlm bench moe --help)\n  "
            "gemm/comm: --out FILE.json merges the figure for shardlm plan --measured\n"
            "  train/zero flags: --hidden --layers --heads --kv-heads --intermediate --vocab --batch --seq\n"
            "                    --steps --threads --src SOURCE_DIR (for tools/bench_torch.py)\n"
            "  gpu: a Llama-2-7B-shaped stack on --backend cuda per sequence length (--seqs 1024,4096):\n"
            "       MFU, attention and GEMM TFLOP/s, exposed comm, peak vs predicted (shardlm bench gpu --help)\n");
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "adam") || !strcmp(argv[1], "nvme")) {
    if (!sl_bench_offload_main) {
      fprintf(stderr, "shardlm bench %s: not built\n", argv[1]);
      return 2;
    }
    return sl_bench_offload_main(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "tokenizer")) return sl_tool_tokenize_bench(argc - 1, argv + 1);
  if (!strcmp(argv[1], "gemm")) return bench_gemm(argc - 1, argv + 1);
  if (!strcmp(argv[1], "comm")) return bench_comm(argc - 1, argv + 1);
  if (!strcmp(argv[1], "pipeline")) return sl_bench_pipeline_main(argc - 1, argv + 1); /* tools/bench_pipeline.c */
  if (!strcmp(argv[1], "moe")) return sl_tool_bench_moe(argc - 1, argv + 1);
  if (!strcmp(argv[1], "gpu")) return sl_bench_gpu_main(argc - 1, argv + 1); /* tools/bench_gpu.c */
  /* the ~20M-parameter Llama of the issue: hidden 384, 6 layers, GQA 6/2, vocab 8192 */
  bench_cfg b = {384, 6, 6, 2, 1024, 8192, 8, 256, 5, 2, 1, "."};
  if (!strcmp(argv[1], "zero")) {
    b.threads = 1;
    b.steps = 8;
  }
  if (parse(&b, argc - 1, argv + 1)) return 2;
  if (!strcmp(argv[1], "train")) return bench_train(&b);
  if (!strcmp(argv[1], "zero")) return bench_zero(&b);
  if (!strcmp(argv[1], "mamba")) return bench_mamba(&b);
  fprintf(stderr, "shardlm bench: unknown benchmark '%s'\n", argv[1]);
  return 2;
}
