/* formats/dataset.c — Megatron indexed dataset reader (mmap, validated, token
 * stream with wrap-around), atomic builder, and the byte-level `prepare`.
 */
#define _GNU_SOURCE
#include "formats/dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "dataset.c assumes a little-endian host"
#endif

static const uint8_t k_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
#define IDX_HDR 34 /* magic 9 + version 8 + dtype 1 + seq count 8 + doc count 8 */
#define BLK 64     /* sequences per prefix-sum block */

static int elem_size_of(int code) {
  switch (code) {
  case SL_IDX_UINT8:
  case SL_IDX_INT8: return 1;
  case SL_IDX_INT16:
  case SL_IDX_UINT16: return 2;
  case SL_IDX_INT32: return 4;
  case SL_IDX_INT64: return 8;
  default: return 0;
  }
}

static const char *dtype_name(int code) {
  static const char *n[] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
  return code >= 1 && code <= 8 ? n[code] : "unknown";
}

static int32_t rd_i32(const uint8_t *p, int64_t i) {
  int32_t v;
  memcpy(&v, p + 4 * i, 4);
  return v;
}
static int64_t rd_i64(const uint8_t *p, int64_t i) {
  int64_t v;
  memcpy(&v, p + 8 * i, 8);
  return v;
}

int sl_idx_parse(const char *path, const uint8_t *buf, size_t len, int64_t bin_bytes, sl_idx_info *o) {
  memset(o, 0, sizeof *o);
  if (!path) path = "<memory>";
  if (len < IDX_HDR)
    return sl_fail(SL_EINPUT,
                   "%s: file is %zu bytes, too short for the %d-byte header of a "
                   "Megatron index (truncated)",
                   path, len, IDX_HDR);
  if (memcmp(buf, k_magic, 9) != 0) {
    char got[64];
    size_t g = 0;
    for (int i = 0; i < 9; i++)
      g += (size_t)snprintf(got + g, sizeof got - g,
                            (buf[i] >= 32 && buf[i] < 127 && buf[i] != '\\') ? "%c" : "\\x%02x", buf[i]);
    return sl_fail(SL_EINPUT,
                   "%s: bad magic: expected \"MMIDIDX\\x00\\x00\", found \"%s\" (not a "
                   "Megatron .idx file)",
                   path, got);
  }
  uint64_t version, ns, nd;
  memcpy(&version, buf + 9, 8);
  if (version != 1) return sl_fail(SL_EINPUT, "%s: index version %llu, expected 1", path, (unsigned long long)version);
  int code = buf[17];
  if (code == SL_IDX_FLOAT64 || code == SL_IDX_FLOAT32)
    return sl_fail(SL_EINPUT,
                   "%s: dtype code %d (%s) is not a token type; expected an integer "
                   "dtype code (1,2,3,4,5,8)",
                   path, code, dtype_name(code));
  if (!elem_size_of(code))
    return sl_fail(SL_EINPUT,
                   "%s: unknown dtype code %d; expected an integer dtype code "
                   "(1,2,3,4,5,8)",
                   path, code);
  memcpy(&ns, buf + 18, 8);
  memcpy(&nd, buf + 26, 8);
  uint64_t body = len - IDX_HDR;
  if (ns > body / 12 || nd > body / 8 || 12 * ns + 8 * nd != body) {
    unsigned __int128 need = (unsigned __int128)IDX_HDR + (unsigned __int128)ns * 12 + (unsigned __int128)nd * 8;
    char nb[48];
    if (need >> 64) snprintf(nb, sizeof nb, "more than 2^64");
    else snprintf(nb, sizeof nb, "%llu", (unsigned long long)need);
    return sl_fail(SL_EINPUT,
                   "%s: counts do not match the file size: %llu sequences and %llu "
                   "document-index entries need %s bytes, the file has %zu",
                   path, (unsigned long long)ns, (unsigned long long)nd, nb, len);
  }
  o->dtype = code;
  o->elem_size = elem_size_of(code);
  o->num_seqs = (int64_t)ns;
  o->num_doc_idx = (int64_t)nd;
  o->sizes = buf + IDX_HDR;
  o->pointers = o->sizes + 4 * ns;
  o->doc_idx = o->pointers + 8 * ns;
  int64_t total = 0;
  for (int64_t i = 0; i < o->num_seqs; i++) {
    int32_t sz = rd_i32(o->sizes, i);
    int64_t ptr = rd_i64(o->pointers, i);
    if (sz < 0) return sl_fail(SL_EINPUT, "%s: sequence %lld has negative size %d", path, (long long)i, sz);
    if (ptr < 0 || ptr > bin_bytes || (int64_t)sz * o->elem_size > bin_bytes - ptr)
      return sl_fail(SL_EINPUT,
                     "%s: sequence %lld: pointer %lld + %d tokens x %d bytes exceeds "
                     "the .bin file of %lld bytes (pointer out of bounds)",
                     path, (long long)i, (long long)ptr, sz, o->elem_size, (long long)bin_bytes);
    total += sz; /* <= bin_bytes per sequence, S <= len/12: cannot overflow */
  }
  o->total_tokens = total;
  if (nd < 1) return sl_fail(SL_EINPUT, "%s: document index is empty; expected at least the leading 0", path);
  if (rd_i64(o->doc_idx, 0) != 0)
    return sl_fail(SL_EINPUT, "%s: document index starts with %lld, expected 0", path,
                   (long long)rd_i64(o->doc_idx, 0));
  for (int64_t k = 1; k < o->num_doc_idx; k++)
    if (rd_i64(o->doc_idx, k) < rd_i64(o->doc_idx, k - 1))
      return sl_fail(SL_EINPUT,
                     "%s: document index is not monotonic: entry %lld = %lld < entry "
                     "%lld = %lld",
                     path, (long long)k, (long long)rd_i64(o->doc_idx, k), (long long)(k - 1),
                     (long long)rd_i64(o->doc_idx, k - 1));
  if (rd_i64(o->doc_idx, o->num_doc_idx - 1) != o->num_seqs)
    return sl_fail(SL_EINPUT,
                   "%s: document index ends with %lld, expected the sequence count "
                   "%lld",
                   path, (long long)rd_i64(o->doc_idx, o->num_doc_idx - 1), (long long)o->num_seqs);
  return SL_OK;
}

