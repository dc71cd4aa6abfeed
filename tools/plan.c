/* tools/plan.c — shardlm plan: predicts memory, communication and speed of
 * training configurations and recommends one (model: plan/planner.h,
 * docs/planner.md). --engine-check prints the engine-exact prediction of
 * one CPU run (arena peaks, comm bytes per step) for tests. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/dryrun.h"
#include "formats/hfconfig.h"
#include "formats/safetensors.h"
#include "formats/traincfg.h"
#include "plan/planner.h"
#include "tools/plan_pp.h"
#include "tools/tools.h"

static void plan_usage(FILE *f) {
  fprintf(f, "usage: shardlm plan --model DIR|config.json --gpus N --gpus-per-node G --gpu-mem BYTES\n"
             "                    --seq-len T --global-batch TOKENS [--host-mem BYTES] [--nvme]\n"
             "                    [--intra-bw GB/s] [--inter-bw GB/s] [--tflops X] [--efficiency E]\n"
             "                    [--measured FILE.json] [--dtype bf16|fp32] [--act-model engine|gpt]\n"
             "                    [--margin F] [--no-tp-pp] [--top K] [--json]\n"
             "       shardlm plan --engine-check --model DIR --world N [--tp T [--sequence-parallel]] --zero Z\n"
             "                    --micro-batch B --seq-len T [--ep E] [--moe-capacity-factor F]\n"
             "                    [--moe-z-loss-coef C] [--moe-balance aux|bias|none [--moe-bias-rate R]]\n"
             "                    --grad-accum A [--activation-checkpoint none|selective|full] [--shard-group S]\n"
             "                    [--param-dtype fp32|bf16] [--reduce-dtype fp32|bf16] [--prefetch K]\n"
             "                    [--prefetch-mb M] [--no-sync-accum] [--no-reshard] [--json]\n"
             "                    [--compute-dtype fp32|bf16|auto] [--residual-dtype fp32|bf16|auto]\n"
             "                    [--backend cpu|cuda|auto (the run predicted: auto dtypes resolve for it)]\n"
             "                    [--pp P [--pp-schedule gpipe|1f1b|interleaved] [--pp-virtual V] [--pp-layout L]]\n"
             "                    (--pp: every stage's figures; --world = TP x DP x PP ranks)\n"
             "sizes take K/M/G/T (decimal) or KiB/MiB/GiB/TiB; --host-mem is per node.\n"
             "defaults: intra 150 GB/s, inter 20 GB/s, 989 TFLOPS peak at 55%% efficiency, 90%% memory margin.\n");
}

static int load_model(const char *path, sl_model_config *mc) {
  char p[4096];
  size_t n = strlen(path);
  if (n > 5 && !strcmp(path + n - 5, ".json")) snprintf(p, sizeof p, "%s", path);
  else snprintf(p, sizeof p, "%s/config.json", path);
  return sl_hfconfig_load(p, mc);
}

/* --model as train takes it (out): a directory (a path to DIR/config.json: DIR; another .json file: the
 * placeholder DIR, *note saying what it stands for), with --init random when the directory holds no weight
 * files (train refuses such a directory otherwise, naming that flag). */
static void train_model_arg(const char *path, char *out, size_t cap, char *note, size_t ncap) {
  size_t n = strlen(path);
  note[0] = 0;
  if (n > 5 && !strcmp(path + n - 5, ".json")) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (strcmp(base, "config.json")) {
      snprintf(out, cap, "DIR");
      snprintf(note, ncap, "DIR: a model directory holding %s as its config.json (train reads DIR/config.json)", path);
      return;
    }
    if (!slash) snprintf(out, cap, ".");
    else snprintf(out, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  } else snprintf(out, cap, "%s", path);
  if (!sl_st_dir_has_weights(out, NULL, 0)) {
    snprintf(note, ncap,
             "%s has no weight files: --init random trains from a random initialisation; put the "
             "weights there (model.safetensors) and drop the flag to train from them",
             out);
    size_t o = strlen(out);
    snprintf(out + o, cap - o, " --init random");
  }
}

static int read_measured(const char *path, sl_plan_cluster *c, int *have_tflops) {
  json_error_t err;
  json_t *j = json_load_file(path, 0, &err);
  if (!j || !json_is_object(j)) {
    if (j) json_decref(j);
    return sl_fail(
        SL_EINPUT,
        "%s: expected a JSON object {\"tflops\":..., \"intra_bw_gbs\":..., \"inter_bw_gbs\":...} (%s, line %d)", path,
        err.text, err.line);
  }
  const char *keys[] = {"tflops", "intra_bw_gbs", "inter_bw_gbs"};
  double *dst[] = {&c->tflops, &c->intra_bw, &c->inter_bw};
  for (int i = 0; i < 3; i++) {
    json_t *v = json_object_get(j, keys[i]);
    if (!v) continue;
    if (!json_is_number(v) || json_number_value(v) <= 0) {
      json_decref(j);
      return sl_fail(SL_EINPUT, "%s: \"%s\" must be a positive number", path, keys[i]);
    }
    *dst[i] = json_number_value(v);
    if (i == 0) *have_tflops = 1;
  }
  json_decref(j);
  return SL_OK;
}

