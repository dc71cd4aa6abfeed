/* plan/planner.c — memory / communication / time model of training
 * configurations and the search over them. The unit sizes and FLOPs per
 * token are the model's own; the memory and bytes of a data-parallel
 * TP or pipeline candidate are the engine's dry run (engine/dryrun.c: 3 and
 * 4 decoder layers, per stage under PP, scaled exactly, remembered per key),
 * with the optimizer tier's arenas applied by the engine's rules
 * (offload_tier); the time model is closed forms (docs/planner.md). */
#include "plan/planner.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "engine/dryrun.h"
#include "engine/expert_par.h"
#include "engine/schedule_pp.h"
#include "kernels/count/ops_count.h"
#include "offload/offload.h"
#include "shard/shardmath.h"

/* A candidate's engine run: the search's key (N ranks; the figures depend on nothing else). No padding: compared
 * with memcmp. */
typedef struct {
  int N, zero, S, ac, sync, e, tp, sp, pp, ep;
  int64_t b, T, A;
} dry_key;

_Static_assert(sizeof(dry_key) == 10 * sizeof(int) + 3 * sizeof(int64_t), "dry_key has padding");

struct sl_plan_dry_memo {
  int n, cap;
  dry_key *key;
  sl_plan_figures *val;
};

/* ---- the model: the engine's own unit specs and FLOP count ------------------ */
int sl_plan_model_init(const sl_model_config *cfg, sl_plan_model *out) {
  memset(out, 0, sizeof *out);
  int rc = sl_model_caps_of(cfg, &out->caps);
  if (!rc) rc = sl_model_create_specs(cfg, &out->spec);
  if (rc) return rc;
  out->dry = calloc(1, sizeof *out->dry);
  sl_model *sm = out->spec;
  out->nunits = sl_model_head_unit(sm) + 1; /* a companion (a MoE layer's experts) counts with its block */
  out->numel = calloc((size_t)sm->nunits, sizeof(int64_t));
  out->enumel = calloc((size_t)sm->nunits, sizeof(int64_t));
  out->pinned = calloc((size_t)sm->nunits, sizeof(int));
  if (!out->numel || !out->enumel || !out->pinned || !out->dry) {
    sl_plan_model_free(out);
    return sl_fail(SL_ENOMEM, "planner: out of memory");
  }
  for (int u = 0; u < sm->nunits; u++) {
    out->numel[sl_model_unit_owner(sm, u)] += sm->units[u].numel;
    if (sm->units[u].expert) out->enumel[sl_model_unit_owner(sm, u)] += sm->units[u].numel;
    out->pinned[u] = sm->pinned[u];
    out->nparams += sm->units[u].numel;
  }
  out->nactive = out->nparams;
  if (cfg->moe_experts) /* each MoE layer runs k of its E experts (gate | up | down: 3 C I each; relu2: up | down) */
    out->nactive -= sl_cfg_moe_layers(cfg) * (cfg->moe_experts - cfg->moe_topk) * (cfg->mlp_relu2 ? 2 : 3) *
                    cfg->hidden_size * cfg->moe_intermediate;
  /* shapes for the search's closed forms (activations, TP/PP splits) */
  out->L = cfg->num_hidden_layers;
  out->C = cfg->hidden_size;
  if ((out->E = cfg->moe_experts)) { /* the sparse layers: every one, or a hybrid's 'E' layers */
    out->k = cfg->moe_topk;
    out->nmoe = sl_cfg_moe_layers(cfg);
  }
  out->V = cfg->vocab_size;
  if (out->caps.recurrent) { /* Mamba-2 and the hybrids: the mixer's width is heads x head_dim */
    out->D = cfg->ssm_heads > 0 ? cfg->ssm_heads * cfg->ssm_head_dim
             : cfg->intermediate_size > 0 ? cfg->intermediate_size
                                          : cfg->expand * cfg->hidden_size;
    out->S = cfg->state_size;
    out->K = cfg->conv_kernel;
    out->R = cfg->time_step_rank;
  }
  out->La = out->L;
  if (cfg->layer_pattern[0]) { /* a hybrid: only its '*' layers attend */
    out->La = 0;
    for (const char *q = cfg->layer_pattern; *q; q++) out->La += *q == '*';
  }
  if (!out->caps.recurrent || out->caps.attention) { /* attention shapes: every attending model, hybrids too */
    out->nh = cfg->num_attention_heads;
    out->nkv = cfg->num_key_value_heads;
    out->hd = cfg->head_dim;
    out->I = cfg->intermediate_size;
    out->Q = (out->nh + 2 * out->nkv) * out->hd;
    out->A = out->nh * out->hd;
  }
  return SL_OK;
}

void sl_plan_model_free(sl_plan_model *m) {
  if (!m) return;
  free(m->numel);
  free(m->enumel);
  free(m->pinned);
  sl_model_destroy(m->spec);
  if (m->dry) {
    free(m->dry->key);
    free(m->dry->val);
    free(m->dry);
  }
  memset(m, 0, sizeof *m);
}

double sl_plan_flops_per_token(const sl_plan_model *m, int64_t T) {
  return (double)m->spec->vt->flops_per_token(m->spec, T); /* the model's own count */
}

/* Forward FLOPs per token of the attention core (QK^T, PV) of all blocks:
 * the part selective checkpointing recomputes (closed form, no causal
 * halving as in flops_per_token). */
static double attn_core_flops(const sl_plan_model *m, int64_t T) {
  return !m->caps.attention ? 0.0 : 4.0 * (double)m->La * (double)(m->nh * m->hd) * (double)T;
}

/* Forward FLOPs per token of every block together: a third of the model's
 * training FLOPs less the LM head GEMM (2 V C). */
static double blocks_fwd_flops(const sl_plan_model *m, int64_t T) {
  return sl_plan_flops_per_token(m, T) / 3.0 - 2.0 * (double)(m->V * m->C);
}

double sl_plan_recompute_flops_per_token(const sl_plan_model *m, int64_t T, sl_actckpt ac) {
  if (ac == SL_AC_FULL) return blocks_fwd_flops(m, T); /* one more forward of every block */
  if (ac == SL_AC_SELECTIVE) return attn_core_flops(m, T);
  return 0.0;
}

double sl_plan_gpt_act_bytes(double s, double b, double h, double a, int t, int sp, sl_actckpt ac) {
  if (t < 1) t = 1;
  if (ac == SL_AC_FULL) return 2.0 * s * b * h / (sp ? t : 1);
  double attn = 5.0 * a * s / h;
  if (ac == SL_AC_SELECTIVE) attn = 0.0;
  if (t == 1) return s * b * h * (34.0 + attn);
  if (sp) return s * b * h * (34.0 + attn) / t;
  return s * b * h * (10.0 + 24.0 / t + attn / t);
}

/* ---- one engine run ------------------------------------------------------------ */
void sl_plan_run_engine(sl_plan_run *r, const char *param_dtype, const char *reduce_dtype) {
  memset(r, 0, sizeof *r);
  r->world = 1;
  r->zero = 3;
  r->micro_batch = 1;
  r->seq_len = 1;
  r->grad_accum = 1;
  r->ac = SL_AC_NONE;
  r->prefetch = 1;
  r->reshard_after_forward = 1;
  r->sync_accum = 1;
  r->param_bytes = param_dtype && !strcmp(param_dtype, "bf16") ? 2 : 4;
  r->reduce_bytes = reduce_dtype && !strcmp(reduce_dtype, "bf16") ? 2 : 4;
  r->tp = 1;
  r->ep = 1;
}