/* ---- reader -------------------------------------------------------------------- */
struct sl_dataset {
  char *idx_path, *bin_path;
  void *idx_map, *bin_map;
  size_t idx_len, bin_len;
  sl_idx_info info;
  int64_t nblk;
  int64_t *cumblk;   /* (nblk + 1) tokens before sequence k*BLK; cumblk[nblk] = total */
  int64_t rlo, rlen; /* the stream is tokens [rlo, rlo + rlen) (rlen 0: all) */
};

static int map_file(const char *path, const char *what, void **map, size_t *len) {
  *map = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl_fail(errno == ENOENT || errno == EACCES ? SL_EINPUT : SL_EIO, "%s: cannot open %s: %s", path, what,
                   strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return sl_fail(SL_EINPUT, "%s: not a regular file (%s)", path, what);
  }
  *len = (size_t)st.st_size;
  if (*len) {
    void *m = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      close(fd);
      return sl_fail(SL_EIO, "%s: cannot mmap %zu bytes: %s", path, *len, strerror(e));
    }
    *map = m;
  }
  close(fd);
  return SL_OK;
}

void sl_dataset_close(sl_dataset *ds) {
  if (!ds) return;
  if (ds->idx_map) munmap(ds->idx_map, ds->idx_len);
  if (ds->bin_map) munmap(ds->bin_map, ds->bin_len);
  free(ds->cumblk);
  free(ds->idx_path);
  free(ds->bin_path);
  free(ds);
}

