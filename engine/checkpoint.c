/* engine/checkpoint.c — collective save / load of sharded training
 * checkpoints: which rank writes which slice, the commit protocol with
 * agreement on success, fault injection for tests, loading with
 * resharding, verification and fallback to older checkpoints.
 * File formats and directory helpers: formats/ckpt_io.c. docs/checkpoint.md.
 */
#define _GNU_SOURCE
#include "engine/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "engine/agree.h"
#include "engine/expert_par.h"
#include "engine/tensor_par.h"
#include "formats/ckpt_io.h"
#include "formats/safetensors.h"

/* ---- fault injection (tests): SL_CKPT_FAULT=stage [SL_CKPT_FAULT_RANK=r]
 * [SL_CKPT_FAULT_STEP=s] [SL_CKPT_FAULT_ONCE=marker-file] raises SIGKILL when
 * the save reaches that stage. */
typedef struct {
  int rank;
  int64_t step;
} fault_ctx;

static void fault_at(const char *stage, void *vctx) {
  const fault_ctx *fc = vctx;
  const char *want = sl_env_str("SL_CKPT_FAULT");
  if (!want || strcmp(want, stage)) return;
  if (sl_env_set("SL_CKPT_FAULT_RANK") && sl_env_int("SL_CKPT_FAULT_RANK") != fc->rank) return;
  if (sl_env_set("SL_CKPT_FAULT_STEP") && sl_env_int("SL_CKPT_FAULT_STEP") != fc->step) return;
  const char *once = sl_env_str("SL_CKPT_FAULT_ONCE"); /* marker file: fire only the first time */
  if (once && once[0]) {
    FILE *mf = fopen(once, "r");
    if (mf) {
      fclose(mf);
      return;
    }
    if ((mf = fopen(once, "w"))) fclose(mf);
  }
  fprintf(stderr, "[rank %d] SL_CKPT_FAULT: killing the process at save stage '%s' of step %lld\n", fc->rank, stage,
          (long long)fc->step);
  fflush(stderr);
  raise(SIGKILL);
}

/* Every rank learns whether every rank succeeded; on failure every rank
 * returns the first failing rank's code with its message. */
enum { VOTE_BYTES = 1024 };
static int agree(sl_comm *w, int rc) {
  int W = sl_comm_size(w), me = sl_comm_rank(w);
  char *mine = calloc(1, VOTE_BYTES), *all = calloc((size_t)W, VOTE_BYTES);
  if (!mine || !all) {
    free(mine);
    free(all);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  int32_t c = rc;
  memcpy(mine, &c, 4);
  if (rc) snprintf(mine + 4, VOTE_BYTES - 4, "%s", sl_errmsg());
  if (sl_comm_allgather_sync(w, mine, all, VOTE_BYTES, SL_U8) != SL_COMM_OK) {
    free(mine);
    free(all);
    return sl_fail(SL_ECOMM, "checkpoint: status all-gather failed: %s", sl_comm_last_error());
  }
  int out = SL_OK;
  for (int r = 0; r < W; r++) {
    memcpy(&c, all + (size_t)r * VOTE_BYTES, 4);
    if (!c) continue;
    if (rc && r != me) sl_log(SL_LOG_WARN, "checkpoint: %s", sl_errmsg()); /* keep our own reason visible */
    out = W > 1 ? sl_fail(c, "rank %d: %s", r, all + (size_t)r * VOTE_BYTES + 4)
                : sl_fail(c, "%s", all + (size_t)r * VOTE_BYTES + 4);
    break;
  }
  free(mine);
  free(all);
  return out;
}

static uint64_t rnd64(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 17);
  return sl_mix64(z);
}