void sl_plan_run_train_cfg(const sl_plan_run *r, sl_train_cfg *c) {
  c->zero = r->zero;
  c->micro_batch = r->micro_batch;
  c->seq_len = r->seq_len;
  c->grad_accum = r->grad_accum;
  c->shard_group = r->shard_group;
  c->prefetch = r->prefetch;
  c->prefetch_mb = r->prefetch_bytes >> 20;
  c->no_sync_accum = !r->sync_accum;
  c->reshard_after_forward = r->reshard_after_forward;
  c->tp = r->tp > 1 ? r->tp : 1;
  c->ep = r->ep > 1 ? r->ep : 1;
  c->sequence_parallel = r->sequence_parallel;
  if (r->pp > 1) { /* else c's pipeline settings kept (plan --engine-check --pp sets them as train parses them) */
    c->pp = r->pp;
    snprintf(c->pp_schedule, sizeof c->pp_schedule, "1f1b");
  }
  snprintf(c->param_dtype, sizeof c->param_dtype, "%s", r->param_bytes == 2 ? "bf16" : "fp32");
  snprintf(c->reduce_dtype, sizeof c->reduce_dtype, "%s", r->reduce_bytes == 2 ? "bf16" : "fp32");
  snprintf(c->activation_checkpoint, sizeof c->activation_checkpoint, "%s",
           r->ac == SL_AC_FULL        ? "full"
           : r->ac == SL_AC_SELECTIVE ? "selective"
                                      : "none");
}

/* ---- the engine's figures: its dry run --------------------------------------- */
/* The run of key k as train's settings (engine defaults otherwise). */
static void key_cfg(const dry_key *k, sl_train_cfg *c) {
  sl_plan_run r;
  sl_plan_run_engine(&r, k->e == 2 ? "bf16" : "fp32", k->e == 2 ? "bf16" : "fp32");
  r.world = k->N;
  r.shard_group = k->S;
  r.zero = k->zero;
  r.micro_batch = k->b;
  r.seq_len = k->T;
  r.grad_accum = k->A;
  r.ac = (sl_actckpt)k->ac;
  r.sync_accum = k->sync;
  r.tp = k->tp;
  r.sequence_parallel = k->sp;
  r.pp = k->pp;
  r.ep = k->ep;
  sl_train_cfg_defaults(c);
  sl_plan_run_train_cfg(&r, c);
}

/* The dry run of key k as world rank `rank` with the model's decoder layers set to L (engine/dryrun.h); under PP,
 * `layout` is --pp-layout (it places the L layers). */
static int dry_layers(const sl_plan_model *m, const dry_key *k, int64_t L, const char *layout, int rank,
                      sl_dry_result *out) {
  sl_model_config mc = m->spec->cfg;
  mc.num_hidden_layers = L;
  sl_train_cfg c;
  key_cfg(k, &c);
  if (layout) snprintf(c.pp_layout, sizeof c.pp_layout, "%s", layout);
  return sl_train_dry_run(&c, &mc, k->N, rank, out);
}

enum { LO = 3 }; /* the smaller of the two layer counts run */
/* f(L) = f(LO) + (L - LO) (f(LO + 1) - f(LO)): every decoder unit is the same, so every figure of the step is affine
 * in the number of layers once the first and last units' neighbours are decoder units on both sides (from 2 layers
 * a tied ZeRO-3 peak still differs; tests/unit/kernels/test_count_backend.c holds LO = 3 to the full run). */
static int64_t at_layers(int64_t lo, int64_t hi, int64_t L) { return lo + (L - LO) * (hi - lo); }

/* The figures of n layers from the runs a (LO layers) and b (LO + 1); a = b and n = LO: a model run whole. */
static void scale_figures(const sl_dry_result *a, const sl_dry_result *b, int64_t n, sl_plan_figures *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < SL_ARENA_COUNT; i++) {
    out->peak[i] = at_layers(a->peak[i], b->peak[i], n);
    out->start[i] = at_layers(a->start[i], b->start[i], n);
  }
  out->total_peak = at_layers(a->total_peak, b->total_peak, n);
  for (int i = 0; i < SL_COLL_NKINDS; i++)
    out->comm[i] = (uint64_t)at_layers((int64_t)a->comm[i], (int64_t)b->comm[i], n);
  out->comm_total = (uint64_t)at_layers((int64_t)a->comm_total, (int64_t)b->comm_total, n);
  for (int i = 0; i < SL_COLL_NKINDS; i++)
    out->tp_comm[i] = (uint64_t)at_layers((int64_t)a->tp_comm[i], (int64_t)b->tp_comm[i], n);
  out->pp_send = (uint64_t)at_layers((int64_t)a->send_bytes, (int64_t)b->send_bytes, n);
  out->pp_recv = (uint64_t)at_layers((int64_t)a->recv_bytes, (int64_t)b->recv_bytes, n);
  out->stage = a->stage;
  out->nsets = a->pp > 1 ? a->nsets : 1;
}

/* Train's layout of the model's layers over the P stages of key k (engine/schedule_pp.c, balanced: no --pp-layout)
 * into layers[P], and the same layout cut to at most lo and lo + 1 layers per stage as --pp-layout texts. */
static int pp_layouts(const sl_plan_model *m, const dry_key *k, int *layers, char *lo, char *hi, size_t cap,
                      int64_t *Llo, int64_t *Lhi) {
  sl_train_cfg c;
  key_cfg(k, &c);
  sl_pp_plan *p = NULL;
  int rc = sl_pp_plan_for_run(&c, &m->spec->cfg, 0, &p);
  if (rc) return rc;
  size_t ol = 0, oh = 0;
  *Llo = *Lhi = 0;
  for (int s = 0; s < k->pp; s++) {
    layers[s] = p->layers[s];
    int a = layers[s] < LO ? layers[s] : LO, b = layers[s] < LO + 1 ? layers[s] : LO + 1;
    ol += (size_t)snprintf(lo + ol, ol < cap ? cap - ol : 0, "%s%d", s ? "," : "", a);
    oh += (size_t)snprintf(hi + oh, oh < cap ? cap - oh : 0, "%s%d", s ? "," : "", b);
    *Llo += a;
    *Lhi += b;
  }
  sl_pp_plan_free(p);
  if (ol >= cap || oh >= cap) return sl_fail(SL_EINPUT, "planner: %d pipeline stages: layout too long", k->pp);
  return SL_OK;
}

/* Stage f into the run's figures out (sl_plan_figures): its memory when its peak is the highest (first: any), each
 * kind's bytes the most. */
static void merge_stage(sl_plan_figures *out, const sl_plan_figures *f, int first) {
  if (first || f->total_peak > out->total_peak) {
    memcpy(out->peak, f->peak, sizeof out->peak);
    memcpy(out->start, f->start, sizeof out->start);
    out->total_peak = f->total_peak;
    out->stage = f->stage;
    out->layers = f->layers;
    out->nsets = f->nsets;
  }
  for (int i = 0; i < SL_COLL_NKINDS; i++) {
    if (f->comm[i] > out->comm[i]) out->comm[i] = f->comm[i];
    if (f->tp_comm[i] > out->tp_comm[i]) out->tp_comm[i] = f->tp_comm[i];
  }
  if (f->comm_total > out->comm_total) out->comm_total = f->comm_total;
  if (f->pp_send + f->pp_recv > out->pp_send + out->pp_recv) {
    out->pp_send = f->pp_send;
    out->pp_recv = f->pp_recv;
  }
}

/* Whether stage s of P can hold a figure of the run (sl_plan_figures): the first and the last stage, and the first
 * inner stage with its layer count. Under 1F1B an inner stage with as many layers as an earlier inner one holds the
 * same units' sizes, sends and receives the same boundaries and issues the same collectives, with fewer
 * micro-batches in flight (P - s): its figures are at most the earlier one's (test_count_backend holds the result
 * equal to every stage's dry run). */
static int stage_needed(const int *layers, int s, int P) {
  if (s == 0 || s == P - 1) return 1;
  for (int i = 1; i < s; i++)
    if (layers[i] == layers[s]) return 0;
  return 1;
}

/* Each stage's dry run (its first rank, s x N / P) at the layouts cut to LO and LO + 1 layers per stage, scaled to
 * the stage's own layer count (the stage's figures are affine in it: tests/unit/kernels/test_count_backend.c),
 * combined as sl_plan_figures says; only >= 0: that stage's alone (every stage run). */
