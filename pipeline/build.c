/* pipeline/build.c — the static pipeline schedule builder: the compute order
 * of each schedule, its unit-cost timeline, the transfers merged in one
 * global order, the facts (bubble, in-flight peaks, transfer counts)
 * (pipeline/pipeline.h, docs/pipeline.md). The checker is pipeline/check.c, the
 * layer layout of stages pipeline/layout.c. */
#include "pipeline/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const KIND_NAME[SL_PP_NKINDS] = {"gpipe", "1f1b", "interleaved", "zb1p"};

void sl_pp_spec_defaults(sl_pp_spec *s) {
  memset(s, 0, sizeof *s);
  s->kind = SL_PP_1F1B;
  s->P = s->m = s->V = 1;
}

const char *sl_pp_kind_name(sl_pp_kind k) { return k >= 0 && k < SL_PP_NKINDS ? KIND_NAME[k] : "?"; }

int sl_pp_kind_parse(const char *name, sl_pp_kind *out) {
  for (int k = 0; k < SL_PP_NKINDS; k++)
    if (name && !strcmp(name, KIND_NAME[k])) {
      *out = (sl_pp_kind)k;
      return SL_OK;
    }
  return sl_fail(SL_EINPUT, "--pp-schedule: expected gpipe, 1f1b, interleaved or zb1p, found '%s'", name ? name : "");
}

/* ---- spec checks: the refusals ------------------------------------------ */
static int check_spec(sl_pp_spec *s) {
  if (s->P < 1 || s->P > 4096) return sl_fail(SL_EINPUT, "--pp must be in [1, 4096], found %d", s->P);
  if (s->m < 1 || s->m > (1 << 20))
    return sl_fail(SL_EINPUT, "--micro-batches must be in [1, 1048576], found %d", s->m);
  if (s->V < 1 || s->V > 64) return sl_fail(SL_EINPUT, "--pp-virtual must be in [1, 64], found %d", s->V);
  if (s->bytes < 0) return sl_fail(SL_EINPUT, "pipeline transfer bytes must be >= 0, found %lld", (long long)s->bytes);
  const char *k = sl_pp_kind_name(s->kind);
  if (s->kind < 0 || s->kind >= SL_PP_NKINDS) return sl_fail(SL_EINPUT, "unknown pipeline schedule %d", (int)s->kind);
  if (s->kind == SL_PP_INTERLEAVED) {
    if (s->V < 2)
      return sl_fail(SL_EINPUT,
                     "--pp-schedule interleaved needs --pp-virtual V >= 2 chunks per rank (found %d); "
                     "with one chunk use --pp-schedule 1f1b",
                     s->V);
    if (s->m % s->P)
      return sl_fail(SL_EINPUT,
                     "--pp-schedule interleaved needs the micro-batches (%d) to be a multiple of --pp (%d), "
                     "as Megatron's interleaving does: use --micro-batches %d%s%.0d",
                     s->m, s->P, s->m > s->P ? s->m / s->P * s->P : s->P, s->m > s->P ? " or " : "",
                     s->m > s->P ? (s->m / s->P + 1) * s->P : 0);
  } else if (s->V != 1)
    return sl_fail(SL_EINPUT,
                   "--pp-virtual %d: only --pp-schedule interleaved has virtual chunks (%s has one per rank)", s->V, k);
  if ((s->kind == SL_PP_1F1B || s->kind == SL_PP_ZB1P) && s->m < s->P)
    return sl_fail(SL_EINPUT,
                   "--pp-schedule %s needs at least as many micro-batches as stages: %d micro-batches < "
                   "--pp %d (the first stage warms up with P - 1 forwards before its first backward; with fewer "
                   "micro-batches the pipeline never reaches its steady state); use --grad-accum >= %d (--micro-batches "
                   "in pp-schedule and bench pipeline), fewer stages, or --pp-schedule gpipe",
                   k, s->m, s->P, s->P);
  int zb = s->kind == SL_PP_ZB1P;
  if (!s->cost_f) s->cost_f = 1;
  if (!s->cost_b) s->cost_b = zb ? 1 : 2;
  if (!s->cost_w) s->cost_w = zb ? 1 : 0;
  if (s->cost_f < 1 || s->cost_b < 1 || (zb ? s->cost_w < 1 : s->cost_w != 0) || s->cost_f > 1000000 ||
      s->cost_b > 1000000 || s->cost_w > 1000000)
    return sl_fail(SL_EINPUT,
                   "pipeline op costs must be integers in [1, 1e6] (W only under zb1p), found F %lld B %lld W %lld",
                   (long long)s->cost_f, (long long)s->cost_b, (long long)s->cost_w);
  if ((int64_t)s->P * s->V * s->m > (1 << 21))
    return sl_fail(SL_EINPUT, "pipeline schedule too large: %d stages x %d chunks x %d micro-batches", s->P, s->V,
                   s->m);
  return SL_OK;
}

