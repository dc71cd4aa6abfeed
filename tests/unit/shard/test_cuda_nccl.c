/* tests/unit/shard/test_cuda_nccl.c — the NCCL comm backend and the CUDA memory ops on
 * device buffers, against values computed on the host: every rank knows what
 * every rank contributes (f(rank, i), small multiples of 1/4 so sums are
 * exact in f32 and bf16), so each rank checks its own results exactly.
 * Also: all-reduce bit-identical to reduce-scatter + all-gather on random
 * data (bf16 and f32, count not a multiple of n), ordering against the
 * compute stream (an unsynchronised copy queued there just before a
 * collective), byte counters, test/wait, barrier, send/recv (n >= 2),
 * the all-to-all, split. Skips (77) without a CUDA device or without NCCL. Run alone
 * (world size 1), under mpirun with one GPU per rank, or as N processes
 * started with SL_RANK / SL_WORLD_SIZE / SL_INIT_METHOD (no MPI: the NCCL
 * id goes through shard/bootstrap.c; split is not run there). */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "shard/bootstrap.h"
#include "shard/comm.h"
#ifdef SL_USE_NCCL
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_backend.h"
#endif

#ifndef SL_USE_NCCL
int main(void) {
  printf("skip: built without NCCL\n");
  return 77;
}
#else

static int R, N;
static int npass, nfail;
static const sl_ops *T;
static sl_kctx *ctx;

#include "tests/lib/rank_check.h"
#define OK(call)                                                                                                       \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    CHECK(rc_ == SL_COMM_OK, "%s -> %d: %s", #call, rc_, sl_comm_last_error());                                        \
  } while (0)

/* Contribution of rank r at element i: exact in bf16 and in sums of <= 64. */
static float f(int r, int64_t i) { return (float)(((r * 7 + i * 3) % 17) - 8) * 0.25f; }

/* Host value x (f32) stored as dtype dt at h[i]. */
static void put(void *h, sl_dtype dt, int64_t i, float x) {
  if (dt == SL_BF16) ((uint16_t *)h)[i] = sl_f32_to_bf16_scalar(x);
  else ((float *)h)[i] = x;
}
static float get(const void *h, sl_dtype dt, int64_t i) {
  return dt == SL_BF16 ? sl_bf16_to_f32_scalar(((const uint16_t *)h)[i]) : ((const float *)h)[i];
}

static void *dalloc(size_t bytes) {
  void *p = T->alloc(ctx, bytes);
  if (!p) {
    fprintf(stderr, "[rank %d] device alloc of %zu bytes: %s\n", R, bytes, sl_errmsg());
    sl_comm_abort(1);
  }
  return p;
}

