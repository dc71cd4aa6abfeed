/* plan/planner.h — the planner's model of a training configuration:
 * per-GPU bytes by arena, communication bytes per step by collective kind,
 * compute / communication / step time, and the search over configurations
 * (ZeRO stage, shard group, offload tier, activation checkpointing,
 * micro-batch, and analytic tensor / pipeline parallelism).
 *
 * Two layers:
 *   - the engine check (engine/dryrun.h, sl_train_dry_run): the trainer's
 *     own setup and step on the counting backends; exact by construction.
 *     `shardlm plan --engine-check` and the trainer's start-up memory check
 *     use it.
 *   - the search (sl_plan_search): a closed-form replay (sl_plan_simulate)
 *     of the FSDP schedule, re-parameterised for GPU mixed precision the
 *     CPU engine does not run (bf16 compute, no fp32 expansion), plus a time
 *     model, over every candidate configuration. Unit sizes and FLOPs per
 *     token come from the model itself (sl_model_create_specs,
 *     vt->flops_per_token); activation sizes from the model's own
 *     allocations. tests/unit/kernels/test_count_backend.c holds the replay equal to the
 *     engine check for the engine's own dtypes.
 * Formulas and assumptions: docs/planner.md.
 */
#ifndef SL_PLANNER_H
#define SL_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "formats/hfconfig.h"
#include "formats/traincfg.h"
#include "models/model.h"
#include "shard/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t B, T;
  int ac;
  int64_t acts, ws;
} sl_plan_acts_entry;
typedef struct {
  int n;
  sl_plan_acts_entry e[64];
} sl_plan_acts_memo; /* sl_plan_engine_acts' answers, remembered */

/* The model as the planner sees it: units over flat buffers. */
typedef struct {
  sl_model_caps caps; /* what the architecture supports (models/model.h) */
  int nunits;
  int64_t *numel;                        /* (nunits) elements of each unit's flat buffer */
  int *pinned;                           /* (nunits) tied weights held from forward to backward */
  int64_t nparams;                       /* sum of numel */
  int64_t L, C, nh, nkv, hd, I, V, Q, A; /* Llama/Mistral shapes (Q = (nh+2nkv)hd, A = nh hd) */
  int64_t D, S, K, R;                    /* Mamba: d_inner, d_state, d_conv, dt_rank */
  sl_model *spec;                        /* the engine's model, specs only (sl_model_create_specs): unit sizes, FLOPs */
  sl_plan_acts_memo *memo;               /* activation sizes asked so far */
} sl_plan_model;

int sl_plan_model_init(const sl_model_config *cfg, sl_plan_model *out);
void sl_plan_model_free(sl_plan_model *m);
/* Model FLOPs per token of training: the model's own vt->flops_per_token
 * (Llama: 6 N + 12 l h s; Mamba adds its conv and scan). */
double sl_plan_flops_per_token(const sl_plan_model *m, int64_t T);
/* Extra FLOPs per token recomputed in backward for a checkpoint mode. */
double sl_plan_recompute_flops_per_token(const sl_plan_model *m, int64_t T, sl_actckpt ac);

/* Activation (kept for backward) and workspace (backward scratch) element
 * counts of the engine's model for a B x T micro-batch: what sl_model_create
 * allocates (run on the counting op table: address space only). */
int sl_plan_engine_acts(const sl_plan_model *m, int64_t B, int64_t T, sl_actckpt ac, int64_t *acts_elems,
                        int64_t *ws_elems);

/* GPT-style activation bytes per layer (field guide, 16-bit): s b h
 * (34 + 5 a s / h) with tensor parallel size t, sequence parallel sp and
 * checkpoint mode ac (selective drops the 5as/h attention core, full keeps
 * the 2sbh layer input). */
double sl_plan_gpt_act_bytes(double s, double b, double h, double a, int t, int sp, sl_actckpt ac);

/* One run of the engine (or its GPU mixed-precision counterpart). */
typedef struct {
  int world, shard_group, zero; /* shard_group 0 = world */
  int64_t micro_batch, seq_len, grad_accum;
  sl_actckpt ac;
  int prefetch;              /* engine default 1 */
  int64_t prefetch_bytes;    /* 0: no budget */
  int reshard_after_forward; /* engine default 1 */
  int sync_accum;            /* engine default 1 */
  int param_bytes;           /* gathered parameter dtype size, 4 | 2 */
  int reduce_bytes;          /* reduction dtype size, 4 | 2 */
  int grad_bytes;            /* gradient buffers (engine: 4) */
  int act_bytes;             /* activation element size (engine: 4) */
  int expand_fp32;           /* bf16 params expanded to fp32 for compute (engine CPU) */
  int reduce_copy;           /* bf16 reduction via send/recv copies (engine CPU) */
  int64_t align;             /* elements (trainer: 16) */
  int gpt_acts;              /* activations from the GPT formula instead of the engine's */
  int tp;                    /* activation split (sequence parallel) for analytic TP */
  int sequence_parallel;     /* engine check at tp > 1: --sequence-parallel */
} sl_plan_run;

/* Engine CPU defaults: fp32 everything, prefetch 1, reshard, sync, align 16.
 * param_dtype / reduce_dtype names "fp32" | "bf16" (NULL: fp32). */
void sl_plan_run_engine(sl_plan_run *r, const char *param_dtype, const char *reduce_dtype);
/* The train settings of run r (ZeRO, sizes, prefetch, sync, reshard, TP,
 * dtype and checkpointing names) into c, the rest of c kept: what the
 * engine's dry run (engine/dryrun.h) takes. */
void sl_plan_run_train_cfg(const sl_plan_run *r, sl_train_cfg *c);

