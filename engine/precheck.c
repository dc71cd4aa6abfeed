/* engine/precheck.c — checks a run passes before anything big is allocated:
 * the predicted peak memory per rank (the engine's dry run,
 * engine/dryrun.h: one step of the trainer's own code on the counting
 * backends; under --pp the fullest stage's) against the memory available
 * to this rank, and
 * the sequence length against the model's max_position_embeddings. */
#define _GNU_SOURCE
#include "engine/precheck.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/agree.h"
#include "engine/dryrun.h"
#include "formats/ckpt_io.h"
#include "models/model.h"

int sl_precheck_init(const sl_train_cfg *c, int *from) {
  char other[256];
  *from = SL_INIT_SEED;
  if (!c->model[0] || !strcmp(c->init, "random")) return SL_OK;
  if (sl_st_dir_has_weights(c->model, other, sizeof other)) {
    *from = SL_INIT_WEIGHTS;
    return SL_OK;
  }
  int64_t *steps = NULL;
  int n = 0;
  if (c->resume && c->ckpt_dir[0] && sl_ckio_list(c->ckpt_dir, &steps, &n) == SL_OK && n > 0) {
    free(steps);
    *from = SL_INIT_CKPT; /* the checkpoint holds the weights */
    return SL_OK;
  }
  free(steps);
  char note[320] = "";
  if (other[0]) snprintf(note, sizeof note, "; it holds %s, which shardlm does not read", other);
  return sl_fail(SL_EINPUT,
                 "--model %s has no weight files (model.safetensors or model.safetensors.index.json%s)%s: "
                 "check the directory, or pass --init random to train from a random initialisation (--seed %lld) "
                 "on purpose",
                 c->model, note, c->resume ? " and --resume found no checkpoint" : "", (long long)c->seed);
}

int sl_precheck_init_done(const sl_train_cfg *c, int from, int resumed) {
  if (resumed || from == SL_INIT_WEIGHTS) return SL_OK;
  if (from == SL_INIT_CKPT)
    return sl_fail(SL_EINPUT, "--model %s has no weight files and --resume loaded no checkpoint from %s", c->model,
                   c->ckpt_dir);
  if (!c->model[0]) sl_log0(SL_LOG_INFO, "initialising the built-in model from seed %lld", (long long)c->seed);
  else if (sl_st_dir_has_weights(c->model, NULL, 0))
    sl_log0(SL_LOG_INFO, "--init random: initialising from seed %lld; the weights in %s are not loaded",
            (long long)c->seed, c->model);
  else
    sl_log0(SL_LOG_INFO, "--init random: initialising from seed %lld (%s has no weight files)", (long long)c->seed,
            c->model);
  return SL_OK;
}

/* First integer of a file (-1: absent or "max"). */
static int64_t read_num(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  int64_t v = -1;
  while (fgets(line, sizeof line, f)) {
    if (key) {
      if (strncmp(line, key, strlen(key))) continue;
      v = strtoll(line + strlen(key), NULL, 10) * 1024; /* /proc/meminfo: kB */
      break;
    }
    char *end;
    long long x = strtoll(line, &end, 10);
    if (end != line) v = x;
    break;
  }
  fclose(f);
  return v;
}

int64_t sl_host_mem_available(char *why, size_t cap) {
  int64_t avail = read_num("/proc/meminfo", "MemAvailable:");
  snprintf(why, cap, "MemAvailable %.2f GiB", avail / 1073741824.0);
  /* cgroup v2, then v1: the limit less what the group already uses */
  int64_t lim = read_num("/sys/fs/cgroup/memory.max", NULL), used = read_num("/sys/fs/cgroup/memory.current", NULL);
  if (lim < 0) {
    lim = read_num("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL);
    used = read_num("/sys/fs/cgroup/memory/memory.usage_in_bytes", NULL);
  }
  if (lim > 0 && lim < ((int64_t)1 << 60)) {
    int64_t left = lim - (used > 0 ? used : 0);
    if (avail < 0 || left < avail) {
      avail = left;
      snprintf(why, cap, "cgroup limit %.2f GiB less %.2f GiB in use", lim / 1073741824.0,
               (used > 0 ? used : 0) / 1073741824.0);
    }
  }
  return avail;
}

static int local_ranks(void) {
  const char *e = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!e) e = getenv("SLURM_NTASKS_PER_NODE");
  int n = e ? atoi(e) : 1;
  return n > 0 ? n : 1;
}

