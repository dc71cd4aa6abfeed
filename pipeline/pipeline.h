/* pipeline/pipeline.h — the static pipeline-parallel schedule: for P stages
 * (ranks of the PP axis), m micro-batches and a schedule kind, every rank's
 * ordered list of compute ops (F, B, W) and point-to-point transfers
 * (SEND / RECV of activations forward and of gradients backward), built
 * before the run; the checker that replays all ranks with blocking
 * rendezvous semantics and proves completion, dependencies and counts; the
 * unit-cost timeline (start times, idle slots, bubble, peak in-flight
 * micro-batches per stage); and the layer layout of stages (an explicit
 * split, or one balanced over FLOPs and memory with the embedding and the
 * head counted). Pure functions: no comm, no compute. docs/pipeline.md.
 *
 * Stages: with V virtual chunks per rank the model is cut into S = P*V
 * virtual stages; virtual stage vs = chunk * P + rank (Megatron's
 * interleaving; V = 1 for gpipe, 1f1b, zb1p). The activation of micro-batch
 * mb leaves stage vs for vs + 1, its gradient goes from vs + 1 back to vs.
 *
 * Pairing discipline: every transfer has one global position in the
 * unit-cost timeline: the first time at or after the end of the op that
 * produced its data at which neither of its ranks is inside an op (so a
 * blocking send holds neither), if that is no later than the start of the
 * op that consumes it, else that end (ties broken by (sender, direction,
 * micro-batch, stage)); each rank issues its transfers in
 * that one global order, a transfer before any compute op that starts at or
 * after its position. Every rank's list is then a subsequence of one total
 * order of all events, so the lowest unfinished event is always at the head
 * of its rank(s): with send/recv that block until the peer posts the other
 * half (NCCL's issue-order matching included) the run cannot deadlock.
 * sl_pp_check proves it per schedule by simulation, independently.
 */
#ifndef SL_PIPELINE_H
#define SL_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SL_PP_GPIPE = 0, SL_PP_1F1B, SL_PP_INTERLEAVED, SL_PP_ZB1P, SL_PP_NKINDS } sl_pp_kind;

typedef enum {
  SL_PP_F = 0, /* forward of (mb, chunk) */
  SL_PP_B,     /* backward: full backward, or the input-gradient half under zb1p */
  SL_PP_W,     /* zb1p only: the weight-gradient half of the backward */
  SL_PP_SEND,  /* post a send to `peer`, wait for it (blocking, paired) */
  SL_PP_RECV   /* post a receive from `peer`, wait for it */
} sl_pp_opkind;

enum { SL_PP_ACT = 0, SL_PP_GRAD = 1 }; /* transfer direction: activation forward, gradient backward */

/* One op of a rank's list. */
typedef struct {
  int8_t kind;   /* sl_pp_opkind */
  int8_t dir;    /* SEND/RECV: SL_PP_ACT | SL_PP_GRAD; compute ops: -1 */
  int32_t mb;    /* micro-batch, 0..m-1 */
  int32_t chunk; /* this rank's chunk (0..V-1) the op computes, or whose output it
                     sends / whose input it receives */
  int32_t peer;  /* SEND/RECV: the other PP rank; compute ops: -1 */
  int64_t bytes; /* SEND/RECV: payload bytes; compute ops: 0 */
  int64_t start; /* unit-cost timeline: compute start; transfers: their global position */
  int64_t end;   /* compute end (start + cost); transfers: = start (no cost) */
} sl_pp_op;

/* What to build. Costs are integer time units per op of one chunk;
 * 0 = the default (F 1, B 2, W 0; zb1p: F 1, B 1, W 1). */
typedef struct {
  sl_pp_kind kind;
  int P;         /* pipeline ranks, >= 1 */
  int m;         /* micro-batches per step, >= 1 */
  int V;         /* chunks per rank (interleaved >= 2; others 1) */
  int64_t bytes; /* bytes of one transfer: b*s*h*elem (/T under sequence parallelism) */
  int64_t cost_f, cost_b, cost_w;
} sl_pp_spec;

