/* tools/pp_schedule.c — shardlm pp-schedule: builds and checks the static
 * pipeline schedule (pipeline/pipeline.h) and prints it before any run: the
 * per-rank timeline as text, each rank's bubble against the closed form,
 * the transfers and their bytes, the in-flight micro-batch peaks, the layer
 * layout of the stages; `--svg FILE` draws the timeline (pipeline/render.c;
 * docs/pipeline.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "formats/hfconfig.h"
#include "formats/traincfg.h"
#include "pipeline/pipeline.h"
#include "plan/planner.h"
#include "pipeline/render.h"
#include "tools/tools.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: shardlm pp-schedule --pp P --micro-batches M [--pp-schedule gpipe|1f1b|interleaved|zb1p]\n"
          "                           [--pp-virtual V] [--layers L | --model DIR|config.json] [--pp-layout 5,4,4,5]\n"
          "                           [--bytes N | --micro-batch B --seq-len T [--hidden H] [--act-bytes E]\n"
          "                            [--tp T [--sequence-parallel]]] [--cost-f N --cost-b N --cost-w N]\n"
          "                           [--svg FILE] [--ops] [--compact] [--json]\n"
          "prints every rank's timeline (one column per time unit: F forward, B backward (input gradient\n"
          "under zb1p), W weight gradient, . idle), its bubble, the transfers and the in-flight peaks.\n"
          "--micro-batches is the training's --grad-accum; interleaved defaults to --pp-virtual 2.\n"
          "--json: one object with the figures per rank and the layout instead of the text.\n");
}

typedef struct {
  sl_pp_spec spec;
  int L, have_layers, have_p, have_m, vset, compact, ops, sp, tp, json;
  const char *model, *layout, *svg;
  int64_t bytes, b, seq, hidden, elem;
  sl_train_cfg tc; /* the flags that are train's, parsed by its table (formats/traincfg.c) */
} args;

static int parse_int(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *e;
  errno = 0;
  long long x = v ? strtoll(v, &e, 10) : 0;
  if (!v || e == v || *e || errno || x < lo || x > hi)
    return sl_fail(SL_EINPUT, "%s expects an integer in [%lld, %lld], found '%s'", flag, (long long)lo, (long long)hi,
                   v ? v : "");
  *out = x;
  return SL_OK;
}

