/* engine/eval.h — held-out evaluation: the mean token cross-entropy of a
 * model over K windows of a dataset in sequential order, forward-only through
 * the step schedule's forward, the trainer's FSDP runtime and batch loader (every ZeRO stage and offload
 * tier), plus the --split / --eval-data plumbing of the training loop.
 */
#ifndef SL_EVAL_H
#define SL_EVAL_H

#include <stdint.h>

#include "data/sampler.h"
#include "engine/schedule.h"
#include "formats/dataset.h"
#include "formats/traincfg.h"
#include "models/model.h"
#include "shard/comm.h"
#include "shard/fsdp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the evaluation borrows from the trainer. */
typedef struct {
  sl_model *m; /* sized for micro-batch B x T */
  sl_fsdp *f;
  sl_comm *world;
  int64_t B, T;
  void *user;
  /* Loads micro-batch row b from sample samples[b] of smp (its window in
   * sequential order; -1: a padding row whose targets are all ignored),
   * moves it to backend memory and sets it as the model's batch. *counted:
   * the number of targets that count in the loss (loss masks applied). */
  int (*load)(void *user, sl_sampler *smp, const int64_t *samples, int64_t *counted);
  sl_schedule *sched; /* runs each round's forward (engine/schedule.h) */
  /* pipeline parallelism: windows are divided over the DP ranks (dp_size 0:
   * over the world), and a rank whose stage holds no head (no_head) adds no
   * counted targets (its loss sum is 0 already) */
  int dp_rank, dp_size, no_head;
} sl_eval_env;

typedef struct {
  double loss, ppl; /* mean token CE over the counted targets; exp(loss) */
  int64_t tokens;   /* counted targets over all ranks */
  int64_t samples;  /* windows evaluated */
} sl_eval_result;

/* Windows 0..K-1 of smp, a sampler in sequential order (window j: stream
 * [j*T, j*T+T], wrapping; a blend interleaves its datasets), divided
 * among ranks round by round (round i, rank r, row b: window i*W*B + r*B + b);
 * every rank runs the same number of forwards. Collective; every rank gets
 * the same result. Touches no gradient or optimizer state. */
int sl_eval_loss(const sl_eval_env *e, sl_sampler *smp, int64_t K, sl_eval_result *out);

/* The held-out stream of a training run. */
typedef struct sl_eval_data sl_eval_data;
/* From cfg: --eval-data PREFIX (or blend), or --split over the training
 * data train_spec whose sampler train is then restricted to the first range.
 * *out = NULL when neither is set (and --eval-every must be 0). Checks the
 * vocabulary; loss masks (PREFIX.lmask) apply. */
int sl_eval_data_open(const sl_train_cfg *cfg, const char *train_spec, sl_sampler *train, int64_t vocab,
                      sl_eval_data **out);
void sl_eval_data_close(sl_eval_data *d);
sl_sampler *sl_eval_data_sampler(const sl_eval_data *d);
int64_t sl_eval_data_samples(const sl_eval_data *d); /* K of each evaluation */
/* 1 when step s (0-based, just finished) of `steps` is evaluated. */
int sl_eval_due(const sl_train_cfg *cfg, int64_t s);

#ifdef __cplusplus
}
#endif
#endif /* SL_EVAL_H */
