/* shard/comm_nccl.c — the NCCL backend of shard/comm.h (device buffers).
 *
 * Owns: NCCL communicators bootstrapped over an MPI communicator of the same
 * ranks (ncclGetUniqueId on rank 0, broadcast over MPI, ncclCommInitRank),
 * one high-priority CUDA stream per communicator for communication, the
 * event protocol that orders it against the caller's compute stream, one
 * completion event per request, a poller thread that retires completed
 * requests and keeps the watchdog informed, and the split (ncclCommSplit
 * beside a split of the MPI communicator).
 *
 * Protocol (docs/cuda.md, "NCCL backend and memory ops"):
 *  - issue (caller's thread, under issue_mu so that sequence numbers follow
 *    stream order): record ev_compute on the compute stream, make the comm
 *    stream wait on it, queue the NCCL call(s) on the comm stream, record the
 *    request's completion event, append the request to the in-flight FIFO
 *    (c->head..tail).
 *  - a request is complete when its event is; the comm stream runs requests
 *    in FIFO order, so completing one completes every one before it.
 *  - sl_comm_wait polls the request's event (cudaEventQuery, with back-off)
 *    until complete; sl_comm_test queries it once. Neither blocks inside a
 *    CUDA call, so a failure seen by the poller ends every waiter.
 *  - sl_comm_wait_stream makes the caller's stream wait on the event
 *    (cudaStreamWaitEvent) and marks the request detached: whoever retires
 *    it (the poller, or a waiter retiring the FIFO through a later request)
 *    frees it; a detached failure is kept in `failed` and named by the next
 *    call on the comm (issue, wait), or printed at destroy.
 *  - the poller keeps c->running = the oldest incomplete collective, stamped
 *    when it became the oldest, so the process-wide watchdog of comm_mpi.c
 *    serves NCCL comms too; when it fires it calls nccl_abort
 *    (ncclCommAbort) before MPI_Abort.
 *  - all-reduce = reduce-scatter + all-gather of the buffer zero-padded to a
 *    multiple of n (as the MPI backend): bit-identical to those two calls.
 *
 * sl_comm_nccl_create_boot makes the same comm without any host
 * communicator (no MPI): rank 0's id goes through the fs / tcp rendezvous of
 * shard/bootstrap.c; such a comm has no twin and cannot be split.
 *
 * Built without NCCL (SL_USE_NCCL undefined) only the two create functions
 * exist, and they fail with "built without NCCL".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "shard/bootstrap.h"
#include "shard/comm.h"
#include "shard/comm_internal.h"

#ifndef SL_USE_NCCL

int sl_comm_nccl_create(sl_comm *mpi_parent, void *cuda_stream, sl_comm **out) {
  (void)mpi_parent;
  (void)cuda_stream;
  if (out) *out = NULL;
  return sl_comm_set_error("sl_comm_nccl_create: shardlm was built without NCCL (configure with "
                           "CUDA and NCCL installed, -DSL_WITH_NCCL=ON to require it)");
}

int sl_comm_nccl_create_boot(const struct sl_boot_env *boot, void *cuda_stream, double timeout_s, sl_comm **out) {
  (void)boot;
  (void)cuda_stream;
  (void)timeout_s;
  if (out) *out = NULL;
  return sl_comm_set_error("sl_comm_nccl_create_boot: shardlm was built without NCCL (configure with "
                           "CUDA and NCCL installed, -DSL_WITH_NCCL=ON to require it)");
}

#else /* SL_USE_NCCL */

#include <cuda_runtime.h>
#include <nccl.h>

typedef struct {
  ncclComm_t nc;
  int dev;                  /* CUDA device the comm was created on */
  cudaStream_t stream;      /* communication stream (owned) */
  cudaStream_t compute;     /* caller's compute stream (not owned; NULL = legacy default) */
  cudaEvent_t ev_compute;   /* recorded on `compute` before every operation */
  int32_t *one_dev;         /* (1) device scratch of the barrier */
  sl_comm *mpi;             /* MPI comm over the same ranks, same order */
  int own_mpi;              /* mpi came from a split: destroyed with us */
  pthread_mutex_t issue_mu; /* serialises issuing (NCCL calls, seq order) */
  pthread_t poller;
  int quit;    /* guarded by c->mu: poller drains, then exits */
  char failed[512]; /* guarded by c->mu: the first failure of a detached request ("" none) */
  int failed_told;  /* guarded by c->mu: `failed` was named by a later call */
  int aborted; /* atomic: ncclCommAbort done, nc is gone */
} nccl_be;