static void test_collectives(sl_comm *c, sl_dtype dt) {
  int n = sl_comm_size(c), r = sl_comm_rank(c);
  const char *tn = sl_dtype_name(dt);
  size_t es = sl_dtype_size(dt);
  int64_t cnt = 1000 + 3; /* not a multiple of n (> 1): the padded all-reduce */
  size_t full = (size_t)n * (size_t)cnt;
  void *h = calloc(full, es), *h2 = calloc(full, es);
  void *d = dalloc(full * es), *d2 = dalloc(full * es);
  sl_comm_req *q;
  sl_comm_stats st0, st1;
  sl_comm_reset_stats(c);
  sl_comm_get_stats(c, &st0);

  /* all-gather (out of place) */
  for (int64_t i = 0; i < cnt; i++) put(h, dt, i, f(r, i));
  T->upload(ctx, d, h, (size_t)cnt * es);
  OK(sl_comm_allgather(c, d, d2, cnt, dt, &q));
  OK(sl_comm_wait(q));
  T->download(ctx, h2, d2, full * es);
  int ok = 1;
  for (int p = 0; p < n; p++)
    for (int64_t i = 0; i < cnt; i++) ok &= get(h2, dt, p * cnt + i) == f(p, i);
  CHECK(ok, "allgather %s", tn);

  /* all-gather in place */
  T->zero(ctx, d2, full * es);
  T->copy(ctx, (char *)d2 + (size_t)r * cnt * es, d, (size_t)cnt * es);
  OK(sl_comm_allgather(c, (char *)d2 + (size_t)r * cnt * es, d2, cnt, dt, &q));
  while (!sl_comm_test(q)) {}
  OK(sl_comm_wait(q));
  T->download(ctx, h2, d2, full * es);
  ok = 1;
  for (int p = 0; p < n; p++)
    for (int64_t i = 0; i < cnt; i++) ok &= get(h2, dt, p * cnt + i) == f(p, i);
  CHECK(ok, "allgather in place %s", tn);

  /* reduce-scatter: send (n*cnt) = f(rank, j) */
  for (size_t j = 0; j < full; j++) put(h, dt, (int64_t)j, f(r, (int64_t)j));
  T->upload(ctx, d, h, full * es);
  OK(sl_comm_reduce_scatter(c, d, d2, cnt, dt, &q));
  OK(sl_comm_wait(q));
  T->download(ctx, h2, d2, (size_t)cnt * es);
  ok = 1;
  for (int64_t i = 0; i < cnt; i++) {
    float s = 0;
    for (int p = 0; p < n; p++) s += f(p, r * cnt + i);
    ok &= get(h2, dt, i) == s;
  }
  CHECK(ok, "reduce_scatter %s", tn);

  /* all-reduce of cnt elements (padded when n does not divide cnt) */
  T->upload(ctx, d, h, (size_t)cnt * es);
  OK(sl_comm_allreduce(c, d, cnt, dt, &q));
  OK(sl_comm_wait(q));
  T->download(ctx, h2, d, (size_t)cnt * es);
  ok = 1;
  for (int64_t i = 0; i < cnt; i++) {
    float s = 0;
    for (int p = 0; p < n; p++) s += f(p, i);
    ok &= get(h2, dt, i) == s;
  }
  CHECK(ok, "allreduce %s", tn);

  /* broadcast from the last rank */
  for (int64_t i = 0; i < cnt; i++) put(h, dt, i, r == n - 1 ? f(n - 1, i) : -99.0f);
  T->upload(ctx, d, h, (size_t)cnt * es);
  OK(sl_comm_broadcast(c, d, cnt, dt, n - 1, &q));
  OK(sl_comm_wait(q));
  T->download(ctx, h2, d, (size_t)cnt * es);
  ok = 1;
  for (int64_t i = 0; i < cnt; i++) ok &= get(h2, dt, i) == f(n - 1, i);
  CHECK(ok, "broadcast %s", tn);

  /* send/recv around the ring: even ranks send first, odd ranks receive
   * first (NCCL matches send/recv in issue order on one stream). */
  if (n >= 2) {
    int to = (r + 1) % n, from = (r + n - 1) % n;
    for (int64_t i = 0; i < cnt; i++) put(h, dt, i, f(r, i));
    T->upload(ctx, d, h, (size_t)cnt * es);
    T->zero(ctx, d2, (size_t)cnt * es);
    sl_comm_req *qs = NULL, *qr = NULL;
    if (r % 2 == 0) {
      OK(sl_comm_send(c, d, cnt, dt, to, 5, &qs));
      OK(sl_comm_recv(c, d2, cnt, dt, from, 5, &qr));
    } else {
      OK(sl_comm_recv(c, d2, cnt, dt, from, 5, &qr));
      OK(sl_comm_send(c, d, cnt, dt, to, 5, &qs));
    }
    OK(sl_comm_wait(qs));
    OK(sl_comm_wait(qr));
    T->download(ctx, h2, d2, (size_t)cnt * es);
    ok = 1;
    for (int64_t i = 0; i < cnt; i++) ok &= get(h2, dt, i) == f(from, i);
    CHECK(ok, "send/recv ring %s", tn);
  } else {
    sl_comm_req *qs = NULL;
    CHECK(sl_comm_send(c, d, cnt, dt, 0, 5, &qs) == SL_COMM_ERR && !qs, "send to self refused");
  }
  OK(sl_comm_barrier_sync(c));

  /* byte counters: the formulas of sl_comm_bus_bytes */
  sl_comm_get_stats(c, &st1);
  uint64_t want_ag = 2 * sl_comm_bus_bytes(SL_COLL_ALLGATHER, n, cnt, dt, 0);
  uint64_t want_rs = sl_comm_bus_bytes(SL_COLL_REDUCE_SCATTER, n, cnt, dt, 0);
  uint64_t want_ar = sl_comm_bus_bytes(SL_COLL_ALLREDUCE, n, cnt, dt, 0);
  uint64_t want_bc = sl_comm_bus_bytes(SL_COLL_BROADCAST, n, cnt, dt, r == n - 1);
  uint64_t want_sr = n >= 2 ? sl_comm_bus_bytes(SL_COLL_SEND, n, cnt, dt, 1) : 0;
  CHECK(st1.bytes[SL_COLL_ALLGATHER] == want_ag && st1.bytes[SL_COLL_REDUCE_SCATTER] == want_rs &&
            st1.bytes[SL_COLL_ALLREDUCE] == want_ar && st1.bytes[SL_COLL_BROADCAST] == want_bc &&
            st1.bytes[SL_COLL_SEND] == want_sr && st1.calls[SL_COLL_ALLGATHER] == 2 && st1.calls[SL_COLL_BARRIER] == 1,
        "stats %s: ag %llu/%llu rs %llu/%llu ar %llu/%llu bc %llu/%llu sr %llu/%llu", tn,
        (unsigned long long)st1.bytes[SL_COLL_ALLGATHER], (unsigned long long)want_ag,
        (unsigned long long)st1.bytes[SL_COLL_REDUCE_SCATTER], (unsigned long long)want_rs,
        (unsigned long long)st1.bytes[SL_COLL_ALLREDUCE], (unsigned long long)want_ar,
        (unsigned long long)st1.bytes[SL_COLL_BROADCAST], (unsigned long long)want_bc,
        (unsigned long long)st1.bytes[SL_COLL_SEND], (unsigned long long)want_sr);
  (void)st0;

  /* bit identity: allreduce == reduce_scatter + allgather of the buffer
   * zero-padded to a multiple of n, on random (inexact) data */
  int64_t bc = (cnt + n - 1) / n, padded = bc * n;
  void *hp = calloc((size_t)padded, es), *ha = calloc((size_t)padded, es), *hb = calloc((size_t)padded, es);
  void *dp = dalloc((size_t)padded * es), *dblk = dalloc((size_t)bc * es);
  uint64_t s = 0x1234567ull + (uint64_t)r * 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < cnt; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    put(hp, dt, i, (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * 3.7f);
  }
  T->upload(ctx, d, hp, (size_t)cnt * es);
  T->upload(ctx, dp, hp, (size_t)padded * es);
  OK(sl_comm_allreduce_sync(c, d, cnt, dt));
  OK(sl_comm_reduce_scatter(c, dp, dblk, bc, dt, &q));
  OK(sl_comm_wait(q));
  OK(sl_comm_allgather_sync(c, dblk, dp, bc, dt));
  T->download(ctx, ha, d, (size_t)cnt * es);
  T->download(ctx, hb, dp, (size_t)cnt * es);
  CHECK(memcmp(ha, hb, (size_t)cnt * es) == 0, "allreduce != reduce_scatter + allgather (%s)", tn);

  T->free(ctx, dp);
  T->free(ctx, dblk);
  free(hp);
  free(ha);
  free(hb);
  T->free(ctx, d);
  T->free(ctx, d2);
  free(h);
  free(h2);
}

