/* shard/mesh.h — the parallel mesh: world = DP x TP x PP, built once at
 * start-up, with one communicator per axis (splits of the world).
 *
 * Rank order (Megatron's and torchtitan's): TP fastest, then DP, then PP,
 *   world rank = tp + TP * (dp + DP * pp),
 * so that a TP group is consecutive ranks (one node under mpirun's default
 * by-slot placement) and a PP group strides over everything. TP = --tp, PP
 * = 1 today, so DP = world / TP; fsdp takes the DP communicator and splits
 * it further for --shard-group (shard x replica, shard/fsdp.c). Which ranks
 * share a node is engine/hosts.c's (hostnames, binding, its report).
 */
#ifndef SL_SHARD_MESH_H
#define SL_SHARD_MESH_H

#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SL_AXIS_TP = 0, SL_AXIS_DP = 1, SL_AXIS_PP = 2, SL_AXIS_COUNT = 3 } sl_axis;
const char *sl_axis_name(sl_axis a); /* "tp", "dp", "pp" */

typedef struct {
  sl_comm *world;               /* borrowed: must outlive the mesh */
  int size[SL_AXIS_COUNT];      /* TP, DP, PP; product = world size */
  int coord[SL_AXIS_COUNT];     /* this rank's index along each axis */
  sl_comm *comm[SL_AXIS_COUNT]; /* owned: the ranks that differ from this one only along the axis, in axis order */
} sl_par_mesh;

/* Collective over world. tp, pp >= 1 and tp * pp must divide the world size
 * (SL_EINPUT naming both otherwise); DP = world / (tp * pp). Three splits of
 * world, in the order TP, DP, PP, on every rank. */
int sl_par_mesh_create(sl_comm *world, int tp, int pp, sl_par_mesh **out);
void sl_par_mesh_destroy(sl_par_mesh *m);
/* World rank of the coordinates (tp, dp, pp); -1 when out of range. */
int sl_par_mesh_world_rank(const sl_par_mesh *m, int tp, int dp, int pp);

#ifdef __cplusplus
}
#endif
#endif /* SL_SHARD_MESH_H */
