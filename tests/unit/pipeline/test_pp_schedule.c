/* tests/unit/pipeline/test_pp_schedule.c — the static pipeline schedule builder
 * (pipeline/pipeline.h) against closed forms: every schedule for P = 1..8,
 * several m and V: the checker passes (no deadlock under blocking
 * send/recv), dependencies hold in the timeline (recomputed here from the
 * lists), F/B/W counts, per-rank bubble (P-1)(F+B) for gpipe / 1f1b /
 * interleaved, zb1p's (P-1)(F+B-W) of the zero-bubble paper, transfer
 * counts and bytes 2 m (P V - 1) x bytes, in-flight peaks (gpipe m, 1f1b
 * P - r, interleaved 2(P-r-1) + (V-1)P + 1, zb1p <= P); the checker
 * on broken lists; the refusals; the layout parser and the balancer
 * against brute force. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline.h"

#include "tests/lib/check.h"

static int build(sl_pp_kind k, int P, int m, int V, int64_t bytes, sl_pp_sched *s) {
  sl_pp_spec sp;
  sl_pp_spec_defaults(&sp);
  sp.kind = k;
  sp.P = P;
  sp.m = m;
  sp.V = V;
  sp.bytes = bytes;
  return sl_pp_build(&sp, s);
}

/* Dependencies and order facts recomputed from the lists: ops of a rank do
 * not overlap, F after the previous stage's F, B after the next stage's B
 * (the last stage: after its F), W after B; B and W of each chunk run in
 * micro-batch order (gradients accumulate in the order of one process). */
static int timeline_ok(const sl_pp_sched *s, char *why, size_t cap) {
  int P = s->spec.P, m = s->spec.m, S = s->S;
  int64_t *eF = calloc((size_t)S * m, 8), *eB = calloc((size_t)S * m, 8), *sF = calloc((size_t)S * m, 8);
  int64_t *sB = calloc((size_t)S * m, 8), *sW = calloc((size_t)S * m, 8);
  int ok = 1;
  for (int r = 0; r < P; r++) {
    int64_t last_end = 0;
    int lastB[64], lastW[64];
    for (int c = 0; c < 64; c++) lastB[c] = lastW[c] = -1;
    for (int i = 0; i < s->nops[r]; i++) {
      const sl_pp_op *o = &s->ops[r][i];
      if (o->kind > SL_PP_W) continue;
      size_t at = (size_t)(o->chunk * P + r) * m + o->mb;
      if (o->start < last_end) {
        snprintf(why, cap, "rank %d op %d overlaps", r, i);
        ok = 0;
      }
      last_end = o->end;
      if (o->kind == SL_PP_F) sF[at] = o->start, eF[at] = o->end;
      else if (o->kind == SL_PP_B) {
        sB[at] = o->start, eB[at] = o->end;
        if (o->mb != lastB[o->chunk] + 1) {
          snprintf(why, cap, "rank %d B out of micro-batch order", r);
          ok = 0;
        }
        lastB[o->chunk] = o->mb;
      } else {
        sW[at] = o->start;
        if (o->mb != lastW[o->chunk] + 1) {
          snprintf(why, cap, "rank %d W out of micro-batch order", r);
          ok = 0;
        }
        lastW[o->chunk] = o->mb;
      }
    }
  }
  for (int vs = 0; vs < S && ok; vs++)
    for (int mb = 0; mb < m && ok; mb++) {
      size_t at = (size_t)vs * m + mb;
      if (vs > 0 && sF[at] < eF[at - m]) {
        snprintf(why, cap, "F stage %d mb %d before its input", vs, mb);
        ok = 0;
      }
      if (vs < S - 1 && sB[at] < eB[at + m]) {
        snprintf(why, cap, "B stage %d mb %d before its gradient", vs, mb);
        ok = 0;
      }
      if (sB[at] < eF[at]) {
        snprintf(why, cap, "B stage %d mb %d before its F", vs, mb);
        ok = 0;
      }
      if (s->spec.kind == SL_PP_ZB1P && sW[at] < eB[at]) {
        snprintf(why, cap, "W stage %d mb %d before B", vs, mb);
        ok = 0;
      }
    }
  free(eF);
  free(eB);
  free(sF);
  free(sB);
  free(sW);
  return ok;
}