static void nccl_destroy(sl_comm *c);
static int nccl_issue(sl_comm *c, sl_comm_req *r);
static int nccl_wait(sl_comm_req *r);
static int nccl_test(sl_comm_req *r);
static int nccl_wait_stream(sl_comm_req *r, void *stream);
static void nccl_abort(sl_comm *c);
static const sl_comm_vt nccl_vt = {.name = "nccl",
                                   .destroy = nccl_destroy,
                                   .issue = nccl_issue,
                                   .wait = nccl_wait,
                                   .test = nccl_test,
                                   .wait_stream = nccl_wait_stream,
                                   .abort = nccl_abort};

static ncclDataType_t nccl_type(sl_dtype t) {
  switch (t) {
  case SL_F32: return ncclFloat32;
  case SL_BF16: return ncclBfloat16;
  case SL_I32: return ncclInt32;
  case SL_I64: return ncclInt64;
  case SL_U8: return ncclUint8;
  case SL_F64: return ncclFloat64;
  }
  return ncclUint8;
}

/* Back-off for the polling loops: spin (yielding) briefly, then sleep
 * 5..100 us. */
static const sl_backoff_policy nccl_backoff = {.spin = 64, .yield = 1, .first_us = 5, .doublings = 5, .max_us = 100};
static void backoff(int *spins) { sl_backoff(spins, &nccl_backoff); }

/* c->running := oldest incomplete collective, c->p2p_oldest := oldest
 * incomplete send/recv, each stamped when it becomes so (watchdog). */
static void update_running_locked(sl_comm *c) {
  sl_comm_req *h = c->head;
  while (h && !sl_comm_is_coll(h->op.kind)) h = h->next;
  if (h != c->running) {
    c->running = h;
    if (h) h->start_ns = sl_comm_now_ns();
  }
  sl_comm_req *p = c->head;
  while (p && sl_comm_is_coll(p->op.kind)) p = p->next;
  if (p != c->p2p_oldest) {
    c->p2p_oldest = p;
    if (p) p->start_ns = sl_comm_now_ns();
  }
}

/* Frees a request: its completion event, then itself. */
static void req_free(sl_comm_req *r) {
  if (r->be) cudaEventDestroy((cudaEvent_t)r->be);
  free(r);
}

/* Retires the FIFO up to and including r (which must be in it) with the
 * given status; detached requests are freed (a failure kept in b->failed).
 * c->mu held. */
static void complete_through_locked(sl_comm *c, sl_comm_req *r, int status, const char *msg) {
  nccl_be *b = c->be;
  while (c->head) {
    sl_comm_req *h = c->head;
    int last = h == r;
    c->head = h->next;
    if (!c->head) c->tail = NULL;
    h->next = NULL;
    h->status = status;
    if (status != SL_COMM_OK) {
      snprintf(h->err, sizeof h->err, "%s", msg);
      c->broken = 1;
    }
    h->done = 1;
    if (h->detached) {
      if (status != SL_COMM_OK && !b->failed[0]) snprintf(b->failed, sizeof b->failed, "%s", msg);
      req_free(h);
    }
    if (last) break;
  }
  update_running_locked(c);
  pthread_cond_broadcast(&c->cv_done);
}

/* Queries the event of r (incomplete, in the FIFO); retires what finished.
 * 1 when r was retired (a detached r is then freed: do not touch it), else 0.
 * c->mu held. */
static int poll_locked(sl_comm *c, sl_comm_req *r) {
  cudaError_t q = cudaEventQuery((cudaEvent_t)r->be);
  if (q == cudaSuccess) {
    complete_through_locked(c, r, SL_COMM_OK, "");
    return 1;
  } else if (q != cudaErrorNotReady) {
    char msg[512];
    (void)cudaGetLastError();
    snprintf(msg, sizeof msg, "%s #%llu (%lld x %s) on comm %s (nccl, %d ranks) failed on the device: %s",
             sl_coll_name((sl_coll_kind)r->op.kind), (unsigned long long)r->op.seq, (long long)r->op.count,
             sl_dtype_name(r->op.dt), c->name, c->size, cudaGetErrorString(q));
    complete_through_locked(c, c->tail, SL_COMM_ERR, msg);
    return 1;
  }
  return 0;
}

/* Aborts the NCCL communicator once (kernels of it return). */
static void abort_once(nccl_be *b) {
  if (!__atomic_exchange_n(&b->aborted, 1, __ATOMIC_SEQ_CST)) ncclCommAbort(b->nc);
}

static void nccl_abort(sl_comm *c) { abort_once(c->be); }