/* ---- save ----------------------------------------------------------------------- */
static int build_manifest(const sl_ckpt_state *st, sl_ckio_manifest *man) {
  const sl_model *m = st->m;
  memset(man, 0, sizeof *man);
  man->version = SL_CKIO_VERSION;
  man->step = st->step;
  man->next_sample = st->next_sample;
  man->seed = st->rng_seed;
  man->has_seed = 1;
  if (st->moe_bias && st->n_moe_bias > 0) {
    if (!(man->moe_bias = malloc((size_t)st->n_moe_bias * sizeof *man->moe_bias)))
      return sl_fail(SL_ENOMEM, "out of memory");
    memcpy(man->moe_bias, st->moe_bias, (size_t)st->n_moe_bias * sizeof *man->moe_bias);
    man->n_moe_bias = st->n_moe_bias;
  }
  man->world_size = sl_comm_size(st->world);
  man->zero = st->cfg ? (int)st->cfg->zero : 0;
  int tp = sl_tpar_ckpt_on(st); /* one file of whole units (engine/tensor_par.c) */
  man->shard_group = tp ? 1 : sl_fsdp_shard_size(st->f);
  man->replica_size = tp ? 1 : sl_fsdp_replica_size(st->f);
  man->align = 1;
  if (m->nunits > 0 && !tp) { /* recover the alignment the runtime padded with */
    sl_slice s = sl_fsdp_slice(st->f, 0);
    for (int64_t a = s.padded / man->shard_group; a >= 1; a--) {
      sl_slice t;
      int ok = 1;
      for (int u = 0; u < m->nunits && ok; u++) {
        if (sl_fsdp_slice(st->f, u).numel != m->units[u].numel) continue; /* another pipeline stage's unit */
        sl_shard_slice(m->units[u].numel, man->shard_group, a, 0, &t);
        ok = t.padded == sl_fsdp_slice(st->f, u).padded;
      }
      if (ok) {
        man->align = a;
        break;
      }
    }
  }
#ifdef SL_USE_ZSTD
  snprintf(man->compression, sizeof man->compression, "zstd");
#else
  snprintf(man->compression, sizeof man->compression, "none");
#endif
  enum { CAP = 16384 };
  man->config = calloc(1, CAP);
  if (!man->config) return sl_fail(SL_ENOMEM, "out of memory");
  if (st->cfg) sl_train_cfg_canonical(st->cfg, man->config, CAP);
  if (!(man->model_config = calloc(1, SL_MODEL_CANON_MAX)) ||
      sl_model_canonical(&m->cfg, 0, man->model_config, SL_MODEL_CANON_MAX))
    return sl_fail(SL_ENOMEM, "checkpoint: model config text");
  snprintf(man->model_hash, sizeof man->model_hash, "%016" PRIx64, sl_canon_hash(man->model_config));
  man->nunits = m->nunits;
  man->units = calloc((size_t)m->nunits, sizeof *man->units);
  if (!man->units) return sl_fail(SL_ENOMEM, "out of memory");
  for (int u = 0; u < m->nunits; u++) {
    const sl_unit_spec *us = &m->units[u];
    sl_ckio_unit *U = &man->units[u];
    sl_slice s = sl_fsdp_slice(st->f, u);
    if (s.numel != us->numel) /* another pipeline stage's unit: its owner's slicing (same group size and alignment) */
      sl_shard_slice(us->numel, man->shard_group, man->align, 0, &s);
    snprintf(U->kind, sizeof U->kind, "%s", us->kind);
    U->numel = sl_model_unit_whole_numel(m, u); /* the whole tensors (= numel at T = 1) */
    U->padded = tp ? U->numel : s.padded;
    U->shard = tp ? U->numel : s.shard;
    U->ntensors = us->ntensors;
    U->t = calloc((size_t)us->ntensors + 1, sizeof *U->t);
    if (!U->t) return sl_fail(SL_ENOMEM, "out of memory");
    int64_t at = 0; /* offset in the whole layout (= the spec's at T = 1) */
    for (int i = 0; i < us->ntensors; i++) {
      sl_ckio_tensor *t = &U->t[i];
      snprintf(t->name, sizeof t->name, "%s", us->t[i].name);
      t->ndim = us->t[i].ndim;
      for (int d = 0; d < 3; d++) t->shape[d] = us->t[i].full[d];
      t->offset = at;
      t->numel = us->t[i].full[0] * us->t[i].full[1] * us->t[i].full[2];
      at += t->numel;
    }
  }
  return SL_OK;
}