static int pp_figures(const sl_plan_model *m, const dry_key *k, int only, sl_plan_figures *out) {
  memset(out, 0, sizeof *out);
  if (k->pp > SL_DRY_MAX_STAGES) return sl_fail(SL_EINPUT, "planner: --pp %d (at most %d)", k->pp, SL_DRY_MAX_STAGES);
  int layers[SL_DRY_MAX_STAGES];
  char lo[4 * SL_DRY_MAX_STAGES], hi[4 * SL_DRY_MAX_STAGES];
  int64_t Llo, Lhi;
  /* the stage plan and the executor log what a run does: the search's figures say it (SL_LOG=info shows them) */
  int level = sl_log_get_level();
  if (!sl_env_set("SL_LOG")) sl_log_set_level(SL_LOG_WARN);
  int rc = pp_layouts(m, k, layers, lo, hi, sizeof lo, &Llo, &Lhi);
  for (int s = 0; !rc && s < k->pp; s++) {
    if (only >= 0 ? s != only : !stage_needed(layers, s, k->pp)) continue;
    sl_dry_result a, b;
    int rank = s * (k->N / k->pp);
    rc = dry_layers(m, k, Llo, lo, rank, &a);
    if (!rc && layers[s] > LO) rc = dry_layers(m, k, Lhi, hi, rank, &b);
    if (rc) break;
    if (layers[s] <= LO) b = a;
    sl_plan_figures f;
    scale_figures(&a, &b, layers[s] <= LO ? LO : layers[s], &f);
    f.layers = layers[s];
    merge_stage(out, &f, s == 0 || s == only);
  }
  sl_log_set_level(level);
  return rc;
}

static int dry_figures(const sl_plan_model *m, const dry_key *k, sl_plan_figures *out) {
  if (k->pp > 1) return pp_figures(m, k, -1, out);
  int64_t L = m->spec->cfg.num_hidden_layers;
  sl_dry_result a, b;
  int rc = dry_layers(m, k, L <= LO + 1 ? L : LO, NULL, 0, &a);
  if (!rc && L > LO + 1) rc = dry_layers(m, k, LO + 1, NULL, 0, &b);
  if (rc) return rc;
  if (L <= LO + 1) b = a;
  scale_figures(&a, &b, L <= LO + 1 ? LO : L, out); /* at_layers(f, f, LO) = f */
  out->layers = (int)L;
  return SL_OK;
}

/* The figures of key k (compared whole: no padding), remembered in m. */
static int key_figures(const sl_plan_model *m, const dry_key *kp, sl_plan_figures *out) {
  dry_key k = *kp;
  sl_plan_dry_memo *c = m->dry;
  for (int i = 0; c && i < c->n; i++)
    if (!memcmp(&c->key[i], &k, sizeof k)) {
      *out = c->val[i];
      return SL_OK;
    }
  int rc = dry_figures(m, &k, out);
  if (rc || !c) return rc;
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 64;
    dry_key *nk = realloc(c->key, sizeof *nk * (size_t)cap);
    if (nk) c->key = nk;
    sl_plan_figures *nv = nk ? realloc(c->val, sizeof *nv * (size_t)cap) : NULL;
    if (!nv) return SL_OK; /* not remembered: asked again next time */
    c->val = nv;
    c->cap = cap;
  }
  c->key[c->n] = k;
  c->val[c->n++] = *out;
  return SL_OK;
}

static dry_key run_key(const sl_plan_run *r) {
  int tp = r->tp > 1 ? r->tp : 1, pp = r->pp > 1 ? r->pp : 1;
  dry_key k = {r->world,
               r->zero,
               r->shard_group > 0 ? r->shard_group : r->world / (tp * pp),
               (int)r->ac,
               r->sync_accum,
               r->param_bytes,
               tp,
               r->sequence_parallel,
               pp,
               r->ep > 1 ? r->ep : 1,
               r->micro_batch,
               r->seq_len,
               r->grad_accum};
  return k;
}

int sl_plan_engine_figures(const sl_plan_model *m, const sl_plan_run *r, sl_plan_figures *out) {
  dry_key k = run_key(r);
  return key_figures(m, &k, out);
}

int sl_plan_engine_stage_figures(const sl_plan_model *m, const sl_plan_run *r, int stage, sl_plan_figures *out) {
  dry_key k = run_key(r);
  if (k.pp < 2 || stage < 0 || stage >= k.pp)
    return sl_fail(SL_EINPUT, "planner: stage %d of --pp %d (a pipeline needs P >= 2)", stage, k.pp);
  return pp_figures(m, &k, stage, out);
}

/* ---- expert parallelism ---------------------------------------------------------- */
#define EP(x) ((x)->ep > 1 ? (x)->ep : 1)

int sl_plan_ep_allowed(const sl_plan_model *m, int t, int S, int ep, int device) {
  if (ep <= 1) return 1;
  if (S < 1 || S % ep) {
    sl_fail(SL_EINPUT, "--ep %d must divide the ranks a tensor is sharded over (%d)", ep, S);
    return 0;
  }
  sl_train_cfg c;
  sl_train_cfg_defaults(&c);
  c.ep = ep;
  c.tp = t;
  return sl_epar_check(&c, &m->spec->cfg, device) == SL_OK; /* the engine's own refusals, --tp's among them */
}

double sl_plan_ep_alltoall_bytes(const sl_plan_model *m, const sl_plan_run *r, int64_t layers) {
  int64_t ep = EP(r);
  if (ep == 1 || !m->E) return 0;
  int64_t rows = r->micro_batch * r->seq_len * m->k, away = rows - rows / ep; /* rank 0 keeps its experts' rows */
  double pass = 2.0 * (double)away * (double)m->C * 4.0 + (double)((ep - 1) * (m->E / ep)) * 8.0;
  int passes = r->ac == SL_AC_FULL ? 3 : 2; /* forward, backward; full checkpointing recomputes the forward's */
  return pass * passes * (double)layers * (double)r->grad_accum;
}

/* Unit u's slices as fsdp holds them (shard/shardmath.h, aligned to 16): its dense tensors over the shard group S;
 * its experts (the 1/ep run of the MoE layer's companion unit this rank holds) over the S/ep ranks holding the same
 * experts (all zero when it has none). */
static void unit_slices(const sl_plan_model *m, int u, int S, int ep, sl_slice *dense, sl_slice *expert) {
  memset(expert, 0, sizeof *expert);
  sl_shard_slice(m->numel[u] - m->enumel[u], S, 16, 0, dense);
  if (m->enumel[u]) sl_shard_slice(m->enumel[u] / ep, S / ep, 16, 0, expert);
}

void sl_plan_ep_states(const sl_plan_model *m, int S, int ep, int zero, int param_bytes, double dense[3],
                       double expert[3]) {
  if (ep < 1) ep = 1;
  for (int i = 0; i < 3; i++) dense[i] = expert[i] = 0;
  for (int u = 0; u < m->nunits; u++) {
    sl_slice sl[2];
    unit_slices(m, u, S, ep, &sl[0], &sl[1]);
    for (int i = 0; i < 2; i++) {
      double *o = i ? expert : dense, whole = (double)sl[i].padded;
      o[0] += (double)param_bytes * (zero == 3 ? (double)sl[i].shard : whole);
      o[1] += 4.0 * (zero >= 2 ? (double)sl[i].shard : whole);
      o[2] += 12.0 * (zero >= 1 ? (double)sl[i].shard : whole);
    }
  }
}

/* ---- sizes --------------------------------------------------------------------- */
int sl_plan_parse_size(const char *s, double *out) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || !(v >= 0) || !isfinite(v))
    return sl_fail(SL_EINPUT, "size '%s': expected a finite number like 80G, 24GiB or 1.5e9", s);
  char u[8] = {0};
  int i = 0;
  for (; *end && i < 7; end++) u[i++] = (char)tolower((unsigned char)*end);
  if (*end) return sl_fail(SL_EINPUT, "size '%s': unknown unit", s);
  double mul = 1;
  if (!u[0] || !strcmp(u, "b")) mul = 1;
  else if (!strcmp(u, "k") || !strcmp(u, "kb")) mul = 1e3;
  else if (!strcmp(u, "m") || !strcmp(u, "mb")) mul = 1e6;
  else if (!strcmp(u, "g") || !strcmp(u, "gb")) mul = 1e9;
  else if (!strcmp(u, "t") || !strcmp(u, "tb")) mul = 1e12;
  else if (!strcmp(u, "kib")) mul = 1024.0;
  else if (!strcmp(u, "mib")) mul = 1048576.0;
  else if (!strcmp(u, "gib")) mul = 1073741824.0;
  else if (!strcmp(u, "tib")) mul = 1099511627776.0;
  else return sl_fail(SL_EINPUT, "size '%s': unknown unit '%s' (use K, M, G, T, KiB, MiB, GiB, TiB)", s, u);
  *out = v * mul;
  return SL_OK;
}

