/* formats/traincfg.c — the key table behind flags and --config JSON. */
#include "formats/traincfg.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <yaml.h>

#include "base/base.h"

#ifndef SL_VERSION
#define SL_VERSION "shardlm (unknown build)"
#endif

typedef enum { K_INT, K_DBL, K_STR, K_BOOL } ktype;
typedef struct {
  const char *name; /* flag name without "--" */
  ktype type;
  size_t off;
  size_t cap; /* K_STR buffer size */
  const char *def;
  const char *help;
} key_t_;

#define I(n, f, d, h)                                                                                                  \
  { n, K_INT, offsetof(sl_train_cfg, f), 0, d, h }
#define D(n, f, d, h)                                                                                                  \
  { n, K_DBL, offsetof(sl_train_cfg, f), 0, d, h }
#define S(n, f, d, h)                                                                                                  \
  { n, K_STR, offsetof(sl_train_cfg, f), sizeof(((sl_train_cfg *)0)->f), d, h }
#define B(n, f, d, h)                                                                                                  \
  { n, K_BOOL, offsetof(sl_train_cfg, f), 0, d, h }
static const key_t_ KEYS[] = {
    S("model", model, "",
      "Hugging Face model directory (config.json [+ *.safetensors]); empty: configs/tiny-llama built in"),
    S("init", init, "hf",
      "hf: the weights of --model (refused when it has none, unless --resume finds a checkpoint) | random: "
      "initialise from --seed, ignoring any weights there (the built-in model: always random)"),
    S("data", data, "",
      "Megatron dataset prefix (PREFIX.bin + PREFIX.idx [+ .lmask]) or a blend \"W1 PREFIX1 W2 PREFIX2 ...\"; empty: "
      "the built-in corpus"),
    S("data-order", data_order, "shuffled", "sequential | shuffled (seeded permutation of sample windows)"),
    I("steps", steps, "200", "optimizer steps"),
    I("micro-batch", micro_batch, "8", "samples per micro-batch per rank"),
    I("seq-len", seq_len, "128", "tokens per sample (T; a sample holds T+1 tokens)"),
    I("grad-accum", grad_accum, "1", "micro-batches per optimizer step"),
    D("lr", lr, "3e-3", "peak learning rate"),
    D("min-lr", min_lr, "3e-4", "learning rate at the last step"),
    I("warmup", warmup, "10", "linear warmup steps (every schedule): step s < W gets lr x (s+1) / W"),
    S("lr-schedule", lr_schedule, "cosine",
      "after warmup: cosine | linear (down to --min-lr at the last step) | constant (--lr) | wsd (warmup-stable-decay: "
      "--lr until the last --lr-decay-steps, then down to --min-lr at the last step; docs/cli.md)"),
    I("lr-decay-steps", lr_decay_steps, "0", "wsd: steps of the decay phase (0: --lr-decay-frac of --steps)"),
    D("lr-decay-frac", lr_decay_frac, "0.2",
      "wsd: the decay phase's fraction of --steps (rounded), when --lr-decay-steps is 0"),
    S("lr-decay-shape", lr_decay_shape, "1-sqrt", "wsd: the decay's shape, linear | 1-sqrt (Hagele et al. 2024)"),
    B("lr-schedule-override", lr_schedule_override, "false",
      "--resume: use this run's --lr-schedule / --lr-decay-* instead of the checkpoint's (refused otherwise when they "
      "differ)"),
    D("weight-decay", weight_decay, "0.1", "AdamW decoupled weight decay (tensors with >= 2 dims)"),
    D("beta1", beta1, "0.9", "AdamW beta1"),
    D("beta2", beta2, "0.95", "AdamW beta2"),
    D("eps", eps, "1e-8", "AdamW epsilon"),
    D("clip", clip, "1.0", "global gradient L2 norm clip (0: off)"),
    I("seed", seed, "1234", "initialisation and data-order seed"),
    S("activation-checkpoint", activation_checkpoint, "none", "none | selective | full"),
    I("threads", threads, "0", "compute threads per rank (0: cores / ranks on the node)"),
    S("backend", backend, "auto", "cpu | cuda | auto"),
    I("zero", zero, "3", "ZeRO stage 0 | 1 | 2 | 3"),
    I("prefetch", prefetch, "1", "units gathered ahead of the computing one"),
    I("prefetch-mb", prefetch_mb, "0", "byte budget (MiB) for gathered units in flight (0: no limit)"),
    B("reshard-after-forward", reshard_after_forward, "true", "ZeRO-3: free gathered params after forward"),
    B("no-sync-accum", no_sync_accum, "false", "accumulate grads locally, reduce once per step"),
    S("param-dtype", param_dtype, "fp32", "dtype of gathered parameters: fp32 | bf16"),
    S("reduce-dtype", reduce_dtype, "fp32", "dtype of gradient reduction: fp32 | bf16"),
    I("shard-group", shard_group, "0", "shard inside groups of S ranks, replicate across (0: world)"),
    I("nproc", nproc, "0", "start N local ranks with mpirun (0: as launched)"),
    D("comm-timeout", comm_timeout, "300", "seconds before a stuck collective ends the job"),
    S("offload-optimizer", offload_optimizer, "none", "where fp32 master + Adam state live: none | cpu | nvme"),
    S("offload-params", offload_params, "none", "ZeRO-3 parameter shards: none | cpu (nvme: not yet)"),
    S("nvme-path", nvme_path, "", "directory for --offload-optimizer nvme (a fast local disk)"),
    I("offload-budget-mb", offload_budget_mb, "256", "host MiB for NVMe tile buffers (3 tiles, shared by all units)"),
    S("ckpt-dir", ckpt_dir, "", "directory of sharded training checkpoints"),
    I("ckpt-every", ckpt_every, "0", "write a checkpoint every N steps (0: only at the end when --ckpt-dir is set)"),
    I("keep-last", keep_last, "2", "keep the newest K checkpoints (0: all)"),
    B("resume", resume, "false", "continue from the newest complete checkpoint in --ckpt-dir"),
    I("max-restarts", max_restarts, "0",
      "restart the job from the latest checkpoint when a rank dies (needs --ckpt-dir)"),
    S("metrics", metrics, "", "per-step metrics JSONL (default OUT_DIR/metrics.jsonl)"),
    S("save", save, "", "write the trained model here as an HF directory"),
    S("save-dtype", save_dtype, "auto",
      "dtype of the --save weights: auto (the --model directory's: its weights', else config.json's torch_dtype, "
      "else fp32) | fp32 | bf16 | fp16"),
    S("out-dir", out_dir, "",
      "directory for the run's outputs (metrics, plot, run.json; empty: runs/RUN_NAME, runs/latest naming the newest)"),
    S("run-name", run_name, "", "the run directory's name under runs/ (empty: the start time YYYYmmdd-HHMMSS)"),
    D("peak-tflops", peak_tflops, "0", "peak for MFU (0: measured GEMM peak of the backend)"),
    I("log-every", log_every, "10", "log a line every N steps when not on a terminal"),
    B("summary", summary, "true", "print the per-rank summary at the end"),
    B("plot", plot, "true", "draw OUT_DIR/metrics.svg at the end"),
    B("tensorboard", tensorboard, "true",
      "write TensorBoard scalars (events.out.tfevents.*) in the metrics file's directory"),
    S("eval-data", eval_data, "", "held-out dataset prefix for --eval-every (instead of --split)"),
    S("split", holdout, "",
      "train,valid,test weights over --data's documents (Megatron), e.g. 98,2,0: train on the first range, evaluate on "
      "the second"),
    I("eval-every", eval_every, "0", "held-out loss every N steps and at the last step (0: off)"),
    I("eval-samples", eval_samples, "0",
      "held-out windows per evaluation, in sequential order, at most the held-out stream's whole windows (0: every "
      "whole window)"),
    S("on-nonfinite", on_nonfinite, "stop",
      "a NaN/inf loss or gradient norm: stop (exit 4) | skip (drop the step's update)"),
    I("max-skips", max_skips, "3", "--on-nonfinite skip: consecutive skipped steps that stop the run (exit 4)"),
    B("doc-attention-mask", doc_attention_mask, "false",
      "packed samples: no attention across documents (the .idx's), positions restart per document (Llama)"),
    I("eod-id", eod_id, "-1",
      "end-of-document id, checked only: --doc-attention-mask warns when it occurs inside documents (-1: 256 for "
      "vocab <= 512)"),
    B("skip-memory-check", skip_memory_check, "false",
      "start even when the predicted peak memory exceeds what is available"),
    B("allow-long-context", allow_long_context, "false", "allow --seq-len above the model's max_position_embeddings"),
    S("compute-dtype", compute_dtype, "auto",
      "fp32 | bf16 (GEMM operands, activations and their gradients rounded to bf16, fp32 accumulation; implies "
      "--param-dtype bf16 unless given) | auto (bf16 on a device backend, fp32 on the CPU; docs/bf16.md)"),
    S("tf32", tf32, "auto",
      "fp32 GEMMs on TF32 tensor cores (device backends): true | false | auto (on under bf16 compute, for the GEMMs "
      "it leaves in fp32; off under --compute-dtype fp32)"),
    S("residual-dtype", residual_dtype, "auto",
      "the residual stream (block inputs and sums) under bf16 compute: bf16 (rounded and stored in bf16, as a "
      "bf16 model in PyTorch) | fp32 (Megatron's --fp32-residual-connection) | auto (the compute dtype; Mamba: "
      "fp32, its residual_in_fp32)"),
    I("tp", tp, "1",
      "tensor-parallel degree T (Megatron; every architecture): T consecutive ranks share each layer; data parallel "
      "over "
      "world / T"),
    B("sequence-parallel", sequence_parallel, "false",
      "with --tp T > 1: norms and the residual stream on (micro-batch x seq-len) / T tokens per rank, reduce-scatter / "
      "all-gather instead of all-reduce (Megatron; docs/models.md)"),
    I("ep", ep, "1",
      "expert-parallel degree E for a mixture of experts: each layer's experts split over E data-parallel ranks, "
      "tokens exchanged by all-to-all (docs/moe.md)"),
    I("pp", pp, "1", "pipeline-parallel stages (world = DP x TP x PP; docs/pipeline.md)"),
    S("pp-schedule", pp_schedule, "1f1b", "pipeline schedule: gpipe | 1f1b | interleaved | zb1p"),
    I("pp-virtual", pp_virtual, "1", "interleaved: chunks per pipeline rank"),
    S("pp-layout", pp_layout, "", "decoder layers per (virtual) stage, e.g. 5,4,4,5 (empty: balanced)"),
    B("pp-dry-run", pp_dry_run, "false",
      "with --pp P > 1: print the run's pipeline schedule (per-rank timeline, bubble, layout), write "
      "OUT_DIR/pipeline.svg (unless --plot false) and exit without training"),
    D("moe-capacity-factor", moe_capacity_factor, "0",
      "mixture of experts: each expert takes at most ceil(tokens x k / experts x F) slots of a micro-batch, the rest "
      "dropped by routing weight (Megatron-Core's rule; 0: dropless)"),
    D("moe-z-loss-coef", moe_z_loss_coef, "0",
      "mixture of experts: the router z-loss (ST-MoE), coef x mean of logsumexp(router logits)^2, summed over the "
      "layers as Megatron-Core attaches it (0: none)"),
    S("moe-balance", moe_balance, "aux",
      "mixture of experts: aux (the load-balancing loss when config.json asks: output_router_logits) | bias "
      "(DeepSeek-V3 aux-loss-free expert bias, selection only) | none"),
    D("moe-bias-rate", moe_bias_rate, "1e-3",
      "--moe-balance bias: bias += rate x sign(mean load - load) after each step (torchtitan's load_balance_coeff)"),
};
#define NKEYS (int)(sizeof KEYS / sizeof KEYS[0])

