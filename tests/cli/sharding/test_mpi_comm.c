/* tests/cli/sharding/test_mpi_comm.c — the MPI comm backend against values computed
 * locally: every rank knows what every rank contributes (f(rank, i)), so each
 * rank checks its own results exactly. Run alone (world size 1, as ctest
 * does) or under mpirun (tests/cli/sharding/test_mpi_comm.sh runs N = 1..4).
 *
 *   test_mpi_comm            all functional checks
 *   test_mpi_comm hang T     rank 1 stops issuing collectives; the others must
 *                            be ended by the watchdog (timeout T s) naming it
 *   test_mpi_comm kill T     rank 1 SIGKILLs itself mid-sequence
 *   test_mpi_comm p2p T      rank 0 waits on a recv rank 2 never sends
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "shard/comm.h"
#include "shard/mesh.h"

static int R, N; /* world rank, size */
static int npass, nfail;

#include "tests/lib/rank_check.h"

#define OK(call)                                                                                                       \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    if (rc_ != SL_COMM_OK) {                                                                                           \
      fprintf(stderr, "[rank %d] %s:%d: %s -> %d: %s\n", R, __FILE__, __LINE__, #call, rc_, sl_comm_last_error());     \
      sl_comm_abort(1);                                                                                                \
    }                                                                                                                  \
  } while (0)

static const sl_dtype DTS[] = {SL_F32, SL_BF16, SL_I32, SL_F64};

/* Contribution of `rank` at element i: small integers, so every sum is exact
 * in every dtype whatever the reduction order. */
static double f(int rank, int64_t i, int salt) { return (double)((rank * 31 + i * 7 + salt * 13) % 11) - 5.0; }

static void put(sl_dtype dt, void *b, int64_t i, double v) {
  switch (dt) {
  case SL_F32: ((float *)b)[i] = (float)v; break;
  case SL_BF16: ((uint16_t *)b)[i] = sl_f32_to_bf16_scalar((float)v); break;
  case SL_I32: ((int32_t *)b)[i] = (int32_t)v; break;
  case SL_F64: ((double *)b)[i] = v; break;
  case SL_I64: ((int64_t *)b)[i] = (int64_t)v; break;
  case SL_U8: ((uint8_t *)b)[i] = (uint8_t)(int8_t)v; break; /* two's complement byte */
  default: break;
  }
}

static double get(sl_dtype dt, const void *b, int64_t i) {
  switch (dt) {
  case SL_F32: return ((const float *)b)[i];
  case SL_BF16: return sl_bf16_to_f32_scalar(((const uint16_t *)b)[i]);
  case SL_I32: return ((const int32_t *)b)[i];
  case SL_F64: return ((const double *)b)[i];
  case SL_I64: return (double)((const int64_t *)b)[i];
  case SL_U8: return (double)(int8_t)((const uint8_t *)b)[i];
  default: return NAN;
  }
}

static void *buf(sl_dtype dt, int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sl_dtype_size(dt)); }

/* ---- one case per collective ---------------------------------------------- */

static void t_allgather(sl_comm *c, sl_dtype dt, int64_t cnt, int inplace, int salt) {
  int n = sl_comm_size(c), r = sl_comm_rank(c);
  char *recv = buf(dt, n * cnt), *send = inplace ? recv + (size_t)r * cnt * sl_dtype_size(dt) : buf(dt, cnt);
  for (int64_t i = 0; i < cnt; i++) put(dt, send, i, f(r, i, salt));
  OK(sl_comm_allgather_sync(c, send, recv, cnt, dt));
  int bad = 0;
  for (int q = 0; q < n; q++)
    for (int64_t i = 0; i < cnt; i++) bad += get(dt, recv, q * cnt + i) != f(q, i, salt);
  CHECK(!bad, "allgather %s count %lld inplace %d: %d wrong", sl_dtype_name(dt), (long long)cnt, inplace, bad);
  if (!inplace) free(send);
  free(recv);
}

static void t_reduce_scatter(sl_comm *c, sl_dtype dt, int64_t cnt, int inplace, int salt) {
  int n = sl_comm_size(c), r = sl_comm_rank(c);
  char *send = buf(dt, n * cnt), *recv = inplace ? send + (size_t)r * cnt * sl_dtype_size(dt) : buf(dt, cnt);
  for (int64_t j = 0; j < n * cnt; j++) put(dt, send, j, f(r, j, salt));
  sl_comm_req *q;
  OK(sl_comm_reduce_scatter(c, send, recv, cnt, dt, &q));
  OK(sl_comm_wait(q));
  int bad = 0;
  for (int64_t i = 0; i < cnt; i++) {
    double want = 0;
    for (int p = 0; p < n; p++) want += f(p, r * cnt + i, salt);
    bad += get(dt, recv, i) != want;
  }
  CHECK(!bad, "reduce_scatter %s count %lld inplace %d: %d wrong", sl_dtype_name(dt), (long long)cnt, inplace, bad);
  if (!inplace) free(recv);
  free(send);
}

