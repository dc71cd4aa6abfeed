/* shard/fsdp.c — the FSDP runtime: per-unit parameter gathering with
 * prefetch, gradient reduce-scatter overlapped with backward, micro-batch
 * accumulation, hybrid (shard x replica) groups, arena accounting.
 * The protocol is written down in docs/overlap.md. */
#include "shard/fsdp.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/registry.h"

/* ---- buffer pool: recycled, exactly-sized buffers, accounted per arena ---- */
typedef struct {
  void *p;
  size_t bytes;
  int used;
  sl_arena arena;
} pbuf;

typedef struct {
  pbuf *b;
  int n, cap;
  const sl_ops *ops; /* backend memory: host or device */
  sl_kctx *k;
} pool_t;

static void *pool_get(pool_t *pl, size_t bytes, sl_arena arena, int zero) {
  for (int i = 0; i < pl->n; i++)
    if (!pl->b[i].used && pl->b[i].bytes == bytes) {
      pl->b[i].used = 1;
      pl->b[i].arena = arena;
      sl_mem_add(arena, (int64_t)bytes);
      if (zero) pl->ops->zero(pl->k, pl->b[i].p, bytes);
      return pl->b[i].p;
    }
  if (pl->n == pl->cap) {
    int nc = pl->cap ? pl->cap * 2 : 16;
    pbuf *nb = realloc(pl->b, sizeof(pbuf) * (size_t)nc);
    if (!nb) return NULL;
    pl->b = nb;
    pl->cap = nc;
  }
  void *p = pl->ops->alloc(pl->k, bytes); /* zeroed */
  if (!p) return NULL;
  pl->b[pl->n++] = (pbuf){p, bytes, 1, arena};
  sl_mem_add(arena, (int64_t)bytes);
  return p;
}

static void pool_put(pool_t *pl, void *p) {
  if (!p) return;
  for (int i = 0; i < pl->n; i++)
    if (pl->b[i].p == p) {
      pl->b[i].used = 0;
      sl_mem_sub(pl->b[i].arena, (int64_t)pl->b[i].bytes);
      return;
    }
}

static void pool_free_all(pool_t *pl) {
  for (int i = 0; i < pl->n; i++) {
    if (pl->b[i].used) sl_mem_sub(pl->b[i].arena, (int64_t)pl->b[i].bytes);
    pl->ops->free(pl->k, pl->b[i].p);
  }
  free(pl->b);
  pl->b = NULL;
  pl->n = pl->cap = 0;
}

/* ---- per-unit state ------------------------------------------------------ */
enum { P_NONE = 0, P_INFLIGHT, P_READY };

typedef struct {
  sl_slice sl;       /* this rank's slice of the unit's flat buffer */
  void *full_param;  /* ZeRO 0-2: (padded) in param dtype */
  void *shard_param; /* ZeRO 3: (shard) in param dtype */
  float *full_grad;  /* ZeRO 0-1: (padded) fp32, persistent */
  float *acc;        /* (shard) fp32 reduced gradient of the step */
  float *acc_own;    /* acc when separately allocated */
  int pinned;
  /* parameter availability for the current phase */
  int pstate;
  void *gbuf;           /* gathered buffer (param dtype) from the pool */
  float *expand;        /* fp32 expansion of bf16 params, from the pool */
  const float *compute; /* fp32 parameters to compute with */
  sl_comm_req *ag_req;
  /* gradient of the current micro-batch */
  float *grad; /* full fp32 gradient buffer */
  int grad_from_pool;
  int64_t grad_micro;     /* micro_seq the buffer was zeroed for (-1 none) */
  sl_comm_req *view_req;  /* ZeRO 0: all-gather of the reduced grads */
  sl_comm_req *param_req; /* ZeRO 1-2: all-gather of updated params */
  int nred;               /* reductions folded into acc this step */
  int g;                  /* the group it is sharded over (sl_fsdp_create's groups[g]) */
  int comp;               /* the companion acquired and released with this unit, or -1 */
  int is_comp;            /* 1: a companion (acquired through its owner; its own calls do nothing) */
} unit_t;

/* One sharding group: host communicators (borrowed) and their device twins. */
typedef struct {
  sl_comm *shard_comm, *rep_comm, *spread; /* spread: NULL, or the ranks holding other parts (EP) */
  sl_comm *dshard, *drep;                  /* the same groups for unit buffers (NCCL on GPUs) */
  int srank, ssize, rrank, rsize;
  int shared; /* 1: the same communicators as group 0 (nothing of its own to free or count) */
} grp_t;

typedef struct {
  int u;
  sl_comm_req *req;
  void *send; /* pool buffer to return (bf16 copy) or NULL */
  void *recv; /* tmp shard (pool) or NULL when straight into acc */
  int recv_is_bf16;
  int first; /* acc = result (1) or acc += result (0) */
} pending_t;

