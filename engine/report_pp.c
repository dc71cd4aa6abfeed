/* engine/report_pp.c — what a pipeline-parallel run shows of itself:
 * pipeline.svg next to metrics.svg (the SVG `shardlm pp-schedule --svg`
 * draws for the same P, m, V and schedule; pipeline/render.c), the dry run
 * (--pp-dry-run) that prints the per-rank timeline, the bubble and the
 * layout of the run's stages without training (docs/pipeline.md), and every
 * pipeline stage's figures in the metrics line (--pp > 1; docs/formats.md,
 * "stages"): each rank's arena peaks, peak bytes, DP bytes sent and PP
 * bytes sent / received since the previous line, all-gathered over the PP
 * communicator, so world rank 0 (DP 0, TP 0 of stage 0) holds those of DP
 * rank 0 / TP rank 0 of every stage. */
#include "engine/report_pp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/builtin.h"
#include "engine/precheck.h"
#include "engine/trainer_internal.h"
#include "formats/hfconfig.h"
#include "models/model.h"
#include "pipeline/render.h"

int sl_pp_report_svg(const sl_train_cfg *c, const sl_pp_plan *p, char *svg, size_t cap) {
  int rc = sl_mkdirs(c->out_dir);
  snprintf(svg, cap, "%s/pipeline.svg", c->out_dir);
  return rc ? rc : sl_pp_svg_write(&p->sched, svg);
}

static void print_plan(const sl_train_cfg *c, const sl_pp_plan *p) {
  const sl_pp_sched *s = &p->sched;
  const sl_pp_spec *k = &s->spec;
  printf("pipeline dry run: schedule %s, %d ranks x %d chunk%s = %d stages, %d micro-batches of %lld x %lld tokens "
         "per step (--grad-accum); checked: no deadlock, every input on its rank before use\n",
         sl_pp_kind_name(k->kind), k->P, k->V, k->V > 1 ? "s" : "", s->S, k->m, (long long)c->micro_batch,
         (long long)c->seq_len);
  sl_pp_timeline_print(stdout, s, s->makespan > 160);
  for (int r = 0; r < k->P; r++)
    printf("  rank %-3d busy %6lld  idle %5lld  in flight %3d  send %4lld (%lld B)  recv %4lld (%lld B)\n", r,
           (long long)s->busy[r], (long long)s->idle[r], s->peak_inflight[r], (long long)s->sends[r],
           (long long)s->send_bytes[r], (long long)s->recvs[r], (long long)s->recv_bytes[r]);
  printf("bubble: %lld of %lld time units per rank (%.2f%% of the step)\n", (long long)s->idle[0],
         (long long)s->makespan, s->makespan ? 100.0 * (double)s->idle[0] / (double)s->makespan : 0.0);
  printf("layout: --pp-layout ");
  for (int v = 0; v < p->S; v++) printf("%s%d", v ? "," : "", p->layers[v]);
  printf(" (decoder layers per %sstage; the embedding on the first, the final norm + head on the last)\n",
         p->S > p->P ? "virtual " : "");
}

