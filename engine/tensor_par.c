/* engine/tensor_par.c — what tensor parallelism means to the engine
 * (engine/tensor_par.h): the --tp refusals, the loss's communicator and the
 * model's hooks; the counted parts of the gradient norm and the TP sum; the
 * gather of the T ranks' slices for --save; checkpoints in the whole
 * layout.
 *
 * Checkpoints: each unit's fp32 master, m and v are gathered over DP (the
 * runtime's gather of a view), then over TP, assembled into the whole
 * layout on world rank 0, which writes the checkpoint's one file; under
 * pipeline parallelism (owns set) each stage's first DP and TP rank writes
 * its stage's units into a file of its own. Loading: each rank reads a
 * unit's whole range and keeps its slices' view. The commit protocol and
 * the manifest are engine/checkpoint.c's. */
#include "engine/tensor_par.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/expert_par.h"
#include "models/tp.h"
#include "shard/tp.h"

/* ---- the run's TP ---------------------------------------------------------- */
int sl_tpar_check(int T, int wsize) {
  if (T == 1) return SL_OK;
  if (wsize % T) {
    char ok[256];
    size_t n = 0;
    for (int d = 1; d <= wsize && n + 16 < sizeof ok; d++)
      if (wsize % d == 0) n += (size_t)snprintf(ok + n, sizeof ok - n, "%s%d", n ? ", " : "", d);
    return sl_fail(SL_EINPUT, "--tp %d does not divide the number of ranks %d (valid --tp values: %s)", T, wsize, ok);
  }
  return SL_OK;
}

int sl_tpar_init(sl_tpar *tp, const sl_par_mesh *mesh, int T, int P, const sl_ops *ops, sl_kctx *k) {
  memset(tp, 0, sizeof *tp);
  tp->T = T > 1 ? T : 1;
  tp->comm = mesh->axis[SL_AXIS_TP].comm;
  tp->loss = tp->T > 1 ? mesh->group[SL_GROUP_DP].comm : mesh->world; /* at P = 1 the DP axis is one TP coordinate */
  int rc = tp->T > 1 && ops->is_device() ? sl_tp_devgroup_init(&tp->dg, tp->comm, ops, k) : SL_OK;
  if (rc || tp->T == 1 || P <= 1) return rc;
  /* TP x PP: the ranks of this TP coordinate, all DP and PP coordinates, in world rank order */
  if (sl_comm_split(mesh->world, mesh->axis[SL_AXIS_TP].coord, sl_comm_rank(mesh->world), &tp->own) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "splitting the loss communicator (one TP coordinate): %s", sl_comm_last_error());
  tp->loss = tp->own;
  return SL_OK;
}

void sl_tpar_free(sl_tpar *tp) {
  sl_tp_devgroup_free(&tp->dg);
  sl_comm_destroy(tp->own);
  memset(tp, 0, sizeof *tp);
}

sl_tp_group sl_tpar_hooks(sl_tpar *tp) {
  if (tp->T == 1) return sl_tp_single();
  return tp->dg.dev ? sl_tp_group_over_device(&tp->dg) : sl_tp_group_over(tp->comm);
}

void sl_tpar_stats(const sl_tpar *tp, sl_comm_stats *out) {
  sl_comm_get_stats(tp->comm, out);
  if (!tp->dg.dev) return;
  sl_comm_stats d;
  sl_comm_get_stats(tp->dg.dev, &d);
  for (int k = 0; k < SL_COLL_NKINDS; k++) {
    out->calls[k] += d.calls[k];
    out->bytes[k] += d.bytes[k];
  }
  out->wait_ns += d.wait_ns;
  out->stream_waits += d.stream_waits;
}

/* ---- the gradient norm ------------------------------------------------------ */
/* An sl_fsdp_counted_fn over a model (ctx: const sl_model *): the i-th
 * tensor of unit u this TP rank counts, as [lo, hi) of the unit's flat. */
static int counted(void *model, int u, int i, int64_t *lo, int64_t *hi) {
  const sl_model *m = model;
  const sl_unit_spec *us = &m->units[u];
  for (int k = 0; k < us->ntensors; k++) {
    const sl_tensor_spec *ts = &us->t[k];
    if (m->tp_rank % ts->tp_replicas) continue; /* held by several TP ranks: counted on the first */
    int shared = 0;
    for (int s = 0; s < ts->tp_stack && ts->tp_stack > 1; s++) shared |= ts->tp_part_rep[s] > 1;
    if (shared) { /* stacked parts, some held by several ranks (sl_unit_add_parts' reps): part by part */
      int64_t inner = ts->full[1] * ts->full[2], lo0 = ts->offset;
      for (int s = 0; s < ts->tp_stack; s++) {
        int64_t n = ts->tp_part[s] / (ts->tp_size / ts->tp_part_rep[s]) * inner;
        if (m->tp_rank % ts->tp_part_rep[s] == 0 && i-- == 0) {
          *lo = lo0;
          *hi = lo0 + n;
          return 1;
        }
        lo0 += n;
      }
      continue;
    }
    if (i-- == 0) {
      *lo = ts->offset;
      *hi = ts->offset + ts->numel;
      return 1;
    }
  }
  return 0;
}

