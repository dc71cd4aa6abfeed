/* engine/mamba.c — placeholder until the Mamba model file lands. */
#include "base/base.h"
#include "engine/model.h"

int sl_mamba_create(sl_model *m) {
  (void)m;
  return sl_fail(SL_EINPUT, "Mamba models are not supported by this build yet");
}
