/* models/rope.c — the rotary embedding's frequency table (models/rope.h). */
#include "models/rope.h"

#include <math.h>

void sl_rope_inv_freq(float *out, int64_t hd, float theta) {
  for (int64_t i = 0; i < hd / 2; i++) {
    float e = (float)(2 * i) / (float)hd;
    out[i] = 1.0f / powf(theta, e);
  }
}

float *sl_rope_table_upload(const sl_ops *ops, sl_kctx *k, const float *host, int64_t hd) {
  size_t bytes = (size_t)(hd / 2) * sizeof(float);
  float *t = ops->alloc(k, bytes); /* NULL with a message (kernels/kernels.h) */
  if (t && bytes) ops->upload(k, t, host, bytes);
  return t;
}
