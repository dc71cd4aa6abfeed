/* tools/convert.c — shardlm convert: a training checkpoint to a consolidated
 * Hugging Face directory (streamed unit by unit), and an HF directory to a
 * step-0 training checkpoint (master = HF weights, Adam m = v = 0) that
 * `shardlm train --resume` loads. Single process; no MPI. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/agree.h"
#include "engine/precheck.h"
#include "formats/ckpt_io.h"
#include "formats/hfconfig.h"
#include "formats/safetensors.h"
#include "formats/savedir.h"
#include "models/model.h"
#include "shard/shardmath.h"
#include "tools/tools.h"

static void usage(FILE *f) {
  fprintf(f, "usage:\n"
             "  shardlm convert --from-ckpt CKPT_DIR[/step-N] --model-config DIR_OR_config.json --to-hf OUT_DIR\n"
             "                  [--max-shard-size BYTES] [--kind master|exp_avg|exp_avg_sq]\n"
             "                  [--save-dtype auto|fp32|bf16|fp16]\n"
             "  shardlm convert --from-hf DIR --to-ckpt CKPT_DIR [--world-size N] [--zero Z] [--shard-group S]\n"
             "                  [--align A]\n"
             "--kind exports an Adam moment instead of the weights (for inspection).\n"
             "--save-dtype auto writes the dtype of --model-config's directory (its weights', else its config.json's\n"
             "torch_dtype, else fp32; an Adam moment: fp32); its tokenizer files and generation_config.json are\n"
             "copied.\n");
}

static int load_specs(const char *cfgpath, sl_model **m) {
  char p[4200];
  struct stat sb;
  if (stat(cfgpath, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(p, sizeof p, "%s/config.json", cfgpath);
  else snprintf(p, sizeof p, "%s", cfgpath);
  sl_model_config mc;
  int rc = sl_hfconfig_load(p, &mc);
  if (!rc) rc = sl_model_create_specs(&mc, m);
  return rc;
}

static int check_units(const char *dir, const sl_ckio_manifest *man, const sl_model *m) {
  if (man->nunits != m->nunits)
    return sl_fail(SL_EINPUT, "%s: the checkpoint has %d units but --model-config describes %d", dir, man->nunits,
                   m->nunits);
  for (int u = 0; u < m->nunits; u++) {
    const sl_ckio_unit *U = &man->units[u];
    if (U->numel != m->units[u].numel || U->ntensors != m->units[u].ntensors)
      return sl_fail(SL_EINPUT, "%s: unit %d has %lld elements, --model-config expects %lld", dir, u,
                     (long long)U->numel, (long long)m->units[u].numel);
    for (int i = 0; i < U->ntensors; i++)
      if (strcmp(U->t[i].name, m->units[u].t[i].name) || U->t[i].offset != m->units[u].t[i].offset)
        return sl_fail(SL_EINPUT, "%s: unit %d tensor %d is %s, --model-config expects %s", dir, u, i, U->t[i].name,
                       m->units[u].t[i].name);
  }
  return SL_OK;
}

typedef struct {
  const char *dir;
  const sl_ckio_manifest *man;
  const sl_model *m;
  int kind;
} fill_ctx;

static int fill_from_ckpt(void *vctx, int u, float *flat) {
  fill_ctx *c = vctx;
  return sl_ckio_read_range(c->dir, c->man, u, c->kind, 0, c->m->units[u].numel, flat);
}

/* The newest complete checkpoint under path (or path itself) whose files all verify. */
static int open_ckpt(const char *path, char *dir, size_t cap, sl_ckio_manifest *man) {
  char p[4200];
  struct stat sb;
  snprintf(p, sizeof p, "%s/manifest.json", path);
  int64_t *steps = NULL, one = -1;
  int n = 0, rc;
  if (stat(p, &sb) == 0) {
    steps = &one;
    n = 1;
  } else if ((rc = sl_ckio_list(path, &steps, &n))) {
    return rc;
  } else if (!n) {
    return sl_fail(SL_EINPUT,
                   "%s: neither a checkpoint step directory (manifest.json) nor a checkpoint directory "
                   "with step-N/manifest.json",
                   path);
  }
  char first[2048] = {0};
  rc = SL_EINPUT;
  for (int i = 0; i < n; i++) {
    if (steps[i] < 0) snprintf(dir, cap, "%s", path);
    else sl_ckio_step_dir(path, steps[i], dir, cap);
    rc = sl_ckio_manifest_load(dir, man);
    for (int f = 0; !rc && f < man->nfiles; f++) rc = sl_ckio_verify_file(dir, man, f);
    if (!rc) {
      if (i > 0)
        fprintf(stderr, "shardlm convert: warning: using the older checkpoint %s (newer refused: %s)\n", dir, first);
      break;
    }
    if (man->files) sl_ckio_manifest_free(man);
    if (!first[0]) snprintf(first, sizeof first, "%s", sl_errmsg());
    if (n > 1) fprintf(stderr, "shardlm convert: warning: %s refused: %s\n", dir, sl_errmsg());
  }
  if (steps != &one) free(steps);
  if (rc) return sl_fail(rc, "%s", first);
  return SL_OK;
}

