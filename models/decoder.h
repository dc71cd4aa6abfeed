/* models/decoder.h — the one decoder skeleton every architecture's units
 * run on (models/decoder.c), and the block-kind interface an architecture
 * fills (models/llama.c, models/mamba.c). Not part of the model interface:
 * the engine and planner see sl_model (models/model.h).
 *
 * The skeleton owns the unit list (0 = embedding, 1..L = blocks of one
 * kind, L+1 = final norm + LM head), the residual stream and activation
 * sets, the pipeline boundary, the head dispatch (tied / untied; at T > 1
 * the vocabulary-parallel embedding and loss-parallel head,
 * models/vocab_parallel.h), the split backward's scaffolding (zero-bubble
 * schedules: the embedding's and the head's halves, the stash of a block),
 * the residual stream's tensor-parallel collectives, and the shared
 * backward scratch: dres (the residual gradient), dln (an (N, C) scratch)
 * and, under sequence parallelism, xl (n, C).
 *
 * A block kind supplies its layer's tensors, forward, backward, what
 * activation checkpointing keeps and recomputes, its split halves (or none)
 * and its capabilities. It reads the skeleton's state through sl_dec(m) and
 * keeps its own in d->blk.
 */
#ifndef SL_MODELS_DECODER_H
#define SL_MODELS_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "models/model.h"
#include "models/vocab_parallel.h"

typedef struct sl_decoder sl_decoder;

/* bf16 activation storage (m->act_bf16): the acts buffers one alloc_layer
 * call allocates (sl_model_buf records them while m->rec is set), each
 * with whether its values are bf16 (sl_model_buf_bf16). */
typedef struct {
  float *p;
  int64_t n;
  int bf16;
} sl_buf_rec;
struct sl_buf_recs {
  sl_buf_rec *r;
  int n, cap;
};
int sl_buf_recs_add(struct sl_buf_recs *rs, float *p, int64_t n, int bf16);

typedef struct {
  const char *unit_kind; /* the blocks' sl_unit_spec kind, e.g. "llama_block" */
  size_t layer_size;     /* bytes of the per-layer struct of kept activations */
  /* Capabilities for a config (sl_model_caps_of; no model instance). */
  void (*caps)(const sl_model_config *c, sl_model_caps *out);
  /* The kind's state (d->blk) from m->cfg: shapes, the TP check (SL_EINPUT
   * naming the valid --tp values), and the skeleton's settings it decides:
   * d->eps, d->std, d->embed_name, d->norm_name, d->head_init. */
  int (*init)(sl_model *m, sl_decoder *d);
  /* Appends block l's tensors to u (its kind and layer are set). */
  int (*spec)(sl_model *m, sl_unit_spec *u, int64_t l);
  /* Block l's companion unit (the MoE layer's experts, read by the block's
   * compute through m->access; placed after the head, in layer order: the
   * companions of the layers that have one are units L + 2, L + 3, ...),
   * appended to u, its kind, layer and companion_of set; NULL or
   * has_companions(m, l) 0: none. It may split the unit over the EP ranks
   * (hold_lo, hold_n, expert). */
  int (*has_companions)(const sl_model *m, int64_t l);
  int (*companion_spec)(sl_model *m, sl_unit_spec *u, int64_t l);
  /* With activations (B > 0), before set 0: backend tables (NULL: none). */
  int (*prepare)(sl_model *m);
  /* One layer's activation buffers (sl_model_buf). recomputed 1: the
   * buffers activation checkpointing recomputes in backward, shared by
   * every layer and set (allocated once with set 0 when m->ac != none;
   * under full checkpointing every layer of every set is this struct);
   * recomputed 0: the kept buffers of a layer computed here, the recomputed
   * ones taken from *shared (NULL when m->ac is none). l: the layer, or -1
   * for buffers any layer of the kind may use (shared, the live layer of
   * bf16 storage): a kind whose layers differ allocates the union there. */
  int (*alloc_layer)(sl_model *m, int64_t l, void *layer, int recomputed, const void *shared);
  /* The block's backward scratch (workspace), after the skeleton's. */
  int (*alloc_scratch)(sl_model *m);
  /* Block l from x (the stream's rows) into layer; the block output into
   * out unless out is NULL (full checkpointing's recomputation). */
  int (*fwd)(sl_model *m, int l, const float *flat, const float *x, void *layer, float *out);
  /* What activation checkpointing recomputes before block l's backward (and
   * before each of its split halves). */
  int (*recompute)(sl_model *m, int l, const float *flat);
  /* Block l's backward (after recompute): d->dres holds the gradient of its
   * output and receives the gradient of its input; adds into grads. */
  int (*bwd)(sl_model *m, int l, const float *flat, float *grads);
  /* The split backward (models/model.h bwd_input / bwd_weight), each after
   * recompute; all three NULL when the kind has none. */
  int64_t (*stash_numel)(const sl_model *m);
  int (*bwd_input)(sl_model *m, int l, const float *flat, float *stash);
  int (*bwd_weight)(sl_model *m, int l, const float *flat, float *grads, const float *stash);
  int64_t (*flops_per_token)(const sl_model *m, int64_t T);                  /* the whole model's */
  /* Layer l's FLOPs per token (the convention of flops_per_token, every TP
   * rank's slices together): what a model of several kinds adds up, with
   * the head's 6 V C. */
  int64_t (*layer_flops)(const sl_model *m, int64_t l, int64_t T);
  int (*init_custom)(sl_model *m, int u, int ti, float *dst, uint64_t seed); /* NULL: none */
  void (*destroy)(sl_model *m); /* frees what d->blk holds (NULL: nothing); the skeleton frees d->blk */
  int64_t (*moe_load)(sl_model *m, int64_t *out);         /* sl_model_moe_load (NULL: a dense kind) */
  int64_t (*moe_stats)(sl_model *m, double *out);         /* sl_model_moe_stats (NULL: a dense kind) */
  int (*moe_bias_step)(sl_model *m, const int64_t *load); /* sl_model_moe_bias_step (NULL: a dense kind) */
  float *(*moe_bias)(sl_model *m, int64_t *n);            /* sl_model_moe_bias (NULL: a dense kind) */
  int (*moe_bias_set)(sl_model *m, const float *b);       /* sl_model_moe_bias_set (NULL: a dense kind) */
  /* After the micro-batch's last block, before the head: the kind's own
   * term of the loss (added to m->loss_sum; its gradient kept for the
   * blocks' backward), e.g. MoE's load-balancing loss. NULL: none. */
  int (*loss_term)(sl_model *m);
} sl_block_kind;