static const char *ac_str(sl_actckpt a) { return a == SL_AC_FULL ? "full" : a == SL_AC_SELECTIVE ? "sel" : "none"; }
static const char *off_str(int o) { return o == 2 ? "nvme" : o == 1 ? "cpu" : "-"; }

/* The shardlm train command line of a runnable candidate (every rank of the
 * cluster under mpirun; --micro-batch and --grad-accum are per rank).
 * PP and TP x PP layouts run with 1F1B. */
static void train_command(const sl_plan_cand *x, const char *model, const sl_plan_cluster *c, char *buf, size_t cap) {
  size_t o = (size_t)snprintf(buf, cap, "mpirun -np %d shardlm train --model %s --seq-len %lld", c->gpus, model,
                              (long long)c->seq_len); /* model: train_model_arg's */
#define ADD(...)                                                                                                       \
  do {                                                                                                                 \
    if (o < cap) o += (size_t)snprintf(buf + o, cap - o, __VA_ARGS__);                                                 \
  } while (0)
  if (x->tp > 1) ADD(" --tp %d", x->tp);
  if (x->pp > 1) ADD(" --pp %d --pp-schedule 1f1b", x->pp);
  if (x->ep > 1) ADD(" --ep %d", x->ep);
  ADD(" --zero %d", x->zero);
  if (x->tp == 1 && x->pp == 1 && x->shard_group != c->gpus) ADD(" --shard-group %d", x->shard_group);
  ADD(" --micro-batch %lld --grad-accum %lld", (long long)x->micro_batch, (long long)x->grad_accum);
  if (x->ac != SL_AC_NONE) ADD(" --activation-checkpoint %s", x->ac == SL_AC_FULL ? "full" : "selective");
  if (!x->sync_accum) ADD(" --no-sync-accum true");
  if (x->offload_optim) ADD(" --offload-optimizer %s", x->offload_optim == 2 ? "nvme --nvme-path DIR" : "cpu");
  if (c->dtype_bytes == 2) ADD(" --param-dtype bf16 --reduce-dtype bf16");
#undef ADD
}

static json_t *cand_json(const sl_plan_cand *x, const char *model, const sl_plan_cluster *c) {
  char d[512];
  sl_plan_describe(x, d, sizeof d);
  json_t *o = json_object();
  json_object_set_new(o, "description", json_string(d));
  json_object_set_new(o, "zero", json_integer(x->zero));
  json_object_set_new(o, "shard_group", json_integer(x->shard_group));
  json_object_set_new(o, "tp", json_integer(x->tp));
  json_object_set_new(o, "pp", json_integer(x->pp));
  if (x->pp > 1) json_object_set_new(o, "peak_stage", json_integer(x->peak_stage)); /* the engine's highest stage */
  json_object_set_new(o, "offload_optimizer",
                      json_string(x->offload_optim == 2 ? "nvme"
                                  : x->offload_optim    ? "cpu"
                                                        : "none"));
  json_object_set_new(o, "activation_checkpoint",
                      json_string(x->ac == SL_AC_FULL        ? "full"
                                  : x->ac == SL_AC_SELECTIVE ? "selective"
                                                             : "none"));
  json_object_set_new(o, "micro_batch", json_integer(x->micro_batch));
  json_object_set_new(o, "grad_accum", json_integer(x->grad_accum));
  json_object_set_new(o, "sync_accum", json_boolean(x->sync_accum));
  json_object_set_new(o, "needs_mode", json_boolean(x->needs_mode));
  json_object_set_new(o, "runnable", json_boolean(!x->needs_mode));
  if (!x->needs_mode) {
    char cmd[1024];
    train_command(x, model, c, cmd, sizeof cmd);
    json_object_set_new(o, "command", json_string(cmd));
  }
  json_t *mem = json_object();
  for (int a = 0; a < SL_ARENA_COUNT; a++) json_object_set_new(mem, sl_arena_name((sl_arena)a), json_real(x->mem[a]));
  json_object_set_new(o, "bytes_per_gpu", mem);
  json_object_set_new(o, "gpu_total_bytes", json_real(x->gpu_total));
  json_object_set_new(o, "host_bytes_per_gpu", json_real(x->host_per_gpu));
  json_object_set_new(o, "nvme_bytes_per_gpu", json_real(x->nvme_per_gpu));
  json_object_set_new(o, "fits", json_boolean(x->fits));
  const char *kn[] = {"allgather", "reduce_scatter", "allreduce", "p2p", "alltoall"};
  json_t *cb = json_object(), *cs = json_object();
  if (x->ep > 1) json_object_set_new(o, "ep", json_integer(x->ep)); /* absent at EP 1, as before EP was searched */
  for (int k = 0; k < SL_PLAN_NCOMM - (x->ep <= 1); k++) {
    json_object_set_new(cb, kn[k], json_real(x->comm_bytes[k]));
    json_object_set_new(cs, kn[k], json_real(x->comm_s[k]));
  }
  json_object_set_new(o, "comm_bytes_per_step", cb);
  json_object_set_new(o, "comm_seconds_per_step", cs);
  json_object_set_new(o, "shard_group_inter_node", json_boolean(x->shard_inter));
  json_object_set_new(o, "compute_s", json_real(x->compute_s));
  json_object_set_new(o, "recompute_s", json_real(x->recompute_s));
  json_object_set_new(o, "bubble_s", json_real(x->bubble_s));
  json_object_set_new(o, "exposed_comm_s", json_real(x->exposed_s));
  json_object_set_new(o, "optimizer_s", json_real(x->optim_s));
  json_object_set_new(o, "offload_s", json_real(x->offload_s));
  json_object_set_new(o, "step_s", json_real(x->step_s));
  json_object_set_new(o, "tokens_per_s", json_real(x->tokens_s));
  json_object_set_new(o, "mfu", json_real(x->mfu));
  json_object_set_new(o, "comm_compute_ratio", json_real(x->comm_compute_ratio));
  return o;
}