/* Retires completed requests, watches for asynchronous NCCL errors. */
static void *poller_main(void *arg) {
  sl_comm *c = arg;
  nccl_be *b = c->be;
  int spins = 0;
  cudaSetDevice(b->dev);
  for (;;) {
    pthread_mutex_lock(&c->mu);
    while (!c->head && !b->quit) pthread_cond_wait(&c->cv_work, &c->mu);
    if (!c->head) { /* quit and drained */
      pthread_mutex_unlock(&c->mu);
      return NULL;
    }
    int progressed = poll_locked(c, c->head);
    pthread_mutex_unlock(&c->mu);
    if (progressed) {
      spins = 0;
      continue;
    }
    ncclResult_t ae = ncclSuccess;
    if (!__atomic_load_n(&b->aborted, __ATOMIC_SEQ_CST) && ncclCommGetAsyncError(b->nc, &ae) == ncclSuccess &&
        ae != ncclSuccess && ae != ncclInProgress) {
      char msg[512];
      pthread_mutex_lock(&c->mu);
      if (c->head) {
        snprintf(msg, sizeof msg, "%s #%llu on comm %s (nccl, %d ranks) failed: asynchronous NCCL error: %s (%s)",
                 sl_coll_name((sl_coll_kind)c->head->op.kind), (unsigned long long)c->head->op.seq, c->name, c->size,
                 ncclGetErrorString(ae), ncclGetLastError(b->nc));
        complete_through_locked(c, c->tail, SL_COMM_ERR, msg);
      }
      c->broken = 1;
      pthread_mutex_unlock(&c->mu);
      /* Abort only when no thread is inside an NCCL call on this comm;
       * otherwise destroy aborts it. */
      if (pthread_mutex_trylock(&b->issue_mu) == 0) {
        abort_once(b);
        pthread_mutex_unlock(&b->issue_mu);
      }
      continue;
    }
    backoff(&spins);
  }
}

/* ---- issuing ---------------------------------------------------------------- */