static void t_allreduce(sl_comm *c, sl_dtype dt, int64_t cnt, int salt) {
  int n = sl_comm_size(c), r = sl_comm_rank(c);
  void *b = buf(dt, cnt);
  for (int64_t i = 0; i < cnt; i++) put(dt, b, i, f(r, i, salt));
  OK(sl_comm_allreduce_sync(c, b, cnt, dt));
  int bad = 0;
  for (int64_t i = 0; i < cnt; i++) {
    double want = 0;
    for (int p = 0; p < n; p++) want += f(p, i, salt);
    bad += get(dt, b, i) != want;
  }
  CHECK(!bad, "allreduce %s count %lld on %d ranks: %d wrong", sl_dtype_name(dt), (long long)cnt, n, bad);
  free(b);
}

static void t_broadcast(sl_comm *c, sl_dtype dt, int64_t cnt, int root, int salt) {
  int r = sl_comm_rank(c);
  void *b = buf(dt, cnt);
  for (int64_t i = 0; i < cnt; i++) put(dt, b, i, f(r, i, salt));
  OK(sl_comm_broadcast_sync(c, b, cnt, dt, root));
  int bad = 0;
  for (int64_t i = 0; i < cnt; i++) bad += get(dt, b, i) != f(root, i, salt);
  CHECK(!bad, "broadcast %s count %lld root %d: %d wrong", sl_dtype_name(dt), (long long)cnt, root, bad);
  free(b);
}

static void t_sendrecv(sl_comm *c, sl_dtype dt, int64_t cnt) {
  int n = sl_comm_size(c), r = sl_comm_rank(c), to = (r + 1) % n, from = (r + n - 1) % n;
  void *s = buf(dt, cnt), *d = buf(dt, cnt);
  for (int64_t i = 0; i < cnt; i++) put(dt, s, i, f(r, i, 9));
  sl_comm_req *qs, *qr;
  /* send first on every rank: must not deadlock (sends do not block the
   * progress thread) */
  OK(sl_comm_send(c, s, cnt, dt, to, 7, &qs));
  OK(sl_comm_recv(c, d, cnt, dt, from, 7, &qr));
  OK(sl_comm_wait(qr));
  OK(sl_comm_wait(qs));
  int bad = 0;
  for (int64_t i = 0; i < cnt; i++) bad += get(dt, d, i) != f(from, i, 9);
  CHECK(!bad, "send/recv ring %s count %lld: %d wrong", sl_dtype_name(dt), (long long)cnt, bad);
  free(s);
  free(d);
}

/* Pipeline-style paired send/recv: each rank sends two tagged messages to
 * both ring neighbours and to itself, receives them posted in a different
 * order than sent (tags do the matching), and the counters count each kind. */
