/* shard/comm.c — the backend-independent part of shard/comm.h.
 *
 * Owns: the public entry points (argument checks, sequence numbers, byte
 * counters, the FIFO hand-off or the backend's own issue hook), completion
 * (wait/test), statistics, the error message, the communicator registry the
 * watchdog walks, and the choice of the world backend:
 *  - "self" (shard/comm_self.c): one process, no MPI library loaded; used
 *    when the process was not started by a launcher;
 *  - "mpi" (shard/comm_mpi.c, built as the module libsl_comm_mpi.so and
 *    loaded with dlopen only when needed): under mpirun / srun (OMPI_*, PMI_*,
 *    PMIX_*, SLURM_STEP_NUM_TASKS > 1), or when SL_COMM=mpi.
 * The binary itself never links libmpi (docs/comm.md, "World backends").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "shard/comm.h"
#include "shard/comm_internal.h"

/* ---- small helpers ------------------------------------------------------ */

#define comm_fail sl_comm_set_error
#define now_ns sl_now_ns

/* The message is base's (sl_errmsg): one error slot per thread. */
const char *sl_comm_last_error(void) { return sl_errmsg(); }

int sl_comm_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sl_vfail(SL_ECOMM, fmt, ap);
  va_end(ap);
  return SL_COMM_ERR;
}

