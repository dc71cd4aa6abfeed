/* engine/trainer_internal.h — the trainer's state, shared by the files of
 * the training loop (trainer.c: setup, step, loop; report.c: metrics and
 * summary; dump.c: the reference-test dump). Not a public interface. */
#ifndef SL_TRAINER_INTERNAL_H
#define SL_TRAINER_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "data/sampler.h"
#include "engine/eval.h"
#include "engine/expert_par.h"
#include "engine/guard.h"
#include "engine/schedule.h"
#include "engine/schedule_pp.h"
#include "engine/tensor_par.h"
#include "formats/traincfg.h"
#include "models/model.h"
#include "offload/offload.h"
#include "shard/comm.h"
#include "shard/fsdp.h"
#include "shard/mesh.h"

/* setup_data (engine/trainer.c) and the step's loader: the data and the batch. */
typedef struct {
  sl_sampler *smp;      /* the datasets of --data, their loss masks, the data order */
  sl_eval_data *ev;     /* held-out stream (NULL: none) */
  int64_t G;            /* samples per optimizer step (all ranks) */
  int64_t next_sample;  /* global index of the first sample of the next step */
  int32_t *tok, *tgt;   /* (B*T) */
  int32_t *seg, *dseg;  /* (B*T) document start per token (--doc-attention-mask); dseg: backend */
  int32_t *dtok, *dtgt; /* (B*T) the batch in backend memory (= tok/tgt on the CPU) */
  int64_t count;        /* targets that count in this step's loss, all ranks */
} trainer_data;

/* setup_mesh: this rank's place in the mesh (shard/mesh.h); fsdp runs on its dp_shard x dp_replicate comms. */
typedef struct {
  sl_par_mesh *pmesh;
  int dp_rank, dp_size; /* this rank's index in the dp group and its size (world / (TP x PP)) */
  sl_pp_plan *pplan;    /* --pp > 1: this rank's stage (engine/schedule_pp.h); NULL otherwise */
  sl_tpar tp;           /* tensor parallelism: T, the TP axis, the loss's ranks (engine/tensor_par.h) */
  sl_epar ep;           /* expert parallelism: E, the ep axis (engine/expert_par.h) */
} trainer_par;

/* setup_state: the optimizer state and its staging. */
typedef struct {
  sl_optstate **opt; /* (nunits) each unit view's optimizer state (offload/optstate; NULL: none) */
  sl_tier tier;      /* where the optimizer state lives */
  float *hview;      /* (max view) host staging: NVMe updates, downloaded grads */
  float *dview;      /* (max view) backend staging of host-side optimizer results */
  float *hgrad;      /* (max view) host copy of a device gradient view */
  int64_t max_view, staging_bytes;
  float **ck[3]; /* (nunits) host arrays a checkpoint reads / fills */
} trainer_state;

#define SL_PROG_WIN 20 /* steps in the progress window: smoothed tokens/s, ETA */

/* The run's reports (engine/report.c): the metrics file and the counters at its last line. */
typedef struct {
  double peak_flops; /* per rank */
  char metrics_path[SL_PATH_MAX + 64];
  FILE *metrics;
  struct sl_tb *tb;                 /* rank 0, --tensorboard: the events file (NULL: none) */
  uint64_t prev_bytes, prev_wait;   /* comm counters at the last metrics line */
  uint64_t prev_a2a;                /* --ep > 1: ns inside the all-to-alls at the last metrics line */
  uint64_t prev_tp[SL_COLL_NKINDS]; /* TP comm bytes per kind at the last metrics line */
  uint64_t prev_pp[3];              /* --pp > 1: DP bytes sent, PP bytes sent / received at the last metrics line */
  sl_dev_stats prev_dev;            /* the backend's counters (ops dev_stats) at the last metrics line */
  /* progress (sl_trainer_progress): a window of the last SL_PROG_WIN steps of this process */
  double prog_dt[SL_PROG_WIN];      /* their step times */
  double prog_end[SL_PROG_WIN + 1]; /* wall seconds at the end of each (slot j % (WIN+1) after j steps; 0: start) */
  int64_t prog_done;                /* steps this process has trained */
  double elapsed_s, eta_s, tps_avg, mfu_avg;
} trainer_report;