#define CU(call)                                                                                                       \
  do {                                                                                                                 \
    cudaError_t e_ = (call);                                                                                           \
    if (e_ != cudaSuccess) {                                                                                           \
      (void)cudaGetLastError();                                                                                        \
      snprintf(err, nerr, "%s failed: %s", #call, cudaGetErrorString(e_));                                             \
      goto fail;                                                                                                       \
    }                                                                                                                  \
  } while (0)
#define NC(call)                                                                                                       \
  do {                                                                                                                 \
    ncclResult_t e_ = (call);                                                                                          \
    if (e_ != ncclSuccess) {                                                                                           \
      snprintf(err, nerr, "%s failed: %s (%s)", #call, ncclGetErrorString(e_), ncclGetLastError(b->nc));               \
      goto fail;                                                                                                       \
    }                                                                                                                  \
  } while (0)

/* enqueue's all-to-all: the block to itself a device copy on the comm
 * stream, then one group of an ncclSend and an ncclRecv per other peer with
 * a nonzero count (NCCL runs a group's transfers together: no ordering
 * between the peers can deadlock). 0 or -1 (message in err). */
static int enqueue_alltoall(sl_comm *c, const sl_comm_op *op, char *err, size_t nerr) {
  nccl_be *b = c->be;
  cudaStream_t st = b->stream;
  ncclDataType_t ty = nccl_type(op->dt);
  size_t es = sl_dtype_size(op->dt);
  int n = c->size, me = c->rank;
  const int64_t *sc = op->a2a, *sd = sc + n, *rc = sd + n, *rd = rc + n;
  const char *send = op->send;
  char *recv = op->recv;
  if (sc[me])
    CU(cudaMemcpyAsync(recv + (size_t)rd[me] * es, send + (size_t)sd[me] * es, (size_t)sc[me] * es,
                       cudaMemcpyDeviceToDevice, st));
  if (n == 1) return 0;
  NC(ncclGroupStart());
  ncclResult_t e = ncclSuccess;
  for (int p = 0; p < n && e == ncclSuccess; p++) {
    if (p == me) continue;
    if (sc[p]) e = ncclSend(send + (size_t)sd[p] * es, (size_t)sc[p], ty, p, b->nc, st);
    if (e == ncclSuccess && rc[p]) e = ncclRecv(recv + (size_t)rd[p] * es, (size_t)rc[p], ty, p, b->nc, st);
  }
  ncclResult_t e2 = ncclGroupEnd();
  NC(e);
  NC(e2);
  return 0;
fail:
  return -1;
}

/* Queues the NCCL work of r on the comm stream. 0 or -1 (message in err). */
static int enqueue(sl_comm *c, sl_comm_req *r, char *err, size_t nerr) {
  nccl_be *b = c->be;
  const sl_comm_op *op = &r->op;
  cudaStream_t st = b->stream;
  ncclDataType_t ty = nccl_type(op->dt);
  size_t es = sl_dtype_size(op->dt), cnt = (size_t)op->count;
  int n = c->size;
  char *full = NULL, *blk = NULL;
  switch (op->kind) {
  case SL_COLL_ALLGATHER:
    if (cnt) NC(ncclAllGather(op->send, op->recv, cnt, ty, b->nc, st));
    return 0;
  case SL_COLL_REDUCE_SCATTER:
    if (cnt) NC(ncclReduceScatter(op->send, op->recv, cnt, ty, ncclSum, b->nc, st));
    return 0;
  case SL_COLL_ALLREDUCE: {
    if (n == 1 || cnt == 0) return 0;
    size_t bc = (cnt + (size_t)n - 1) / (size_t)n, padded = bc * (size_t)n;
    full = op->recv;
    if (padded != cnt) {
      CU(cudaMallocAsync((void **)&full, padded * es, st));
      CU(cudaMemcpyAsync(full, op->recv, cnt * es, cudaMemcpyDeviceToDevice, st));
      CU(cudaMemsetAsync(full + cnt * es, 0, (padded - cnt) * es, st));
    }
    CU(cudaMallocAsync((void **)&blk, bc * es, st));
    NC(ncclReduceScatter(full, blk, bc, ty, ncclSum, b->nc, st));
    NC(ncclAllGather(blk, full, bc, ty, b->nc, st));
    if (full != op->recv) {
      CU(cudaMemcpyAsync(op->recv, full, cnt * es, cudaMemcpyDeviceToDevice, st));
      CU(cudaFreeAsync(full, st));
    }
    CU(cudaFreeAsync(blk, st));
    return 0;
  }
  case SL_COLL_BROADCAST:
    if (cnt) NC(ncclBroadcast(op->recv, op->recv, cnt, ty, op->peer, b->nc, st));
    return 0;
  case SL_COLL_BARRIER:
    if (n == 1) return 0;
    CU(cudaMemsetAsync(b->one_dev, 0, sizeof *b->one_dev, st));
    NC(ncclAllReduce(b->one_dev, b->one_dev, 1, ncclInt32, ncclSum, b->nc, st));
    return 0;
  case SL_COLL_ALLTOALL: return enqueue_alltoall(c, op, err, nerr);
  case SL_COLL_SEND:
  case SL_COLL_RECV:
    if (!cnt) return 0;
    NC(ncclGroupStart());
    if (op->kind == SL_COLL_SEND) {
      ncclResult_t e = ncclSend(op->send, cnt, ty, op->peer, b->nc, st);
      ncclResult_t e2 = ncclGroupEnd();
      NC(e);
      NC(e2);
    } else {
      ncclResult_t e = ncclRecv(op->recv, cnt, ty, op->peer, b->nc, st);
      ncclResult_t e2 = ncclGroupEnd();
      NC(e);
      NC(e2);
    }
    return 0;
  }
  snprintf(err, nerr, "unknown operation kind %d", op->kind);
  return -1;
fail:
  if (full && full != op->recv) (void)cudaFreeAsync(full, st);
  if (blk) (void)cudaFreeAsync(blk, st);
  return -1;
}

static sl_comm *wrap(ncclComm_t nc, sl_comm *mpi, int own_mpi, cudaStream_t compute, int dev, const char *name,
                     uint64_t uid, char *err, size_t nerr);

/* sl_comm_split on an NCCL comm: split the MPI twin, then ncclCommSplit
 * (same color/key rule as MPI_Comm_split: order by key, then parent rank). */
static int nccl_split(sl_comm *c, sl_comm_req *r) {
  nccl_be *b = c->be;
  char err[512] = "";
  size_t nerr = sizeof err;
  sl_comm *mchild = NULL, *child = NULL;
  ncclComm_t nnc = NULL;
  int prev = -1, locked = 0;
  sl_comm_account(c, r);
  if (c->broken) {
    snprintf(err, nerr, "the communicator failed earlier");
    goto fail;
  }
  if (!b->mpi) {
    snprintf(err, nerr,
             "it was bootstrapped without a host communicator (sl_comm_nccl_create_boot), "
             "which a split needs");
    goto fail;
  }
  if (sl_comm_split(b->mpi, r->op.color, r->op.key, &mchild) != SL_COMM_OK) {
    snprintf(err, nerr, "split of the MPI twin %s: %s", b->mpi->name, sl_comm_last_error());
    goto fail;
  }
  cudaGetDevice(&prev);
  CU(cudaSetDevice(b->dev));
  pthread_mutex_lock(&b->issue_mu);
  locked = 1;
  NC(ncclCommSplit(b->nc, r->op.color, r->op.key, &nnc, NULL));
  pthread_mutex_unlock(&b->issue_mu);
  locked = 0;
  char name[96];
  snprintf(name, sizeof name, "%.60s/s%llu:c%d", c->name, (unsigned long long)r->op.seq, r->op.color);
  uint64_t z = sl_comm_child_uid(c->uid, r->op.seq);
  child = wrap(nnc, mchild, 1, b->compute, b->dev, name, (z & ~1ull) | 2, err, nerr);
  mchild = NULL; /* owned (or destroyed) by wrap */
  nnc = NULL;
  if (!child) goto fail;
  if (prev >= 0 && prev != b->dev) cudaSetDevice(prev);
  *r->op.split_out = child;
  r->status = SL_COMM_OK;
  r->done = 1;
  return SL_COMM_OK;
fail:
  if (locked) pthread_mutex_unlock(&b->issue_mu);
  if (nnc) ncclCommDestroy(nnc);
  if (mchild) sl_comm_destroy(mchild);
  if (prev >= 0 && prev != b->dev) cudaSetDevice(prev);
  return sl_comm_set_error("split #%llu (color %d, key %d) of comm %s (nccl, %d ranks) failed: %s",
                           (unsigned long long)r->op.seq, r->op.color, r->op.key, c->name, c->size, err);
}

static int nccl_issue(sl_comm *c, sl_comm_req *r) {
  nccl_be *b = c->be;
  sl_comm_op *op = &r->op;
  char err[400] = "";
  size_t nerr = sizeof err;
  cudaEvent_t ev = NULL;
  int prev = -1, accounted = 0;
  if (op->kind == SL_OPK_SPLIT) return nccl_split(c, r);
  if ((op->kind == SL_COLL_SEND || op->kind == SL_COLL_RECV) && op->peer == c->rank)
    return sl_comm_set_error("%s on comm %s (nccl): peer %d is this rank; NCCL send/recv to self is "
                             "not supported (copy instead)",
                             sl_coll_name((sl_coll_kind)op->kind), c->name, op->peer);
  cudaGetDevice(&prev);
  pthread_mutex_lock(&b->issue_mu);
  char why[520] = "";
  pthread_mutex_lock(&c->mu);
  int broken = c->broken || __atomic_load_n(&b->aborted, __ATOMIC_SEQ_CST);
  if (broken && b->failed[0]) {
    snprintf(why, sizeof why, ": %s", b->failed);
    b->failed_told = 1;
  }
  pthread_mutex_unlock(&c->mu);
  if (broken) {
    pthread_mutex_unlock(&b->issue_mu);
    return sl_comm_set_error("%s (%lld x %s) on comm %s (nccl) not run: the communicator failed earlier%s",
                             sl_coll_name((sl_coll_kind)op->kind), (long long)op->count, sl_dtype_name(op->dt), c->name,
                             why);
  }
  if (prev != b->dev) CU(cudaSetDevice(b->dev));
  CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  sl_comm_account(c, r);
  accounted = 1;
  CU(cudaEventRecord(b->ev_compute, b->compute));
  CU(cudaStreamWaitEvent(b->stream, b->ev_compute, 0));
  if (enqueue(c, r, err, nerr) != 0) goto fail;
  CU(cudaEventRecord(ev, b->stream));
  r->be = ev;
  pthread_mutex_lock(&c->mu);
  r->next = NULL;
  if (c->tail) c->tail->next = r;
  else c->head = r;
  c->tail = r;
  update_running_locked(c);
  pthread_cond_signal(&c->cv_work);
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_unlock(&b->issue_mu);
  if (prev >= 0 && prev != b->dev) cudaSetDevice(prev);
  return SL_COMM_OK;
fail:
  pthread_mutex_lock(&c->mu);
  c->broken = 1; /* ranks may now disagree on what was issued */
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_unlock(&b->issue_mu);
  if (ev) cudaEventDestroy(ev);
  if (prev >= 0 && prev != b->dev) cudaSetDevice(prev);
  if (accounted)
    return sl_comm_set_error("%s #%llu (%lld x %s) on comm %s (nccl, %d ranks) failed to start: %s",
                             sl_coll_name((sl_coll_kind)op->kind), (unsigned long long)op->seq, (long long)op->count,
                             sl_dtype_name(op->dt), c->name, c->size, err);
  return sl_comm_set_error("%s (%lld x %s) on comm %s (nccl, %d ranks) failed to start: %s",
                           sl_coll_name((sl_coll_kind)op->kind), (long long)op->count, sl_dtype_name(op->dt), c->name,
                           c->size, err);
}

/* ---- completion -------------------------------------------------------------- */

/* The waiting thread's own query of r's (complete) event: free on a device, and under the emulator
 * what tells this thread's clock that r completed (the poller may have retired it). */
static void observe(sl_comm_req *r) {
  if (r->be && r->status == SL_COMM_OK && cudaEventQuery((cudaEvent_t)r->be) != cudaSuccess) (void)cudaGetLastError();
}

/* Ends the wait on a retired r: its status (an error message set), then frees it. host: the host
 * waited (observe the event); 0: the stream did, and only its work may rely on r. */
static int finish(sl_comm_req *r, int host) {
  sl_comm *c = r->c;
  nccl_be *b = c->be;
  int st = r->status;
  if (host) observe(r);
  if (st != SL_COMM_OK) {
    sl_comm_set_error("%s", r->err);
    pthread_mutex_lock(&c->mu);
    if (b->failed[0]) b->failed_told = 1;
    pthread_mutex_unlock(&c->mu);
  }
  req_free(r);
  return st;
}

static int nccl_wait(sl_comm_req *r) {
  sl_comm *c = r->c;
  uint64_t t0 = sl_comm_now_ns();
  int spins = 0;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    if (!r->done) poll_locked(c, r);
    int d = r->done;
    if (d) {
      uint64_t dt = sl_comm_now_ns() - t0;
      c->stats.wait_ns += dt;
      if (r->op.kind == SL_COLL_ALLTOALL) c->stats.alltoall_ns += dt;
    }
    pthread_mutex_unlock(&c->mu);
    if (d) break;
    backoff(&spins);
  }
  return finish(r, 1);
}

/* The stream waits on r's completion event on the device; r is detached (freed by whoever retires
 * it) unless it is already complete. A failed cudaStreamWaitEvent falls back to a host wait and
 * reports the failure. */
static int nccl_wait_stream(sl_comm_req *r, void *stream) {
  sl_comm *c = r->c;
  nccl_be *b = c->be;
  int prev = -1;
  cudaGetDevice(&prev);
  if (prev != b->dev) cudaSetDevice(b->dev);
  cudaError_t e = r->be ? cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)r->be, 0) : cudaSuccess;
  if (prev >= 0 && prev != b->dev) cudaSetDevice(prev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    char what[200];
    snprintf(what, sizeof what, "%s #%llu on comm %s (nccl)", sl_coll_name((sl_coll_kind)r->op.kind),
             (unsigned long long)r->op.seq, c->name);
    int st = nccl_wait(r);
    return st != SL_COMM_OK ? st
                            : sl_comm_set_error("%s: cudaStreamWaitEvent failed (%s); waited on the host instead", what,
                                                cudaGetErrorString(e));
  }
  pthread_mutex_lock(&c->mu);
  c->stats.stream_waits++;
  int done = r->done;
  if (!done) r->detached = 1;
  pthread_mutex_unlock(&c->mu);
  return done ? finish(r, 0) : SL_COMM_OK;
}

