/* offload/offload.h — memory tiers for optimizer state: pinned / NUMA-aware
 * host buffers, the fused CPU AdamW (+ bf16 copy), the NVMe block store
 * (io_uring, pread/pwrite fallback) and the streamed optimizer step over an
 * NVMe-resident state, all behind one optimizer-state handle (sl_optstate)
 * whose tier is none, cpu or nvme. Design and measured figures:
 * docs/offload.md.
 *
 * Sizes named *_elems / n / count are fp32 elements; *bytes are bytes.
 * Every function returning int returns SL_OK or an SL_E* code with a message
 * (base/base.h); nothing here exits.
 */
#ifndef SL_OFFLOAD_H
#define SL_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- host buffers (offload/host.c) ---------------------------------------
 * sl_host_alloc: 4096-byte aligned, zeroed by first touch inside the OpenMP
 * threads (the same contiguous per-thread ranges the AdamW kernel uses, so
 * pages land on the NUMA node of the thread that updates them). Pinned with
 * cudaHostAlloc when built with SL_USE_CUDA and a GPU is present; otherwise
 * posix_memalign + best-effort mlock. Accounted in SL_ARENA_HOST_OPTIM.
 * NULL on failure (message set). */
void *sl_host_alloc(size_t bytes, const char *what);
void sl_host_free(void *p);
/* 1 when p (from sl_host_alloc) is CUDA-pinned, else 0. */
int sl_host_is_pinned(const void *p);
/* Zeroes [p, p+bytes) with the per-thread contiguous split of the OpenMP
 * pool (first-touch placement). */
void sl_host_first_touch(void *p, size_t bytes);
/* With SL_USE_HWLOC: binds every thread of the OpenMP pool (and the caller)
 * to the cpus of the NUMA node the calling thread runs on, and sets the
 * memory policy of the threads to that node. Without hwloc: no-op, SL_OK.
 * *node_out (may be NULL) receives the node's os index, or -1. */
int sl_numa_bind_pool(int *node_out);

/* ---- AdamW with a bf16 copy (offload/cpu_adam.c) -------------------------
 * Exactly sl_ops_cpu()->adamw (same bits in p, m, v), and in the same pass
 * p_bf16[i] = bf16 round-to-nearest-even of the updated p[i]. */
void sl_adamw_bf16copy(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2, float eps,
                       float wd, int64_t step, float grad_scale, uint16_t *p_bf16);

/* Hyper-parameters of one optimizer step. */
typedef struct {
  float lr, beta1, beta2, eps;
  float weight_decay; /* used for every element when no ranges are given */
  int64_t step;       /* 1-based step count (bias correction) */
  float grad_scale;   /* clip coefficient applied to grads, 1 if none */
} sl_adam_hyper;

/* A run of elements sharing one weight decay (flags, not indices: the
 * engine builds these from its tensors' weight-decay flags). Ranges passed
 * to a step must be ascending and cover [0, n) exactly. */
typedef struct {
  int64_t offset, count; /* elements */
  float wd;
} sl_adam_range;

/* Checks ranges against n (ascending, contiguous, covering [0, n)). */
int sl_adam_ranges_check(const sl_adam_range *ranges, int nranges, int64_t n);

/* ---- NVMe block store (offload/nvme.c) -----------------------------------
 * One file DIR/NAME per store, opened O_DIRECT, preallocated to `bytes`
 * (rounded up to 4096). Requests are split into chunks of `block` bytes
 * (default 1 MiB) with at most `qd` chunks in flight (default 32), driven by
 * one io_uring thread (SL_USE_URING) or by a pool of pread/pwrite threads
 * (no liburing, io_uring refused by the kernel, or SL_NVME_BACKEND=pread).
 * Offsets must be multiples of 4096. Buffers should be 4096-aligned and sizes
 * multiples of 4096 (zero-copy); anything else goes through an aligned
 * bounce buffer, and a write whose end is not 4096-aligned zero-fills the
 * file up to the next 4096 boundary.
 * Errors (ENOSPC, EFBIG, EIO, O_DIRECT unsupported) -> SL_EIO naming the
 * file path, the offset and the errno text. */