static void t_p2p(sl_comm *c) {
  int n = sl_comm_size(c), r = sl_comm_rank(c), to = (r + 1) % n, from = (r + n - 1) % n;
  for (size_t d = 0; d < 6; d++) {
    sl_dtype dt = (sl_dtype)d;
    const int64_t cnt = 5 + (int64_t)d;
    void *s[3], *q[3];
    sl_comm_req *qs[3], *qr[3];
    const int peer_to[3] = {to, from, r}, peer_from[3] = {from, to, r}, tag[3] = {11, 12, 13};
    sl_comm_reset_stats(c);
    for (int k = 0; k < 3; k++) {
      s[k] = buf(dt, cnt);
      q[k] = buf(dt, cnt);
      for (int64_t i = 0; i < cnt; i++) put(dt, s[k], i, f(r, i, 20 + k));
    }
    /* recvs first for k = 2, 1; sends; then the recv for k = 0 */
    OK(sl_comm_recv(c, q[2], cnt, dt, peer_from[2], tag[2], &qr[2]));
    OK(sl_comm_recv(c, q[1], cnt, dt, peer_from[1], tag[1], &qr[1]));
    for (int k = 0; k < 3; k++) OK(sl_comm_send(c, s[k], cnt, dt, peer_to[k], tag[k], &qs[k]));
    OK(sl_comm_recv(c, q[0], cnt, dt, peer_from[0], tag[0], &qr[0]));
    for (int k = 2; k >= 0; k--) OK(sl_comm_wait(qr[k]));
    for (int k = 0; k < 3; k++) OK(sl_comm_wait(qs[k]));
    int bad = 0;
    for (int k = 0; k < 3; k++)
      for (int64_t i = 0; i < cnt; i++) bad += get(dt, q[k], i) != f(peer_from[k], i, 20 + k);
    CHECK(!bad, "p2p ring/self %s: %d wrong", sl_dtype_name(dt), bad);
    sl_comm_stats st;
    sl_comm_get_stats(c, &st);
    uint64_t want = n > 1 ? 3ull * (uint64_t)cnt * sl_dtype_size(dt) : 0;
    CHECK(st.calls[SL_COLL_SEND] == 3 && st.calls[SL_COLL_RECV] == 3 && st.bytes[SL_COLL_SEND] == want &&
              st.bytes[SL_COLL_RECV] == want && st.calls[SL_COLL_ALLREDUCE] == 0,
          "p2p counters %s: send %llu calls %llu bytes, recv %llu calls %llu bytes (want 3 calls, %llu bytes)",
          sl_dtype_name(dt), (unsigned long long)st.calls[SL_COLL_SEND], (unsigned long long)st.bytes[SL_COLL_SEND],
          (unsigned long long)st.calls[SL_COLL_RECV], (unsigned long long)st.bytes[SL_COLL_RECV],
          (unsigned long long)want);
    for (int k = 0; k < 3; k++) {
      free(s[k]);
      free(q[k]);
    }
  }
  CHECK(sl_comm_bus_bytes(SL_COLL_RECV, 2, 3, SL_F32, 0) == 12 && sl_comm_bus_bytes(SL_COLL_SEND, 1, 3, SL_F32, 1) == 0,
        "bus bytes of send/recv");
  CHECK(!strcmp(sl_coll_name(SL_COLL_SEND), "send") && !strcmp(sl_coll_name(SL_COLL_RECV), "recv"), "p2p names");
  /* argument errors */
  sl_comm_req *q = NULL;
  float z[2] = {0};
  CHECK(sl_comm_send(c, z, 2, SL_F32, n, 1, &q) == SL_COMM_ERR && !q && strstr(sl_comm_last_error(), "peer"),
        "bad peer rejected: %s", sl_comm_last_error());
  CHECK(sl_comm_recv(c, z, 2, SL_F32, 0, 40000, &q) == SL_COMM_ERR && !q && strstr(sl_comm_last_error(), "tag"),
        "bad tag rejected: %s", sl_comm_last_error());
  sl_comm_reset_stats(c);
}

/* Many operations in flight at once, waited in reverse order. */
static void t_interleaved(sl_comm *c) {
  enum { K = 48 };
  int n = sl_comm_size(c), r = sl_comm_rank(c);
  void *bufs[K], *bufs2[K];
  sl_comm_req *q[K];
  int64_t cnt[K];
  for (int k = 0; k < K; k++) {
    sl_dtype dt = DTS[k % 4];
    cnt[k] = 3 + k % 7;
    bufs[k] = buf(dt, n * cnt[k]);
    bufs2[k] = buf(dt, n * cnt[k]);
    switch (k % 3) {
    case 0: /* allreduce */
      for (int64_t i = 0; i < cnt[k]; i++) put(dt, bufs[k], i, f(r, i, k));
      OK(sl_comm_allreduce(c, bufs[k], cnt[k], dt, &q[k]));
      break;
    case 1: /* allgather */
      for (int64_t i = 0; i < cnt[k]; i++) put(dt, bufs2[k], i, f(r, i, k));
      OK(sl_comm_allgather(c, bufs2[k], bufs[k], cnt[k], dt, &q[k]));
      break;
    case 2: /* reduce-scatter */
      for (int64_t i = 0; i < n * cnt[k]; i++) put(dt, bufs2[k], i, f(r, i, k));
      OK(sl_comm_reduce_scatter(c, bufs2[k], bufs[k], cnt[k], dt, &q[k]));
      break;
    }
  }
  int bad = 0, tested = 0;
  for (int k = K - 1; k >= 0; k--) {
    tested += sl_comm_test(q[k]);
    OK(sl_comm_wait(q[k]));
    sl_dtype dt = DTS[k % 4];
    for (int64_t i = 0; i < (k % 3 == 1 ? n * cnt[k] : cnt[k]); i++) {
      double want = 0;
      if (k % 3 == 0)
        for (int p = 0; p < n; p++) want += f(p, i, k);
      if (k % 3 == 1) want = f((int)(i / cnt[k]), i % cnt[k], k);
      if (k % 3 == 2)
        for (int p = 0; p < n; p++) want += f(p, r * cnt[k] + i, k);
      bad += get(dt, bufs[k], i) != want;
    }
    free(bufs[k]);
    free(bufs2[k]);
  }
  CHECK(!bad, "%d interleaved non-blocking ops: %d wrong values", K, bad);
  CHECK(tested >= 0, "sl_comm_test");
}

