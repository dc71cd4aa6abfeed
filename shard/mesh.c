/* shard/mesh.c — the parallel mesh (shard/mesh.h): the table of named axes
 * (fastest first) and axis groups, the sizes from --tp, --pp and
 * --shard-group, and a communicator per axis and per group split from the
 * world. Knows ranks and communicators only (no hosts, no models). */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "shard/mesh.h"

#define BIT(a) (1u << (a))

/* The axes in rank order, fastest first. reserved: size 1 and no
 * communicator (yet); giving one a size is adding its flag and a row in
 * mesh_sizes. */
static const struct {
  const char *name;
  int reserved;
} AXES[SL_AXIS_COUNT] = {
    [SL_AXIS_TP] = {"tp", 0},
    [SL_AXIS_CP] = {"cp", 1},
    [SL_AXIS_EP] = {"ep", 0},
    [SL_AXIS_DP_SHARD] = {"dp_shard", 0},
    [SL_AXIS_DP_REPLICATE] = {"dp_replicate", 0},
    [SL_AXIS_PP] = {"pp", 0},
};
/* The groups: the axes each takes together. */
static const struct {
  const char *name;
  unsigned axes;
} GROUPS[SL_GROUP_COUNT] = {
    [SL_GROUP_DP] = {"dp", BIT(SL_AXIS_EP) | BIT(SL_AXIS_DP_SHARD) | BIT(SL_AXIS_DP_REPLICATE)},
    [SL_GROUP_SHARD] = {"shard", BIT(SL_AXIS_EP) | BIT(SL_AXIS_DP_SHARD)},
};

const char *sl_axis_name(sl_axis a) { return a >= 0 && a < SL_AXIS_COUNT ? AXES[a].name : "?"; }
const char *sl_group_name(sl_axis_group g) { return g >= 0 && g < SL_GROUP_COUNT ? GROUPS[g].name : "?"; }

/* Every axis's size from d (d->world ranks), or SL_EINPUT. */
static int mesh_sizes(const sl_mesh_dims *d, int size[SL_AXIS_COUNT]) {
  int n = d->world, tp = d->tp, pp = d->pp;
  if (tp < 1 || pp < 1 || n < 1 || n % (tp * pp) != 0)
    return sl_fail(SL_EINPUT, "mesh: tensor-parallel size %d x pipeline-parallel size %d must divide the world size %d",
                   tp, pp, n);
  int D = n / (tp * pp), S = d->dp_shard > 0 ? d->dp_shard : D;
  if (S > D || D % S != 0)
    return sl_fail(SL_EINPUT, "--shard-group %d must divide the data-parallel size %d (world %d / (--tp %d x --pp %d))",
                   S, D, n, tp, pp);
  int ep = d->ep > 0 ? d->ep : 1;
  if (S % ep != 0)
    return sl_fail(SL_EINPUT,
                   "--ep %d must divide the ranks a tensor is sharded over (%d: %s); experts are carved from them", ep,
                   S, d->dp_shard > 0 ? "--shard-group" : "the data-parallel size");
  for (int a = 0; a < SL_AXIS_COUNT; a++) size[a] = 1;
  size[SL_AXIS_TP] = tp;
  size[SL_AXIS_EP] = ep;
  size[SL_AXIS_DP_SHARD] = S / ep;
  size[SL_AXIS_DP_REPLICATE] = D / S;
  size[SL_AXIS_PP] = pp;
  return SL_OK;
}

/* The axes of the n-th split of the world: each axis with a communicator in
 * table order, then each group. *slot: the axis or SL_AXIS_COUNT + group.
 * 0 past the last split. */
static unsigned split_axes(int n, int *slot) {
  for (int a = 0; a < SL_AXIS_COUNT; a++)
    if (!AXES[a].reserved && n-- == 0) {
      *slot = a;
      return BIT(a);
    }
  if (n >= 0 && n < SL_GROUP_COUNT) {
    *slot = SL_AXIS_COUNT + n;
    return GROUPS[n].axes;
  }
  return 0;
}

/* color: world rank with the coordinates along `axes` set to 0; key: the
 * mixed-radix index along them, fastest first; *gsize: their product. */