/* ---- compute orders ------------------------------------------------------ */
typedef struct {
  sl_pp_op *v;
  int n, cap;
} oplist;

static int push(oplist *l, int kind, int mb, int chunk) {
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 64;
    sl_pp_op *x = realloc(l->v, (size_t)nc * sizeof *x);
    if (!x) return sl_fail(SL_ENOMEM, "pipeline schedule: out of memory");
    l->v = x;
    l->cap = nc;
  }
  sl_pp_op *o = &l->v[l->n++];
  memset(o, 0, sizeof *o);
  o->kind = (int8_t)kind;
  o->dir = -1;
  o->mb = mb;
  o->chunk = chunk;
  o->peer = -1;
  return SL_OK;
}

/* gpipe, 1f1b, interleaved: the fixed orders. */
static int order_fixed(const sl_pp_spec *s, int r, oplist *l) {
  int P = s->P, m = s->m, V = s->V, rc = SL_OK;
  if (s->kind == SL_PP_GPIPE) {
    for (int i = 0; i < m && !rc; i++) rc = push(l, SL_PP_F, i, 0);
    for (int i = 0; i < m && !rc; i++) rc = push(l, SL_PP_B, i, 0);
    return rc;
  }
  /* 1f1b: warmup P - r - 1 forwards; interleaved (Megatron): 2 (P - r - 1) +
   * (V - 1) P; then one forward, one backward; then the remaining backwards.
   * The k-th forward of a rank is chunk (k / P) % V of micro-batch
   * (k / (P V)) P + k % P; the k-th backward the same with chunk V - 1 - c. */
  int total = m * V;
  int warm = s->kind == SL_PP_1F1B ? P - r - 1 : 2 * (P - r - 1) + (V - 1) * P;
  if (warm > total) warm = total;
#define MB(k) (((k) / (P * V)) * P + (k) % P)
#define CF(k) (((k) / P) % V)
  for (int k = 0; k < warm && !rc; k++) rc = push(l, SL_PP_F, MB(k), CF(k));
  for (int k = 0; k < total - warm && !rc; k++) {
    rc = push(l, SL_PP_F, MB(warm + k), CF(warm + k));
    if (!rc) rc = push(l, SL_PP_B, MB(k), V - 1 - CF(k));
  }
  for (int k = total - warm; k < total && !rc; k++) rc = push(l, SL_PP_B, MB(k), V - 1 - CF(k));
#undef MB
#undef CF
  return rc;
}

/* zb1p (zero bubble H1): list scheduling on the unit-cost clock. A free rank
 * runs, by priority, the next F whose activation is there while fewer than
 * P - r micro-batches wait for their B (1F1B's warmup and activation count)
 * and fewer than P wait for their W (1F1B's first-stage memory), else the
 * next B whose gradient is there, else the next W: W fills the bubbles.
 * Each kind runs in micro-batch order. At F = B = W this reaches the paper's
 * (P-1)(F+B-W) bubble exactly (tests/unit/pipeline/test_pp_schedule.c). */
