/* formats/tbevents.c — TensorBoard scalar event files (formats/tbevents.h). */
#define _GNU_SOURCE
#include "formats/tbevents.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

struct sl_tb {
  int fd;
  int failed; /* a write failed: warned once, nothing more is written */
  char path[4200];
  uint8_t *buf; /* the event being built: the Summary's values, then the whole Event */
  size_t n, cap;
  int64_t step;
};

static uint32_t CRC_TABLE[256];

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1; /* Castagnoli, reflected */
    CRC_TABLE[i] = c;
  }
}

uint32_t sl_crc32c(const void *data, size_t n) {
  if (!CRC_TABLE[1]) crc_init();
  const uint8_t *p = data;
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = CRC_TABLE[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t sl_crc32c_masked(const void *data, size_t n) {
  uint32_t c = sl_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* Protobuf encoding into a growing buffer (all little-endian). */
static int put(sl_tb *tb, const void *p, size_t n) {
  if (tb->n + n > tb->cap) {
    size_t cap = (tb->n + n) * 2 + 256;
    uint8_t *nb = realloc(tb->buf, cap);
    if (!nb) return -1;
    tb->buf = nb;
    tb->cap = cap;
  }
  memcpy(tb->buf + tb->n, p, n);
  tb->n += n;
  return 0;
}

static size_t varint(uint8_t *o, uint64_t v) {
  size_t k = 0;
  do {
    o[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return k;
}

static int put_varint(sl_tb *tb, uint64_t v) {
  uint8_t o[10];
  return put(tb, o, varint(o, v));
}

static int put_tag(sl_tb *tb, int field, int wire) { return put_varint(tb, (uint64_t)(field << 3 | wire)); }

static int put_le(sl_tb *tb, uint64_t v, int bytes) {
  uint8_t o[8];
  for (int i = 0; i < bytes; i++) o[i] = (uint8_t)(v >> (8 * i));
  return put(tb, o, (size_t)bytes);
}

static int put_bytes(sl_tb *tb, int field, const void *p, size_t n) {
  return put_tag(tb, field, 2) || put_varint(tb, n) || put(tb, p, n);
}

/* Writes all of p, else warns once (naming the file) and disables the writer. */
static void write_or_stop(sl_tb *tb, const void *p, size_t n) {
  const uint8_t *q = p;
  while (n && !tb->failed) {
    ssize_t w = write(tb->fd, q, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      sl_log(SL_LOG_WARN, "%s: writing the TensorBoard events failed: %s; training goes on without them", tb->path,
             strerror(w < 0 ? errno : EIO));
      tb->failed = 1;
      return;
    }
    q += w;
    n -= (size_t)w;
  }
}

/* An Event of wall_time, step and one length-delimited field (field, p, n), framed as one TFRecord
 * (length, masked CRC32C of the length, the Event, masked CRC32C of the Event) and written at once. */
static void write_event(sl_tb *tb, int64_t step, int field, const uint8_t *p, size_t n) {
  double wall = (double)time(NULL);
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) == 0) wall = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
  uint64_t bits;
  memcpy(&bits, &wall, 8);
  uint8_t head[48];
  size_t h = 12;          /* the record's length and its CRC go first */
  head[h++] = 1 << 3 | 1; /* wall_time: double */
  for (int i = 0; i < 8; i++) head[h++] = (uint8_t)(bits >> (8 * i));
  head[h++] = 2 << 3 | 0; /* step: int64 */
  h += varint(head + h, (uint64_t)step);
  h += varint(head + h, (uint64_t)(field << 3 | 2));
  h += varint(head + h, n);
  size_t len = h - 12 + n; /* the Event's bytes */
  uint8_t *rec = malloc(12 + len + 4);
  if (!rec) {
    tb->failed = 1;
    sl_log(SL_LOG_WARN, "%s: out of memory; no more TensorBoard events", tb->path);
    return;
  }
  memcpy(rec, head, h);
  if (n) memcpy(rec + h, p, n);
  for (int i = 0; i < 8; i++) rec[i] = (uint8_t)((uint64_t)len >> (8 * i));
  uint32_t hc = sl_crc32c_masked(rec, 8), dc = sl_crc32c_masked(rec + 12, len);
  for (int i = 0; i < 4; i++) rec[8 + i] = (uint8_t)(hc >> (8 * i));
  for (int i = 0; i < 4; i++) rec[12 + len + i] = (uint8_t)(dc >> (8 * i));
  write_or_stop(tb, rec, 12 + len + 4);
  free(rec);
}

int sl_tb_open(const char *dir, int64_t resume_step, sl_tb **out) {
  *out = NULL;
  sl_tb *tb = calloc(1, sizeof *tb);
  if (!tb) return SL_OK;
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
  for (char *c = host; *c; c++)
    if (*c == '/') *c = '_';
  long long now = (long long)time(NULL);
  tb->fd = -1;
  for (int i = 0; i < 100 && tb->fd < 0; i++) { /* a name taken (the same second): the next suffix */
    if (i) snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s.%d", dir, now, host, i);
    else snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%lld.%s", dir, now, host);
    tb->fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (tb->fd < 0 && errno != EEXIST) break;
  }
  if (tb->fd < 0) {
    sl_log(SL_LOG_WARN, "%s: cannot create the TensorBoard events file: %s; training goes on without it", tb->path,
           strerror(errno));
    free(tb);
    return SL_OK;
  }
  static const char version[] = "brain.Event:2";
  write_event(tb, 0, 3, (const uint8_t *)version, sizeof version - 1);
  if (resume_step > 0) { /* SessionLog { status: START } at the step training resumes from */
    const uint8_t start[2] = {1 << 3 | 0, 1};
    write_event(tb, resume_step, 7, start, 2);
  }
  *out = tb;
  return SL_OK;
}

void sl_tb_begin(sl_tb *tb, int64_t step) {
  if (!tb) return;
  tb->n = 0;
  tb->step = step;
}

void sl_tb_scalar(sl_tb *tb, const char *tag, double value) {
  if (!tb || tb->failed) return;
  size_t tl = strlen(tag);
  float f = (float)value;
  uint32_t bits;
  memcpy(&bits, &f, 4);
  /* Summary.value (1): Value { tag (1): string, simple_value (2): float } */
  uint8_t lk[10];
  size_t vlen = 1 + varint(lk, tl) + tl + 1 + 4;
  if (put_tag(tb, 1, 2) || put_varint(tb, vlen) || put_bytes(tb, 1, tag, tl) || put_tag(tb, 2, 5) ||
      put_le(tb, bits, 4)) {
    tb->failed = 1;
    sl_log(SL_LOG_WARN, "%s: out of memory; no more TensorBoard events", tb->path);
  }
}

void sl_tb_end(sl_tb *tb) {
  if (!tb || tb->failed) return;
  write_event(tb, tb->step, 5, tb->buf, tb->n); /* summary (5) */
  tb->n = 0;
}

const char *sl_tb_path(const sl_tb *tb) { return tb ? tb->path : ""; }

void sl_tb_close(sl_tb **tb) {
  if (!*tb) return;
  if ((*tb)->fd >= 0 && close((*tb)->fd) != 0 && !(*tb)->failed)
    sl_log(SL_LOG_WARN, "%s: closing the TensorBoard events failed: %s", (*tb)->path, strerror(errno));
  free((*tb)->buf);
  free(*tb);
  *tb = NULL;
}
