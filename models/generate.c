/* models/generate.c — single-process CPU decoding (see models/generate.h).
 *
 * Owns the per-token forward of each architecture written against the
 * model's unit specs (tensor names, shapes and offsets in each unit's flat
 * buffer, as the trainer and converter see them), the caches (Llama/Mistral:
 * K and V of every past position per layer; Mamba and Mamba-2: the last
 * conv_kernel inputs of the causal conv and the (D, S) SSM state per layer) and the
 * sampler. Plain loops, accumulations in double: inference of small models
 * and a test oracle's twin, not a serving engine.
 */
#define _GNU_SOURCE
#include "models/generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "formats/hfconfig.h"
#include "formats/safetensors.h"
#include "models/model.h"
#include "models/rope.h"

struct sl_gen {
  sl_model_config c;
  sl_model *m;  /* specs only */
  float **flat; /* (nunits) full fp32 parameters of each unit */
  int64_t L, C, V;
  /* Llama / Mistral */
  int64_t nh, nkv, hd, cap; /* cap: positions the K/V cache holds */
  float **kc, **vc;         /* (L) x (cap, nkv*hd) */
  float *inv_freq;          /* (hd/2) */
  float *inv_freq_local;    /* (hd/2) Gemma 3's sliding layers (rope_local_base_freq), else NULL */
  float *ebias;             /* (L, E) Nemotron-H's expert bias (e_score_correction_bias; zeros when absent) */
  /* Mamba */
  int64_t D, S, R, K;
  int64_t Cw;          /* Mamba-2: the conv's channels, x | B | C (Mamba: D) */
  float **conv, **ssm; /* (L) x (Cw, K) last K conv inputs; (D, S) state */
  /* scratch */
  float *x, *h, *a, *b, *c2, *q, *att, *logits, *probs;
  int64_t *order;
  int64_t pos; /* tokens fed so far */
};

static const float *tens(const sl_gen *g, int u, const char *suffix) {
  const sl_unit_spec *us = &g->m->units[u];
  size_t ls = strlen(suffix);
  for (int i = 0; i < us->ntensors; i++) {
    size_t ln = strlen(us->t[i].name);
    if (ln >= ls && !strcmp(us->t[i].name + ln - ls, suffix)) return g->flat[u] + us->t[i].offset;
  }
  return NULL;
}

/* y (out) = W (out, in) . x (in) [+ bias] */
static void matvec(float *y, const float *W, const float *x, int64_t out, int64_t in, const float *bias) {
  for (int64_t o = 0; o < out; o++) {
    const float *w = W + o * in;
    double s = 0;
    for (int64_t i = 0; i < in; i++) s += (double)w[i] * (double)x[i];
    y[o] = (float)s + (bias ? bias[o] : 0.0f);
  }
}

/* y = x * rsqrt(mean(x^2) + eps) * w, or * (1 + w) (Gemma: plus_one) */
static void rmsnorm_p(float *y, const float *x, const float *w, int64_t n, double eps, int plus_one) {
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
  float r = (float)(1.0 / sqrt(ss / (double)n + eps));
  for (int64_t i = 0; i < n; i++) y[i] = w ? (plus_one ? 1.0f + w[i] : w[i]) * (x[i] * r) : x[i] * r; /* w NULL: weightless */
}
static void rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps) { rmsnorm_p(y, x, w, n, eps, 0); }

static float silu(float v) { return v / (1.0f + expf(-v)); }
/* PyTorch's gelu(approximate="tanh") */
static float gelu_tanh(float v) { return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))); }
static float softcap(float v, double cap) { return cap > 0 ? (float)(cap * tanh(v / cap)) : v; }

static int recurrent(const sl_gen *g) { return g->c.arch == SL_ARCH_MAMBA || g->c.arch == SL_ARCH_MAMBA2; }
/* A model of attention layers and recurrent ones (Nemotron-H): both caches. */
static int hybrid(const sl_gen *g) { return g->c.arch == SL_ARCH_NEMOTRON_H || g->c.arch == SL_ARCH_GRANITE_H; }

static const float *head_weight(const sl_gen *g) {
  if (g->c.tie_word_embeddings) return g->flat[0];
  return tens(g, (int)g->L + 1, "lm_head.weight");
}

static void head(sl_gen *g) {
  const sl_unit_spec *hu = &g->m->units[g->L + 1];
  rmsnorm_p(g->h, g->x, g->flat[g->L + 1] + hu->t[0].offset, g->C,
            recurrent(g) || hybrid(g) ? g->c.layer_norm_epsilon : g->c.rms_norm_eps, g->c.gemma);
  matvec(g->logits, head_weight(g), g->h, g->V, g->C, NULL);
  for (int64_t v = 0; g->c.final_logit_softcapping > 0 && v < g->V; v++)
    g->logits[v] = softcap(g->logits[v], g->c.final_logit_softcapping);
  for (int64_t v = 0; g->c.logits_scaling > 0 && g->c.logits_scaling != 1 && v < g->V; v++)
    g->logits[v] /= (float)g->c.logits_scaling; /* Granite's muP: logits divided by logits_scaling */
}

/* The muP multipliers (Granite's; 1 where the config has none): residual updates, embeddings. */
static float res_mult(const sl_gen *g) { return g->c.residual_mult > 0 ? (float)g->c.residual_mult : 1.0f; }
static void embed_scale(sl_gen *g) {
  for (int64_t i = 0; g->c.embedding_mult > 0 && g->c.embedding_mult != 1 && i < g->C; i++)
    g->x[i] *= (float)g->c.embedding_mult;
}

/* x += norm(y) with the layer's post norm `name` (Gemma), else x += y (times the residual multiplier) */
static void residual_add(sl_gen *g, int u, const char *name, float *y) {
  float rm = res_mult(g);
  if (g->c.gemma) rmsnorm_p(y, y, tens(g, u, name), g->C, g->c.rms_norm_eps, 1);
  for (int64_t i = 0; i < g->C; i++) g->x[i] += rm == 1.0f ? y[i] : y[i] * rm;
}

