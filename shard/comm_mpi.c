/* shard/comm_mpi.c — the MPI backend of shard/comm.h (host buffers), built as
 * the module libsl_comm_mpi.so that comm.c loads with dlopen only when a
 * launcher started the process (or SL_COMM=mpi): a world-size-1 run never
 * loads libmpi. The module's one export is sl_comm_mpi_entry(); it calls back
 * into comm.c and base.c, which the executable exports (-rdynamic).
 *
 * Owns: MPI initialisation (MPI_THREAD_MULTIPLE), one progress thread per
 * communicator that runs queued operations in FIFO order (MPI_I* + MPI_Test
 * with back-off), the bf16 sum MPI_Op, and the process-wide watchdog thread
 * that aborts the job when a collective stalls. Protocols are described in
 * docs/comm.md.
 *
 * The MPI world state and the watchdog are process-wide (one MPI world per
 * process), kept in the single static `g` below; the communicator registry
 * the watchdog walks lives in comm.c.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "shard/comm.h"
#include "shard/comm_internal.h"

/* ---- small helpers ------------------------------------------------------ */

#define comm_fail sl_comm_set_error
#define now_ns sl_comm_now_ns
#define is_coll sl_comm_is_coll

#define sleep_us sl_sleep_us

/* ---- process-wide state: MPI, bf16 op, watchdog ------------------------- */

enum { WD_TAG_QUERY = 101, WD_TAG_REPLY = 102, WD_NSEND = 64 };

static struct {
  int inited, we_init_mpi;
  int wrank, wsize;
  double timeout_s;       /* <= 0: no watchdog */
  MPI_Datatype bf16_type; /* 2 contiguous bytes */
  MPI_Op bf16_sum;
  MPI_Comm wd_comm; /* dup of world: watchdog queries only */
  pthread_t wd_thread;
  int wd_running, wd_stop; /* wd_stop guarded by the registry lock */
} g;

static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt) {
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++)
    b[i] = sl_f32_to_bf16_scalar(sl_bf16_to_f32_scalar(a[i]) + sl_bf16_to_f32_scalar(b[i]));
}

