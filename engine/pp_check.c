/* engine/pp_check.c — the engine check of one pipeline stage
 * (engine/pp_check.h): the stage plan from sl_pp_plan_for_run (the
 * trainer's, with its refusals), the "pp" schedule of engine/schedule.c
 * over a counting PP communicator of P ranks (shard/comm_count.c: a send or
 * a receive is accounted and completes at once, moving nothing), and the
 * trainer's step protocol (run_step, then the schedule's gradient norm) as
 * the step driver of plan/engine_run.c. The loader selects each activation
 * set's batch as the trainer's set_batch does. */
#include "engine/pp_check.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/schedule.h"
#include "engine/schedule_pp.h"
#include "formats/traincfg.h"
#include "shard/comm.h"

typedef struct {
  sl_pp_plan *plan;
  sl_comm *pp; /* counting, P ranks, this stage's coordinate */
  sl_schedule *sched;
  sl_model *m;
  int32_t *tok; /* (nsets x B*T) the batch of each activation set (the counting table keeps nothing) */
  int64_t BT;
  int nsets;
  sl_comm_stats before, after; /* the PP communicator around the step */
} drv;

static int drv_load(void *user, int k) {
  drv *d = user;
  (void)k;
  int64_t at = d->nsets > 1 ? d->m->act * d->BT : 0; /* the selected set's own buffers, as the trainer's set_batch */
  sl_model_set_batch(d->m, d->tok + at, d->tok + at, 1.0f);
  return SL_OK;
}

static int drv_begin(void *user, sl_model *m, sl_fsdp *f, sl_comm *tp) {
  drv *d = user;
  (void)f;
  d->m = m;
  sl_schedule_cfg sc = {.name = "pp", .pp_plan = d->plan, .pp = d->pp, .tp = tp}; /* the TP norm, as the trainer's */
  int rc = sl_schedule_create(&sc, &d->sched);
  if (!rc) d->nsets = sl_schedule_nacts(d->sched, d->plan->sched.spec.m);
  if (!rc) rc = sl_model_set_nacts(m, d->nsets);
  if (!rc && !(d->tok = m->ops->alloc(m->k, (size_t)(d->BT * d->nsets) * 4))) rc = SL_ENOMEM;
  return rc;
}

static int drv_step(void *user, sl_model *m, sl_fsdp *f, int nmicro, double *ss) {
  drv *d = user;
  sl_step_ctx c = {.m = m, .f = f, .nmicro = nmicro, .user = d, .load = drv_load};
  sl_step_result res;
  sl_comm_get_stats(d->pp, &d->before);
  int rc = sl_schedule_run_step(d->sched, &c, &res);
  if (!rc) rc = sl_schedule_grad_sumsq(d->sched, &c, ss);
  sl_comm_get_stats(d->pp, &d->after);
  return rc;
}

static void drv_end(void *user) {
  drv *d = user;
  sl_schedule_destroy(d->sched); /* its staging buffers, through the model's ops */
  d->sched = NULL;
  if (d->tok) d->m->ops->free(d->m->k, d->tok);
  d->tok = NULL;
}

int sl_pp_engine_check(const sl_model_config *mc, const sl_plan_run *r, const sl_pp_check_cfg *pc, int stage,
                       sl_plan_mem *mem, sl_plan_engine_info *info, sl_pp_stage_info *pi) {
  memset(pi, 0, sizeof *pi);
  int T = r->tp > 1 ? r->tp : 1, P = pc->pp;
  if (P < 2) return sl_fail(SL_EINPUT, "engine check: --pp %d: a pipeline needs P >= 2", P);
  if (stage < 0 || stage >= P) return sl_fail(SL_EINPUT, "engine check: stage %d of --pp %d", stage, P);
  if (r->world < 1 || r->world % (T * P))
    return sl_fail(SL_EINPUT, "--tp %d x --pp %d does not divide the number of ranks %d", T, P, r->world);
  sl_train_cfg tc; /* the flags the trainer's stage plan reads */
  sl_train_cfg_defaults(&tc);
  tc.pp = P;
  tc.pp_virtual = pc->virt > 0 ? pc->virt : 1;
  tc.tp = T;
  tc.sequence_parallel = r->sequence_parallel;
  tc.grad_accum = r->grad_accum;
  tc.micro_batch = r->micro_batch;
  tc.seq_len = r->seq_len;
  tc.no_sync_accum = !r->sync_accum;
  snprintf(tc.pp_schedule, sizeof tc.pp_schedule, "%s", pc->kind ? pc->kind : tc.pp_schedule);
  snprintf(tc.pp_layout, sizeof tc.pp_layout, "%s", pc->layout ? pc->layout : "");
  drv d;
  memset(&d, 0, sizeof d);
  d.BT = r->micro_batch * r->seq_len;
  int rc = sl_pp_plan_for_run(&tc, mc, stage, 0, &d.plan);
  if (!rc && !d.plan) rc = sl_fail(SL_EINTERNAL, "engine check: no stage plan at --pp %d", P);
  if (!rc && d.plan->S > (int)(sizeof pi->layers / sizeof pi->layers[0]))
    rc = sl_fail(SL_EINPUT, "engine check: %d virtual stages (at most 64)", d.plan->S);
  if (!rc && sl_comm_count_create(P, stage, NULL, NULL, &d.pp) != SL_COMM_OK)
    rc = sl_fail(SL_ECOMM, "engine check: %s", sl_comm_last_error());
  if (!rc) {
    sl_plan_stage st = {.pp = P,
                        .nunits = d.plan->nunits,
                        .local = d.plan->local,
                        .held = d.plan->held,
                        .user = &d,
                        .begin = drv_begin,
                        .step = drv_step,
                        .end = drv_end};
    /* world rank of (TP 0, DP 0, PP stage): TP fastest, then DP, then PP (shard/mesh.c) */
    rc = sl_plan_engine_run_stage(mc, r, stage * (r->world / P), &st, mem, info);
  }
  if (!rc) {
    const sl_pp_plan *p = d.plan;
    pi->stage = stage;
    pi->nsets = d.nsets;
    for (int u = 0; u < p->nunits; u++) pi->ncomputed += p->local[u];
    pi->sends = d.after.calls[SL_COLL_SEND] - d.before.calls[SL_COLL_SEND];
    pi->recvs = d.after.calls[SL_COLL_RECV] - d.before.calls[SL_COLL_RECV];
    pi->send_bytes = d.after.bytes[SL_COLL_SEND] - d.before.bytes[SL_COLL_SEND];
    pi->recv_bytes = d.after.bytes[SL_COLL_RECV] - d.before.bytes[SL_COLL_RECV];
    pi->nstages = p->S;
    for (int v = 0; v < p->S; v++) pi->layers[v] = p->layers[v];
  }
  sl_comm_destroy(d.pp);
  sl_pp_plan_free(d.plan);
  return rc;
}
