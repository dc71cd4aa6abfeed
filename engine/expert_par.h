/* engine/expert_par.h — what expert parallelism (--ep E > 1; docs/moe.md)
 * means to the engine, in one place:
 *   - the start-up refusals of --ep (a model without experts, E not
 *     dividing the experts or the shard group, the layouts not built yet);
 *   - the model's EP hooks over the mesh's ep axis (shard/ep.h);
 *   - the gather of a layer's experts unit from the E ranks' parts (each
 *     holds a contiguous run: sl_unit_spec hold_lo / hold_n) for --save and
 *     the checkpoint dump.
 * Checkpoints store every unit in its whole layout, so a run resumes at
 * another EP degree (engine/checkpoint.c reads and writes each rank's
 * hold_lo-shifted ranges). At E = 1 each function does nothing. */
#ifndef SL_EXPERT_PAR_H
#define SL_EXPERT_PAR_H

#include "base/ep_group.h"
#include "formats/traincfg.h"
#include "models/model.h"
#include "shard/comm.h"
#include "shard/mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int E;         /* EP ranks (1: none) */
  sl_comm *comm; /* the mesh's ep axis (borrowed) */
} sl_epar;

/* Start-up refusals of c->ep for the model mc (SL_EINPUT naming the flag and the reason). */
int sl_epar_check(const sl_train_cfg *c, const sl_model_config *mc, int device);
int sl_epar_init(sl_epar *ep, const sl_par_mesh *mesh, const sl_ops *ops, sl_kctx *k);
/* The hooks of the model's token exchange: the ep axis at E > 1, size 1 (never called) otherwise. */
sl_ep_group sl_epar_hooks(sl_epar *ep);
/* flat (unit u's whole numel): this rank's part at flat + hold_lo in, the
 * whole unit out on every EP rank (an all-gather in place). Collective over
 * the ep axis for an EP-split unit; nothing otherwise. At T > 1 flat holds
 * every TP rank's unit, rank after rank (this one's at tp_rank numel). */
int sl_epar_gather_unit(const sl_epar *ep, const sl_model *m, int u, float *flat);
/* The same over the communicator ep for one TP rank's unit (its numel at
 * unit; this rank's part at unit + hold_lo in): checkpoints use it. */
int sl_epar_gather_part(sl_comm *ep, const sl_unit_spec *us, float *unit);
/* Adds the ep axis's all-to-all traffic (the token exchange; the save's
 * gathers are not counted) to *s, the shard group's figures the summary, the
 * metrics' comm_bytes and the engine check report. */
void sl_epar_add_stats(const sl_epar *ep, sl_comm_stats *s);

#ifdef __cplusplus
}
#endif
#endif /* SL_EXPERT_PAR_H */
