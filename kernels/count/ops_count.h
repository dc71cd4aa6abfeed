/* kernels/count/ops_count.h — the counting backend (backend "count" of the
 * registry, kernels/registry.h): the op table with the engine's exact
 * signatures that computes nothing. Every op adds the FLOPs it would do to
 * its context; alloc hands out address space that is never committed
 * (mmap MAP_NORESERVE, untouched), so the real model and FSDP code can run
 * a 70B-parameter step in a few MiB of RAM. What the planner runs the
 * engine on (the dry run, engine/dryrun.c). Values read back from its memory are
 * whatever was there (zeros): only sizes, counts and FLOPs mean something. */
#ifndef SL_OPS_COUNT_H
#define SL_OPS_COUNT_H

#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double flops;        /* every op: multiply-adds x 2 and elementwise work */
  double matmul_flops; /* GEMMs, attention scores and the LM head (the "model FLOPs" kind) */
  uint64_t calls;      /* ops called (memory ops included) */
  int64_t live_bytes;  /* backend bytes allocated and not freed */
  int64_t peak_bytes;  /* high-water of live_bytes */
} sl_count_stats;

/* The counting op table (also sl_backend_get("count")). */
const sl_ops *sl_ops_count(void);
/* Counters of a context made by sl_ops_count()->ctx_create (zeroed there). */
void sl_count_get(const sl_kctx *k, sl_count_stats *out);
void sl_count_reset(sl_kctx *k);

#ifdef __cplusplus
}
#endif
#endif /* SL_OPS_COUNT_H */
