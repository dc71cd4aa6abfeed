/* engine/schedule_pp.c — the pipeline-parallel executor: the stage plan of
 * this rank (layout, units computed and held) and the "pp" schedule, which
 * walks this rank's op list of the static schedule (pipeline/pipeline.h).
 *
 *   F(mb, c)     select mb's activation set (load(mb) at mb's first op on
 *                this rank, in order), forward the chunk's units; on the
 *                last virtual stage the head adds the micro-batch's loss;
 *   RECV act     into a staging buffer, copied into the residual stream at
 *                the chunk's first unit (sl_model_boundary) of mb's set when
 *                F starts (mb takes a set at its F, not at the receive: the
 *                sets held are the builder's peak in-flight micro-batches);
 *   SEND act     the residual stream at the next stage's first unit;
 *   RECV grad    into a staging buffer, copied into the backward's residual
 *                gradient when B starts (the gradient buffer is shared);
 *   B(mb, c)     sl_fsdp_begin_micro / backward of the chunk's units /
 *                end_micro, the input gradient staged for its SEND;
 *   SEND grad    the staged input gradient;
 *   zb1p:        B(mb) is the input half of the chunk's units (parameters
 *                only, no FSDP micro-batch; models/model.h bwd_input), each
 *                unit's stash kept with mb's set; W(mb) the weight half
 *                (bwd_weight) as the FSDP micro-batch begin_micro / bwd_acquire
 *                / bwd_release / end_micro, after which mb's set is free.
 * On a device backend (buffers in device memory) every transfer is staged
 * through the host with the backend's copies: a send downloads into a host
 * buffer and sends that over the PP communicator (MPI), a receive lands in
 * a host buffer uploaded when it completes (the TP all-gather of a sliced
 * boundary runs on the host buffer first). The executor's MPI requests stay
 * what they are (receives posted ahead, sends completed two compute ops
 * later), so the builder's deadlock proof is unchanged; a device p2p comm
 * would need one communicator per direction and ordered issue
 * (docs/pipeline.md). The cost: one device-host copy per boundary per
 * micro-batch on each side.
 * Transfers overlap compute: a send is posted and completes before the
 * second compute op after it; the receives before the next compute op are
 * posted before the current one runs (wait_sends, post_recv; docs/pipeline.md
 * "Transfers overlap compute" for why the builder's deadlock proof still
 * holds). Each B (W under zb1p) is one "micro-batch" of
 * the FSDP runtime (the step's k-th of n = m*V): with per-micro-batch reduction
 * (the default) every unit's gradient accumulates in the order of its
 * micro-batches, as in one process, so losses and weights are bit-identical
 * to --pp 1.
 *
 * Tied embeddings: the last rank holds unit 0 too (the head reads it). After
 * the head's backward of micro-batch k it sends the head's part of unit 0's
 * gradient (in a buffer zeroed for k, as in one process) to rank 0, which
 * puts it into unit 0's gradient buffer before the embedding's backward adds
 * its part: the same sum in the same order. Before the norm, rank 0 sends
 * the reduced gradient of unit 0 to the last rank, so both copies take the
 * same optimizer step and stay identical.
 *
 * The gradient norm: every rank's per-unit sums of squares (the owner's
 * only; under TP each tensor on one TP rank, engine/tensor_par.h), gathered
 * over the PP communicator, added in unit order, then over the shard group
 * and over TP in rank order: the bits of one process.
 */
#include "engine/schedule_pp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/schedule.h"
#include "engine/tensor_par.h"

enum { TAG_ACT = 0, TAG_GRAD = 1, TAG_TIED = 2, TAG_TIED_SUM = 3, TAG_UNIT = 4 };

/* ---- the plan ---------------------------------------------------------------- */
void sl_pp_plan_free(sl_pp_plan *p) {
  if (!p) return;
  sl_pp_sched_free(&p->sched);
  free(p->first);
  free(p->layers);
  free(p->local);
  free(p->held);
  free(p->owner);
  free(p);
}

int sl_pp_plan_create(const sl_pp_plan_cfg *c, sl_pp_plan **out) {
  *out = NULL;
  sl_pp_spec sp;
  sl_pp_spec_defaults(&sp);
  int rc = sl_pp_kind_parse(c->kind, &sp.kind);
  if (rc) return rc;
  if (c->V > 1 && sp.kind != SL_PP_INTERLEAVED)
    return sl_fail(SL_EINPUT, "--pp-virtual %d needs --pp-schedule interleaved (found %s)", c->V, c->kind);
  sp.P = c->P;
  sp.m = c->m;
  sp.V = sp.kind == SL_PP_INTERLEAVED ? c->V : 1;
  if (sp.kind == SL_PP_INTERLEAVED && sp.V < 2)
    return sl_fail(SL_EINPUT, "--pp-schedule interleaved needs --pp-virtual V >= 2 (found %d)", c->V);
  int64_t rows = c->B * c->T / (c->sp_tp > 1 ? c->sp_tp : 1); /* token rows of the residual stream here */
  int slices = c->tp_slices > 1 && (rows * c->hidden) % c->tp_slices == 0 ? (int)c->tp_slices : 1;
  sp.bytes = rows * c->hidden / slices * 4;
  sl_pp_plan *p = calloc(1, sizeof *p);
  if (!p) return sl_fail(SL_ENOMEM, "out of memory");
  p->P = c->P;
  p->V = sp.V;
  p->S = p->P * p->V;
  p->rank = c->rank;
  p->nunits = c->L + 2 + c->ncomp;
  p->tied = c->tied;
  p->bnd = rows * c->hidden;
  p->slices = slices;
  p->wire = p->bnd / slices;
  int S = p->S, U = p->nunits;
  double *lf = calloc((size_t)c->L + 1, sizeof(double)), *lb = calloc((size_t)c->L + 1, sizeof(double));
  p->first = calloc((size_t)S + 1, sizeof(int));
  p->layers = calloc((size_t)S, sizeof(int));
  p->local = calloc((size_t)U, 1);
  p->held = calloc((size_t)U, 1);
  p->owner = calloc((size_t)U, sizeof(int));
  if (!lf || !lb || !p->first || !p->layers || !p->local || !p->held || !p->owner) {
    rc = sl_fail(SL_ENOMEM, "out of memory");
    goto done;
  }
  if (c->layout && c->layout[0]) {
    rc = sl_pp_layout_parse(c->layout, S, c->L, p->layers);
  } else {
    /* per token: 6 x parameters (+ attention's 12 h T), 16 bytes per parameter
     * (value, gradient, Adam m and v), as shardlm pp-schedule weighs them */
    double attn = c->no_attention ? 0 : 12.0 * (double)c->heads_x_dim * (double)c->T;
    for (int l = 0; l < c->L; l++) {
      lf[l] = c->lflops ? c->lflops[l] : 6.0 * (double)c->numel[l + 1] + attn;
      lb[l] = 16.0 * (double)c->numel[l + 1];
    }
    sl_pp_costs pc = {.L = c->L,
                      .layer_flops = lf,
                      .layer_bytes = lb,
                      .embed_bytes = 16.0 * (double)c->numel[0],
                      .head_flops = 6.0 * (double)c->numel[0],
                      .head_bytes = 16.0 * (double)c->numel[U - 1]};
    rc = sl_pp_layout_balance(&pc, S, p->layers);
  }
  if (rc) goto done;
  /* stage v >= 1 starts after the embedding and the layers of stages < v */
  for (int v = 0, at = 1; v < S; v++) {
    p->first[v] = v == 0 ? 0 : at;
    at += p->layers[v];
  }
  p->first[S] = c->L + 2; /* the companions (units L + 2 + j) follow their layers' blocks */
  for (int v = 0; v < S; v++)
    for (int u = p->first[v]; u < p->first[v + 1]; u++) {
      p->owner[u] = v % p->P;
      if (v % p->P == p->rank) p->local[u] = p->held[u] = 1;
    }
  for (int u = c->L + 2; u < U; u++) {
    int o = c->comp_of[u - (c->L + 2)];
    p->owner[u] = p->owner[o], p->local[u] = p->local[o], p->held[u] = p->held[o];
  }
  if (p->tied && p->rank == p->P - 1) p->held[0] = 1;
  rc = sl_pp_build(&sp, &p->sched);
done:
  free(lf);
  free(lb);
  if (rc) sl_pp_plan_free(p);
  else *out = p;
  return rc;
}

