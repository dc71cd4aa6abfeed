/* models/rope.c — the rotary embedding's frequency table (models/rope.h). */
#include "models/rope.h"

#include <math.h>
#include <string.h>

#define SL_PI 3.14159265358979323846 /* math.pi */

void sl_rope_inv_freq(float *out, int64_t hd, float theta) {
  for (int64_t i = 0; i < hd / 2; i++) {
    float e = (float)(2 * i) / (float)hd;
    out[i] = 1.0f / powf(theta, e);
  }
}

/* The rules below follow transformers' modeling_rope_utils.py operation by
 * operation in float32, as its torch ops round: a Python scalar meets a
 * float32 tensor as a float ((float)factor), `x / t` is t.reciprocal() * x,
 * and the Python-side quantities (thresholds, the YaRN correction range) are
 * doubles rounded to float where they meet the tensor. */

void sl_rope_inv_freq_linear(float *out, int64_t hd, float theta, double factor) {
  sl_rope_inv_freq(out, hd, theta);
  for (int64_t i = 0; i < hd / 2; i++) out[i] = out[i] / (float)factor; /* inv_freq /= factor */
}

void sl_rope_inv_freq_llama3(float *out, int64_t hd, float theta, double factor, double low_freq_factor,
                             double high_freq_factor, int64_t old_context_len) {
  sl_rope_inv_freq(out, hd, theta);
  const float lo_wl = (float)((double)old_context_len / low_freq_factor);
  const float hi_wl = (float)((double)old_context_len / high_freq_factor);
  const float two_pi = (float)(2 * SL_PI), f = (float)factor, old = (float)old_context_len;
  const float lf = (float)low_freq_factor, span = (float)(high_freq_factor - low_freq_factor);
  for (int64_t i = 0; i < hd / 2; i++) {
    float inv = out[i];
    float wavelen = (1.0f / inv) * two_pi;               /* 2 * math.pi / inv_freq */
    float inv_l = wavelen > lo_wl ? inv / f : inv;       /* where(wavelen > low_freq_wavelen, ...) */
    float smooth = ((1.0f / wavelen) * old - lf) / span; /* (old / wavelen - low) / (high - low) */
    float smoothed = (1.0f - smooth) * inv_l / f + smooth * inv_l;
    int medium = !(wavelen < hi_wl) && !(wavelen > lo_wl);
    out[i] = medium ? smoothed : inv_l;
  }
}

/* find_correction_dim, in double as Python computes it */
static double yarn_corr_dim(double nrot, double dim, double base, double maxpos) {
  return (dim * log(maxpos / (nrot * 2 * SL_PI))) / (2 * log(base));
}

void sl_rope_inv_freq_yarn(float *out, int64_t hd, double theta, double factor, double beta_fast, double beta_slow,
                           int64_t original_max_pos, int truncate) {
  const int64_t h2 = hd / 2;
  double low = yarn_corr_dim(beta_fast, (double)hd, theta, (double)original_max_pos);
  double high = yarn_corr_dim(beta_slow, (double)hd, theta, (double)original_max_pos);
  if (truncate) {
    low = floor(low);
    high = ceil(high);
  }
  if (low < 0) low = 0;                                 /* max(low, 0) */
  if (high > (double)(hd - 1)) high = (double)(hd - 1); /* min(high, dim - 1) */
  if (low == high) high += 0.001;                       /* linear_ramp_factor: prevent singularity */
  const float fmin = (float)low, range = (float)(high - low), f = (float)factor;
  for (int64_t i = 0; i < h2; i++) {
    float pos_freq = powf((float)theta, (float)(2 * i) / (float)hd); /* base ** (arange(0, dim, 2) / dim) */
    float extra = 1.0f / pos_freq, inter = 1.0f / (pos_freq * f);
    float ramp = ((float)i - fmin) / range;
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp; /* torch.clamp(linear_func, 0, 1) */
    float ef = 1.0f - ramp;                    /* inv_freq_extrapolation_factor */
    out[i] = inter * (1.0f - ef) + extra * ef;
  }
}

void sl_rope_inv_freq_cfg(float *out, const sl_model_config *c) {
  const sl_rope_scaling *r = &c->rope_scaling;
  int64_t hd = c->head_dim;
  float theta = (float)c->rope_theta;
  switch (r->type) {
  case SL_ROPE_LINEAR: sl_rope_inv_freq_linear(out, hd, theta, r->factor); break;
  case SL_ROPE_LLAMA3:
    sl_rope_inv_freq_llama3(out, hd, theta, r->factor, r->low_freq_factor, r->high_freq_factor,
                            r->original_max_position_embeddings);
    break;
  case SL_ROPE_YARN:
    sl_rope_inv_freq_yarn(out, hd, c->rope_theta, r->factor, r->beta_fast, r->beta_slow,
                          r->original_max_position_embeddings, r->truncate);
    break;
  default: sl_rope_inv_freq(out, hd, theta); break;
  }
}

float *sl_rope_table_upload(const sl_ops *ops, sl_kctx *k, const float *host, int64_t hd) {
  size_t bytes = (size_t)(hd / 2) * sizeof(float);
  float *t = ops->alloc(k, bytes); /* NULL with a message (kernels/kernels.h) */
  if (t && bytes) ops->upload(k, t, host, bytes);
  return t;
}

double sl_rope_score_factor(const sl_model_config *c) {
  double af = c->rope_scaling.type == SL_ROPE_YARN ? c->rope_scaling.attention_factor : 1.0;
  return af * af;
}

float sl_rope_score_scale(const sl_model_config *c) {
  double f = sl_rope_score_factor(c);
  return f == 1.0 ? 1.0f / sqrtf((float)c->head_dim) : (float)(f / sqrt((double)c->head_dim));
}
