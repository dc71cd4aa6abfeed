/* engine/dryrun.h — the engine's dry run: the trainer itself (its setup
 * steps and one optimizer step, engine/trainer.c) on the counting op table
 * (kernels/count) and a counting world (shard/comm_count.c), as one rank
 * of a world of any size. Nothing is computed and no memory is committed;
 * the arena peaks, the bytes per collective kind and the FLOPs are what the
 * engine's own code asks for, so they cannot drift from a real run.
 * shardlm plan --engine-check (per pipeline stage under --pp) and the
 * start-up memory check (engine/precheck.c) read it; docs/planner.md. */
#ifndef SL_ENGINE_DRYRUN_H
#define SL_ENGINE_DRYRUN_H

#include <stdint.h>

#include "base/base.h"
#include "formats/hfconfig.h"
#include "formats/traincfg.h"
#include "kernels/count/ops_count.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { SL_DRY_MAX_STAGES = 64 };

/* What one rank's step asks for. */
typedef struct {
  int64_t peak[SL_ARENA_COUNT];     /* high-water bytes per arena over the step */
  int64_t total_peak;               /* high-water of the sum of arenas */
  int64_t start[SL_ARENA_COUNT];    /* bytes held when the step starts */
  uint64_t comm[SL_COLL_NKINDS];    /* bytes of the step per kind, shard + replica groups (the metrics' counter) */
  uint64_t comm_total;              /* sent bytes of comm (every kind but receives) */
  int shard_size, replica_size;     /* fsdp's groups */
  sl_count_stats step;              /* what the op table counted over the step (forward, backward, AdamW) */
  double model_flops_token;         /* the model's own vt->flops_per_token at seq_len */
  int64_t tokens;                   /* tokens of the step on this rank (micro_batch x seq_len x grad_accum) */
  int64_t nparams;                  /* sum of the numel of the units this rank holds */
  int64_t max_unit;                 /* largest unit's numel (the trainer's load buffer) */
  int tp, dp, pp;                   /* the mesh */
  uint64_t tp_comm[SL_COLL_NKINDS]; /* bytes sent on the TP axis during the step, per kind (0 at T = 1) */
  /* --pp > 1: this rank's pipeline stage */
  int stage;                       /* PP coordinate */
  int nsets;                       /* activation sets: the most micro-batches in flight on the stage */
  int ncomputed;                   /* units the stage computes (all chunks) */
  uint64_t sends, recvs;           /* point-to-point operations on the PP communicator in the step */
  uint64_t send_bytes, recv_bytes; /* bytes sent / received on the PP communicator in the step */
  int layers[SL_DRY_MAX_STAGES];   /* decoder layers of each virtual stage */
  int nstages;                     /* P x V */
} sl_dry_result;

/* Sets up the run cfg as rank `rank` of `world_size` ranks (the mesh of
 * cfg->tp and cfg->pp over them, TP fastest, then DP, then PP) with model
 * config mc, and runs its first optimizer step. What differs from
 * shardlm train: the backend is "count", the optimizer state stays in
 * backend memory (tier none; --offload-* are ignored), the batch is zeros
 * (no --data is read), no weights are read, nothing is written and no
 * start-up check runs. Refuses what train refuses (a mesh that does not
 * divide, a pipeline schedule's limits, ...) with train's message. The
 * process's arena counters are left as found. */
int sl_train_dry_run(const sl_train_cfg *cfg, const sl_model_config *mc, int world_size, int rank, sl_dry_result *out);

#ifdef __cplusplus
}
#endif
#endif /* SL_ENGINE_DRYRUN_H */