struct sl_fsdp {
  sl_fsdp_cfg cfg;
  const sl_ops *ops;
  sl_kctx *kctx;
  grp_t grp[SL_FSDP_MAX_GROUPS]; /* grp[0]: the dense parameters' */
  int ngroups;
  int srank, ssize, rrank, rsize; /* group 0's */
  int nunits;
  unit_t *units;
  pool_t pool;
  size_t pes;             /* param dtype size */
  int64_t gathered_bytes; /* gathered param buffers currently held */
  pending_t *pend;
  int npend, cappend;
  int micro, nmicro;
  int64_t micro_seq; /* micro-batches begun since creation */
  uint64_t wait_ns;
  int in_backward;
  int hold;    /* sl_fsdp_hold_params: gathered parameters stay until released */
  int view_rc; /* a failed wait in sl_fsdp_view (it returns no status), reported by the next call */
};

/* Completes *r, a comm -> compute dependency: on a device backend ordered on the device
 * (sl_comm_wait_stream on the compute stream: the host goes on). Sound because every later
 * use of the request's buffers is either work on the compute stream or a collective issued later,
 * which waits for the compute stream at issue (comm_nccl.c); the host reaches device memory only
 * through the op table's copies on that stream, and frees through it (sync first). On the host:
 * sl_comm_wait. f->wait_ns: the host time inside the call. */
static int wait_req(sl_fsdp *f, sl_comm_req **r) {
  if (!*r) return SL_OK;
  uint64_t t0 = sl_now_ns();
  int rc = f->ops->is_device() ? sl_comm_wait_stream(*r, f->ops->stream(f->kctx)) : sl_comm_wait(*r);
  f->wait_ns += sl_now_ns() - t0;
  *r = NULL;
  if (rc != SL_COMM_OK) return sl_fail(SL_ECOMM, "fsdp: %s", sl_comm_last_error());
  return SL_OK;
}

static int dev_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  const sl_fsdp *f = ctx;
  f->ops->copy(f->kctx, dst, src, bytes);
  return 0;
}

/* The device twin of host group g: the communicator the backend's registry
 * row names (kernels/registry.h), or a local comm for one rank. */
static int device_comm(sl_fsdp *f, sl_comm *g, sl_comm **out) {
  int rc = SL_COMM_OK;
  sl_devcomm_kind kind = sl_backend_device_comm(f->ops);
  if (sl_comm_size(g) == 1) rc = sl_comm_local_create("local", dev_copy, f, out);
  else if (kind == SL_DEVCOMM_NCCL) rc = sl_comm_nccl_create(g, f->ops->stream(f->kctx), out);
  else
    return sl_fail(SL_ECOMM,
                   "fsdp: device communicator: backend '%s' keeps its buffers in device memory but its "
                   "registry row names no device communicator (%s)",
                   f->ops->name, sl_devcomm_name(kind));
  return rc == SL_COMM_OK ? SL_OK : sl_fail(SL_ECOMM, "fsdp: device communicator: %s", sl_comm_last_error());
}

/* Group gi from its host communicators; a group with group 0's communicators shares its device twins. */
static int group_init(sl_fsdp *f, int gi, const sl_fsdp_groups *g) {
  grp_t *G = &f->grp[gi];
  if (!g->shard || !g->replicate) return sl_fail(SL_EINTERNAL, "fsdp: group %d has no shard or replicate communicator", gi);
  G->shard_comm = g->shard; /* borrowed */
  G->rep_comm = g->replicate;
  G->spread = g->spread && sl_comm_size(g->spread) > 1 ? g->spread : NULL;
  G->srank = sl_comm_rank(g->shard);
  G->ssize = sl_comm_size(g->shard);
  G->rrank = sl_comm_rank(g->replicate);
  G->rsize = sl_comm_size(g->replicate);
  if (gi > 0 && g->shard == f->grp[0].shard_comm && g->replicate == f->grp[0].rep_comm) {
    G->shared = 1;
    G->dshard = f->grp[0].dshard;
    G->drep = f->grp[0].drep;
    return SL_OK;
  }
  if (!f->ops->is_device()) {
    G->dshard = G->shard_comm;
    G->drep = G->rep_comm;
    return SL_OK;
  }
  /* data moves between device buffers over NCCL; the host groups keep carrying the host
   * scalars (gradient norm). A one-rank group needs no NCCL: its collectives are device
   * copies on the compute stream. */
  int rc = device_comm(f, G->shard_comm, &G->dshard);
  return rc ? rc : device_comm(f, G->rep_comm, &G->drep);
}

/* The unit roles: groups in range, companions pointing at held units of one stage. */
static int set_roles(sl_fsdp *f, const sl_fsdp_unit_roles *r, const int64_t *numel) {
  for (int u = 0; u < f->nunits; u++) {
    unit_t *U = &f->units[u];
    U->pinned = r && r->pinned ? r->pinned[u] : 0;
    U->g = r && r->group ? r->group[u] : 0;
    U->comp = r && r->companion ? r->companion[u] : -1;
    if (U->g < 0 || U->g >= f->ngroups) return sl_fail(SL_EINTERNAL, "fsdp: unit %d: group %d of %d", u, U->g, f->ngroups);
    if (U->comp >= f->nunits || U->comp == u || (U->comp >= 0 && (numel[U->comp] == 0) != (numel[u] == 0)))
      return sl_fail(SL_EINTERNAL, "fsdp: unit %d: companion %d", u, U->comp);
  }
  for (int u = 0; u < f->nunits; u++)
    if (f->units[u].comp >= 0) f->units[f->units[u].comp].is_comp = 1;
  return SL_OK;
}

