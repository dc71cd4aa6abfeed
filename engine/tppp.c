/* engine/tppp.c — what tensor and pipeline parallelism share (see
 * tppp.h): the counted parts of the gradient norm and the DP x PP
 * communicator of the loss. */
#include "engine/tppp.h"

#include <stdlib.h>

#include "base/base.h"

int sl_tp_counted(void *model, int u, int i, int64_t *lo, int64_t *hi) {
  const sl_model *m = model;
  const sl_unit_spec *us = &m->units[u];
  for (int k = 0; k < us->ntensors; k++) {
    const sl_tensor_spec *ts = &us->t[k];
    if (m->tp_rank % ts->tp_replicas) continue; /* held by several TP ranks: counted on the first */
    if (i-- == 0) {
      *lo = ts->offset;
      *hi = ts->offset + ts->numel;
      return 1;
    }
  }
  return 0;
}

void sl_tppp_unit_sumsq(sl_fsdp *f, const sl_model *m, double *per_unit) {
  if (m->tp_size > 1) sl_fsdp_unit_sumsq_part(f, sl_tp_counted, (void *)m, per_unit);
  else sl_fsdp_unit_sumsq(f, per_unit);
}

int sl_tppp_tp_sum(sl_comm *tp, double mine, double *out) {
  int T = tp ? sl_comm_size(tp) : 1;
  if (T <= 1) {
    *out = mine;
    return SL_OK;
  }
  double *all = calloc((size_t)T, sizeof(double));
  if (!all) return sl_fail(SL_ENOMEM, "out of memory");
  int rc = SL_OK;
  if (sl_comm_allgather_sync(tp, &mine, all, 1, SL_F64) != SL_COMM_OK) {
    rc = sl_fail(SL_ECOMM, "tensor parallel gradient norm: %s", sl_comm_last_error());
  } else {
    double s = 0.0;
    for (int r = 0; r < T; r++) s += all[r]; /* rank order: the same double on every rank */
    *out = s;
  }
  free(all);
  return rc;
}

int sl_tppp_loss_comm(const sl_par_mesh *mesh, sl_comm **out) {
  *out = NULL;
  if (sl_comm_split(mesh->world, mesh->axis[SL_AXIS_TP].coord, sl_comm_rank(mesh->world), out) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "splitting the loss communicator (one TP coordinate): %s", sl_comm_last_error());
  return SL_OK;
}