/* All-to-all with uneven counts (zeros among them, 1000 + more to itself):
 * rank r sends (r + 2p) % 3 * 100 elements of f(r, i + 1000 p) to rank p,
 * blocks back to back; bytes = what goes to the other ranks. */
static void test_alltoall(sl_comm *c) {
  int n = sl_comm_size(c), r = sl_comm_rank(c);
  int64_t *a = calloc(4 * (size_t)n, sizeof(int64_t)), ns = 0, nr = 0;
  uint64_t want = 0;
  for (int p = 0; p < n; p++) {
    a[p] = (r + 2 * p) % 3 * 100 + (p == r ? 1000 : 0), a[2 * n + p] = (p + 2 * r) % 3 * 100 + (p == r ? 1000 : 0);
    a[n + p] = ns, a[3 * n + p] = nr, ns += a[p], nr += a[2 * n + p], want += p == r ? 0 : (uint64_t)a[p] * 4;
  }
  float *hs = malloc((size_t)ns * 4 + 4), *hr = malloc((size_t)nr * 4 + 4), *ds = dalloc((size_t)ns * 4 + 4),
        *dr = dalloc((size_t)nr * 4 + 4);
  for (int p = 0; p < n; p++)
    for (int64_t i = 0; i < a[p]; i++) hs[a[n + p] + i] = f(r, i + 1000 * p);
  T->upload(ctx, ds, hs, (size_t)ns * 4);
  sl_comm_stats s0, s1;
  sl_comm_get_stats(c, &s0);
  sl_comm_req *q = NULL;
  OK(sl_comm_alltoallv(c, ds, a, a + n, dr, a + 2 * n, a + 3 * n, SL_F32, &q));
  if (q) OK(sl_comm_wait(q));
  sl_comm_get_stats(c, &s1);
  T->download(ctx, hr, dr, (size_t)nr * 4);
  int64_t bad = 0;
  for (int p = 0; p < n; p++)
    for (int64_t i = 0; i < a[2 * n + p]; i++) bad += hr[a[3 * n + p] + i] != f(p, i + 1000 * r);
  CHECK(!bad && s1.bytes[SL_COLL_ALLTOALL] - s0.bytes[SL_COLL_ALLTOALL] == want,
        "alltoall: %lld elements wrong, %llu bytes counted (want %llu)", (long long)bad,
        (unsigned long long)(s1.bytes[SL_COLL_ALLTOALL] - s0.bytes[SL_COLL_ALLTOALL]), (unsigned long long)want);
  T->free(ctx, ds);
  T->free(ctx, dr);
  free(hs);
  free(hr);
  free(a);
}