static int nccl_test(sl_comm_req *r) {
  sl_comm *c = r->c;
  pthread_mutex_lock(&c->mu);
  if (!r->done) poll_locked(c, r);
  int d = r->done;
  pthread_mutex_unlock(&c->mu);
  if (d) observe(r);
  return d;
}

/* ---- communicators ----------------------------------------------------------- */

static void be_free(nccl_be *b) {
  if (b->one_dev) cudaFree(b->one_dev);
  if (b->ev_compute) cudaEventDestroy(b->ev_compute);
  if (b->stream) cudaStreamDestroy(b->stream);
  if (b->own_mpi && b->mpi) sl_comm_destroy(b->mpi);
  free(b);
}

/* Wraps nc (taking ownership of it, and of mpi when own_mpi) into an
 * sl_comm with its stream, events and poller; registers it with the
 * watchdog. On failure everything taken is released. */
static sl_comm *wrap(ncclComm_t nc, sl_comm *mpi, int own_mpi, cudaStream_t compute, int dev, const char *name,
                     uint64_t uid, char *err, size_t nerr) {
  sl_comm *c = calloc(1, sizeof *c);
  nccl_be *b = calloc(1, sizeof *b);
  int nrank = -1, ncount = -1, prio_lo = 0, prio_hi = 0, sync_inited = 0;
  if (!c || !b) {
    snprintf(err, nerr, "out of memory creating comm %s", name);
    goto fail;
  }
  b->nc = nc;
  b->dev = dev;
  b->compute = compute;
  b->mpi = mpi;
  b->own_mpi = own_mpi;
  c->vt = &nccl_vt;
  c->be = b;
  c->uid = uid;
  snprintf(c->name, sizeof c->name, "%s", name);
  if (ncclCommUserRank(nc, &nrank) != ncclSuccess || ncclCommCount(nc, &ncount) != ncclSuccess) {
    snprintf(err, nerr, "ncclCommUserRank / ncclCommCount failed");
    goto fail;
  }
  c->rank = mpi ? sl_comm_rank(mpi) : nrank;
  c->size = mpi ? sl_comm_size(mpi) : ncount;
  if (nrank != c->rank || ncount != c->size) {
    snprintf(err, nerr, "NCCL comm has rank %d of %d, its MPI twin %s rank %d of %d", nrank, ncount,
             mpi ? mpi->name : "-", c->rank, c->size);
    goto fail;
  }
  if (!(c->world_ranks = malloc((size_t)c->size * sizeof(int)))) {
    snprintf(err, nerr, "out of memory creating comm %s", name);
    goto fail;
  }
  for (int i = 0; i < c->size; i++) c->world_ranks[i] = mpi ? sl_comm_world_rank(mpi, i) : i;
  CU(cudaDeviceGetStreamPriorityRange(&prio_lo, &prio_hi));
  CU(cudaStreamCreateWithPriority(&b->stream, cudaStreamNonBlocking, prio_hi));
  CU(cudaEventCreateWithFlags(&b->ev_compute, cudaEventDisableTiming));
  CU(cudaMalloc((void **)&b->one_dev, sizeof *b->one_dev));
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv_work, NULL);
  pthread_cond_init(&c->cv_done, NULL);
  pthread_mutex_init(&b->issue_mu, NULL);
  sync_inited = 1;
  if (pthread_create(&b->poller, NULL, poller_main, c) != 0) {
    snprintf(err, nerr, "cannot start the poller thread of comm %s", name);
    goto fail;
  }
  sl_comm_register(c);
  return c;
