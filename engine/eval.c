/* engine/eval.c — held-out evaluation (see engine/eval.h).
 *
 * Owns the evaluation rounds, each one forward-only micro-batch through the
 * step schedule's forward (gathers as in training, sl_fsdp_end_forward
 * instead of a backward; engine/schedule.h), the division of the
 * K windows among ranks, the global mean over the counted targets, and the
 * held-out stream of a training run: --eval-data PREFIX or Megatron's
 * --split weights (contiguous document ranges of --data: train on the first,
 * evaluate on the second).
 */
#define _GNU_SOURCE
#include "engine/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* One round: its B samples loaded as the batch of the schedule's one micro-batch. */
typedef struct {
  const sl_eval_env *e;
  sl_sampler *smp;
  const int64_t *samples;
  int64_t counted;
} eval_round;

static int round_load(void *user, int k) {
  eval_round *r = user;
  (void)k;
  return r->e->load(r->e->user, r->smp, r->samples, &r->counted);
}

int sl_eval_loss(const sl_eval_env *e, sl_sampler *smp, int64_t K, sl_eval_result *out) {
  memset(out, 0, sizeof *out);
  if (K < 1) return sl_fail(SL_EINPUT, "evaluation needs at least one window (found %lld)", (long long)K);
  int W = e->dp_size ? e->dp_size : sl_comm_size(e->world), r = e->dp_size ? e->dp_rank : sl_comm_rank(e->world);
  int Wall = sl_comm_size(e->world);
  int64_t B = e->B;
  int64_t per_round = (int64_t)W * B, rounds = (K + per_round - 1) / per_round;
  int64_t *samples = malloc(sizeof(int64_t) * (size_t)B);
  if (!samples) return sl_fail(SL_ENOMEM, "out of memory");
  double mine[2] = {0, 0}; /* loss sum, counted targets */
  int rc = SL_OK;
  for (int64_t i = 0; i < rounds && !rc; i++) {
    for (int64_t b = 0; b < B; b++) {
      int64_t j = i * per_round + (int64_t)r * B + b;
      samples[b] = j < K ? j : -1;
    }
    eval_round er = {e, smp, samples, 0};
    sl_step_ctx sc = {.m = e->m, .f = e->f, .nmicro = 1, .user = &er, .load = round_load};
    sl_step_result res = {0};
    rc = sl_schedule_forward(e->sched, &sc, &res);
    if (!rc) {
      mine[0] += res.loss_sum;
      mine[1] += e->no_head ? 0.0 : (double)er.counted;
    }
  }
  free(samples);
  /* every rank reaches the gather: a local failure is reported, not hung on */
  double *all = calloc((size_t)Wall * 3, sizeof(double));
  if (!all) return sl_fail(SL_ENOMEM, "out of memory");
  double send[3] = {mine[0], mine[1], rc ? 1.0 : 0.0};
  if (sl_comm_allgather_sync(e->world, send, all, 3, SL_F64) != SL_COMM_OK) {
    free(all);
    return rc ? rc : sl_fail(SL_ECOMM, "evaluation loss all-gather: %s", sl_comm_last_error());
  }
  double sum = 0, cnt = 0, bad = 0;
  for (int k = 0; k < Wall; k++) { /* rank order: the same double sum everywhere */
    sum += all[3 * k];
    cnt += all[3 * k + 1];
    bad += all[3 * k + 2];
  }
  free(all);
  if (rc) return rc;
  if (bad > 0) return sl_fail(SL_EINTERNAL, "evaluation failed on another rank");
  if (cnt <= 0)
    return sl_fail(SL_EINPUT,
                   "evaluation: the %lld windows hold no target token that counts in "
                   "the loss (all masked)",
                   (long long)K);
  out->loss = sum / cnt;
  out->ppl = exp(out->loss);
  out->tokens = (int64_t)cnt;
  out->samples = K;
  if (!isfinite(out->loss)) return sl_fail(SL_EINTERNAL, "evaluation: the held-out loss is not finite (%g)", out->loss);
  return SL_OK;
}

/* ---- the held-out stream of a training run ----------------------------------- */
struct sl_eval_data {
  sl_sampler *smp;
  int64_t samples;
};

/* Megatron's get_train_valid_test_split_: weights normalised, boundaries
 * rounded (half to even, as Python's round), the last moved onto ndocs. */
