/* formats/safetensors.c — safetensors reader (validating, mmap), model
 * directory / sharded index reader, fp32 conversion, streaming atomic writer.
 * Format rules: docs/formats.md.
 */
#define _GNU_SOURCE
#include "formats/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */

/* ---- dtypes ---------------------------------------------------------------- */
static const struct {
  const char *name;
  int bits;
} k_dtypes[SL_ST_DTYPE_COUNT] = {
    [SL_ST_F32] = {"F32", 32},        [SL_ST_F16] = {"F16", 16},        [SL_ST_BF16] = {"BF16", 16},
    [SL_ST_F64] = {"F64", 64},        [SL_ST_I64] = {"I64", 64},        [SL_ST_U64] = {"U64", 64},
    [SL_ST_I32] = {"I32", 32},        [SL_ST_U32] = {"U32", 32},        [SL_ST_I16] = {"I16", 16},
    [SL_ST_U16] = {"U16", 16},        [SL_ST_I8] = {"I8", 8},           [SL_ST_U8] = {"U8", 8},
    [SL_ST_BOOL] = {"BOOL", 8},       [SL_ST_F8_E4M3] = {"F8_E4M3", 8}, [SL_ST_F8_E5M2] = {"F8_E5M2", 8},
    [SL_ST_F8_E8M0] = {"F8_E8M0", 8}, [SL_ST_C64] = {"C64", 64},        [SL_ST_F6_E2M3] = {"F6_E2M3", 6},
    [SL_ST_F6_E3M2] = {"F6_E3M2", 6}, [SL_ST_F4] = {"F4", 4},
};

const char *sl_st_dtype_name(sl_st_dtype d) { return (d >= 0 && d < SL_ST_DTYPE_COUNT) ? k_dtypes[d].name : "?"; }

static int dtype_from_name(const char *s) {
  for (int i = 0; i < SL_ST_DTYPE_COUNT; i++)
    if (!strcmp(s, k_dtypes[i].name)) return i;
  return -1;
}

float sl_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  float f;
  if (ex == 0) {
    f = (float)man * 5.9604644775390625e-08f; /* man * 2^-24 (zero or subnormal) */
    memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (ex == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((ex + 112u) << 23) | (man << 13);
  }
  memcpy(&f, &bits, 4);
  return f;
}

float sl_bf16_to_f32(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t sl_f32_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u); /* quiet NaN */
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

uint16_t sl_f32_to_f16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN */
  /* rounds past 65504 (or inf): inf */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  /* below 2^-14: a subnormal (or zero), in units of 2^-24; at most half of 2^-24: zero */
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u, sh = 126u - (a >> 23); /* value = m x 2^(e-150), e = a >> 23 */
    uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  a += 0xfffu + ((a >> 13) & 1u); /* round to nearest even at bit 13 */
  return (uint16_t)(sign | ((a - 0x38000000u) >> 13));
}

/* ---- one file ---------------------------------------------------------------- */
struct sl_st_file {
  char *path;
  void *map; /* mmap base or NULL for an in-memory parse */
  size_t map_len;
  int64_t n;
  sl_st_tensor *t;  /* (n) header order */
  int64_t *by_name; /* (n) indices sorted by name */
};

static int cmp_name_idx(const void *a, const void *b, void *arg) {
  const sl_st_tensor *t = arg;
  return strcmp(t[*(const int64_t *)a].name, t[*(const int64_t *)b].name);
}

