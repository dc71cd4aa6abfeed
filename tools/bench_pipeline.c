/* tools/bench_pipeline.c — shardlm bench pipeline: the static pipeline
 * schedule builder's op lists (pipeline/pipeline.h) driven through real
 * point-to-point communication (sl_comm_send / sl_comm_recv) by P ranks
 * under mpirun, with a synthetic compute time per op instead of a model.
 * Each rank walks its own list in order: F / B / W take cost x --f-ms / V
 * (a stage's forward takes --f-ms; a chunk of an interleaved stage 1/V of
 * it), SEND / RECV move --bytes of a pattern derived from (sending stage,
 * micro-batch, direction) that the receiver verifies. Per rank it measures
 * the compute (busy) time, the time blocked in send/recv, and the idle
 * fraction (step - busy) / step, the step being the slowest rank's; and
 * sets them against the builder's unit-cost prediction idle / makespan.
 * It also checks that the comm counters (sl_comm_get_stats: SEND and RECV
 * calls and bytes) equal the builder's transfer counts exactly. Figures are
 * measured and printed, never asserted (docs/pipeline.md, "Measured"). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "pipeline/pipeline.h"
#include "shard/comm.h"

int sl_bench_pipeline_main(int argc, char **argv); /* tools/bench.c: shardlm bench pipeline */

typedef enum { CM_CLOCK = 0, CM_LOOP, CM_SLEEP, CM_AUTO } compute_mode;
static const char *const CM_NAME[] = {"clock", "loop", "sleep", "auto"};

typedef struct {
  int P, m, V, steps, all, overlap, vset, inject; /* inject: --inject swap-recvs (tests) */
  sl_pp_kind kind;
  double f_ms, timeout_s;
  int64_t bytes;
  int64_t cost_f, cost_b, cost_w; /* 0: the builder's defaults */
  compute_mode mode;
} bp_args;

/* per-rank state of one schedule */
typedef struct {
  const sl_pp_sched *s;
  int r;
  uint8_t **buf;      /* (nops[r]) send / recv buffer of each transfer op, NULL for compute */
  double unit_ns;     /* one cost unit of a chunk op */
  double loop_per_ns; /* CM_LOOP: calibrated iterations per ns */
  compute_mode mode;
} walker;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: mpirun -np P shardlm bench pipeline --micro-batches M [--pp-schedule gpipe|1f1b|interleaved|zb1p|all]\n"
      "                 [--pp-virtual V] [--f-ms 20] [--bytes 262144] [--steps 5] [--compute auto|clock|loop|sleep]\n"
      "                 [--sleep] [--overlap-sends] [--cost-f N --cost-b N --cost-w N] [--timeout S]\n"
      "                 [--inject swap-recvs]\n"
      "       shardlm bench pipeline --pp P ...   (not under a launcher: starts mpirun -np P itself)\n"
      "Every rank walks its op list from the schedule builder: F/B/W take cost x f-ms / V (clock: busy-wait\n"
      "on the clock; loop: a calibrated arithmetic loop; sleep: sleep to the deadline; auto: clock when the\n"
      "ranks leave a core free for the comm progress threads, else sleep), SEND/RECV move --bytes through\n"
      "sl_comm_send/recv; --overlap-sends transfers as training does (engine/schedule_pp.c): a send completes\n"
      "before the second compute op after it, the receives of the next compute op are posted before this one.\n"
      "Prints per rank the predicted (unit-cost) and measured idle fraction, their ratio, the transfers\n"
      "against the comm counters, and one JSON line per schedule. Median of --steps after one warm-up.\n"
      "Op costs in units of f-ms as in shardlm pp-schedule (default F 1, B 2; zb1p F 1, B 1, W 1; W zb1p only).\n"
      "--inject swap-recvs (tests): the last rank's first two receives trade places, a mismatched pairing\n"
      "that the payload check must report (exit 1).\n");
}

static int parse_num(const char *flag, const char *v, double lo, double hi, double *out) {
  char *e;
  errno = 0;
  double x = v ? strtod(v, &e) : 0;
  if (!v || e == v || *e || errno || !(x >= lo && x <= hi))
    return sl_fail(SL_EINPUT, "%s expects a number in [%g, %g], found '%s'", flag, lo, hi, v ? v : "");
  *out = x;
  return SL_OK;
}