static int to_hf(const char *from, const char *cfg, const char *out, int64_t max_shard, int kind,
                 const char *save_dtype) {
  sl_model *m = NULL;
  sl_ckio_manifest man;
  memset(&man, 0, sizeof man);
  char dir[4200];
  sl_st_dtype dt = SL_ST_F32; /* an Adam moment stays fp32 unless asked */
  int rc = sl_precheck_out("to-hf", out, 0, 0);
  if (!rc && (kind == 0 /* master */ || strcmp(save_dtype, "auto"))) rc = sl_savedir_dtype(save_dtype, cfg, &dt);
  if (!rc) rc = load_specs(cfg, &m);
  if (!rc) rc = open_ckpt(from, dir, sizeof dir, &man);
  if (!rc) rc = check_units(dir, &man, m);
  if (!rc) rc = sl_check_ckpt_model(dir, man.model_config, &m->cfg);
  if (!rc) {
    fill_ctx fc = {dir, &man, m, kind};
    int64_t nb = m->cfg.moe_experts * m->cfg.num_hidden_layers;
    if (man.moe_bias && man.n_moe_bias != nb)
      rc = sl_fail(SL_EINPUT, "%s: the expert bias has %lld values, the model's layers x experts %lld", dir,
                   (long long)man.n_moe_bias, (long long)nb);
    if (!rc) rc = sl_model_save(m, out, fill_from_ckpt, &fc, max_shard, man.moe_bias, dt, cfg);
  }
  if (!rc)
    printf("wrote %s (%s of %s, step %lld, %lld parameters, %s)\n", out, sl_ckio_kind_names[kind], dir,
           (long long)man.step, (long long)sl_model_num_params(m), sl_st_dtype_name(dt));
  sl_ckio_manifest_free(&man);
  sl_model_destroy(m);
  return rc;
}

/* The manifest of a converted checkpoint: the run settings, the model's units and the S writers' files
 * (their entries move into it). */
static int fill_manifest(const char *hf, const sl_model *m, sl_ckio_writer *wr, int W, int Z, int S, int64_t align,
                         sl_ckio_manifest *man) {
  int rc = SL_OK;
  man->version = SL_CKIO_VERSION;
  man->world_size = W;
  man->zero = Z;
  man->shard_group = S;
  man->replica_size = W / S;
  man->align = align;
#ifdef SL_USE_ZSTD
  snprintf(man->compression, sizeof man->compression, "zstd");
#else
  snprintf(man->compression, sizeof man->compression, "none");
#endif
  char cfgtext[4400];
  snprintf(cfgtext, sizeof cfgtext, "converted-from=%s\n", hf);
  man->config = strdup(cfgtext);
  if ((man->model_config = calloc(1, SL_MODEL_CANON_MAX)) &&
      sl_model_canonical(&m->cfg, 0, man->model_config, SL_MODEL_CANON_MAX))
    rc = SL_EINTERNAL;
  if (man->model_config)
    snprintf(man->model_hash, sizeof man->model_hash, "%016llx", (unsigned long long)sl_canon_hash(man->model_config));
  man->nunits = m->nunits;
  man->units = calloc((size_t)m->nunits, sizeof *man->units);
  man->nfiles = S;
  man->files = calloc((size_t)S, sizeof *man->files);
  if (!man->units || !man->files || !man->config || !man->model_config) rc = sl_fail(SL_ENOMEM, "out of memory");
  for (int u = 0; u < m->nunits && !rc; u++) {
    sl_ckio_unit *U = &man->units[u];
    sl_slice s;
    sl_shard_slice(m->units[u].numel, S, align, 0, &s);
    snprintf(U->kind, sizeof U->kind, "%s", m->units[u].kind);
    U->numel = m->units[u].numel;
    U->padded = s.padded;
    U->shard = s.shard;
    U->ntensors = m->units[u].ntensors;
    if (!(U->t = calloc((size_t)U->ntensors + 1, sizeof *U->t))) {
      rc = SL_ENOMEM;
      break;
    }
    for (int i = 0; i < U->ntensors; i++) {
      const sl_tensor_spec *t = &m->units[u].t[i];
      snprintf(U->t[i].name, sizeof U->t[i].name, "%s", t->name);
      U->t[i].ndim = t->ndim;
      for (int d = 0; d < 3; d++) U->t[i].shape[d] = t->shape[d];
      U->t[i].offset = t->offset;
      U->t[i].numel = t->numel;
    }
  }
  for (int r = 0; r < S && !rc; r++) {
    man->files[r] = wr[r].meta;
    memset(&wr[r].meta, 0, sizeof wr[r].meta);
  }
  return rc;
}

