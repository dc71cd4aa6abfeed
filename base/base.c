/* base/base.c — status messages, logging, time and back-off, SplitMix64,
 * allocation, arena counters. */
#define _GNU_SOURCE
#include "base/base.h"
#include "base/env.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_err[2048];

int sl_vfail(int code, const char *fmt, va_list ap) {
  char tmp[sizeof g_err]; /* the arguments may be g_err itself */
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  memcpy(g_err, tmp, sizeof g_err);
  return code;
}

int sl_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sl_vfail(code, fmt, ap);
  va_end(ap);
  return code;
}

int sl_fail_ctx(int code, const char *fmt, ...) {
  char pre[1024], old[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, g_err, sizeof old);
  size_t n = strlen(pre);
  if (n > sizeof g_err - 3) n = sizeof g_err - 3;
  memcpy(g_err, pre, n);
  memcpy(g_err + n, ": ", 2);
  size_t rest = sizeof g_err - n - 3;
  size_t m = strnlen(old, rest);
  memcpy(g_err + n + 2, old, m);
  g_err[n + 2 + m] = 0;
  return code;
}

const char *sl_errmsg(void) { return g_err; }
void sl_clear_error(void) { g_err[0] = 0; }

static int g_level = -1, g_rank = 0, g_world = 1;

static int level_now(void) {
  if (g_level < 0) {
    const char *e = sl_env_str("SL_LOG"); /* never NULL: the table's default is "info" */
    g_level = SL_LOG_INFO;
    if (e) {
      if (!strcmp(e, "error")) g_level = SL_LOG_ERROR;
      else if (!strcmp(e, "warn")) g_level = SL_LOG_WARN;
      else if (!strcmp(e, "debug")) g_level = SL_LOG_DEBUG;
    }
  }
  return g_level;
}

void sl_log_set_level(int level) { g_level = level; }
int sl_log_get_level(void) { return level_now(); }
void sl_log_set_rank(int rank, int world) {
  g_rank = rank;
  g_world = world;
}

static void vlog(int level, const char *fmt, va_list ap) {
  static const char *tag[] = {"error", "warn", "info", "debug"};
  char buf[4096];
  vsnprintf(buf, sizeof buf, fmt, ap);
  FILE *f = level <= SL_LOG_WARN ? stderr : stdout;
  if (g_world > 1)
    fprintf(f, "[rank %d] %s%s%s\n", g_rank, level <= SL_LOG_WARN ? tag[level] : "", level <= SL_LOG_WARN ? ": " : "",
            buf);
  else fprintf(f, "%s%s%s\n", level <= SL_LOG_WARN ? tag[level] : "", level <= SL_LOG_WARN ? ": " : "", buf);
  fflush(f);
}

void sl_log(int level, const char *fmt, ...) {
  if (level > level_now()) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, fmt, ap);
  va_end(ap);
}

void sl_log0(int level, const char *fmt, ...) {
  if (g_rank != 0 || level > level_now()) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(level, fmt, ap);
  va_end(ap);
}

uint64_t sl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
double sl_now_s(void) { return (double)sl_now_ns() * 1e-9; }

void sl_sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

void sl_backoff(int *spins, const sl_backoff_policy *p) {
  if (*spins < p->spin) {
    (*spins)++;
    if (p->yield) sched_yield();
    return;
  }
  int k = *spins - p->spin;
  long us = p->first_us << (k < p->doublings ? k : p->doublings);
  if (k < p->doublings) (*spins)++;
  sl_sleep_us(us > p->max_us ? p->max_us : us);
}

uint64_t sl_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t sl_splitmix64(uint64_t *s) { return sl_mix64(*s += 0x9e3779b97f4a7c15ull); }

void *sl_alloc(size_t bytes, const char *what) {
  void *p = NULL;
  size_t n = (bytes + 63) & ~(size_t)63;
  if (n == 0) n = 64;
  if (posix_memalign(&p, 64, n) != 0) {
    sl_fail(SL_ENOMEM, "out of memory allocating %zu bytes for %s", bytes, what ? what : "?");
    return NULL;
  }
  memset(p, 0, n);
  return p;
}
void sl_free(void *p) { free(p); }

