/* models/linear.c — the projection helper (models/linear.h). */
#include "models/linear.h"

#include <stddef.h>

sl_lin sl_lin_one(const char *name, const char *module, int64_t in, int64_t out, sl_lin_tp tp) {
  sl_lin l = {.name = name, .in = in, .out = out, .tp = tp};
  if (module) sl_lin_module(&l, module, out);
  return l;
}

void sl_lin_module(sl_lin *l, const char *module, int64_t rows) {
  if (l->nmod >= SL_LIN_MODULES) return;
  l->module[l->nmod] = module;
  l->module_rows[l->nmod++] = rows;
}

void sl_lin_fwd(sl_model *m, const sl_lin *l, float *out, const float *x, const float *w, const float *b, int64_t N) {
  if (l->tp == SL_LIN_ROW && m->tp_rank != 0) b = NULL; /* the partial sums' reduction adds rank 0's bias once */
  m->ops->linear_fwd(m->k, out, x, w, b, N, l->in, l->out);
}

void sl_lin_bwd(sl_model *m, const sl_lin *l, float *dx, float *dw, float *db, const float *dy, const float *x,
                const float *w, int64_t N) {
  if (l->tp == SL_LIN_REPLICATED && m->tp_rank != 0) dx = NULL; /* the caller's TP sum counts rank 0's part once */
  if (!dx && !dw && !db) return;
  m->ops->linear_bwd(m->k, dx, dw, db, dy, x, w, N, l->in, l->out);
}