/* ---- Llama / Mistral / Qwen2 / Qwen3 / Gemma 2 / 3: one position through the K/V cache ---------------------- */
static void rope(const sl_gen *g, const float *inv_freq, float *v, int64_t nheads, int64_t pos) {
  int64_t h2 = g->hd / 2;
  for (int64_t i = 0; i < h2; i++) {
    float f = (float)pos * inv_freq[i], c = cosf(f), s = sinf(f);
    for (int64_t h = 0; h < nheads; h++) {
      float *x = v + h * g->hd, x1 = x[i], x2 = x[i + h2];
      x[i] = x1 * c - x2 * s;
      x[i + h2] = x2 * c + x1 * s;
    }
  }
}

/* Layer l's experts unit (the block's companion). */
static int experts_unit(const sl_gen *g, int64_t l) {
  for (int i = 0; i < g->m->nunits; i++)
    if (g->m->units[i].layer == l && !strcmp(g->m->units[i].kind, "experts")) return i;
  return -1;
}

/* sel[0..k) (k <= 64): the experts of the k largest score[e] + bias[e] (bias NULL: none), in order, ties to
 * the lower index (as torch.topk on distinct values). */
static void topk(const float *score, const float *bias, int64_t E, int64_t k, int64_t *sel) {
  for (int64_t j = 0; j < k && j < 64; j++) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; e++) {
      int taken = 0;
      for (int64_t t = 0; t < j; t++) taken |= sel[t] == e;
      if (!taken && (best < 0 || score[e] + (bias ? bias[e] : 0.0f) > score[best] + (bias ? bias[best] : 0.0f)))
        best = e;
    }
    sel[j] = best;
  }
}

/* A mixture of experts' MLP of layer l (unit u) on the normed g->h into g->h (transformers'
 * MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock): the router's softmax over the experts, the top k
 * (ties to the lower index, as torch.topk on distinct values), renormalised to sum 1 when
 * norm_topk_prob (Mixtral always), the weighted sum of those experts' SwiGLU MLPs. The expert bias
 * of --moe-balance bias (e_score_correction_bias) is not read, as transformers' classes do not. */
static void moe_mlp(sl_gen *g, int64_t l, int u) {
  const sl_model_config *c = &g->c;
  int64_t C = g->C, E = c->moe_experts, k = c->moe_topk, I = c->moe_intermediate;
  int q3 = c->arch == SL_ARCH_QWEN3_MOE, ue = experts_unit(g, l);
  float *logit = g->q, *acc = g->att, *hn = g->c2;
  memcpy(hn, g->h, (size_t)C * 4);
  matvec(logit, tens(g, u, ".gate.weight"), hn, E, C, NULL);
  double mx = -INFINITY, sum = 0, wsum = 0, w[64];
  int64_t sel[64];
  for (int64_t e = 0; e < E; e++) mx = logit[e] > mx ? logit[e] : mx;
  for (int64_t e = 0; e < E; e++) sum += exp((double)logit[e] - mx);
  topk(logit, NULL, E, k, sel); /* the k largest probabilities */
  for (int64_t j = 0; j < k && j < 64; j++) wsum += w[j] = exp((double)logit[sel[j]] - mx) / sum;
  memset(acc, 0, (size_t)C * 4);
  char nm[96];
  for (int64_t j = 0; j < k && j < 64; j++) {
    double wj = c->moe_norm_topk ? w[j] / wsum : w[j];
    const char *n1 = q3 ? "gate_proj" : "w1", *n3 = q3 ? "up_proj" : "w3", *n2 = q3 ? "down_proj" : "w2";
    snprintf(nm, sizeof nm, "experts.%lld.%s.weight", (long long)sel[j], n1);
    matvec(g->a, tens(g, ue, nm), hn, I, C, NULL);
    snprintf(nm, sizeof nm, "experts.%lld.%s.weight", (long long)sel[j], n3);
    matvec(g->b, tens(g, ue, nm), hn, I, C, NULL);
    for (int64_t i = 0; i < I; i++) g->a[i] = silu(g->a[i]) * g->b[i];
    snprintf(nm, sizeof nm, "experts.%lld.%s.weight", (long long)sel[j], n2);
    matvec(g->h, tens(g, ue, nm), g->a, C, I, NULL);
    for (int64_t i = 0; i < C; i++) acc[i] += (float)(wj * g->h[i]);
  }
  memcpy(g->h, acc, (size_t)C * 4);
}

/* Nemotron-H's MoE layer l (unit u) on the normed g->h into g->h (transformers' NemotronHMoE, DeepSeek-V3's
 * router): sigmoid scores of the router's logits; the k largest score + e_score_correction_bias (ties to the
 * lower index); their scores (without the bias) divided by their sum (+ 1e-20) when norm_topk_prob, times
 * routed_scaling_factor; the weighted sum of those experts' squared-ReLU MLPs, plus the shared expert's. */
