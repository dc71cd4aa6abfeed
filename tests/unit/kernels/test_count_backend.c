/* tests/unit/kernels/test_count_backend.c — what the planner's engine check stands on:
 * the kernel backend registry (names, "auto", refusals), the counting op
 * table (FLOPs of a GEMM by its closed form 2 N IC OC; 64 GiB of "memory"
 * without RSS growth), the counting communicator (fsdp's split into shard
 * and replica groups; bytes per kind by the ring closed forms; children
 * with rules of their own), and one engine-check step (the engine's dry
 * run) against the FSDP closed forms (ZeRO-3 moves 3 (d-1)/d of the padded parameters per micro-batch, ZeRO-1/2 reduce per
 * micro-batch and gather once, ZeRO-0 = the all-reduce volume; the
 * optimizer holds 12 bytes per element of its view); and the search's
 * engine figures (3 and 4 layers, scaled) against the whole model's dry
 * run on every arena and collective kind (tied and untied models, TP 2,
 * hybrid groups, bf16, no-sync, checkpointing). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/dryrun.h"
#include "formats/hfconfig.h"
#include "kernels/count/ops_count.h"
#include "kernels/registry.h"
#include "plan/planner.h"
#include "shard/comm.h"
#include "shard/mesh.h"

#include "tests/lib/check.h"

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = -1;
  fclose(f);
  return res * 4; /* 4 KiB pages */
}

static void test_registry(void) {
  CHECK(sl_backend_get("cpu") == sl_ops_cpu(), "cpu by name");
  CHECK(sl_backend_get("count") == sl_ops_count(), "count by name");
  CHECK(sl_backend_get("nope") == NULL && strstr(sl_errmsg(), "cuda, cpu, count"), "unknown name: %s", sl_errmsg());
  const sl_ops *a = sl_backend_pick("auto", 1, "--backend");
  CHECK(a && strcmp(a->name, "count"), "auto picks a computing backend");
  CHECK(!sl_backend_pick("count", 1, "--backend") &&
            !strcmp(sl_errmsg(), "--backend must be cpu, cuda or auto, found 'count'"),
        "count refused for training: %s", sl_errmsg());
  CHECK(sl_backend_pick("count", 0, "--x") == sl_ops_count(), "count allowed when asked");
  CHECK(sl_ops_check(sl_ops_count()) == SL_OK, "count table complete: %s", sl_errmsg());
}

static void test_ops(void) {
  const sl_ops *o = sl_ops_count();
  sl_kctx *k = o->ctx_create(1);
  float *x = o->alloc(k, 1000), *y = o->alloc(k, 1000);
  CHECK(x && y && x != y, "distinct blocks");
  o->linear_fwd(k, y, x, x, NULL, 7, 11, 13);
  o->linear_bwd(k, x, y, NULL, y, x, x, 7, 11, 13);
  sl_count_stats st;
  sl_count_get(k, &st);
  CHECK(st.matmul_flops == 2.0 * 7 * 11 * 13 * 3, "GEMM FLOPs %g want %g", st.matmul_flops, 6.0 * 7 * 11 * 13);
  /* Mamba-2's SSD scan (B 2, T 5, H 4, P 3, G 2, S 7): docs/mamba.md's count, no matmul FLOPs */
  double f0 = st.flops;
  o->ssd_fwd(k, y, y, x, 12, x, 4, x, x, x, x, 28, x, NULL, 0.0f, INFINITY, 2, 5, 4, 3, 2, 7, 2);
  o->ssd_bwd(k, x, x, x, x, x, x, x, y, x, 12, x, 4, x, x, x, x, 28, x, NULL, y, 0.0f, INFINITY, 2, 5, 4, 3, 2, 7, 2);
  sl_count_get(k, &st);
  const double want = 2.0 * 5 * 4 * 3 * (5 * 7 + 3) + 2.0 * 5 * 4 * (3 * (16 * 7 + 9) + 2 * 7);
  CHECK(st.flops - f0 == want && st.matmul_flops == 2.0 * 7 * 11 * 13 * 3, "ssd FLOPs %g want %g", st.flops - f0, want);
  long r0 = rss_kb();
  size_t big = (size_t)64 << 30;
  float *h = o->alloc(k, big);
  o->zero(k, h, big);
  long r1 = rss_kb();
  CHECK(h != NULL, "64 GiB of address space: %s", sl_errmsg());
  CHECK(r1 - r0 < 1024, "RSS grew by %ld KiB for 64 GiB", r1 - r0);
  sl_count_get(k, &st);
  CHECK(st.live_bytes == (int64_t)big + 2000, "live bytes %lld", (long long)st.live_bytes);
  o->free(k, h);
  o->free(k, x);
  o->free(k, y);
  sl_count_get(k, &st);
  CHECK(st.live_bytes == 0, "all freed (%lld live)", (long long)st.live_bytes);
  o->ctx_destroy(k);
}