static int cmp_begin_idx(const void *a, const void *b, void *arg) {
  const sl_st_tensor *t = arg;
  const sl_st_tensor *x = &t[*(const int64_t *)a], *y = &t[*(const int64_t *)b];
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

void sl_st_close_file(sl_st_file *f) {
  if (!f) return;
  for (int64_t i = 0; i < f->n; i++) free((char *)f->t[i].name);
  free(f->t);
  free(f->by_name);
  if (f->map) munmap(f->map, f->map_len);
  free(f->path);
  free(f);
}

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, cap - o, "[");
  for (int i = 0; i < ndim && o < cap; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Validates one header entry into *t. */
static int parse_entry(const char *path, const char *key, json_t *val, uint64_t data_len, sl_st_tensor *t) {
  if (!json_is_object(val)) return sl_fail(SL_EINPUT, "%s: tensor '%s': header entry is not a JSON object", path, key);
  json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
         *jo = json_object_get(val, "data_offsets");
  if (!json_is_string(jd))
    return sl_fail(SL_EINPUT, "%s: tensor '%s': expected a string field 'dtype', found %s", path, key,
                   jd ? "another JSON type" : "none");
  int dt = dtype_from_name(json_string_value(jd));
  if (dt < 0)
    return sl_fail(SL_EINPUT,
                   "%s: tensor '%s': unknown dtype '%s' (expected a safetensors dtype such as "
                   "F32, F16 or BF16)",
                   path, key, json_string_value(jd));
  t->dtype = (sl_st_dtype)dt;
  if (!json_is_array(js))
    return sl_fail(SL_EINPUT, "%s: tensor '%s': expected an array field 'shape', found %s", path, key,
                   js ? "another JSON type" : "none");
  size_t nd = json_array_size(js);
  if (nd > SL_ST_MAX_DIMS)
    return sl_fail(SL_EINPUT, "%s: tensor '%s': shape has %zu dimensions, at most %d supported", path, key, nd,
                   SL_ST_MAX_DIMS);
  t->ndim = (int)nd;
  int64_t numel = 1;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(js, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0)
      return sl_fail(SL_EINPUT, "%s: tensor '%s': shape[%zu] must be a non-negative integer", path, key, i);
    t->shape[i] = (int64_t)json_integer_value(d);
    if (__builtin_mul_overflow(numel, t->shape[i], &numel))
      return sl_fail(SL_EINPUT, "%s: tensor '%s': shape element count overflows", path, key);
  }
  t->numel = numel;
  if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
      !json_is_integer(json_array_get(jo, 1)))
    return sl_fail(SL_EINPUT, "%s: tensor '%s': expected 'data_offsets' as an array of two integers", path, key);
  json_int_t b = json_integer_value(json_array_get(jo, 0)), e = json_integer_value(json_array_get(jo, 1));
  if (b < 0 || e < b)
    return sl_fail(SL_EINPUT, "%s: tensor '%s': data offsets [%lld, %lld) are not a valid range", path, key,
                   (long long)b, (long long)e);
  t->begin = (uint64_t)b;
  t->end = (uint64_t)e;
  if (t->end > data_len)
    return sl_fail(SL_EINPUT,
                   "%s: tensor '%s' data offsets [%llu, %llu) exceed the data section of %llu "
                   "bytes",
                   path, key, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_len);
  int64_t bits;
  if (__builtin_mul_overflow(numel, (int64_t)k_dtypes[dt].bits, &bits))
    return sl_fail(SL_EINPUT, "%s: tensor '%s': byte size overflows", path, key);
  if (bits % 8 != 0 || (uint64_t)(bits / 8) != t->end - t->begin) {
    char sh[256];
    fmt_shape(sh, sizeof sh, t->ndim, t->shape);
    return sl_fail(SL_EINPUT,
                   "%s: tensor '%s': shape %s of dtype %s needs %lld bits = %lld bytes but its "
                   "data offsets [%llu, %llu) span %llu bytes (size mismatch)",
                   path, key, sh, k_dtypes[dt].name, (long long)bits, (long long)(bits / 8),
                   (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)(t->end - t->begin));
  }
  return SL_OK;
}