/* ---- the search ------------------------------------------------------------------ */
#define SL_PLAN_RESERVE 2.0e9 /* CUDA context, cuBLAS / NCCL workspaces, kernel scratch */

void sl_plan_cluster_defaults(sl_plan_cluster *c) {
  memset(c, 0, sizeof *c);
  c->gpus = 1;
  c->gpus_per_node = 8;
  c->gpu_mem = 80e9;
  c->intra_bw = 150.0;
  c->inter_bw = 20.0;
  c->tflops = 989.0;
  c->efficiency = 0.55;
  c->pcie_bw = 20.0;
  c->nvme_bw = 3.0;
  c->cpu_adam = 1.4e9;
  c->hbm_bw = 2000.0;
  c->margin = 0.9;
  c->seq_len = 4096;
  c->global_batch = 4 << 20;
  c->dtype_bytes = 2;
  c->allow_tp_pp = 1;
}

/* forward FLOPs per token of unit u: the embedding is a lookup, the head
 * one GEMM, the blocks share the rest of the model's count equally */
static double unit_fwd_flops(const sl_plan_model *m, int u, int64_t T) {
  if (u == 0) return 0.0;
  if (u == m->nunits - 1) return 2.0 * (double)(m->V * m->C);
  return blocks_fwd_flops(m, T) / (double)m->L;
}

static double unit_recompute_flops(const sl_plan_model *m, int u, int64_t T, sl_actckpt ac) {
  if (u == 0 || u == m->nunits - 1) return 0.0;
  return sl_plan_recompute_flops_per_token(m, T, ac) / (double)m->L;
}

static int same_node(int first, int last, int G) { return first / G == last / G; }

/* --act-model gpt: the activations arena from the GPT formula (the blocks of the peak stage, TP t without sequence
 * parallelism, for each micro-batch in flight) plus the engine's residual stream and head, in place of the engine's
 * own; *gpu moves by the difference. */
static void gpt_acts(const sl_plan_model *m, const sl_plan_cluster *c, const sl_plan_figures *pm, sl_plan_cand *x,
                     double *gpu) {
  if (!c->gpt_acts || !m->caps.attention) return;
  double per =
      sl_plan_gpt_act_bytes((double)c->seq_len, (double)x->micro_batch, (double)m->C, (double)m->nh, x->tp, 0, x->ac);
  double stream = (double)(x->micro_batch * c->seq_len) * (double)m->C * 2.0 * c->dtype_bytes;
  double acts = (per * (double)pm->layers + stream) * (double)pm->nsets;
  *gpu += acts - x->mem[SL_ARENA_ACTS];
  x->mem[SL_ARENA_ACTS] = acts;
}

/* The optimizer views of the candidate's units (shard/shardmath.h: the one slice function): the elements of each
 * unit's view (ZeRO-0: the padded unit, else the shard), their sum and the largest. */
static void opt_views(const sl_plan_model *m, const sl_plan_cand *x, double *sum, double *max, double *shards) {
  *sum = *max = *shards = 0;
  for (int u = 0; u < m->nunits; u++) {
    sl_slice sl[2]; /* the unit's dense part, its experts (a fsdp unit of their own) */
    unit_slices(m, u, x->shard_group, EP(x), &sl[0], &sl[1]);
    for (int i = 0; i < 2; i++) {
      double v = (double)(x->zero == 0 ? sl[i].padded : sl[i].shard);
      *sum += v;
      if (v > *max) *max = v;
      *shards += (double)sl[i].shard;
    }
  }
}

/* The optimizer tier on top of the dry run's tier none (engine/trainer.c opt_create / opt_staging,
 * offload/optstate.c). The dry run cannot run the real tiers cheaply: tier cpu allocates, first-touches and mlocks
 * 12 bytes of host memory per view element and steps them with the CPU AdamW; tier nvme writes the store file. So the
 * engine's rules, applied to its figures: the optim arena (12 bytes per view element) leaves the GPU; cpu keeps it in
 * host_optim, nvme keeps 3 tile buffers per unit there (the same tile rule as the store) and the rest in the file;
 * both stage the largest view through one host buffer (hview) and, on a device backend, one device buffer and one
 * host gradient buffer (dview, hgrad), all counted by the engine in the workspace arena. */
static void offload_tier(const sl_plan_model *m, sl_plan_cand *x, double maxview, double *gpu, double *host,
                         double *nvme) {
  *host = *nvme = 0;
  if (!x->offload_optim) return;
  double optim = x->mem[SL_ARENA_OPTIM];
  *gpu += 4.0 * maxview - optim; /* + dview */
  *host = 8.0 * maxview;         /* hview, hgrad */
  x->mem[SL_ARENA_WORKSPACE] += 12.0 * maxview;
  x->mem[SL_ARENA_OPTIM] = 0;
  if (x->offload_optim == SL_PLAN_OFF_CPU) x->mem[SL_ARENA_HOST_OPTIM] = optim;
  else {
    sl_train_cfg tc;
    sl_train_cfg_defaults(&tc);
    int64_t budget = (tc.offload_budget_mb << 20) / m->nunits;
    double tiles = 0, file = 0;
    for (int u = 0; u < m->nunits; u++) {
      sl_slice sl[2];
      unit_slices(m, u, x->shard_group, EP(x), &sl[0], &sl[1]);
      for (int i = 0; i < 2; i++) {
        int64_t n = x->zero == 0 ? sl[i].padded : sl[i].shard;
        int64_t tile = n > 0 ? sl_optstate_nvme_tile(n, budget > 0 ? budget : 3 * 48 << 20) : 0;
        double tb = tile > 0 ? (double)sl_offload_tile_bytes(tile) : 0;
        tiles += 3.0 * tb;
        file += tile > 0 ? (double)((n + tile - 1) / tile) * tb : 0;
      }
    }
    x->mem[SL_ARENA_HOST_OPTIM] = tiles;
    *nvme = file;
  }
  *host += x->mem[SL_ARENA_HOST_OPTIM];
}

/* Memory and bytes of a candidate: the engine's dry run (each stage's under PP), the tier on top; whether it fits. */
static int engine_memory(const sl_plan_model *m, const sl_plan_cluster *c, sl_plan_cand *x, sl_plan_figures *pm) {
  int N = c->gpus, G = c->gpus_per_node > 0 ? c->gpus_per_node : N;
  /* the engine defaults, the search's dtype for gathers and reductions */
  dry_key k = {N, x->zero, x->shard_group, (int)x->ac,     x->sync_accum, c->dtype_bytes, x->tp,
               0, x->pp,   EP(x),          x->micro_batch, c->seq_len,    x->grad_accum};
  int rc = key_figures(m, &k, pm);
  if (rc) return rc;
  for (int a = 0; a < SL_ARENA_COUNT; a++) x->mem[a] = (double)pm->peak[a];
  x->peak_stage = pm->stage;
  double gpu = (double)pm->total_peak, host = 0, nvme = 0, sum, maxview, shards;
  gpt_acts(m, c, pm, x, &gpu);
  opt_views(m, x, &sum, &maxview, &shards);
  offload_tier(m, x, maxview, &gpu, &host, &nvme);
  x->gpu_total = gpu + SL_PLAN_RESERVE;
  x->host_per_gpu = host;
  x->nvme_per_gpu = nvme;
  int per_node = N < G ? N : G;
  x->fits = x->gpu_total <= c->margin * c->gpu_mem && (host == 0 || host * per_node <= c->margin * c->host_mem);
  return SL_OK;
}

