/* tests/cli/sharding/test_mpi_alltoall.c — sl_comm_alltoallv and the
 * expert-parallel hooks over it (shard/ep.h), against values computed
 * independently here: element i of the block rank s sends rank d is
 * enc(s, d, i), and the number of elements is pat(k, s, d), so each rank
 * knows what it must receive from every rank. Blocks sit at displacements
 * in another order than the ranks', with sentinel gaps that must stay.
 * Checks the bytes counted (stats.bytes[SL_COLL_ALLTOALL] = the elements
 * sent to the other ranks x the dtype size), that the time inside the call
 * and its wait is (stats.alltoall_ns grows) and the counting backend (bytes
 * counted, nothing moved; counts answers rcount := scount).
 *
 *   test_mpi_alltoall           host buffers over the world (self or MPI) and a counting comm
 *   test_mpi_alltoall device    device buffers over NCCL (the emulated NCCL in test_emu_alltoall:
 *                               tests/cuda_emu/CMakeLists.txt); 77 without a CUDA backend
 *   test_mpi_alltoall hang T    rank 1 never issues the all-to-all: the watchdog (T s) must name it
 * tests/cli/sharding/test_mpi_alltoall.sh runs them. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "kernels/registry.h"
#include "shard/comm.h"
#include "shard/ep.h"

static int R, N; /* world rank, size */
static int npass, nfail;

#include "tests/lib/rank_check.h"

/* A comm call that must succeed: a failure ends every rank (the others would wait on it forever). */
static void ok_or_abort(int rc, const char *call, int line) {
  if (rc == SL_COMM_OK) return;
  fprintf(stderr, "[rank %d] test_mpi_alltoall.c:%d: %s -> %d: %s\n", R, line, call, rc, sl_comm_last_error());
  sl_comm_abort(1);
}
#define OK(call) ok_or_abort((call), #call, __LINE__)

enum { NPAT = 5 };
static const double SENTINEL = -1.0; /* enc() is never negative */

/* Elements rank s sends rank d in pattern k. */
static int64_t pat(int k, int s, int d) {
  switch (k) {
  case 0: return (s * 3 + d * 5 + 1) % 4; /* uneven, zeros among them */
  case 1: return s == 1 ? 0 : 2 * d + 1;  /* rank 1 sends nothing (it still receives) */
  case 2: return s == d ? 3 + s : 0;      /* every rank sends only to itself */
  case 3: return d == 0 ? 0 : s + d;      /* rank 0 receives nothing */
  default: return 70000 + 13 * s + d;     /* > 256 KiB per peer: several chunks of the emulated NCCL's mailbox */
  }
}

/* Element i of the block s sends d: (s, d, i) in one integer, exact in f32 below 2^24 (s, d < 8, i < 2^17). */
static double enc(int s, int d, int64_t i) { return (double)(s * 16 + d) * 131072.0 + (double)i; }

static void put(sl_dtype dt, void *b, int64_t i, double v) {
  if (dt == SL_F32) ((float *)b)[i] = (float)v;
  else if (dt == SL_F64) ((double *)b)[i] = v;
  else ((int64_t *)b)[i] = (int64_t)v;
}
static double get(sl_dtype dt, const void *b, int64_t i) {
  return dt == SL_F32 ? ((const float *)b)[i] : dt == SL_F64 ? ((const double *)b)[i] : (double)((const int64_t *)b)[i];
}

/* Where buffers live: the host (T NULL) or a device backend's memory. */
typedef struct {
  const sl_ops *T;
  sl_kctx *k;
} mem;
static void *m_alloc(const mem *m, size_t bytes) {
  void *p = m->T ? m->T->alloc(m->k, bytes ? bytes : 1) : calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "[rank %d] alloc of %zu bytes failed: %s\n", R, bytes, sl_errmsg());
    sl_comm_abort(1);
  }
  return p;
}
static void m_free(const mem *m, void *p) { m->T ? m->T->free(m->k, p) : free(p); }
static void m_put(const mem *m, void *dst, const void *h, size_t bytes) {
  if (m->T) m->T->upload(m->k, dst, h, bytes);
  else memcpy(dst, h, bytes);
}
static void m_get(const mem *m, void *h, const void *src, size_t bytes) {
  if (m->T) m->T->download(m->k, h, src, bytes);
  else memcpy(h, src, bytes);
}

static uint64_t a2a_bytes(sl_comm *c) {
  sl_comm_stats st;
  sl_comm_get_stats(c, &st);
  return st.bytes[SL_COLL_ALLTOALL];
}

