/* plan/planner.h — the planner's model of a training configuration:
 * per-GPU bytes by arena, communication bytes per step by collective kind,
 * compute / communication / step time, and the search over configurations
 * (ZeRO stage, shard group, offload tier, activation checkpointing,
 * micro-batch, tensor and pipeline parallelism).
 *
 * Two layers:
 *   - the engine check (engine/dryrun.h, sl_train_dry_run): the trainer's
 *     own setup and step on the counting backends; exact by construction.
 *     `shardlm plan --engine-check` and the trainer's start-up memory check
 *     use it.
 *   - the search (sl_plan_search): over every candidate configuration, the
 *     memory and bytes of a data-parallel or TP candidate from the
 *     engine's dry run (sl_plan_engine_figures: what the engine itself
 *     allocates and sends, fp32 gradients and activations included; a
 *     layout it refuses is not runnable), a pipeline candidate's from the
 *     dry run of each of its stages, the optimizer tiers by the engine's
 *     rules, and a closed-form time model. Unit
 *     sizes and FLOPs per token come from the model itself
 *     (sl_model_create_specs, vt->flops_per_token).
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

typedef struct sl_plan_dry_memo sl_plan_dry_memo; /* sl_plan_engine_figures' answers (plan/planner.c) */

/* The model as the planner sees it: units over flat buffers. */
typedef struct {
  sl_model_caps caps; /* what the architecture supports (models/model.h) */
  int nunits;
  int64_t *numel;                        /* (nunits) elements of each unit's flat buffer (its experts included) */
  int64_t *enumel;                       /* (nunits) of which experts (a MoE layer's companion unit) */
  int *pinned;                           /* (nunits) tied weights held from forward to backward */
  int64_t nparams;                       /* sum of numel */
  int64_t nactive;                       /* a token's: nparams less the E - k experts it skips a layer (MoE) */
  int64_t L, C, nh, nkv, hd, I, V, Q, A; /* Llama/Mistral shapes (Q = (nh+2nkv)hd, A = nh hd) */
  int64_t La;                            /* the layers that attend (a hybrid's '*' ones; else L) */
  int64_t D, S, K, R;                    /* Mamba: d_inner, d_state, d_conv, dt_rank */
  int64_t E, k, nmoe;                    /* mixture of experts: experts, top-k, MoE layers (0 0 0: dense) */
  sl_model *spec;                        /* the engine's model, specs only (sl_model_create_specs): unit sizes, FLOPs */
  struct sl_plan_dry_memo *dry;          /* the engine's figures asked so far (sl_plan_engine_figures) */
} sl_plan_model;

int sl_plan_model_init(const sl_model_config *cfg, sl_plan_model *out);
void sl_plan_model_free(sl_plan_model *m);
/* Model FLOPs per token of training: the model's own vt->flops_per_token
 * (Llama: 6 N + 12 l h s; Mamba adds its conv and scan). */
double sl_plan_flops_per_token(const sl_plan_model *m, int64_t T);
/* Extra FLOPs per token recomputed in backward for a checkpoint mode. */
double sl_plan_recompute_flops_per_token(const sl_plan_model *m, int64_t T, sl_actckpt ac);

/* GPT-style activation bytes per layer (field guide, 16-bit): s b h
 * (34 + 5 a s / h) with tensor parallel size t, sequence parallel sp and
 * checkpoint mode ac (selective drops the 5as/h attention core, full keeps
 * the 2sbh layer input). */
double sl_plan_gpt_act_bytes(double s, double b, double h, double a, int t, int sp, sl_actckpt ac);

/* One run of the engine: the sizes of plan --engine-check and of a search candidate. */
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
  int gpt_acts;              /* --act-model gpt (the search only) */
  int tp;                    /* --tp */
  int sequence_parallel;     /* --sequence-parallel */
  int pp;                    /* --pp (> 1: --pp-schedule 1f1b, one chunk per rank, train's balanced layout) */
  int ep;                    /* --ep (expert parallelism; 1: none) */
} sl_plan_run;

/* Engine defaults: fp32, prefetch 1, reshard, sync.
 * param_dtype / reduce_dtype names "fp32" | "bf16" (NULL: fp32). */
void sl_plan_run_engine(sl_plan_run *r, const char *param_dtype, const char *reduce_dtype);
/* The train settings of run r (ZeRO, sizes, prefetch, sync, reshard, TP, EP,
 * dtype and checkpointing names; at r->pp > 1 --pp r->pp with 1f1b) into c,
 * the rest of c kept: what the engine's dry run (engine/dryrun.h) takes. */
void sl_plan_run_train_cfg(const sl_plan_run *r, sl_train_cfg *c);

/* What the engine's dry run (engine/dryrun.h) gives a candidate. */
typedef struct {
  int64_t peak[SL_ARENA_COUNT];  /* per-rank high-water bytes per arena over the step */
  int64_t total_peak;            /* high-water of the sum of arenas */
  int64_t start[SL_ARENA_COUNT]; /* bytes held when the step starts (the shards, the optimizer state) */
  uint64_t comm[SL_COLL_NKINDS]; /* bytes per rank per step, shard + replica groups (the metrics' counter) */
  uint64_t comm_total;
  uint64_t tp_comm[SL_COLL_NKINDS]; /* bytes sent on the TP axis per step (0 at T = 1) */
  /* --pp > 1: peak, start and total_peak are the stage whose total_peak is the highest (the first such), comm,
   * comm_total and tp_comm each kind's most over the stages, pp_send / pp_recv the stage's that moves most */
  int stage;                 /* the stage of peak (0 at PP 1) */
  int layers;                /* decoder layers that stage computes (the model's L at PP 1) */
  int nsets;                 /* micro-batches in flight on it (1 at PP 1) */
  uint64_t pp_send, pp_recv; /* bytes sent / received on the PP axis per step (0 at PP 1) */
} sl_plan_figures;

