/* data/lineread.c — buffered line reader over plain / gzip / zstd files
 * and memory. One decoded buffer: lines are returned in place; the buffer is
 * compacted before a refill and doubled only when one line outgrows it.
 */
#define _GNU_SOURCE
#include "data/lineread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
#define ZSLICE (16u << 10)

struct sl_lineread {
  char *name;
  int kind;
  int fd;
  z_stream *zs; /* gzip: inflate over zin */
  int zs_end;   /* gzip: the last member ended (Z_STREAM_END) */
  uint8_t *zin; /* (CHUNK) compressed input (gzip and zstd) */
  int zeof;     /* the compressed file has no more bytes */
  int64_t zbase; /* file offset of zin[0] */
  size_t zpos, zlen; /* zin[zpos, zlen) not yet decoded */
#ifdef SL_USE_ZSTD
  ZSTD_DCtx *zd;
  size_t zlast; /* the last ZSTD_decompressStream hint: 0 when a frame ended */
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

/* Reads more compressed bytes after zin[zpos, zlen) (moved to the front). */
static int zread(sl_lineread *r) {
  if (r->zpos > 0) {
    memmove(r->zin, r->zin + r->zpos, r->zlen - r->zpos);
    r->zbase += (int64_t)r->zpos;
    r->zlen -= r->zpos;
    r->zpos = 0;
  }
  if (r->zlen == CHUNK || r->zeof) return SL_OK;
  ssize_t n;
  do n = read(r->fd, r->zin + r->zlen, CHUNK - r->zlen);
  while (n < 0 && errno == EINTR);
  if (n < 0) return sl_fail(SL_EIO, "%s: read failed: %s", r->name, strerror(errno));
  if (n == 0) r->zeof = 1;
  r->zlen += (size_t)n;
  r->bytes_in += n;
  return SL_OK;
}

/* At least k compressed bytes in zin[zpos, zlen), unless the file ends first. */
static int zneed(sl_lineread *r, size_t k) {
  while (r->zlen - r->zpos < k && !r->zeof) {
    int rc = zread(r);
    if (rc) return rc;
  }
  return SL_OK;
}

/* The file starts as its suffix says: gzip 1f 8b; zstd a frame (28 b5 2f fd)
 * or a skippable frame (5x 2a 4d 18). */
static int check_magic(sl_lineread *r) {
  int gz = r->kind == SRC_GZ;
  int rc = zneed(r, gz ? 2 : 4);
  if (rc) return rc;
  const char *what = gz ? "gzip" : "zstd", *want = gz ? "1f 8b" : "28 b5 2f fd";
  size_t n = r->zlen - r->zpos;
  if (n == 0)
    return sl_fail(SL_EINPUT, "%s: not a %s file: it is empty (a %s file starts with the bytes %s)", r->name, what,
                   what, want);
  const uint8_t *m = r->zin + r->zpos;
  int good = gz ? n >= 2 && m[0] == 0x1f && m[1] == 0x8b
                : n >= 4 && ((m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) ||
                             ((m[0] & 0xf0) == 0x50 && m[1] == 0x2a && m[2] == 0x4d && m[3] == 0x18));
  if (good) return SL_OK;
  char found[16] = "";
  for (size_t i = 0; i < n && i < (gz ? 2u : 4u); i++)
    snprintf(found + strlen(found), sizeof found - strlen(found), "%s%02x", i ? " " : "", m[i]);
  return sl_fail(SL_EINPUT,
                 "%s: not a %s file: it starts with the bytes %s, a %s file with %s (wrong extension? "
                 "a plain text file must not end in .%s)",
                 r->name, what, found, what, want, gz ? "gz" : "zst");
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
  if (kind == SRC_GZ || kind == SRC_ZST) {
    r->zin = malloc(CHUNK);
    if (!r->zin) {
      sl_lineread_close(r);
      return sl_fail(SL_ENOMEM, "out of memory");
    }
  }
  if (kind == SRC_GZ) {
    r->zs = calloc(1, sizeof *r->zs);
    if (!r->zs || inflateInit2(r->zs, 16 + MAX_WBITS) != Z_OK) { /* gzip wrapper only */
      free(r->zs);
      r->zs = NULL;
      sl_lineread_close(r);
      return sl_fail(SL_ENOMEM, "%s: cannot start gzip", path);
    }
  }
#ifdef SL_USE_ZSTD
  if (kind == SRC_ZST && !(r->zd = ZSTD_createDCtx())) {
    sl_lineread_close(r);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  r->zlast = 1;
#endif
  if (kind == SRC_GZ || kind == SRC_ZST) {
    rc = check_magic(r);
    if (rc) {
      sl_lineread_close(r);
      return rc;
    }
  }
  *out = r;
  return SL_OK;
}

static int truncated(const sl_lineread *r, const char *what) {
  return sl_fail(SL_EINPUT,
                 "%s: truncated %s stream at byte %lld: the file ends inside compressed data "
                 "(an interrupted download or copy?)",
                 r->name, what, (long long)(r->zbase + (int64_t)r->zlen));
}

/* Inflates gzip members (one after another) into buf+end; *got 0 at the end. */
static int gz_fill(sl_lineread *r, size_t want, ssize_t *got) {
  z_stream *z = r->zs;
  z->next_out = (Bytef *)(r->buf + r->end);
  z->avail_out = (uInt)want;
  for (;;) {
    int rc;
    if (r->zpos == r->zlen && !r->zeof) {
      if ((rc = zread(r))) return rc;
      continue;
    }
    if (r->zs_end) { /* a member ended: the file ends, or another member follows */
      if (r->zpos == r->zlen) break;
      if ((rc = zneed(r, 2))) return rc;
      const uint8_t *m = r->zin + r->zpos;
      if (r->zlen - r->zpos < 2 || m[0] != 0x1f || m[1] != 0x8b)
        return sl_fail(SL_EINPUT, "%s: corrupt gzip stream at byte %lld: data after the end of the gzip member is not "
                                  "another gzip member",
                       r->name, (long long)(r->zbase + (int64_t)r->zpos));
      inflateReset(z);
      r->zs_end = 0;
    }
    if (r->zpos == r->zlen) return truncated(r, "gzip"); /* the file ended inside a member */
    z->next_in = r->zin + r->zpos;
    z->avail_in = (uInt)(r->zlen - r->zpos);
    int e = inflate(z, Z_NO_FLUSH);
    r->zpos = r->zlen - z->avail_in;
    if (e == Z_STREAM_END) r->zs_end = 1;
    else if (e == Z_MEM_ERROR) return sl_fail(SL_ENOMEM, "%s: out of memory in gzip", r->name);
    else if (e != Z_OK && e != Z_BUF_ERROR)
      return sl_fail(SL_EINPUT, "%s: corrupt gzip stream at byte %lld: %s", r->name,
                     (long long)(r->zbase + (int64_t)r->zpos), z->msg ? z->msg : "invalid data");
    if (z->avail_out < want) break;
  }
  *got = (ssize_t)(want - z->avail_out);
  return SL_OK;
}

#ifdef SL_USE_ZSTD
/* Decompresses zstd frames into buf+end; *got 0 at the end. */
static int zst_fill(sl_lineread *r, size_t want, ssize_t *got) {
  ZSTD_outBuffer ob = {r->buf + r->end, want, 0};
  for (;;) {
    if (r->zpos == r->zlen && !r->zeof) {
      int rc = zread(r);
      if (rc) return rc;
      continue;
    }
    if (r->zpos == r->zlen && r->zlast == 0) break; /* the file ended after a whole frame */
    /* in slices, so that an error's offset is known to within ZSLICE bytes */
    ZSTD_inBuffer ib = {r->zin, r->zlen - r->zpos > ZSLICE ? r->zpos + ZSLICE : r->zlen, r->zpos};
    size_t z = ZSTD_decompressStream(r->zd, &ob, &ib);
    if (ZSTD_isError(z))
      return sl_fail(SL_EINPUT, "%s: corrupt zstd stream at byte %lld: %s", r->name,
                     (long long)(r->zbase + (int64_t)ib.pos), ZSTD_getErrorName(z));
    r->zpos = ib.pos;
    r->zlast = z;
    if (ob.pos) break;
    if (r->zpos == r->zlen && r->zeof) { /* nothing more comes out */
      if (r->zlast != 0) return truncated(r, "zstd");
      break;
    }
  }
  *got = (ssize_t)ob.pos;
  return SL_OK;
}
#endif

/* Appends up to want decoded bytes at buf+end; sets eof when none are left. */
static int fill(sl_lineread *r, size_t want) {
  ssize_t got = 0;
  if (r->kind == SRC_PLAIN) {
    do got = read(r->fd, r->buf + r->end, want);
    while (got < 0 && errno == EINTR);
    if (got < 0) return sl_fail(SL_EIO, "%s: read failed: %s", r->name, strerror(errno));
    r->bytes_in += got;
  } else if (r->kind == SRC_GZ) {
    int rc = gz_fill(r, want, &got);
    if (rc) return rc;
  }
#ifdef SL_USE_ZSTD
  else if (r->kind == SRC_ZST) {
    int rc = zst_fill(r, want, &got);
    if (rc) return rc;
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
  if (r->zs) {
    inflateEnd(r->zs);
    free(r->zs);
  }
  free(r->zin);
  if (r->fd >= 0) close(r->fd);
#ifdef SL_USE_ZSTD
  if (r->zd) ZSTD_freeDCtx(r->zd);
#endif
  free(r->buf);
  free(r->name);
  free(r);
}