/* ---- the executor ------------------------------------------------------------- */
/* A send in flight: posted at its SEND op, completed before the second
 * compute op after it starts (so it overlaps at least one compute op), and
 * before the backward of its micro-batch for an activation (its buffer is
 * the set's residual stream). */
typedef struct {
  sl_comm_req *r;
  float *buf;  /* a gradient's staging buffer (back to the pool when done); NULL: an activation */
  float *host; /* device backend: the host copy sent (back to the host pool when done) */
  int64_t at;  /* compute ops started when it was posted */
  int mb;
} pend_send;

typedef struct {
  const sl_pp_plan *pl; /* borrowed (the trainer's) */
  sl_comm *pp;          /* borrowed */
  sl_comm *tp;          /* borrowed: the TP group (NULL: none) */
  int tp_rank;          /* in it (0: none) */
  int nsets;            /* activation sets: the most micro-batches in flight on this rank */
  int *set_of;          /* (m) set of each micro-batch in flight, -1 */
  int *free_set;        /* (nsets) stack of free sets */
  int nfree;
  float **gin, **gout; /* (m*V) received gradient waiting for B; B's input gradient waiting for its SEND */
  float **ain;         /* (m*V) received activation waiting for its F */
  float **pool;        /* free staging buffers of bnd floats */
  int npool, cappool;
  float **hpool; /* device backend: free host buffers of bnd floats (sends and receives) */
  int nhpool, caphpool;
  float **rhost; /* (nops) device backend: the host buffer a posted receive lands in */
  float **tied;  /* (m) the head's part of unit 0's gradient per micro-batch (tied, P > 1) */
  float **tiedh; /* (m) device backend: its host copy (sent / received) */
  int64_t tied_n;
  sl_comm_req **tied_req; /* (m) */
  float **stash;          /* zb1p: (nsets * nunits) what unit u's B keeps for its W, per set (acts arena) */
  sl_comm_req **rreq;     /* (nops of this rank) a receive posted ahead of its RECV op, NULL */
  pend_send *pend;        /* (nops) sends in flight */
  int npend;
  int64_t steps;       /* run_step calls */
  uint64_t xfer[2][2]; /* [send, recv][calls, bytes] on the PP comm inside run_step, all steps */
  const sl_ops *ops;   /* of the staging buffers (pool, tied) */
  sl_kctx *k;
} pp_state;

static int first_rank(const pp_state *st) { return st->pl->rank == 0; }
static int last_rank(const pp_state *st) { return st->pl->rank == st->pl->P - 1; }
static int tied_pp(const pp_state *st) { return st->pl->tied && st->pl->P > 1; }

static int zb(const sl_pp_plan *pl) { return pl->sched.spec.kind == SL_PP_ZB1P; }

/* Micro-batches whose activations this rank holds at once (first op of mb
 * to its B of chunk 0; to its W under zb1p). */
static int count_sets(const sl_pp_plan *pl) {
  const sl_pp_op *ops = pl->sched.ops[pl->rank];
  int n = pl->sched.nops[pl->rank], m = pl->sched.spec.m, live = 0, peak = 0, last = zb(pl) ? SL_PP_W : SL_PP_B;
  char *seen = calloc((size_t)m, 1);
  if (!seen) return -1;
  for (int i = 0; i < n; i++) {
    const sl_pp_op *o = &ops[i];
    if (o->kind == SL_PP_RECV) continue; /* a received activation waits for F in staging */
    if (!seen[o->mb]) {
      seen[o->mb] = 1;
      if (++live > peak) peak = live;
    }
    if (o->kind == last && o->chunk == 0) live--;
  }
  free(seen);
  return peak > 0 ? peak : 1;
}

static float *pool_get(pp_state *st, const sl_step_ctx *c) {
  if (st->npool) return st->pool[--st->npool];
  float *b = c->m->ops->alloc(c->m->k, (size_t)st->pl->bnd * 4);
  if (b) sl_mem_add(SL_ARENA_WORKSPACE, st->pl->bnd * 4);
  return b;
}

static int stack_push(float ***a, int *n, int *cap, float *b) {
  if (*n == *cap) {
    int nc = *cap ? 2 * *cap : 8;
    float **np = realloc(*a, sizeof *np * (size_t)nc);
    if (!np) return SL_ENOMEM;
    *a = np;
    *cap = nc;
  }
  (*a)[(*n)++] = b;
  return SL_OK;
}

static int pool_put(pp_state *st, float *b) { return stack_push(&st->pool, &st->npool, &st->cappool, b); }

/* ---- host staging (device backend) ---- */
static int on_device(const sl_step_ctx *c) { return c->m->ops->is_device(); }

static float *hpool_get(pp_state *st) {
  return st->nhpool ? st->hpool[--st->nhpool] : sl_alloc((size_t)st->pl->bnd * 4, "pipeline host staging");
}

static int hpool_put(pp_state *st, float *h) {
  if (!h) return SL_OK;
  int rc = stack_push(&st->hpool, &st->nhpool, &st->caphpool, h);
  if (rc) sl_free(h);
  return rc;
}

static int comm_rc(const char *what, int mb) {
  return sl_fail(SL_ECOMM, "pipeline %s of micro-batch %d: %s", what, mb, sl_comm_last_error());
}