/* Valid range of each numeric key, by name (kept apart from KEYS so rows can
 * be appended there independently). lo_open / hi_open: the bound itself is
 * excluded. A numeric key without a row only has to be finite. NaN and inf
 * are refused for every K_DBL key. */
#define INF HUGE_VAL
#define I64MAX 9.2e18
static const struct {
  const char *name;
  double lo, hi;
  int lo_open, hi_open;
} RANGES[] = {
    {"steps", 0, I64MAX, 0, 0},
    {"micro-batch", 1, 1e9, 0, 0},
    {"seq-len", 1, 1e9, 0, 0},
    {"grad-accum", 1, 1e9, 0, 0},
    {"lr", 0, INF, 1, 1},
    {"min-lr", 0, INF, 0, 1},
    {"warmup", 0, I64MAX, 0, 0},
    {"weight-decay", 0, INF, 0, 1},
    {"beta1", 0, 1, 0, 1},
    {"beta2", 0, 1, 0, 1},
    {"eps", 0, INF, 1, 1},
    {"clip", 0, INF, 0, 1},
    {"seed", 0, I64MAX, 0, 0},
    {"threads", 0, 4096, 0, 0},
    {"zero", 0, 3, 0, 0},
    {"prefetch", 0, 1e6, 0, 0},
    {"prefetch-mb", 0, 1e9, 0, 0},
    {"shard-group", 0, 1e9, 0, 0},
    {"nproc", 0, 1e6, 0, 0},
    {"comm-timeout", 0, INF, 1, 1},
    {"offload-budget-mb", 1, 1e9, 0, 0},
    {"ckpt-every", 0, I64MAX, 0, 0},
    {"keep-last", 0, 1e9, 0, 0},
    {"max-restarts", 0, 1e6, 0, 0},
    {"peak-tflops", 0, INF, 0, 1},
    {"log-every", 0, I64MAX, 0, 0},
    {"eval-every", 0, I64MAX, 0, 0},
    {"eval-samples", 0, 1e12, 0, 0},
    {"max-skips", 1, 1e9, 0, 0},
    {"eod-id", -1, 2147483647, 0, 0},
    {"tp", 1, 4096, 0, 0},
    {"pp", 1, 1024, 0, 0},
    {"pp-virtual", 1, 64, 0, 0},
    {"ep", 1, 4096, 0, 0},
    {"moe-capacity-factor", 0, INF, 0, 1},
    {"moe-z-loss-coef", 0, INF, 0, 1},
    {"moe-bias-rate", 0, INF, 0, 1},
    {"lr-decay-steps", 0, I64MAX, 0, 0},
    {"lr-decay-frac", 0, 1, 0, 0},
};
#define NRANGES (int)(sizeof RANGES / sizeof RANGES[0])

