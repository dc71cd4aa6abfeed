/* offload/nvme.c — the NVMe block store: one O_DIRECT file per store,
 * asynchronous chunked reads and writes with a bounded queue depth.
 *
 * Protocol. A request (ticket) is split into chunks of at most `block`
 * bytes, appended to a pending queue under the store's mutex. A driver moves
 * pending chunks into flight, at most `qd` at a time:
 *   - io_uring (SL_USE_URING, and the ring can be created): ONE thread owns
 *     the ring. It keeps a read armed on an eventfd (the doorbell the
 *     submitting threads ring after queueing), submits chunks, reaps
 *     completions, resubmits the remainder of short transfers, and
 *     broadcasts `done` when a request's last chunk finishes;
 *   - fallback: min(qd, 8) worker threads doing pread/pwrite.
 * So transfers progress while the caller computes; sl_nvme_wait blocks on
 * the condition variable until the request's chunk count reaches zero.
 * Error messages are formatted in the waiting thread (sl_fail is
 * thread-local) from the errno and offset recorded at completion.
 */
#define _GNU_SOURCE /* O_DIRECT, fallocate */
#include "offload/offload.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "offload/offload_internal.h"

#ifdef SL_USE_URING
#include <liburing.h>
#include <sys/eventfd.h>
#endif

#define NV_ALIGN 4096
#define NV_MAX_WORKERS 8
#define NV_DOORBELL ((uint64_t)1)

typedef struct nv_req {
  uint64_t ticket;
  int pending; /* chunks not yet completed */
  int is_write;
  int err;         /* first errno, 0 if none */
  int64_t err_off; /* file offset of the failing chunk */
  int64_t off, bytes;
  struct nv_req *next;
} nv_req;

typedef struct nv_chunk {
  nv_req *req;
  int is_write;
  int64_t off;  /* file offset of the next byte to transfer */
  char *buf;    /* next byte to transfer (user buffer or bounce) */
  int64_t len;  /* bytes left */
  char *bounce; /* aligned bounce buffer, or NULL */
  char *user;   /* read through bounce: destination */
  int64_t user_len;
  struct nv_chunk *next;
} nv_chunk;

struct sl_nvme {
  char path[4096];
  int fd;
  int64_t bytes; /* capacity, rounded up to 4096 */
  int64_t block;
  int qd;
  pthread_mutex_t mu;
  pthread_cond_t done; /* a request finished */
  pthread_cond_t work; /* fallback workers: pending chunks / stop */
  nv_chunk *pend_head, *pend_tail;
  nv_req *reqs;
  uint64_t next_ticket;
  int inflight;
  int stop;
  int uring; /* 1: io_uring driver thread, 0: pread/pwrite workers */
  pthread_t th[NV_MAX_WORKERS];
  int nth;
#ifdef SL_USE_URING
  struct io_uring ring;
  int efd;
  uint64_t efd_val;
#endif
};

/* ---- queue helpers (hold s->mu) -------------------------------------------- */
static void pend_push_back(sl_nvme *s, nv_chunk *c) {
  c->next = NULL;
  if (s->pend_tail) s->pend_tail->next = c;
  else s->pend_head = c;
  s->pend_tail = c;
}
#ifdef SL_USE_URING
static void pend_push_front(sl_nvme *s, nv_chunk *c) {
  c->next = s->pend_head;
  s->pend_head = c;
  if (!s->pend_tail) s->pend_tail = c;
}
#endif
static nv_chunk *pend_pop(sl_nvme *s) {
  nv_chunk *c = s->pend_head;
  if (c) {
    s->pend_head = c->next;
    if (!s->pend_head) s->pend_tail = NULL;
  }
  return c;
}

/* A chunk finished (err = 0 or an errno). Holds s->mu. */
static void chunk_finish(sl_nvme *s, nv_chunk *c, int err) {
  nv_req *r = c->req;
  if (err && !r->err) {
    r->err = err;
    r->err_off = c->off;
  }
  if (!err && c->bounce && !c->is_write) memcpy(c->user, c->bounce, (size_t)c->user_len);
  free(c->bounce);
  free(c);
  if (--r->pending == 0) pthread_cond_broadcast(&s->done);
}