static uint64_t a2a_ns(sl_comm *c) {
  sl_comm_stats st;
  sl_comm_get_stats(c, &st);
  return st.alltoall_ns;
}

/* One all-to-all of pattern k on c (rank me of n): the send blocks in
 * descending rank order with one sentinel between, the receive blocks
 * ascending with two; moved = 0 (counting comm): recv must keep its
 * sentinels. The arrays are scribbled on right after the issue (they were
 * copied). */
static void t_case(sl_comm *c, const mem *m, int k, sl_dtype dt, int moved) {
  int n = sl_comm_size(c), me = sl_comm_rank(c);
  size_t es = sl_dtype_size(dt);
  int64_t *a = calloc(4 * (size_t)n, sizeof(int64_t)), *sc = a, *sd = a + n, *rc = a + 2 * n, *rd = a + 3 * n;
  int64_t so = 0, ro = 0;
  uint64_t want = 0;
  for (int p = n - 1; p >= 0; p--) sc[p] = pat(k, me, p), sd[p] = so, so += sc[p] + 1;
  for (int p = 0; p < n; p++) rc[p] = pat(k, p, me), rd[p] = ro, ro += rc[p] + 2, want += p == me ? 0 : sc[p] * es;
  char *hs = malloc((size_t)so * es), *hr = malloc((size_t)ro * es);
  for (int64_t i = 0; i < so; i++) put(dt, hs, i, SENTINEL);
  for (int64_t i = 0; i < ro; i++) put(dt, hr, i, SENTINEL);
  for (int p = 0; p < n; p++)
    for (int64_t i = 0; i < sc[p]; i++) put(dt, hs, sd[p] + i, enc(me, p, i));
  void *ds = m_alloc(m, (size_t)so * es), *dr = m_alloc(m, (size_t)ro * es);
  m_put(m, ds, hs, (size_t)so * es);
  m_put(m, dr, hr, (size_t)ro * es);
  uint64_t b0 = a2a_bytes(c), ns0 = a2a_ns(c);
  sl_comm_req *q;
  OK(sl_comm_alltoallv(c, ds, sc, sd, dr, rc, rd, dt, &q));
  for (int i = 0; i < 4 * n; i++) a[i] = i % 2 ? -7 : (int64_t)INT_MAX; /* the request holds its own copy */
  OK(sl_comm_wait(q));
  m_get(m, hr, dr, (size_t)ro * es);
  int64_t bad = 0, first = -1;
  for (int p = 0, off = 0; p < n; p++) {
    for (int64_t i = 0; i < pat(k, p, me) + 2; i++, off++) {
      double w = moved && i < pat(k, p, me) ? enc(p, me, i) : SENTINEL;
      if (get(dt, hr, off) != w && !bad++) first = off;
    }
  }
  CHECK(!bad, "alltoall pattern %d %s on %s (%d ranks): %lld elements wrong, first at %lld", k, sl_dtype_name(dt),
        sl_comm_backend(c), n, (long long)bad, (long long)first);
  uint64_t got = a2a_bytes(c) - b0;
  CHECK(got == want, "alltoall pattern %d %s on %s: %llu bytes counted, want %llu", k, sl_dtype_name(dt),
        sl_comm_backend(c), (unsigned long long)got, (unsigned long long)want);
  CHECK(a2a_ns(c) > ns0, "alltoall pattern %d %s on %s: the time inside the call and its wait is counted", k,
        sl_dtype_name(dt), sl_comm_backend(c));
  m_free(m, ds);
  m_free(m, dr);
  free(hs);
  free(hr);
  free(a);
}

static void t_cases(sl_comm *c, const mem *m, int moved) {
  for (int k = 0; k < NPAT; k++) t_case(c, m, k, SL_F32, moved);
  t_case(c, m, 0, SL_I64, moved);
  t_case(c, m, 3, SL_F64, moved);
}

