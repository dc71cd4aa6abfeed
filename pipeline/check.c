/* pipeline/check.c — sl_pp_check: replays every rank's op list of a
 * pipeline schedule with blocking rendezvous send/recv (each transfer
 * completes only when both ranks have it at the head of their lists, as
 * NCCL's issue-order send/recv and a synchronous MPI send do) and proves
 * that all ranks finish, that every op's inputs are on its rank when it
 * runs, and that every micro-batch's F and B (and W under zb1p) run exactly
 * once per stage, on the stage's rank. Independent of the builder: it reads
 * only the lists. Also sl_pp_replay: the lists on a clock with real op and
 * transfer durations, sends blocking or overlapped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline.h"

typedef struct {
  const sl_pp_sched *s;
  int P, m, S;
  uint8_t *f, *b, *w; /* (S*m) times each op ran */
  uint8_t *rcv[2];    /* (S*m) per direction: data of (stage, mb) received on the stage's rank */
} ck;

/* stage of the data a transfer carries: the sending stage */
static int src_stage(const ck *c, const sl_pp_op *o, int r) {
  int vs = o->chunk * c->P + r;
  if (o->kind == SL_PP_SEND) return vs;
  return o->dir == SL_PP_ACT ? vs - 1 : vs + 1;
}

static int bad(const ck *c, int r, int i, const char *why) {
  char d[96];
  sl_pp_op_str(c->s, &c->s->ops[r][i], d, sizeof d);
  return sl_fail(SL_EINTERNAL, "pipeline %s P=%d m=%d V=%d: rank %d op %d (%s): %s", sl_pp_kind_name(c->s->spec.kind),
                 c->P, c->m, c->s->spec.V, r, i, d, why);
}

/* Static validity of one op (ranges, peers, stage mapping). */
static int valid(const ck *c, int r, int i) {
  const sl_pp_op *o = &c->s->ops[r][i];
  if (o->mb < 0 || o->mb >= c->m || o->chunk < 0 || o->chunk >= c->s->spec.V)
    return bad(c, r, i, "micro-batch or chunk out of range");
  if (o->kind == SL_PP_W && c->s->spec.kind != SL_PP_ZB1P) return bad(c, r, i, "a W op outside zb1p");
  if (o->kind < SL_PP_SEND) return SL_OK;
  if (o->kind != SL_PP_RECV && o->kind != SL_PP_SEND) return bad(c, r, i, "unknown op kind");
  if (o->dir != SL_PP_ACT && o->dir != SL_PP_GRAD) return bad(c, r, i, "unknown transfer direction");
  int from = src_stage(c, o, r), to = from + (o->dir == SL_PP_ACT ? 1 : -1);
  if (from < 0 || from >= c->S || to < 0 || to >= c->S) return bad(c, r, i, "transfer past the first or last stage");
  int want = (o->kind == SL_PP_SEND ? to : from) % c->P;
  if (o->peer != want || o->peer == r) return bad(c, r, i, "peer is not the rank of the neighbouring stage");
  return SL_OK;
}

/* Can compute op o on rank r run now? */
static int inputs_ready(const ck *c, const sl_pp_op *o, int r) {
  int vs = o->chunk * c->P + r;
  size_t at = (size_t)vs * c->m + o->mb;
  if (o->kind == SL_PP_F) {
    if (vs == 0) return 1;
    return (vs - 1) % c->P == r ? c->f[at - c->m] > 0 : c->rcv[SL_PP_ACT][at] > 0;
  }
  if (o->kind == SL_PP_B) {
    if (!c->f[at]) return 0;
    if (vs == c->S - 1) return 1;
    return (vs + 1) % c->P == r ? c->b[at + c->m] > 0 : c->rcv[SL_PP_GRAD][at] > 0;
  }
  return c->b[at] > 0; /* W */
}

static int matches(const ck *c, const sl_pp_op *snd, int rs, const sl_pp_op *rcv, int rr) {
  return snd->kind == SL_PP_SEND && rcv->kind == SL_PP_RECV && snd->peer == rr && rcv->peer == rs &&
         snd->dir == rcv->dir && snd->mb == rcv->mb && snd->bytes == rcv->bytes &&
         src_stage(c, snd, rs) == src_stage(c, rcv, rr);
}

