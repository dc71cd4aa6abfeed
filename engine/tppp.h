/* engine/tppp.h — tensor parallelism and pipeline parallelism together
 * (--tp T > 1 with --pp P > 1; docs/pipeline.md, "Tensor x pipeline
 * parallelism"). What the TP and PP halves share:
 *   - which parts of a unit's gradient a TP rank counts in the norm (a
 *     tensor every TP rank holds whole counts on TP rank 0 only);
 *   - the per-unit sums of squares the pipeline's norm gathers over its
 *     stages (the counted parts under TP, everything at T = 1);
 *   - the sum of one double per TP rank, in rank order;
 *   - the communicator the step's loss and the evaluation sum over: the
 *     ranks of one TP coordinate (DP x PP), each micro-batch's loss counted
 *     once (the T ranks of a TP group compute the same loss).
 * At T = 1 or P = 1 the trainer takes the existing paths. */
#ifndef SL_TPPP_H
#define SL_TPPP_H

#include <stdint.h>

#include "models/model.h"
#include "shard/comm.h"
#include "shard/fsdp.h"
#include "shard/mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An sl_fsdp_counted_fn over a model (ctx: const sl_model *): the i-th
 * tensor of unit u this TP rank counts, as [lo, hi) of the unit's flat. */
int sl_tp_counted(void *model, int u, int i, int64_t *lo, int64_t *hi);

/* This rank's sum of squares per unit (no comm): sl_fsdp_unit_sumsq at
 * m->tp_size 1, the counted tensors only above. */
void sl_tppp_unit_sumsq(sl_fsdp *f, const sl_model *m, double *per_unit);

/* *out := the sum over the ranks of tp of their `mine`, in rank order (the
 * same double on every rank); tp NULL or of one rank: mine. Collective. */
int sl_tppp_tp_sum(sl_comm *tp, double mine, double *out);

/* The ranks of this rank's TP coordinate (all DP and PP coordinates), in
 * world rank order: *out owned by the caller (sl_comm_destroy). Collective
 * over the mesh's world. */
int sl_tppp_loss_comm(const sl_par_mesh *mesh, sl_comm **out);

#ifdef __cplusplus
}
#endif
#endif /* SL_TPPP_H */