#define SL_DEC_MAX_KINDS 4 /* block kinds one model mixes (Nemotron-H: Mamba-2 and Llama's sub-layers) */

struct sl_decoder {
  /* The layers' kinds: kinds[lk[l]] runs layer l, with its state blks[k]
   * (each kind's init, spec, buffers and compute see theirs as d->blk: the
   * skeleton selects it before every call, sl_dec_use). One kind: lk all 0,
   * the single-kind decoder of every family before the hybrids. */
  const sl_block_kind *kinds[SL_DEC_MAX_KINDS];
  void *blks[SL_DEC_MAX_KINDS];
  int nkinds;
  unsigned char *lk;  /* (L) */
  size_t layer_size;  /* the largest kind's layer struct: the stride of la */
  const sl_block_kind *kind; /* the selected kind (sl_dec_use) */
  sl_model_vt vt;                     /* m->vt: the skeleton's, without the split entries when the kind has none */
  void *blk;                          /* the selected kind's state (blks[k]) */
  int64_t N, C, V, L;                 /* tokens of a micro-batch, hidden size, vocabulary, blocks */
  int64_t n;                          /* token rows of the residual stream on this rank: N, or N/T under sp */
  float eps;                          /* the final norm's */
  float std;                          /* SL_INIT_NORMAL's standard deviation */
  int tied, vp, sp;                   /* vp: T > 1 (vocabulary-parallel embedding and head); sp: sequence parallelism */
  const char *embed_name, *norm_name; /* HF names of the embedding and the final norm */
  sl_init_kind head_init;             /* an untied lm_head.weight's */
  /* Gemma options the kind sets in init (0: off): the final norm multiplies
   * by 1 + w (its weight zero-initialised), the embedding output is scaled
   * by embed_scale (its gradient likewise), the logits are softcapped */
  int plus_one;
  float embed_scale, final_softcap;
  float logit_div; /* Granite: the logits divided by logits_scaling (0: none; the head's lscale 1 / it) */
  float *w1; /* (C) workspace: the final norm's 1 + w (plus_one) */
  sl_vocab_split vs;
  /* the selected activation set's views (sets[m->act]) */
  float **stream;  /* (L+1) x (n, C): input of block l; stream[L] feeds the head */
  void *la;        /* (L) per-layer structs of kind->layer_size bytes */
  sl_lm_head head; /* final norm + LM head + cross-entropy */
  sl_lm_head_vp *hv;
  sl_lm_head_vp *hvp; /* (nsets) the loss-parallel head of each set (vp) */
  sl_act_set *sets;   /* (nsets) one per micro-batch in flight (models/model.h) */
  int nsets;
  void *shared[SL_DEC_MAX_KINDS]; /* each kind's buffers checkpointing recomputes, shared by its layers and every set
                                     (kind->alloc_layer; NULL: none) */
  /* bf16 activation storage (m->act_bf16, when the kind keeps bf16-valued
   * buffers): every layer's kept tensors live in one layer's buffers (live,
   * the first local layer's, recorded), and each (set, layer) keeps a
   * packed copy (bf16 where the buffer's values are, else the bits), made
   * after the block's forward and unpacked before its recompute / backward */
  struct sl_buf_recs live[SL_DEC_MAX_KINDS]; /* per kind: the union layer's buffers (alloc_layer l = -1) */
  void *live_la[SL_DEC_MAX_KINDS];       /* the live layer struct (NULL: storage in fp32) */
  int live_off[SL_DEC_MAX_KINDS];        /* decided: the kind keeps nothing in bf16 */
  int64_t pack_floats[SL_DEC_MAX_KINDS]; /* one layer's packed copy */
  float **packs;       /* (npack_sets * L) each local layer's packed copy per set */
  int npack_sets;
  /* a bf16 residual stream (m->res_bf16) under bf16 storage: stream[s]
   * between two local units (s < L) lives in slive[s & 1] (workspace,
   * shared by every set) and each set keeps it packed in bf16 (spk), made
   * after unit s's forward and unpacked before block s's recompute /
   * backward; stream[L] and a pipeline boundary's stay per set, fp32 */
  float *slive[2];
  float **slive_of; /* (L+1) slive[s & 1] for a packed stream s, else NULL (NULL: none packed) */
  float **spk;      /* (nspk_sets * (L+1)) set's packed stream s */
  int nspk_sets;
  /* backward scratch (workspace), shared by every unit */
  float *dres; /* (N, C) gradient of the residual stream (n rows used) */
  float *dln;  /* (N, C) */
  float *xl;   /* (n, C) under sp: a norm's local output before its all-gather, a reduce-scattered input gradient */
};

