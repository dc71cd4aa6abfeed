/* engine/report_pp.c — every pipeline stage's figures in the metrics line
 * (--pp > 1; docs/formats.md, "stages"): each rank's arena peaks, peak
 * bytes, DP bytes sent and PP bytes sent / received since the previous
 * line, all-gathered over the PP communicator, so world rank 0 (DP 0, TP 0
 * of stage 0) holds those of DP rank 0 / TP rank 0 of every stage. */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "engine/trainer_internal.h"

enum { NFIG = SL_ARENA_COUNT + 4 }; /* arenas, total peak, DP sent, PP sent, PP received */

int sl_trainer_pp_gather(trainer *t, int64_t **out) {
  *out = NULL;
  sl_comm *pp = t->par.pmesh->comm[SL_AXIS_PP];
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