int sl_pp_check(const sl_pp_sched *s) {
  ck c = {.s = s, .P = s->spec.P, .m = s->spec.m, .S = s->spec.P * s->spec.V};
  size_t n = (size_t)c.S * c.m;
  int rc = SL_OK, zb = s->spec.kind == SL_PP_ZB1P;
  int *pos = calloc((size_t)c.P, sizeof(int));
  c.f = calloc(n, 1), c.b = calloc(n, 1), c.w = calloc(n, 1), c.rcv[0] = calloc(n, 1), c.rcv[1] = calloc(n, 1);
  if (!pos || !c.f || !c.b || !c.w || !c.rcv[0] || !c.rcv[1]) {
    rc = sl_fail(SL_ENOMEM, "pipeline check: out of memory");
    goto done;
  }
  for (int r = 0; r < c.P && !rc; r++)
    for (int i = 0; i < s->nops[r] && !rc; i++) rc = valid(&c, r, i);
  for (int moved = 1; moved && !rc;) {
    moved = 0;
    for (int r = 0; r < c.P && !rc; r++)
      while (pos[r] < s->nops[r] && !rc) {
        const sl_pp_op *o = &s->ops[r][pos[r]];
        size_t at = (size_t)(o->chunk * c.P + r) * c.m + o->mb;
        if (o->kind <= SL_PP_W) {
          if (!inputs_ready(&c, o, r)) break;
          uint8_t *cnt = o->kind == SL_PP_F ? c.f : o->kind == SL_PP_B ? c.b : c.w;
          if (cnt[at]++) rc = bad(&c, r, pos[r], "runs a second time");
          pos[r]++;
          moved = 1;
          continue;
        }
        /* a transfer: the peer must have the other half at its head */
        int p = o->peer;
        if (pos[p] >= s->nops[p]) break;
        const sl_pp_op *q = &s->ops[p][pos[p]];
        const sl_pp_op *snd = o->kind == SL_PP_SEND ? o : q, *rcv = o->kind == SL_PP_SEND ? q : o;
        int rs = o->kind == SL_PP_SEND ? r : p, rr = o->kind == SL_PP_SEND ? p : r;
        if (!matches(&c, snd, rs, rcv, rr)) break;
        int from = src_stage(&c, snd, rs);
        size_t sat = (size_t)from * c.m + snd->mb;
        if (!(snd->dir == SL_PP_ACT ? c.f[sat] : c.b[sat])) {
          rc = bad(&c, rs, pos[rs], "sends data its rank has not computed yet");
          break;
        }
        size_t dat = (size_t)(from + (snd->dir == SL_PP_ACT ? 1 : -1)) * c.m + snd->mb;
        if (c.rcv[snd->dir][dat]++) rc = bad(&c, rr, pos[rr], "receives the same data a second time");
        pos[r]++;
        pos[p]++;
        moved = 1;
      }
  }
  if (rc) goto done;
  for (int r = 0; r < c.P; r++)
    if (pos[r] < s->nops[r]) {
      char msg[1024];
      int len = 0;
      for (int q = 0; q < c.P && len < 900; q++)
        if (pos[q] < s->nops[q]) {
          char d[96];
          sl_pp_op_str(s, &s->ops[q][pos[q]], d, sizeof d);
          len +=
              snprintf(msg + len, sizeof msg - (size_t)len, "%s rank %d at op %d (%s)", len ? ";" : "", q, pos[q], d);
        }
      rc = sl_fail(SL_EINTERNAL, "pipeline %s P=%d m=%d V=%d deadlocks under blocking send/recv:%s",
                   sl_pp_kind_name(s->spec.kind), c.P, c.m, s->spec.V, msg);
      goto done;
    }
  for (int vs = 0; vs < c.S && !rc; vs++)
    for (int mb = 0; mb < c.m && !rc; mb++) {
      size_t at = (size_t)vs * c.m + mb;
      const char *miss = c.f[at] != 1 ? "F" : c.b[at] != 1 ? "B" : c.w[at] != (uint8_t)zb ? "W" : NULL;
      if (!miss && vs > 0 && (vs - 1) % c.P != vs % c.P && c.rcv[SL_PP_ACT][at] != 1) miss = "activation transfer";
      if (!miss && vs < c.S - 1 && (vs + 1) % c.P != vs % c.P && c.rcv[SL_PP_GRAD][at] != 1) miss = "gradient transfer";
      if (miss)
        rc = sl_fail(SL_EINTERNAL, "pipeline %s P=%d m=%d V=%d: stage %d (rank %d) lacks the %s of micro-batch %d",
                     sl_pp_kind_name(s->spec.kind), c.P, c.m, s->spec.V, vs, vs % c.P, miss, mb);
    }
done:
  free(pos);
  free(c.f);
  free(c.b);
  free(c.w);
  free(c.rcv[0]);
  free(c.rcv[1]);
  return rc;
}