/* ---- determinism: allreduce == reduce-scatter + all-gather, bit for bit -- */

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static void t_bitident(sl_comm *c, sl_dtype dt, int64_t cnt) {
  int n = sl_comm_size(c), r = sl_comm_rank(c);
  size_t es = sl_dtype_size(dt);
  int64_t blk = (cnt + n - 1) / n, padded = blk * n;
  char *a = buf(dt, cnt), *p = buf(dt, padded), *sh = buf(dt, blk), *g = buf(dt, padded), *a0 = buf(dt, cnt);
  uint64_t s = 12345 + (uint64_t)r * 7919;
  double *ref = calloc((size_t)cnt, sizeof(double)), *mag = calloc((size_t)cnt, sizeof(double));
  for (int q = 0; q < n; q++) { /* everyone's random contribution */
    uint64_t sq = 12345 + (uint64_t)q * 7919;
    for (int64_t i = 0; i < cnt; i++) {
      double v = ((double)lcg(&sq) / 2147483648.0 - 0.5) * 3.0; /* non-integers: order matters */
      if (dt == SL_BF16) v = sl_bf16_to_f32_scalar(sl_f32_to_bf16_scalar((float)v));
      else if (dt == SL_F32) v = (float)v;
      ref[i] += v;
      mag[i] += fabs(v);
    }
  }
  for (int64_t i = 0; i < cnt; i++) {
    double v = ((double)lcg(&s) / 2147483648.0 - 0.5) * 3.0;
    put(dt, a, i, v);
    put(dt, p, i, v); /* p: the same buffer, zero padded to a multiple of n */
  }
  OK(sl_comm_allreduce_sync(c, a, cnt, dt));
  sl_comm_req *q;
  OK(sl_comm_reduce_scatter(c, p, sh, blk, dt, &q));
  OK(sl_comm_wait(q));
  OK(sl_comm_allgather_sync(c, sh, g, blk, dt));
  CHECK(!memcmp(a, g, (size_t)cnt * es), "allreduce %s count %lld is not bit-identical to reduce-scatter + allgather",
        sl_dtype_name(dt), (long long)cnt);
  /* every rank holds the same bits */
  memcpy(a0, a, (size_t)cnt * es);
  OK(sl_comm_broadcast_sync(c, a0, cnt, dt, 0));
  CHECK(!memcmp(a, a0, (size_t)cnt * es), "allreduce %s count %lld differs between ranks", sl_dtype_name(dt),
        (long long)cnt);
  /* and it is the sum: fp32 round-off, or bf16 rounding at each of n-1 steps */
  double tol = dt == SL_BF16 ? 1.0 / 128 : 1e-6;
  int bad = 0;
  for (int64_t i = 0; i < cnt; i++) bad += fabs(get(dt, a, i) - ref[i]) > tol * (mag[i] + 1e-30) * n;
  CHECK(!bad, "allreduce %s count %lld of random values: %d sums off the reference", sl_dtype_name(dt), (long long)cnt,
        bad);
  free(a);
  free(p);
  free(sh);
  free(g);
  free(a0);
  free(ref);
  free(mag);
}

/* bf16 sums round to nearest even: rank 0 adds 1, rank 1 the other term. */
static void t_bf16_rne(sl_comm *c) {
  if (sl_comm_size(c) < 2) return;
  int r = sl_comm_rank(c);
  const float other[3] = {0x1p-8f, 0x3p-8f, 0x1p-8f};
  const float base[3] = {1.0f, 1.0f, 1.0f + 0x1p-7f};
  const float want[3] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-6f};
  uint16_t b[3];
  for (int i = 0; i < 3; i++) b[i] = sl_f32_to_bf16_scalar(r == 0 ? base[i] : r == 1 ? other[i] : 0.0f);
  OK(sl_comm_allreduce_sync(c, b, 3, SL_BF16));
  for (int i = 0; i < 3; i++)
    CHECK(sl_bf16_to_f32_scalar(b[i]) == want[i], "bf16 sum %d: got %.9g want %.9g (round to nearest even)", i,
          sl_bf16_to_f32_scalar(b[i]), want[i]);
}

