/* plan/engine_run.h — the engine check: one training step of the engine's
 * own code (models/ sl_model_create, shard/ sl_fsdp) on the counting op
 * table (kernels/count) and a counting communicator (shard/comm_count.c).
 * Nothing is computed and no memory is committed; the arena peaks, the
 * bytes per collective kind and the FLOPs are what the engine's own code
 * asks for, so they cannot drift from a real run (docs/planner.md). */
#ifndef SL_PLAN_ENGINE_RUN_H
#define SL_PLAN_ENGINE_RUN_H

#include <stdint.h>

#include "formats/hfconfig.h"
#include "kernels/count/ops_count.h"
#include "models/model.h"
#include "plan/planner.h"
#include "shard/fsdp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  sl_count_stats step;              /* what the op table counted over the step (forward, backward, AdamW) */
  double model_flops_token;         /* the model's own vt->flops_per_token at seq_len */
  int64_t tokens;                   /* tokens of the step on this rank (micro_batch x seq_len x grad_accum) */
  int64_t nparams;                  /* sum of the units' numel */
  int64_t max_unit;                 /* largest unit's numel (the trainer's load buffer) */
  int tp, dp;                       /* the mesh: T and world / T */
  uint64_t tp_comm[SL_COLL_NKINDS]; /* bytes sent on the TP axis during the step, per kind (0 at T = 1) */
} sl_plan_engine_info;

/* Runs one optimizer step of configuration r as rank `rank` of r->world
 * (every rank of a shard group holds the same sizes; rank 0 is the usual
 * choice). r->tp = T > 1: tensor parallelism as the trainer's mesh lays it
 * out (TP fastest: TP rank rank % T, DP rank rank / T, fsdp over the
 * world / T DP ranks, --shard-group within them); every TP rank holds
 * slices of the same sizes (the model refuses T that does not divide its
 * heads and sizes; a shared GQA KV group and a padded vocabulary slice are
 * the same size on every rank), and rank 0 is the rank whose figures the
 * metrics JSONL reports. Fills out->peak, total_peak, start (bytes held when the step
 * starts), comm / comm_total (the step's bytes per kind, shard + replica
 * groups, as the metrics JSONL counts them), shard_size, replica_size;
 * info may be NULL. The process's arena counters are left as found.
 * Uses of r: world, shard_group, zero, micro_batch, seq_len, grad_accum,
 * tp, sequence_parallel, ac, prefetch, prefetch_bytes, reshard_after_forward, sync_accum,
 * param_bytes and reduce_bytes (4 fp32 | 2 bf16), align. */
int sl_plan_engine_run(const sl_model_config *cfg, const sl_plan_run *r, int rank, sl_plan_mem *out,
                       sl_plan_engine_info *info);

/* One pipeline stage of the step (plan/ cannot call the engine's executor:
 * engine/pp_check.c supplies the stage plan and the step driver, this file
 * the model, the FSDP runtime and the optimizer state around them, as the
 * trainer creates them for a stage). */
typedef struct {
  int pp;                     /* P: the mesh is TP x DP x PP (TP fastest, then DP); DP = world / (T x P) */
  int nunits;                 /* the model's units */
  const unsigned char *local; /* (nunits) 1: this stage computes the unit (the model's activations) */
  const unsigned char *held;  /* (nunits) 1: it holds the parameters (fsdp numel 0 and no optimizer state otherwise) */
  void *user;
  /* after the model, fsdp and the optimizer state exist, before the step:
   * the activation sets and whatever the driver needs; tp: the counting TP
   * communicator of the stage's TP group (NULL at T = 1) */
  int (*begin)(void *user, sl_model *m, sl_fsdp *f, sl_comm *tp);
  /* forward + backward of the step's nmicro micro-batches and the global
   * sum of squares of the gradients (the schedule's) */
  int (*step)(void *user, sl_model *m, sl_fsdp *f, int nmicro, double *ss);
  void (*end)(void *user); /* frees what begin made, before the model goes (may be NULL) */
} sl_plan_stage;

/* sl_plan_engine_run for the stage that `rank` (a world rank of the TP x DP
 * x PP mesh) belongs to; st NULL: sl_plan_engine_run. */
int sl_plan_engine_run_stage(const sl_model_config *cfg, const sl_plan_run *r, int rank, const sl_plan_stage *st,
                             sl_plan_mem *out, sl_plan_engine_info *info);

#ifdef __cplusplus
}
#endif
#endif /* SL_PLAN_ENGINE_RUN_H */