/* A blocking transfer of backend buffer buf (staged through the host on a device backend). */
static int xfer(pp_state *st, const sl_step_ctx *c, int send, float *buf, int64_t n, int peer, int tag, int mb) {
  sl_comm_req *r = NULL;
  float *h = on_device(c) ? sl_alloc((size_t)n * 4, "pipeline host staging") : buf;
  if (!h) return SL_ENOMEM;
  if (h != buf && send) c->m->ops->download(c->m->k, h, buf, (size_t)n * 4);
  int e = send ? sl_comm_send(st->pp, h, n, SL_F32, peer, tag, &r) : sl_comm_recv(st->pp, h, n, SL_F32, peer, tag, &r);
  int rc = e != SL_COMM_OK || sl_comm_wait(r) != SL_COMM_OK ? comm_rc(send ? "send" : "receive", mb) : SL_OK;
  if (h != buf && !send && !rc) c->m->ops->upload(c->m->k, buf, h, (size_t)n * 4);
  if (h != buf) sl_free(h);
  return rc;
}

/* Posts the send of the tied weight's gradient part of mb (st->tied[mb], filled) to rank 0. */
static int tied_post(pp_state *st, int mb) {
  float *b = st->tied[mb];
  if (st->tiedh[mb]) { /* device backend: from its host copy */
    st->ops->download(st->k, st->tiedh[mb], b, (size_t)st->tied_n * 4);
    b = st->tiedh[mb];
  }
  if (sl_comm_send(st->pp, b, st->tied_n, SL_F32, 0, TAG_TIED, &st->tied_req[mb]) != SL_COMM_OK)
    return comm_rc("tied-gradient send", mb);
  return SL_OK;
}

/* Selects mb's activation set; at mb's first op here, takes a free set and
 * loads the micro-batch (in order 0, 1, ...). */
static int use_mb(pp_state *st, const sl_step_ctx *c, int mb, int *next_load) {
  if (st->set_of[mb] >= 0) return sl_model_use_acts(c->m, st->set_of[mb]);
  if (mb != *next_load || !st->nfree)
    return sl_fail(SL_EINTERNAL, "pipeline: micro-batch %d starts out of order (next %d, %d free sets)", mb, *next_load,
                   st->nfree);
  st->set_of[mb] = st->free_set[--st->nfree];
  (*next_load)++;
  int rc = sl_model_use_acts(c->m, st->set_of[mb]);
  return rc ? rc : c->load(c->user, mb);
}

/* F of virtual stage vs > 0: the received activation into mb's set (selected). */
static int take_act(pp_state *st, const sl_step_ctx *c, int mb, int chunk, int vs) {
  float **b = &st->ain[mb * st->pl->V + chunk], *act, *dres;
  int64_t n;
  if (vs == 0) return SL_OK; /* the embedding reads the tokens */
  if (!*b) return sl_fail(SL_EINTERNAL, "pipeline: forward of micro-batch %d before its activation", mb);
  int rc = sl_model_boundary(c->m, st->pl->first[vs], &act, &dres, &n);
  if (!rc) c->m->ops->copy(c->m->k, act, *b, (size_t)n * 4);
  if (!rc) rc = pool_put(st, *b);
  if (!rc) *b = NULL;
  return rc;
}

static int fwd_chunk(pp_state *st, const sl_step_ctx *c, int mb, int vs, sl_step_result *out) {
  sl_model *m = c->m;
  int rc = SL_OK;
  for (int u = st->pl->first[vs]; u < st->pl->first[vs + 1] && !rc; u++) {
    const float *p;
    rc = sl_fsdp_fwd_acquire(c->f, u, &p);
    if (!rc) rc = m->vt->fwd(m, u, p);
    if (!rc && c->after_fwd) rc = c->after_fwd(c->hook_user, m, mb, u);
    if (!rc) rc = sl_fsdp_fwd_release(c->f, u);
  }
  if (!rc && vs == st->pl->S - 1) out->loss_sum += m->loss_sum;
  return rc;
}

/* The head's part of unit 0's gradient (last rank): staged and sent to rank
 * 0; then unit 0's buffer goes through the runtime's backward release like
 * any gradient buffer (its reduction is replaced by rank 0's sum before the
 * norm). */
static int tied_send(pp_state *st, const sl_step_ctx *c, int mb) {
  float *g;
  const float *p;
  int rc = sl_fsdp_grad_buffer(c->f, 0, &g);
  if (rc) return rc;
  c->m->ops->copy(c->m->k, st->tied[mb], g, (size_t)st->tied_n * 4);
  if ((rc = tied_post(st, mb))) return rc;
  rc = sl_fsdp_bwd_acquire(c->f, 0, &p, &g);
  return rc ? rc : sl_fsdp_bwd_release(c->f, 0);
}

/* Rank 0, before the embedding's backward of mb: the head's part first. */
static int tied_recv(pp_state *st, const sl_step_ctx *c, int mb) {
  if (sl_comm_wait(st->tied_req[mb]) != SL_COMM_OK) {
    st->tied_req[mb] = NULL;
    return comm_rc("tied-gradient receive", mb);
  }
  st->tied_req[mb] = NULL;
  float *g;
  int rc = sl_fsdp_grad_buffer(c->f, 0, &g);
  if (!rc && st->tiedh[mb]) c->m->ops->upload(c->m->k, g, st->tiedh[mb], (size_t)st->tied_n * 4);
  else if (!rc) c->m->ops->copy(c->m->k, g, st->tied[mb], (size_t)st->tied_n * 4);
  return rc;
}

/* Before the backward of (mb, chunk) of virtual stage vs, which ends at unit
 * hi: the received gradient of the chunk's output into the residual
 * gradient (nothing on the last stage). */
static int grad_in(pp_state *st, const sl_step_ctx *c, int mb, int chunk, int vs, int hi) {
  if (vs == st->pl->S - 1) return SL_OK;
  float **g = &st->gin[mb * st->pl->V + chunk], *act, *dres;
  int64_t n;
  if (!*g) return sl_fail(SL_EINTERNAL, "pipeline: backward of micro-batch %d before its gradient", mb);
  int rc = sl_model_boundary(c->m, hi, &act, &dres, &n);
  if (!rc) c->m->ops->copy(c->m->k, dres, *g, (size_t)n * 4);
  if (!rc) rc = pool_put(st, *g);
  if (!rc) *g = NULL;
  return rc;
}

/* After it: the input gradient of the chunk (first unit lo) staged for its
 * SEND (nothing on the first stage). */
static int grad_out(pp_state *st, const sl_step_ctx *c, int mb, int chunk, int vs, int lo) {
  if (vs == 0) return SL_OK;
  float *b = pool_get(st, c), *act, *dres;
  int64_t n;
  if (!b) return sl_fail(SL_ENOMEM, "out of memory for a pipeline transfer buffer");
  st->gout[mb * st->pl->V + chunk] = b;
  int rc = sl_model_boundary(c->m, lo, &act, &dres, &n);
  if (!rc) c->m->ops->copy(c->m->k, b, dres, (size_t)n * 4);
  return rc;
}