/* Exposed communication of one micro-batch, synchronised (*sync) or not (*nosync), from per-unit gather (ag),
 * reduce-scatter (rs), replica all-reduce (ar) and forward / backward compute (tf, tb) seconds. */
static void overlap(int U, int z3, const double *ag, const double *rs, const double *ar, const double *tf,
                    const double *tb, double *sync, double *nosync) {
  /* forward: the gather of u+1 hides behind u's compute */
  double fwd = 0;
  if (z3) {
    fwd += ag[0];
    for (int u = 0; u + 1 < U; u++) fwd += fmax(0, ag[u + 1] - tf[u]);
  }
  /* backward: the gather of u-1 and the reduction of u+1 share the link
   * while u computes; the replica all-reduce is synchronous in the engine */
  double bs = z3 ? ag[U - 1] : 0, bn = bs;
  for (int u = U - 1; u >= 0; u--) {
    double link = (u > 0 && z3 ? ag[u - 1] : 0);
    bs += fmax(0, link + (u + 1 < U ? rs[u + 1] : 0) - tb[u]) + (u + 1 < U ? ar[u + 1] : 0);
    bn += fmax(0, link - tb[u]);
  }
  bs += rs[0] + ar[0];
  *sync = fwd + bs;
  *nosync = fwd + bn;
}

/* Time of a data-parallel candidate: per-unit compute and the overlap of its collectives, the optimizer. */
static int engine_time(const sl_plan_model *m, const sl_plan_cluster *c, sl_plan_cand *x, double bws, double bwr) {
  int N = c->gpus, G = c->gpus_per_node > 0 ? c->gpus_per_node : N, per_node = N < G ? N : G;
  int S = x->shard_group, R = N / S, e = c->dtype_bytes, U = m->nunits;
  int64_t T = c->seq_len, A = x->grad_accum;
  double rate = c->tflops * 1e12 * c->efficiency, tok = (double)(x->micro_batch * T), comp = 0, recomp = 0, once = 0;
  double *w = calloc((size_t)U * 5, sizeof(double));
  if (!w) return sl_fail(SL_ENOMEM, "planner: out of memory");
  double *ag = w, *rs = w + U, *ar = w + 2 * U, *tf = w + 3 * U, *tb = w + 4 * U;
  for (int u = 0; u < U; u++) {
    sl_slice sl, xs; /* the dense part over S; its experts over the S/ep ranks holding them (EP 1: over S too) */
    unit_slices(m, u, S, EP(x), &sl, &xs);
    double sh = (double)sl.shard, xh = (double)xs.shard, on = (double)(S - 1) * sh + (double)(S / EP(x) - 1) * xh;
    once += on; /* ZeRO-0/1/2's gathers once per step, experts over their group (EP > 1 below) */
    ag[u] = x->zero == 3 ? on * e / bws : 0;
    rs[u] = on * e / bws;
    ar[u] = R > 1 ? 2.0 * (R - 1) * (ceil(sh / R) + ceil(xh / R)) * e / bwr : 0;
    tf[u] = tok * unit_fwd_flops(m, u, T) / rate;
    double rc_ = tok * unit_recompute_flops(m, u, T, x->ac) / rate;
    tb[u] = 2.0 * tf[u] + rc_;
    comp += 3.0 * tf[u];
    recomp += rc_;
  }
  double expo_sync, expo_nosync;
  overlap(U, x->zero == 3, ag, rs, ar, tf, tb, &expo_sync, &expo_nosync);
  free(w);
  int64_t nsync = x->sync_accum ? A : 1;
  double exposed = (double)nsync * expo_sync + (double)(A - nsync) * expo_nosync, view, maxview, sumshard;
  opt_views(m, x, &view, &maxview, &sumshard);
  /* once per step: ZeRO-0 gradient gather, ZeRO-1/2 parameter gather (exposed) */
  if (EP(x) > 1 && x->zero <= 2) exposed += once * e / bws;
  else if (x->zero == 0) exposed += (S - 1) * view / S * e / bws;
  else if (x->zero == 1 || x->zero == 2) exposed += (S - 1) * sumshard * e / bws;
  /* optimizer: on the GPU, or the CPU AdamW with the gradients down and the parameters up over PCIe */
  double opt = view * (24.0 + 2.0 * e) / (c->hbm_bw * 1e9);
  if (x->offload_optim) opt = view / (c->cpu_adam / per_node) + view * 2.0 * e / (c->pcie_bw * 1e9);
  if (x->offload_optim == SL_PLAN_OFF_NVME) opt += view * 24.0 / (c->nvme_bw * 1e9);
  x->compute_s = (double)A * comp;
  x->recompute_s = (double)A * recomp;
  x->bubble_s = 0;
  x->exposed_s = exposed;
  x->optim_s = opt;
  x->offload_s = 0;
  return SL_OK;
}

/* rc of the engine's dry run of candidate x: a refusal (train would refuse the layout with the same message; e.g. a
 * TP all-reduce or an expert all-to-all over 2^31 elements) makes it not runnable, its sizes unknown (0). */
static int refused(int rc, sl_plan_cand *x, sl_plan_figures *pm) {
  if (rc != SL_EINPUT && rc != SL_ECOMM) return rc;
  x->needs_mode = 1;
  x->fits = 0;
  memset(x->mem, 0, sizeof x->mem);
  memset(pm, 0, sizeof *pm);
  x->gpu_total = x->host_per_gpu = x->nvme_per_gpu = 0;
  sl_clear_error();
  return SL_OK;
}

/* The expert all-to-alls of candidate x: the engine's bytes (its dry run's count; sl_plan_ep_alltoall_bytes is their
 * closed form), over the EP group's links (ep ranks TP apart: one node when their span tp x ep fits one and divides
 * G), all exposed (the engine waits for each exchange before the experts run). Returns the seconds. */
static double a2a_time(const sl_plan_cluster *c, const sl_plan_figures *pm, sl_plan_cand *x) {
  int G = c->gpus_per_node > 0 ? c->gpus_per_node : c->gpus, span = x->tp * EP(x);
  double bw = (span <= G && G % span == 0 ? c->intra_bw : c->inter_bw) * 1e9;
  x->comm_bytes[SL_PLAN_A2A] = (double)pm->comm[SL_COLL_ALLTOALL];
  x->comm_s[SL_PLAN_A2A] = x->comm_bytes[SL_PLAN_A2A] / bw;
  return x->comm_s[SL_PLAN_A2A];
}

static int eval_engine(const sl_plan_model *m, const sl_plan_cluster *c, sl_plan_cand *x) {
  int N = c->gpus, G = c->gpus_per_node > 0 ? c->gpus_per_node : N;
  int S = x->shard_group, R = N / S;
  sl_plan_figures pm; /* the engine's own: its dry run */
  int rc = engine_memory(m, c, x, &pm);
  if (EP(x) > 1) rc = refused(rc, x, &pm); /* an all-to-all over 2^31 elements (dense layouts: none refused) */
  if (rc) return rc;
  /* communication: the engine's bytes, over the links the groups take */
  x->shard_inter = !(S <= G && G % S == 0);
  x->replica_inter = R > 1 && !same_node(0, (R - 1) * S, G);
  double bws = (x->shard_inter ? c->inter_bw : c->intra_bw) * 1e9;
  double bwr = (x->replica_inter ? c->inter_bw : c->intra_bw) * 1e9;
  memset(x->comm_bytes, 0, sizeof x->comm_bytes);
  x->comm_bytes[SL_PLAN_AG] = (double)pm.comm[SL_COLL_ALLGATHER];
  x->comm_bytes[SL_PLAN_RS] = (double)pm.comm[SL_COLL_REDUCE_SCATTER];
  x->comm_bytes[SL_PLAN_AR] = (double)pm.comm[SL_COLL_ALLREDUCE];
  x->comm_s[SL_PLAN_AG] = x->comm_bytes[SL_PLAN_AG] / bws;
  x->comm_s[SL_PLAN_RS] = x->comm_bytes[SL_PLAN_RS] / bws;
  x->comm_s[SL_PLAN_AR] = x->comm_bytes[SL_PLAN_AR] / bwr;
  x->comm_s[SL_PLAN_P2P] = 0;
  rc = engine_time(m, c, x, bws, bwr);
  x->exposed_s += a2a_time(c, &pm, x);
  return rc;
}