static int find_range(const char *name) {
  for (int i = 0; i < NRANGES; i++)
    if (!strcmp(RANGES[i].name, name)) return i;
  return -1;
}

static void fmt_bound(char *b, size_t cap, double v) {
  if (isinf(v)) snprintf(b, cap, "%sinf", v < 0 ? "-" : "");
  else snprintf(b, cap, "%g", v);
}

/* "[0, 1)"-style text of key name's range ("" when it has none). */
static void range_text(const char *name, char *buf, size_t cap) {
  int r = find_range(name);
  buf[0] = 0;
  if (r < 0) return;
  char lo[32], hi[32];
  fmt_bound(lo, sizeof lo, RANGES[r].lo);
  fmt_bound(hi, sizeof hi, RANGES[r].hi);
  snprintf(buf, cap, "%c%s, %s%c", RANGES[r].lo_open ? '(' : '[', lo, hi, RANGES[r].hi_open ? ')' : ']');
}

static int check_range(const key_t_ *k, double x, const char *v, const char *where) {
  if (k->type == K_DBL && !isfinite(x))
    return sl_fail(SL_EINPUT, "%s: --%s must be a finite number, found '%s'", where, k->name, v);
  int r = find_range(k->name);
  if (r < 0) return SL_OK;
  double lo = RANGES[r].lo, hi = RANGES[r].hi;
  int bad = RANGES[r].lo_open ? !(x > lo) : !(x >= lo);
  bad |= RANGES[r].hi_open ? !(x < hi) : !(x <= hi);
  if (!bad) return SL_OK;
  char rt[96];
  range_text(k->name, rt, sizeof rt);
  return sl_fail(SL_EINPUT, "%s: --%s must be in %s, found '%s'", where, k->name, rt, v);
}