int sl_dataset_open(const char *prefix, sl_dataset **out) {
  int rc;
  *out = NULL;
  sl_dataset *ds = calloc(1, sizeof *ds);
  if (!ds) return sl_fail(SL_ENOMEM, "out of memory");
  if (asprintf(&ds->idx_path, "%s.idx", prefix) < 0 || asprintf(&ds->bin_path, "%s.bin", prefix) < 0) {
    free(ds);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  if ((rc = map_file(ds->idx_path, "the dataset index", &ds->idx_map, &ds->idx_len)) ||
      (rc = map_file(ds->bin_path, "the dataset tokens", &ds->bin_map, &ds->bin_len)))
    goto fail;
  if ((rc = sl_idx_parse(ds->idx_path, ds->idx_map, ds->idx_len, (int64_t)ds->bin_len, &ds->info))) {
    if (strstr(sl_errmsg(), ".bin file")) {
      char old[1536];
      snprintf(old, sizeof old, "%s", sl_errmsg());
      sl_fail(rc, "%s [.bin file: %s]", old, ds->bin_path);
    }
    goto fail;
  }
  ds->nblk = (ds->info.num_seqs + BLK - 1) / BLK;
  ds->cumblk = malloc((size_t)(ds->nblk + 1) * sizeof *ds->cumblk);
  if (!ds->cumblk) {
    rc = sl_fail(SL_ENOMEM, "out of memory indexing %s", ds->idx_path);
    goto fail;
  }
  int64_t acc = 0;
  for (int64_t i = 0; i < ds->info.num_seqs; i++) {
    if (i % BLK == 0) ds->cumblk[i / BLK] = acc;
    acc += rd_i32(ds->info.sizes, i);
  }
  ds->cumblk[ds->nblk] = acc;
  *out = ds;
  return SL_OK;
fail:
  sl_dataset_close(ds);
  return rc;
}

int64_t sl_dataset_num_seqs(const sl_dataset *ds) { return ds->info.num_seqs; }
int64_t sl_dataset_num_docs(const sl_dataset *ds) { return ds->info.num_doc_idx - 1; }
int64_t sl_dataset_num_tokens(const sl_dataset *ds) { return ds->rlen ? ds->rlen : ds->info.total_tokens; }
int sl_dataset_dtype(const sl_dataset *ds) { return ds->info.dtype; }

/* Converts n tokens of sequence i starting at token off into dst. */
static int seq_copy(const sl_dataset *ds, int64_t i, int64_t off, int64_t n, int32_t *dst, int64_t stream_pos) {
  const uint8_t *p = (const uint8_t *)ds->bin_map + rd_i64(ds->info.pointers, i) + off * ds->info.elem_size;
  switch (ds->info.dtype) {
  case SL_IDX_UINT8:
    for (int64_t k = 0; k < n; k++) dst[k] = p[k];
    break;
  case SL_IDX_INT8:
    for (int64_t k = 0; k < n; k++) dst[k] = (int8_t)p[k];
    break;
  case SL_IDX_INT16:
    for (int64_t k = 0; k < n; k++) {
      int16_t v;
      memcpy(&v, p + 2 * k, 2);
      dst[k] = v;
    }
    break;
  case SL_IDX_UINT16:
    for (int64_t k = 0; k < n; k++) {
      uint16_t v;
      memcpy(&v, p + 2 * k, 2);
      dst[k] = v;
    }
    break;
  case SL_IDX_INT32: memcpy(dst, p, (size_t)n * 4); break;
  default: /* int64 */
    for (int64_t k = 0; k < n; k++) {
      int64_t v;
      memcpy(&v, p + 8 * k, 8);
      if (v < INT32_MIN || v > INT32_MAX)
        return sl_fail(SL_EINPUT,
                       "%s: token at stream position %lld (sequence %lld) has value "
                       "%lld, outside the int32 range",
                       ds->bin_path, (long long)(stream_pos + k), (long long)i, (long long)v);
      dst[k] = (int32_t)v;
    }
  }
  return SL_OK;
}

int sl_dataset_sequence(const sl_dataset *ds, int64_t i, int32_t *dst, int64_t *n) {
  if (i < 0 || i >= ds->info.num_seqs)
    return sl_fail(SL_EINTERNAL, "%s: sequence %lld out of range [0, %lld)", ds->idx_path, (long long)i,
                   (long long)ds->info.num_seqs);
  *n = rd_i32(ds->info.sizes, i);
  return dst ? seq_copy(ds, i, 0, *n, dst, -1) : SL_OK;
}

/* Sequence holding stream position pos (< total) and the offset inside it. */
static void locate(const sl_dataset *ds, int64_t pos, int64_t *seq, int64_t *off) {
  int64_t lo = 0, hi = ds->nblk - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (ds->cumblk[mid] <= pos) lo = mid;
    else hi = mid - 1;
  }
  int64_t i = lo * BLK, acc = ds->cumblk[lo];
  while (acc + rd_i32(ds->info.sizes, i) <= pos) acc += rd_i32(ds->info.sizes, i++);
  *seq = i;
  *off = pos - acc;
}

