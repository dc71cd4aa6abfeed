/* kernels/cpu/ops_table.c — assembles the CPU op table: the fp32 ops here,
 * wrapped by the shared bf16-compute layer (kernels/bf16.h) into the table
 * sl_ops_cpu returns. */
#include <pthread.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

static const sl_ops g_cpu_fp32 = {
    .name = "cpu",
    .ctx_create = sl_cpu_ctx_create,
    .ctx_destroy = sl_cpu_ctx_destroy,
    .ctx_scratch_bytes = sl_cpu_ctx_scratch_bytes,
    .embedding_fwd = sl_cpu_embedding_fwd,
    .embedding_bwd = sl_cpu_embedding_bwd,
    .rmsnorm_fwd = sl_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = sl_cpu_rmsnorm_bwd,
    .rmsnorm_rowsum = sl_cpu_rmsnorm_rowsum,
    .rmsnorm_fwd_sum = sl_cpu_rmsnorm_fwd_sum,
    .rmsnorm_bwd_sum = sl_cpu_rmsnorm_bwd_sum,
    .linear_fwd = sl_cpu_linear_fwd,
    .linear_bwd = sl_cpu_linear_bwd,
    .rope_fwd = sl_cpu_rope_fwd,
    .rope_bwd = sl_cpu_rope_bwd,
    .attention_fwd = sl_cpu_attention_fwd,
    .attention_bwd = sl_cpu_attention_bwd,
    .swiglu_fwd = sl_cpu_swiglu_fwd,
    .swiglu_bwd = sl_cpu_swiglu_bwd,
    .geglu_fwd = sl_cpu_geglu_fwd,
    .geglu_bwd = sl_cpu_geglu_bwd,
    .add_inplace = sl_cpu_add_inplace,
    .scale_add = sl_cpu_scale_add,
    .softcap = sl_cpu_softcap,
    .lmhead_ce_fwd = sl_cpu_lmhead_ce_fwd,
    .lmhead_ce_bwd = sl_cpu_lmhead_ce_bwd,
    .adamw = sl_cpu_adamw,
    .sumsq = sl_cpu_sumsq,
    .f32_to_bf16 = sl_cpu_f32_to_bf16,
    .bf16_to_f32 = sl_cpu_bf16_to_f32,
    .round_bf16 = sl_cpu_round_bf16,
    .conv1d_fwd = sl_cpu_conv1d_fwd,
    .conv1d_bwd = sl_cpu_conv1d_bwd,
    .silu_fwd = sl_cpu_silu_fwd,
    .silu_bwd = sl_cpu_silu_bwd,
    .relu2_fwd = sl_cpu_relu2_fwd,
    .relu2_bwd = sl_cpu_relu2_bwd,
    .gate_fwd = sl_cpu_gate_fwd,
    .gate_bwd = sl_cpu_gate_bwd,
    .scan_fwd = sl_cpu_scan_fwd,
    .scan_bwd = sl_cpu_scan_bwd,
    .ssd_fwd = sl_cpu_ssd_fwd,
    .ssd_bwd = sl_cpu_ssd_bwd,
    .alloc = sl_cpu_alloc,
    .free = sl_cpu_free,
    .zero = sl_cpu_zero,
    .copy = sl_cpu_copy,
    .upload = sl_cpu_upload,
    .download = sl_cpu_download,
    .sum = sl_cpu_sum,
    .sync = sl_cpu_sync,
    .is_device = sl_cpu_is_device,
    .stream = sl_cpu_stream,
    .scalars_reserve = sl_cpu_scalars_reserve,
    .scalar_acc = sl_cpu_scalar_acc,
    .scalar_add = sl_cpu_scalar_add,
    .scalars_fetch = sl_cpu_scalars_fetch,
    .dev_stats = sl_cpu_dev_stats,
    .vocab_embedding_fwd = sl_cpu_vocab_embedding_fwd,
    .vocab_embedding_bwd = sl_cpu_vocab_embedding_bwd,
    .lmhead_vp_fwd = sl_cpu_lmhead_vp_fwd,
    .lmhead_vp_rescale = sl_cpu_lmhead_vp_rescale,
    .lmhead_vp_loss = sl_cpu_lmhead_vp_loss,
    .lmhead_vp_bwd = sl_cpu_lmhead_vp_bwd,
    .moe_route_fwd = sl_cpu_moe_route_fwd,
    .moe_route_bwd = sl_cpu_moe_route_bwd,
    .moe_permute_fwd = sl_cpu_moe_permute_fwd,
    .moe_permute_bwd = sl_cpu_moe_permute_bwd,
    .moe_combine_fwd = sl_cpu_moe_combine_fwd,
    .moe_combine_bwd = sl_cpu_moe_combine_bwd,
};

const sl_bf16_impl sl_cpu_bf16_impl = {&g_cpu_fp32,
                                       sl_cpu_round_rows,
                                       sl_cpu_bf16_linear_fwd,
                                       sl_cpu_bf16_linear_bwd,
                                       sl_cpu_bf16_lmhead_ce_fwd,
                                       sl_cpu_bf16_lmhead_ce_bwd,
                                       NULL, /* attention: the fp32 op (the oracle) */
                                       NULL,
                                       0}; /* no TF32 mode: fp32 GEMMs are exact */

static sl_ops g_cpu_ops;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;
static void build(void) { g_cpu_ops = sl_bf16_ops(&g_cpu_fp32); }

const sl_ops *sl_ops_cpu(void) {
  pthread_once(&g_cpu_once, build);
  return &g_cpu_ops;
}
