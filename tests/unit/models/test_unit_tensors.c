/* tests/unit/models/test_unit_tensors.c — a unit's tensor list has no fixed
 * cap (issue 23: the old SL_UNIT_MAX_TENSORS was 16; a Mixtral block has
 * 31). A unit of 40 tensors built through the model files' API
 * (sl_unit_add, sl_unit_add_split, sl_unit_add_stacked) must keep every
 * row: names, shapes, offsets packed back to back, the flat size; the
 * deterministic init must put each tensor at its offset (the same values
 * as a unit holding only that tensor); at T = 2 the ranks' flats of 40
 * split tensors must assemble into the whole layout and cut back out of
 * it; sl_unit_free releases the list and a freed unit can be rebuilt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "models/model.h"
#include "tests/lib/check.h"

enum { N = 40 };

/* tensor i: a 1-, 2- or 3-dim tensor of a size that differs per i */
static int ndim_of(int i) { return 1 + i % 3; }
static int64_t d0_of(int i) { return 2 + i % 5; }
static int64_t d1_of(int i) { return ndim_of(i) > 1 ? 1 + i % 4 : 1; }
static int64_t d2_of(int i) { return ndim_of(i) > 2 ? 2 : 1; }
static void name_of(int i, char *buf, size_t cap) {
  snprintf(buf, cap, "model.layers.0.block_sparse_moe.experts.%d.w%d.weight", i / 3, 1 + i % 3);
}
static sl_init_kind init_of(int i) { return i % 4 == 0 ? SL_INIT_ONES : i % 7 == 0 ? SL_INIT_ZEROS : SL_INIT_NORMAL; }

/* A model of one unit at TP rank r of T (no architecture: specs only). */
static void model_of(sl_model *m, sl_unit_spec *u, int r, int T) {
  memset(m, 0, sizeof *m);
  m->tp_rank = r;
  m->tp_size = T;
  m->units = u;
  m->nunits = 1;
}

/* 40 tensors at T = 1, through every helper the models use */
static int build_whole(sl_model *m, sl_unit_spec *u) {
  int rc = SL_OK;
  char nm[SL_TENSOR_NAME_MAX];
  for (int i = 0; i < N && !rc; i++) {
    name_of(i, nm, sizeof nm);
    if (i % 3 == 0) /* sl_unit_add: any ndim */
      rc = sl_unit_add(u, nm, ndim_of(i), d0_of(i), d1_of(i), d2_of(i), ndim_of(i) > 1, init_of(i), 0.02f);
    else if (i % 3 == 1) /* a 2-dim tensor through sl_unit_add_split (whole at T = 1) */
      rc = sl_unit_add_split(m, u, nm, 2, d0_of(i), d1_of(i), 1, init_of(i), 0.02f, SL_SPLIT_COL, 1);
    else /* a 3-dim tensor through sl_unit_add_stacked (whole at T = 1) */
      rc = sl_unit_add_stacked(m, u, nm, 3, d0_of(i), d1_of(i), d2_of(i), 1, init_of(i), 0.02f, 1);
  }
  return rc;
}

