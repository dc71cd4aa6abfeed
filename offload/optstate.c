/* offload/optstate.c — the optimizer-state handle: fp32 master, Adam m and v
 * of one rank's shard, in one of three tiers (none: ordinary host memory or
 * the backend's memory, cpu: pinned / first-touched host memory, nvme: a
 * store file + 3 tile buffers), all stepped by the same AdamW kernel (the
 * CPU one; a backend none state: the backend's, on its own memory).
 */
#include "offload/offload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "offload/offload_internal.h"

#define OPT_DEFAULT_BUDGET ((int64_t)3 * 48 * 1024 * 1024)

struct sl_optstate {
  sl_tier tier;
  int64_t n;
  char name[256];
  /* none / cpu tiers */
  float *master, *m, *v; /* (n) each */
  const sl_ops *ops;     /* none tier in backend memory (NULL: host memory) */
  sl_kctx *k;
  int64_t optim_bytes; /* counted in SL_ARENA_OPTIM */
  /* nvme tier */
  sl_nvme *store;
  int64_t tile_elems; /* elements per tile */
  int64_t tile_bytes; /* S: bytes of one tile in the file and in a buffer */
  int64_t ntiles;
  void *bufs[3]; /* (tile_bytes) each, 4096-aligned */
  int64_t host_bytes;
};

sl_tier sl_optstate_tier(const sl_optstate *s) { return s->tier; }
int64_t sl_optstate_n(const sl_optstate *s) { return s->n; }
int64_t sl_optstate_host_bytes(const sl_optstate *s) { return s ? s->host_bytes : 0; }

void sl_optstate_destroy(sl_optstate *s) {
  if (!s) return;
  if (s->tier == SL_TIER_NONE && s->ops) {
    sl_mem_sub(SL_ARENA_OPTIM, s->optim_bytes);
    s->ops->free(s->k, s->master);
    s->ops->free(s->k, s->m);
    s->ops->free(s->k, s->v);
  } else if (s->tier == SL_TIER_NONE) {
    sl_mem_sub(SL_ARENA_OPTIM, s->optim_bytes);
    sl_free(s->master);
  } else if (s->tier == SL_TIER_CPU) {
    sl_host_free(s->master);
    sl_host_free(s->m);
    sl_host_free(s->v);
  } else {
    if (s->store && sl_nvme_close(s->store, 1) != SL_OK)
      sl_log(SL_LOG_WARN, "optimizer state %s: %s", s->name, sl_errmsg());
    for (int b = 0; b < 3; b++) sl_host_free(s->bufs[b]);
  }
  free(s);
}

int64_t sl_optstate_nvme_tile(int64_t n, int64_t budget_bytes) {
  /* 3 buffers x 3 sections x 4 bytes per element, 4096-byte sections */
  int64_t tile = (budget_bytes / 9) / 4096 * 1024;
  if (tile <= 0) return 0;
  int64_t need = (n + 1023) / 1024 * 1024; /* no bigger than the state itself */
  return need > 0 && tile > need ? need : tile;
}

static int create_nvme(sl_optstate *s, const sl_optstate_cfg *c) {
  if (!c->nvme_dir || !*c->nvme_dir)
    return sl_fail(SL_EINPUT, "optimizer state %s: tier nvme needs a directory (--nvme-path)", s->name);
  int64_t budget = c->budget_bytes;
  int64_t tile = c->tile_elems;
  if (tile < 0 || budget < 0)
    return sl_fail(SL_EINPUT, "optimizer state %s: negative tile (%lld) or budget (%lld)", s->name, (long long)tile,
                   (long long)budget);
  if (tile == 0) {
    if (budget == 0) budget = OPT_DEFAULT_BUDGET;
    if ((tile = sl_optstate_nvme_tile(s->n, budget)) <= 0)
      return sl_fail(SL_EINPUT,
                     "optimizer state %s: host budget %lld bytes is below the "
                     "minimum of 3 tiles of 1024 elements (%lld bytes)",
                     s->name, (long long)budget, (long long)sl_offload_tile_bytes(1024) * 3);
  } else if (budget == 0) {
    budget = 3 * sl_offload_tile_bytes(tile);
  }
  if (3 * sl_offload_tile_bytes(tile) > budget)
    return sl_fail(SL_EINPUT,
                   "optimizer state %s: 3 tile buffers of %lld elements need %lld "
                   "bytes; the host budget is %lld",
                   s->name, (long long)tile, (long long)(3 * sl_offload_tile_bytes(tile)), (long long)budget);
  s->tile_elems = tile;
  s->tile_bytes = sl_offload_tile_bytes(tile);
  s->ntiles = (s->n + tile - 1) / tile;
  for (int b = 0; b < 3; b++) {
    s->bufs[b] = sl_host_alloc((size_t)s->tile_bytes, "nvme optimizer tile buffer");
    if (!s->bufs[b]) return SL_ENOMEM;
  }
  s->host_bytes = 3 * s->tile_bytes;
  int rc = sl_nvme_open(c->nvme_dir, s->name, s->ntiles * s->tile_bytes, c->block_bytes, c->qd, &s->store);
  if (rc) return sl_fail_ctx(rc, "optimizer state %s", s->name);
  return SL_OK;
}

