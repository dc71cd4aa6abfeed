/* shard/fsdp.h — the fully sharded data-parallel runtime.
 *
 * Sees only flat buffers: unit u has numel[u] fp32 parameters. Knows nothing
 * about what a unit computes. Owns, per unit and per the ZeRO stage:
 *   - the parameters in the gather dtype (full at ZeRO 0-2, a shard at 3),
 *   - the gradients (full buffers while a unit's backward runs; the reduced,
 *     micro-batch-accumulated gradient for the optimizer),
 *   - the gather / reduce-scatter schedule with prefetch.
 * The optimizer state (fp32 master, m, v) belongs to the caller, sized by the
 * unit's "optimizer view" (the whole buffer at ZeRO 0, the rank's shard from
 * ZeRO 1 on), so it can live in any offload tier.
 *
 * Step protocol (one optimizer step; see docs/overlap.md):
 *   for each micro-batch k of n:
 *     sl_fsdp_begin_micro(f, k, n)
 *     for u = 0..U-1:   sl_fsdp_fwd_acquire(f, u, &p) ... compute ... sl_fsdp_fwd_release(f, u)
 *     for u = U-1..0:   sl_fsdp_bwd_acquire(f, u, &p, &g) ... compute ... sl_fsdp_bwd_release(f, u)
 *     sl_fsdp_end_micro(f)
 *   sl_fsdp_queue_sumsq, the slots fetched, sl_fsdp_group_sums (global, deterministic)
 *   for each unit: sl_fsdp_view(f, u) -> grads; caller updates its master
 *     then sl_fsdp_set_view(f, u, master)        (refreshes parameters)
 *   sl_fsdp_finish_step(f)                        (completes param gathers)
 */
#ifndef SL_FSDP_H
#define SL_FSDP_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "shard/comm.h"
#include "shard/shardmath.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_fsdp sl_fsdp;

typedef struct {
  int zero;                  /* 0, 1, 2 or 3 */
  int prefetch;              /* units gathered ahead of the one computing */
  int64_t prefetch_bytes;    /* budget for gathered buffers in flight (0 = none) */
  int reshard_after_forward; /* ZeRO-3: free gathered params after forward */
  int sync_accum;            /* 1: reduce every micro-batch; 0: once per step */
  sl_dtype param_dtype;      /* SL_F32 or SL_BF16: gathered parameters */
  sl_dtype reduce_dtype;     /* SL_F32 or SL_BF16: gradient reduction */
  int64_t align;             /* elements; padded size is a multiple of S*align (S: the shard comm's size) */
} sl_fsdp_cfg;

/* What the optimizer sees of unit u: `count` elements starting at element
 * `offset` of the unit's flat buffer (padding included, so count is the
 * same on every rank); grads points at the reduced gradient of that range. */
typedef struct {
  int64_t offset, count;
  int64_t valid; /* elements of the range inside numel */
  float *grads;
} sl_fsdp_view_t;

/* The communicators a tensor is sharded and replicated over (borrowed: they
 * must outlive the runtime): for dense parameters the mesh's dp_shard and
 * dp_replicate axes (shard/mesh.h; hybrid sharding when replicate has more
 * than one rank); an expert group can hand another pair. */
typedef struct {
  sl_comm *shard;     /* a unit's flat buffer is split over these ranks, in their order */
  sl_comm *replicate; /* the ranks that hold the same shard: its gradient is summed over them */
  sl_comm *spread;    /* NULL, or the ranks holding the other parts of the same tensors (the EP ranks
                         of an expert group): the gradient norm adds their sums */
} sl_fsdp_groups;
enum { SL_FSDP_MAX_GROUPS = 4 };

/* Per unit (each array nunits long; any may be NULL):
 *  pinned[u]    1: its parameters stay gathered from its forward until its
 *               backward (tied weights read by another unit);
 *  group[u]     the group (sl_fsdp_create's groups[]) it is sharded over
 *               (NULL: all 0). A group with group 0's communicators shares
 *               its device communicators and its norm sum;
 *  companion[u] -1, or a unit acquired and released with u: gathered with
 *               u's gather, dropped with u, reduced right after u in u's
 *               backward release. The calls on the companion itself do
 *               nothing (acquire hands back whatever is gathered); u's
 *               compute reaches it through sl_fsdp_pinned_params and
 *               sl_fsdp_grad_buffer (a MoE block and its experts unit). */
typedef struct {
  const int *pinned, *group, *companion;
} sl_fsdp_unit_roles;

/* A unit of numel 0 is not held on this rank (a pipeline stage holds its
 * own units): no buffers, never acquired, skipped by prefetch, the norm and
 * the step. */
int sl_fsdp_create(const sl_fsdp_groups *groups, int ngroups, const sl_fsdp_cfg *cfg, const sl_ops *ops, sl_kctx *kctx,
                   int nunits, const int64_t *numel, const sl_fsdp_unit_roles *roles, sl_fsdp **out);
void sl_fsdp_destroy(sl_fsdp *f);