int sl_st_parse(const char *path, const uint8_t *buf, size_t len, sl_st_file **out) {
  int rc = SL_OK;
  json_t *root = NULL;
  *out = NULL;
  if (!path) path = "<memory>";
  if (len < 8)
    return sl_fail(SL_EINPUT,
                   "%s: file is %zu bytes, too short for the 8-byte header length of a "
                   "safetensors file (truncated header)",
                   path, len);
  uint64_t hlen;
  memcpy(&hlen, buf, 8);
  if (hlen > len - 8)
    return sl_fail(SL_EINPUT,
                   "%s: header length %llu exceeds the file: only %zu bytes follow the 8-byte "
                   "length (truncated or not a safetensors file)",
                   path, (unsigned long long)hlen, len - 8);
  if (hlen > ST_MAX_HEADER)
    return sl_fail(SL_EINPUT, "%s: header length %llu exceeds the limit of %u bytes", path, (unsigned long long)hlen,
                   ST_MAX_HEADER);
  if (hlen < 2 || buf[8] != '{')
    return sl_fail(SL_EINPUT,
                   "%s: malformed JSON header: expected a JSON object starting with '{' in the "
                   "%llu header bytes",
                   path, (unsigned long long)hlen);
  uint64_t data_len = len - 8 - hlen;
  const uint8_t *data = buf + 8 + hlen;
  json_error_t je;
  root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    return sl_fail(SL_EINPUT, "%s: malformed JSON header (line %d, column %d): %s%s", path, je.line, je.column, je.text,
                   strstr(je.text, "duplicate") ? " (duplicate tensor name)" : "");
  if (!json_is_object(root)) {
    rc = sl_fail(SL_EINPUT, "%s: malformed JSON header: expected a JSON object", path);
    goto fail;
  }
  sl_st_file *f = calloc(1, sizeof *f);
  if (!f) {
    rc = sl_fail(SL_ENOMEM, "out of memory parsing %s", path);
    goto fail;
  }
  *out = f;
  f->path = strdup(path);
  size_t cap = json_object_size(root);
  f->t = calloc(cap ? cap : 1, sizeof *f->t);
  f->by_name = calloc(cap ? cap : 1, sizeof *f->by_name);
  if (!f->path || !f->t || !f->by_name) {
    rc = sl_fail(SL_ENOMEM, "out of memory parsing %s", path);
    goto fail;
  }
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (!strcmp(key, "__metadata__")) {
      if (!json_is_object(val)) {
        rc = sl_fail(SL_EINPUT, "%s: '__metadata__' must be a JSON object of strings", path);
        goto fail;
      }
      continue;
    }
    sl_st_tensor *t = &f->t[f->n];
    memset(t, 0, sizeof *t);
    if ((rc = parse_entry(path, key, val, data_len, t))) goto fail;
    t->name = strdup(key);
    if (!t->name) {
      rc = sl_fail(SL_ENOMEM, "out of memory parsing %s", path);
      goto fail;
    }
    t->data = data + t->begin;
    t->file = f->path;
    f->by_name[f->n] = f->n;
    f->n++;
  }
  /* No two tensors may share bytes (empty tensors occupy none). */
  qsort_r(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_begin_idx, f->t);
  int64_t last = -1;
  for (int64_t k = 0; k < f->n; k++) {
    const sl_st_tensor *t = &f->t[f->by_name[k]];
    if (t->begin == t->end) continue;
    if (last >= 0 && t->begin < f->t[last].end) {
      rc = sl_fail(SL_EINPUT,
                   "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) have overlapping data "
                   "offsets",
                   path, f->t[last].name, (unsigned long long)f->t[last].begin, (unsigned long long)f->t[last].end,
                   t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
      goto fail;
    }
    if (last < 0 || t->end > f->t[last].end) last = f->by_name[k];
  }
  for (int64_t k = 0; k < f->n; k++) f->by_name[k] = k;
  qsort_r(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name_idx, f->t);
  json_decref(root);
  return SL_OK;
fail:
  json_decref(root);
  sl_st_close_file(*out);
  *out = NULL;
  return rc;
}

int sl_st_open_file(const char *path, sl_st_file **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sl_fail(errno == ENOENT ? SL_EINPUT : SL_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return sl_fail(SL_EIO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return sl_fail(SL_EINPUT, "%s: not a regular file", path);
  }
  size_t len = (size_t)st.st_size;
  void *map = NULL;
  if (len > 0) {
    map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      int e = errno;
      close(fd);
      return sl_fail(SL_EIO, "%s: cannot mmap %zu bytes: %s", path, len, strerror(e));
    }
  }
  close(fd);
  int rc = sl_st_parse(path, map, len, out);
  if (rc) {
    if (map) munmap(map, len);
    return rc;
  }
  (*out)->map = map;
  (*out)->map_len = len;
  return SL_OK;
}

int64_t sl_st_file_count(const sl_st_file *f) { return f->n; }
const sl_st_tensor *sl_st_file_tensor(const sl_st_file *f, int64_t i) { return (i >= 0 && i < f->n) ? &f->t[i] : NULL; }

const sl_st_tensor *sl_st_file_find(const sl_st_file *f, const char *name) {
  int64_t lo = 0, hi = f->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->t[f->by_name[mid]].name, name);
    if (c == 0) return &f->t[f->by_name[mid]];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

int sl_st_tensor_to_f32(const sl_st_tensor *t, int64_t off, int64_t n, float *dst) {
  if (off < 0 || n < 0 || off > t->numel || n > t->numel - off)
    return sl_fail(SL_EINTERNAL,
                   "%s: tensor '%s': element range [%lld, %lld) outside its %lld "
                   "elements",
                   t->file, t->name, (long long)off, (long long)(off + n), (long long)t->numel);
  switch (t->dtype) {
  case SL_ST_F32: memcpy(dst, t->data + 4 * off, (size_t)n * 4); return SL_OK;
  case SL_ST_F16:
  case SL_ST_BF16: {
    const uint8_t *p = t->data + 2 * off;
    int bf = t->dtype == SL_ST_BF16;
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      dst[i] = bf ? sl_bf16_to_f32(h) : sl_f16_to_f32(h);
    }
    return SL_OK;
  }
  default:
    return sl_fail(SL_EINPUT,
                   "%s: tensor '%s' has dtype %s, which cannot be loaded (expected F32, F16 or "
                   "BF16)",
                   t->file, t->name, sl_st_dtype_name(t->dtype));
  }
}

/* ---- model directory --------------------------------------------------------- */
struct sl_st_set {
  char *dir;
  int nfiles;
  sl_st_file **files; /* (nfiles) */
  char **fnames;      /* (nfiles) shard file names as in the index */
  int64_t n;
  const sl_st_tensor **byname; /* (n) sorted by name */
};

