/* engine/checkpoint.c — placeholder until the checkpoint module lands. */
#include "engine/checkpoint.h"

#include "base/base.h"

int sl_ckpt_save(const char *ckpt_dir, const sl_ckpt_state *st, int keep_last) {
  (void)st;
  (void)keep_last;
  return sl_fail(SL_EINPUT, "%s: checkpoints are not implemented in this build", ckpt_dir);
}

int sl_ckpt_load(const char *ckpt_dir, sl_ckpt_state *st, int *found) {
  (void)st;
  *found = 0;
  return sl_fail(SL_EINPUT, "%s: checkpoints are not implemented in this build", ckpt_dir);
}
