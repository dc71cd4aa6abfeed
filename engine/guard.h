/* engine/guard.h — the non-finite policy of a training run (docs/cli.md,
 * README "Failure behaviour"): every step's loss and gradient norm are
 * checked on every rank and the ranks agree (the schedule's step validation
 * applies sl_guard_step to its norm: engine/schedule.h,
 * sl_schedule_check_step); --on-nonfinite stop ends the run (SL_ENONFINITE,
 * exit 4) naming the step; skip drops the step's update and stops after
 * --max-skips consecutive skips. Optimizer state is checked
 * before it is written (checkpoint, --save): a non-finite state is never
 * saved. */
#ifndef SL_GUARD_H
#define SL_GUARD_H

#include <stdint.h>

#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int skip;            /* 0: stop at the first non-finite step; 1: skip its update */
  int64_t max_skips;   /* consecutive skips that end the run (skip policy) */
  int64_t consecutive; /* skips in a row so far */
  int64_t total;       /* skipped steps over the run (metrics "skipped_steps") */
  int stop;            /* the run must stop after this step's metrics line */
  char why[512];       /* the reason, for the final message */
} sl_guard;

/* policy: "stop" | "skip"; max_skips >= 1. SL_EINPUT naming the flag. */
int sl_guard_init(sl_guard *g, const char *policy, int64_t max_skips);
/* Collective over world. After step `step` (0-based) computed its loss and
 * gradient norm: *apply = 1 when both are finite on every rank, else 0 (drop
 * the update). Sets g->stop when the policy ends the run. */
int sl_guard_step(sl_guard *g, sl_comm *world, int64_t step, double loss, double grad_norm, int *apply);
/* SL_ENONFINITE with the reason when g->stop is set, else SL_OK. */
int sl_guard_verdict(const sl_guard *g);
/* Collective over world. Checks nunits x count[u] floats of each of nfields
 * arrays (fields[f][u], NULL arrays skipped) for NaN/inf; SL_ENONFINITE on
 * every rank when any rank found one, naming `what` and the step. */
int sl_guard_check_state(sl_comm *world, float **const *fields, int nfields, int nunits, const int64_t *count,
                         int64_t step, const char *what);
/* Tests: SL_FAULT_NONFINITE=S1[,S2...] turns this rank's loss sum of those
 * (1-based) steps into NaN; SL_FAULT_NONFINITE_RANK=r limits it to rank r. */
double sl_guard_fault(sl_comm *world, int64_t step, double local_loss);
/* A JSON value for x: "%.9g", or null when x is not finite. buf: >= 32 bytes. */
const char *sl_guard_json(char *buf, double x);

#ifdef __cplusplus
}
#endif
#endif /* SL_GUARD_H */
