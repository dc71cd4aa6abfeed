/* tools/plot.c — metrics JSONL -> self-contained SVG, written atomically:
 * panels against step for the training loss (with the held-out loss when the
 * file has eval_loss), tokens/s, and, when present, the learning rate, the
 * gradient norm, a mixture of experts' load imbalance, router losses and
 * dropped slots, and the peak bytes of each memory arena.
 */
#define _GNU_SOURCE
#include "tools/plot.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

#define W 1080
#define PLOT_X0 90
#define PLOT_X1 870
#define LEGEND_X0 (PLOT_X1 + 14) /* the legend: right of the plotting area, never over the data */
#define MAX_POINTS 4000          /* polyline points per panel (uniform stride beyond) */

/* columns of the metrics: step, then the plotted values (NaN when a line
 * lacks one) */
enum {
  C_STEP,
  C_LOSS,
  C_TPS,
  C_LR,
  C_GN,
  C_EVAL,
  C_MOE_LOAD,
  C_MOE_AUX,
  C_MOE_Z,
  C_MOE_DROP,
  C_ARENA,
  NCOL = C_ARENA + SL_ARENA_COUNT
};
/* the mixture of experts' (absent for a dense model): the worst layer's max / mean load, the router losses,
 * the step's dropped slots (moe_dropped: a number per layer, summed here) */
static const char *const KEY[C_ARENA] = {"step",       "loss",      "tokens_per_s",      "lr",
                                         "grad_norm",  "eval_loss", "moe_max_over_mean", "moe_aux_loss",
                                         "moe_z_loss", NULL};

typedef struct {
  double *v[NCOL]; /* (n) per column */
  int64_t n, cap;
} series;

static int push(series *s, const double *row) {
  if (s->n == s->cap) {
    int64_t nc = s->cap ? s->cap * 2 : 256;
    for (int c = 0; c < NCOL; c++) {
      double *x = realloc(s->v[c], (size_t)nc * sizeof *x);
      if (!x) return -1;
      s->v[c] = x;
    }
    s->cap = nc;
  }
  for (int c = 0; c < NCOL; c++) s->v[c][s->n] = row[c];
  s->n++;
  return 0;
}

static double num_or_nan(json_t *o, const char *key) {
  json_t *x = o ? json_object_get(o, key) : NULL;
  return json_is_number(x) ? json_number_value(x) : NAN;
}

/* One metrics line; 0 when it lacks a numeric step, loss or tokens_per_s. */
static int parse_row(json_t *o, double *row) {
  for (int c = 0; c < C_ARENA; c++) row[c] = KEY[c] ? num_or_nan(o, KEY[c]) : NAN;
  json_t *dr = o ? json_object_get(o, "moe_dropped") : NULL, *x;
  size_t i;
  if (json_is_array(dr)) {
    row[C_MOE_DROP] = 0;
    json_array_foreach(dr, i, x) row[C_MOE_DROP] += json_is_number(x) ? json_number_value(x) : 0;
  }
  json_t *ap = o ? json_object_get(o, "arena_peak") : NULL;
  for (int a = 0; a < SL_ARENA_COUNT; a++) row[C_ARENA + a] = num_or_nan(ap, sl_arena_name((sl_arena)a)) / (1 << 20);
  return isfinite(row[C_STEP]) && !isnan(row[C_LOSS]) && !isnan(row[C_TPS]);
}

static int any_finite(const series *s, int c) {
  for (int64_t i = 0; i < s->n; i++)
    if (isfinite(s->v[c][i])) return 1;
  return 0;
}

/* 1-2-5 ticks covering [*lo, *hi] (widened to tick multiples). */
static double nice_step(double range, int target) {
  double raw = range / target, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

static void range_of(const double *v, int64_t n, double *lo, double *hi) {
  *lo = INFINITY;
  *hi = -INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(v[i])) {
      if (v[i] < *lo) *lo = v[i];
      if (v[i] > *hi) *hi = v[i];
    }
  if (!isfinite(*lo)) {
    *lo = 0;
    *hi = 1;
  }
  if (*hi - *lo < 1e-12 * (fabs(*hi) + 1)) {
    double d = fabs(*hi) > 0 ? fabs(*hi) * 0.05 : 0.5;
    *lo -= d;
    *hi += d;
  }
}

static void xml_escape(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default:
      if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
  }
}

/* Each series of a panel: its own colour, dash pattern and marker shape, so lines that coincide (or look
 * alike in grey) can still be told apart; the markers of series c are staggered along the line. */
static const char *const COLORS[] = {"#c0392b", "#2471a3", "#27ae60", "#8e44ad",
                                     "#d35400", "#16a085", "#7f8c8d", "#2c3e50"};