/* Under --pp: every stage's step (the dry run as DP rank 0, TP rank 0 of
 * each stage), the one with the highest peak; every rank checks the same
 * figure, so all refuse or none does. */
static int fullest_stage(const sl_train_cfg *c, const sl_model_config *mc, int world, sl_dry_result *m) {
  int64_t max_unit = 0;
  int level = sl_log_get_level(), rc = SL_OK, P = (int)c->pp;
  if (level < SL_LOG_DEBUG)
    sl_log_set_level(SL_LOG_WARN); /* the counted runs' plan and counter lines are not the run's */
  for (int s = 0; s < P && !rc; s++) {
    sl_dry_result ms;
    if ((rc = sl_train_dry_run(c, mc, world, s * (world / P), &ms))) break;
    if (s == 0 || ms.total_peak > m->total_peak) *m = ms;
    if (ms.max_unit > max_unit) max_unit = ms.max_unit;
  }
  sl_log_set_level(level);
  m->max_unit = max_unit;
  return rc;
}

static int memory_check(const sl_train_cfg *c, const sl_model_config *mc, int world, const sl_ops *ops, sl_kctx *k) {
  int dev = ops->is_device();
  sl_train_cfg dc = *c;
  if (dc.tp > 1 && world % dc.tp) dc.tp = 1;           /* a --tp that does not divide: refused later, by name */
  if (dc.pp > 1 && world % (dc.tp * dc.pp)) dc.pp = 1; /* likewise a mesh that does not divide */
  sl_dry_result m;
  int rc = dc.pp > 1 ? fullest_stage(&dc, mc, world, &m)        /* the fullest stage */
                     : sl_train_dry_run(&dc, mc, world, 0, &m); /* one step of this engine's code, counted */
  if (rc) return rc;
  int64_t max_unit = m.max_unit;
  /* the run's global batch in tokens, for the plan command suggested below: the data-parallel ranks' share */
  int dp = world / (dc.tp * dc.pp) > 0 ? world / (dc.tp * dc.pp) : 1;
  /* host bytes of this rank: every arena on the CPU backend (optimizer state
   * on NVMe excepted), the offloaded optimizer state with a device backend;
   * plus the unit load buffer used while the weights are read */
  int nvme = !strcmp(c->offload_optimizer, "nvme"), cpu = !strcmp(c->offload_optimizer, "cpu");
  int64_t need = dev ? (cpu ? m.peak[SL_ARENA_OPTIM] : 0) : m.total_peak - (nvme ? m.peak[SL_ARENA_OPTIM] : 0);
  need += max_unit * 4;
  char why[160];
  double gib = 1.0 / 1073741824.0;
  size_t dfree = 0, dtotal = 0;
  if (dev && ops->mem_info && ops->mem_info(k, &dfree, &dtotal) == SL_OK) {
    /* the device holds every arena but host-side optimizer state; one device per rank */
    int64_t dneed = m.total_peak - ((cpu || nvme) ? m.peak[SL_ARENA_OPTIM] : 0);
    if (dneed > (int64_t)dfree)
      return sl_fail(SL_EINPUT,
                     "memory check: this run needs %.2f GiB of %s memory per rank at its peak (params %.2f, grads "
                     "%.2f, optimizer %.2f, gathered %.2f, activations %.2f, workspace %.2f GiB), but the device has "
                     "%.2f GiB free of %.2f GiB. Find a configuration that fits with: shardlm plan --model %s --gpus "
                     "%d --gpu-mem %.0fM --seq-len %lld --global-batch %.0f (or lower --micro-batch, "
                     "--activation-checkpoint full, --offload-optimizer cpu, more ranks); --skip-memory-check "
                     "starts anyway",
                     dneed * gib, ops->name, m.peak[SL_ARENA_PARAMS] * gib, m.peak[SL_ARENA_GRADS] * gib,
                     ((cpu || nvme) ? 0 : m.peak[SL_ARENA_OPTIM]) * gib, m.peak[SL_ARENA_GATHER] * gib,
                     m.peak[SL_ARENA_ACTS] * gib, m.peak[SL_ARENA_WORKSPACE] * gib, dfree * gib, dtotal * gib,
                     c->model[0] ? c->model : "configs/tiny-llama", world, dtotal / 1e6, (long long)c->seq_len,
                     (double)c->micro_batch * (double)c->grad_accum * dp * (double)c->seq_len);
  } else if (dev) {
    sl_log0(SL_LOG_WARN, "memory check: the %s backend does not report its free memory; device memory not checked",
            ops->name);
  }
  int64_t avail = sl_host_mem_available(why, sizeof why);
  int nl = local_ranks();
  if (avail < 0) {
    sl_log0(SL_LOG_WARN, "memory check: cannot read the available host memory; not checked");
    return SL_OK;
  }
  int64_t per = avail / nl;
  sl_log0(SL_LOG_DEBUG, "memory check: %.3f GiB host memory per rank needed, %.3f GiB available", need / 1073741824.0,
          per / 1073741824.0);
  if (need <= per) return SL_OK;
  char model[SL_PATH_MAX + 8];
  snprintf(model, sizeof model, "%s", c->model[0] ? c->model : "configs/tiny-llama");
  return sl_fail(SL_EINPUT,
                 "memory check: this run needs %.2f GiB of host memory per rank at its peak (params %.2f, grads "
                 "%.2f, optimizer %.2f, gathered %.2f, activations %.2f, workspace %.2f GiB), but only %.2f GiB "
                 "is available per rank (%s, %d rank%s on this node). Find a configuration that fits with: "
                 "shardlm plan --model %s --gpus %d --gpu-mem %.0fM --seq-len %lld --global-batch %.0f "
                 "(or lower --micro-batch, --activation-checkpoint full, --offload-optimizer nvme, more ranks); "
                 "--skip-memory-check starts anyway",
                 need * gib, m.peak[SL_ARENA_PARAMS] * gib, m.peak[SL_ARENA_GRADS] * gib, m.peak[SL_ARENA_OPTIM] * gib,
                 m.peak[SL_ARENA_GATHER] * gib, m.peak[SL_ARENA_ACTS] * gib, m.peak[SL_ARENA_WORKSPACE] * gib,
                 per * gib, why, nl, nl > 1 ? "s" : "", model, world, per / 1e6 > 1 ? per / 1e6 : 1,
                 (long long)c->seq_len, (double)c->micro_batch * (double)c->grad_accum * dp * (double)c->seq_len);
}