/* The collective kinds tensor parallelism uses (engine/report.c's order). */
static const sl_coll_kind TP_KINDS[3] = {SL_COLL_ALLGATHER, SL_COLL_REDUCE_SCATTER, SL_COLL_ALLREDUCE};

/* A mixture of experts' all-to-all bytes (the expert exchange), text: on their own line (dense models print none). */
static void print_alltoall(const sl_model_config *mc, const sl_train_cfg *tc, const sl_dry_result *pm) {
  if (!mc->moe_experts) return;
  printf("  all-to-all bytes per step %llu (EP %lld: the tokens' dispatch and combine, forward and backward)\n",
         (unsigned long long)pm->comm[SL_COLL_ALLTOALL], (long long)tc->ep);
}

static int engine_check(const sl_model_config *mc, const sl_train_cfg *tc, int world, int as_json) {
  sl_dry_result pm, info; /* one result: the arena and comm figures, and the counts */
  int rc = sl_train_dry_run(tc, mc, world, 0, &pm);
  if (rc) return rc;
  info = pm;
  const char *kn[] = {"allgather", "reduce_scatter", "allreduce", "broadcast", "sendrecv", "barrier"};
  if (as_json) {
    json_t *o = json_object(), *ap = json_object(), *cm = json_object();
    for (int a = 0; a < SL_ARENA_COUNT; a++)
      json_object_set_new(ap, sl_arena_name((sl_arena)a), json_integer(pm.peak[a]));
    for (int k = 0; k < SL_COLL_NKINDS && k < 6; k++)
      json_object_set_new(cm, kn[k], json_integer((json_int_t)pm.comm[k]));
    if (mc->moe_experts) /* dense models: the keys they had */
      json_object_set_new(cm, "alltoall", json_integer((json_int_t)pm.comm[SL_COLL_ALLTOALL]));
    json_object_set_new(o, "arena_peak", ap);
    json_object_set_new(o, "peak_bytes", json_integer(pm.total_peak));
    json_object_set_new(o, "comm_bytes", json_integer((json_int_t)pm.comm_total));
    json_object_set_new(o, "comm_by_kind", cm);
    json_object_set_new(o, "shard_size", json_integer(pm.shard_size));
    json_object_set_new(o, "replica_size", json_integer(pm.replica_size));
    json_object_set_new(o, "params", json_integer(info.nparams));
    if (info.tp > 1) { /* the TP axis, as the metrics' "tp_bytes" (absent at T = 1, as there) */
      json_t *tb = json_object();
      for (int k = 0; k < 3; k++)
        json_object_set_new(tb, sl_coll_name(TP_KINDS[k]), json_integer((json_int_t)info.tp_comm[TP_KINDS[k]]));
      json_object_set_new(o, "tp", json_integer(info.tp));
      json_object_set_new(o, "dp", json_integer(info.dp));
      json_object_set_new(o, "tp_bytes", tb);
      int64_t held = 0; /* bytes held when the step starts (and again when it ends) */
      for (int a = 0; a < SL_ARENA_COUNT; a++) held += pm.start[a];
      json_object_set_new(o, "start_bytes", json_integer(held));
    }
    char *s = json_dumps(o, JSON_SORT_KEYS);
    printf("%s\n", s);
    free(s);
    json_decref(o);
  } else {
    printf("engine prediction (per rank): %lld parameters, shard group %d, replicas %d\n", (long long)info.nparams,
           pm.shard_size, pm.replica_size);
    if (info.tp > 1) printf("  mesh: TP %d x DP %d (this rank: TP rank 0, DP rank 0)\n", info.tp, info.dp);
    for (int a = 0; a < SL_ARENA_COUNT; a++)
      printf("  %-10s peak %14lld bytes\n", sl_arena_name((sl_arena)a), (long long)pm.peak[a]);
    printf("  total      peak %14lld bytes\n", (long long)pm.total_peak);
    printf("  comm bytes per step %llu (all-gather %llu, reduce-scatter %llu, all-reduce %llu)\n",
           (unsigned long long)pm.comm_total, (unsigned long long)pm.comm[SL_COLL_ALLGATHER],
           (unsigned long long)pm.comm[SL_COLL_REDUCE_SCATTER], (unsigned long long)pm.comm[SL_COLL_ALLREDUCE]);
    print_alltoall(mc, tc, &pm);
    if (info.tp > 1)
      printf("  TP axis bytes per step: all-gather %llu, reduce-scatter %llu, all-reduce %llu\n",
             (unsigned long long)info.tp_comm[SL_COLL_ALLGATHER],
             (unsigned long long)info.tp_comm[SL_COLL_REDUCE_SCATTER],
             (unsigned long long)info.tp_comm[SL_COLL_ALLREDUCE]);
    printf("  FLOPs per step (the op table's count: forward, backward with recomputation, AdamW) %.4g, of which "
           "matmul / attention / LM head %.4g\n",
           info.step.flops, info.step.matmul_flops);
    printf("  model FLOPs per token (the model's flops_per_token) %.4g; x %lld tokens = %.4g per step\n",
           info.model_flops_token, (long long)info.tokens, info.model_flops_token * (double)info.tokens);
  }
  return SL_OK;
}

