/* engine/lr_sched.c — the learning-rate schedules (--lr-schedule, docs/cli.md
 * "Learning-rate schedules") and their continuation on --resume.
 *
 * Step s (0-based) of S = --steps, warmup W, peak lr, floor min_lr:
 *   s < W:     lr x (s+1) / W, for every schedule;
 *   cosine:    min + 0.5 (lr - min)(1 + cos(pi p)),  p = (s - W) / max(S - 1 - W, 1) in [0, 1];
 *   linear:    min + (lr - min)(1 - p), the same p;
 *   constant:  lr;
 *   wsd:       lr up to step s0 = S - 1 - N, then over the last N steps
 *              min + (lr - min)(1 - q) (linear) or min + (lr - min)(1 - sqrt(q)) (1-sqrt),
 *              q = (s - s0) / N; N = --lr-decay-steps, or round(--lr-decay-frac x S).
 */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "engine/trainer.h"

int64_t sl_lr_decay_steps(const sl_train_cfg *c) {
  return c->lr_decay_steps > 0 ? c->lr_decay_steps : (int64_t)llround(c->lr_decay_frac * (double)c->steps);
}

double sl_lr_at(const sl_train_cfg *c, int64_t s) {
  if (c->warmup > 0 && s < c->warmup) return c->lr * (double)(s + 1) / (double)c->warmup;
  if (!strcmp(c->lr_schedule, "constant")) return c->lr;
  if (!strcmp(c->lr_schedule, "wsd")) {
    int64_t N = sl_lr_decay_steps(c), s0 = c->steps - 1 - N;
    if (N <= 0 || s <= s0) return c->lr;
    double q = (double)(s - s0) / (double)N;
    if (q > 1) q = 1;
    double f = !strcmp(c->lr_decay_shape, "linear") ? q : sqrt(q);
    return c->min_lr + (c->lr - c->min_lr) * (1.0 - f);
  }
  int64_t span = c->steps - 1 - c->warmup;
  double p = (double)(s - c->warmup) / (double)(span > 1 ? span : 1);
  if (p < 0) p = 0;
  if (p > 1) p = 1;
  if (!strcmp(c->lr_schedule, "linear")) return c->min_lr + (c->lr - c->min_lr) * (1.0 - p);
  return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * p));
}

int sl_lr_sched_resume(sl_train_cfg *c, const char *written, const char *dir) {
  if (!written) return SL_OK;               /* a manifest without the config text: nothing to compare */
  static char nowtxt[16384], deftxt[16384]; /* a checkpoint older than these keys: the defaults (cosine) */
  sl_train_cfg d;
  sl_train_cfg_defaults(&d);
  if (sl_train_cfg_canonical(c, nowtxt, sizeof nowtxt) || sl_train_cfg_canonical(&d, deftxt, sizeof deftxt))
    return SL_EINTERNAL;
  int changed = 0;
  for (int i = 0; i < SL_LR_SCHED_NKEYS; i++) {
    const char *k = sl_lr_sched_keys[i];
    char old[64], now[64];
    const char *o = sl_train_cfg_canonical_get(written, k, old, sizeof old);
    if (!o) o = sl_train_cfg_canonical_get(deftxt, k, old, sizeof old);
    sl_train_cfg_canonical_get(nowtxt, k, now, sizeof now);
    if (!strcmp(o, now)) continue;
    if (!(c->lr_given & (1 << i))) { /* not asked for: the checkpoint's schedule continues */
      int rc = sl_train_cfg_set(c, k, o);
      if (rc) return rc;
      sl_log0(SL_LOG_INFO, "--%s %s: continued from the checkpoint %s", k, o, dir);
      continue;
    }
    if (!c->lr_schedule_override)
      return sl_fail(SL_EINPUT,
                     "--%s %s: the checkpoint %s was written with --%s %s; a resumed run continues the checkpoint's "
                     "schedule (leave --%s out), or give --lr-schedule-override to switch to this run's schedule from "
                     "the checkpoint's step on",
                     k, now, dir, k, o, k);
    changed = 1;
  }
  if (changed)
    sl_log0(SL_LOG_WARN, "--lr-schedule-override: --lr-schedule %s replaces the checkpoint's schedule from this step",
            c->lr_schedule);
  return sl_train_cfg_check_lr(c);
}
