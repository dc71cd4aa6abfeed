/* models/tp.h — what a model sees of tensor parallelism: how each of its
 * tensors is split over the T ranks of the tensor-parallel group, and the
 * group's collectives as hooks. shard/ implements the hooks over the mesh's
 * TP communicator (the engine wires them into sl_unit_access); a model file
 * calls them and never includes a comm header. At T = 1 the group is the
 * identity (sl_tp_single): every hook returns at once, nothing moves.
 *
 * Buffers passed to the hooks are backend memory (host on the CPU backend,
 * device memory on CUDA), like every buffer a model computes on. */
#ifndef SL_MODELS_TP_H
#define SL_MODELS_TP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How one parameter tensor is split over the TP ranks (Megatron's names). */
typedef enum {
  SL_SPLIT_NONE = 0, /* replicated: every TP rank holds the whole tensor */
  SL_SPLIT_COL = 1,  /* column-parallel linear: dim 0 (output features) sliced */
  SL_SPLIT_ROW = 2,  /* row-parallel linear: the last dim (input features) sliced */
  SL_SPLIT_VOCAB = 3 /* vocabulary rows (dim 0) sliced, padded to a multiple of T */
} sl_split;

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

/* The group of T = 1: allreduce returns at once; a model skips allgather and
 * reducescatter at T = 1 (they would only copy), so calling them is a bug. */
sl_tp_group sl_tp_single(void);

#ifdef __cplusplus
}
#endif
#endif /* SL_MODELS_TP_H */