static int bwd_chunk(pp_state *st, const sl_step_ctx *c, int mb, int chunk, int kb, int nb) {
  sl_model *m = c->m;
  const sl_pp_plan *pl = st->pl;
  int vs = chunk * pl->P + pl->rank, lo = pl->first[vs], hi = pl->first[vs + 1];
  int rc = sl_fsdp_begin_micro(c->f, kb, nb);
  if (!rc) rc = grad_in(st, c, mb, chunk, vs, hi); /* the gradient of the chunk's output */
  for (int u = hi - 1; u >= lo && !rc; u--) {
    const float *p;
    float *g;
    if (u == 0 && tied_pp(st) && (rc = tied_recv(st, c, mb))) break;
    rc = sl_fsdp_bwd_acquire(c->f, u, &p, &g);
    if (!rc) rc = m->vt->bwd(m, u, p, g);
    if (!rc) rc = sl_fsdp_bwd_release(c->f, u);
    if (!rc && u == pl->first[pl->S] - 1 && tied_pp(st)) rc = tied_send(st, c, mb);
  }
  if (!rc) rc = grad_out(st, c, mb, chunk, vs, lo); /* stage the input gradient for its SEND */
  if (!rc) rc = sl_fsdp_end_micro(c->f);
  if (!rc && chunk == 0) { /* mb's last op needing its activations here */
    st->free_set[st->nfree++] = st->set_of[mb];
    st->set_of[mb] = -1;
  }
  return rc;
}

/* ---- zb1p: the backward split into B (input gradient) and W (weight gradient) */
/* B(mb): parameters only (held for the step under ZeRO-3), no gradient
 * buffer and no micro-batch of the FSDP runtime; each unit's input half
 * (models/model.h bwd_input) keeps what its W needs in mb's stash. The
 * head of a tied model computes its part of unit 0's gradient here, into
 * the micro-batch's transfer buffer, and sends it to rank 0 at once. */
static int zb_input(pp_state *st, const sl_step_ctx *c, int mb) {
  sl_model *m = c->m;
  const sl_pp_plan *pl = st->pl;
  int vs = pl->rank, lo = pl->first[vs], hi = pl->first[vs + 1], set = st->set_of[mb];
  int rc = grad_in(st, c, mb, 0, vs, hi);
  for (int u = hi - 1; u >= lo && !rc; u--) {
    const float *p;
    int tied_head = u == pl->first[pl->S] - 1 && tied_pp(st);
    rc = sl_fsdp_pinned_params(c->f, u, &p);
    if (!rc) rc = m->vt->bwd_input(m, u, p, st->stash[set * pl->nunits + u], tied_head ? st->tied[mb] : NULL);
    if (!rc && tied_head) rc = tied_post(st, mb);
  }
  return rc ? rc : grad_out(st, c, mb, 0, vs, lo);
}

/* W(mb): the k-th micro-batch of n of the FSDP runtime (W runs in
 * micro-batch order on each rank), so every unit's gradient accumulates as
 * in one process; mb's activation set is free afterwards. On the last rank
 * of a tied model unit 0's buffer takes the head's part (as bwd_chunk's
 * tied_send leaves it) and goes through the runtime's backward release. */
static int zb_weight(pp_state *st, const sl_step_ctx *c, int mb, int kw, int nw) {
  sl_model *m = c->m;
  const sl_pp_plan *pl = st->pl;
  int vs = pl->rank, lo = pl->first[vs], hi = pl->first[vs + 1], set = st->set_of[mb];
  int rc = sl_fsdp_begin_micro(c->f, kw, nw);
  for (int u = hi - 1; u >= lo && !rc; u--) {
    const float *p;
    float *g;
    if (u == 0 && tied_pp(st) && (rc = tied_recv(st, c, mb))) break;
    rc = sl_fsdp_bwd_acquire(c->f, u, &p, &g);
    if (!rc) rc = m->vt->bwd_weight(m, u, p, g, st->stash[set * pl->nunits + u]);
    if (!rc) rc = sl_fsdp_bwd_release(c->f, u);
    if (!rc && u == pl->first[pl->S] - 1 && tied_pp(st)) {
      rc = sl_fsdp_grad_buffer(c->f, 0, &g);
      if (!rc) m->ops->copy(m->k, g, st->tied[mb], (size_t)st->tied_n * 4);
      if (!rc) rc = sl_fsdp_bwd_acquire(c->f, 0, &p, &g);
      if (!rc) rc = sl_fsdp_bwd_release(c->f, 0);
    }
  }
  if (!rc) rc = sl_fsdp_end_micro(c->f);
  if (!rc) {
    st->free_set[st->nfree++] = set;
    st->set_of[mb] = -1;
  }
  return rc;
}

/* The stash of every activation set (once): per local unit, what its B
 * keeps for its W, in the acts arena (held from B to W like the set). */
static int zb_alloc(pp_state *st, sl_model *m) {
  const sl_pp_plan *pl = st->pl;
  if (st->stash) return SL_OK;
  if (!m->vt->bwd_input || !m->vt->bwd_weight || !m->vt->stash_numel)
    return sl_fail(SL_EINPUT, "--pp-schedule zb1p: %s has no split backward", m->cfg.arch_name);
  if (!(st->stash = calloc((size_t)st->nsets * (size_t)pl->nunits, sizeof(float *))))
    return sl_fail(SL_ENOMEM, "out of memory");
  for (int s = 0; s < st->nsets; s++)
    for (int u = 0; u < pl->nunits; u++)
      if (pl->local[u] && !(st->stash[s * pl->nunits + u] = sl_model_buf(m, m->vt->stash_numel(m, u), SL_ARENA_ACTS)))
        return sl_fail(SL_ENOMEM, "out of memory for the zb1p stash of unit %d", u);
  return SL_OK;
}

static int pp_nacts(const sl_schedule *s, int nmicro) {
  (void)nmicro;
  return ((pp_state *)s->priv)->nsets;
}

static int step_begin(pp_state *st, const sl_step_ctx *c) {
  const sl_pp_plan *pl = st->pl;
  if (c->nmicro != pl->sched.spec.m)
    return sl_fail(SL_EINTERNAL, "pipeline: a step of %d micro-batches; the schedule has %d", c->nmicro,
                   pl->sched.spec.m);
  st->ops = c->m->ops;
  st->k = c->m->k;
  if (tied_pp(st) && (first_rank(st) || last_rank(st)) && !st->tied[0]) {
    st->tied_n = c->m->units[0].numel;
    for (int k = 0; k < c->nmicro; k++) {
      if (!(st->tied[k] = st->ops->alloc(st->k, (size_t)st->tied_n * 4)))
        return sl_fail(SL_ENOMEM, "out of memory for the tied weight's gradient transfers");
      sl_mem_add(SL_ARENA_WORKSPACE, st->tied_n * 4);
      if (on_device(c) && !(st->tiedh[k] = sl_alloc((size_t)st->tied_n * 4, "tied-gradient host staging")))
        return SL_ENOMEM;
    }
  }
  if (zb(pl)) {
    int rc = zb_alloc(st, c->m);
    if (rc) return rc;
  }
  for (int k = 0; k < c->nmicro; k++) st->set_of[k] = -1;
  st->nfree = st->nsets;
  for (int i = 0; i < st->nsets; i++) st->free_set[i] = st->nsets - 1 - i;
  return SL_OK;
}

