/* engine/dryrun.c — the engine's dry run (engine/dryrun.h): a counting
 * world of N ranks played as one of them, the trainer's own setup
 * (sl_trainer_setup_dry) and step (sl_trainer_step), the figures a metrics
 * line would carry for that step. The world answers the splits the
 * trainer's code makes of it: the mesh's (shard/mesh.c,
 * sl_par_mesh_split_rule) and under TP x PP the loss communicator's
 * (engine/tensor_par.c). */
#include "engine/dryrun.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/trainer_internal.h"
#include "shard/fsdp.h"
#include "shard/mesh.h"

typedef struct {
  sl_mesh_dims dims; /* the mesh's sizes: the context of sl_par_mesh_split_rule */
  int nmesh;         /* the splits sl_par_mesh_create makes of the world */
  int T, P;
} dry_rules;

/* What rank passes to the n-th split of the world: the mesh's own rule
 * (shard/mesh.c), then under TP x PP the loss communicator's
 * (engine/tensor_par.c, sl_tpar_init: one TP coordinate, in world order). */
static int world_split(void *ctx, int n, int rank, int *color, int *key) {
  const dry_rules *d = ctx;
  if (n < d->nmesh) return sl_par_mesh_split_rule((void *)&d->dims, n, rank, color, key);
  if (n == d->nmesh && d->T > 1 && d->P > 1) {
    *color = rank % d->T;
    *key = rank;
    return SL_OK;
  }
  return sl_fail(SL_EINTERNAL, "dry run: split #%d of the world is not one the trainer makes", n);
}

/* The world's children (the mesh's axes and groups, the loss communicator) are never split. */
static sl_comm_count_rule world_child(void *ctx, int n, int color) {
  (void)n;
  (void)color;
  return (sl_comm_count_rule){NULL, NULL, ctx};
}

/* The run's settings as the dry run takes them: one thread, tier none, nothing written. */
static sl_train_cfg dry_cfg(const sl_train_cfg *cfg) {
  sl_train_cfg c = *cfg;
  c.threads = 1;
  snprintf(c.offload_optimizer, sizeof c.offload_optimizer, "none");
  snprintf(c.offload_params, sizeof c.offload_params, "none");
  c.ckpt_dir[0] = c.save[0] = c.metrics[0] = 0;
  c.resume = 0;
  return c;
}

/* The stage's figures (--pp > 1): its plan and the PP communicator's point-to-point counters of the step. */
static int stage_info(const trainer *t, const sl_comm_stats *p0, const sl_comm_stats *p1, sl_dry_result *out) {
  const sl_pp_plan *p = t->par.pplan;
  if (p->S > SL_DRY_MAX_STAGES)
    return sl_fail(SL_EINPUT, "dry run: %d virtual stages (at most %d)", p->S, SL_DRY_MAX_STAGES);
  out->stage = t->par.pmesh->axis[SL_AXIS_PP].coord;
  out->nsets = (int)t->nsets;
  for (int u = 0; u < p->nunits; u++) out->ncomputed += p->local[u];
  out->sends = p1->calls[SL_COLL_SEND] - p0->calls[SL_COLL_SEND];
  out->recvs = p1->calls[SL_COLL_RECV] - p0->calls[SL_COLL_RECV];
  out->send_bytes = p1->bytes[SL_COLL_SEND] - p0->bytes[SL_COLL_SEND];
  out->recv_bytes = p1->bytes[SL_COLL_RECV] - p0->bytes[SL_COLL_RECV];
  out->nstages = p->S;
  for (int v = 0; v < p->S; v++) out->layers[v] = p->layers[v];
  return SL_OK;
}

