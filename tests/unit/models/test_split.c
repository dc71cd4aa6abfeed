/* tests/unit/models/test_split.c — split tensors (models/model.h, issue 12): for T = 1,
 * 2, 4 and every TP rank, the slices sl_unit_add_split describes (column,
 * row, a KV-style slice shared by T/2 ranks, a padded vocabulary of 10 rows,
 * a replicated vector, Mamba's in_proj with its x | z halves stacked in dim 0
 * and a 3-dim conv weight: sl_unit_add_stacked), read from a safetensors file (sl_st_read_f32_box
 * through sl_model_unit_load) and cut from the seeded init, must equal the
 * slices of the whole tensors; the T ranks' flats must assemble back into
 * the whole layout (sl_model_unit_to_whole), padding rows stay zero, and a
 * replicated copy that differs is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "formats/safetensors.h"
#include "models/model.h"

static int R, npass, nfail; /* one process: rank 0 in the messages */
#include "tests/lib/rank_check.h"

enum { NT = 7 };
static const char *NAMES[NT] = {"vocab", "col", "row", "kv", "norm", "stacked", "conv"};

/* The unit of rank r of T: whole shapes vocab (10, 3), col (8, 3), row (3, 8), kv (4, 3) in 2 parts, norm (3),
 * stacked (16, 3) = two stacked (8, 3) halves, conv (8, 1, 2). */
static void build(sl_model *m, sl_unit_spec *us, int r, int T) {
  memset(m, 0, sizeof *m);
  sl_unit_free(us); /* a rebuild: the previous tensor list */
  memset(us, 0, sizeof *us);
  m->tp_rank = r;
  m->tp_size = T;
  m->units = us;
  m->nunits = 1;
  sl_unit_add_split(m, us, NAMES[0], 2, 10, 3, 1, SL_INIT_NORMAL, 0.02f, SL_SPLIT_VOCAB, T);
  sl_unit_add_split(m, us, NAMES[1], 2, 8, 3, 1, SL_INIT_NORMAL, 0.02f, SL_SPLIT_COL, T);
  sl_unit_add_split(m, us, NAMES[2], 2, 3, 8, 1, SL_INIT_NORMAL, 0.02f, SL_SPLIT_ROW, T);
  sl_unit_add_split(m, us, NAMES[3], 2, 4, 3, 1, SL_INIT_NORMAL, 0.02f, SL_SPLIT_COL, T < 2 ? T : 2);
  sl_unit_add_split(m, us, NAMES[4], 1, 3, 0, 0, SL_INIT_ONES, 0.02f, SL_SPLIT_NONE, 1);
  us->t[4].tp_replicas = T; /* what sl_model_create_full sets for a whole tensor */
  sl_unit_add_stacked(m, us, NAMES[5], 2, 16, 3, 0, 1, SL_INIT_NORMAL, 0.02f, 2);
  sl_unit_add_stacked(m, us, NAMES[6], 3, 8, 1, 2, 1, SL_INIT_NORMAL, 0.02f, 1);
}

static const float *g_whole; /* the whole unit: tensors back to back */
static int fill(void *ctx, int64_t index, const sl_st_wtensor *wt, float *dst) {
  const sl_unit_spec *u1 = ctx;
  (void)wt;
  memcpy(dst, g_whole + u1->t[index].offset, (size_t)u1->t[index].numel * 4);
  return SL_OK;
}