/* An output path: the directory (or a file's directory, parent = 1) exists
 * and is writable, or can be created: its nearest existing ancestor is a
 * writable directory. must_exist: the directory itself must exist. */
int sl_precheck_out(const char *flag, const char *path, int parent, int must_exist) {
  if (!path[0]) return SL_OK;
  char p[SL_PATH_MAX + 8], tmp[SL_PATH_MAX + 8];
  snprintf(tmp, sizeof tmp, "%s", path);
  snprintf(p, sizeof p, "%s", parent ? dirname(tmp) : path);
  struct stat st;
  while (stat(p, &st) != 0) {
    if (errno != ENOENT || must_exist) return sl_fail(SL_EINPUT, "--%s %s: %s: %s", flag, path, p, strerror(errno));
    char up[SL_PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s", p);
    snprintf(up, sizeof up, "%s", dirname(tmp)); /* dirname may change its argument */
    if (!strcmp(up, p)) return sl_fail(SL_EINPUT, "--%s %s: no existing directory above it", flag, path);
    snprintf(p, sizeof p, "%s", up);
  }
  if (!S_ISDIR(st.st_mode)) return sl_fail(SL_EINPUT, "--%s %s: %s is not a directory", flag, path, p);
  if (access(p, W_OK | X_OK) != 0)
    return sl_fail(SL_EINPUT, "--%s %s: %s is not writable: %s", flag, path, p, strerror(errno));
  return SL_OK;
}

int sl_precheck_paths(const sl_train_cfg *c) {
  int rc = sl_precheck_out("out-dir", c->out_dir, 0, 0);
  if (!rc) rc = sl_precheck_out("metrics", c->metrics, 1, 0);
  if (!rc) rc = sl_precheck_out("ckpt-dir", c->ckpt_dir, 0, 0);
  if (!rc) rc = sl_precheck_out("save", c->save, 0, 0);
  if (!rc && !strcmp(c->offload_optimizer, "nvme")) rc = sl_precheck_out("nvme-path", c->nvme_path, 0, 1);
  if (!rc && c->metrics[0]) { /* its directory is created like --out-dir */
    char d[SL_PATH_MAX];
    snprintf(d, sizeof d, "%s", c->metrics);
    rc = sl_mkdirs(dirname(d)) ? sl_fail(SL_EINPUT, "--metrics %s: %s", c->metrics, sl_errmsg()) : SL_OK;
  }
  return rc;
}

void sl_nvme_run_prefix(const sl_train_cfg *c, char *buf, size_t cap) {
  char cwd[SL_PATH_MAX], key[3 * SL_PATH_MAX + 8];
  if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
  snprintf(key, sizeof key, "%s|%s|%s", c->out_dir[0] == '/' ? "" : cwd, c->out_dir, c->ckpt_dir);
  snprintf(buf, cap, "optstate-%08x-", (unsigned)(sl_canon_hash(key) & 0xffffffffu));
}

/* Optimizer-state files a crashed start of this run left in --nvme-path
 * (one process per node removes them; the caller's collective follows). */
static void clean_nvme(const sl_train_cfg *c) {
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!lr) lr = getenv("SLURM_LOCALID");
  if (lr && atoi(lr) != 0) return;
  char pre[64];
  sl_nvme_run_prefix(c, pre, sizeof pre);
  DIR *d = opendir(c->nvme_path);
  if (!d) return;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, pre, strlen(pre))) continue;
    char p[SL_PATH_MAX + 300];
    snprintf(p, sizeof p, "%s/%s", c->nvme_path, e->d_name);
    n += unlink(p) == 0;
  }
  closedir(d);
  if (n)
    sl_log(SL_LOG_INFO, "%s: removed %d optimizer-state file%s left by an earlier start of this run", c->nvme_path, n,
           n > 1 ? "s" : "");
}