typedef struct {
  /* setup_cfg: the run */
  sl_train_cfg cfg;
  const sl_model_config
      *dry; /* the dry run's model (engine/dryrun.c): count backend, no data, no outputs; NULL: a run */
  sl_comm *world;
  int rank, wsize;
  int optim;          /* 0: no optimizer state (shardlm eval) */
  int nodata;         /* a forward session (engine/fwd_session.c): the caller's batch, no data, no files */
  sl_guard guard;     /* non-finite policy (engine/guard.h) */
  int lock_fd;        /* rank 0: flock on CKPT_DIR/.lock for the run's life (-1: none) */
  int64_t start_step; /* first step to run (after a resume) */
  int resumed;        /* a checkpoint was loaded (a converted one may be at step 0) */
  /* setup_backend: the backend and its compute context */
  const sl_ops *ops;
  sl_kctx *k;
  int dev;              /* the backend's memory is device memory */
  sl_model_config mcfg; /* setup_model_config */
  int init_from;        /* setup_model_config: SL_INIT_* (engine/precheck.h), where the parameters come from */
  trainer_data data;    /* setup_data; the batch buffers: setup_schedule */
  trainer_par par;      /* setup_mesh */
  /* setup_model: this rank's model and its FSDP runtime */
  sl_model *m;
  sl_fsdp *f;
  trainer_state state; /* setup_state */
  /* setup_schedule */
  sl_schedule *sched;    /* the order of a step's forwards and backwards (engine/schedule.h) */
  int64_t nsets;         /* activation sets: tok/tgt/seg hold one batch per set */
  /* the step's scalar slots (the schedule's queue_sumsq):
   * micro-batch k's loss in slot k, this rank's sums of squares from slot
   * grad_accum on; scal: their host copy, fetched once per step */
  int nscal, loss_slots; /* loss_slots 1: the loader points the model's loss at slot k */
  double *scal;
  trainer_report report; /* sl_train_run and engine/report.c */
} trainer;

/* What one optimizer step reports. */
typedef struct {
  double loss, grad_norm, lr;
  sl_eval_result ev; /* held-out loss of this step (ev.samples 0: none) */
  int64_t tokens;    /* targets that counted in the loss */
  int64_t *moe_load; /* (moe_n) a mixture of experts' tokens per expert per layer in the step, all ranks */
  int64_t moe_n;     /* 0: a dense model */
  double *moe_stats; /* (moe_sn) sl_model_moe_stats of the step summed over every rank: drops per layer, aux, z */
  int64_t moe_sn;    /* L + 4; 0: a dense model */
} step_out;

/* optim 0: no optimizer state (shardlm eval). */
int sl_trainer_setup(trainer *t, const sl_train_cfg *cfg, sl_comm *world, int optim);
/* A forward session's setup (engine/fwd_session.c): no optimizer state, no data (the caller sets each batch),
 * nothing written. */
int sl_trainer_setup_forward(trainer *t, const sl_train_cfg *cfg, sl_comm *world);
/* The dry run's setup (engine/dryrun.c): the same steps on the counting op
 * table and world (a counting communicator), model config mc, no data files
 * (a zero batch), no weights, no start-up checks, no node placement. */
int sl_trainer_setup_dry(trainer *t, const sl_train_cfg *cfg, sl_comm *world, const sl_model_config *mc);
/* One optimizer step s (0-based) of the run, as sl_train_run takes it. */
int sl_trainer_step(trainer *t, int64_t s, step_out *o);
/* After step s (dt its step time, wall the seconds since the loop began):
 * the report's elapsed_s, and over the last SL_PROG_WIN steps tps_avg
 * (tokens / their step times), mfu_avg and eta_s (steps left x their mean
 * wall time per step, evaluation and checkpoints included). */
void sl_trainer_progress(trainer *t, int64_t s, double dt, double wall, double flops_tok);
/* Seconds as "12.3s", "4m05s" or "2h03m", into buf. */
const char *sl_fmt_dur(char *buf, size_t cap, double s);
void sl_trainer_free(trainer *t);
/* Forward + backward of the nk micro-batches of the step starting at
 * t->data.next_sample, through the schedule; hook (may be NULL): after each
 * unit's forward (the dump's logits). *loss_sum: this rank's summed token
 * losses. */
int sl_trainer_fwd_bwd(trainer *t, int nk, sl_fwd_hook hook, void *hook_user, double *loss_sum);
/* Rank 0: the metrics line of step s (0-based). */
/* " moe_dropped N moe_z_loss Z" for the step's log line when those options are on (else ""). */
void sl_trainer_moe_note(const trainer *t, const step_out *o, char *buf, size_t cap);
int sl_trainer_write_metrics(trainer *t, int64_t s, const step_out *o, double dt, double flops_tok);
/* Rank 0, --tensorboard: opens the run's TensorBoard events file (a new one per run, resumed runs too) in the
 * metrics file's directory (OUT_DIR when the metrics go to a device); a failure warns and the run goes on. */
void sl_trainer_tb_open(trainer *t);
void sl_trainer_tb_close(trainer *t);
/* --pp > 1 (engine/report_pp.c): every stage's figures since the last line,
 * gathered over the PP communicator (collective: every rank calls it);
 * *all: P rows, freed by the caller. */
int sl_trainer_pp_gather(trainer *t, int64_t **all);
/* The line's "stages" field from the rows of sl_trainer_pp_gather. */
void sl_trainer_pp_write(const trainer *t, FILE *f, const int64_t *all);
/* Collective: the per-rank summary, printed by rank 0. */
void sl_trainer_summary(trainer *t, double wall);

#endif /* SL_TRAINER_INTERNAL_H */
