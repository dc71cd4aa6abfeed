/* engine/schedule.h — the order of one training step's compute: which
 * micro-batch runs forward or backward through which units, in which
 * activation set, and how the step's gradient norm is reduced.
 *
 * Who owns what in a step (engine/trainer.c drives it):
 *   trainer   the data (a loader per micro-batch), the loss mean over the
 *             step's counted targets, the clip coefficient, the non-finite
 *             policy's state (engine/guard.h: stop or skip, the skip count)
 *             and the optimizer step on the rank's views (offload/optstate,
 *             kernels' adamw), then the next step;
 *   schedule  everything between "the step's micro-batches are known" and
 *             "the step may update": the forward and backward of each
 *             micro-batch through the FSDP runtime (shard/fsdp.h:
 *             fwd_acquire/release, bwd_acquire/release,
 *             begin_micro/end_micro, docs/overlap.md), the model's
 *             activation set of each micro-batch in flight
 *             (models/model.h: sl_model_set_nacts / sl_model_use_acts),
 *             the global gradient norm for every layout (grad_sumsq: DP,
 *             hybrid sharding, TP with or without SP, PP, TP x PP) and the
 *             step's validation over it (sl_schedule_check_step: the norm
 *             and the non-finite check of engine/guard.h).
 * The optimizer stays in the trainer because it is the same for every
 * schedule: each rank steps the views it owns once all gradients are in.
 *
 * "single" (no pipeline; schedule.c): for each micro-batch k of the step:
 * select set 0, load(k), begin_micro, forward units 0..U-1, backward units
 * U-1..0, end_micro. The sum of squares is the runtime's per-unit sums
 * (sl_fsdp_queue_sumsq, fetched with the loss in the step's one download),
 * under TP each tensor counted once over the TP group (engine/tensor_par.h,
 * sl_tpar_queue_sumsq / sl_tpar_grad_sumsq_of). Evaluation (engine/eval.c)
 * runs `forward`; the reference dump (engine/dump.c) runs `run_step` with
 * an after_fwd hook.
 *
 * "pp" (engine/schedule_pp.c, the pipeline executor; a new schedule is a
 * file engine/schedule_NAME.c with its sl_schedule_vt and a row in the
 * registry of schedule.c): sl_schedule_cfg gives it this rank's stage plan
 * (its units, the virtual chunks) and the PP communicator. Per rank it
 *   - asks for as many activation sets as micro-batches in flight (nacts:
 *     1F1B's first stage P, GPipe m), and selects micro-batch k's set before
 *     each of its forward and backward units; the loader must then keep each
 *     set's batch (tokens, targets, seg) in its own buffers until the
 *     micro-batch's backward;
 *   - runs only its stage's units, receiving the input activation before a
 *     forward and sending the output after it (sl_comm_send / sl_comm_recv on
 *     the PP communicator of shard/mesh.h), the reverse for the gradient of
 *     the residual stream in backward; the model's fwd/bwd stay unaware;
 *   - calls begin_micro/end_micro per micro-batch as the runtime's gradient
 *     accumulation requires (the last micro-batch of the step reduces);
 *   - reports loss_sum only on the stage holding the head (0 elsewhere: the
 *     trainer's all-rank sum stays the same number);
 *   - in grad_sumsq, sums the tied embedding's gradient between the first
 *     and the last stage, then gathers the per-unit sums of squares over PP
 *     (under TP each tensor counted once) and adds them in unit order, each
 *     from its owner, then over the shard group, then over TP, so every
 *     rank clips alike.
 * The step's validation is one function for every schedule
 * (sl_schedule_check_step); a zero-bubble schedule that overlaps the
 * optimizer with weight-gradient work would make it an entry of its own.
 */
#ifndef SL_SCHEDULE_H
#define SL_SCHEDULE_H

#include <stdint.h>