void sl_st_close_set(sl_st_set *s) {
  if (!s) return;
  for (int i = 0; i < s->nfiles; i++) {
    sl_st_close_file(s->files[i]);
    free(s->fnames[i]);
  }
  free(s->files);
  free(s->fnames);
  free(s->byname);
  free(s->dir);
  free(s);
}

static char *path_join(const char *dir, const char *name) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", dir, name) < 0) return NULL;
  return p;
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static int cmp_tensor_ptr(const void *a, const void *b) {
  return strcmp((*(const sl_st_tensor *const *)a)->name, (*(const sl_st_tensor *const *)b)->name);
}

static int set_add_file(sl_st_set *s, const char *fname, sl_st_file *f) {
  sl_st_file **nf = realloc(s->files, (size_t)(s->nfiles + 1) * sizeof *nf);
  if (nf) s->files = nf;
  char **nn = realloc(s->fnames, (size_t)(s->nfiles + 1) * sizeof *nn);
  if (nn) s->fnames = nn;
  char *dup = strdup(fname);
  if (!nf || !nn || !dup) {
    free(dup);
    sl_st_close_file(f);
    return sl_fail(SL_ENOMEM, "out of memory opening %s", fname);
  }
  s->files[s->nfiles] = f;
  s->fnames[s->nfiles] = dup;
  s->nfiles++;
  return SL_OK;
}

static int open_index(sl_st_set *s, const char *ipath) {
  int rc = SL_OK;
  json_error_t je;
  json_t *root = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
  char *spath = NULL;
  if (!root)
    return sl_fail(SL_EINPUT, "%s: malformed JSON (line %d, column %d): %s", ipath, je.line, je.column, je.text);
  json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
  if (!json_is_object(wm)) {
    rc = sl_fail(SL_EINPUT, "%s: expected an object field 'weight_map' (tensor name -> shard file)", ipath);
    goto done;
  }
  size_t cap = json_object_size(wm);
  s->byname = calloc(cap ? cap : 1, sizeof *s->byname);
  if (!s->byname) {
    rc = sl_fail(SL_ENOMEM, "out of memory reading %s", ipath);
    goto done;
  }
  const char *key;
  json_t *val;
  json_object_foreach(wm, key, val) {
    if (!json_is_string(val)) {
      rc = sl_fail(SL_EINPUT, "%s: weight_map entry for tensor '%s' is not a file name string", ipath, key);
      goto done;
    }
    const char *fn = json_string_value(val);
    if (!fn[0] || strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, "..")) {
      rc = sl_fail(SL_EINPUT,
                   "%s: weight_map entry for tensor '%s' names '%s', expected a file name in "
                   "the same directory",
                   ipath, key, fn);
      goto done;
    }
    int fi = -1;
    for (int i = 0; i < s->nfiles; i++)
      if (!strcmp(s->fnames[i], fn)) fi = i;
    if (fi < 0) {
      free(spath);
      spath = path_join(s->dir, fn);
      if (!spath) {
        rc = sl_fail(SL_ENOMEM, "out of memory");
        goto done;
      }
      if (!file_exists(spath)) {
        rc = sl_fail(SL_EINPUT, "%s: weight_map maps tensor '%s' to shard '%s', but %s does not exist", ipath, key, fn,
                     spath);
        goto done;
      }
      sl_st_file *f;
      if ((rc = sl_st_open_file(spath, &f))) goto done;
      if ((rc = set_add_file(s, fn, f))) goto done;
      fi = s->nfiles - 1;
    }
    const sl_st_tensor *t = sl_st_file_find(s->files[fi], key);
    if (!t) {
      rc = sl_fail(SL_EINPUT,
                   "%s: weight_map maps tensor '%s' to shard '%s', but that file does not "
                   "contain it",
                   ipath, key, fn);
      goto done;
    }
    s->byname[s->n++] = t;
  }
  qsort(s->byname, (size_t)s->n, sizeof *s->byname, cmp_tensor_ptr);
done:
  free(spath);
  json_decref(root);
  return rc;
}