static MPI_Datatype mpi_type(sl_dtype t) {
  switch (t) {
  case SL_F32: return MPI_FLOAT;
  case SL_BF16: return g.bf16_type;
  case SL_I32: return MPI_INT32_T;
  case SL_I64: return MPI_INT64_T;
  case SL_U8: return MPI_UINT8_T;
  case SL_F64: return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_sum(sl_dtype t) { return t == SL_BF16 ? g.bf16_sum : MPI_SUM; }

#define reg_add sl_comm_register
#define reg_del sl_comm_unregister

/* ---- MPI backend state of one communicator ----------------------------- */

typedef struct {
  sl_comm_req *req;
  MPI_Request mr;
} p2p_slot;

typedef struct {
  MPI_Comm mc;      /* this communicator's own MPI communicator */
  pthread_t thread; /* progress thread */
  p2p_slot *p2p;    /* (np2p) sends/recvs in flight */
  int np2p, cap2p;
} mpi_be;

static void complete(sl_comm *c, sl_comm_req *r, int status, const char *msg) {
  pthread_mutex_lock(&c->mu);
  r->status = status;
  if (status != SL_COMM_OK) {
    size_t l = strlen(msg);
    if (l >= sizeof r->err) l = sizeof r->err - 1;
    memcpy(r->err, msg, l);
    r->err[l] = 0;
    c->broken = 1;
  }
  r->done = 1;
  pthread_cond_broadcast(&c->cv_done);
  pthread_mutex_unlock(&c->mu);
}

static void mpi_errstr(int e, char *buf, size_t n) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(e, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", e);
  snprintf(buf, n, "%s", s);
}

/* c->p2p_oldest := the send/recv in flight that started first (watchdog).
 * Called before a request leaves the table, so the watchdog never sees one
 * that completed (and may be freed by its waiter). */
static void p2p_track(sl_comm *c) {
  mpi_be *b = c->be;
  sl_comm_req *old = NULL;
  for (int i = 0; i < b->np2p; i++)
    if (!old || b->p2p[i].req->start_ns < old->start_ns) old = b->p2p[i].req;
  pthread_mutex_lock(&c->mu);
  c->p2p_oldest = old;
  pthread_mutex_unlock(&c->mu);
}

/* Tests every send/recv in flight; completes the finished ones. */
static void p2p_poll(sl_comm *c) {
  mpi_be *b = c->be;
  for (int i = 0; i < b->np2p;) {
    int flag = 0;
    int e = MPI_Test(&b->p2p[i].mr, &flag, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS || flag) {
      sl_comm_req *r = b->p2p[i].req;
      char msg[512] = "";
      if (e != MPI_SUCCESS) {
        char es[256];
        mpi_errstr(e, es, sizeof es);
        snprintf(msg, sizeof msg, "%s to/from rank %d (tag %d, %lld x %s) on comm %s failed: %s",
                 sl_coll_name((sl_coll_kind)r->op.kind), r->op.peer, r->op.tag, (long long)r->op.count,
                 sl_dtype_name(r->op.dt), c->name, es);
      }
      b->p2p[i] = b->p2p[--b->np2p];
      p2p_track(c);
      complete(c, r, e == MPI_SUCCESS ? SL_COMM_OK : SL_COMM_ERR, msg);
    } else {
      i++;
    }
  }
}

/* Back-off for polling loops: spin briefly, then sleep up to 200 us. */
static const sl_backoff_policy mpi_backoff = {.spin = 50, .yield = 0, .first_us = 2, .doublings = 6, .max_us = 200};
static void backoff(int *spins) { sl_backoff(spins, &mpi_backoff); }

/* Drives one MPI request to completion while keeping sends/recvs moving. */
static int mpi_wait(sl_comm *c, MPI_Request *mr) {
  int spins = 0;
  for (;;) {
    int flag = 0;
    int e = MPI_Test(mr, &flag, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS) return e;
    if (flag) return MPI_SUCCESS;
    p2p_poll(c);
    backoff(&spins);
  }
}

static sl_comm *make_comm(MPI_Comm mc, const char *name, uint64_t uid, char *err, size_t nerr);

/* run_coll's reduce-scatter: in place through a scratch block, the same reduction order as out of place */
static int run_reduce_scatter(sl_comm *c, sl_comm_op *op, MPI_Datatype ty, char *err, size_t nerr) {
  mpi_be *b = c->be;
  int n = c->size, rank = c->rank, e = MPI_SUCCESS;
  size_t es = sl_dtype_size(op->dt);
  MPI_Request mr = MPI_REQUEST_NULL;
  int cnt = (int)op->count;
  const char *send = op->send;
  size_t blk = (size_t)op->count * es;
  int inplace = (const char *)op->recv == send + (size_t)rank * blk;
  if (n == 1) {
    if (!inplace) memmove(op->recv, send, blk);
    return MPI_SUCCESS;
  }
  /* In place: same MPI call into a scratch block, then copy, so the
   * reduction order is that of the out-of-place form. */
  void *out = op->recv;
  if (inplace && !(out = malloc(blk ? blk : 1))) {
    snprintf(err, nerr, "out of memory (%zu bytes scratch)", blk);
    return -1;
  }
  e = MPI_Ireduce_scatter_block(send, out, cnt, ty, mpi_sum(op->dt), b->mc, &mr);
  if (e == MPI_SUCCESS) e = mpi_wait(c, &mr);
  if (inplace) {
    if (e == MPI_SUCCESS) memcpy(op->recv, out, blk);
    free(out);
  }
  return e;
}

/* run_coll's all-reduce: a reduce-scatter of blocks of ceil(count/n), then an all-gather */
static int run_allreduce(sl_comm *c, sl_comm_op *op, MPI_Datatype ty, char *err, size_t nerr) {
  mpi_be *b = c->be;
  int n = c->size, e = MPI_SUCCESS;
  size_t es = sl_dtype_size(op->dt);
  MPI_Request mr = MPI_REQUEST_NULL;
  /* reduce-scatter (blocks of ceil(count/n), zero padded) + all-gather:
   * bit-identical to sl_comm_reduce_scatter + sl_comm_allgather of the
   * (padded) buffer. */
  if (n == 1 || op->count == 0) return MPI_SUCCESS;
  int64_t bc = (op->count + n - 1) / n, padded = bc * n;
  char *full = op->recv, *blk = NULL;
  if (padded != op->count) {
    if (!(full = calloc((size_t)padded, es))) {
      snprintf(err, nerr, "out of memory (%lld elements padding)", (long long)padded);
      return -1;
    }
    memcpy(full, op->recv, (size_t)op->count * es);
  }
  if (!(blk = malloc((size_t)bc * es))) {
    if (full != op->recv) free(full);
    snprintf(err, nerr, "out of memory (%lld elements scratch)", (long long)bc);
    return -1;
  }
  e = MPI_Ireduce_scatter_block(full, blk, (int)bc, ty, mpi_sum(op->dt), b->mc, &mr);
  if (e == MPI_SUCCESS) e = mpi_wait(c, &mr);
  if (e == MPI_SUCCESS) e = MPI_Iallgather(blk, (int)bc, ty, full, (int)bc, ty, b->mc, &mr);
  if (e == MPI_SUCCESS) e = mpi_wait(c, &mr);
  if (full != op->recv) {
    if (e == MPI_SUCCESS) memcpy(op->recv, full, (size_t)op->count * es);
    free(full);
  }
  free(blk);
  return e;
}

/* run_coll's all-to-all: MPI_Ialltoallv with the int counts and
 * displacements (each checked in [0, INT_MAX] at issue); at one rank the
 * block to itself is a copy. */
static int run_alltoall(sl_comm *c, sl_comm_op *op, MPI_Datatype ty, char *err, size_t nerr) {
  mpi_be *b = c->be;
  int n = c->size, e = MPI_SUCCESS;
  size_t es = sl_dtype_size(op->dt);
  const int64_t *a = op->a2a; /* scount, sdispl, rcount, rdispl: n entries each */
  if (n == 1) {
    if (a[0])
      memmove((char *)op->recv + (size_t)a[3] * es, (const char *)op->send + (size_t)a[1] * es, (size_t)a[0] * es);
    return MPI_SUCCESS;
  }
  int *v = malloc(4 * (size_t)n * sizeof(int));
  if (!v) {
    snprintf(err, nerr, "out of memory (%d ranks' counts)", n);
    return -1;
  }
  for (int i = 0; i < 4 * n; i++) v[i] = (int)a[i];
  MPI_Request mr = MPI_REQUEST_NULL;
  e = MPI_Ialltoallv(op->send, v, v + n, ty, op->recv, v + 2 * n, v + 3 * n, ty, b->mc, &mr);
  if (e == MPI_SUCCESS) e = mpi_wait(c, &mr);
  free(v);
  return e;
}

/* Runs one collective (or split) on the progress thread. Returns an MPI
 * error code or -1 (message in err). */
static int run_coll(sl_comm *c, sl_comm_req *r, char *err, size_t nerr) {
  mpi_be *b = c->be;
  sl_comm_op *op = &r->op;
  int n = c->size, rank = c->rank, e = MPI_SUCCESS;
  size_t es = sl_dtype_size(op->dt);
  MPI_Datatype ty = op->kind == SL_COLL_BARRIER || op->kind == SL_OPK_SPLIT ? MPI_BYTE : mpi_type(op->dt);
  MPI_Request mr = MPI_REQUEST_NULL;
  int cnt = (int)op->count;
  switch (op->kind) {
  case SL_COLL_ALLGATHER: {
    char *recv = op->recv;
    int inplace = op->send == recv + (size_t)rank * (size_t)op->count * es;
    if (n == 1) {
      if (!inplace) memmove(recv, op->send, (size_t)op->count * es);
      return MPI_SUCCESS;
    }
    e = MPI_Iallgather(inplace ? MPI_IN_PLACE : op->send, cnt, ty, recv, cnt, ty, b->mc, &mr);
    if (e == MPI_SUCCESS) e = mpi_wait(c, &mr);
    return e;
  }
  case SL_COLL_REDUCE_SCATTER: return run_reduce_scatter(c, op, ty, err, nerr);
  case SL_COLL_ALLREDUCE: return run_allreduce(c, op, ty, err, nerr);
  case SL_COLL_ALLTOALL: return run_alltoall(c, op, ty, err, nerr);
  case SL_COLL_BROADCAST:
    if (n == 1) return MPI_SUCCESS;
    e = MPI_Ibcast(op->recv, cnt, ty, op->peer, b->mc, &mr);
    if (e == MPI_SUCCESS) e = mpi_wait(c, &mr);
    return e;
  case SL_COLL_BARRIER:
    if (n == 1) return MPI_SUCCESS;
    e = MPI_Ibarrier(b->mc, &mr);
    if (e == MPI_SUCCESS) e = mpi_wait(c, &mr);
    return e;
  case SL_OPK_SPLIT: {
    MPI_Comm nc = MPI_COMM_NULL;
    e = MPI_Comm_split(b->mc, op->color, op->key, &nc);
    if (e != MPI_SUCCESS) return e;
    /* uid: a mix of the parent's uid and its split counter, both equal on
     * every member; unique within a process (one color per split). */
    uint64_t z = sl_comm_child_uid(c->uid, op->seq);
    char name[96];
    snprintf(name, sizeof name, "%.60s/s%llu:c%d", c->name, (unsigned long long)op->seq, op->color);
    sl_comm *child = make_comm(nc, name, z | 1, err, nerr);
    if (!child) return -1;
    *op->split_out = child;
    return MPI_SUCCESS;
  }
  }
  snprintf(err, nerr, "unknown operation kind %d", op->kind);
  return -1;
}

/* Starts a send or recv; it completes later in p2p_poll. */
static int start_p2p(sl_comm *c, sl_comm_req *r) {
  mpi_be *b = c->be;
  if (b->np2p == b->cap2p) {
    int nc = b->cap2p ? 2 * b->cap2p : 16;
    p2p_slot *p = realloc(b->p2p, (size_t)nc * sizeof *p);
    if (!p) return -1;
    b->p2p = p;
    b->cap2p = nc;
  }
  p2p_slot *s = &b->p2p[b->np2p];
  s->req = r;
  int e;
  if (r->op.kind == SL_COLL_SEND)
    e = MPI_Isend(r->op.send, (int)r->op.count, mpi_type(r->op.dt), r->op.peer, r->op.tag, b->mc, &s->mr);
  else e = MPI_Irecv(r->op.recv, (int)r->op.count, mpi_type(r->op.dt), r->op.peer, r->op.tag, b->mc, &s->mr);
  if (e == MPI_SUCCESS) {
    b->np2p++;
    p2p_track(c);
  }
  return e;
}

static void *progress_thread(void *arg) {
  sl_comm *c = arg;
  mpi_be *b = c->be;
  int spins = 0;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    while (!c->head && b->np2p == 0) pthread_cond_wait(&c->cv_work, &c->mu);
    sl_comm_req *r = c->head;
    if (r) {
      c->head = r->next;
      if (!c->head) c->tail = NULL;
      r->start_ns = now_ns();
      if (is_coll(r->op.kind)) c->running = r;
    }
    int broken = c->broken;
    pthread_mutex_unlock(&c->mu);
    if (!r) { /* only sends/recvs in flight */
      p2p_poll(c);
      backoff(&spins);
      continue;
    }
    spins = 0;
    if (r->op.kind == SL_OPK_QUIT) {
      while (b->np2p > 0) {
        p2p_poll(c);
        backoff(&spins);
      }
      free(r);
      return NULL;
    }
    char err[512] = "", msg[700];
    if (broken) {
      snprintf(msg, sizeof msg, "%s #%llu on comm %s not run: the communicator failed earlier",
               sl_coll_name((sl_coll_kind)r->op.kind), (unsigned long long)r->op.seq, c->name);
      complete(c, r, SL_COMM_ERR, msg);
      continue;
    }
    if (!is_coll(r->op.kind)) {
      int e = start_p2p(c, r);
      if (e != MPI_SUCCESS) {
        if (e > 0) mpi_errstr(e, err, sizeof err);
        else snprintf(err, sizeof err, "out of memory");
        snprintf(msg, sizeof msg, "%s with rank %d (tag %d) on comm %s failed to start: %s",
                 sl_coll_name((sl_coll_kind)r->op.kind), r->op.peer, r->op.tag, c->name, err);
        complete(c, r, SL_COMM_ERR, msg);
      }
      continue;
    }
    int e = run_coll(c, r, err, sizeof err);
    pthread_mutex_lock(&c->mu);
    c->running = NULL;
    pthread_mutex_unlock(&c->mu);
    if (e != MPI_SUCCESS) {
      if (e > 0) mpi_errstr(e, err, sizeof err);
      snprintf(msg, sizeof msg, "collective %s #%llu (%lld x %s) on comm %s (%d ranks) failed: %s",
               sl_coll_name((sl_coll_kind)r->op.kind), (unsigned long long)r->op.seq, (long long)r->op.count,
               sl_dtype_name(r->op.dt), c->name, c->size, err);
      complete(c, r, SL_COMM_ERR, msg);
    } else {
      complete(c, r, SL_COMM_OK, "");
    }
  }
}

static void mpi_destroy(sl_comm *c);
static const sl_comm_vt mpi_vt = {.name = "mpi", .destroy = mpi_destroy};

/* Wraps an MPI communicator (taking ownership) into an sl_comm with its
 * progress thread, and registers it with the watchdog. */
static sl_comm *make_comm(MPI_Comm mc, const char *name, uint64_t uid, char *err, size_t nerr) {
  sl_comm *c = calloc(1, sizeof *c);
  mpi_be *b = calloc(1, sizeof *b);
  MPI_Group gg = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  int *tmp = NULL;
  if (!c || !b) goto nomem;
  MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
  b->mc = mc;
  c->vt = &mpi_vt;
  c->be = b;
  c->uid = uid;
  snprintf(c->name, sizeof c->name, "%s", name);
  MPI_Comm_rank(mc, &c->rank);
  MPI_Comm_size(mc, &c->size);
  c->world_ranks = malloc((size_t)c->size * sizeof(int));
  tmp = malloc((size_t)c->size * sizeof(int));
  if (!c->world_ranks || !tmp) goto nomem;
  for (int i = 0; i < c->size; i++) tmp[i] = i;
  MPI_Comm_group(mc, &gg);
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  MPI_Group_translate_ranks(gg, c->size, tmp, wg, c->world_ranks);
  MPI_Group_free(&gg);
  MPI_Group_free(&wg);
  free(tmp);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv_work, NULL);
  pthread_cond_init(&c->cv_done, NULL);
  if (pthread_create(&b->thread, NULL, progress_thread, c) != 0) {
    snprintf(err, nerr, "cannot start the progress thread of comm %s", name);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv_work);
    pthread_cond_destroy(&c->cv_done);
    free(c->world_ranks);
    free(c);
    free(b);
    MPI_Comm_free(&mc);
    return NULL;
  }
  reg_add(c);
  return c;
