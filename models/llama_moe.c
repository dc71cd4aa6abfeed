/* models/llama_moe.c — the sparse MLP of the Llama block kind's mixture of
 * experts option (Mixtral; p->E > 0): transformers' MixtralSparseMoeBlock.
 *
 * From ln2 (N, C): router logits = ln2 @ Wr^T (E, C, no bias); fp32 softmax
 * over the E experts; the top k; their probabilities renormalised to sum 1
 * when p->norm_topk. Dropless by default: every token goes to its k
 * experts; the routing options (--moe-capacity-factor, --moe-z-loss-coef,
 * --moe-balance; "routing options" below) add a capacity, the router
 * z-loss and the expert bias. The N*k slots are permuted into expert
 * groups, the dropped ones after them (kernels' moe_route_fwd /
 * moe_permute_fwd), each expert's SwiGLU MLP runs as one GEMM per weight
 * over its group (an empty group runs nothing), and the rows come back
 * weighted (moe_combine_fwd). The expert grouping is read back to the host
 * (2E+1 offsets a layer) to size the GEMMs; under the counting backend
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
 * received rows are held for the worst case (sl_llama_moe_rows: every token
 * of every EP rank choosing this rank's experts, EP N k rows; with a
 * capacity, E cap).
 *
 * Tensors after ln2: block_sparse_moe.gate.weight (E, C) (the block unit),
 * then the layer's experts unit (a companion, unit L + 2 + l): for each
 * expert e experts.e.w1 (I, C), w3 (I, C), w2 (C, I): w1|w3 is the packed
 * gate|up of the dense MLP. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "models/llama_internal.h"

static int64_t capacity(const llama_priv *p); /* the routing options' (below) */

/* The expert groups of layer a into p->hoffs (2E+1: then the dropped slots'
 * groups). What the host holds before the download stays under the
 * counting backend: a balanced routing, each expert's share cut at the
 * capacity. */
static void moe_groups(sl_model *m, llama_priv *p, const layer_acts *a) {
  int64_t R = p->N * p->k, E = p->E, cap = capacity(p), kept = 0;
  for (int64_t e = 0; e < E; e++) kept += R * (e + 1) / E - R * e / E < cap ? R * (e + 1) / E - R * e / E : cap;
  p->hoffs[0] = 0, p->hoffs[E] = (int32_t)kept;
  for (int64_t e = 0; e < E; e++) {
    int64_t share = R * (e + 1) / E - R * e / E, k = share < cap ? share : cap;
    p->hoffs[e + 1] = p->hoffs[e] + (int32_t)k;
    p->hoffs[E + e + 1] = p->hoffs[E + e] + (int32_t)(share - k);
  }
  m->ops->download(m->k, p->hoffs, a->offs, (size_t)(2 * p->E + 1) * sizeof(int32_t));
}

/* Expert e's slots of the layer before the capacity: kept + dropped. */
static int64_t routed(const llama_priv *p, int64_t e) {
  return p->hoffs[e + 1] - p->hoffs[e] + p->hoffs[p->E + e + 1] - p->hoffs[p->E + e];
}

static int route_init(sl_model *m, llama_priv *p); /* the routing options (below) */

/* Expert e's gate|up (up alone when relu2) then its down, (gw + 1) Ie C floats an expert. */
static const float *expert_w(const llama_priv *p, const float *wgu0, int64_t e) {
  return wgu0 + e * (p->gw + 1) * p->Ie * p->C;
}

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
  int64_t EP = m->ep_size, El = p->E / EP, *sc = p->ecnt, *rcv = sc + EP * El, *srow = rcv + EP * El, *rrow = srow + EP;
  for (int64_t i = 0; i < EP * El; i++) sc[i] = p->hoffs[i + 1] - p->hoffs[i];
  int rc = EP > 1 ? m->access.ep.counts(m->access.ep.user, sc, rcv, El) : SL_OK;
  if (EP == 1) memcpy(rcv, sc, (size_t)El * sizeof *sc);
  int64_t got = 0;
  for (int64_t q = 0; q < EP; q++) {
    srow[q] = rrow[q] = 0;
    for (int64_t j = 0; j < El; j++) srow[q] += sc[q * El + j], rrow[q] += rcv[q * El + j];
    got += rrow[q];
  }
  if (!rc && got > sl_llama_moe_rows(m, p))
    rc = sl_fail(SL_EINTERNAL, "expert parallel: %lld rows received, the buffers hold %lld", (long long)got,
                 (long long)sl_llama_moe_rows(m, p));
  return rc;
}

