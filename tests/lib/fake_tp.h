/* tests/lib/fake_tp.h — a tensor-parallel group of T threads in one process
 * for C tests of the models (test_split_bwd.c): the hooks of models/tp.h
 * over host buffers, the ranks meeting at a barrier. Sums add rank 0's
 * value, then rank 1's, ... on every rank (the same bits everywhere); a
 * call whose element counts differ between the ranks fails on all of them.
 * Usage: fake_tp_init(&g, T); thread r runs its model with
 * m->access.tp = fake_tp_group(&ranks[r]) where ranks[r] = {&g, r}. */
#ifndef SL_TESTS_FAKE_TP_H
#define SL_TESTS_FAKE_TP_H

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "models/tp.h"

#define FAKE_TP_MAX 8

typedef struct {
  int T;
  pthread_barrier_t bar;
  const float *in[FAKE_TP_MAX]; /* each rank's buffer of the current call */
  int64_t n[FAKE_TP_MAX];       /* each rank's element count of the current call */
} fake_tp;

typedef struct {
  fake_tp *g;
  int rank;
} fake_tp_rank;

static inline void fake_tp_init(fake_tp *g, int T) {
  memset(g, 0, sizeof *g);
  g->T = T;
  pthread_barrier_init(&g->bar, NULL, (unsigned)T);
}
static inline void fake_tp_destroy(fake_tp *g) { pthread_barrier_destroy(&g->bar); }

/* Publishes this rank's buffer and waits for the others; nonzero when the
 * ranks' counts differ. */
static inline int fake_tp_meet(fake_tp_rank *r, const float *in, int64_t n) {
  fake_tp *g = r->g;
  g->in[r->rank] = in;
  g->n[r->rank] = n;
  pthread_barrier_wait(&g->bar);
  int bad = 0;
  for (int k = 0; k < g->T; k++) bad |= g->n[k] != n;
  return bad;
}

static inline int fake_tp_allreduce(void *user, float *buf, int64_t n, sl_tp_op op) {
  fake_tp_rank *r = user;
  fake_tp *g = r->g;
  int bad = fake_tp_meet(r, buf, n);
  float *sum = bad ? NULL : malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; sum && i < n; i++) {
    float a = g->in[0][i];
    for (int k = 1; k < g->T; k++) a = op == SL_TP_MAX ? fmaxf(a, g->in[k][i]) : a + g->in[k][i];
    sum[i] = a;
  }
  pthread_barrier_wait(&g->bar); /* every rank has read every buffer */
  int ok = sum != NULL;
  if (ok) memcpy(buf, sum, (size_t)n * sizeof(float));
  free(sum);
  return ok ? SL_OK : sl_fail(SL_EINTERNAL, "fake TP all-reduce: counts differ or no memory");
}

static inline int fake_tp_allgather(void *user, const float *in, float *out, int64_t n) {
  fake_tp_rank *r = user;
  int bad = fake_tp_meet(r, in, n);
  for (int k = 0; !bad && k < r->g->T; k++) memcpy(out + k * n, r->g->in[k], (size_t)n * sizeof(float));
  pthread_barrier_wait(&r->g->bar);
  return bad ? sl_fail(SL_EINTERNAL, "fake TP all-gather: counts differ") : SL_OK;
}

static inline int fake_tp_reducescatter(void *user, const float *in, float *out, int64_t n) {
  fake_tp_rank *r = user;
  fake_tp *g = r->g;
  int bad = fake_tp_meet(r, in, n);
  for (int64_t i = 0; !bad && i < n; i++) {
    float a = g->in[0][r->rank * n + i];
    for (int k = 1; k < g->T; k++) a += g->in[k][r->rank * n + i];
    out[i] = a;
  }
  pthread_barrier_wait(&g->bar);
  return bad ? sl_fail(SL_EINTERNAL, "fake TP reduce-scatter: counts differ") : SL_OK;
}

static inline sl_tp_group fake_tp_group(fake_tp_rank *r) {
  sl_tp_group t = {.rank = r->rank,
                   .size = r->g->T,
                   .user = r,
                   .allreduce = fake_tp_allreduce,
                   .allgather = fake_tp_allgather,
                   .reducescatter = fake_tp_reducescatter};
  return t;
}

#endif /* SL_TESTS_FAKE_TP_H */