static void color_key(const int *size, unsigned axes, int rank, int *color, int *key, int *gsize) {
  int stride = 1, mult = 1;
  *color = rank;
  *key = 0;
  for (int a = 0; a < SL_AXIS_COUNT; a++) {
    int c = (rank / stride) % size[a];
    if (axes & BIT(a)) {
      *key += c * mult;
      mult *= size[a];
      *color -= c * stride;
    }
    stride *= size[a];
  }
  *gsize = mult;
}

int sl_par_mesh_split_rule(void *ctx, int n, int rank, int *color, int *key) {
  int size[SL_AXIS_COUNT], slot, g, rc = mesh_sizes(ctx, size);
  if (rc) return rc;
  unsigned axes = split_axes(n, &slot);
  if (!axes) return sl_fail(SL_EINTERNAL, "mesh: split #%d of the world is not one of the mesh's", n);
  color_key(size, axes, rank, color, key, &g);
  return SL_OK;
}

const sl_mesh_axis *sl_par_mesh_find(const sl_par_mesh *m, const char *name) {
  for (int a = 0; a < SL_AXIS_COUNT; a++)
    if (!strcmp(m->axis[a].name, name)) return &m->axis[a];
  for (int g = 0; g < SL_GROUP_COUNT; g++)
    if (!strcmp(m->group[g].name, name)) return &m->group[g];
  return NULL;
}

int sl_par_mesh_world_rank(const sl_par_mesh *m, const int *coord) {
  int r = 0, stride = 1;
  for (int a = 0; a < SL_AXIS_COUNT; a++) {
    if (coord[a] < 0 || coord[a] >= m->axis[a].size) return -1;
    r += coord[a] * stride;
    stride *= m->axis[a].size;
  }
  return r;
}

void sl_par_mesh_destroy(sl_par_mesh *m) {
  if (!m) return;
  for (int g = SL_GROUP_COUNT - 1; g >= 0; g--) sl_comm_destroy(m->group[g].comm);
  for (int a = SL_AXIS_COUNT - 1; a >= 0; a--) sl_comm_destroy(m->axis[a].comm);
  free(m);
}

int sl_par_mesh_create(sl_comm *world, const sl_mesh_dims *d, sl_par_mesh **out) {
  *out = NULL;
  sl_mesh_dims dims = *d;
  dims.world = sl_comm_size(world);
  int size[SL_AXIS_COUNT], r = sl_comm_rank(world), rc = mesh_sizes(&dims, size);
  if (rc) return rc;
  sl_par_mesh *m = calloc(1, sizeof *m);
  if (!m) return sl_fail(SL_ENOMEM, "mesh: out of memory");
  m->world = world;
  for (int a = 0; a < SL_AXIS_COUNT; a++) m->axis[a].name = AXES[a].name;
  for (int g = 0; g < SL_GROUP_COUNT; g++) m->group[g].name = GROUPS[g].name;
  int slot, color, key, gsize;
  for (int n = 0;; n++) { /* every axis's size and coordinate, and the splits */
    unsigned axes = split_axes(n, &slot);
    if (!axes) break;
    sl_mesh_axis *x = slot < SL_AXIS_COUNT ? &m->axis[slot] : &m->group[slot - SL_AXIS_COUNT];
    color_key(size, axes, r, &color, &key, &gsize);
    x->size = gsize;
    x->coord = key;
    if (sl_comm_split(world, color, key, &x->comm) != SL_COMM_OK) {
      rc = sl_fail(SL_ECOMM, "mesh: splitting the %s communicator: %s", x->name, sl_comm_last_error());
      sl_par_mesh_destroy(m);
      return rc;
    }
  }
  for (int a = 0; a < SL_AXIS_COUNT; a++)
    if (AXES[a].reserved) { /* size 1, coordinate 0, no communicator */
      m->axis[a].size = 1;
      m->axis[a].coord = 0;
    }
  int tp = size[SL_AXIS_TP], pp = size[SL_AXIS_PP], dp = m->group[SL_GROUP_DP].size;
  /* with both TP and PP, the host report's "tensor parallel T x data parallel world/T" counts PP in DP */
  sl_log0(tp > 1 && pp > 1 ? SL_LOG_INFO : SL_LOG_DEBUG,
          "mesh: world %d = TP %d x DP %d x PP %d (TP fastest, then DP, then PP)", dims.world, tp, dp, pp);
  *out = m;
  return SL_OK;
}