/* Rows to their experts' ranks (dir 1: send counts srow, receive rrow) or back (dir -1). */
static int ep_move(sl_model *m, llama_priv *p, const float *send, float *recv, int dir) {
  int64_t EP = m->ep_size, El = p->E / EP, *srow = p->ecnt + 2 * EP * El, *rrow = srow + EP;
  if (EP == 1) return SL_OK; /* the buffers alias */
  return m->access.ep.alltoallv(m->access.ep.user, send, dir > 0 ? srow : rrow, recv, dir > 0 ? rrow : srow, p->C);
}

/* Calls fn for each run of received rows of one local expert: (first row, rows, local expert). */
#define FOR_RUNS(p, EP, r0, n, j)                                                                                      \
  for (int64_t q_ = 0, r0 = 0, El_ = (p)->E / (EP); q_ < (EP); q_++)                                                   \
    for (int64_t j = 0, n; j < El_ && ((n = (p)->ecnt[(EP)*El_ + q_ * El_ + j]), 1); r0 += n, j++)                     \
      if (n > 0)

/* The local expert the j-th run of a peer's rows is for (SL_FAULT_EP_MISROUTE: the wrong one). */
static int64_t lj(const llama_priv *p, int64_t j) { return p->misroute ? p->E / p->ep - 1 - j : j; }

/* The local experts' MLPs (SwiGLU; Nemotron-H: relu^2 of up) on the received rows a->xr into a->yr. */
static void experts_fwd(sl_model *m, llama_priv *p, layer_acts *a, const float *we) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t C = p->C, I = p->Ie, G = p->gw, EP = m->ep_size, R = 0;
  FOR_RUNS(p, EP, r0, n, j)
  sl_lin_fwd(m, &p->legu, a->gu + r0 * G * I, a->xr + r0 * C, expert_w(p, we, lj(p, j)), NULL, n);
  for (int64_t q = 0; q < EP; q++) R += p->ecnt[2 * EP * (p->E / EP) + EP + q];
  if (p->relu2) o->relu2_fwd(k, a->h, a->gu, R * I);
  else o->swiglu_fwd(k, a->h, a->gu, R, I);
  FOR_RUNS(p, EP, r0, n, j)
  sl_lin_fwd(m, &p->ledown, a->yr + r0 * C, a->h + r0 * I, expert_w(p, we, lj(p, j)) + G * I * C, NULL, n);
}

/* Their backward: dyr (the outputs' gradients) into dxr; weight gradients add into ge (NULL: none, the split
 * backward's input half; its weight half runs experts_bwd_weight on the kept dyr and dgu). */
static void experts_bwd(sl_model *m, llama_priv *p, const layer_acts *a, const float *we, float *ge) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t C = p->C, I = p->Ie, G = p->gw, EP = m->ep_size, R = 0;
  for (int64_t q = 0; q < EP; q++) R += p->ecnt[2 * EP * (p->E / EP) + EP + q];
  o->zero(k, p->dh, (size_t)(R * I) * 4);
  FOR_RUNS(p, EP, r0, n, j)
  sl_lin_bwd(m, &p->ledown, p->dh + r0 * I, ge ? (float *)expert_w(p, ge, lj(p, j)) + G * I * C : NULL, NULL,
             p->dyr + r0 * C, a->h + r0 * I, expert_w(p, we, lj(p, j)) + G * I * C, n);
  o->zero(k, p->dgu, (size_t)(R * G * I) * 4);
  if (p->relu2) o->relu2_bwd(k, p->dgu, p->dh, a->gu, R * I);
  else o->swiglu_bwd(k, p->dgu, p->dh, a->gu, R, I);
  o->zero(k, p->dxr, (size_t)(R * C) * 4);
  FOR_RUNS(p, EP, r0, n, j)
  sl_lin_bwd(m, &p->legu, p->dxr + r0 * C, ge ? (float *)expert_w(p, ge, lj(p, j)) : NULL, NULL, p->dgu + r0 * G * I,
             a->xr + r0 * C, expert_w(p, we, lj(p, j)), n);
}