#include "engine/guard.h"
#include "models/model.h"
#include "shard/comm.h"
#include "shard/fsdp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Called after unit u's forward of micro-batch k, while u's parameters are
 * still gathered (the dump's logits). */
typedef int (*sl_fwd_hook)(void *hook_user, sl_model *m, int k, int u);

/* What one step gives the schedule. */
typedef struct {
  sl_model *m; /* holds sl_schedule_nacts(s, nmicro) activation sets */
  sl_fsdp *f;
  int nmicro; /* micro-batches of the step (--grad-accum) */
  void *user;
  /* Sets micro-batch k (0..nmicro-1) as the batch of the model's selected
   * activation set (sl_model_set_batch and m->seg, in backend memory, valid
   * until k's backward). Called once per micro-batch, in order k = 0, 1,
   * ..., before k's first forward, on every rank that runs a unit of k (a
   * pipeline's first stage reads the tokens, the last the targets and the
   * loss scale; the trainer's loader counts the step's targets at k = 0). */
  int (*load)(void *user, int k);
  sl_fwd_hook after_fwd; /* optional */
  void *hook_user;
  /* After queue_sumsq and the fetch: this rank's slots from queue_sumsq's
   * slot0 on, on the host; grad_sumsq finishes from them. */
  const double *sumsq_slots;
} sl_step_ctx;

typedef struct {
  double loss_sum; /* sum of the model's loss_sum over the micro-batches whose head forward ran here */
} sl_step_result;

typedef struct sl_schedule sl_schedule;

/* An implementation. Every function is collective over the ranks of the
 * step and returns SL_OK or an SL_E* code with a message. */
typedef struct {
  const char *name;
  /* Activation sets the model needs for a step of nmicro micro-batches. */
  int (*nacts)(const sl_schedule *s, int nmicro);
  /* Forward and backward of every micro-batch of the step: afterwards the
   * runtime holds the step's reduced gradients (sl_fsdp_view .grads). */
  int (*run_step)(sl_schedule *s, const sl_step_ctx *c, sl_step_result *out);
  /* Forward only of every micro-batch (evaluation): no gradient buffer, no
   * reduction; each micro-batch ends with sl_fsdp_end_forward. */
  int (*forward)(sl_schedule *s, const sl_step_ctx *c, sl_step_result *out);
  /* The global sum of squares of the step's gradients, the same on every
   * rank (after run_step, queue_sumsq and the fetch: c->sumsq_slots). */
  int (*grad_sumsq)(sl_schedule *s, const sl_step_ctx *c, double *ss);
  /* Queues this rank's sums of squares into the backend's scalar slots
   * slot0 .. slot0 + m->nunits - 1 (ops scalar_acc; no wait, no comm), for
   * grad_sumsq to finish from c->sumsq_slots once they are fetched: the
   * step's one download (engine/trainer.c). */
  void (*queue_sumsq)(sl_schedule *s, const sl_step_ctx *c, int slot0);
  void (*destroy)(sl_schedule *s); /* the priv state (may be NULL) */
} sl_schedule_vt;

struct sl_schedule {
  const sl_schedule_vt *vt;
  void *priv; /* the implementation's state */
};

typedef struct {
  const char *name; /* "single" | "pp" */
  /* "pp" (engine/schedule_pp.h): this rank's stage plan (borrowed: must
   * outlive the schedule) and the PP communicator of shard/mesh.h */
  const void *pp_plan;
  sl_comm *pp;
  sl_comm *tp; /* the TP group the norm also sums over (NULL or one rank: none); "pp": the boundaries' too */
} sl_schedule_cfg;

/* SL_EINPUT naming the known schedules for an unknown name. */
int sl_schedule_create(const sl_schedule_cfg *cfg, sl_schedule **out);
void sl_schedule_destroy(sl_schedule *s); /* NULL ok */

static inline const char *sl_schedule_name(const sl_schedule *s) { return s->vt->name; }
static inline int sl_schedule_nacts(const sl_schedule *s, int nmicro) { return s->vt->nacts(s, nmicro); }
static inline int sl_schedule_run_step(sl_schedule *s, const sl_step_ctx *c, sl_step_result *out) {
  return s->vt->run_step(s, c, out);
}
/* Forward only: the model's fwd_only is set for the call (its loss_sum the token cross-entropy alone). */
static inline int sl_schedule_forward(sl_schedule *s, const sl_step_ctx *c, sl_step_result *out) {
  c->m->fwd_only = 1;
  int rc = s->vt->forward(s, c, out);
  c->m->fwd_only = 0;
  return rc;
}
static inline int sl_schedule_grad_sumsq(sl_schedule *s, const sl_step_ctx *c, double *ss) {
  return s->vt->grad_sumsq(s, c, ss);
}

/* The step's validation, after run_step, the same for every schedule:
 * *grad_norm := the square root of grad_sumsq (the same double on every
 * rank), then the non-finite check of the step's loss and that norm
 * (sl_guard_step over world: *apply 0 drops the update; g->stop when the
 * policy ends the run). Collective. */
int sl_schedule_check_step(sl_schedule *s, const sl_step_ctx *c, sl_guard *g, sl_comm *world, int64_t step, double loss,
                           double *grad_norm, int *apply);

#ifdef __cplusplus
}
#endif
#endif /* SL_SCHEDULE_H */