static void nemotron_moe(sl_gen *g, int64_t l, int u) {
  const sl_model_config *c = &g->c;
  int64_t C = g->C, E = c->moe_experts, k = c->moe_topk, I = c->moe_intermediate, Is = c->moe_shared_intermediate;
  int ue = experts_unit(g, l);
  float *sc = g->q, *acc = g->att, *hn = g->c2;
  memcpy(hn, g->h, (size_t)C * 4);
  matvec(sc, tens(g, u, ".gate.weight"), hn, E, C, NULL);
  for (int64_t e = 0; e < E; e++) sc[e] = 1.0f / (1.0f + expf(-sc[e]));
  const float *bias = g->ebias + l * E;
  double w[64], wsum = 0;
  int64_t sel[64];
  topk(sc, bias, E, k, sel);
  for (int64_t j = 0; j < k && j < 64; j++) wsum += w[j] = sc[sel[j]];
  double rs = c->moe_routed_scale > 0 ? c->moe_routed_scale : 1.0;
  char nm[96];
  /* the shared expert first, into acc */
  matvec(g->a, tens(g, u, "shared_experts.up_proj.weight"), hn, Is, C, tens(g, u, "shared_experts.up_proj.bias"));
  for (int64_t i = 0; i < Is; i++) g->a[i] = g->a[i] > 0 ? g->a[i] * g->a[i] : 0.0f;
  matvec(acc, tens(g, u, "shared_experts.down_proj.weight"), g->a, C, Is, tens(g, u, "shared_experts.down_proj.bias"));
  for (int64_t j = 0; j < k && j < 64; j++) {
    double wj = (c->moe_norm_topk ? w[j] / (wsum + 1e-20) : w[j]) * rs;
    snprintf(nm, sizeof nm, "experts.%lld.up_proj.weight", (long long)sel[j]);
    matvec(g->a, tens(g, ue, nm), hn, I, C, NULL);
    for (int64_t i = 0; i < I; i++) g->a[i] = g->a[i] > 0 ? g->a[i] * g->a[i] : 0.0f;
    snprintf(nm, sizeof nm, "experts.%lld.down_proj.weight", (long long)sel[j]);
    matvec(g->h, tens(g, ue, nm), g->a, C, I, NULL);
    for (int64_t i = 0; i < C; i++) acc[i] += (float)(wj * g->h[i]);
  }
  memcpy(g->h, acc, (size_t)C * 4);
}

/* Granite 4.0-H's MLP half of layer l with experts (unit u) on the normed g->h into g->h (transformers'
 * GraniteMoeHybridMoE plus its shared MLP): the router's top k logits (ties to the lower index) and a softmax
 * over them; the weighted sum of those experts' SwiGLU MLPs (slab e of the fused input_linear (gate | up rows)
 * and output_linear), plus the shared MLP's. */
static void granite_moe(sl_gen *g, int64_t l, int u) {
  const sl_model_config *c = &g->c;
  int64_t C = g->C, E = c->moe_experts, k = c->moe_topk, I = c->moe_intermediate, Is = c->moe_shared_intermediate;
  int ue = experts_unit(g, l);
  float *logit = g->q, *acc = g->att, *hn = g->c2;
  memcpy(hn, g->h, (size_t)C * 4);
  matvec(logit, tens(g, u, "router.layer.weight"), hn, E, C, NULL);
  double w[64], wsum = 0;
  int64_t sel[64];
  topk(logit, NULL, E, k, sel);
  for (int64_t j = 0; j < k && j < 64; j++) wsum += w[j] = exp((double)logit[sel[j]] - logit[sel[0]]);
  const float *wi = tens(g, u, "shared_mlp.input_linear.weight"); /* the shared MLP first, into acc */
  matvec(g->a, wi, hn, Is, C, NULL);
  matvec(g->b, wi + Is * C, hn, Is, C, NULL);
  for (int64_t i = 0; i < Is; i++) g->a[i] = silu(g->a[i]) * g->b[i];
  matvec(acc, tens(g, u, "shared_mlp.output_linear.weight"), g->a, C, Is, NULL);
  char nm[96];
  for (int64_t j = 0; j < k && j < 64; j++) {
    snprintf(nm, sizeof nm, "input_linear.weight[%lld]", (long long)sel[j]);
    wi = tens(g, ue, nm);
    matvec(g->a, wi, hn, I, C, NULL);
    matvec(g->b, wi + I * C, hn, I, C, NULL);
    for (int64_t i = 0; i < I; i++) g->a[i] = silu(g->a[i]) * g->b[i];
    snprintf(nm, sizeof nm, "output_linear.weight[%lld]", (long long)sel[j]);
    matvec(g->h, tens(g, ue, nm), g->a, C, I, NULL);
    for (int64_t i = 0; i < C; i++) acc[i] += (float)(w[j] / wsum * g->h[i]);
  }
  memcpy(g->h, acc, (size_t)C * 4);
}

