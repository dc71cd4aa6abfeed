/* base/tp_group.h — the tensor-parallel group as hooks: a model calls them
 * (through sl_unit_access.tp, models/tp.h) and shard/ implements them over
 * the mesh's TP communicator (shard/tp.h), so neither includes the other.
 *
 * Buffers passed to the hooks are backend memory (host on the CPU backend,
 * device memory on CUDA), like every buffer a model computes on. */
#ifndef SL_BASE_TP_GROUP_H
#define SL_BASE_TP_GROUP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SL_TP_SUM = 0, SL_TP_MAX = 1 } sl_tp_op;

typedef struct {
  int rank, size; /* this rank's index in the TP group, T */
  void *user;
  /* buf (n) := op over the TP ranks of buf (n), in place, on every TP rank. */
  int (*allreduce)(void *user, float *buf, int64_t n, sl_tp_op op);
  /* out (T*n) := in (n) of TP rank 0, then rank 1, ... (out != in). */
  int (*allgather)(void *user, const float *in, float *out, int64_t n);
  /* out (n) := sum over TP ranks r of their in[rank*n .. rank*n + n) (in is
   * T*n, out != in): the reduce-scatter of sequence parallelism. */
  int (*reducescatter)(void *user, const float *in, float *out, int64_t n);
} sl_tp_group;

#ifdef __cplusplus
}
#endif
#endif /* SL_BASE_TP_GROUP_H */