uint64_t sl_comm_child_uid(uint64_t parent_uid, uint64_t seq) {
  uint64_t z = parent_uid * 0x9e3779b97f4a7c15ull + seq * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

size_t sl_dtype_size(sl_dtype t) {
  switch (t) {
  case SL_F32: return 4;
  case SL_BF16: return 2;
  case SL_I32: return 4;
  case SL_I64: return 8;
  case SL_U8: return 1;
  case SL_F64: return 8;
  }
  return 0;
}

const char *sl_dtype_name(sl_dtype t) {
  switch (t) {
  case SL_F32: return "f32";
  case SL_BF16: return "bf16";
  case SL_I32: return "i32";
  case SL_I64: return "i64";
  case SL_U8: return "u8";
  case SL_F64: return "f64";
  }
  return "?";
}

const char *sl_coll_name(sl_coll_kind k) {
  switch ((int)k) {
  case SL_COLL_ALLGATHER: return "allgather";
  case SL_COLL_REDUCE_SCATTER: return "reduce_scatter";
  case SL_COLL_ALLREDUCE: return "allreduce";
  case SL_COLL_BROADCAST: return "broadcast";
  case SL_COLL_SEND: return "send";
  case SL_COLL_BARRIER: return "barrier";
  case SL_COLL_RECV: return "recv";
  case SL_COLL_ALLTOALL: return "alltoall";
  case SL_OPK_SPLIT: return "split";
  }
  return "?";
}

static int is_coll(int kind) { return kind != SL_COLL_SEND && kind != SL_COLL_RECV && kind != SL_OPK_QUIT; }
int sl_comm_is_coll(int kind) { return is_coll(kind); }
uint64_t sl_comm_now_ns(void) { return now_ns(); }

uint64_t sl_comm_bus_bytes(sl_coll_kind k, int n, int64_t count, sl_dtype dt, int is_source) {
  uint64_t es = sl_dtype_size(dt);
  if (n <= 1 || count <= 0) return 0;
  switch (k) {
  case SL_COLL_ALLGATHER:
  case SL_COLL_REDUCE_SCATTER: return (uint64_t)(n - 1) * (uint64_t)count * es;
  case SL_COLL_ALLREDUCE: return 2ull * (uint64_t)(n - 1) * (uint64_t)((count + n - 1) / n) * es;
  case SL_COLL_BROADCAST: return is_source ? (uint64_t)count * es : 0;
  case SL_COLL_SEND:
  case SL_COLL_RECV:
  case SL_COLL_ALLTOALL: return (uint64_t)count * es;
  default: return 0;
  }
}

uint64_t sl_comm_op_bytes(const sl_comm_op *op, int rank, int n) {
  switch (op->kind) {
  case SL_COLL_BROADCAST: return sl_comm_bus_bytes(SL_COLL_BROADCAST, n, op->count, op->dt, rank == op->peer);
  case SL_OPK_SPLIT: return 0;
  case SL_COLL_ALLTOALL: { /* what goes to the other ranks (scount = a2a[0..n)) */
    int64_t out = 0;
    for (int p = 0; p < n; p++) out += p == rank ? 0 : op->a2a[p];
    return sl_comm_bus_bytes(SL_COLL_ALLTOALL, n, out, op->dt, 0);
  }
  default: return sl_comm_bus_bytes((sl_coll_kind)op->kind, n, op->count, op->dt, 0);
  }
}

/* ---- communicator registry (watchdog, status queries) ------------------- */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static sl_comm *reg[256]; /* live communicators */
static int nreg;

void sl_comm_register(sl_comm *c) {
  pthread_mutex_lock(&reg_mu);
  if (nreg < (int)(sizeof reg / sizeof reg[0])) reg[nreg++] = c;
  pthread_mutex_unlock(&reg_mu);
}

void sl_comm_unregister(sl_comm *c) {
  pthread_mutex_lock(&reg_mu);
  for (int i = 0; i < nreg; i++)
    if (reg[i] == c) {
      reg[i] = reg[--nreg];
      break;
    }
  pthread_mutex_unlock(&reg_mu);
}

void sl_comm_registry_lock(void) { pthread_mutex_lock(&reg_mu); }
void sl_comm_registry_unlock(void) { pthread_mutex_unlock(&reg_mu); }
int sl_comm_registry_size(void) { return nreg; }
sl_comm *sl_comm_registry_at(int i) { return i >= 0 && i < nreg ? reg[i] : NULL; }

/* ---- world: self or the MPI module -------------------------------------- */

static const sl_comm_world_be *g_world; /* backend of the live world, or NULL */

/* A launcher started this process as one of several (or as an MPI rank). */
int sl_comm_under_mpi_launcher(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  const char *st = getenv("SLURM_STEP_NUM_TASKS");
  return st && atoi(st) > 1;
}

/* dlopen of the MPI module: $SL_COMM_MPI_LIB, then beside the executable
 * (and one level up: build/tests/ -> build/), then the build tree, then the
 * loader's search path. RTLD_GLOBAL: OpenMPI's own plugins need libmpi's
 * symbols in the global scope. */
static void *load_mpi_module(char *why, size_t nwhy) {
  char cand[6][4200];
  int nc = 0;
  const char *env = sl_env_str("SL_COMM_MPI_LIB");
  if (env && *env) snprintf(cand[nc++], sizeof cand[0], "%s", env);
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) {
    self[len] = 0;
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = 0;
      snprintf(cand[nc++], sizeof cand[0], "%s/libsl_comm_mpi.so", self);
      snprintf(cand[nc++], sizeof cand[0], "%s/../libsl_comm_mpi.so", self);
    }
  }
#ifdef SL_COMM_MPI_BUILD_PATH
  snprintf(cand[nc++], sizeof cand[0], "%s", SL_COMM_MPI_BUILD_PATH);
#endif
  snprintf(cand[nc++], sizeof cand[0], "libsl_comm_mpi.so");
  size_t lw = 0;
  why[0] = 0;
  for (int i = 0; i < nc; i++) {
    if (strchr(cand[i], '/') && access(cand[i], F_OK) != 0) continue;
    void *h = dlopen(cand[i], RTLD_NOW | RTLD_GLOBAL);
    if (h) return h;
    const char *e = dlerror();
    lw += (size_t)snprintf(why + lw, lw < nwhy ? nwhy - lw : 0, "%s%s", lw ? "; " : "", e ? e : cand[i]);
    if (lw >= nwhy) lw = nwhy - 1;
  }
  if (!why[0])
    snprintf(why, nwhy,
             "libsl_comm_mpi.so not found beside the executable, in the build tree "
             "or on the loader path (set SL_COMM_MPI_LIB=PATH)");
  return NULL;
}

