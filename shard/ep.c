/* shard/ep.c — the sl_ep_group hooks over a communicator (shard/ep.h): the
 * counts exchange (n int64 per peer, an all-to-all) and the all-to-all of
 * rows of `width` floats, on host buffers (MPI, self, count) or on device
 * buffers (the device twin). */
#include "shard/ep.h"

#include <limits.h>
#include <string.h>

#include "base/base.h"
#include "kernels/registry.h"

static int comm_fail(const char *what) {
  return sl_fail(SL_ECOMM, "expert parallel %s: %s", what, sl_comm_last_error());
}

/* One all-to-all of c: cnt[0..n) elements to / from each rank, laid out back
 * to back in rank order (the displacements are the prefix sums), scount and
 * rcount in rows of `width` elements. */
static int rows_alltoall(sl_comm *c, const void *send, const int64_t *scount, void *recv, const int64_t *rcount,
                         int64_t width, sl_dtype dt, const char *what) {
  int n = sl_comm_size(c);
  if (width < 0 || width > INT_MAX)
    return sl_fail(SL_EINPUT, "expert parallel %s: row width %lld out of range [0, %d]", what, (long long)width,
                   INT_MAX);
  int64_t *a = sl_alloc((size_t)n * 4 * sizeof(int64_t), "expert-parallel all-to-all counts");
  if (!a) return SL_ENOMEM;
  int64_t *sc = a, *sd = a + n, *rc = a + 2 * n, *rd = a + 3 * n, so = 0, ro = 0;
  int rc_ = SL_OK;
  for (int p = 0; p < n && !rc_; p++) {
    int bad_s = scount[p] < 0 || scount[p] > INT_MAX, bad_r = rcount[p] < 0 || rcount[p] > INT_MAX;
    if (bad_s || bad_r) {
      rc_ = sl_fail(SL_EINPUT, "expert parallel %s: %s[%d] = %lld rows out of range [0, %d]", what,
                    bad_s ? "scount" : "rcount", p, (long long)(bad_s ? scount[p] : rcount[p]), INT_MAX);
      break;
    }
    sc[p] = scount[p] * width, rc[p] = rcount[p] * width; /* < 2^62: both factors <= INT_MAX */
    sd[p] = so, rd[p] = ro;                               /* back to back; alltoallv refuses one past INT_MAX */
    so += sc[p], ro += rc[p];
  }
  sl_comm_req *q = NULL;
  if (!rc_ && (sl_comm_alltoallv(c, send, sc, sd, recv, rc, rd, dt, &q) != SL_COMM_OK || sl_comm_wait(q) != SL_COMM_OK))
    rc_ = comm_fail(what);
  sl_free(a);
  return rc_;
}

/* rcount[p*n .. p*n+n) := the n int64 EP rank p passed for this rank: one
 * all-to-all of one "row" of n int64 per peer. On a counting communicator
 * (the planner's dry run) nothing moves, and rcount := scount (the balanced
 * routing it assumes); the exchange is still counted. */
static int ep_counts(void *user, const int64_t *scount, int64_t *rcount, int64_t n) {
  sl_comm *c = user;
  int P = sl_comm_size(c);
  int64_t *ones = sl_alloc((size_t)P * sizeof(int64_t), "expert-parallel counts");
  if (!ones) return SL_ENOMEM;
  for (int p = 0; p < P; p++) ones[p] = 1;
  int rc = rows_alltoall(c, scount, ones, rcount, ones, n, SL_I64, "counts exchange");
  sl_free(ones);
  if (!rc && n > 0 && !strcmp(sl_comm_backend(c), "count")) memcpy(rcount, scount, (size_t)(n * P) * sizeof(int64_t));
  return rc;
}

static int ep_alltoallv(void *user, const float *send, const int64_t *scount, float *recv, const int64_t *rcount,
                        int64_t width) {
  return rows_alltoall(user, send, scount, recv, rcount, width, SL_F32, "row all-to-all");
}

sl_ep_group sl_ep_group_over(sl_comm *ep) {
  return (sl_ep_group){
      .rank = sl_comm_rank(ep), .size = sl_comm_size(ep), .user = ep, .counts = ep_counts, .alltoallv = ep_alltoallv};
}

/* ---- device buffers ---------------------------------------------------------- */
int sl_ep_devgroup_init(sl_ep_devgroup *d, sl_comm *host, const sl_ops *ops, sl_kctx *k) {
  memset(d, 0, sizeof *d);
  sl_devcomm_kind kind = sl_backend_device_comm(ops);
  if (kind != SL_DEVCOMM_NCCL)
    return sl_fail(SL_ECOMM,
                   "expert parallel: backend '%s' keeps its buffers in device memory but its registry row names "
                   "no device communicator (%s)",
                   ops->name, sl_devcomm_name(kind));
  if (sl_comm_nccl_create(host, ops->stream(k), &d->dev) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "expert parallel: device communicator: %s", sl_comm_last_error());
  d->host = host;
  d->ops = ops;
  d->k = k;
  return SL_OK;
}

void sl_ep_devgroup_free(sl_ep_devgroup *d) {
  sl_comm_destroy(d->dev);
  memset(d, 0, sizeof *d);
}

static int dev_counts(void *user, const int64_t *scount, int64_t *rcount, int64_t n) {
  return ep_counts(((sl_ep_devgroup *)user)->host, scount, rcount, n);
}

static int dev_alltoallv(void *user, const float *send, const int64_t *scount, float *recv, const int64_t *rcount,
                         int64_t width) {
  return ep_alltoallv(((sl_ep_devgroup *)user)->dev, send, scount, recv, rcount, width);
}

sl_ep_group sl_ep_group_over_device(sl_ep_devgroup *d) {
  return (sl_ep_group){.rank = sl_comm_rank(d->host),
                       .size = sl_comm_size(d->host),
                       .user = d,
                       .counts = dev_counts,
                       .alltoallv = dev_alltoallv};
}