static int parse(int argc, char **argv, args *a) {
  memset(a, 0, sizeof *a);
  sl_pp_spec_defaults(&a->spec);
  a->b = 1, a->seq = 2048, a->elem = 4, a->tp = 1, a->bytes = -1;
  sl_train_cfg_defaults(&a->tc);
  int rc = SL_OK;
  for (int i = 1; i < argc && !rc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t x = 0;
#define INT(lo, hi, dst)                                                                                               \
  do {                                                                                                                 \
    rc = parse_int(f, v, lo, hi, &x);                                                                                  \
    if (!rc) dst = x;                                                                                                  \
    i++;                                                                                                               \
  } while (0)
    /* a flag of shardlm train: train's range and message */
#define TRAIN(field, dst)                                                                                              \
  do {                                                                                                                 \
    rc = sl_train_cfg_set(&a->tc, f + 2, v);                                                                           \
    if (!rc) dst = a->tc.field;                                                                                        \
    i++;                                                                                                               \
  } while (0)
    if (!strcmp(f, "--help") || !strcmp(f, "-h")) return -1;
    else if (!strcmp(f, "--pp")) {
      TRAIN(pp, a->spec.P);
      a->have_p = 1;
    } else if (!strcmp(f, "--micro-batches")) {
      INT(1, 1 << 20, a->spec.m);
      a->have_m = 1;
    } else if (!strcmp(f, "--grad-accum")) {
      TRAIN(grad_accum, a->spec.m);
      a->have_m = 1;
    } else if (!strcmp(f, "--pp-virtual")) {
      TRAIN(pp_virtual, a->spec.V);
      a->vset = 1;
    } else if (!strcmp(f, "--pp-schedule")) {
      const char *k = NULL;
      TRAIN(pp_schedule, k);
      if (!rc) rc = sl_pp_kind_parse(k, &a->spec.kind);
    } else if (!strcmp(f, "--layers")) {
      INT(0, 100000, a->L);
      a->have_layers = 1;
    } else if (!strcmp(f, "--model")) {
      a->model = v;
      i++;
      if (!v) rc = sl_fail(SL_EINPUT, "--model needs a value");
    } else if (!strcmp(f, "--pp-layout")) TRAIN(pp_layout, a->layout);
    else if (!strcmp(f, "--svg")) {
      a->svg = v;
      i++;
      if (!v) rc = sl_fail(SL_EINPUT, "--svg needs a file");
    } else if (!strcmp(f, "--bytes")) INT(0, INT64_MAX / 4, a->bytes);
    else if (!strcmp(f, "--micro-batch")) TRAIN(micro_batch, a->b);
    else if (!strcmp(f, "--seq-len")) TRAIN(seq_len, a->seq);
    else if (!strcmp(f, "--hidden")) INT(1, 1 << 24, a->hidden);
    else if (!strcmp(f, "--act-bytes")) INT(1, 8, a->elem);
    else if (!strcmp(f, "--tp")) TRAIN(tp, a->tp);
    else if (!strcmp(f, "--sequence-parallel")) a->sp = 1;
    else if (!strcmp(f, "--cost-f")) INT(1, 1000000, a->spec.cost_f);
    else if (!strcmp(f, "--cost-b")) INT(1, 1000000, a->spec.cost_b);
    else if (!strcmp(f, "--cost-w")) INT(1, 1000000, a->spec.cost_w);
    else if (!strcmp(f, "--ops")) a->ops = 1;
    else if (!strcmp(f, "--compact")) a->compact = 1;
    else if (!strcmp(f, "--json")) a->json = 1;
    else rc = sl_fail(SL_EINPUT, "unknown flag '%s' (shardlm pp-schedule --help lists them)", f);
#undef INT
#undef TRAIN
  }
  if (rc) return rc;
  if (!a->have_p || !a->have_m)
    return sl_fail(SL_EINPUT, "--pp P and --micro-batches M are required (shardlm pp-schedule --help)");
  if (a->spec.kind == SL_PP_INTERLEAVED && !a->vset) a->spec.V = 2;
  if (a->sp && a->seq % a->tp)
    return sl_fail(SL_EINPUT,
                   "--sequence-parallel splits the sequence over --tp %d, but --seq-len %lld is "
                   "not a multiple of it",
                   a->tp, (long long)a->seq);
  return SL_OK;
}

/* Layer costs per token: FLOPs (6 x parameters of the matmuls, plus
 * attention's 12 h_attn T per layer), bytes (16 per parameter: fp32 value,
 * gradient, Adam m and v). */
static int model_costs(const char *path, int64_t T, sl_plan_model *pm, double **lf, double **lb, sl_pp_costs *c) {
  char p[4096];
  size_t n = strlen(path);
  snprintf(p, sizeof p, n > 5 && !strcmp(path + n - 5, ".json") ? "%s" : "%s/config.json", path);
  sl_model_config mc;
  int rc = sl_hfconfig_load(p, &mc);
  if (!rc) rc = sl_plan_model_init(&mc, pm);
  if (rc) return rc;
  int L = (int)pm->L;
  *lf = calloc((size_t)L + 1, sizeof(double));
  *lb = calloc((size_t)L + 1, sizeof(double));
  if (!*lf || !*lb) return sl_fail(SL_ENOMEM, "out of memory");
  double attn = !pm->caps.attention ? 0 : 12.0 * (double)(pm->nh * pm->hd) * (double)T;
  for (int i = 0; i < L; i++) {
    (*lf)[i] = 6.0 * (double)pm->numel[i + 1] + attn;
    (*lb)[i] = 16.0 * (double)pm->numel[i + 1];
  }
  *c = (sl_pp_costs){.L = L,
                     .layer_flops = *lf,
                     .layer_bytes = *lb,
                     .embed_flops = 0,
                     .embed_bytes = 16.0 * (double)pm->numel[0],
                     .head_flops = 6.0 * (double)(pm->V * pm->C),
                     .head_bytes = 16.0 * (double)(pm->numel[pm->nunits - 1] > pm->V * pm->C ? pm->numel[pm->nunits - 1]
                                                                                             : pm->V * pm->C + pm->C)};
  return SL_OK;
}