static int order_zb1p(const sl_pp_spec *s, oplist *l) {
  int P = s->P, m = s->m, rc = SL_OK;
  int64_t *endF = malloc(sizeof(int64_t) * (size_t)P * m), *endB = malloc(sizeof(int64_t) * (size_t)P * m);
  int64_t *fr = calloc((size_t)P, sizeof(int64_t));
  int *nf = calloc((size_t)P, sizeof(int)), *nb = calloc((size_t)P, sizeof(int)), *nw = calloc((size_t)P, sizeof(int));
  if (!endF || !endB || !fr || !nf || !nb || !nw) {
    rc = sl_fail(SL_ENOMEM, "pipeline schedule: out of memory");
    goto done;
  }
  for (int64_t i = 0; i < (int64_t)P * m; i++) endF[i] = endB[i] = -1;
#define DONE(x, t) ((x) >= 0 && (x) <= (t))
  int64_t t = 0, left = (int64_t)3 * P * m;
  while (left > 0 && !rc) {
    for (int r = 0; r < P && !rc; r++) {
      if (fr[r] > t) continue;
      int64_t *eF = endF + (int64_t)r * m, *eB = endB + (int64_t)r * m;
      int b = nb[r], f = nf[r], w = nw[r];
      if (f < m && (r == 0 || DONE(endF[(int64_t)(r - 1) * m + f], t)) && f - b < P - r && f - w < P) {
        rc = push(&l[r], SL_PP_F, f, 0);
        eF[f] = fr[r] = t + s->cost_f;
        nf[r]++;
      } else if (b < f && DONE(eF[b], t) && (r == P - 1 || DONE(endB[(int64_t)(r + 1) * m + b], t))) {
        rc = push(&l[r], SL_PP_B, b, 0);
        eB[b] = fr[r] = t + s->cost_b;
        nb[r]++;
      } else if (w < b && DONE(eB[w], t)) {
        rc = push(&l[r], SL_PP_W, w, 0);
        fr[r] = t + s->cost_w;
        nw[r]++;
      } else continue;
      left--;
    }
    int64_t next = -1;
    for (int r = 0; r < P; r++)
      if (fr[r] > t && (next < 0 || fr[r] < next)) next = fr[r];
    if (next < 0 && left > 0) rc = sl_fail(SL_EINTERNAL, "zb1p list scheduling stalled at time %lld", (long long)t);
    t = next;
  }
#undef DONE
done:
  free(endF);
  free(endB);
  free(fr);
  free(nf);
  free(nb);
  free(nw);
  return rc;
}