static const char *const DASHES[] = {"", "7,3", "2,2", "9,3,2,3", "4,4", "12,3,2,3,2,3", "1,3", "6,2,6,6"};
#define NSTYLE 8
#define NMARK 8 /* markers per dense line */

/* The marker of series c at (x, y): circle, square, triangle, diamond, x, plus, triangle down, star-ish. */
static void marker(FILE *f, int c, double x, double y, const char *color) {
  switch (c % NSTYLE) {
  case 0: fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.2\" fill=\"%s\"/>\n", x, y, color); break;
  case 1:
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"6\" height=\"6\" fill=\"%s\"/>\n", x - 3, y - 3, color);
    break;
  case 2:
    fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>\n", x, y - 4, x + 3.5, y + 3, x - 3.5, y + 3,
            color);
    break;
  case 3:
    fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>\n", x, y - 4, x + 4, y, x, y + 4,
            x - 4, y, color);
    break;
  case 4:
    fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" stroke-width=\"1.8\"/>\n", x - 3.5,
            y - 3.5, x + 3.5, y + 3.5, x - 3.5, y + 3.5, x + 3.5, y - 3.5, color);
    break;
  case 5:
    fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" stroke-width=\"1.8\"/>\n", x - 4, y,
            x + 4, y, x, y - 4, x, y + 4, color);
    break;
  case 6:
    fprintf(f, "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/>\n", x, y + 4, x + 3.5, y - 3, x - 3.5, y - 3,
            color);
    break;
  default:
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.2\" fill=\"white\" stroke=\"%s\" stroke-width=\"1.5\"/>\n", x, y,
            color);
  }
}

/* The index among a dense series' pts points of its m-th marker (series c of nc). */
static int64_t mark_at(int64_t m, int c, int nc, int64_t pts) {
  int64_t nm = pts / nc < NMARK ? pts / nc : NMARK; /* fewer when the series' offsets would fall on one point */
  if (nm < 1) nm = 1;
  return m >= nm ? pts : (int64_t)((m + (c + 0.5) / nc) / nm * (double)pts);
}

/* One panel of lines cols[0..nc) against step; names: legend (NULL: none), drawn right of the plotting
 * area; from0: a size or rate, never negative: the axis starts at 0 (and a flat 0 line spans [0, 1]).
 * Columns with few points (held-out loss) get a marker at every point, dense ones NMARK staggered markers. */