static const key_t_ *find_key(const char *name) {
  char n[128];
  snprintf(n, sizeof n, "%s", name);
  for (char *p = n; *p; p++)
    if (*p == '_') *p = '-';
  for (int i = 0; i < NKEYS; i++)
    if (!strcmp(KEYS[i].name, n)) return &KEYS[i];
  return NULL;
}

static int parse_bool(const char *v, int *out) {
  if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *out = 1;
  else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *out = 0;
  else return -1;
  return 0;
}

const char *const sl_lr_sched_keys[SL_LR_SCHED_NKEYS] = {"lr-schedule", "lr-decay-steps", "lr-decay-frac",
                                                         "lr-decay-shape"};

static int set_key(sl_train_cfg *c, const key_t_ *k, const char *v, const char *where) {
  char *p = (char *)c + k->off;
  for (int i = 0; i < SL_LR_SCHED_NKEYS; i++)
    if (!strcmp(k->name, sl_lr_sched_keys[i]) && strcmp(where, "default")) c->lr_given |= 1 << i;
  char *end = NULL;
  errno = 0;
  switch (k->type) {
  case K_INT: {
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno) return sl_fail(SL_EINPUT, "%s: --%s expects an integer, found '%s'", where, k->name, v);
    int rc = check_range(k, (double)x, v, where);
    if (rc) return rc;
    *(int64_t *)p = x;
    return SL_OK;
  }
  case K_DBL: {
    double x = strtod(v, &end);
    if (!*v || *end || errno) return sl_fail(SL_EINPUT, "%s: --%s expects a number, found '%s'", where, k->name, v);
    int rc = check_range(k, x, v, where);
    if (rc) return rc;
    *(double *)p = x;
    /* a rate other than the default (which has no effect without the bias: a run.json may list it) */
    if (k->off == offsetof(sl_train_cfg, moe_bias_rate) && strcmp(where, "default"))
      c->moe_bias_rate_given = x != strtod(k->def, NULL);
    return SL_OK;
  }
  case K_BOOL:
    if (parse_bool(v, (int *)p))
      return sl_fail(SL_EINPUT, "%s: --%s expects true or false, found '%s'", where, k->name, v);
    return SL_OK;
  case K_STR:
    if (k->off == offsetof(sl_train_cfg, param_dtype) && strcmp(where, "default")) c->param_dtype_given = 1;
    if (strlen(v) >= k->cap)
      return sl_fail(SL_EINPUT, "%s: --%s value is too long (%zu characters, at most %zu)", where, k->name, strlen(v),
                     k->cap - 1);
    snprintf(p, k->cap, "%s", v);
    return SL_OK;
  }
  return SL_EINTERNAL;
}

void sl_train_cfg_defaults(sl_train_cfg *c) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < NKEYS; i++) set_key(c, &KEYS[i], KEYS[i].def, "default");
}