/* Overflow-checked bookkeeping: a request past 2^63 bytes (alone or with
 * what is live) is refused with NULL and a message, never wrapped; the
 * virtual range is finite and reused once freed; many blocks cost no RSS
 * (no header page per block). */
static void test_overflow(void) {
  const sl_ops *o = sl_ops_count();
  sl_kctx *k = o->ctx_create(1);
  sl_count_stats st;
  CHECK(o->alloc(k, SIZE_MAX) == NULL && strstr(sl_errmsg(), "overflows"), "SIZE_MAX refused: %s", sl_errmsg());
  CHECK(o->alloc(k, SIZE_MAX - 100) == NULL, "SIZE_MAX - 100 refused");
  void *a = o->alloc(k, (size_t)1 << 62), *b = o->alloc(k, (size_t)1 << 60);
  CHECK(a && b && a != b, "2^62- and 2^60-byte blocks (virtual): %s", sl_errmsg());
  CHECK(o->alloc(k, (size_t)1 << 62) == NULL && strstr(sl_errmsg(), "kernels/count"),
        "another 2^62 (past 2^63 live) refused: %s", sl_errmsg());
  sl_count_get(k, &st);
  CHECK(st.live_bytes == ((int64_t)1 << 62) + ((int64_t)1 << 60), "live %lld: no wrap", (long long)st.live_bytes);
  o->free(k, a);
  o->free(k, b);
  sl_count_get(k, &st);
  CHECK(st.live_bytes == 0, "freed: %lld live", (long long)st.live_bytes);
  /* freed virtual ranges are reused: many rounds of 2^62 never run out */
  int okr = 1;
  for (int i = 0; i < 100 && okr; i++) {
    void *x = o->alloc(k, (size_t)1 << 62);
    okr = x != NULL;
    o->free(k, x);
  }
  CHECK(okr, "virtual range reused after free: %s", sl_errmsg());
  long r0 = rss_kb();
  enum { NB = 200000 };
  void **v = malloc(sizeof(void *) * NB);
  int allok = v != NULL;
  for (int i = 0; allok && i < NB; i++) allok = (v[i] = o->alloc(k, 4096 * 3)) != NULL;
  long r1 = rss_kb();
  sl_count_get(k, &st);
  CHECK(allok && st.live_bytes == (int64_t)NB * 4096 * 3, "%d blocks live: %lld bytes", NB, (long long)st.live_bytes);
  /* the table: ~32 bytes per slot at half load, not a 4 KiB page per block (800 MB) */
  CHECK(r1 - r0 < 40 * 1024, "RSS grew by %ld KiB for %d blocks", r1 - r0, NB);
  for (int i = 0; allok && i < NB; i += 2) o->free(k, v[i]);
  for (int i = 1; allok && i < NB; i += 2) o->free(k, v[i]);
  sl_count_get(k, &st);
  CHECK(st.live_bytes == 0, "all %d freed (%lld live)", NB, (long long)st.live_bytes);
  free(v);
  o->ctx_destroy(k);
}

/* groups of *ctx consecutive ranks */
static int rule(void *ctx, int n, int rank, int *color, int *key) {
  (void)n;
  *color = rank / *(int *)ctx;
  *key = rank % *(int *)ctx;
  return SL_OK;
}

/* A world rule whose children split by rules of their own (the dry run's world): splits #0 and #1 pair
 * ranks 2r, 2r+1; the pair of #0 splits by a rule of its own (groups of 1), the pair of #1 refuses. */
static int pairs(void *ctx, int n, int rank, int *color, int *key) {
  (void)ctx;
  (void)n;
  *color = rank / 2;
  *key = rank % 2;
  return SL_OK;
}
static int g_one = 1;
static sl_comm_count_rule pair_child(void *ctx, int n, int color) {
  (void)ctx;
  (void)color;
  return (sl_comm_count_rule){n == 0 ? rule : NULL, NULL, &g_one};
}