static int need(int i, int argc, const char *flag) {
  if (i + 1 >= argc) return sl_fail(SL_EINPUT, "plan: %s needs a value", flag);
  return SL_OK;
}

/* The flags of shardlm plan. */
typedef struct {
  const char *model, *measured;
  sl_plan_cluster c; /* the search's cluster */
  int as_json, check, top, have_tflops, have_eff;
  sl_plan_run r; /* --engine-check's run */
  const char *pd, *rd;
  int pd_given;                             /* --param-dtype given (else bf16 under --compute-dtype bf16, as train) */
  sl_train_cfg tc;                          /* the flags that are train's, parsed by its table (formats/traincfg.c) */
  char train_model[4200], model_note[4400]; /* --model as the printed train command takes it (train_model_arg) */
} plan_args;

#define VAL() (rc = need(*i, argc, a)) ? NULL : argv[++*i]
#define NUMR(dst, lo, hi)                                                                                              \
  do {                                                                                                                 \
    const char *s_ = VAL();                                                                                            \
    if (s_) {                                                                                                          \
      char *e_;                                                                                                        \
      double x_ = strtod(s_, &e_);                                                                                     \
      if (*e_ || e_ == s_) rc = sl_fail(SL_EINPUT, "plan: %s expects a number, found '%s'", a, s_);                    \
      else if (!(x_ >= (lo) && x_ <= (hi)))                                                                            \
        rc = sl_fail(SL_EINPUT, "plan: %s must be in [%g, %g], found '%s'", a, (double)(lo), (double)(hi), s_);        \
      else dst = x_;                                                                                                   \
    }                                                                                                                  \
  } while (0)
#define NUM(dst) NUMR(dst, 0, 1e6)     /* counts and sizes: integers below a million */
#define POS(dst) NUMR(dst, 1e-9, 1e12) /* rates: positive and finite */
#define SIZE(dst)                                                                                                      \
  do {                                                                                                                 \
    double v_ = 0;                                                                                                     \
    const char *s_ = VAL();                                                                                            \
    if (s_ && !(rc = sl_plan_parse_size(s_, &v_))) dst = v_;                                                           \
  } while (0)
/* a flag of shardlm train: train's range, spelling and message (sl_train_cfg_set) */
#define TRAIN(field, dst)                                                                                              \
  do {                                                                                                                 \
    const char *s_ = VAL();                                                                                            \
    if (s_ && !(rc = sl_train_cfg_set(&p->tc, a + 2, s_))) dst = p->tc.field;                                          \
  } while (0)

/* The search's flags: argv[*i] into p; *mine 0 when it is not one of them. */
static int search_flag(plan_args *p, int argc, char **argv, int *i, int *mine) {
  const char *a = argv[*i];
  sl_plan_cluster *c = &p->c;
  int rc = SL_OK;
  *mine = 1;
  if (!strcmp(a, "--model")) p->model = VAL();
  else if (!strcmp(a, "--json")) p->as_json = 1;
  else if (!strcmp(a, "--engine-check")) p->check = 1;
  else if (!strcmp(a, "--gpus")) NUMR(c->gpus, 1, 1e6);
  else if (!strcmp(a, "--gpus-per-node")) NUM(c->gpus_per_node);
  else if (!strcmp(a, "--gpu-mem")) SIZE(c->gpu_mem);
  else if (!strcmp(a, "--host-mem")) SIZE(c->host_mem);
  else if (!strcmp(a, "--nvme")) c->nvme = 1;
  else if (!strcmp(a, "--global-batch")) {
    double gb = 0;
    SIZE(gb);
    if (!rc && (gb != (double)(int64_t)gb || gb > 9e18))
      rc =
          sl_fail(SL_EINPUT, "plan: --global-batch must be a whole number of tokens, found '%s' (%.17g)", argv[*i], gb);
    else if (!rc) c->global_batch = (int64_t)gb;
  } else if (!strcmp(a, "--intra-bw")) POS(c->intra_bw);
  else if (!strcmp(a, "--inter-bw")) POS(c->inter_bw);
  else if (!strcmp(a, "--tflops")) {
    POS(c->tflops);
    p->have_tflops = 1;
  } else if (!strcmp(a, "--efficiency")) {
    NUMR(c->efficiency, 1e-9, 1);
    p->have_eff = 1;
  } else if (!strcmp(a, "--margin")) NUMR(c->margin, 1e-9, 1);
  else if (!strcmp(a, "--pcie-bw")) POS(c->pcie_bw);
  else if (!strcmp(a, "--nvme-bw")) POS(c->nvme_bw);
  else if (!strcmp(a, "--top")) NUM(p->top);
  else if (!strcmp(a, "--no-tp-pp")) c->allow_tp_pp = 0;
  else if (!strcmp(a, "--measured")) p->measured = VAL();
  else if (!strcmp(a, "--dtype")) {
    const char *s = VAL();
    if (s && !strcmp(s, "bf16")) c->dtype_bytes = 2;
    else if (s && (!strcmp(s, "fp32") || !strcmp(s, "f32"))) c->dtype_bytes = 4;
    else if (s) rc = sl_fail(SL_EINPUT, "plan: --dtype must be bf16 or fp32, found '%s'", s);
  } else if (!strcmp(a, "--act-model")) {
    const char *s = VAL();
    if (s && !strcmp(s, "gpt")) c->gpt_acts = p->r.gpt_acts = 1;
    else if (s && !strcmp(s, "engine")) c->gpt_acts = p->r.gpt_acts = 0;
    else if (s) rc = sl_fail(SL_EINPUT, "plan: --act-model must be engine or gpt, found '%s'", s);
  } else *mine = 0;
  return rc;
}