int sl_train_cfg_load_json(sl_train_cfg *c, const char *path) {
  json_error_t err;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (!root) return sl_fail(SL_EINPUT, "%s: not valid JSON (line %d: %s)", path, err.line, err.text);
  int rc = SL_OK;
  if (!json_is_object(root)) {
    rc = sl_fail(SL_EINPUT, "%s: expected a JSON object of training settings", path);
    goto done;
  }
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (key[0] == '_') continue; /* notes ("_shardlm", "_model_config_hash" of a run.json) */
    const key_t_ *k = find_key(key);
    if (!k) {
      rc = sl_fail(SL_EINPUT, "%s: unknown setting '%s' (see shardlm train --help)", path, key);
      goto done;
    }
    char buf[SL_PATH_MAX];
    if (json_is_string(val)) snprintf(buf, sizeof buf, "%s", json_string_value(val));
    else if (json_is_integer(val)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(val));
    else if (json_is_real(val)) snprintf(buf, sizeof buf, "%.17g", json_real_value(val));
    else if (json_is_boolean(val)) snprintf(buf, sizeof buf, "%s", json_is_true(val) ? "true" : "false");
    else {
      rc = sl_fail(SL_EINPUT, "%s: setting '%s' must be a string, number or boolean", path, key);
      goto done;
    }
    if ((rc = set_key(c, k, buf, path))) goto done;
  }
done:
  json_decref(root);
  return rc;
}

/* FILE.yaml / FILE.yml: a YAML mapping of settings (libyaml), one scalar per
 * key; anything else is JSON. */
static int is_yaml(const char *path) {
  size_t n = strlen(path);
  return (n > 5 && !strcmp(path + n - 5, ".yaml")) || (n > 4 && !strcmp(path + n - 4, ".yml"));
}

int sl_train_cfg_load_yaml(sl_train_cfg *c, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return sl_fail(SL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
  yaml_parser_t yp;
  if (!yaml_parser_initialize(&yp)) {
    fclose(f);
    return sl_fail(SL_ENOMEM, "out of memory reading %s", path);
  }
  yaml_parser_set_input_file(&yp, f);
  int rc = SL_OK, depth = 0, done = 0, docs = 0;
  char key[128] = "";
  int have_key = 0;
  while (!rc && !done) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&yp, &ev)) {
      rc = sl_fail(SL_EINPUT, "%s:%zu: not valid YAML: %s", path, yp.problem_mark.line + 1,
                   yp.problem ? yp.problem : "parse error");
      break;
    }
    size_t line = ev.start_mark.line + 1;
    switch (ev.type) {
    case YAML_STREAM_END_EVENT: done = 1; break;
    case YAML_DOCUMENT_START_EVENT:
      if (++docs > 1) rc = sl_fail(SL_EINPUT, "%s:%zu: one YAML document of settings expected", path, line);
      break;
    case YAML_MAPPING_START_EVENT:
      if (depth++ > 0)
        rc = sl_fail(SL_EINPUT, "%s:%zu: setting '%s' must be a single value, found a mapping", path, line,
                     have_key ? key : "?");
      break;
    case YAML_MAPPING_END_EVENT: depth--; break;
    case YAML_SEQUENCE_START_EVENT:
      rc = sl_fail(SL_EINPUT, "%s:%zu: setting '%s' must be a single value, found a list", path, line,
                   have_key ? key : "?");
      break;
    case YAML_ALIAS_EVENT: rc = sl_fail(SL_EINPUT, "%s:%zu: YAML aliases are not supported here", path, line); break;
    case YAML_SCALAR_EVENT: {
      const char *v = (const char *)ev.data.scalar.value;
      if (depth != 1) {
        rc = sl_fail(SL_EINPUT, "%s:%zu: expected a mapping of settings (name: value)", path, line);
      } else if (!have_key) {
        snprintf(key, sizeof key, "%s", v);
        have_key = 1;
      } else {
        have_key = 0;
        if (key[0] == '_') break; /* notes, as in a run.json */
        const key_t_ *k = find_key(key);
        char where[SL_PATH_MAX + 32];
        snprintf(where, sizeof where, "%s:%zu", path, line);
        int plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        if (!k) rc = sl_fail(SL_EINPUT, "%s:%zu: unknown setting '%s' (see shardlm train --help)", path, line, key);
        else if (plain && (!strcmp(v, "~") || !strcmp(v, "null") || !v[0]))
          rc = sl_fail(SL_EINPUT, "%s: setting '%s' has no value", where, key);
        else rc = set_key(c, k, v, where);
      }
      break;
    }
    default: break;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&yp);
  fclose(f);
  return rc;
}

int sl_train_cfg_load(sl_train_cfg *c, const char *path) {
  return is_yaml(path) ? sl_train_cfg_load_yaml(c, path) : sl_train_cfg_load_json(c, path);
}

