/* formats/lmask.c — validating memory-mapped reader of PREFIX.lmask (the
 * loss-mask file, formats/lmask.h, docs/formats.md). */
#define _GNU_SOURCE
#include "formats/lmask.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

struct sl_lmask {
  uint8_t *map; /* the whole file */
  size_t len;
  int64_t n;    /* tokens */
  int64_t ones; /* bytes equal to 1 */
};

void sl_lmask_close(sl_lmask *m) {
  if (!m) return;
  if (m->map) munmap(m->map, m->len);
  free(m);
}

int sl_lmask_open(const char *prefix, int64_t ntokens, sl_lmask **out) {
  *out = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s.lmask", prefix);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return SL_OK; /* no mask: every token counts */
    return sl_fail(SL_EINPUT, "%s: cannot open the loss-mask file: %s", path, strerror(errno));
  }
  int rc = SL_OK;
  struct stat st;
  sl_lmask *m = calloc(1, sizeof *m);
  if (!m) {
    close(fd);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = sl_fail(SL_EINPUT, "%s: the loss-mask file is not a regular file", path);
    goto done;
  }
  m->len = (size_t)st.st_size;
  if (m->len < SL_LMASK_HDR) {
    rc = sl_fail(SL_EINPUT,
                 "%s: %zu bytes, too short for the 16-byte loss-mask header "
                 "(\"SLLMASK1\" + uint64 token count)",
                 path, m->len);
    goto done;
  }
  void *p = mmap(NULL, m->len, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    rc = sl_fail(SL_EIO, "%s: cannot mmap %zu bytes: %s", path, m->len, strerror(errno));
    goto done;
  }
  m->map = p;
  if (memcmp(m->map, SL_LMASK_MAGIC, 8) != 0) {
    rc = sl_fail(SL_EINPUT, "%s: bad magic: expected \"SLLMASK1\", found %02x %02x %02x %02x %02x %02x %02x %02x", path,
                 m->map[0], m->map[1], m->map[2], m->map[3], m->map[4], m->map[5], m->map[6], m->map[7]);
    goto done;
  }
  uint64_t n;
  memcpy(&n, m->map + 8, 8); /* little-endian host (dataset.c checks) */
  if (n != (uint64_t)ntokens) {
    rc = sl_fail(SL_EINPUT, "%s: the header holds %llu tokens but the dataset %s.bin has %lld", path,
                 (unsigned long long)n, prefix, (long long)ntokens);
    goto done;
  }
  if ((uint64_t)(m->len - SL_LMASK_HDR) != n) {
    rc = sl_fail(SL_EINPUT, "%s: expected %llu mask bytes after the header (file of %llu bytes), found %zu", path,
                 (unsigned long long)n, (unsigned long long)n + SL_LMASK_HDR, m->len - SL_LMASK_HDR);
    goto done;
  }
  m->n = ntokens;
  const uint8_t *b = m->map + SL_LMASK_HDR;
  for (int64_t i = 0; i < m->n; i++) {
    if (b[i] > 1) {
      rc = sl_fail(SL_EINPUT, "%s: byte of token %lld is %u, expected 0 or 1", path, (long long)i, b[i]);
      goto done;
    }
    m->ones += b[i];
  }
done:
  close(fd);
  if (rc) sl_lmask_close(m);
  else *out = m;
  return rc;
}

int sl_lmask_get(const sl_lmask *m, int64_t pos) { return m->map[SL_LMASK_HDR + pos]; }

int64_t sl_lmask_count(const sl_lmask *m) { return m->ones; }
