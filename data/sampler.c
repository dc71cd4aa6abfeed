/* data/sampler.c — the data order: blends of datasets (Megatron's greedy
 * interleave), per-dataset sequential / shuffled windows, and loss masks.
 * Definitions in data/sampler.h. */
#define _GNU_SOURCE
#include "data/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "formats/lmask.h"

#define SL_BLEND_MAX 64
#define RING (1 << 16) /* blend assignments remembered behind the state */

typedef struct {
  sl_dataset *ds;
  sl_lmask *mask; /* NULL: every target counts */
  double w;       /* normalised weight */
  int64_t lo;     /* first token of the stream in the dataset (--split), for the mask */
  int64_t ntok, nwin;
  int64_t *perm; /* (nwin) shuffled order of one epoch */
  int64_t perm_epoch;
} source;

struct sl_sampler {
  int n;
  source src[SL_BLEND_MAX];
  int64_t T;
  int shuffled;
  uint64_t seed;
  /* blend state: assignment of samples 0..pos-1 made; counts of each dataset */
  int64_t pos;
  int64_t count[SL_BLEND_MAX];
  int32_t *row;    /* (T+1) one sample */
  uint8_t *keep;   /* (T) its loss mask */
  uint8_t *first;  /* (T) its document starts */
  uint8_t *ring_d; /* (RING) dataset of sample q at q % RING */
  int64_t *ring_c; /* (RING) its local index */
};

int sl_blend_parse(char *buf, int cap, double *weights, char **prefixes, int *n) {
  char *tok[2 * SL_BLEND_MAX + 1], *save = NULL;
  int nt = 0;
  for (char *p = strtok_r(buf, " \t\r\n", &save); p; p = strtok_r(NULL, " \t\r\n", &save)) {
    if (nt == 2 * cap || nt == 2 * SL_BLEND_MAX)
      return sl_fail(SL_EINPUT, "--data: more than %d datasets in the blend", cap);
    tok[nt++] = p;
  }
  *n = 0;
  if (nt == 0) return sl_fail(SL_EINPUT, "--data: empty");
  if (nt == 1) {
    weights[0] = 1.0;
    prefixes[0] = tok[0];
    *n = 1;
    return SL_OK;
  }
  if (nt % 2)
    return sl_fail(SL_EINPUT, "--data: a blend is \"WEIGHT PREFIX WEIGHT PREFIX ...\" (pairs), found %d words", nt);
  double sum = 0;
  for (int i = 0; i < nt / 2; i++) {
    char *end = NULL;
    double w = strtod(tok[2 * i], &end);
    if (!*tok[2 * i] || *end || !isfinite(w) || w <= 0)
      return sl_fail(SL_EINPUT, "--data: weight %d of the blend must be a finite number > 0, found '%s'", i + 1,
                     tok[2 * i]);
    weights[i] = w;
    prefixes[i] = tok[2 * i + 1];
    sum += w;
  }
  for (int i = 0; i < nt / 2; i++) weights[i] /= sum;
  *n = nt / 2;
  return SL_OK;
}

void sl_sampler_close(sl_sampler *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    sl_dataset_close(s->src[i].ds);
    sl_lmask_close(s->src[i].mask);
    free(s->src[i].perm);
  }
  free(s->row);
  free(s->keep);
  free(s->first);
  free(s->ring_d);
  free(s->ring_c);
  free(s);
}

