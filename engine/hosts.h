/* engine/hosts.h — the ranks on their hosts: which ranks share a node and a NUMA node
 * (hostnames gathered from every rank), the binding of each rank's threads
 * (offload/placement.c), and the start-up report of it. */
#ifndef SL_ENGINE_HOSTS_H
#define SL_ENGINE_HOSTS_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "offload/placement.h"
#include "shard/comm.h"

typedef struct {
  int local_rank, local_size; /* among the ranks on this host */
  int node, nnodes;           /* this host's index (order of its first rank), hosts in the job */
  sl_bind_info bind;
} sl_hosts;

/* Collective. ops: the run's backend; a device backend binds near the device
 * it uses on this local rank (sl_backend_local_device, kernels/registry.h);
 * shard_group: --shard-group (0: all DP ranks) and tp: --tp, checked
 * against nodes. Rank 0 logs the placement (its "mesh: ..." lines); a TP
 * group or a shard group that spans nodes is warned about. */
int sl_hosts_setup(sl_comm *world, const sl_ops *ops, int64_t shard_group, int tp, sl_hosts *m);

#endif