/* ---- the report ------------------------------------------------------------ */
static void print_report(const sl_pp_sched *s, const args *a) {
  const sl_pp_spec *p = &s->spec;
  int P = p->P, m = p->m, V = p->V;
  int64_t F = p->cost_f, B = p->cost_b, W = p->cost_w;
  printf("pipeline schedule %s: P=%d stage%s, m=%d micro-batch%s, V=%d chunk%s per rank (%d virtual stage%s); checked: "
         "no deadlock under blocking send/recv, every input on its rank before use, each F/B%s once per stage\n",
         sl_pp_kind_name(p->kind), P, P > 1 ? "s" : "", m, m > 1 ? "es" : "", V, V > 1 ? "s" : "", s->S,
         s->S > 1 ? "s" : "", p->kind == SL_PP_ZB1P ? "/W" : "");
  if (!a->compact && s->makespan > 160) printf("(timeline of %lld units: compact glyphs)\n", (long long)s->makespan);
  sl_pp_timeline_print(stdout, s, a->compact || s->makespan > 160);
  double ideal = (double)m * V * (double)(F + B + W);
  printf("per rank: busy, idle (bubble), bubble / step time, peak in-flight chunk-micro-batches, transfers\n");
  for (int r = 0; r < P; r++)
    printf("  rank %-3d busy %6lld  idle %5lld  %6.2f%%  in flight %3d  send %4lld (%lld B)  recv %4lld (%lld B)\n", r,
           (long long)s->busy[r], (long long)s->idle[r], 100.0 * (double)s->idle[r] / (double)s->makespan,
           s->peak_inflight[r], (long long)s->sends[r], (long long)s->send_bytes[r], (long long)s->recvs[r],
           (long long)s->recv_bytes[r]);
  int64_t tot = 0, totb = 0;
  for (int r = 0; r < P; r++) tot += s->sends[r], totb += s->send_bytes[r];
  printf("step: %lld time units, bubble %lld per rank = %.4f of the ideal %g (%.4f of the step)\n",
         (long long)s->makespan, (long long)s->idle[0], (double)s->idle[0] / ideal, ideal,
         (double)s->idle[0] / (double)s->makespan);
  if (p->kind == SL_PP_ZB1P)
    printf("closed form: ZB-H1 (P-1)(F+B-W) = %lld per rank, %.4f of ideal (1F1B with B+W as one backward: "
           "(P-1)(F+B+W) = %lld): %s\n",
           (long long)((P - 1) * (F + B - W)), (double)((P - 1) * (F + B - W)) / ideal,
           (long long)((P - 1) * (F + B + W)), s->idle[0] == (P - 1) * (F + B - W) ? "equal" : "DIFFERENT");
  else
    printf("closed form: (P-1)(F+B) = %lld per rank, (P-1)/(%sm) = %.4f of ideal: %s\n", (long long)((P - 1) * (F + B)),
           V > 1 ? "V " : "", (double)(P - 1) / ((double)V * m),
           s->idle[0] == (P - 1) * (F + B) ? "equal" : "DIFFERENT");
  printf("transfers: %lld sends + %lld receives (%s), %lld bytes sent, %lld each", (long long)tot, (long long)tot,
         P > 1 ? "2 m (P V - 1)" : "one rank: none", (long long)totb, (long long)p->bytes);
  if (a->bytes < 0 && a->hidden)
    printf(" (b %lld x s %lld x h %lld x %lld B%s)", (long long)a->b, (long long)a->seq, (long long)a->hidden,
           (long long)a->elem,
           a->sp                                                   ? " / T, sequence parallel"
           : a->tp > 1 && (a->b * a->seq * a->hidden) % a->tp == 0 ? " / T, each TP rank's slice"
                                                                   : "");
  printf("\n");
  if (a->ops) {
    printf("op lists (issue order; transfers block until the peer posts its half):\n");
    for (int r = 0; r < P; r++) {
      printf("  rank %d:", r);
      for (int i = 0; i < s->nops[r]; i++) {
        char d[96];
        sl_pp_op_str(s, &s->ops[r][i], d, sizeof d);
        printf("%s %s", i ? "," : "", d);
      }
      printf("\n");
    }
  }
}

