/* shard/tp.h — the tensor-parallel group's collectives (the sl_tp_group
 * hooks of base/tp_group.h) over the mesh's TP communicator (shard/mesh.h).
 * The model calls them through sl_unit_access.tp. Every byte moved is
 * counted in the TP communicator's statistics (sl_comm_get_stats). */
#ifndef SL_SHARD_TP_H
#define SL_SHARD_TP_H

#include "base/tp_group.h"
#include "kernels/kernels.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The group of the ranks of tp (fp32 host buffers: the MPI and self
 * backends); tp must outlive the group's use. */
sl_tp_group sl_tp_group_over(sl_comm *tp);

/* The group over device buffers (a backend whose memory is device memory):
 * dev is the device twin of the host TP communicator host, the one the
 * backend's registry row names (NCCL), made by sl_tp_devgroup_init
 * (collective over host, like sl_comm_nccl_create). Sums, gathers and the
 * reduce-scatter run on dev, on the backend's buffers; the max all-reduce
 * (n floats, one per token row of the vocabulary-parallel loss) is staged
 * through the host: download, all-gather over host, the element-wise max
 * in rank order, upload (comm.h reduces only sums). */
typedef struct {
  sl_comm *host, *dev; /* host borrowed, dev owned */
  const sl_ops *ops;
  sl_kctx *k;
} sl_tp_devgroup;
int sl_tp_devgroup_init(sl_tp_devgroup *d, sl_comm *host, const sl_ops *ops, sl_kctx *k);
void sl_tp_devgroup_free(sl_tp_devgroup *d); /* zeroed ok */
sl_tp_group sl_tp_group_over_device(sl_tp_devgroup *d);

#ifdef __cplusplus
}
#endif
#endif /* SL_SHARD_TP_H */