/* Waits every tied-gradient transfer still in flight (also after a failure). */
static int tied_wait_all(pp_state *st, int m) {
  int rc = SL_OK;
  for (int k = 0; st->tied_req && k < m; k++)
    if (st->tied_req[k]) {
      if (sl_comm_wait(st->tied_req[k]) != SL_COMM_OK && !rc) rc = comm_rc("tied-gradient transfer", k);
      st->tied_req[k] = NULL;
    }
  return rc;
}

/* ---- asynchronous transfers ------------------------------------------------- */
/* Posts the receive of RECV op i into a staging buffer (ain or gin of its
 * micro-batch and chunk): at the op, or ahead of it while the compute op
 * before it runs. Receives are posted in list order, so messages of one
 * peer and tag still match in the order the builder proved. */
static int post_recv(pp_state *st, const sl_step_ctx *c, int i) {
  const sl_pp_plan *pl = st->pl;
  const sl_pp_op *o = &pl->sched.ops[pl->rank][i];
  int vs = o->chunk * pl->P + pl->rank, slot = o->mb * pl->V + o->chunk, act = o->dir == SL_PP_ACT;
  float *b = pool_get(st, c), *a, *d;
  int64_t n = pl->bnd;
  if (!b) return sl_fail(SL_ENOMEM, "out of memory for a pipeline transfer buffer");
  if (act) st->ain[slot] = b;
  else st->gin[slot] = b;
  int rc = act ? sl_model_boundary(c->m, pl->first[vs], &a, &d, &n) : SL_OK; /* n: the stream's size (any set) */
  if (!rc && n != pl->bnd)
    rc = sl_fail(SL_EINTERNAL, "pipeline: a boundary of %lld elements, the plan has %lld", (long long)n,
                 (long long)pl->bnd);
  float *at = b + (pl->slices > 1 ? st->tp_rank * pl->wire : 0); /* this TP rank's slice (all-gathered on receipt) */
  /* on a device backend into a host buffer, uploaded at finish_recv */
  if (!rc && on_device(c)) {
    if (!(st->rhost[i] = hpool_get(st))) rc = SL_ENOMEM;
    else at = st->rhost[i] + (at - b);
  }
  if (!rc && sl_comm_recv(st->pp, at, pl->wire, SL_F32, o->peer, act ? TAG_ACT : TAG_GRAD, &st->rreq[i]) != SL_COMM_OK)
    rc = comm_rc("receive", o->mb);
  return rc;
}

/* RECV op i: its receive (posted now if not yet), complete. */
static int finish_recv(pp_state *st, const sl_step_ctx *c, int i) {
  int rc = st->rreq[i] ? SL_OK : post_recv(st, c, i);
  sl_comm_req *r = st->rreq[i];
  st->rreq[i] = NULL;
  const sl_pp_plan *pl = st->pl;
  const sl_pp_op *o = &pl->sched.ops[pl->rank][i];
  if (!rc && sl_comm_wait(r) != SL_COMM_OK) rc = comm_rc("receive", o->mb);
  float *b = o->dir == SL_PP_ACT ? st->ain[o->mb * pl->V + o->chunk] : st->gin[o->mb * pl->V + o->chunk];
  float *h = st->rhost[i] ? st->rhost[i] : b; /* where it landed: host staging on a device backend */
  st->rhost[i] = NULL;
  if (!rc && pl->slices > 1) { /* the T slices of the replicated boundary, from the T ranks of this TP group */
    if (sl_comm_allgather_sync(st->tp, h + st->tp_rank * pl->wire, h, pl->wire, SL_F32) != SL_COMM_OK)
      rc = sl_fail(SL_ECOMM, "pipeline: TP all-gather of micro-batch %d's boundary: %s", o->mb, sl_comm_last_error());
  }
  if (h != b) {
    if (!rc) c->m->ops->upload(c->m->k, b, h, (size_t)pl->bnd * 4);
    int rc2 = hpool_put(st, h);
    if (!rc) rc = rc2;
  }
  return rc;
}

/* SEND op i: posted, not waited (wait_sends completes it). An activation
 * goes from mb's set (the residual stream at the next stage's first unit), a
 * gradient from the staging buffer its B filled. */
static int post_send(pp_state *st, const sl_step_ctx *c, int i, int64_t ncomp, int *next_load) {
  const sl_pp_plan *pl = st->pl;
  const sl_pp_op *o = &pl->sched.ops[pl->rank][i];
  int vs = o->chunk * pl->P + pl->rank, slot = o->mb * pl->V + o->chunk, act = o->dir == SL_PP_ACT, rc = SL_OK;
  pend_send *q = &st->pend[st->npend];
  *q = (pend_send){.at = ncomp, .mb = o->mb};
  float *buf = NULL, *d;
  int64_t n = pl->bnd;
  if (act) {
    rc = use_mb(st, c, o->mb, next_load);
    if (!rc) rc = sl_model_boundary(c->m, pl->first[vs + 1], &buf, &d, &n);
  } else if (!(buf = q->buf = st->gout[slot])) {
    rc = sl_fail(SL_EINTERNAL, "pipeline: gradient of micro-batch %d sent before its backward", o->mb);
  }
  if (!rc && n != pl->bnd)
    rc = sl_fail(SL_EINTERNAL, "pipeline: a boundary of %lld elements, the plan has %lld", (long long)n,
                 (long long)pl->bnd);
  if (rc) return rc;
  st->gout[slot] = act ? st->gout[slot] : NULL;
  const float *at = buf + (pl->slices > 1 ? st->tp_rank * pl->wire : 0); /* this TP rank's slice */
  /* on a device backend its host copy is sent */
  if (on_device(c)) {
    if (!(q->host = hpool_get(st))) {
      if (q->buf) (void)pool_put(st, q->buf);
      return SL_ENOMEM;
    }
    c->m->ops->download(c->m->k, q->host, at, (size_t)pl->wire * 4);
    at = q->host;
  }
  if (sl_comm_send(st->pp, at, pl->wire, SL_F32, o->peer, act ? TAG_ACT : TAG_GRAD, &q->r) != SL_COMM_OK) {
    if (q->buf) (void)pool_put(st, q->buf);
    (void)hpool_put(st, q->host);
    return comm_rc("send", o->mb);
  }
  st->npend++;
  return SL_OK;
}

/* Completes the sends in flight posted before compute op `before` started,
 * and every activation send of micro-batch mb (>= 0: its backward is next,
 * its set may be reused after it); a gradient's buffer returns to the pool.
 * Which sends complete where depends on the op list only, never on timing,
 * so the staging pool (workspace arena) is the same in every run. */
static int wait_sends(pp_state *st, int64_t before, int mb) {
  int rc = SL_OK, k = 0;
  for (int j = 0; j < st->npend; j++) {
    pend_send q = st->pend[j];
    if (q.at < before || (q.mb == mb && !q.buf)) {
      if (sl_comm_wait(q.r) != SL_COMM_OK && !rc) rc = comm_rc("send", q.mb);
      if (q.buf && pool_put(st, q.buf) != SL_OK && !rc) rc = sl_fail(SL_ENOMEM, "out of memory");
      if (hpool_put(st, q.host) != SL_OK && !rc) rc = sl_fail(SL_ENOMEM, "out of memory");
    } else {
      st->pend[k++] = q;
    }
  }
  st->npend = k;
  return rc;
}