/* ---- byte counters against the closed forms -------------------------------- */

static void t_stats(sl_comm *c) {
  int n = sl_comm_size(c), r = sl_comm_rank(c);
  sl_comm_reset_stats(c);
  int64_t cnt = 6; /* per-rank block for AG/RS; allreduce of n*cnt and of 7 */
  float *x = calloc((size_t)(n * cnt + 8), sizeof(float)), *y = calloc((size_t)(n * cnt + 8), sizeof(float));
  uint16_t *h = calloc((size_t)(n * cnt), 2);
  OK(sl_comm_allgather_sync(c, x, y, cnt, SL_F32));
  sl_comm_req *q;
  OK(sl_comm_reduce_scatter(c, h, h + r * cnt, cnt, SL_BF16, &q));
  OK(sl_comm_wait(q));
  OK(sl_comm_allreduce_sync(c, x, n * cnt, SL_F32));
  OK(sl_comm_allreduce_sync(c, x, 7, SL_F32));
  OK(sl_comm_broadcast_sync(c, x, 5, SL_F32, n - 1));
  OK(sl_comm_barrier_sync(c));
  sl_comm_stats st;
  sl_comm_get_stats(c, &st);
  uint64_t m = (uint64_t)(n - 1);
  uint64_t want_ag = m * 6 * 4, want_rs = m * 6 * 2;
  uint64_t want_ar = 2 * m * (uint64_t)cnt * 4 + 2 * m * (uint64_t)((7 + n - 1) / n) * 4;
  uint64_t want_bc = n > 1 && r == n - 1 ? 5 * 4 : 0;
  CHECK(st.bytes[SL_COLL_ALLGATHER] == want_ag, "allgather bytes %llu want %llu",
        (unsigned long long)st.bytes[SL_COLL_ALLGATHER], (unsigned long long)want_ag);
  CHECK(st.bytes[SL_COLL_REDUCE_SCATTER] == want_rs, "reduce_scatter bytes %llu want %llu",
        (unsigned long long)st.bytes[SL_COLL_REDUCE_SCATTER], (unsigned long long)want_rs);
  CHECK(st.bytes[SL_COLL_ALLREDUCE] == want_ar, "allreduce bytes %llu want %llu",
        (unsigned long long)st.bytes[SL_COLL_ALLREDUCE], (unsigned long long)want_ar);
  CHECK(st.bytes[SL_COLL_BROADCAST] == want_bc, "broadcast bytes %llu want %llu",
        (unsigned long long)st.bytes[SL_COLL_BROADCAST], (unsigned long long)want_bc);
  CHECK(st.bytes[SL_COLL_BARRIER] == 0 && st.calls[SL_COLL_BARRIER] == 1, "barrier stats");
  CHECK(st.calls[SL_COLL_ALLREDUCE] == 2 && st.calls[SL_COLL_ALLGATHER] == 1 && st.calls[SL_COLL_REDUCE_SCATTER] == 1 &&
            st.calls[SL_COLL_BROADCAST] == 1,
        "call counts %llu %llu %llu %llu", (unsigned long long)st.calls[SL_COLL_ALLREDUCE],
        (unsigned long long)st.calls[SL_COLL_ALLGATHER], (unsigned long long)st.calls[SL_COLL_REDUCE_SCATTER],
        (unsigned long long)st.calls[SL_COLL_BROADCAST]);
  CHECK(sl_comm_bus_bytes(SL_COLL_ALLREDUCE, 4, 16, SL_F32, 0) == 2 * 3 * 4 * 4, "bus_bytes allreduce formula");
  CHECK(sl_comm_bus_bytes(SL_COLL_ALLGATHER, 1, 16, SL_F32, 0) == 0, "bus_bytes n == 1");
  sl_comm_reset_stats(c);
  sl_comm_get_stats(c, &st);
  CHECK(st.calls[SL_COLL_ALLREDUCE] == 0 && st.bytes[SL_COLL_ALLREDUCE] == 0 && st.wait_ns == 0, "reset stats");
  free(x);
  free(y);
  free(h);
}

/* ---- sub-communicators ------------------------------------------------------ */

