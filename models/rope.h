/* models/rope.h — the rotary embedding's per-pair frequency table, which a
 * model computes and the kernels' rope ops read (kernels/kernels.h:
 * rope_fwd and rope_bwd take inv_freq, hd/2 floats of
 * backend memory). One C function per frequency rule; a scaled rule (e.g. a
 * published model's rope_scaling) is one more function here. */
#ifndef SL_ROPE_H
#define SL_ROPE_H

#include <stdint.h>

#include "formats/hfconfig.h"
#include "kernels/kernels.h"

/* out[i] = 1 / theta^(2i/hd), i < hd/2, in fp32 as torch computes it
 * (exponent (float)(2i) / (float)hd, powf, fp32 division): the values the
 * rope kernels computed from theta themselves before the table existed. */
void sl_rope_inv_freq(float *out, int64_t hd, float theta);

/* The scaled rules of transformers' modeling_rope_utils.py
 * (_compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
 * _compute_yarn_parameters), each on top of sl_rope_inv_freq, in its
 * expression order and float32 roundings. YaRN's attention factor (a cos/sin
 * multiplier) is not part of the table: see sl_rope_score_scale. */
void sl_rope_inv_freq_linear(float *out, int64_t hd, float theta, double factor);
void sl_rope_inv_freq_llama3(float *out, int64_t hd, float theta, double factor, double low_freq_factor,
                             double high_freq_factor, int64_t old_context_len);
void sl_rope_inv_freq_yarn(float *out, int64_t hd, double theta, double factor, double beta_fast, double beta_slow,
                           int64_t original_max_pos, int truncate);
/* The table of c's rule (c->rope_scaling over head_dim and rope_theta). */
void sl_rope_inv_freq_cfg(float *out, const sl_model_config *c);

/* The softmax scale of attention under c's rule: 1 / sqrt(head_dim), times
 * the square of YaRN's attention factor (HF multiplies cos and sin by it, so
 * both q and k carry it into q.k). Exactly 1.0f / sqrtf((float)hd) when the
 * factor is 1 (the kernels' scale before they took one). */
float sl_rope_score_scale(const sl_model_config *c);
/* The same factor alone (attention_factor^2; 1 without YaRN), for code that
 * scales scores in double (models/generate.c). */
double sl_rope_score_factor(const sl_model_config *c);

/* A table of backend memory (ops->alloc, ops->upload) holding host[0..hd/2);
 * NULL with a message when it cannot be allocated. Free with ops->free.
 * Small (hd/2 floats) and not counted in an arena. */
float *sl_rope_table_upload(const sl_ops *ops, sl_kctx *k, const float *host, int64_t hd);

#endif
