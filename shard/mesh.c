/* shard/mesh.c — the parallel mesh (shard/mesh.h): world = DP x TP x PP,
 * TP fastest, then DP, then PP, and a communicator per axis split from the
 * world. Knows ranks and communicators only (no hosts, no models). */
#include <stdlib.h>

#include "base/base.h"
#include "shard/mesh.h"

const char *sl_axis_name(sl_axis a) {
  switch (a) {
  case SL_AXIS_TP: return "tp";
  case SL_AXIS_DP: return "dp";
  case SL_AXIS_PP: return "pp";
  default: return "?";
  }
}

int sl_par_mesh_world_rank(const sl_par_mesh *m, int tp, int dp, int pp) {
  const int *n = m->size;
  if (tp < 0 || tp >= n[SL_AXIS_TP] || dp < 0 || dp >= n[SL_AXIS_DP] || pp < 0 || pp >= n[SL_AXIS_PP]) return -1;
  return tp + n[SL_AXIS_TP] * (dp + n[SL_AXIS_DP] * pp);
}

void sl_par_mesh_destroy(sl_par_mesh *m) {
  if (!m) return;
  for (int a = SL_AXIS_COUNT - 1; a >= 0; a--) sl_comm_destroy(m->comm[a]);
  free(m);
}

int sl_par_mesh_create(sl_comm *world, int tp, int pp, sl_par_mesh **out) {
  *out = NULL;
  int n = sl_comm_size(world), r = sl_comm_rank(world);
  if (tp < 1 || pp < 1 || n % (tp * pp) != 0)
    return sl_fail(SL_EINPUT, "mesh: tensor-parallel size %d x pipeline-parallel size %d must divide the world size %d",
                   tp, pp, n);
  sl_par_mesh *m = calloc(1, sizeof *m);
  if (!m) return sl_fail(SL_ENOMEM, "mesh: out of memory");
  int dp = n / (tp * pp);
  m->world = world;
  m->size[SL_AXIS_TP] = tp;
  m->size[SL_AXIS_DP] = dp;
  m->size[SL_AXIS_PP] = pp;
  m->coord[SL_AXIS_TP] = r % tp;
  m->coord[SL_AXIS_DP] = (r / tp) % dp;
  m->coord[SL_AXIS_PP] = r / (tp * dp);
  const int *c = m->coord;
  /* color: the position along the two other axes; key: the index along this one */
  const int color[SL_AXIS_COUNT] = {r / tp, c[SL_AXIS_PP] * tp + c[SL_AXIS_TP], r % (tp * dp)};
  for (int a = 0; a < SL_AXIS_COUNT; a++)
    if (sl_comm_split(world, color[a], c[a], &m->comm[a]) != SL_COMM_OK) {
      int rc =
          sl_fail(SL_ECOMM, "mesh: splitting the %s communicator: %s", sl_axis_name((sl_axis)a), sl_comm_last_error());
      sl_par_mesh_destroy(m);
      return rc;
    }
  /* with both TP and PP, the host report's "tensor parallel T x data parallel world/T" counts PP in DP */
  sl_log0(tp > 1 && pp > 1 ? SL_LOG_INFO : SL_LOG_DEBUG,
          "mesh: world %d = TP %d x DP %d x PP %d (TP fastest, then DP, then PP)", n, tp, dp, pp);
  *out = m;
  return SL_OK;
}