static void test_comm_rule(void) {
  sl_comm_count_rule wr = {pairs, pair_child, NULL};
  sl_comm *w = NULL, *a = NULL, *b = NULL, *a1 = NULL, *b1 = NULL;
  CHECK(sl_comm_count_create_rule(6, 4, &wr, &w) == SL_COMM_OK, "create: %s", sl_comm_last_error());
  if (!w) return;
  CHECK(sl_comm_split(w, 2, 0, &a) == SL_COMM_OK && sl_comm_split(w, 2, 0, &b) == SL_COMM_OK, "world splits");
  CHECK(a && b && sl_comm_size(a) == 2 && sl_comm_rank(a) == 0 && sl_comm_world_rank(a, 1) == 5, "the pair 4 5");
  CHECK(a && sl_comm_split(a, 0, 0, &a1) == SL_COMM_OK && sl_comm_size(a1) == 1, "the child's own rule: %s",
        sl_comm_last_error());
  CHECK(b && sl_comm_split(b, 0, 0, &b1) != SL_COMM_OK && strstr(sl_comm_last_error(), "no split rule"),
        "a child without a rule refuses: %s", sl_comm_last_error());
  sl_comm_destroy(a1);
  sl_comm_destroy(a);
  sl_comm_destroy(b);
  sl_comm_destroy(w);
}

/* A counting world of 6 ranks (this one plays rank 4) split by the mesh's
 * own code (shard/mesh.h) into shard groups of 3 and replica groups of 2. */
static void test_comm(void) {
  sl_mesh_dims dims = {.world = 6, .tp = 1, .pp = 1, .dp_shard = 3};
  sl_comm *w = NULL, *sh = NULL, *rp = NULL;
  sl_par_mesh *mesh = NULL;
  CHECK(sl_comm_count_create(6, 4, sl_par_mesh_split_rule, &dims, &w) == SL_COMM_OK, "create: %s",
        sl_comm_last_error());
  if (!w) return;
  CHECK(sl_par_mesh_create(w, &dims, &mesh) == SL_OK, "mesh: %s", sl_errmsg());
  if (!mesh) {
    sl_comm_destroy(w);
    return;
  }
  sh = mesh->axis[SL_AXIS_DP_SHARD].comm;
  rp = mesh->axis[SL_AXIS_DP_REPLICATE].comm;
  /* world rank 4 = position 1 of shard group 1 (ranks 3 4 5), replica group 1 (ranks 1 4) */
  CHECK(sl_comm_size(sh) == 3 && sl_comm_rank(sh) == 1 && sl_comm_world_rank(sh, 0) == 3, "shard group");
  CHECK(sl_comm_size(rp) == 2 && sl_comm_rank(rp) == 1 && sl_comm_world_rank(rp, 0) == 1, "replica group");
  float buf[30] = {0};
  sl_comm_req *q;
  CHECK(sl_comm_allgather(sh, buf, buf, 10, SL_F32, &q) == SL_COMM_OK && sl_comm_wait(q) == SL_COMM_OK, "ag");
  CHECK(sl_comm_allreduce_sync(rp, buf, 7, SL_F32) == SL_COMM_OK, "ar");
  CHECK(sl_comm_reduce_scatter(sh, buf, buf, 5, SL_BF16, &q) == SL_COMM_OK && sl_comm_wait(q) == SL_COMM_OK, "rs");
  sl_comm_stats a, b;
  sl_comm_get_stats(sh, &a);
  sl_comm_get_stats(rp, &b);
  CHECK(a.bytes[SL_COLL_ALLGATHER] == 2 * 10 * 4, "all-gather bytes %llu", (unsigned long long)a.bytes[0]);
  CHECK(a.bytes[SL_COLL_REDUCE_SCATTER] == 2 * 5 * 2, "reduce-scatter bytes %llu", (unsigned long long)a.bytes[1]);
  CHECK(b.bytes[SL_COLL_ALLREDUCE] == 2 * 1 * 4 * 4, "all-reduce bytes %llu", (unsigned long long)b.bytes[2]);
  const sl_mesh_axis *dp = sl_par_mesh_find(mesh, "dp");
  CHECK(dp && dp->size == 6 && dp->coord == 4 && sl_comm_size(dp->comm) == 6, "the dp group");
  sl_comm *bad = NULL; /* the mesh's splits are done: any further one is past the rule */
  CHECK(sl_comm_split(w, 0, 0, &bad) != SL_COMM_OK && strstr(sl_comm_last_error(), "not one of the mesh's"),
        "a split past the rule is refused: %s", sl_comm_last_error());
  sl_comm *wrong = NULL;
  sl_comm *w2 = NULL;
  CHECK(sl_comm_count_create(6, 4, sl_par_mesh_split_rule, &dims, &w2) == SL_COMM_OK, "create: %s",
        sl_comm_last_error());
  CHECK(w2 && sl_comm_split(w2, 5, 0, &wrong) != SL_COMM_OK && strstr(sl_comm_last_error(), "split rule"),
        "a split against the rule is refused: %s", sl_comm_last_error());
  sl_comm_destroy(w2);
  sl_par_mesh_destroy(mesh);
  sl_comm_destroy(w);
}