/* Outcome of one transfer attempt of res bytes (or -errno). Holds s->mu.
 * Returns 1 when the chunk must be issued again (short transfer, EINTR). */
static int chunk_result(sl_nvme *s, nv_chunk *c, int64_t res) {
  if (res < 0) {
    if (res == -EINTR || res == -EAGAIN) return 1;
    chunk_finish(s, c, (int)-res);
    return 0;
  }
  if (res == 0) { /* no progress: past the end of file, or the device is full */
    chunk_finish(s, c, c->is_write ? ENOSPC : EIO);
    return 0;
  }
  c->off += res;
  c->buf += res;
  c->len -= res;
  if (c->len > 0) return 1;
  chunk_finish(s, c, 0);
  return 0;
}

/* ---- fallback driver: pread/pwrite workers ----------------------------------- */
static void *worker_main(void *arg) {
  sl_nvme *s = (sl_nvme *)arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->pend_head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
    if (!s->pend_head && s->stop) break;
    nv_chunk *c = pend_pop(s);
    s->inflight++;
    pthread_mutex_unlock(&s->mu);
    int again;
    do {
      ssize_t res =
          c->is_write ? pwrite(s->fd, c->buf, (size_t)c->len, c->off) : pread(s->fd, c->buf, (size_t)c->len, c->off);
      int64_t r = res < 0 ? -(int64_t)errno : (int64_t)res;
      pthread_mutex_lock(&s->mu);
      again = chunk_result(s, c, r);
      pthread_mutex_unlock(&s->mu);
    } while (again);
    pthread_mutex_lock(&s->mu);
    s->inflight--;
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- io_uring driver ----------------------------------------------------------- */
#ifdef SL_USE_URING
static void uring_arm_doorbell(sl_nvme *s) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
  /* the ring has qd + 2 entries and at most qd chunks are in flight */
  io_uring_prep_read(sqe, s->efd, &s->efd_val, sizeof s->efd_val, 0);
  io_uring_sqe_set_data64(sqe, NV_DOORBELL);
}

static void uring_prep_chunk(sl_nvme *s, nv_chunk *c) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
  if (c->is_write) io_uring_prep_write(sqe, s->fd, c->buf, (unsigned)c->len, (uint64_t)c->off);
  else io_uring_prep_read(sqe, s->fd, c->buf, (unsigned)c->len, (uint64_t)c->off);
  io_uring_sqe_set_data(sqe, c);
}

static void *uring_main(void *arg) {
  sl_nvme *s = (sl_nvme *)arg;
  int doorbell_armed = 0;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (!doorbell_armed && !s->stop) {
      uring_arm_doorbell(s);
      doorbell_armed = 1;
    }
    while (s->pend_head && s->inflight < s->qd) {
      uring_prep_chunk(s, pend_pop(s));
      s->inflight++;
    }
    if (s->stop && !s->pend_head && s->inflight == 0) break;
    pthread_mutex_unlock(&s->mu);
    io_uring_submit(&s->ring);
    struct io_uring_cqe *cqe = NULL;
    int e = io_uring_wait_cqe(&s->ring, &cqe);
    pthread_mutex_lock(&s->mu);
    if (e < 0) {
      if (e == -EINTR || e == -EAGAIN) continue;
      sl_log(SL_LOG_ERROR, "nvme store %s: io_uring_wait_cqe failed: %s", s->path, strerror(-e));
      continue;
    }
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&s->ring, head, cqe) {
      seen++;
      uint64_t d = io_uring_cqe_get_data64(cqe);
      if (d == NV_DOORBELL) {
        doorbell_armed = 0;
        continue;
      }
      nv_chunk *c = (nv_chunk *)(uintptr_t)d;
      s->inflight--;
      if (chunk_result(s, c, cqe->res)) pend_push_front(s, c);
    }
    io_uring_cq_advance(&s->ring, seen);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}
