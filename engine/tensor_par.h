/* engine/tensor_par.h — what tensor parallelism (--tp T > 1; models/tp.h,
 * docs/architecture.md "Split tensors") means to the engine, in one place:
 *   - the start-up refusals of --tp;
 *   - the ranks the step's loss and the evaluation sum over: one TP
 *     coordinate (the T ranks of a TP group compute the same loss), that is
 *     the world at T = 1, the DP axis at P = 1, a split of the world under
 *     TP x PP (docs/pipeline.md, "Tensor x pipeline parallelism");
 *   - the model's TP hooks over the mesh's TP axis;
 *   - which parts of a unit's gradient a TP rank counts in the norm (a
 *     tensor several TP ranks hold counts on the first of them: tp_rank %
 *     tp_replicas == 0) and the sum of one double per TP rank, in rank
 *     order: the schedules' gradient norm (engine/schedule.c, "single";
 *     engine/schedule_pp.c, "pp");
 *   - the gather of the T ranks' unit flats for --save;
 *   - checkpoints, which hold every unit in the whole (T = 1) layout
 *     whatever the TP degree (docs/checkpoint.md).
 * At T = 1 each function takes the plain path or does nothing. */
#ifndef SL_TENSOR_PAR_H
#define SL_TENSOR_PAR_H

#include <stdint.h>

#include "base/tp_group.h"
#include "engine/checkpoint.h"
#include "formats/ckpt_io.h"
#include "models/model.h"
#include "shard/comm.h"
#include "shard/fsdp.h"
#include "shard/mesh.h"
#include "shard/tp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A run's tensor parallelism (the trainer's; zeroed: not set up). */
typedef struct {
  int T;         /* TP ranks (--tp; 1: none) */
  sl_comm *comm; /* the mesh's TP axis (borrowed) */
  sl_comm *loss; /* the ranks of this rank's TP coordinate: the loss's and the evaluation's sum */
  sl_comm *own;  /* TP x PP: the split `loss` is (owned); NULL otherwise (loss borrowed from the mesh) */
  /* a device backend at T > 1: the TP axis's device twin (NCCL) the model's
   * hooks run on; comm keeps the host scalars and the host gathers */
  sl_tp_devgroup dg;
} sl_tpar;

/* Start-up refusals of --tp T over wsize ranks: SL_EINPUT naming the valid
 * values. */
int sl_tpar_check(int T, int wsize);
/* tp over the mesh of a run with T TP and P PP ranks on backend ops (a
 * device backend also gets the TP axis's device communicator). Collective
 * over the mesh's world (the split of the loss's ranks under TP x PP) and
 * the TP axis. */
int sl_tpar_init(sl_tpar *tp, const sl_par_mesh *mesh, int T, int P, const sl_ops *ops, sl_kctx *k);
void sl_tpar_free(sl_tpar *tp); /* zeroed ok */
/* The hooks the model's TP collectives go through (models/tp.h): the TP
 * axis at T > 1, the identity otherwise. */
sl_tp_group sl_tpar_hooks(sl_tpar *tp);
/* The TP axis's counters: the host communicator's plus, on a device
 * backend, its device twin's (where the model's collectives run). */
void sl_tpar_stats(const sl_tpar *tp, sl_comm_stats *out);

/* ---- the gradient norm (the schedules') ---- */
/* The global sum of squares of a step without pipeline, in two halves with
 * the step's one download between them: the sums of squares queued into
 * the backend's scalar slots from slot0 on (sl_fsdp_queue_sumsq: at T = 1
 * one slot per unit, under TP this rank's counted tensors in one running
 * sum in slot0), no wait, no comm; then, from those slots fetched to the
 * host (slots[0] = slot0's), the per-unit sums in unit order over the
 * shard group (sl_fsdp_group_sums), or under TP the running sum over the
 * shard group and then over tp in rank order. Collective over the shard
 * group and tp. */
void sl_tpar_queue_sumsq(sl_fsdp *f, const sl_model *m, sl_comm *tp, int slot0);
int sl_tpar_grad_sumsq_of(sl_fsdp *f, sl_comm *tp, const double *slots, double *out);
/* This rank's sum of squares per unit (every element at m->tp_size 1, the
 * counted tensors only above) queued into the backend's scalar slots
 * slot0 + u (ops scalar_acc; no wait, no comm): the pipeline gathers them
 * over its stages once fetched. */
void sl_tpar_queue_unit_sumsq(sl_fsdp *f, const sl_model *m, int slot0);
/* *out := the sum over the ranks of tp of their `mine`, in rank order (the
 * same double on every rank); tp NULL or of one rank: mine. Collective. */
int sl_tpar_sum(sl_comm *tp, double mine, double *out);

/* ---- saving ---- */
/* Unit u's flats of every TP rank, rank after rank, into flat (T x numel)
 * from this rank's at flat + m->tp_rank * numel; nothing at T = 1.
 * Collective over the TP axis. */
int sl_tpar_gather_unit(const sl_tpar *tp, const sl_model *m, int u, float *flat);

/* ---- checkpoints ---- */
/* 1 when st->tp has more than one rank: the units go in the whole layout. */
int sl_tpar_ckpt_on(const sl_ckpt_state *st);
/* Collective over world: each unit's master, m and v gathered over DP (the
 * runtime's gather of a view) and TP and written whole into wr (opened on
 * tmp) by world rank 0, or under pipeline parallelism (st->owns) by each
 * stage's writer (st->stage_writer) for its stage's units. */
int sl_tpar_ckpt_write(const sl_ckpt_state *st, sl_ckio_writer *wr, const char *tmp);
/* This rank's view of unit u, kind k (0 master, 1 m, 2 v) from the whole
 * unit in dir (man: its manifest). */
int sl_tpar_ckpt_read(const char *dir, const sl_ckio_manifest *man, const sl_ckpt_state *st, int u, int k, float *dst);

#ifdef __cplusplus
}
#endif
#endif /* SL_TENSOR_PAR_H */