static int parse(int argc, char **argv, bp_args *a) {
  memset(a, 0, sizeof *a);
  a->P = 0, a->m = 0, a->V = 2, a->steps = 5, a->f_ms = 20, a->timeout_s = 120, a->bytes = 262144;
  a->kind = SL_PP_1F1B, a->mode = CM_AUTO;
  int rc = SL_OK;
  for (int i = 1; i < argc && !rc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    double x = 0;
#define NUM(lo, hi, dst)                                                                                               \
  do {                                                                                                                 \
    rc = parse_num(f, v, lo, hi, &x);                                                                                  \
    if (!rc) dst = x;                                                                                                  \
    i++;                                                                                                               \
  } while (0)
    if (!strcmp(f, "--help") || !strcmp(f, "-h")) return -1;
    else if (!strcmp(f, "--pp")) NUM(1, 4096, a->P);
    else if (!strcmp(f, "--micro-batches") || !strcmp(f, "--grad-accum")) NUM(1, 1 << 16, a->m);
    else if (!strcmp(f, "--pp-virtual")) {
      NUM(1, 64, a->V);
      a->vset = 1;
    } else if (!strcmp(f, "--f-ms")) NUM(0, 60000, a->f_ms);
    else if (!strcmp(f, "--bytes")) NUM(0, 1 << 30, a->bytes);
    else if (!strcmp(f, "--steps")) NUM(1, 1000, a->steps);
    else if (!strcmp(f, "--cost-f")) NUM(1, 1000, a->cost_f);
    else if (!strcmp(f, "--cost-b")) NUM(1, 1000, a->cost_b);
    else if (!strcmp(f, "--cost-w")) NUM(1, 1000, a->cost_w);
    else if (!strcmp(f, "--timeout")) NUM(1, 86400, a->timeout_s);
    else if (!strcmp(f, "--sleep")) a->mode = CM_SLEEP;
    else if (!strcmp(f, "--overlap-sends")) a->overlap = 1;
    else if (!strcmp(f, "--inject")) {
      if (!v || strcmp(v, "swap-recvs")) rc = sl_fail(SL_EINPUT, "--inject expects swap-recvs, found '%s'", v ? v : "");
      a->inject = 1;
      i++;
    } else if (!strcmp(f, "--compute")) {
      int k = 0;
      while (k < 4 && (!v || strcmp(v, CM_NAME[k]))) k++;
      if (k == 4) rc = sl_fail(SL_EINPUT, "--compute expects auto, clock, loop or sleep, found '%s'", v ? v : "");
      a->mode = (compute_mode)k;
      i++;
    } else if (!strcmp(f, "--pp-schedule")) {
      if (v && !strcmp(v, "all")) a->all = 1;
      else rc = sl_pp_kind_parse(v, &a->kind);
      i++;
    } else rc = sl_fail(SL_EINPUT, "unknown flag '%s' (shardlm bench pipeline --help lists them)", f);
#undef NUM
  }
  if (!rc && !a->m) rc = sl_fail(SL_EINPUT, "--micro-batches M is required (shardlm bench pipeline --help)");
  return rc;
}

/* ---- synthetic compute -------------------------------------------------- */
static volatile uint64_t g_sink;