static void llama_step(sl_gen *g, int32_t tok) {
  int64_t C = g->C, hd = g->hd, nh = g->nh, nkv = g->nkv, KV = nkv * hd, p = g->pos;
  const sl_model_config *c = &g->c;
  int64_t I = c->intermediate_size, rep = nh / nkv;
  double eps = c->rms_norm_eps, sf = sl_rope_score_factor(c);      /* YaRN: attention_factor^2 */
  double sc = c->gemma ? sf / sqrt(c->query_pre_attn_scalar) : 0; /* Gemma's score scale (times YaRN's factor) */
  int pl = c->gemma;
  if (c->attention_mult > 0) sc = c->attention_mult * sf; /* Granite's muP score scale (times YaRN's factor) */
  memcpy(g->x, g->flat[0] + (int64_t)tok * C, (size_t)C * 4);
  embed_scale(g);
  if (pl) { /* Gemma: embeddings times sqrt(hidden) */
    float es = (float)sqrt((double)C);
    for (int64_t i = 0; i < C; i++) g->x[i] *= es;
  }
  for (int64_t l = 0; l < g->L; l++) {
    int u = (int)l + 1;
    float *kr = g->kc[l] + p * KV, *vr = g->vc[l] + p * KV;
    int64_t win = sl_cfg_layer_window(c, l); /* the layer's type: Mistral, Gemma, Qwen2 / Qwen3 */
    int64_t lo = win > 0 && p - win + 1 > 0 ? p - win + 1 : 0; /* query p sees keys lo..p */
    rmsnorm_p(g->h, g->x, tens(g, u, "input_layernorm.weight"), C, eps, pl);
    /* the biases: Qwen2's, Llama's / Qwen3's attention_bias and Llama's mlp_bias (NULL when the block has none) */
    matvec(g->q, tens(g, u, "q_proj.weight"), g->h, nh * hd, C, tens(g, u, "q_proj.bias"));
    matvec(kr, tens(g, u, "k_proj.weight"), g->h, KV, C, tens(g, u, "k_proj.bias"));
    matvec(vr, tens(g, u, "v_proj.weight"), g->h, KV, C, tens(g, u, "v_proj.bias"));
    if (g->c.qk_norm) { /* Qwen3, Gemma 3 (1 + w): each q and k head over head_dim, before RoPE */
      for (int64_t h = 0; h < nh; h++)
        rmsnorm_p(g->q + h * hd, g->q + h * hd, tens(g, u, "q_norm.weight"), hd, eps, pl);
      for (int64_t h = 0; h < nkv; h++) rmsnorm_p(kr + h * hd, kr + h * hd, tens(g, u, "k_norm.weight"), hd, eps, pl);
    }
    const float *freq = g->inv_freq_local && win > 0 ? g->inv_freq_local : g->inv_freq;
    rope(g, freq, g->q, nh, p);
    rope(g, freq, kr, nkv, p);
    for (int64_t h = 0; h < nh; h++) {
      const float *q = g->q + h * hd;
      int64_t kvh = h / rep;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = lo; j <= p; j++) {
        const float *k = g->kc[l] + j * KV + kvh * hd;
        double s = 0;
        for (int64_t i = 0; i < hd; i++) s += (double)q[i] * k[i];
        double sv = sc > 0 ? s * sc : sf == 1.0 ? s / sqrt((double)hd) : s / sqrt((double)hd) * sf;
        g->probs[j] = softcap((float)sv, c->attn_logit_softcapping);
        if (g->probs[j] > mx) mx = g->probs[j];
      }
      for (int64_t j = lo; j <= p; j++) sum += exp(g->probs[j] - mx);
      float *y = g->att + h * hd;
      for (int64_t i = 0; i < hd; i++) {
        double acc = 0;
        for (int64_t j = lo; j <= p; j++) acc += exp(g->probs[j] - mx) / sum * g->vc[l][j * KV + kvh * hd + i];
        y[i] = (float)acc;
      }
    }
    matvec(g->h, tens(g, u, "o_proj.weight"), g->att, C, nh * hd, tens(g, u, "o_proj.bias"));
    residual_add(g, u, "post_attention_layernorm.weight", g->h);
    rmsnorm_p(g->h, g->x, tens(g, u, pl ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), C,
              eps, pl);
    if (c->moe_experts) {
      moe_mlp(g, l, u);
      residual_add(g, u, "post_feedforward_layernorm.weight", g->h); /* (no MoE Gemma: x += h) */
      continue;
    }
    matvec(g->a, tens(g, u, "gate_proj.weight"), g->h, I, C, tens(g, u, "gate_proj.bias"));
    matvec(g->b, tens(g, u, "up_proj.weight"), g->h, I, C, tens(g, u, "up_proj.bias"));
    for (int64_t i = 0; i < I; i++) g->a[i] = (pl ? gelu_tanh(g->a[i]) : silu(g->a[i])) * g->b[i];
    matvec(g->h, tens(g, u, "down_proj.weight"), g->a, C, I, tens(g, u, "down_proj.bias"));
    residual_add(g, u, "post_feedforward_layernorm.weight", g->h);
  }
  head(g);
}

/* ---- Mamba: one step of the recurrence ---------------------------------------- */
static void mamba_step(sl_gen *g, int32_t tok) {
  int64_t C = g->C, D = g->D, S = g->S, R = g->R, K = g->K;
  memcpy(g->x, g->flat[0] + (int64_t)tok * C, (size_t)C * 4);
  for (int64_t l = 0; l < g->L; l++) {
    int u = (int)l + 1;
    rmsnorm(g->h, g->x, tens(g, u, ".norm.weight"), C, g->c.layer_norm_epsilon);
    matvec(g->a, tens(g, u, "in_proj.weight"), g->h, 2 * D, C, tens(g, u, "in_proj.bias"));
    const float *wc = tens(g, u, "conv1d.weight"), *bc = tens(g, u, "conv1d.bias");
    const float *alog = tens(g, u, "A_log"), *dp = tens(g, u, "mixer.D");
    float *cs = g->conv[l], *hs = g->ssm[l], *xu = g->b, *dbc = g->c2, *dt = g->q;
    for (int64_t d = 0; d < D; d++) { /* causal conv over the last K inputs */
      memmove(cs + d * K, cs + d * K + 1, (size_t)(K - 1) * 4);
      cs[d * K + K - 1] = g->a[d];
      double s = bc ? bc[d] : 0.0;
      for (int64_t k = 0; k < K; k++) s += (double)wc[d * K + k] * cs[d * K + k];
      xu[d] = silu((float)s);
    }
    matvec(dbc, tens(g, u, "x_proj.weight"), xu, R + 2 * S, D, NULL);
    if (g->c.mixer_rms) /* Falcon-Mamba: dt, B and C each normalised, without a weight */
      for (int64_t o = 0, w = R; o < R + 2 * S; o += w, w = S) rmsnorm(dbc + o, dbc + o, NULL, w, g->c.mixer_rms_eps);
    matvec(dt, tens(g, u, "dt_proj.weight"), dbc, D, R, tens(g, u, "dt_proj.bias"));
    const float *Bm = dbc + R, *Cm = dbc + R + S;
    for (int64_t d = 0; d < D; d++) {
      float delta = dt[d] > 20.0f ? dt[d] : log1pf(expf(dt[d])); /* softplus, threshold 20 */
      double y = 0;
      for (int64_t s = 0; s < S; s++) {
        float A = -expf(alog[d * S + s]);
        float *h = hs + d * S + s;
        *h = expf(delta * A) * *h + delta * Bm[s] * xu[d];
        y += (double)*h * Cm[s];
      }
      g->att[d] = ((float)y + xu[d] * dp[d]) * silu(g->a[D + d]);
    }
    matvec(g->h, tens(g, u, "out_proj.weight"), g->att, C, D, tens(g, u, "out_proj.bias"));
    for (int64_t i = 0; i < C; i++) g->x[i] += g->h[i];
  }
  head(g);
}