/* sl_pp_replay (pipeline/pipeline.h): the lists on a clock with durations. */
double sl_pp_replay(const sl_pp_sched *s, double unit, double xfer, int overlap, double *busy) {
  int P = s->spec.P, moved = 1;
  int *pos = calloc((size_t)P, sizeof(int)), *head = calloc((size_t)P * 2, sizeof(int)),
      *tail = calloc((size_t)P * 2, sizeof(int));
  double *t = calloc((size_t)P, sizeof(double)), *sent = calloc((size_t)P, sizeof(double)), mk = -1;
  int64_t nx = 1;
  for (int r = 0; r < P; r++) nx = s->sends[r] > nx ? s->sends[r] : nx;
  /* FIFO of post times per (sender, side): side 0 to rank + 1, 1 to rank - 1
   * (mod P; the only peers a checked list has; at P = 2 one FIFO, in the
   * one order both ranks issue) */
  double *post = calloc((size_t)nx * (size_t)P * 2, sizeof(double));
  if (!pos || !head || !tail || !t || !sent || !post) goto done;
#define FIFO(src, dst) (2 * (src) + ((dst) == ((src) + 1) % P ? 0 : 1))
  for (int r = 0; r < P && busy; r++) busy[r] = 0;
  while (moved) {
    moved = 0;
    for (int r = 0; r < P; r++)
      while (pos[r] < s->nops[r]) {
        const sl_pp_op *o = &s->ops[r][pos[r]];
        int p = o->peer;
        if (o->kind <= SL_PP_W) {
          double d = (double)(o->kind == SL_PP_F   ? s->spec.cost_f
                              : o->kind == SL_PP_B ? s->spec.cost_b
                                                   : s->spec.cost_w) *
                     unit;
          t[r] += d;
          if (busy) busy[r] += d;
        } else if (overlap && o->kind == SL_PP_SEND) {
          int q = FIFO(r, p);
          post[(size_t)q * (size_t)nx + (size_t)tail[q]++] = t[r];
        } else if (overlap) { /* a receive: its send must be posted */
          int q = FIFO(p, r);
          if (head[q] == tail[q]) break;
          double at = post[(size_t)q * (size_t)nx + (size_t)head[q]++];
          t[r] = (t[r] > at ? t[r] : at) + xfer;
          if (t[r] > sent[p]) sent[p] = t[r];
        } else { /* blocking: the peer's head must be the other half */
          if (pos[p] >= s->nops[p] || s->ops[p][pos[p]].peer != r ||
              s->ops[p][pos[p]].kind + o->kind != SL_PP_SEND + SL_PP_RECV)
            break;
          t[r] = t[p] = (t[r] > t[p] ? t[r] : t[p]) + xfer;
          pos[p]++;
        }
        pos[r]++;
        moved = 1;
      }
  }
#undef FIFO
  mk = 0;
  for (int r = 0; r < P; r++) {
    if (pos[r] < s->nops[r]) {
      mk = -1;
      break;
    }
    if (sent[r] > t[r]) t[r] = sent[r];
    if (t[r] > mk) mk = t[r];
  }
done:
  free(pos), free(head), free(tail), free(t), free(sent), free(post);
  return mk;
}