int sl_pp_dry_run(const sl_train_cfg *c, int world_rank) {
  if (c->pp < 2)
    return sl_fail(SL_EINPUT, "--pp-dry-run prints a pipeline schedule: it needs --pp P >= 2 (found --pp %lld)",
                   (long long)c->pp);
  if (c->grad_accum < 1 || c->micro_batch < 1 || c->seq_len < 1)
    return sl_fail(SL_EINPUT, "--micro-batch, --seq-len and --grad-accum must be >= 1 (found %lld, %lld, %lld)",
                   (long long)c->micro_batch, (long long)c->seq_len, (long long)c->grad_accum);
  sl_model_config mc;
  int rc;
  if (c->model[0]) {
    char path[SL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.json", c->model);
    rc = sl_hfconfig_load(path, &mc);
  } else
    rc = sl_hfconfig_parse("built-in configs/tiny-llama/config.json", sl_builtin_model_config,
                           sl_builtin_model_config_len, &mc);
  sl_model *tm = NULL; /* the model's own TP refusals (heads, sizes over --tp), as the real run's setup */
  if (!rc && c->tp > 1)
    rc = sl_model_create_full(&mc, NULL, NULL, 0, 0, SL_AC_NONE, 0, (int)c->tp, c->sequence_parallel, NULL, 0, &tm);
  sl_model_destroy(tm);
  /* and the start-up refusals that need no ranks (sizes, units over 2^31, --seq-len) */
  if (!rc) rc = sl_precheck_static(c, &mc, (int)(c->tp * c->pp));
  sl_pp_plan *p = NULL;
  if (!rc) rc = sl_pp_plan_for_run(c, &mc, 0, &p); /* the schedule holds every rank's list */
  if (!rc && world_rank == 0) {
    print_plan(c, p);
    char svg[SL_PATH_MAX + 32];
    if (c->plot) {
      if ((rc = sl_pp_report_svg(c, p, svg, sizeof svg))) goto done;
      printf("svg: %s\n", svg);
    }
    printf("dry run: nothing trained\n");
    fflush(stdout);
  }
done:
  sl_pp_plan_free(p);
  return rc;
}

enum { NFIG = SL_ARENA_COUNT + 4 }; /* arenas, total peak, DP sent, PP sent, PP received */

int sl_trainer_pp_gather(trainer *t, int64_t **out) {
  *out = NULL;
  sl_comm *pp = t->par.pmesh->axis[SL_AXIS_PP].comm;
  int P = t->par.pplan->P, i = 0;
  int64_t mine[NFIG], *all = calloc((size_t)P * NFIG, sizeof(int64_t));
  if (!all) return sl_fail(SL_ENOMEM, "out of memory");
  sl_mem_stats ms;
  sl_mem_get(&ms);
  sl_comm_stats sh, rp, ps;
  sl_fsdp_comm_stats(t->f, &sh, &rp);
  sl_comm_get_stats(pp, &ps);
  uint64_t now[3] = {0, ps.bytes[SL_COLL_SEND], ps.bytes[SL_COLL_RECV]};
  for (int k = 0; k < SL_COLL_NKINDS; k++) /* sent bytes, as "comm_bytes" */
    if (k != SL_COLL_RECV) now[0] += sh.bytes[k] + rp.bytes[k];
  for (int a = 0; a < SL_ARENA_COUNT; a++) mine[i++] = ms.peak[a];
  mine[i++] = ms.total_peak;
  for (int k = 0; k < 3; k++) {
    mine[i++] = (int64_t)(now[k] - t->report.prev_pp[k]);
    t->report.prev_pp[k] = now[k];
  }
  if (sl_comm_allgather_sync(pp, mine, all, NFIG, SL_I64) != SL_COMM_OK) {
    free(all);
    return sl_fail(SL_ECOMM, "metrics: gathering the pipeline stages' figures: %s", sl_comm_last_error());
  }
  *out = all;
  return SL_OK;
}

void sl_trainer_pp_write(const trainer *t, FILE *f, const int64_t *all) {
  fprintf(f, ", \"stages\": [");
  for (int s = 0; s < t->par.pplan->P; s++) {
    const int64_t *v = all + (size_t)s * NFIG;
    fprintf(f, "%s{\"stage\": %d, \"arena_peak\": {", s ? ", " : "", s);
    for (int a = 0; a < SL_ARENA_COUNT; a++)
      fprintf(f, "%s\"%s\": %lld", a ? ", " : "", sl_arena_name(a), (long long)v[a]);
    fprintf(f, "}, \"peak_bytes\": %lld, \"comm_bytes\": %lld, \"pp_send_bytes\": %lld, \"pp_recv_bytes\": %lld}",
            (long long)v[SL_ARENA_COUNT], (long long)v[SL_ARENA_COUNT + 1], (long long)v[SL_ARENA_COUNT + 2],
            (long long)v[SL_ARENA_COUNT + 3]);
  }
  fprintf(f, "]");
}
