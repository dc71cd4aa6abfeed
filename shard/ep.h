/* shard/ep.h — the expert-parallel group's exchanges (the sl_ep_group hooks
 * of base/ep_group.h) over the mesh's EP communicator (shard/mesh.h): the
 * counts exchange and the row all-to-all, both sl_comm_alltoallv calls
 * (shard/comm.h). A mixture-of-experts block calls them through
 * sl_unit_access.ep. Every byte moved is counted in the communicators'
 * statistics (bytes[SL_COLL_ALLTOALL]). */
#ifndef SL_SHARD_EP_H
#define SL_SHARD_EP_H

#include "base/ep_group.h"
#include "kernels/kernels.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The group of the ranks of ep over fp32 host buffers (the MPI and self
 * backends; "count": the exchanges are counted, nothing moves, and counts
 * answers rcount := scount). ep must outlive the group's use. */
sl_ep_group sl_ep_group_over(sl_comm *ep);

/* The group over device buffers, as sl_tp_devgroup is for TP: dev is the
 * device twin of the host EP communicator host (NCCL, the backend's registry
 * row), made by sl_ep_devgroup_init (collective over host). counts runs over
 * host (the counts are host arrays), the rows over dev. */
typedef struct {
  sl_comm *host, *dev; /* host borrowed, dev owned */
  const sl_ops *ops;
  sl_kctx *k;
} sl_ep_devgroup;
int sl_ep_devgroup_init(sl_ep_devgroup *d, sl_comm *host, const sl_ops *ops, sl_kctx *k);
void sl_ep_devgroup_free(sl_ep_devgroup *d); /* zeroed ok */
sl_ep_group sl_ep_group_over_device(sl_ep_devgroup *d);

#ifdef __cplusplus
}
#endif
#endif /* SL_SHARD_EP_H */
