/* shard/bootstrap.c — the file and TCP rendezvous of shard/bootstrap.h:
 * ranks from the environment, rank 0's blob handed to every other rank. */
#define _GNU_SOURCE
#include "shard/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"

static const char MAGIC[8] = {'S', 'L', 'B', 'O', 'O', 'T', '0', '1'};
enum { HDR = 16 }; /* magic + uint64 length (little-endian host order) */

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- environment ---------------------------------------------------------- */

static int parse_int(const char *var, const char *v, int lo, int hi, int *out) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || !end || *end || end == v || x < lo || x > hi)
    return sl_fail(SL_EINPUT, "%s='%s': expected an integer in [%d, %d]", var, v, lo, hi);
  *out = (int)x;
  return SL_OK;
}

/* Set 0 is shardlm's own (base/env.c's table), the others the launchers'. */
static const char *boot_var(int set, const char *name) { return set == 0 ? sl_env_str(name) : getenv(name); }

int sl_boot_from_env(sl_boot_env *e, int *found) {
  static const char *sets[3][4] = {{"SL_RANK", "SL_WORLD_SIZE", "SL_LOCAL_RANK", "SL_RANK/SL_WORLD_SIZE"},
                                   {"RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK/WORLD_SIZE"},
                                   {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_PROCID/SLURM_NTASKS"}};
  memset(e, 0, sizeof *e);
  *found = 0;
  int k = 0;
  while (k < 3 && !boot_var(k, sets[k][0])) k++;
  if (k == 3) return SL_OK;
  const char *r = boot_var(k, sets[k][0]), *s = boot_var(k, sets[k][1]), *l = boot_var(k, sets[k][2]);
  if (!s) return sl_fail(SL_EINPUT, "%s is set but %s is not", sets[k][0], sets[k][1]);
  int rc = parse_int(sets[k][1], s, 1, 1 << 20, &e->size);
  if (!rc) rc = parse_int(sets[k][0], r, 0, e->size - 1, &e->rank);
  if (!rc && l) rc = parse_int(sets[k][2], l, 0, e->size - 1, &e->local_rank);
  else if (!rc) e->local_rank = e->rank;
  if (rc) return rc;
  snprintf(e->source, sizeof e->source, "%s", sets[k][3]);
  const char *m = sl_env_str("SL_INIT_METHOD");
  if (m && *m) {
    if (!strncmp(m, "fs:", 3) && m[3]) {
      snprintf(e->method, sizeof e->method, "fs");
      snprintf(e->addr, sizeof e->addr, "%s", m + 3);
    } else if (!strncmp(m, "tcp:", 4) && strchr(m + 4, ':')) {
      snprintf(e->method, sizeof e->method, "tcp");
      snprintf(e->addr, sizeof e->addr, "%s", m + 4);
    } else {
      return sl_fail(SL_EINPUT, "SL_INIT_METHOD='%s': expected fs:PATH or tcp:HOST:PORT", m);
    }
  } else if (getenv("MASTER_ADDR") && getenv("MASTER_PORT")) {
    snprintf(e->method, sizeof e->method, "tcp");
    snprintf(e->addr, sizeof e->addr, "%s:%s", getenv("MASTER_ADDR"), getenv("MASTER_PORT"));
  } else if (e->size > 1) {
    return sl_fail(SL_EINPUT,
                   "%s give a world of %d ranks but no rendezvous: set SL_INIT_METHOD=fs:PATH "
                   "or tcp:HOST:PORT (or MASTER_ADDR and MASTER_PORT)",
                   e->source, e->size);
  }
  *found = 1;
  return SL_OK;
}

/* ---- fs --------------------------------------------------------------------- */

static int read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  size_t put = 0;
  while (put < n) {
    ssize_t w = write(fd, (const char *)buf + put, n - put);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    put += (size_t)w;
  }
  return 0;
}

static int write_file_atomic(const char *path, const void *a, size_t na, const void *b, size_t nb) {
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return sl_fail(SL_ECOMM, "bootstrap fs: cannot create %s: %s", tmp, strerror(errno));
  int bad = write_full(fd, a, na) || (nb && write_full(fd, b, nb)) || fsync(fd);
  int e = errno;
  close(fd);
  if (bad || rename(tmp, path) != 0) {
    if (!bad) e = errno;
    unlink(tmp);
    return sl_fail(SL_ECOMM, "bootstrap fs: cannot write %s: %s", path, strerror(e));
  }
  return SL_OK;
}

static int share_fs(const sl_boot_env *e, void *blob, size_t n, double timeout_s) {
  double t_end = sl_now_s() + timeout_s;
  char ack[1200];
  unsigned char hdr[HDR];
  uint64_t n64 = n;
  memcpy(hdr, MAGIC, 8);
  memcpy(hdr + 8, &n64, 8);
  if (e->rank == 0) {
    int rc = write_file_atomic(e->addr, hdr, HDR, blob, n);
    if (rc) return rc;
    int missing = 0;
    for (int r = 1; r < e->size; r++) {
      snprintf(ack, sizeof ack, "%s.ack.%d", e->addr, r);
      while (access(ack, F_OK) != 0 && sl_now_s() < t_end) nap_ms(10);
      if (access(ack, F_OK) != 0) missing++;
    }
    if (missing) {
      char list[512] = "";
      size_t l = 0;
      for (int r = 1; r < e->size && l < sizeof list - 16; r++) {
        snprintf(ack, sizeof ack, "%s.ack.%d", e->addr, r);
        if (access(ack, F_OK) != 0) l += (size_t)snprintf(list + l, sizeof list - l, "%s%d", l ? ", " : "", r);
      }
      unlink(e->addr);
      return sl_fail(SL_ECOMM, "bootstrap fs:%s: %d of %d ranks did not read the id within %.1f s (ranks %s)", e->addr,
                     missing, e->size - 1, timeout_s, list);
    }
    unlink(e->addr);
    for (int r = 1; r < e->size; r++) {
      snprintf(ack, sizeof ack, "%s.ack.%d", e->addr, r);
      unlink(ack);
    }
    return SL_OK;
  }
  for (;;) {
    int fd = open(e->addr, O_RDONLY);
    if (fd >= 0) {
      unsigned char got[HDR];
      struct stat st;
      int ok = fstat(fd, &st) == 0 && (size_t)st.st_size == HDR + n && read_full(fd, got, HDR) == 0;
      if (ok && (memcmp(got, MAGIC, 8) != 0 || memcmp(got + 8, &n64, 8) != 0)) {
        close(fd);
        uint64_t theirs;
        memcpy(&theirs, got + 8, 8);
        return sl_fail(SL_ECOMM,
                       "bootstrap fs:%s: not a shardlm rendezvous file of %zu bytes (magic %.8s, "
                       "length %llu)",
                       e->addr, n, (const char *)got, (unsigned long long)theirs);
      }
      ok = ok && read_full(fd, blob, n) == 0;
      close(fd);
      if (ok) break;
    }
    if (sl_now_s() >= t_end)
      return sl_fail(SL_ECOMM, "bootstrap fs:%s: rank %d found no id from rank 0 within %.1f s", e->addr, e->rank,
                     timeout_s);
    nap_ms(10);
  }
  snprintf(ack, sizeof ack, "%s.ack.%d", e->addr, e->rank);
  return write_file_atomic(ack, "ok", 2, NULL, 0);
}

/* ---- tcp -------------------------------------------------------------------- */

static int split_hostport(const sl_boot_env *e, char *host, size_t nh, char *port, size_t np) {
  const char *c = strrchr(e->addr, ':');
  if (!c || c == e->addr || !c[1]) return sl_fail(SL_EINPUT, "bootstrap tcp:%s: expected HOST:PORT", e->addr);
  snprintf(host, nh, "%.*s", (int)(c - e->addr), e->addr);
  snprintf(port, np, "%s", c + 1);
  return SL_OK;
}

/* Waits until fd is readable/writable or the deadline passes. */
static int wait_fd(int fd, short ev, double t_end) {
  for (;;) {
    double left = t_end - sl_now_s();
    if (left <= 0) return -1;
    struct pollfd p = {fd, ev, 0};
    int r = poll(&p, 1, (int)(left * 1000) + 1);
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return -1;
  }
}

static int io_deadline(int fd, void *buf, size_t n, int wr, double t_end) {
  size_t done = 0;
  while (done < n) {
    if (wait_fd(fd, wr ? POLLOUT : POLLIN, t_end)) return -1;
    ssize_t k =
        wr ? send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL) : recv(fd, (char *)buf + done, n - done, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return -1;
    done += (size_t)k;
  }
  return 0;
}

static int share_tcp(const sl_boot_env *e, void *blob, size_t n, double timeout_s) {
  char host[1024], port[64];
  int rc = split_hostport(e, host, sizeof host, port, sizeof port);
  if (rc) return rc;
  double t_end = sl_now_s() + timeout_s;
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (e->rank == 0) hints.ai_flags = AI_PASSIVE;
  int gai = getaddrinfo(host, port, &hints, &ai);
  if (gai != 0) return sl_fail(SL_EINPUT, "bootstrap tcp:%s: cannot resolve: %s", e->addr, gai_strerror(gai));
  unsigned char hdr[HDR];
  uint64_t n64 = n;
  memcpy(hdr, MAGIC, 8);
  memcpy(hdr + 8, &n64, 8);
  int fd = -1;
  rc = SL_OK;
  if (e->rank == 0) {
    int one = 1, served = 0;
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank 0 cannot listen: %s", e->addr, strerror(errno));
      goto done;
    }
    while (served < e->size - 1) {
      if (wait_fd(fd, POLLIN, t_end)) {
        rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: only %d of %d ranks connected within %.1f s", e->addr, served,
                     e->size - 1, timeout_s);
        goto done;
      }
      int c = accept(fd, NULL, NULL);
      if (c < 0) continue;
      unsigned char a = 0;
      int bad = io_deadline(c, hdr, HDR, 1, t_end) || io_deadline(c, blob, n, 1, t_end) ||
                io_deadline(c, &a, 1, 0, t_end) || a != 'k';
      close(c);
      if (bad) {
        rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: a rank connected but did not take the id (%s)", e->addr,
                     a == 'x' ? "its length differs" : "I/O error or timeout");
        goto done;
      }
      served++;
    }
    goto done;
  }
  for (;;) { /* connect, retrying until rank 0 listens */
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
      fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
      if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
      }
    }
    if (fd >= 0) break;
    if (sl_now_s() >= t_end) {
      rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d could not connect to rank 0 within %.1f s", e->addr, e->rank,
                   timeout_s);
      goto done;
    }
    nap_ms(20);
  }
  unsigned char got[HDR];
  if (io_deadline(fd, got, HDR, 0, t_end) || memcmp(got, MAGIC, 8) != 0) {
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d got no shardlm header from rank 0", e->addr, e->rank);
    goto done;
  }
  if (memcmp(got + 8, &n64, 8) != 0) {
    unsigned char x = 'x';
    (void)io_deadline(fd, &x, 1, 1, t_end);
    uint64_t theirs;
    memcpy(&theirs, got + 8, 8);
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank 0 sends %llu bytes, rank %d expects %zu", e->addr,
                 (unsigned long long)theirs, e->rank, n);
    goto done;
  }
  unsigned char k = 'k';
  if (io_deadline(fd, blob, n, 0, t_end) || io_deadline(fd, &k, 1, 1, t_end))
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d: the id transfer from rank 0 broke off", e->addr, e->rank);
done:
  if (fd >= 0) close(fd);
  freeaddrinfo(ai);
  return rc;
}

int sl_boot_share(const sl_boot_env *e, void *blob, size_t n, double timeout_s) {
  if (!e || (!blob && n)) return sl_fail(SL_EINPUT, "sl_boot_share: NULL argument");
  if (e->size <= 1) return SL_OK;
  if (!strcmp(e->method, "fs")) return share_fs(e, blob, n, timeout_s);
  if (!strcmp(e->method, "tcp")) return share_tcp(e, blob, n, timeout_s);
  return sl_fail(SL_EINPUT, "sl_boot_share: unknown rendezvous method '%s' (fs or tcp)", e->method);
}
