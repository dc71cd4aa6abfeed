/* shard/mesh.h — the parallel mesh: a list of named axes (in the manner of
 * torchtitan's ParallelDims), built once at start-up, each with its size,
 * this rank's coordinate and a communicator split from the world, plus named
 * axis groups (several axes taken together) with a communicator each.
 *
 * Axes, fastest first (the table of shard/mesh.c; the rank order is
 * Megatron's and torchtitan's):
 *   tp            tensor parallel (--tp)
 *   cp            context parallel: a reserved row, size 1 and no
 *                 communicator today (adding one is a row of the table)
 *   ep            expert parallel (--ep E): carved from the ranks a dense
 *                 tensor is sharded over, as torchtitan and Megatron do;
 *                 the ranks holding other experts of a layer
 *   dp_shard      the ranks an expert tensor is sharded over (S / E); with
 *                 ep, group "shard" (S = --shard-group, all of DP when 0):
 *                 the ranks a dense tensor is sharded over
 *   dp_replicate  the ranks holding the same shard (DP / S; hybrid sharding)
 *   pp            pipeline parallel (--pp)
 * so world rank = tp + TP * (ep + E * (dp_shard + S/E * (dp_replicate + R *
 * pp))): a TP group is consecutive ranks (one node under mpirun's default
 * by-slot placement), so is an EP group after it, a shard group is S
 * consecutive DP ranks, and a PP group strides over everything. Groups:
 * "dp" = ep x dp_shard x dp_replicate (DP = world / (TP x PP)); "shard" = ep
 * x dp_shard: dense parameters are sharded over "shard" and replicated over
 * dp_replicate, expert parameters sharded over dp_shard and replicated over
 * dp_replicate (shard/fsdp.h's groups). Which ranks share a node
 * is engine/hosts.c's (hostnames, binding, its report).
 */
#ifndef SL_SHARD_MESH_H
#define SL_SHARD_MESH_H

#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SL_AXIS_TP = 0,
  SL_AXIS_CP,
  SL_AXIS_EP,
  SL_AXIS_DP_SHARD,
  SL_AXIS_DP_REPLICATE,
  SL_AXIS_PP,
  SL_AXIS_COUNT
} sl_axis;
typedef enum { SL_GROUP_DP = 0, SL_GROUP_SHARD, SL_GROUP_COUNT } sl_axis_group;
const char *sl_axis_name(sl_axis a);        /* "tp", "cp", "ep", "dp_shard", "dp_replicate", "pp" */
const char *sl_group_name(sl_axis_group g); /* "dp", "shard" */

/* The sizes a mesh is built from; also the context of sl_par_mesh_split_rule. */
typedef struct {
  int world;    /* ranks in the world (sl_par_mesh_create takes the world comm's size) */
  int tp, pp;   /* >= 1 */
  int dp_shard; /* --shard-group: ranks a dense tensor is sharded over; <= 0: all of DP (no replica) */
  int ep;       /* --ep: expert-parallel ranks, carved from dp_shard (<= 1: none) */
} sl_mesh_dims;

/* One axis or axis group: size, this rank's index along it (in a group: the
 * mixed-radix index over its axes, fastest first), and its communicator
 * (the ranks that differ from this one only along the axis / the group's
 * axes, in index order; owned by the mesh; NULL for a reserved axis). */
typedef struct {
  const char *name;
  int size, coord;
  sl_comm *comm;
} sl_mesh_axis;

typedef struct {
  sl_comm *world; /* borrowed: must outlive the mesh */
  sl_mesh_axis axis[SL_AXIS_COUNT];
  sl_mesh_axis group[SL_GROUP_COUNT];
} sl_par_mesh;

/* Collective over world. d->tp, d->pp >= 1 and tp * pp must divide the world
 * size; dp_shard must divide DP = world / (tp * pp) (SL_EINPUT naming them
 * otherwise). Splits world once per axis with a communicator, in table
 * order, then once per group, on every rank (sl_par_mesh_split_rule). */
int sl_par_mesh_create(sl_comm *world, const sl_mesh_dims *d, sl_par_mesh **out);
void sl_par_mesh_destroy(sl_par_mesh *m);
/* The axis or group called name ("tp", "dp", ...); NULL when there is none. */
const sl_mesh_axis *sl_par_mesh_find(const sl_par_mesh *m, const char *name);
/* World rank of the coordinates coord[SL_AXIS_COUNT]; -1 when out of range. */
int sl_par_mesh_world_rank(const sl_par_mesh *m, const int *coord);

/* What world rank `rank` passes to the n-th split sl_par_mesh_create makes
 * of the world (color, key), for ctx = a const sl_mesh_dims * with world
 * set: the rule a counting world needs (sl_comm_count_create,
 * shard/comm_count.c) to be split by the real mesh code. Returns SL_OK, or
 * SL_EINPUT / SL_EINTERNAL for bad sizes or an n past the last split. */
int sl_par_mesh_split_rule(void *ctx, int n, int rank, int *color, int *key);

#ifdef __cplusplus
}
#endif
#endif /* SL_SHARD_MESH_H */