int sl_st_dir_has_weights(const char *dir, char *other, size_t cap) {
  if (other && cap) other[0] = 0;
  char *single = path_join(dir, "model.safetensors"), *index = path_join(dir, "model.safetensors.index.json");
  int has = (single && file_exists(single)) || (index && file_exists(index));
  free(single);
  free(index);
  DIR *d = has || !other || !cap ? NULL : opendir(dir);
  static const char *const ext[] = {".safetensors", ".bin", ".pt", ".pth", ".gguf"};
  for (struct dirent *e; d && !other[0] && (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
      if (n > strlen(ext[i]) && !strcmp(e->d_name + n - strlen(ext[i]), ext[i]) &&
          (strcmp(ext[i], ".bin") || !strncmp(e->d_name, "pytorch_model", 13))) /* not training_args.bin */
        snprintf(other, cap, "%s", e->d_name);
  }
  if (d) closedir(d);
  return has;
}

int sl_st_open_dir(const char *dir, sl_st_set **out) {
  int rc = SL_OK;
  char *single = NULL, *index = NULL;
  *out = NULL;
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return sl_fail(SL_EINPUT, "%s: model directory does not exist or is not a directory", dir);
  single = path_join(dir, "model.safetensors");
  index = path_join(dir, "model.safetensors.index.json");
  sl_st_set *s = calloc(1, sizeof *s);
  if (!single || !index || !s || !(s->dir = strdup(dir))) {
    rc = sl_fail(SL_ENOMEM, "out of memory opening %s", dir);
    goto fail;
  }
  if (file_exists(single)) {
    sl_st_file *f;
    if ((rc = sl_st_open_file(single, &f))) goto fail;
    if ((rc = set_add_file(s, "model.safetensors", f))) goto fail;
    s->byname = calloc(f->n ? (size_t)f->n : 1, sizeof *s->byname);
    if (!s->byname) {
      rc = sl_fail(SL_ENOMEM, "out of memory opening %s", single);
      goto fail;
    }
    for (int64_t i = 0; i < f->n; i++) s->byname[i] = &f->t[f->by_name[i]];
    s->n = f->n;
  } else if (file_exists(index)) {
    if ((rc = open_index(s, index))) goto fail;
  } else {
    sl_st_close_set(s); /* no weight files: SL_OK with *out = NULL */
    s = NULL;
  }
  *out = s;
  free(single);
  free(index);
  return SL_OK;
fail:
  sl_st_close_set(s);
  free(single);
  free(index);
  return rc;
}

int64_t sl_st_set_count(const sl_st_set *s) { return s->n; }
const sl_st_tensor *sl_st_set_tensor(const sl_st_set *s, int64_t i) {
  return (i >= 0 && i < s->n) ? s->byname[i] : NULL;
}
const char *sl_st_set_dir(const sl_st_set *s) { return s->dir; }

const sl_st_tensor *sl_st_find(const sl_st_set *s, const char *name) {
  int64_t lo = 0, hi = s->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    int c = strcmp(s->byname[mid]->name, name);
    if (c == 0) return s->byname[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

int sl_st_read_f32_slice(const sl_st_set *s, const char *name, int ndim, const int64_t *shape, int64_t off, int64_t n,
                         float *dst) {
  const sl_st_tensor *t = sl_st_find(s, name);
  if (!t)
    return sl_fail(SL_EINPUT,
                   "%s: missing tensor '%s': no weight file of the model directory "
                   "holds it",
                   s->dir, name);
  int same = t->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char a[256], b[256];
    fmt_shape(a, sizeof a, ndim, shape);
    fmt_shape(b, sizeof b, t->ndim, t->shape);
    return sl_fail(SL_EINPUT, "%s: tensor '%s' has the wrong shape: expected %s, found %s", t->file, name, a, b);
  }
  return sl_st_tensor_to_f32(t, off, n, dst);
}

int sl_st_read_f32_box(const sl_st_set *s, const char *name, int ndim, const int64_t *shape, int dim, int64_t off,
                       int64_t len, float *dst) {
  int rc = sl_st_read_f32_slice(s, name, ndim, shape, 0, 0, dst); /* presence and shape */
  if (rc) return rc;
  if (len == 0) return SL_OK; /* an all-padding slice (a vocabulary padded for tensor parallelism) */
  if (dim < 0 || dim >= ndim || off < 0 || len < 0 || off + len > shape[dim])
    return sl_fail(SL_EINTERNAL, "%s: tensor '%s': slice [%lld, %lld) of dim %d is outside it", s->dir, name,
                   (long long)off, (long long)(off + len), dim);
  const sl_st_tensor *t = sl_st_find(s, name);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++) outer *= shape[d];
  for (int d = dim + 1; d < ndim; d++) inner *= shape[d];
  for (int64_t o = 0; o < outer && !rc; o++)
    rc = sl_st_tensor_to_f32(t, (o * shape[dim] + off) * inner, len * inner, dst + o * len * inner);
  return rc;
}

int sl_st_read_f32_slab(const sl_st_set *s, const char *name, int64_t slabs, int64_t slab, int ndim,
                        const int64_t *shape, int dim, int64_t off, int64_t len, float *dst) {
  int64_t fs[SL_ST_MAX_DIMS], numel = 1;
  if (ndim + 1 > SL_ST_MAX_DIMS || slab < 0 || slab >= slabs)
    return sl_fail(SL_EINTERNAL, "%s: tensor '%s': slab %lld of %lld (%d dims) is outside it", s->dir, name,
                   (long long)slab, (long long)slabs, ndim);
  fs[0] = slabs;
  for (int d = 0; d < ndim; d++) fs[d + 1] = shape[d], numel *= shape[d];
  int rc = sl_st_read_f32_slice(s, name, ndim + 1, fs, 0, 0, dst); /* presence and the fused shape */
  if (rc) return rc;
  const sl_st_tensor *t = sl_st_find(s, name);
  int64_t base = slab * numel;
  if (dim < 0) return sl_st_tensor_to_f32(t, base, numel, dst);
  if (len == 0) return SL_OK;
  if (dim >= ndim || off < 0 || len < 0 || off + len > shape[dim])
    return sl_fail(SL_EINTERNAL, "%s: tensor '%s': slice [%lld, %lld) of dim %d is outside slab %lld", s->dir, name,
                   (long long)off, (long long)(off + len), dim, (long long)slab);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++) outer *= shape[d];
  for (int d = dim + 1; d < ndim; d++) inner *= shape[d];
  for (int64_t o = 0; o < outer && !rc; o++)
    rc = sl_st_tensor_to_f32(t, base + (o * shape[dim] + off) * inner, len * inner, dst + o * len * inner);
  return rc;
}