/* The expert bias an HF directory holds (--save's e_score_correction_bias) into the manifest: a resume restores it. */
static int hf_moe_bias(const sl_model *m, const sl_st_set *set, sl_ckio_manifest *man) {
  int64_t n = m->cfg.num_hidden_layers * m->cfg.moe_experts;
  int found = 0;
  if (!n) return SL_OK;
  if (!(man->moe_bias = malloc((size_t)n * sizeof *man->moe_bias))) return sl_fail(SL_ENOMEM, "out of memory");
  int rc = sl_model_moe_bias_read(&m->cfg, set, man->moe_bias, &found);
  if (!rc && found) man->n_moe_bias = n;
  else free(man->moe_bias), man->moe_bias = NULL;
  return rc;
}

static int to_ckpt(const char *hf, const char *ck, int W, int Z, int S, int64_t align) {
  sl_model *m = NULL;
  sl_st_set *set = NULL;
  sl_ckio_writer *wr = NULL;
  float *flat = NULL;
  sl_ckio_manifest man;
  memset(&man, 0, sizeof man);
  char tmp[4200] = {0};
  if (S <= 0) S = W;
  if (W < 1 || S < 1 || W % S || Z < 0 || Z > 3 || align < 1)
    return sl_fail(SL_EINPUT,
                   "--world-size (%d) >= 1, --shard-group (%d) dividing it, --zero (%d) in 0..3 and "
                   "--align (%lld) >= 1 are required",
                   W, S, Z, (long long)align);
  int rc = sl_precheck_out("to-ckpt", ck, 0, 0);
  if (!rc) rc = load_specs(hf, &m);
  if (!rc && (rc = sl_st_open_dir(hf, &set)) == SL_OK && !set)
    rc = sl_fail(SL_EINPUT, "%s: no model.safetensors or model.safetensors.index.json", hf);
  int64_t *have = NULL;
  int nhave = 0;
  struct stat csb;
  if (!rc && stat(ck, &csb) == 0 && (rc = sl_ckio_list(ck, &have, &nhave)) == SL_OK && nhave > 0)
    rc = sl_fail(SL_EINPUT,
                 "%s already holds %d checkpoint%s (newest: step %lld); writing step 0 there would move "
                 "`latest` back: convert into a new directory",
                 ck, nhave, nhave > 1 ? "s" : "", (long long)have[0]);
  free(have);
  if (!rc) rc = sl_mkdirs(ck);
  if (!rc) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-0-%lx%x", ck, (long)ts.tv_nsec, (unsigned)getpid());
    if (mkdir(tmp, 0755) != 0) rc = sl_fail(SL_EIO, "%s: cannot create", tmp);
  }
  if (!rc && !(wr = calloc((size_t)S, sizeof *wr))) rc = sl_fail(SL_ENOMEM, "out of memory");
  for (int r = 0; r < S && !rc; r++) rc = sl_ckio_writer_open(&wr[r], tmp, r);
  if (!rc && !(flat = sl_alloc((size_t)sl_model_max_unit_numel(m) * 4, "convert buffer"))) rc = SL_ENOMEM;
  for (int u = 0; u < (m ? m->nunits : 0) && !rc; u++) { /* one unit in memory at a time */
    rc = sl_model_unit_load(m, u, set, 0, flat);
    for (int r = 0; r < S && !rc; r++) {
      sl_slice s;
      sl_shard_slice(m->units[u].numel, S, align, r, &s);
      if (s.valid > 0) rc = sl_ckio_writer_add(&wr[r], u, s.offset, s.offset + s.valid, flat + s.offset, NULL, NULL);
    }
  }
  for (int r = 0; r < S && wr && !rc; r++) rc = sl_ckio_writer_close(&wr[r]);
  if (!rc) rc = fill_manifest(hf, m, wr, W, Z, S, align, &man);
  if (!rc) rc = hf_moe_bias(m, set, &man);
  if (!rc) rc = sl_ckio_write_manifest(tmp, &man);
  if (!rc) rc = sl_ckio_fsync_path(tmp);
  if (!rc) rc = sl_ckio_commit(ck, tmp, 0, NULL, NULL);
  if (!rc) {
    tmp[0] = 0;
    printf("wrote %s/step-000000 (%d file%s for world size %d, ZeRO-%d, shard group %d; Adam state zero)\n", ck, S,
           S > 1 ? "s" : "", W, Z, S);
  }
  for (int r = 0; wr && r < S; r++) {
    if (wr[r].fd > 0) sl_ckio_writer_abort(&wr[r]);
    sl_ckio_file_free(&wr[r].meta);
  }
  if (tmp[0]) sl_ckio_rmtree(tmp);
  free(wr);
  sl_free(flat);
  sl_ckio_manifest_free(&man);
  if (set) sl_st_close_set(set);
  sl_model_destroy(m);
  return rc;
}