int sl_comm_world_init(int *argc, char ***argv, double timeout_s, sl_comm **world) {
  if (!world) return comm_fail("sl_comm_world_init: world is NULL");
  *world = NULL;
  if (g_world) return comm_fail("sl_comm_world_init: already initialised (call it once per process)");
  const char *want = sl_env_str("SL_COMM");
  int launched = sl_comm_under_mpi_launcher(), use_mpi = launched;
  if (want && *want) {
    if (!strcmp(want, "mpi")) use_mpi = 1;
    else if (!strcmp(want, "self")) {
      if (launched)
        return comm_fail("SL_COMM=self, but a launcher (mpirun/srun) started this process as one of several "
                         "ranks: unset SL_COMM or run without the launcher");
      use_mpi = 0;
    } else {
      return comm_fail("SL_COMM must be 'mpi' or 'self' (found '%s')", want);
    }
  }
  if (!use_mpi) {
    int rc = sl_comm_self_world_init(world);
    if (rc == SL_COMM_OK) g_world = &sl_comm_self_world;
    return rc;
  }
  char why[2048];
  void *h = load_mpi_module(why, sizeof why);
  if (!h)
    return comm_fail("this run needs MPI (%s) but the MPI module could not be loaded: %s",
                     launched ? "started by a launcher" : "SL_COMM=mpi", why);
  const sl_comm_world_be *(*entry)(void) = (const sl_comm_world_be *(*)(void))dlsym(h, "sl_comm_mpi_entry");
  const sl_comm_world_be *be = entry ? entry() : NULL;
  if (!be || be->abi != SL_COMM_WORLD_ABI)
    return comm_fail("the MPI module libsl_comm_mpi.so does not match this executable (%s): rebuild both",
                     !be ? "no sl_comm_mpi_entry" : "ABI differs");
  int rc = be->world_init(argc, argv, timeout_s, world);
  if (rc == SL_COMM_OK) g_world = be;
  return rc;
}

void sl_comm_world_finalize(void) {
  if (!g_world) return;
  g_world->world_finalize();
  g_world = NULL;
}

void sl_comm_abort(int code) {
  fflush(stdout);
  fflush(stderr);
  if (g_world && g_world->abort) g_world->abort(code);
  _exit(code);
}

const char *sl_comm_world_backend(void) { return g_world ? g_world->name : "none"; }

/* ---- communicators ------------------------------------------------------ */

int sl_comm_rank(const sl_comm *c) { return c ? c->rank : -1; }
int sl_comm_size(const sl_comm *c) { return c ? c->size : 0; }
int sl_comm_world_rank(const sl_comm *c, int rank) {
  return c && rank >= 0 && rank < c->size ? c->world_ranks[rank] : -1;
}
const char *sl_comm_backend(const sl_comm *c) { return c ? c->vt->name : "none"; }

void sl_comm_init_header(sl_comm *c, const sl_comm_vt *vt, void *be, const char *name, int rank, int size,
                         int *world_ranks, uint64_t uid) {
  c->vt = vt;
  c->be = be;
  c->rank = rank;
  c->size = size;
  c->world_ranks = world_ranks;
  c->uid = uid;
  snprintf(c->name, sizeof c->name, "%s", name);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv_work, NULL);
  pthread_cond_init(&c->cv_done, NULL);
}

void sl_comm_fini(sl_comm *c) {
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv_work);
  pthread_cond_destroy(&c->cv_done);
  free(c->be);
  free(c->world_ranks);
  free(c);
}

void sl_comm_destroy(sl_comm *c) {
  if (c) c->vt->destroy(c);
}

/* ---- issuing ------------------------------------------------------------ */

/* Sequence number and statistics of a request being issued (c->mu held). */
static void account_locked(sl_comm *c, sl_comm_req *r) {
  const sl_comm_op *op = &r->op;
  if (is_coll(op->kind)) r->op.seq = ++c->issued_seq;
  else r->op.seq = ++c->p2p_seq;
  if (op->kind < SL_COLL_NKINDS) {
    c->stats.calls[op->kind]++;
    c->stats.bytes[op->kind] += sl_comm_op_bytes(op, c->rank, c->size);
  }
}