/* ---- Mamba-2: one step of the recurrence (transformers' Mamba2Mixer with a cache; the gated norm per
 * group, as models/mamba2.c) ------------------------------------------------------------------------------- */
static void mamba2_layer(sl_gen *g, int64_t l) {
  const sl_model_config *c = &g->c;
  int64_t C = g->C, D = g->D, S = g->S, K = g->K, nh = c->ssm_heads, P = c->ssm_head_dim, G = c->ssm_groups;
  int64_t GS = G * S, Cd = D + 2 * GS, Din = D + Cd + nh, Dg = D / G;
  {
    int u = (int)l + 1;
    const sl_unit_spec *us = &g->m->units[u];
    rmsnorm(g->h, g->x, g->flat[u] + us->t[0].offset, C, c->layer_norm_epsilon); /* the block's (first in the unit) */
    float *zx = g->a, *xbc = g->b, *y = g->att, *cs = g->conv[l], *hs = g->ssm[l];
    matvec(zx, tens(g, u, "in_proj.weight"), g->h, Din, C, tens(g, u, "in_proj.bias"));
    const float *wc = tens(g, u, "conv1d.weight"), *bc = tens(g, u, "conv1d.bias");
    for (int64_t d = 0; d < Cd; d++) { /* causal conv over the last K inputs of x | B | C */
      memmove(cs + d * K, cs + d * K + 1, (size_t)(K - 1) * 4);
      cs[d * K + K - 1] = zx[D + d];
      double s = bc ? bc[d] : 0.0;
      for (int64_t k = 0; k < K; k++) s += (double)wc[d * K + k] * cs[d * K + k];
      xbc[d] = silu((float)s);
    }
    const float *alog = tens(g, u, "A_log"), *dp = tens(g, u, ".D"), *dtb = tens(g, u, "dt_bias");
    for (int64_t h = 0; h < nh; h++) {
      float v = zx[2 * D + 2 * GS + h] + dtb[h];
      float delta = v > 20.0f ? v : log1pf(expf(v)); /* softplus, threshold 20 */
      delta = delta < (float)c->dt_limit[0] ? (float)c->dt_limit[0] : delta;
      delta = delta > (float)c->dt_limit[1] ? (float)c->dt_limit[1] : delta;
      float a = expf(delta * -expf(alog[h]));
      const float *Bm = xbc + D + (h / (nh / G)) * S, *Cm = Bm + GS;
      for (int64_t p = 0; p < P; p++) {
        float xv = xbc[h * P + p], *st = hs + (h * P + p) * S;
        double acc = 0;
        for (int64_t s = 0; s < S; s++) {
          st[s] = a * st[s] + delta * Bm[s] * xv;
          acc += (double)st[s] * Cm[s];
        }
        y[h * P + p] = ((float)acc + dp[h] * xv) * silu(zx[h * P + p]); /* gated by SiLU(z) */
      }
    }
    const float *wn = tens(g, u, c->arch == SL_ARCH_GRANITE_H ? "mamba.norm.weight" : "mixer.norm.weight");
    for (int64_t gi = 0; gi < G; gi++) rmsnorm(y + gi * Dg, y + gi * Dg, wn + gi * Dg, Dg, c->layer_norm_epsilon);
    matvec(g->h, tens(g, u, "out_proj.weight"), y, C, D, tens(g, u, "out_proj.bias"));
    float rm = c->residual_mult > 0 ? (float)c->residual_mult : 1.0f; /* Granite's residual_multiplier */
    for (int64_t i = 0; i < C; i++) g->x[i] += rm == 1.0f ? g->h[i] : g->h[i] * rm;
  }
}

static void mamba2_step(sl_gen *g, int32_t tok) {
  memcpy(g->x, g->flat[0] + (int64_t)tok * g->C, (size_t)g->C * 4);
  for (int64_t l = 0; l < g->L; l++) mamba2_layer(g, l);
  head(g);
}

/* ---- the hybrids, layer by layer of the decoder: norm -> one mixer -> residual: Mamba-2 (M), attention
 * without RoPE (*), the MLP (-: Nemotron-H's squared ReLU, Granite 4.0-H's SwiGLU shared_mlp); Granite's
 * multipliers (embeddings, residuals, attention scores, logits) -------------------------------------------- */
