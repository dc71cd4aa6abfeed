/* engine/expert_par.c — expert parallelism in the engine (engine/expert_par.h). */
#include "engine/expert_par.h"

#include <string.h>

#include "base/base.h"
#include "shard/ep.h"

int sl_epar_check(const sl_train_cfg *c, const sl_model_config *mc, int device) {
  if (c->ep <= 1) return SL_OK;
  const char *no = NULL;
  if (!mc->moe_experts) no = "the model has no experts (a dense architecture)";
  else if (mc->moe_experts % c->ep) no = "it does not divide the number of experts";
  else if (device) no = "the device backends have no expert exchange yet (run --backend cpu)";
  if (!no) return SL_OK;
  return sl_fail(SL_EINPUT, "--ep %lld: %s (%s, %lld experts)", (long long)c->ep, no, mc->arch_name,
                 (long long)mc->moe_experts);
}

int sl_epar_init(sl_epar *ep, const sl_par_mesh *mesh, const sl_ops *ops, sl_kctx *k) {
  (void)ops;
  (void)k;
  memset(ep, 0, sizeof *ep);
  ep->E = mesh->axis[SL_AXIS_EP].size;
  ep->comm = mesh->axis[SL_AXIS_EP].comm;
  return SL_OK;
}

sl_ep_group sl_epar_hooks(sl_epar *ep) {
  if (ep->E <= 1 || !ep->comm) return (sl_ep_group){.rank = 0, .size = 1};
  return sl_ep_group_over(ep->comm);
}

void sl_epar_add_stats(const sl_epar *ep, sl_comm_stats *s) {
  if (ep->E <= 1 || !ep->comm) return;
  sl_comm_stats x;
  sl_comm_get_stats(ep->comm, &x);
  s->calls[SL_COLL_ALLTOALL] += x.calls[SL_COLL_ALLTOALL];
  s->bytes[SL_COLL_ALLTOALL] += x.bytes[SL_COLL_ALLTOALL];
  s->alltoall_ns += x.alltoall_ns;
}

int sl_epar_gather_part(sl_comm *ep, const sl_unit_spec *us, float *unit) {
  if (!us->expert || !ep || sl_comm_size(ep) <= 1) return SL_OK;
  sl_comm_req *r = NULL; /* in place: this rank's run is block ep_rank of the unit */
  if (sl_comm_allgather(ep, unit + us->hold_lo, unit, us->hold_n, SL_F32, &r) != SL_COMM_OK ||
      sl_comm_wait(r) != SL_COMM_OK)
    return sl_fail(SL_ECOMM, "expert parallel: gathering a unit of %s: %s", us->kind, sl_comm_last_error());
  return SL_OK;
}

int sl_epar_gather_unit(const sl_epar *ep, const sl_model *m, int u, float *flat) {
  if (ep->E <= 1) return SL_OK;
  return sl_epar_gather_part(ep->comm, &m->units[u], flat + m->tp_rank * m->units[u].numel);
}