void sl_comm_account(sl_comm *c, sl_comm_req *r) {
  pthread_mutex_lock(&c->mu);
  account_locked(c, r);
  pthread_mutex_unlock(&c->mu);
}

static int submit(sl_comm *c, const sl_comm_op *op, sl_comm_req **out) {
  const char *what = sl_coll_name((sl_coll_kind)op->kind);
  if (out) *out = NULL;
  if (!c) return comm_fail("%s: communicator is NULL", what);
  if (!out) return comm_fail("%s on comm %s: request pointer is NULL", what, c->name);
  if (op->kind != SL_COLL_BARRIER && op->kind != SL_OPK_SPLIT &&
      op->kind != SL_COLL_ALLTOALL) { /* alltoallv checks its own */
    if ((unsigned)op->dt > SL_F64) return comm_fail("%s on comm %s: unknown dtype %d", what, c->name, (int)op->dt);
    if (op->count < 0 || op->count > INT_MAX)
      return comm_fail("%s on comm %s: count %lld out of range [0, %d] (elements of %s)", what, c->name,
                       (long long)op->count, INT_MAX, sl_dtype_name(op->dt));
    int need_send = op->kind == SL_COLL_ALLGATHER || op->kind == SL_COLL_REDUCE_SCATTER || op->kind == SL_COLL_SEND;
    int need_recv = op->kind != SL_COLL_SEND;
    if (op->count > 0 && ((need_send && !op->send) || (need_recv && !op->recv)))
      return comm_fail("%s on comm %s: NULL buffer for %lld x %s", what, c->name, (long long)op->count,
                       sl_dtype_name(op->dt));
  }
  if ((op->kind == SL_COLL_BROADCAST || op->kind == SL_COLL_SEND || op->kind == SL_COLL_RECV) &&
      (op->peer < 0 || op->peer >= c->size))
    return comm_fail("%s on comm %s: %s %d out of range [0, %d)", what, c->name,
                     op->kind == SL_COLL_BROADCAST ? "root" : "peer", op->peer, c->size);
  if ((op->kind == SL_COLL_SEND || op->kind == SL_COLL_RECV) && (op->tag < 0 || op->tag > 32767))
    return comm_fail("%s on comm %s: tag %d out of range [0, 32767]", what, c->name, op->tag);
  size_t na2a = op->kind == SL_COLL_ALLTOALL ? 4 * (size_t)c->size : 0; /* the counts, after the request */
  sl_comm_req *r = calloc(1, sizeof *r + na2a * sizeof(int64_t));
  if (!r) return comm_fail("%s on comm %s: out of memory for the request", what, c->name);
  r->c = c;
  r->op = *op;
  if (na2a) r->op.a2a = memcpy(r + 1, op->a2a, na2a * sizeof(int64_t));
  if (c->vt->issue) { /* the backend starts it itself (NCCL) */
    int rc = c->vt->issue(c, r);
    if (rc != SL_COMM_OK) {
      free(r);
      return rc;
    }
    *out = r;
    return SL_COMM_OK;
  }
  pthread_mutex_lock(&c->mu);
  account_locked(c, r);
  if (c->tail) c->tail->next = r;
  else c->head = r;
  c->tail = r;
  pthread_cond_signal(&c->cv_work);
  pthread_mutex_unlock(&c->mu);
  *out = r;
  return SL_COMM_OK;
}

int sl_comm_allgather(sl_comm *c, const void *send, void *recv, int64_t count, sl_dtype dt, sl_comm_req **req) {
  sl_comm_op op = {.kind = SL_COLL_ALLGATHER, .send = send, .recv = recv, .count = count, .dt = dt};
  return submit(c, &op, req);
}

int sl_comm_reduce_scatter(sl_comm *c, const void *send, void *recv, int64_t count, sl_dtype dt, sl_comm_req **req) {
  sl_comm_op op = {.kind = SL_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count, .dt = dt};
  return submit(c, &op, req);
}