/* The engine-check flags (the names of shardlm train; --world is plan's): argv[*i] into p; *mine 0
 * when it is not one of them. */
static int check_flag(plan_args *p, int argc, char **argv, int *i, int *mine) {
  const char *a = argv[*i];
  sl_plan_run *r = &p->r;
  int rc = SL_OK;
  *mine = 1;
  if (!strcmp(a, "--seq-len")) {
    TRAIN(seq_len, p->c.seq_len);
    r->seq_len = p->c.seq_len;
  } else if (!strcmp(a, "--world")) NUMR(r->world, 1, 1e6);
  else if (!strcmp(a, "--tp")) TRAIN(tp, r->tp);
  else if (!strcmp(a, "--sequence-parallel")) r->sequence_parallel = 1;
  else if (!strcmp(a, "--pp") || !strcmp(a, "--ep") || !strcmp(a, "--pp-virtual") || !strcmp(a, "--pp-schedule") ||
           !strcmp(a, "--pp-layout") || !strcmp(a, "--compute-dtype") || !strcmp(a, "--residual-dtype") ||
           !strcmp(a, "--backend") || !strcmp(a, "--moe-capacity-factor") || !strcmp(a, "--moe-z-loss-coef") ||
           !strcmp(a, "--moe-balance") || !strcmp(a, "--moe-bias-rate")) {
    const char *s_ = VAL();
    if (s_) rc = sl_train_cfg_set(&p->tc, a + 2, s_); /* train's names and ranges, read from p->tc */
  } else if (!strcmp(a, "--zero")) TRAIN(zero, r->zero);
  else if (!strcmp(a, "--micro-batch")) TRAIN(micro_batch, r->micro_batch);
  else if (!strcmp(a, "--grad-accum")) TRAIN(grad_accum, r->grad_accum);
  else if (!strcmp(a, "--shard-group")) TRAIN(shard_group, r->shard_group);
  else if (!strcmp(a, "--prefetch")) TRAIN(prefetch, r->prefetch);
  else if (!strcmp(a, "--prefetch-mb")) TRAIN(prefetch_mb << 20, r->prefetch_bytes);
  else if (!strcmp(a, "--no-sync-accum")) r->sync_accum = 0;
  else if (!strcmp(a, "--no-reshard")) r->reshard_after_forward = 0;
  else if (!strcmp(a, "--param-dtype")) {
    TRAIN(param_dtype, p->pd);
    p->pd_given = 1;
  } else if (!strcmp(a, "--reduce-dtype")) TRAIN(reduce_dtype, p->rd);
  else if (!strcmp(a, "--activation-checkpoint")) {
    const char *s = NULL;
    TRAIN(activation_checkpoint, s);
    if (s && !strcmp(s, "none")) r->ac = SL_AC_NONE;
    else if (s && !strcmp(s, "selective")) r->ac = SL_AC_SELECTIVE;
    else if (s && !strcmp(s, "full")) r->ac = SL_AC_FULL;
    else if (s) rc = sl_fail(SL_EINPUT, "plan: --activation-checkpoint must be none, selective or full, found '%s'", s);
  } else *mine = 0;
  return rc;
}
#undef VAL
#undef NUM
#undef NUMR
#undef POS
#undef SIZE
#undef TRAIN

/* argv into p; -1: --help (printed). */
static int parse_plan(int argc, char **argv, plan_args *p) {
  memset(p, 0, sizeof *p);
  sl_plan_cluster_defaults(&p->c);
  p->top = 15;
  sl_plan_run_engine(&p->r, NULL, NULL);
  p->pd = p->rd = "fp32";
  p->c.gpus_per_node = 0;
  sl_train_cfg_defaults(&p->tc);
  int rc = SL_OK;
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i];
    int mine = 0;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      plan_usage(stdout);
      return -1;
    }
    rc = search_flag(p, argc, argv, &i, &mine);
    if (!rc && !mine) rc = check_flag(p, argc, argv, &i, &mine);
    if (!rc && !mine) rc = sl_fail(SL_EINPUT, "plan: unknown flag '%s' (see shardlm plan --help)", a);
  }
  return rc;
}