/* --micro-batch x --seq-len against the model's sizes, in double before any
 * int64 product: an upper bound on every size the model and the engine
 * check form (the widest activation row x the layers x a margin) must stay
 * below 2^62 bytes. No real run comes near it (a million-token micro-batch
 * of a 405B model is ~2^46); past it the int64 sizes would overflow. The
 * figure named is a lower bound: the layer inputs saved for backward. */
static int size_check(const sl_train_cfg *c, const sl_model_config *mc) {
  double N = (double)c->micro_batch * (double)c->seq_len, C = (double)mc->hidden_size;
  double L = (double)mc->num_hidden_layers, w = C;
  double cand[] = {(double)mc->vocab_size, 2.0 * (double)mc->intermediate_size,
                   (double)(mc->num_attention_heads + 2 * mc->num_key_value_heads) * (double)mc->head_dim,
                   2.0 * (double)mc->expand * C, (double)mc->state_size * (double)mc->intermediate_size};
  for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
    if (cand[i] > w) w = cand[i];
  double ub = N * w * (L + 2.0) * 4.0 * 64.0, lim = 4611686018427387904.0; /* 2^62 */
  if (ub <= lim) return SL_OK;
  return sl_fail(SL_EINPUT,
                 "--micro-batch %lld x --seq-len %lld = %.4g tokens per micro-batch: the activations alone need "
                 "more than %.4g GiB per rank (%.4g tokens x hidden %lld x %lld layers x 4 bytes), beyond what any "
                 "machine holds or the memory check can count (its sizes reach 2^62 bytes); lower --micro-batch or "
                 "--seq-len",
                 (long long)c->micro_batch, (long long)c->seq_len, N, 4.0 * N * C * L / 1073741824.0, N,
                 (long long)mc->hidden_size, (long long)mc->num_hidden_layers);
}