int sl_comm_allreduce(sl_comm *c, void *buf, int64_t count, sl_dtype dt, sl_comm_req **req) {
  sl_comm_op op = {.kind = SL_COLL_ALLREDUCE, .recv = buf, .count = count, .dt = dt};
  return submit(c, &op, req);
}

int sl_comm_broadcast(sl_comm *c, void *buf, int64_t count, sl_dtype dt, int root, sl_comm_req **req) {
  sl_comm_op op = {.kind = SL_COLL_BROADCAST, .recv = buf, .count = count, .dt = dt, .peer = root};
  return submit(c, &op, req);
}

int sl_comm_send(sl_comm *c, const void *buf, int64_t count, sl_dtype dt, int peer, int tag, sl_comm_req **req) {
  sl_comm_op op = {.kind = SL_COLL_SEND, .send = buf, .count = count, .dt = dt, .peer = peer, .tag = tag};
  return submit(c, &op, req);
}

int sl_comm_recv(sl_comm *c, void *buf, int64_t count, sl_dtype dt, int peer, int tag, sl_comm_req **req) {
  sl_comm_op op = {.kind = SL_COLL_RECV, .recv = buf, .count = count, .dt = dt, .peer = peer, .tag = tag};
  return submit(c, &op, req);
}

int sl_comm_barrier(sl_comm *c, sl_comm_req **req) {
  sl_comm_op op = {.kind = SL_COLL_BARRIER};
  return submit(c, &op, req);
}

/* alltoallv's arguments: every count and displacement in [0, INT_MAX], the
 * block to itself the same size both ways, buffers for what moves. */
static int check_alltoallv(sl_comm *c, const void *send, const int64_t *const a[4], const void *recv, sl_dtype dt,
                           int64_t *nsend) {
  static const char *names[4] = {"scount", "sdispl", "rcount", "rdispl"};
  if (!c) return comm_fail("alltoall: communicator is NULL");
  if ((unsigned)dt > SL_F64) return comm_fail("alltoall on comm %s: unknown dtype %d", c->name, (int)dt);
  for (int k = 0; k < 4; k++)
    if (!a[k]) return comm_fail("alltoall on comm %s: %s is NULL (one entry per rank)", c->name, names[k]);
  int64_t ns = 0, nr = 0;
  for (int k = 0; k < 4; k++)
    for (int p = 0; p < c->size; p++)
      if (a[k][p] < 0 || a[k][p] > INT_MAX)
        return comm_fail("alltoall on comm %s: %s[%d] = %lld out of range [0, %d] (elements of %s)", c->name, names[k],
                         p, (long long)a[k][p], INT_MAX, sl_dtype_name(dt));
  for (int p = 0; p < c->size; p++) ns += a[0][p], nr += a[2][p];
  if (a[0][c->rank] != a[2][c->rank])
    return comm_fail("alltoall on comm %s: scount[%d] = %lld but rcount[%d] = %lld (the block rank %d sends itself)",
                     c->name, c->rank, (long long)a[0][c->rank], c->rank, (long long)a[2][c->rank], c->rank);
  if ((ns && !send) || (nr && !recv))
    return comm_fail("alltoall on comm %s: NULL %s buffer for %lld x %s", c->name, ns && !send ? "send" : "recv",
                     (long long)(ns && !send ? ns : nr), sl_dtype_name(dt));
  if (send && send == recv) return comm_fail("alltoall on comm %s: send == recv (not in place)", c->name);
  *nsend = ns;
  return SL_COMM_OK;
}