/* What the step asked for: arena peaks over s0 (the caller's counters), fsdp's bytes, the op table's counts. */
static void step_figures(const trainer *t, const sl_mem_stats *s0, sl_dry_result *out) {
  sl_mem_stats s1;
  sl_mem_get(&s1);
  for (int a = 0; a < SL_ARENA_COUNT; a++) out->peak[a] = s1.peak[a] - s0->cur[a];
  out->total_peak = s1.total_peak - s0->total_cur;
  sl_comm_stats sh, rp;
  sl_fsdp_comm_stats(t->f, &sh, &rp);
  sl_epar_add_stats(&t->par.ep, &sh);
  for (int k = 0; k < SL_COLL_NKINDS; k++) {
    out->comm[k] = sh.bytes[k] + rp.bytes[k];
    if (k != SL_COLL_RECV) out->comm_total += out->comm[k]; /* sent bytes, as the metrics count */
  }
  out->shard_size = sl_fsdp_shard_size(t->f);
  out->replica_size = sl_fsdp_replica_size(t->f);
  sl_count_get(t->k, &out->step);
  const sl_train_cfg *c = &t->cfg;
  out->model_flops_token = (double)t->m->vt->flops_per_token(t->m, c->seq_len);
  out->tokens = c->micro_batch * c->seq_len * c->grad_accum;
  for (int u = 0; u < t->m->nunits; u++)
    out->nparams += !t->par.pplan || t->par.pplan->held[u] ? sl_model_unit_held(t->m, u) : 0;
  out->max_unit = sl_model_max_unit_numel(t->m);
  out->tp = t->par.pmesh->axis[SL_AXIS_TP].size;
  out->dp = t->par.pmesh->group[SL_GROUP_DP].size;
  out->pp = t->par.pmesh->axis[SL_AXIS_PP].size;
}

/* The set-up trainer's first step, as sl_train_run takes it (peaks and fsdp's counters reset first). */
static int dry_step(trainer *t, const sl_mem_stats *s0, sl_dry_result *out) {
  sl_mem_stats st;
  sl_mem_get(&st);
  for (int a = 0; a < SL_ARENA_COUNT; a++) out->start[a] = st.cur[a] - s0->cur[a];
  sl_comm *tp = t->cfg.tp > 1 ? t->par.pmesh->axis[SL_AXIS_TP].comm : NULL, *pp = t->par.pmesh->axis[SL_AXIS_PP].comm;
  sl_comm_stats tp0 = {0}, tp1 = {0}, pp0, pp1;
  sl_mem_reset_peaks();
  sl_fsdp_reset_comm_stats(t->f);
  sl_count_reset(t->k);
  if (tp) sl_comm_get_stats(tp, &tp0);
  sl_comm_get_stats(pp, &pp0);
  step_out o = {0};
  int rc = sl_trainer_step(t, 0, &o);
  free(o.moe_load);
  free(o.moe_stats);
  if (tp) sl_comm_get_stats(tp, &tp1);
  sl_comm_get_stats(pp, &pp1);
  if (rc) return rc;
  step_figures(t, s0, out);
  for (int k = 0; k < SL_COLL_NKINDS; k++) out->tp_comm[k] = tp1.bytes[k] - tp0.bytes[k];
  return t->par.pplan ? stage_info(t, &pp0, &pp1, out) : SL_OK;
}

int sl_train_dry_run(const sl_train_cfg *cfg, const sl_model_config *mc, int world_size, int rank, sl_dry_result *out) {
  memset(out, 0, sizeof *out);
  int W = world_size, T = cfg->tp > 1 ? (int)cfg->tp : 1, P = cfg->pp > 1 ? (int)cfg->pp : 1;
  if (W < 1 || rank < 0 || rank >= W) return sl_fail(SL_EINPUT, "dry run: rank %d of world %d", rank, W);
  dry_rules d = {{.world = W, .tp = T, .pp = P, .dp_shard = (int)cfg->shard_group, .ep = (int)cfg->ep}, 0, T, P};
  for (int c0, k0; sl_par_mesh_split_rule(&d.dims, d.nmesh, 0, &c0, &k0) == SL_OK;) d.nmesh++;
  sl_clear_error(); /* the probe's end (a mesh that does not divide: the trainer refuses it with its own message) */
  sl_train_cfg c = dry_cfg(cfg);
  sl_mem_stats s0;
  sl_mem_get(&s0);
  sl_comm_count_rule rule = {world_split, world_child, &d};
  sl_comm *world = NULL;
  if (sl_comm_count_create_rule(W, rank, &rule, &world) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "dry run: %s", sl_comm_last_error());
  trainer t;
  int rc = sl_trainer_setup_dry(&t, &c, world, mc);
  if (!rc) rc = dry_step(&t, &s0, out);
  sl_trainer_free(&t);
  sl_comm_destroy(world);
  sl_mem_restore(&s0); /* the caller's counters, as they were */
  return rc;
}
