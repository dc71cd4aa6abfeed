/* kernels/registry.h — the kernel backends by name: where a new backend is
 * added (one row of the table in kernels/registry.c) instead of names
 * hard-coded in the trainer. Each backend says which ops it supports
 * (a NULL field of its sl_ops, checked by sl_ops_check). */
#ifndef SL_KERNELS_REGISTRY_H
#define SL_KERNELS_REGISTRY_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "cuda", "cpu" or "count": the backend's op table, checked with
 * sl_ops_check; NULL with a message (sl_errmsg) when the name is unknown
 * (the message lists the known backends) or the backend cannot be used
 * here (its own reason, e.g. "built without CUDA"). */
const sl_ops *sl_backend_get(const char *name);

/* The backend a run asks for: "auto" is the first backend that computes and
 * can be used here, in the table's order of preference (cuda, then cpu);
 * otherwise a name as for sl_backend_get. compute_only: refuse backends that
 * do not compute (count). On failure NULL and sl_fail(SL_EINPUT, ...) with
 * the message prefixed by `flag` (e.g. "--backend"): "FLAG must be cpu,
 * cuda or auto, found 'X'" for an unknown name, "FLAG NAME: why" for a
 * backend that cannot be used. */
const sl_ops *sl_backend_pick(const char *want, int compute_only, const char *flag);

/* The registered names, in order, separated by ", " (messages, help). */
const char *sl_backend_names(void);

#ifdef __cplusplus
}
#endif
#endif /* SL_KERNELS_REGISTRY_H */
