/* pipeline/layout.c — which decoder layers each pipeline stage holds: the
 * explicit `--pp-layout 5,4,4,5` split, checked, and the default split
 * balanced over FLOPs and memory with the embedding on the first stage and
 * the final norm + LM head on the last (pipeline/pipeline.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pipeline.h"

int sl_pp_layout_parse(const char *text, int P, int L, int *layers) {
  const char *p = text ? text : "";
  int n = 0;
  long sum = 0;
  while (1) {
    char *e;
    errno = 0;
    long v = strtol(p, &e, 10);
    if (e == p || errno || v < 0 || v > 1000000 || (*e && *e != ','))
      return sl_fail(SL_EINPUT,
                     "--pp-layout '%s': expected %d comma-separated decoder-layer counts (>= 0), one per "
                     "stage, summing to %d, e.g. '%d%s'",
                     text ? text : "", P, L, L / P, P > 1 ? ",..." : "");
    if (n == P)
      return sl_fail(SL_EINPUT, "--pp-layout '%s' names more than the %d stages (--pp x --pp-virtual)", text, P);
    layers[n++] = (int)v;
    sum += v;
    if (!*e) break;
    p = e + 1;
  }
  if (n != P)
    return sl_fail(SL_EINPUT,
                   "--pp-layout '%s' names %d stage%s, but there are %d (--pp x --pp-virtual): give one count "
                   "per stage",
                   text, n, n == 1 ? "" : "s", P);
  if (sum != L)
    return sl_fail(SL_EINPUT,
                   "--pp-layout '%s' places %ld decoder layers, but the model has %d: the counts must sum "
                   "to %d (no layer is dropped or invented)",
                   text, sum, L, L);
  for (int s = 0; s < P; s++)
    if (layers[s] == 0 && s != 0 && s != P - 1)
      return sl_fail(SL_EINPUT,
                     "--pp-layout '%s' leaves stage %d empty (no decoder layer, and only the first stage "
                     "holds the embedding and the last the LM head): give it at least one layer",
                     text, s);
  return SL_OK;
}

static void weights_of(const sl_pp_costs *c, const double *pf, const double *pb, int s, int P, int i, int j, double *f,
                       double *b) {
  *f = pf[j] - pf[i] + (s == 0 ? c->embed_flops : 0) + (s == P - 1 ? c->head_flops : 0);
  *b = pb[j] - pb[i] + (s == 0 ? c->embed_bytes : 0) + (s == P - 1 ? c->head_bytes : 0);
}

void sl_pp_layout_weights(const sl_pp_costs *c, int P, const int *layers, double *flops, double *bytes) {
  int at = 0;
  for (int s = 0; s < P; s++) {
    flops[s] = (s == 0 ? c->embed_flops : 0) + (s == P - 1 ? c->head_flops : 0);
    bytes[s] = (s == 0 ? c->embed_bytes : 0) + (s == P - 1 ? c->head_bytes : 0);
    for (int k = 0; k < layers[s]; k++, at++) {
      flops[s] += c->layer_flops[at];
      bytes[s] += c->layer_bytes[at];
    }
  }
}

/* Two passes of the same dynamic programme over (stage, layers placed):
 * pass 0 finds the least possible heaviest stage M; pass 1 the split with
 * the least sum of squared weights among those whose stages are all <= M. */
int sl_pp_layout_balance(const sl_pp_costs *c, int P, int *layers) {
  int L = c->L, rc = SL_OK;
  if (P < 1) return sl_fail(SL_EINPUT, "--pp must be >= 1, found %d", P);
  if (L < 0 || L > 100000) return sl_fail(SL_EINPUT, "pipeline layout: %d decoder layers", L);
  if (P > L + 2)
    return sl_fail(SL_EINPUT,
                   "%d pipeline stages (--pp x --pp-virtual) are more stages than the model has units (%d "
                   "decoder layers + the embedding + the LM head = %d): use at most %d stages",
                   P, L, L + 2, L + 2);
  double tf = c->embed_flops + c->head_flops, tb = c->embed_bytes + c->head_bytes;
  double *pf = calloc((size_t)L + 1, sizeof(double)), *pb = calloc((size_t)L + 1, sizeof(double));
  double *best = malloc(sizeof(double) * (size_t)(P + 1) * (size_t)(L + 1));
  int *from = malloc(sizeof(int) * (size_t)(P + 1) * (size_t)(L + 1));
  if (!pf || !pb || !best || !from) {
    rc = sl_fail(SL_ENOMEM, "pipeline layout: out of memory");
    goto done;
  }
  for (int i = 0; i < L; i++) {
    if (!(c->layer_flops[i] >= 0) || !(c->layer_bytes[i] >= 0) || !isfinite(c->layer_flops[i]) ||
        !isfinite(c->layer_bytes[i])) {
      rc = sl_fail(SL_EINPUT, "pipeline layout: layer %d has cost %g FLOPs / %g bytes (expected finite, >= 0)", i,
                   c->layer_flops[i], c->layer_bytes[i]);
      goto done;
    }
    pf[i + 1] = pf[i] + c->layer_flops[i];
    pb[i + 1] = pb[i] + c->layer_bytes[i];
  }
  tf += pf[L];
  tb += pb[L];
  double M = 0;
  for (int pass = 0; pass < 2; pass++) {
    /* best[s][j]: stages 0..s-1 hold layers 0..j-1; pass 0: heaviest stage,
     * pass 1: sum of squares (INFINITY: impossible) */
#define BEST(s, j) best[(size_t)(s) * (size_t)(L + 1) + (size_t)(j)]
#define FROM(s, j) from[(size_t)(s) * (size_t)(L + 1) + (size_t)(j)]
    for (int s = 0; s <= P; s++)
      for (int j = 0; j <= L; j++) BEST(s, j) = INFINITY;
    BEST(0, 0) = 0;
    for (int s = 0; s < P; s++) {
      int minl = (s == 0 || s == P - 1) ? 0 : 1;
      for (int i = 0; i <= L; i++) {
        if (BEST(s, i) == INFINITY) continue;
        for (int j = i + minl; j <= L; j++) {
          if (s == P - 1 && j != L) continue;
          double f, b;
          weights_of(c, pf, pb, s, P, i, j, &f, &b);
          double w = fmax(tf > 0 ? f / tf : 0, tb > 0 ? b / tb : 0);
          double v;
          if (pass == 0) v = fmax(BEST(s, i), w);
          else {
            if (w > M * (1 + 1e-12) + 1e-300) continue;
            v = BEST(s, i) + w * w;
          }
          if (v < BEST(s + 1, j)) {
            BEST(s + 1, j) = v;
            FROM(s + 1, j) = i;
          }
        }
      }
    }
    if (BEST(P, L) == INFINITY) {
      rc = sl_fail(SL_EINTERNAL, "pipeline layout: no split of %d layers over %d stages", L, P);
      goto done;
    }
    M = BEST(P, L);
  }
  for (int s = P, j = L; s > 0; s--) {
    int i = FROM(s, j);
    layers[s - 1] = j - i;
    j = i;
  }
#undef BEST
#undef FROM
done:
  free(pf);
  free(pb);
  free(best);
  free(from);
  return rc;
}
