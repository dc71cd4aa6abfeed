/* models/tp.h — what a model sees of tensor parallelism: how each of its
 * tensors is split over the T ranks of the tensor-parallel group, and the
 * group's collectives as hooks (base/tp_group.h). shard/ implements the hooks
 * over the mesh's TP communicator (the engine wires them into sl_unit_access);
 * a model file calls them and never includes a comm header. At T = 1 the
 * group is the identity (sl_tp_single): every hook returns at once. */
#ifndef SL_MODELS_TP_H
#define SL_MODELS_TP_H

#include <stdint.h>

#include "base/tp_group.h" /* sl_tp_group, sl_tp_op: the hooks */

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

/* The group of T = 1: allreduce returns at once; a model skips allgather and
 * reducescatter at T = 1 (they would only copy), so calling them is a bug. */
sl_tp_group sl_tp_single(void);

#ifdef __cplusplus
}
#endif
#endif /* SL_MODELS_TP_H */