int main(void) {
  /* ---- 40 tensors: every row kept, packed back to back ---- */
  sl_model m;
  sl_unit_spec *units = calloc(2, sizeof *units); /* a neighbour unit after it: an overflow would land there */
  if (!units) return 1;
  model_of(&m, units, 0, 1);
  sl_unit_spec *u = &units[0];
  snprintf(u->kind, sizeof u->kind, "moe_block");
  int rc = build_whole(&m, u);
  CHECK(rc == SL_OK, "adding %d tensors: rc %d", N, rc);
  CHECK(u->ntensors == N, "%d tensors kept, expected %d (the old cap was 16)", u->ntensors, N);
  CHECK(u->cap >= u->ntensors && u->t != NULL, "list capacity %d for %d tensors", u->cap, u->ntensors);
  CHECK(units[1].ntensors == 0 && units[1].numel == 0 && units[1].t == NULL, "the neighbour unit was written");
  int64_t at = 0;
  int rows_ok = 1, shapes_ok = 1, names_ok = 1;
  char nm[SL_TENSOR_NAME_MAX];
  for (int i = 0; i < u->ntensors && i < N; i++) {
    const sl_tensor_spec *t = &u->t[i];
    int nd = i % 3 == 0 ? ndim_of(i) : i % 3 == 1 ? 2 : 3;
    int64_t s1 = nd > 1 ? d1_of(i) : 1, s2 = nd > 2 ? d2_of(i) : 1;
    name_of(i, nm, sizeof nm);
    if (strcmp(t->name, nm)) {
      names_ok = 0;
      printf("tensor %d is named %s, expected %s\n", i, t->name, nm);
    }
    if (t->ndim != nd || t->shape[0] != d0_of(i) || t->shape[1] != s1 || t->shape[2] != s2 ||
        t->full[0] != t->shape[0] || t->full[1] != t->shape[1] || t->full[2] != t->shape[2] || t->split_dim != -1 ||
        t->tp_replicas != 1 || t->tp_stack != 1 || t->init != init_of(i))
      shapes_ok = 0;
    if (t->offset != at || t->numel != t->shape[0] * t->shape[1] * t->shape[2]) {
      rows_ok = 0;
      printf("tensor %d: offset %lld numel %lld, expected offset %lld\n", i, (long long)t->offset, (long long)t->numel,
             (long long)at);
    }
    at += t->numel;
  }
  CHECK(names_ok, "every tensor keeps its name");
  CHECK(shapes_ok, "every tensor keeps its shape, full shape, init and TP fields");
  CHECK(rows_ok, "offsets are the running sum of the sizes (packed back to back)");
  CHECK(u->numel == at && at > 0, "flat size %lld, tensors sum to %lld", (long long)u->numel, (long long)at);
  CHECK(u->ntensors > 16 && u->t[16].offset == u->t[15].offset + u->t[15].numel &&
            !strcmp(u->t[N - 1].name, "model.layers.0.block_sparse_moe.experts.13.w1.weight"),
        "tensors past the old cap of 16: the 17th follows the 16th, the 40th is named as added");

  /* ---- the flat layout: the seeded init places each tensor at its offset ---- */
  float *flat = calloc((size_t)u->numel, 4);
  CHECK(flat && sl_model_unit_load(&m, 0, NULL, 11, flat) == SL_OK, "init of the 40-tensor unit: %s", sl_errmsg());
  int placed = 1;
  for (int i = 0; flat && i < u->ntensors && placed; i++) {
    const sl_tensor_spec *t = &u->t[i];
    sl_unit_spec one = {0}; /* a unit holding only tensor i: the same name, shape and init */
    sl_model m1;
    model_of(&m1, &one, 0, 1);
    if (sl_unit_add(&one, t->name, t->ndim, t->shape[0], t->shape[1], t->shape[2], t->decay, t->init, t->std)) {
      placed = 0;
      break;
    }
    float *alone = calloc((size_t)one.numel, 4);
    placed = alone && one.numel == t->numel && sl_model_unit_load(&m1, 0, NULL, 11, alone) == SL_OK &&
             !memcmp(alone, flat + t->offset, (size_t)t->numel * 4);
    if (!placed) printf("tensor %d (%s) is not at offset %lld of the flat\n", i, t->name, (long long)t->offset);
    free(alone);
    sl_unit_free(&one);
  }
  CHECK(placed, "each tensor's init sits at its offset in the flat buffer");
  free(flat);

  /* ---- free and rebuild ---- */
  sl_unit_free(u);
  CHECK(u->ntensors == 0 && u->cap == 0 && u->t == NULL && u->numel == 0, "sl_unit_free empties the unit");
  rc = build_whole(&m, u);
  CHECK(rc == SL_OK && u->ntensors == N && u->numel == at, "a freed unit rebuilds: %d tensors, %lld elements",
        u->ntensors, (long long)u->numel);
  sl_unit_free(u);

  /* ---- T = 2: 40 split tensors, the flats assemble into the whole layout ---- */
  const int T = 2;
  sl_unit_spec ur[2];
  memset(ur, 0, sizeof ur);
  sl_model mr[2];
  int64_t whole_n = 0, n = 0;
  for (int r = 0; r < T; r++) {
    model_of(&mr[r], &ur[r], r, T);
    rc = SL_OK;
    for (int i = 0; i < N && !rc; i++) {
      name_of(i, nm, sizeof nm);
      int64_t a = 2 * (1 + i % 3), b = 2 * (1 + i % 2); /* even: both dims divide over T */
      if (i % 3 == 0) rc = sl_unit_add_split(&mr[r], &ur[r], nm, 2, a, b, 1, SL_INIT_NORMAL, 0.02f, SL_SPLIT_COL, T);
      else if (i % 3 == 1)
        rc = sl_unit_add_split(&mr[r], &ur[r], nm, 2, a, b, 1, SL_INIT_NORMAL, 0.02f, SL_SPLIT_ROW, T);
      else rc = sl_unit_add_stacked(&mr[r], &ur[r], nm, 2, 4 * a, b, 0, 1, SL_INIT_NORMAL, 0.02f, 2);
      if (r == 0) whole_n += (i % 3 == 2 ? 4 * a : a) * b;
    }
    CHECK(rc == SL_OK && ur[r].ntensors == N, "rank %d: %d split tensors", r, ur[r].ntensors);
    CHECK(r == 0 || ur[r].numel == ur[0].numel, "rank %d: %lld elements, rank 0 %lld", r, (long long)ur[r].numel,
          (long long)ur[0].numel);
  }
  n = ur[0].numel;
  CHECK(2 * n == whole_n && sl_model_unit_whole_numel(&mr[0], 0) == whole_n,
        "T = 2: each rank holds half of the %lld whole elements (%lld)", (long long)whole_n, (long long)n);
  int tp_ok = 1;
  for (int r = 0; r < T; r++) {
    int64_t off = 0;
    for (int i = 0; i < ur[r].ntensors; i++) {
      const sl_tensor_spec *t = &ur[r].t[i];
      int dim = i % 3 == 1 ? 1 : 0;
      tp_ok &= t->offset == off && t->split_dim == dim && t->shape[dim] * T == t->full[dim] &&
               t->tp_off == (i % 3 == 2 ? r * (t->full[0] / (2 * T)) : r * t->shape[dim]) &&
               t->tp_stack == (i % 3 == 2 ? 2 : 1);
      off += t->numel;
    }
  }
  CHECK(tp_ok, "T = 2: every slice's offset, split dim, local shape and tp_off");
  float *whole = calloc((size_t)whole_n, 4), *flats = calloc((size_t)(T * n), 4), *back = calloc((size_t)whole_n, 4);
  if (whole && flats && back) {
    for (int64_t i = 0; i < whole_n; i++) whole[i] = (float)(i + 1);
    for (int r = 0; r < T; r++) sl_model_unit_from_whole(&mr[r], 0, whole, flats + r * n);
    CHECK(sl_model_unit_to_whole(&mr[0], 0, flats, back) == SL_OK && !memcmp(back, whole, (size_t)whole_n * 4),
          "T = 2: the ranks' flats of 40 tensors assemble into the whole layout");
  } else {
    CHECK(0, "out of memory");
  }
  free(whole);
  free(flats);
  free(back);
  for (int r = 0; r < T; r++) sl_unit_free(&ur[r]);
  free(units);
  return CHECK_SUMMARY();
}