static int tokens_abs(const sl_dataset *ds, int64_t start, int64_t n, int32_t *dst) {
  int64_t total = ds->info.total_tokens;
  if (start < 0 || n < 0)
    return sl_fail(SL_EINTERNAL, "%s: invalid token range start %lld, count %lld", ds->bin_path, (long long)start,
                   (long long)n);
  if (n == 0) return SL_OK;
  if (total == 0) return sl_fail(SL_EINPUT, "%s: the dataset has no tokens", ds->idx_path);
  int64_t pos = start % total, seq, off;
  locate(ds, pos, &seq, &off);
  while (n > 0) {
    int64_t sz = rd_i32(ds->info.sizes, seq), m = sz - off < n ? sz - off : n;
    if (m > 0) {
      int rc = seq_copy(ds, seq, off, m, dst, pos);
      if (rc) return rc;
      dst += m;
      n -= m;
      pos += m;
    }
    off = 0;
    if (++seq == ds->info.num_seqs) {
      seq = 0;
      pos = 0;
    }
  }
  return SL_OK;
}

int sl_dataset_tokens(const sl_dataset *ds, int64_t start, int64_t n, int32_t *dst) {
  if (!ds->rlen || start < 0 || n <= 0) return tokens_abs(ds, start, n, dst);
  while (n > 0) { /* wrap inside the range */
    int64_t p = start % ds->rlen, m = ds->rlen - p < n ? ds->rlen - p : n;
    int rc = tokens_abs(ds, ds->rlo + p, m, dst);
    if (rc) return rc;
    dst += m;
    n -= m;
    start += m;
  }
  return SL_OK;
}

int64_t sl_dataset_doc_offset(const sl_dataset *ds, int64_t d) {
  int64_t nd = ds->info.num_doc_idx - 1;
  if (d <= 0 || nd <= 0) return 0;
  if (d >= nd) return ds->info.total_tokens;
  int64_t s = rd_i64(ds->info.doc_idx, d), acc = ds->cumblk[s / BLK];
  for (int64_t i = (s / BLK) * BLK; i < s; i++) acc += rd_i32(ds->info.sizes, i);
  return acc;
}

/* The document holding stream position pos (0 <= pos < total): the last d
 * with sl_dataset_doc_offset(d) <= pos (nd >= 1 documents). */