static int is_compute(const sl_pp_op *o) { return o->kind == SL_PP_F || o->kind == SL_PP_B || o->kind == SL_PP_W; }

/* After the step's backward: the last rank's copy of the tied embedding's
 * gradient takes rank 0's reduced one (the sum), before the norm reads it. */
static int tied_sum(pp_state *st, const sl_step_ctx *c) {
  if (!tied_pp(st) || !(first_rank(st) || last_rank(st))) return SL_OK;
  sl_fsdp_view_t v = sl_fsdp_view(c->f, 0);
  return xfer(st, c, first_rank(st), v.grads, v.count, first_rank(st) ? st->pl->P - 1 : 0, TAG_TIED_SUM, -1);
}

static int pp_run_step(sl_schedule *s, const sl_step_ctx *c, sl_step_result *out) {
  pp_state *st = s->priv;
  const sl_pp_plan *pl = st->pl;
  out->loss_sum = 0;
  int rc = step_begin(st, c);
  if (rc) return rc;
  int V = pl->V, m = c->nmicro, nb = m * V, kb = 0, kw = 0, next_load = 0;
  sl_comm_stats before, after;
  sl_comm_get_stats(st->pp, &before);
  if (!rc) rc = sl_fsdp_hold_params(c->f, 1); /* ZeRO-3: one gather per unit per step (not per micro-batch) */
  if (tied_pp(st) && first_rank(st))
    for (int k = 0; k < m && !rc; k++)
      if (sl_comm_recv(st->pp, st->tiedh[k] ? st->tiedh[k] : st->tied[k], st->tied_n, SL_F32, pl->P - 1, TAG_TIED,
                       &st->tied_req[k]) != SL_COMM_OK)
        rc = comm_rc("tied-gradient receive", k);
  const sl_pp_op *ops = pl->sched.ops[pl->rank];
  int nops = pl->sched.nops[pl->rank];
  int64_t ncomp = 0; /* compute ops started */
  for (int i = 0; i < nops && !rc; i++) {
    const sl_pp_op *o = &ops[i];
    int vs = o->chunk * pl->P + pl->rank;
    if (is_compute(o)) { /* sends of two ops ago complete; the next compute op's receives are posted */
      rc = wait_sends(st, ncomp++, o->kind == SL_PP_F ? -1 : o->mb);
      for (int j = i + 1; j < nops && !is_compute(&ops[j]) && !rc; j++)
        if (ops[j].kind == SL_PP_RECV && !st->rreq[j]) rc = post_recv(st, c, j);
      if (rc) break;
    }
    switch (o->kind) {
    case SL_PP_F:
      rc = use_mb(st, c, o->mb, &next_load);
      if (!rc) rc = take_act(st, c, o->mb, o->chunk, vs);
      if (!rc) rc = fwd_chunk(st, c, o->mb, vs, out);
      break;
    case SL_PP_B:
      rc = use_mb(st, c, o->mb, &next_load);
      if (!rc) rc = zb(pl) ? zb_input(st, c, o->mb) : bwd_chunk(st, c, o->mb, o->chunk, kb++, nb);
      break;
    case SL_PP_W:
      rc = use_mb(st, c, o->mb, &next_load);
      if (!rc) rc = zb_weight(st, c, o->mb, kw++, nb);
      break;
    case SL_PP_RECV: rc = finish_recv(st, c, i); break;
    case SL_PP_SEND: rc = post_send(st, c, i, ncomp, &next_load); break;
    default: rc = sl_fail(SL_EINTERNAL, "pipeline: op kind %d not executed", o->kind);
    }
  }
  int rc4 = wait_sends(st, INT64_MAX, -1); /* the step's last sends (also after a failure: their buffers) */
  if (!rc) rc = rc4;
  int rc2 = tied_wait_all(st, m);
  int rc3 = sl_fsdp_hold_params(c->f, 0); /* the step's gathered parameters go */
  if (!rc2) rc2 = rc3;
  sl_comm_get_stats(st->pp, &after);
  const int kinds[2] = {SL_COLL_SEND, SL_COLL_RECV};
  for (int d = 0; d < 2; d++) {
    st->xfer[d][0] += after.calls[kinds[d]] - before.calls[kinds[d]];
    st->xfer[d][1] += after.bytes[kinds[d]] - before.bytes[kinds[d]];
  }
  st->steps++;
  if (!rc && !rc2) rc2 = tied_sum(st, c);
  return rc ? rc : rc2;
}

/* Forward only (evaluation): each micro-batch through the virtual stages in
 * order, the activation passed on from rank to rank. */
static int pp_forward(sl_schedule *s, const sl_step_ctx *c, sl_step_result *out) {
  pp_state *st = s->priv;
  const sl_pp_plan *pl = st->pl;
  out->loss_sum = 0;
  int rc = SL_OK;
  for (int k = 0; k < c->nmicro && !rc; k++) {
    rc = sl_model_use_acts(c->m, 0);
    if (!rc) rc = c->load(c->user, k);
    for (int vs = pl->rank; vs < pl->S && !rc; vs += pl->P) {
      float *act, *dres;
      int64_t n;
      if (vs > 0 && !(rc = sl_model_boundary(c->m, pl->first[vs], &act, &dres, &n)))
        rc = xfer(st, c, 0, act, n, (vs - 1) % pl->P, TAG_ACT, k);
      if (!rc) rc = fwd_chunk(st, c, k, vs, out);
      if (!rc && vs < pl->S - 1 && !(rc = sl_model_boundary(c->m, pl->first[vs + 1], &act, &dres, &n)))
        rc = xfer(st, c, 1, act, n, (vs + 1) % pl->P, TAG_ACT, k);
    }
    int rc2 = sl_fsdp_end_forward(c->f);
    if (!rc) rc = rc2;
  }
  return rc;
}

/* The unit sums of squares into the slots (the step's one download, engine/trainer.c) */
static void pp_queue_sumsq(sl_schedule *s, const sl_step_ctx *c, int slot0) {
  (void)s;
  sl_tpar_queue_unit_sumsq(c->f, c->m, slot0);
}