/* The weight half of experts_bwd: the same dW calls, in the same order, from the input half's dyr and dgu. */
static void experts_bwd_weight(sl_model *m, llama_priv *p, const layer_acts *a, const float *we, float *ge,
                               const float *dyr, const float *dgu) {
  int64_t C = p->C, I = p->Ie, G = p->gw, EP = m->ep_size;
  FOR_RUNS(p, EP, r0, n, j)
  sl_lin_bwd(m, &p->ledown, NULL, (float *)expert_w(p, ge, lj(p, j)) + G * I * C, NULL, dyr + r0 * C,
             a->h + r0 * I, expert_w(p, we, lj(p, j)) + G * I * C, n);
  FOR_RUNS(p, EP, r0, n, j)
  sl_lin_bwd(m, &p->legu, NULL, (float *)expert_w(p, ge, lj(p, j)), NULL, dgu + r0 * G * I, a->xr + r0 * C,
             expert_w(p, we, lj(p, j)), n);
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
  int rc = route_init(m, p);
  if (rc) return rc;
  p->aux_coef = c->output_router_logits && c->moe_balance == SL_MOE_BALANCE_AUX ? (float)c->router_aux_loss_coef : 0.0f;
  p->ep = m->ep_size;
  p->misroute = m->ep_size > 1 && sl_env_bool("SL_FAULT_EP_MISROUTE");
  if (!p->aux_coef || !m->ops) return SL_OK;
  if (!(p->acnt = calloc((size_t)p->E, sizeof *p->acnt)) || !(p->aprob = calloc((size_t)p->E, sizeof *p->aprob)) ||
      !(p->hprob = calloc((size_t)(p->N * p->E), sizeof *p->hprob)))
    return sl_fail(SL_ENOMEM, "out of memory");
  return (p->gp = m->ops->alloc(m->k, (size_t)p->E * 4)) ? SL_OK : SL_ENOMEM;
}

static void aux_accumulate(sl_model *m, llama_priv *p, const layer_acts *a) {
  for (int64_t e = 0; e < p->E; e++) p->acnt[e] += routed(p, e); /* f_e: the selection before the capacity */
  m->ops->download(m->k, p->hprob, a->probs, (size_t)(p->N * p->E) * 4);
  for (int64_t t = 0; t < p->N; t++)
    for (int64_t e = 0; e < p->E; e++) p->aprob[e] += p->hprob[t * p->E + e];
}

/* ---- routing options ------------------------------------------------------
 * --moe-capacity-factor F (Megatron-Core's apply_router_token_dropping,
 * drop policy "probs", no padding): each expert keeps at most cap =
 * ceil(N*k / E * F) of the micro-batch's slots, those of largest routing
 * weight (a tie: the earlier token); a dropped slot's weight becomes 0, the
 * kept weights are not renormalised again, the token keeps its residual
 * and its other choices. --moe-z-loss-coef c (Megatron-Core's z_loss_func,
 * attached to each layer's logits): each layer adds c * mean_t lse_t^2 to
 * the loss (lse_t = logsumexp of token t's router logits), so the loss
 * gets c times the sum over the layers; metrics report the layers' mean
 * of mean_t lse^2 without c (as Megatron's tracker logs z_loss). The
 * micro-batch adds c * N * that sum to the token-loss sum, like the aux
 * loss; its gradient is 2 c lse_t p_te * loss_scale on logit (t, e).
 * --moe-balance bias (torchtitan's expert_bias, DeepSeek-V3): a bias (L, E)
 * added to the probabilities for the top-k selection only; after each step
 * bias += r * sign(mean load - load) minus its mean over the experts, from
 * the step's tokens per expert over every rank. */
struct sl_moe_route {
  int64_t cap;         /* slots an expert keeps of a micro-batch (0: dropless) */
  float zcoef;         /* the z-loss's coefficient (0: none) */
  float *hbias, *bias; /* (L, E) host / backend: the expert bias (--moe-balance bias or the weight files'; else NULL) */
  float *hlse;         /* (N) host: a layer's logsumexp, read back for the z-loss */
  double zmb;          /* the micro-batch's sum over its layers of mean_t lse^2 */
  double st[4];        /* since sl_model_moe_stats: aux sum, aux micro-batches, z sum, z (micro-batch, layer)s */
  double *dropped;     /* (L) slots dropped since sl_model_moe_stats */
};

/* Slots an expert keeps of a micro-batch: the capacity, or all N k (dropless). */
static int64_t capacity(const llama_priv *p) { return p->rt && p->rt->cap ? p->rt->cap : p->N * p->k; }

int64_t sl_llama_moe_rows(const sl_model *m, const llama_priv *p) {
  int64_t R = p->N * p->k, worst = m->ep_size * R;
  if (m->ep_size == 1) return R;
  int64_t capped = p->rt && p->rt->cap ? p->E * p->rt->cap : worst; /* each EP rank sends an expert <= cap rows */
  return capped < worst ? capped : worst;
}