static int64_t doc_holding(const sl_dataset *ds, int64_t nd, int64_t pos) {
  int64_t lo = 0, hi = nd - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (sl_dataset_doc_offset(ds, mid) <= pos) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

int sl_dataset_doc_starts(const sl_dataset *ds, int64_t start, int64_t n, uint8_t *first) {
  int64_t len = sl_dataset_num_tokens(ds), base = ds->rlen ? ds->rlo : 0, nd = ds->info.num_doc_idx - 1;
  if (start < 0 || n < 0 || len <= 0)
    return sl_fail(SL_EINTERNAL, "%s: document starts of an invalid window (start %lld, count %lld, %lld tokens)",
                   ds->idx_path, (long long)start, (long long)n, (long long)len);
  if (n) memset(first, 0, (size_t)n);
  for (int64_t i = 0; i < n;) {
    int64_t p = (start + i) % len, pos = base + p, next = base + len; /* the wrap point ends the last document */
    int is_start = p == 0;
    if (nd > 0) {
      int64_t d = doc_holding(ds, nd, pos), e = sl_dataset_doc_offset(ds, d + 1);
      is_start |= sl_dataset_doc_offset(ds, d) == pos;
      if (e < next) next = e;
    }
    first[i] = (uint8_t)is_start;
    i += next - pos; /* > 0: next is past pos */
  }
  return SL_OK;
}

int sl_dataset_count_inside(const sl_dataset *ds, int64_t id, int64_t *count) {
  *count = 0;
  int32_t buf[4096];
  for (int64_t d = 0; d < ds->info.num_doc_idx - 1; d++) {
    int64_t s0 = rd_i64(ds->info.doc_idx, d), s1 = rd_i64(ds->info.doc_idx, d + 1), last = -1;
    for (int64_t i = s1; i-- > s0;) /* the document's last sequence that holds a token */
      if (rd_i32(ds->info.sizes, i) > 0) {
        last = i;
        break;
      }
    for (int64_t i = s0; i <= last; i++) {
      int64_t sz = rd_i32(ds->info.sizes, i);
      for (int64_t o = 0; o < sz; o += 4096) {
        int64_t m = sz - o < 4096 ? sz - o : 4096;
        int rc = seq_copy(ds, i, o, m, buf, -1);
        if (rc) return rc;
        for (int64_t k = 0; k < m; k++) *count += buf[k] == id && !(i == last && o + k == sz - 1);
      }
    }
  }
  return SL_OK;
}

int sl_dataset_set_range(sl_dataset *ds, int64_t lo, int64_t hi) {
  if (lo < 0 || hi > ds->info.total_tokens || hi <= lo)
    return sl_fail(SL_EINPUT, "%s: token range [%lld, %lld) is empty or outside the %lld tokens of the dataset",
                   ds->idx_path, (long long)lo, (long long)hi, (long long)ds->info.total_tokens);
  ds->rlo = lo;
  ds->rlen = hi - lo;
  return SL_OK;
}

int sl_dataset_check_vocab(const sl_dataset *ds, int64_t vocab) {
  int32_t buf[4096];
  int64_t pos = 0;
  for (int64_t i = 0; i < ds->info.num_seqs; i++) {
    int64_t sz = rd_i32(ds->info.sizes, i);
    for (int64_t o = 0; o < sz; o += 4096) {
      int64_t m = sz - o < 4096 ? sz - o : 4096;
      int rc = seq_copy(ds, i, o, m, buf, pos + o);
      if (rc) return rc;
      for (int64_t k = 0; k < m; k++)
        if (buf[k] < 0 || buf[k] >= vocab)
          return sl_fail(SL_EINPUT,
                         "%s: token at stream position %lld (sequence %lld, token "
                         "%lld) has value %d, outside the model's vocabulary [0, %lld)",
                         ds->bin_path, (long long)(pos + o + k), (long long)i, (long long)(o + k), buf[k],
                         (long long)vocab);
    }
    pos += sz;
  }
  return SL_OK;
}

/* ---- writer ---------------------------------------------------------------------- */
struct sl_dataset_builder {
  char *bin_path, *idx_path, *bin_tmp, *idx_tmp;
  int fd;
  int dtype, elem;
  int32_t *sizes; /* (nseq) */
  int64_t nseq, cap;
  int64_t cur;   /* tokens in the open document */
  uint8_t *wbuf; /* write buffer */
  size_t wn;
};
#define WBUF (1u << 20)

static void builder_free(sl_dataset_builder *b) {
  if (b->fd >= 0) close(b->fd);
  free(b->bin_path);
  free(b->idx_path);
  free(b->bin_tmp);
  free(b->idx_tmp);
  free(b->sizes);
  free(b->wbuf);
  free(b);
}

void sl_dataset_builder_abort(sl_dataset_builder *b) {
  if (!b) return;
  if (b->bin_tmp) unlink(b->bin_tmp);
  if (b->idx_tmp) unlink(b->idx_tmp);
  builder_free(b);
}

int sl_dataset_builder_create(const char *prefix, int dtype, sl_dataset_builder **out) {
  *out = NULL;
  if (!elem_size_of(dtype))
    return sl_fail(SL_EINPUT, "%s: cannot write dtype code %d (%s); expected 1,2,3,4,5 or 8", prefix, dtype,
                   dtype_name(dtype));
  sl_dataset_builder *b = calloc(1, sizeof *b);
  if (!b) return sl_fail(SL_ENOMEM, "out of memory");
  b->fd = -1;
  b->dtype = dtype;
  b->elem = elem_size_of(dtype);
  int pid = (int)getpid();
  if (asprintf(&b->bin_path, "%s.bin", prefix) < 0) b->bin_path = NULL;
  if (asprintf(&b->idx_path, "%s.idx", prefix) < 0) b->idx_path = NULL;
  if (asprintf(&b->bin_tmp, "%s.bin.tmp.%d", prefix, pid) < 0) b->bin_tmp = NULL;
  if (asprintf(&b->idx_tmp, "%s.idx.tmp.%d", prefix, pid) < 0) b->idx_tmp = NULL;
  b->wbuf = malloc(WBUF);
  if (!b->bin_path || !b->idx_path || !b->bin_tmp || !b->idx_tmp || !b->wbuf) {
    builder_free(b);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  b->fd = open(b->bin_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (b->fd < 0) {
    int e = errno;
    builder_free(b);
    return sl_fail(e == ENOENT || e == EACCES || e == ENOTDIR ? SL_EINPUT : SL_EIO, "%s.bin: cannot create: %s", prefix,
                   strerror(e));
  }
  *out = b;
  return SL_OK;
}

static int flush(sl_dataset_builder *b) {
  int rc = sl_write_all(b->fd, b->wbuf, b->wn, b->bin_tmp);
  b->wn = 0;
  return rc;
}

int sl_dataset_builder_add_tokens(sl_dataset_builder *b, const int32_t *t, int64_t n) {
  static const int64_t lo[] = {0, 0, -128, -32768, INT32_MIN, INT32_MIN, 0, 0, 0};
  static const int64_t hi[] = {0, 255, 127, 32767, INT32_MAX, INT32_MAX, 0, 0, 65535};
  if (n > INT32_MAX - b->cur)
    return sl_fail(SL_EINPUT, "%s: document %lld exceeds %d tokens", b->bin_path, (long long)b->nseq, INT32_MAX);
  for (int64_t k = 0; k < n; k++) {
    int64_t v = t[k];
    if (v < lo[b->dtype] || v > hi[b->dtype])
      return sl_fail(SL_EINPUT,
                     "%s: token value %lld (document %lld, token %lld) does not fit "
                     "dtype %s",
                     b->bin_path, (long long)v, (long long)b->nseq, (long long)(b->cur + k), dtype_name(b->dtype));
    if (b->wn + 8 > WBUF) {
      int rc = flush(b);
      if (rc) return rc;
    }
    uint8_t *p = b->wbuf + b->wn;
    switch (b->elem) {
    case 1: *p = (uint8_t)v; break;
    case 2: {
      uint16_t x = (uint16_t)v;
      memcpy(p, &x, 2);
    } break;
    case 4: {
      int32_t x = (int32_t)v;
      memcpy(p, &x, 4);
    } break;
    default: memcpy(p, &v, 8);
    }
    b->wn += (size_t)b->elem;
  }
  b->cur += n;
  return SL_OK;
}

int sl_dataset_builder_end_document(sl_dataset_builder *b) {
  if (b->nseq == b->cap) {
    int64_t c = b->cap ? b->cap * 2 : 1024;
    int32_t *s = realloc(b->sizes, (size_t)c * sizeof *s);
    if (!s) return sl_fail(SL_ENOMEM, "out of memory building %s", b->idx_path);
    b->sizes = s;
    b->cap = c;
  }
  b->sizes[b->nseq++] = (int32_t)b->cur;
  b->cur = 0;
  return SL_OK;
}

int sl_dataset_builder_add_document(sl_dataset_builder *b, const int32_t *t, int64_t n) {
  int rc = sl_dataset_builder_add_tokens(b, t, n);
  return rc ? rc : sl_dataset_builder_end_document(b);
}

int sl_dataset_builder_finish(sl_dataset_builder *b) {
  int rc = SL_OK, fd = -1;
  if (b->cur > 0 && (rc = sl_dataset_builder_end_document(b))) goto fail;
  if ((rc = flush(b))) goto fail;
  if (fsync(b->fd) != 0 || close(b->fd) != 0) {
    b->fd = -1;
    rc = sl_fail(SL_EIO, "%s: fsync/close failed: %s", b->bin_tmp, strerror(errno));
    goto fail;
  }
  b->fd = -1;
  fd = open(b->idx_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = sl_fail(SL_EIO, "%s: cannot create: %s", b->idx_tmp, strerror(errno));
    goto fail;
  }
  uint8_t hdr[IDX_HDR];
  uint64_t ver = 1, ns = (uint64_t)b->nseq, nd = (uint64_t)b->nseq + 1;
  memcpy(hdr, k_magic, 9);
  memcpy(hdr + 9, &ver, 8);
  hdr[17] = (uint8_t)b->dtype;
  memcpy(hdr + 18, &ns, 8);
  memcpy(hdr + 26, &nd, 8);
  b->wn = 0;
  if ((rc = sl_write_all(fd, hdr, IDX_HDR, b->idx_tmp))) goto fail;
  /* sizes, pointers, doc index, each streamed through wbuf */
  for (int pass = 0; pass < 3 && !rc; pass++) {
    int64_t cnt = pass == 2 ? b->nseq + 1 : b->nseq, acc = 0;
    for (int64_t i = 0; i < cnt && !rc; i++) {
      if (b->wn + 8 > WBUF) {
        rc = sl_write_all(fd, b->wbuf, b->wn, b->idx_tmp);
        b->wn = 0;
      }
      if (pass == 0) {
        memcpy(b->wbuf + b->wn, &b->sizes[i], 4);
        b->wn += 4;
      } else {
        int64_t v = pass == 1 ? acc : i;
        memcpy(b->wbuf + b->wn, &v, 8);
        b->wn += 8;
        if (pass == 1) acc += (int64_t)b->sizes[i] * b->elem;
      }
    }
  }
  if (!rc) rc = sl_write_all(fd, b->wbuf, b->wn, b->idx_tmp);
  if (rc) goto fail;
  if (fsync(fd) != 0 || close(fd) != 0) {
    fd = -1;
    rc = sl_fail(SL_EIO, "%s: fsync/close failed: %s", b->idx_tmp, strerror(errno));
    goto fail;
  }
  fd = -1;
  if (rename(b->bin_tmp, b->bin_path) != 0 || rename(b->idx_tmp, b->idx_path) != 0) {
    rc = sl_fail(SL_EIO, "cannot rename %s / %s into place: %s", b->bin_tmp, b->idx_tmp, strerror(errno));
    goto fail;
  }
  sl_fsync_parent(b->idx_path);
  builder_free(b);
  return SL_OK;
fail:
  if (fd >= 0) close(fd);
  sl_dataset_builder_abort(b);
  return rc;
}