int sl_st_read_f32(const sl_st_set *s, const char *name, int ndim, const int64_t *shape, float *dst) {
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  const sl_st_tensor *t = sl_st_find(s, name);
  if (t && t->numel != numel) numel = 0; /* the shape check below reports it */
  return sl_st_read_f32_slice(s, name, ndim, shape, 0, numel, dst);
}

/* ---- writer -------------------------------------------------------------------- */
typedef struct {
  char *p;
  size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap * 2 : 4096;
    while (c < b->n + n + 1) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) return -1;
    b->p = q;
    b->cap = c;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}
static int sb_str(sbuf *b, const char *s) { return sb_put(b, s, strlen(s)); }
static int sb_json_string(sbuf *b, const char *s) {
  int r = sb_str(b, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c && !r; c++) {
    char e[8];
    if (*c == '"' || *c == '\\') {
      e[0] = '\\';
      e[1] = (char)*c;
      r = sb_put(b, e, 2);
    } else if (*c < 0x20) {
      snprintf(e, sizeof e, "\\u%04x", *c);
      r = sb_str(b, e);
    } else {
      r = sb_put(b, (const char *)c, 1);
    }
  }
  return r | sb_str(b, "\"");
}

static int64_t wt_size(sl_st_dtype d) { return d == SL_ST_BF16 || d == SL_ST_F16 ? 2 : 4; }