static int route_init(sl_model *m, llama_priv *p) {
  const sl_model_config *c = &m->cfg;
  int64_t L = sl_dec(m)->L, E = p->E;
  if (!m->ops) return SL_OK;
  struct sl_moe_route *rt = p->rt = calloc(1, sizeof *rt);
  if (!rt || !(rt->dropped = calloc((size_t)L, sizeof *rt->dropped))) return sl_fail(SL_ENOMEM, "out of memory");
  if (c->moe_capacity_factor > 0) { /* Megatron's get_capacity(num_tokens = N*k, E, F); N or more drops nothing */
    double cap = ceil(((double)(p->N * p->k) / (double)E) * c->moe_capacity_factor);
    rt->cap = cap < (double)p->N ? (int64_t)cap : p->N;
  }
  rt->zcoef = (float)c->moe_z_loss_coef;
  if (rt->zcoef && !(rt->hlse = calloc((size_t)p->N, sizeof *rt->hlse))) return sl_fail(SL_ENOMEM, "out of memory");
  if (c->moe_balance != SL_MOE_BALANCE_BIAS && !c->moe_sigmoid) return SL_OK; /* Nemotron-H: the model's own */
  if (!(rt->hbias = calloc((size_t)(L * E), sizeof *rt->hbias)) ||
      !(rt->bias = m->ops->alloc(m->k, (size_t)(L * E) * sizeof(float))))
    return sl_fail(SL_ENOMEM, "out of memory");
  m->ops->upload(m->k, rt->bias, rt->hbias, (size_t)(L * E) * sizeof(float));
  return SL_OK;
}

void sl_llama_moe_free(sl_model *m, llama_priv *p) {
  struct sl_moe_route *rt = p->rt;
  if (!rt) return;
  if (rt->bias) m->ops->free(m->k, rt->bias);
  free(rt->hbias), free(rt->hlse), free(rt->dropped), free(rt);
  p->rt = NULL;
}

static void route_fwd(sl_model *m, llama_priv *p, int l, layer_acts *a) {
  const struct sl_moe_route *rt = p->rt;
  m->ops->moe_route_fwd(m->k, a->probs, a->sel, a->wts, a->offs, a->perm, a->pos, rt && rt->zcoef ? a->zlse : NULL,
                        a->logits, rt && rt->bias ? rt->bias + l * p->E : NULL, p->N, p->E, p->k, p->moe_mode,
                        p->rscale, rt ? rt->cap : 0);
}

/* After the grouping: the dropped rows of yp are zeroed (the combine weights
 * them by 0, their backward reads them); in a training forward (count: not a
 * recomputation, not an evaluation's m->fwd_only) the load, the drops, the
 * aux loss's sums and the z-loss of layer l. */
static void route_count(sl_model *m, llama_priv *p, int l, layer_acts *a, int count) {
  struct sl_moe_route *rt = p->rt;
  int64_t E = p->E, R = p->N * p->k, kept = p->hoffs[E];
  if (kept < R) m->ops->zero(m->k, a->yp + kept * p->C, (size_t)((R - kept) * p->C) * sizeof(float));
  if (!count) return;
  for (int64_t e = 0; e < E; e++) p->load[l * E + e] += routed(p, e);
  if (p->acnt) aux_accumulate(m, p, a);
  if (!rt) return;
  rt->dropped[l] += (double)(R - kept);
  if (!rt->zcoef) return;
  m->ops->download(m->k, rt->hlse, a->zlse, (size_t)p->N * sizeof(float));
  double z = 0;
  for (int64_t t = 0; t < p->N; t++) z += (double)rt->hlse[t] * (double)rt->hlse[t];
  rt->zmb += z / (double)p->N;
  rt->st[2] += z / (double)p->N, rt->st[3] += 1;
}

static int route_loss_term(sl_model *m, llama_priv *p) {
  struct sl_moe_route *rt = p->rt;
  if (!rt || !rt->zcoef) return SL_OK;
  sl_model_loss_add_value(m, (double)rt->zcoef * rt->zmb * (double)p->N);
  rt->zmb = 0;
  return SL_OK;
}

int64_t sl_llama_moe_stats(sl_model *m, double *out) {
  llama_priv *p = sl_dec(m)->blk;
  struct sl_moe_route *rt = p->rt;
  int64_t L = sl_dec(m)->L;
  if (!p->E) return 0;
  for (int64_t i = 0; i < L; i++) {
    if (out) out[i] = rt ? rt->dropped[i] : 0;
    if (rt) rt->dropped[i] = 0;
  }
  for (int i = 0; i < 4; i++) {
    if (out) out[L + i] = rt ? rt->st[i] : 0;
    if (rt) rt->st[i] = 0;
  }
  return L + 4;
}

float *sl_llama_moe_bias(sl_model *m, int64_t *n) {
  const llama_priv *p = sl_dec(m)->blk;
  *n = p->E && p->rt && p->rt->hbias ? sl_dec(m)->L * p->E : 0;
  return *n ? p->rt->hbias : NULL;
}

