/* shard/comm_self.c — the one-process backend of shard/comm.h.
 *
 * Owns: the world of a process not started by a launcher ("self": world size
 * 1, no MPI library loaded, no threads) and the one-rank communicators over
 * device buffers (sl_comm_local_create, used by fsdp at world size 1 on a
 * GPU so that no NCCL is needed). Every collective completes when issued:
 * at one rank it is the identity, plus a copy when the output buffer is not
 * the input (all-gather, reduce-scatter out of place, the all-to-all's block
 * to itself): memmove for host buffers, the caller's copy function for
 * device buffers. A send to self is matched at issue with an earlier recv
 * of the same tag (or the recv with an earlier send), as MPI matches them;
 * waiting for an unmatched one fails.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "shard/comm.h"
#include "shard/comm_internal.h"

typedef struct {
  sl_comm_copy_fn copy; /* NULL: host memory (memmove) */
  void *ctx;
  sl_comm_req *pend; /* unmatched sends/recvs, oldest first (c->mu) */
} self_be;

static void self_destroy(sl_comm *c);
static int self_issue(sl_comm *c, sl_comm_req *r);
static int self_wait(sl_comm_req *r);
static int self_test(sl_comm_req *r);
static const sl_comm_vt self_vt = {
    .name = "self", .destroy = self_destroy, .issue = self_issue, .wait = self_wait, .test = self_test};

static uint64_t g_uid_next = 0x5e1f000000000001ull; /* local comms: unique in the process */

static sl_comm *make_self(const char *name, uint64_t uid, sl_comm_copy_fn copy, void *ctx) {
  sl_comm *c = calloc(1, sizeof *c);
  self_be *b = calloc(1, sizeof *b);
  int *wr = malloc(sizeof *wr);
  if (!c || !b || !wr) {
    free(c);
    free(b);
    free(wr);
    return NULL;
  }
  b->copy = copy;
  b->ctx = ctx;
  wr[0] = 0;
  sl_comm_init_header(c, &self_vt, b, name, 0, 1, wr, uid);
  return c;
}

static void self_destroy(sl_comm *c) { sl_comm_fini(c); }

static void finish(sl_comm_req *r, int status, const char *msg) {
  r->status = status;
  if (status != SL_COMM_OK) snprintf(r->err, sizeof r->err, "%s", msg);
  r->done = 1;
}

/* Matches a send/recv against the unmatched list (c->mu held). */
static void match_p2p_locked(sl_comm *c, sl_comm_req *r) {
  self_be *b = c->be;
  int want = r->op.kind == SL_COLL_SEND ? SL_COLL_RECV : SL_COLL_SEND;
  sl_comm_req **pp = &b->pend;
  while (*pp && !((*pp)->op.kind == want && (*pp)->op.tag == r->op.tag)) pp = &(*pp)->next;
  if (!*pp) { /* append: matched by a later call */
    r->next = NULL;
    sl_comm_req **tail = &b->pend;
    while (*tail) tail = &(*tail)->next;
    *tail = r;
    return;
  }
  sl_comm_req *m = *pp;
  *pp = m->next;
  m->next = NULL;
  sl_comm_req *snd = r->op.kind == SL_COLL_SEND ? r : m, *rcv = r == snd ? m : r;
  size_t es = sl_dtype_size(snd->op.dt);
  if (snd->op.dt != rcv->op.dt || snd->op.count > rcv->op.count) {
    char msg[300];
    snprintf(msg, sizeof msg, "send to self (tag %d, %lld x %s) does not fit its recv (%lld x %s) on comm %s",
             snd->op.tag, (long long)snd->op.count, sl_dtype_name(snd->op.dt), (long long)rcv->op.count,
             sl_dtype_name(rcv->op.dt), c->name);
    finish(snd, SL_COMM_ERR, msg);
    finish(rcv, SL_COMM_ERR, msg);
    return;
  }
  if (snd->op.count) memmove(rcv->op.recv, snd->op.send, (size_t)snd->op.count * es);
  finish(snd, SL_COMM_OK, "");
  finish(rcv, SL_COMM_OK, "");
}