static void test_schedules(void) {
  const int ms[] = {1, 2, 3, 4, 6, 8, 12, 16};
  int built = 0;
  for (int k = 0; k < SL_PP_NKINDS; k++)
    for (int P = 1; P <= 8; P++)
      for (unsigned im = 0; im < sizeof ms / sizeof ms[0]; im++)
        for (int V = 1; V <= 3; V++) {
          int m = ms[im];
          int legal = (k == SL_PP_INTERLEAVED ? V >= 2 && m % P == 0 : V == 1) &&
                      !((k == SL_PP_1F1B || k == SL_PP_ZB1P) && m < P);
          sl_pp_sched s;
          int rc = build((sl_pp_kind)k, P, m, V, 1000, &s);
          CHECK(legal ? rc == SL_OK : rc == SL_EINPUT, "%s P=%d m=%d V=%d: rc %d (%s)", sl_pp_kind_name(k), P, m, V, rc,
                sl_errmsg());
          if (rc) continue;
          built++;
          char why[160] = "";
          int64_t F = s.spec.cost_f, B = s.spec.cost_b, W = s.spec.cost_w;
          CHECK(timeline_ok(&s, why, sizeof why), "%s P=%d m=%d V=%d: %s", sl_pp_kind_name(k), P, m, V, why);
          int64_t sends = 0, recvs = 0, sbytes = 0, nF = 0, nB = 0, nW = 0;
          for (int r = 0; r < P; r++) {
            sends += s.sends[r], recvs += s.recvs[r], sbytes += s.send_bytes[r];
            for (int i = 0; i < s.nops[r]; i++)
              nF += s.ops[r][i].kind == SL_PP_F, nB += s.ops[r][i].kind == SL_PP_B, nW += s.ops[r][i].kind == SL_PP_W;
          }
          int64_t xfers = P > 1 ? 2LL * m * (P * V - 1) : 0;
          CHECK(nF == (int64_t)m * P * V && nB == nF && nW == (k == SL_PP_ZB1P ? nF : 0),
                "%s P=%d m=%d V=%d: F %lld B %lld W %lld", sl_pp_kind_name(k), P, m, V, (long long)nF, (long long)nB,
                (long long)nW);
          CHECK(sends == xfers && recvs == xfers && sbytes == xfers * 1000,
                "%s P=%d m=%d V=%d: %lld sends %lld recvs, want %lld", sl_pp_kind_name(k), P, m, V, (long long)sends,
                (long long)recvs, (long long)xfers);
          if (P > 1 && V == 1)
            for (int r = 0; r < P; r++)
              CHECK(s.sends[r] == (int64_t)m * ((r < P - 1) + (r > 0)), "rank %d sends %lld", r, (long long)s.sends[r]);
          for (int r = 0; r < P; r++) {
            int64_t busy = (int64_t)m * V * (F + B + W), idle = s.idle[r];
            CHECK(s.busy[r] == busy, "%s P=%d m=%d V=%d rank %d busy %lld want %lld", sl_pp_kind_name(k), P, m, V, r,
                  (long long)s.busy[r], (long long)busy);
            if (k == SL_PP_ZB1P) {
              /* the zero-bubble paper's ZB-H1: (P-1)(F+B-W), a third of 1F1B's (P-1)(F+B+W) at F = B = W */
              CHECK(idle == (P - 1) * (F + B - W), "zb1p P=%d m=%d rank %d idle %lld, want %lld", P, m, r,
                    (long long)idle, (long long)((P - 1) * (F + B - W)));
              CHECK(s.peak_inflight[r] <= P, "zb1p P=%d m=%d rank %d in flight %d > P", P, m, r, s.peak_inflight[r]);
            } else {
              CHECK(idle == (int64_t)(P - 1) * (F + B), "%s P=%d m=%d V=%d rank %d idle %lld want %lld",
                    sl_pp_kind_name(k), P, m, V, r, (long long)idle, (long long)((P - 1) * (F + B)));
              int want = k == SL_PP_GPIPE ? m : k == SL_PP_1F1B ? P - r : 2 * (P - r - 1) + (V - 1) * P + 1;
              if (want > m * V) want = m * V;
              CHECK(s.peak_inflight[r] == want, "%s P=%d m=%d V=%d rank %d in flight %d want %d", sl_pp_kind_name(k), P,
                    m, V, r, s.peak_inflight[r], want);
            }
          }
          if (k != SL_PP_ZB1P)
            CHECK(s.makespan == ((int64_t)m * V + P - 1) * (F + B), "%s P=%d m=%d V=%d makespan %lld",
                  sl_pp_kind_name(k), P, m, V, (long long)s.makespan);
          sl_pp_sched_free(&s);
        }
  printf("built and checked %d schedules\n", built);
}

