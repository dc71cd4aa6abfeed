/* models/llama_moe.c — the sparse MLP of the Llama block kind's mixture of
 * experts option (Mixtral; p->E > 0): transformers' MixtralSparseMoeBlock.
 *
 * From ln2 (N, C): router logits = ln2 @ Wr^T (E, C, no bias); fp32 softmax
 * over the E experts; the top k; their probabilities renormalised to sum 1
 * when p->norm_topk. Dropless: every token goes to its k experts. The
 * N*k slots are permuted into expert groups (kernels' moe_route_fwd /
 * moe_permute_fwd), each expert's SwiGLU MLP runs as one GEMM per weight
 * over its group (an empty group runs nothing), and the rows come back
 * weighted (moe_combine_fwd). The expert grouping is read back to the host
 * (E+1 offsets a layer) to size the GEMMs; under the counting backend
 * (which moves no data) the host keeps the balanced split, so the engine
 * check counts a balanced routing.
 *
 * Expert parallelism (m->ep_size = EP > 1): this rank holds experts
 * [e0, e0 + El), El = E/EP, e0 = ep_rank El. The permuted rows are already
 * grouped by expert, so the rows for EP rank q are one run of the buffer;
 * the rows per (rank, expert) are exchanged first (access.ep counts), the
 * rows sent (access.ep alltoallv), each local expert's GEMMs run on the run
 * of rows every rank sent it (one call per rank and expert; no per-token
 * loop), and the outputs go back the same way before the combine. The
 * backward sends the outputs' gradients and brings the inputs' back. The
 * received rows are held for the worst case (every token of every EP rank
 * choosing this rank's experts: EP N k rows).
 *
 * Tensors after ln2: block_sparse_moe.gate.weight (E, C) (the block unit),
 * then the layer's experts unit (a companion, unit L + 2 + l): for each
 * expert e experts.e.w1 (I, C), w3 (I, C), w2 (C, I): w1|w3 is the packed
 * gate|up of the dense MLP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "models/llama_internal.h"

/* The expert groups of layer a into p->hoffs. */
static void moe_groups(sl_model *m, llama_priv *p, const layer_acts *a) {
  for (int64_t e = 0; e <= p->E; e++) p->hoffs[e] = (int32_t)(p->N * p->k * e / p->E);
  m->ops->download(m->k, p->hoffs, a->offs, (size_t)(p->E + 1) * sizeof(int32_t));
}

static const float *expert_w(const llama_priv *p, const float *wgu0, int64_t e) { return wgu0 + e * 3 * p->I * p->C; }

/* Layer l's experts (this rank's part of its companion unit): parameters, and the gradient buffer when g. */
static int experts_of(sl_model *m, int l, const float **w, float **g) {
  int u = sl_dec_companion(m, l);
  if (u < 0 || !m->access.params) return sl_fail(SL_EINTERNAL, "layer %d: no experts unit to read", l);
  int rc = m->access.params(m->access.user, u, w);
  if (!rc && g) rc = m->access.grads(m->access.user, u, g);
  return rc;
}

/* The exchange plan of a layer from p->hoffs: rows per (EP rank, local
 * expert) this rank sends (ecnt[0 .. EP*El)) and receives (the next EP*El,
 * from access.ep counts), then rows per rank sent and received. At EP = 1
 * the received rows are the sent ones. */
static int ep_plan(sl_model *m, llama_priv *p) {
  int64_t EP = m->ep_size, El = p->E / EP, *sc = p->ecnt, *rcv = sc + EP * El, *srow = rcv + EP * El,
          *rrow = srow + EP;
  for (int64_t i = 0; i < EP * El; i++) sc[i] = p->hoffs[i + 1] - p->hoffs[i];
  int rc = EP > 1 ? m->access.ep.counts(m->access.ep.user, sc, rcv, El) : SL_OK;
  if (EP == 1) memcpy(rcv, sc, (size_t)El * sizeof *sc);
  for (int64_t q = 0; q < EP; q++) {
    srow[q] = rrow[q] = 0;
    for (int64_t j = 0; j < El; j++) srow[q] += sc[q * El + j], rrow[q] += rcv[q * El + j];
  }
  return rc;
}