static void hybrid_step(sl_gen *g, int32_t tok) {
  const sl_model_config *c = &g->c;
  int64_t C = g->C, hd = g->hd, nh = g->nh, nkv = g->nkv, KV = nkv * hd, p = g->pos, I = c->intermediate_size;
  double eps = c->layer_norm_epsilon;
  int granite = c->arch == SL_ARCH_GRANITE_H;
  float rm = res_mult(g);
  double sc = c->attention_mult > 0 ? c->attention_mult : 1.0 / sqrt((double)hd);
  memcpy(g->x, g->flat[0] + (int64_t)tok * C, (size_t)C * 4);
  embed_scale(g);
  for (int64_t l = 0; l < g->L; l++) {
    int u = (int)l + 1;
    if (c->layer_pattern[l] == 'M') {
      mamba2_layer(g, l);
      continue;
    }
    rmsnorm(g->h, g->x, g->flat[u] + g->m->units[u].t[0].offset, C, eps); /* the sub-layer's norm: first */
    if (c->layer_pattern[l] == '-' && granite) { /* input_linear: gate | up rows */
      const float *wi = tens(g, u, "input_linear.weight");
      matvec(g->a, wi, g->h, I, C, NULL);
      matvec(g->b, wi + I * C, g->h, I, C, NULL);
      for (int64_t i = 0; i < I; i++) g->a[i] = silu(g->a[i]) * g->b[i];
      matvec(g->h, tens(g, u, "output_linear.weight"), g->a, C, I, NULL);
    } else if (c->layer_pattern[l] == 'E') {
      if (granite) granite_moe(g, l, u);
      else nemotron_moe(g, l, u);
    } else if (c->layer_pattern[l] == '-') {
      matvec(g->a, tens(g, u, "up_proj.weight"), g->h, I, C, tens(g, u, "up_proj.bias"));
      for (int64_t i = 0; i < I; i++) g->a[i] = g->a[i] > 0 ? g->a[i] * g->a[i] : 0.0f;
      matvec(g->h, tens(g, u, "down_proj.weight"), g->a, C, I, tens(g, u, "down_proj.bias"));
    } else {
      float *kr = g->kc[l] + p * KV, *vr = g->vc[l] + p * KV;
      matvec(g->q, tens(g, u, "q_proj.weight"), g->h, nh * hd, C, tens(g, u, "q_proj.bias"));
      matvec(kr, tens(g, u, "k_proj.weight"), g->h, KV, C, tens(g, u, "k_proj.bias"));
      matvec(vr, tens(g, u, "v_proj.weight"), g->h, KV, C, tens(g, u, "v_proj.bias"));
      for (int64_t h = 0; h < nh; h++) {
        const float *q = g->q + h * hd;
        int64_t kvh = h / (nh / nkv);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= p; j++) {
          double s = 0;
          for (int64_t i = 0; i < hd; i++) s += (double)q[i] * g->kc[l][j * KV + kvh * hd + i];
          g->probs[j] = (float)(s * sc);
          if (g->probs[j] > mx) mx = g->probs[j];
        }
        for (int64_t j = 0; j <= p; j++) sum += exp(g->probs[j] - mx);
        for (int64_t i = 0; i < hd; i++) {
          double acc = 0;
          for (int64_t j = 0; j <= p; j++) acc += exp(g->probs[j] - mx) / sum * g->vc[l][j * KV + kvh * hd + i];
          g->att[h * hd + i] = (float)acc;
        }
      }
      matvec(g->h, tens(g, u, "o_proj.weight"), g->att, C, nh * hd, tens(g, u, "o_proj.bias"));
    }
    for (int64_t i = 0; i < C; i++) g->x[i] += rm == 1.0f ? g->h[i] : g->h[i] * rm;
  }
  head(g);
}

/* ---- load / free ------------------------------------------------------------------ */
void sl_gen_free(sl_gen *g) {
  if (!g) return;
  for (int64_t l = 0; l < g->L; l++) {
    if (g->kc) {
      sl_free(g->kc[l]);
      sl_free(g->vc[l]);
    }
    if (g->conv) {
      free(g->conv[l]);
      free(g->ssm[l]);
    }
  }
  free(g->kc);
  free(g->vc);
  free(g->conv);
  free(g->ssm);
  if (g->flat && g->m)
    for (int u = 0; u < g->m->nunits; u++) sl_free(g->flat[u]);
  free(g->flat);
  free(g->inv_freq);
  free(g->inv_freq_local);
  free(g->ebias);
  free(g->x);
  free(g->h);
  free(g->a);
  free(g->b);
  free(g->c2);
  free(g->q);
  free(g->att);
  free(g->logits);
  free(g->probs);
  free(g->order);
  sl_model_destroy(g->m);
  free(g);
}