/* The largest unit's elements per TP rank at tp (-1: that --tp does not
 * split this model; the model's own refusal is left to the run). */
static int64_t largest_unit(const sl_model_config *mc, int tp, int sp, int *which) {
  sl_model *m = NULL;
  if (sl_model_create_full(mc, NULL, NULL, 0, 0, SL_AC_NONE, 0, tp, sp, NULL, 0, &m)) return -1;
  int64_t big = 0;
  for (int u = 0; u < m->nunits; u++)
    if (m->units[u].numel > big) big = m->units[u].numel, *which = u;
  sl_model_destroy(m);
  return big;
}

/* A collective moves at most INT_MAX elements (MPI's int counts): a unit
 * whose flat buffer per TP rank is larger (a 405B-wide layer at --tp 1:
 * 3.19e9) is refused here, naming it and the smallest --tp that fits,
 * instead of failing in its first all-gather. The margin covers the
 * padding to the shard group (at most world x 16 elements). */
static int unit_count_check(const sl_train_cfg *c, const sl_model_config *mc, int world) {
  int u = 0;
  int64_t lim = (int64_t)INT_MAX - (int64_t)world * 16;
  int64_t big = largest_unit(mc, (int)c->tp, c->sequence_parallel, &u);
  if (big <= lim) return SL_OK; /* also -1: the TP refusal comes later, with its reason */
  int fit = 0;
  for (int t = (int)c->tp * 2; t <= 4096 && !fit; t *= 2) {
    int v = 0;
    int64_t b = largest_unit(mc, t, c->sequence_parallel, &v);
    if (b >= 0 && b <= lim) fit = t;
  }
  char hint[160] = "no --tp up to 4096 brings it under (the model's sizes are implausible)";
  if (fit) snprintf(hint, sizeof hint, "use --tp %d or more (tensor parallelism splits each layer's matrices)", fit);
  return sl_fail(SL_EINPUT,
                 "unit %d of the model (%s) holds %lld elements per rank at --tp %lld; a collective moves at most "
                 "%d (2^31 - 1) elements: %s",
                 u, u == 0 ? "the embedding" : "a decoder layer or the head", (long long)big, (long long)c->tp, INT_MAX,
                 hint);
}

int sl_precheck_static(const sl_train_cfg *c, const sl_model_config *mc, int world) {
  int rc = size_check(c, mc);
  if (!rc) rc = unit_count_check(c, mc, world);
  if (!rc && mc->max_position_embeddings > 0 && c->seq_len > mc->max_position_embeddings && !c->allow_long_context)
    rc = sl_fail(SL_EINPUT,
                 "--seq-len %lld is above the model's max_position_embeddings %lld (config.json); use a shorter "
                 "--seq-len, or --allow-long-context to train beyond it",
                 (long long)c->seq_len, (long long)mc->max_position_embeddings);
  return rc;
}