static int pp_grad_sumsq(sl_schedule *s, const sl_step_ctx *c, double *ss) {
  pp_state *st = s->priv;
  const sl_pp_plan *pl = st->pl;
  int U = pl->nunits, P = pl->P, rc = SL_OK;
  double *mine = calloc((size_t)U, sizeof(double)), *all = calloc((size_t)U * (size_t)P, sizeof(double));
  if (!mine || !all) rc = sl_fail(SL_ENOMEM, "out of memory");
  if (!rc) {
    memcpy(mine, c->sumsq_slots, (size_t)U * sizeof(double)); /* pp_queue_sumsq's; under TP each tensor once */
    if (sl_comm_allgather_sync(st->pp, mine, all, U, SL_F64) != SL_COMM_OK)
      rc = sl_fail(SL_ECOMM, "pipeline gradient norm all-gather: %s", sl_comm_last_error());
  }
  if (!rc) {
    /* in unit order, each unit from its owner: one process's sum (each sharding group apart: --ep) */
    for (int u = 0; u < U; u++) mine[u] = all[(size_t)pl->owner[u] * (size_t)U + (size_t)u];
    rc = sl_fsdp_group_sums(c->f, mine, ss);
    if (!rc && st->tp) rc = sl_tpar_sum(st->tp, *ss, ss); /* then over the TP group, in rank order */
  }
  free(mine);
  free(all);
  return rc;
}

static void pp_destroy(sl_schedule *s) {
  pp_state *st = s->priv;
  if (!st) return;
  (void)tied_wait_all(st, st->pl->sched.spec.m);
  const sl_pp_sched *ps = &st->pl->sched;
  int r = st->pl->rank;
  if (st->steps)
    sl_log(SL_LOG_INFO,
           "pipeline rank %d: %llu sends (%llu bytes), %llu receives (%llu bytes) in %lld steps; "
           "the schedule per step: %lld sends (%lld bytes), %lld receives (%lld bytes)%s",
           r, (unsigned long long)st->xfer[0][0], (unsigned long long)st->xfer[0][1],
           (unsigned long long)st->xfer[1][0], (unsigned long long)st->xfer[1][1], (long long)st->steps,
           (long long)ps->sends[r], (long long)ps->send_bytes[r], (long long)ps->recvs[r], (long long)ps->recv_bytes[r],
           tied_pp(st) && (first_rank(st) || last_rank(st)) ? " + the tied embedding's gradient per micro-batch" : "");
  /* the staging buffers were allocated through the model's ops: the trainer
   * frees the model after the schedule, so they go here */
  for (int i = 0; st->gin && st->gout && st->ain && i < st->pl->sched.spec.m * st->pl->V; i++) { /* a failed step's */
    if (st->gin[i]) (void)pool_put(st, st->gin[i]);
    if (st->gout[i]) (void)pool_put(st, st->gout[i]);
    if (st->ain[i]) (void)pool_put(st, st->ain[i]);
  }
  for (int i = 0; i < st->npool; i++) {
    st->ops->free(st->k, st->pool[i]);
    sl_mem_sub(SL_ARENA_WORKSPACE, st->pl->bnd * 4);
  }
  for (int k = 0; k < st->pl->sched.spec.m && st->tied; k++)
    if (st->tied[k]) {
      st->ops->free(st->k, st->tied[k]);
      sl_mem_sub(SL_ARENA_WORKSPACE, st->tied_n * 4);
    }
  for (int k = 0; k < st->pl->sched.spec.m && st->tiedh; k++) sl_free(st->tiedh[k]);
  for (int i = 0; st->rhost && i < st->pl->sched.nops[st->pl->rank]; i++) sl_free(st->rhost[i]); /* a failed step's */
  for (int i = 0; i < st->nhpool; i++) sl_free(st->hpool[i]);
  free(st->hpool);
  free(st->rhost);
  free(st->tiedh);
  free(st->set_of);
  free(st->free_set);
  free(st->gin);
  free(st->rreq);
  free(st->pend);
  free(st->gout);
  free(st->ain);
  free(st->pool);
  free(st->tied_req);
  free(st->tied);
  free(st->stash); /* the buffers go with the model (sl_model_buf) */
  free(st);
  s->priv = NULL;
}

static const sl_schedule_vt pp_vt = {
    .name = "pp",
    .nacts = pp_nacts,
    .run_step = pp_run_step,
    .forward = pp_forward,
    .grad_sumsq = pp_grad_sumsq,
    .queue_sumsq = pp_queue_sumsq,
    .destroy = pp_destroy,
};

int sl_schedule_pp_create(const sl_pp_plan *plan, sl_comm *pp, sl_comm *tp, sl_schedule *s) {
  if (!plan || !pp) return sl_fail(SL_EINTERNAL, "pipeline schedule without a plan or a PP communicator");
  pp_state *st = calloc(1, sizeof *st);
  if (!st) return sl_fail(SL_ENOMEM, "out of memory");
  s->vt = &pp_vt;
  s->priv = st;
  st->pl = plan;
  st->pp = pp;
  st->tp = tp && sl_comm_size(tp) > 1 ? tp : NULL;
  st->tp_rank = st->tp ? sl_comm_rank(st->tp) : 0;
  if (plan->slices > 1 && (!st->tp || sl_comm_size(st->tp) != plan->slices))
    return sl_fail(SL_EINTERNAL, "pipeline: boundaries in %d TP slices without a TP group of that size", plan->slices);
  int m = plan->sched.spec.m, mv = m * plan->V;
  st->nsets = count_sets(plan);
  st->set_of = calloc((size_t)m, sizeof(int));
  st->free_set = calloc((size_t)(st->nsets > 0 ? st->nsets : 1), sizeof(int));
  st->gin = calloc((size_t)mv, sizeof(float *));
  int nops = plan->sched.nops[plan->rank] > 0 ? plan->sched.nops[plan->rank] : 1;
  st->rreq = calloc((size_t)nops, sizeof(sl_comm_req *));
  st->pend = calloc((size_t)nops, sizeof(pend_send));
  st->gout = calloc((size_t)mv, sizeof(float *));
  st->ain = calloc((size_t)mv, sizeof(float *));
  st->tied = calloc((size_t)m, sizeof(float *));
  st->tied_req = calloc((size_t)m, sizeof(sl_comm_req *));
  st->tiedh = calloc((size_t)m, sizeof(float *));
  st->rhost = calloc((size_t)nops, sizeof(float *));
  if (st->nsets < 0 || !st->set_of || !st->free_set || !st->gin || !st->gout || !st->ain || !st->tied ||
      !st->tied_req || !st->rreq || !st->pend || !st->tiedh || !st->rhost)
    return sl_fail(SL_ENOMEM, "out of memory");
  return SL_OK;
}

/* ---- the plan of a training run ------------------------------------------------ */
/* zb1p runs the split backward of models/model.h (bwd_input / bwd_weight):
 * not with --no-sync-accum where the model says its split is not for it
 * (sl_model_caps zb_split_accum: Mamba, models/mamba_split.c). Under --tp the
 * TP ranks of a stage run the same op list in the same order, so their B
 * and W ops meet in the same collectives. */
static int zb_refusal(const sl_train_cfg *c, const sl_model_config *mc) {
  sl_model_caps caps;
  if (strcmp(c->pp_schedule, "zb1p")) return SL_OK;
  int rc = sl_model_caps_of(mc, &caps);
  if (rc) return rc;
  if (!caps.zb_split)
    return sl_fail(SL_EINPUT,
                   "--pp-schedule zb1p: not supported for %s (its blocks have no split backward: the mixture of "
                   "experts); use --pp-schedule 1f1b",
                   mc->arch_name);
  if (!caps.zb_split_accum && c->no_sync_accum)
    return sl_fail(SL_EINPUT,
                   "--pp-schedule zb1p with --no-sync-accum: not supported for %s (its split backward adds some "
                   "parameter gradients to the step's sum in another order); drop --no-sync-accum or use "
                   "--pp-schedule 1f1b",
                   mc->arch_name);
  return SL_OK;
}

