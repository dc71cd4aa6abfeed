/* engine/pp_check.h — the planner's engine check of one pipeline stage
 * (shardlm plan --engine-check --pp P): the trainer's stage plan
 * (sl_pp_plan_for_run) and the "pp" executor (engine/schedule_pp.c) run on
 * the counting op table and counting communicators, inside the model, FSDP
 * runtime and optimizer state of plan/engine_run.c. It lives in engine/
 * because plan/ may not call the executor (the layering of
 * docs/architecture.md); plan/engine_run.h takes it as a step driver
 * (sl_plan_stage). docs/planner.md, "The engine check per pipeline stage".
 */
#ifndef SL_ENGINE_PP_CHECK_H
#define SL_ENGINE_PP_CHECK_H

#include <stdint.h>

#include "formats/hfconfig.h"
#include "plan/engine_run.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The pipeline flags (shardlm train's names). */
typedef struct {
  int pp;             /* --pp P >= 2 */
  const char *kind;   /* --pp-schedule */
  int virt;           /* --pp-virtual V (1: none) */
  const char *layout; /* --pp-layout ("" or NULL: balanced) */
} sl_pp_check_cfg;

/* What one stage's step measures besides sl_plan_mem. */
typedef struct {
  int stage;             /* PP coordinate */
  int nsets;             /* activation sets: the most micro-batches in flight on the stage */
  int ncomputed;         /* units the stage computes (all chunks) */
  uint64_t sends, recvs; /* point-to-point operations on the PP communicator in the step */
  uint64_t send_bytes;   /* bytes sent on the PP communicator in the step (the norm's tied transfer too) */
  uint64_t recv_bytes;   /* bytes received */
  int layers[64];        /* decoder layers of each virtual stage (P*V <= 64) */
  int nstages;           /* P*V */
} sl_pp_stage_info;

/* One optimizer step of stage `stage` (DP rank 0, TP rank 0 of it) of the
 * run r (r->world = T x DP x P ranks) with pipeline flags pc: fills mem and
 * info (plan/engine_run.h) and pi. SL_EINPUT with train's message for what
 * train refuses (m < P under 1f1b, a bad layout, zb1p, ...). */
int sl_pp_engine_check(const sl_model_config *mc, const sl_plan_run *r, const sl_pp_check_cfg *pc, int stage,
                       sl_plan_mem *mem, sl_plan_engine_info *info, sl_pp_stage_info *pi);

#ifdef __cplusplus
}
#endif
#endif /* SL_ENGINE_PP_CHECK_H */