static void spin_loop(uint64_t n) {
  uint64_t x = g_sink | 1;
  for (uint64_t i = 0; i < n; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  g_sink = x;
}

/* Iterations of spin_loop per ns, the best of a few timed runs of >= 10 ms. */
static double calibrate_loop(void) {
  double best = 0;
  uint64_t n = 1 << 20;
  for (int rep = 0; rep < 8; rep++) {
    uint64_t t0 = sl_now_ns();
    spin_loop(n);
    double dt = (double)(sl_now_ns() - t0);
    if (dt < 1e7) {
      n *= 2;
      rep--;
      continue;
    }
    if ((double)n / dt > best) best = (double)n / dt;
  }
  return best;
}

/* Runs one compute op of `ns` nanoseconds; returns the time it took. */
static double compute(const walker *w, double ns) {
  uint64_t t0 = sl_now_ns(), end = t0 + (uint64_t)ns;
  if (w->mode == CM_CLOCK) {
    while (sl_now_ns() < end) {}
  } else if (w->mode == CM_SLEEP) {
    struct timespec ts = {.tv_sec = (time_t)(end / 1000000000ull), .tv_nsec = (long)(end % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
  } else {
    spin_loop((uint64_t)(ns * w->loop_per_ns));
  }
  return (double)(sl_now_ns() - t0);
}

/* ---- payload: a pattern of (sending stage, micro-batch, direction) ------ */
static uint64_t pattern_seed(int stage, int mb, int dir) {
  return sl_mix64(((uint64_t)(uint32_t)stage << 33) ^ ((uint64_t)(uint32_t)mb << 1) ^ (uint64_t)dir ^ 0x5eed5eedull);
}

static void pattern_fill(uint8_t *p, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t v = sl_mix64(seed + (uint64_t)i);
    memcpy(p + i, &v, (size_t)(n - i < 8 ? n - i : 8));
  }
}

static int pattern_ok(const uint8_t *p, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t v = sl_mix64(seed + (uint64_t)i);
    if (memcmp(p + i, &v, (size_t)(n - i < 8 ? n - i : 8))) return 0;
  }
  return 1;
}

/* The stage whose output a transfer op carries (the sending stage). */
static int data_stage(const sl_pp_sched *s, const sl_pp_op *o, int r) {
  int vs = o->chunk * s->spec.P + r;
  if (o->kind == SL_PP_SEND) return vs;
  return o->dir == SL_PP_ACT ? vs - 1 : vs + 1;
}

/* ---- one step ----------------------------------------------------------- */
typedef struct {
  double busy_ns, wait_ns, dur_ns;
} step_fig;

/* Walks rank w->r's list once. Without `overlap` every transfer waits for
 * completion at its op. With it, as the training executor does
 * (engine/schedule_pp.c): a send is posted and completes before the second
 * compute op after it starts; the receives between a compute op and the next
 * are posted before that compute op runs and completed at their own op; the
 * step ends when every send has. pend: (2 nops) requests. */
static int xfer_fail(const walker *w, int i, const char *what) {
  char d[96];
  sl_pp_op_str(w->s, &w->s->ops[w->r][i], d, sizeof d);
  fprintf(stderr, "shardlm bench pipeline: rank %d op %d (%s): %s: %s\n", w->r, i, d, what, sl_comm_last_error());
  return 1;
}

static int post(const walker *w, sl_comm *c, int i, sl_comm_req **q) {
  const sl_pp_op *o = &w->s->ops[w->r][i];
  return o->kind == SL_PP_SEND ? sl_comm_send(c, w->buf[i], o->bytes, SL_U8, o->peer, o->dir, q)
                               : sl_comm_recv(c, w->buf[i], o->bytes, SL_U8, o->peer, o->dir, q);
}

static int walk(const walker *w, sl_comm *c, int overlap, sl_comm_req **pend, step_fig *out) {
  const sl_pp_sched *s = w->s;
  const sl_pp_op *ops = s->ops[w->r];
  int n = s->nops[w->r], np = 0;
  sl_comm_req **rq = pend + n; /* receives posted ahead, by op */
  int64_t *at = calloc((size_t)(n ? n : 1), sizeof *at), ncomp = 0;
  if (!at) return 1;
  for (int i = 0; i < n; i++) rq[i] = NULL;
  memset(out, 0, sizeof *out);
  uint64_t t0 = sl_now_ns();
  int bad = 0;
  for (int i = 0; i < n && !bad; i++) {
    const sl_pp_op *o = &ops[i];
    uint64_t t = sl_now_ns();
    if (o->kind <= SL_PP_W) {
      if (overlap) {
        int k = 0;
        for (int j = 0; j < np && !bad; j++)
          if (at[j] < ncomp) bad = sl_comm_wait(pend[j]) != SL_COMM_OK && xfer_fail(w, i, "a send");
          else pend[k] = pend[j], at[k++] = at[j];
        np = k;
        ncomp++;
        for (int j = i + 1; j < n && ops[j].kind > SL_PP_W && !bad; j++)
          if (ops[j].kind == SL_PP_RECV && !rq[j]) bad = post(w, c, j, &rq[j]) != SL_COMM_OK && xfer_fail(w, j, "post");
        out->wait_ns += (double)(sl_now_ns() - t);
      }
      int64_t cost = o->kind == SL_PP_F ? s->spec.cost_f : o->kind == SL_PP_B ? s->spec.cost_b : s->spec.cost_w;
      out->busy_ns += compute(w, (double)cost * w->unit_ns);
      continue;
    }
    sl_comm_req *q = rq[i];
    rq[i] = NULL;
    int rc = q ? SL_COMM_OK : post(w, c, i, &q);
    if (rc == SL_COMM_OK && o->kind == SL_PP_SEND && overlap) pend[np] = q, at[np++] = ncomp;
    else if (rc == SL_COMM_OK) rc = sl_comm_wait(q);
    if (rc != SL_COMM_OK) bad = xfer_fail(w, i, "transfer");
    out->wait_ns += (double)(sl_now_ns() - t);
  }
  uint64_t t = sl_now_ns();
  for (int i = 0; i < np && !bad; i++)
    if (sl_comm_wait(pend[i]) != SL_COMM_OK) bad = xfer_fail(w, n - 1, "a send");
  free(at);
  if (bad) return 1;
  uint64_t t1 = sl_now_ns();
  out->wait_ns += (double)(t1 - t);
  out->dur_ns = (double)(t1 - t0);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* JSON array of n values of v (stride 1) */
static void jarr_d(const char *key, const double *v, int n, const char *fmt) {
  printf(", \"%s\": [", key);
  for (int i = 0; i < n; i++) {
    printf(i ? ", " : "");
    printf(fmt, v[i]);
  }
  printf("]");
}

static void jarr_i(const char *key, const int64_t *v, int n) {
  printf(", \"%s\": [", key);
  for (int i = 0; i < n; i++) printf("%s%lld", i ? ", " : "", (long long)v[i]);
  printf("]");
}

/* Rank 0: the table and the JSON line of one schedule, from every rank's
 * step figures fig (k steps x P ranks x {busy, blocked, walk} ns) and
 * counters cnt (P ranks x {sends, recvs, send bytes, recv bytes, payload
 * errors, 0} over the warm-up and the k steps). */
static void report(const bp_args *a, const sl_pp_sched *s, compute_mode mode, double xfer_ms, const double *fig,
                   const int64_t *all_cnt, int eq, int64_t all_bad) {
  int P = s->spec.P, V = s->spec.V, k = a->steps;
  sl_pp_kind kind = s->spec.kind;
  int64_t runs = k + 1;
  double *pred = calloc((size_t)P * 8, sizeof(double)), *busy = pred + P, *wait = pred + 2 * P, *idle = pred + 3 * P,
         *frac = pred + 4 * P, *ratio = pred + 5 * P, *px = pred + 6 * P, *sbusy = pred + 7 * P, step_ms;
  double *mk = calloc((size_t)k, sizeof(double)), *tmp = calloc((size_t)k, sizeof(double));
  int64_t *cs = calloc((size_t)P * 4, sizeof(int64_t));
  if (!pred || !mk || !tmp || !cs) sl_comm_abort(1);
  double smk = sl_pp_replay(s, a->f_ms / V, xfer_ms, a->overlap, sbusy);
  for (int t = 0; t < k; t++) /* the step: the slowest rank's walk */
    for (int q = 0; q < P; q++)
      if (fig[(size_t)3 * (P * t + q) + 2] > mk[t]) mk[t] = fig[(size_t)3 * (P * t + q) + 2];
  for (int q = 0; q < P; q++) {
    pred[q] = s->makespan ? (double)s->idle[q] / (double)s->makespan : 0;
    px[q] = smk > 0 ? (smk - sbusy[q]) / smk : 0;
    for (int j = 0; j < 3; j++) {
      for (int t = 0; t < k; t++) {
        const double *x = fig + (size_t)3 * (P * t + q);
        tmp[t] = j == 0 ? x[0] : j == 1 ? x[1] : (mk[t] - x[0]) / mk[t];
      }
      (j == 0 ? busy : j == 1 ? wait : frac)[q] = median(tmp, k);
    }
    for (int t = 0; t < k; t++) tmp[t] = mk[t] - fig[(size_t)3 * (P * t + q)];
    idle[q] = median(tmp, k);
    ratio[q] = pred[q] > 0 ? frac[q] / pred[q] : 0;
    for (int j = 0; j < 4; j++) cs[4 * q + j] = all_cnt[6 * q + j];
  }
  step_ms = median(mk, k) * 1e-6;
  double mp = 0, mf = 0, mx = 0;
  for (int q = 0; q < P; q++) mp += pred[q] / P, mf += frac[q] / P, mx += px[q] / P;
  printf("\nschedule %s: P=%d m=%d V=%d; op costs F %lld B %lld W %lld units of %.3g ms (a stage's forward "
         "%.3g ms); %lld bytes per transfer; compute %s; sends %s; median of %d steps after 1 warm-up\n",
         sl_pp_kind_name(kind), P, a->m, V, (long long)s->spec.cost_f, (long long)s->spec.cost_b,
         (long long)s->spec.cost_w, a->f_ms / V, a->f_ms, (long long)a->bytes, CM_NAME[mode],
         a->overlap ? "overlap (completed at the end of the step)" : "wait for the receiver", k);
  printf("  rank |  busy ms  blocked ms   idle ms | idle fraction: predicted +transfers  measured   ratio | sends "
         "recvs bytes sent (counters = builder)\n");
  for (int q = 0; q < P; q++)
    printf("  %4d | %8.1f %10.1f %9.1f |               %9.4f %10.4f %9.4f %7.3f | %5lld %5lld %10lld %s\n", q,
           busy[q] * 1e-6, wait[q] * 1e-6, idle[q] * 1e-6, pred[q], px[q], frac[q], ratio[q], (long long)s->sends[q],
           (long long)s->recvs[q], (long long)s->send_bytes[q],
           cs[4 * q] == runs * s->sends[q] && cs[4 * q + 1] == runs * s->recvs[q] &&
                   cs[4 * q + 2] == runs * s->send_bytes[q] && cs[4 * q + 3] == runs * s->recv_bytes[q]
               ? "equal"
               : "DIFFERENT");
  printf("  mean |                                 |               %9.4f %10.4f %9.4f %7.3f |\n", mp, mx, mf,
         mp > 0 ? mf / mp : 0);
  printf("  step: predicted %.1f ms (%lld units), %.1f ms with each transfer taking %.3f ms, measured %.1f ms; "
         "payloads %s; comm counters over %lld steps %s the builder's transfers\n",
         (double)s->makespan * a->f_ms / V, (long long)s->makespan, smk, xfer_ms, step_ms,
         all_bad ? "MISMATCHED" : "verified", (long long)runs, eq ? "equal" : "DIFFER FROM");
  printf("{\"bench\": \"pipeline\", \"schedule\": \"%s\", \"pp\": %d, \"micro_batches\": %d, \"virtual\": %d, "
         "\"f_ms\": %g, \"bytes\": %lld, \"compute\": \"%s\", \"overlap_sends\": %s, \"steps\": %d, "
         "\"steps_run\": %lld, \"transfer_ms\": %.4f, \"step_ms_predicted\": %.3f, \"step_ms_predicted_xfer\": %.3f, "
         "\"step_ms\": %.3f, "
         "\"makespan_units\": %lld",
         sl_pp_kind_name(kind), P, a->m, V, a->f_ms, (long long)a->bytes, CM_NAME[mode], a->overlap ? "true" : "false",
         k, (long long)runs, xfer_ms, (double)s->makespan * a->f_ms / V, smk, step_ms, (long long)s->makespan);
  jarr_d("predicted_idle_frac", pred, P, "%.6f");
  jarr_d("predicted_idle_frac_xfer", px, P, "%.6f");
  jarr_d("idle_frac", frac, P, "%.6f");
  jarr_d("ratio", ratio, P, "%.4f");
  for (int q = 0; q < P; q++) busy[q] *= 1e-6, wait[q] *= 1e-6, idle[q] *= 1e-6;
  jarr_d("busy_ms", busy, P, "%.3f");
  jarr_d("blocked_ms", wait, P, "%.3f");
  jarr_d("idle_ms", idle, P, "%.3f");
  jarr_i("builder_sends", s->sends, P);
  jarr_i("builder_recvs", s->recvs, P);
  jarr_i("builder_send_bytes", s->send_bytes, P);
  jarr_i("builder_recv_bytes", s->recv_bytes, P);
  int64_t *cv = calloc((size_t)P, sizeof(int64_t));
  const char *ck[4] = {"counter_sends", "counter_recvs", "counter_send_bytes", "counter_recv_bytes"};
  for (int j = 0; j < 4 && cv; j++) {
    for (int q = 0; q < P; q++) cv[q] = cs[4 * q + j];
    jarr_i(ck[j], cv, P);
  }
  printf(", \"mean_predicted_idle_frac\": %.6f, \"mean_predicted_idle_frac_xfer\": %.6f, \"mean_idle_frac\": %.6f, "
         "\"mean_ratio\": %.4f, \"counters_equal\": %s, \"payload_errors\": %lld}\n",
         mp, mx, mf, mp > 0 ? mf / mp : 0, eq ? "true" : "false", (long long)all_bad);
  fflush(stdout);
  free(cv);
  free(pred);
  free(mk);
  free(tmp);
  free(cs);
}

/* Runs schedule `kind` on every rank of c; rank 0 prints the table and the
 * JSON line. Returns 0 ok, 1 failure (counters / payload / comm), 2 the
 * builder refused the spec (printed). */
static int run_one(const bp_args *a, sl_pp_kind kind, sl_comm *c, double loop_per_ns, compute_mode mode,
                   double xfer_ms) {
  int r = sl_comm_rank(c), P = sl_comm_size(c), k = a->steps, rc = 0;
  sl_pp_spec spec;
  sl_pp_spec_defaults(&spec);
  spec.kind = kind, spec.P = P, spec.m = a->m, spec.V = kind == SL_PP_INTERLEAVED ? a->V : 1, spec.bytes = a->bytes;
  spec.cost_f = a->cost_f, spec.cost_b = a->cost_b, spec.cost_w = kind == SL_PP_ZB1P ? a->cost_w : 0;
  sl_pp_sched s;
  if (sl_pp_build(&spec, &s) != SL_OK) {
    if (r == 0) {
      fprintf(stderr, "shardlm bench pipeline: schedule %s refused: %s\n", sl_pp_kind_name(kind), sl_errmsg());
      if (a->all)
        printf(
            "{\"bench\": \"pipeline\", \"schedule\": \"%s\", \"pp\": %d, \"micro_batches\": %d, \"refused\": true}\n",
            sl_pp_kind_name(kind), P, a->m);
    }
    return 2;
  }
  int V = s.spec.V, n = s.nops[r], nx = 0;
  if (a->inject && r == P - 1) { /* the test's mismatched pairing: the last rank's first two receives trade places */
    int i0 = -1;
    for (int i = 0; i < n; i++)
      if (s.ops[r][i].kind == SL_PP_RECV && i0 < 0) i0 = i;
      else if (s.ops[r][i].kind == SL_PP_RECV) {
        sl_pp_op t = s.ops[r][i0];
        s.ops[r][i0] = s.ops[r][i], s.ops[r][i] = t;
        break;
      }
  }
  walker w = {.s = &s, .r = r, .unit_ns = a->f_ms * 1e6 / V, .loop_per_ns = loop_per_ns, .mode = mode};
  w.buf = calloc((size_t)(n ? n : 1), sizeof *w.buf);
  sl_comm_req **pend = calloc((size_t)(2 * n + 1), sizeof *pend);
  double *fig = calloc((size_t)(3 * P * k), sizeof(double)), mine[3];
  int64_t cnt[6], *all_cnt = calloc((size_t)(6 * P), sizeof(int64_t)), bad = 0, all_bad = 0;
  int fail = !w.buf || !pend || !fig || !all_cnt;
  for (int i = 0; i < n && !fail; i++) {
    const sl_pp_op *o = &s.ops[r][i];
    if (o->kind < SL_PP_SEND) continue;
    nx++;
    if (!(w.buf[i] = malloc((size_t)(o->bytes ? o->bytes : 1)))) fail = 1;
    else if (o->kind == SL_PP_SEND) pattern_fill(w.buf[i], o->bytes, pattern_seed(data_stage(&s, o, r), o->mb, o->dir));
  }
  if (fail) {
    fprintf(stderr, "shardlm bench pipeline: rank %d: out of memory for %d transfer buffers of %lld bytes\n", r, nx,
            (long long)a->bytes);
    sl_comm_abort(1);
  }
  sl_comm_reset_stats(c);
  for (int step = -1; step < k && !rc; step++) { /* step -1: warm-up */
    for (int i = 0; i < n; i++)
      if (s.ops[r][i].kind == SL_PP_RECV) memset(w.buf[i], 0, (size_t)s.ops[r][i].bytes);
    step_fig f;
    if (sl_comm_barrier_sync(c) != SL_COMM_OK || walk(&w, c, a->overlap, pend, &f)) {
      rc = 1;
      break;
    }
    for (int i = 0; i < n; i++) {
      const sl_pp_op *o = &s.ops[r][i];
      if (o->kind != SL_PP_RECV || pattern_ok(w.buf[i], o->bytes, pattern_seed(data_stage(&s, o, r), o->mb, o->dir)))
        continue;
      if (!bad++) {
        char d[96];
        sl_pp_op_str(&s, o, d, sizeof d);
        fprintf(stderr,
                "shardlm bench pipeline: %s rank %d op %d (%s): the payload is not the one of stage %d's "
                "%s of micro-batch %d: the sender's and the receiver's lists pair different transfers\n",
                sl_pp_kind_name(kind), r, i, d, data_stage(&s, o, r), o->dir == SL_PP_ACT ? "activation" : "gradient",
                o->mb);
      }
    }
    if (step < 0) continue;
    mine[0] = f.busy_ns, mine[1] = f.wait_ns, mine[2] = f.dur_ns;
    if (sl_comm_allgather_sync(c, mine, fig + (size_t)3 * P * step, 3, SL_F64) != SL_COMM_OK) rc = 1;
  }
  sl_comm_stats st;
  sl_comm_get_stats(c, &st);
  cnt[0] = (int64_t)st.calls[SL_COLL_SEND], cnt[1] = (int64_t)st.calls[SL_COLL_RECV];
  cnt[2] = (int64_t)st.bytes[SL_COLL_SEND], cnt[3] = (int64_t)st.bytes[SL_COLL_RECV];
  cnt[4] = bad, cnt[5] = 0;
  if (rc || sl_comm_allgather_sync(c, cnt, all_cnt, 6, SL_I64) != SL_COMM_OK) {
    fprintf(stderr, "shardlm bench pipeline: %s: rank %d stopped: %s\n", sl_pp_kind_name(kind), r,
            sl_comm_last_error());
    sl_comm_abort(1);
  }
  int64_t runs = k + 1, eq = 1;
  for (int q = 0; q < P; q++) {
    all_bad += all_cnt[6 * q + 4];
    eq &= all_cnt[6 * q] == runs * s.sends[q] && all_cnt[6 * q + 1] == runs * s.recvs[q] &&
          all_cnt[6 * q + 2] == runs * s.send_bytes[q] && all_cnt[6 * q + 3] == runs * s.recv_bytes[q];
  }
  if (r == 0) report(a, &s, mode, xfer_ms, fig, all_cnt, (int)eq, all_bad);
  for (int i = 0; i < n; i++) free(w.buf[i]);
  free(w.buf);
  free(pend);
  free(fig);
  free(all_cnt);
  sl_pp_sched_free(&s);
  return eq && !all_bad ? 0 : 1;
}

/* One transfer of `bytes` between ranks 0 and 1: the median of 9 ping-pong
 * round trips (after one warm-up), halved, in ms; the others wait. */
static double transfer_ms(sl_comm *c, int64_t bytes) {
  int r = sl_comm_rank(c);
  double t[9], ms = 0;
  uint8_t *buf = calloc((size_t)(bytes ? bytes : 1), 1);
  int rc = buf ? SL_COMM_OK : SL_COMM_ERR;
  for (int i = -1; i < 9 && r < 2 && !rc; i++) {
    sl_comm_req *q;
    uint64_t t0 = sl_now_ns();
    for (int dir = 0; dir < 2 && !rc; dir++) {
      rc = r == dir ? sl_comm_send(c, buf, bytes, SL_U8, 1 - r, 2, &q)
                    : sl_comm_recv(c, buf, bytes, SL_U8, 1 - r, 2, &q);
      if (!rc) rc = sl_comm_wait(q);
    }
    if (i >= 0) t[i] = (double)(sl_now_ns() - t0) * 0.5e-6;
  }
  if (!rc && r < 2) ms = median(t, 9);
  free(buf);
  if (rc || sl_comm_broadcast_sync(c, &ms, 1, SL_F64, 0) != SL_COMM_OK) {
    fprintf(stderr, "shardlm bench pipeline: rank %d: the ping-pong failed: %s\n", r, sl_comm_last_error());
    sl_comm_abort(1);
  }
  return ms;
}

/* Not under a launcher: run this command again under mpirun -np P. */
static int relaunch(int argc, char **argv, int P) {
  char np[16], **args = calloc((size_t)argc + 16, sizeof(char *));
  if (!args) return 1;
  int k = 0;
  snprintf(np, sizeof np, "%d", P);
  const char *pre[] = {"mpirun", "--oversubscribe", "--bind-to", "none", "-np", np};
  for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) args[k++] = (char *)pre[i];
  if (getuid() == 0) args[k++] = "--allow-run-as-root";
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  args[k++] = len > 0 ? exe : "shardlm";
  args[k++] = "bench";
  for (int i = 0; i < argc; i++) args[k++] = argv[i];
  fflush(stdout);
  execvp("mpirun", args);
  fprintf(stderr,
          "shardlm bench pipeline: not under mpirun and cannot start it (%s); run "
          "mpirun -np %d shardlm bench pipeline ...\n",
          strerror(errno), P);
  free(args);
  return 1;
}

int sl_bench_pipeline_main(int argc, char **argv) {
  bp_args a;
  int prc = parse(argc, argv, &a);
  if (!sl_comm_under_mpi_launcher()) {
    if (prc < 0) {
      usage(stdout);
      return 0;
    }
    if (prc) {
      fprintf(stderr, "shardlm bench pipeline: %s\n", sl_errmsg());
      return 2;
    }
    return relaunch(argc, argv, a.P ? a.P : 2);
  }
  sl_comm *c;
  if (sl_comm_world_init(&argc, &argv, a.timeout_s, &c) != SL_COMM_OK) {
    fprintf(stderr, "shardlm bench pipeline: %s\n", sl_comm_last_error());
    return 1;
  }
  int r = sl_comm_rank(c), P = sl_comm_size(c), rc = 0;
  if (!prc && a.P && a.P != P)
    prc = sl_fail(SL_EINPUT, "--pp %d but mpirun started %d ranks: the pipeline has one stage per rank", a.P, P);
  if (prc) {
    if (r == 0 && prc < 0) usage(stdout);
    if (r == 0 && prc > 0) fprintf(stderr, "shardlm bench pipeline: %s\n", sl_errmsg());
    rc = prc < 0 ? 0 : 2;
    goto out;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  compute_mode mode = a.mode;
  if (mode == CM_AUTO) mode = P < cores ? CM_CLOCK : CM_SLEEP; /* a core left for the progress threads */
  double lpn = 0;
  if (mode == CM_LOOP) { /* rank 0 calibrates while the others wait */
    if (r == 0) lpn = calibrate_loop();
    if (sl_comm_broadcast_sync(c, &lpn, 1, SL_F64, 0) != SL_COMM_OK) {
      rc = 1;
      goto out;
    }
  }
  double xfer = transfer_ms(c, a.bytes);
  if (r == 0) {
    printf("shardlm bench pipeline: %d ranks on %ld cores; one transfer of %lld bytes takes %.3f ms (ping-pong, "
           "rank 0 <-> 1; the unit-cost model counts it 0); compute by %s%s",
           P, cores, (long long)a.bytes, xfer, CM_NAME[mode],
           a.mode == CM_AUTO ? (mode == CM_CLOCK ? " (auto: every rank has a core and one is left for the comm "
                                                   "progress threads, so ranks busy-wait on the clock)"
                                                 : " (auto: ranks >= cores; busy-waiting ranks would take the cores "
                                                   "that the ranks due to compute and the comm progress threads "
                                                   "need, so compute ops sleep to their deadline)")
                             : "");
    if (mode == CM_LOOP) printf("; loop calibrated on rank 0 at %.3f iterations/ns", lpn);
    if (mode != CM_SLEEP && P >= cores)
      printf("\nnote: %d ranks spin on %ld cores: they slow each other and the comm progress threads, so the "
             "measured idle is the OS scheduler's as much as the schedule's",
             P, cores);
    printf("\n");
    fflush(stdout);
  }
  int ran = 0;
  for (int kd = 0; kd < SL_PP_NKINDS; kd++) {
    if (!a.all && kd != (int)a.kind) continue;
    int x = run_one(&a, (sl_pp_kind)kd, c, lpn, mode, xfer);
    if (x == 1) rc = 1;
    if (x != 2) ran++;
  }
  if (!ran) {
    if (r == 0) fprintf(stderr, "shardlm bench pipeline: no schedule runs at P=%d m=%d (see above)\n", P, a.m);
    rc = 2;
  }
out:
  sl_comm_destroy(c);
  sl_comm_world_finalize();
  return rc;
}
