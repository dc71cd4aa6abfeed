/* engine/guard.c — the non-finite policy (engine/guard.h): step checks with
 * agreement across ranks, the skip counter, the state check before saving. */
#include "engine/guard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"

int sl_guard_init(sl_guard *g, const char *policy, int64_t max_skips) {
  memset(g, 0, sizeof *g);
  if (!strcmp(policy, "stop")) g->skip = 0;
  else if (!strcmp(policy, "skip")) g->skip = 1;
  else return sl_fail(SL_EINPUT, "--on-nonfinite must be stop or skip, found '%s'", policy);
  if (max_skips < 1)
    return sl_fail(SL_EINPUT,
                   "--max-skips must be at least 1 (consecutive skipped steps that end the run), "
                   "found %lld",
                   (long long)max_skips);
  g->max_skips = max_skips;
  return SL_OK;
}

/* Agreement: the number of ranks that saw a non-finite value. */
static int count_bad(sl_comm *world, int bad, int *nbad) {
  int32_t v = bad ? 1 : 0;
  if (sl_comm_allreduce_sync(world, &v, 1, SL_I32) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "non-finite check: all-reduce failed: %s", sl_comm_last_error());
  *nbad = (int)v;
  return SL_OK;
}

double sl_guard_fault(sl_comm *world, int64_t step, double local_loss) {
  const char *e = sl_env_str("SL_FAULT_NONFINITE");
  if (!e || (sl_env_set("SL_FAULT_NONFINITE_RANK") && sl_env_int("SL_FAULT_NONFINITE_RANK") != sl_comm_rank(world)))
    return local_loss;
  for (const char *p = e; *p;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) break;
    if (v == step + 1) return NAN;
    p = *end == ',' ? end + 1 : end;
  }
  return local_loss;
}

static void fmt_value(char *buf, double x) {
  if (isnan(x)) snprintf(buf, 32, "nan");
  else snprintf(buf, 32, "%g", x);
}

int sl_guard_step(sl_guard *g, sl_comm *world, int64_t step, double loss, double grad_norm, int *apply) {
  int nbad = 0, rc = count_bad(world, !isfinite(loss) || !isfinite(grad_norm), &nbad);
  *apply = 1;
  if (rc) return rc;
  if (!nbad) {
    g->consecutive = 0;
    return SL_OK;
  }
  *apply = 0;
  g->consecutive++;
  g->total++;
  char l[32], n[32];
  fmt_value(l, loss);
  fmt_value(n, grad_norm);
  if (!g->skip) {
    g->stop = 1;
    snprintf(g->why, sizeof g->why,
             "step %lld: the loss is %s and the gradient norm %s (not finite); stopping (--on-nonfinite stop): "
             "nothing of this state was saved; continue from the newest checkpoint with a lower --lr, or pass "
             "--on-nonfinite skip",
             (long long)(step + 1), l, n);
  } else if (g->consecutive >= g->max_skips) {
    g->stop = 1;
    snprintf(g->why, sizeof g->why,
             "step %lld: the loss is %s and the gradient norm %s; %lld consecutive non-finite steps skipped "
             "(--max-skips %lld): stopping; nothing of this state was saved",
             (long long)(step + 1), l, n, (long long)g->consecutive, (long long)g->max_skips);
  } else {
    sl_log0(SL_LOG_WARN,
            "step %lld: the loss is %s and the gradient norm %s: update skipped (%lld in a row, "
            "at most %lld)",
            (long long)(step + 1), l, n, (long long)g->consecutive, (long long)g->max_skips);
  }
  return SL_OK;
}

int sl_guard_verdict(const sl_guard *g) { return g->stop ? sl_fail(SL_ENONFINITE, "%s", g->why) : SL_OK; }

int sl_guard_check_state(sl_comm *world, float **const *fields, int nfields, int nunits, const int64_t *count,
                         int64_t step, const char *what) {
  int bad_u = -1, bad_f = -1;
  for (int f = 0; f < nfields && bad_u < 0; f++)
    for (int u = 0; u < nunits && bad_u < 0 && fields[f]; u++) {
      const float *x = fields[f][u];
      if (!x) continue;
      for (int64_t i = 0; i < count[u]; i++)
        if (!isfinite(x[i])) {
          bad_u = u;
          bad_f = f;
          break;
        }
    }
  int nbad = 0, rc = count_bad(world, bad_u >= 0, &nbad);
  if (rc || !nbad) return rc;
  static const char *names[] = {"parameters", "Adam first moments", "Adam second moments"};
  char where[128] = "";
  if (bad_u >= 0) snprintf(where, sizeof where, " (here: unit %d, %s)", bad_u, bad_f < 3 ? names[bad_f] : "state");
  return sl_fail(SL_ENONFINITE,
                 "after step %lld the optimizer state holds non-finite values on %d rank%s%s: %s was not "
                 "written; lower --lr or check --beta2 / --eps and the input weights",
                 (long long)step, nbad, nbad > 1 ? "s" : "", where, what);
}

const char *sl_guard_json(char *buf, double x) {
  if (isfinite(x)) snprintf(buf, 32, "%.9g", x);
  else snprintf(buf, 32, "null");
  return buf;
}
