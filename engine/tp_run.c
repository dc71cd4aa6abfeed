/* engine/tp_run.c — what the trainer does differently under tensor
 * parallelism (--tp T > 1; models/tp.h, docs/architecture.md "Split
 * tensors"): the start-up refusals, the communicator the loss and the
 * evaluation sum over (DP: the T ranks of a TP group compute the same
 * loss), the gradient norm counting each parameter once, and the gather of
 * the T ranks' slices for --save. At T = 1 nothing here runs. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "engine/tppp.h"
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

/* DP at T > 1 (a TP group's ranks hold the same loss); under TP x PP the
 * ranks of this TP coordinate over DP and PP (engine/tppp.h) */
sl_comm *sl_trainer_loss_comm(const trainer *t) {
  if (t->par.tppp_loss) return t->par.tppp_loss;
  return t->cfg.tp > 1 ? t->par.pmesh->group[SL_GROUP_DP].comm : t->world;
}

int sl_trainer_grad_sumsq(trainer *t, double *out) {
  if (t->cfg.tp == 1) return sl_fsdp_grad_sumsq(t->f, out);
  double mine = 0.0;
  int rc = sl_fsdp_grad_sumsq_part(t->f, sl_tp_counted, t->m, &mine);
  return rc ? rc : sl_tppp_tp_sum(t->par.pmesh->axis[SL_AXIS_TP].comm, mine, out);
}

int sl_trainer_tp_gather(trainer *t, int u, float *flat) {
  int64_t n = t->m->units[u].numel;
  if (sl_comm_allgather_sync(t->par.pmesh->axis[SL_AXIS_TP].comm, flat + t->m->tp_rank * n, flat, n, SL_F32) !=
      SL_COMM_OK)
    return sl_fail(SL_ECOMM, "gathering unit %d over the tensor-parallel group: %s", u, sl_comm_last_error());
  return SL_OK;
}
