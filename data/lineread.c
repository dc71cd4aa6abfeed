/* data/lineread.c — buffered line reader over plain / gzip / zstd files
 * and memory. One decoded buffer: lines are returned in place; the buffer is
 * compacted before a refill and doubled only when one line outgrows it.
 */
#define _GNU_SOURCE
#include "data/lineread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#ifdef SL_USE_ZSTD
#include <zstd.h>
#endif

#include "base/base.h"

enum { SRC_PLAIN, SRC_GZ, SRC_ZST, SRC_MEM };
#define CHUNK (1u << 20)

struct sl_lineread {
  char *name;
  int kind;
  int fd;
  gzFile gz;
#ifdef SL_USE_ZSTD
  ZSTD_DCtx *zd;
  uint8_t *zin; /* (CHUNK) compressed input */
  ZSTD_inBuffer zib;
  int zeof;
#endif
  const char *mem;
  size_t mem_len;
  char *buf; /* (cap) decoded bytes; [beg, end) not yet returned */
  size_t cap, beg, end, scan;
  int eof; /* the source has no more bytes */
  int64_t lineno, bytes_in;
};

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && !strcmp(s + n - m, suf);
}

static int lr_alloc(const char *name, int kind, sl_lineread **out) {
  sl_lineread *r = calloc(1, sizeof *r);
  if (!r) return sl_fail(SL_ENOMEM, "out of memory");
  r->fd = -1;
  r->kind = kind;
  r->name = strdup(name ? name : "<memory>");
  r->cap = kind == SRC_MEM ? 0 : CHUNK;
  r->buf = r->cap ? malloc(r->cap) : NULL;
  if (!r->name || (r->cap && !r->buf)) {
    sl_lineread_close(r);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  *out = r;
  return SL_OK;
}

int sl_lineread_open_mem(const char *name, const char *text, size_t len, sl_lineread **out) {
  int rc = lr_alloc(name, SRC_MEM, out);
  if (rc) return rc;
  (*out)->mem = text;
  (*out)->mem_len = len;
  return SL_OK;
}

int sl_lineread_open(const char *path, sl_lineread **out) {
  *out = NULL;
  int kind = has_suffix(path, ".gz") ? SRC_GZ : has_suffix(path, ".zst") ? SRC_ZST : SRC_PLAIN;
#ifndef SL_USE_ZSTD
  if (kind == SRC_ZST)
    return sl_fail(SL_EINPUT, "%s: this build has no zstd support (install libzstd-dev and rebuild)", path);
#endif
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl_fail(errno == ENOENT || errno == EACCES || errno == ENOTDIR || errno == EISDIR ? SL_EINPUT : SL_EIO,
                   "%s: cannot open the input: %s", path, strerror(errno));
  sl_lineread *r = NULL;
  int rc = lr_alloc(path, kind, &r);
  if (rc) {
    close(fd);
    return rc;
  }
  r->fd = fd;
  if (kind == SRC_GZ) {
    r->gz = gzdopen(fd, "rb");
    r->fd = -1; /* owned by gz */
    if (!r->gz) {
      close(fd);
      sl_lineread_close(r);
      return sl_fail(SL_ENOMEM, "%s: cannot start gzip", path);
    }
    gzbuffer(r->gz, CHUNK);
  }
#ifdef SL_USE_ZSTD
  if (kind == SRC_ZST) {
    r->zd = ZSTD_createDCtx();
    r->zin = malloc(CHUNK);
    if (!r->zd || !r->zin) {
      sl_lineread_close(r);
      return sl_fail(SL_ENOMEM, "out of memory");
    }
    r->zib = (ZSTD_inBuffer){r->zin, 0, 0};
  }
#endif
  *out = r;
  return SL_OK;
}

/* Appends up to want decoded bytes at buf+end; sets eof when none are left. */
static int fill(sl_lineread *r, size_t want) {
  ssize_t got = 0;
  if (r->kind == SRC_PLAIN) {
    do got = read(r->fd, r->buf + r->end, want);
    while (got < 0 && errno == EINTR);
    if (got < 0) return sl_fail(SL_EIO, "%s: read failed: %s", r->name, strerror(errno));
    r->bytes_in += got;
  } else if (r->kind == SRC_GZ) {
    got = gzread(r->gz, r->buf + r->end, (unsigned)want);
    if (got < 0) {
      int e;
      const char *m = gzerror(r->gz, &e);
      return sl_fail(SL_EINPUT, "%s: not a valid gzip stream: %s", r->name, m);
    }
    r->bytes_in = (int64_t)gzoffset(r->gz);
  }
#ifdef SL_USE_ZSTD
  else if (r->kind == SRC_ZST) {
    ZSTD_outBuffer ob = {r->buf + r->end, want, 0};
    while (ob.pos == 0) {
      if (r->zib.pos == r->zib.size) {
        if (r->zeof) break;
        ssize_t n;
        do n = read(r->fd, r->zin, CHUNK);
        while (n < 0 && errno == EINTR);
        if (n < 0) return sl_fail(SL_EIO, "%s: read failed: %s", r->name, strerror(errno));
        r->bytes_in += n;
        r->zib = (ZSTD_inBuffer){r->zin, (size_t)n, 0};
        if (n == 0) {
          r->zeof = 1;
          break;
        }
      }
      size_t z = ZSTD_decompressStream(r->zd, &ob, &r->zib);
      if (ZSTD_isError(z)) return sl_fail(SL_EINPUT, "%s: not a valid zstd stream: %s", r->name, ZSTD_getErrorName(z));
    }
    got = (ssize_t)ob.pos;
  }
#endif
  if (got == 0) r->eof = 1;
  r->end += (size_t)got;
  return SL_OK;
}

int sl_lineread_next(sl_lineread *r, const char **line, size_t *len, int *eof) {
  *eof = 0;
  if (r->kind == SRC_MEM) {
    if (r->beg >= r->mem_len) {
      *eof = 1;
      return SL_OK;
    }
    const char *s = r->mem + r->beg, *nl = memchr(s, '\n', r->mem_len - r->beg);
    size_t n = nl ? (size_t)(nl - s) : r->mem_len - r->beg;
    *line = s;
    *len = n;
    r->beg += n + (nl ? 1 : 0);
    r->lineno++;
    return SL_OK;
  }
  for (;;) {
    char *nl = r->scan < r->end ? memchr(r->buf + r->scan, '\n', r->end - r->scan) : NULL;
    if (nl || (r->eof && r->end > r->beg)) {
      size_t n = nl ? (size_t)(nl - (r->buf + r->beg)) : r->end - r->beg;
      *line = r->buf + r->beg;
      *len = n;
      r->beg += n + (nl ? 1 : 0);
      r->scan = r->beg;
      r->lineno++;
      return SL_OK;
    }
    if (r->eof) {
      *eof = 1;
      return SL_OK;
    }
    r->scan = r->end;
    if (r->beg > 0) { /* compact */
      memmove(r->buf, r->buf + r->beg, r->end - r->beg);
      r->end -= r->beg;
      r->scan -= r->beg;
      r->beg = 0;
    }
    if (r->end == r->cap) { /* one line fills the buffer: grow */
      char *nb = realloc(r->buf, r->cap * 2);
      if (!nb)
        return sl_fail(SL_ENOMEM, "%s: line %lld is too long to hold in memory", r->name, (long long)r->lineno + 1);
      r->buf = nb;
      r->cap *= 2;
    }
    size_t want = r->cap - r->end;
    if (want > CHUNK) want = CHUNK;
    int rc = fill(r, want);
    if (rc) return rc;
  }
}

int64_t sl_lineread_lineno(const sl_lineread *r) { return r->lineno; }
int64_t sl_lineread_bytes_in(const sl_lineread *r) { return r->kind == SRC_MEM ? (int64_t)r->beg : r->bytes_in; }
const char *sl_lineread_name(const sl_lineread *r) { return r->name; }

void sl_lineread_close(sl_lineread *r) {
  if (!r) return;
  if (r->gz) gzclose(r->gz);
  if (r->fd >= 0) close(r->fd);
#ifdef SL_USE_ZSTD
  if (r->zd) ZSTD_freeDCtx(r->zd);
  free(r->zin);
#endif
  free(r->buf);
  free(r->name);
  free(r);
}