int sl_precheck(const sl_train_cfg *c, const sl_model_config *mc, sl_comm *world, const sl_ops *ops, sl_kctx *k,
                int64_t data_tokens) {
  int rc = sl_precheck_static(c, mc, sl_comm_size(world));
  if (!rc && data_tokens < c->seq_len + 1)
    sl_log0(SL_LOG_WARN,
            "the dataset holds %lld tokens, fewer than one sample (--seq-len %lld + 1): every sample wraps "
            "around to the dataset's start and repeats tokens",
            (long long)data_tokens, (long long)c->seq_len);
  if (!rc && !strcmp(c->offload_optimizer, "nvme") && c->nvme_path[0]) clean_nvme(c);
  if (!rc && !c->skip_memory_check) rc = memory_check(c, mc, sl_comm_size(world), ops, k);
  /* the same verdict on every rank (the available memory may differ per node) */
  int bad = rc != 0;
  if (sl_comm_allreduce_sync(world, &bad, 1, SL_I32) != SL_COMM_OK)
    return rc ? rc : sl_fail(SL_ECOMM, "start-up check: %s", sl_comm_last_error());
  if (!rc && bad) rc = sl_fail(SL_EINPUT, "another rank failed its start-up check (memory, sizes or --seq-len)");
  return rc;
}

/* Layer index of "....layers.N...." names (-1: none). */
static long layer_of(const char *name) {
  const char *p = strstr(name, "layers.");
  if (!p) return -1;
  char *end;
  long n = strtol(p + 7, &end, 10);
  return end != p + 7 && *end == '.' ? n : -1;
}

int sl_precheck_tensors(const sl_model *m, const sl_st_set *w, const sl_model_config *mc) {
  int64_t n = sl_st_set_count(w), extra = 0;
  char list[512] = "";
  size_t ln = 0;
  for (int64_t i = 0; i < n; i++) {
    const char *name = sl_st_set_tensor(w, i)->name;
    int used = 0;
    for (int u = 0; u < m->nunits && !used; u++)
      for (int k = 0; k < m->units[u].ntensors && !used; k++) {
        char hf[SL_TENSOR_NAME_MAX];
        used = !strcmp(sl_tensor_hf_name(&m->units[u].t[k], hf, sizeof hf), name);
      }
    if (used || strstr(name, "rotary_emb.inv_freq")) continue;                /* RoPE buffers of older exports */
    if (mc->tie_word_embeddings && !strcmp(name, "lm_head.weight")) continue; /* the tied copy */
    long l = layer_of(name), div = mc->layer_div > 1 ? (long)mc->layer_div : 1; /* HF layers of div sub-layers */
    long hl = (long)(mc->num_hidden_layers / div);
    char bias[SL_TENSOR_NAME_MAX] = "";
    if (mc->moe_experts && l >= 0 && l < hl) sl_model_moe_bias_name(mc, l * div + div - 1, bias, sizeof bias);
    if (bias[0] && !strcmp(name, bias)) continue; /* the expert bias --save writes (sl_model_moe_bias_load) */
    if (l >= hl)
      return sl_fail(SL_EINPUT,
                     "%s: tensor '%s' belongs to layer %ld, but config.json has num_hidden_layers %ld: the weight "
                     "files hold more layers than the config (a wrong config.json?)",
                     sl_st_set_dir(w), name, l, hl);
    if (extra++ < 4 && ln + 8 < sizeof list)
      ln += (size_t)snprintf(list + ln, sizeof list - ln, "%s'%s'", ln ? ", " : "", name);
  }
  if (extra)
    sl_log0(SL_LOG_WARN, "%s: %lld tensor%s in the weight files %s not used by the %s model and ignored: %s%s",
            sl_st_set_dir(w), (long long)extra, extra > 1 ? "s" : "", extra > 1 ? "are" : "is", sl_arch_name(mc->arch),
            list, extra > 4 ? ", ..." : "");
  return SL_OK;
}