int sl_sampler_open(const char *spec, int64_t T, const char *order, uint64_t seed, int64_t vocab, sl_sampler **out) {
  *out = NULL;
  sl_sampler *s = calloc(1, sizeof *s);
  char *buf = strdup(spec);
  int rc = SL_OK;
  if (!s || !buf || !(s->row = malloc(sizeof(int32_t) * (size_t)(T + 1))) || !(s->keep = malloc((size_t)T)) ||
      !(s->first = malloc((size_t)T))) {
    free(buf);
    sl_sampler_close(s);
    return sl_fail(SL_ENOMEM, "out of memory");
  }
  s->T = T;
  s->shuffled = !strcmp(order, "shuffled");
  s->seed = seed;
  double w[SL_BLEND_MAX];
  char *pre[SL_BLEND_MAX];
  if ((rc = sl_blend_parse(buf, SL_BLEND_MAX, w, pre, &s->n))) goto done;
  for (int i = 0; i < s->n && !rc; i++) {
    source *d = &s->src[i];
    d->w = w[i];
    d->perm_epoch = -1;
    if ((rc = sl_dataset_open(pre[i], &d->ds))) {
      s->n = i;
      goto done;
    }
    if ((rc = sl_dataset_check_vocab(d->ds, vocab))) break;
    d->ntok = sl_dataset_num_tokens(d->ds);
    if (d->ntok < 2) {
      rc = sl_fail(SL_EINPUT, "%s: the dataset holds fewer than 2 tokens", pre[i]);
      break;
    }
    if ((rc = sl_lmask_open(pre[i], d->ntok, &d->mask))) break;
    d->nwin = d->ntok / T > 0 ? d->ntok / T : 1;
    if (s->shuffled && !(d->perm = malloc(sizeof(int64_t) * (size_t)d->nwin))) rc = sl_fail(SL_ENOMEM, "out of memory");
  }
  if (!rc && s->n > 1 && (!(s->ring_d = malloc(RING)) || !(s->ring_c = malloc(sizeof(int64_t) * RING))))
    rc = sl_fail(SL_ENOMEM, "out of memory");
done:
  free(buf);
  if (rc) sl_sampler_close(s);
  else *out = s;
  return rc;
}

int sl_sampler_restrict(sl_sampler *s, int64_t lo, int64_t hi) {
  if (s->n != 1)
    return sl_fail(SL_EINPUT, "--split divides one dataset: --data is a blend of %d (use --eval-data)", s->n);
  source *x = &s->src[0];
  int rc = sl_dataset_set_range(x->ds, lo, hi);
  if (rc) return rc;
  x->lo = lo;
  x->ntok = sl_dataset_num_tokens(x->ds);
  x->nwin = x->ntok / s->T > 0 ? x->ntok / s->T : 1;
  x->perm_epoch = -1;
  if (s->shuffled) {
    free(x->perm);
    if (!(x->perm = malloc(sizeof(int64_t) * (size_t)x->nwin))) return sl_fail(SL_ENOMEM, "out of memory");
  }
  return SL_OK;
}

sl_dataset *sl_sampler_dataset(sl_sampler *s, int d) { return s->src[d].ds; }

void sl_sampler_set_seed(sl_sampler *s, uint64_t seed) {
  s->seed = seed;
  for (int i = 0; i < s->n; i++) s->src[i].perm_epoch = -1;
}

int sl_sampler_ndatasets(const sl_sampler *s) { return s->n; }

int64_t sl_sampler_num_tokens(const sl_sampler *s) {
  int64_t n = 0;
  for (int i = 0; i < s->n; i++) n += s->src[i].ntok;
  return n;
}

int sl_sampler_has_masks(const sl_sampler *s) {
  for (int i = 0; i < s->n; i++)
    if (s->src[i].mask) return 1;
  return 0;
}

/* Dataset d's window c: its first stream position. */
static int64_t window_start(sl_sampler *s, int d, int64_t c) {
  source *x = &s->src[d];
  if (!s->shuffled) return (c * s->T) % x->ntok;
  int64_t e = c / x->nwin, i = c % x->nwin;
  if (e != x->perm_epoch) {
    for (int64_t w = 0; w < x->nwin; w++) x->perm[w] = w;
    uint64_t seed = s->seed ^ ((uint64_t)d * 0x9e3779b97f4a7c15ull);
    uint64_t st = sl_mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)e + 1);
    for (int64_t w = x->nwin - 1; w > 0; w--) {
      st = sl_mix64(st + 0x9e3779b97f4a7c15ull);
      int64_t r = (int64_t)(st % (uint64_t)(w + 1));
      int64_t t = x->perm[w];
      x->perm[w] = x->perm[r];
      x->perm[r] = t;
    }
    x->perm_epoch = e;
  }
  return (x->perm[i] * s->T) % x->ntok;
}