/* A TP, PP or TP x PP candidate: the engine's memory and bytes (its dry run; each stage's under PP), the closed-form
 * time of docs/planner.md over them. */
static int eval_tppp(const sl_plan_model *m, const sl_plan_cluster *c, sl_plan_cand *x) {
  int N = c->gpus, G = c->gpus_per_node > 0 ? c->gpus_per_node : N, t = x->tp, p = x->pp;
  int d = N / (t * p), e = c->dtype_bytes, z3 = x->zero == 3;
  int64_t T = c->seq_len, A = x->grad_accum;
  sl_plan_figures pm;
  int rc = refused(engine_memory(m, c, x, &pm), x, &pm);
  if (rc) return rc;
  /* time */
  double rate = c->tflops * 1e12 * c->efficiency;
  double tokens_gpu = (double)c->global_batch / N;
  x->compute_s = sl_plan_flops_per_token(m, T) * tokens_gpu / rate;
  x->recompute_s = sl_plan_recompute_flops_per_token(m, T, x->ac) * tokens_gpu / rate;
  x->bubble_s = (double)(p - 1) / (double)A * (x->compute_s + x->recompute_s);
  int dp_inter = !(t * d <= G), pp_inter = p > 1 && !(N <= G);
  x->shard_inter = dp_inter;
  x->replica_inter = pp_inter;
  double bi = c->intra_bw * 1e9, bx = c->inter_bw * 1e9;
  memset(x->comm_bytes, 0, sizeof x->comm_bytes);
  memset(x->comm_s, 0, sizeof x->comm_s);
  /* the engine's own bytes: the TP axis (under PP the receivers' all-gather of the boundary's t slices included),
   * fsdp's on the DP axis, the PP axis's sends and receives of the stage that moves most */
  double tp_bytes = 0;
  for (int k = 0; k < SL_COLL_NKINDS; k++) tp_bytes += (double)pm.tp_comm[k];
  double rs_b = (double)pm.comm[SL_COLL_REDUCE_SCATTER], ag_b = (double)pm.comm[SL_COLL_ALLGATHER];
  double pp_bytes = (double)pm.pp_send;
  x->comm_bytes[SL_PLAN_AR] = tp_bytes;
  x->comm_bytes[SL_PLAN_P2P] = pp_bytes;
  x->comm_bytes[SL_PLAN_RS] = rs_b;
  x->comm_bytes[SL_PLAN_AG] = ag_b;
  x->comm_s[SL_PLAN_AR] = tp_bytes / bi;
  /* the stage's sends and receives, counted as exposed (the executor overlaps a transfer with one compute op only,
   * and on one node the copy competes with compute for memory bandwidth) */
  x->comm_s[SL_PLAN_P2P] = (double)(pm.pp_send + pm.pp_recv) / (pp_inter ? bx : bi);
  x->comm_s[SL_PLAN_RS] = rs_b / (dp_inter ? bx : bi);
  x->comm_s[SL_PLAN_AG] = ag_b / (dp_inter ? bx : bi);
  double last_bwd = (x->compute_s + x->recompute_s) / (double)A * 2.0 / 3.0;
  double dp_s = x->comm_s[SL_PLAN_RS] + x->comm_s[SL_PLAN_AG];
  if (z3) /* the DP gathers and reductions run behind the compute, on their own links when t*d > G */
    x->exposed_s = x->comm_s[SL_PLAN_AR] + fmax(0, dp_s - (x->compute_s + x->recompute_s));
  else
    x->exposed_s = x->comm_s[SL_PLAN_AR] + x->comm_s[SL_PLAN_P2P] + fmax(0, x->comm_s[SL_PLAN_RS] - last_bwd) +
                   x->comm_s[SL_PLAN_AG];
  x->exposed_s += a2a_time(c, &pm, x); /* EP x PP: the stage's exchanges */
  x->optim_s = x->mem[SL_ARENA_OPTIM] / 12.0 * (24.0 + 2.0 * e) / (c->hbm_bw * 1e9); /* 12 bytes per view element */
  x->offload_s = 0;
  return SL_OK;
}

int sl_plan_eval(const sl_plan_model *m, const sl_plan_cluster *c, sl_plan_cand *x) {
  int rc = (x->tp > 1 || x->pp > 1) ? eval_tppp(m, c, x) : eval_engine(m, c, x);
  if (rc) return rc;
  /* TP, PP and TP x PP layouts are recommended as runnable (--tp, --pp with
   * 1F1B: its bubble (P-1)/(m+P-1) of the step and the blocking p2p
   * transfers are in eval_tppp's time; m is capped in the search). */
  x->step_s = x->compute_s + x->recompute_s + x->bubble_s + x->exposed_s + x->optim_s + x->offload_s;
  double tokens =
      (double)x->micro_batch * (double)x->grad_accum * (double)c->seq_len * (double)(c->gpus / (x->tp * x->pp));
  x->tokens_s = x->step_s > 0 ? tokens / x->step_s : 0;
  x->mfu = sl_plan_flops_per_token(m, c->seq_len) * x->tokens_s / (c->gpus * c->tflops * 1e12);
  if (x->needs_mode) x->tokens_s = x->mfu = 0; /* refused: its bytes are unknown, so is its speed */
  double comm = 0;
  for (int k = 0; k < SL_PLAN_NCOMM; k++) comm += x->comm_s[k];
  x->comm_compute_ratio = comm / (x->compute_s + x->recompute_s);
  return SL_OK;
}

static int cand_cmp(const void *a, const void *b) {
  const sl_plan_cand *x = a, *y = b;
  if (x->fits != y->fits) return y->fits - x->fits;
  if (x->tokens_s != y->tokens_s) return x->tokens_s < y->tokens_s ? 1 : -1;
  return x->gpu_total < y->gpu_total ? -1 : x->gpu_total > y->gpu_total;
}

/* A group of candidates: one layout (TP t, PP p, ZeRO, shard group S, optimizer tier oo, EP ep) at every
 * checkpointing mode and micro-batch b dividing `per`, the samples per data-parallel replica per step. */
typedef struct {
  int t, p, zero, S, oo, ep;
  int64_t per;
} cand_layout;

/* Appends and evaluates layout l's candidates to *v (*cnt of *cap, grown as needed; freed on an error). */
static int add_layout(const sl_plan_model *m, const sl_plan_cluster *c, const cand_layout *l, sl_plan_cand **v,
                      int *cnt, int *cap) {
  for (int ac = 0; ac <= 2; ac++)
    for (int64_t b = 1; b <= l->per; b *= 2) {
      if (l->per % b) continue;
      /* 1F1B needs m >= P micro-batches; more than 8 P buys a bubble under 1/9 of the
       * step for m times the per-micro-batch overheads (--pp's executor: --grad-accum) */
      if (l->p > 1 && (l->per / b < l->p || l->per / b > 8 * l->p)) continue;
      if (*cnt == *cap) {
        sl_plan_cand *nv = realloc(*v, sizeof *nv * (size_t)(2 * *cap));
        if (!nv) return sl_fail(SL_ENOMEM, "planner: out of memory");
        *v = nv;
        *cap *= 2;
      }
      sl_plan_cand *x = &(*v)[*cnt];
      memset(x, 0, sizeof *x);
      x->zero = l->zero;
      x->shard_group = l->S;
      x->tp = l->t;
      x->pp = l->p;
      x->ep = l->ep;
      x->offload_optim = l->oo;
      x->ac = (sl_actckpt)ac;
      x->micro_batch = b;
      x->grad_accum = l->per / b;
      /* ZeRO-0/1 hold full gradients anyway: reduce once per step */
      x->sync_accum = !(l->zero <= 1 && x->grad_accum > 1);
      /* --pp with tied embeddings reduces per micro-batch (engine/schedule_pp.c) */
      if (l->p > 1 && m->pinned[0]) x->sync_accum = 1;
      int rc = sl_plan_eval(m, c, x);
      if (rc) return rc;
      ++*cnt;
    }
  return SL_OK;
}