fail:
  if (sync_inited) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv_work);
    pthread_cond_destroy(&c->cv_done);
    pthread_mutex_destroy(&b->issue_mu);
  }
  ncclCommDestroy(nc);
  if (b) {
    be_free(b);
  } else if (own_mpi) {
    sl_comm_destroy(mpi);
  }
  if (c) free(c->world_ranks);
  free(c);
  return NULL;
}

static void nccl_destroy(sl_comm *c) {
  nccl_be *b = c->be;
  pthread_mutex_lock(&c->mu);
  b->quit = 1;
  pthread_cond_signal(&c->cv_work);
  pthread_mutex_unlock(&c->mu);
  pthread_join(b->poller, NULL); /* drains the in-flight FIFO first */
  sl_comm_unregister(c);
  if (b->failed[0] && !b->failed_told)
    fprintf(stderr, "shardlm: %s (the device waited for it; no later call on comm %s reported it)\n", b->failed,
            c->name);
  int prev = -1;
  cudaGetDevice(&prev);
  if (prev != b->dev) cudaSetDevice(b->dev);
  if (!__atomic_load_n(&b->aborted, __ATOMIC_SEQ_CST)) {
    if (c->broken) abort_once(b);
    else ncclCommDestroy(b->nc);
  }
  cudaStreamSynchronize(b->stream);
  int dev = b->dev;
  be_free(b);
  if (prev >= 0 && prev != dev) cudaSetDevice(prev);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv_work);
  pthread_cond_destroy(&c->cv_done);
  free(c->world_ranks);
  free(c);
}

