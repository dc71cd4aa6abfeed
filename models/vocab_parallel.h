/* models/vocab_parallel.h — the vocabulary-parallel embedding and the
 * loss-parallel LM head + cross-entropy for tensor parallelism (T > 1): each
 * TP rank holds a slice of Vl rows of the vocabulary, padded to a multiple
 * of T, and the full logits never exist on one rank (at most a (chunk, Vl)
 * tile, kernels/kernels.h lmhead_vp_*). The ranks combine through the
 * collectives of m->access.tp (models/tp.h); nothing here knows about MPI.
 *
 * Vocabulary split (sl_vocab_split): Vl = ceil(V / T), Vp = T Vl; rank r
 * holds ids [r Vl, r Vl + Vl); its first `valid` rows are real, the rest
 * (only on the last ranks, only when T does not divide V: 211, 32001, 49153)
 * are padding. Padding rows are never read by the kernels, never enter a max
 * or a sum, get zero gradient, and so never change the loss; the engine
 * should still hold them at 0 (load pads with zeros, export drops them).
 *
 * Forward of the head, per micro-batch (N = B*T rows, x replicated on every
 * TP rank):
 *   lnf = rmsnorm(x)                                 (every rank, same rows)
 *   lmax, st = lmhead_vp_fwd(lnf, w_slice)           local max, sum-exp, target logit
 *   gmax = allreduce MAX (lmax)                      N floats
 *   st  *= exp(lmax - gmax) (sum-exp column)         lmhead_vp_rescale
 *   st   = allreduce SUM (st)                        2N floats, one call
 *   lse = gmax + log st[:,0] ; loss = lse - st[:,1]   lmhead_vp_loss
 * Backward: dlogits = (softmax - onehot) * loss_scale on the slice;
 *   dln = allreduce SUM (dlogits @ w_slice)          N*C floats
 *   dw_slice += dlogits^T @ lnf ; dres = rmsnorm_bwd(dln), norm grad local.
 * Embedding forward: out = allreduce SUM (rows of tokens in the slice, 0
 * elsewhere) (N*C floats, exact: one rank contributes each row); backward:
 * dwte_slice += the rows of dout whose token is in the slice (no
 * communication: dout is the same on every TP rank).
 * TP traffic per micro-batch (elements of the full buffers): head 3N + N*C
 * all-reduced, embedding N*C all-reduced; under sequence parallelism the
 * head all-gathers N*C, all-reduces 3N and reduce-scatters N*C, and the
 * embedding reduce-scatters N*C (forward) and all-gathers N*C (backward).
 * An all-reduce of n elements moves 2 n (T-1)/T per rank counted as
 * reduce-scatter + all-gather; each of those n (T-1)/T.
 *
 * Every TP rank ends with the same losses and m->loss_sum (count the loss
 * once per TP group). Without sequence parallelism every rank also holds the
 * same dres and the same final-norm gradient (the norm is replicated: do NOT
 * sum its gradient over TP); with it, each rank holds its rows of dres and a
 * partial norm gradient that the engine sums over TP. Tied embeddings: the tied weight is the vocabulary slice of
 * unit 0; the head reads it and adds its gradient there through m->access,
 * as sl_lm_head does.
 *
 * How the decoder skeleton (models/decoder.c, d = sl_dec(m)) wires it
 * for every architecture (at T = 1 it keeps the existing
 * sl_lm_head / embedding_fwd path, which these functions match only to fp32
 * rounding, not bit for bit):
 *   create:  sl_vocab_split_make(V, tp.size, tp.rank, &d->vs) (T and rank must
 *            be known when the specs are built, like every split shape);
 *            embedding unit: d->embed_name (d->vs.Vl, C);
 *            sl_lm_head_spec_split(m, d->norm_name, C, V, tied, ..., SL_SPLIT_VOCAB)
 *            (lm_head.weight becomes (Vl, C)); both tensors split
 *            SL_SPLIT_VOCAB (checkpoints hold whole (V, C) tensors: slice
 *            rows [v0, v0 + valid), zero the padding rows);
 *            sl_lm_head_vp_set_init(m, &d->hvp, &d->hv, ..., &d->vs, C, eps, tied, L + 1, sp)
 *            per activation set instead of sl_lm_head_init.
 *   fwd u=0: sl_vp_embedding_fwd(m, &d->vs, d->stream[0], flat, N, C, NULL)
 *   fwd head: sl_lm_head_vp_fwd(m, d->hv, flat, d->stream[L])
 *   bwd head: sl_lm_head_vp_bwd(m, d->hv, flat, grads, d->stream[L],
 *             d->dres, d->dln)
 *   bwd u=0: sl_vp_embedding_bwd(m, &d->vs, grads, d->dres, N, C, NULL)
 *   logits:  sl_lm_head_vp_logits(m, d->hv, out)   (tests and dumps)
 *   flops:   the head's 6 N C V is split: count 6 N C Vl per rank.
 * Sequence parallelism (sp = 1; the residual stream on N/T rows per rank):
 * the head normalises its N/T rows and all-gathers them (N*C floats) before
 * lmhead_vp_fwd, and reduce-scatters dln (N*C) instead of all-reducing it;
 * the final norm's gradient is then a partial sum the engine sums over TP.
 * The embedding reduce-scatters its partial rows (N*C) and all-gathers dout
 * (N*C) for its backward: pass d->dln as the (N, C) scratch of both
 * (sl_vp_embedding_fwd(m, &d->vs, d->stream[0], flat, N, C, d->dln) etc.).
 */