void sl_model_moe_bias_name(const sl_model_config *c, int64_t l, char *buf, size_t cap) {
  if (c->arch == SL_ARCH_NEMOTRON_H) {
    snprintf(buf, cap, "backbone.layers.%lld.mixer.gate.e_score_correction_bias", (long long)l);
    return;
  }
  if (c->moe_fused) { /* Granite 4.0-H: decoder layer l is HF layer l / 2's MLP half */
    snprintf(buf, cap, "model.layers.%lld.block_sparse_moe.router.e_score_correction_bias",
             (long long)(l / (c->layer_div > 1 ? c->layer_div : 1)));
    return;
  }
  snprintf(buf, cap, "model.layers.%lld.%s.gate.e_score_correction_bias", (long long)l,
           c->arch == SL_ARCH_QWEN3_MOE ? "mlp" : "block_sparse_moe");
}

int sl_model_moe_bias_read(const sl_model_config *c, const sl_st_set *w, float *out, int *found) {
  int64_t L = c->num_hidden_layers, E = c->moe_experts, have = 0, nl = sl_cfg_moe_layers(c);
  char nm[SL_TENSOR_NAME_MAX];
  *found = 0;
  if (!E || !w) return SL_OK;
  for (int64_t l = 0; l < L; l++) {
    sl_model_moe_bias_name(c, l, nm, sizeof nm);
    have += sl_cfg_moe_layer(c, l) && sl_st_find(w, nm) != NULL;
  }
  if (!have) return SL_OK;
  if (have < nl)
    return sl_fail(SL_EINPUT,
                   "%s: the weight files hold the expert bias (e_score_correction_bias) of %lld of %lld MoE layers",
                   sl_st_set_dir(w), (long long)have, (long long)nl);
  for (int64_t l = 0; l < L; l++) {
    if (!sl_cfg_moe_layer(c, l)) continue;
    sl_model_moe_bias_name(c, l, nm, sizeof nm);
    int rc = sl_st_read_f32(w, nm, 1, &E, out + l * E);
    if (rc) return rc;
    for (int64_t e = 0; e < E; e++)
      if (!isfinite(out[l * E + e]))
        return sl_fail(SL_EINPUT, "%s: tensor '%s' has a non-finite value at element %lld", sl_st_set_dir(w), nm,
                       (long long)e);
  }
  *found = 1;
  return SL_OK;
}

/* The model's expert bias := b (sl_model_moe_bias_set): allocated when the run has none yet. */
int sl_llama_moe_bias_set(sl_model *m, const float *b) {
  llama_priv *p = sl_dec(m)->blk;
  struct sl_moe_route *rt = p->rt;
  int64_t n = sl_dec(m)->L * p->E;
  if (!p->E || !rt) return SL_OK; /* no compute (specs only): nothing routes */
  if (!rt->hbias && (!(rt->hbias = calloc((size_t)n, sizeof *rt->hbias)) ||
                     !(rt->bias = m->ops->alloc(m->k, (size_t)n * sizeof(float)))))
    return sl_fail(SL_ENOMEM, "out of memory");
  memcpy(rt->hbias, b, (size_t)n * sizeof *b);
  m->ops->upload(m->k, rt->bias, rt->hbias, (size_t)n * sizeof(float));
  return SL_OK;
}

/* torchtitan's _update_expert_bias in fp32: delta = r * sign(mean - load), minus its mean. */
int sl_llama_moe_bias_step(sl_model *m, const int64_t *load) {
  llama_priv *p = sl_dec(m)->blk;
  struct sl_moe_route *rt = p->rt;
  int64_t L = sl_dec(m)->L, E = p->E;
  if (!p->E || !rt || !rt->hbias) return SL_OK;
  float rate = (float)m->cfg.moe_bias_rate, d[1024]; /* E <= 1024 (the config checks) */
  for (int64_t l = 0; load && l < L; l++) {
    float mean = 0, dm = 0;
    for (int64_t e = 0; e < E; e++) mean += (float)load[l * E + e];
    mean /= (float)E;
    for (int64_t e = 0; e < E; e++) {
      float x = mean - (float)load[l * E + e];
      dm += d[e] = rate * (float)((x > 0) - (x < 0));
    }
    dm /= (float)E;
    for (int64_t e = 0; e < E; e++) rt->hbias[l * E + e] += d[e] - dm;
  }
  m->ops->upload(m->k, rt->bias, rt->hbias, (size_t)(L * E) * sizeof(float));
  return SL_OK;
}