/* --json: the figures as one object (sorted keys) on stdout. */
static void print_json(const sl_pp_sched *s, const int *lay) {
  const sl_pp_spec *p = &s->spec;
  json_t *o = json_object(), *ranks = json_array();
  json_object_set_new(o, "schedule", json_string(sl_pp_kind_name(p->kind)));
  json_object_set_new(o, "pp", json_integer(p->P));
  json_object_set_new(o, "micro_batches", json_integer(p->m));
  json_object_set_new(o, "virtual", json_integer(p->V));
  json_object_set_new(o, "bytes_per_transfer", json_integer(p->bytes));
  json_object_set_new(
      o, "cost",
      json_pack("{s:I,s:I,s:I}", "F", (json_int_t)p->cost_f, "B", (json_int_t)p->cost_b, "W", (json_int_t)p->cost_w));
  json_object_set_new(o, "step_time", json_integer(s->makespan));
  for (int r = 0; r < p->P; r++)
    json_array_append_new(ranks, json_pack("{s:I,s:I,s:i,s:I,s:I,s:I,s:I}", "busy", (json_int_t)s->busy[r], "idle",
                                           (json_int_t)s->idle[r], "peak_inflight", s->peak_inflight[r], "sends",
                                           (json_int_t)s->sends[r], "recvs", (json_int_t)s->recvs[r], "send_bytes",
                                           (json_int_t)s->send_bytes[r], "recv_bytes", (json_int_t)s->recv_bytes[r]));
  json_object_set_new(o, "ranks", ranks);
  if (lay) {
    json_t *l = json_array();
    for (int v = 0; v < s->S; v++) json_array_append_new(l, json_integer(lay[v]));
    json_object_set_new(o, "layout", l);
  }
  char *txt = json_dumps(o, JSON_SORT_KEYS);
  if (txt) printf("%s\n", txt);
  free(txt);
  json_decref(o);
}

/* The layout of S virtual stages: parsed or balanced, printed with weights. */
static int layout(const args *a, const sl_pp_costs *c, int S, int P, int **lay_out, char **text) {
  int *lay = calloc((size_t)S, sizeof(int));
  double *wf = calloc((size_t)S, sizeof(double)), *wb = calloc((size_t)S, sizeof(double));
  size_t len = 0;
  FILE *m = NULL;
  int rc = SL_OK;
  if (!lay || !wf || !wb || !(m = open_memstream(text, &len))) rc = sl_fail(SL_ENOMEM, "out of memory");
  else rc = a->layout ? sl_pp_layout_parse(a->layout, S, a->L, lay) : sl_pp_layout_balance(c, S, lay);
  if (!rc) {
    sl_pp_layout_weights(c, S, lay, wf, wb);
    double tf = 0, tb = 0;
    for (int v = 0; v < S; v++) tf += wf[v], tb += wb[v];
    fprintf(m,
            "layout (%s, %d decoder layers over %d %sstage%s; the embedding on the first, the final norm + LM head "
            "on the last)%s:\n",
            a->layout ? "--pp-layout" : "balanced over FLOPs and memory", a->L, S, S > P ? "virtual " : "",
            S > 1 ? "s" : "", a->model ? "" : " (uniform layers; --model DIR weighs them)");
    for (int v = 0; v < S; v++)
      fprintf(m, "  stage %-3d rank %-3d layers %4d  FLOPs %5.1f%%  memory %5.1f%%%s%s\n", v, v % P, lay[v],
              tf > 0 ? 100 * wf[v] / tf : 0.0, tb > 0 ? 100 * wb[v] / tb : 0.0, v == 0 ? "  +embedding" : "",
              v == S - 1 ? "  +head" : "");
    fprintf(m, "  --pp-layout ");
    for (int v = 0; v < S; v++) fprintf(m, "%s%d", v ? "," : "", lay[v]);
    fprintf(m, "\n");
  }
  if (m) fclose(m);
  free(wf);
  free(wb);
  *lay_out = lay;
  return rc;
}