#endif

static void nv_kick(sl_nvme *s) {
#ifdef SL_USE_URING
  if (s->uring) {
    uint64_t one = 1;
    ssize_t w = write(s->efd, &one, sizeof one);
    (void)w;
    return;
  }
#endif
  pthread_cond_broadcast(&s->work);
}

/* ---- public API ------------------------------------------------------------------ */
const char *sl_nvme_path(const sl_nvme *s) { return s->path; }
int64_t sl_nvme_bytes(const sl_nvme *s) { return s->bytes; }
const char *sl_nvme_backend(const sl_nvme *s) { return s->uring ? "io_uring" : "pread"; }

int sl_nvme_open(const char *dir, const char *name, int64_t bytes, int64_t block, int qd, sl_nvme **out) {
  *out = NULL;
  if (!dir || !*dir || !name || !*name)
    return sl_fail(SL_EINPUT, "nvme store: a directory (--nvme-path) and a name are required");
  if (bytes < 0) return sl_fail(SL_EINPUT, "nvme store %s/%s: size %lld < 0", dir, name, (long long)bytes);
  if (block <= 0) block = (int64_t)1 << 20;
  if (block % NV_ALIGN)
    return sl_fail(SL_EINPUT, "nvme store %s/%s: block %lld is not a multiple of %d", dir, name, (long long)block,
                   NV_ALIGN);
  if (block > ((int64_t)1 << 30))
    return sl_fail(SL_EINPUT, "nvme store %s/%s: block %lld > 1 GiB", dir, name, (long long)block);
  if (qd <= 0) qd = 32;
  if (qd > 4096) return sl_fail(SL_EINPUT, "nvme store %s/%s: queue depth %d > 4096", dir, name, qd);
  sl_nvme *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(SL_ENOMEM, "nvme store %s/%s: out of memory", dir, name);
  int n = snprintf(s->path, sizeof s->path, "%s/%s", dir, name);
  if (n < 0 || n >= (int)sizeof s->path) {
    free(s);
    return sl_fail(SL_EINPUT, "nvme store %s/%s: path too long", dir, name);
  }
  s->bytes = sl_offload_round4k(bytes);
  s->block = block;
  s->qd = qd;
  s->next_ticket = 1;
  s->fd = open(s->path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (s->fd < 0) {
    int e = errno;
    int rc;
    if (e == EINVAL)
      rc = sl_fail(SL_EIO,
                   "nvme store %s: cannot open with O_DIRECT (unsupported by this "
                   "file system?): %s",
                   s->path, strerror(e));
    else rc = sl_fail(SL_EIO, "nvme store %s: cannot create: %s", s->path, strerror(e));
    free(s);
    return rc;
  }
  if (s->bytes > 0 && fallocate(s->fd, 0, 0, s->bytes) != 0) {
    int e = errno;
    if ((e == EOPNOTSUPP || e == ENOSYS) && ftruncate(s->fd, s->bytes) == 0) {
      /* sparse file: space errors will surface at write time */
    } else {
      if (e == EOPNOTSUPP || e == ENOSYS) e = errno;
      close(s->fd);
      unlink(s->path);
      int rc =
          sl_fail(SL_EIO, "nvme store %s: cannot reserve %lld bytes: %s", s->path, (long long)s->bytes, strerror(e));
      free(s);
      return rc;
    }
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->done, NULL);
  pthread_cond_init(&s->work, NULL);
  int started = 0;
#ifdef SL_USE_URING
  /* SL_NVME_BACKEND=pread forces the thread fallback (tests, comparisons) */
  const char *be = sl_env_str("SL_NVME_BACKEND");
  s->efd = (be && strcmp(be, "pread") == 0) ? -1 : eventfd(0, EFD_CLOEXEC);
  if (s->efd >= 0) {
    int e = io_uring_queue_init((unsigned)qd + 2, &s->ring, 0);
    if (e == 0) {
      s->uring = 1;
      if (pthread_create(&s->th[0], NULL, uring_main, s) == 0) {
        s->nth = 1;
        started = 1;
      } else {
        io_uring_queue_exit(&s->ring);
        s->uring = 0;
      }
    } else {
      sl_log(SL_LOG_WARN, "nvme store %s: io_uring unavailable (%s); using pread/pwrite threads", s->path,
             strerror(-e));
    }
    if (!started) {
      close(s->efd);
      s->efd = -1;
    }
  }
#endif
  if (!started) {
    int nw = qd < NV_MAX_WORKERS ? qd : NV_MAX_WORKERS;
    for (int i = 0; i < nw; i++) {
      if (pthread_create(&s->th[i], NULL, worker_main, s) != 0) break;
      s->nth++;
    }
    if (s->nth == 0) {
      int rc = sl_fail(SL_EINTERNAL, "nvme store %s: cannot start I/O threads", s->path);
      close(s->fd);
      unlink(s->path);
      pthread_mutex_destroy(&s->mu);
      pthread_cond_destroy(&s->done);
      pthread_cond_destroy(&s->work);
      free(s);
      return rc;
    }
  }
  *out = s;
  return SL_OK;
}

static int nv_submit(sl_nvme *s, int is_write, int64_t offset, char *buf, int64_t bytes, uint64_t *ticket) {
  *ticket = 0;
  if (offset < 0 || bytes < 0 || offset % NV_ALIGN)
    return sl_fail(SL_EINPUT,
                   "nvme store %s: %s at offset %lld (%lld bytes): offsets must "
                   "be >= 0 and multiples of %d",
                   s->path, is_write ? "write" : "read", (long long)offset, (long long)bytes, NV_ALIGN);
  if (offset + bytes > s->bytes)
    return sl_fail(SL_EINPUT, "nvme store %s: %s of [%lld, %lld) is past the store's %lld bytes", s->path,
                   is_write ? "write" : "read", (long long)offset, (long long)(offset + bytes), (long long)s->bytes);
  if (bytes > 0 && !buf) return sl_fail(SL_EINPUT, "nvme store %s: NULL buffer", s->path);
  nv_req *r = calloc(1, sizeof *r);
  if (!r) return sl_fail(SL_ENOMEM, "nvme store %s: out of memory", s->path);
  r->is_write = is_write;
  r->off = offset;
  r->bytes = bytes;
  /* build the chunks before publishing anything */
  nv_chunk *first = NULL, *last = NULL;
  int nchunks = 0;
  for (int64_t at = 0; at < bytes; at += s->block) {
    int64_t len = bytes - at < s->block ? bytes - at : s->block;
    nv_chunk *c = calloc(1, sizeof *c);
    char *ub = buf + at;
    int direct = ((uintptr_t)ub % NV_ALIGN) == 0 && len % NV_ALIGN == 0;
    if (c && !direct) {
      int64_t rl = sl_offload_round4k(len);
      void *b = NULL;
      if (posix_memalign(&b, NV_ALIGN, (size_t)rl) != 0) {
        free(c);
        c = NULL;
      } else {
        c->bounce = b;
        if (is_write) {
          memcpy(b, ub, (size_t)len);
          memset((char *)b + len, 0, (size_t)(rl - len));
        }
        c->user = ub;
        c->user_len = len;
        len = rl;
      }
    }
    if (!c) {
      while (first) {
        nv_chunk *nx = first->next;
        free(first->bounce);
        free(first);
        first = nx;
      }
      free(r);
      return sl_fail(SL_ENOMEM, "nvme store %s: out of memory for I/O chunks", s->path);
    }
    c->req = r;
    c->is_write = is_write;
    c->off = offset + at;
    c->buf = c->bounce ? c->bounce : ub;
    c->len = len;
    if (last) last->next = c;
    else first = c;
    last = c;
    nchunks++;
  }
  pthread_mutex_lock(&s->mu);
  r->ticket = s->next_ticket++;
  r->pending = nchunks;
  r->next = s->reqs;
  s->reqs = r;
  for (nv_chunk *c = first; c;) {
    nv_chunk *nx = c->next;
    pend_push_back(s, c);
    c = nx;
  }
  *ticket = r->ticket;
  pthread_mutex_unlock(&s->mu);
  if (nchunks) nv_kick(s);
  return SL_OK;
}

int sl_nvme_read_async(sl_nvme *s, int64_t offset, void *buf, int64_t bytes, uint64_t *ticket) {
  return nv_submit(s, 0, offset, (char *)buf, bytes, ticket);
}

int sl_nvme_write_async(sl_nvme *s, int64_t offset, const void *buf, int64_t bytes, uint64_t *ticket) {
  return nv_submit(s, 1, offset, (char *)(uintptr_t)buf, bytes, ticket);
}

/* Formats a finished request's status (caller's thread). */
static int req_status(sl_nvme *s, const nv_req *r) {
  if (!r->err) return SL_OK;
  return sl_fail(SL_EIO, "nvme store %s: %s of %lld bytes at offset %lld failed at offset %lld: %s", s->path,
                 r->is_write ? "write" : "read", (long long)r->bytes, (long long)r->off, (long long)r->err_off,
                 strerror(r->err));
}

int sl_nvme_wait(sl_nvme *s, uint64_t ticket) {
  pthread_mutex_lock(&s->mu);
  nv_req **pp = &s->reqs;
  while (*pp && (*pp)->ticket != ticket) pp = &(*pp)->next;
  nv_req *r = *pp;
  if (!r) {
    pthread_mutex_unlock(&s->mu);
    return sl_fail(SL_EINPUT, "nvme store %s: unknown or already waited ticket %llu", s->path,
                   (unsigned long long)ticket);
  }
  while (r->pending > 0) pthread_cond_wait(&s->done, &s->mu);
  /* unlink (the list may have changed while waiting) */
  for (pp = &s->reqs; *pp != r; pp = &(*pp)->next) {}
  *pp = r->next;
  pthread_mutex_unlock(&s->mu);
  int rc = req_status(s, r);
  free(r);
  return rc;
}

int sl_nvme_wait_all(sl_nvme *s) {
  int rc = SL_OK;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    uint64_t t = s->reqs ? s->reqs->ticket : 0;
    pthread_mutex_unlock(&s->mu);
    if (!t) break;
    int e = sl_nvme_wait(s, t);
    if (e && rc == SL_OK) rc = e;
  }
  return rc;
}