/* The router losses, training only: an evaluation's loss is the token cross-entropy (route_count counted nothing). */
int sl_llama_moe_loss_term(sl_model *m) {
  llama_priv *p = sl_dec(m)->blk;
  if (!p->E || m->fwd_only) return SL_OK;
  if (!p->aux_coef || !p->acnt) return route_loss_term(m, p);
  double nl = (double)sl_cfg_moe_layers(&m->cfg), rows = nl * (double)p->N, aux = 0; /* the sparse layers' rows */
  float g[1024]; /* E <= 1024 (the config checks) */
  for (int64_t e = 0; e < p->E; e++) {
    aux += (p->acnt[e] / rows) * (p->aprob[e] / rows);
    g[e] = (float)((double)p->aux_coef * (double)p->E * (p->acnt[e] / rows) / nl * (double)m->loss_scale);
    p->acnt[e] = p->aprob[e] = 0;
  }
  sl_model_loss_add_value(m, (double)p->aux_coef * (double)p->E * aux * (double)p->N);
  m->ops->upload(m->k, p->gp, g, (size_t)p->E * 4);
  if (p->rt) p->rt->st[0] += (double)p->E * aux, p->rt->st[1] += 1;
  return route_loss_term(m, p);
}

/* Block l's sparse MLP from a->ln2; out (N, C) = the combined experts'
 * output unless out is NULL (recomputation: the kept tensors only, the
 * routing not counted again in p->load). */
int sl_llama_moe_fwd(sl_model *m, llama_priv *p, int l, layer_acts *a, const blockw *w, float *out) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C;
  sl_lin_fwd(m, &p->lrouter, a->logits, a->ln2, w->wr, NULL, N);
  route_fwd(m, p, l, a);
  o->moe_permute_fwd(k, a->xp, a->ln2, a->pos, N, p->k, C);
  moe_groups(m, p, a);
  route_count(m, p, l, a, out != NULL && !m->fwd_only);
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

/* The split backward's stash of a MoE layer (models/llama_split.c): the received rows' output gradients dyr
 * (Rr, C), their gate|up gradients dgu (Rr, gw Ie), the router logits' gradient (N, E), and the rows each
 * (EP peer, local expert) sent (EP El, as floats: exact below 2^24), Rr = sl_llama_moe_rows. */
int64_t sl_llama_moe_stash_numel(const sl_model *m, const llama_priv *p) {
  int64_t Rr = sl_llama_moe_rows(m, p);
  return Rr * p->C + Rr * p->gw * p->Ie + p->N * p->E + p->E;
}

typedef struct {
  float *dyr, *dgu, *dlogits, *cnt;
} moe_stash;

static moe_stash moe_stash_views(const sl_model *m, const llama_priv *p, const float *s) {
  int64_t Rr = sl_llama_moe_rows(m, p);
  moe_stash v = {.dyr = (float *)s};
  v.dgu = v.dyr + Rr * p->C;
  v.dlogits = v.dgu + Rr * p->gw * p->Ie;
  v.cnt = v.dlogits + p->N * p->E;
  return v;
}

/* dln (N, C) = the gradient of ln2 given dout (N, C), the gradient of the
 * sparse MLP's output; the weight gradients add into g, or (stash not NULL:
 * the split backward's input half) are left to sl_llama_moe_bwd_weight with
 * what they need kept in stash. */
static int moe_bwd(sl_model *m, llama_priv *p, int l, const layer_acts *a, const blockw *w, const blockw *g,
                   const float *dout, float *dln, float *stash) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C, E = p->E, R = N * p->k;
  o->zero(k, p->dyp, (size_t)(R * C) * 4);
  o->zero(k, p->dwts, (size_t)R * 4);
  o->moe_combine_bwd(k, p->dyp, p->dwts, dout, a->yp, a->wts, a->pos, N, p->k, C);
  int rc = sl_dec_tp_sum(m, p->dwts, R); /* under TP yp is each rank's partial sum: so is dwts */
  if (rc) return rc;
  moe_groups(m, p, a);
  const float *we;
  float *ge = NULL;
  rc = experts_of(m, l, &we, stash ? NULL : &ge);
  if (!rc) rc = ep_plan(m, p); /* the counts again: the forward's are not kept per layer */
  if (!rc) rc = ep_move(m, p, p->dyp, p->dyr, 1);
  if (rc) return rc;
  o->zero(k, p->dxp, (size_t)(R * C) * 4); /* the dropped slots' rows (after offs[E]) stay zero */
  experts_bwd(m, p, a, we, stash ? NULL : ge);
  if ((rc = ep_move(m, p, p->dxr, p->dxp, -1))) return rc;
  o->zero(k, dln, (size_t)(N * C) * 4);
  o->moe_permute_bwd(k, dln, p->dxp, a->pos, N, p->k, C);
  o->zero(k, p->dlogits, (size_t)(N * E) * 4);
  const struct sl_moe_route *rt = p->rt;
  o->moe_route_bwd(k, p->dlogits, p->dwts, a->probs, a->sel, a->wts, p->aux_coef ? p->gp : NULL,
                   rt && rt->zcoef ? a->zlse : NULL, rt ? 2.0f * rt->zcoef * m->loss_scale : 0.0f, N, E, p->k,
                   p->moe_mode, p->rscale);
  /* the router is replicated: every TP rank has its whole gradient, and one adds its part of dln before the sum */
  sl_lin_bwd(m, &p->lrouter, dln, stash ? NULL : (float *)g->wr, NULL, p->dlogits, a->ln2, w->wr, N);
  if (!stash) return SL_OK;
  moe_stash v = moe_stash_views(m, p, stash);
  int64_t Rr = sl_llama_moe_rows(m, p), EP = m->ep_size, El = E / EP;
  o->copy(k, v.dyr, p->dyr, (size_t)(Rr * C) * 4);
  o->copy(k, v.dgu, p->dgu, (size_t)(Rr * p->gw * p->Ie) * 4);
  o->copy(k, v.dlogits, p->dlogits, (size_t)(N * E) * 4);
  float cnt[1024]; /* E <= 1024 (the config checks) */
  for (int64_t i = 0; i < EP * El; i++) cnt[i] = (float)p->ecnt[EP * El + i];
  o->upload(k, v.cnt, cnt, (size_t)(EP * El) * 4);
  return SL_OK;
}