int sl_fsdp_num_units(const sl_fsdp *f);
sl_slice sl_fsdp_slice(const sl_fsdp *f, int u); /* this rank's shard */
sl_fsdp_view_t sl_fsdp_view(sl_fsdp *f, int u);  /* optimizer view */
int sl_fsdp_shard_rank(const sl_fsdp *f);
int sl_fsdp_shard_size(const sl_fsdp *f);
int sl_fsdp_replica_rank(const sl_fsdp *f);
int sl_fsdp_replica_size(const sl_fsdp *f);

/* Sets unit u's parameters from the full fp32 values (identical on every
 * rank); this rank keeps what its stage needs. */
int sl_fsdp_init_params(sl_fsdp *f, int u, const float *full);

int sl_fsdp_begin_micro(sl_fsdp *f, int k, int n);
int sl_fsdp_fwd_acquire(sl_fsdp *f, int u, const float **params);
int sl_fsdp_fwd_release(sl_fsdp *f, int u);
/* grads: full fp32 gradient buffer of unit u, zeroed at the start of the
 * micro-batch; backward adds into it. A pinned unit's buffer can be taken
 * early with sl_fsdp_grad_buffer (tied weights). */
int sl_fsdp_bwd_acquire(sl_fsdp *f, int u, const float **params, float **grads);
int sl_fsdp_bwd_release(sl_fsdp *f, int u);
int sl_fsdp_grad_buffer(sl_fsdp *f, int u, float **grads);
/* Parameters of a pinned unit while another unit uses them. */
int sl_fsdp_pinned_params(sl_fsdp *f, int u, const float **params);
int sl_fsdp_end_micro(sl_fsdp *f);
/* Forward-only pass (evaluation): fwd_acquire / fwd_release for u = 0..U-1
 * without begin_micro, then sl_fsdp_end_forward drops every gathered
 * buffer. No gradient buffer is touched, no reduction issued. */
int sl_fsdp_end_forward(sl_fsdp *f);
/* on = 1: every parameter buffer gathered from now on stays gathered
 * (releases, end_micro and end_forward keep it) until sl_fsdp_hold_params(f,
 * 0) drops them all: ZeRO-3 under a pipeline gathers each unit once per step
 * instead of once per micro-batch. */
int sl_fsdp_hold_params(sl_fsdp *f, int on);

/* The gradient norm, in two halves: this rank's sums of squares of the
 * reduced gradients (its optimizer views; padding is zero) queued into the
 * backend's scalar slots (sl_fsdp_queue_sumsq, below), and after the
 * caller's fetch their sums over the ranks in rank order in double
 * (sl_fsdp_group_sums / sl_fsdp_shard_sum): identical on every rank and for
 * every stage. counted (optional) picks part of each unit: the elements
 * [lo, hi) of unit u's flat buffer for every i = 0, 1, ... for which
 * counted(ctx, u, i, &lo, &hi) returns 1 (disjoint ranges; it returns 0
 * after the last). Tensor parallelism counts a tensor several TP ranks
 * hold on one of them. */
typedef int (*sl_fsdp_counted_fn)(void *ctx, int u, int i, int64_t *lo, int64_t *hi);
/* The sum of one double per rank of the shard group in rank order (collective). */
int sl_fsdp_shard_sum(sl_fsdp *f, double mine, double *out);
/* The global sum of per_unit[u] (one double per unit, the same on every
 * rank of a unit's shard group but for its own part): each group's units
 * summed in unit order, then over the group's shard ranks (and spread
 * ranks), groups in order (collective over every group). With one group
 * it is sl_fsdp_shard_sum of the units' sum. */
int sl_fsdp_group_sums(sl_fsdp *f, const double *per_unit, double *out);
/* Each unit's sum of squares (every element, counted NULL; 0 for a unit
 * created with numel 0) or of its counted ranges, queued into the backend's
 * scalar slots (ops scalar_acc: no wait, no comm): unit u's into slot
 * slot0 + u (per_unit 1), or every unit's into slot0 (per_unit 0).
 * The caller fetches the slots (ops scalars_fetch), then sl_fsdp_group_sums
 * or sl_fsdp_shard_sum. */
void sl_fsdp_queue_sumsq(sl_fsdp *f, sl_fsdp_counted_fn counted, void *ctx, int slot0, int per_unit);
/* Hands back the updated fp32 values of unit u's optimizer view. */
int sl_fsdp_set_view(sl_fsdp *f, int u, const float *values);
int sl_fsdp_finish_step(sl_fsdp *f);

/* Gathers a view-sized fp32 array of every unit-rank into the full buffer
 * (numel elements) on every rank of the shard group. Collective. */
int sl_fsdp_gather_view(sl_fsdp *f, int u, const float *view_values, float *full);

/* Communication statistics of the shard and replica communicators. */
void sl_fsdp_comm_stats(const sl_fsdp *f, sl_comm_stats *shard, sl_comm_stats *replica);
void sl_fsdp_reset_comm_stats(sl_fsdp *f);
/* Nanoseconds the compute thread spent blocked waiting on communication. */
uint64_t sl_fsdp_wait_ns(const sl_fsdp *f);

#ifdef __cplusplus
}
#endif
#endif /* SL_FSDP_H */
