/* shard/shardmath.c — padding and per-rank slices of flat buffers. */
#include "shard/shardmath.h"

void sl_shard_slice(int64_t numel, int group_size, int64_t align, int rank, sl_slice *out) {
  if (group_size < 1) group_size = 1;
  if (align < 1) align = 1;
  int64_t q = (int64_t)group_size * align;
  out->numel = numel;
  out->padded = (numel + q - 1) / q * q;
  out->shard = out->padded / group_size;
  out->offset = (int64_t)rank * out->shard;
  int64_t v = numel - out->offset;
  out->valid = v < 0 ? 0 : (v > out->shard ? out->shard : v);
}