/* An FSDP writer's file: its slice of every unit its stage owns, closed (fsynced) in tmp. */
static int write_own_file(const sl_ckpt_state *st, sl_ckio_writer *wr, const char *tmp, int rank, fault_ctx *fc) {
  int rc = sl_ckio_writer_open(wr, tmp, rank);
  for (int u = 0; u < st->m->nunits && !rc; u++) {
    if (st->owns && !st->owns[u]) continue; /* the owner stage writes it */
    sl_slice s = sl_fsdp_slice(st->f, u);
    sl_fsdp_view_t v = sl_fsdp_view(st->f, u);
    int64_t lo = s.offset, hi = s.offset + s.valid, i = lo - v.offset, at = st->m->units[u].hold_lo;
    if (hi <= lo) continue; /* frames in the whole unit's coordinates: an EP rank's part starts at hold_lo */
    rc = sl_ckio_writer_add(wr, u, at + lo, at + hi, st->master[u] + i, st->mom[u] + i, st->var[u] + i);
  }
  if (!rc) fault_at("file-written", fc);
  if (!rc) rc = sl_ckio_writer_close(wr);
  if (!rc) fault_at("file-fsynced", fc);
  return rc;
}

/* A writer other than rank 0: its file entry to rank 0 (length, then the JSON text). */
static int send_entry(sl_comm *w, const sl_ckio_file *meta) {
  char *text = NULL;
  int rc = sl_ckio_file_dump(meta, &text);
  int64_t len = text ? (int64_t)strlen(text) + 1 : 0;
  sl_comm_req *q = NULL;
  if (sl_comm_send(w, &len, 1, SL_I64, 0, 7101, &q) != SL_COMM_OK || sl_comm_wait(q) != SL_COMM_OK ||
      (len && (sl_comm_send(w, text, len, SL_U8, 0, 7102, &q) != SL_COMM_OK || sl_comm_wait(q) != SL_COMM_OK)))
    rc = sl_fail(SL_ECOMM, "checkpoint: sending the file entry: %s", sl_comm_last_error());
  free(text);
  return rc;
}

/* Rank 0: the manifest, with its own file entry (*own, moved into it) and every other writer's, received
 * in writer order (all are received, also after an error). */
static int collect_manifest(const sl_ckpt_state *st, const int32_t *writers, int nw, sl_ckio_file *own,
                            sl_ckio_manifest *man) {
  sl_comm *w = st->world;
  int brc = build_manifest(st, man);
  if (!brc) {
    man->nfiles = nw;
    man->files = calloc((size_t)nw, sizeof *man->files);
    if (!man->files) brc = sl_fail(SL_ENOMEM, "out of memory");
  }
  if (!brc) {
    man->files[0] = *own;
    memset(own, 0, sizeof *own);
  }
  for (int i = 1; i < nw; i++) {
    int r = writers[i];
    int64_t len = 0;
    sl_comm_req *q = NULL;
    char *buf = NULL;
    int crc = SL_OK;
    if (sl_comm_recv(w, &len, 1, SL_I64, r, 7101, &q) != SL_COMM_OK || sl_comm_wait(q) != SL_COMM_OK)
      crc = sl_fail(SL_ECOMM, "checkpoint: receiving a file entry: %s", sl_comm_last_error());
    if (!crc && len > 0) {
      buf = malloc((size_t)len);
      if (!buf) crc = SL_ENOMEM;
      else if (sl_comm_recv(w, buf, len, SL_U8, r, 7102, &q) != SL_COMM_OK || sl_comm_wait(q) != SL_COMM_OK)
        crc = sl_fail(SL_ECOMM, "checkpoint: receiving a file entry: %s", sl_comm_last_error());
    }
    if (!crc && !brc)
      crc = len > 0 ? sl_ckio_file_parse(buf, (size_t)len - 1, &man->files[i])
                    : sl_fail(SL_EINTERNAL, "rank %d sent no file entry", r);
    free(buf);
    if (crc && !brc) brc = crc;
  }
  return brc;
}

/* The log line of a committed checkpoint: files, raw and stored sizes, time since t0. */
static void log_saved(int64_t step, const sl_ckio_manifest *man, double t0) {
  int64_t raw = 0, stored = 0;
  for (int i = 0; i < man->nfiles; i++)
    for (int p = 0; p < man->files[i].npieces; p++)
      for (int k = 0; k < SL_CKIO_NKINDS; k++) {
        raw += man->files[i].pieces[p].fr[k].raw;
        stored += man->files[i].pieces[p].fr[k].bytes;
      }
  sl_log(SL_LOG_INFO, "checkpoint step %lld: %d file%s, %.2f MiB -> %.2f MiB (%s, ratio %.3f) in %.2f s",
         (long long)step, man->nfiles, man->nfiles > 1 ? "s" : "", raw / 1048576.0, stored / 1048576.0,
         man->compression, stored > 0 ? (double)raw / (double)stored : 0.0, sl_now_s() - t0);
}

