/* offload/placement.h — where a rank's compute threads run (hwloc): the
 * cores nearest its GPU on CUDA runs, an even share of the node's cores on
 * CPU runs, or what the launcher already chose. Process-local; the mesh
 * report across ranks is engine/hosts.c. */
#ifndef SL_OFFLOAD_PLACEMENT_H
#define SL_OFFLOAD_PLACEMENT_H

typedef struct {
  int bound;     /* 1: this call bound the process's threads to cpus[] */
  int numa;      /* OS index of the NUMA node holding the first CPU of the set (-1: unknown) */
  int ncpus;     /* CPUs (hardware threads) in the set the rank runs on */
  char cpus[48]; /* that set in list form, "0-3,8" (truncated with "...") */
  char why[96];  /* how the set was chosen, or why nothing was bound */
} sl_bind_info;

/* local_rank of local_size ranks on this host; gpu: the CUDA device ordinal
 * this rank uses (-1: CPU run). Never fails: without hwloc, with SL_BIND=0,
 * or when the ranks outnumber the cores, it binds nothing and says why. */
void sl_bind_local(int local_rank, int local_size, int gpu, sl_bind_info *out);

#endif
