/* shard/tp.c — the sl_tp_group hooks over a communicator (shard/tp.h):
 * sum all-reduce, max all-reduce (an all-gather then the element-wise max
 * in rank order: comm.h reduces only sums), all-gather, reduce-scatter. */
#include "shard/tp.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static int comm_fail(const char *what) {
  return sl_fail(SL_ECOMM, "tensor parallel %s: %s", what, sl_comm_last_error());
}

static int tp_allreduce(void *user, float *buf, int64_t n, sl_tp_op op) {
  sl_comm *c = user;
  if (op == SL_TP_SUM) return sl_comm_allreduce_sync(c, buf, n, SL_F32) == SL_COMM_OK ? SL_OK : comm_fail("all-reduce");
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