/* Every EP degree of layout l (a mixture of experts: those the engine takes, sl_plan_ep_allowed; else EP 1) and
 * optimizer tier into *v. */
static int add_tiers_ep(const sl_plan_model *m, const sl_plan_cluster *c, cand_layout l, int engine, sl_plan_cand **v,
                        int *cnt, int *cap) {
  int rc = SL_OK;
  for (l.ep = 1; l.ep <= l.S && !rc; l.ep++) {
    if (l.ep > 1 && (!m->E || m->E % l.ep)) continue;
    if (l.ep > 1 && !sl_plan_ep_allowed(m, l.t, l.S, l.ep, 0)) {
      sl_clear_error(); /* the engine's reason for not taking this degree */
      continue;
    }
    for (l.oo = 0; l.oo <= 2 && !rc; l.oo++) {
      if (l.oo && (!engine || c->host_mem <= 0)) continue;
      if (l.oo == SL_PLAN_OFF_NVME && !c->nvme) continue;
      rc = add_layout(m, c, &l, v, cnt, cap);
    }
  }
  return rc;
}

int sl_plan_search(const sl_plan_model *m, const sl_plan_cluster *c, sl_plan_cand **out, int *n) {
  *out = NULL;
  *n = 0;
  int N = c->gpus, G = c->gpus_per_node > 0 ? c->gpus_per_node : N;
  if (N < 1 || c->seq_len < 1 || c->global_batch < c->seq_len)
    return sl_fail(SL_EINPUT,
                   "plan: need --gpus >= 1 and --global-batch >= --seq-len (found %d GPUs, %lld and %lld tokens)", N,
                   (long long)c->global_batch, (long long)c->seq_len);
  /* Megatron's and torchtitan's rule: the global batch is met exactly (whole sequences, micro-batch x
   * grad-accum x DP), never rounded */
  int64_t samples = c->global_batch / c->seq_len;
  if (c->global_batch % c->seq_len)
    return sl_fail(SL_EINPUT,
                   "plan: --global-batch %lld tokens is not a whole number of --seq-len %lld sequences; the nearest "
                   "are %lld (%lld sequences) and %lld (%lld)",
                   (long long)c->global_batch, (long long)c->seq_len, (long long)(samples * c->seq_len),
                   (long long)samples, (long long)((samples + 1) * c->seq_len), (long long)(samples + 1));
  int cap = 1024, cnt = 0, rc = SL_OK;
  sl_plan_cand *v = malloc(sizeof *v * (size_t)cap);
  if (!v) return sl_fail(SL_ENOMEM, "planner: out of memory");
  int tps[] = {1, 2, 4, 8, 16};
  for (int ti = 0; ti < 5 && !rc; ti++) {
    int t = tps[ti];
    if (t > G || N % t) continue;
    if (t > 1 && (!c->allow_tp_pp || m->C / t < 1024 || m->caps.tp_width % t)) continue;
    for (int p = 1; p <= N / t && !rc; p++) {
      if ((N / t) % p || m->L % p) continue;
      if (p > 1 && (!c->allow_tp_pp || m->caps.recurrent)) continue;
      int d = N / (t * p), engine = t == 1 && p == 1;
      int64_t per = samples / d;            /* samples per data-parallel replica per step */
      if (per < 1 || samples % d) continue; /* this DP degree cannot meet the global batch exactly */
      for (int zero = 0; zero <= 3 && !rc; zero++) {
        /* TP/PP: the distributed optimizer; TP alone also ZeRO-3 over DP (--tp T --zero 3) */
        if (!engine && zero != 1 && !(p == 1 && zero == 3)) continue;
        for (int S = 1; S <= d && !rc; S++) {
          if (d % S) continue;
          if (!engine && S != d) continue;
          if (engine && zero == 0 && S != N) continue;
          if (engine && zero > 0 && S == 1 && N > 1) continue;
          cand_layout l = {t, p, zero, S, 0, 1, per};
          rc = add_tiers_ep(m, c, l, engine, &v, &cnt, &cap);
        }
      }
    }
  }
  if (rc) {
    free(v);
    return rc;
  }
  qsort(v, (size_t)cnt, sizeof *v, cand_cmp);
  *out = v;
  *n = cnt;
  return SL_OK;
}

static const char *ac_name(sl_actckpt a) {
  return a == SL_AC_FULL ? "full" : a == SL_AC_SELECTIVE ? "selective" : "none";
}
static const char *off_name(int o) { return o == SL_PLAN_OFF_NVME ? "nvme" : o == SL_PLAN_OFF_CPU ? "cpu" : "none"; }

void sl_plan_describe(const sl_plan_cand *x, char *buf, size_t cap) {
  if (x->pp > 1 && x->tp > 1)
    snprintf(buf, cap, "TP %d x PP %d (1F1B) x DP %d (ZeRO-%d over DP), ckpt %s, micro-batch %lld x %lld", x->tp, x->pp,
             x->shard_group, x->zero, ac_name(x->ac), (long long)x->micro_batch, (long long)x->grad_accum);
  else if (x->pp > 1)
    snprintf(buf, cap, "PP %d (1F1B) x DP %d (ZeRO-%d over DP), ckpt %s, micro-batch %lld x %lld%s", x->pp,
             x->shard_group, x->zero, ac_name(x->ac), (long long)x->micro_batch, (long long)x->grad_accum,
             x->sync_accum ? "" : " (--no-sync-accum)");
  else if (x->tp > 1)
    snprintf(buf, cap, "TP %d x DP %d (ZeRO-%d over DP), ckpt %s, micro-batch %lld x %lld", x->tp, x->shard_group,
             x->zero, ac_name(x->ac), (long long)x->micro_batch, (long long)x->grad_accum);
  else
    snprintf(buf, cap, "ZeRO-%d, shard group %d, offload optimizer %s, ckpt %s, micro-batch %lld x %lld%s", x->zero,
             x->shard_group, off_name(x->offload_optim), ac_name(x->ac), (long long)x->micro_batch,
             (long long)x->grad_accum, x->sync_accum ? "" : " (--no-sync-accum)");
  size_t o = strlen(buf);
  if (EP(x) > 1 && o < cap) snprintf(buf + o, cap - o, ", EP %d", x->ep);
}

/* rank among near-equals: no offload first, then less recompute, then headroom */
static int prefer(const sl_plan_cand *a, const sl_plan_cand *b) {
  if (a->offload_optim != b->offload_optim) return a->offload_optim < b->offload_optim;
  if (a->ac != b->ac) return a->ac < b->ac;
  return a->gpu_total < b->gpu_total;
}

/* The fastest fitting candidate of a kind: runnable, or plain FSDP
 * (TP = PP = 1); -1 when none fits. */
enum { K_RUNNABLE, K_FSDP };
static int fastest(const sl_plan_cand *c, int n, int kind) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    int ok = kind == K_RUNNABLE ? !c[i].needs_mode : c[i].tp == 1 && c[i].pp == 1;
    if (c[i].fits && ok && (best < 0 || c[i].tokens_s > c[best].tokens_s)) best = i;
  }
  return best;
}

/* A full-sharding candidate's communication seconds: its gathers, reductions and all-reduces, and under EP its
 * all-to-alls (0 otherwise, so a dense model's figure is the sum it always was). */
static double fsdp_comm_s(const sl_plan_cand *x) {
  double s = x->comm_s[0] + x->comm_s[1] + x->comm_s[2];
  return x->comm_s[SL_PLAN_A2A] > 0 ? s + x->comm_s[SL_PLAN_A2A] : s;
}

/* " ... communication-bound here: X s of communication per step against Y s of compute (links)." */
static size_t comm_bound(char *buf, size_t cap, const sl_plan_cand *x, const char *who) {
  char a2a[64] = ""; /* dense models: nothing */
  if (x->comm_s[SL_PLAN_A2A] > 0)
    snprintf(a2a, sizeof a2a, "; %.2f s of it the experts' all-to-alls", x->comm_s[SL_PLAN_A2A]);
  return (size_t)snprintf(
      buf, cap,
      " %s is communication-bound here: %.2f s of communication per step against %.2f s of compute (%s links%s).", who,
      fsdp_comm_s(x), x->compute_s + x->recompute_s, x->shard_inter ? "inter-node" : "intra-node", a2a);
}