typedef struct {
  int64_t peak[SL_ARENA_COUNT];  /* per-rank high-water bytes per arena over the steps */
  int64_t total_peak;            /* high-water of the sum of arenas */
  int64_t start[SL_ARENA_COUNT]; /* bytes held when the step loop starts */
  uint64_t comm[SL_COLL_NKINDS]; /* bytes per rank per step, shard + replica (engine counter) */
  uint64_t comm_total;
  uint64_t comm_shard_micro[SL_COLL_NKINDS]; /* shard group, one middle micro-batch */
  uint64_t comm_rep_micro;                   /* replica all-reduce bytes per micro-batch */
  uint64_t comm_step_only;                   /* shard bytes once per step (optimizer / end gathers) */
  int64_t acc_bytes;                         /* reduced-gradient shards (grads arena, persistent) */
  int64_t shard_param_bytes;                 /* ZeRO-3 parameter shards */
  int shard_size, replica_size;
} sl_plan_mem;

/* The search's closed-form replay of two optimizer steps of the FSDP
 * schedule (rank 0 of the first shard group; every rank holds the same
 * shard sizes), for dtypes and activation models the engine does not run.
 * What the engine itself does: sl_train_dry_run (engine/dryrun.h). */
int sl_plan_simulate(const sl_plan_model *m, const sl_plan_run *r, sl_plan_mem *out);

/* Field-guide closed forms for GPT-style models: parameters of l layers of
 * width h, vocabulary V, s learned positions: 12 l h^2 + 13 l h + (V + s) h. */
double sl_plan_gpt_params(double l, double h, double V, double s);
/* Bytes per GPU of model states for `params` parameters per GPU (after any
 * TP/PP split), ZeRO stage over d ranks: param_bytes / grad_bytes each,
 * optim_bytes per parameter of optimizer state (12: fp32 master, m, v). */
void sl_plan_model_states(double params, int zero, int d, int param_bytes, int grad_bytes, int optim_bytes,
                          double *p_bytes, double *g_bytes, double *o_bytes);

/* ---- search --------------------------------------------------------------- */
typedef struct {
  int gpus, gpus_per_node;
  double gpu_mem;                /* bytes per GPU */
  double host_mem;               /* bytes per node (0: no host offload) */
  int nvme;                      /* NVMe tier available */
  double intra_bw, inter_bw;     /* GB/s bus bandwidth per GPU inside / across nodes */
  double tflops;                 /* peak dense TFLOPS per GPU */
  double efficiency;             /* achieved fraction of the peak for model compute */
  double pcie_bw;                /* GB/s host <-> GPU per GPU */
  double nvme_bw;                /* GB/s per GPU */
  double cpu_adam;               /* parameters per second per GPU's share of the host */
  double hbm_bw;                 /* GB/s, GPU optimizer step */
  double margin;                 /* usable fraction of gpu_mem / host_mem */
  int64_t seq_len, global_batch; /* tokens per step (all GPUs) */
  int dtype_bytes;               /* 2: bf16 params/grads + fp32 master/m/v; 4: fp32 */
  int gpt_acts;                  /* activation model: GPT formula (1) or engine (0) */
  int allow_tp_pp;               /* enumerate analytic TP/PP candidates */
} sl_plan_cluster;

void sl_plan_cluster_defaults(sl_plan_cluster *c);

enum { SL_PLAN_OFF_NONE = 0, SL_PLAN_OFF_CPU = 1, SL_PLAN_OFF_NVME = 2 };
enum { SL_PLAN_AG = 0, SL_PLAN_RS, SL_PLAN_AR, SL_PLAN_P2P, SL_PLAN_NCOMM };

typedef struct {
  /* configuration */
  int zero, shard_group, tp, pp;
  int offload_optim;  /* SL_PLAN_OFF_* */
  int offload_params; /* ZeRO-3: parameter and gradient shards on the host */
  sl_actckpt ac;
  int64_t micro_batch, grad_accum; /* per GPU; grad_accum = micro-batches per step */
  int sync_accum;
  int needs_mode; /* 1: needs a mode train does not have (none since TP x PP trains; kept in the JSON) */
  /* memory per GPU (bytes) */
  double mem[SL_ARENA_COUNT];
  double gpu_total, host_per_gpu, nvme_per_gpu;
  int fits;
  /* communication per step per GPU: bytes and seconds by kind */
  double comm_bytes[SL_PLAN_NCOMM], comm_s[SL_PLAN_NCOMM];
  int shard_inter, replica_inter; /* groups cross nodes */
  /* time per step (seconds) */
  double compute_s, recompute_s, bubble_s, exposed_s, optim_s, offload_s, step_s;
  double tokens_s, mfu, comm_compute_ratio;
} sl_plan_cand;

/* Evaluates one candidate (configuration fields filled) in place. */
int sl_plan_eval(const sl_plan_model *m, const sl_plan_cluster *c, sl_plan_cand *x);
/* Every candidate, ranked: fitting ones first by tokens/s; *out is malloc'd. */
int sl_plan_search(const sl_plan_model *m, const sl_plan_cluster *c, sl_plan_cand **out, int *n);
/* Index of the recommended candidate (-1: none fits); writes one or two
 * sentences saying why into buf. */
int sl_plan_recommend(const sl_plan_cand *c, int n, const sl_plan_cluster *cl, char *buf, size_t cap);
/* "ZeRO-3 S=8 ..." one-line description. */
void sl_plan_describe(const sl_plan_cand *x, char *buf, size_t cap);

/* Parses "80G", "24GiB", "1.5e9", "512M" (decimal G = 1e9, GiB = 2^30). */
int sl_plan_parse_size(const char *s, double *out);

#ifdef __cplusplus
}
#endif
#endif /* SL_PLANNER_H */
