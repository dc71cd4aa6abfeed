/* tests/unit/shard/test_comm_local.c — the one-rank comm over "device" buffers
 * (sl_comm_local_create, what fsdp uses at world size 1 on a GPU instead of
 * NCCL), on host memory with a recording copy function: out-of-place
 * all-gather and reduce-scatter move exactly the block through the copy
 * function (and the result equals the input), in-place ones and all-reduce /
 * broadcast / barrier call it never, an all-to-all copies its one block
 * from and to the displacements, send/recv is refused, a split is a
 * local comm with the same copy, a failing copy fails the collective with
 * its message, byte counters stay 0 while calls are counted, and
 * sl_comm_wait_stream is sl_comm_wait there (no device-side wait counted). */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "shard/comm.h"

static int npass, nfail;
static void check(int ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (ok) npass++;
  else nfail++;
}

typedef struct {
  int calls, fail;
  size_t bytes;
} rec;

static int copy_rec(void *ctx, void *dst, const void *src, size_t bytes) {
  rec *r = ctx;
  r->calls++;
  r->bytes += bytes;
  if (r->fail) {
    sl_fail(SL_EINTERNAL, "stand-in device copy failed");
    return -1;
  }
  memmove(dst, src, bytes);
  return 0;
}

/* issue (sets q), then wait for q: the call is evaluated before q is read */
#define RUN(call) ((call) == SL_COMM_OK && sl_comm_wait(q) == SL_COMM_OK)

int main(void) {
  rec r = {0, 0, 0};
  sl_comm *c = NULL, *s = NULL;
  check(sl_comm_local_create("dev", copy_rec, &r, &c) == SL_COMM_OK && c, "create");
  if (!c) return 1;
  check(sl_comm_size(c) == 1 && sl_comm_rank(c) == 0 && !strcmp(sl_comm_backend(c), "self"), "one rank, self");
  float a[7], b[7];
  for (int i = 0; i < 7; i++) a[i] = (float)i + 0.5f, b[i] = -1;
  sl_comm_req *q;
  check(RUN(sl_comm_allgather(c, a, b, 7, SL_F32, &q)) && r.calls == 1 && r.bytes == 28 && !memcmp(a, b, sizeof a),
        "allgather out of place: one copy of 28 bytes");
  for (int i = 0; i < 7; i++) b[i] = -1;
  check(RUN(sl_comm_reduce_scatter(c, a, b, 7, SL_F32, &q)) && r.calls == 2 && !memcmp(a, b, sizeof a),
        "reduce_scatter out of place: one copy");
  check(RUN(sl_comm_allgather(c, a, a, 7, SL_F32, &q)) && RUN(sl_comm_reduce_scatter(c, b, b, 7, SL_F32, &q)) &&
            RUN(sl_comm_allreduce(c, a, 7, SL_F32, &q)) && RUN(sl_comm_broadcast(c, a, 7, SL_F32, 0, &q)) &&
            sl_comm_barrier_sync(c) == SL_COMM_OK && r.calls == 2,
        "in place, allreduce, broadcast, barrier: no copy");
  int64_t sc = 3, sd = 4, rc = 3, rd = 1; /* the all-to-all: its one block, from a[4..7) to b[1..4) */
  for (int i = 0; i < 7; i++) b[i] = -1;
  check(RUN(sl_comm_alltoallv(c, a, &sc, &sd, b, &rc, &rd, SL_F32, &q)) && r.calls == 3 && r.bytes == 28 + 28 + 12 &&
            b[0] == -1 && b[1] == a[4] && b[3] == a[6] && b[4] == -1,
        "alltoall: one copy of its block, at the displacements");
  check(sl_comm_send(c, a, 7, SL_F32, 0, 1, &q) != SL_COMM_OK && strstr(sl_comm_last_error(), "not supported"),
        "send refused");
  for (int i = 0; i < 7; i++) b[i] = -1;
  check(sl_comm_allgather(c, a, b, 7, SL_F32, &q) == SL_COMM_OK && sl_comm_wait_stream(q, NULL) == SL_COMM_OK &&
            !memcmp(a, b, sizeof a) && sl_comm_wait_stream(NULL, NULL) != SL_COMM_OK,
        "wait_stream: completes like wait; a NULL request refused");
  sl_comm_stats st;
  sl_comm_get_stats(c, &st);
  uint64_t bytes = 0;
  for (int k = 0; k < SL_COLL_NKINDS; k++) bytes += st.bytes[k];
  check(st.calls[SL_COLL_ALLGATHER] == 3 && st.calls[SL_COLL_REDUCE_SCATTER] == 2 && bytes == 0 && !st.stream_waits,
        "counters: calls counted, 0 bytes on the wire, no device-side waits");
  check(sl_comm_split(c, 0, 0, &s) == SL_COMM_OK && s && sl_comm_size(s) == 1, "split");
  if (s) {
    r.fail = 1;
    check(sl_comm_allgather(s, a, b, 7, SL_F32, &q) != SL_COMM_OK && strstr(sl_comm_last_error(), "device copy"),
          "split keeps the copy; a failing copy fails the collective");
    sl_comm_destroy(s);
  }
  sl_comm_destroy(c);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