int sl_fsdp_create(const sl_fsdp_groups *groups, int ngroups, const sl_fsdp_cfg *cfg, const sl_ops *ops, sl_kctx *kctx,
                   int nunits, const int64_t *numel, const sl_fsdp_unit_roles *roles, sl_fsdp **out) {
  *out = NULL;
  if (!groups || ngroups < 1 || ngroups > SL_FSDP_MAX_GROUPS)
    return sl_fail(SL_EINTERNAL, "fsdp: %d sharding groups (1..%d)", ngroups, SL_FSDP_MAX_GROUPS);
  if (cfg->zero < 0 || cfg->zero > 3) return sl_fail(SL_EINPUT, "--zero must be 0, 1, 2 or 3 (found %d)", cfg->zero);
  if (cfg->param_dtype != SL_F32 && cfg->param_dtype != SL_BF16)
    return sl_fail(SL_EINPUT, "--param-dtype must be fp32 or bf16");
  if (cfg->reduce_dtype != SL_F32 && cfg->reduce_dtype != SL_BF16)
    return sl_fail(SL_EINPUT, "--reduce-dtype must be fp32 or bf16");
  sl_fsdp *f = calloc(1, sizeof *f);
  if (!f) return sl_fail(SL_ENOMEM, "fsdp: out of memory");
  f->cfg = *cfg;
  if (f->cfg.align < 1) f->cfg.align = 1;
  f->ops = ops;
  f->kctx = kctx;
  f->nunits = nunits;
  f->pes = sl_dtype_size(cfg->param_dtype);
  f->pool.ops = ops;
  f->pool.k = kctx;
  int rc = SL_OK;
  for (int gi = 0; gi < ngroups && !rc; gi++, f->ngroups = gi) rc = group_init(f, gi, &groups[gi]);
  if (rc) goto fail;
  f->srank = f->grp[0].srank;
  f->ssize = f->grp[0].ssize;
  f->rrank = f->grp[0].rrank;
  f->rsize = f->grp[0].rsize;
  f->units = calloc((size_t)nunits, sizeof(unit_t));
  if (!f->units) {
    rc = sl_fail(SL_ENOMEM, "fsdp: out of memory");
    goto fail;
  }
  if ((rc = set_roles(f, roles, numel))) goto fail;
  for (int u = 0; u < nunits; u++) {
    unit_t *U = &f->units[u];
    const grp_t *G = &f->grp[U->g];
    sl_shard_slice(numel[u], G->ssize, f->cfg.align, G->srank, &U->sl);
    U->grad_micro = -1;
    size_t P = (size_t)U->sl.padded, s = (size_t)U->sl.shard;
    if (numel[u] == 0) continue; /* not held here (another pipeline stage's unit): no buffers */
    if (cfg->zero <= 2) {
      U->full_param = ops->alloc(kctx, P * f->pes);
      if (!U->full_param) {
        rc = SL_ENOMEM;
        goto fail;
      }
      sl_mem_add(SL_ARENA_PARAMS, (int64_t)(P * f->pes));
    } else {
      U->shard_param = ops->alloc(kctx, s * f->pes);
      if (!U->shard_param) {
        rc = SL_ENOMEM;
        goto fail;
      }
      sl_mem_add(SL_ARENA_PARAMS, (int64_t)(s * f->pes));
    }
    if (cfg->zero <= 1) {
      U->full_grad = ops->alloc(kctx, P * 4);
      if (!U->full_grad) {
        rc = SL_ENOMEM;
        goto fail;
      }
      sl_mem_add(SL_ARENA_GRADS, (int64_t)(P * 4));
      U->acc = U->full_grad + U->sl.offset; /* until a step needs its own */
    } else {
      U->acc_own = ops->alloc(kctx, s * 4);
      if (!U->acc_own) {
        rc = SL_ENOMEM;
        goto fail;
      }
      sl_mem_add(SL_ARENA_GRADS, (int64_t)(s * 4));
      U->acc = U->acc_own;
    }
  }
  *out = f;
  return SL_OK;
fail:
  sl_fsdp_destroy(f);
  return rc ? rc : SL_EINTERNAL;
}

void sl_fsdp_destroy(sl_fsdp *f) {
  if (!f) return;
  for (int u = 0; u < f->nunits && f->units; u++) {
    unit_t *U = &f->units[u];
    if (U->ag_req) sl_comm_wait(U->ag_req);
    if (U->view_req) sl_comm_wait(U->view_req);
    if (U->param_req) sl_comm_wait(U->param_req);
    size_t P = (size_t)U->sl.padded, s = (size_t)U->sl.shard;
    if (U->full_param) {
      f->ops->free(f->kctx, U->full_param);
      sl_mem_sub(SL_ARENA_PARAMS, (int64_t)(P * f->pes));
    }
    if (U->shard_param) {
      f->ops->free(f->kctx, U->shard_param);
      sl_mem_sub(SL_ARENA_PARAMS, (int64_t)(s * f->pes));
    }
    if (U->full_grad) {
      f->ops->free(f->kctx, U->full_grad);
      sl_mem_sub(SL_ARENA_GRADS, (int64_t)(P * 4));
    }
    if (U->acc_own) {
      f->ops->free(f->kctx, U->acc_own);
      sl_mem_sub(SL_ARENA_GRADS, (int64_t)(s * 4));
    }
  }
  for (int i = 0; i < f->npend; i++)
    if (f->pend[i].req) sl_comm_wait(f->pend[i].req);
  free(f->pend);
  pool_free_all(&f->pool);
  free(f->units);
  for (int gi = 0; gi < f->ngroups; gi++) {
    grp_t *G = &f->grp[gi];
    if (G->shared) continue;
    if (G->dshard && G->dshard != G->shard_comm) sl_comm_destroy(G->dshard);
    if (G->drep && G->drep != G->rep_comm) sl_comm_destroy(G->drep);
  }
  free(f);
}

