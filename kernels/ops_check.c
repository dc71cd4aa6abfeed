/* kernels/ops_check.c — which ops a backend supports (sl_ops_check): every
 * field of SL_OPS_LIST (kernels/kernels.h) must be set, except the optional
 * ones. The list itself is checked against the struct at compile time, so a
 * new op cannot be added to sl_ops without being added to the list. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"

_Static_assert(sizeof(sl_ops) == sizeof(const char *) + SL_OPS_COUNT * sizeof(void (*)(void)),
               "SL_OPS_LIST (kernels/kernels.h) must name every op field of sl_ops");

int sl_ops_optional(const char *op) { return op && !strcmp(op, "mem_info"); }

int sl_ops_check(const sl_ops *ops) {
  if (!ops) return sl_fail(SL_EINPUT, "kernel backend is NULL");
  char missing[1024] = "";
  size_t lm = 0;
  int n = 0;
#define SL_OPS_CHECK_ONE_(f)                                                                                           \
  if (!ops->f && !sl_ops_optional(#f)) {                                                                               \
    n++;                                                                                                               \
    if (lm < sizeof missing) lm += (size_t)snprintf(missing + lm, sizeof missing - lm, "%s%s", lm ? ", " : "", #f);    \
  }
  SL_OPS_LIST(SL_OPS_CHECK_ONE_)
#undef SL_OPS_CHECK_ONE_
  if (n)
    return sl_fail(SL_EINPUT, "kernel backend '%s' does not support %d op(s) the engine needs: %s",
                   ops->name ? ops->name : "?", n, missing);
  return SL_OK;
}
