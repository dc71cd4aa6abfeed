/* tools/plan_pp.c — shardlm plan --engine-check --pp P: the engine check of
 * every pipeline stage (the dry run of engine/dryrun.h as that stage's
 * rank), printed per stage as the
 * metrics' "stages" report them (docs/formats.md), or as JSON. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "base/env.h"
#include "engine/dryrun.h"
#include "tools/plan_pp.h"
#include "tools/tools.h"

static const sl_coll_kind TP_KINDS3[3] = {SL_COLL_ALLGATHER, SL_COLL_REDUCE_SCATTER, SL_COLL_ALLREDUCE};

static int64_t held_bytes(const sl_dry_result *pm) {
  int64_t held = 0; /* bytes held when the step starts (and again when it ends) */
  for (int a = 0; a < SL_ARENA_COUNT; a++) held += pm->start[a];
  return held;
}

static json_t *stage_json(const sl_dry_result *pm, int moe) {
  json_t *o = json_object(), *ap = json_object();
  for (int a = 0; a < SL_ARENA_COUNT; a++)
    json_object_set_new(ap, sl_arena_name((sl_arena)a), json_integer(pm->peak[a]));
  json_object_set_new(o, "stage", json_integer(pm->stage));
  json_object_set_new(o, "arena_peak", ap);
  json_object_set_new(o, "peak_bytes", json_integer(pm->total_peak));
  json_object_set_new(o, "start_bytes", json_integer(held_bytes(pm)));
  json_object_set_new(o, "comm_bytes", json_integer((json_int_t)pm->comm_total));
  json_object_set_new(o, "pp_send_bytes", json_integer((json_int_t)pm->send_bytes));
  json_object_set_new(o, "pp_recv_bytes", json_integer((json_int_t)pm->recv_bytes));
  json_object_set_new(o, "pp_sends", json_integer((json_int_t)pm->sends));
  json_object_set_new(o, "pp_recvs", json_integer((json_int_t)pm->recvs));
  json_object_set_new(o, "in_flight", json_integer(pm->nsets));
  json_object_set_new(o, "units", json_integer(pm->ncomputed));
  json_object_set_new(o, "params", json_integer(pm->nparams));
  if (moe) /* a mixture of experts' exchange (dense models: the keys they had) */
    json_object_set_new(o, "alltoall_bytes", json_integer((json_int_t)pm->comm[SL_COLL_ALLTOALL]));
  if (pm->tp > 1) {
    json_t *tb = json_object();
    for (int k = 0; k < 3; k++)
      json_object_set_new(tb, sl_coll_name(TP_KINDS3[k]), json_integer((json_int_t)pm->tp_comm[TP_KINDS3[k]]));
    json_object_set_new(o, "tp_bytes", tb);
  }
  return o;
}

int sl_plan_pp_check(const sl_model_config *mc, const sl_train_cfg *tc, int world, int as_json) {
  int P = (int)tc->pp, V = tc->pp_virtual > 1 ? (int)tc->pp_virtual : 1, T = tc->tp > 1 ? (int)tc->tp : 1, rc = SL_OK;
  if (P < 2) return sl_fail(SL_EINPUT, "engine check: --pp %d: a pipeline needs P >= 2", P);
  if (world % (T * P))
    return sl_fail(SL_EINPUT, "--tp %d x --pp %d does not divide the number of ranks %d", T, P, world);
  /* the stage plan and the executor log what a run does (on stdout): here
   * the figures below say it, once per stage (SL_LOG=info shows them) */
  if (!sl_env_set("SL_LOG")) sl_log_set_level(SL_LOG_WARN);
  json_t *arr = json_array(), *lay = json_array();
  for (int s = 0; s < P && !rc; s++) {
    sl_dry_result pm;
    /* world rank of (TP 0, DP 0, PP s): TP fastest, then DP, then PP (shard/mesh.c) */
    if ((rc = sl_train_dry_run(tc, mc, world, s * (world / P), &pm))) break;
    if (s == 0)
      for (int v = 0; v < pm.nstages; v++) json_array_append_new(lay, json_integer(pm.layers[v]));
    if (as_json) {
      json_array_append_new(arr, stage_json(&pm, mc->moe_experts > 0));
      continue;
    }
    if (s == 0)
      printf("engine prediction per pipeline stage (DP rank 0, TP rank 0 of each): %d stages x %d chunk%s per rank, "
             "schedule %s, world %d = TP %d x DP %d x PP %d\n",
             P, V, V > 1 ? "s" : "", tc->pp_schedule, world, pm.tp, pm.dp, P);
    printf("stage %d: %d units computed, %lld parameters held, micro-batches in flight %d\n", s, pm.ncomputed,
           (long long)pm.nparams, pm.nsets);
    for (int a = 0; a < SL_ARENA_COUNT; a++)
      printf("  %-10s peak %14lld bytes\n", sl_arena_name((sl_arena)a), (long long)pm.peak[a]);
    printf("  total      peak %14lld bytes (held at the step's start %lld)\n", (long long)pm.total_peak,
           (long long)held_bytes(&pm));
    printf("  DP comm bytes per step %llu; PP: %llu sends (%llu bytes), %llu receives (%llu bytes)\n",
           (unsigned long long)pm.comm_total, (unsigned long long)pm.sends, (unsigned long long)pm.send_bytes,
           (unsigned long long)pm.recvs, (unsigned long long)pm.recv_bytes);
    if (mc->moe_experts) printf("  all-to-all bytes per step %llu\n", (unsigned long long)pm.comm[SL_COLL_ALLTOALL]);
    if (pm.tp > 1)
      printf("  TP axis bytes per step: all-gather %llu, reduce-scatter %llu, all-reduce %llu\n",
             (unsigned long long)pm.tp_comm[SL_COLL_ALLGATHER], (unsigned long long)pm.tp_comm[SL_COLL_REDUCE_SCATTER],
             (unsigned long long)pm.tp_comm[SL_COLL_ALLREDUCE]);
  }
  if (!rc && as_json) {
    json_t *o = json_object();
    json_object_set_new(o, "pp", json_integer(P));
    json_object_set_new(o, "pp_schedule", json_string(tc->pp_schedule));
    json_object_set_new(o, "pp_virtual", json_integer(V));
    json_object_set_new(o, "layout", lay);
    json_object_set_new(o, "tp", json_integer(T));
    json_object_set_new(o, "dp", json_integer(world / (P * T)));
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