int sl_comm_nccl_create(sl_comm *mpi_parent, void *cuda_stream, sl_comm **out) {
  char err[512] = "";
  if (!out) return sl_comm_set_error("sl_comm_nccl_create: out is NULL");
  *out = NULL;
  if (!mpi_parent ||
      (strcmp(sl_comm_backend(mpi_parent), "mpi") != 0 && strcmp(sl_comm_backend(mpi_parent), "self") != 0))
    return sl_comm_set_error("sl_comm_nccl_create: the parent must be an MPI or self communicator (got %s)",
                             mpi_parent ? sl_comm_backend(mpi_parent) : "NULL");
  int dev = -1;
  cudaError_t ce = cudaGetDevice(&dev);
  int n = sl_comm_size(mpi_parent), rank = sl_comm_rank(mpi_parent);
  /* {ok flag, ncclUniqueId} from rank 0; every rank takes part even when
   * something failed locally, so that no rank is left in the broadcast. */
  unsigned char msg[1 + sizeof(ncclUniqueId)];
  memset(msg, 0, sizeof msg);
  if (rank == 0) {
    ncclUniqueId id;
    if (ce == cudaSuccess && ncclGetUniqueId(&id) == ncclSuccess) {
      msg[0] = 1;
      memcpy(msg + 1, &id, sizeof id);
    }
  }
  sl_comm_req *rq = NULL;
  if (sl_comm_broadcast(mpi_parent, msg, (int64_t)sizeof msg, SL_U8, 0, &rq) != SL_COMM_OK)
    return SL_COMM_ERR;      /* message set */
  uint64_t seq = rq->op.seq; /* same on every rank: the uid below is too */
  if (sl_comm_wait(rq) != SL_COMM_OK)
    return sl_comm_set_error("sl_comm_nccl_create on %s: broadcast of the NCCL id failed: %s", mpi_parent->name,
                             sl_comm_last_error());
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return sl_comm_set_error("sl_comm_nccl_create on %s: no usable CUDA device on rank %d: %s", mpi_parent->name, rank,
                             cudaGetErrorString(ce));
  }
  if (!msg[0])
    return sl_comm_set_error("sl_comm_nccl_create on %s: rank 0 could not create the NCCL unique id "
                             "(no CUDA device there, or ncclGetUniqueId failed)",
                             mpi_parent->name);
  ncclUniqueId id;
  memcpy(&id, msg + 1, sizeof id);
  ncclComm_t nc = NULL;
  ncclResult_t ne = ncclCommInitRank(&nc, n, id, rank);
  if (ne != ncclSuccess)
    return sl_comm_set_error("sl_comm_nccl_create on %s: ncclCommInitRank (rank %d of %d, device %d) "
                             "failed: %s (%s)",
                             mpi_parent->name, rank, n, dev, ncclGetErrorString(ne), ncclGetLastError(NULL));
  uint64_t z = mpi_parent->uid * 0xd6e8feb86659fd93ull + seq * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  z ^= z >> 29;
  char name[96];
  snprintf(name, sizeof name, "%.80s/nccl", mpi_parent->name);
  sl_comm *c = wrap(nc, mpi_parent, 0, (cudaStream_t)cuda_stream, dev, name, (z & ~1ull) | 2, err, sizeof err);
  if (!c) return sl_comm_set_error("sl_comm_nccl_create on %s: %s", mpi_parent->name, err);
  *out = c;
  return SL_COMM_OK;
}