int sl_pp_plan_for_run(const sl_train_cfg *c, const sl_model_config *mc, int rank, sl_pp_plan **out) {
  *out = NULL;
  if (c->pp <= 1) {
    if (c->pp_virtual > 1 || c->pp_layout[0])
      return sl_fail(SL_EINPUT, "--pp-virtual and --pp-layout need --pp P >= 2 (found --pp %lld)", (long long)c->pp);
    return SL_OK;
  }
  if (mc->moe_experts && mc->output_router_logits && mc->router_aux_loss_coef > 0 &&
      mc->moe_balance == SL_MOE_BALANCE_AUX)
    return sl_fail(SL_EINPUT,
                   "--pp %lld: %s's load-balancing loss (output_router_logits true) needs every layer's routing on "
                   "one rank; across pipeline stages it is not implemented (set output_router_logits false or "
                   "router_aux_loss_coef 0, pass --moe-balance none or bias, or drop --pp)",
                   (long long)c->pp, mc->arch_name);
  if (mc->moe_experts && mc->moe_z_loss_coef > 0)
    return sl_fail(SL_EINPUT,
                   "--pp %lld with --moe-z-loss-coef %g: the z-loss joins the loss on the head's stage only; across "
                   "pipeline stages it is not implemented (drop --moe-z-loss-coef or --pp)",
                   (long long)c->pp, mc->moe_z_loss_coef);
  /* one reduction at the step's last backward: it must cover every unit of
   * the rank (one chunk), and the tied weight's head part is sent per
   * micro-batch from a buffer zeroed for it */
  if (c->no_sync_accum && (c->pp_virtual > 1 || mc->tie_word_embeddings))
    return sl_fail(SL_EINPUT,
                   "--pp %lld with --no-sync-accum: supported for one chunk per rank and untied "
                   "embeddings only (found --pp-virtual %lld, tie_word_embeddings %s); drop --no-sync-accum",
                   (long long)c->pp, (long long)c->pp_virtual, mc->tie_word_embeddings ? "true" : "false");
  if (strcmp(c->offload_params, "none"))
    return sl_fail(SL_EINPUT, "--pp %lld with --offload-params %s: not supported yet", (long long)c->pp,
                   c->offload_params);
  int zrc = zb_refusal(c, mc);
  if (zrc) return zrc;
  sl_model *sm = NULL;
  int rc = sl_model_create_specs(mc, &sm);
  if (rc) return rc;
  int64_t *numel = calloc((size_t)sm->nunits, sizeof(int64_t));
  double *lflops = calloc((size_t)mc->num_hidden_layers + 1, sizeof(double));
  if (!numel || !lflops) rc = sl_fail(SL_ENOMEM, "out of memory");
  int hybrid = !rc && sl_model_layer_flops(sm, c->seq_len, lflops); /* Mamba-2, attention, MLP layers differ */
  for (int u = 0; !rc && u < sm->nunits; u++) /* a companion counts with its block (the stage balance) */
    numel[u < mc->num_hidden_layers + 2 ? u : sm->units[u].companion_of] += sm->units[u].numel;
  sl_pp_plan_cfg pc = {.kind = c->pp_schedule,
                       .P = (int)c->pp,
                       .V = (int)c->pp_virtual,
                       .rank = rank,
                       .m = (int)c->grad_accum,
                       .layout = c->pp_layout,
                       .L = (int)mc->num_hidden_layers,
                       .tied = mc->tie_word_embeddings,
                       .no_attention = !sm->caps.attention,
                       .numel = numel,
                       .lflops = hybrid ? lflops : NULL,
                       .hidden = mc->hidden_size,
                       .heads_x_dim = mc->num_attention_heads * mc->head_dim,
                       .B = c->micro_batch,
                       .T = c->seq_len,
                       .sp_tp = c->sequence_parallel ? c->tp : 1,
                       .tp_slices = c->sequence_parallel ? 1 : c->tp,
                       .ncomp = sm->nunits - ((int)mc->num_hidden_layers + 2)};
  int *comp_of = !rc && pc.ncomp > 0 ? calloc((size_t)pc.ncomp, sizeof(int)) : NULL;
  if (!rc && pc.ncomp > 0 && !comp_of) rc = sl_fail(SL_ENOMEM, "out of memory");
  for (int j = 0; !rc && j < pc.ncomp; j++) comp_of[j] = sm->units[pc.L + 2 + j].companion_of;
  pc.comp_of = comp_of;
  if (!rc) rc = sl_pp_plan_create(&pc, out);
  if (!rc) { /* what the run does, once */
    const sl_pp_plan *p = *out;
    char lay[512] = "";
    for (int v = 0; v < p->S; v++)
      snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%d", v ? "," : "", p->layers[v]);
    int64_t idle = 0;
    for (int r = 0; r < p->P; r++) idle = p->sched.idle[r] > idle ? p->sched.idle[r] : idle;
    sl_log0(SL_LOG_INFO,
            "pipeline: %d ranks x %d chunk%s = %d stages, schedule %s, %d micro-batches per step, "
            "decoder layers per stage %s (embedding on the first, head on the last); idle %lld of %lld time units "
            "per rank (shardlm pp-schedule shows the timeline)",
            p->P, p->V, p->V > 1 ? "s" : "", p->S, c->pp_schedule, (int)c->grad_accum, lay, (long long)idle,
            (long long)p->sched.makespan);
  }
  free(numel);
  free(lflops);
  free(comp_of);
  sl_model_destroy(sm);
  return rc;
}

int sl_pp_route_unit(const sl_pp_plan *pl, const sl_par_mesh *mesh, int u, float *flat, int64_t n, int rc) {
  int own = pl->owner[u];
  if (own == 0 || mesh->group[SL_GROUP_DP].coord != 0 || mesh->axis[SL_AXIS_TP].coord != 0) return rc;
  if (pl->rank != 0 && pl->rank != own) return rc;
  /* a failed gather still sends (its buffer), so the receiver is not left waiting; the failure is the sender's */
  sl_comm_req *r = NULL;
  int e = pl->rank == own ? sl_comm_send(mesh->axis[SL_AXIS_PP].comm, flat, n, SL_F32, 0, TAG_UNIT, &r)
                          : sl_comm_recv(mesh->axis[SL_AXIS_PP].comm, flat, n, SL_F32, own, TAG_UNIT, &r);
  if ((e != SL_COMM_OK || sl_comm_wait(r) != SL_COMM_OK) && !rc)
    rc = sl_fail(SL_ECOMM, "pipeline: unit %d to rank 0: %s", u, sl_comm_last_error());
  return rc;
}