static int64_t wt_bytes(const sl_st_wtensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n * wt_size(t->dtype);
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the tensor list (names, shapes, dtypes, duplicates); *max_numel. */
static int check_wtensors(const char *path, const sl_st_wtensor *ts, int64_t n, int64_t *max_numel) {
  *max_numel = 0;
  for (int64_t i = 0; i < n; i++) {
    const sl_st_wtensor *t = &ts[i];
    if (!t->name || !t->name[0] || !strcmp(t->name, "__metadata__"))
      return sl_fail(SL_EINPUT, "%s: tensor #%lld has an empty or reserved name", path, (long long)i);
    if (t->dtype != SL_ST_F32 && t->dtype != SL_ST_BF16 && t->dtype != SL_ST_F16)
      return sl_fail(SL_EINPUT, "%s: tensor '%s': can only write F32, BF16 or F16, got %s", path, t->name,
                     sl_st_dtype_name(t->dtype));
    if (t->ndim < 0 || t->ndim > SL_ST_MAX_DIMS)
      return sl_fail(SL_EINPUT, "%s: tensor '%s': %d dimensions (0..%d allowed)", path, t->name, t->ndim,
                     SL_ST_MAX_DIMS);
    int64_t m = 1;
    for (int d = 0; d < t->ndim; d++)
      if (t->shape[d] < 0 || __builtin_mul_overflow(m, t->shape[d], &m) || m > (INT64_MAX >> 3))
        return sl_fail(SL_EINPUT, "%s: tensor '%s': invalid shape", path, t->name);
    if (m > *max_numel) *max_numel = m;
  }
  const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
  if (!names) return sl_fail(SL_ENOMEM, "out of memory writing %s", path);
  for (int64_t i = 0; i < n; i++) names[i] = ts[i].name;
  qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
  for (int64_t i = 1; i < n; i++)
    if (!strcmp(names[i - 1], names[i])) {
      int rc = sl_fail(SL_EINPUT, "%s: duplicate tensor name '%s'", path, names[i]);
      free(names);
      return rc;
    }
  free(names);
  return SL_OK;
}

/* Writes ts[0..n) to path atomically; buf holds max numel floats. */
static int write_one(const char *path, const sl_st_wtensor *ts, int64_t n, int64_t index_base, sl_st_fill_fn fill,
                     void *ctx, float *buf, uint16_t *cvt, size_t cvt_cap) {
  int rc = SL_OK, fd = -1;
  sbuf h = {0};
  char *tmp = NULL;
  int bad = sb_str(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
  int64_t off = 0;
  for (int64_t i = 0; i < n && !bad; i++) {
    char num[64];
    int64_t sz = wt_bytes(&ts[i]);
    bad |= sb_str(&h, ",") | sb_json_string(&h, ts[i].name) | sb_str(&h, ":{\"dtype\":\"") |
           sb_str(&h, sl_st_dtype_name(ts[i].dtype)) | sb_str(&h, "\",\"shape\":[");
    for (int d = 0; d < ts[i].ndim; d++) {
      snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
      bad |= sb_str(&h, num);
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + sz));
    bad |= sb_str(&h, num);
    off += sz;
  }
  bad |= sb_str(&h, "}");
  while (!bad && (8 + h.n) % 8) bad |= sb_str(&h, " "); /* data starts 8-byte aligned */
  if (bad) {
    rc = sl_fail(SL_ENOMEM, "out of memory building the header of %s", path);
    goto done;
  }
  if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
    tmp = NULL;
    rc = sl_fail(SL_ENOMEM, "out of memory");
    goto done;
  }
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc =
        sl_fail(errno == ENOENT || errno == EACCES ? SL_EINPUT : SL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    goto done;
  }
  uint64_t hl = h.n;
  if ((rc = sl_write_all(fd, &hl, 8, tmp)) || (rc = sl_write_all(fd, h.p, h.n, tmp))) goto done;
  for (int64_t i = 0; i < n; i++) {
    int64_t numel = wt_bytes(&ts[i]) / wt_size(ts[i].dtype);
    if (numel == 0) continue;
    if ((rc = fill(ctx, index_base + i, &ts[i], buf))) {
      sl_fail_ctx(rc, "while writing tensor '%s' to %s", ts[i].name, path);
      goto done;
    }
    if (ts[i].dtype == SL_ST_F32) {
      if ((rc = sl_write_all(fd, buf, (size_t)numel * 4, tmp))) goto done;
    } else {
      for (int64_t j = 0; j < numel; j += (int64_t)cvt_cap) {
        int64_t m = numel - j < (int64_t)cvt_cap ? numel - j : (int64_t)cvt_cap;
        if (ts[i].dtype == SL_ST_BF16)
          for (int64_t k = 0; k < m; k++) cvt[k] = sl_f32_to_bf16(buf[j + k]);
        else
          for (int64_t k = 0; k < m; k++) cvt[k] = sl_f32_to_f16(buf[j + k]);
        if ((rc = sl_write_all(fd, cvt, (size_t)m * 2, tmp))) goto done;
      }
    }
  }
  if (fsync(fd) != 0) {
    rc = sl_fail(SL_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
    goto done;
  }
  if (close(fd) != 0) {
    fd = -1;
    rc = sl_fail(SL_EIO, "%s: close failed: %s", tmp, strerror(errno));
    goto done;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    rc = sl_fail(SL_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    goto done;
  }
  sl_fsync_parent(path);
done:
  if (fd >= 0) close(fd);
  if (rc && tmp) unlink(tmp);
  free(tmp);
  free(h.p);
  return rc;
}

typedef struct {
  float *buf;
  uint16_t *cvt;
  size_t cvt_cap;
} wbufs;

static int wbufs_init(wbufs *w, int64_t max_numel, const char *path) {
  w->cvt_cap = 1u << 20;
  w->buf = malloc((size_t)(max_numel ? max_numel : 1) * sizeof(float));
  w->cvt = malloc(w->cvt_cap * sizeof(uint16_t));
  if (!w->buf || !w->cvt)
    return sl_fail(SL_ENOMEM, "out of memory: %lld floats for writing %s", (long long)max_numel, path);
  return SL_OK;
}

int sl_st_write_file(const char *path, const sl_st_wtensor *ts, int64_t n, sl_st_fill_fn fill, void *ctx) {
  int64_t mx;
  int rc = check_wtensors(path, ts, n, &mx);
  if (rc) return rc;
  wbufs w = {0};
  if (!(rc = wbufs_init(&w, mx, path))) rc = write_one(path, ts, n, 0, fill, ctx, w.buf, w.cvt, w.cvt_cap);
  free(w.buf);
  free(w.cvt);
  return rc;
}

/* Is name "model-DDDDD-of-DDDDD.safetensors"? */
static int is_shard_name(const char *s) {
  int a, b, len = 0;
  return sscanf(s, "model-%5d-of-%5d.safetensors%n", &a, &b, &len) == 2 && len > 0 && s[len] == 0 &&
         strlen(s) == strlen("model-00001-of-00001.safetensors");
}

/* Removes shard files of DIR not in keep[0..nkeep). */
static void remove_stale_shards(const char *dir, char **keep, int nkeep) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!is_shard_name(e->d_name)) continue;
    int k = 0;
    for (int i = 0; i < nkeep; i++) k |= !strcmp(keep[i], e->d_name);
    if (k) continue;
    char *p = path_join(dir, e->d_name);
    if (p) unlink(p);
    free(p);
  }
  closedir(d);
}