nomem:
  snprintf(err, nerr, "out of memory creating comm %s", name);
  if (c) free(c->world_ranks);
  free(tmp);
  free(c);
  free(b);
  MPI_Comm_free(&mc);
  return NULL;
}

/* ---- watchdog ----------------------------------------------------------- */

typedef struct {
  MPI_Request qreq; /* the posted query receive */
  int64_t qbuf[2];  /* {uid, seq} */
  MPI_Request sreq[WD_NSEND];
  int64_t sbuf[WD_NSEND][3]; /* replies {uid, issued_seq or -1, gap_ns} */
  /* The longest recent gap between two wd_serve calls (a SIGSTOPped, later
   * continued process, or one not scheduled): gap_ns ended at gap_end. */
  uint64_t last_ns, gap_ns, gap_end;
} wd_state;

/* A gap counts as "recent" while it ended less than this long ago. */
static uint64_t wd_gap_window(void) { return (uint64_t)((2.0 * g.timeout_s + 10.0) * 1e9); }

/* A rank whose watchdog loop stalled this long is named as stalled. */
static uint64_t wd_gap_limit(void) { return (uint64_t)((g.timeout_s > 2.0 ? 0.5 * g.timeout_s : 1.0) * 1e9); }

/* Answers every pending status query. */
static void wd_serve(wd_state *w) {
  uint64_t t = now_ns();
  if (w->last_ns && t > w->last_ns) {
    uint64_t gap = t - w->last_ns;
    if (gap > w->gap_ns || t - w->gap_end > wd_gap_window()) {
      w->gap_ns = gap;
      w->gap_end = t;
    }
  }
  w->last_ns = t;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Test(&w->qreq, &flag, &st) != MPI_SUCCESS || !flag) return;
    int64_t uid = w->qbuf[0], seq = -1;
    sl_comm_registry_lock();
    for (int i = 0; i < sl_comm_registry_size(); i++)
      if (sl_comm_registry_at(i)->uid == (uint64_t)uid) {
        pthread_mutex_lock(&sl_comm_registry_at(i)->mu);
        seq = (int64_t)sl_comm_registry_at(i)->issued_seq;
        pthread_mutex_unlock(&sl_comm_registry_at(i)->mu);
      }
    sl_comm_registry_unlock();
    int slot = -1;
    for (int i = 0; i < WD_NSEND && slot < 0; i++) {
      int done = 1;
      if (w->sreq[i] != MPI_REQUEST_NULL) MPI_Test(&w->sreq[i], &done, MPI_STATUS_IGNORE);
      if (done) slot = i;
    }
    int64_t gap = t - w->gap_end > wd_gap_window() ? 0 : (int64_t)w->gap_ns;
    if (slot >= 0) {
      w->sbuf[slot][0] = uid;
      w->sbuf[slot][1] = seq;
      w->sbuf[slot][2] = gap;
      MPI_Isend(w->sbuf[slot], 3, MPI_INT64_T, st.MPI_SOURCE, WD_TAG_REPLY, g.wd_comm, &w->sreq[slot]);
    } else {
      int64_t rep[3] = {uid, seq, gap};
      MPI_Send(rep, 3, MPI_INT64_T, st.MPI_SOURCE, WD_TAG_REPLY, g.wd_comm);
    }
    MPI_Irecv(w->qbuf, 2, MPI_INT64_T, MPI_ANY_SOURCE, WD_TAG_QUERY, g.wd_comm, &w->qreq);
  }
}