int sl_ckpt_save(const char *ckpt_dir, const sl_ckpt_state *st, int keep_last) {
  sl_comm *w = st->world;
  int W = sl_comm_size(w), rank = sl_comm_rank(w);
  int tp = sl_tpar_ckpt_on(st);
  /* world ranks 0..S-1 (S: the shard group) without a pipeline; tensor parallel: world rank 0 */
  int writer = tp ? (st->owns ? st->stage_writer : rank == 0) : sl_fsdp_replica_rank(st->f) == 0;
  fault_ctx fc = {rank, st->step};
  double t0 = sl_now_s();
  char tmp[4200] = {0};
  int rc = SL_OK;
  sl_ckio_writer wr;
  memset(&wr, 0, sizeof wr);
  wr.fd = -1;
  if (rank == 0) {
    rc = sl_mkdirs(ckpt_dir);
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-%lld-%016" PRIx64, ckpt_dir, (long long)st->step, rnd64());
    if (!rc && mkdir(tmp, 0755) != 0) rc = sl_fail(SL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
  }
  if (W > 1 && sl_comm_broadcast_sync(w, tmp, sizeof tmp, SL_U8, 0) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "checkpoint: broadcast failed: %s", sl_comm_last_error());
  /* the writers in world rank order (0..S-1; under pipeline parallelism the
   * first shard group of every stage) */
  int32_t *writers = calloc((size_t)W, sizeof(int32_t)), me = writer;
  if (!writers) return sl_fail(SL_ENOMEM, "out of memory");
  if (sl_comm_allgather_sync(w, &me, writers, 1, SL_I32) != SL_COMM_OK) {
    free(writers);
    return sl_fail(SL_ECOMM, "checkpoint: writer list: %s", sl_comm_last_error());
  }
  int nw = 0;
  for (int r = 0; r < W; r++)
    if (writers[r]) writers[nw++] = r;
  if ((rc = agree(w, rc))) goto fail;

  /* every writer: its slice of every unit, one file (TP: rank 0 the whole units) */
  if (tp) {
    rc = sl_tpar_ckpt_write(st, &wr, tmp);
  } else if (writer) {
    rc = write_own_file(st, &wr, tmp, rank, &fc);
  }
  if ((rc = agree(w, rc))) goto fail;
  fault_at("files-agreed", &fc);

  /* writers hand their file entries to rank 0, which writes the manifest */
  if (writer && rank != 0) rc = send_entry(w, &wr.meta);
  if (rank == 0) {
    sl_ckio_manifest man;
    rc = collect_manifest(st, writers, nw, &wr.meta, &man);
    if (!rc) rc = sl_ckio_write_manifest(tmp, &man);
    if (!rc) fault_at("manifest-written", &fc);
    if (!rc) rc = sl_ckio_fsync_path(tmp);
    if (!rc) fault_at("tmpdir-fsynced", &fc);
    if (!rc) rc = sl_ckio_commit(ckpt_dir, tmp, st->step, fault_at, &fc);
    if (!rc) {
      tmp[0] = 0; /* committed: nothing to clean */
      log_saved(st->step, &man, t0);
      rc = sl_ckio_retain(ckpt_dir, keep_last);
      if (!rc) fault_at("retained", &fc);
    }
    sl_ckio_manifest_free(&man);
  }
  sl_ckio_file_free(&wr.meta);
  if ((rc = agree(w, rc))) goto fail;
  free(writers);
  return SL_OK;
fail:
  free(writers);
  if (writer && wr.fd >= 0) sl_ckio_writer_abort(&wr);
  if (rank == 0 && tmp[0]) sl_ckio_rmtree(tmp);
  rc = sl_fail_ctx(rc, "checkpoint step %lld was not written to %s (earlier checkpoints are untouched)",
                   (long long)st->step, ckpt_dir);
  sl_log(SL_LOG_ERROR, "%s", sl_errmsg()); /* on every rank, before the launcher tears the job down */
  return rc;
}

/* ---- load ----------------------------------------------------------------------- */
static int check_model(const char *dir, const sl_ckio_manifest *man, const sl_model *m) {
  if (man->nunits != m->nunits)
    return sl_fail(SL_EINPUT,
                   "%s/manifest.json: %d units, but the model has %d: the checkpoint was written for a "
                   "different model",
                   dir, man->nunits, m->nunits);
  for (int u = 0; u < m->nunits; u++) {
    const sl_ckio_unit *U = &man->units[u];
    const sl_unit_spec *us = &m->units[u];
    int64_t numel = sl_model_unit_whole_numel(m, u), at = 0; /* the whole layout (= the spec at T = 1) */
    if (U->numel != numel || U->ntensors != us->ntensors)
      return sl_fail(SL_EINPUT,
                     "%s/manifest.json: unit %d (%s) has %lld elements in %d tensors, the model's %s has "
                     "%lld in %d: a different model",
                     dir, u, U->kind, (long long)U->numel, U->ntensors, us->kind, (long long)numel, us->ntensors);
    for (int i = 0; i < us->ntensors; i++) {
      const sl_ckio_tensor *a = &U->t[i];
      const sl_tensor_spec *b = &us->t[i];
      int same = !strcmp(a->name, b->name) && a->ndim == b->ndim && a->offset == at;
      at += b->full[0] * b->full[1] * b->full[2];
      for (int d = 0; same && d < b->ndim; d++) same = a->shape[d] == b->full[d];
      if (!same)
        return sl_fail(SL_EINPUT,
                       "%s/manifest.json: unit %d tensor %d is %s at offset %lld, the model expects %s at "
                       "%lld with its shape: a different model",
                       dir, u, i, a->name, (long long)a->offset, b->name,
                       (long long)(at - b->full[0] * b->full[1] * b->full[2]));
    }
  }
  return SL_OK;
}

static void note_config(const char *dir, const char *old, const sl_train_cfg *cfg) {
  if (!cfg || !old || !old[0]) return;
  char *now = calloc(1, 16384);
  if (!now) return;
  if (sl_train_cfg_canonical(cfg, now, 16384) == SL_OK && strcmp(now, old)) {
    const char *a = old;
    int shown = 0;
    while (*a && shown < 8) {
      const char *e = strchr(a, '\n');
      size_t n = e ? (size_t)(e - a) : strlen(a);
      char line[512];
      snprintf(line, sizeof line, "%.*s\n", (int)(n < 500 ? n : 500), a);
      if (!strstr(now, line)) {
        sl_log0(SL_LOG_INFO, "%s: written with %.*s (now different)", dir, (int)n, a);
        shown++;
      }
      a += n + (e ? 1 : 0);
    }
  }
  free(now);
}

/* SL_CKPT_DUMP=FILE: write what was loaded (full, unpadded master / exp_avg /
 * exp_avg_sq per tensor) as one safetensors file from rank 0. Debug hook for
 * the resharding test; holds the whole model in memory on every rank. */
typedef struct {
  const float *all;
  const int64_t *src; /* (3 * ntensors) first element of each tensor in all */
} dump_ctx;

static int dump_fill(void *vctx, int64_t index, const sl_st_wtensor *wt, float *dst) {
  dump_ctx *d = vctx;
  int64_t n = 1;
  for (int i = 0; i < wt->ndim; i++) n *= wt->shape[i];
  memcpy(dst, d->all + d->src[index], (size_t)n * 4);
  return SL_OK;
}

static int dump_loaded(const char *path, sl_ckpt_state *st) {
  const sl_model *m = st->m;
  int64_t P = sl_model_num_params(m);
  float *all = sl_alloc((size_t)(3 * P + 1) * 4, "checkpoint dump");
  if (!all) return SL_ENOMEM;
  int rc = SL_OK;
  int64_t off = 0;
  float **src[3] = {st->master, st->mom, st->var};
  for (int u = 0; u < m->nunits && !rc; u++) {
    for (int k = 0; k < 3 && !rc; k++) {
      float *whole = all + k * P + off;
      rc = sl_fsdp_gather_view(st->f, u, src[k][u], whole + m->units[u].hold_lo);
      if (!rc) rc = sl_epar_gather_part(st->ep, &m->units[u], whole); /* the EP ranks' parts, in place */
    }
    off += m->units[u].numel;
  }
  int nt = 0;
  for (int u = 0; u < m->nunits; u++) nt += m->units[u].ntensors;
  sl_st_wtensor *ws = calloc((size_t)(3 * nt), sizeof *ws);
  char *names = calloc((size_t)(3 * nt), SL_TENSOR_NAME_MAX + 16);
  int64_t *srcs = calloc((size_t)(3 * nt), sizeof(int64_t));
  if (!ws || !names || !srcs) rc = SL_ENOMEM;
  int64_t base = 0;
  for (int k = 0, n = 0; !rc && k < 3; k++, base = 0)
    for (int u = 0; u < m->nunits; base += m->units[u].numel, u++)
      for (int i = 0; i < m->units[u].ntensors; i++, n++) {
        const sl_tensor_spec *t = &m->units[u].t[i];
        char *nm = names + (size_t)n * (SL_TENSOR_NAME_MAX + 16);
        snprintf(nm, SL_TENSOR_NAME_MAX + 16, "%s.%s", sl_ckio_kind_names[k], t->name);
        ws[n].name = nm;
        ws[n].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) ws[n].shape[d] = t->shape[d];
        ws[n].dtype = SL_ST_F32;
        srcs[n] = (int64_t)k * P + base + t->offset;
      }
  dump_ctx d = {all, srcs};
  if (!rc && sl_comm_rank(st->world) == 0) rc = sl_st_write_file(path, ws, 3 * nt, dump_fill, &d);
  free(ws);
  free(names);
  free(srcs);
  sl_free(all);
  return rc;
}