/* Blend: dataset and local index of sample j (see sampler.h). */
static void blend_pick(sl_sampler *s, int64_t j, int *d, int64_t *c) {
  if (s->n == 1) {
    *d = 0;
    *c = j;
    return;
  }
  if (j < s->pos - RING) { /* before what the ring remembers: replay from 0 */
    s->pos = 0;
    memset(s->count, 0, sizeof s->count);
  }
  for (; s->pos <= j; s->pos++) {
    double x = s->pos > 1 ? (double)s->pos : 1.0;
    int best = 0;
    double err = s->src[0].w * x - (double)s->count[0];
    for (int k = 1; k < s->n; k++) {
      double e = s->src[k].w * x - (double)s->count[k];
      if (e > err) {
        err = e;
        best = k;
      }
    }
    s->ring_d[s->pos % RING] = (uint8_t)best;
    s->ring_c[s->pos % RING] = s->count[best]++;
  }
  *d = s->ring_d[j % RING];
  *c = s->ring_c[j % RING];
}

/* Sample j: its dataset and first stream position. */
static void locate_sample(sl_sampler *s, int64_t j, int *d, int64_t *start) {
  int64_t c;
  blend_pick(s, j, d, &c);
  *start = window_start(s, *d, c);
}

int sl_sampler_read(sl_sampler *s, int64_t j, int32_t *row, uint8_t *keep, int *dataset) {
  int d;
  int64_t start;
  locate_sample(s, j, &d, &start);
  int rc = sl_dataset_tokens(s->src[d].ds, start, s->T + 1, row);
  if (rc) return rc;
  if (keep) {
    const source *x = &s->src[d];
    for (int64_t t = 0; t < s->T; t++)
      keep[t] = x->mask ? (uint8_t)sl_lmask_get(x->mask, x->lo + (start + t + 1) % x->ntok) : 1;
  }
  if (dataset) *dataset = d;
  return SL_OK;
}

int sl_sampler_count(sl_sampler *s, int64_t first, int64_t n, int64_t *count) {
  *count = n * s->T;
  if (!sl_sampler_has_masks(s)) return SL_OK;
  int64_t k = 0;
  for (int64_t j = first; j < first + n; j++) {
    int d;
    int64_t c;
    blend_pick(s, j, &d, &c);
    const source *x = &s->src[d];
    if (!x->mask) {
      k += s->T;
      continue;
    }
    int64_t start = window_start(s, d, c);
    for (int64_t t = 0; t < s->T; t++) k += sl_lmask_get(x->mask, x->lo + (start + t + 1) % x->ntok);
  }
  *count = k;
  return SL_OK;
}

int sl_sampler_batch(sl_sampler *s, int64_t first, int64_t B, int32_t *tok, int32_t *tgt, int32_t *seg) {
  int64_t T = s->T;
  for (int64_t b = 0; b < B; b++) {
    int d;
    int64_t pos;
    locate_sample(s, first + b, &d, &pos);
    int rc = sl_sampler_read(s, first + b, s->row, s->keep, NULL);
    if (!rc && seg) rc = sl_dataset_doc_starts(s->src[d].ds, pos, T, s->first);
    if (rc) return rc;
    int32_t start = 0;
    for (int64_t i = 0; i < T; i++) {
      tok[b * T + i] = s->row[i];
      tgt[b * T + i] = s->keep[i] ? s->row[i + 1] : -1;
      if (!seg) continue;
      if (s->first[i]) start = (int32_t)i; /* a document of the .idx starts here (the sample's first token too) */
      seg[b * T + i] = start;
    }
  }
  return SL_OK;
}

int sl_sampler_count_inside(sl_sampler *s, int64_t id, int64_t *count) {
  *count = 0;
  for (int i = 0; i < s->n; i++) {
    int64_t k = 0;
    int rc = sl_dataset_count_inside(s->src[i].ds, id, &k);
    if (rc) return rc;
    *count += k;
  }
  return SL_OK;
}
