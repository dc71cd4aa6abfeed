/* kernels/moe_rows.h — one token's router step, shared by the CPU op
 * (kernels/cpu/moe.c) and its CUDA twin (kernels/cuda/moe.cu, a thread per
 * token) so the two compute the same float operations in the same order.
 * The includer defines SL_MOE_FN: "static inline" in C, "static __device__
 * inline" in CUDA. Needs expf (math.h / the CUDA math library). mode:
 * SL_MOE_NORM | SL_MOE_SIGMOID (kernels/kernels.h). */
#ifndef SL_KERNELS_MOE_ROWS_H
#define SL_KERNELS_MOE_ROWS_H
#include <stdint.h>

#include "kernels/kernels.h"

/* The expert of a choice: sel holds e, or -1 - e when the capacity dropped the slot. */
SL_MOE_FN int32_t sl_moe_expert(int32_t s) { return s < 0 ? -1 - s : s; }
/* The slot's group in the permuted buffer: e (kept), E + e (dropped). */
SL_MOE_FN int64_t sl_moe_key(int32_t s, int64_t E) { return s < 0 ? E - 1 - s : s; }

/* The sigmoid score of a logit (SL_MOE_SIGMOID), the one spelling both backends use. */
SL_MOE_FN float sl_moe_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The scores of lg (E) into p: the softmax (and its logsumexp into *lse
 * unless NULL), or with SL_MOE_SIGMOID the sigmoid of each logit (lse not
 * written). The k largest p_e + bias_e (bias NULL: p_e) into sel
 * (descending; a tie goes to the lower expert), their p into w, divided by
 * their sum when SL_MOE_NORM (sigmoid: their sum + 1e-20f, as transformers'
 * DeepseekV3MoE), then times scale (the routed scaling factor; 1.0f exact). */
SL_MOE_FN void sl_moe_route_row(float *p, int32_t *sel, float *w, float *lse, const float *lg, const float *bias,
                                int64_t E, int64_t k, int mode, float scale) {
  if (mode & SL_MOE_SIGMOID) {
    for (int64_t e = 0; e < E; e++) p[e] = sl_moe_sigmoid(lg[e]);
  } else {
    float mx = lg[0];
    for (int64_t e = 1; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
    float sum = 0;
    for (int64_t e = 0; e < E; e++) sum += p[e] = expf(lg[e] - mx);
    for (int64_t e = 0; e < E; e++) p[e] /= sum;
    if (lse) *lse = mx + logf(sum);
  }
  float ws = 0;
  for (int64_t j = 0; j < k; j++) {
    int32_t best = -1;
    float bs = 0;
    for (int64_t e = 0; e < E; e++) {
      int taken = 0;
      for (int64_t i = 0; i < j; i++) taken |= sel[i] == (int32_t)e;
      float sc = bias ? p[e] + bias[e] : p[e];
      if (!taken && (best < 0 || sc > bs)) best = (int32_t)e, bs = sc;
    }
    sel[j] = best;
    ws += w[j] = p[best];
  }
  if (mode & SL_MOE_NORM) {
    if (mode & SL_MOE_SIGMOID) ws += 1e-20f;
    for (int64_t j = 0; j < k; j++) w[j] /= ws;
  }
  for (int64_t j = 0; j < k; j++) w[j] *= scale;
}

/* Permuted row r's rank in its expert group [g0, g1) (rows ascending by
 * token): the rows of larger weight, or of equal weight and an earlier
 * token, before it. The capacity keeps the rows of rank < capacity. */
SL_MOE_FN int64_t sl_moe_rank(const float *wts, const int32_t *perm, int64_t g0, int64_t g1, int64_t r) {
  float w = wts[perm[r]];
  int64_t n = 0;
  for (int64_t q = g0; q < g1; q++) {
    float v = wts[perm[q]];
    n += v > w || (v == w && q < r);
  }
  return n;
}

/* dl (E) += the gradient of the logits given dw (k), the gradient of the
 * weights w (the forward's, scaled): dp_j = (scale dw_j - sum_m dw_m w_m) /
 * ws with SL_MOE_NORM, else scale dw_j (ws = sum_m p_sel_m, + 1e-20f in
 * sigmoid mode as the forward; a dropped slot's p stays in the sum, its dw
 * and w are 0), plus gp (E, NULL: none) on every probability; then the
 * softmax (dl_e = p_e (dp_e - sum_f p_f dp_f)) plus zg * lse * p_e (the
 * z-loss's gradient through the logsumexp; zl = zg * lse, 0: none), or with
 * SL_MOE_SIGMOID each score's own derivative (dl_e = p_e (1 - p_e) dp_e; zl
 * not used: the z-loss is the softmax's). k <= 64. */
SL_MOE_FN void sl_moe_route_bwd_row(float *dl, const float *dw, const float *p, const int32_t *sel, const float *w,
                                    const float *gp, float zl, int64_t E, int64_t k, int mode, float scale) {
  float dp[64], ws = 0, dot = 0, pdp = 0;
  int32_t ex[64];
  int norm = mode & SL_MOE_NORM;
  for (int64_t j = 0; j < k; j++) ex[j] = sl_moe_expert(sel[j]);
  for (int64_t j = 0; j < k; j++) ws += p[ex[j]];
  if (norm && (mode & SL_MOE_SIGMOID)) ws += 1e-20f;
  for (int64_t j = 0; j < k; j++) dot += dw[j] * w[j];
  for (int64_t j = 0; j < k; j++) dp[j] = norm ? (scale * dw[j] - dot) / ws : scale * dw[j];
  if (mode & SL_MOE_SIGMOID) {
    for (int64_t e = 0; e < E; e++) {
      float g = gp ? gp[e] : 0.0f;
      for (int64_t j = 0; j < k; j++) g += ex[j] == (int32_t)e ? dp[j] : 0.0f;
      dl[e] += p[e] * (1.0f - p[e]) * g;
    }
    return;
  }
  if (gp)
    for (int64_t e = 0; e < E; e++) pdp += p[e] * gp[e];
  for (int64_t j = 0; j < k; j++) pdp += p[ex[j]] * dp[j];
  for (int64_t e = 0; e < E; e++) dl[e] += p[e] * ((gp ? gp[e] : 0.0f) - pdp);
  for (int64_t j = 0; j < k; j++) dl[ex[j]] += p[ex[j]] * dp[j];
  if (zl != 0.0f)
    for (int64_t e = 0; e < E; e++) dl[e] += zl * p[e];
}
#endif