int sl_fsdp_num_units(const sl_fsdp *f) { return f->nunits; }
sl_slice sl_fsdp_slice(const sl_fsdp *f, int u) { return f->units[u].sl; }
int sl_fsdp_shard_rank(const sl_fsdp *f) { return f->srank; }
int sl_fsdp_shard_size(const sl_fsdp *f) { return f->ssize; }
int sl_fsdp_replica_rank(const sl_fsdp *f) { return f->rrank; }
int sl_fsdp_replica_size(const sl_fsdp *f) { return f->rsize; }
uint64_t sl_fsdp_wait_ns(const sl_fsdp *f) { return f->wait_ns; }

static void add_stats(sl_comm_stats *a, const sl_comm_stats *b) {
  for (int k = 0; k < SL_COLL_NKINDS; k++) {
    a->calls[k] += b->calls[k];
    a->bytes[k] += b->bytes[k];
  }
  a->wait_ns += b->wait_ns;
  a->alltoall_ns += b->alltoall_ns;
  a->stream_waits += b->stream_waits;
}

/* The shard (which 0) or replica (1) traffic of every group, each communicator counted once. */
void sl_fsdp_comm_stats(const sl_fsdp *f, sl_comm_stats *shard, sl_comm_stats *replica) {
  sl_comm_stats *out[2] = {shard, replica}, x;
  for (int w = 0; w < 2; w++) {
    if (!out[w]) continue;
    memset(out[w], 0, sizeof *out[w]);
    for (int gi = 0; gi < f->ngroups; gi++) {
      const grp_t *G = &f->grp[gi];
      if (G->shared) continue;
      sl_comm *h = w ? G->rep_comm : G->shard_comm, *d = w ? G->drep : G->dshard;
      sl_comm_get_stats(h, &x);
      add_stats(out[w], &x);
      if (d != h) {
        sl_comm_get_stats(d, &x);
        add_stats(out[w], &x);
      }
    }
  }
}
void sl_fsdp_reset_comm_stats(sl_fsdp *f) {
  for (int gi = 0; gi < f->ngroups; gi++) {
    grp_t *G = &f->grp[gi];
    if (G->shared) continue;
    sl_comm_reset_stats(G->shard_comm);
    sl_comm_reset_stats(G->rep_comm);
    if (G->dshard != G->shard_comm) sl_comm_reset_stats(G->dshard);
    if (G->drep != G->rep_comm) sl_comm_reset_stats(G->drep);
  }
  f->wait_ns = 0;
}

/* fp32 -> param dtype */
static void store_params(sl_fsdp *f, void *dst, const float *src, int64_t n) {
  if (f->cfg.param_dtype == SL_F32) f->ops->copy(f->kctx, dst, src, (size_t)n * 4);
  else f->ops->f32_to_bf16(f->kctx, (uint16_t *)dst, src, n);
}

int sl_fsdp_init_params(sl_fsdp *f, int u, const float *full) {
  unit_t *U = &f->units[u];
  if (U->sl.numel == 0) return SL_OK; /* not held */
  /* full is host memory: stage what this rank keeps in backend memory */
  int64_t off = U->full_param ? 0 : U->sl.offset, n = U->full_param ? U->sl.numel : U->sl.valid;
  void *dst = U->full_param ? U->full_param : U->shard_param;
  int64_t cap = U->full_param ? U->sl.padded : U->sl.shard;
  f->ops->zero(f->kctx, dst, (size_t)cap * f->pes);
  if (n <= 0) return SL_OK;
  float *stage = f->pool.ops->alloc(f->kctx, (size_t)n * 4);
  if (!stage) return sl_fail(SL_ENOMEM, "fsdp: no memory to stage unit %d's parameters", u);
  f->ops->upload(f->kctx, stage, full + off, (size_t)n * 4);
  store_params(f, dst, stage, n);
  int rc = f->ops->sync(f->kctx); /* the context's first error, if any */
  f->ops->free(f->kctx, stage);
  return rc;
}

/* ---- parameters ---------------------------------------------------------- */
static int64_t gather_bytes(const sl_fsdp *f, const unit_t *U) {
  int64_t b = 0;
  if (f->cfg.zero == 3) b += U->sl.padded * (int64_t)f->pes;
  if (f->cfg.param_dtype == SL_BF16) b += U->sl.padded * 4;
  return b;
}