static void panel(FILE *f, const series *s, const int *cols, int nc, const char *const *names, double y0, double y1,
                  const char *label, double xlo, double xhi, int from0) {
  double lo = INFINITY, hi = -INFINITY;
  for (int c = 0; c < nc; c++) {
    double l, h;
    if (!any_finite(s, cols[c])) continue;
    range_of(s->v[cols[c]], s->n, &l, &h);
    if (l < lo) lo = l;
    if (h > hi) hi = h;
  }
  if (!isfinite(lo)) range_of(s->v[cols[0]], s->n, &lo, &hi);
  if (from0) {
    lo = 0;
    if (hi <= 0) hi = 1;
  }
  double st = nice_step(hi - lo, 5);
  lo = floor(lo / st) * st;
  hi = ceil(hi / st) * st;
  if (from0 && lo < 0) lo = 0;
  double xs = nice_step(xhi - xlo, 8);
#define PX(x) (PLOT_X0 + ((x)-xlo) / (xhi - xlo) * (PLOT_X1 - PLOT_X0))
#define PY(v) (y1 - ((v)-lo) / (hi - lo) * (y1 - y0))
  fprintf(f,
          "<rect class=\"plot-area\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" "
          "stroke=\"#444\"/>\n",
          PLOT_X0, y0, PLOT_X1 - PLOT_X0, y1 - y0);
  for (int k = 0; k < 40 && lo + k * st <= hi + st * 1e-6; k++) {
    double t = lo + k * st, py = PY(t);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", PLOT_X0, py, PLOT_X1, py);
    fprintf(f, "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%.6g</text>\n",
            PLOT_X0 - 6, py + 4, fabs(t) < st * 1e-6 ? 0.0 : t);
  }
  for (int k = 0; k < 40 && ceil(xlo / xs) * xs + k * xs <= xhi + xs * 1e-6; k++) {
    double t = ceil(xlo / xs) * xs + k * xs, px = PX(t);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", px, y1, px, y1 + 5);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%.6g</text>\n", px, y1 + 18, t);
  }
  fprintf(f,
          "<text x=\"%d\" y=\"%.1f\" font-size=\"13\" transform=\"rotate(-90 %d %.1f)\" "
          "text-anchor=\"middle\">%s</text>\n",
          22, (y0 + y1) / 2, 22, (y0 + y1) / 2, label);
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">step</text>\n", (PLOT_X0 + PLOT_X1) / 2,
          y1 + 34);
  int nshown = 0;
  for (int c = 0; c < nc && names; c++) nshown += any_finite(s, cols[c]);
  if (nshown) /* the legend's box, right of the plotting area */
    fprintf(f,
            "<rect class=\"legend\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"white\" stroke=\"#bbb\"/>\n",
            LEGEND_X0, y0, W - LEGEND_X0 - 6, 8 + 16 * nshown);
  int shown = 0;
  for (int c = 0; c < nc; c++) {
    const double *y = s->v[cols[c]];
    const char *color = COLORS[c % NSTYLE], *dash = DASHES[c % NSTYLE];
    int64_t pts = 0;
    for (int64_t i = 0; i < s->n; i++) pts += isfinite(y[i]) != 0;
    if (!pts) continue;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s%s%s points=\"", color,
            dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
    int64_t stride = s->n > MAX_POINTS ? (s->n + MAX_POINTS - 1) / MAX_POINTS : 1;
    for (int64_t i = 0; i < s->n; i += stride)
      if (isfinite(y[i]) && isfinite(s->v[C_STEP][i])) fprintf(f, "%.1f,%.1f ", PX(s->v[C_STEP][i]), PY(y[i]));
    fputs("\"/>\n", f);
    int sparse = pts == 1 || (pts < s->n && pts <= 200); /* the held-out loss: every point */
    if (sparse || nc > 1) /* dense: NMARK markers, series c's offset by (c + 1/2) / nc of their spacing */
      for (int64_t i = 0, k = 0, m = 0; i < s->n; i++) {
        if (!isfinite(y[i]) || !isfinite(s->v[C_STEP][i])) continue;
        if (sparse || (m < NMARK && k == mark_at(m, c, nc, pts))) {
          marker(f, c, PX(s->v[C_STEP][i]), PY(y[i]), color);
          while (!sparse && m < NMARK && mark_at(m, c, nc, pts) <= k) m++;
        }
        k++;
      }
    if (names) {
      double ly = y0 + 14 + 16 * shown;
      fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\"%s%s%s/>\n",
              LEGEND_X0 + 6, ly - 4, LEGEND_X0 + 36, ly - 4, color, dash[0] ? " stroke-dasharray=\"" : "", dash,
              dash[0] ? "\"" : "");
      if (sparse || nc > 1) marker(f, c, LEGEND_X0 + 21, ly - 4, color);
      fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"%s\">%s</text>\n", LEGEND_X0 + 42, ly, color,
              names[c]);
      shown++;
    }
  }
#undef PX
#undef PY
}

/* The metrics lines of in (jsonl_path) into s: rows with a finite loss; at least one. */
static int read_series(FILE *in, const char *jsonl_path, series *s) {
  int rc = SL_OK;
  char *line = NULL;
  size_t cap = 0;
  ssize_t r;
  long long nulls = 0;
  while ((r = getline(&line, &cap, in)) >= 0) {
    json_t *o = json_loadb(line, (size_t)r, 0, NULL);
    double row[NCOL];
    int ok = parse_row(o, row);
    if (!ok && isfinite(row[C_STEP]) && json_is_null(json_object_get(o, "loss"))) nulls++; /* a non-finite step */
    if (ok && push(s, row)) {
      json_decref(o);
      rc = sl_fail(SL_ENOMEM, "out of memory reading %s", jsonl_path);
      break;
    }
    json_decref(o);
  }
  free(line);
  if (rc) return rc;
  if (ferror(in)) return sl_fail(SL_EIO, "%s: read failed", jsonl_path);
  if (s->n == 0 && nulls > 0)
    return sl_fail(SL_EINPUT,
                   "%s: no step had a finite loss (%lld metrics lines, every \"loss\" is null): nothing to plot",
                   jsonl_path, nulls);
  if (s->n == 0)
    return sl_fail(SL_EINPUT,
                   "%s: no metrics lines: expected JSON objects with numeric \"step\", "
                   "\"loss\" and \"tokens_per_s\" (file empty or malformed)",
                   jsonl_path);
  return SL_OK;
}

/* The SVG document up to its closing tag: the title, then the panels: loss (+ held-out), tokens/s, then
 * those the file has data for. */