static pthread_mutex_t g_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static sl_mem_stats g_mem;

const char *sl_arena_name(sl_arena a) {
  static const char *n[] = {"params", "grads", "optim", "gather", "acts", "workspace", "host_optim", "scratch"};
  return (a >= 0 && a < SL_ARENA_COUNT) ? n[a] : "?";
}

static void mem_update_locked(void) {
  int64_t t = 0;
  for (int i = 0; i < SL_ARENA_COUNT; i++) {
    if (g_mem.cur[i] > g_mem.peak[i]) g_mem.peak[i] = g_mem.cur[i];
    t += g_mem.cur[i];
  }
  g_mem.total_cur = t;
  if (t > g_mem.total_peak) g_mem.total_peak = t;
}

void sl_mem_add(sl_arena a, int64_t bytes) {
  pthread_mutex_lock(&g_mem_mu);
  g_mem.cur[a] += bytes;
  mem_update_locked();
  pthread_mutex_unlock(&g_mem_mu);
}
void sl_mem_sub(sl_arena a, int64_t bytes) { sl_mem_add(a, -bytes); }
void sl_mem_set(sl_arena a, int64_t bytes) {
  pthread_mutex_lock(&g_mem_mu);
  g_mem.cur[a] = bytes;
  mem_update_locked();
  pthread_mutex_unlock(&g_mem_mu);
}
void sl_mem_get(sl_mem_stats *out) {
  pthread_mutex_lock(&g_mem_mu);
  *out = g_mem;
  pthread_mutex_unlock(&g_mem_mu);
}
void sl_mem_restore(const sl_mem_stats *s) {
  pthread_mutex_lock(&g_mem_mu);
  g_mem = *s;
  pthread_mutex_unlock(&g_mem_mu);
}
void sl_mem_reset_peaks(void) {
  pthread_mutex_lock(&g_mem_mu);
  for (int i = 0; i < SL_ARENA_COUNT; i++) g_mem.peak[i] = g_mem.cur[i];
  g_mem.total_peak = g_mem.total_cur;
  pthread_mutex_unlock(&g_mem_mu);
}

/* ---- files ------------------------------------------------------------------ */
int sl_write_all(int fd, const void *p, size_t n, const char *path) {
  const uint8_t *q = p;
  while (n) {
    ssize_t w = write(fd, q, n > (1u << 30) ? (1u << 30) : n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return sl_fail(SL_EIO, "%s: write failed: %s", path, strerror(w < 0 ? errno : EIO));
    q += w;
    n -= (size_t)w;
  }
  return SL_OK;
}

void sl_fsync_parent(const char *path) {
  char *d = strdup(path);
  if (!d) return;
  char *sl = strrchr(d, '/');
  if (sl == d) sl[1] = 0;
  else if (sl) *sl = 0;
  else strcpy(d, ".");
  int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  free(d);
}

int sl_mkdirs(const char *dir) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    mkdir(buf, 0755);
    *p = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST)
    return sl_fail(SL_EIO, "%s: cannot create directory: %s", dir, strerror(errno));
  return SL_OK;
}

int sl_write_text_atomic(const char *path, const char *text) {
  char tmp[4200];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
    return sl_fail(SL_EIO, "%s: path too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sl_fail(SL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
  int rc = sl_write_all(fd, text, strlen(text), tmp);
  if (!rc && fsync(fd) != 0) rc = sl_fail(SL_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
  if (close(fd) != 0 && !rc) rc = sl_fail(SL_EIO, "%s: close failed: %s", tmp, strerror(errno));
  if (!rc && rename(tmp, path) != 0) rc = sl_fail(SL_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (rc) unlink(tmp);
  else sl_fsync_parent(path);
  return rc;
}