/* What the watchdog needs of a late communicator, copied under the registry
 * lock (the comm may complete and be destroyed while we investigate). */
typedef struct {
  char name[96];
  int rank, size, *world_ranks;
  uint64_t uid;
} wd_snap;

/* Appends ", "-separated text to buf (size n, length *l), truncating. */
static void wd_cat(char *buf, size_t n, size_t *l, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  *l += (size_t)vsnprintf(buf + *l, *l < n ? n - *l : 0, fmt, ap);
  va_end(ap);
  if (*l >= n) *l = n - 1;
}

/* A collective of comm c (snapshot values) is over time: ask every world
 * rank how far it got (members) and whether it is alive (everyone: a rank
 * stuck in another comm's collective with a stopped peer is not the culprit),
 * name the members that never arrived, the world ranks that did not answer
 * and those whose watchdog loop stalled (stopped, then continued), abort the
 * job. Sibling comms share a uid, so a non-member's reply is a ping only. */
static void wd_fire(wd_state *w, const wd_snap *c, int kind, uint64_t seq, double waited) {
  int n = c->size, ws = g.wsize;
  int64_t(*rep)[3] = calloc((size_t)ws, sizeof *rep);
  int64_t q[2] = {(int64_t)c->uid, (int64_t)seq};
  MPI_Request *rr = calloc((size_t)ws, sizeof *rr), *sr = calloc((size_t)ws, sizeof *sr);
  int *got = calloc((size_t)ws, sizeof *got);
  char missing[2048] = "", silent[1024] = "", stalled[1024] = "";
  if (rep && rr && sr && got) {
    for (int i = 0; i < ws; i++) {
      rr[i] = sr[i] = MPI_REQUEST_NULL;
      if (i == g.wrank) continue;
      MPI_Irecv(rep[i], 3, MPI_INT64_T, i, WD_TAG_REPLY, g.wd_comm, &rr[i]);
      MPI_Isend(q, 2, MPI_INT64_T, i, WD_TAG_QUERY, g.wd_comm, &sr[i]);
    }
    uint64_t t0 = now_ns();
    int pending = ws - 1;
    while (pending > 0 && now_ns() - t0 < 3000000000ull) {
      wd_serve(w);
      for (int i = 0; i < ws; i++) {
        if (i == g.wrank || got[i]) continue;
        int flag = 0;
        if (MPI_Test(&rr[i], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
          got[i] = 1;
          pending--;
        }
      }
      sleep_us(2000);
    }
  }
  int ok = rep && rr && sr && got;
  size_t lm = 0, ls = 0, lt = 0;
  for (int i = 0; i < n; i++) {
    int wr = c->world_ranks[i];
    if (i == c->rank || (ok && got[wr] && rep[wr][1] >= (int64_t)seq)) continue;
    if (wr == i) wd_cat(missing, sizeof missing, &lm, "%s%d", lm ? ", " : "", i);
    else wd_cat(missing, sizeof missing, &lm, "%s%d (world rank %d)", lm ? ", " : "", i, wr);
  }
  for (int i = 0; i < ws; i++) {
    uint64_t gap = 0;
    if (i == g.wrank) gap = now_ns() - w->gap_end > wd_gap_window() ? 0 : w->gap_ns;
    else if (ok && got[i] && rep[i][2] > 0) gap = (uint64_t)rep[i][2];
    if (i != g.wrank && !(ok && got[i])) wd_cat(silent, sizeof silent, &ls, "%sworld rank %d", ls ? ", " : "", i);
    else if (gap >= wd_gap_limit())
      wd_cat(stalled, sizeof stalled, &lt, "%sworld rank %d (stalled %.1f s%s: stopped or not scheduled)",
             lt ? ", " : "", i, (double)gap * 1e-9, i == g.wrank ? ", this rank" : "");
  }
  fprintf(stderr,
          "shardlm: collective %s #%llu on comm %s (%d ranks) did not complete within %.1f s; "
          "ranks that never arrived: %s%s%s%s%s%s (reported by rank %d, world rank %d)\n",
          sl_coll_name((sl_coll_kind)kind), (unsigned long long)seq, c->name, n, waited,
          lm         ? missing
          : ls || lt ? "none"
                     : "none (all entered it: mismatched collectives or a transport fault)",
          ls ? "; no watchdog answer from " : "", ls ? silent : "", ls ? " (dead or hung)" : "", lt ? "; " : "",
          lt ? stalled : "", c->rank, g.wrank);
  fflush(stderr);
  /* A backend with its own transport (NCCL) aborts it first. */
  sl_comm_registry_lock();
  for (int i = 0; i < sl_comm_registry_size(); i++) {
    sl_comm *o = sl_comm_registry_at(i);
    if (o->uid == c->uid && o->vt->abort) o->vt->abort(o);
  }
  sl_comm_registry_unlock();
  MPI_Abort(MPI_COMM_WORLD, 3);
  _exit(3); /* not reached */
}

/* A send/recv of comm `name` is over time: its peer never posted the
 * matching half (or died). Nothing to ask the peers: name it and abort. */
static void wd_fire_p2p(const char *name, uint64_t uid, int rank, int wrank_peer, const sl_comm_op *op, double waited) {
  fprintf(stderr,
          "shardlm: %s #%llu (%lld x %s, tag %d) %s rank %d (world rank %d) on comm %s did not complete within "
          "%.1f s: the peer never posted the matching %s, or is dead or hung (reported by rank %d, world "
          "rank %d)\n",
          sl_coll_name((sl_coll_kind)op->kind), (unsigned long long)op->seq, (long long)op->count,
          sl_dtype_name(op->dt), op->tag, op->kind == SL_COLL_SEND ? "to" : "from", op->peer, wrank_peer, name, waited,
          op->kind == SL_COLL_SEND ? "recv" : "send", rank, g.wrank);
  fflush(stderr);
  sl_comm_registry_lock();
  for (int i = 0; i < sl_comm_registry_size(); i++) {
    sl_comm *o = sl_comm_registry_at(i);
    if (o->uid == uid && o->vt->abort) o->vt->abort(o);
  }
  sl_comm_registry_unlock();
  MPI_Abort(MPI_COMM_WORLD, 3);
  _exit(3); /* not reached */
}

static void *wd_main(void *arg) {
  wd_state w;
  memset(&w, 0, sizeof w);
  for (int i = 0; i < WD_NSEND; i++) w.sreq[i] = MPI_REQUEST_NULL;
  MPI_Irecv(w.qbuf, 2, MPI_INT64_T, MPI_ANY_SOURCE, WD_TAG_QUERY, g.wd_comm, &w.qreq);
  uint64_t limit = (uint64_t)(g.timeout_s * 1e9);
  for (;;) {
    wd_serve(&w);
    sl_comm_registry_lock();
    if (g.wd_stop) {
      sl_comm_registry_unlock();
      break;
    }
    wd_snap late = {.size = 0};
    int kind = 0, p2p_late = 0, p2p_rank = 0, p2p_wpeer = 0;
    sl_comm_op p2p_op;
    char p2p_name[96];
    uint64_t seq = 0, t = now_ns(), waited = 0, p2p_uid = 0;
    for (int i = 0; i < sl_comm_registry_size() && !late.size && !p2p_late; i++) {
      sl_comm *c = sl_comm_registry_at(i);
      pthread_mutex_lock(&c->mu);
      sl_comm_req *p = c->p2p_oldest;
      if (p && p->start_ns < t && t - p->start_ns > limit) {
        p2p_late = 1;
        p2p_op = p->op;
        p2p_uid = c->uid;
        p2p_rank = c->rank;
        p2p_wpeer = c->world_ranks[p->op.peer];
        waited = t - p->start_ns;
        memcpy(p2p_name, c->name, sizeof p2p_name);
      }
      /* start_ns may be later than t (stamped after t was read) */
      if (c->running && c->running->start_ns < t && t - c->running->start_ns > limit &&
          (late.world_ranks = malloc((size_t)c->size * sizeof(int)))) {
        kind = c->running->op.kind;
        seq = c->running->op.seq;
        waited = t - c->running->start_ns;
        memcpy(late.name, c->name, sizeof late.name);
        memcpy(late.world_ranks, c->world_ranks, (size_t)c->size * sizeof(int));
        late.rank = c->rank;
        late.uid = c->uid;
        late.size = c->size;
      }
      pthread_mutex_unlock(&c->mu);
    }
    sl_comm_registry_unlock();
    if (p2p_late) wd_fire_p2p(p2p_name, p2p_uid, p2p_rank, p2p_wpeer, &p2p_op, (double)waited * 1e-9);
    if (late.size) wd_fire(&w, &late, kind, seq, (double)waited * 1e-9);
    sleep_us(20000);
  }
  MPI_Cancel(&w.qreq);
  MPI_Wait(&w.qreq, MPI_STATUS_IGNORE);
  for (int i = 0; i < WD_NSEND; i++)
    if (w.sreq[i] != MPI_REQUEST_NULL) MPI_Wait(&w.sreq[i], MPI_STATUS_IGNORE);
  return NULL;
}

/* ---- world ------------------------------------------------------------- */

static int mpi_world_init(int *argc, char ***argv, double timeout_s, sl_comm **world) {
  char err[512] = "";
  if (!world) return comm_fail("sl_comm_world_init: world is NULL");
  *world = NULL;
  if (g.inited) return comm_fail("sl_comm_world_init: already initialised (call it once per process)");
  int flag = 0, prov = 0;
  MPI_Initialized(&flag);
  if (!flag) {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &prov) != MPI_SUCCESS)
      return comm_fail("MPI_Init_thread failed");
    g.we_init_mpi = 1;
  } else {
    MPI_Query_thread(&prov);
  }
  if (prov < MPI_THREAD_MULTIPLE)
    return comm_fail("MPI provides thread level %d, shardlm needs MPI_THREAD_MULTIPLE (%d): "
                     "use an MPI built with thread support (OpenMPI >= 4 grants it)",
                     prov, MPI_THREAD_MULTIPLE);
  MPI_Comm_rank(MPI_COMM_WORLD, &g.wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.wsize);
  MPI_Type_contiguous(2, MPI_BYTE, &g.bf16_type);
  MPI_Type_commit(&g.bf16_type);
  MPI_Op_create(bf16_sum_fn, 1, &g.bf16_sum);
  MPI_Comm wc;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &g.wd_comm) != MPI_SUCCESS || MPI_Comm_dup(MPI_COMM_WORLD, &wc) != MPI_SUCCESS)
    return comm_fail("MPI_Comm_dup of MPI_COMM_WORLD failed");
  MPI_Comm_set_errhandler(g.wd_comm, MPI_ERRORS_RETURN);
  g.timeout_s = timeout_s;
  g.inited = 1;
  sl_comm *w = make_comm(wc, "world", 1, err, sizeof err);
  if (!w) return comm_fail("sl_comm_world_init: %s", err);
  if (timeout_s > 0) {
    g.wd_stop = 0;
    if (pthread_create(&g.wd_thread, NULL, wd_main, NULL) != 0) {
      mpi_destroy(w);
      return comm_fail("sl_comm_world_init: cannot start the watchdog thread");
    }
    g.wd_running = 1;
  }
  *world = w;
  return SL_COMM_OK;
}