char *sl_train_cfg_yaml(const sl_train_cfg *c, const char *const *extra) {
  size_t cap = 16384, n = 0;
  char *b = malloc(cap);
  if (!b) return NULL;
#define OUT(...)                                                                                                       \
  do {                                                                                                                 \
    int w_ = snprintf(b + n, cap - n, __VA_ARGS__);                                                                    \
    if (w_ < 0) {                                                                                                      \
      free(b);                                                                                                         \
      return NULL;                                                                                                     \
    }                                                                                                                  \
    if (n + (size_t)w_ >= cap) {                                                                                       \
      char *q_ = realloc(b, cap = (cap + (size_t)w_) * 2);                                                             \
      if (!q_) {                                                                                                       \
        free(b);                                                                                                       \
        return NULL;                                                                                                   \
      }                                                                                                                \
      b = q_;                                                                                                          \
      w_ = snprintf(b + n, cap - n, __VA_ARGS__);                                                                      \
    }                                                                                                                  \
    n += (size_t)w_;                                                                                                   \
  } while (0)
  /* strings as JSON-quoted scalars (valid YAML: double-quoted style) */
  json_t *s = json_string(SL_VERSION);
  char *q = json_dumps(s, JSON_ENCODE_ANY);
  OUT("_shardlm: %s\n", q ? q : "\"\"");
  free(q);
  json_decref(s);
  for (int i = 0; extra && extra[i] && extra[i + 1]; i += 2) {
    s = json_string(extra[i + 1]);
    q = json_dumps(s, JSON_ENCODE_ANY);
    OUT("%s: %s\n", extra[i], q ? q : "\"\"");
    free(q);
    json_decref(s);
  }
  for (int i = 0; i < NKEYS; i++) {
    const key_t_ *k = &KEYS[i];
    const char *p = (const char *)c + k->off;
    switch (k->type) {
    case K_INT: OUT("%s: %lld\n", k->name, (long long)*(const int64_t *)p); break;
    case K_DBL: OUT("%s: %.17g\n", k->name, *(const double *)p); break;
    case K_BOOL: OUT("%s: %s\n", k->name, *(const int *)p ? "true" : "false"); break;
    case K_STR:
      s = json_string(p);
      q = json_dumps(s, JSON_ENCODE_ANY);
      OUT("%s: %s\n", k->name, q ? q : "\"\"");
      free(q);
      json_decref(s);
      break;
    }
  }
#undef OUT
  return b;
}

int sl_train_cfg_parse_args(sl_train_cfg *c, int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--config")) {
      if (i + 1 >= argc) return sl_fail(SL_EINPUT, "--config needs a file");
      int rc = sl_train_cfg_load(c, argv[i + 1]);
      if (rc) return rc;
    }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--config")) {
      i++;
      continue;
    }
    if (strncmp(a, "--", 2) != 0)
      return sl_fail(SL_EINPUT, "unexpected argument '%s' (flags look like --name value)", a);
    char name[128];
    const char *eq = strchr(a + 2, '=');
    snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a - 2) : (int)strlen(a + 2), a + 2);
    const key_t_ *k = find_key(name);
    if (!k) return sl_fail(SL_EINPUT, "unknown flag --%s (see shardlm train --help)", name);
    const char *v;
    if (eq) v = eq + 1;
    else if (k->type == K_BOOL && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) v = "true";
    else if (i + 1 < argc) v = argv[++i];
    else return sl_fail(SL_EINPUT, "flag --%s needs a value", name);
    int rc = set_key(c, k, v, "command line");
    if (rc) return rc;
  }
  if (c->resume && !c->ckpt_dir[0])
    return sl_fail(SL_EINPUT, "--resume needs --ckpt-dir DIR (the directory whose newest checkpoint to continue)");
  if (strcmp(c->init, "hf") && strcmp(c->init, "random"))
    return sl_fail(SL_EINPUT, "--init must be hf or random, found '%s'", c->init);
  if (strcmp(c->compute_dtype, "auto") && strcmp(c->compute_dtype, "fp32") && strcmp(c->compute_dtype, "bf16"))
    return sl_fail(SL_EINPUT, "--compute-dtype must be fp32, bf16 or auto, found '%s'", c->compute_dtype);
  if (strcmp(c->residual_dtype, "auto") && strcmp(c->residual_dtype, "fp32") && strcmp(c->residual_dtype, "bf16"))
    return sl_fail(SL_EINPUT, "--residual-dtype must be fp32, bf16 or auto, found '%s'", c->residual_dtype);
  if (strcmp(c->save_dtype, "auto") && strcmp(c->save_dtype, "fp32") && strcmp(c->save_dtype, "bf16") &&
      strcmp(c->save_dtype, "fp16"))
    return sl_fail(SL_EINPUT, "--save-dtype must be auto, fp32, bf16 or fp16, found '%s'", c->save_dtype);
  if (strcmp(c->tf32, "auto") && strcmp(c->tf32, "true") && strcmp(c->tf32, "false"))
    return sl_fail(SL_EINPUT, "--tf32 must be true, false or auto, found '%s'", c->tf32);
  int rc = sl_train_cfg_check_lr(c);
  if (rc) return rc;
  if (!strcmp(c->compute_dtype, "bf16") && !c->param_dtype_given) /* a bf16 engine gathers bf16 weights */
    snprintf(c->param_dtype, sizeof c->param_dtype, "bf16");
  return SL_OK;
}

