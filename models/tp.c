/* models/tp.c — the tensor-parallel group of T = 1 (models/tp.h). */
#include "models/tp.h"

#include "base/base.h"

static int single_allreduce(void *user, float *buf, int64_t n, sl_tp_op op) { return SL_OK; }
static int single_gather(void *user, const float *in, float *out, int64_t n) {
  return sl_fail(SL_EINTERNAL, "tensor parallelism: a collective of T > 1 was called at T = 1");
}

sl_tp_group sl_tp_single(void) {
  return (sl_tp_group){
      .rank = 0, .size = 1, .allreduce = single_allreduce, .allgather = single_gather, .reducescatter = single_gather};
}