/* Rows to their experts' ranks (dir 1: send counts srow, receive rrow) or back (dir -1). */
static int ep_move(sl_model *m, llama_priv *p, const float *send, float *recv, int dir) {
  int64_t EP = m->ep_size, El = p->E / EP, *srow = p->ecnt + 2 * EP * El, *rrow = srow + EP;
  if (EP == 1) return SL_OK; /* the buffers alias */
  return m->access.ep.alltoallv(m->access.ep.user, send, dir > 0 ? srow : rrow, recv, dir > 0 ? rrow : srow, p->C);
}

/* Calls fn for each run of received rows of one local expert: (first row, rows, local expert). */
#define FOR_RUNS(p, EP, r0, n, j)                                                                                    \
  for (int64_t q_ = 0, r0 = 0, El_ = (p)->E / (EP); q_ < (EP); q_++)                                                 \
    for (int64_t j = 0, n; j < El_ && ((n = (p)->ecnt[(EP) * El_ + q_ * El_ + j]), 1); r0 += n, j++)                 \
      if (n > 0)

/* The local expert the j-th run of a peer's rows is for (SL_FAULT_EP_MISROUTE: the wrong one). */
static int64_t lj(const llama_priv *p, int64_t j) { return p->misroute ? p->E / p->ep - 1 - j : j; }

/* The local experts' SwiGLU MLPs on the received rows a->xr into a->yr. */
static void experts_fwd(sl_model *m, llama_priv *p, layer_acts *a, const float *we) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t C = p->C, I = p->I, EP = m->ep_size, R = 0;
  FOR_RUNS(p, EP, r0, n, j) o->linear_fwd(k, a->gu + r0 * 2 * I, a->xr + r0 * C, expert_w(p, we, lj(p, j)), NULL, n, C, 2 * I);
  for (int64_t q = 0; q < EP; q++) R += p->ecnt[2 * EP * (p->E / EP) + EP + q];
  o->swiglu_fwd(k, a->h, a->gu, R, I);
  FOR_RUNS(p, EP, r0, n, j)
  o->linear_fwd(k, a->yr + r0 * C, a->h + r0 * I, expert_w(p, we, lj(p, j)) + 2 * I * C, NULL, n, I, C);
}

/* Their backward: dyr (the outputs' gradients) into dxr; weight gradients add into ge. */
static void experts_bwd(sl_model *m, llama_priv *p, const layer_acts *a, const float *we, float *ge) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t C = p->C, I = p->I, EP = m->ep_size, R = 0;
  for (int64_t q = 0; q < EP; q++) R += p->ecnt[2 * EP * (p->E / EP) + EP + q];
  o->zero(k, p->dh, (size_t)(R * I) * 4);
  FOR_RUNS(p, EP, r0, n, j)
  o->linear_bwd(k, p->dh + r0 * I, (float *)expert_w(p, ge, lj(p, j)) + 2 * I * C, NULL, p->dyr + r0 * C, a->h + r0 * I,
                expert_w(p, we, lj(p, j)) + 2 * I * C, n, I, C);
  o->zero(k, p->dgu, (size_t)(R * 2 * I) * 4);
  o->swiglu_bwd(k, p->dgu, p->dh, a->gu, R, I);
  o->zero(k, p->dxr, (size_t)(R * C) * 4);
  FOR_RUNS(p, EP, r0, n, j)
  o->linear_bwd(k, p->dxr + r0 * C, (float *)expert_w(p, ge, lj(p, j)), NULL, p->dgu + r0 * 2 * I, a->xr + r0 * C,
                expert_w(p, we, lj(p, j)), n, C, 2 * I);
}