typedef struct sl_nvme sl_nvme;
/* block <= 0 -> 1 MiB; qd <= 0 -> 32. The file is created (truncated). */
int sl_nvme_open(const char *dir, const char *name, int64_t bytes, int64_t block, int qd, sl_nvme **out);
/* Start a transfer; *ticket identifies it for sl_nvme_wait. The buffer must
 * stay valid (and, for writes, unchanged) until the wait returns. */
int sl_nvme_read_async(sl_nvme *s, int64_t offset, void *buf, int64_t bytes, uint64_t *ticket);
int sl_nvme_write_async(sl_nvme *s, int64_t offset, const void *buf, int64_t bytes, uint64_t *ticket);
/* Blocks until the transfer completes; returns its status. Each ticket is
 * waited for once. */
int sl_nvme_wait(sl_nvme *s, uint64_t ticket);
/* Waits for every outstanding transfer (status of the first failure). */
int sl_nvme_wait_all(sl_nvme *s);
int sl_nvme_fsync(sl_nvme *s);
/* Waits, closes and frees; unlinks the file when unlink_file != 0. */
int sl_nvme_close(sl_nvme *s, int unlink_file);
const char *sl_nvme_path(const sl_nvme *s);
int64_t sl_nvme_bytes(const sl_nvme *s);
const char *sl_nvme_backend(const sl_nvme *s); /* "io_uring" or "pread" */

/* ---- streamed AdamW over an NVMe-resident state (offload/nvme_adam.c) ----
 * File layout: tile t (elements [t*tile_elems, ...)) at byte offset
 * t * sl_offload_tile_bytes(tile_elems), as three sections of
 * roundup(tile_elems*4, 4096) bytes: [master fp32 | m | v].
 * One step: read tile i+1 and write tile i-1 while AdamW
 * (sl_ops_cpu()->adamw, per weight-decay range) runs on tile i, using the
 * three host buffers bufs[0..2] (each sl_offload_tile_bytes(tile_elems),
 * 4096-aligned). The updated master is copied to params_out and/or its bf16
 * rounding to params_bf16_out (either may be NULL). Bit-identical to
 * sl_ops_cpu()->adamw on whole in-memory arrays. ranges NULL -> one range
 * [0, n) with hyper->weight_decay. */
int64_t sl_offload_tile_bytes(int64_t tile_elems);
int sl_offload_adam_nvme_step(sl_nvme *store, int64_t n, int64_t tile_elems, void *const bufs[3], const float *grads,
                              const sl_adam_range *ranges, int nranges, const sl_adam_hyper *hyper, float *params_out,
                              uint16_t *params_bf16_out);

/* ---- optimizer state behind one API (offload/optstate.c) -----------------
 * Tiers:
 *   SL_TIER_NONE  fp32 master, m, v in ordinary host memory (SL_ARENA_OPTIM),
 *                 or, when cfg.ops is set, in that backend's memory
 *                 (ops->alloc, SL_ARENA_OPTIM; device memory on CUDA),
 *                 stepped by ops->adamw on gradients in that memory: the
 *                 no-offload case of the trainer, state beside the params.
 *   SL_TIER_CPU   the same in pinned / NUMA first-touched host memory
 *                 (SL_ARENA_HOST_OPTIM): GPU training with CPU AdamW.
 *   SL_TIER_NVME  in a file under nvme_dir; host memory = 3 tile buffers
 *                 within budget_bytes (SL_ARENA_HOST_OPTIM).
 * All tiers compute exactly sl_ops_cpu()->adamw (a backend NONE state: its
 * ops->adamw, one call per weight-decay range). */