/* zb1p at other costs: the ZB-H1 bubble (P-1)(F+B-W) exactly when W is one
 * unit (F, B in 1..3); below 1F1B's (P-1)(F+B+W) always. */
static void test_costs(void) {
  const int64_t cost[][3] = {{2, 2, 1}, {2, 3, 1}, {1, 2, 1}, {2, 1, 1}, {3, 2, 2}, {1, 1, 2}};
  for (unsigned c = 0; c < sizeof cost / sizeof cost[0]; c++)
    for (int P = 2; P <= 6; P++)
      for (int m = P; m <= 3 * P; m += 2) {
        sl_pp_spec sp;
        sl_pp_spec_defaults(&sp);
        sp.kind = SL_PP_ZB1P, sp.P = P, sp.m = m, sp.cost_f = cost[c][0], sp.cost_b = cost[c][1],
        sp.cost_w = cost[c][2];
        sl_pp_sched s;
        int rc = sl_pp_build(&sp, &s);
        CHECK(rc == SL_OK, "zb1p costs: %s", sl_errmsg());
        if (rc) continue;
        char why[160] = "";
        int64_t F = sp.cost_f, B = sp.cost_b, W = sp.cost_w, zb = (P - 1) * (F + B - W);
        CHECK(timeline_ok(&s, why, sizeof why), "zb1p costs: %s", why);
        if (W == 1) /* and F = B = W in test_schedules; (3,2,2) comes within a few units */
          CHECK(s.idle[0] == zb, "zb1p P=%d m=%d F%lld B%lld W%lld: idle %lld want %lld", P, m, (long long)F,
                (long long)B, (long long)W, (long long)s.idle[0], (long long)zb);
        CHECK(s.idle[0] < (P - 1) * (F + B + W), "zb1p P=%d m=%d F%lld B%lld W%lld: idle %lld not below 1F1B's", P, m,
              (long long)F, (long long)B, (long long)W, (long long)s.idle[0]);
        sl_pp_sched_free(&s);
      }
  sl_pp_sched s;
  printf("P=4 m=8 (V=2 interleaved) idle per rank / step, unit costs:");
  for (int k = 0; k < SL_PP_NKINDS; k++) {
    if (build((sl_pp_kind)k, 4, 8, k == SL_PP_INTERLEAVED ? 2 : 1, 1, &s)) continue;
    printf(" %s %lld/%lld", sl_pp_kind_name(k), (long long)s.idle[0], (long long)s.makespan);
    sl_pp_sched_free(&s);
  }
  printf("\n");
}

