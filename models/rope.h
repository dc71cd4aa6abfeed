/* models/rope.h — the rotary embedding's per-pair frequency table, which a
 * model computes and the kernels' rope ops read (kernels/kernels.h:
 * rope_fwd, rope_doc_fwd and their backwards take inv_freq, hd/2 floats of
 * backend memory). One C function per frequency rule; a scaled rule (e.g. a
 * published model's rope_scaling) is one more function here. */
#ifndef SL_ROPE_H
#define SL_ROPE_H

#include <stdint.h>

#include "kernels/kernels.h"

/* out[i] = 1 / theta^(2i/hd), i < hd/2, in fp32 as torch computes it
 * (exponent (float)(2i) / (float)hd, powf, fp32 division): the values the
 * rope kernels computed from theta themselves before the table existed. */
void sl_rope_inv_freq(float *out, int64_t hd, float theta);

/* A table of backend memory (ops->alloc, ops->upload) holding host[0..hd/2);
 * NULL with a message when it cannot be allocated. Free with ops->free.
 * Small (hd/2 floats) and not counted in an arena. */
float *sl_rope_table_upload(const sl_ops *ops, sl_kctx *k, const float *host, int64_t hd);

#endif
