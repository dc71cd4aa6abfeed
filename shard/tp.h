/* shard/tp.h — the tensor-parallel group's collectives (the sl_tp_group
 * hooks of base/tp_group.h) over the mesh's TP communicator (shard/mesh.h).
 * The model calls them through sl_unit_access.tp. Every byte moved is
 * counted in the TP communicator's statistics (sl_comm_get_stats). */
#ifndef SL_SHARD_TP_H
#define SL_SHARD_TP_H

#include "base/tp_group.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The group of the ranks of tp (fp32 host buffers: the MPI and self
 * backends); tp must outlive the group's use. */
sl_tp_group sl_tp_group_over(sl_comm *tp);

#ifdef __cplusplus
}
#endif
#endif /* SL_SHARD_TP_H */
