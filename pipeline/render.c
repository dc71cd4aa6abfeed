/* pipeline/render.c — drawing a static pipeline schedule (pipeline/pipeline.h):
 * the per-rank text timeline and the SVG timeline with the bubble, the
 * one `shardlm pp-schedule` prints and draws (tools/pp_schedule.c) and a
 * training run writes as pipeline.svg next to metrics.svg
 * (engine/report_pp.c; docs/pipeline.md). */
#define _GNU_SOURCE
#include "pipeline/render.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

/* ---- text timeline -------------------------------------------------------- */
void sl_pp_timeline_print(FILE *f, const sl_pp_sched *s, int compact) {
  int64_t T = s->makespan;
  int V = s->spec.V, w = compact ? 1 : (V > 1 ? 5 : 4);
  char *row = malloc((size_t)(T * w + 1));
  if (!row) return;
  fprintf(f, "timeline (1 column = 1 time unit; F %lld, B %lld, W %lld):\n", (long long)s->spec.cost_f,
          (long long)s->spec.cost_b, (long long)s->spec.cost_w);
  for (int r = 0; r < s->spec.P; r++) {
    memset(row, compact ? '.' : ' ', (size_t)(T * w));
    if (!compact)
      for (int64_t t = 0; t < T; t++) row[t * w] = '.';
    row[T * w] = 0;
    for (int i = 0; i < s->nops[r]; i++) {
      const sl_pp_op *o = &s->ops[r][i];
      if (o->kind > SL_PP_W) continue;
      char lab[16];
      sl_pp_op_str(s, o, lab, sizeof lab);
      for (int64_t t = o->start; t < o->end; t++) {
        if (compact) row[t] = (char)(o->chunk % 2 ? lab[0] + 32 : lab[0]); /* odd chunks lower case */
        else {
          memset(row + t * w, ' ', (size_t)w);
          memcpy(row + t * w, lab, strlen(lab) < (size_t)w - 1 ? strlen(lab) : (size_t)w - 1);
          if (t > o->start) row[t * w] = (char)(lab[0] + 32); /* the op's later time units: lower case */
        }
      }
    }
    fprintf(f, "  rank %-3d |%s|\n", r, row);
  }
  free(row);
}

/* ---- SVG ------------------------------------------------------------------ */
int sl_pp_svg_write(const sl_pp_sched *s, const char *path) {
  char *buf = NULL, *tmp = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return sl_fail(SL_ENOMEM, "out of memory");
  int P = s->spec.P, X0 = 80, RH = 30;
  double cw = s->makespan > 0 ? 1000.0 / (double)s->makespan : 1;
  if (cw > 28) cw = 28;
  int Wd = X0 + (int)(cw * (double)s->makespan) + 150, H = 90 + P * RH + 40;
  static const char *const COL[3] = {"#2471a3", "#27ae60", "#d35400"}, *const NAME[3] = {"F forward", "B backward",
                                                                                         "W weight grad"};
  fprintf(m,
          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
          "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" "
          "fill=\"white\"/>\n",
          Wd, H, Wd, H);
  fprintf(m,
          "<text x=\"%d\" y=\"26\" font-size=\"16\" font-weight=\"bold\">shardlm pipeline schedule: %s, P=%d, "
          "m=%d, V=%d; bubble %lld of %lld time units per rank (%.1f%%)</text>\n",
          X0, sl_pp_kind_name(s->spec.kind), P, s->spec.m, s->spec.V, (long long)s->idle[0], (long long)s->makespan,
          s->makespan ? 100.0 * (double)s->idle[0] / (double)s->makespan : 0.0);
  int nk = s->spec.kind == SL_PP_ZB1P ? 3 : 2;
  for (int k = 0; k < nk; k++)
    fprintf(m,
            "<rect x=\"%d\" y=\"40\" width=\"14\" height=\"14\" fill=\"%s\"/><text x=\"%d\" y=\"52\" "
            "font-size=\"12\">%s</text>\n",
            X0 + 140 * k, COL[k], X0 + 140 * k + 20, NAME[k]);
  if (s->spec.V > 1)
    fprintf(m, "<text x=\"%d\" y=\"52\" font-size=\"12\">pale: odd chunks; labels mb:chunk</text>\n", X0 + 140 * nk);
  for (int r = 0; r < P; r++) {
    double y = 70 + r * RH;
    fprintf(m, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"12\">rank %d</text>\n", X0 - 8, y + 18, r);
    fprintf(m, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#eeeeee\"/>\n", X0, y,
            cw * (double)s->makespan, RH - 4);
    for (int i = 0; i < s->nops[r]; i++) {
      const sl_pp_op *o = &s->ops[r][i];
      if (o->kind > SL_PP_W) continue;
      double x = X0 + cw * (double)o->start, wd = cw * (double)(o->end - o->start);
      fprintf(m,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\" fill-opacity=\"%s\" "
              "stroke=\"white\" stroke-width=\"0.5\"/>\n",
              x, y, wd, RH - 4, COL[(int)o->kind], o->chunk % 2 ? "0.55" : "1");
      char lab[16];
      sl_pp_op_str(s, o, lab, sizeof lab);
      if (wd >= 5.5 * (double)(strlen(lab) - 1))
        fprintf(m, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\" fill=\"white\">%s</text>\n",
                x + wd / 2, y + 17, lab + 1);
    }
    fprintf(m, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">idle %lld, peak %d in flight</text>\n",
            X0 + cw * (double)s->makespan + 8, y + 17, (long long)s->idle[r], s->peak_inflight[r]);
  }
  fprintf(m,
          "<text x=\"%d\" y=\"%d\" font-size=\"12\">time units (F = %lld, B = %lld, W = %lld); transfers per "
          "rank and their bytes: shardlm pp-schedule text output</text>\n</svg>\n",
          X0, H - 14, (long long)s->spec.cost_f, (long long)s->spec.cost_b, (long long)s->spec.cost_w);
  int rc = SL_OK;
  FILE *out = NULL;
  if (fclose(m) != 0) {
    free(buf);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
    tmp = NULL;
    rc = sl_fail(SL_ENOMEM, "out of memory");
    goto done;
  }
  out = fopen(tmp, "w");
  if (!out) {
    rc = sl_fail(errno == ENOENT || errno == EACCES || errno == ENOTDIR || errno == EROFS ? SL_EINPUT : SL_EIO,
                 "%s: cannot create %s: %s", path, tmp, strerror(errno));
    goto done;
  }
  if (fwrite(buf, 1, len, out) != len || fflush(out) != 0 || fsync(fileno(out)) != 0) {
    rc = sl_fail(SL_EIO, "%s: write failed: %s", tmp, strerror(errno));
    goto done;
  }
  int cr = fclose(out);
  out = NULL;
  if (cr != 0) rc = sl_fail(SL_EIO, "%s: close failed: %s", tmp, strerror(errno));
  else if (rename(tmp, path) != 0) rc = sl_fail(SL_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  else sl_fsync_parent(path);
done:
  if (out) fclose(out);
  if (rc && tmp) unlink(tmp);
  free(tmp);
  free(buf);
  return rc;
}