int64_t sl_llama_moe_load(sl_model *m, int64_t *out) {
  llama_priv *p = sl_dec(m)->blk;
  int64_t n = p->E ? sl_dec(m)->L * p->E : 0;
  for (int64_t i = 0; i < n; i++) {
    if (out) out[i] = p->load[i];
    p->load[i] = 0;
  }
  return n;
}

/* The load-balancing loss (transformers' load_balancing_loss_func, added
 * with output_router_logits): over the micro-batch's L*N (layer, token)
 * rows, f_e = the slots expert e took / (L*N) and P_e = its mean
 * probability; aux = E * sum_e f_e P_e, times router_aux_loss_coef. f is
 * not differentiated (the top-k's one-hot), so every probability of every
 * layer gets the gradient gp_e = coef * E * f_e / (L*N) times the loss's
 * scale. Here the micro-batch adds coef * aux * N to the token-loss sum, so
 * a step's loss is its mean token loss plus coef * the micro-batches' mean
 * aux (exactly when no target is masked), and the gradient is coef * E *
 * f_e / L * loss_scale. The host sums the slots (from the groups) and the
 * probabilities (read back, (N, E) a layer) during the forward. */
int sl_llama_moe_init(sl_model *m, llama_priv *p) {
  const sl_model_config *c = &m->cfg;
  p->aux_coef = c->output_router_logits ? (float)c->router_aux_loss_coef : 0.0f;
  p->ep = m->ep_size;
  p->misroute = m->ep_size > 1 && sl_env_bool("SL_FAULT_EP_MISROUTE");
  if (!p->aux_coef || !m->ops) return SL_OK;
  if (!(p->acnt = calloc((size_t)p->E, sizeof *p->acnt)) || !(p->aprob = calloc((size_t)p->E, sizeof *p->aprob)) ||
      !(p->hprob = calloc((size_t)(p->N * p->E), sizeof *p->hprob)))
    return sl_fail(SL_ENOMEM, "out of memory");
  return (p->gp = m->ops->alloc(m->k, (size_t)p->E * 4)) ? SL_OK : SL_ENOMEM;
}

static void aux_accumulate(sl_model *m, llama_priv *p, const layer_acts *a) {
  for (int64_t e = 0; e < p->E; e++) p->acnt[e] += p->hoffs[e + 1] - p->hoffs[e];
  m->ops->download(m->k, p->hprob, a->probs, (size_t)(p->N * p->E) * 4);
  for (int64_t t = 0; t < p->N; t++)
    for (int64_t e = 0; e < p->E; e++) p->aprob[e] += p->hprob[t * p->E + e];
}

int sl_llama_moe_loss_term(sl_model *m) {
  llama_priv *p = sl_dec(m)->blk;
  if (!p->E || !p->aux_coef || !p->acnt) return SL_OK;
  double rows = (double)sl_dec(m)->L * (double)p->N, aux = 0;
  float g[1024]; /* E <= 1024 (the config checks) */
  for (int64_t e = 0; e < p->E; e++) {
    aux += (p->acnt[e] / rows) * (p->aprob[e] / rows);
    g[e] = (float)((double)p->aux_coef * (double)p->E * (p->acnt[e] / rows) / (double)sl_dec(m)->L *
                   (double)m->loss_scale);
    p->acnt[e] = p->aprob[e] = 0;
  }
  m->loss_sum += (double)p->aux_coef * (double)p->E * aux * (double)p->N;
  m->ops->upload(m->k, p->gp, g, (size_t)p->E * 4);
  return SL_OK;
}

/* Block l's sparse MLP from a->ln2; out (N, C) = the combined experts'
 * output unless out is NULL (recomputation: the kept tensors only, the
 * routing not counted again in p->load). */