int sl_comm_alltoallv(sl_comm *c, const void *send, const int64_t *scount, const int64_t *sdispl, void *recv,
                      const int64_t *rcount, const int64_t *rdispl, sl_dtype dt, sl_comm_req **req) {
  const int64_t *const a[4] = {scount, sdispl, rcount, rdispl};
  int64_t ns = 0;
  uint64_t t0 = now_ns();
  if (req) *req = NULL;
  int rc = check_alltoallv(c, send, a, recv, dt, &ns);
  int64_t *all = rc ? NULL : malloc(4 * (size_t)c->size * sizeof(int64_t));
  if (rc || !all) return rc ? rc : comm_fail("alltoall on comm %s: out of memory", c->name);
  for (int k = 0; k < 4; k++) memcpy(all + (size_t)k * c->size, a[k], (size_t)c->size * sizeof(int64_t));
  sl_comm_op op = {.kind = SL_COLL_ALLTOALL, .send = send, .recv = recv, .count = ns, .dt = dt, .a2a = all};
  rc = submit(c, &op, req);
  free(all);
  pthread_mutex_lock(&c->mu);
  c->stats.alltoall_ns += now_ns() - t0;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int sl_comm_split(sl_comm *parent, int color, int key, sl_comm **out) {
  if (!out) return comm_fail("sl_comm_split: out is NULL");
  *out = NULL;
  if (color < 0) return comm_fail("sl_comm_split: color %d must be >= 0", color);
  sl_comm_op op = {.kind = SL_OPK_SPLIT, .color = color, .key = key, .split_out = out};
  sl_comm_req *r;
  int rc = submit(parent, &op, &r);
  if (rc == SL_COMM_OK) rc = sl_comm_wait(r);
  return rc;
}

/* ---- completion ----------------------------------------------------------- */

int sl_comm_wait(sl_comm_req *r) {
  if (!r) return comm_fail("sl_comm_wait: request is NULL");
  sl_comm *c = r->c;
  if (c->vt->wait) return c->vt->wait(r);
  uint64_t t0 = now_ns();
  pthread_mutex_lock(&c->mu);
  while (!r->done) pthread_cond_wait(&c->cv_done, &c->mu);
  uint64_t dt = now_ns() - t0;
  c->stats.wait_ns += dt;
  if (r->op.kind == SL_COLL_ALLTOALL) c->stats.alltoall_ns += dt;
  pthread_mutex_unlock(&c->mu);
  int st = r->status;
  if (st != SL_COMM_OK) comm_fail("%s", r->err);
  free(r);
  return st;
}

int sl_comm_wait_stream(sl_comm_req *r, void *stream) {
  if (!r) return comm_fail("sl_comm_wait_stream: request is NULL");
  if (r->c->vt->wait_stream) return r->c->vt->wait_stream(r, stream);
  return sl_comm_wait(r);
}

int sl_comm_test(sl_comm_req *r) {
  if (!r) return 0;
  if (r->c->vt->test) return r->c->vt->test(r);
  pthread_mutex_lock(&r->c->mu);
  int d = r->done;
  pthread_mutex_unlock(&r->c->mu);
  return d;
}

int sl_comm_allreduce_sync(sl_comm *c, void *buf, int64_t count, sl_dtype dt) {
  sl_comm_req *r;
  int rc = sl_comm_allreduce(c, buf, count, dt, &r);
  return rc ? rc : sl_comm_wait(r);
}

int sl_comm_allgather_sync(sl_comm *c, const void *send, void *recv, int64_t count, sl_dtype dt) {
  sl_comm_req *r;
  int rc = sl_comm_allgather(c, send, recv, count, dt, &r);
  return rc ? rc : sl_comm_wait(r);
}

int sl_comm_broadcast_sync(sl_comm *c, void *buf, int64_t count, sl_dtype dt, int root) {
  sl_comm_req *r;
  int rc = sl_comm_broadcast(c, buf, count, dt, root, &r);
  return rc ? rc : sl_comm_wait(r);
}

int sl_comm_barrier_sync(sl_comm *c) {
  sl_comm_req *r;
  int rc = sl_comm_barrier(c, &r);
  return rc ? rc : sl_comm_wait(r);
}

/* ---- statistics ------------------------------------------------------------ */

void sl_comm_get_stats(const sl_comm *c, sl_comm_stats *out) {
  memset(out, 0, sizeof *out);
  if (!c) return;
  sl_comm *m = (sl_comm *)c; /* the mutex is not part of the logical state */
  pthread_mutex_lock(&m->mu);
  *out = c->stats;
  pthread_mutex_unlock(&m->mu);
}

void sl_comm_reset_stats(sl_comm *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  memset(&c->stats, 0, sizeof c->stats);
  pthread_mutex_unlock(&c->mu);
}