int sl_llama_moe_bwd(sl_model *m, llama_priv *p, int l, const layer_acts *a, const blockw *w, const blockw *g,
                     const float *dout, float *dln) {
  return moe_bwd(m, p, l, a, w, g, dout, dln, NULL);
}

int sl_llama_moe_bwd_input(sl_model *m, llama_priv *p, int l, const layer_acts *a, const blockw *w,
                           const float *dout, float *dln, float *stash) {
  return moe_bwd(m, p, l, a, w, NULL, dout, dln, stash);
}

/* The weight half: the experts' and the router's weight gradients from the stash (the input half's exchange
 * plan read back: the rows each peer sent each local expert). */
int sl_llama_moe_bwd_weight(sl_model *m, llama_priv *p, int l, const layer_acts *a, const blockw *w, const blockw *g,
                            const float *stash) {
  moe_stash v = moe_stash_views(m, p, stash);
  int64_t EP = m->ep_size, El = p->E / EP, *rcv = p->ecnt + EP * El, *rrow = p->ecnt + 2 * EP * El + EP;
  float cnt[1024];
  m->ops->download(m->k, cnt, v.cnt, (size_t)(EP * El) * 4);
  for (int64_t q = 0; q < EP; q++) {
    rrow[q] = 0;
    for (int64_t j = 0; j < El; j++) rrow[q] += rcv[q * El + j] = (int64_t)cnt[q * El + j];
  }
  const float *we;
  float *ge;
  int rc = experts_of(m, l, &we, &ge);
  if (rc) return rc;
  experts_bwd_weight(m, p, a, we, ge, v.dyr, v.dgu);
  sl_lin_bwd(m, &p->lrouter, NULL, (float *)g->wr, NULL, v.dlogits, a->ln2, w->wr, p->N);
  return SL_OK;
}

/* A layer's MoE buffers (after the dense ones: gu and h are sized for N*k rows by the caller). */
int sl_llama_moe_alloc_layer(sl_model *m, llama_priv *p, layer_acts *a) {
  int64_t N = p->N, E = p->E, R = N * p->k;
  if (!(a->logits = sl_model_buf_bf16(m, N * E, SL_ARENA_ACTS)) ||
      !(a->probs = sl_model_buf(m, N * E, SL_ARENA_ACTS)) || !(a->wts = sl_model_buf(m, R, SL_ARENA_ACTS)) ||
      !(a->sel = (int32_t *)sl_model_buf(m, R, SL_ARENA_ACTS)) ||
      !(a->perm = (int32_t *)sl_model_buf(m, R, SL_ARENA_ACTS)) ||
      !(a->pos = (int32_t *)sl_model_buf(m, R, SL_ARENA_ACTS)) ||
      !(a->offs = (int32_t *)sl_model_buf(m, 2 * E + 1, SL_ARENA_ACTS)) ||
      !(a->xp = sl_model_buf_bf16(m, R * p->C, SL_ARENA_ACTS)) ||
      !(a->yp = sl_model_buf_bf16(m, R * p->C, SL_ARENA_ACTS)))
    return SL_ENOMEM;
  a->xr = a->xp, a->yr = a->yp;
  int64_t Rr = sl_llama_moe_rows(m, p);
  if (m->ep_size > 1 && (!(a->xr = sl_model_buf_bf16(m, Rr * p->C, SL_ARENA_ACTS)) ||
                         !(a->yr = sl_model_buf_bf16(m, Rr * p->C, SL_ARENA_ACTS))))
    return SL_ENOMEM;
  if (p->rt && p->rt->zcoef && !(a->zlse = sl_model_buf(m, N, SL_ARENA_ACTS))) return SL_ENOMEM;
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
  if (m->ep_size > 1 && (!(p->dyr = sl_model_buf(m, sl_llama_moe_rows(m, p) * p->C, SL_ARENA_WORKSPACE)) ||
                         !(p->dxr = sl_model_buf(m, sl_llama_moe_rows(m, p) * p->C, SL_ARENA_WORKSPACE))))
    return SL_ENOMEM;
  return SL_OK;
}

