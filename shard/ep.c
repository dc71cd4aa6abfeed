/* shard/ep.c — the sl_ep_group hooks over a host communicator
 * (shard/ep.h): paired sends and receives, one per peer. */
#include "shard/ep.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

enum { TAG_COUNTS = 7301, TAG_ROWS = 7302 };

/* recv block q (rn[q] elements) from rank q, send block q (sn[q]) to q; blocks back to back. */
static int exchange(sl_comm *c, const void *send, const int64_t *sn, void *recv, const int64_t *rn, sl_dtype dt,
                    int tag) {
  int P = sl_comm_size(c), rc = SL_OK;
  size_t es = sl_dtype_size(dt);
  sl_comm_req **q = calloc((size_t)(2 * P), sizeof *q);
  if (!q) return SL_ENOMEM;
  int64_t so = 0, ro = 0;
  for (int p = 0; p < P && !rc; p++) {
    if (rn[p] > 0 && sl_comm_recv(c, (char *)recv + ro * es, rn[p], dt, p, tag, &q[2 * p]) != SL_COMM_OK) rc = SL_ECOMM;
    if (!rc && sn[p] > 0 && sl_comm_send(c, (const char *)send + so * es, sn[p], dt, p, tag, &q[2 * p + 1]) != SL_COMM_OK)
      rc = SL_ECOMM;
    so += sn[p], ro += rn[p];
  }
  for (int i = 0; i < 2 * P; i++)
    if (q[i] && sl_comm_wait(q[i]) != SL_COMM_OK) rc = SL_ECOMM;
  free(q);
  return rc ? sl_fail(SL_ECOMM, "expert parallel exchange: %s", sl_comm_last_error()) : SL_OK;
}

static int ep_counts(void *user, const int64_t *scount, int64_t *rcount, int64_t n) {
  sl_comm *c = user;
  int P = sl_comm_size(c);
  if (!strcmp(sl_comm_backend(c), "count")) { /* the dry run: balanced */
    memcpy(rcount, scount, (size_t)(P * n) * sizeof *rcount);
    return SL_OK;
  }
  int64_t *len = malloc((size_t)P * sizeof *len);
  if (!len) return SL_ENOMEM;
  for (int p = 0; p < P; p++) len[p] = n;
  int rc = exchange(c, scount, len, rcount, len, SL_I64, TAG_COUNTS);
  free(len);
  return rc;
}

static int ep_alltoallv(void *user, const float *send, const int64_t *scount, float *recv, const int64_t *rcount,
                        int64_t width) {
  sl_comm *c = user;
  int P = sl_comm_size(c);
  int64_t *sn = malloc((size_t)(2 * P) * sizeof *sn), *rn = sn + P;
  if (!sn) return SL_ENOMEM;
  for (int p = 0; p < P; p++) sn[p] = scount[p] * width, rn[p] = rcount[p] * width;
  int rc = exchange(c, send, sn, recv, rn, SL_F32, TAG_ROWS);
  free(sn);
  return rc;
}

sl_ep_group sl_ep_group_over(sl_comm *ep) {
  return (sl_ep_group){.rank = sl_comm_rank(ep),
                       .size = sl_comm_size(ep),
                       .user = ep,
                       .counts = ep_counts,
                       .alltoallv = ep_alltoallv};
}