int sl_nvme_fsync(sl_nvme *s) {
  int rc = sl_nvme_wait_all(s);
  if (rc) return rc;
  if (fsync(s->fd) != 0) return sl_fail(SL_EIO, "nvme store %s: fsync failed: %s", s->path, strerror(errno));
  return SL_OK;
}

int sl_nvme_close(sl_nvme *s, int unlink_file) {
  if (!s) return SL_OK;
  int rc = sl_nvme_wait_all(s);
  char msg[512];
  if (rc) snprintf(msg, sizeof msg, "%s", sl_errmsg());
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_mutex_unlock(&s->mu);
  nv_kick(s);
  for (int i = 0; i < s->nth; i++) pthread_join(s->th[i], NULL);
#ifdef SL_USE_URING
  if (s->uring) {
    io_uring_queue_exit(&s->ring);
    close(s->efd);
  }
#endif
  if (close(s->fd) != 0 && rc == SL_OK)
    rc = sl_fail(SL_EIO, "nvme store %s: close failed: %s", s->path, strerror(errno));
  else if (rc) sl_fail(rc, "%s", msg);
  if (unlink_file && unlink(s->path) != 0 && rc == SL_OK)
    rc = sl_fail(SL_EIO, "nvme store %s: cannot remove: %s", s->path, strerror(errno));
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->done);
  pthread_cond_destroy(&s->work);
  free(s);
  return rc;
}