/* Refusals, before anything is issued (so every rank may run them alone). */
static void t_refusals(sl_comm *c) {
  int n = sl_comm_size(c), me = sl_comm_rank(c);
  int64_t *a = calloc(4 * (size_t)n, sizeof(int64_t));
  float x[4], y[4];
  sl_comm_req *q = NULL;
  struct {
    int idx;
    int64_t v;
    const char *says;
  } bad[] = {{0 * n + n - 1, -1, "scount["},
             {2 * n + n - 1, (int64_t)INT_MAX + 1, "rcount["},
             {n + me, -3, "sdispl["},
             {0 * n + me, 2, "the block rank"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(a, 0, 4 * (size_t)n * sizeof(int64_t));
    a[bad[i].idx] = bad[i].v;
    int rc = sl_comm_alltoallv(c, x, a, a + n, y, a + 2 * n, a + 3 * n, SL_F32, &q);
    CHECK(rc == SL_COMM_ERR && !q && strstr(sl_comm_last_error(), bad[i].says), "refusal '%s': rc %d: %s", bad[i].says,
          rc, sl_comm_last_error());
  }
  memset(a, 0, 4 * (size_t)n * sizeof(int64_t));
  int rc = sl_comm_alltoallv(c, x, a, a + n, x, a + 2 * n, a + 3 * n, SL_F32, &q);
  CHECK(rc == SL_COMM_ERR && strstr(sl_comm_last_error(), "send == recv"), "in place refused: %s",
        sl_comm_last_error());
  rc = sl_comm_alltoallv(c, x, a, NULL, y, a + 2 * n, a + 3 * n, SL_F32, &q);
  CHECK(rc == SL_COMM_ERR && strstr(sl_comm_last_error(), "sdispl is NULL"), "NULL sdispl: %s", sl_comm_last_error());
  a[me] = a[2 * n + me] = 2;
  rc = sl_comm_alltoallv(c, NULL, a, a + n, y, a + 2 * n, a + 3 * n, SL_F32, &q);
  CHECK(rc == SL_COMM_ERR && strstr(sl_comm_last_error(), "NULL send"), "NULL send: %s", sl_comm_last_error());
  free(a);
  CHECK(!strcmp(sl_coll_name(SL_COLL_ALLTOALL), "alltoall"), "kind name");
  CHECK(sl_comm_bus_bytes(SL_COLL_ALLTOALL, 3, 10, SL_F32, 0) == 40 &&
            sl_comm_bus_bytes(SL_COLL_ALLTOALL, 1, 10, SL_F32, 0) == 0,
        "bus_bytes alltoall: the elements sent to other ranks x 4");
}

/* The EP hooks: counts of E experts per peer (what this rank routes to expert e
 * of rank p), then rows of width 3 as those counts say. counts_comm / rows_comm
 * carry the two exchanges (their bytes are checked); moved = 0: a counting comm. */
static void t_ep(sl_ep_group g, sl_comm *counts_comm, sl_comm *rows_comm, const mem *m, int moved) {
  enum { E = 2, W = 3 };
  int n = g.size, me = g.rank;
  int64_t *sc = calloc((size_t)n * E, 8), *rc = calloc((size_t)n * E, 8), *sr = calloc((size_t)n, 8),
          *rr = calloc((size_t)n, 8), ns = 0, nr = 0, bad = 0;
  uint64_t want_rows = 0, b0 = a2a_bytes(counts_comm);
  for (int p = 0; p < n * E; p++) sc[p] = (me + 2 * (p / E) + p % E) % 3, rc[p] = -1;
  CHECK(g.counts(g.user, sc, rc, E) == SL_OK, "ep counts: %s", sl_errmsg());
  for (int p = 0; p < n * E; p++) bad += rc[p] != (moved ? (p / E + 2 * me + p % E) % 3 : sc[p]);
  CHECK(!bad, "ep counts: %lld of %d wrong", (long long)bad, n * E);
  CHECK(a2a_bytes(counts_comm) - b0 == (uint64_t)(n - 1) * E * 8, "ep counts bytes %llu want %llu",
        (unsigned long long)(a2a_bytes(counts_comm) - b0), (unsigned long long)(n - 1) * E * 8);
  for (int p = 0; p < n; p++) {
    for (int e = 0; e < E; e++) sr[p] += sc[p * E + e], rr[p] += rc[p * E + e];
    ns += sr[p], nr += rr[p], want_rows += p == me ? 0 : (uint64_t)sr[p] * W * 4;
  }
  float *hs = calloc((size_t)(ns * W + 1), 4), *hr = calloc((size_t)(nr * W + 1), 4);
  for (int p = 0, off = 0; p < n; p++)
    for (int64_t j = 0; j < sr[p] * W; j++) hs[off++] = (float)enc(me, p, j);
  for (int64_t i = 0; i < nr * W; i++) hr[i] = (float)SENTINEL;
  float *ds = m_alloc(m, (size_t)(ns * W) * 4), *dr = m_alloc(m, (size_t)(nr * W) * 4);
  m_put(m, ds, hs, (size_t)(ns * W) * 4);
  m_put(m, dr, hr, (size_t)(nr * W) * 4);
  b0 = a2a_bytes(rows_comm);
  CHECK(g.alltoallv(g.user, ds, sr, dr, rr, W) == SL_OK, "ep rows: %s", sl_errmsg());
  m_get(m, hr, dr, (size_t)(nr * W) * 4);
  bad = 0;
  for (int p = 0, off = 0; p < n; p++)
    for (int64_t j = 0; j < rr[p] * W; j++, off++) bad += hr[off] != (moved ? (float)enc(p, me, j) : (float)SENTINEL);
  CHECK(!bad, "ep rows (width %d, %lld rows in): %lld elements wrong", W, (long long)nr, (long long)bad);
  CHECK(a2a_bytes(rows_comm) - b0 == want_rows, "ep rows bytes %llu want %llu",
        (unsigned long long)(a2a_bytes(rows_comm) - b0), (unsigned long long)want_rows);
  m_free(m, ds);
  m_free(m, dr);
  free(hs), free(hr), free(sc), free(rc), free(sr), free(rr);
}

/* The counting backend: rank 2 of 4 (whatever the world), bytes as on every backend, nothing moved. */
static void t_count(void) {
  sl_comm *cc = NULL;
  OK(sl_comm_count_create(4, 2, NULL, NULL, &cc));
  mem host = {0};
  t_cases(cc, &host, 0);
  t_ep(sl_ep_group_over(cc), cc, cc, &host, 0);
  sl_comm_destroy(cc);
}

static int device_mode(sl_comm *w) {
  const sl_ops *T = sl_backend_get("cuda");
  if (!T) {
    if (R == 0) printf("skip: no CUDA backend here (%s)\n", sl_errmsg());
    return 77;
  }
  mem dev = {T, T->ctx_create(1)};
  if (!dev.k) {
    fprintf(stderr, "[rank %d] cuda ctx_create: %s\n", R, sl_errmsg());
    sl_comm_abort(1);
  }
  sl_ep_devgroup d;
  CHECK(sl_ep_devgroup_init(&d, w, T, dev.k) == SL_OK, "sl_ep_devgroup_init: %s", sl_errmsg());
  if (d.dev) {
    CHECK(!strcmp(sl_comm_backend(d.dev), "nccl"), "device comm backend %s", sl_comm_backend(d.dev));
    t_cases(d.dev, &dev, 1);
    t_ep(sl_ep_group_over_device(&d), w, d.dev, &dev, 1);
  }
  sl_ep_devgroup_free(&d);
  T->ctx_destroy(dev.k);
  return 0;
}

/* Rank 1 never issues the all-to-all (#2); the others' watchdogs must end the job naming it. */
static int hang_mode(sl_comm *w) {
  if (N < 2 || N > 8) {
    fprintf(stderr, "hang mode needs 2 to 8 ranks (found %d)\n", N);
    return 2;
  }
  OK(sl_comm_barrier_sync(w));
  if (R == 1)
    for (;;) sleep(1000);
  int64_t *a = calloc(4 * (size_t)N, sizeof(int64_t));
  float x[8] = {0}, y[8];
  for (int p = 0; p < N; p++) a[p] = a[2 * N + p] = 1, a[N + p] = a[3 * N + p] = p; /* one float to everyone */
  OK(sl_comm_alltoallv(w, x, a, a + N, y, a + 2 * N, a + 3 * N, SL_F32, &(sl_comm_req *){NULL}));
  sl_comm_barrier_sync(w); /* never completes: the all-to-all before it does not */
  fprintf(stderr, "[rank %d] FAIL: the all-to-all completed without rank 1\n", R);
  return 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "host";
  sl_comm *w;
  if (sl_comm_world_init(&argc, &argv, argc > 2 ? atof(argv[2]) : 60.0, &w) != SL_COMM_OK) {
    fprintf(stderr, "sl_comm_world_init: %s\n", sl_comm_last_error());
    return 1;
  }
  R = sl_comm_rank(w);
  N = sl_comm_size(w);
  if (!strcmp(mode, "hang")) return hang_mode(w);
  int rc = 0;
  if (!strcmp(mode, "device")) {
    rc = device_mode(w);
  } else {
    mem host = {0};
    t_refusals(w);
    t_cases(w, &host, 1);
    t_ep(sl_ep_group_over(w), w, w, &host, 1);
    t_count();
  }
  int32_t tot[2] = {npass, nfail};
  OK(sl_comm_allreduce_sync(w, tot, 2, SL_I32));
  sl_comm_destroy(w);
  sl_comm_world_finalize();
  if (rc == 77) return 77;
  if (R == 0) printf("test_mpi_alltoall %s (%d ranks): %d passed, %d failed\n", mode, N, tot[0], tot[1]);
  return tot[1] ? 1 : 0;
}
