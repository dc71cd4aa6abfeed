/* shard/tp.c — the sl_tp_group hooks over a communicator (shard/tp.h):
 * sum all-reduce, max all-reduce (an all-gather then the element-wise max
 * in rank order: comm.h reduces only sums), all-gather, reduce-scatter;
 * on host buffers (MPI, self) or on device buffers (the device twin). */
#include "shard/tp.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/registry.h"

static int comm_fail(const char *what) {
  return sl_fail(SL_ECOMM, "tensor parallel %s: %s", what, sl_comm_last_error());
}

/* Host buf (n) := the element-wise max over the ranks of c. */
static int host_max(sl_comm *c, float *buf, int64_t n) {
  int T = sl_comm_size(c);
  float *all = sl_alloc((size_t)(n * T) * 4, "tensor-parallel max");
  if (!all) return SL_ENOMEM;
  int rc = sl_comm_allgather_sync(c, buf, all, n, SL_F32) == SL_COMM_OK ? SL_OK : comm_fail("max all-reduce");
  /* a counting communicator (the planner's dry run) moved nothing: the rows gathered are no data to take a max of */
  int moved = strcmp(sl_comm_backend(c), "count") != 0;
  for (int r = 0; r < T && !rc && moved; r++)
    for (int64_t i = 0; i < n; i++)
      if (all[r * n + i] > buf[i]) buf[i] = all[r * n + i];
  sl_free(all);
  return rc;
}

static int tp_allreduce(void *user, float *buf, int64_t n, sl_tp_op op) {
  sl_comm *c = user;
  if (op == SL_TP_SUM) return sl_comm_allreduce_sync(c, buf, n, SL_F32) == SL_COMM_OK ? SL_OK : comm_fail("all-reduce");
  return host_max(c, buf, n);
}

static int tp_allgather(void *user, const float *in, float *out, int64_t n) {
  return sl_comm_allgather_sync(user, in, out, n, SL_F32) == SL_COMM_OK ? SL_OK : comm_fail("all-gather");
}

static int tp_reducescatter(void *user, const float *in, float *out, int64_t n) {
  sl_comm_req *req = NULL;
  if (sl_comm_reduce_scatter(user, in, out, n, SL_F32, &req) != SL_COMM_OK || sl_comm_wait(req) != SL_COMM_OK)
    return comm_fail("reduce-scatter");
  return SL_OK;
}

sl_tp_group sl_tp_group_over(sl_comm *tp) {
  return (sl_tp_group){.rank = sl_comm_rank(tp),
                       .size = sl_comm_size(tp),
                       .user = tp,
                       .allreduce = tp_allreduce,
                       .allgather = tp_allgather,
                       .reducescatter = tp_reducescatter};
}

/* ---- device buffers ---------------------------------------------------------- */
int sl_tp_devgroup_init(sl_tp_devgroup *d, sl_comm *host, const sl_ops *ops, sl_kctx *k) {
  memset(d, 0, sizeof *d);
  sl_devcomm_kind kind = sl_backend_device_comm(ops);
  if (kind != SL_DEVCOMM_NCCL)
    return sl_fail(SL_ECOMM,
                   "tensor parallel: backend '%s' keeps its buffers in device memory but its registry row names "
                   "no device communicator (%s)",
                   ops->name, sl_devcomm_name(kind));
  if (sl_comm_nccl_create(host, ops->stream(k), &d->dev) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "tensor parallel: device communicator: %s", sl_comm_last_error());
  d->host = host;
  d->ops = ops;
  d->k = k;
  return SL_OK;
}

void sl_tp_devgroup_free(sl_tp_devgroup *d) {
  sl_comm_destroy(d->dev);
  memset(d, 0, sizeof *d);
}

/* Completes a collective on device buffers: the compute stream waits for it on the device
 * (sl_comm_wait_stream); the model reaches the buffers only through kernels on that stream, the op
 * table's copies on it and collectives issued later (which wait for it at issue). */
static int dev_done(sl_tp_devgroup *d, int issued, sl_comm_req **req, const char *what) {
  if (issued != SL_COMM_OK || sl_comm_wait_stream(*req, d->ops->stream(d->k)) != SL_COMM_OK) return comm_fail(what);
  return SL_OK;
}

static int dev_allreduce(void *user, float *buf, int64_t n, sl_tp_op op) {
  sl_tp_devgroup *d = user;
  sl_comm_req *q = NULL;
  if (op == SL_TP_SUM) return dev_done(d, sl_comm_allreduce(d->dev, buf, n, SL_F32, &q), &q, "all-reduce");
  float *h = sl_alloc((size_t)n * 4, "tensor-parallel max staging");
  if (!h) return SL_ENOMEM;
  d->ops->download(d->k, h, buf, (size_t)n * 4); /* returns once h is filled (kernels.h) */
  int rc = host_max(d->host, h, n);
  if (!rc) d->ops->upload(d->k, buf, h, (size_t)n * 4); /* returns once h is consumed */
  sl_free(h);
  return rc;
}

static int dev_allgather(void *user, const float *in, float *out, int64_t n) {
  sl_tp_devgroup *d = user;
  sl_comm_req *q = NULL;
  return dev_done(d, sl_comm_allgather(d->dev, in, out, n, SL_F32, &q), &q, "all-gather");
}

static int dev_reducescatter(void *user, const float *in, float *out, int64_t n) {
  sl_tp_devgroup *d = user;
  sl_comm_req *q = NULL;
  return dev_done(d, sl_comm_reduce_scatter(d->dev, in, out, n, SL_F32, &q), &q, "reduce-scatter");
}

sl_tp_group sl_tp_group_over_device(sl_tp_devgroup *d) {
  return (sl_tp_group){.rank = sl_comm_rank(d->host),
                       .size = sl_comm_size(d->host),
                       .user = d,
                       .allreduce = dev_allreduce,
                       .allgather = dev_allgather,
                       .reducescatter = dev_reducescatter};
}