/* The expert bias from the manifest (none there: zero, said once; none here: the model takes the manifest's). */
static int load_moe_bias(const char *dir, const sl_ckio_manifest *man, sl_ckpt_state *st) {
  int64_t n = st->m->cfg.num_hidden_layers * st->m->cfg.moe_experts;
  if (!st->moe_bias && man->moe_bias && n && man->n_moe_bias == n) { /* without --moe-balance bias */
    int none = st->m->cfg.moe_balance == SL_MOE_BALANCE_NONE;
    sl_log0(none ? SL_LOG_WARN : SL_LOG_INFO, "%s holds an expert bias: %s", dir,
            none ? "not used (--moe-balance none)" : "it keeps shifting the top-k selection, held fixed");
    return sl_model_moe_bias_set(st->m, man->moe_bias);
  }
  if (!st->moe_bias) return SL_OK;
  if (!man->moe_bias) { /* not the --model directory's either: the checkpoint's state is the whole state */
    sl_log0(SL_LOG_WARN, "%s holds no expert bias (written without --moe-balance bias): it starts from zero", dir);
    memset(st->moe_bias, 0, (size_t)st->n_moe_bias * sizeof *st->moe_bias);
    return SL_OK;
  }
  if (man->n_moe_bias != st->n_moe_bias)
    return sl_fail(SL_EINPUT, "%s: the expert bias has %lld values, this model's %lld (layers x experts)", dir,
                   (long long)man->n_moe_bias, (long long)st->n_moe_bias);
  memcpy(st->moe_bias, man->moe_bias, (size_t)st->n_moe_bias * sizeof *st->moe_bias);
  return SL_OK;
}

