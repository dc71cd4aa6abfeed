/* formats/traincfg.h — the training configuration: one table of keys shared
 * by command-line flags (--key value) and --config FILE.json, each with its
 * type, default and help text. Flags override the file. */
#ifndef SL_TRAINCFG_H
#define SL_TRAINCFG_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_PATH_MAX 1024

typedef struct {
  /* model and data */
  char model[SL_PATH_MAX]; /* HF directory (config.json [+ safetensors]) */
  char init[8];            /* hf (the weights of model) | random (from seed; resolved: random without model) */
  char data[SL_PATH_MAX];  /* Megatron dataset prefix; empty: built-in corpus */
  char data_order[16];     /* "sequential" | "shuffled" */
  /* batch */
  int64_t steps, micro_batch, seq_len, grad_accum;
  /* optimizer and schedule */
  double lr, min_lr, weight_decay, beta1, beta2, eps, clip;
  int64_t warmup;
  char lr_schedule[16];     /* cosine | wsd | linear | constant (engine/lr_sched.c) */
  int64_t lr_decay_steps;   /* wsd: steps of the decay phase (0: --lr-decay-frac of --steps) */
  double lr_decay_frac;     /* wsd: the decay phase's fraction of --steps */
  char lr_decay_shape[16];  /* wsd: linear | 1-sqrt */
  int lr_schedule_override; /* --resume: this run's schedule replaces the checkpoint's */
  int lr_given;             /* SL_LR_GIVEN_* bits: schedule keys set by a flag or --config (not a key) */
  int64_t seed;
  /* memory / compute */
  char activation_checkpoint[16]; /* none | selective | full */
  int64_t threads;                /* compute threads per rank (0: cores / local ranks) */
  char backend[16];               /* cpu | cuda | auto */
  /* sharding */
  int64_t zero, prefetch, prefetch_mb, shard_group, nproc;
  int reshard_after_forward, no_sync_accum;
  char param_dtype[8], reduce_dtype[8];
  double comm_timeout;
  /* offload */
  char offload_optimizer[8], offload_params[8];
  char nvme_path[SL_PATH_MAX];
  int64_t offload_budget_mb;
  /* checkpoints */
  char ckpt_dir[SL_PATH_MAX]; /* sharded training checkpoints (empty: none) */
  int64_t ckpt_every, keep_last, max_restarts;
  int resume;
  /* outputs */
  char metrics[SL_PATH_MAX]; /* JSONL; default runs/<...>/metrics.jsonl when empty */
  char save[SL_PATH_MAX];    /* HF directory written at the end */
  char save_dtype[8];        /* auto | fp32 | bf16 | fp16: its weights' dtype */
  char out_dir[SL_PATH_MAX]; /* where default outputs go (empty: runs/RUN_NAME, sl_train_cfg_run_dir) */
  char run_name[128];        /* the run directory's name under runs/ (empty: the start time) */
  int out_dir_auto;          /* out_dir was chosen by sl_train_cfg_run_dir (runs/latest follows it; not a key) */
  double peak_tflops;        /* 0: measured GEMM peak of the backend */
  int64_t log_every;
  int summary; /* print the per-rank summary at the end */
  int plot;    /* draw the metrics SVG at the end */
  int tensorboard; /* TensorBoard scalar events next to the metrics (formats/tbevents.h) */
  /* held-out evaluation (engine/eval.c) */
  char eval_data[SL_PATH_MAX]; /* held-out dataset prefix (empty: --split or none) */
  char holdout[64];            /* --split "98,2,0": document weights over data (empty: none) */
  int64_t eval_every, eval_samples;
  /* non-finite policy (engine/guard.h) */
  char on_nonfinite[8];   /* stop | skip */
  int64_t max_skips;      /* consecutive skips that stop the run */
  int doc_attention_mask; /* attend within documents only, positions per document */
  int64_t eod_id;         /* end-of-document token, only checked against the documents (-1: byte-level 256) */
  int skip_memory_check;  /* start even when the predicted peak does not fit */
  int allow_long_context; /* --seq-len may exceed max_position_embeddings */
  char compute_dtype[8];  /* fp32 | bf16 | auto (docs/bf16.md) */
  char residual_dtype[8]; /* fp32 | bf16 | auto (docs/bf16.md "The residual stream") */
  char tf32[8];           /* auto | true | false: fp32 GEMMs on TF32 tensor cores (device backends) */
  int param_dtype_given;  /* --param-dtype set by a flag or --config (not a key) */
  int64_t tp;             /* tensor-parallel degree T (1: none) */
  int sequence_parallel;  /* --sequence-parallel: with tp > 1, norms and residual on N/T tokens per rank */
  int64_t ep;             /* expert-parallel degree (1: none; docs/moe.md) */
  /* pipeline parallelism (engine/schedule_pp.c, docs/pipeline.md) */
  int64_t pp;           /* pipeline stages P (1: none) */
  char pp_schedule[16]; /* gpipe | 1f1b | interleaved | zb1p */
  int64_t pp_virtual;   /* interleaved: chunks per rank V */
  char pp_layout[256];  /* decoder layers per virtual stage "5,4,4,5" (empty: balanced) */
  int pp_dry_run;       /* print the schedule, write pipeline.svg, do not train (engine/report_pp.c) */
  /* mixture of experts: routing and balance (models/llama_moe.c, docs/models.md) */
  double moe_capacity_factor; /* Megatron-Core's capacity factor (0: dropless) */
  double moe_z_loss_coef;     /* router z-loss coefficient (0: none) */
  char moe_balance[8];        /* aux | bias | none */
  double moe_bias_rate;       /* --moe-balance bias: the expert bias's update rate */
  int moe_bias_rate_given;    /* --moe-bias-rate set by a flag or --config (not a key): refused without bias */
} sl_train_cfg;