/* A large copy queued on the compute stream, not synchronised, then an
 * all-gather of its destination: the comm stream must wait for it (an
 * all-gather moves data even at n == 1). */
static void test_ordering(sl_comm *c) {
  int n = sl_comm_size(c);
  int64_t cnt = (int64_t)8 << 20; /* 32 MiB of f32 */
  float *h = malloc((size_t)cnt * sizeof *h);
  float *src = dalloc((size_t)cnt * sizeof *h), *dst = dalloc((size_t)cnt * sizeof *h);
  float *all = dalloc((size_t)n * (size_t)cnt * sizeof *h);
  for (int64_t i = 0; i < cnt; i++) h[i] = 1.0f;
  T->upload(ctx, src, h, (size_t)cnt * sizeof *h);
  for (int rep = 0; rep < 3; rep++) {
    T->zero(ctx, dst, (size_t)cnt * sizeof *h);
    T->copy(ctx, dst, src, (size_t)cnt * sizeof *h); /* queued, not waited */
    sl_comm_req *q;
    OK(sl_comm_allgather(c, dst, all, cnt, SL_F32, &q));
    OK(sl_comm_wait(q));
    /* all n*cnt elements are 1 only if every rank's copy had finished */
    double sum = T->sum(ctx, all, (int64_t)n * cnt);
    CHECK(sum == (double)n * (double)cnt, "ordering rep %d: sum %.17g, expected %.17g", rep, sum,
          (double)n * (double)cnt);
  }
  T->free(ctx, src);
  T->free(ctx, dst);
  T->free(ctx, all);
  free(h);
}

static void test_memops_device(void) {
  CHECK(T->is_device() == 1, "cuda is_device");
  int64_t n = 12345;
  float *h = malloc((size_t)n * sizeof *h), *h2 = malloc((size_t)n * sizeof *h);
  float *d = dalloc((size_t)n * sizeof *h);
  T->download(ctx, h2, d, (size_t)n * sizeof *h);
  int ok = 1;
  double ref = 0;
  for (int64_t i = 0; i < n; i++) {
    ok &= h2[i] == 0.0f;
    h[i] = f(3, i) + 0.125f;
    ref += h[i];
  }
  CHECK(ok, "device alloc is zeroed");
  T->upload(ctx, d, h, (size_t)n * sizeof *h);
  CHECK(T->sum(ctx, d, n) == ref, "device sum (exact data)");
  CHECK(T->sync(ctx) == SL_OK, "device sync");
  T->free(ctx, d);
  free(h);
  free(h2);
}

