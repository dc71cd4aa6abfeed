/* plan/engine_run.c — the engine check (plan/engine_run.h): builds the
 * model with sl_model_create_full and the FSDP runtime with sl_fsdp_create on
 * the counting op table and counting communicators, creates the optimizer
 * state the trainer creates, and drives one step with the trainer's
 * protocol. Every byte and collective comes from the engine's own code.
 * Tensor parallelism (r->tp = T > 1, engine/trainer.c's mesh: TP fastest):
 * the model is TP rank rank % T's, its sl_unit_access.tp hooks are
 * shard/tp.c's over the TP communicator and fsdp runs on the dp_shard and
 * dp_replicate communicators of a mesh (shard/mesh.c, the run's own) split
 * from a counting world of one stage's TP x DP ranks. */
#include "plan/engine_run.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "models/model.h"
#include "shard/comm.h"
#include "shard/fsdp.h"
#include "shard/mesh.h"
#include "shard/tp.h"

typedef struct {
  sl_model *m;
  sl_fsdp *f;
  const sl_ops *ops;
  sl_kctx *k;
  float **opt;             /* (U) master | m | v of each unit's optimizer view, 3 x count floats */
  sl_comm *tp;             /* the counting TP communicator (T ranks); NULL at T = 1 */
  const sl_plan_stage *st; /* a pipeline stage's driver; NULL: the whole model, micro-batch by micro-batch */
} run_t;

/* 1: this rank holds unit u's parameters (and its optimizer state) */
static int holds(const run_t *t, int u) { return !t->st || t->st->held[u]; }

/* tied-weight access for the model, as the trainer wires it */
static int acc_params(void *user, int u, const float **p) { return sl_fsdp_pinned_params(((run_t *)user)->f, u, p); }
static int acc_grads(void *user, int u, float **g) { return sl_fsdp_grad_buffer(((run_t *)user)->f, u, g); }

/* The i-th tensor of unit u TP rank m->tp_rank counts in the gradient norm
 * (engine/tp_run.c's rule: a slice several TP ranks hold counts on the
 * first of them). */
static int tp_counted(void *ctx, int u, int i, int64_t *lo, int64_t *hi) {
  const sl_model *m = ctx;
  for (int k = 0, seen = 0; k < m->units[u].ntensors; k++) {
    const sl_tensor_spec *ts = &m->units[u].t[k];
    if (m->tp_rank % ts->tp_replicas == 0 && seen++ == i) {
      *lo = ts->offset;
      *hi = ts->offset + ts->numel;
      return 1;
    }
  }
  return 0;
}

/* The gradient norm under TP (engine/tp_run.c sl_trainer_grad_sumsq): this
 * rank's counted part summed over the shard group, then one double
 * all-gathered over the TP group. */
static int tp_grad_sumsq(run_t *t, double *out) {
  double mine = 0.0, *all = calloc((size_t)sl_comm_size(t->tp), sizeof(double));
  if (!all) return sl_fail(SL_ENOMEM, "engine check: out of memory");
  int rc = sl_fsdp_grad_sumsq_part(t->f, tp_counted, t->m, &mine);
  if (!rc && sl_comm_allgather_sync(t->tp, &mine, all, 1, SL_F64) != SL_COMM_OK)
    rc = sl_fail(SL_ECOMM, "engine check: %s", sl_comm_last_error());
  *out = mine;
  free(all);
  return rc;
}

/* One optimizer step with the trainer's protocol (engine/trainer.c
 * sl_trainer_run_micro + train_step + optimizer_step, tier none). This must
 * match the step order of engine/schedule.c / the trainer: micro-batches
 * (begin, forward acquire / compute / release, backward ..., end), the
 * gradient norm, then per unit view -> AdamW -> set_view, then finish. */
static int drive_step(run_t *t, int64_t A) {
  int U = t->m->nunits, rc = SL_OK;
  double ss;
  if (t->st) { /* a pipeline stage: the executor's step and norm */
    rc = t->st->step(t->st->user, t->m, t->f, (int)A, &ss);
    A = 0;
  }
  for (int k = 0; k < A && !rc; k++) {
    rc = sl_fsdp_begin_micro(t->f, k, (int)A);
    for (int u = 0; u < U && !rc; u++) {
      const float *p;
      rc = sl_fsdp_fwd_acquire(t->f, u, &p);
      if (!rc) rc = t->m->vt->fwd(t->m, u, p);
      if (!rc) rc = sl_fsdp_fwd_release(t->f, u);
    }
    for (int u = U - 1; u >= 0 && !rc; u--) {
      const float *p;
      float *g;
      rc = sl_fsdp_bwd_acquire(t->f, u, &p, &g);
      if (!rc) rc = t->m->vt->bwd(t->m, u, p, g);
      if (!rc) rc = sl_fsdp_bwd_release(t->f, u);
    }
    if (!rc) rc = sl_fsdp_end_micro(t->f);
  }
  if (!rc && !t->st) rc = t->tp ? tp_grad_sumsq(t, &ss) : sl_fsdp_grad_sumsq(t->f, &ss);
  for (int u = 0; u < U && !rc; u++) {
    if (!holds(t, u)) continue; /* another stage's unit */
    sl_fsdp_view_t v = sl_fsdp_view(t->f, u);
    float *master = t->opt[u], *mom = master + v.count, *var = mom + v.count;
    t->ops->adamw(t->k, master, mom, var, v.grads, v.count, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f);
    rc = sl_fsdp_set_view(t->f, u, master);
  }
  if (!rc) rc = sl_fsdp_finish_step(t->f);
  return rc;
}

