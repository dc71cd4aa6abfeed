/* tests/cli/tp/test_mpi_tp.c — the tensor-parallel hooks of shard/tp.c over a
 * mesh's TP communicator, against values every rank computes locally
 * (rank r of the group contributes f(r, i), exact in fp32): sum and max
 * all-reduce, all-gather, reduce-scatter, the bytes counted on the TP comm
 * (comm.h's bus figures), and the T = 1 group (models/tp.c). Driven by
 * tests/cli/tp/test_mpi_tp.sh: `test_mpi_tp T` under mpirun with T dividing the
 * world. Prints "N passed, M failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "shard/comm.h"
#include "shard/mesh.h"
#include "models/tp.h"
#include "shard/tp.h"

static int R, npass, nfail;
#include "tests/lib/rank_check.h"

/* what TP rank r (with DP coordinate d) contributes at element i */
static float f(int r, int d, int64_t i) { return (float)(((r * 7 + 3) % 11) * 1000 + d * 100000 + (int)i); }

int main(int argc, char **argv) {
  sl_comm *w;
  if (sl_comm_world_init(&argc, &argv, 60.0, &w) != SL_COMM_OK) {
    fprintf(stderr, "sl_comm_world_init: %s\n", sl_comm_last_error());
    return 1;
  }
  R = sl_comm_rank(w);
  int T = argc > 1 ? atoi(argv[1]) : 1;
  sl_par_mesh *mesh = NULL;
  if (sl_par_mesh_create(w, &(sl_mesh_dims){.tp = T, .pp = 1}, &mesh) != SL_OK) {
    fprintf(stderr, "mesh: %s\n", sl_errmsg());
    return 1;
  }
  sl_tp_group g = T > 1 ? sl_tp_group_over(mesh->axis[SL_AXIS_TP].comm) : sl_tp_single();
  int r = mesh->axis[SL_AXIS_TP].coord, d = mesh->group[SL_GROUP_DP].coord;
  CHECK(g.rank == r && g.size == T, "group rank %d size %d, mesh says %d of %d", g.rank, g.size, r, T);
  const int64_t counts[] = {1, 5, 64};
  uint64_t want_ar = 0, want_ag = 0, want_rs = 0;
  for (int c = 0; c < 3; c++) {
    int64_t n = counts[c];
    float *buf = calloc((size_t)(n * T), 4), *out = calloc((size_t)(n * T), 4);
    for (int op = 0; op < 2; op++) { /* sum, then max */
      for (int64_t i = 0; i < n; i++) buf[i] = f(r, d, i);
      CHECK(g.allreduce(g.user, buf, n, op ? SL_TP_MAX : SL_TP_SUM) == SL_OK, "allreduce: %s", sl_errmsg());
      int bad = 0;
      for (int64_t i = 0; i < n; i++) {
        float want = op ? f(0, d, i) : 0.0f;
        for (int q = 0; q < T; q++) want = op ? (f(q, d, i) > want ? f(q, d, i) : want) : want + f(q, d, i);
        bad += buf[i] != want;
      }
      CHECK(!bad, "%s all-reduce of %lld: %d wrong", op ? "max" : "sum", (long long)n, bad);
      if (op == 0) want_ar += sl_comm_bus_bytes(SL_COLL_ALLREDUCE, T, n, SL_F32, 0);
      else want_ag += sl_comm_bus_bytes(SL_COLL_ALLGATHER, T, n, SL_F32, 0); /* max = all-gather + local max */
    }
    if (T > 1) {
      for (int64_t i = 0; i < n; i++) buf[i] = f(r, d, i);
      CHECK(g.allgather(g.user, buf, out, n) == SL_OK, "allgather: %s", sl_errmsg());
      int bad = 0;
      for (int q = 0; q < T; q++)
        for (int64_t i = 0; i < n; i++) bad += out[q * n + i] != f(q, d, i);
      CHECK(!bad, "all-gather of %lld: %d wrong", (long long)n, bad);
      for (int64_t i = 0; i < n * T; i++) buf[i] = f(r, d, i);
      CHECK(g.reducescatter(g.user, buf, out, n) == SL_OK, "reducescatter: %s", sl_errmsg());
      bad = 0;
      for (int64_t i = 0; i < n; i++) {
        float want = 0.0f;
        for (int q = 0; q < T; q++) want += f(q, d, r * n + i);
        bad += out[i] != want;
      }
      CHECK(!bad, "reduce-scatter of %lld: %d wrong", (long long)n, bad);
      want_ag += sl_comm_bus_bytes(SL_COLL_ALLGATHER, T, n, SL_F32, 0);
      want_rs += sl_comm_bus_bytes(SL_COLL_REDUCE_SCATTER, T, n, SL_F32, 0);
    } else { /* T = 1: a model never gathers; calling it is reported */
      CHECK(g.allgather(g.user, buf, out, n) == SL_EINTERNAL, "T = 1 all-gather must be refused");
    }
    free(buf);
    free(out);
  }
  if (T > 1) {
    sl_comm_stats st;
    sl_comm_get_stats(mesh->axis[SL_AXIS_TP].comm, &st);
    CHECK(st.bytes[SL_COLL_ALLREDUCE] == want_ar && st.bytes[SL_COLL_ALLGATHER] == want_ag &&
              st.bytes[SL_COLL_REDUCE_SCATTER] == want_rs,
          "TP comm bytes allreduce %llu allgather %llu reduce_scatter %llu, want %llu %llu %llu",
          (unsigned long long)st.bytes[SL_COLL_ALLREDUCE], (unsigned long long)st.bytes[SL_COLL_ALLGATHER],
          (unsigned long long)st.bytes[SL_COLL_REDUCE_SCATTER], (unsigned long long)want_ar,
          (unsigned long long)want_ag, (unsigned long long)want_rs);
  }
  sl_par_mesh_destroy(mesh);
  int tot[2] = {npass, nfail};
  sl_comm_allreduce_sync(w, tot, 2, SL_I32);
  if (R == 0) printf("%d passed, %d failed\n", tot[0], tot[1]);
  sl_comm_destroy(w);
  sl_comm_world_finalize();
  return tot[1] ? 1 : 0;
}