#ifndef SL_MODELS_VOCAB_PARALLEL_H
#define SL_MODELS_VOCAB_PARALLEL_H

#include <stdint.h>

#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t V;     /* real vocabulary size */
  int64_t T;     /* TP degree */
  int64_t rank;  /* this rank's index in the TP group */
  int64_t Vl;    /* rows per rank: ceil(V / T), dim 0 of the slice */
  int64_t Vp;    /* padded vocabulary: T * Vl */
  int64_t v0;    /* first vocabulary id of the slice: rank * Vl */
  int64_t valid; /* real rows of the slice: min(Vl, max(0, V - v0)) */
} sl_vocab_split;

/* The split of a V-row vocabulary over T ranks, seen from `rank`.
 * SL_EINPUT naming the value when V < 1, T < 1 or rank not in [0, T). */
int sl_vocab_split_make(int64_t V, int T, int rank, sl_vocab_split *out);

/* The embedding rows of m->tokens (N of them); wte (Vl, C): this rank's
 * slice. sp_partial NULL: out (N, C) := the slice's rows all-reduced over
 * the TP group (the full rows on every rank). Sequence parallelism:
 * sp_partial is an (N, C) scratch and out (N/T, C) := this rank's block of
 * rows, reduce-scattered (SL_EINPUT when T does not divide N). */
int sl_vp_embedding_fwd(sl_model *m, const sl_vocab_split *vs, float *out, const float *wte, int64_t N, int64_t C,
                        float *sp_partial);
/* dwte (Vl, C) += this slice's rows of the scatter by m->tokens of dout:
 * (N, C) without sequence parallelism (sp_gathered NULL; no communication),
 * else this rank's (N/T, C) block, all-gathered into the (N, C) scratch
 * sp_gathered first. */
int sl_vp_embedding_bwd(sl_model *m, const sl_vocab_split *vs, float *dwte, const float *dout, int64_t N, int64_t C,
                        float *sp_gathered);

/* The loss-parallel head unit: sl_lm_head's fields (h.V is the real
 * vocabulary; the weight it reads is the (Vl, C) slice: the head's flat
 * buffer after the norm when untied, unit 0's when tied) plus the slice and
 * the per-row statistics the ranks combine. */
typedef struct {
  sl_lm_head h;      /* N, C, V, eps, tied, unit, lnf, rstdf, lse, losses */
  sl_vocab_split vs; /* this rank's slice */
  float *lmax;       /* (N) this slice's max logit per row */
  float *gmax;       /* (N) max over the TP group */
  float *st;         /* (N, 2) sum-exp, target logit (summed over the group) */
  int sp;            /* sequence parallelism: x and dres are this rank's N/T rows */
  float *xl;         /* (N/T, C) under sp: the local normalised rows (forward,
                        then all-gathered into h.lnf), the reduce-scattered
                        gradient of lnf (backward); NULL otherwise */
  float *gw;         /* (C) under sp: this micro-batch's part of the norm's
                        weight gradient (sl_sp_norm_dw); NULL otherwise */
} sl_lm_head_vp;

