/* formats/ckpt_io.c — checkpoint files without communication: XXH64,
 * shuffle + zstd frames, manifest JSON, shard writer, range reader, and the
 * directory commit / scan / retention helpers. See formats/ckpt_io.h. */
#define _GNU_SOURCE
#include "formats/ckpt_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef SL_USE_ZSTD
#include <zstd.h>
#endif

#include "base/base.h"
#include "base/env.h"

const char *const sl_ckio_kind_names[SL_CKIO_NKINDS] = {"master", "exp_avg", "exp_avg_sq"};

/* ---- XXH64 ------------------------------------------------------------------- */
#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull
static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t xround(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
static uint64_t xmerge(uint64_t acc, uint64_t v) { return (acc ^ xround(0, v)) * P1 + P4; }

void sl_xxh64_init(sl_xxh64_state *s, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->seed = seed;
  s->v[0] = seed + P1 + P2;
  s->v[1] = seed + P2;
  s->v[2] = seed;
  s->v[3] = seed - P1;
}

void sl_xxh64_update(sl_xxh64_state *s, const void *vp, size_t n) {
  const uint8_t *p = vp;
  s->total += n;
  if (s->nbuf) {
    size_t take = 32 - (size_t)s->nbuf < n ? 32 - (size_t)s->nbuf : n;
    memcpy(s->buf + s->nbuf, p, take);
    s->nbuf += (int)take;
    p += take;
    n -= take;
    if (s->nbuf < 32) return;
    for (int i = 0; i < 4; i++) s->v[i] = xround(s->v[i], rd64(s->buf + 8 * i));
    s->nbuf = 0;
  }
  while (n >= 32) {
    for (int i = 0; i < 4; i++) s->v[i] = xround(s->v[i], rd64(p + 8 * i));
    p += 32;
    n -= 32;
  }
  memcpy(s->buf, p, n);
  s->nbuf = (int)n;
}

uint64_t sl_xxh64_digest(const sl_xxh64_state *s) {
  uint64_t h;
  if (s->total >= 32) {
    h = rotl(s->v[0], 1) + rotl(s->v[1], 7) + rotl(s->v[2], 12) + rotl(s->v[3], 18);
    for (int i = 0; i < 4; i++) h = xmerge(h, s->v[i]);
  } else {
    h = s->seed + P5;
  }
  h += s->total;
  const uint8_t *p = s->buf;
  int n = s->nbuf;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ xround(0, rd64(p)), 27) * P1 + P4;
  if (n >= 4) {
    h = rotl(h ^ ((uint64_t)rd32(p) * P1), 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; p++, n--) h = rotl(h ^ (*p * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t sl_xxh64(const void *p, size_t n, uint64_t seed) {
  sl_xxh64_state s;
  sl_xxh64_init(&s, seed);
  sl_xxh64_update(&s, p, n);
  return sl_xxh64_digest(&s);
}

/* ---- small file helpers ------------------------------------------------------- */

static int pread_all(int fd, void *p, size_t n, int64_t off, const char *path) {
  char *c = p;
  while (n > 0) {
    ssize_t r = pread(fd, c, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sl_fail(SL_EIO, "%s: read failed: %s", path, strerror(errno));
    if (r == 0)
      return sl_fail(SL_EINPUT, "%s: truncated (ends before byte %lld the manifest records)", path,
                     (long long)(off + (int64_t)n));
    c += r;
    n -= (size_t)r;
    off += r;
  }
  return SL_OK;
}

int sl_ckio_fsync_path(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return sl_fail(SL_EIO, "%s: cannot open to fsync: %s", path, strerror(errno));
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  if (rc) return sl_fail(SL_EIO, "%s: fsync failed: %s", path, strerror(e));
  return SL_OK;
}

/* ---- frames --------------------------------------------------------------------- */
#ifdef SL_USE_ZSTD
static void shuffle4(uint8_t *dst, const uint8_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    for (int p = 0; p < 4; p++) dst[p * n + i] = src[i * 4 + p];
}
#endif
static void unshuffle4(uint8_t *dst, const uint8_t *src, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    for (int p = 0; p < 4; p++) dst[i * 4 + p] = src[p * n + i];
}

/* Encodes n floats; *out (malloc'd) holds the stored bytes. */
static int encode(const float *x, int64_t n, int try_shuffle, int level, uint8_t **out, int64_t *outn, int *shuffled,
                  int *zstd) {
  size_t raw = (size_t)n * 4;
  *shuffled = 0;
  *zstd = 0;
#ifdef SL_USE_ZSTD
  size_t cap = ZSTD_compressBound(raw);
  uint8_t *a = malloc(cap ? cap : 1), *b = NULL, *sh = NULL;
  if (!a) return sl_fail(SL_ENOMEM, "checkpoint: out of memory compressing %zu bytes", raw);
  size_t na = ZSTD_compress(a, cap, x, raw, level);
  if (ZSTD_isError(na)) {
    free(a);
    return sl_fail(SL_EINTERNAL, "zstd: %s", ZSTD_getErrorName(na));
  }
  if (try_shuffle && n > 0) {
    sh = malloc(raw);
    b = malloc(cap);
    if (!sh || !b) {
      free(a);
      free(b);
      free(sh);
      return sl_fail(SL_ENOMEM, "checkpoint: out of memory");
    }
    shuffle4(sh, (const uint8_t *)x, n);
    size_t nb = ZSTD_compress(b, cap, sh, raw, level);
    free(sh);
    if (!ZSTD_isError(nb) && nb < na) {
      free(a);
      a = b;
      na = nb;
      b = NULL;
      *shuffled = 1;
    }
    free(b);
  }
  *out = a;
  *outn = (int64_t)na;
  *zstd = 1;
  return SL_OK;
#else
  (void)try_shuffle;
  (void)level;
  *out = malloc(raw ? raw : 1);
  if (!*out) return sl_fail(SL_ENOMEM, "checkpoint: out of memory");
  memcpy(*out, x, raw);
  *outn = (int64_t)raw;
  return SL_OK;
#endif
}

static int decode(const uint8_t *src, const sl_ckio_frame *fr, float *dst, const char *path) {
  size_t raw = (size_t)fr->raw;
  uint8_t *tmp = NULL, *target = fr->shuffle ? (tmp = malloc(raw ? raw : 1)) : (uint8_t *)dst;
  if (!target) return sl_fail(SL_ENOMEM, "checkpoint: out of memory");
  int rc = SL_OK;
  if (fr->zstd) {
#ifdef SL_USE_ZSTD
    size_t got = ZSTD_decompress(target, raw, src, (size_t)fr->bytes);
    if (ZSTD_isError(got) || got != raw)
      rc = sl_fail(SL_EINPUT, "%s: frame at byte %lld does not decompress to %lld bytes (%s)", path, (long long)fr->off,
                   (long long)fr->raw, ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size");
#else
    rc = sl_fail(SL_EINPUT, "%s: zstd-compressed, but this build has no zstd", path);
#endif
  } else if (fr->bytes != fr->raw) {
    rc = sl_fail(SL_EINPUT, "%s: stored frame of %lld bytes, expected %lld", path, (long long)fr->bytes,
                 (long long)fr->raw);
  } else {
    memcpy(target, src, raw);
  }
  if (!rc && fr->shuffle) unshuffle4((uint8_t *)dst, tmp, fr->raw / 4);
  free(tmp);
  return rc;
}

/* ---- writer ------------------------------------------------------------------------ */
int sl_ckio_writer_open(sl_ckio_writer *w, const char *dir, int rank) {
  memset(w, 0, sizeof *w);
  w->fd = -1;
  snprintf(w->meta.name, sizeof w->meta.name, "rank-%05d.bin", rank);
  w->meta.rank = rank;
  snprintf(w->path, sizeof w->path, "%s/%s", dir, w->meta.name);
  w->shuffle = sl_env_bool("SL_CKPT_SHUFFLE");
  w->level = (int)sl_env_int("SL_CKPT_ZSTD_LEVEL");
  sl_xxh64_init(&w->h, 0);
  w->fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (w->fd < 0) return sl_fail(SL_EIO, "%s: cannot create: %s", w->path, strerror(errno));
  return SL_OK;
}

int sl_ckio_writer_add(sl_ckio_writer *w, int u, int64_t lo, int64_t hi, const float *master, const float *m,
                       const float *v) {
  if (w->meta.npieces == w->meta.cap) {
    int nc = w->meta.cap ? 2 * w->meta.cap : 16;
    sl_ckio_piece *np = realloc(w->meta.pieces, sizeof *np * (size_t)nc);
    if (!np) return sl_fail(SL_ENOMEM, "checkpoint: out of memory");
    w->meta.pieces = np;
    w->meta.cap = nc;
  }
  sl_ckio_piece *pc = &w->meta.pieces[w->meta.npieces];
  memset(pc, 0, sizeof *pc);
  pc->unit = u;
  pc->lo = lo;
  pc->hi = hi;
  const float *src[SL_CKIO_NKINDS] = {master, m, v};
  float *zeros = NULL;
  int rc = SL_OK;
  for (int k = 0; k < SL_CKIO_NKINDS && !rc; k++) {
    if (!src[k]) {
      if (!zeros && !(zeros = calloc((size_t)(hi - lo) + 1, 4))) return sl_fail(SL_ENOMEM, "out of memory");
      src[k] = zeros;
    }
    uint8_t *buf = NULL;
    int64_t n = 0;
    sl_ckio_frame *fr = &pc->fr[k];
    if ((rc = encode(src[k], hi - lo, w->shuffle, w->level, &buf, &n, &fr->shuffle, &fr->zstd))) break;
    fr->off = w->meta.bytes;
    fr->bytes = n;
    fr->raw = (hi - lo) * 4;
    fr->xxh = sl_xxh64(buf, (size_t)n, 0);
    rc = sl_write_all(w->fd, buf, (size_t)n, w->path);
    if (!rc) {
      sl_xxh64_update(&w->h, buf, (size_t)n);
      w->meta.bytes += n;
      w->raw_total += fr->raw;
      w->stored_total += n;
    }
    free(buf);
  }
  free(zeros);
  if (!rc) w->meta.npieces++;
  return rc;
}

int sl_ckio_writer_close(sl_ckio_writer *w) {
  w->meta.xxh = sl_xxh64_digest(&w->h);
  int rc = SL_OK;
  if (fsync(w->fd) != 0) rc = sl_fail(SL_EIO, "%s: fsync failed: %s", w->path, strerror(errno));
  if (close(w->fd) != 0 && !rc) rc = sl_fail(SL_EIO, "%s: close failed: %s", w->path, strerror(errno));
  w->fd = -1;
  return rc;
}

void sl_ckio_writer_abort(sl_ckio_writer *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  sl_ckio_file_free(&w->meta);
}

/* ---- manifest JSON ----------------------------------------------------------------- */
static json_t *file_json(const sl_ckio_file *f) {
  char hex[24];
  json_t *o = json_object(), *ps = json_array();
  json_object_set_new(o, "name", json_string(f->name));
  json_object_set_new(o, "rank", json_integer(f->rank));
  json_object_set_new(o, "bytes", json_integer(f->bytes));
  snprintf(hex, sizeof hex, "%016" PRIx64, f->xxh);
  json_object_set_new(o, "xxh64", json_string(hex));
  for (int i = 0; i < f->npieces; i++) {
    const sl_ckio_piece *p = &f->pieces[i];
    json_t *po = json_object(), *frs = json_object();
    json_object_set_new(po, "unit", json_integer(p->unit));
    json_object_set_new(po, "lo", json_integer(p->lo));
    json_object_set_new(po, "hi", json_integer(p->hi));
    for (int k = 0; k < SL_CKIO_NKINDS; k++) {
      const sl_ckio_frame *fr = &p->fr[k];
      json_t *fo = json_object();
      json_object_set_new(fo, "offset", json_integer(fr->off));
      json_object_set_new(fo, "bytes", json_integer(fr->bytes));
      json_object_set_new(fo, "raw", json_integer(fr->raw));
      json_object_set_new(fo, "shuffle", json_boolean(fr->shuffle));
      json_object_set_new(fo, "zstd", json_boolean(fr->zstd));
      snprintf(hex, sizeof hex, "%016" PRIx64, fr->xxh);
      json_object_set_new(fo, "xxh64", json_string(hex));
      json_object_set_new(frs, sl_ckio_kind_names[k], fo);
    }
    json_object_set_new(po, "frames", frs);
    json_array_append_new(ps, po);
  }
  json_object_set_new(o, "pieces", ps);
  return o;
}

int sl_ckio_file_dump(const sl_ckio_file *f, char **text) {
  json_t *o = file_json(f);
  *text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return *text ? SL_OK : sl_fail(SL_ENOMEM, "checkpoint: out of memory");
}

/* "moe_expert_bias" (optional): an array of at most 2^24 finite numbers. */
static int parse_moe_bias(const char *path, json_t *b, sl_ckio_manifest *m) {
  if (!b) return SL_OK;
  size_t n = json_is_array(b) ? json_array_size(b) : 0;
  if (!n || n > (1u << 24))
    return sl_fail(SL_EINPUT, "%s: \"moe_expert_bias\" must be an array of 1 to 2^24 numbers", path);
  if (!(m->moe_bias = malloc(n * sizeof *m->moe_bias))) return sl_fail(SL_ENOMEM, "out of memory");
  m->n_moe_bias = (int64_t)n;
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(b, i);
    double x = json_number_value(v);
    if (!json_is_number(v) || !isfinite(x))
      return sl_fail(SL_EINPUT, "%s: \"moe_expert_bias\"[%zu] must be a finite number", path, i);
    m->moe_bias[i] = (float)x;
  }
  return SL_OK;
}

int sl_ckio_manifest_dump(const sl_ckio_manifest *m, char **text) {
  char hex[24];
  json_t *o = json_object();
  json_object_set_new(o, "format", json_string("shardlm-checkpoint"));
  json_object_set_new(o, "version", json_integer(m->version));
  json_object_set_new(o, "step", json_integer(m->step));
  json_object_set_new(o, "next_sample", json_integer(m->next_sample));
  snprintf(hex, sizeof hex, "%016" PRIx64, m->seed);
  json_object_set_new(o, "rng_seed", m->has_seed ? json_string(hex) : json_null());
  json_object_set_new(o, "world_size", json_integer(m->world_size));
  json_object_set_new(o, "zero", json_integer(m->zero));
  json_object_set_new(o, "shard_group", json_integer(m->shard_group));
  json_object_set_new(o, "replica_size", json_integer(m->replica_size));
  json_object_set_new(o, "align", json_integer(m->align));
  json_object_set_new(o, "dtype", json_string("F32"));
  json_object_set_new(o, "compression", json_string(m->compression));
  json_object_set_new(o, "checksum", json_string("xxh64"));
  json_object_set_new(o, "config", json_string(m->config ? m->config : ""));
  if (m->model_config) {
    json_object_set_new(o, "model_config", json_string(m->model_config));
    json_object_set_new(o, "model_hash", json_string(m->model_hash));
  }
  if (m->moe_bias) {
    json_t *b = json_array();
    for (int64_t i = 0; i < m->n_moe_bias; i++) json_array_append_new(b, json_real((double)m->moe_bias[i]));
    json_object_set_new(o, "moe_expert_bias", b);
  }
  json_t *us = json_array();
  for (int u = 0; u < m->nunits; u++) {
    const sl_ckio_unit *U = &m->units[u];
    json_t *uo = json_object(), *ts = json_array();
    json_object_set_new(uo, "kind", json_string(U->kind));
    json_object_set_new(uo, "numel", json_integer(U->numel));
    json_object_set_new(uo, "padded", json_integer(U->padded));
    json_object_set_new(uo, "shard", json_integer(U->shard));
    json_object_set_new(uo, "group_size", json_integer(m->shard_group));
    for (int i = 0; i < U->ntensors; i++) {
      const sl_ckio_tensor *t = &U->t[i];
      json_t *to = json_object(), *sh = json_array();
      json_object_set_new(to, "name", json_string(t->name));
      for (int d = 0; d < t->ndim; d++) json_array_append_new(sh, json_integer(t->shape[d]));
      json_object_set_new(to, "shape", sh);
      json_object_set_new(to, "dtype", json_string("F32"));
      json_object_set_new(to, "offset", json_integer(t->offset));
      json_array_append_new(ts, to);
    }
    json_object_set_new(uo, "tensors", ts);
    json_array_append_new(us, uo);
  }
  json_object_set_new(o, "units", us);
  json_t *fs = json_array();
  for (int i = 0; i < m->nfiles; i++) json_array_append_new(fs, file_json(&m->files[i]));
  json_object_set_new(o, "files", fs);
  *text = json_dumps(o, JSON_INDENT(1));
  json_decref(o);
  return *text ? SL_OK : sl_fail(SL_ENOMEM, "checkpoint: out of memory");
}

void sl_ckio_file_free(sl_ckio_file *f) {
  free(f->pieces);
  f->pieces = NULL;
  f->npieces = f->cap = 0;
}

void sl_ckio_manifest_free(sl_ckio_manifest *m) {
  for (int u = 0; u < m->nunits && m->units; u++) free(m->units[u].t);
  for (int i = 0; i < m->nfiles && m->files; i++) sl_ckio_file_free(&m->files[i]);
  free(m->units);
  free(m->files);
  free(m->config);
  free(m->model_config);
  free(m->moe_bias);
  memset(m, 0, sizeof *m);
}

/* typed getters with messages */
#define LIM (INT64_C(1) << 50)
static int get_int(const char *path, json_t *o, const char *key, const char *where, int64_t lo, int64_t hi,
                   int64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v)) return sl_fail(SL_EINPUT, "%s: %s: \"%s\" must be an integer", path, where, key);
  int64_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return sl_fail(SL_EINPUT, "%s: %s: \"%s\" = %lld is outside [%lld, %lld]", path, where, key, (long long)x,
                   (long long)lo, (long long)hi);
  *out = x;
  return SL_OK;
}

static int get_hex(const char *path, json_t *o, const char *key, const char *where, uint64_t *out) {
  json_t *v = json_object_get(o, key);
  const char *s = json_string_value(v);
  char *end = NULL;
  if (!s || strlen(s) != 16 || (errno = 0, *out = strtoull(s, &end, 16), errno) || *end)
    return sl_fail(SL_EINPUT, "%s: %s: \"%s\" must be 16 hex digits", path, where, key);
  return SL_OK;
}

static int parse_file_obj(const char *path, json_t *fo, int idx, sl_ckio_file *f) {
  char where[160];
  snprintf(where, sizeof where, "files[%d]", idx);
  memset(f, 0, sizeof *f);
  if (!json_is_object(fo)) return sl_fail(SL_EINPUT, "%s: %s must be an object", path, where);
  const char *name = json_string_value(json_object_get(fo, "name"));
  if (!name || !name[0] || name[0] == '.' || strlen(name) >= sizeof f->name ||
      strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(name))
    return sl_fail(SL_EINPUT, "%s: %s: \"name\" must be a plain file name", path, where);
  snprintf(f->name, sizeof f->name, "%s", name);
  int64_t x = 0;
  int rc;
  if ((rc = get_int(path, fo, "rank", where, 0, 1 << 24, &x))) return rc;
  f->rank = (int)x;
  if ((rc = get_int(path, fo, "bytes", where, 0, LIM, &f->bytes))) return rc;
  if ((rc = get_hex(path, fo, "xxh64", where, &f->xxh))) return rc;
  json_t *ps = json_object_get(fo, "pieces");
  if (!json_is_array(ps) || json_array_size(ps) > 1000000)
    return sl_fail(SL_EINPUT, "%s: %s: \"pieces\" must be an array", path, where);
  f->npieces = f->cap = (int)json_array_size(ps);
  f->pieces = calloc((size_t)f->npieces + 1, sizeof *f->pieces);
  if (!f->pieces) return sl_fail(SL_ENOMEM, "out of memory");
  for (int i = 0; i < f->npieces; i++) {
    json_t *po = json_array_get(ps, (size_t)i);
    sl_ckio_piece *p = &f->pieces[i];
    snprintf(where, sizeof where, "files[%d] (%s) pieces[%d]", idx, f->name, i);
    if (!json_is_object(po)) return sl_fail(SL_EINPUT, "%s: %s must be an object", path, where);
    if ((rc = get_int(path, po, "unit", where, 0, 1 << 24, &x))) return rc;
    p->unit = (int)x;
    if ((rc = get_int(path, po, "lo", where, 0, LIM, &p->lo))) return rc;
    if ((rc = get_int(path, po, "hi", where, p->lo + 1, LIM, &p->hi))) return rc;
    json_t *frs = json_object_get(po, "frames");
    for (int k = 0; k < SL_CKIO_NKINDS; k++) {
      json_t *fr = json_object_get(frs, sl_ckio_kind_names[k]);
      sl_ckio_frame *F = &p->fr[k];
      char w2[200];
      snprintf(w2, sizeof w2, "%s frame %s", where, sl_ckio_kind_names[k]);
      if (!json_is_object(fr)) return sl_fail(SL_EINPUT, "%s: %s is missing", path, w2);
      if ((rc = get_int(path, fr, "offset", w2, 0, f->bytes, &F->off))) return rc;
      if ((rc = get_int(path, fr, "bytes", w2, 0, f->bytes - F->off, &F->bytes))) return rc;
      if ((rc = get_int(path, fr, "raw", w2, 0, LIM, &F->raw))) return rc;
      if ((rc = get_hex(path, fr, "xxh64", w2, &F->xxh))) return rc;
      json_t *sh = json_object_get(fr, "shuffle"), *zs = json_object_get(fr, "zstd");
      if (!json_is_boolean(sh) || !json_is_boolean(zs))
        return sl_fail(SL_EINPUT, "%s: %s: \"shuffle\" and \"zstd\" must be booleans", path, w2);
      F->shuffle = json_is_true(sh);
      F->zstd = json_is_true(zs);
      if (F->raw != (p->hi - p->lo) * 4)
        return sl_fail(SL_EINPUT, "%s: %s: \"raw\" = %lld, but the range [%lld, %lld) holds %lld bytes", path, w2,
                       (long long)F->raw, (long long)p->lo, (long long)p->hi, (long long)((p->hi - p->lo) * 4));
      if (!F->zstd && F->bytes != F->raw)
        return sl_fail(SL_EINPUT, "%s: %s: a stored frame must be %lld bytes, not %lld", path, w2, (long long)F->raw,
                       (long long)F->bytes);
    }
  }
  return SL_OK;
}

int sl_ckio_file_parse(const char *text, size_t len, sl_ckio_file *out) {
  json_error_t e;
  json_t *o = json_loadb(text, len, 0, &e);
  if (!o) return sl_fail(SL_EINTERNAL, "checkpoint: bad file entry from a writer: %s", e.text);
  int rc = parse_file_obj("file entry", o, 0, out);
  json_decref(o);
  return rc;
}

static int cmp_range(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* units[u] of a manifest: its sizes and its tensors */
static int parse_unit(const char *path, json_t *uo, int u, sl_ckio_unit *U) {
  int rc;
  char where[64];
  snprintf(where, sizeof where, "units[%d]", u);
  if (!json_is_object(uo)) return sl_fail(SL_EINPUT, "%s: %s must be an object", path, where);
  const char *kind = json_string_value(json_object_get(uo, "kind"));
  snprintf(U->kind, sizeof U->kind, "%s", kind ? kind : "");
  if ((rc = get_int(path, uo, "numel", where, 1, LIM, &U->numel))) return rc;
  if ((rc = get_int(path, uo, "padded", where, U->numel, LIM, &U->padded))) return rc;
  if ((rc = get_int(path, uo, "shard", where, 0, U->padded, &U->shard))) return rc;
  json_t *ts = json_object_get(uo, "tensors");
  if (!json_is_array(ts) || json_array_size(ts) > 64)
    return sl_fail(SL_EINPUT, "%s: %s: \"tensors\" must be an array of at most 64", path, where);
  U->ntensors = (int)json_array_size(ts);
  U->t = calloc((size_t)U->ntensors + 1, sizeof *U->t);
  if (!U->t) return sl_fail(SL_ENOMEM, "out of memory");
  for (int i = 0; i < U->ntensors; i++) {
    json_t *to = json_array_get(ts, (size_t)i), *sh = json_object_get(to, "shape");
    sl_ckio_tensor *t = &U->t[i];
    const char *nm = json_string_value(json_object_get(to, "name"));
    if (!nm || strlen(nm) >= sizeof t->name || !json_is_array(sh) || json_array_size(sh) < 1 || json_array_size(sh) > 3)
      return sl_fail(SL_EINPUT, "%s: %s tensors[%d]: needs a \"name\" and a \"shape\" of 1-3 dims", path, where, i);
    snprintf(t->name, sizeof t->name, "%s", nm);
    t->ndim = (int)json_array_size(sh);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
      json_t *dv = json_array_get(sh, (size_t)d);
      if (!json_is_integer(dv) || json_integer_value(dv) < 1 || json_integer_value(dv) > LIM ||
          t->numel > LIM / json_integer_value(dv))
        return sl_fail(SL_EINPUT, "%s: %s tensor %s: bad shape", path, where, t->name);
      t->shape[d] = json_integer_value(dv);
      t->numel *= t->shape[d];
    }
    if ((rc = get_int(path, to, "offset", t->name, 0, U->numel, &t->offset))) return rc;
    if (t->offset + t->numel > U->numel)
      return sl_fail(SL_EINPUT, "%s: %s tensor %s: [%lld, %lld) exceeds the unit's %lld elements", path, where, t->name,
                     (long long)t->offset, (long long)(t->offset + t->numel), (long long)U->numel);
  }
  return SL_OK;
}

/* the manifest's files: each parsed, named once, its pieces inside the model; *total: their pieces */
static int parse_files(const char *path, json_t *fs, sl_ckio_manifest *m, int64_t *total) {
  int rc;
  for (int i = 0; i < m->nfiles; i++) {
    if ((rc = parse_file_obj(path, json_array_get(fs, (size_t)i), i, &m->files[i]))) return rc;
    for (int j = 0; j < i; j++)
      if (!strcmp(m->files[j].name, m->files[i].name))
        return sl_fail(SL_EINPUT, "%s: file %s is listed twice", path, m->files[i].name);
    for (int p = 0; p < m->files[i].npieces; p++) {
      sl_ckio_piece *pc = &m->files[i].pieces[p];
      if (pc->unit >= m->nunits || pc->hi > m->units[pc->unit].numel)
        return sl_fail(SL_EINPUT, "%s: %s piece %d: unit %d range [%lld, %lld) is outside the model", path,
                       m->files[i].name, p, pc->unit, (long long)pc->lo, (long long)pc->hi);
    }
    *total += m->files[i].npieces;
  }
  return SL_OK;
}

/* the pieces of every unit tile [0, numel); ranges: room for 2 x all the pieces */
static int check_tiling(const char *path, const sl_ckio_manifest *m, int64_t *ranges) {
  for (int u = 0; u < m->nunits; u++) {
    int64_t n = 0;
    for (int i = 0; i < m->nfiles; i++)
      for (int p = 0; p < m->files[i].npieces; p++)
        if (m->files[i].pieces[p].unit == u) {
          ranges[2 * n] = m->files[i].pieces[p].lo;
          ranges[2 * n + 1] = m->files[i].pieces[p].hi;
          n++;
        }
    qsort(ranges, (size_t)n, 2 * sizeof(int64_t), cmp_range);
    int64_t at = 0;
    for (int64_t r = 0; r < n && ranges[2 * r] == at; r++) at = ranges[2 * r + 1];
    if (at != m->units[u].numel)
      return sl_fail(SL_EINPUT,
                     "%s: unit %d: the files' pieces do not cover elements [0, %lld) exactly once "
                     "(first gap or overlap at element %lld)",
                     path, u, (long long)m->units[u].numel, (long long)at);
  }
  return SL_OK;
}

int sl_ckio_manifest_parse(const char *path, const char *text, size_t len, sl_ckio_manifest *m) {
  memset(m, 0, sizeof *m);
  json_error_t e;
  json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
  if (!o) return sl_fail(SL_EINPUT, "%s: not valid JSON (line %d: %s)", path, e.line, e.text);
  int rc = SL_OK;
  int64_t x = 0;
  int64_t *ranges = NULL;
  const char *fmt = json_string_value(json_object_get(o, "format"));
  if (!json_is_object(o) || !fmt || strcmp(fmt, "shardlm-checkpoint")) {
    rc = sl_fail(SL_EINPUT, "%s: not a shardlm checkpoint manifest (\"format\" must be \"shardlm-checkpoint\")", path);
    goto done;
  }
#define GI(key, lo, hi, dst)                                                                                           \
  do {                                                                                                                 \
    if ((rc = get_int(path, o, key, "manifest", lo, hi, &x))) goto done;                                               \
    dst = x;                                                                                                           \
  } while (0)
  GI("version", 1, 1, m->version);
  GI("step", 0, LIM, m->step);
  GI("next_sample", 0, INT64_MAX, m->next_sample);
  GI("world_size", 1, 1 << 24, m->world_size);
  GI("zero", 0, 3, m->zero);
  GI("shard_group", 1, 1 << 24, m->shard_group);
  GI("replica_size", 1, 1 << 24, m->replica_size);
  GI("align", 1, 1 << 20, m->align);
#undef GI
  json_t *seed = json_object_get(o, "rng_seed");
  if (json_is_null(seed)) m->has_seed = 0;
  else if ((rc = get_hex(path, o, "rng_seed", "manifest", &m->seed))) goto done;
  else m->has_seed = 1;
  const char *comp = json_string_value(json_object_get(o, "compression"));
  if (!comp || (strcmp(comp, "zstd") && strcmp(comp, "none"))) {
    rc = sl_fail(SL_EINPUT, "%s: \"compression\" must be \"zstd\" or \"none\"", path);
    goto done;
  }
  snprintf(m->compression, sizeof m->compression, "%s", comp);
  const char *cfg = json_string_value(json_object_get(o, "config"));
  m->config = strdup(cfg ? cfg : "");
  json_t *mcj = json_object_get(o, "model_config");
  if (mcj && !json_is_string(mcj)) {
    rc = sl_fail(SL_EINPUT, "%s: \"model_config\" must be a string", path);
    goto done;
  }
  if (mcj && !(m->model_config = strdup(json_string_value(mcj)))) {
    rc = sl_fail(SL_ENOMEM, "out of memory");
    goto done;
  }
  const char *mh = json_string_value(json_object_get(o, "model_hash"));
  snprintf(m->model_hash, sizeof m->model_hash, "%s", mh ? mh : "");
  if ((rc = parse_moe_bias(path, json_object_get(o, "moe_expert_bias"), m))) goto done;
  json_t *us = json_object_get(o, "units"), *fs = json_object_get(o, "files");
  if (!json_is_array(us) || json_array_size(us) < 1 || json_array_size(us) > 100000 || !json_is_array(fs) ||
      json_array_size(fs) < 1 || json_array_size(fs) > 100000) {
    rc = sl_fail(SL_EINPUT, "%s: \"units\" and \"files\" must be non-empty arrays", path);
    goto done;
  }
  m->nunits = (int)json_array_size(us);
  m->units = calloc((size_t)m->nunits, sizeof *m->units);
  m->nfiles = (int)json_array_size(fs);
  m->files = calloc((size_t)m->nfiles, sizeof *m->files);
  if (!m->units || !m->files || !m->config) {
    rc = sl_fail(SL_ENOMEM, "out of memory");
    goto done;
  }
  for (int u = 0; u < m->nunits; u++)
    if ((rc = parse_unit(path, json_array_get(us, (size_t)u), u, &m->units[u]))) goto done;
  int64_t total = 0;
  if ((rc = parse_files(path, fs, m, &total))) goto done;
  /* the pieces of every unit must tile [0, numel) */
  ranges = malloc(sizeof(int64_t) * 2 * (size_t)(total + 1));
  if (!ranges) {
    rc = sl_fail(SL_ENOMEM, "out of memory");
    goto done;
  }
  rc = check_tiling(path, m, ranges);
done:
  free(ranges);
  json_decref(o);
  if (rc) sl_ckio_manifest_free(m);
  return rc;
}

static char *read_small(const char *path, size_t *len, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    sl_fail(SL_EINPUT, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(cap + 1);
  size_t n = buf ? fread(buf, 1, cap + 1, f) : 0;
  fclose(f);
  if (!buf) {
    sl_fail(SL_ENOMEM, "out of memory");
    return NULL;
  }
  if (n > cap) {
    free(buf);
    sl_fail(SL_EINPUT, "%s: larger than %zu bytes", path, cap);
    return NULL;
  }
  buf[n] = 0;
  *len = n;
  return buf;
}

int sl_ckio_manifest_load(const char *dir, sl_ckio_manifest *out) {
  char path[4200], cpath[4300];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  snprintf(cpath, sizeof cpath, "%s/manifest.json.xxh64", dir);
  size_t n = 0, cn = 0;
  char *text = read_small(path, &n, (size_t)1 << 30);
  if (!text) return SL_EINPUT;
  char *ck = read_small(cpath, &cn, 64);
  if (!ck) {
    free(text);
    return SL_EINPUT;
  }
  uint64_t want = strtoull(ck, NULL, 16), got = sl_xxh64(text, n, 0);
  free(ck);
  if (want != got) {
    free(text);
    return sl_fail(SL_EINPUT,
                   "%s: checksum mismatch (xxh64 %016" PRIx64 ", %s records %016" PRIx64 "): the manifest is corrupt",
                   path, got, cpath, want);
  }
  int rc = sl_ckio_manifest_parse(path, text, n, out);
  free(text);
  return rc;
}

static int write_text_file(const char *path, const char *text, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return sl_fail(SL_EIO, "%s: cannot create: %s", path, strerror(errno));
  int rc = sl_write_all(fd, text, n, path);
  if (!rc && fsync(fd) != 0) rc = sl_fail(SL_EIO, "%s: fsync failed: %s", path, strerror(errno));
  if (close(fd) != 0 && !rc) rc = sl_fail(SL_EIO, "%s: close failed: %s", path, strerror(errno));
  return rc;
}

int sl_ckio_write_manifest(const char *dir, const sl_ckio_manifest *m) {
  char *text = NULL;
  int rc = sl_ckio_manifest_dump(m, &text);
  if (rc) return rc;
  char path[4200], hex[32];
  size_t n = strlen(text);
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  rc = write_text_file(path, text, n);
  snprintf(hex, sizeof hex, "%016" PRIx64 "\n", sl_xxh64(text, n, 0));
  free(text);
  snprintf(path, sizeof path, "%s/manifest.json.xxh64", dir);
  if (!rc) rc = write_text_file(path, hex, strlen(hex));
  return rc;
}

/* ---- reader ------------------------------------------------------------------------ */
int sl_ckio_read_range(const char *dir, const sl_ckio_manifest *m, int u, int kind, int64_t lo, int64_t hi,
                       float *dst) {
  for (int i = 0; i < m->nfiles; i++) {
    const sl_ckio_file *f = &m->files[i];
    int fd = -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, f->name);
    for (int p = 0; p < f->npieces; p++) {
      const sl_ckio_piece *pc = &f->pieces[p];
      int64_t a = pc->lo > lo ? pc->lo : lo, b = pc->hi < hi ? pc->hi : hi;
      if (pc->unit != u || a >= b) continue;
      if (fd < 0) {
        fd = open(path, O_RDONLY);
        if (fd < 0) return sl_fail(SL_EINPUT, "%s: cannot open: %s (a shard file is missing)", path, strerror(errno));
        struct stat sb;
        if (fstat(fd, &sb) == 0 && sb.st_size != f->bytes) {
          close(fd);
          return sl_fail(SL_EINPUT, "%s: %lld bytes, but the manifest records %lld (truncated or replaced)", path,
                         (long long)sb.st_size, (long long)f->bytes);
        }
      }
      const sl_ckio_frame *fr = &pc->fr[kind];
      uint8_t *buf = malloc((size_t)fr->bytes + 1);
      float *full = (a == pc->lo && b == pc->hi) ? dst + (a - lo) : malloc((size_t)fr->raw + 4);
      int rc = !buf || !full ? sl_fail(SL_ENOMEM, "out of memory") : SL_OK;
      if (!rc) rc = pread_all(fd, buf, (size_t)fr->bytes, fr->off, path);
      if (!rc && sl_xxh64(buf, (size_t)fr->bytes, 0) != fr->xxh)
        rc = sl_fail(SL_EINPUT,
                     "%s: checksum mismatch in the %s frame of unit %d (bytes %lld..%lld): the file is corrupt", path,
                     sl_ckio_kind_names[kind], u, (long long)fr->off, (long long)(fr->off + fr->bytes));
      if (!rc) rc = decode(buf, fr, full, path);
      if (!rc && full != dst + (a - lo)) memcpy(dst + (a - lo), full + (a - pc->lo), (size_t)(b - a) * 4);
      free(buf);
      if (full && full != dst + (a - lo)) free(full);
      if (rc) {
        close(fd);
        return rc;
      }
    }
    if (fd >= 0) close(fd);
  }
  return SL_OK;
}

int sl_ckio_verify_file(const char *dir, const sl_ckio_manifest *m, int i) {
  const sl_ckio_file *f = &m->files[i];
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, f->name);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return sl_fail(SL_EINPUT, "%s: cannot open: %s (a shard file is missing)", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || sb.st_size != f->bytes) {
    close(fd);
    return sl_fail(SL_EINPUT, "%s: %lld bytes, but the manifest records %lld (truncated or replaced)", path,
                   (long long)sb.st_size, (long long)f->bytes);
  }
  sl_xxh64_state h;
  sl_xxh64_init(&h, 0);
  enum { CH = 1 << 20 };
  uint8_t *buf = malloc(CH);
  int rc = buf ? SL_OK : sl_fail(SL_ENOMEM, "out of memory");
  for (int64_t off = 0; !rc && off < f->bytes; off += CH) {
    size_t n = (size_t)(f->bytes - off < CH ? f->bytes - off : CH);
    rc = pread_all(fd, buf, n, off, path);
    if (!rc) sl_xxh64_update(&h, buf, n);
  }
  free(buf);
  close(fd);
  if (!rc && sl_xxh64_digest(&h) != f->xxh)
    rc = sl_fail(SL_EINPUT,
                 "%s: checksum mismatch (xxh64 %016" PRIx64 ", the manifest records %016" PRIx64
                 "): the file is corrupt",
                 path, sl_xxh64_digest(&h), f->xxh);
  return rc;
}

/* ---- directory --------------------------------------------------------------------- */
int sl_ckio_rmtree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  char p[4400];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  return rmdir(dir);
}

int sl_ckio_clean_tmp(const char *ckpt_dir) {
  DIR *d = opendir(ckpt_dir);
  if (!d) return 0;
  struct dirent *e;
  int n = 0;
  char p[4400];
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, ".tmp-", 5)) continue;
    snprintf(p, sizeof p, "%s/%s", ckpt_dir, e->d_name);
    if (sl_ckio_rmtree(p) == 0) n++;
    else unlink(p);
  }
  closedir(d);
  return n;
}