/* gpipe, 1f1b, interleaved at other F, B costs: still (P-1)(F+B) per rank,
 * and the checker (run by every build) still passes with the transfers
 * reordered by the other timeline. */
static void test_costs_fixed(void) {
  const int64_t cost[][2] = {{1, 1}, {2, 3}, {3, 1}, {2, 5}};
  for (int k = 0; k < SL_PP_ZB1P; k++)
    for (unsigned c = 0; c < sizeof cost / sizeof cost[0]; c++)
      for (int P = 1; P <= 6; P++)
        for (int m = P; m <= 2 * P; m += P) {
          sl_pp_spec sp;
          sl_pp_spec_defaults(&sp);
          sp.kind = (sl_pp_kind)k, sp.P = P, sp.m = m, sp.V = k == SL_PP_INTERLEAVED ? 2 : 1;
          sp.cost_f = cost[c][0], sp.cost_b = cost[c][1];
          sl_pp_sched s;
          int rc = sl_pp_build(&sp, &s);
          CHECK(rc == SL_OK, "%s F%lld B%lld P=%d m=%d: %s", sl_pp_kind_name(k), (long long)sp.cost_f,
                (long long)sp.cost_b, P, m, sl_errmsg());
          if (rc) continue;
          char why[160] = "";
          CHECK(timeline_ok(&s, why, sizeof why), "%s costs: %s", sl_pp_kind_name(k), why);
          for (int r = 0; r < P; r++)
            CHECK(s.idle[r] == (P - 1) * (sp.cost_f + sp.cost_b), "%s F%lld B%lld P=%d m=%d rank %d idle %lld",
                  sl_pp_kind_name(k), (long long)sp.cost_f, (long long)sp.cost_b, P, m, r, (long long)s.idle[r]);
          sl_pp_sched_free(&s);
        }
}

static int find(const sl_pp_sched *s, int r, int kind, int dir, int mb) {
  for (int i = 0; i < s->nops[r]; i++)
    if (s->ops[r][i].kind == kind && (dir < 0 || s->ops[r][i].dir == dir) && s->ops[r][i].mb == mb) return i;
  return -1;
}