/* Layer l's router and experts (after post_attention_layernorm; Nemotron-H: after the block's norm). */
int sl_llama_moe_spec(sl_model *m, sl_unit_spec *b, int64_t l, float std) {
  const llama_priv *p = sl_dec(m)->blk;
  int64_t C = p->C, I = m->cfg.moe_intermediate, T = m->tp_size, G = p->gw;
  char nm[SL_TENSOR_NAME_MAX];
  int rc;
  /* Mixtral: model.layers.l.block_sparse_moe.{gate, experts.e.w1|w3|w2}; Qwen3-MoE: model.layers.l.mlp.{gate,
   * experts.e.gate_proj|up_proj|down_proj}; Nemotron-H: backbone.layers.l.mixer.{gate, experts.e.up_proj|down_proj} */
  int fam = m->cfg.arch == SL_ARCH_NEMOTRON_H ? 2 : m->cfg.arch == SL_ARCH_QWEN3_MOE;
  static const char *const names[3][3] = {
      {"w1", "w3", "w2"}, {"gate_proj", "up_proj", "down_proj"}, {"up_proj", "down_proj", NULL}};
  static const char *const blks[3] = {"model.layers.%lld.block_sparse_moe", "model.layers.%lld.mlp",
                                      "backbone.layers.%lld.mixer"};
  char blk[96];
  /* Granite 4.0-H (HF layer l / 2): model.layers.i.block_sparse_moe.{router.layer, input_linear, output_linear} */
  snprintf(blk, sizeof blk, blks[fam], (long long)(l / p->div));
  if (b->companion_of < 0) {
    snprintf(nm, sizeof nm, "%s.%s.weight", blk, m->cfg.moe_fused ? "router.layer" : "gate");
    return sl_unit_add_split(m, b, nm, 2, p->E, C, 1, SL_INIT_NORMAL, std, SL_SPLIT_NONE, 1);
  }
  for (int64_t e = 0; e < p->E && m->cfg.moe_fused; e++) { /* slab e of input_linear (gate | up) and output_linear */
    snprintf(nm, sizeof nm, "%s.input_linear.weight[%lld]", blk, (long long)e);
    if ((rc = sl_unit_add_stacked(m, b, nm, 2, 2 * I, C, 0, 1, SL_INIT_NORMAL, std, 2))) return rc;
    sl_unit_slab(b, e, p->E);
    snprintf(nm, sizeof nm, "%s.output_linear.weight[%lld]", blk, (long long)e);
    if ((rc = sl_unit_add_split(m, b, nm, 2, C, I, 1, SL_INIT_NORMAL, std, SL_SPLIT_ROW, T))) return rc;
    sl_unit_slab(b, e, p->E);
  }
  for (int64_t e = 0; e < p->E && !m->cfg.moe_fused; e++)
    for (int i = 0; i < G + 1; i++) { /* gate|up rows column-split, down row-split */
      int down = i == G;
      snprintf(nm, sizeof nm, "%s.experts.%lld.%s.weight", blk, (long long)e, names[fam][i]);
      if ((rc = sl_unit_add_split(m, b, nm, 2, down ? C : I, down ? I : C, 1, SL_INIT_NORMAL, std,
                                  down ? SL_SPLIT_ROW : SL_SPLIT_COL, T)))
        return rc;
    }
  /* this rank's experts: a contiguous run of the unit (expert e at e * (G + 1) I C) */
  int64_t per = b->numel / m->ep_size;
  b->hold_lo = m->ep_rank * per;
  b->hold_n = per;
  b->expert = 1;
  return SL_OK;
}

int sl_llama_moe_has_experts(const sl_model *m, int64_t l) {
  return llama_moe_at((const llama_priv *)sl_dec(m)->blk, l);
}

/* Layer l's experts unit (the companion of its block): every expert's tensors, this rank holding its own. */
int sl_llama_moe_experts_spec(sl_model *m, sl_unit_spec *u, int64_t l) {
  snprintf(u->kind, sizeof u->kind, "experts");
  return sl_llama_moe_spec(m, u, l, sl_dec(m)->std);
}