static int self_issue(sl_comm *c, sl_comm_req *r) {
  self_be *b = c->be;
  sl_comm_op *op = &r->op;
  size_t bytes = (size_t)op->count * sl_dtype_size(op->dt);
  sl_comm_account(c, r);
  switch (op->kind) {
  case SL_COLL_ALLGATHER:
  case SL_COLL_REDUCE_SCATTER:
    if (bytes && op->send != op->recv) {
      if (!b->copy) memmove(op->recv, op->send, bytes);
      else if (b->copy(b->ctx, op->recv, op->send, bytes) != 0)
        return sl_comm_set_error("%s #%llu (%lld x %s) on comm %s (self): the device copy failed: %s",
                                 sl_coll_name((sl_coll_kind)op->kind), (unsigned long long)op->seq,
                                 (long long)op->count, sl_dtype_name(op->dt), c->name, sl_errmsg());
    }
    break;
  case SL_COLL_ALLTOALL: { /* one rank: the block to itself (scount[0] == rcount[0], checked at issue) */
    size_t es = sl_dtype_size(op->dt), n = (size_t)op->a2a[0] * es;
    char *dst = n ? (char *)op->recv + (size_t)op->a2a[3] * es : NULL;
    const char *src = n ? (const char *)op->send + (size_t)op->a2a[1] * es : NULL;
    if (!n) break;
    if (!b->copy) memmove(dst, src, n);
    else if (b->copy(b->ctx, dst, src, n) != 0)
      return sl_comm_set_error("alltoall #%llu (%lld x %s) on comm %s (self): the device copy failed: %s",
                               (unsigned long long)op->seq, (long long)op->count, sl_dtype_name(op->dt), c->name,
                               sl_errmsg());
    break;
  }
  case SL_COLL_ALLREDUCE:
  case SL_COLL_BROADCAST:
  case SL_COLL_BARRIER: break;
  case SL_OPK_SPLIT: {
    char name[96];
    snprintf(name, sizeof name, "%.60s/s%llu:c%d", c->name, (unsigned long long)op->seq, op->color);
    uint64_t z = sl_comm_child_uid(c->uid, op->seq);
    sl_comm *child = make_self(name, z | 1, b->copy, b->ctx);
    if (!child) return sl_comm_set_error("split of comm %s (self): out of memory", c->name);
    *op->split_out = child;
    break;
  }
  case SL_COLL_SEND:
  case SL_COLL_RECV:
    if (b->copy)
      return sl_comm_set_error("%s on comm %s (one-rank device comm): send/recv is not supported",
                               sl_coll_name((sl_coll_kind)op->kind), c->name);
    pthread_mutex_lock(&c->mu);
    match_p2p_locked(c, r);
    pthread_mutex_unlock(&c->mu);
    return SL_COMM_OK;
  default: return sl_comm_set_error("unknown operation kind %d on comm %s (self)", op->kind, c->name);
  }
  finish(r, SL_COMM_OK, "");
  return SL_COMM_OK;
}

static int self_wait(sl_comm_req *r) {
  sl_comm *c = r->c;
  self_be *b = c->be;
  pthread_mutex_lock(&c->mu);
  if (!r->done) { /* an unmatched send/recv: nothing can match it any more */
    sl_comm_req **pp = &b->pend;
    while (*pp && *pp != r) pp = &(*pp)->next;
    if (*pp) *pp = r->next;
    char msg[300];
    snprintf(msg, sizeof msg,
             "%s to/from self (tag %d) on comm %s (self) waited on before its matching %s "
             "was issued: it can never complete",
             sl_coll_name((sl_coll_kind)r->op.kind), r->op.tag, c->name, r->op.kind == SL_COLL_SEND ? "recv" : "send");
    finish(r, SL_COMM_ERR, msg);
  }
  pthread_mutex_unlock(&c->mu);
  int st = r->status;
  if (st != SL_COMM_OK) sl_comm_set_error("%s", r->err);
  free(r);
  return st;
}

static int self_test(sl_comm_req *r) {
  pthread_mutex_lock(&r->c->mu);
  int d = r->done;
  pthread_mutex_unlock(&r->c->mu);
  return d;
}

/* ---- world -------------------------------------------------------------- */

int sl_comm_self_world_init(sl_comm **world) {
  sl_comm *w = make_self("world", 1, NULL, NULL);
  if (!w) return sl_comm_set_error("sl_comm_world_init: out of memory");
  *world = w;
  return SL_COMM_OK;
}

static void self_world_finalize(void) {}

const sl_comm_world_be sl_comm_self_world = {
    .abi = SL_COMM_WORLD_ABI, .name = "self", .world_init = NULL, .world_finalize = self_world_finalize, .abort = NULL};

int sl_comm_local_create(const char *name, sl_comm_copy_fn copy, void *ctx, sl_comm **out) {
  if (!out) return sl_comm_set_error("sl_comm_local_create: out is NULL");
  *out = NULL;
  if (!copy) return sl_comm_set_error("sl_comm_local_create: copy function is NULL");
  uint64_t uid = __atomic_add_fetch(&g_uid_next, 2, __ATOMIC_SEQ_CST);
  sl_comm *c = make_self(name ? name : "local", uid, copy, ctx);
  if (!c) return sl_comm_set_error("sl_comm_local_create: out of memory");
  *out = c;
  return SL_COMM_OK;
}