/* None fits: what the smallest candidate would need (GPU memory, host memory per node) and its largest arena. */
static int no_fit(const sl_plan_cand *c, int n, const sl_plan_cluster *cl, char *buf, size_t cap) {
  int G = cl->gpus_per_node > 0 ? cl->gpus_per_node : cl->gpus, per_node = cl->gpus < G ? cl->gpus : G, small = -1;
  for (int pass = 0; pass < 2 && small < 0; pass++) /* first among those whose host memory fits */
    for (int i = 0; i < n; i++) {
      int host_ok = c[i].host_per_gpu * per_node <= cl->margin * cl->host_mem;
      if (!c[i].needs_mode && (pass || host_ok) && (small < 0 || c[i].gpu_total < c[small].gpu_total)) small = i;
    }
  size_t o = (size_t)snprintf(buf, cap, "No configuration the engine can run fits in %.1f GB per GPU%s.",
                              cl->gpu_mem / 1e9, cl->host_mem > 0 ? " with its host memory" : "");
  if (small < 0 || o >= cap) return -1;
  const sl_plan_cand *x = &c[small];
  int big = 0;
  for (int a = 0; a < SL_ARENA_COUNT; a++)
    if (a != SL_ARENA_HOST_OPTIM && x->mem[a] > x->mem[big]) big = a;
  char d[512];
  sl_plan_describe(x, d, sizeof d);
  o += (size_t)snprintf(buf + o, cap - o,
                        " The smallest, %s, needs %.1f GB per GPU (a GPU of %.1f GB at the %.0f%% margin); its largest "
                        "arena is %s, %.1f GB",
                        d, x->gpu_total / 1e9, x->gpu_total / cl->margin / 1e9, 100 * cl->margin,
                        sl_arena_name((sl_arena)big), x->mem[big] / 1e9);
  if (o < cap && x->host_per_gpu > 0)
    o += (size_t)snprintf(buf + o, cap - o, ", and it needs %.1f GB of host memory per node (%.1f GB given)",
                          x->host_per_gpu * per_node / cl->margin / 1e9, cl->host_mem / 1e9);
  if (o < cap) snprintf(buf + o, cap - o, ".");
  return -1;
}

int sl_plan_recommend(const sl_plan_cand *c, int n, const sl_plan_cluster *cl, char *buf, size_t cap) {
  int best = fastest(c, n, K_RUNNABLE), fsdp = fastest(c, n, K_FSDP);
  if (best < 0) return no_fit(c, n, cl, buf, cap);
  int pick = best;
  for (int i = 0; i < n; i++)
    if (c[i].fits && !c[i].needs_mode && c[i].tokens_s >= 0.97 * c[best].tokens_s && prefer(&c[i], &c[pick])) pick = i;
  const sl_plan_cand *x = &c[pick];
  char d[512];
  sl_plan_describe(x, d, sizeof d);
  size_t o = 0;
  o += (size_t)snprintf(
      buf + o, cap - o,
      "Recommended: %s. It needs %.1f GB of %.1f GB per GPU and predicts %.2f s per step, %.0f tokens/s, MFU %.1f%%", d,
      x->gpu_total / 1e9, cl->gpu_mem / 1e9, x->step_s, x->tokens_s, 100 * x->mfu);
  if (o < cap) {
    if (x->pp > 1)
      o +=
          (size_t)snprintf(buf + o, cap - o,
                           "; a 1F1B pipeline of %d stages with %lld micro-batches idles (P-1)/(m+P-1) = %.1f%% of the "
                           "step (%.2f s) and moves %.2f GB point-to-point per rank (%.2f s); its memory and bytes "
                           "are the engine's own, the dry run of each stage (stage %d holds the peak).",
                           x->pp, (long long)x->grad_accum, 100.0 * (x->pp - 1) / (double)(x->grad_accum + x->pp - 1),
                           x->bubble_s, x->comm_bytes[SL_PLAN_P2P] / 1e9, x->comm_s[SL_PLAN_P2P], x->peak_stage);
    else if (x->tp > 1)
      o += (size_t)snprintf(buf + o, cap - o,
                            "; tensor parallelism over %d GPUs of a node divides the data-parallel traffic by %d (%.2f "
                            "s of communication exposed).",
                            x->tp, x->tp, x->exposed_s);
    else if (x->zero == 3 && !x->offload_optim && x->comm_compute_ratio <= 1.0)
      o += (size_t)snprintf(buf + o, cap - o,
                            "; full sharding fits without offload and hides its gathers behind compute (%.2f s of %.2f "
                            "s communication exposed).",
                            x->exposed_s, fsdp_comm_s(x));
    else if (x->offload_optim)
      o += (size_t)snprintf(buf + o, cap - o,
                            "; the %.1f GB optimizer state goes to %s; the parameters stay on the GPU.",
                            (x->mem[SL_ARENA_HOST_OPTIM] + x->nvme_per_gpu) / 1e9, off_name(x->offload_optim));
    else
      o += (size_t)snprintf(
          buf + o, cap - o,
          "; it is the fastest configuration the engine can run that fits (%.2f s of communication exposed).",
          x->exposed_s);
  }
  if (o < cap && pick != best)
    o += (size_t)snprintf(buf + o, cap - o,
                          " It is within 3%% of the fastest fitting layout (%.0f tokens/s) and preferred for %s.",
                          c[best].tokens_s,
                          c[best].offload_optim > x->offload_optim ? "needing less offload"
                          : c[best].ac > x->ac                     ? "recomputing less"
                                                                   : "its memory headroom");
  if (o < cap && x->tp == 1 && x->pp == 1 && x->comm_compute_ratio > 1.0)
    o += comm_bound(buf + o, cap - o, x, "Full sharding");
  if (o < cap && (x->tp > 1 || x->pp > 1) && fsdp < 0) { /* full sharding alone: its smallest candidate */
    const sl_plan_cand *f = NULL;
    for (int i = 0; i < n; i++)
      if (c[i].tp == 1 && c[i].pp == 1 && (!f || c[i].gpu_total < f->gpu_total)) f = &c[i];
    if (f) {
      sl_plan_describe(f, d, sizeof d);
      o += (size_t)snprintf(buf + o, cap - o,
                            " Full sharding alone does not fit: its smallest (%s) needs %.1f GB per GPU%s", d,
                            f->gpu_total / 1e9, f->comm_compute_ratio > 1.0 ? ";" : ".");
      if (o < cap && f->comm_compute_ratio > 1.0) o += comm_bound(buf + o, cap - o, f, "it");
    }
  }
  if (o < cap && (x->tp > 1 || x->pp > 1) && fsdp >= 0) {
    const sl_plan_cand *f = &c[fsdp];
    sl_plan_describe(f, d, sizeof d);
    o += (size_t)snprintf(buf + o, cap - o, " Full sharding alone (%s) predicts %.0f tokens/s, MFU %.1f%%%s", d,
                          f->tokens_s, 100 * f->mfu, f->comm_compute_ratio > 1.0 ? ":" : ".");
    if (o < cap && f->comm_compute_ratio > 1.0) o += comm_bound(buf + o, cap - o, f, "it");
  }
  return pick;
}

double sl_plan_gpt_params(double l, double h, double V, double s) {
  return 12.0 * l * h * h + 13.0 * l * h + (V + s) * h;
}

void sl_plan_model_states(double params, int zero, int d, int param_bytes, int grad_bytes, int optim_bytes,
                          double *p_bytes, double *g_bytes, double *o_bytes) {
  if (d < 1) d = 1;
  *p_bytes = params * param_bytes / (zero >= 3 ? d : 1);
  *g_bytes = params * grad_bytes / (zero >= 2 ? d : 1);
  *o_bytes = params * optim_bytes / (zero >= 1 ? d : 1);
}
