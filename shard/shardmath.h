/* shard/shardmath.h — the one place that decides how a flat buffer is split.
 *
 * A unit's flat buffer of `numel` elements is padded to a multiple of
 * (group_size * align) elements; rank r of the shard group owns the
 * contiguous slice [r * shard, (r + 1) * shard) of the padded buffer. The
 * runtime, the checkpoint code and the planner all call sl_shard_slice, so
 * they cannot disagree.
 */
#ifndef SL_SHARDMATH_H
#define SL_SHARDMATH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t numel;  /* real elements of the flat buffer */
  int64_t padded; /* numel rounded up to a multiple of group_size * align */
  int64_t shard;  /* padded / group_size: elements every rank holds */
  int64_t offset; /* first element of this rank's shard in the flat buffer */
  int64_t valid;  /* elements of the shard that are real (not padding), >= 0 */
} sl_slice;

/* Fills *out for `rank` of a group of `group_size` ranks. align >= 1. */
void sl_shard_slice(int64_t numel, int group_size, int64_t align, int rank, sl_slice *out);

#ifdef __cplusplus
}
#endif
#endif /* SL_SHARDMATH_H */