static int try_load(const char *dir, sl_ckpt_state *st) {
  sl_ckio_manifest man;
  int rc = sl_ckio_manifest_load(dir, &man);
  if (rc) return rc;
  int W = sl_comm_size(st->world), rank = sl_comm_rank(st->world);
  rc = check_model(dir, &man, st->m);
  if (!rc) rc = sl_check_ckpt_model(dir, man.model_config, &st->m->cfg);
  /* every file is checksummed in full by one rank; each rank also checks
   * every frame it reads */
  for (int i = rank; !rc && i < man.nfiles; i += W) rc = sl_ckio_verify_file(dir, &man, i);
  float **dst[3] = {st->master, st->mom, st->var};
  for (int u = 0; u < st->m->nunits && !rc; u++) {
    sl_fsdp_view_t v = sl_fsdp_view(st->f, u);
    for (int k = 0; k < 3 && !rc; k++) {
      if (!dst[k][u]) continue;  /* another pipeline stage's unit */
      if (sl_tpar_ckpt_on(st)) { /* this rank's slices of the whole units */
        rc = sl_tpar_ckpt_read(dir, &man, st, u, k, dst[k][u]);
        continue;
      }
      memset(dst[k][u], 0, (size_t)v.count * 4);
      int64_t at = st->m->units[u].hold_lo + v.offset; /* this EP rank's part of an EP-split unit */
      if (v.valid > 0) rc = sl_ckio_read_range(dir, &man, u, k, at, at + v.valid, dst[k][u]);
    }
  }
  if (!rc) rc = load_moe_bias(dir, &man, st);
  if (!rc) {
    st->step = man.step;
    st->next_sample = man.next_sample;
    if (man.has_seed) st->rng_seed = man.seed;
    if (rank == 0) note_config(dir, man.config, st->cfg);
    if (man.config && man.config[0] && !(st->loaded_config = strdup(man.config))) rc = SL_ENOMEM;
    sl_log0(SL_LOG_INFO, "loaded %s: step %lld, written by %d rank%s (ZeRO-%d, shard group %d), loading on %d", dir,
            (long long)man.step, man.world_size, man.world_size > 1 ? "s" : "", man.zero, man.shard_group, W);
  }
  sl_ckio_manifest_free(&man);
  return rc;
}