int main(void) {
  char dir[] = "/tmp/sl-split.XXXXXX";
  if (!mkdtemp(dir)) return 1;
  sl_model m1;
  sl_unit_spec u1 = {0};
  build(&m1, &u1, 0, 1);
  int64_t W = u1.numel;
  float *whole = calloc((size_t)W, 4), *seeded = calloc((size_t)W, 4), *back = calloc((size_t)W, 4);
  for (int64_t i = 0; i < W; i++) whole[i] = (float)(i + 1);
  g_whole = whole;
  sl_st_wtensor ws[NT];
  for (int i = 0; i < NT; i++)
    ws[i] = (sl_st_wtensor){.name = NAMES[i],
                            .ndim = u1.t[i].ndim,
                            .shape = {u1.t[i].shape[0], u1.t[i].shape[1], u1.t[i].shape[2]},
                            .dtype = SL_ST_F32};
  sl_st_set *set = NULL;
  CHECK(sl_st_write_dir(dir, ws, NT, fill, &u1, 0) == SL_OK && sl_st_open_dir(dir, &set) == SL_OK, "write/open: %s",
        sl_errmsg());
  CHECK(sl_model_unit_load(&m1, 0, NULL, 7, seeded) == SL_OK, "T = 1 init");
  for (int T = 1; T <= 4 && set; T *= 2) {
    sl_model m;
    sl_unit_spec us = {0};
    build(&m, &us, 0, T);
    int64_t n = us.numel;
    float *file = calloc((size_t)(T * n), 4), *init = calloc((size_t)(T * n), 4), *cut = calloc((size_t)n, 4);
    for (int r = 0; r < T; r++) {
      build(&m, &us, r, T);
      CHECK(us.numel == n, "T %d rank %d: %lld elements, rank 0 has %lld", T, r, (long long)us.numel, (long long)n);
      CHECK(us.t[0].shape[0] == (10 + T - 1) / T && us.t[0].tp_off == r * us.t[0].shape[0], "vocab slice");
      CHECK(us.t[2].shape[1] == 8 / T && us.t[2].split_dim == (T > 1 ? 1 : -1), "row slice");
      CHECK(us.t[3].tp_replicas == (T > 2 ? T / 2 : 1) &&
                us.t[3].tp_off == (r / us.t[3].tp_replicas) * us.t[3].shape[0],
            "kv slice of T %d rank %d: off %lld replicas %d", T, r, (long long)us.t[3].tp_off, us.t[3].tp_replicas);
      { /* stacked: rows [r*8/T, +8/T) of each half, x half then z half (local row i: half i / (8/T)) */
        const sl_tensor_spec *st = &us.t[5];
        int64_t P = 8 / T;
        int ok = st->shape[0] == 2 * P && st->tp_off == r * P && us.t[6].shape[0] == P;
        sl_model_unit_from_whole(&m, 0, whole, cut);
        for (int64_t i = 0; i < st->shape[0] && ok; i++)
          ok = !memcmp(cut + st->offset + i * 3, whole + u1.t[5].offset + ((i / P) * 8 + r * P + i % P) * 3, 12);
        CHECK(ok, "T %d rank %d: the stacked slice is not rows [r*8/T, +8/T) of both halves", T, r);
      }
      CHECK(sl_model_unit_load(&m, 0, set, 7, file + r * n) == SL_OK, "sliced read: %s", sl_errmsg());
      CHECK(sl_model_unit_load(&m, 0, NULL, 7, init + r * n) == SL_OK, "sliced init: %s", sl_errmsg());
      sl_model_unit_from_whole(&m, 0, whole, cut);
      CHECK(!memcmp(cut, file + r * n, (size_t)n * 4), "T %d rank %d: the file's slices differ from the whole's", T, r);
      int64_t pad0 = us.t[0].tp_off + us.t[0].shape[0] - 10; /* padding rows at the end of the vocab slice */
      int zero = 1;
      for (int64_t i = (pad0 > 0 ? us.t[0].shape[0] - pad0 : us.t[0].shape[0]) * 3; i < us.t[0].numel; i++)
        zero &= file[r * n + i] == 0.0f && cut[i] == 0.0f;
      CHECK(zero, "T %d rank %d: vocabulary padding rows are not zero", T, r);
    }
    CHECK(sl_model_unit_to_whole(&m, 0, file, back) == SL_OK && !memcmp(back, whole, (size_t)W * 4),
          "T %d: the ranks' file slices do not assemble into the whole tensors", T);
    CHECK(sl_model_unit_to_whole(&m, 0, init, back) == SL_OK && !memcmp(back, seeded, (size_t)W * 4),
          "T %d: the sliced init is not the slice of the whole init", T);
    if (T > 1) { /* a replicated copy that drifted */
      file[(T - 1) * n + us.t[4].offset] += 1.0f;
      CHECK(sl_model_unit_to_whole(&m, 0, file, back) == SL_EINTERNAL && strstr(sl_errmsg(), "norm"),
            "T %d: differing replicated copies must be refused naming the tensor (%s)", T, sl_errmsg());
    }
    free(file);
    free(init);
    free(cut);
    sl_unit_free(&us);
  }
  sl_st_close_set(set);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  free(whole);
  free(seeded);
  free(back);
  sl_unit_free(&u1);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