/* ---- timeline: each op as early as its rank and its inputs allow -------- */
static int timeline(const sl_pp_spec *s, oplist *l) {
  int P = s->P, m = s->m, S = P * s->V, rc = SL_OK;
  size_t n = (size_t)S * m;
  int64_t *eF = malloc(n * sizeof(int64_t)), *eB = malloc(n * sizeof(int64_t));
  int64_t *fr = calloc((size_t)P, sizeof(int64_t));
  int *pos = calloc((size_t)P, sizeof(int));
  if (!eF || !eB || !fr || !pos) {
    rc = sl_fail(SL_ENOMEM, "pipeline schedule: out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) eF[i] = eB[i] = -1;
  for (int moved = 1; moved;) {
    moved = 0;
    for (int r = 0; r < P; r++)
      for (; pos[r] < l[r].n; pos[r]++) {
        sl_pp_op *o = &l[r].v[pos[r]];
        int64_t vs = (int64_t)o->chunk * P + r, at = (int64_t)vs * m + o->mb, dep = 0, cost = s->cost_f;
        if (o->kind == SL_PP_F) dep = vs > 0 ? eF[at - m] : 0;
        else if (o->kind == SL_PP_B) {
          dep = vs < S - 1 ? eB[at + m] : eF[at];
          if (eF[at] < 0) dep = -1;
          cost = s->cost_b;
        } else {
          dep = eB[at];
          cost = s->cost_w;
        }
        if (dep < 0) break;
        o->start = dep > fr[r] ? dep : fr[r];
        o->end = fr[r] = o->start + cost;
        if (o->kind == SL_PP_F) eF[at] = o->end;
        else if (o->kind == SL_PP_B) eB[at] = o->end;
        moved = 1;
      }
  }
  for (int r = 0; r < P && !rc; r++)
    if (pos[r] < l[r].n)
      rc = sl_fail(SL_EINTERNAL, "pipeline %s: rank %d's compute order waits forever at op %d",
                   sl_pp_kind_name(s->kind), r, pos[r]);
done:
  free(eF);
  free(eB);
  free(fr);
  free(pos);
  return rc;
}

/* ---- transfers in one global order --------------------------------------- */
typedef struct {
  int64_t key, id; /* position (time), global tie-break */
  int type;        /* 0 transfer, 1 compute */
  sl_pp_op op;
} event;

static int event_cmp(const void *a, const void *b) {
  const event *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  if (x->type != y->type) return x->type - y->type;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* 1 when compute op o of rank r hands its output to another rank: the
 * direction and the receiving stage in *dir, *to. */
static int transfer_of(const sl_pp_op *o, int r, int P, int S, int *dir, int *to) {
  int vs = o->chunk * P + r;
  if (o->kind == SL_PP_F && vs < S - 1) *dir = SL_PP_ACT, *to = vs + 1;
  else if (o->kind == SL_PP_B && vs > 0) *dir = SL_PP_GRAD, *to = vs - 1;
  else return 0;
  return *to % P != r; /* both stages on this rank (P = 1 with chunks): no transfer */
}

/* The end of the op of list l running strictly across time p (start < p <
 * end), or -1 when l is between ops at p. l is in start order. */
static int64_t busy_until(const oplist *l, int64_t p) {
  int lo = 0, hi = l->n; /* first op starting at or after p */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (l->v[mid].start < p) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && l->v[lo - 1].end > p ? l->v[lo - 1].end : -1;
}

/* The position of a transfer whose data is ready at t on the rank of list a
 * and consumed at c on the rank of list b: the first time >= t at which
 * neither rank is inside an op, so that a send that blocks until the
 * receive is posted stalls neither rank (issuing it at t would hold the
 * sender until the receiver ends the op it is in); t when that time is
 * after c (no position keeps both ranks on the timeline). */
static int64_t meet(const oplist *a, const oplist *b, int64_t t, int64_t c) {
  int64_t p = t, e;
  while ((e = busy_until(a, p)) >= 0 || (e = busy_until(b, p)) >= 0) p = e;
  return p <= c ? p : t;
}

static int merge_transfers(const sl_pp_spec *s, oplist *comp, sl_pp_sched *out) {
  int P = s->P, m = s->m, S = P * s->V, rc = SL_OK, dir, to;
  int *fill = calloc((size_t)P, sizeof(int));
  event **ev = calloc((size_t)P, sizeof(event *));
  int64_t *sF = malloc((size_t)S * m * sizeof(int64_t)), *sB = malloc((size_t)S * m * sizeof(int64_t));
  if (!fill || !ev || !sF || !sB) {
    rc = sl_fail(SL_ENOMEM, "pipeline schedule: out of memory");
    goto done;
  }
  for (int r = 0; r < P; r++) /* start of each (stage, micro-batch)'s F and B: the consumers of transfers */
    for (int i = 0; i < comp[r].n; i++) {
      const sl_pp_op *o = &comp[r].v[i];
      size_t at = (size_t)(o->chunk * P + r) * m + o->mb;
      if (o->kind == SL_PP_F) sF[at] = o->start;
      else if (o->kind == SL_PP_B) sB[at] = o->start;
    }
  for (int r = 0; r < P; r++) /* fill: events per rank, counted first */
    for (int i = 0; i < comp[r].n; i++) {
      fill[r]++;
      if (transfer_of(&comp[r].v[i], r, P, S, &dir, &to)) fill[r]++, fill[to % P]++;
    }
  for (int r = 0; r < P; r++) {
    ev[r] = malloc((size_t)(fill[r] ? fill[r] : 1) * sizeof(event));
    if (!ev[r]) {
      rc = sl_fail(SL_ENOMEM, "pipeline schedule: out of memory");
      goto done;
    }
    fill[r] = 0;
  }
  for (int r = 0; r < P; r++)
    for (int i = 0; i < comp[r].n; i++) {
      const sl_pp_op *o = &comp[r].v[i];
      ev[r][fill[r]++] = (event){.key = o->start, .id = i, .type = 1, .op = *o};
      if (!transfer_of(o, r, P, S, &dir, &to)) continue;
      int d = to % P;
      int64_t id = (((int64_t)r * 2 + dir) * S + (o->chunk * P + r)) * m + o->mb;
      int64_t pos = meet(&comp[r], &comp[d], o->end, (dir == SL_PP_ACT ? sF : sB)[(size_t)to * m + o->mb]);
      sl_pp_op snd = {.kind = SL_PP_SEND,
                      .dir = (int8_t)dir,
                      .mb = o->mb,
                      .chunk = o->chunk,
                      .peer = d,
                      .bytes = s->bytes,
                      .start = pos,
                      .end = pos};
      sl_pp_op rcv = snd;
      rcv.kind = SL_PP_RECV;
      rcv.chunk = to / P;
      rcv.peer = r;
      ev[r][fill[r]++] = (event){.key = pos, .id = id, .type = 0, .op = snd};
      ev[d][fill[d]++] = (event){.key = pos, .id = id, .type = 0, .op = rcv};
    }
  for (int r = 0; r < P; r++) {
    qsort(ev[r], (size_t)fill[r], sizeof(event), event_cmp);
    out->ops[r] = malloc((size_t)(fill[r] ? fill[r] : 1) * sizeof(sl_pp_op));
    if (!out->ops[r]) {
      rc = sl_fail(SL_ENOMEM, "pipeline schedule: out of memory");
      goto done;
    }
    out->nops[r] = fill[r];
    for (int i = 0; i < fill[r]; i++) out->ops[r][i] = ev[r][i].op;
  }
done:
  if (ev)
    for (int r = 0; r < P; r++) free(ev[r]);
  free(ev);
  free(fill);
  free(sF);
  free(sB);
  return rc;
}

/* ---- facts ---------------------------------------------------------------- */
static void facts(sl_pp_sched *s) {
  int zb = s->spec.kind == SL_PP_ZB1P;
  s->makespan = 0;
  for (int r = 0; r < s->spec.P; r++) {
    int cur = 0;
    for (int i = 0; i < s->nops[r]; i++) {
      const sl_pp_op *o = &s->ops[r][i];
      if (o->kind == SL_PP_SEND) s->sends[r]++, s->send_bytes[r] += o->bytes;
      else if (o->kind == SL_PP_RECV) s->recvs[r]++, s->recv_bytes[r] += o->bytes;
      else {
        s->busy[r] += o->end - o->start;
        if (o->end > s->makespan) s->makespan = o->end;
        if (o->kind == SL_PP_F && ++cur > s->peak_inflight[r]) s->peak_inflight[r] = cur;
        if (o->kind == (zb ? SL_PP_W : SL_PP_B)) cur--;
      }
    }
  }
  for (int r = 0; r < s->spec.P; r++) s->idle[r] = s->makespan - s->busy[r];
}

void sl_pp_sched_free(sl_pp_sched *s) {
  if (!s) return;
  if (s->ops)
    for (int r = 0; r < s->spec.P; r++) free(s->ops[r]);
  free(s->ops);
  free(s->nops);
  free(s->busy);
  free(s->idle);
  free(s->peak_inflight);
  free(s->sends);
  free(s->recvs);
  free(s->send_bytes);
  free(s->recv_bytes);
  memset(s, 0, sizeof *s);
}

int sl_pp_build(const sl_pp_spec *spec, sl_pp_sched *out) {
  memset(out, 0, sizeof *out);
  sl_pp_spec s = *spec;
  int rc = check_spec(&s);
  if (rc) return rc;
  int P = s.P;
  out->spec = s;
  out->S = P * s.V;
  oplist *comp = calloc((size_t)P, sizeof(oplist));
  out->ops = calloc((size_t)P, sizeof(sl_pp_op *));
  out->nops = calloc((size_t)P, sizeof(int));
  out->busy = calloc((size_t)P, sizeof(int64_t));
  out->idle = calloc((size_t)P, sizeof(int64_t));
  out->peak_inflight = calloc((size_t)P, sizeof(int));
  out->sends = calloc((size_t)P, sizeof(int64_t));
  out->recvs = calloc((size_t)P, sizeof(int64_t));
  out->send_bytes = calloc((size_t)P, sizeof(int64_t));
  out->recv_bytes = calloc((size_t)P, sizeof(int64_t));
  if (!comp || !out->ops || !out->nops || !out->busy || !out->idle || !out->peak_inflight || !out->sends ||
      !out->recvs || !out->send_bytes || !out->recv_bytes) {
    rc = sl_fail(SL_ENOMEM, "pipeline schedule: out of memory");
    goto done;
  }
  if (s.kind == SL_PP_ZB1P) rc = order_zb1p(&s, comp);
  else
    for (int r = 0; r < P && !rc; r++) rc = order_fixed(&s, r, &comp[r]);
  if (!rc) rc = timeline(&s, comp);
  if (!rc) rc = merge_transfers(&s, comp, out);
  if (!rc) {
    facts(out);
    rc = sl_pp_check(out);
  }
done:
  if (comp)
    for (int r = 0; r < P; r++) free(comp[r].v);
  free(comp);
  if (rc) sl_pp_sched_free(out);
  return rc;
}

/* ---- printing ------------------------------------------------------------- */
void sl_pp_op_str(const sl_pp_sched *s, const sl_pp_op *o, char *buf, size_t cap) {
  static const char K[] = "FBW";
  if (o->kind <= SL_PP_W) {
    if (s->spec.V > 1) snprintf(buf, cap, "%c%d:%d", K[o->kind], o->mb, o->chunk);
    else snprintf(buf, cap, "%c%d", K[o->kind], o->mb);
  } else
    snprintf(buf, cap, "%s %s mb %d chunk %d %s rank %d", o->kind == SL_PP_SEND ? "send" : "recv",
             o->dir == SL_PP_ACT ? "act" : "grad", o->mb, o->chunk, o->kind == SL_PP_SEND ? "->" : "<-", o->peer);
}
