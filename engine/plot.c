/* engine/plot.c — metrics JSONL -> self-contained SVG (loss and tokens/s vs
 * step), written atomically.
 */
#define _GNU_SOURCE
#include "engine/plot.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

#define W 900
#define PLOT_X0 90
#define PLOT_X1 870
#define MAX_POINTS 4000 /* polyline points per panel (uniform stride beyond) */

typedef struct {
  double *step, *loss, *tps;
  int64_t n, cap;
} series;

static int push(series *s, double a, double b, double c) {
  if (s->n == s->cap) {
    int64_t nc = s->cap ? s->cap * 2 : 256;
    double *x = realloc(s->step, (size_t)nc * sizeof *x);
    if (x) s->step = x;
    double *y = realloc(s->loss, (size_t)nc * sizeof *y);
    if (y) s->loss = y;
    double *z = realloc(s->tps, (size_t)nc * sizeof *z);
    if (z) s->tps = z;
    if (!x || !y || !z) return -1;
    s->cap = nc;
  }
  s->step[s->n] = a;
  s->loss[s->n] = b;
  s->tps[s->n] = c;
  s->n++;
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

static void panel(FILE *f, const series *s, const double *y, double y0, double y1,
                  const char *label, const char *color, double xlo, double xhi) {
  double lo, hi;
  range_of(y, s->n, &lo, &hi);
  double st = nice_step(hi - lo, 5);
  lo = floor(lo / st) * st;
  hi = ceil(hi / st) * st;
  double xs = nice_step(xhi - xlo, 8);
#define PX(x) (PLOT_X0 + ((x) - xlo) / (xhi - xlo) * (PLOT_X1 - PLOT_X0))
#define PY(v) (y1 - ((v) - lo) / (hi - lo) * (y1 - y0))
  fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" "
             "stroke=\"#444\"/>\n", PLOT_X0, y0, PLOT_X1 - PLOT_X0, y1 - y0);
  for (int k = 0; k < 40 && lo + k * st <= hi + st * 1e-6; k++) {
    double t = lo + k * st, py = PY(t);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", PLOT_X0,
            py, PLOT_X1, py);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%.6g</text>\n",
            PLOT_X0 - 6, py + 4, fabs(t) < st * 1e-6 ? 0.0 : t);
  }
  for (int k = 0; k < 40 && ceil(xlo / xs) * xs + k * xs <= xhi + xs * 1e-6; k++) {
    double t = ceil(xlo / xs) * xs + k * xs, px = PX(t);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", px,
            y1, px, y1 + 5);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%.6g</text>\n",
            px, y1 + 18, t);
  }
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"13\" transform=\"rotate(-90 %d %.1f)\" "
             "text-anchor=\"middle\">%s</text>\n", 22, (y0 + y1) / 2, 22, (y0 + y1) / 2, label);
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">step</text>\n",
          (PLOT_X0 + PLOT_X1) / 2, y1 + 34);
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
  int64_t stride = s->n > MAX_POINTS ? (s->n + MAX_POINTS - 1) / MAX_POINTS : 1;
  for (int64_t i = 0; i < s->n; i += stride)
    if (isfinite(y[i]) && isfinite(s->step[i]))
      fprintf(f, "%.1f,%.1f ", PX(s->step[i]), PY(y[i]));
  fputs("\"/>\n", f);
  if (s->n == 1 && isfinite(y[0]))
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", PX(s->step[0]),
            PY(y[0]), color);
#undef PX
#undef PY
}

int sl_plot_metrics(const char *jsonl_path, const char *svg_path) {
  int rc = SL_OK;
  series s = {0};
  char *line = NULL, *tmp = NULL;
  size_t cap = 0;
  FILE *out = NULL;
  FILE *in = fopen(jsonl_path, "r");
  if (!in)
    return sl_fail(SL_EINPUT, "%s: cannot open metrics file: %s", jsonl_path, strerror(errno));
  ssize_t r;
  while ((r = getline(&line, &cap, in)) >= 0) {
    json_t *o = json_loadb(line, (size_t)r, 0, NULL);
    json_t *a = o ? json_object_get(o, "step") : NULL, *b = o ? json_object_get(o, "loss") : NULL,
           *c = o ? json_object_get(o, "tokens_per_s") : NULL;
    if (json_is_number(a) && json_is_number(b) && json_is_number(c) &&
        isfinite(json_number_value(a)) &&
        push(&s, json_number_value(a), json_number_value(b), json_number_value(c))) {
      json_decref(o);
      rc = sl_fail(SL_ENOMEM, "out of memory reading %s", jsonl_path);
      goto done;
    }
    json_decref(o);
  }
  if (ferror(in)) {
    rc = sl_fail(SL_EIO, "%s: read failed", jsonl_path);
    goto done;
  }
  if (s.n == 0) {
    rc = sl_fail(SL_EINPUT, "%s: no metrics lines: expected JSON objects with numeric \"step\", "
                 "\"loss\" and \"tokens_per_s\" (file empty or malformed)", jsonl_path);
    goto done;
  }
  double xlo, xhi;
  range_of(s.step, s.n, &xlo, &xhi);
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
  const int H = 660;
  fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H, W, H);
  const char *base = strrchr(jsonl_path, '/');
  base = base ? base + 1 : jsonl_path;
  fprintf(out, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" "
               "font-weight=\"bold\">shardlm training metrics: ", W / 2);
  xml_escape(out, base);
  fprintf(out, " (%lld steps)</text>\n", (long long)s.n);
  panel(out, &s, s.loss, 50, 300, "loss", "#c0392b", xlo, xhi);
  panel(out, &s, s.tps, 370, 610, "tokens/s", "#2471a3", xlo, xhi);
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
  if (rename(tmp, svg_path) != 0)
    rc = sl_fail(SL_EIO, "cannot rename %s to %s: %s", tmp, svg_path, strerror(errno));
done:
  if (out) fclose(out);
  if (rc && tmp) unlink(tmp);
  free(tmp);
  free(line);
  fclose(in);
  free(s.step);
  free(s.loss);
  free(s.tps);
  return rc;
}