static int run(int argc, char **argv) {
  args a;
  int rc = parse(argc, argv, &a);
  if (rc < 0) {
    usage(stdout);
    return SL_OK;
  }
  if (rc) return rc;
  sl_plan_model pm;
  memset(&pm, 0, sizeof pm);
  double *lf = NULL, *lb = NULL;
  int *lay = NULL;
  char *lay_text = NULL;
  sl_pp_costs c = {0};
  sl_pp_sched s;
  memset(&s, 0, sizeof s);
  if (a.model) {
    if ((rc = model_costs(a.model, a.seq, &pm, &lf, &lb, &c))) goto done;
    a.L = c.L, a.have_layers = 1;
    if (!a.hidden) a.hidden = pm.C;
  } else if (a.have_layers) {
    lf = calloc((size_t)a.L + 1, sizeof(double));
    lb = calloc((size_t)a.L + 1, sizeof(double));
    if (!lf || !lb) {
      rc = sl_fail(SL_ENOMEM, "out of memory");
      goto done;
    }
    for (int i = 0; i < a.L; i++) lf[i] = lb[i] = 1;
    c = (sl_pp_costs){.L = a.L, .layer_flops = lf, .layer_bytes = lb};
  }
  if (a.layout && !a.have_layers) {
    rc = sl_fail(SL_EINPUT, "--pp-layout needs --layers L or --model DIR (the counts must sum to the layers)");
    goto done;
  }
  /* a transfer under --tp T: the s/T slice with --sequence-parallel; without it each TP rank sends 1/T of
   * the replicated boundary when T divides it (train's engine/schedule_pp.c), else the whole */
  int64_t bnd = a.b * a.seq * a.hidden, per = a.sp || (a.tp > 1 && bnd % a.tp == 0) ? a.tp : 1;
  a.spec.bytes = a.bytes >= 0 ? a.bytes : a.hidden ? bnd / per * a.elem : 0;
  if ((rc = sl_pp_build(&a.spec, &s))) goto done;
  if (a.have_layers && (rc = layout(&a, &c, s.S, s.spec.P, &lay, &lay_text))) goto done;
  if (a.json) print_json(&s, lay);
  else {
    print_report(&s, &a);
    if (lay_text) fputs(lay_text, stdout);
  }
  if (a.svg) {
    if ((rc = sl_pp_svg_write(&s, a.svg))) goto done;
    if (!a.json) printf("svg: %s\n", a.svg);
  }
done:
  sl_pp_sched_free(&s);
  sl_plan_model_free(&pm);
  free(lf);
  free(lb);
  free(lay);
  free(lay_text);
  return rc;
}

int sl_tool_pp_schedule(int argc, char **argv) {
  int rc = run(argc, argv);
  if (rc) fprintf(stderr, "shardlm pp-schedule: %s\n", sl_errmsg());
  return rc == SL_OK ? 0 : rc == SL_EINPUT ? 2 : 1;
}