/* Sequence parallelism: a norm's weight gradient over this rank's token rows
 * is a part of the whole, summed over the TP group. The gradient buffer g
 * may already hold the earlier micro-batches' sum (--no-sync-accum keeps a
 * unit's gradient across the step), which a sum of g itself would count T
 * times: rmsnorm_bwd writes the part into scratch part instead (sl_sp_norm_dw
 * zeroes part (n) and returns it), then sl_sp_norm_dw_sum sums part over the
 * group and adds it into g (n). With g zeroed for the micro-batch (the
 * default) g ends with the bits of summing g in place. */
float *sl_sp_norm_dw(sl_model *m, float *part, int64_t n);
int sl_sp_norm_dw_sum(sl_model *m, float *g, float *part, int64_t n);

/* Allocates the head's activations and statistics (sl_model_buf). sp: under
 * sequence parallelism (SL_EINPUT when T does not divide N = B*T rows; at
 * T = 1 it changes nothing, like the embedding's scratch arguments). */
int sl_lm_head_vp_init(sl_model *m, sl_lm_head_vp *hv, const sl_vocab_split *vs, int64_t C, float eps, int tied,
                       int unit, int sp);
/* The head of activation set `set` of a model keeping one head per set in
 * the array *hvp (nsets long after this call; grown by realloc, the
 * selected-set pointer *hv moved with it): initialised by
 * sl_lm_head_vp_init, its sl_lm_head copied to *head (the set's). */
int sl_lm_head_vp_set_init(sl_model *m, sl_lm_head_vp **hvp, sl_lm_head_vp **hv, int nsets, int set, sl_lm_head *head,
                           const sl_vocab_split *vs, int64_t C, float eps, int tied, int unit, int sp);
/* x: the residual stream, (N, C) replicated over TP, or under sp this rank's
 * (N/T, C) rows (rank r: rows [r N/T, (r+1) N/T)); adds the batch's N token
 * losses to m->loss_sum (the same on every TP rank). SL_EINTERNAL when
 * m->access.tp is not the group the split was made for; a collective's
 * failure is returned as it is. */
int sl_lm_head_vp_fwd(sl_model *m, sl_lm_head_vp *hv, const float *flat, const float *x);
/* dres := gradient of x ((N, C), the same on every TP rank; under sp this
 * rank's (N/T, C) rows); the norm's gradient is added to grads[0, C) (under
 * sp the micro-batch's part over this rank's rows, summed over TP through
 * hv->gw: sl_sp_norm_dw_sum), the
 * slice's to grads + C (untied) or unit 0's gradient (tied); dln (N, C)
 * scratch. */
int sl_lm_head_vp_bwd(sl_model *m, sl_lm_head_vp *hv, const float *flat, float *grads, const float *x, float *dres,
                      float *dln);
/* sl_lm_head_vp_bwd split for zero-bubble schedules (models/lmhead_split.c,
 * as sl_lm_head_bwd_input / _weight in models/model.h). Input half: the
 * slice's lmhead_vp_bwd into dln (a tied head's slice gradient into tied,
 * (Vl, C), zeroed first), its sum over the TP group (all-reduce, or the
 * reduce-scatter under sp) and the norm's input gradient into dres; stash
 * keeps the summed gradient of the norm's output (this rank's rows: N/T x C
 * under sp, else N x C). Weight half: the untied slice's lmhead_vp_bwd with
 * dx NULL and the norm's weight gradient into grads (under sp summed over
 * TP as sl_lm_head_vp_bwd does, the weight half's one collective): the
 * bits sl_lm_head_vp_bwd adds. The other collectives are the input half's. */
int sl_lm_head_vp_bwd_input(sl_model *m, sl_lm_head_vp *hv, const float *flat, const float *x, float *dres, float *dln,
                            float *stash, float *tied);
int sl_lm_head_vp_bwd_weight(sl_model *m, sl_lm_head_vp *hv, const float *flat, float *grads, const float *x,
                             const float *stash);
/* out (N, V): the full logits of the last forward, gathered over the group
 * (tests and dumps only: this is the one place full logits exist). */
int sl_lm_head_vp_logits(sl_model *m, sl_lm_head_vp *hv, float *out);

#ifdef __cplusplus
}
#endif
#endif /* SL_MODELS_VOCAB_PARALLEL_H */
