/* tools/plan_pp.c — shardlm plan --engine-check --pp P: the engine check of
 * every pipeline stage (engine/pp_check.h), printed per stage as the
 * metrics' "stages" report them (docs/formats.md), or as JSON. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "base/env.h"
#include "engine/pp_check.h"
#include "tools/plan_pp.h"
#include "tools/tools.h"

static const sl_coll_kind TP_KINDS3[3] = {SL_COLL_ALLGATHER, SL_COLL_REDUCE_SCATTER, SL_COLL_ALLREDUCE};

static int64_t held_bytes(const sl_plan_mem *pm) {
  int64_t held = 0; /* bytes held when the step starts (and again when it ends) */
  for (int a = 0; a < SL_ARENA_COUNT; a++) held += pm->start[a];
  return held;
}

static json_t *stage_json(const sl_plan_mem *pm, const sl_plan_engine_info *info, const sl_pp_stage_info *pi) {
  json_t *o = json_object(), *ap = json_object();
  for (int a = 0; a < SL_ARENA_COUNT; a++)
    json_object_set_new(ap, sl_arena_name((sl_arena)a), json_integer(pm->peak[a]));
  json_object_set_new(o, "stage", json_integer(pi->stage));
  json_object_set_new(o, "arena_peak", ap);
  json_object_set_new(o, "peak_bytes", json_integer(pm->total_peak));
  json_object_set_new(o, "start_bytes", json_integer(held_bytes(pm)));
  json_object_set_new(o, "comm_bytes", json_integer((json_int_t)pm->comm_total));
  json_object_set_new(o, "pp_send_bytes", json_integer((json_int_t)pi->send_bytes));
  json_object_set_new(o, "pp_recv_bytes", json_integer((json_int_t)pi->recv_bytes));
  json_object_set_new(o, "pp_sends", json_integer((json_int_t)pi->sends));
  json_object_set_new(o, "pp_recvs", json_integer((json_int_t)pi->recvs));
  json_object_set_new(o, "in_flight", json_integer(pi->nsets));
  json_object_set_new(o, "units", json_integer(pi->ncomputed));
  json_object_set_new(o, "params", json_integer(info->nparams));
  if (info->tp > 1) {
    json_t *tb = json_object();
    for (int k = 0; k < 3; k++)
      json_object_set_new(tb, sl_coll_name(TP_KINDS3[k]), json_integer((json_int_t)info->tp_comm[TP_KINDS3[k]]));
    json_object_set_new(o, "tp_bytes", tb);
  }
  return o;
}

int sl_plan_pp_check(const sl_model_config *mc, const sl_plan_run *r, const sl_pp_check_cfg *pc, int as_json) {
  int P = pc->pp, rc = SL_OK;
  /* the stage plan and the executor log what a run does (on stdout): here
   * the figures below say it, once per stage (SL_LOG=info shows them) */
  if (!sl_env_set("SL_LOG")) sl_log_set_level(SL_LOG_WARN);
  json_t *arr = json_array(), *lay = json_array();
  for (int s = 0; s < P && !rc; s++) {
    sl_plan_mem pm;
    sl_plan_engine_info info;
    sl_pp_stage_info pi;
    if ((rc = sl_pp_engine_check(mc, r, pc, s, &pm, &info, &pi))) break;
    if (s == 0)
      for (int v = 0; v < pi.nstages; v++) json_array_append_new(lay, json_integer(pi.layers[v]));
    if (as_json) {
      json_array_append_new(arr, stage_json(&pm, &info, &pi));
      continue;
    }
    if (s == 0)
      printf("engine prediction per pipeline stage (DP rank 0, TP rank 0 of each): %d stages x %d chunk%s per rank, "
             "schedule %s, world %d = TP %d x DP %d x PP %d\n",
             P, pc->virt > 1 ? pc->virt : 1, pc->virt > 1 ? "s" : "", pc->kind, r->world, info.tp, info.dp, P);
    printf("stage %d: %d units computed, %lld parameters held, micro-batches in flight %d\n", s, pi.ncomputed,
           (long long)info.nparams, pi.nsets);
    for (int a = 0; a < SL_ARENA_COUNT; a++)
      printf("  %-10s peak %14lld bytes\n", sl_arena_name((sl_arena)a), (long long)pm.peak[a]);
    printf("  total      peak %14lld bytes (held at the step's start %lld)\n", (long long)pm.total_peak,
           (long long)held_bytes(&pm));
    printf("  DP comm bytes per step %llu; PP: %llu sends (%llu bytes), %llu receives (%llu bytes)\n",
           (unsigned long long)pm.comm_total, (unsigned long long)pi.sends, (unsigned long long)pi.send_bytes,
           (unsigned long long)pi.recvs, (unsigned long long)pi.recv_bytes);
    if (info.tp > 1)
      printf("  TP axis bytes per step: all-gather %llu, reduce-scatter %llu, all-reduce %llu\n",
             (unsigned long long)info.tp_comm[SL_COLL_ALLGATHER],
             (unsigned long long)info.tp_comm[SL_COLL_REDUCE_SCATTER],
             (unsigned long long)info.tp_comm[SL_COLL_ALLREDUCE]);
  }
  if (!rc && as_json) {
    json_t *o = json_object();
    json_object_set_new(o, "pp", json_integer(P));
    json_object_set_new(o, "pp_schedule", json_string(pc->kind));
    json_object_set_new(o, "pp_virtual", json_integer(pc->virt > 1 ? pc->virt : 1));
    json_object_set_new(o, "layout", lay);
    json_object_set_new(o, "tp", json_integer(r->tp > 1 ? r->tp : 1));
    json_object_set_new(o, "dp", json_integer(r->world / (P * (r->tp > 1 ? r->tp : 1))));
    json_object_set_new(o, "stages", arr);
    lay = arr = NULL;
    char *s = json_dumps(o, JSON_SORT_KEYS);
    printf("%s\n", s);
    free(s);
    json_decref(o);
  }
  json_decref(arr);
  json_decref(lay);
  return rc;
}
