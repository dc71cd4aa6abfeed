/* shard/comm_count.c — the counting backend of shard/comm.h: a communicator
 * of `size` ranks of which this process plays one (`rank`). Every operation
 * is checked and accounted by comm.c exactly as on MPI / NCCL (sequence
 * numbers, calls, bytes per collective kind: sl_comm_op_bytes), completes
 * when issued, and moves nothing: receive buffers keep what they held.
 * The world of the engine's dry run (engine/dryrun.c), as NCCL's simulator
 * drives its real planner.
 *
 * Splits: the other ranks are not here to say their color and key, so the
 * creator passes `split`, which answers for any rank what it passes to the
 * n-th split of a communicator (the rule of the code being run, e.g.
 * sl_par_mesh_split_rule); a rule may give each child its own
 * (sl_comm_count_create_rule). The child is again a counting communicator,
 * over the ranks with this rank's color, ordered by key then rank, as MPI
 * orders. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "shard/comm.h"
#include "shard/comm_internal.h"

typedef struct {
  sl_comm_count_rule rule;
  int nsplit; /* splits of this communicator so far */
} count_be;

static void count_destroy(sl_comm *c);
static int count_issue(sl_comm *c, sl_comm_req *r);
static int count_wait(sl_comm_req *r);
static int count_test(sl_comm_req *r);
static const sl_comm_vt count_vt = {
    .name = "count", .destroy = count_destroy, .issue = count_issue, .wait = count_wait, .test = count_test};

static sl_comm *make_count(const char *name, int size, int rank, const int *world_ranks, uint64_t uid,
                           const sl_comm_count_rule *rule) {
  sl_comm *c = calloc(1, sizeof *c);
  count_be *b = calloc(1, sizeof *b);
  int *wr = malloc(sizeof *wr * (size_t)size);
  if (!c || !b || !wr) {
    free(c);
    free(b);
    free(wr);
    return NULL;
  }
  for (int i = 0; i < size; i++) wr[i] = world_ranks ? world_ranks[i] : i;
  b->rule = *rule;
  sl_comm_init_header(c, &count_vt, b, name, rank, size, wr, uid);
  return c;
}

static void count_destroy(sl_comm *c) { sl_comm_fini(c); }

static int do_split(sl_comm *c, sl_comm_op *op) {
  count_be *b = c->be;
  int n = b->nsplit++;
  if (!b->rule.split)
    return sl_comm_set_error("split of comm %s (count): no split rule was given to sl_comm_count_create", c->name);
  int *color = malloc(sizeof(int) * (size_t)c->size), *key = malloc(sizeof(int) * (size_t)c->size);
  int *members = malloc(sizeof(int) * (size_t)c->size);
  int rc = SL_COMM_OK;
  if (!color || !key || !members) {
    rc = sl_comm_set_error("split of comm %s (count): out of memory", c->name);
    goto done;
  }
  for (int j = 0; j < c->size && !rc; j++)
    if (b->rule.split(b->rule.ctx, n, j, &color[j], &key[j]) != 0)
      rc = sl_comm_set_error("split of comm %s (count): %s", c->name, sl_errmsg());
  if (rc) goto done;
  if (color[c->rank] != op->color || key[c->rank] != op->key) {
    rc = sl_comm_set_error("split #%d of comm %s (count): rank %d passed color %d key %d, but the split rule says "
                           "color %d key %d",
                           n, c->name, c->rank, op->color, op->key, color[c->rank], key[c->rank]);
    goto done;
  }
  int m = 0;
  for (int j = 0; j < c->size; j++) /* insertion by (key, rank) */
    if (color[j] == op->color) {
      int i = m++;
      while (i > 0 && key[members[i - 1]] > key[j]) {
        members[i] = members[i - 1];
        i--;
      }
      members[i] = j;
    }
  int me = 0, *wr = malloc(sizeof(int) * (size_t)m);
  if (!wr) {
    rc = sl_comm_set_error("split of comm %s (count): out of memory", c->name);
    goto done;
  }
  for (int i = 0; i < m; i++) {
    wr[i] = c->world_ranks[members[i]];
    if (members[i] == c->rank) me = i;
  }
  char name[96];
  snprintf(name, sizeof name, "%.60s/s%llu:c%d", c->name, (unsigned long long)op->seq, op->color);
  sl_comm_count_rule cr = b->rule.child ? b->rule.child(b->rule.ctx, n, op->color) : b->rule;
  sl_comm *child = make_count(name, m, me, wr, sl_comm_child_uid(c->uid, op->seq) | 1, &cr);
  free(wr);
  if (!child) {
    rc = sl_comm_set_error("split of comm %s (count): out of memory", c->name);
    goto done;
  }
  *op->split_out = child;
done:
  free(color);
  free(key);
  free(members);
  return rc;
}

static int count_issue(sl_comm *c, sl_comm_req *r) {
  sl_comm_account(c, r); /* the same figures as every backend */
  if (r->op.kind == SL_OPK_SPLIT) {
    int rc = do_split(c, &r->op);
    if (rc != SL_COMM_OK) return rc;
  }
  r->status = SL_COMM_OK;
  r->done = 1;
  return SL_COMM_OK;
}

static int count_wait(sl_comm_req *r) {
  free(r);
  return SL_COMM_OK;
}

static int count_test(sl_comm_req *r) { return r->done; }

int sl_comm_count_create_rule(int size, int rank, const sl_comm_count_rule *rule, sl_comm **out) {
  if (!out) return sl_comm_set_error("sl_comm_count_create: out is NULL");
  *out = NULL;
  if (size < 1 || rank < 0 || rank >= size)
    return sl_comm_set_error("sl_comm_count_create: rank %d of %d ranks is out of range", rank, size);
  sl_comm *c = make_count("count", size, rank, NULL, 0xc0c0000000000001ull, rule);
  if (!c) return sl_comm_set_error("sl_comm_count_create: out of memory");
  *out = c;
  return SL_COMM_OK;
}

int sl_comm_count_create(int size, int rank, sl_comm_count_split_fn split, void *ctx, sl_comm **out) {
  sl_comm_count_rule rule = {split, NULL, ctx};
  return sl_comm_count_create_rule(size, rank, &rule, out);
}