int sl_gen_load(const char *dir, sl_gen **out) {
  *out = NULL;
  sl_gen *g = calloc(1, sizeof *g);
  if (!g) return sl_fail(SL_ENOMEM, "out of memory");
  char p[4096];
  snprintf(p, sizeof p, "%s/config.json", dir);
  sl_st_set *w = NULL;
  int rc = sl_hfconfig_load(p, &g->c);
  if (!rc && g->c.moe_experts && g->c.moe_topk > 64)
    rc = sl_fail(SL_EINPUT, "%s: generate takes at most 64 experts per token (num_experts_per_tok %lld)", p,
                 (long long)g->c.moe_topk);
  if (!rc) rc = sl_model_create_specs(&g->c, &g->m);
  if (!rc) rc = sl_st_open_dir(dir, &w);
  if (!rc && !w) rc = sl_fail(SL_EINPUT, "%s: no *.safetensors weights to generate from", dir);
  if (!rc && !(g->flat = calloc((size_t)g->m->nunits, sizeof(float *)))) rc = sl_fail(SL_ENOMEM, "out of memory");
  for (int u = 0; !rc && u < g->m->nunits; u++) {
    if (!(g->flat[u] = sl_alloc((size_t)g->m->units[u].numel * 4, "generate weights"))) rc = SL_ENOMEM;
    else rc = sl_model_unit_load(g->m, u, w, 0, g->flat[u]);
  }
  if (!rc && g->c.moe_sigmoid) { /* Nemotron-H: the expert bias is the model's (zeros when the files have none) */
    int found = 0;
    if (!(g->ebias = calloc((size_t)(g->c.num_hidden_layers * g->c.moe_experts), sizeof(float))))
      rc = sl_fail(SL_ENOMEM, "out of memory");
    else rc = sl_model_moe_bias_read(&g->c, w, g->ebias, &found);
  }
  if (w) sl_st_close_set(w);
  if (rc) {
    sl_gen_free(g);
    return rc;
  }
  sl_model_config *c = &g->c;
  g->L = c->num_hidden_layers;
  g->C = c->hidden_size;
  g->V = c->vocab_size;
  int64_t wide = g->C;
  if (c->arch == SL_ARCH_MAMBA) {
    g->D = c->intermediate_size;
    g->S = c->state_size;
    g->R = c->time_step_rank;
    g->K = c->conv_kernel;
    g->Cw = g->D;
    wide = 2 * g->D + g->R + 2 * g->S;
    g->conv = calloc((size_t)g->L, sizeof(float *));
    g->ssm = calloc((size_t)g->L, sizeof(float *));
    rc = g->conv && g->ssm ? SL_OK : SL_ENOMEM;
    for (int64_t l = 0; !rc && l < g->L; l++)
      if (!(g->conv[l] = calloc((size_t)(g->D * g->K), 4)) || !(g->ssm[l] = calloc((size_t)(g->D * g->S), 4)))
        rc = SL_ENOMEM;
  }
  if (c->arch == SL_ARCH_MAMBA2 || hybrid(g)) { /* conv: the last K inputs of x | B | C; state: (D, S) */
    g->D = c->ssm_heads * c->ssm_head_dim; /* Mamba2: = intermediate_size (expand x hidden) */
    g->S = c->state_size;
    g->K = c->conv_kernel;
    g->Cw = g->D + 2 * c->ssm_groups * g->S;
    wide = g->D + g->Cw + c->ssm_heads;
    g->conv = calloc((size_t)g->L, sizeof(float *));
    g->ssm = calloc((size_t)g->L, sizeof(float *));
    rc = g->conv && g->ssm ? SL_OK : SL_ENOMEM;
    for (int64_t l = 0; !rc && l < g->L; l++)
      if (!(g->conv[l] = calloc((size_t)(g->Cw * g->K), 4)) || !(g->ssm[l] = calloc((size_t)(g->D * g->S), 4)))
        rc = SL_ENOMEM;
  }
  if (!rc && c->arch != SL_ARCH_MAMBA && c->arch != SL_ARCH_MAMBA2) {
    g->nh = c->num_attention_heads;
    g->nkv = c->num_key_value_heads;
    g->hd = c->head_dim;
    int64_t aw = c->intermediate_size + g->nh * g->hd + g->C + c->moe_intermediate + c->moe_experts +
                 c->moe_shared_intermediate;
    wide = aw > wide ? aw : wide;
    g->inv_freq = malloc(sizeof(float) * (size_t)(g->hd / 2));
    g->kc = calloc((size_t)g->L, sizeof(float *));
    g->vc = calloc((size_t)g->L, sizeof(float *));
    rc = g->inv_freq && g->kc && g->vc ? SL_OK : SL_ENOMEM;
    /* the training model's table (models/rope.c), rope_scaling included */
    if (!rc) sl_rope_inv_freq_cfg(g->inv_freq, c);
    if (!rc && c->rope_local_base_freq > 0) { /* Gemma 3's sliding layers: plain RoPE on their own base */
      if (!(g->inv_freq_local = malloc(sizeof(float) * (size_t)(g->hd / 2)))) rc = SL_ENOMEM;
      else sl_rope_inv_freq(g->inv_freq_local, g->hd, (float)c->rope_local_base_freq);
    }
  }
  if (!rc) {
    size_t n = (size_t)(wide > g->V ? wide : g->V) + 16;
    g->x = calloc(n, 4);
    g->h = calloc(n, 4);
    g->a = calloc(n, 4);
    g->b = calloc(n, 4);
    g->c2 = calloc(n, 4);
    g->q = calloc(n, 4);
    g->att = calloc(n, 4);
    g->logits = calloc(n, 4);
    g->order = calloc((size_t)g->V, sizeof(int64_t));
    if (!g->x || !g->h || !g->a || !g->b || !g->c2 || !g->q || !g->att || !g->logits || !g->order) rc = SL_ENOMEM;
  }
  if (rc) {
    sl_gen_free(g);
    return rc == SL_ENOMEM ? sl_fail(SL_ENOMEM, "out of memory") : rc;
  }
  *out = g;
  return SL_OK;
}

int sl_gen_load_config(const char *dir, sl_gen **out) {
  *out = NULL;
  sl_gen *g = calloc(1, sizeof *g);
  if (!g) return sl_fail(SL_ENOMEM, "out of memory");
  char p[4096];
  snprintf(p, sizeof p, "%s/config.json", dir);
  int rc = sl_hfconfig_load(p, &g->c);
  g->V = g->c.vocab_size;
  if (!rc && (!(g->logits = calloc((size_t)g->V + 16, 4)) || !(g->b = calloc((size_t)g->V + 16, 4)) ||
              !(g->order = calloc((size_t)g->V, sizeof(int64_t)))))
    rc = sl_fail(SL_ENOMEM, "out of memory");
  if (rc) {
    sl_gen_free(g);
    return rc;
  }
  *out = g;
  return SL_OK;
}

int64_t sl_gen_vocab(const sl_gen *g) { return g->V; }
int64_t sl_gen_context(const sl_gen *g) { return recurrent(g) ? 0 : g->c.max_position_embeddings; }
int32_t sl_gen_eos(const sl_gen *g) { return (int32_t)g->c.eos_token_id; }
int sl_gen_eos_list(const sl_gen *g, int32_t *out, int cap) {
  int n = 0;
  for (int i = 0; i < g->c.n_eos && n < cap; i++) out[n++] = (int32_t)g->c.eos_token_ids[i];
  return n;
}

/* Resets the caches for a sequence of up to n positions. */
static int reset(sl_gen *g, int64_t n) {
  g->pos = 0;
  if (recurrent(g) || hybrid(g)) {
    for (int64_t l = 0; l < g->L; l++) {
      memset(g->conv[l], 0, (size_t)(g->Cw * g->K) * 4);
      memset(g->ssm[l], 0, (size_t)(g->D * g->S) * 4);
    }
    if (recurrent(g)) return SL_OK;
  }
  int64_t KV = g->nkv * g->hd;
  if (n > g->cap) {
    for (int64_t l = 0; l < g->L; l++) {
      sl_free(g->kc[l]);
      sl_free(g->vc[l]);
      g->kc[l] = sl_alloc((size_t)(n * KV) * 4, "K cache");
      g->vc[l] = sl_alloc((size_t)(n * KV) * 4, "V cache");
      if (!g->kc[l] || !g->vc[l]) return SL_ENOMEM;
    }
    free(g->probs);
    if (!(g->probs = calloc((size_t)n, 4))) return SL_ENOMEM;
    g->cap = n;
  }
  return SL_OK;
}