void sl_tpar_queue_sumsq(sl_fsdp *f, const sl_model *m, sl_comm *tp, int slot0) {
  if (!tp || sl_comm_size(tp) <= 1) sl_fsdp_queue_sumsq(f, NULL, NULL, slot0, 1);
  else sl_fsdp_queue_sumsq(f, counted, (void *)m, slot0, 0);
}

int sl_tpar_grad_sumsq_of(sl_fsdp *f, sl_comm *tp, const double *slots, double *out) {
  if (!tp || sl_comm_size(tp) <= 1) return sl_fsdp_group_sums(f, slots, out);
  double mine = 0.0;
  int rc = sl_fsdp_shard_sum(f, slots[0], &mine);
  return rc ? rc : sl_tpar_sum(tp, mine, out);
}

void sl_tpar_queue_unit_sumsq(sl_fsdp *f, const sl_model *m, int slot0) {
  sl_fsdp_queue_sumsq(f, m->tp_size > 1 ? counted : NULL, (void *)m, slot0, 1);
}

int sl_tpar_sum(sl_comm *tp, double mine, double *out) {
  int T = tp ? sl_comm_size(tp) : 1;
  if (T <= 1) {
    *out = mine;
    return SL_OK;
  }
  double *all = calloc((size_t)T, sizeof(double));
  if (!all) return sl_fail(SL_ENOMEM, "out of memory");
  int rc = SL_OK;
  if (sl_comm_allgather_sync(tp, &mine, all, 1, SL_F64) != SL_COMM_OK) {
    rc = sl_fail(SL_ECOMM, "tensor parallel gradient norm: %s", sl_comm_last_error());
  } else {
    double s = 0.0;
    for (int r = 0; r < T; r++) s += all[r]; /* rank order: the same double on every rank */
    *out = s;
  }
  free(all);
  return rc;
}

/* ---- saving ----------------------------------------------------------------- */
int sl_tpar_gather_unit(const sl_tpar *tp, const sl_model *m, int u, float *flat) {
  if (tp->T == 1) return SL_OK;
  int64_t n = m->units[u].numel;
  if (sl_comm_allgather_sync(tp->comm, flat + m->tp_rank * n, flat, n, SL_F32) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "gathering unit %d over the tensor-parallel group: %s", u, sl_comm_last_error());
  return SL_OK;
}

/* ---- checkpoints ------------------------------------------------------------ */
int sl_tpar_ckpt_on(const sl_ckpt_state *st) { return st->tp && sl_comm_size(st->tp) > 1; }

static int64_t max_whole(const sl_model *m) {
  int64_t n = 0;
  for (int u = 0; u < m->nunits; u++)
    if (sl_model_unit_whole_numel(m, u) > n) n = sl_model_unit_whole_numel(m, u);
  return n;
}

/* sl_fsdp_gather_view of a host-staged view (the trainer's ck_stage): on a
 * device backend the gather reads backend memory, so the view goes up to a
 * temporary device buffer first. */
static int gather_staged(const sl_ckpt_state *st, int u, const float *view, float *full) {
  const sl_model *m = st->m;
  if (!m->ops->is_device()) return sl_fsdp_gather_view(st->f, u, view, full);
  size_t bytes = (size_t)sl_fsdp_view(st->f, u).count * 4;
  float *dv = m->ops->alloc(m->k, bytes);
  if (!dv) return SL_ENOMEM;
  m->ops->upload(m->k, dv, view, bytes);
  int rc = sl_fsdp_gather_view(st->f, u, dv, full);
  m->ops->free(m->k, dv);
  return rc;
}

int sl_tpar_ckpt_write(const sl_ckpt_state *st, sl_ckio_writer *wr, const char *tmp) {
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
      int crc = gather_staged(st, u, fields[k][u], flats + m->tp_rank * n + m->units[u].hold_lo);
      if (!crc) crc = sl_epar_gather_part(st->ep, &m->units[u], flats + m->tp_rank * n); /* EP-split experts */
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

int sl_tpar_ckpt_read(const char *dir, const sl_ckio_manifest *man, const sl_ckpt_state *st, int u, int k, float *dst) {
  const sl_model *m = st->m;
  sl_fsdp_view_t v = sl_fsdp_view(st->f, u);
  int64_t nw = sl_model_unit_whole_numel(m, u);
  float *whole = sl_alloc((size_t)nw * 4, "checkpoint whole unit");
  float *flat = sl_alloc((size_t)m->units[u].numel * 4, "checkpoint unit");
  int rc = whole && flat ? sl_ckio_read_range(dir, man, u, k, 0, nw, whole) : SL_ENOMEM;
  if (!rc) {
    sl_model_unit_from_whole(m, u, whole, flat);
    memset(dst, 0, (size_t)v.count * 4);
    if (v.valid > 0) memcpy(dst, flat + m->units[u].hold_lo + v.offset, (size_t)v.valid * 4); /* EP: this rank's part */
  }
  sl_free(whole);
  sl_free(flat);
  return rc;
}