/* The checker must catch broken lists. */
static void test_checker_catches(void) {
  sl_pp_sched s;
  if (build(SL_PP_1F1B, 4, 8, 1, 64, &s)) {
    CHECK(0, "build: %s", sl_errmsg());
    return;
  }
  /* a deadlock: rank 1 receives micro-batch 1's activation before micro-batch 0's */
  int a = find(&s, 1, SL_PP_RECV, SL_PP_ACT, 0), b = find(&s, 1, SL_PP_RECV, SL_PP_ACT, 1);
  sl_pp_op t = s.ops[1][a];
  s.ops[1][a] = s.ops[1][b], s.ops[1][b] = t;
  CHECK(sl_pp_check(&s) == SL_EINTERNAL && strstr(sl_errmsg(), "deadlock"), "swapped receives: %s", sl_errmsg());
  s.ops[1][b] = s.ops[1][a], s.ops[1][a] = t;
  CHECK(sl_pp_check(&s) == SL_OK, "restored: %s", sl_errmsg());
  /* a compute op before its input arrives: F of mb 0 on rank 2 ahead of its receive */
  a = find(&s, 2, SL_PP_RECV, SL_PP_ACT, 0), b = find(&s, 2, SL_PP_F, -1, 0);
  t = s.ops[2][a];
  s.ops[2][a] = s.ops[2][b], s.ops[2][b] = t;
  CHECK(sl_pp_check(&s) == SL_EINTERNAL && strstr(sl_errmsg(), "deadlock"), "F before its receive: %s", sl_errmsg());
  s.ops[2][b] = s.ops[2][a], s.ops[2][a] = t;
  /* a send of data not yet computed: rank 0's send of mb 0 ahead of F0 */
  a = find(&s, 0, SL_PP_SEND, SL_PP_ACT, 0), b = find(&s, 0, SL_PP_F, -1, 0);
  t = s.ops[0][a];
  s.ops[0][a] = s.ops[0][b], s.ops[0][b] = t;
  CHECK(sl_pp_check(&s) == SL_EINTERNAL && strstr(sl_errmsg(), "not computed"), "early send: %s", sl_errmsg());
  s.ops[0][b] = s.ops[0][a], s.ops[0][a] = t;
  /* a duplicated B (replaces the last B of rank 3 with B of mb 0) */
  int last = -1;
  for (int i = 0; i < s.nops[3]; i++)
    if (s.ops[3][i].kind == SL_PP_B) last = i;
  int keep = s.ops[3][last].mb;
  s.ops[3][last].mb = 0;
  CHECK(sl_pp_check(&s) == SL_EINTERNAL, "duplicated B accepted");
  s.ops[3][last].mb = keep;
  /* a missing B: drop rank 0's last op (B of mb 7; the first stage sends nothing after it) */
  s.nops[0]--;
  CHECK(sl_pp_check(&s) == SL_EINTERNAL && strstr(sl_errmsg(), "lacks the B"), "missing B: %s", sl_errmsg());
  s.nops[0]++;
  /* a wrong peer and a byte mismatch */
  a = find(&s, 1, SL_PP_SEND, SL_PP_ACT, 3);
  s.ops[1][a].peer = 3;
  CHECK(sl_pp_check(&s) == SL_EINTERNAL && strstr(sl_errmsg(), "peer"), "wrong peer: %s", sl_errmsg());
  s.ops[1][a].peer = 2;
  s.ops[1][a].bytes = 63;
  CHECK(sl_pp_check(&s) == SL_EINTERNAL, "byte mismatch accepted");
  s.ops[1][a].bytes = 64;
  CHECK(sl_pp_check(&s) == SL_OK, "restored: %s", sl_errmsg());
  sl_pp_sched_free(&s);
}

static void test_refusals(void) {
  sl_pp_sched s;
  CHECK(build(SL_PP_1F1B, 4, 3, 1, 0, &s) == SL_EINPUT && strstr(sl_errmsg(), "use --grad-accum >= 4"), "m < P: %s",
        sl_errmsg());
  CHECK(build(SL_PP_ZB1P, 4, 2, 1, 0, &s) == SL_EINPUT, "zb1p m < P accepted");
  CHECK(build(SL_PP_GPIPE, 4, 2, 1, 0, &s) == SL_OK, "gpipe m < P refused: %s", sl_errmsg());
  sl_pp_sched_free(&s);
  CHECK(build(SL_PP_INTERLEAVED, 4, 6, 2, 0, &s) == SL_EINPUT && strstr(sl_errmsg(), "multiple of --pp"), "m %% P: %s",
        sl_errmsg());
  CHECK(build(SL_PP_INTERLEAVED, 4, 8, 1, 0, &s) == SL_EINPUT && strstr(sl_errmsg(), "1f1b"), "V = 1: %s", sl_errmsg());
  CHECK(build(SL_PP_1F1B, 4, 8, 2, 0, &s) == SL_EINPUT && strstr(sl_errmsg(), "interleaved"), "V with 1f1b: %s",
        sl_errmsg());
  sl_pp_kind k;
  CHECK(sl_pp_kind_parse("1f1b", &k) == SL_OK && k == SL_PP_1F1B, "parse 1f1b");
  CHECK(sl_pp_kind_parse("dualpipe", &k) == SL_EINPUT && strstr(sl_errmsg(), "gpipe"), "parse dualpipe: %s",
        sl_errmsg());
}