static void step(sl_gen *g, int32_t tok) {
  if (g->c.arch == SL_ARCH_MAMBA) mamba_step(g, tok);
  else if (g->c.arch == SL_ARCH_MAMBA2) mamba2_step(g, tok);
  else if (hybrid(g)) hybrid_step(g, tok);
  else llama_step(g, tok);
  g->pos++;
}

static const float *cmp_base;
static int by_prob_desc(const void *a, const void *b) {
  float x = cmp_base[*(const int64_t *)a], y = cmp_base[*(const int64_t *)b];
  if (x != y) return x > y ? -1 : 1;
  return *(const int64_t *)a < *(const int64_t *)b ? -1 : 1;
}

static int32_t sample(sl_gen *g, const sl_gen_opts *o, uint64_t *rng) {
  const float *l = g->logits;
  int64_t V = g->V, best = 0;
  for (int64_t v = 1; v < V; v++)
    if (l[v] > l[best]) best = v;
  if (o->temperature <= 0) return (int32_t)best;
  float *p = g->b; /* softmax(l / T); b holds >= V floats */
  double sum = 0;
  for (int64_t v = 0; v < V; v++) {
    p[v] = (float)exp(((double)l[v] - l[best]) / o->temperature);
    sum += p[v];
  }
  for (int64_t v = 0; v < V; v++) {
    p[v] = (float)(p[v] / sum);
    g->order[v] = v;
  }
  cmp_base = p;
  qsort(g->order, (size_t)V, sizeof(int64_t), by_prob_desc);
  int64_t keep = V;
  double top = o->top_p > 0 && o->top_p < 1 ? o->top_p : 1.0, cum = 0;
  for (int64_t i = 0; i < V; i++) {
    cum += p[g->order[i]];
    if (cum >= top) {
      keep = i + 1;
      break;
    }
  }
  double mass = 0;
  for (int64_t i = 0; i < keep; i++) mass += p[g->order[i]];
  double r = (double)(sl_splitmix64(rng) >> 11) * 0x1.0p-53 * mass, acc = 0;
  for (int64_t i = 0; i < keep; i++) {
    acc += p[g->order[i]];
    if (r < acc) return (int32_t)g->order[i];
  }
  return (int32_t)g->order[keep - 1];
}

/* sl_generate's loop with the logits of o->forward over the sequence so far (no cache). */
static int generate_fwd(sl_gen *g, const int32_t *prompt, int64_t n, int64_t total, const sl_gen_opts *o,
                        int32_t *out, int64_t *nout) {
  int32_t *seq = malloc((size_t)total * sizeof *seq);
  if (!seq) return sl_fail(SL_ENOMEM, "out of memory");
  memcpy(seq, prompt, (size_t)n * sizeof *seq);
  uint64_t rng = o->seed;
  int rc = SL_OK;
  for (int64_t len = n; len < total && !rc; len++) {
    if ((rc = o->forward(o->forward_user, seq, len, g->logits))) break;
    for (int64_t v = 0; v < g->V && !rc; v++)
      if (!isfinite(g->logits[v])) rc = sl_fail(SL_EINTERNAL, "non-finite logit at position %lld", (long long)len - 1);
    if (rc) break;
    int32_t t = sample(g, o, &rng);
    out[(*nout)++] = seq[len] = t;
    if (o->emit) o->emit(o->user, t);
    int stop = 0;
    for (int i = 0; i < o->nstop; i++) stop |= t == o->stop[i];
    if (stop) break;
  }
  free(seq);
  return rc;
}

int sl_generate(sl_gen *g, const int32_t *prompt, int64_t n, const sl_gen_opts *o, int32_t *out, int64_t *nout) {
  *nout = 0;
  int64_t ctx = sl_gen_context(g);
  if (n < 1) return sl_fail(SL_EINPUT, "the prompt is empty (at least one token is needed)");
  if (ctx > 0 && n > ctx)
    return sl_fail(SL_EINPUT,
                   "the prompt has %lld tokens, longer than the model's context of %lld "
                   "(max_position_embeddings)",
                   (long long)n, (long long)ctx);
  for (int64_t i = 0; i < n; i++)
    if (prompt[i] < 0 || prompt[i] >= g->V)
      return sl_fail(SL_EINPUT, "prompt token %lld is %d, outside the model's vocabulary [0, %lld)", (long long)i,
                     prompt[i], (long long)g->V);
  /* the sequence (prompt + new tokens) stays within the context, as HF's max_length */
  int64_t total = n + (o->max_new > 0 ? o->max_new : 0);
  if (ctx > 0 && total > ctx) total = ctx;
  if (o->forward) return generate_fwd(g, prompt, n, total, o, out, nout);
  int rc = reset(g, total);
  if (rc) return sl_fail(SL_ENOMEM, "out of memory for the cache of %lld positions", (long long)total);
  for (int64_t i = 0; i < n; i++) step(g, prompt[i]);
  uint64_t rng = o->seed;
  for (int64_t k = 0; k < total - n; k++) {
    for (int64_t v = 0; v < g->V; v++)
      if (!isfinite(g->logits[v])) return sl_fail(SL_EINTERNAL, "non-finite logit at position %lld", (long long)g->pos);
    int32_t t = sample(g, o, &rng);
    out[(*nout)++] = t;
    if (o->emit) o->emit(o->user, t);
    int stop = 0;
    for (int i = 0; i < o->nstop; i++) stop |= t == o->stop[i];
    if (stop) break;
    if (k + 1 < total - n) step(g, t);
  }
  return SL_OK;
}