int sl_train_cfg_check_lr(const sl_train_cfg *c) {
  const char *s = c->lr_schedule;
  if (strcmp(s, "cosine") && strcmp(s, "wsd") && strcmp(s, "linear") && strcmp(s, "constant"))
    return sl_fail(SL_EINPUT, "--lr-schedule must be cosine, wsd, linear or constant, found '%s'", s);
  if (strcmp(c->lr_decay_shape, "linear") && strcmp(c->lr_decay_shape, "1-sqrt"))
    return sl_fail(SL_EINPUT, "--lr-decay-shape must be linear or 1-sqrt, found '%s'", c->lr_decay_shape);
  if (strcmp(s, "wsd")) return SL_OK;
  int64_t room = c->steps - c->warmup;
  if (c->lr_decay_steps > room)
    return sl_fail(SL_EINPUT,
                   "--lr-decay-steps %lld: the wsd decay phase must fit in the %lld steps after --warmup %lld "
                   "(--steps %lld)",
                   (long long)c->lr_decay_steps, (long long)(room > 0 ? room : 0), (long long)c->warmup,
                   (long long)c->steps);
  if (!c->lr_decay_steps && llround(c->lr_decay_frac * (double)c->steps) > room)
    return sl_fail(SL_EINPUT,
                   "--lr-decay-frac %g: the wsd decay phase (%lld steps) must fit in the %lld steps after --warmup "
                   "%lld (--steps %lld)",
                   c->lr_decay_frac, (long long)llround(c->lr_decay_frac * (double)c->steps),
                   (long long)(room > 0 ? room : 0), (long long)c->warmup, (long long)c->steps);
  return SL_OK;
}

const char *sl_train_cfg_canonical_get(const char *text, const char *name, char *buf, size_t cap) {
  size_t n = strlen(name);
  for (const char *a = text; a && *a;) {
    const char *e = strchr(a, '\n');
    size_t len = e ? (size_t)(e - a) : strlen(a);
    if (len > n && !strncmp(a, name, n) && a[n] == '=') {
      snprintf(buf, cap, "%.*s", (int)(len - n - 1), a + n + 1);
      return buf;
    }
    a = e ? e + 1 : NULL;
  }
  return NULL;
}

int sl_train_cfg_resolve(sl_train_cfg *c, int device) {
  if (!strcmp(c->tf32, "true") && !device)
    return sl_fail(SL_EINPUT,
                   "--tf32 true: TF32 is a tensor-core GEMM mode of the device backends; --backend %s "
                   "computes fp32 exactly (use --backend cuda, or --tf32 auto)",
                   c->backend);
  if (!strcmp(c->compute_dtype, "auto")) {
    snprintf(c->compute_dtype, sizeof c->compute_dtype, "%s", device ? "bf16" : "fp32");
    if (device && !c->param_dtype_given) snprintf(c->param_dtype, sizeof c->param_dtype, "bf16");
  }
  if (!strcmp(c->tf32, "auto"))
    snprintf(c->tf32, sizeof c->tf32, "%s", device && !strcmp(c->compute_dtype, "bf16") ? "true" : "false");
  if (!c->model[0]) snprintf(c->init, sizeof c->init, "random"); /* the built-in model has no weights */
  return SL_OK;
}

int sl_train_cfg_tf32(const sl_train_cfg *c) { return !strcmp(c->tf32, "true"); }

int sl_train_cfg_set(sl_train_cfg *c, const char *name, const char *value) {
  const key_t_ *k = find_key(name);
  if (!k) return sl_fail(SL_EINTERNAL, "--%s is not a setting of shardlm train", name);
  if (!value) return sl_fail(SL_EINPUT, "flag --%s needs a value", name);
  return set_key(c, k, value, "command line");
}

int sl_train_cfg_residual_bf16(const sl_train_cfg *c, int device) {
  return sl_train_cfg_compute_bf16(c, device) && strcmp(c->residual_dtype, "fp32");
}

int sl_train_cfg_compute_bf16(const sl_train_cfg *c, int device) {
  return !strcmp(c->compute_dtype, "bf16") || (device && !strcmp(c->compute_dtype, "auto"));
}

