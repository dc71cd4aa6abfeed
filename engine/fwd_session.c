/* engine/fwd_session.c — forward sessions: one sequence through the training
 * forward on any backend (the units, the FSDP runtime, the step schedule's
 * forward), its logits at one position back on the host. `shardlm generate
 * --decode forward` takes each next token from the logits at the last
 * position of the window so far: the sub-layers the training runs, every
 * family, a device backend, and no second implementation to agree with
 * (models/generate.c's cache is the fast CPU path). The positions past the
 * sequence hold padding that a causal model does not read (attention's mask,
 * the causal conv and scan), except through a capacity-limited router
 * (--moe-capacity-factor: the padding takes slots), which is refused. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/trainer.h"
#include "engine/trainer_internal.h"

struct sl_fwd_session {
  trainer t;
  int64_t T, V;
  const int32_t *seq; /* the sequence of the call in progress */
  int64_t len;
  float *dl; /* (T, V) the logits in backend memory */
};

/* The schedule's loader: the sequence, padded with token 0, no target (no loss). */
static int fs_load(void *user, int k) {
  sl_fwd_session *s = user;
  trainer *t = &s->t;
  (void)k;
  for (int64_t i = 0; i < s->T; i++) {
    t->data.tok[i] = i < s->len ? s->seq[i] : 0;
    t->data.tgt[i] = -1;
  }
  if (t->dev || t->nsets > 1) {
    t->ops->upload(t->k, t->data.dtok, t->data.tok, (size_t)s->T * 4);
    t->ops->upload(t->k, t->data.dtgt, t->data.tgt, (size_t)s->T * 4);
  }
  sl_model_set_batch(t->m, t->data.dtok, t->data.dtgt, 0.0f);
  t->m->seg = NULL;
  return SL_OK;
}

/* After the head's forward (its parameters still gathered): the logits. */
static int fs_logits(void *out, sl_model *m, int k, int u) {
  (void)k;
  return u == sl_model_head_unit(m) ? m->vt->logits(m, out) : SL_OK;
}

int sl_fwd_session_open(const sl_train_cfg *cfg, sl_comm *world, int64_t T, sl_fwd_session **out) {
  *out = NULL;
  if (sl_comm_size(world) != 1 || cfg->tp > 1 || cfg->pp > 1 || cfg->ep > 1)
    return sl_fail(SL_EINPUT, "a forward session runs on one process (found %d ranks, --tp %lld, --pp %lld, --ep %lld)",
                   sl_comm_size(world), (long long)cfg->tp, (long long)cfg->pp, (long long)cfg->ep);
  if (cfg->moe_capacity_factor > 0)
    return sl_fail(SL_EINPUT, "--moe-capacity-factor %g: a capacity counts the padding positions of the window, "
                              "which would change the routing of the real ones (generate routes dropless)",
                   cfg->moe_capacity_factor);
  sl_fwd_session *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(SL_ENOMEM, "out of memory");
  sl_train_cfg c = *cfg;
  c.micro_batch = 1;
  c.grad_accum = 1;
  c.seq_len = T;
  c.steps = 0;
  c.doc_attention_mask = 0;
  int rc = sl_trainer_setup_forward(&s->t, &c, world);
  if (!rc && !(s->dl = s->t.ops->alloc(s->t.k, (size_t)(T * s->t.mcfg.vocab_size) * 4))) rc = SL_ENOMEM;
  s->T = T;
  s->V = s->t.mcfg.vocab_size;
  if (rc) {
    sl_fwd_session_close(s);
    return rc == SL_ENOMEM ? sl_fail(SL_ENOMEM, "out of memory for the logits of %lld positions", (long long)T) : rc;
  }
  *out = s;
  return SL_OK;
}

int sl_fwd_session_logits(sl_fwd_session *s, const int32_t *seq, int64_t len, float *logits) {
  if (len < 1 || len > s->T)
    return sl_fail(SL_EINTERNAL, "forward session: %lld positions in a window of %lld", (long long)len,
                   (long long)s->T);
  s->seq = seq;
  s->len = len;
  trainer *t = &s->t;
  sl_step_ctx sc = {.m = t->m, .f = t->f, .nmicro = 1, .user = s, .load = fs_load, .after_fwd = fs_logits,
                    .hook_user = s->dl};
  sl_step_result res = {0};
  int rc = sl_schedule_forward(t->sched, &sc, &res);
  if (!rc) t->ops->download(t->k, logits, s->dl + (len - 1) * s->V, (size_t)s->V * 4);
  return rc;
}

void sl_fwd_session_close(sl_fwd_session *s) {
  if (!s) return;
  if (s->dl) s->t.ops->free(s->t.k, s->dl);
  sl_trainer_free(&s->t);
  free(s);
}
