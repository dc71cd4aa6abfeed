/* engine/schedule.c — the schedule registry and the "single" schedule (no
 * pipeline: each micro-batch's backward right after its forward, one
 * activation set). The interface and where a pipeline schedule goes:
 * engine/schedule.h. */
#include "engine/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/schedule_pp.h"
#include "engine/tensor_par.h"

/* ---- single ------------------------------------------------------------------ */
static int single_nacts(const sl_schedule *s, int nmicro) {
  (void)s;
  (void)nmicro;
  return 1;
}

/* Forward of units 0..U-1 of the selected set's batch (micro-batch k). */
static int forward_units(const sl_step_ctx *c, int k) {
  sl_model *m = c->m;
  int rc = SL_OK;
  for (int u = 0; u < m->nunits && !rc; u++) {
    const float *p;
    rc = sl_fsdp_fwd_acquire(c->f, u, &p);
    if (!rc) rc = m->vt->fwd(m, u, p);
    if (!rc && c->after_fwd) rc = c->after_fwd(c->hook_user, m, k, u); /* u's parameters still gathered */
    if (!rc) rc = sl_fsdp_fwd_release(c->f, u);
  }
  return rc;
}

static int single_run_step(sl_schedule *s, const sl_step_ctx *c, sl_step_result *out) {
  (void)s;
  sl_model *m = c->m;
  int rc = SL_OK;
  out->loss_sum = 0;
  for (int k = 0; k < c->nmicro && !rc; k++) {
    rc = sl_model_use_acts(m, 0);
    if (!rc) rc = c->load(c->user, k);
    if (!rc) rc = sl_fsdp_begin_micro(c->f, k, c->nmicro);
    if (!rc) rc = forward_units(c, k);
    for (int u = m->nunits - 1; u >= 0 && !rc; u--) {
      const float *p;
      float *g;
      rc = sl_fsdp_bwd_acquire(c->f, u, &p, &g);
      if (!rc) rc = m->vt->bwd(m, u, p, g);
      if (!rc) rc = sl_fsdp_bwd_release(c->f, u);
    }
    if (!rc) rc = sl_fsdp_end_micro(c->f);
    if (!rc) out->loss_sum += m->loss_sum;
  }
  return rc;
}

static int single_forward(sl_schedule *s, const sl_step_ctx *c, sl_step_result *out) {
  (void)s;
  int rc = SL_OK;
  out->loss_sum = 0;
  for (int k = 0; k < c->nmicro && !rc; k++) {
    rc = sl_model_use_acts(c->m, 0);
    if (!rc) rc = c->load(c->user, k);
    if (rc) break;
    rc = forward_units(c, k);
    int rc2 = sl_fsdp_end_forward(c->f); /* drops every gathered buffer, also after a failure */
    if (!rc) rc = rc2;
    if (!rc) out->loss_sum += c->m->loss_sum;
  }
  return rc;
}

/* Every layout without a pipeline: one process, DP, hybrid sharding, TP
 * (with or without SP); priv: the TP group or NULL. */
static int single_grad_sumsq(sl_schedule *s, const sl_step_ctx *c, double *ss) {
  return sl_tpar_grad_sumsq_of(c->f, s->priv, c->sumsq_slots, ss);
}

static void single_queue_sumsq(sl_schedule *s, const sl_step_ctx *c, int slot0) {
  sl_tpar_queue_sumsq(c->f, c->m, s->priv, slot0);
}

static const sl_schedule_vt single_vt = {
    .name = "single",
    .nacts = single_nacts,
    .run_step = single_run_step,
    .forward = single_forward,
    .grad_sumsq = single_grad_sumsq,
    .queue_sumsq = single_queue_sumsq,
    .destroy = NULL,
};

static int single_create(const sl_schedule_cfg *cfg, sl_schedule *s) {
  s->vt = &single_vt;
  s->priv = cfg && cfg->tp && sl_comm_size(cfg->tp) > 1 ? cfg->tp : NULL; /* borrowed */
  return SL_OK;
}

static int pp_create(const sl_schedule_cfg *cfg, sl_schedule *s) {
  return sl_schedule_pp_create(cfg->pp_plan, cfg->pp, cfg->tp, s);
}

/* ---- registry ----------------------------------------------------------------- */
static const struct {
  const char *name;
  int (*create)(const sl_schedule_cfg *cfg, sl_schedule *s);
} k_schedules[] = {
    {"single", single_create}, {"pp", pp_create}, /* engine/schedule_pp.c */
};
#define NSCHED ((int)(sizeof k_schedules / sizeof k_schedules[0]))

int sl_schedule_create(const sl_schedule_cfg *cfg, sl_schedule **out) {
  *out = NULL;
  const char *name = cfg && cfg->name ? cfg->name : "single";
  int i = 0;
  while (i < NSCHED && strcmp(k_schedules[i].name, name)) i++;
  if (i == NSCHED) {
    char known[256] = "";
    for (int j = 0; j < NSCHED; j++)
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", j ? ", " : "", k_schedules[j].name);
    return sl_fail(SL_EINPUT, "unknown schedule '%s'; known: %s", name, known);
  }
  sl_schedule *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(SL_ENOMEM, "out of memory creating the schedule");
  int rc = k_schedules[i].create(cfg, s);
  if (rc) {
    sl_schedule_destroy(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

/* ---- the step's validation ------------------------------------------------------ */
int sl_schedule_check_step(sl_schedule *s, const sl_step_ctx *c, sl_guard *g, sl_comm *world, int64_t step, double loss,
                           double *grad_norm, int *apply) {
  double ss;
  int rc = sl_schedule_grad_sumsq(s, c, &ss);
  if (rc) return rc;
  *grad_norm = sqrt(ss);
  return sl_guard_step(g, world, step, loss, *grad_norm, apply);
}

void sl_schedule_destroy(sl_schedule *s) {
  if (!s) return;
  if (s->vt && s->vt->destroy) s->vt->destroy(s);
  free(s);
}