int sl_comm_nccl_create_boot(const struct sl_boot_env *boot, void *cuda_stream, double timeout_s, sl_comm **out) {
  char err[512] = "";
  if (!out) return sl_comm_set_error("sl_comm_nccl_create_boot: out is NULL");
  *out = NULL;
  if (!boot || boot->size < 1 || boot->rank < 0 || boot->rank >= boot->size)
    return sl_comm_set_error("sl_comm_nccl_create_boot: no valid rank/world (sl_boot_from_env)");
  int dev = -1;
  cudaError_t ce = cudaGetDevice(&dev);
  /* {ok flag, ncclUniqueId} from rank 0, as in sl_comm_nccl_create */
  unsigned char msg[1 + sizeof(ncclUniqueId)];
  memset(msg, 0, sizeof msg);
  if (boot->rank == 0) {
    ncclUniqueId id;
    if (ce == cudaSuccess && ncclGetUniqueId(&id) == ncclSuccess) {
      msg[0] = 1;
      memcpy(msg + 1, &id, sizeof id);
    }
  }
  if (sl_boot_share(boot, msg, sizeof msg, timeout_s) != SL_OK)
    return sl_comm_set_error("sl_comm_nccl_create_boot (rank %d of %d, %s): %s", boot->rank, boot->size, boot->source,
                             sl_errmsg());
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return sl_comm_set_error("sl_comm_nccl_create_boot: no usable CUDA device on rank %d: %s", boot->rank,
                             cudaGetErrorString(ce));
  }
  if (!msg[0])
    return sl_comm_set_error("sl_comm_nccl_create_boot: rank 0 could not create the NCCL unique id "
                             "(no CUDA device there, or ncclGetUniqueId failed)");
  ncclUniqueId id;
  memcpy(&id, msg + 1, sizeof id);
  ncclComm_t nc = NULL;
  ncclResult_t ne = ncclCommInitRank(&nc, boot->size, id, boot->rank);
  if (ne != ncclSuccess)
    return sl_comm_set_error("sl_comm_nccl_create_boot: ncclCommInitRank (rank %d of %d, device %d) failed: "
                             "%s (%s)",
                             boot->rank, boot->size, dev, ncclGetErrorString(ne), ncclGetLastError(NULL));
  uint64_t z = 0x6a09e667f3bcc909ull; /* uid: a hash of the id bytes, equal on every rank */
  for (size_t i = 0; i < sizeof msg; i++) z = (z ^ msg[i]) * 0x100000001b3ull;
  sl_comm *c = wrap(nc, NULL, 0, (cudaStream_t)cuda_stream, dev, "boot/nccl", (z & ~1ull) | 2, err, sizeof err);
  if (!c) return sl_comm_set_error("sl_comm_nccl_create_boot: %s", err);
  *out = c;
  return SL_COMM_OK;
}

#endif /* SL_USE_NCCL */