typedef struct {
  sl_pp_spec spec; /* as built, costs resolved */
  int S;           /* virtual stages, P*V */
  int *nops;       /* (P) ops per rank */
  sl_pp_op **ops;  /* (P) arrays of nops[r] ops, in issue order */
  /* facts of the unit-cost timeline */
  int64_t makespan;                 /* end of the last op */
  int64_t *busy;                    /* (P) compute time per rank */
  int64_t *idle;                    /* (P) makespan - busy: the bubble of each rank */
  int *peak_inflight;               /* (P) peak chunk-micro-batches whose activations are held
                         (from F's start to the end of B, of W under zb1p) */
  int64_t *sends, *recvs;           /* (P) transfer counts per rank */
  int64_t *send_bytes, *recv_bytes; /* (P) */
} sl_pp_sched;

void sl_pp_spec_defaults(sl_pp_spec *s);                 /* 1f1b, P = m = V = 1, bytes 0, default costs */
int sl_pp_kind_parse(const char *name, sl_pp_kind *out); /* "gpipe" | "1f1b" | "interleaved" | "zb1p" */
const char *sl_pp_kind_name(sl_pp_kind k);

/* Checks the spec (refusals are SL_EINPUT with what to change), builds
 * every rank's list, fills the timeline facts and runs sl_pp_check. */
int sl_pp_build(const sl_pp_spec *spec, sl_pp_sched *out);
void sl_pp_sched_free(sl_pp_sched *s);

/* Replays all ranks: compute ops run when their inputs are on the rank (F
 * of stage vs - 1 / B of stage vs + 1 on the same rank, or a completed RECV
 * of that micro-batch and stage; W after B), a SEND and a RECV complete
 * together when both are at the head of their ranks' lists and name each
 * other, the same direction, micro-batch and stage, and the same bytes.
 * SL_EINTERNAL with each stuck rank's head op when no rank can move before
 * all are done; also when an F / B (/ W) is missing, duplicated or on the
 * wrong rank, or a transfer is missing, extra or sends data not yet made. */
int sl_pp_check(const sl_pp_sched *s);

/* Replays the lists on a clock: a compute op takes its cost x unit, a
 * transfer `xfer`. overlap = 0: sends block until the receive is posted (a
 * transfer starts when both ranks have it at their heads, at the later of
 * the two, and holds both until it ends). overlap = 1: the sender posts and
 * goes on; the receive ends at max(its start, the post) + xfer, and the
 * sender's step ends when its last send has. Fills busy[P] (compute time per
 * rank; may be NULL) and returns the step (the last rank's end), or -1 when
 * the lists cannot complete or memory runs out. With xfer = 0 and overlap
 * the step is the unit-cost makespan; blocking sends can be slower where no
 * time before the consumer starts finds both ranks between ops
 * (docs/pipeline.md). */
double sl_pp_replay(const sl_pp_sched *s, double unit, double xfer, int overlap, double *busy);

/* Writes "F3", "B0:1" (mb:chunk when V > 1), "send act mb 2 -> rank 1" ... */
void sl_pp_op_str(const sl_pp_sched *s, const sl_pp_op *op, char *buf, size_t cap);

/* ---- layout ------------------------------------------------------------- */
/* Costs of the units a stage can hold; flops and bytes in any consistent
 * units (per token, per micro-batch...). */
typedef struct {
  int L;                           /* decoder layers */
  const double *layer_flops;       /* (L) */
  const double *layer_bytes;       /* (L) parameters + activations of one layer */
  double embed_flops, embed_bytes; /* first stage */
  double head_flops, head_bytes;   /* final norm + LM head, last stage */
} sl_pp_costs;

/* Parses "5,4,4,5" (decoder layers per stage) into layers[P]. Refused: not
 * P non-negative integers, a sum other than L, an empty stage (0 layers on a
 * stage that holds neither the embedding nor the head). */
int sl_pp_layout_parse(const char *text, int P, int L, int *layers);
/* Contiguous split of L layers over P stages minimising the heaviest stage,
 * a stage's weight max(flops / total flops, bytes / total bytes) with the
 * embedding on stage 0 and the head on stage P-1; ties go to the split
 * with the smallest sum of squares. Every layer is placed; only the first
 * and last stage may hold 0 layers. Refused: P > L + 2 (units). */
int sl_pp_layout_balance(const sl_pp_costs *c, int P, int *layers);
/* Stage weights of a split: flops[P], bytes[P] (embedding and head counted). */
void sl_pp_layout_weights(const sl_pp_costs *c, int P, const int *layers, double *flops, double *bytes);

#ifdef __cplusplus
}
#endif
#endif /* SL_PIPELINE_H */