void sl_ckio_step_dir(const char *ckpt_dir, int64_t step, char *out, size_t cap) {
  snprintf(out, cap, "%s/step-%06lld", ckpt_dir, (long long)step);
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x > y ? -1 : x < y;
}

int sl_ckio_list(const char *ckpt_dir, int64_t **steps, int *n) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(ckpt_dir);
  if (!d) return SL_OK;
  struct dirent *e;
  int cap = 0;
  char p[4400];
  while ((e = readdir(d))) {
    const char *s = e->d_name;
    if (strncmp(s, "step-", 5) || !s[5] || strspn(s + 5, "0123456789") != strlen(s + 5) || strlen(s + 5) > 15) continue;
    snprintf(p, sizeof p, "%s/%s/manifest.json", ckpt_dir, s);
    struct stat sb;
    if (stat(p, &sb) != 0) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *ns = realloc(*steps, sizeof(int64_t) * (size_t)cap);
      if (!ns) {
        closedir(d);
        return sl_fail(SL_ENOMEM, "out of memory");
      }
      *steps = ns;
    }
    (*steps)[(*n)++] = strtoll(s + 5, NULL, 10);
  }
  closedir(d);
  if (*n) qsort(*steps, (size_t)*n, sizeof(int64_t), cmp_desc);
  return SL_OK;
}

