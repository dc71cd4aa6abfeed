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
 * Tensors after ln2: block_sparse_moe.gate.weight (E, C), then for each
 * expert e experts.e.w1 (I, C), w3 (I, C), w2 (C, I): w1|w3 is the packed
 * gate|up of the dense MLP. */
#include <stdio.h>
#include <stdlib.h>

#include "base/base.h"
#include "models/llama_internal.h"

/* The expert groups of layer a into p->hoffs. */
static void moe_groups(sl_model *m, llama_priv *p, const layer_acts *a) {
  for (int64_t e = 0; e <= p->E; e++) p->hoffs[e] = (int32_t)(p->N * p->k * e / p->E);
  m->ops->download(m->k, p->hoffs, a->offs, (size_t)(p->E + 1) * sizeof(int32_t));
}

static const float *expert_w(const llama_priv *p, const float *wgu0, int64_t e) { return wgu0 + e * 3 * p->I * p->C; }

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
  int64_t N = p->N, C = p->C, I = p->I, E = p->E;
  o->linear_fwd(k, a->logits, a->ln2, w->wr, NULL, N, C, E);
  o->moe_route_fwd(k, a->probs, a->sel, a->wts, a->offs, a->perm, a->pos, a->logits, N, E, p->k, p->norm_topk);
  o->moe_permute_fwd(k, a->xp, a->ln2, a->pos, N, p->k, C);
  moe_groups(m, p, a);
  for (int64_t e = 0; out && e < E; e++) p->load[l * E + e] += p->hoffs[e + 1] - p->hoffs[e];
  if (out && p->acnt) aux_accumulate(m, p, a);
  for (int64_t e = 0; e < E; e++) {
    int64_t r0 = p->hoffs[e], n = p->hoffs[e + 1] - r0;
    if (n > 0) o->linear_fwd(k, a->gu + r0 * 2 * I, a->xp + r0 * C, expert_w(p, w->wgu, e), NULL, n, C, 2 * I);
  }
  o->swiglu_fwd(k, a->h, a->gu, N * p->k, I);
  for (int64_t e = 0; e < E; e++) {
    int64_t r0 = p->hoffs[e], n = p->hoffs[e + 1] - r0;
    if (n > 0) o->linear_fwd(k, a->yp + r0 * C, a->h + r0 * I, expert_w(p, w->wgu, e) + 2 * I * C, NULL, n, I, C);
  }
  if (out) o->moe_combine_fwd(k, out, a->yp, a->wts, a->pos, N, p->k, C);
  return SL_OK;
}

/* dln (N, C) = the gradient of ln2 given dout (N, C), the gradient of the
 * sparse MLP's output; the weight gradients add into g. */
int sl_llama_moe_bwd(sl_model *m, llama_priv *p, const layer_acts *a, const blockw *w, const blockw *g,
                     const float *dout, float *dln) {
  const sl_ops *o = m->ops;
  sl_kctx *k = m->k;
  int64_t N = p->N, C = p->C, I = p->I, E = p->E, R = N * p->k;
  o->zero(k, p->dyp, (size_t)(R * C) * 4);
  o->zero(k, p->dwts, (size_t)R * 4);
  o->moe_combine_bwd(k, p->dyp, p->dwts, dout, a->yp, a->wts, a->pos, N, p->k, C);
  moe_groups(m, p, a);
  o->zero(k, p->dh, (size_t)(R * I) * 4);
  for (int64_t e = 0; e < E; e++) {
    int64_t r0 = p->hoffs[e], n = p->hoffs[e + 1] - r0;
    if (n > 0)
      o->linear_bwd(k, p->dh + r0 * I, (float *)expert_w(p, g->wgu, e) + 2 * I * C, NULL, p->dyp + r0 * C,
                    a->h + r0 * I, expert_w(p, w->wgu, e) + 2 * I * C, n, I, C);
  }
  o->zero(k, p->dgu, (size_t)(R * 2 * I) * 4);
  o->swiglu_bwd(k, p->dgu, p->dh, a->gu, R, I);
  o->zero(k, p->dxp, (size_t)(R * C) * 4);
  for (int64_t e = 0; e < E; e++) {
    int64_t r0 = p->hoffs[e], n = p->hoffs[e + 1] - r0;
    if (n > 0)
      o->linear_bwd(k, p->dxp + r0 * C, (float *)expert_w(p, g->wgu, e), NULL, p->dgu + r0 * 2 * I, a->xp + r0 * C,
                    expert_w(p, w->wgu, e), n, C, 2 * I);
  }
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
  return SL_OK;
}

int sl_llama_moe_alloc_scratch(sl_model *m, llama_priv *p) {
  int64_t R = p->N * p->k;
  if (!(p->dyp = sl_model_buf(m, R * p->C, SL_ARENA_WORKSPACE)) ||
      !(p->dxp = sl_model_buf(m, R * p->C, SL_ARENA_WORKSPACE)) ||
      !(p->dwts = sl_model_buf(m, R, SL_ARENA_WORKSPACE)) ||
      !(p->dlogits = sl_model_buf(m, p->N * p->E, SL_ARENA_WORKSPACE)))
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
  snprintf(nm, sizeof nm, "model.layers.%lld.%s.gate.weight", (long long)l, blk);
  if ((rc = sl_unit_add_split(m, b, nm, 2, p->E, C, 1, SL_INIT_NORMAL, std, SL_SPLIT_NONE, 1))) return rc;
  for (int64_t e = 0; e < p->E; e++)
    for (int i = 0; i < 3; i++) {
      snprintf(nm, sizeof nm, "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)l, blk, (long long)e,
               names[q3][i]);
      if ((rc = sl_unit_add_split(m, b, nm, 2, i < 2 ? I : C, i < 2 ? C : I, 1, SL_INIT_NORMAL, std, SL_SPLIT_NONE, 1)))
        return rc;
    }
  return SL_OK;
}
