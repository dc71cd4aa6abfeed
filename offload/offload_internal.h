/* offload/offload_internal.h — declarations shared by the .c files of
 * offload/ only (not part of the module's public API, which is offload/offload.h). */
#ifndef SL_OFFLOAD_INTERNAL_H
#define SL_OFFLOAD_INTERNAL_H

#include "kernels/kernels.h"
#include "offload/offload.h"

/* The fused AdamW + bf16 copy of kernels/cpu/adamw.c (same kernel as the
 * op-table entry; p_bf16 may be NULL). Declared here until
 * kernels/cpu/cpu_ops.h carries it. */
void sl_cpu_adamw_bf16(sl_kctx *ctx, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                       float b2, float eps, float wd, int64_t step, float grad_scale, uint16_t *p_bf16);

/* AdamW over elements [base, base+count) of the state: p, m, v, g and the
 * optional outputs point at element `base`; the weight decay of each element
 * comes from ranges (validated, ascending, covering [0, n)) or, when ranges
 * is NULL, from hyper->weight_decay. Calls sl_ops_cpu()->adamw per range
 * (sl_cpu_adamw_bf16 when bf16_out != NULL), then copies p to params_out. */
void sl_offload_adam_segment(float *p, float *m, float *v, const float *g, int64_t base, int64_t count,
                             const sl_adam_range *ranges, int nranges, const sl_adam_hyper *h, float *params_out,
                             uint16_t *bf16_out);

/* 4096 rounding of byte counts. */
static inline int64_t sl_offload_round4k(int64_t b) { return (b + 4095) & ~(int64_t)4095; }

#endif /* SL_OFFLOAD_INTERNAL_H */