static void mpi_world_finalize(void) {
  if (!g.inited) return;
  if (sl_comm_registry_size() > 0)
    fprintf(stderr, "shardlm: warning: sl_comm_world_finalize with %d communicator(s) not destroyed\n",
            sl_comm_registry_size());
  /* Final barrier, bounded by the timeout (+5 s, so that the watchdog of a
   * rank still stuck in a collective reports first): a rank that never gets
   * here must not leave the others inside MPI_Finalize forever. The watchdog
   * keeps answering queries meanwhile. */
  MPI_Request mr;
  if (g.wsize > 1 && MPI_Ibarrier(g.wd_comm, &mr) == MPI_SUCCESS) {
    uint64_t t0 = now_ns();
    int flag = 0, spins = 0;
    while (MPI_Test(&mr, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag) {
      if (g.timeout_s > 0 && now_ns() - t0 > (uint64_t)((g.timeout_s + 5.0) * 1e9)) {
        fprintf(stderr,
                "shardlm: finalize barrier on world (%d ranks) did not complete within %.1f s "
                "(a rank never reached sl_comm_world_finalize)\n",
                g.wsize, g.timeout_s + 5.0);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
      backoff(&spins);
    }
  }
  if (g.wd_running) {
    sl_comm_registry_lock();
    g.wd_stop = 1;
    sl_comm_registry_unlock();
    pthread_join(g.wd_thread, NULL);
    g.wd_running = 0;
  }
  MPI_Comm_free(&g.wd_comm);
  MPI_Op_free(&g.bf16_sum);
  MPI_Type_free(&g.bf16_type);
  if (g.we_init_mpi) MPI_Finalize();
  g.inited = 0;
  g.we_init_mpi = 0;
}

static void mpi_abort_all(int code) {
  int flag = 0;
  fflush(stdout);
  fflush(stderr);
  MPI_Initialized(&flag);
  if (flag) MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);
}

static void mpi_destroy(sl_comm *c) {
  mpi_be *b = c->be;
  sl_comm_req *q = calloc(1, sizeof *q);
  pthread_mutex_lock(&c->mu);
  if (q) {
    q->c = c;
    q->op.kind = SL_OPK_QUIT;
    if (c->tail) c->tail->next = q;
    else c->head = q;
    c->tail = q;
    pthread_cond_signal(&c->cv_work);
  }
  pthread_mutex_unlock(&c->mu);
  if (q) pthread_join(b->thread, NULL); /* else: leak the thread, cannot stop it */
  reg_del(c);
  MPI_Comm_free(&b->mc);
  free(b->p2p);
  free(b);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv_work);
  pthread_cond_destroy(&c->cv_done);
  free(c->world_ranks);
  free(c);
}

static const sl_comm_world_be mpi_world = {.abi = SL_COMM_WORLD_ABI,
                                           .name = "mpi",
                                           .world_init = mpi_world_init,
                                           .world_finalize = mpi_world_finalize,
                                           .abort = mpi_abort_all};

/* The module's entry point (dlsym'ed by comm.c). */
__attribute__((visibility("default"))) const sl_comm_world_be *sl_comm_mpi_entry(void) { return &mpi_world; }