typedef enum { SL_TIER_NONE = 0, SL_TIER_CPU = 1, SL_TIER_NVME = 2 } sl_tier;
/* SL_TIER_NVME's tile when tile_elems is 0: the largest multiple of 1024
 * elements whose 3 buffers fit budget_bytes, no bigger than the n elements
 * of the state (0: not even 1024 fit). Each buffer is
 * sl_offload_tile_bytes(tile); the file ceil(n / tile) of them. */
int64_t sl_optstate_nvme_tile(int64_t n, int64_t budget_bytes);
typedef enum { SL_OPT_MASTER = 0, SL_OPT_M = 1, SL_OPT_V = 2 } sl_optfield;

typedef struct {
  sl_tier tier;
  int64_t n;            /* elements of this rank's shard */
  const char *name;     /* label; the NVMe file name (default "optstate") */
  const char *nvme_dir; /* SL_TIER_NVME: directory (--nvme-path) */
  int64_t budget_bytes; /* SL_TIER_NVME: host bytes for the 3 tile buffers
                            (0 -> 3 x 48 MiB) */
  int64_t tile_elems;   /* SL_TIER_NVME: 0 -> largest that fits the budget
                            (multiple of 1024) */
  int64_t block_bytes;  /* SL_TIER_NVME: I/O chunk (0 -> 1 MiB) */
  int qd;               /* SL_TIER_NVME: queue depth (0 -> 32) */
  const sl_ops *ops;    /* SL_TIER_NONE: the backend holding the state (NULL: host memory) */
  sl_kctx *k;           /* its context */
} sl_optstate_cfg;

typedef struct sl_optstate sl_optstate;
int sl_optstate_create(const sl_optstate_cfg *cfg, sl_optstate **out);
void sl_optstate_destroy(sl_optstate *s); /* unlinks the NVMe file */
sl_tier sl_optstate_tier(const sl_optstate *s);
int64_t sl_optstate_n(const sl_optstate *s);
/* master := params (n), m := v := 0 */
int sl_optstate_init_master(sl_optstate *s, const float *params);
/* master[0, nvalid) := params (host memory), master[nvalid, n) := 0 (the
 * padding of a shard), m := v := 0. 0 <= nvalid <= n. */
int sl_optstate_init(sl_optstate *s, const float *params, int64_t nvalid);
/* One AdamW step of all n elements with grads (n, in host memory; in the
 * backend's memory for a backend NONE state, which also takes params_out
 * there and no params_bf16_out). */
int sl_optstate_step(sl_optstate *s, const float *grads, const sl_adam_range *ranges, int nranges,
                     const sl_adam_hyper *hyper, float *params_out, uint16_t *params_bf16_out);
/* Checkpoint access: elements [offset, offset+count) of one field. */
int sl_optstate_read(sl_optstate *s, sl_optfield f, int64_t offset, int64_t count, float *dst);
int sl_optstate_write(sl_optstate *s, sl_optfield f, int64_t offset, int64_t count, const float *src);
int sl_optstate_read_master(sl_optstate *s, int64_t offset, int64_t count, float *dst);
int sl_optstate_read_m(sl_optstate *s, int64_t offset, int64_t count, float *dst);
int sl_optstate_read_v(sl_optstate *s, int64_t offset, int64_t count, float *dst);
/* Host bytes this state holds (fields or tile buffers). */
int64_t sl_optstate_host_bytes(const sl_optstate *s);
/* The array holding field f (n): backend memory for a backend NONE state,
 * host memory for the none and cpu tiers; NULL for nvme (no resident array). */
float *sl_optstate_resident(const sl_optstate *s, sl_optfield f);
/* 1 when the resident arrays are in the backend's memory (cfg.ops set). */
int sl_optstate_on_backend(const sl_optstate *s);
/* The resident array of f when the host can address it (none and cpu tiers;
 * a backend NONE state on a backend whose memory is host memory), else NULL. */
float *sl_optstate_host_field(const sl_optstate *s, sl_optfield f);

#ifdef __cplusplus
}
#endif
#endif /* SL_OFFLOAD_H */
