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

/* What a backend's device buffers need to move between ranks: the kind of
 * device communicator shard/ builds for them (shard/fsdp.c maps the kind to
 * its constructor). Host backends: none (their buffers go over the host
 * comm). */
typedef enum { SL_DEVCOMM_NONE = 0, SL_DEVCOMM_NCCL = 1 } sl_devcomm_kind;

/* The device communicator kind of the backend of `ops` (by its name);
 * SL_DEVCOMM_NONE for a table the registry does not know. */
sl_devcomm_kind sl_backend_device_comm(const sl_ops *ops);
/* "none" or "nccl" (messages). */
const char *sl_devcomm_name(sl_devcomm_kind kind);

/* Before a training run picks its backend: what every backend needs set in
 * the process before its runtime starts (CUDA: CUDA_DEVICE_ORDER=PCI_BUS_ID
 * unless set, the order engine/hosts.c binds GPUs to cores by). */
void sl_backend_prepare(void);

/* One device per local rank: the backend of `ops` uses device `local_rank`
 * of this node for the contexts created from now on, unless its own setting
 * names one (CUDA: SL_CUDA_DEVICE). Nothing for host backends. Call it
 * before ctx_create. */
void sl_backend_bind_local_rank(const sl_ops *ops, int local_rank);

/* The device ordinal the backend of `ops` uses on local rank `local_rank`
 * (its own setting, else local_rank; what the placement binds threads near),
 * or -1 for a host backend. */
int sl_backend_local_device(const sl_ops *ops, int local_rank);

#ifdef __cplusplus
}
#endif
#endif /* SL_KERNELS_REGISTRY_H */