static void t_split(sl_comm *w) {
  int n = sl_comm_size(w), r = sl_comm_rank(w);
  int S = n >= 2 ? 2 : 1; /* shard groups of S consecutive ranks, replica groups across */
  sl_comm *shard, *rep;
  OK(sl_comm_split(w, r / S, r % S, &shard));
  OK(sl_comm_split(w, r % S, r / S, &rep));
  int gs = 0, ok = 1;
  for (int q = 0; q < n; q++) gs += q / S == r / S;
  CHECK(sl_comm_size(shard) == gs && sl_comm_rank(shard) == r % S, "shard group size %d rank %d (want %d, %d)",
        sl_comm_size(shard), sl_comm_rank(shard), gs, r % S);
  for (int i = 0; i < sl_comm_size(shard); i++) ok &= sl_comm_world_rank(shard, i) == (r / S) * S + i;
  for (int i = 0; i < sl_comm_size(rep); i++) ok &= sl_comm_world_rank(rep, i) == i * S + r % S;
  CHECK(ok, "world ranks of split groups");
  CHECK(!strcmp(sl_comm_backend(shard), sl_comm_world_backend()), "backend name");
  /* interleave ops on both sub-comms and the world */
  int32_t a[5], b[5], c[5];
  for (int i = 0; i < 5; i++) a[i] = b[i] = c[i] = r * 10 + i;
  sl_comm_req *qa, *qb, *qc;
  OK(sl_comm_allreduce(shard, a, 5, SL_I32, &qa));
  OK(sl_comm_allreduce(rep, b, 5, SL_I32, &qb));
  OK(sl_comm_allreduce(w, c, 5, SL_I32, &qc));
  OK(sl_comm_wait(qc));
  OK(sl_comm_wait(qa));
  OK(sl_comm_wait(qb));
  int bad = 0;
  for (int i = 0; i < 5; i++) {
    int32_t wa = 0, wb = 0, wc = 0;
    for (int q = 0; q < n; q++) {
      if (q / S == r / S) wa += q * 10 + i;
      if (q % S == r % S) wb += q * 10 + i;
      wc += q * 10 + i;
    }
    bad += (a[i] != wa) + (b[i] != wb) + (c[i] != wc);
  }
  CHECK(!bad, "allreduce on shard/replica/world comms: %d wrong", bad);
  for (size_t d = 0; d < 4; d++) {
    t_reduce_scatter(shard, DTS[d], 5, 0, 3);
    t_allgather(rep, DTS[d], 5, 1, 4);
    t_bitident(shard, DTS[d] == SL_BF16 ? SL_BF16 : SL_F32, 11);
  }
  t_stats(shard);
  sl_comm_destroy(shard);
  sl_comm_destroy(rep);
}

/* The parallel mesh (shard/mesh.h): every (TP, PP, shard group) that divides
 * the world; coordinates, group membership and an all-reduce per axis and
 * per group against the layout rank = tp + TP * (shard + S * (replica + R * pp)). */
static int mesh_check(sl_comm *g, const sl_mesh_axis *x, const int *members, const char *what) {
  int ok = g && sl_comm_size(g) == x->size && sl_comm_rank(g) == x->coord;
  int64_t sum = R + 1, want = 0;
  for (int i = 0; ok && i < x->size; i++) {
    ok &= sl_comm_world_rank(g, i) == members[i];
    want += members[i] + 1;
  }
  OK(sl_comm_allreduce_sync(g, &sum, 1, SL_I64));
  CHECK(ok && sum == want, "mesh %s %s: members/order (ok %d), sum %lld want %lld", what, x->name, ok, (long long)sum,
        (long long)want);
  return ok;
}

