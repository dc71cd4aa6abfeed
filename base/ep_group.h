/* base/ep_group.h — the expert-parallel group as hooks: a mixture-of-experts
 * block calls them (through sl_unit_access.ep, models/model.h) to send each
 * token row to the EP rank that holds its expert and to bring the experts'
 * outputs back; shard/ implements them over the mesh's EP communicator
 * (shard/ep.h), so neither includes the other.
 *
 * Rows are `width` floats of backend memory (host on the CPU backend, device
 * memory on CUDA); the counts are host int64 arrays of `size` entries. At
 * EP = 1 a model calls no hook (there is nothing to exchange). */
#ifndef SL_BASE_EP_GROUP_H
#define SL_BASE_EP_GROUP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int rank, size; /* this rank's index in the EP group, EP */
  void *user;
  /* scount holds n int64 for each EP rank in rank order (n * size entries);
   * rcount[p*n .. p*n+n) := the n that EP rank p passed for this rank (one
   * all-to-all of n int64 per peer). Under the counting backend (the
   * planner's dry run, which moves no data) rcount := scount: the balanced
   * routing the dry run assumes. */
  int (*counts)(void *user, const int64_t *scount, int64_t *rcount, int64_t n);
  /* send holds scount[0] rows for EP rank 0, then scount[1] rows for rank 1,
   * ... back to back; recv receives rcount[p] rows from each rank p, in rank
   * order, back to back (rcount as counts returned it). send != recv. */
  int (*alltoallv)(void *user, const float *send, const int64_t *scount, float *recv, const int64_t *rcount,
                   int64_t width);
} sl_ep_group;

#ifdef __cplusplus
}
#endif
#endif /* SL_BASE_EP_GROUP_H */