/* --engine-check: the engine-exact prediction of one run (the engine's dry run). */
static int run_check(plan_args *p, const sl_model_config *mc) {
  sl_plan_run r = p->r, base = p->r;
  int bf16 = sl_train_cfg_compute_bf16(&p->tc, !strcmp(p->tc.backend, "cuda")); /* auto: bf16 on a device */
  const char *pd = !p->pd_given && bf16 ? "bf16" : p->pd, *rd = p->rd;
  int rc = SL_OK;
  sl_plan_run_engine(&r, pd, rd);
  r.world = base.world;
  r.zero = base.zero;
  r.micro_batch = base.micro_batch;
  r.seq_len = base.seq_len;
  r.grad_accum = base.grad_accum;
  r.shard_group = base.shard_group;
  r.prefetch = base.prefetch;
  r.prefetch_bytes = base.prefetch_bytes;
  r.sync_accum = base.sync_accum;
  r.reshard_after_forward = base.reshard_after_forward;
  r.ac = base.ac;
  r.gpt_acts = base.gpt_acts;
  r.tp = base.tp;
  r.sequence_parallel = base.sequence_parallel;
  r.ep = (int)p->tc.ep; /* as train parsed it */
  if ((pd && strcmp(pd, "fp32") && strcmp(pd, "bf16")) || (rd && strcmp(rd, "fp32") && strcmp(rd, "bf16")))
    rc = sl_fail(SL_EINPUT, "plan: --param-dtype / --reduce-dtype must be fp32 or bf16");
  if (!rc && r.gpt_acts)
    rc = sl_fail(SL_EINPUT, "plan: --engine-check runs the engine's own activations; "
                            "--act-model gpt applies to the search only");
  sl_train_cfg tc = p->tc; /* the pipeline flags as train parsed them, r's sizes (plan's defaults) */
  sl_plan_run_train_cfg(&r, &tc);
  if (!rc && tc.pp > 1) rc = sl_plan_pp_check(mc, &tc, r.world, p->as_json);
  else if (!rc && (tc.pp_virtual > 1 || tc.pp_layout[0]))
    rc = sl_fail(SL_EINPUT, "plan: --pp-virtual and --pp-layout need --pp P >= 2");
  else if (!rc) rc = engine_check(mc, &tc, r.world, p->as_json);
  return rc;
}

/* The search's answer as one JSON object. */
static void print_search_json(const plan_args *p, const sl_plan_model *m, const sl_plan_cand *v, int n, int pick,
                              const char *why, int shown) {
  const sl_plan_cluster *c = &p->c;
  json_t *o = json_object(), *arr = json_array();
  json_object_set_new(o, "model_params", json_integer(m->nparams));
  json_object_set_new(o, "gpus", json_integer(c->gpus));
  json_object_set_new(o, "gpus_per_node", json_integer(c->gpus_per_node));
  json_object_set_new(o, "assumptions",
                      json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:i,s:s}", "tflops_peak", c->tflops, "efficiency",
                                c->efficiency, "intra_bw_gbs", c->intra_bw, "inter_bw_gbs", c->inter_bw,
                                "memory_margin", c->margin, "reserve_bytes", 2.0e9, "dtype_bytes", c->dtype_bytes,
                                "act_model", c->gpt_acts ? "gpt" : "engine"));
  json_object_set_new(o, "recommendation", json_string(why));
  if (pick >= 0) json_object_set_new(o, "recommended", cand_json(&v[pick], p->train_model, c));
  if (p->model_note[0]) json_object_set_new(o, "command_note", json_string(p->model_note));
  json_object_set_new(o, "candidates_total", json_integer(n));
  for (int i = 0; i < shown; i++) json_array_append_new(arr, cand_json(&v[i], p->train_model, c));
  json_object_set_new(o, "candidates", arr);
  char *s = json_dumps(o, JSON_INDENT(1));
  printf("%s\n", s);
  free(s);
  json_decref(o);
}

/* One candidate's row of the table (rank i + 1). */
static void print_cand_row(const sl_plan_cand *x, int i, int pick) {
  char cfg[80];
  size_t o = x->ep > 1 ? (size_t)snprintf(cfg, sizeof cfg, "EP%d ", x->ep) : 0; /* expert parallelism first */
  if (x->pp > 1 && x->tp > 1)
    snprintf(cfg + o, sizeof cfg - o, "TP%dPP%dDP%d Z%d %s %lldx%lld", x->tp, x->pp, x->shard_group, x->zero,
             ac_str(x->ac), (long long)x->micro_batch, (long long)x->grad_accum);
  else if (x->pp > 1)
    snprintf(cfg + o, sizeof cfg - o, "PP%dDP%d Z%d %s %lldx%lld", x->pp, x->shard_group, x->zero, ac_str(x->ac),
             (long long)x->micro_batch, (long long)x->grad_accum);
  else if (x->tp > 1)
    snprintf(cfg + o, sizeof cfg - o, "TP%dDP%d Z%d %s %lldx%lld", x->tp, x->shard_group, x->zero, ac_str(x->ac),
             (long long)x->micro_batch, (long long)x->grad_accum);
  else
    snprintf(cfg + o, sizeof cfg - o, "Z%d S%d o:%s %s %lldx%lld", x->zero, x->shard_group, off_str(x->offload_optim),
             ac_str(x->ac), (long long)x->micro_batch, (long long)x->grad_accum);
  double cb = 0, cs = 0;
  for (int k = 0; k < SL_PLAN_NCOMM; k++) {
    cb += x->comm_bytes[k];
    cs += x->comm_s[k];
  }
  /* ref: the engine refuses the layout (train would): its sizes are unknown (0) */
  printf("%4d %-3s %-24s %7.1f %7.1f %8.1f %7.2f %7.2f %7.2f %7.2f %9.0f %4.1f%%%s\n", i + 1,
         x->needs_mode ? "ref"
         : x->fits     ? "yes"
                       : "no",
         cfg, x->gpu_total / 1e9, x->host_per_gpu / 1e9, cb / 1e9, cs, x->exposed_s, x->compute_s + x->recompute_s,
         x->step_s, x->tokens_s, 100 * x->mfu, i == pick ? "  <= recommended" : "");
}