int sl_ckio_commit(const char *ckpt_dir, const char *tmp, int64_t step, void (*fault)(const char *stage, void *ctx),
                   void *fctx) {
  char final[4200], old[4300], lt[4300], lp[4300];
  sl_ckio_step_dir(ckpt_dir, step, final, sizeof final);
  struct stat sb;
  old[0] = 0;
  if (stat(final, &sb) == 0) { /* re-saving a step: move the old one aside first */
    snprintf(old, sizeof old, "%s/.tmp-old-step-%lld-%d", ckpt_dir, (long long)step, (int)getpid());
    if (rename(final, old) != 0)
      return sl_fail(SL_EIO, "%s: cannot move the existing checkpoint aside: %s", final, strerror(errno));
  }
  if (fault) fault("before-rename", fctx);
  if (rename(tmp, final) != 0) return sl_fail(SL_EIO, "rename %s -> %s failed: %s", tmp, final, strerror(errno));
  if (fault) fault("after-rename", fctx);
  int rc = sl_ckio_fsync_path(ckpt_dir);
  if (rc) return rc;
  if (old[0]) sl_ckio_rmtree(old);
  if (fault) fault("after-dir-fsync", fctx);
  snprintf(lt, sizeof lt, "%s/latest.tmp", ckpt_dir);
  snprintf(lp, sizeof lp, "%s/latest", ckpt_dir);
  char text[64];
  int n = snprintf(text, sizeof text, "step-%06lld\n", (long long)step);
  if ((rc = write_text_file(lt, text, (size_t)n))) return rc;
  if (fault) fault("before-latest-rename", fctx);
  if (rename(lt, lp) != 0) return sl_fail(SL_EIO, "rename %s -> %s failed: %s", lt, lp, strerror(errno));
  if ((rc = sl_ckio_fsync_path(ckpt_dir))) return rc;
  if (fault) fault("after-latest", fctx);
  return SL_OK;
}