static int holdout_bounds(const char *spec, int64_t ndocs, int64_t b[4]) {
  double w[3] = {0, 0, 0}, sum = 0;
  int n = 0;
  const char *p = spec;
  while (*p && n < 3) {
    char *end;
    w[n] = strtod(p, &end);
    if (end == p || w[n] < 0 || !isfinite(w[n])) break;
    sum += w[n++];
    p = end;
    if (*p == ',' || *p == '/') p++;
    else break;
  }
  if (*p || n < 2 || sum <= 0)
    return sl_fail(SL_EINPUT, "--split expects 2 or 3 non-negative weights like 98,2,0, found '%s'", spec);
  b[0] = 0;
  for (int i = 0; i < 3; i++) b[i + 1] = b[i] + (int64_t)nearbyint(w[i] / sum * (double)ndocs);
  int64_t diff = b[3] - ndocs;
  for (int i = 1; i < 4; i++) b[i] -= diff;
  return SL_OK;
}

int sl_eval_data_open(const sl_train_cfg *c, const char *train_spec, sl_sampler *train, int64_t vocab,
                      sl_eval_data **out) {
  *out = NULL;
  if (c->eval_every < 0 || c->eval_samples < 0)
    return sl_fail(SL_EINPUT, "--eval-every and --eval-samples must be >= 0 (found %lld, %lld)",
                   (long long)c->eval_every, (long long)c->eval_samples);
  if (c->eval_data[0] && c->holdout[0])
    return sl_fail(SL_EINPUT, "--eval-data and --split both name a held-out set: give one");
  if (!c->eval_data[0] && !c->holdout[0]) {
    if (c->eval_every > 0)
      return sl_fail(SL_EINPUT, "--eval-every needs a held-out set: --eval-data PREFIX or --split 98,2,0");
    return SL_OK;
  }
  sl_eval_data *d = calloc(1, sizeof *d);
  if (!d) return sl_fail(SL_ENOMEM, "out of memory");
  int rc = sl_sampler_open(c->eval_data[0] ? c->eval_data : train_spec, c->seq_len, "sequential", (uint64_t)c->seed,
                           vocab, &d->smp);
  if (!rc && c->holdout[0] && sl_sampler_ndatasets(train) != 1)
    rc = sl_fail(SL_EINPUT,
                 "--split divides one dataset's documents, but --data is a blend of %d datasets: give "
                 "--eval-data PREFIX instead",
                 sl_sampler_ndatasets(train));
  if (!rc && c->holdout[0]) {
    const sl_dataset *tds = sl_sampler_dataset(train, 0);
    int64_t nd = sl_dataset_num_docs(tds), b[4] = {0, 0, 0, 0};
    rc = holdout_bounds(c->holdout, nd, b);
    int64_t t0 = sl_dataset_doc_offset(tds, b[0]), t1 = sl_dataset_doc_offset(tds, b[1]),
            t2 = sl_dataset_doc_offset(tds, b[2]);
    if (!rc && (t1 <= t0 || t2 <= t1))
      rc = sl_fail(SL_EINPUT,
                   "--split %s over the %lld documents of %s leaves the %s range empty (documents "
                   "[%lld, %lld) train, [%lld, %lld) held out)",
                   c->holdout, (long long)nd, train_spec, t1 <= t0 ? "training" : "held-out", (long long)b[0],
                   (long long)b[1], (long long)b[1], (long long)b[2]);
    if (!rc) rc = sl_sampler_restrict(train, t0, t1);
    if (!rc) rc = sl_sampler_restrict(d->smp, t1, t2);
  }
  if (!rc) {
    int64_t whole = (sl_sampler_num_tokens(d->smp) - 1) / c->seq_len;
    d->samples = c->eval_samples > 0 && c->eval_samples < whole ? c->eval_samples : whole; /* no window twice */
    if (d->samples < 1)
      rc = sl_fail(SL_EINPUT, "the held-out set holds %lld tokens, fewer than one window of --seq-len %lld + 1",
                   (long long)sl_sampler_num_tokens(d->smp), (long long)c->seq_len);
  }
  if (rc) {
    sl_eval_data_close(d);
    return rc;
  }
  *out = d;
  return SL_OK;
}

void sl_eval_data_close(sl_eval_data *d) {
  if (!d) return;
  sl_sampler_close(d->smp);
  free(d);
}

sl_sampler *sl_eval_data_sampler(const sl_eval_data *d) { return d->smp; }
int64_t sl_eval_data_samples(const sl_eval_data *d) { return d->samples; }

int sl_eval_due(const sl_train_cfg *c, int64_t s) {
  return c->eval_every > 0 && ((s + 1) % c->eval_every == 0 || s + 1 == c->steps);
}