int main(int argc, char **argv) {
  sl_comm *w = NULL, *nc = NULL, *half = NULL;
  T = sl_ops_cuda();
  if (!T) {
    printf("skip: no CUDA device\n");
    return 77;
  }
  /* Without a launcher, SL_RANK/SL_WORLD_SIZE (or RANK/WORLD_SIZE, SLURM_*)
   * + SL_INIT_METHOD start N processes that bootstrap NCCL without MPI. */
  sl_boot_env boot;
  int use_boot = 0;
  if (!sl_comm_under_mpi_launcher() && sl_boot_from_env(&boot, &use_boot) != SL_OK) {
    fprintf(stderr, "test_cuda_nccl: %s\n", sl_errmsg());
    return 2;
  }
  /* one GPU per rank on a node: local rank modulo the device count */
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!lr) lr = getenv("SLURM_LOCALID");
  char lrb[16];
  if (use_boot) {
    snprintf(lrb, sizeof lrb, "%d", boot.local_rank);
    lr = lrb;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 && lr) cudaSetDevice(atoi(lr) % ndev);
  if (sl_comm_world_init(&argc, &argv, 120.0, &w) != SL_COMM_OK) {
    fprintf(stderr, "sl_comm_world_init: %s\n", sl_comm_last_error());
    return 1;
  }
  R = use_boot ? boot.rank : sl_comm_rank(w);
  N = use_boot ? boot.size : sl_comm_size(w);
  ctx = T->ctx_create(0);
  if (!ctx) {
    fprintf(stderr, "cuda ctx_create: %s\n", sl_errmsg());
    sl_comm_abort(1);
  }
  void *stream = sl_cuda_stream(ctx); /* the context's stream is the compute stream */
  test_memops_device();
  if (use_boot) OK(sl_comm_nccl_create_boot(&boot, stream, 60.0, &nc));
  else OK(sl_comm_nccl_create(w, stream, &nc));
  if (nc) {
    CHECK(strcmp(sl_comm_backend(nc), "nccl") == 0 && sl_comm_size(nc) == N && sl_comm_rank(nc) == R,
          "nccl comm: backend %s rank %d/%d", sl_comm_backend(nc), sl_comm_rank(nc), sl_comm_size(nc));
    test_collectives(nc, SL_F32);
    test_collectives(nc, SL_BF16);
    test_ordering(nc);
    test_alltoall(nc);
    if (!use_boot) OK(sl_comm_split(nc, R % 2, -R, &half)); /* a boot comm has no host twin */
    if (half) {
      int hn = (N - R % 2 + 1) / 2; /* ranks with my parity */
      CHECK(strcmp(sl_comm_backend(half), "nccl") == 0 && sl_comm_size(half) == hn &&
                sl_comm_rank(half) == hn - 1 - R / 2,
            "split: size %d (want %d) rank %d (want %d)", sl_comm_size(half), hn, sl_comm_rank(half), hn - 1 - R / 2);
      test_collectives(half, SL_F32);
      sl_comm_destroy(half);
    }
    sl_comm_destroy(nc);
  }
  T->ctx_destroy(ctx);
  int tot[2] = {npass, nfail};
  if (use_boot) printf("rank %d: ", R); /* no host comm: every rank reports its own */
  else if (sl_comm_allreduce_sync(w, tot, 2, SL_I32) != SL_COMM_OK) tot[1]++;
  if (R == 0 || use_boot)
    printf("%d passed, %d failed (%d ranks%s)\n", tot[0], tot[1], N, use_boot ? ", bootstrapped without MPI" : "");
  sl_comm_destroy(w);
  sl_comm_world_finalize();
  return tot[1] ? 1 : 0;
}
#endif