static inline sl_decoder *sl_dec(const sl_model *m) { return (sl_decoder *)m->priv; }
/* Layer l's activation struct in the selected set. */
static inline void *sl_dec_layer(const sl_model *m, int l) {
  const sl_decoder *d = sl_dec(m);
  return (char *)d->la + (size_t)l * d->layer_size;
}
/* Selects layer l's kind (d->kind, d->blk) and returns it. */
static inline const sl_block_kind *sl_dec_use(sl_decoder *d, int64_t l) {
  int k = d->lk ? d->lk[l] : 0;
  d->blk = d->blks[k];
  return d->kind = d->kinds[k];
}
/* Selects kind k. */
static inline const sl_block_kind *sl_dec_use_kind(sl_decoder *d, int k) {
  d->blk = d->blks[k];
  return d->kind = d->kinds[k];
}

/* Builds m's unit specs (m->cfg, shapes, TP and EP ranks set) as the
 * skeleton over layers of the kinds kinds[0..nk-1], layer l of kinds[lk[l]]
 * (lk NULL: every layer kinds[0]); sl_decoder_buffers then allocates its
 * activations and scratch (B > 0). */
int sl_decoder_create(sl_model *m, const sl_block_kind *const *kinds, int nk, const unsigned char *lk);
int sl_decoder_buffers(sl_model *m);
/* Unit index of block l's companion (-1: none). */
int sl_dec_companion(const sl_model *m, int64_t l);

/* The residual stream's tensor-parallel collectives (m->access.tp), for the
 * block kinds. sl_dec_tp_sum: buf (n) summed over the TP group in place
 * (nothing at T = 1). sl_dec_sp_gather: sequence parallelism's all-gather of
 * the (n, C) rows of every rank into (N, C). sl_dec_row_parallel_sum: the
 * (N, C) partial sums of a row-parallel GEMM into this rank's rows of their
 * sum: a reduce-scatter under sp (from part into rows), else an all-reduce
 * in place (part == rows). sl_dec_norm_gathered: RMSNorm (weight w, eps) of
 * the stream's n rows x into the (N, C) input of a column-parallel GEMM: in
 * place without sp, else through d->xl and all-gathered into out. */
int sl_dec_tp_sum(sl_model *m, float *buf, int64_t n);
int sl_dec_sp_gather(sl_model *m, const float *rows, float *all);
int sl_dec_row_parallel_sum(sl_model *m, float *part, float *rows);
int sl_dec_norm_gathered(sl_model *m, float *out, float *rstd, const float *x, const float *w, float eps);
/* Where rmsnorm_bwd writes a norm's weight gradient g (C): g itself, or
 * under sp (this rank's rows' part) the zeroed scratch part (C), which
 * sl_dec_norm_grad_sum sums over the TP group and adds into g
 * (models/vocab_parallel.h sl_sp_norm_dw: g may hold the earlier
 * micro-batches' sum under --no-sync-accum); nothing without sp. */
float *sl_dec_norm_dw(sl_model *m, float *g, float *part);
int sl_dec_norm_grad_sum(sl_model *m, float *g, float *part);
/* "NAME: why; valid --tp values for this model: ..." (SL_EINPUT) when
 * misfit(cfg, m->tp_size) gives a reason, trying T = 1..max; else SL_OK. */
int sl_dec_tp_check(const sl_model *m, const char *(*misfit)(const sl_model_config *, int64_t, char *, size_t),
                    int64_t max);

/* acc = what every kind of a model supports, kind by kind (first: acc = k). */
void sl_dec_caps_merge(sl_model_caps *acc, const sl_model_caps *k, int first);

/* The block kinds (models/llama.c, models/mamba.c, models/mamba2.c). */
extern const sl_block_kind sl_llama_block;
extern const sl_block_kind sl_mamba_block;
extern const sl_block_kind sl_mamba2_block;

#endif /* SL_MODELS_DECODER_H */