static int issue_params(sl_fsdp *f, int u) {
  unit_t *U = &f->units[u];
  if (U->comp >= 0) { /* the companion's gather goes out with its owner's */
    int rc = issue_params(f, U->comp);
    if (rc) return rc;
  }
  if (U->pstate != P_NONE) return SL_OK;
  if (f->cfg.zero == 3) {
    U->gbuf = pool_get(&f->pool, (size_t)U->sl.padded * f->pes, SL_ARENA_GATHER, 0);
    if (!U->gbuf) return SL_ENOMEM;
    if (sl_comm_allgather(f->grp[U->g].dshard, U->shard_param, U->gbuf, U->sl.shard, f->cfg.param_dtype, &U->ag_req) !=
        SL_COMM_OK)
      return sl_fail(SL_ECOMM, "fsdp: all-gather of unit %d: %s", u, sl_comm_last_error());
  }
  f->gathered_bytes += gather_bytes(f, U);
  U->pstate = P_INFLIGHT;
  return SL_OK;
}

static int ready_params(sl_fsdp *f, int u) {
  unit_t *U = &f->units[u];
  int rc = issue_params(f, u);
  if (rc) return rc;
  if (U->pstate == P_READY) return SL_OK;
  if ((rc = wait_req(f, &U->ag_req))) return rc;
  const void *src = f->cfg.zero == 3 ? U->gbuf : U->full_param;
  if (f->cfg.param_dtype == SL_BF16) {
    U->expand = pool_get(&f->pool, (size_t)U->sl.padded * 4, SL_ARENA_GATHER, 0);
    if (!U->expand) return SL_ENOMEM;
    f->ops->bf16_to_f32(f->kctx, U->expand, (const uint16_t *)src, U->sl.padded);
    if (U->gbuf) {
      pool_put(&f->pool, U->gbuf);
      U->gbuf = NULL;
    }
    U->compute = U->expand;
  } else {
    U->compute = (const float *)src;
  }
  U->pstate = P_READY;
  return SL_OK;
}

static void drop_params(sl_fsdp *f, int u) {
  unit_t *U = &f->units[u];
  if (U->comp >= 0) drop_params(f, U->comp);
  if (U->pstate == P_NONE || f->hold) return;
  if (U->gbuf) {
    pool_put(&f->pool, U->gbuf);
    U->gbuf = NULL;
  }
  if (U->expand) {
    pool_put(&f->pool, U->expand);
    U->expand = NULL;
  }
  U->compute = NULL;
  f->gathered_bytes -= gather_bytes(f, U);
  U->pstate = P_NONE;
}

/* Issues gathers for units next, next+dir, ... up to the prefetch depth and
 * the byte budget. */
static int prefetch(sl_fsdp *f, int next, int dir) {
  for (int k = 0; k < f->cfg.prefetch; k++) {
    int j = next + dir * k;
    if (j < 0 || j >= f->nunits) break;
    unit_t *U = &f->units[j];
    if (U->sl.numel == 0 || U->is_comp) break; /* not held: another pipeline stage's; companions: after the head */
    if (U->pstate != P_NONE) continue;
    if (f->cfg.prefetch_bytes > 0 && f->gathered_bytes + gather_bytes(f, U) > f->cfg.prefetch_bytes) break;
    int rc = issue_params(f, j);
    if (rc) return rc;
  }
  return SL_OK;
}

int sl_fsdp_begin_micro(sl_fsdp *f, int k, int n) {
  f->micro = k;
  f->micro_seq++;
  f->nmicro = n;
  f->in_backward = 0;
  if (k == 0) {
    int nred = f->cfg.sync_accum ? n : 1;
    for (int u = 0; u < f->nunits; u++) {
      unit_t *U = &f->units[u];
      U->nred = 0;
      if (f->cfg.zero <= 1 && U->sl.numel > 0) {
        /* ZeRO 0/1 reduce in place into the full buffer's slice when the step
         * has one reduction; with several, the sum needs its own shard. */
        if (nred > 1 && !U->acc_own) {
          U->acc_own = f->ops->alloc(f->kctx, (size_t)U->sl.shard * 4);
          if (!U->acc_own) return SL_ENOMEM;
          sl_mem_add(SL_ARENA_GRADS, U->sl.shard * 4);
        }
        U->acc = nred > 1 ? U->acc_own : U->full_grad + U->sl.offset;
      }
    }
  }
  return SL_OK;
}

int sl_fsdp_fwd_acquire(sl_fsdp *f, int u, const float **params) {
  if (f->units[u].is_comp) { /* acquired with its owner */
    *params = f->units[u].compute;
    return SL_OK;
  }
  int rc = issue_params(f, u);
  if (!rc) rc = prefetch(f, u + 1, +1);
  if (!rc) rc = ready_params(f, u);
  *params = rc ? NULL : f->units[u].compute;
  return rc;
}

int sl_fsdp_pinned_params(sl_fsdp *f, int u, const float **params) {
  int rc = ready_params(f, u);
  *params = rc ? NULL : f->units[u].compute;
  return rc;
}