static void t_mesh_shape(sl_comm *w, int tp, int pp, int S0) {
  int dp = N / (tp * pp), S = S0 > 0 ? S0 : dp, Rn = dp / S;
  char what[64];
  snprintf(what, sizeof what, "tp %d pp %d shard %d", tp, pp, S);
  sl_par_mesh *m = NULL;
  sl_mesh_dims d = {.tp = tp, .pp = pp, .dp_shard = S0};
  OK(sl_par_mesh_create(w, &d, &m));
  if (!m) return;
  int co[SL_AXIS_COUNT] = {0}, want[SL_AXIS_COUNT] = {0};
  want[SL_AXIS_TP] = tp, want[SL_AXIS_DP_SHARD] = S, want[SL_AXIS_DP_REPLICATE] = Rn, want[SL_AXIS_PP] = pp;
  co[SL_AXIS_TP] = R % tp, co[SL_AXIS_DP_SHARD] = (R / tp) % S, co[SL_AXIS_DP_REPLICATE] = (R / (tp * S)) % Rn;
  co[SL_AXIS_PP] = R / (tp * dp);
  int ok = m->group[SL_GROUP_DP].size == dp && m->group[SL_GROUP_DP].coord == (R / tp) % dp;
  for (int a = 0; a < SL_AXIS_COUNT; a++) ok &= m->axis[a].size == (want[a] ? want[a] : 1) && m->axis[a].coord == co[a];
  CHECK(ok, "mesh %s: sizes/coords", what);
  CHECK(sl_par_mesh_world_rank(m, co) == R, "mesh %s: world rank of coords", what);
  CHECK(sl_par_mesh_find(m, "dp") == &m->group[SL_GROUP_DP] && sl_par_mesh_find(m, "pp") == &m->axis[SL_AXIS_PP] &&
            !sl_par_mesh_find(m, "xx"),
        "mesh %s: names", what);
  int members[64];
  for (int a = 0; a < SL_AXIS_COUNT; a++) {
    if (!m->axis[a].comm) {
      CHECK(m->axis[a].size == 1, "mesh %s: %s has no communicator but size %d", what, m->axis[a].name,
            m->axis[a].size);
      continue;
    }
    int c[SL_AXIS_COUNT];
    for (int i = 0; i < m->axis[a].size; i++) {
      memcpy(c, co, sizeof c);
      c[a] = i;
      members[i] = sl_par_mesh_world_rank(m, c);
    }
    mesh_check(m->axis[a].comm, &m->axis[a], members, what);
  }
  for (int i = 0; i < dp; i++) { /* dp: shard fastest, then replica */
    int c[SL_AXIS_COUNT];
    memcpy(c, co, sizeof c);
    c[SL_AXIS_DP_SHARD] = i % S;
    c[SL_AXIS_DP_REPLICATE] = i / S;
    members[i] = sl_par_mesh_world_rank(m, c);
  }
  mesh_check(m->group[SL_GROUP_DP].comm, &m->group[SL_GROUP_DP], members, what);
  sl_par_mesh_destroy(m);
}

static void t_mesh(sl_comm *w) {
  const int shapes[][3] = {{1, 1, 0}, {2, 1, 0}, {1, 2, 0}, {2, 2, 0}, {3, 1, 0}, {1, 4, 0}, {1, 1, 2}, {2, 1, 2}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int tp = shapes[s][0], pp = shapes[s][1], S = shapes[s][2];
    if (N % (tp * pp) || (S && (N / (tp * pp)) % S)) continue;
    t_mesh_shape(w, tp, pp, S);
  }
  sl_par_mesh *bad = (sl_par_mesh *)1;
  sl_mesh_dims d = {.tp = N + 1, .pp = 1};
  int rc = sl_par_mesh_create(w, &d, &bad);
  CHECK(rc == SL_EINPUT && !bad && strstr(sl_errmsg(), "must divide the world size"), "mesh: bad TP refused: %s",
        sl_errmsg());
  d = (sl_mesh_dims){.tp = 1, .pp = 1, .dp_shard = N + 1};
  rc = sl_par_mesh_create(w, &d, &bad);
  CHECK(rc == SL_EINPUT && !bad && strstr(sl_errmsg(), "--shard-group"), "mesh: bad shard group refused: %s",
        sl_errmsg());
}

/* ---- fault modes ----------------------------------------------------------- */

