/* kernels/moe_rows.h — one token's router step, shared by the CPU op
 * (kernels/cpu/moe.c) and its CUDA twin (kernels/cuda/moe.cu, a thread per
 * token) so the two compute the same float operations in the same order.
 * The includer defines SL_MOE_FN: "static inline" in C, "static __device__
 * inline" in CUDA. Needs expf (math.h / the CUDA math library). */
#ifndef SL_KERNELS_MOE_ROWS_H
#define SL_KERNELS_MOE_ROWS_H
#include <stdint.h>

/* Softmax of lg (E) into p; the k largest into sel / w (descending; a tie
 * goes to the lower expert), renormalised to sum 1 when norm. */
SL_MOE_FN void sl_moe_route_row(float *p, int32_t *sel, float *w, const float *lg, int64_t E, int64_t k, int norm) {
  float mx = lg[0];
  for (int64_t e = 1; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
  float sum = 0;
  for (int64_t e = 0; e < E; e++) sum += p[e] = expf(lg[e] - mx);
  for (int64_t e = 0; e < E; e++) p[e] /= sum;
  float ws = 0;
  for (int64_t j = 0; j < k; j++) {
    int32_t best = -1;
    for (int64_t e = 0; e < E; e++) {
      int taken = 0;
      for (int64_t i = 0; i < j; i++) taken |= sel[i] == (int32_t)e;
      if (!taken && (best < 0 || p[e] > p[best])) best = (int32_t)e;
    }
    sel[j] = best;
    ws += w[j] = p[best];
  }
  if (norm)
    for (int64_t j = 0; j < k; j++) w[j] /= ws;
}

/* dl (E) += the gradient of the logits given dw (k), the gradient of the
 * weights w: through the renormalisation when norm (dp_j = (dw_j - sum_m
 * dw_m w_m) / sum_m p_sel_m), plus gp (E, NULL: none) on every
 * probability, then the softmax (dl_e = p_e (dp_e - sum_f p_f dp_f)).
 * k <= 64. */
SL_MOE_FN void sl_moe_route_bwd_row(float *dl, const float *dw, const float *p, const int32_t *sel, const float *w,
                                    const float *gp, int64_t E, int64_t k, int norm) {
  float dp[64], ws = 0, dot = 0, pdp = 0;
  if (gp)
    for (int64_t e = 0; e < E; e++) pdp += p[e] * gp[e];
  for (int64_t j = 0; j < k; j++) ws += p[sel[j]];
  for (int64_t j = 0; j < k; j++) dot += dw[j] * w[j];
  for (int64_t j = 0; j < k; j++) dp[j] = norm ? (dw[j] - dot) / ws : dw[j];
  for (int64_t j = 0; j < k; j++) pdp += p[sel[j]] * dp[j];
  for (int64_t e = 0; e < E; e++) dl[e] += p[e] * ((gp ? gp[e] : 0.0f) - pdp);
  for (int64_t j = 0; j < k; j++) dl[sel[j]] += p[sel[j]] * dp[j];
}
#endif