/* The engine's dry run of the planner's run r as rank `rank` (train's settings for the rest). */
static int dry_run(const sl_model_config *mc, const sl_plan_run *r, int rank, sl_dry_result *out) {
  sl_train_cfg c;
  sl_train_cfg_defaults(&c);
  sl_plan_run_train_cfg(r, &c);
  return sl_train_dry_run(&c, mc, r->world, rank, out);
}

static void test_engine_step(void) {
  const char *tiny = "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 176,"
                     " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 3,"
                     " \"vocab_size\": 300, \"tie_word_embeddings\": false}";
  sl_model_config mc;
  if (sl_hfconfig_parse("tiny", tiny, strlen(tiny), &mc)) {
    CHECK(0, "config: %s", sl_errmsg());
    return;
  }
  int64_t C = 64, I = 176, V = 300, L = 3, Q = (4 + 2 * 2) * 16;
  int64_t numel[5] = {V * C, 0, 0, 0, C + V * C};
  for (int l = 1; l <= L; l++) numel[l] = C + Q * C + C * 64 + C + 3 * I * C;
  sl_mem_stats before, after;
  sl_mem_get(&before);
  for (int d = 1; d <= 4; d++)
    for (int zero = 0; zero <= 3; zero++)
      for (int A = 1; A <= 5; A += 4) {
        sl_plan_run r;
        sl_plan_run_engine(&r, NULL, NULL);
        r.world = d;
        r.zero = zero;
        r.micro_batch = 2;
        r.seq_len = 16;
        r.grad_accum = A;
        sl_dry_result pm;
        int rc = dry_run(&mc, &r, d - 1, &pm);
        CHECK(rc == SL_OK, "engine run: %s", sl_errmsg());
        if (rc) continue;
        double padded = 0;
        for (int u = 0; u < 5; u++) padded += (double)((numel[u] + 16 * d - 1) / (16 * d) * (16 * d));
        double unit = (d - 1) * padded / d * 4.0, want = zero == 3 ? A * 3 * unit : A * unit + unit;
        want += 8.0 * (d - 1); /* gradient-norm all-gather */
        CHECK(fabs((double)pm.comm_total - want) < 0.5, "d=%d zero=%d A=%d comm %llu want %.0f", d, zero, A,
              (unsigned long long)pm.comm_total, want);
        double opt = 12.0 * (zero == 0 ? padded : padded / d);
        CHECK(fabs((double)pm.peak[SL_ARENA_OPTIM] - opt) < 0.5, "optim %lld want %.0f",
              (long long)pm.peak[SL_ARENA_OPTIM], opt);
        double mf = 6.0 * (double)(L * (C * Q + 64 * C + 3 * C * I) + V * C) + 12.0 * L * 64 * 16;
        CHECK(pm.model_flops_token == mf, "model FLOPs per token %g want %g", pm.model_flops_token, mf);
      }
  sl_mem_get(&after);
  CHECK(!memcmp(&before, &after, sizeof before), "the caller's arena counters are left as found");
}

/* The search's engine figures (sl_plan_engine_figures: dry runs of 3 and 4
 * decoder layers, scaled to the model's 7) against the dry run of the whole
 * model on every arena and collective kind (the TP axis's too), for a tied
 * and an untied model, the untied one also at TP 2: the scaling is exact. */
