/* engine/dump.c — `shardlm dump`: one forward + backward of the first
 * micro-batch written as a safetensors file (logits, loss, every gradient),
 * the engine side of the PyTorch reference tests. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/precheck.h"
#include "engine/trainer.h"
#include "engine/trainer_internal.h"
#include "formats/safetensors.h"

typedef struct {
  const float *next; /* tensors back to back, in write order */
} dump_src;

static int dump_fill(void *ctx, int64_t index, const sl_st_wtensor *wt, float *dst) {
  dump_src *s = ctx;
  int64_t n = 1;
  for (int d = 0; d < wt->ndim; d++) n *= wt->shape[d];
  memcpy(dst, s->next, (size_t)n * 4);
  s->next += n;
  (void)index;
  return SL_OK;
}

/* The schedule's hook: the logits (backend memory) after the head's forward,
 * its parameters still gathered. */
static int head_logits(void *out, sl_model *m, int k, int u) {
  (void)k;
  return u == sl_model_head_unit(m) ? m->vt->logits(m, out) : SL_OK;
}

int sl_train_dump(const sl_train_cfg *cfg, sl_comm *world, const char *out_path) {
  trainer t;
  sl_train_cfg c2 = *cfg;
  snprintf(c2.data_order, sizeof c2.data_order, "sequential");
  c2.grad_accum = 1;
  int rc = sl_trainer_setup(&t, &c2, world, 1);
  float *logits = NULL, *big = NULL;
  sl_st_wtensor *ws = NULL;
  if (!rc) rc = sl_precheck_init_done(&t.cfg, t.init_from, 0);
  if (rc) goto done;
  if (t.wsize != 1) {
    rc = sl_fail(SL_EINPUT, "dump runs on one rank");
    goto done;
  }
  int64_t N = c2.micro_batch * c2.seq_len, V = t.mcfg.vocab_size;
  logits = sl_alloc((size_t)(N * V) * 4, "logits");
  if (!logits) {
    rc = SL_ENOMEM;
    goto done;
  }
  /* G = B for a single rank and grad_accum 1: the loss scale is 1/(counted targets of the B samples) */
  double loss_sum = 0;
  if (t.dev) { /* logits are computed in backend memory, then brought to the host */
    float *dl = t.ops->alloc(t.k, (size_t)(N * V) * 4);
    if (!dl) {
      rc = SL_ENOMEM;
      goto done;
    }
    rc = sl_trainer_fwd_bwd(&t, 1, head_logits, dl, &loss_sum);
    t.ops->download(t.k, logits, dl, (size_t)(N * V) * 4);
    t.ops->free(t.k, dl);
    if (rc) goto done;
  } else if ((rc = sl_trainer_fwd_bwd(&t, 1, head_logits, logits, &loss_sum))) {
    goto done;
  }
  float loss = t.data.count > 0 ? (float)(loss_sum / (double)t.data.count) : 0.0f;
  /* tensors: logits, loss, grad.<name> */
  int U = t.m->nunits, nt = 2;
  for (int u = 0; u < U; u++) nt += t.m->units[u].ntensors;
  ws = calloc((size_t)nt, sizeof *ws);
  char **names = calloc((size_t)nt, sizeof(char *));
  int64_t total = sl_model_num_params(t.m);
  big = sl_alloc((size_t)(total + 1) * 4, "gradients");
  if (!ws || !names || !big) {
    rc = SL_ENOMEM;
    free(names);
    goto done;
  }
  ws[0] = (sl_st_wtensor){.name = "logits", .ndim = 2, .shape = {N, V}, .dtype = SL_ST_F32};
  ws[1] = (sl_st_wtensor){.name = "loss", .ndim = 1, .shape = {1}, .dtype = SL_ST_F32};
  int n = 2;
  int64_t off = 0;
  float *ubuf = sl_alloc((size_t)(sl_model_max_unit_numel(t.m) + 1) * 4, "gradients");
  int *idx = calloc((size_t)t.m->cfg.moe_experts + 1, sizeof *idx);
  if (!ubuf || !idx) rc = SL_ENOMEM;
  for (int u = 0; u < U && !rc; u++) { /* in HF tensor order: a fused tensor's slabs one after the other */
    const sl_unit_spec *us = &t.m->units[u];
    sl_fsdp_view_t v = sl_fsdp_view(t.f, u);
    rc = sl_fsdp_gather_view(t.f, u, v.grads, ubuf);
    for (int i = 0; i < us->ntensors && !rc; i++) {
      const sl_tensor_spec *ts = &us->t[i];
      char hf[SL_TENSOR_NAME_MAX];
      if (ts->slabs && ts->slab) continue;
      if (ts->slabs && ts->slabs > t.m->cfg.moe_experts) rc = sl_fail(SL_EINTERNAL, "%s: too many slabs", ts->name);
      if (rc || (ts->slabs && (rc = sl_unit_slab_members(us, i, idx)))) break;
      names[n] = malloc(SL_TENSOR_NAME_MAX + 8);
      if (!names[n]) {
        rc = SL_ENOMEM;
        break;
      }
      snprintf(names[n], SL_TENSOR_NAME_MAX + 8, "grad.%s", sl_tensor_hf_name(ts, hf, sizeof hf));
      ws[n].name = names[n];
      ws[n].ndim = ts->ndim + (ts->slabs > 0);
      if (ts->slabs) ws[n].shape[0] = ts->slabs;
      for (int d = 0; d < ts->ndim; d++) ws[n].shape[d + (ts->slabs > 0)] = ts->shape[d];
      ws[n].dtype = SL_ST_F32;
      n++;
      for (int64_t j = 0; j < (ts->slabs ? ts->slabs : 1); j++) {
        const sl_tensor_spec *tj = ts->slabs ? &us->t[idx[j]] : ts;
        memcpy(big + off, ubuf + tj->offset, (size_t)tj->numel * 4);
        off += tj->numel;
      }
    }
  }
  sl_free(ubuf);
  free(idx);
  if (!rc) {
    /* one contiguous source: logits | loss | grads in tensor order */
    float *all = sl_alloc((size_t)(N * V + 1 + total) * 4, "dump");
    if (!all) rc = SL_ENOMEM;
    else {
      memcpy(all, logits, (size_t)(N * V) * 4);
      all[N * V] = loss;
      memcpy(all + N * V + 1, big, (size_t)total * 4);
      dump_src src = {all};
      rc = sl_st_write_file(out_path, ws, n, dump_fill, &src);
      sl_free(all);
    }
  }
  for (int i = 2; i < n; i++) free(names[i]);
  free(names);
done:
  free(ws);
  sl_free(logits);
  sl_free(big);
  sl_trainer_free(&t);
  return rc;
}