int sl_tool_convert(int argc, char **argv) {
  const char *from_ckpt = NULL, *model_cfg = NULL, *to_hf_dir = NULL, *from_hf = NULL, *to_ckpt_dir = NULL;
  const char *kind = "master", *save_dtype = "auto";
  int64_t max_shard = 0, align = 16;
  int W = 1, Z = 3, S = 0;
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!v) {
      fprintf(stderr, "shardlm convert: %s needs a value\n", a);
      usage(stderr);
      return 2;
    }
    char *end = NULL;
    if (!strcmp(a, "--from-ckpt")) from_ckpt = v;
    else if (!strcmp(a, "--model-config")) model_cfg = v;
    else if (!strcmp(a, "--to-hf")) to_hf_dir = v;
    else if (!strcmp(a, "--from-hf")) from_hf = v;
    else if (!strcmp(a, "--to-ckpt")) to_ckpt_dir = v;
    else if (!strcmp(a, "--kind")) kind = v;
    else if (!strcmp(a, "--save-dtype")) save_dtype = v;
    else if (!strcmp(a, "--max-shard-size") || !strcmp(a, "--world-size") || !strcmp(a, "--zero") ||
             !strcmp(a, "--shard-group") || !strcmp(a, "--align")) {
      long long x = strtoll(v, &end, 10);
      if (!*v || *end || x < 0) {
        fprintf(stderr, "shardlm convert: %s needs a non-negative integer, found '%s'\n", a, v);
        return 2;
      }
      if (!strcmp(a, "--max-shard-size")) max_shard = x;
      else if (!strcmp(a, "--world-size")) W = (int)x;
      else if (!strcmp(a, "--zero")) Z = (int)x;
      else if (!strcmp(a, "--shard-group")) S = (int)x;
      else align = x;
    } else {
      fprintf(stderr, "shardlm convert: unknown flag '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  int rc;
  if (from_ckpt && model_cfg && to_hf_dir && !from_hf && !to_ckpt_dir) {
    int k = -1;
    for (int j = 0; j < SL_CKIO_NKINDS; j++)
      if (!strcmp(kind, sl_ckio_kind_names[j])) k = j;
    if (k < 0) {
      fprintf(stderr, "shardlm convert: --kind must be master, exp_avg or exp_avg_sq\n");
      return 2;
    }
    if (strcmp(save_dtype, "auto") && strcmp(save_dtype, "fp32") && strcmp(save_dtype, "bf16") &&
        strcmp(save_dtype, "fp16")) {
      fprintf(stderr, "shardlm convert: --save-dtype must be auto, fp32, bf16 or fp16, found '%s'\n", save_dtype);
      return 2;
    }
    rc = to_hf(from_ckpt, model_cfg, to_hf_dir, max_shard, k, save_dtype);
  } else if (from_hf && to_ckpt_dir && !from_ckpt && !to_hf_dir) {
    rc = to_ckpt(from_hf, to_ckpt_dir, W, Z, S, align);
  } else {
    usage(stderr);
    return 2;
  }
  if (rc) {
    fprintf(stderr, "shardlm convert: %s\n", sl_errmsg());
    return rc == SL_EINPUT ? 2 : 1;
  }
  return 0;
}