int sl_ckpt_load(const char *ckpt_dir, sl_ckpt_state *st, int *found) {
  *found = 0;
  sl_comm *w = st->world;
  int rank = sl_comm_rank(w), W = sl_comm_size(w);
  int64_t hdr[2] = {0, 0}; /* status, count */
  int64_t *steps = NULL;
  int n = 0;
  if (rank == 0) {
    int cleaned = sl_ckio_clean_tmp(ckpt_dir);
    if (cleaned)
      sl_log(SL_LOG_INFO, "%s: removed %d unfinished checkpoint director%s (.tmp-*)", ckpt_dir, cleaned,
             cleaned > 1 ? "ies" : "y");
    hdr[0] = sl_ckio_list(ckpt_dir, &steps, &n);
    hdr[1] = n;
  }
  if (W > 1 && sl_comm_broadcast_sync(w, hdr, 2, SL_I64, 0) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "checkpoint: broadcast failed: %s", sl_comm_last_error());
  int rc = agree(w, (int)hdr[0]);
  if (rc) {
    free(steps);
    return rc;
  }
  n = (int)hdr[1];
  if (n == 0) return SL_OK;
  if (rank != 0 && !(steps = calloc((size_t)n, sizeof(int64_t)))) rc = SL_ENOMEM;
  if ((rc = agree(w, rc))) {
    free(steps);
    return rc;
  }
  if (W > 1 && sl_comm_broadcast_sync(w, steps, n, SL_I64, 0) != SL_COMM_OK) {
    free(steps);
    return sl_fail(SL_ECOMM, "checkpoint: broadcast failed: %s", sl_comm_last_error());
  }
  char first_err[2048] = {0}, dir[4200];
  for (int i = 0; i < n; i++) {
    sl_ckio_step_dir(ckpt_dir, steps[i], dir, sizeof dir);
    rc = agree(w, try_load(dir, st));
    if (!rc) {
      if (i > 0)
        sl_log0(SL_LOG_WARN, "resumed from the older checkpoint %s because the newer one was refused: %s", dir,
                first_err);
      const char *dp = sl_env_str("SL_CKPT_DUMP");
      if (dp && dp[0]) rc = agree(w, dump_loaded(dp, st));
      free(steps);
      if (rc) return rc;
      *found = 1;
      return SL_OK;
    }
    if (rc == SL_ECOMM || rc == SL_ENOMEM) break;
    sl_log0(SL_LOG_WARN, "checkpoint %s refused: %s", dir, sl_errmsg());
    if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", sl_errmsg());
  }
  free(steps);
  if (rc == SL_ECOMM || rc == SL_ENOMEM) return rc;
  return sl_fail(SL_EINPUT, "%s: no valid checkpoint among %d (the newest was refused: %s)", ckpt_dir, n, first_err);
}