int sl_plan_engine_run(const sl_model_config *cfg, const sl_plan_run *r, int rank, sl_plan_mem *out,
                       sl_plan_engine_info *info) {
  return sl_plan_engine_run_stage(cfg, r, rank, NULL, out, info);
}

int sl_plan_engine_run_stage(const sl_model_config *cfg, const sl_plan_run *r, int rank, const sl_plan_stage *st,
                             sl_plan_mem *out, sl_plan_engine_info *info) {
  memset(out, 0, sizeof *out);
  if (info) memset(info, 0, sizeof *info);
  int W = r->world, T = r->tp > 1 ? r->tp : 1, P = st ? st->pp : 1;
  if (W < 1 || rank < 0 || rank >= W) return sl_fail(SL_EINPUT, "engine check: rank %d of world %d", rank, W);
  if (W % T) return sl_fail(SL_EINPUT, "--tp %d does not divide the number of ranks %d", T, W);
  if (P < 1 || W % (T * P))
    return sl_fail(SL_EINPUT, "--tp %d x --pp %d does not divide the number of ranks %d", T, P, W);
  int D = W / (T * P), S = r->shard_group > 0 ? r->shard_group : D; /* fsdp runs on the DP axis */
  if (r->micro_batch < 1 || r->seq_len < 1 || r->grad_accum < 1)
    return sl_fail(SL_EINPUT, "planner: micro-batch, seq-len and grad-accum must be >= 1");
  if ((r->param_bytes != 4 && r->param_bytes != 2) || (r->reduce_bytes != 4 && r->reduce_bytes != 2))
    return sl_fail(SL_EINPUT, "engine check: parameter and reduction dtypes must be fp32 or bf16");
  sl_mem_stats s0, s1;
  sl_mem_get(&s0);
  run_t t;
  memset(&t, 0, sizeof t);
  /* one stage's TP x DP ranks as a counting world split by the mesh's own code (shard/mesh.h) */
  sl_mesh_dims dims = {.world = T * D, .tp = T, .pp = 1, .dp_shard = S};
  sl_comm *world = NULL;
  sl_par_mesh *mesh = NULL;
  t.ops = sl_ops_count();
  t.st = st;
  t.k = t.ops->ctx_create(1);
  int rc = t.k ? SL_OK : SL_ENOMEM;
  if (!rc && sl_comm_count_create(T * D, rank % (T * D), sl_par_mesh_split_rule, &dims, &world) != SL_COMM_OK)
    rc = sl_fail(SL_ECOMM, "engine check: %s", sl_comm_last_error());
  if (!rc && !(rc = sl_par_mesh_create(world, &dims, &mesh)) && T > 1) t.tp = mesh->axis[SL_AXIS_TP].comm;
  /* the model with its activations, as the trainer creates it */
  if (!rc && st && st->nunits < 1) rc = sl_fail(SL_EINTERNAL, "engine check: a stage without units");
  if (!rc && T == 1 && !st) rc = sl_model_create(cfg, t.ops, t.k, r->micro_batch, r->seq_len, r->ac, &t.m);
  else if (!rc)
    rc = sl_model_create_full(cfg, t.ops, t.k, r->micro_batch, r->seq_len, r->ac, rank % T, T, r->sequence_parallel,
                              st ? st->local : NULL, st ? st->nunits : 0, &t.m);
  sl_comm_stats tp0 = {0}, tp1 = {0};
  int64_t *numel = NULL;
  int32_t *tok = NULL;
  if (!rc) {
    t.m->access = (sl_unit_access){&t, acc_params, acc_grads, t.tp ? sl_tp_group_over(t.tp) : sl_tp_single()};
    numel = calloc((size_t)t.m->nunits, sizeof(int64_t));
    t.opt = calloc((size_t)t.m->nunits, sizeof(float *));
    if (!numel || !t.opt) rc = sl_fail(SL_ENOMEM, "engine check: out of memory");
  }
  if (!rc) {
    for (int u = 0; u < t.m->nunits; u++) numel[u] = holds(&t, u) ? t.m->units[u].numel : 0; /* 0: another stage's */
    sl_fsdp_cfg fc = {.zero = r->zero,
                      .prefetch = r->prefetch,
                      .prefetch_bytes = r->prefetch_bytes,
                      .reshard_after_forward = r->reshard_after_forward,
                      .sync_accum = r->sync_accum,
                      .param_dtype = r->param_bytes == 2 ? SL_BF16 : SL_F32,
                      .reduce_dtype = r->reduce_bytes == 2 ? SL_BF16 : SL_F32,
                      .align = r->align};
    const sl_fsdp_groups dense = {mesh->axis[SL_AXIS_DP_SHARD].comm, mesh->axis[SL_AXIS_DP_REPLICATE].comm};
    rc = sl_fsdp_create(&dense, &fc, t.ops, t.k, t.m->nunits, numel, t.m->pinned, &t.f);
  }
  /* the optimizer state of tier none: fp32 master, m, v per view (the trainer's opt_create) */
  for (int u = 0; !rc && u < t.m->nunits; u++) {
    if (!holds(&t, u)) continue;
    sl_fsdp_view_t v = sl_fsdp_view(t.f, u);
    t.opt[u] = t.ops->alloc(t.k, (size_t)v.count * 12);
    if (!t.opt[u]) rc = SL_ENOMEM;
    else sl_mem_add(SL_ARENA_OPTIM, v.count * 12);
  }
  int64_t BT = r->micro_batch * r->seq_len;
  if (!rc && !(tok = t.ops->alloc(t.k, (size_t)BT * 4))) rc = SL_ENOMEM;
  int begun = 0;
  if (!rc && st) begun = !(rc = st->begin(st->user, t.m, t.f, t.tp));
  if (!rc) {
    if (!st) sl_model_set_batch(t.m, tok, tok, 1.0f); /* a stage's driver loads its micro-batches */
    sl_mem_stats st;
    sl_mem_get(&st);
    for (int a = 0; a < SL_ARENA_COUNT; a++) out->start[a] = st.cur[a] - s0.cur[a];
    sl_mem_reset_peaks(); /* as the trainer does before its step loop */
    sl_fsdp_reset_comm_stats(t.f);
    sl_count_reset(t.k);
    if (t.tp) sl_comm_get_stats(t.tp, &tp0);
    rc = drive_step(&t, r->grad_accum);
    if (t.tp) sl_comm_get_stats(t.tp, &tp1);
  }
  if (!rc) {
    sl_mem_get(&s1);
    for (int a = 0; a < SL_ARENA_COUNT; a++) out->peak[a] = s1.peak[a] - s0.cur[a];
    out->total_peak = s1.total_peak - s0.total_cur;
    sl_comm_stats sh, rp;
    sl_fsdp_comm_stats(t.f, &sh, &rp);
    for (int k = 0; k < SL_COLL_NKINDS; k++) {
      out->comm[k] = sh.bytes[k] + rp.bytes[k];
      if (k != SL_COLL_RECV) out->comm_total += out->comm[k]; /* sent bytes, as the metrics count */
    }
    out->shard_size = sl_fsdp_shard_size(t.f);
    out->replica_size = sl_fsdp_replica_size(t.f);
    if (info) {
      sl_count_get(t.k, &info->step);
      info->model_flops_token = (double)t.m->vt->flops_per_token(t.m, r->seq_len);
      info->tokens = BT * r->grad_accum;
      info->nparams = 0;
      for (int u = 0; u < t.m->nunits; u++) info->nparams += holds(&t, u) ? t.m->units[u].numel : 0;
      info->max_unit = sl_model_max_unit_numel(t.m);
      info->tp = T;
      info->dp = D;
      for (int k = 0; k < SL_COLL_NKINDS; k++) info->tp_comm[k] = tp1.bytes[k] - tp0.bytes[k];
    }
  }
  if (begun && st->end) st->end(st->user);
  if (t.opt) {
    for (int u = 0; u < t.m->nunits; u++)
      if (t.opt[u]) {
        sl_mem_sub(SL_ARENA_OPTIM, sl_fsdp_view(t.f, u).count * 12);
        t.ops->free(t.k, t.opt[u]);
      }
    free(t.opt);
  }
  if (tok) t.ops->free(t.k, tok);
  free(numel);
  sl_fsdp_destroy(t.f);
  sl_model_destroy(t.m);
  sl_par_mesh_destroy(mesh);
  sl_comm_destroy(world);
  if (t.k) t.ops->ctx_destroy(t.k);
  sl_mem_restore(&s0); /* the caller's counters, as they were */
  return rc;
}