/* The engine's own figures of run r (world, shard_group, zero, micro_batch,
 * seq_len, grad_accum, ac, sync_accum, param_bytes for both dtypes, tp,
 * sequence_parallel, pp; tier none): its dry run as rank 0 with 3 and 4 decoder layers, scaled to the
 * model's (every decoder unit is the same, so each figure is affine in the
 * layer count; tests/unit/kernels/test_count_backend.c holds the scaling
 * equal to the whole model's dry run), remembered in m per key. Under
 * --pp P: the dry run of each stage (its first rank) with train's balanced
 * layout of the model's layers cut to at most 3 and 4 per stage, each
 * stage's figures scaled to its own layer count (affine in it, held exact
 * by the same test). */
int sl_plan_engine_figures(const sl_plan_model *m, const sl_plan_run *r, sl_plan_figures *out);
/* Under --pp (r->pp >= 2): the scaled figures of stage `stage` alone, as sl_plan_engine_figures forms them (not
 * remembered; the test of the scaling compares them with the stage's dry run of the whole model). */
int sl_plan_engine_stage_figures(const sl_plan_model *m, const sl_plan_run *r, int stage, sl_plan_figures *out);

/* ---- expert parallelism: closed forms (docs/planner.md, "Expert parallelism") ---- */
/* Whether the engine takes --ep ep for a layout of TP t and shard group S (ranks a dense tensor is sharded over):
 * the mesh's rule (ep divides S) and engine/expert_par.c's own check (sl_epar_check: the model's experts, --tp),
 * for the CPU backend (device = 0) or a device one (1). 0: refused, the reason in sl_errmsg(). */
int sl_plan_ep_allowed(const sl_plan_model *m, int t, int S, int ep, int device);
/* Bytes one rank sends per step in the expert-parallel all-to-alls of run r (r->ep > 1; 0 otherwise) over `layers`
 * MoE layers, under the balanced routing the engine check counts (models/llama_moe.c): per layer, micro-batch and
 * pass (forward; backward; full checkpointing's recomputed forward) the counts (E/ep int64 to each of the ep - 1
 * peers) and two exchanges of rows of hidden_size fp32 (dispatch and combine), of the N k rows (N = micro_batch x
 * seq_len) those for the other ranks' experts: N k - floor(N k / ep); what a rank sends itself is not counted. */
double sl_plan_ep_alltoall_bytes(const sl_plan_model *m, const sl_plan_run *r, int64_t layers);
/* Per-rank bytes of the parameter, gradient and optimizer-state arenas when a step starts (shard/shardmath.h's
 * slices, aligned to 16): dense tensors sharded over S, each experts unit's 1/ep run (this rank's experts) over the
 * S/ep ranks holding the same experts. params: param_bytes per element of the shard (ZeRO-3) or of the whole held
 * unit; grads: 4 per element of the shard (ZeRO-2/3) or the held unit; optim: 12 (fp32 master, m, v) per element of
 * the optimizer view (ZeRO-0: the held unit). dense[3] and expert[3]: params, grads, optim. */
void sl_plan_ep_states(const sl_plan_model *m, int S, int ep, int zero, int param_bytes, double dense[3],
                       double expert[3]);

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
  int dtype_bytes;               /* gathers and reductions: 2 (--param-dtype / --reduce-dtype bf16) or 4 (fp32) */
  int gpt_acts;                  /* activation model: GPT formula (1) or engine (0) */
  int allow_tp_pp;               /* enumerate TP/PP candidates */
} sl_plan_cluster;

void sl_plan_cluster_defaults(sl_plan_cluster *c);

enum { SL_PLAN_OFF_NONE = 0, SL_PLAN_OFF_CPU = 1, SL_PLAN_OFF_NVME = 2 };
enum { SL_PLAN_AG = 0, SL_PLAN_RS, SL_PLAN_AR, SL_PLAN_P2P, SL_PLAN_A2A, SL_PLAN_NCOMM }; /* A2A: expert all-to-all */

typedef struct {
  /* configuration */
  int zero, shard_group, tp, pp;
  int ep;            /* expert parallelism (1: none; MoE models only) */
  int offload_optim; /* SL_PLAN_OFF_* (--offload-params is not searched: the engine does not move parameters yet) */
  sl_actckpt ac;
  int64_t micro_batch, grad_accum; /* per GPU; grad_accum = micro-batches per step */
  int sync_accum;
  int needs_mode; /* 1: not runnable: the engine's dry run refuses it (train would, with the same message);
                     its memory and bytes are then unknown (0) */
  int peak_stage; /* PP > 1: the stage whose memory is mem (the engine's highest) */
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
/* Every candidate, ranked: fitting ones first by tokens/s; *out is malloc'd.
 * The global batch is met exactly: global_batch not a multiple of seq_len is
 * SL_EINPUT (naming the nearest two), and a layout whose data-parallel degree
 * does not divide the sequences per step is not a candidate. */
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