int sl_llama_moe_fwd(sl_model *m, llama_priv *p, int l, layer_acts *a, const blockw *w, float *out) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C, E = p->E;
  o->linear_fwd(k, a->logits, a->ln2, w->wr, NULL, N, C, E);
  o->moe_route_fwd(k, a->probs, a->sel, a->wts, a->offs, a->perm, a->pos, a->logits, N, E, p->k, p->norm_topk);
  o->moe_permute_fwd(k, a->xp, a->ln2, a->pos, N, p->k, C);
  moe_groups(m, p, a);
  for (int64_t e = 0; out && e < E; e++) p->load[l * E + e] += p->hoffs[e + 1] - p->hoffs[e];
  if (out && p->acnt) aux_accumulate(m, p, a);
  const float *we;
  int rc = experts_of(m, l, &we, NULL);
  if (!rc) rc = ep_plan(m, p);
  if (!rc) rc = ep_move(m, p, a->xp, a->xr, 1);
  if (rc) return rc;
  experts_fwd(m, p, a, we);
  if ((rc = ep_move(m, p, a->yr, a->yp, -1))) return rc;
  if (out) o->moe_combine_fwd(k, out, a->yp, a->wts, a->pos, N, p->k, C);
  return SL_OK;
}

/* dln (N, C) = the gradient of ln2 given dout (N, C), the gradient of the
 * sparse MLP's output; the weight gradients add into g. */
int sl_llama_moe_bwd(sl_model *m, llama_priv *p, int l, const layer_acts *a, const blockw *w, const blockw *g,
                     const float *dout, float *dln) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C, E = p->E, R = N * p->k;
  o->zero(k, p->dyp, (size_t)(R * C) * 4);
  o->zero(k, p->dwts, (size_t)R * 4);
  o->moe_combine_bwd(k, p->dyp, p->dwts, dout, a->yp, a->wts, a->pos, N, p->k, C);
  moe_groups(m, p, a);
  const float *we;
  float *ge;
  int rc = experts_of(m, l, &we, &ge);
  if (!rc) rc = ep_plan(m, p); /* the counts again: the forward's are not kept per layer */
  if (!rc) rc = ep_move(m, p, p->dyp, p->dyr, 1);
  if (rc) return rc;
  experts_bwd(m, p, a, we, ge);
  if ((rc = ep_move(m, p, p->dxr, p->dxp, -1))) return rc;
  o->zero(k, dln, (size_t)(N * C) * 4);
  o->moe_permute_bwd(k, dln, p->dxp, a->pos, N, p->k, C);
  o->zero(k, p->dlogits, (size_t)(N * E) * 4);
  o->moe_route_bwd(k, p->dlogits, p->dwts, a->probs, a->sel, a->wts, p->aux_coef ? p->gp : NULL, N, E, p->k,
                   p->norm_topk);
  o->linear_bwd(k, dln, (float *)g->wr, NULL, p->dlogits, a->ln2, w->wr, N, C, E);
  return SL_OK;
}

/* A layer's MoE buffers (after the dense ones: gu and h are sized for N*k rows by the caller). */
int sl_llama_moe_alloc_layer(sl_model *m, llama_priv *p, layer_acts *a) {
  int64_t N = p->N, E = p->E, R = N * p->k;
  if (!(a->logits = sl_model_buf(m, N * E, SL_ARENA_ACTS)) || !(a->probs = sl_model_buf(m, N * E, SL_ARENA_ACTS)) ||
      !(a->wts = sl_model_buf(m, R, SL_ARENA_ACTS)) || !(a->sel = (int32_t *)sl_model_buf(m, R, SL_ARENA_ACTS)) ||
      !(a->perm = (int32_t *)sl_model_buf(m, R, SL_ARENA_ACTS)) ||
      !(a->pos = (int32_t *)sl_model_buf(m, R, SL_ARENA_ACTS)) ||
      !(a->offs = (int32_t *)sl_model_buf(m, E + 1, SL_ARENA_ACTS)) ||
      !(a->xp = sl_model_buf(m, R * p->C, SL_ARENA_ACTS)) || !(a->yp = sl_model_buf(m, R * p->C, SL_ARENA_ACTS)))
    return SL_ENOMEM;
  a->xr = a->xp, a->yr = a->yp;
  if (m->ep_size > 1 && (!(a->xr = sl_model_buf(m, m->ep_size * R * p->C, SL_ARENA_ACTS)) ||
                         !(a->yr = sl_model_buf(m, m->ep_size * R * p->C, SL_ARENA_ACTS))))
    return SL_ENOMEM;
  return SL_OK;
}