void sl_train_cfg_usage(FILE *f) {
  fprintf(f, "settings (flags --name value, or keys of --config FILE.json):\n");
  for (int i = 0; i < NKEYS; i++) {
    char rt[96];
    range_text(KEYS[i].name, rt, sizeof rt);
    fprintf(f, "  --%-24s %s (default: %s%s%s)\n", KEYS[i].name, KEYS[i].help, KEYS[i].def[0] ? KEYS[i].def : "\"\"",
            rt[0] ? "; range " : "", rt);
  }
}

int sl_train_cfg_canonical(const sl_train_cfg *c, char *buf, int64_t cap) {
  int64_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < NKEYS; i++) {
    const key_t_ *k = &KEYS[i];
    /* outputs and launch details may differ per rank */
    if (!strcmp(k->name, "metrics") || !strcmp(k->name, "out-dir") || !strcmp(k->name, "run-name") ||
        !strcmp(k->name, "save") || !strcmp(k->name, "save-dtype") || !strcmp(k->name, "nproc") ||
        !strcmp(k->name, "threads") || !strcmp(k->name, "log-every") || !strcmp(k->name, "summary") ||
        !strcmp(k->name, "plot") || !strcmp(k->name, "max-restarts") || !strcmp(k->name, "tensorboard"))
      continue;
    const char *p = (const char *)c + k->off;
    int w = 0;
    switch (k->type) {
    case K_INT: w = snprintf(buf + n, (size_t)(cap - n), "%s=%lld\n", k->name, (long long)*(const int64_t *)p); break;
    case K_DBL: w = snprintf(buf + n, (size_t)(cap - n), "%s=%.17g\n", k->name, *(const double *)p); break;
    case K_BOOL: w = snprintf(buf + n, (size_t)(cap - n), "%s=%d\n", k->name, *(const int *)p); break;
    case K_STR: w = snprintf(buf + n, (size_t)(cap - n), "%s=%s\n", k->name, p); break;
    }
    if (w < 0 || n + w >= cap) return SL_EINTERNAL;
    n += w;
  }
  return SL_OK;
}

int sl_train_cfg_run_dir(sl_train_cfg *c) {
  if (c->out_dir[0]) return SL_OK;
  c->out_dir_auto = 1;
  if (c->resume && c->ckpt_dir[0]) { /* the directory of the run that wrote the checkpoints */
    char p[SL_PATH_MAX + 16], d[SL_PATH_MAX];
    snprintf(p, sizeof p, "%s/run-dir", c->ckpt_dir);
    FILE *f = fopen(p, "r");
    if (f) {
      int ok = fgets(d, sizeof d, f) != NULL;
      fclose(f);
      d[strcspn(d, "\n")] = 0;
      if (ok && d[0]) {
        snprintf(c->out_dir, sizeof c->out_dir, "%s", d);
        return SL_OK;
      }
    }
  }
  char name[sizeof c->run_name];
  if (c->run_name[0]) {
    if (strchr(c->run_name, '/') || !strcmp(c->run_name, ".") || !strcmp(c->run_name, "..") ||
        !strcmp(c->run_name, "latest"))
      return sl_fail(SL_EINPUT, "--run-name '%s': expected a plain directory name (not 'latest', no '/')", c->run_name);
    snprintf(name, sizeof name, "%s", c->run_name);
  } else {
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(name, sizeof name, "%Y%m%d-%H%M%S", &tm);
  }
  snprintf(c->out_dir, sizeof c->out_dir, "runs/%s", name);
  /* a name in use (two runs in one second, a repeated --run-name without --resume) gets a suffix */
  struct stat st;
  for (int k = 2; stat(c->out_dir, &st) == 0 && !c->resume && k < 1000; k++)
    snprintf(c->out_dir, sizeof c->out_dir, "runs/%s-%d", name, k);
  return SL_OK;
}

char *sl_train_cfg_json(const sl_train_cfg *c, const char *const *extra) {
  json_t *o = json_object();
  if (!o) return NULL;
  json_object_set_new(o, "_shardlm", json_string(SL_VERSION));
  for (int i = 0; extra && extra[i] && extra[i + 1]; i += 2)
    json_object_set_new(o, extra[i], json_string(extra[i + 1]));
  for (int i = 0; i < NKEYS; i++) {
    const key_t_ *k = &KEYS[i];
    const char *p = (const char *)c + k->off;
    switch (k->type) {
    case K_INT: json_object_set_new(o, k->name, json_integer((json_int_t) * (const int64_t *)p)); break;
    case K_DBL: json_object_set_new(o, k->name, json_real(*(const double *)p)); break;
    case K_BOOL: json_object_set_new(o, k->name, json_boolean(*(const int *)p)); break;
    case K_STR: json_object_set_new(o, k->name, json_string(p)); break;
    }
  }
  char *t = json_dumps(o, JSON_INDENT(1) | JSON_REAL_PRECISION(17) | JSON_PRESERVE_ORDER);
  json_decref(o);
  return t;
}