int sl_fsdp_fwd_release(sl_fsdp *f, int u) {
  unit_t *U = &f->units[u];
  if (U->pinned || U->is_comp) return SL_OK; /* a companion is released with its owner */
  /* the last unit's backward follows at once; ZeRO-3 still re-gathers it
   * when resharding after forward, as the closed forms count */
  if (f->cfg.zero == 3 && !f->cfg.reshard_after_forward) return SL_OK;
  drop_params(f, u);
  return SL_OK;
}

int sl_fsdp_hold_params(sl_fsdp *f, int on) {
  f->hold = on;
  return on ? SL_OK : sl_fsdp_end_forward(f);
}

int sl_fsdp_end_forward(sl_fsdp *f) {
  /* no backward follows: nothing to reduce; drop every gathered buffer
   * (pinned units, ZeRO-3 units kept for a backward and prefetched ones
   * included); under sl_fsdp_hold_params they stay */
  for (int u = 0; u < f->nunits; u++) {
    unit_t *U = &f->units[u];
    if (U->pstate == P_INFLIGHT) {
      int rc = wait_req(f, &U->ag_req);
      if (rc) return rc;
    }
    drop_params(f, u);
  }
  return SL_OK;
}

/* ---- gradients ------------------------------------------------------------ */
static int take_grad(sl_fsdp *f, int u) {
  unit_t *U = &f->units[u];
  /* without per-micro-batch sync the buffer accumulates across the step */
  int keep = !f->cfg.sync_accum && f->micro > 0;
  if (U->grad && (U->grad_micro == f->micro_seq || keep)) return SL_OK;
  if (f->cfg.zero <= 1) {
    U->grad = U->full_grad;
    f->ops->zero(f->kctx, U->grad, (size_t)U->sl.padded * 4);
  } else {
    U->grad = pool_get(&f->pool, (size_t)U->sl.padded * 4, SL_ARENA_GRADS, 1);
    if (!U->grad) return SL_ENOMEM;
    U->grad_from_pool = 1;
  }
  U->grad_micro = f->micro_seq;
  return SL_OK;
}

int sl_fsdp_grad_buffer(sl_fsdp *f, int u, float **grads) {
  int rc = take_grad(f, u);
  *grads = rc ? NULL : f->units[u].grad;
  return rc;
}

int sl_fsdp_bwd_acquire(sl_fsdp *f, int u, const float **params, float **grads) {
  f->in_backward = 1;
  if (f->units[u].is_comp) { /* its owner's backward reads and writes it (sl_fsdp_pinned_params, sl_fsdp_grad_buffer) */
    *params = f->units[u].compute;
    *grads = f->units[u].grad;
    return SL_OK;
  }
  int rc = issue_params(f, u);
  if (!rc) rc = prefetch(f, u - 1, -1);
  if (!rc) rc = ready_params(f, u);
  if (!rc) rc = take_grad(f, u);
  *params = rc ? NULL : f->units[u].compute;
  *grads = rc ? NULL : f->units[u].grad;
  return rc;
}

/* Completes pending reduction i: folds its result into acc, frees buffers. */
static int complete_pending(sl_fsdp *f, pending_t *p) {
  unit_t *U = &f->units[p->u];
  int rc = wait_req(f, &p->req);
  if (rc) return rc;
  int64_t s = U->sl.shard;
  void *res = p->recv ? p->recv : (void *)U->acc;
  sl_dtype dt = p->recv_is_bf16 ? SL_BF16 : SL_F32;
  if (f->grp[U->g].rsize > 1) { /* hybrid: sum the shard across replicas */
    sl_comm_req *r = NULL;
    if (sl_comm_allreduce(f->grp[U->g].drep, res, s, dt, &r) != SL_COMM_OK)
      return sl_fail(SL_ECOMM, "fsdp: replica all-reduce: %s", sl_comm_last_error());
    if ((rc = wait_req(f, &r))) return rc;
  }
  if (p->recv) {
    if (p->recv_is_bf16) {
      const uint16_t *h = p->recv;
      if (p->first) {
        f->ops->bf16_to_f32(f->kctx, U->acc, h, s);
      } else {
        float *x = pool_get(&f->pool, (size_t)s * 4, SL_ARENA_WORKSPACE, 0);
        if (!x) return SL_ENOMEM;
        f->ops->bf16_to_f32(f->kctx, x, h, s);
        f->ops->add_inplace(f->kctx, U->acc, x, s);
        pool_put(&f->pool, x);
      }
    } else if (p->first) {
      f->ops->copy(f->kctx, U->acc, p->recv, (size_t)s * 4);
    } else {
      f->ops->add_inplace(f->kctx, U->acc, p->recv, s);
    }
    pool_put(&f->pool, p->recv);
  }
  if (p->send) pool_put(&f->pool, p->send);
  /* the full gradient buffer of a ZeRO-2/3 unit is free once reduced */
  if (U->grad_from_pool && U->grad) {
    pool_put(&f->pool, U->grad);
    U->grad = NULL;
    U->grad_from_pool = 0;
  }
  return SL_OK;
}

static int drain(sl_fsdp *f, int keep) {
  int done = f->npend - keep;
  if (done <= 0) return SL_OK;
  for (int i = 0; i < done; i++) {
    int rc = complete_pending(f, &f->pend[i]);
    if (rc) return rc;
  }
  memmove(f->pend, f->pend + done, sizeof(pending_t) * (size_t)keep);
  f->npend = keep;
  return SL_OK;
}