int sl_st_write_dir(const char *dir, const sl_st_wtensor *ts, int64_t n, sl_st_fill_fn fill, void *ctx,
                    int64_t max_shard_bytes) {
  int64_t mx, total = 0;
  int rc = check_wtensors(dir, ts, n, &mx), nsh = 0;
  if (rc) return rc;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return sl_fail(SL_EINPUT, "%s: cannot create directory: %s", dir, strerror(errno));
  for (int64_t i = 0; i < n; i++) total += wt_bytes(&ts[i]);
  char *single = path_join(dir, "model.safetensors");
  char *index = path_join(dir, "model.safetensors.index.json");
  int64_t *start = calloc((size_t)n + 2, sizeof *start); /* shard k = ts[start[k]..start[k+1]) */
  char **names = NULL;
  json_t *root = NULL;
  char *text = NULL;
  wbufs w = {0};
  if (!single || !index || !start) {
    rc = sl_fail(SL_ENOMEM, "out of memory writing %s", dir);
    goto done;
  }
  if ((rc = wbufs_init(&w, mx, dir))) goto done;
  if (max_shard_bytes <= 0 || total <= max_shard_bytes) {
    if ((rc = write_one(single, ts, n, 0, fill, ctx, w.buf, w.cvt, w.cvt_cap))) goto done;
    unlink(index); /* an older sharded layout is now stale */
    remove_stale_shards(dir, NULL, 0);
    goto done;
  }
  /* Greedy split in order, as transformers does: a tensor that would push the
   * current shard past the limit starts a new one. */
  int64_t cur = 0;
  start[0] = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t b = wt_bytes(&ts[i]);
    if (cur > 0 && cur + b > max_shard_bytes) {
      start[++nsh] = i;
      cur = 0;
    }
    cur += b;
  }
  start[++nsh] = n;
  if (nsh > 99999) {
    rc = sl_fail(SL_EINPUT, "%s: %d shards exceed the 99999 the naming scheme allows", dir, nsh);
    goto done;
  }
  names = calloc((size_t)nsh, sizeof *names);
  root = json_object();
  json_t *meta = json_object(), *wm = json_object();
  if (!names || !root || !meta || !wm) {
    json_decref(meta);
    json_decref(wm);
    rc = sl_fail(SL_ENOMEM, "out of memory writing %s", dir);
    goto done;
  }
  json_object_set_new(meta, "total_size", json_integer(total));
  json_object_set_new(root, "metadata", meta);
  json_object_set_new(root, "weight_map", wm);
  for (int k = 0; k < nsh; k++) {
    if (asprintf(&names[k], "model-%05d-of-%05d.safetensors", k + 1, nsh) < 0) {
      names[k] = NULL;
      rc = sl_fail(SL_ENOMEM, "out of memory");
      goto done;
    }
    char *p = path_join(dir, names[k]);
    if (!p) {
      rc = sl_fail(SL_ENOMEM, "out of memory");
      goto done;
    }
    rc = write_one(p, ts + start[k], start[k + 1] - start[k], start[k], fill, ctx, w.buf, w.cvt, w.cvt_cap);
    free(p);
    if (rc) goto done;
    for (int64_t i = start[k]; i < start[k + 1]; i++) json_object_set_new(wm, ts[i].name, json_string(names[k]));
  }
  text = json_dumps(root, JSON_INDENT(2));
  if (!text) {
    rc = sl_fail(SL_ENOMEM, "out of memory writing %s", index);
    goto done;
  }
  size_t tl = strlen(text);
  char *t2 = realloc(text, tl + 2);
  if (t2) {
    text = t2;
    strcpy(text + tl, "\n");
  }
  if ((rc = sl_write_text_atomic(index, text))) goto done;
  unlink(single); /* an older single-file layout would shadow the index */
  remove_stale_shards(dir, names, nsh);
done:
  if (names)
    for (int k = 0; k < nsh; k++) free(names[k]);
  free(names);
  free(text);
  json_decref(root);
  free(w.buf);
  free(w.cvt);
  free(start);
  free(single);
  free(index);
  return rc;
}