int sl_optstate_create(const sl_optstate_cfg *c, sl_optstate **out) {
  *out = NULL;
  if (!c || c->n < 0) return sl_fail(SL_EINPUT, "optimizer state: missing config or n < 0");
  sl_optstate *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(SL_ENOMEM, "optimizer state: out of memory");
  s->tier = c->tier;
  s->n = c->n;
  snprintf(s->name, sizeof s->name, "%s", c->name && *c->name ? c->name : "optstate");
  int rc = SL_OK;
  size_t fb = (size_t)c->n * sizeof(float);
  switch (c->tier) {
  case SL_TIER_NONE:
    if (c->ops) { /* beside the parameters: the backend's memory (zeroed) */
      s->ops = c->ops;
      s->k = c->k;
      s->master = c->ops->alloc(c->k, fb);
      s->m = c->ops->alloc(c->k, fb);
      s->v = c->ops->alloc(c->k, fb);
      if (!s->master || !s->m || !s->v) {
        rc = SL_ENOMEM;
        break;
      }
      s->optim_bytes = (int64_t)(3 * fb);
      sl_mem_add(SL_ARENA_OPTIM, s->optim_bytes);
      break;
    }
    s->master = sl_alloc(3 * fb, s->name);
    if (!s->master) {
      rc = SL_ENOMEM;
      break;
    }
    s->m = s->master + c->n;
    s->v = s->m + c->n;
    s->host_bytes = s->optim_bytes = (int64_t)(3 * fb);
    sl_mem_add(SL_ARENA_OPTIM, s->optim_bytes);
    break;
  case SL_TIER_CPU:
    s->master = sl_host_alloc(fb, "optimizer master");
    s->m = sl_host_alloc(fb, "optimizer m");
    s->v = sl_host_alloc(fb, "optimizer v");
    if (!s->master || !s->m || !s->v) rc = SL_ENOMEM;
    s->host_bytes = (int64_t)(3 * fb);
    break;
  case SL_TIER_NVME: rc = create_nvme(s, c); break;
  default:
    rc = sl_fail(SL_EINPUT, "optimizer state %s: unknown tier %d; expected none, cpu or nvme", s->name, (int)c->tier);
  }
  if (rc) {
    sl_optstate_destroy(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

int sl_optstate_init_master(sl_optstate *s, const float *params) { return sl_optstate_init(s, params, s->n); }

int sl_optstate_init(sl_optstate *s, const float *params, int64_t nvalid) {
  if (nvalid < 0 || nvalid > s->n)
    return sl_fail(SL_EINPUT, "optimizer state %s: %lld initial values for %lld elements", s->name, (long long)nvalid,
                   (long long)s->n);
  if (nvalid > 0 && !params) return sl_fail(SL_EINPUT, "optimizer state %s: NULL params", s->name);
  size_t fb = (size_t)s->n * sizeof(float), vb = (size_t)nvalid * sizeof(float);
  if (s->ops) {
    if (vb) s->ops->upload(s->k, s->master, params, vb);
    s->ops->zero(s->k, s->master + nvalid, fb - vb);
    s->ops->zero(s->k, s->m, fb);
    s->ops->zero(s->k, s->v, fb);
    return SL_OK;
  }
  if (s->tier != SL_TIER_NVME) {
    if (vb) memcpy(s->master, params, vb);
    memset(s->master + nvalid, 0, fb - vb);
    memset(s->m, 0, fb);
    memset(s->v, 0, fb);
    return SL_OK;
  }
  /* tile by tile through the three buffers, writes in flight meanwhile */
  const int64_t P = s->tile_bytes / 3;
  uint64_t wr[3] = {0, 0, 0};
  int rc = SL_OK;
  for (int64_t t = 0; t < s->ntiles && rc == SL_OK; t++) {
    int b = (int)(t % 3);
    if (wr[b]) {
      rc = sl_nvme_wait(s->store, wr[b]);
      wr[b] = 0;
      if (rc) break;
    }
    int64_t base = t * s->tile_elems;
    int64_t cnt = nvalid - base < s->tile_elems ? nvalid - base : s->tile_elems;
    char *buf = s->bufs[b];
    memset(buf, 0, (size_t)s->tile_bytes);
    if (cnt > 0) memcpy(buf, params + base, (size_t)cnt * sizeof(float));
    rc = sl_nvme_write_async(s->store, t * s->tile_bytes, buf, 3 * P, &wr[b]);
  }
  for (int b = 0; b < 3; b++)
    if (wr[b]) {
      int e = sl_nvme_wait(s->store, wr[b]);
      if (e && rc == SL_OK) rc = e;
    }
  return rc ? sl_fail_ctx(rc, "optimizer state %s: init", s->name) : SL_OK;
}

/* A backend NONE state: the backend's AdamW per weight-decay range, on
 * gradients in its memory. */
static int backend_step(sl_optstate *s, const float *g, const sl_adam_range *ranges, int nranges,
                        const sl_adam_hyper *h, float *params_out, uint16_t *params_bf16_out) {
  if (params_bf16_out)
    return sl_fail(SL_EINPUT, "optimizer state %s: no bf16 copy from a state in backend memory", s->name);
  sl_adam_range all = {0, s->n, h->weight_decay};
  if (!ranges) {
    ranges = &all;
    nranges = 1;
  }
  for (int i = 0; i < nranges; i++) {
    const sl_adam_range *r = &ranges[i];
    if (r->count == 0) continue;
    s->ops->adamw(s->k, s->master + r->offset, s->m + r->offset, s->v + r->offset, g + r->offset, r->count, h->lr,
                  h->beta1, h->beta2, h->eps, r->wd, h->step, h->grad_scale);
  }
  if (params_out && params_out != s->master) s->ops->copy(s->k, params_out, s->master, (size_t)s->n * sizeof(float));
  return SL_OK;
}

int sl_optstate_step(sl_optstate *s, const float *grads, const sl_adam_range *ranges, int nranges,
                     const sl_adam_hyper *h, float *params_out, uint16_t *params_bf16_out) {
  if (!h || (s->n > 0 && !grads))
    return sl_fail(SL_EINPUT, "optimizer state %s: NULL grads or hyper-parameters", s->name);
  if (h->step < 1)
    return sl_fail(SL_EINPUT, "optimizer state %s: step %lld; expected >= 1", s->name, (long long)h->step);
  int rc = sl_adam_ranges_check(ranges, nranges, s->n);
  if (rc) return sl_fail_ctx(rc, "optimizer state %s", s->name);
  if (s->ops) return backend_step(s, grads, ranges, nranges, h, params_out, params_bf16_out);
  if (s->tier == SL_TIER_NVME)
    return sl_offload_adam_nvme_step(s->store, s->n, s->tile_elems, s->bufs, grads, ranges, nranges, h, params_out,
                                     params_bf16_out);
  sl_offload_adam_segment(s->master, s->m, s->v, grads, 0, s->n, ranges, nranges, h, params_out, params_bf16_out);
  return SL_OK;
}

/* NVMe field access, section by section through bufs[0] (not during a step). */
static int nvme_field_io(sl_optstate *s, sl_optfield f, int64_t offset, int64_t count, int write, float *dst,
                         const float *src) {
  const int64_t P = s->tile_bytes / 3;
  char *buf = s->bufs[0];
  int64_t at = offset;
  while (at < offset + count) {
    int64_t t = at / s->tile_elems;
    int64_t in = at - t * s->tile_elems;
    int64_t len = s->tile_elems - in;
    if (len > offset + count - at) len = offset + count - at;
    int64_t foff = t * s->tile_bytes + (int64_t)f * P;
    uint64_t tk;
    int rc = sl_nvme_read_async(s->store, foff, buf, P, &tk);
    if (!rc) rc = sl_nvme_wait(s->store, tk);
    if (rc) return rc;
    float *sec = (float *)buf;
    if (!write) {
      memcpy(dst + (at - offset), sec + in, (size_t)len * sizeof(float));
    } else {
      memcpy(sec + in, src + (at - offset), (size_t)len * sizeof(float));
      rc = sl_nvme_write_async(s->store, foff, buf, P, &tk);
      if (!rc) rc = sl_nvme_wait(s->store, tk);
      if (rc) return rc;
    }
    at += len;
  }
  return SL_OK;
}

static int field_io(sl_optstate *s, sl_optfield f, int64_t offset, int64_t count, int write, float *dst,
                    const float *src) {
  static const char *names[3] = {"master", "m", "v"};
  if ((int)f < 0 || (int)f > 2) return sl_fail(SL_EINPUT, "optimizer state %s: unknown field %d", s->name, (int)f);
  if (offset < 0 || count < 0 || offset + count > s->n)
    return sl_fail(SL_EINPUT, "optimizer state %s: %s [%lld, +%lld) is outside [0, %lld)", s->name, names[f],
                   (long long)offset, (long long)count, (long long)s->n);
  if (count == 0) return SL_OK;
  if (s->tier == SL_TIER_NVME) {
    int rc = nvme_field_io(s, f, offset, count, write, dst, src);
    return rc ? sl_fail_ctx(rc, "optimizer state %s: %s %s", s->name, write ? "writing" : "reading", names[f]) : SL_OK;
  }
  float *a = sl_optstate_resident(s, f);
  size_t bytes = (size_t)count * sizeof(float);
  if (s->ops && write) s->ops->upload(s->k, a + offset, src, bytes);
  else if (s->ops) s->ops->download(s->k, dst, a + offset, bytes);
  else if (write) memcpy(a + offset, src, bytes);
  else memcpy(dst, a + offset, bytes);
  return SL_OK;
}

float *sl_optstate_resident(const sl_optstate *s, sl_optfield f) {
  if (s->tier == SL_TIER_NVME) return NULL;
  return f == SL_OPT_MASTER ? s->master : f == SL_OPT_M ? s->m : s->v;
}

int sl_optstate_on_backend(const sl_optstate *s) { return s->ops != NULL; }

float *sl_optstate_host_field(const sl_optstate *s, sl_optfield f) {
  return s->ops && s->ops->is_device() ? NULL : sl_optstate_resident(s, f);
}

int sl_optstate_read(sl_optstate *s, sl_optfield f, int64_t offset, int64_t count, float *dst) {
  if (count > 0 && !dst) return sl_fail(SL_EINPUT, "optimizer state %s: NULL destination", s->name);
  return field_io(s, f, offset, count, 0, dst, NULL);
}

int sl_optstate_write(sl_optstate *s, sl_optfield f, int64_t offset, int64_t count, const float *src) {
  if (count > 0 && !src) return sl_fail(SL_EINPUT, "optimizer state %s: NULL source", s->name);
  return field_io(s, f, offset, count, 1, NULL, src);
}

int sl_optstate_read_master(sl_optstate *s, int64_t offset, int64_t count, float *dst) {
  return sl_optstate_read(s, SL_OPT_MASTER, offset, count, dst);
}
int sl_optstate_read_m(sl_optstate *s, int64_t offset, int64_t count, float *dst) {
  return sl_optstate_read(s, SL_OPT_M, offset, count, dst);
}
int sl_optstate_read_v(sl_optstate *s, int64_t offset, int64_t count, float *dst) {
  return sl_optstate_read(s, SL_OPT_V, offset, count, dst);
}