static int issue_reduce(sl_fsdp *f, int u) {
  unit_t *U = &f->units[u];
  int64_t s = U->sl.shard, P = U->sl.padded;
  pending_t p = {.u = u, .first = U->nred == 0};
  const void *send = U->grad;
  sl_dtype dt = f->cfg.reduce_dtype;
  if (dt == SL_BF16) {
    p.send = pool_get(&f->pool, (size_t)P * 2, SL_ARENA_WORKSPACE, 0);
    if (!p.send) return SL_ENOMEM;
    f->ops->f32_to_bf16(f->kctx, p.send, U->grad, P);
    send = p.send;
    p.recv = pool_get(&f->pool, (size_t)s * 2, SL_ARENA_WORKSPACE, 0);
    p.recv_is_bf16 = 1;
    if (!p.recv) return SL_ENOMEM;
  } else if (!p.first) { /* later micro-batches: reduce aside, then add */
    p.recv = pool_get(&f->pool, (size_t)s * 4, SL_ARENA_WORKSPACE, 0);
    if (!p.recv) return SL_ENOMEM;
  }
  void *recv = p.recv ? p.recv : (void *)U->acc;
  if (sl_comm_reduce_scatter(f->grp[U->g].dshard, send, recv, s, dt, &p.req) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "fsdp: reduce-scatter of unit %d: %s", u, sl_comm_last_error());
  U->nred++;
  if (f->npend == f->cappend) {
    int nc = f->cappend ? f->cappend * 2 : 16;
    pending_t *np = realloc(f->pend, sizeof(pending_t) * (size_t)nc);
    if (!np) return SL_ENOMEM;
    f->pend = np;
    f->cappend = nc;
  }
  f->pend[f->npend++] = p;
  return SL_OK;
}

int sl_fsdp_bwd_release(sl_fsdp *f, int u) {
  unit_t *U = &f->units[u];
  if (U->is_comp) return SL_OK; /* reduced with its owner */
  drop_params(f, u);
  int last = f->micro == f->nmicro - 1;
  if (f->cfg.sync_accum || last) {
    int rc = issue_reduce(f, u);
    if (!rc && U->comp >= 0) rc = take_grad(f, U->comp); /* zeros if its owner wrote none */
    if (!rc && U->comp >= 0) rc = issue_reduce(f, U->comp);
    if (rc) return rc;
    /* keep one reduction in flight: it overlaps the next unit's backward */
    return drain(f, 1);
  }
  (void)U;
  return SL_OK;
}

int sl_fsdp_end_micro(sl_fsdp *f) {
  int rc = drain(f, 0);
  if (rc) return rc;
  for (int u = 0; u < f->nunits; u++) drop_params(f, u); /* pinned ones too */
  if (f->micro == f->nmicro - 1 && f->cfg.zero == 0) {
    /* ZeRO 0 updates full buffers: all-gather the reduced shards (together
     * with the reduce-scatter this is the all-reduce of plain DP) */
    for (int u = 0; u < f->nunits; u++) {
      unit_t *U = &f->units[u];
      if (U->sl.numel == 0) continue;
      float *mine = U->full_grad + U->sl.offset;
      if (U->acc != mine) f->ops->copy(f->kctx, mine, U->acc, (size_t)U->sl.shard * 4);
      if (sl_comm_allgather(f->grp[U->g].dshard, mine, U->full_grad, U->sl.shard, SL_F32, &U->view_req) != SL_COMM_OK)
        return sl_fail(SL_ECOMM, "fsdp: all-gather of gradients: %s", sl_comm_last_error());
    }
  }
  return SL_OK;
}

/* ZeRO-0 on a device: a kernel reading the reduced shard runs after the gradient all-gather, which
 * writes the buffer around the shard in place (the race detector sees a kernel's pointer to the end
 * of its allocation), not beside it. The host backends keep the overlap. */
static void after_view(sl_fsdp *f, unit_t *U) {
  if (f->cfg.zero != 0 || !f->ops->is_device()) return;
  int rc = wait_req(f, &U->view_req);
  if (rc && !f->view_rc) f->view_rc = rc;
}

/* The sum of one double per rank of group gi's shard group, in rank order,
 * then (a group spread over EP) over the spread ranks in rank order. */
static int group_sum(sl_fsdp *f, int gi, double mine, double *out) {
  const grp_t *G = &f->grp[gi];
  sl_comm *c[2] = {G->shard_comm, G->spread};
  for (int w = 0; w < 2; w++) {
    if (!c[w]) continue;
    int n = sl_comm_size(c[w]);
    double *all = calloc((size_t)n, sizeof(double));
    if (!all) return SL_ENOMEM;
    if (sl_comm_allgather_sync(c[w], &mine, all, 1, SL_F64) != SL_COMM_OK) {
      free(all);
      return sl_fail(SL_ECOMM, "fsdp: gradient norm all-gather: %s", sl_comm_last_error());
    }
    mine = 0.0;
    for (int r = 0; r < n; r++) mine += all[r];
    free(all);
  }
  *out = mine;
  return SL_OK;
}