static int fault_mode(sl_comm *w, const char *mode) {
  float x[16];
  for (int step = 1; step <= 3; step++) {
    for (int i = 0; i < 16; i++) x[i] = (float)R;
    OK(sl_comm_allreduce_sync(w, x, 16, SL_F32));
  }
  if (!strcmp(mode, "p2p")) { /* rank 0 waits for a send rank 2 never posts */
    if (R == 0) {
      sl_comm_req *q;
      OK(sl_comm_recv(w, x, 16, SL_F32, 2, 9, &q));
      OK(sl_comm_wait(q));
      fprintf(stderr, "[rank 0] FAIL: recv completed without a send\n");
      return 1;
    }
    for (;;) sleep(1000);
  }
  if (R == 1) {
    if (!strcmp(mode, "kill")) raise(SIGKILL);
    fprintf(stderr, "[rank 1] hang mode: stopping collectives\n");
    for (;;) sleep(1000);
  }
  /* collective #4: rank 1 never arrives */
  OK(sl_comm_allreduce_sync(w, x, 16, SL_F32));
  fprintf(stderr, "[rank %d] FAIL: allreduce completed without rank 1\n", R);
  return 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  double timeout = argc > 2 ? atof(argv[2]) : 60.0;
  sl_comm *w;
  if (sl_comm_world_init(&argc, &argv, timeout, &w) != SL_COMM_OK) {
    fprintf(stderr, "sl_comm_world_init: %s\n", sl_comm_last_error());
    return 1;
  }
  R = sl_comm_rank(w);
  N = sl_comm_size(w);
  if (!strcmp(mode, "hang") || !strcmp(mode, "kill") || !strcmp(mode, "p2p")) {
    if (N < 2) {
      fprintf(stderr, "fault mode %s needs at least 2 ranks\n", mode);
      return 2;
    }
    return fault_mode(w, mode);
  }

  CHECK(sl_dtype_size(SL_BF16) == 2 && sl_dtype_size(SL_F64) == 8 && !strcmp(sl_dtype_name(SL_BF16), "bf16"),
        "dtype helpers");
  CHECK(!strcmp(sl_coll_name(SL_COLL_REDUCE_SCATTER), "reduce_scatter"), "coll names");
  CHECK(sl_comm_world_rank(w, R) == R && !strcmp(sl_comm_backend(w), sl_comm_world_backend()), "world rank map");
  /* under mpirun the world is MPI; alone it is self unless SL_COMM=mpi */
  const char *want =
      sl_comm_under_mpi_launcher() || (getenv("SL_COMM") && !strcmp(getenv("SL_COMM"), "mpi")) ? "mpi" : "self";
  CHECK(!strcmp(sl_comm_world_backend(), want), "world backend %s (want %s)", sl_comm_world_backend(), want);
  const int64_t counts[] = {0, 1, 7, 13};
  for (size_t d = 0; d < 4; d++) {
    for (size_t k = 0; k < 4; k++) {
      t_allgather(w, DTS[d], counts[k], 0, (int)k);
      t_allgather(w, DTS[d], counts[k], 1, (int)k + 1);
      t_reduce_scatter(w, DTS[d], counts[k], 0, (int)k);
      t_reduce_scatter(w, DTS[d], counts[k], 1, (int)k + 2);
      t_allreduce(w, DTS[d], counts[k], (int)k);
      t_broadcast(w, DTS[d], counts[k], N - 1, (int)k);
      t_sendrecv(w, DTS[d], counts[k]);
    }
    t_allreduce(w, DTS[d], 3 * N + 1, 5); /* never divisible for N > 1 */
    t_allreduce(w, DTS[d], 8 * N, 6);     /* always divisible */
    t_broadcast(w, DTS[d], 9, 0, 7);
  }
  OK(sl_comm_barrier_sync(w));
  t_interleaved(w);
  t_p2p(w);
  /* divisible, padded, and large enough that MPI_Allreduce's own algorithm
   * (OpenMPI tuned, 3 ranks) would sum in a different order */
  const int64_t bcounts[] = {16 * N, 16 * N + 3, 3000 * N + 3};
  for (size_t k = 0; k < 3; k++) {
    t_bitident(w, SL_F32, bcounts[k]);
    t_bitident(w, SL_BF16, bcounts[k]);
    t_bitident(w, SL_F64, bcounts[k]);
  }
  t_bf16_rne(w);
  t_stats(w);
  t_split(w);
  t_mesh(w);

  /* argument errors are reported, not crashed on */
  sl_comm_req *q = NULL;
  float z[2] = {0};
  int rc = sl_comm_broadcast(w, z, 2, SL_F32, N + 3, &q);
  CHECK(rc == SL_COMM_ERR && q == NULL && strstr(sl_comm_last_error(), "root"), "bad root rejected: %s",
        sl_comm_last_error());
  rc = sl_comm_allreduce(w, z, -1, SL_F32, &q);
  CHECK(rc == SL_COMM_ERR && strstr(sl_comm_last_error(), "count"), "negative count rejected");

  /* everyone learns the total */
  int32_t tot[2] = {npass, nfail};
  OK(sl_comm_allreduce_sync(w, tot, 2, SL_I32));
  sl_comm_destroy(w);
  sl_comm_world_finalize();
  if (R == 0) printf("test_mpi_comm (%d ranks): %d passed, %d failed\n", N, tot[0], tot[1]);
  return tot[1] ? 1 : 0;
}