int sl_llama_moe_alloc_scratch(sl_model *m, llama_priv *p) {
  int64_t R = p->N * p->k;
  if (!(p->dyp = sl_model_buf(m, R * p->C, SL_ARENA_WORKSPACE)) ||
      !(p->dxp = sl_model_buf(m, R * p->C, SL_ARENA_WORKSPACE)) ||
      !(p->dwts = sl_model_buf(m, R, SL_ARENA_WORKSPACE)) ||
      !(p->dlogits = sl_model_buf(m, p->N * p->E, SL_ARENA_WORKSPACE)))
    return SL_ENOMEM;
  p->dyr = p->dyp, p->dxr = p->dxp;
  if (m->ep_size > 1 && (!(p->dyr = sl_model_buf(m, m->ep_size * R * p->C, SL_ARENA_WORKSPACE)) ||
                         !(p->dxr = sl_model_buf(m, m->ep_size * R * p->C, SL_ARENA_WORKSPACE))))
    return SL_ENOMEM;
  return SL_OK;
}

/* Layer l's router and experts (after post_attention_layernorm). */
int sl_llama_moe_spec(sl_model *m, sl_unit_spec *b, int64_t l, float std) {
  const llama_priv *p = sl_dec(m)->blk;
  int64_t C = p->C, I = p->I;
  char nm[SL_TENSOR_NAME_MAX];
  int rc;
  /* Mixtral: block_sparse_moe.{gate, experts.e.w1|w3|w2}; Qwen3-MoE: mlp.{gate, experts.e.gate_proj|up_proj|down_proj} */
  int q3 = m->cfg.arch == SL_ARCH_QWEN3_MOE;
  static const char *const names[2][3] = {{"w1", "w3", "w2"}, {"gate_proj", "up_proj", "down_proj"}};
  const char *blk = q3 ? "mlp" : "block_sparse_moe";
  if (b->companion_of < 0) {
    snprintf(nm, sizeof nm, "model.layers.%lld.%s.gate.weight", (long long)l, blk);
    return sl_unit_add_split(m, b, nm, 2, p->E, C, 1, SL_INIT_NORMAL, std, SL_SPLIT_NONE, 1);
  }
  for (int64_t e = 0; e < p->E; e++)
    for (int i = 0; i < 3; i++) {
      snprintf(nm, sizeof nm, "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)l, blk, (long long)e,
               names[q3][i]);
      if ((rc = sl_unit_add_split(m, b, nm, 2, i < 2 ? I : C, i < 2 ? C : I, 1, SL_INIT_NORMAL, std, SL_SPLIT_NONE, 1)))
        return rc;
    }
  /* this rank's experts: a contiguous run of the unit (expert e at e * 3 I C) */
  int64_t per = b->numel / m->ep_size;
  b->hold_lo = m->ep_rank * per;
  b->hold_n = per;
  b->expert = 1;
  return SL_OK;
}

int sl_llama_moe_has_experts(const sl_model *m) { return ((const llama_priv *)sl_dec(m)->blk)->E > 0; }

/* Layer l's experts unit (the companion of its block): every expert's tensors, this rank holding its own. */
int sl_llama_moe_experts_spec(sl_model *m, sl_unit_spec *u, int64_t l) {
  snprintf(u->kind, sizeof u->kind, "experts");
  return sl_llama_moe_spec(m, u, l, sl_dec(m)->std);
}
