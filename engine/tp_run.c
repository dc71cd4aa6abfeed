/* engine/tp_run.c — what the trainer does differently under tensor
 * parallelism (--tp T > 1; models/tp.h, docs/architecture.md "Split
 * tensors"): the start-up refusals, the communicator the loss and the
 * evaluation sum over (DP: the T ranks of a TP group compute the same
 * loss), the gradient norm counting each parameter once, and the gather of
 * the T ranks' slices for --save. At T = 1 nothing here runs. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "engine/trainer_internal.h"

int sl_trainer_tp_check(const trainer *t) {
  const sl_train_cfg *c = &t->cfg;
  int T = (int)c->tp;
  if (T == 1) return SL_OK;
  if (t->wsize % T) {
    char ok[256];
    size_t n = 0;
    for (int d = 1; d <= t->wsize && n + 16 < sizeof ok; d++)
      if (t->wsize % d == 0) n += (size_t)snprintf(ok + n, sizeof ok - n, "%s%d", n ? ", " : "", d);
    return sl_fail(SL_EINPUT, "--tp %d does not divide the number of ranks %d (valid --tp values: %s)", T, t->wsize,
                   ok);
  }
  if (t->dev)
    return sl_fail(SL_EINPUT,
                   "--tp %d: tensor parallelism runs on the CPU backend only for now (its collectives "
                   "use host buffers); use --backend cpu or --tp 1",
                   T);
  return SL_OK;
}

sl_comm *sl_trainer_loss_comm(const trainer *t) { return t->cfg.tp > 1 ? t->pmesh->comm[SL_AXIS_DP] : t->world; }

/* The i-th tensor of unit u this rank counts in the norm: a slice several
 * TP ranks hold counts on the first of them. */
static int counted(void *ctx, int u, int i, int64_t *lo, int64_t *hi) {
  const trainer *t = ctx;
  const sl_unit_spec *us = &t->m->units[u];
  for (int k = 0; k < us->ntensors; k++) {
    const sl_tensor_spec *ts = &us->t[k];
    if (t->m->tp_rank % ts->tp_replicas) continue;
    if (i-- == 0) {
      *lo = ts->offset;
      *hi = ts->offset + ts->numel;
      return 1;
    }
  }
  return 0;
}

int sl_trainer_grad_sumsq(trainer *t, double *out) {
  if (t->cfg.tp == 1) return sl_fsdp_grad_sumsq(t->f, out);
  double mine = 0.0, all[4096];
  int T = (int)t->cfg.tp, rc = sl_fsdp_grad_sumsq_part(t->f, counted, t, &mine);
  if (rc) return rc;
  if (sl_comm_allgather_sync(t->pmesh->comm[SL_AXIS_TP], &mine, all, 1, SL_F64) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "tensor parallel gradient norm: %s", sl_comm_last_error());
  double s = 0.0;
  for (int r = 0; r < T; r++) s += all[r]; /* rank order: the same double on every rank */
  *out = s;
  return SL_OK;
}

int sl_trainer_tp_gather(trainer *t, int u, float *flat) {
  int64_t n = t->m->units[u].numel;
  if (sl_comm_allgather_sync(t->pmesh->comm[SL_AXIS_TP], flat + t->m->tp_rank * n, flat, n, SL_F32) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "gathering unit %d over the tensor-parallel group: %s", u, sl_comm_last_error());
  return SL_OK;
}
