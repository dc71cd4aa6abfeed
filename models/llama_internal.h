/* models/llama_internal.h — the private state of the Llama/Mistral units
 * (models/llama.c), shared with the split backward of zero-bubble pipeline
 * schedules (models/llama_split.c). Not part of the model interface. */
#ifndef SL_LLAMA_INTERNAL_H
#define SL_LLAMA_INTERNAL_H

#include <stdint.h>

#include "models/model.h"
#include "models/vocab_parallel.h"

typedef struct {
  float *ln1;   /* (N, C) */
  float *rstd1; /* (N) */
  float *qkv;   /* (N, Q) after RoPE */
  float *att;   /* (N, A) attention output before Wo */
  float *lse;   /* (B, nh, T) */
  float *xmid;  /* (N, C) residual after attention */
  float *ln2;   /* (N, C) */
  float *rstd2; /* (N) */
  float *gu;    /* (N, 2I) gate | up */
  float *h;     /* (N, I) silu(gate) * up */
} layer_acts;

typedef struct {
  int64_t N, C, nh, nkv, hd, Q, A, I, V, L, window; /* nh, nkv, Q, A, I: this TP rank's */
  int64_t kvrep, kvslot, kvgroups;                  /* k/v slice shared by kvrep TP ranks; its index of kvgroups */
  float *kvsum; /* (kvgroups + 1, 2*nkv*hd*C) replicated k/v gradient exchange, then the slice's
                   earlier micro-batches' sum (kvrep > 1; kv_grad_begin) */
  float eps;
  float *inv_freq; /* (hd/2) backend memory: the RoPE frequencies (models/rope.h), B > 0 */
  int tied;
  /* the selected activation set's views (sets[m->act]) */
  float **stream;  /* (L+1) x (N, C): input of block l; stream[L] feeds the head */
  layer_acts *la;  /* (L) */
  sl_lm_head head; /* final norm + LM head + cross-entropy */
  /* T > 1: vocabulary-parallel embedding and loss-parallel head (models/vocab_parallel.h) */
  int vp, sp; /* vp: T > 1; sp: sequence parallelism (rows n = N/T of the stream per rank) */
  int64_t n;  /* token rows of the residual stream on this rank: N, or N/T under sp */
  sl_vocab_split vs;
  sl_lm_head_vp *hvp; /* (nsets) the loss-parallel head of each activation set (vp) */
  sl_lm_head_vp *hv;  /* the selected set's */
  float *xl;          /* (n, C) under sp: a norm's local output before its all-gather, a
                       reduce-scattered input gradient in backward */
  sl_act_set *sets;   /* (nsets) one per micro-batch in flight (models/model.h) */
  int nsets;
  layer_acts shared; /* recomputed in backward, shared by every layer and set (selective: att, lse; full: all) */
  /* backward scratch (workspace) */
  float *dres;  /* (N, C) gradient of the residual stream */
  float *dln;   /* (N, C) */
  float *dh;    /* (N, I) */
  float *dgu;   /* (N, 2I) */
  float *datt;  /* (N, A) */
  float *dqkv;  /* (N, Q) */
  float *gnorm; /* (2, C) under sp: the micro-batch's part of ln1's, ln2's weight gradient */
} llama_priv;

/* parameter views of a block's flat buffer */
typedef struct {
  const float *ln1, *wqkv, *wo, *ln2, *wgu, *wd;
} blockw;

static inline blockw block_views(const llama_priv *p, const float *flat) {
  blockw w;
  int64_t C = p->C;
  w.ln1 = flat;
  w.wqkv = w.ln1 + C;
  w.wo = w.wqkv + p->Q * C;
  w.ln2 = w.wo + C * p->A;
  w.wgu = w.ln2 + C;
  w.wd = w.wgu + 2 * p->I * C;
  return w;
}

/* Split backward (models/llama_split.c): the vt entries of models/model.h. */
/* Activation checkpointing's recomputation before block u's backward
 * (models/llama.c). */
int sl_llama_recompute(sl_model *m, int u, const float *flat);
/* llama_bwd's tensor-parallel collectives (models/llama.c): sequence
 * parallelism's all-gather of the (n, C) rows into (N, C); a row-parallel
 * GEMM's partial sums into this rank's rows (reduce-scatter under sp, else an
 * all-reduce in place); a replicated k/v slice's gradient summed over the
 * ranks sharing it; a norm's weight gradient summed over TP under sp. */
int sl_llama_sp_gather(sl_model *m, const float *rows, float *all);
int sl_llama_row_parallel_sum(sl_model *m, float *part, float *rows);
int sl_llama_kv_grad_sum(sl_model *m, float *gkv);
void sl_llama_kv_grad_begin(sl_model *m, float *gkv);
float *sl_llama_norm_dw(sl_model *m, float *g, float *part);
int sl_llama_norm_grad_sum(sl_model *m, float *g, float *part);
int64_t sl_llama_stash_numel(const sl_model *m, int u);
int sl_llama_bwd_input(sl_model *m, int u, const float *flat, float *stash, float *tied);
int sl_llama_bwd_weight(sl_model *m, int u, const float *flat, float *grads, const float *stash);

#endif /* SL_LLAMA_INTERNAL_H */