/* The search's answer as text: the assumptions, the table, the recommendation and its command. */
static void print_search_text(const plan_args *p, const sl_plan_model *m, const sl_plan_cand *v, int n, int pick,
                              const char *why, int shown) {
  const sl_plan_cluster *c = &p->c;
  printf("model: %lld parameters, %d units | %d GPUs (%d per node), %.1f GB each | seq %lld, %lld tokens per step\n",
         (long long)m->nparams, m->nunits, c->gpus, c->gpus_per_node, c->gpu_mem / 1e9, (long long)c->seq_len,
         (long long)c->global_batch);
  if (m->nactive != m->nparams) printf("mixture of experts: %lld parameters active a token\n", (long long)m->nactive);
  printf("assumptions: %.0f TFLOPS peak x %.0f%% efficiency, %.0f GB/s intra / %.0f GB/s inter, %s, %.0f%% memory "
         "margin + 2 GB reserve, %s activations\n",
         c->tflops, 100 * c->efficiency, c->intra_bw, c->inter_bw,
         c->dtype_bytes == 2 ? "bf16 gathers/reductions (fp32 expansion), fp32 grads/acts + master/m/v"
                             : "fp32 params/grads/acts + master/m/v",
         100 * c->margin, c->gpt_acts ? "GPT-formula" : "engine op-by-op");
  printf("%4s %-3s %-24s %7s %7s %8s %7s %7s %7s %7s %9s %5s\n", "rank", "fit", "config", "GPU GB", "host GB",
         "comm GB", "comm s", "expo s", "comp s", "step s", "tokens/s", "MFU");
  for (int i = 0; i < shown; i++) print_cand_row(&v[i], i, pick);
  printf("(%d candidates; o: optimizer offload; no parameter offload: --offload-params does not move parameters yet;\n"
         " GPU GB and comm GB: the engine's dry run, of every pipeline stage under PP; ref: the engine refuses it)\n",
         n);
  if (m->E)
    printf(" EPn: expert parallelism --ep n (a mixture of experts); comm GB and expo s include its all-to-alls\n");
  if (pick >= shown) {
    char d[512];
    sl_plan_describe(&v[pick], d, sizeof d);
    printf("recommended (rank %d): %s\n", pick + 1, d);
  }
  printf("%s\n", why);
  if (pick >= 0 && !v[pick].needs_mode) {
    char cmd[1024];
    train_command(&v[pick], p->train_model, c, cmd, sizeof cmd);
    printf("run it:\n  %s\n", cmd);
    if (p->model_note[0]) printf("  (%s)\n", p->model_note);
    if (v[pick].pp > 1) printf("  (train --pp-dry-run prints the schedule and its bubble first)\n");
    if (v[pick].ep > 1 && !sl_plan_ep_allowed(m, v[pick].tp, v[pick].shard_group, v[pick].ep, 1))
      printf("  (on a GPU today: %s)\n", sl_errmsg()); /* the engine's device rule (engine/expert_par.c) */
  }
}

/* The data-parallel degrees (divisors of --gpus) that do not divide the sequences per step, " 8, 16" in buf
 * ("" when none): the search leaves their layouts out (sl_plan_search). */
static void left_out_dp(const sl_plan_cluster *c, char *buf, size_t cap) {
  int64_t samples = c->global_batch / c->seq_len;
  size_t o = 0;
  buf[0] = 0;
  for (int d = 1; d <= c->gpus && o < cap; d++)
    if (c->gpus % d == 0 && samples % d) o += (size_t)snprintf(buf + o, cap - o, "%s %d", o ? "," : "", d);
}

/* Nothing fits and --host-mem is 0 (the default), so optimizer offload was not searched: the search again
 * with unbounded host memory says whether offloading would fit, and the least host memory per node it needs. */
static void offload_hint(const sl_plan_model *m, const sl_plan_cluster *c, char *why, size_t cap) {
  sl_plan_cluster u = *c;
  u.host_mem = 1e30;
  sl_plan_cand *v = NULL;
  int n = 0, best = -1, per_node = c->gpus < c->gpus_per_node ? c->gpus : c->gpus_per_node;
  size_t o = strlen(why);
  if (sl_plan_search(m, &u, &v, &n)) {
    free(v);
    sl_clear_error();
    return;
  }
  for (int i = 0; i < n; i++)
    if (v[i].fits && !v[i].needs_mode && v[i].offload_optim && (best < 0 || v[i].host_per_gpu < v[best].host_per_gpu))
      best = i;
  if (best < 0)
    snprintf(why + o, cap - o,
             " Optimizer offload was not searched (--host-mem is 0, the default); with it no configuration fits "
             "either%s.",
             c->nvme ? "" : " (NVMe offload needs --nvme)");
  else {
    char d[512];
    sl_plan_describe(&v[best], d, sizeof d);
    double need = v[best].host_per_gpu * per_node / c->margin;
    snprintf(why + o, cap - o,
             " Optimizer offload was not searched: --host-mem is 0 (the default). With the optimizer state in host "
             "memory it fits: %s needs %.1f GB per GPU and %.1f GB of host memory per node; pass --host-mem with the "
             "nodes' memory (at least %.0fG) to search it.",
             d, v[best].gpu_total / 1e9, need / 1e9, ceil(need / 1e9));
  }
  free(v);
}

