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
#include "plan/planner.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  sl_count_stats step;       /* what the op table counted over the step (forward, backward, AdamW) */
  double model_flops_token;  /* the model's own vt->flops_per_token at seq_len */
  int64_t tokens;            /* tokens of the step on this rank (micro_batch x seq_len x grad_accum) */
  int64_t nparams;           /* sum of the units' numel */
  int64_t max_unit;          /* largest unit's numel (the trainer's load buffer) */
} sl_plan_engine_info;

/* Runs one optimizer step of configuration r as rank `rank` of r->world
 * (every rank of a shard group holds the same sizes; rank 0 is the usual
 * choice). Fills out->peak, total_peak, start (bytes held when the step
 * starts), comm / comm_total (the step's bytes per kind, shard + replica
 * groups, as the metrics JSONL counts them), shard_size, replica_size;
 * info may be NULL. The process's arena counters are left as found.
 * Uses of r: world, shard_group, zero, micro_batch, seq_len, grad_accum,
 * ac, prefetch, prefetch_bytes, reshard_after_forward, sync_accum,
 * param_bytes and reduce_bytes (4 fp32 | 2 bf16), align. */
int sl_plan_engine_run(const sl_model_config *cfg, const sl_plan_run *r, int rank, sl_plan_mem *out,
                       sl_plan_engine_info *info);

#ifdef __cplusplus
}
#endif
#endif /* SL_PLAN_ENGINE_RUN_H */