int sl_ckio_retain(const char *ckpt_dir, int keep) {
  if (keep <= 0) return SL_OK;
  int64_t *steps;
  int n;
  int rc = sl_ckio_list(ckpt_dir, &steps, &n);
  if (rc) return rc;
  char p[4200];
  for (int i = keep; i < n; i++) { /* index 0, the newest, always stays */
    sl_ckio_step_dir(ckpt_dir, steps[i], p, sizeof p);
    if (sl_ckio_rmtree(p) != 0) sl_log(SL_LOG_WARN, "%s: could not remove an old checkpoint: %s", p, strerror(errno));
  }
  free(steps);
  return SL_OK;
}

int sl_ckio_resolve(const char *path, char *out, size_t cap) {
  char p[4200];
  struct stat sb;
  snprintf(p, sizeof p, "%s/manifest.json", path);
  if (stat(p, &sb) == 0) {
    snprintf(out, cap, "%s", path);
    return SL_OK;
  }
  int64_t *steps;
  int n;
  int rc = sl_ckio_list(path, &steps, &n);
  if (rc) return rc;
  if (!n)
    return sl_fail(SL_EINPUT,
                   "%s: neither a checkpoint step directory (no manifest.json) nor a checkpoint "
                   "directory holding step-N/manifest.json",
                   path);
  sl_ckio_step_dir(path, steps[0], out, cap);
  free(steps);
  return SL_OK;
}
