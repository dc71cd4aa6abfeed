/* kernels/registry.c — the table of kernel backends (kernels/registry.h).
 * A new backend: its op table (kernels/NAME/), one row here. */
#include "kernels/registry.h"

#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/env.h"
#include "kernels/count/ops_count.h"

typedef struct {
  const char *name;
  const sl_ops *(*get)(void);        /* NULL + sl_errmsg when unusable here */
  int computes;                      /* 0: counts only (the planner's engine check) */
  sl_devcomm_kind devcomm;           /* the device communicator its buffers need */
  void (*prepare)(void);             /* before the runtime starts (sl_backend_prepare); NULL: nothing */
  void (*bind_local_rank)(int rank); /* the device of this local rank; NULL: host memory */
  int (*local_device)(int rank);     /* the ordinal bind_local_rank picks; NULL: host memory */
} backend_row;

/* CUDA numbers GPUs by PCI bus: the order engine/hosts.c's placement binds by.
 * Set before the first CUDA call (sl_ops_cuda's probe). */
static void cuda_prepare(void) { setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0); }

/* One GPU per local rank unless SL_CUDA_DEVICE names one: ctx_create
 * (kernels/cuda/ctx.cu) reads SL_CUDA_DEVICE. */
static void cuda_bind_local_rank(int local_rank) {
  if (sl_env_set("SL_CUDA_DEVICE")) return;
  char d[16];
  snprintf(d, sizeof d, "%d", local_rank);
  sl_env_put("SL_CUDA_DEVICE", d, 0);
}

static int cuda_local_device(int local_rank) {
  return sl_env_set("SL_CUDA_DEVICE") ? (int)sl_env_int("SL_CUDA_DEVICE") : local_rank;
}

/* order of preference for "auto": the first usable one that computes */
static const backend_row g_backends[] = {
    {"cuda", sl_ops_cuda, 1, SL_DEVCOMM_NCCL, cuda_prepare, cuda_bind_local_rank, cuda_local_device},
    {"cpu", sl_ops_cpu, 1, SL_DEVCOMM_NONE, NULL, NULL, NULL},
    {"count", sl_ops_count, 0, SL_DEVCOMM_NONE, NULL, NULL, NULL},
};
enum { NBACKENDS = sizeof g_backends / sizeof g_backends[0] };

const char *sl_backend_names(void) {
  static char names[128]; /* the same text on every call: built once, from the table */
  if (!names[0]) {
    size_t n = 0;
    for (int i = 0; i < NBACKENDS && n < sizeof names; i++)
      n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", g_backends[i].name);
  }
  return names;
}

static const backend_row *find(const char *name) {
  for (int i = 0; name && i < NBACKENDS; i++)
    if (!strcmp(g_backends[i].name, name)) return &g_backends[i];
  return NULL;
}

const sl_ops *sl_backend_get(const char *name) {
  const backend_row *b = find(name);
  if (!b) {
    sl_fail(SL_EINPUT, "unknown kernel backend '%s' (known: %s)", name ? name : "(null)", sl_backend_names());
    return NULL;
  }
  const sl_ops *ops = b->get();
  if (!ops || sl_ops_check(ops) != SL_OK) return NULL;
  return ops;
}

const sl_ops *sl_backend_pick(const char *want, int compute_only, const char *flag) {
  if (want && !strcmp(want, "auto")) {
    for (int i = 0; i < NBACKENDS; i++) {
      if (!g_backends[i].computes) continue;
      const sl_ops *ops = g_backends[i].get();
      if (ops) return sl_ops_check(ops) == SL_OK ? ops : NULL;
    }
    sl_fail(SL_EINPUT, "%s auto: no kernel backend can be used here", flag);
    return NULL;
  }
  const backend_row *b = find(want);
  if (!b || (compute_only && !b->computes)) {
    if (compute_only) /* the training flag's long-standing wording */
      sl_fail(SL_EINPUT, "%s must be cpu, cuda or auto, found '%s'", flag, want ? want : "(null)");
    else
      sl_fail(SL_EINPUT, "%s must be one of %s or auto, found '%s'", flag, sl_backend_names(), want ? want : "(null)");
    return NULL;
  }
  const sl_ops *ops = b->get();
  if (!ops) {
    char why[512];
    snprintf(why, sizeof why, "%s", sl_errmsg()); /* the backend's reason */
    sl_fail(SL_EINPUT, "%s %s: %s", flag, b->name, why);
    return NULL;
  }
  return sl_ops_check(ops) == SL_OK ? ops : NULL;
}

sl_devcomm_kind sl_backend_device_comm(const sl_ops *ops) {
  const backend_row *b = ops ? find(ops->name) : NULL;
  return b ? b->devcomm : SL_DEVCOMM_NONE;
}

const char *sl_devcomm_name(sl_devcomm_kind kind) { return kind == SL_DEVCOMM_NCCL ? "nccl" : "none"; }

void sl_backend_prepare(void) {
  for (int i = 0; i < NBACKENDS; i++)
    if (g_backends[i].prepare) g_backends[i].prepare();
}

void sl_backend_bind_local_rank(const sl_ops *ops, int local_rank) {
  const backend_row *b = ops ? find(ops->name) : NULL;
  if (b && b->bind_local_rank) b->bind_local_rank(local_rank);
}

int sl_backend_local_device(const sl_ops *ops, int local_rank) {
  const backend_row *b = ops ? find(ops->name) : NULL;
  return b && b->local_device ? b->local_device(local_rank) : -1;
}