static void scaled_vs_engine(const char *name, const char *json, int tp) {
  sl_model_config mc;
  sl_plan_model pm;
  if (sl_hfconfig_parse(name, json, strlen(json), &mc) || sl_plan_model_init(&mc, &pm)) {
    CHECK(0, "%s config: %s", name, sl_errmsg());
    return;
  }
  int n = 0;
  for (int w = tp; w <= 4; w += tp)
    for (int zero = 0; zero <= 3; zero++)
      for (int v = 0; v < 4; v++) {
        sl_plan_run r;
        sl_plan_run_engine(&r, v == 3 ? "bf16" : "fp32", v == 3 ? "bf16" : "fp32");
        r.tp = tp;
        r.world = w;
        r.zero = zero;
        r.micro_batch = 2;
        r.seq_len = 8;
        r.grad_accum = 1 + v % 3;
        r.ac = (sl_actckpt)(v % 3);
        if (v == 1 && w == 4 && tp == 1) r.shard_group = 2;
        if (v == 2) r.sync_accum = 0;
        sl_plan_figures a;
        sl_dry_result b;
        int rc = sl_plan_engine_figures(&pm, &r, &a);
        if (!rc) rc = dry_run(&mc, &r, 0, &b);
        CHECK(rc == SL_OK, "%s w=%d zero=%d v=%d: %s", name, w, zero, v, sl_errmsg());
        if (rc) continue;
        int same = a.total_peak == b.total_peak && a.comm_total == b.comm_total;
        for (int k = 0; k < SL_ARENA_COUNT; k++) same &= a.peak[k] == b.peak[k] && a.start[k] == b.start[k];
        for (int k = 0; k < SL_COLL_NKINDS; k++) same &= a.comm[k] == b.comm[k] && a.tp_comm[k] == b.tp_comm[k];
        CHECK(same, "%s w=%d zero=%d v=%d: scaled peak %lld comm %llu, engine peak %lld comm %llu", name, w, zero, v,
              (long long)a.total_peak, (unsigned long long)a.comm_total, (long long)b.total_peak,
              (unsigned long long)b.comm_total);
        n++;
      }
  printf("scaled vs engine (%s, TP %d): %d configurations compared\n", name, tp, n);
  sl_plan_model_free(&pm);
}

static void test_scaled_vs_engine(void) {
  const char *untied = "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 176,"
                       " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 7,"
                       " \"vocab_size\": 300, \"sliding_window\": 4, \"tie_word_embeddings\": false}";
  scaled_vs_engine("tied",
                   "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 96, \"intermediate_size\": 200,"
                   " \"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"num_hidden_layers\": 7,"
                   " \"vocab_size\": 301, \"tie_word_embeddings\": true}",
                   1);
  for (int tp = 1; tp <= 2; tp++) scaled_vs_engine("untied", untied, tp);
}

/* Under --pp: each stage's scaled figures (sl_plan_engine_stage_figures: train's balanced layout cut to 3 and 4
 * layers per stage, scaled to the stage's own count) against the stage's dry run of the whole model (its first
 * rank), every arena, the bytes held at the start, every collective kind on the DP and TP axes and the PP bytes;
 * and the search's figures of the run (sl_plan_engine_figures: the stages it runs, merged) against every stage's
 * whole-model dry run merged by sl_plan_figures' rule (the peak stage's memory, each kind's most, the PP bytes of
 * the stage that moves most). 13 layers: 6-7 layers per stage at P 2 (scaled from 3 and 4), 4,5,4 at P 3, 3,3,4,3 at
 * P 4 and inner stages of equal counts at P 5 (the search runs only the first of those). */
static int same_stage(const sl_plan_figures *a, const sl_dry_result *b) {
  int same = a->total_peak == b->total_peak && a->comm_total == b->comm_total && a->pp_send == b->send_bytes &&
             a->pp_recv == b->recv_bytes && a->nsets == b->nsets && a->stage == b->stage;
  for (int k = 0; k < SL_ARENA_COUNT; k++) same &= a->peak[k] == b->peak[k] && a->start[k] == b->start[k];
  for (int k = 0; k < SL_COLL_NKINDS; k++) same &= a->comm[k] == b->comm[k] && a->tp_comm[k] == b->tp_comm[k];
  return same;
}

static void merge_whole(sl_plan_figures *m, const sl_dry_result *b, int first) {
  if (first || b->total_peak > m->total_peak) {
    memcpy(m->peak, b->peak, sizeof m->peak);
    memcpy(m->start, b->start, sizeof m->start);
    m->total_peak = b->total_peak;
    m->stage = b->stage;
    m->nsets = b->nsets;
  }
  for (int k = 0; k < SL_COLL_NKINDS; k++) {
    if (b->comm[k] > m->comm[k]) m->comm[k] = b->comm[k];
    if (b->tp_comm[k] > m->tp_comm[k]) m->tp_comm[k] = b->tp_comm[k];
  }
  if (b->comm_total > m->comm_total) m->comm_total = b->comm_total;
  if (b->send_bytes + b->recv_bytes > m->pp_send + m->pp_recv) {
    m->pp_send = b->send_bytes;
    m->pp_recv = b->recv_bytes;
  }
}