/* Groups sharing group 0's communicators are summed with it (one sum, in unit order). */
int sl_fsdp_group_sums(sl_fsdp *f, const double *per_unit, double *out) {
  double mine[SL_FSDP_MAX_GROUPS] = {0}, t = 0.0;
  for (int u = 0; u < f->nunits; u++) mine[f->grp[f->units[u].g].shared ? 0 : f->units[u].g] += per_unit[u];
  int rc = SL_OK;
  for (int gi = 0; gi < f->ngroups && !rc; gi++) {
    double x = 0.0;
    if (!f->grp[gi].shared && !(rc = group_sum(f, gi, mine[gi], &x))) t += x;
  }
  *out = t;
  return rc;
}

int sl_fsdp_shard_sum(sl_fsdp *f, double mine, double *out) { return group_sum(f, 0, mine, out); }

sl_fsdp_view_t sl_fsdp_view(sl_fsdp *f, int u) {
  unit_t *U = &f->units[u];
  sl_fsdp_view_t v;
  if (f->cfg.zero == 0) {
    int rc = wait_req(f, &U->view_req);
    if (rc && !f->view_rc) f->view_rc = rc;
    v.offset = 0;
    v.count = U->sl.padded;
    v.valid = U->sl.numel;
    v.grads = U->full_grad;
  } else {
    v.offset = U->sl.offset;
    v.count = U->sl.shard;
    v.valid = U->sl.valid;
    v.grads = U->acc;
  }
  return v;
}

int sl_fsdp_set_view(sl_fsdp *f, int u, const float *values) {
  unit_t *U = &f->units[u];
  if (f->view_rc) return f->view_rc;  /* the gradients the values came from are incomplete */
  if (U->sl.numel == 0) return SL_OK; /* not held */
  switch (f->cfg.zero) {
  case 0: store_params(f, U->full_param, values, U->sl.padded); return SL_OK;
  case 3: store_params(f, U->shard_param, values, U->sl.shard); return SL_OK;
  default: {
    char *mine = (char *)U->full_param + (size_t)U->sl.offset * f->pes;
    store_params(f, mine, values, U->sl.shard);
    if (sl_comm_allgather(f->grp[U->g].dshard, mine, U->full_param, U->sl.shard, f->cfg.param_dtype, &U->param_req) !=
        SL_COMM_OK)
      return sl_fail(SL_ECOMM, "fsdp: all-gather of parameters: %s", sl_comm_last_error());
    return SL_OK;
  }
  }
}

int sl_fsdp_finish_step(sl_fsdp *f) {
  if (f->view_rc) return f->view_rc;
  for (int u = 0; u < f->nunits; u++) {
    int rc = wait_req(f, &f->units[u].param_req);
    if (!rc) rc = wait_req(f, &f->units[u].view_req);
    if (rc) return rc;
  }
  return SL_OK;
}

int sl_fsdp_gather_view(sl_fsdp *f, int u, const float *view_values, float *full) {
  unit_t *U = &f->units[u];
  if (f->cfg.zero == 0) {
    f->ops->download(f->kctx, full, view_values, (size_t)U->sl.numel * 4);
    return SL_OK;
  }
  float *tmp = f->ops->alloc(f->kctx, (size_t)U->sl.padded * 4);
  if (!tmp) return SL_ENOMEM;
  int rc = SL_OK;
  sl_comm_req *r = NULL;
  if (sl_comm_allgather(f->grp[U->g].dshard, view_values, tmp, U->sl.shard, SL_F32, &r) != SL_COMM_OK ||
      sl_comm_wait(r) != SL_COMM_OK)
    rc = sl_fail(SL_ECOMM, "fsdp: gather of unit %d: %s", u, sl_comm_last_error());
  else f->ops->download(f->kctx, full, tmp, (size_t)U->sl.numel * 4);
  f->ops->free(f->kctx, tmp);
  return rc;
}

/* Queues unit u's counted ranges' sums of squares (this rank's shard) into scalar slot `slot`. */
static void unit_part(sl_fsdp *f, int u, sl_fsdp_counted_fn counted, void *ctx, int slot) {
  unit_t *U = &f->units[u];
  after_view(f, U);
  int64_t lo, hi, s0 = U->sl.offset, s1 = U->sl.offset + U->sl.shard;
  for (int i = 0; counted(ctx, u, i, &lo, &hi); i++) {
    if (lo < s0) lo = s0;
    if (hi > s1) hi = s1;
    if (hi > lo) f->ops->scalar_acc(f->kctx, slot, U->acc + (lo - s0), hi - lo, 1);
  }
}

void sl_fsdp_queue_sumsq(sl_fsdp *f, sl_fsdp_counted_fn counted, void *ctx, int slot0, int per_unit) {
  for (int u = 0; u < f->nunits; u++) {
    int slot = slot0 + (per_unit ? u : 0);
    if (counted) {
      unit_part(f, u, counted, ctx, slot);
      continue;
    }
    after_view(f, &f->units[u]);
    if (f->units[u].sl.numel) f->ops->scalar_acc(f->kctx, slot, f->units[u].acc, f->units[u].sl.shard, 1);
  }
}
