/* engine/schedule_pp.h — pipeline parallelism for the trainer: the stage
 * plan (which units this rank computes and holds, from --pp, --pp-virtual,
 * --pp-layout and the static schedule of pipeline/pipeline.h) and the "pp"
 * schedule that executes this rank's op list (engine/schedule_pp.c;
 * docs/pipeline.md, "The executor").
 *
 * Units: 0 = embedding, 1..L = decoder blocks, L+1 = final norm + head.
 * Virtual stage vs (chunk c = vs / P of PP rank vs % P) computes units
 * [first[vs], first[vs+1]): stage 0 the embedding and its layers, stage
 * S-1 its layers and the head. With tied embeddings the last rank also
 * holds unit 0 (the head reads it); its gradient is summed with the first
 * rank's (see schedule_pp.c).
 */
#ifndef SL_SCHEDULE_PP_H
#define SL_SCHEDULE_PP_H

#include <stdint.h>

#include "formats/hfconfig.h"
#include "formats/traincfg.h"
#include "pipeline/pipeline.h"
#include "shard/comm.h"
#include "shard/mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int P, V, S, rank; /* PP ranks, chunks per rank, virtual stages P*V, this rank's PP coordinate */
  int nunits, tied;
  int *first;           /* (S+1) first unit of each virtual stage; first[S] = L + 2 (companions after it) */
  int *layers;          /* (S) decoder layers of each virtual stage (the layout) */
  unsigned char *local; /* (nunits) 1: this rank computes the unit */
  unsigned char *held;  /* (nunits) 1: this rank holds its parameters (local, + unit 0 on the last rank when tied) */
  int *owner;           /* (nunits) PP rank that owns the unit's parameters (unit 0: rank 0) */
  int64_t bnd;          /* elements of one boundary (B*T*C; B*T*C / tp under sequence parallelism) */
  int slices;           /* 1, or T: each TP rank sends its 1/T of a replicated boundary (tp_slices) */
  int64_t wire;         /* elements of one transfer: bnd / slices */
  sl_pp_sched sched;    /* the static schedule of every rank (pipeline/pipeline.h) */
} sl_pp_plan;

/* What the plan is built from. */
typedef struct {
  const char *kind;                  /* --pp-schedule */
  int P, V, rank, m;                 /* --pp, --pp-virtual, PP coordinate, --grad-accum */
  const char *layout;                /* --pp-layout ("" or NULL: balanced) */
  int L, tied, no_attention;         /* decoder layers, tie_word_embeddings, no attention (sl_model_caps) */
  const int64_t *numel;              /* (L+2) parameters per unit (a block's with its companion's) */
  const double *lflops;              /* (L) a model of several layer kinds: each layer's FLOPs per token, the
                                        balance's weights (NULL: 6 x its parameters + attention's 12 h T) */
  int ncomp;                         /* companion units after the head (unit L + 2 + j rides with unit comp_of[j]) */
  const int *comp_of;                /* (ncomp) the block unit each companion rides with */
  int64_t hidden, heads_x_dim, B, T; /* C, nh*hd, micro-batch shape */
  int64_t sp_tp;                     /* sequence parallelism over T ranks: a transfer is the rank's 1/T of the
                                        token rows (0 or 1: all rows) */
  int64_t tp_slices;                 /* TP over T ranks without SP: the boundary is replicated on the T ranks,
                                        each sends its 1/T and the receivers all-gather it over TP (0 or 1: whole) */
} sl_pp_plan_cfg;

/* SL_EINPUT with the builder's / the layout's message for what is refused
 * (m < P under 1f1b or zb1p, P*V > units, a bad layout). */
int sl_pp_plan_create(const sl_pp_plan_cfg *c, sl_pp_plan **out);
void sl_pp_plan_free(sl_pp_plan *p); /* NULL ok */

/* The plan of rank `rank` (PP coordinate) of a training run, NULL at
 * --pp 1; refuses (SL_EINPUT) what the executor does not support yet:
 * --no-sync-accum with chunks or tied embeddings, --offload-params; under
 * zb1p Mamba with --no-sync-accum. A device backend runs every schedule
 * (transfers staged through the host, engine/schedule_pp.c). */
int sl_pp_plan_for_run(const sl_train_cfg *c, const sl_model_config *mc, int rank, sl_pp_plan **out);

/* Saving the model: unit u's full values (n floats in flat) reach world
 * rank 0 from the first DP rank of the stage that owns u (every rank calls
 * this for every unit in order, after its own gather; rc: that gather's
 * status, returned unless the transfer fails). */
int sl_pp_route_unit(const sl_pp_plan *pl, const sl_par_mesh *mesh, int u, float *flat, int64_t n, int rc);

/* The executor ("pp" in the registry of engine/schedule.c): plan, pp (the
 * PP communicator) and tp (the TP group, NULL or one rank without tensor
 * parallelism) are borrowed and must outlive the schedule. */
struct sl_schedule;
int sl_schedule_pp_create(const sl_pp_plan *plan, sl_comm *pp, sl_comm *tp, struct sl_schedule *s);

#ifdef __cplusplus
}
#endif
#endif /* SL_SCHEDULE_PP_H */