static void scaled_vs_engine_pp(const char *name, const char *json) {
  sl_model_config mc;
  sl_plan_model pm;
  if (sl_hfconfig_parse(name, json, strlen(json), &mc) || sl_plan_model_init(&mc, &pm)) {
    CHECK(0, "%s config: %s", name, sl_errmsg());
    return;
  }
  /* P, TP, DP, ZeRO, micro-batches, checkpointing, dtype (3: bf16), sync */
  static const int rows[][8] = {{2, 1, 1, 1, 2, 0, 0, 1}, {2, 1, 2, 1, 4, 2, 3, 0}, {3, 1, 1, 3, 3, 1, 0, 1},
                                {4, 1, 1, 1, 4, 0, 3, 1}, {2, 2, 1, 1, 2, 0, 0, 1}, {2, 2, 2, 3, 2, 2, 3, 1},
                                {5, 1, 1, 1, 5, 0, 0, 1}};
  int n = 0, level = sl_log_get_level();
  sl_log_set_level(SL_LOG_WARN);
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const int *w = rows[i];
    if (!w[7] && mc.tie_word_embeddings) continue; /* train refuses --no-sync-accum with --pp and tied embeddings */
    sl_plan_run r;
    sl_plan_run_engine(&r, w[6] == 3 ? "bf16" : "fp32", w[6] == 3 ? "bf16" : "fp32");
    r.pp = w[0];
    r.tp = w[1];
    r.world = w[0] * w[1] * w[2];
    r.zero = w[3];
    r.micro_batch = 2;
    r.seq_len = 8;
    r.grad_accum = w[4];
    r.ac = (sl_actckpt)w[5];
    r.sync_accum = w[7];
    sl_plan_figures all, want;
    memset(&want, 0, sizeof want);
    int rc = sl_plan_engine_figures(&pm, &r, &all), layers = 0;
    for (int s = 0; !rc && s < r.pp; s++) {
      sl_plan_figures a;
      sl_dry_result b;
      rc = sl_plan_engine_stage_figures(&pm, &r, s, &a);
      if (!rc) rc = dry_run(&mc, &r, s * (r.world / r.pp), &b);
      if (rc) break;
      CHECK(same_stage(&a, &b) && a.layers == b.layers[s],
            "%s row %zu stage %d: scaled peak %lld comm %llu pp %llu, engine peak %lld comm %llu pp %llu", name, i, s,
            (long long)a.total_peak, (unsigned long long)a.comm_total, (unsigned long long)a.pp_send,
            (long long)b.total_peak, (unsigned long long)b.comm_total, (unsigned long long)b.send_bytes);
      merge_whole(&want, &b, s == 0);
      layers += a.layers;
      n++;
    }
    CHECK(rc == SL_OK, "%s row %zu: %s", name, i, sl_errmsg());
    if (rc) continue;
    want.layers = all.layers; /* the peak stage's count, checked per stage above */
    int same = !memcmp(all.peak, want.peak, sizeof want.peak) && !memcmp(all.start, want.start, sizeof want.start) &&
               !memcmp(all.comm, want.comm, sizeof want.comm) &&
               !memcmp(all.tp_comm, want.tp_comm, sizeof want.tp_comm) && all.total_peak == want.total_peak &&
               all.comm_total == want.comm_total && all.stage == want.stage && all.nsets == want.nsets &&
               all.pp_send == want.pp_send && all.pp_recv == want.pp_recv;
    CHECK(same && layers == 13,
          "%s row %zu: the search's figures (peak %lld, stage %d) are not every stage's merged (peak %lld, stage %d)",
          name, i, (long long)all.total_peak, all.stage, (long long)want.total_peak, want.stage);
  }
  sl_log_set_level(level);
  printf("scaled vs engine per stage (%s): %d stages compared\n", name, n);
  sl_plan_model_free(&pm);
}

int main(void) {
  test_registry();
  test_ops();
  test_overflow();
  test_comm();
  test_comm_rule();
  test_engine_step();
  test_scaled_vs_engine();
  scaled_vs_engine_pp("pp untied",
                      "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 176,"
                      " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 13,"
                      " \"vocab_size\": 300, \"tie_word_embeddings\": false}");
  scaled_vs_engine_pp("pp tied",
                      "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 96, \"intermediate_size\": 200,"
                      " \"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"num_hidden_layers\": 13,"
                      " \"vocab_size\": 301, \"tie_word_embeddings\": true}");
  printf("count backend: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
