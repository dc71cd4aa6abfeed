/* shard/ep.h — the expert-parallel group's hooks (base/ep_group.h) over
 * the mesh's EP communicator (shard/mesh.h). Every row moved is counted in
 * that communicator's statistics. */
#ifndef SL_SHARD_EP_H
#define SL_SHARD_EP_H

#include "base/ep_group.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The group of the ranks of ep (fp32 host buffers: the MPI and self backends). */
sl_ep_group sl_ep_group_over(sl_comm *ep);

#ifdef __cplusplus
}
#endif
#endif /* SL_SHARD_EP_H */
