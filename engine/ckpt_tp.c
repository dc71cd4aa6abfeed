/* engine/ckpt_tp.c — checkpoints under tensor parallelism (--tp T > 1).
 * A checkpoint always holds whole logical tensors in the whole (T = 1)
 * layout of each unit, so a run saved at one TP x DP (x PP) layout resumes
 * at any other. Saving: each unit's fp32 master, m and v are gathered over
 * DP (the runtime's gather of a view), then over TP, assembled into the
 * whole layout on world rank 0, which writes the checkpoint's one file;
 * under pipeline parallelism (owns set) each stage's first DP and TP rank
 * writes its stage's units into a file of its own. Loading: each rank reads
 * a unit's whole range and keeps its slices' view. The commit protocol and
 * the manifest are engine/checkpoint.c's. */
#include <string.h>

#include "base/base.h"
#include "engine/checkpoint.h"
#include "formats/ckpt_io.h"

int sl_ckpt_is_tp(const sl_ckpt_state *st) { return st->tp && sl_comm_size(st->tp) > 1; }

static int64_t max_whole(const sl_model *m) {
  int64_t n = 0;
  for (int u = 0; u < m->nunits; u++)
    if (sl_model_unit_whole_numel(m, u) > n) n = sl_model_unit_whole_numel(m, u);
  return n;
}

int sl_ckpt_tp_write(const sl_ckpt_state *st, sl_ckio_writer *wr, const char *tmp) {
  const sl_model *m = st->m;
  int rank = sl_comm_rank(st->world), T = m->tp_size, rc = SL_OK;
  int rank0 = st->owns ? st->stage_writer : rank == 0; /* this rank writes (a stage's units under PP) */
  int64_t maxn = sl_model_max_unit_numel(m), maxw = max_whole(m);
  float *flats = sl_alloc((size_t)(T * maxn) * 4, "checkpoint gather");
  float *whole = rank0 ? sl_alloc((size_t)(3 * maxw) * 4, "checkpoint whole unit") : NULL;
  if (!flats || (rank0 && !whole)) rc = SL_ENOMEM;
  if (rank0 && !rc) rc = sl_ckio_writer_open(wr, tmp, rank);
  float **const fields[3] = {st->master, st->mom, st->var};
  for (int u = 0; u < m->nunits && flats; u++) {
    int64_t n = m->units[u].numel, nw = sl_model_unit_whole_numel(m, u);
    if (st->owns && !st->owns[u]) continue; /* another stage's (every rank of this stage skips it) */
    for (int k = 0; k < 3; k++) {           /* every rank takes part in both gathers, in the same order */
      int crc = sl_fsdp_gather_view(st->f, u, fields[k][u], flats + m->tp_rank * n);
      if (!crc && sl_comm_allgather_sync(st->tp, flats + m->tp_rank * n, flats, n, SL_F32) != SL_COMM_OK)
        crc = sl_fail(SL_ECOMM, "checkpoint: gathering unit %d over the tensor-parallel group: %s", u,
                      sl_comm_last_error());
      if (crc) {
        if (!rc) rc = crc;
        goto done; /* a failed collective: the ranks can no longer pair */
      }
      if (rank0 && !rc) rc = sl_model_unit_to_whole(m, u, flats, whole + k * nw);
    }
    if (rank0 && !rc) rc = sl_ckio_writer_add(wr, u, 0, nw, whole, whole + nw, whole + 2 * nw);
  }
  if (rank0 && !rc) rc = sl_ckio_writer_close(wr);
done:
  sl_free(flats);
  sl_free(whole);
  return rc;
}

int sl_ckpt_tp_read(const char *dir, const sl_ckio_manifest *man, const sl_ckpt_state *st, int u, int k, float *dst) {
  const sl_model *m = st->m;
  sl_fsdp_view_t v = sl_fsdp_view(st->f, u);
  int64_t nw = sl_model_unit_whole_numel(m, u);
  float *whole = sl_alloc((size_t)nw * 4, "checkpoint whole unit");
  float *flat = sl_alloc((size_t)m->units[u].numel * 4, "checkpoint unit");
  int rc = whole && flat ? sl_ckio_read_range(dir, man, u, k, 0, nw, whole) : SL_ENOMEM;
  if (!rc) {
    sl_model_unit_from_whole(m, u, whole, flat);
    memset(dst, 0, (size_t)v.count * 4);
    if (v.valid > 0) memcpy(dst, flat + v.offset, (size_t)v.valid * 4);
  }
  sl_free(whole);
  sl_free(flat);
  return rc;
}