static void write_panels(FILE *out, const series *s, const char *jsonl_path, double xlo, double xhi) {
  int loss_cols[2] = {C_LOSS, C_EVAL}, tps_col = C_TPS, lr_col = C_LR, gn_col = C_GN, mem_cols[SL_ARENA_COUNT];
  const char *loss_names[2] = {"training loss", "held-out loss"}, *mem_names[SL_ARENA_COUNT];
  int nmem = 0, has_eval = any_finite(s, C_EVAL);
  for (int a = 0; a < SL_ARENA_COUNT; a++)
    if (any_finite(s, C_ARENA + a)) {
      mem_cols[nmem] = C_ARENA + a;
      mem_names[nmem++] = sl_arena_name((sl_arena)a);
    }
  int moe_cols[2] = {C_MOE_AUX, C_MOE_Z}, load_col = C_MOE_LOAD, drop_col = C_MOE_DROP;
  const char *moe_names[2] = {"load-balancing loss", "router z-loss"};
  int has_load = any_finite(s, C_MOE_LOAD), has_rl = any_finite(s, C_MOE_AUX) || any_finite(s, C_MOE_Z);
  int has_drop = any_finite(s, C_MOE_DROP);
  int np = 2 + any_finite(s, C_LR) + any_finite(s, C_GN) + (nmem > 0) + has_load + has_rl + has_drop;
  const int PH = 250, GAP = 70, H = 50 + np * (PH + GAP);
  fprintf(out,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H, W, H);
  const char *base = strrchr(jsonl_path, '/');
  base = base ? base + 1 : jsonl_path;
  fprintf(out,
          "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
          "font-weight=\"bold\">shardlm training metrics: ",
          W / 2);
  xml_escape(out, base);
  fprintf(out, " (%lld steps)</text>\n", (long long)s->n);
  double y = 50;
#define NEXT(cols, nc, names, label, from0)                                                                            \
  do {                                                                                                                 \
    panel(out, s, cols, nc, names, y, y + PH, label, xlo, xhi, from0);                                                 \
    y += PH + GAP;                                                                                                     \
  } while (0)
  NEXT(loss_cols, has_eval ? 2 : 1, has_eval ? loss_names : NULL, "loss", 0);
  NEXT(&tps_col, 1, NULL, "tokens/s", 1);
  if (any_finite(s, C_LR)) NEXT(&lr_col, 1, NULL, "learning rate", 1);
  if (any_finite(s, C_GN)) NEXT(&gn_col, 1, NULL, "gradient norm", 1);
  if (has_load) NEXT(&load_col, 1, NULL, "expert load: the worst layer's max / mean tokens (1 = balanced)", 0);
  if (has_rl) NEXT(moe_cols, 2, moe_names, "router losses (moe_aux_loss, moe_z_loss)", 0);
  if (has_drop) NEXT(&drop_col, 1, NULL, "slots dropped by the expert capacity (all layers)", 1);
  if (nmem) NEXT(mem_cols, nmem, mem_names, "peak memory per arena (MiB)", 1);
#undef NEXT
}

int sl_plot_metrics(const char *jsonl_path, const char *svg_path) {
  int rc = SL_OK;
  series s = {0};
  char *tmp = NULL;
  FILE *out = NULL;
  FILE *in = fopen(jsonl_path, "r");
  if (!in) return sl_fail(SL_EINPUT, "%s: cannot open metrics file: %s", jsonl_path, strerror(errno));
  if ((rc = read_series(in, jsonl_path, &s))) goto done;
  double xlo, xhi;
  range_of(s.v[C_STEP], s.n, &xlo, &xhi);
  if (asprintf(&tmp, "%s.tmp.%d", svg_path, (int)getpid()) < 0) {
    tmp = NULL;
    rc = sl_fail(SL_ENOMEM, "out of memory");
    goto done;
  }
  out = fopen(tmp, "w");
  if (!out) {
    int bad_path = errno == ENOENT || errno == EACCES || errno == ENOTDIR || errno == EROFS;
    rc = sl_fail(bad_path ? SL_EINPUT : SL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    goto done;
  }
  write_panels(out, &s, jsonl_path, xlo, xhi);
  fputs("</svg>\n", out);
  if (fflush(out) != 0 || ferror(out) || fsync(fileno(out)) != 0) {
    rc = sl_fail(SL_EIO, "%s: write failed: %s", tmp, strerror(errno));
    goto done;
  }
  int cr = fclose(out);
  out = NULL;
  if (cr != 0) {
    rc = sl_fail(SL_EIO, "%s: close failed: %s", tmp, strerror(errno));
    goto done;
  }
  if (rename(tmp, svg_path) != 0) rc = sl_fail(SL_EIO, "cannot rename %s to %s: %s", tmp, svg_path, strerror(errno));
done:
  if (out) fclose(out);
  if (rc && tmp) unlink(tmp);
  free(tmp);
  fclose(in);
  for (int c = 0; c < NCOL; c++) free(s.v[c]);
  return rc;
}