/* brute force: the least heaviest stage over every split */
static double brute(const sl_pp_costs *c, int P, int s, int at, double worst, int *cur) {
  if (s == P) {
    if (at != c->L) return 1e300;
    double f[16], b[16], tf = 0, tb = 0, mx = 0;
    sl_pp_layout_weights(c, P, cur, f, b);
    for (int i = 0; i < P; i++) tf += f[i], tb += b[i];
    for (int i = 0; i < P; i++) {
      double w = f[i] / tf > b[i] / tb ? f[i] / tf : b[i] / tb;
      if (w > mx) mx = w;
    }
    return mx;
  }
  double best = 1e300;
  for (int n = (s == 0 || s == P - 1) ? 0 : 1; at + n <= c->L; n++) {
    cur[s] = n;
    double v = brute(c, P, s + 1, at + n, worst, cur);
    if (v < best) best = v;
  }
  return best;
}

static void test_layout(void) {
  int lay[16];
  CHECK(sl_pp_layout_parse("5,4,4,5", 4, 18, lay) == SL_OK && lay[0] == 5 && lay[3] == 5, "parse 5,4,4,5");
  CHECK(sl_pp_layout_parse("0,6,6,6", 4, 18, lay) == SL_OK, "embedding-only first stage refused: %s", sl_errmsg());
  CHECK(sl_pp_layout_parse("5,4,4,4", 4, 18, lay) == SL_EINPUT && strstr(sl_errmsg(), "sum to 18"), "sum: %s",
        sl_errmsg());
  CHECK(sl_pp_layout_parse("5,4,4", 4, 13, lay) == SL_EINPUT && strstr(sl_errmsg(), "3 stages, but there are 4"),
        "count: %s", sl_errmsg());
  CHECK(sl_pp_layout_parse("9,0,4,5", 4, 18, lay) == SL_EINPUT && strstr(sl_errmsg(), "stage 1 empty"), "empty: %s",
        sl_errmsg());
  CHECK(sl_pp_layout_parse("5,x,4,5", 4, 18, lay) == SL_EINPUT, "garbage accepted");
  CHECK(sl_pp_layout_parse("5,-1,4,10", 4, 18, lay) == SL_EINPUT, "negative accepted");
  double lf[40], lb[40];
  for (int i = 0; i < 40; i++) lf[i] = 1, lb[i] = 1;
  sl_pp_costs c = {.L = 18, .layer_flops = lf, .layer_bytes = lb};
  /* uniform layers, free embedding and head: every layer placed, counts within 1 */
  for (int L = 1; L <= 40; L++)
    for (int P = 1; P <= 8 && P <= L; P++) {
      c.L = L;
      int rc = sl_pp_layout_balance(&c, P, lay), sum = 0, mn = 1 << 30, mx = 0;
      for (int s = 0; s < P && !rc; s++) sum += lay[s], mn = lay[s] < mn ? lay[s] : mn, mx = lay[s] > mx ? lay[s] : mx;
      CHECK(!rc && sum == L && mx - mn <= 1, "balance L=%d P=%d: rc %d sum %d spread %d", L, P, rc, sum, mx - mn);
    }
  c.L = 4;
  CHECK(sl_pp_layout_balance(&c, 7, lay) == SL_EINPUT && strstr(sl_errmsg(), "units"), "P > units: %s", sl_errmsg());
  /* a heavy head (3 layers of FLOPs, 2 of bytes) and embedding (0 FLOPs, 2 of bytes): against brute force */
  c.embed_flops = 0, c.embed_bytes = 2, c.head_flops = 3, c.head_bytes = 2;
  for (int L = 1; L <= 10; L++)
    for (int P = 1; P <= 4 && P <= L + 2; P++) {
      c.L = L;
      for (int i = 0; i < L; i++) lf[i] = 1 + (i % 3) * 0.5, lb[i] = 1;
      int cur[16];
      double want = brute(&c, P, 0, 0, 0, cur);
      int rc = sl_pp_layout_balance(&c, P, lay);
      double got = rc ? 1e300 : brute(&c, P, P, L, 0, lay); /* weight of the chosen split */
      CHECK(!rc && got <= want * (1 + 1e-9), "balance L=%d P=%d: heaviest %g, brute force %g", L, P, got, want);
    }
  c.L = 16;
  for (int i = 0; i < 16; i++) lf[i] = lb[i] = 1;
  CHECK(sl_pp_layout_balance(&c, 4, lay) == SL_OK && lay[3] < lay[1], "heavy head: last stage %d layers, stage 1 %d",
        lay[3], lay[1]);
  printf("16 layers, head 3 layers heavy, 4 stages: %d,%d,%d,%d\n", lay[0], lay[1], lay[2], lay[3]);
}