/* The schedule keys, in the order of their SL_LR_GIVEN_* bits (1 << i). */
#define SL_LR_SCHED_NKEYS 4
extern const char *const sl_lr_sched_keys[SL_LR_SCHED_NKEYS];
/* The schedule's settings are consistent (names, the wsd decay phase inside
 * the steps after warmup); else SL_EINPUT naming the flag. */
int sl_train_cfg_check_lr(const sl_train_cfg *c);
/* The value key `name` has in a sl_train_cfg_canonical text (NULL: absent),
 * copied into buf. */
const char *sl_train_cfg_canonical_get(const char *text, const char *name, char *buf, size_t cap);

void sl_train_cfg_defaults(sl_train_cfg *c);
/* Applies a JSON object's keys (same names as the flags, '-' or '_'). */
int sl_train_cfg_load_json(sl_train_cfg *c, const char *path);
/* The same from a YAML mapping of settings (FILE.yaml / FILE.yml: one
 * scalar per key; an unknown key, a list or a mapping as a value, or a
 * second document is refused naming FILE:LINE and the key). */
int sl_train_cfg_load_yaml(sl_train_cfg *c, const char *path);
/* --config FILE: YAML for .yaml / .yml, else JSON. */
int sl_train_cfg_load(sl_train_cfg *c, const char *path);
/* Every setting as YAML (name: value lines, strings double-quoted), with the
 * build and the extra "_"-keys as sl_train_cfg_json; the caller frees it. */
char *sl_train_cfg_yaml(const sl_train_cfg *c, const char *const *extra);
/* Parses argv[i..] flags. Unknown flags are an error. --config is applied
 * first wherever it appears. */
int sl_train_cfg_parse_args(sl_train_cfg *c, int argc, char **argv);
/* One flag of another tool (shardlm plan, pp-schedule) that is a setting of
 * train (name without "--", e.g. "tp"): value parsed and range-checked into c
 * as train parses it, so the flag has one spelling, one range and one message
 * everywhere ("command line: --tp must be in [1, 4096], found '0'"). A name
 * that is not a setting: SL_EINTERNAL. */
int sl_train_cfg_set(sl_train_cfg *c, const char *name, const char *value);
/* 1 when the run computes in bf16 (--compute-dtype; `auto`: bf16 on a
 * device backend, fp32 on the CPU); the trainer sets its kernel context so. */
int sl_train_cfg_compute_bf16(const sl_train_cfg *c, int device);
/* Resolves the `auto`s for a run on a device backend (device 1) or the CPU:
 * --compute-dtype (and with bf16 --param-dtype bf16 unless given) and
 * --tf32 (auto: on for a device run's fp32 GEMMs under bf16 compute),
 * --init random for the built-in model (no --model).
 * --tf32 true on the CPU: SL_EINPUT naming the flag. */
int sl_train_cfg_resolve(sl_train_cfg *c, int device);
/* 1 when the resolved settings put fp32 GEMMs on TF32 tensor cores. */
int sl_train_cfg_tf32(const sl_train_cfg *c);
/* 1 when it computes in bf16 and --residual-dtype is not fp32: the models
 * that follow it (sl_block_kind bf16_acts) round and store the residual
 * stream in bf16 (sl_model_layout res_bf16). */
int sl_train_cfg_residual_bf16(const sl_train_cfg *c, int device);
/* Prints every key with its default and help. */
void sl_train_cfg_usage(FILE *f);
/* A canonical text of the settings that must agree across ranks. */
int sl_train_cfg_canonical(const sl_train_cfg *c, char *buf, int64_t cap);
/* The run's output directory when --out-dir is not given: runs/RUN_NAME
 * (--run-name, else the local start time YYYYmmdd-HHMMSS; a name taken
 * gets -2, -3, ...), or, resuming, the directory the checkpoint's run
 * recorded in CKPT_DIR/run-dir, so a resumed run appends to its own files.
 * Sets out_dir_auto. A no-op when --out-dir is set. */
int sl_train_cfg_run_dir(sl_train_cfg *c);
/* Every setting after defaults as a JSON object that --config reads back,
 * with "_shardlm" (the build) and the extra "_"-keys given (--config ignores
 * keys that start with "_"); NULL-terminated key/value string pairs. The
 * caller frees the text. */
char *sl_train_cfg_json(const sl_train_cfg *c, const char *const *extra);

#ifdef __cplusplus
}
#endif
#endif /* SL_TRAINCFG_H */