/* The search over the cluster's configurations and its report. */
static int run_search(plan_args *p, const sl_plan_model *m) {
  sl_plan_cluster *c = &p->c;
  int rc = SL_OK;
  if (p->r.tp != 1 || p->tc.pp != 1)
    return sl_fail(SL_EINPUT, "plan: --tp and --pp apply to --engine-check; the search tries TP and PP degrees itself");
  if (p->tc.moe_capacity_factor > 0 || p->tc.moe_z_loss_coef > 0 || strcmp(p->tc.moe_balance, "aux") ||
      p->tc.moe_bias_rate_given)
    return sl_fail(SL_EINPUT, "plan: the --moe-* routing options apply to --engine-check; the search assumes "
                              "dropless routing");
  if (c->gpus_per_node <= 0) c->gpus_per_node = c->gpus < 8 ? c->gpus : 8;
  if (c->efficiency <= 0 || c->efficiency > 1) rc = sl_fail(SL_EINPUT, "plan: --efficiency must be in (0, 1]");
  if (!rc && (c->margin <= 0 || c->margin > 1)) rc = sl_fail(SL_EINPUT, "plan: --margin must be in (0, 1]");
  if (!rc && c->gpus_per_node > c->gpus) c->gpus_per_node = c->gpus;
  if (!rc && c->gpus % c->gpus_per_node)
    rc = sl_fail(SL_EINPUT, "plan: --gpus %d is not a multiple of --gpus-per-node %d", c->gpus, c->gpus_per_node);
  sl_plan_cand *v = NULL;
  int n = 0;
  if (!rc) rc = sl_plan_search(m, c, &v, &n);
  if (rc) return rc;
  char dps[512];
  left_out_dp(c, dps, sizeof dps);
  int64_t step = (int64_t)c->gpus * c->seq_len, lo = c->global_batch / step * step;
  if (n == 0) {
    free(v);
    return sl_fail(SL_EINPUT,
                   "plan: --global-batch %lld is %lld sequences of %lld, which no data-parallel degree of %d GPUs "
                   "the search forms divides (left out: DP%s); a multiple of %lld tokens (--gpus x --seq-len), "
                   "e.g. %lld or %lld, divides over every layout",
                   (long long)c->global_batch, (long long)(c->global_batch / c->seq_len), (long long)c->seq_len,
                   c->gpus, dps, (long long)step, (long long)(lo > 0 ? lo : step), (long long)(lo + step));
  }
  char why[4096];
  int pick = sl_plan_recommend(v, n, c, why, sizeof why);
  if (pick < 0 && c->host_mem <= 0) offload_hint(m, c, why, sizeof why);
  if (dps[0] && strlen(why) + 400 < sizeof why)
    snprintf(why + strlen(why), sizeof why - strlen(why),
             " The global batch is met exactly: %lld sequences of %lld per step, which data-parallel degree%s%s "
             "cannot divide, so those layouts are left out (a multiple of %lld tokens takes every layout).",
             (long long)(c->global_batch / c->seq_len), (long long)c->seq_len, strchr(dps, ',') ? "s" : "", dps,
             (long long)step);
  int shown = p->top > 0 && p->top < n ? p->top : n;
  if (p->as_json) print_search_json(p, m, v, n, pick, why, shown);
  else print_search_text(p, m, v, n, pick, why, shown);
  free(v);
  return SL_OK;
}

static int run_plan(int argc, char **argv) {
  plan_args p;
  int rc = parse_plan(argc, argv, &p);
  if (rc) return rc;
  if (!p.model) return sl_fail(SL_EINPUT, "plan: --model DIR|config.json is required (see shardlm plan --help)");
  if (p.measured && (rc = read_measured(p.measured, &p.c, &p.have_tflops))) return rc;
  /* a measured GEMM rate is an achieved figure: only non-GEMM overhead remains */
  if (p.measured && !p.have_eff) p.c.efficiency = 0.8;
  sl_model_config mc;
  if ((rc = load_model(p.model, &mc))) return rc;
  train_model_arg(p.model, p.train_model, sizeof p.train_model, p.model_note, sizeof p.model_note);
  sl_plan_model m;
  if ((rc = sl_plan_model_init(&mc, &m))) return rc;
  rc = p.check ? run_check(&p, &mc) : run_search(&p, &m);
  sl_plan_model_free(&m);
  return rc;
}

int sl_tool_plan(int argc, char **argv) {
  int rc = run_plan(argc, argv);
  if (rc < 0) return 0; /* --help */
  if (rc) {
    const char *msg = sl_errmsg();
    if (!strncmp(msg, "plan: ", 6)) msg += 6;
    fprintf(stderr, "shardlm plan: %s\n", msg);
    return rc == SL_EINPUT ? 2 : 1;
  }
  return 0;
}