/* sl_pp_replay: a hand-computed step (gpipe P = 2, m = 1, transfers of 0.5:
 * F [0, 1), activation to 1.5, F [1.5, 2.5), B [2.5, 4.5), gradient to 5,
 * B [5, 7)); sends overlapped reproduce the unit-cost makespan of every
 * schedule (the timeline's premise: a send does not hold its sender); with
 * sends that block until the receive is posted, gpipe, 1f1b, zb1p at its
 * default costs and at F 2 B 3 W 1, and interleaved at P = 4 still do (each
 * transfer placed at a time when both ranks are between ops; placed at the
 * end of the producing op, zb1p F 2 B 3 W 1 stalls), and nothing is ever
 * faster. */
static void test_replay(void) {
  sl_pp_sched s;
  double busy[8];
  if (build(SL_PP_GPIPE, 2, 1, 1, 8, &s) == SL_OK) {
    for (int ov = 0; ov < 2; ov++) {
      double t = sl_pp_replay(&s, 1.0, 0.5, ov, busy);
      CHECK(t == 7.0 && busy[0] == 3.0 && busy[1] == 3.0, "gpipe P=2 m=1 overlap %d: step %g busy %g %g, want 7, 3, 3",
            ov, t, busy[0], busy[1]);
    }
    sl_pp_sched_free(&s);
  }
  int64_t costs[3][3] = {{0, 0, 0}, {2, 3, 1}, {3, 1, 2}};
  for (int k = 0; k < SL_PP_NKINDS; k++)
    for (int P = 1; P <= 6; P++)
      for (int m = 1; m <= 12; m++)
        for (int V = 1; V <= 3; V++)
          for (int c = 0; c < 3; c++) {
            sl_pp_spec sp;
            sl_pp_spec_defaults(&sp);
            sp.kind = (sl_pp_kind)k, sp.P = P, sp.m = m, sp.V = V, sp.bytes = 8;
            sp.cost_f = costs[c][0], sp.cost_b = costs[c][1], sp.cost_w = k == SL_PP_ZB1P ? costs[c][2] : 0;
            if ((k == SL_PP_INTERLEAVED) != (V > 1) || sl_pp_build(&sp, &s) != SL_OK) continue;
            double ov = sl_pp_replay(&s, 1.0, 0, 1, NULL), bl = sl_pp_replay(&s, 1.0, 0, 0, NULL),
                   slow = sl_pp_replay(&s, 1.0, 0.25, 0, NULL), mk = (double)s.makespan;
            int exact = k == SL_PP_GPIPE || k == SL_PP_1F1B || (k == SL_PP_ZB1P && c <= 1) ||
                        (k == SL_PP_INTERLEAVED && c == 0 && P == 4);
            if (ov != mk || bl < mk || (exact && bl != mk) || slow < bl)
              CHECK(0,
                    "replay %s P=%d m=%d V=%d costs %d: overlapped %g, blocking %g, blocking with transfers %g; "
                    "makespan %g",
                    sl_pp_kind_name((sl_pp_kind)k), P, m, V, c, ov, bl, slow, mk);
            else g_pass++;
            sl_pp_sched_free(&s);
          }
}

int main(void) {
  test_schedules();
  test_costs();
  test_costs_fixed();
  test_checker_catches();
  test_replay();
  test_refusals();
  test_layout();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
