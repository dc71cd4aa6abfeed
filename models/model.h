/* models/model.h — a model is an ordered list of units over flat buffers.
 *
 * A unit kind declares its parameter tensors as spec rows {HF name, shape,
 * offset in the unit's flat buffer, weight-decay flag, init} and supplies
 * forward and backward functions that read parameters through views into
 * that flat buffer. Nothing here knows about ranks or communication: the
 * trainer hands each unit its (gathered) flat parameters and a gradient
 * buffer, and the model hands back activations and gradients.
 *
 * Every architecture is the decoder skeleton of models/decoder.{h,c}
 * (embedding, blocks, final norm + head over the residual stream) with its
 * block kind: models/llama.c (Llama, Mistral), models/mamba.c (Mamba v1);
 * the registry in models/model.c maps sl_arch to the kind.
 */
#ifndef SL_MODEL_H
#define SL_MODEL_H

#include <stdint.h>

#include "base/base.h"
#include "formats/hfconfig.h"
#include "formats/safetensors.h"
#include "kernels/kernels.h"
#include "base/ep_group.h"
#include "models/tp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SL_AC_NONE = 0, SL_AC_SELECTIVE = 1, SL_AC_FULL = 2 } sl_actckpt;
/* "none" / "selective" / "full" (--activation-checkpoint) -> sl_actckpt; -1
 * for anything else (no message: the caller words it). */
int sl_actckpt_from_name(const char *name);
typedef enum { SL_INIT_NORMAL = 0, SL_INIT_ONES, SL_INIT_ZEROS, SL_INIT_CUSTOM } sl_init_kind;

#define SL_TENSOR_NAME_MAX 128

#define SL_TP_PARTS_MAX 6 /* stacked parts of one tensor (sl_tensor_spec tp_part) */
typedef struct {
  char name[SL_TENSOR_NAME_MAX]; /* HF name, e.g. model.layers.3.mlp.up_proj.weight */
  int ndim;                      /* 1..3 */
  int64_t shape[3];              /* (ndim) */
  int64_t offset;                /* first element in the unit's flat buffer */
  int64_t numel;
  int decay; /* weight decay applies to this tensor */
  sl_init_kind init;
  float std; /* SL_INIT_NORMAL */
  /* tensor parallelism (models/tp.h): shape above is this TP rank's slice */
  sl_split split;  /* SL_SPLIT_NONE: the whole tensor (replicated at T > 1) */
  int split_dim;   /* dim sliced: 0 (col, vocab) or ndim-1 (row); -1 for none */
  int64_t full[3]; /* (ndim) the whole HF tensor's shape (= shape at T = 1) */
  int64_t tp_off;  /* first index of this rank's slice along split_dim (in each part: tp_stack) */
  int tp_replicas; /* TP ranks holding this same slice: 1 unique, T whole, T/nkv for GQA k/v */
  int tp_stack;    /* split_dim (0) stacks tp_stack equal parts, each sliced at tp_off within its
                                    part and packed part after part (Mamba's in_proj: x | z); 1: a plain slice */
  int64_t tp_part[SL_TP_PARTS_MAX]; /* tp_stack > 1: each part's whole extent along dim 0 (sl_unit_add_parts:
                                       Mamba-2's in_proj z | x | B | C | dt); rank r's slice of part s is the
                                       s-th (tp_part[s] / T)-long run at slot r / tp_replicas, and tp_off is
                                       that slot times part 0's run */
  int tp_part_rep[SL_TP_PARTS_MAX]; /* tp_stack > 1: the TP ranks holding the same run of part s (1: the part is
                                       split over all T; R > 1: over T / R, rank r holding run r / R, as the
                                       B and C rows of Mamba-2's in_proj when n_groups < T) */
  int tp_size;                      /* tp_stack > 1: T */
  /* a slab of a fused HF tensor (Granite 4.0-H's, Qwen3.5-MoE's experts: (E, rows, cols) holding every expert): the
   * HF tensor is `name` up to its '[' and has shape (slabs, full...); this tensor is its index `slab` (name ends
   * "[slab]"). slabs 0: the tensor is an HF tensor of its own. Set by sl_unit_slab. */
  int64_t slab, slabs;
} sl_tensor_spec;

typedef struct {
  char kind[32]; /* "embedding", "llama_block", "head", ... */
  int layer;     /* block index, -1 for others */
  int ntensors;
  int cap;           /* rows allocated in t (grown by sl_unit_add; no fixed limit) */
  sl_tensor_spec *t; /* (ntensors) in flat-buffer order; owned, freed by sl_unit_free */
  int64_t numel;     /* flat size: tensors packed back to back */
  /* Expert parallelism: a unit whose tensors are split over the EP ranks
   * (a mixture-of-experts layer's experts, models/llama_moe.c) lists every
   * tensor of the whole unit (offsets in the whole layout, numel its whole
   * size), and this rank holds the elements [hold_lo, hold_lo + hold_n) of
   * it: its runtime buffer (the FSDP unit) is hold_n floats, and that part
   * is what reaches the model. Every other unit: hold_lo 0, hold_n numel. */
  int64_t hold_lo, hold_n;
  int expert; /* 1: sharded over the expert data-parallel group (a rank's experts), not the dense one */
  /* -1, or the unit whose compute reads this unit's parameters (a MoE
   * block reads its experts unit): the runtime acquires and releases this
   * unit with that one (shard/fsdp.h companions); its own fwd and bwd do
   * nothing. */
  int companion_of;
} sl_unit_spec;

typedef struct sl_model sl_model;

/* What an architecture supports, for the engine and the planner to ask
 * instead of testing the architecture (sl_model_caps_of: from a config,
 * without a model; sl_model.caps: the same for a built model). */
typedef struct {
  int attention;      /* its blocks attend: the attention FLOPs term (12 heads x head_dim x T per layer), the GPT
                         activation constants, the attention shapes (heads, head_dim) of the planner */
  int doc_mask;       /* --doc-attention-mask (attention and RoPE positions stay inside documents) */
  int recurrent;      /* a state carried along the sequence (Mamba's scan): d_inner / d_state shapes and their TP
                         all-reduces in the planner's closed forms; its pipeline layouts are not searched */
  int zb_split;       /* the split backward (vt bwd_input / bwd_weight) for --pp-schedule zb1p */
  int zb_split_accum; /* ... also under --no-sync-accum (the weight half adds the bits the unsplit backward adds) */
  int bf16;           /* --compute-dtype bf16, checked against the bf16 mirror (tests/ref/bf16_checks.py) */
  int bf16_acts;      /* its blocks keep bf16-valued activations (sl_model_buf_bf16), stored packed in bf16 under bf16
                         compute (sl_model_layout act_bf16; the live layer counts as workspace) */
  int bf16_stream;    /* --residual-dtype bf16 (sl_model_layout res_bf16): the residual stream rounded to bf16 where
                         the block sums are made, and stored in bf16 (models/decoder.h) */
  int64_t tp_width;   /* what --tp must divide in the planner's search: attention heads, or d_inner */
} sl_model_caps;
/* The capabilities of cfg's architecture; SL_EINPUT for an unknown one. */
int sl_model_caps_of(const sl_model_config *cfg, sl_model_caps *out);

/* How a unit reaches another unit's parameters and gradients (tied
 * weights), and the collectives of its tensor-parallel group (models/tp.h):
 * provided by the trainer, which owns the FSDP runtime and the mesh. */
typedef struct {
  void *user;
  int (*params)(void *user, int u, const float **p);
  int (*grads)(void *user, int u, float **g);
  sl_tp_group tp; /* sl_tp_single() unless --tp > 1 */
  sl_ep_group ep; /* the expert-parallel group (base/ep_group.h); size 1 unless --ep > 1 */
} sl_unit_access;

typedef struct {
  int (*fwd)(sl_model *m, int u, const float *params);
  int (*bwd)(sl_model *m, int u, const float *params, float *grads);
  /* logits (B*T, V) of the current batch after a forward (tests/dump). */
  int (*logits)(sl_model *m, float *out);
  int (*init_custom)(sl_model *m, int u, int ti, float *dst, uint64_t seed);
  void (*destroy)(sl_model *m);
  int64_t (*flops_per_token)(const sl_model *m, int64_t T); /* training, model FLOPs */
  /* Activation sets (sl_model_set_nacts / sl_model_use_acts): allocates set
   * `set` (sl_model_buf, SL_ARENA_ACTS), called for set 0 by the
   * architecture's constructor and for sets >= 1 by sl_model_set_nacts;
   * use_acts points fwd/bwd/logits at an allocated set. */
  int (*alloc_acts)(sl_model *m, int set);
  void (*use_acts)(sl_model *m, int set);
  /* The residual stream at the input of unit u (1..nunits-1) in the selected
   * set, and the backward's gradient buffer of the residual stream (shared
   * by every set: after unit u's backward it holds the gradient of u's
   * input; before the backward of the last unit of a pipeline chunk it must
   * hold the gradient of that unit's output); n elements each. */
  int (*boundary)(sl_model *m, int u, float **act, float **grad, int64_t *n);
  /* The backward split into its input- and weight-gradient halves (zero-
   * bubble pipeline schedules, engine/schedule_pp.c, --pp-schedule zb1p);
   * all three NULL when the block kind has no split (sl_model_caps
   * zb_split). Both halves
   * run on the selected activation set, which must stay until the weight
   * half (the set is freed after the micro-batch's last weight half);
   * under tensor parallelism the input-gradient collectives run in
   * bwd_input and the weight-gradient ones (replicated k/v slices, the norms'
   * weights under sequence parallelism) in bwd_weight, so every TP rank of a
   * stage calls them in the same order if it runs the same op list.
   * stash_numel: floats unit u's input half keeps for its weight
   * half, per micro-batch in flight (the caller owns the stash).
   * bwd_input: what bwd does to the residual gradient (shared buffer of
   * boundary) without touching any gradient buffer or another unit's
   * parameters' gradient; fills stash. tied (V*C floats, the head of a tied
   * model only, else NULL): receives the head's part of unit 0's gradient
   * (overwritten; the head's weight GEMM runs here, in one call with its
   * input gradient, as bwd runs it). bwd_weight: adds unit u's weight
   * gradient of the micro-batch into grads (zeroed per micro-batch by the
   * runtime, or holding the step's earlier micro-batches under
   * --no-sync-accum) from stash and the set's activations: the bits bwd adds. */
  int64_t (*stash_numel)(const sl_model *m, int u);
  int (*bwd_input)(sl_model *m, int u, const float *params, float *stash, float *tied);
  int (*bwd_weight)(sl_model *m, int u, const float *params, float *grads, const float *stash);
} sl_model_vt;

/* The batch of an activation set that is not selected (sl_model_use_acts
 * keeps it here and restores it into the sl_model fields below). */
typedef struct {
  const int32_t *tokens, *targets, *seg;
  float loss_scale;
  double loss_sum;
} sl_act_batch;

struct sl_model {
  const sl_model_vt *vt;
  sl_model_config cfg;
  sl_model_caps caps;   /* what the architecture supports (sl_model_caps_of) */
  int tp_rank, tp_size; /* the TP slice the shapes are for (0, 1 unless --tp) */
  int ep_rank, ep_size; /* the experts this rank holds: the ep_rank-th E/ep_size of each layer's (0, 1 unless --ep) */
  const sl_ops *ops;
  sl_kctx *k;
  int nunits;
  sl_unit_spec *units; /* (nunits) */
  int *pinned;         /* (nunits) 1: params read by another unit */
  sl_unit_access access;
  sl_actckpt ac;
  int64_t B, T; /* micro-batch shape the activations are sized for */
  /* the current micro-batch */
  const int32_t *tokens;  /* (B*T) */
  const int32_t *targets; /* (B*T), -1 = ignore */
  float loss_scale;       /* gradient of each token's loss, 1/(G*T) */
  double loss_sum;        /* sum of token losses of the micro-batch */
  /* loss_dev 1: the losses are added into the backend's scalar slot
   * loss_slot instead (ops scalar_acc / scalar_add, in the same order;
   * loss_sum stays 0): the trainer fetches them once per step */
  int loss_dev, loss_slot;
  /* 1 while a schedule runs a forward with no backward (evaluation, engine/
   * schedule.h sl_schedule_forward): loss_sum is then the token cross-entropy
   * only; the training-only terms (a mixture of experts' router losses) and
   * counters (its expert load) are left out */
  int fwd_only;
  int64_t act_bytes;      /* activation bytes held (acts arena) */
  void *priv;             /* architecture state */
  /* backend buffers of the architecture, freed by sl_model_destroy */
  void **bufs;
  int nbufs, capbufs;
  int64_t buf_bytes[2]; /* acts, workspace */
  /* bf16 activation storage (sl_model_layout act_bf16; models/decoder.c):
   * while rec is set, sl_model_buf records the acts buffers it allocates */
  int act_bf16;
  int res_bf16; /* sl_model_layout res_bf16 and caps.bf16_stream */
  struct sl_buf_recs *rec;
  /* (B*T) backend memory or NULL: position in its sample where each token's
   * document starts (--doc-attention-mask: attention stays inside documents,
   * RoPE positions restart at each document); set by the trainer per batch */
  const int32_t *seg;
  /* Activation sets: one per micro-batch in flight between its forward and
   * its backward. tokens, targets, seg, loss_scale, loss_sum above and the
   * architecture's activation views are the selected set's. */
  int nacts;             /* sets allocated: 1 after sl_model_create (0: specs only) */
  int act;               /* the selected set, 0..nacts-1 */
  sl_act_batch *batches; /* (nacts) the batch of each set while another is selected */
  int sp;                /* sequence parallelism (tp_size > 1): the residual stream holds this rank's
                                (B*T)/tp_size token rows (sl_model_stream) */
  /* (nunits) or NULL (all): 1 for the units this rank computes (a pipeline
   * stage); activations are allocated only for those */
  unsigned char *local;
};

/* Builds the model for cfg (dispatch on cfg->arch): unit specs, activations
 * for micro-batch B x T, checkpoint policy. */
int sl_model_create(const sl_model_config *cfg, const sl_ops *ops, sl_kctx *k, int64_t B, int64_t T, sl_actckpt ac,
                    sl_model **out);
static inline int sl_model_is_local(const sl_model *m, int u) { return !m->local || m->local[u]; }
/* vt->boundary (SL_EINPUT for u outside 1..nunits-1 or a model without it). */
int sl_model_boundary(sl_model *m, int u, float **act, float **grad, int64_t *n);
/* The same for TP rank tp_rank of tp_size and a pipeline stage:
 *  - tensor parallelism: the unit specs hold this rank's slices (local
 *    shapes, sl_tensor_spec's split fields); SL_EINPUT naming the size when
 *    tp_size does not split the model. The model's collectives come from
 *    m->access.tp, which the caller sets to a group of the same rank and
 *    size before the first forward;
 *  - sp = 1 (sequence parallelism, tp_size > 1): the residual stream and the
 *    norms on (B*T)/tp_size token rows per rank; SL_EINPUT naming the sizes
 *    when tp_size does not divide B*T; ignored at tp_size = 1;
 *  - local (nlocal = num_hidden_layers + 2 flags, or NULL: every unit): the
 *    units this rank's pipeline stage computes; the others get no
 *    activations. */
int sl_model_create_full(const sl_model_config *cfg, const sl_ops *ops, sl_kctx *k, int64_t B, int64_t T, sl_actckpt ac,
                         int tp_rank, int tp_size, int sp, const unsigned char *local, int nlocal, sl_model **out);
/* The same with expert parallelism: the parallel layout in one struct
 * (sl_model_create_full's arguments, plus ep_rank of ep_size: each MoE
 * layer's experts unit holds experts [ep_rank E/ep_size, (ep_rank+1)
 * E/ep_size), sl_unit_spec hold_lo / hold_n; SL_EINPUT when ep_size does
 * not divide the experts). */
typedef struct {
  int tp_rank, tp_size, sp;
  const unsigned char *local; /* num_hidden_layers + 2 flags (the companion units follow their owners), or NULL */
  int nlocal;
  int ep_rank, ep_size;
  /* 1 (under --compute-dtype bf16): a block's kept activations whose values
   * are bf16 (sl_model_buf_bf16) are stored in bf16 between its forward and
   * its backward (models/decoder.c); 0: fp32 */
  int act_bf16;
  /* 1 (--residual-dtype bf16, and the architecture's caps.bf16_stream): the
   * residual stream is rounded to bf16 (round_bf16) after the embedding and
   * after each residual add, as a bf16 model's; with act_bf16 too the
   * stream between two local units is kept packed in bf16 */
  int res_bf16;
} sl_model_layout;
int sl_model_create_layout(const sl_model_config *cfg, const sl_ops *ops, sl_kctx *k, int64_t B, int64_t T,
                           sl_actckpt ac, const sl_model_layout *lay, sl_model **out);
/* Unit u's runtime part: the elements [hold_lo, hold_lo + hold_n) of its
 * flat buffer this rank holds (the whole unit but for EP-split experts). */
static inline int64_t sl_model_unit_held(const sl_model *m, int u) { return m->units[u].hold_n; }
/* The unit whose compute holds unit u's parameters: u itself, or the unit a companion rides with. */
static inline int sl_model_unit_owner(const sl_model *m, int u) {
  return m->units[u].companion_of >= 0 ? m->units[u].companion_of : u;
}
/* The head: the last unit of the decoder (the companions come after it). */
static inline int sl_model_head_unit(const sl_model *m) {
  int u = m->nunits - 1;
  while (u > 0 && m->units[u].companion_of >= 0) u--;
  return u;
}
/* Unit specs only (B = T = 0: no activations, no compute): for the planner,
 * checkpoint conversion and tools that only need names, shapes and sizes. */
int sl_model_create_specs(const sl_model_config *cfg, sl_model **out);
void sl_model_destroy(sl_model *m);

/* Activation sets. A model holds one set of activations per micro-batch in
 * flight (between its forward and its backward): the residual stream, each
 * block's saved tensors and the head's, plus the batch (tokens, targets,
 * seg, loss scale, loss sum). sl_model_create allocates one set, which is all
 * a schedule running each micro-batch's backward right after its forward
 * needs (engine/schedule.h, "single"). A pipeline schedule keeping n
 * micro-batches in flight asks for n sets once, before training
 * (sl_model_set_nacts allocates sets nacts..n-1 in SL_ARENA_ACTS; n below the
 * current count keeps them), then selects a micro-batch's set before each of
 * its forward and backward units. The backward scratch (workspace) and the
 * tensors activation checkpointing recomputes in backward are shared by all
 * sets: they live only inside one unit's backward. */
int sl_model_set_nacts(sl_model *m, int n);
/* Selects set `set` (0..nacts-1): fwd/bwd/logits and the batch fields then
 * read and write that set. */
int sl_model_use_acts(sl_model *m, int set);

/* Sets the micro-batch of the selected activation set (pointers must stay
 * valid through its backward). */
void sl_model_set_batch(sl_model *m, const int32_t *tokens, const int32_t *targets, float loss_scale);
/* The batch's losses go to the backend's scalar slot `slot` (>= 0, reserved
 * with ops scalars_reserve), or to m->loss_sum (slot < 0, the default). */
void sl_model_set_loss_slot(sl_model *m, int slot);
/* Adds the sum of losses[0..n) (backend memory) / the host value v to the
 * batch's loss: loss_sum or the slot (sl_model_set_loss_slot). */
void sl_model_loss_add(sl_model *m, const float *losses, int64_t n);
void sl_model_loss_add_value(sl_model *m, double v);

/* Full fp32 flat parameters of unit u (this TP rank's slices): from the
 * weight set, reading only the slice of each tensor (NULL: init from seed,
 * deterministic per tensor name; a slice is the slice of the whole tensor's
 * init, so every TP degree starts from the same model). */
int sl_model_unit_load(const sl_model *m, int u, const sl_st_set *weights, uint64_t seed, float *flat);
/* Writes the model as an HF directory; fill(u, flat) provides unit u's full
 * fp32 flat parameters: at T > 1 those of every TP rank, rank after rank
 * (tp_size x the unit's numel), which are assembled into whole HF tensors
 * (replicated copies must agree bit for bit: SL_EINTERNAL naming the tensor
 * otherwise). Streams one unit at a time. The tensors are written in dtype
 * (SL_ST_F32 | SL_ST_BF16 | SL_ST_F16, rounded to nearest even; config.json's
 * torch_dtype to match), and the tokenizer files and generation_config.json
 * of src_dir (NULL or "": none) are copied beside them
 * (sl_savedir_copy_aux), all swapped in at once. */
typedef int (*sl_unit_fill_fn)(void *ctx, int u, float *flat);
/* moe_bias: NULL, or a mixture of experts' expert bias (L, E)
 * (sl_model_moe_bias), written after the units' tensors as
 * sl_model_moe_bias_name's tensors when any value is nonzero, with a warning
 * that transformers' model class ignores them (always F32, as DeepSeek-V3
 * stores it). */
int sl_model_save(const sl_model *m, const char *dir, sl_unit_fill_fn fill, void *ctx, int64_t max_shard_bytes,
                  const float *moe_bias, sl_st_dtype dtype, const char *src_dir);

/* Unit u between this rank's TP layout and the whole (T = 1) layout, where
 * tensors are whole and packed back to back in spec order (what a T = 1
 * model holds; checkpoints store it): whole (sl_model_unit_whole_numel)
 * from the T ranks' flats (T x numel, rank after rank; replicated copies
 * must agree bit for bit, SL_EINTERNAL otherwise), or this rank's flat
 * (numel) from whole. At T = 1 both are copies. */
int64_t sl_model_unit_whole_numel(const sl_model *m, int u);
int sl_model_unit_to_whole(const sl_model *m, int u, const float *flats, float *whole);
void sl_model_unit_from_whole(const sl_model *m, int u, const float *whole, float *flat);

int64_t sl_model_num_params(const sl_model *m); /* real parameters */
/* A model of several layer kinds (the hybrids): each decoder layer's training FLOPs per token at sequence
 * length T into out (L entries) and 1; 0 (out untouched) for a model of one kind, whose layers cost alike. */
int sl_model_layer_flops(sl_model *m, int64_t T, double *out);
/* A mixture of experts' routing (models/llama_moe.c): the tokens each expert
 * of each block received in the forwards since the last call ((L, E) into
 * out when out != NULL; the counters restart). Returns L*E, 0 for a dense
 * model. Recomputation (activation checkpointing) does not count. */
int64_t sl_model_moe_load(sl_model *m, int64_t *out);
/* The routing options' figures since the last call, out (L + 4) unless
 * NULL (the counters restart): the slots the capacity dropped per layer,
 * then the aux loss's sum (E sum_e f_e P_e, without its coefficient) and
 * the micro-batches it ran in, the z-loss's sum (mean_t lse^2) and the
 * (micro-batch, layer) pairs it ran in. Returns L + 4, 0 for a dense model. */
int64_t sl_model_moe_stats(sl_model *m, double *out);
/* --moe-balance bias: the expert bias after a step from load (L, E), the
 * step's tokens per expert over every rank (sl_model_moe_load summed);
 * load NULL: only copies the host bias (sl_model_moe_bias) to the backend. */
int sl_model_moe_bias_step(sl_model *m, const int64_t *load);
/* The host copy of the expert bias ((L, E) into *n = L*E; NULL, *n = 0:
 * none): training state, the checkpoint's to save and restore. */
float *sl_model_moe_bias(sl_model *m, int64_t *n);
/* Layer l's expert bias as HF weight files name it: DeepSeek-V3's
 * e_score_correction_bias under the family's router, (E) fp32
 * (model.layers.l.block_sparse_moe.gate.e_score_correction_bias for
 * Mixtral, model.layers.l.mlp.gate.e_score_correction_bias for Qwen3-MoE). */
void sl_model_moe_bias_name(const sl_model_config *c, int64_t l, char *buf, size_t cap);
/* The expert bias from the weight files w when they hold it (every MoE
 * layer's, or SL_EINPUT naming the tensor): it then takes part in the
 * top-k selection, updated after each step only under --moe-balance bias,
 * not taken under --moe-balance none (cfg.moe_balance: a run without a
 * bias); *found := 1. Nothing (*found 0) when w holds none or the model has
 * no experts. */
int sl_model_moe_bias_load(sl_model *m, const sl_st_set *w, int *found);
/* The same values into out (num_hidden_layers x moe_experts) without a model (shardlm convert). */
int sl_model_moe_bias_read(const sl_model_config *c, const sl_st_set *w, float *out, int *found);
/* The model's expert bias := b ((L, E), host; a checkpoint's): the same
 * role as sl_model_moe_bias_load's (nothing under --moe-balance none, for a
 * dense model or specs). */
int sl_model_moe_bias_set(sl_model *m, const float *b);
int64_t sl_model_max_unit_numel(const sl_model *m);

/* For model files: n floats of zeroed backend memory counted in arena
 * (SL_ARENA_ACTS or SL_ARENA_WORKSPACE), freed with the model. */
float *sl_model_buf(sl_model *m, int64_t n, sl_arena arena);
/* The same for a kept activation whose values are bf16 under bf16 compute
 * (the output of an op kernels/bf16.c rounds, or rows moved from one): with
 * m->act_bf16 the decoder keeps it packed in bf16 between the block's
 * forward and backward (lossless: a test checks the bits). Only for a
 * buffer no op writes unrounded (not a TP sum, not fp32 statistics). */
float *sl_model_buf_bf16(sl_model *m, int64_t n, sl_arena arena);

/* The last unit every language model shares: final RMSNorm (C) then, when
 * untied, lm_head (V, C) in its flat buffer; the fused chunked LM head +
 * cross-entropy. Tied models read (and add the gradient into) unit 0 through
 * m->access. */
typedef struct {
  int64_t N, C, V;
  float eps;
  int tied, unit; /* unit: the head's own index */
  float *lnf;     /* (N, C) normalised input of the head */
  float *rstdf;   /* (N) */
  float *lse;     /* (N) log-sum-exp of each row's logits */
  float *losses;  /* (N) */
  float softcap;  /* final-logit softcap (Gemma 2), 0: none (sl_lm_head_init: 0; the decoder sets it) */
  float *w1;      /* (C) workspace for the norm's 1 + w (Gemma), NULL: the norm multiplies by w */
  float lscale;   /* the logits times this (Granite: 1 / logits_scaling), 0: none; applied to the normed rows the
                     head GEMM reads (lnf) and to their gradient (sl_lm_head_lscale) */
} sl_lm_head;
/* Declares the head unit's tensors (norm_name (C), then lm_head.weight (V, C)
 * when untied; tied: pins unit 0, whose weight the head reads); SL_ENOMEM
 * when the unit's tensor list cannot grow. */
int sl_lm_head_spec(sl_model *m, const char *norm_name, int64_t C, int64_t V, int tied, sl_init_kind head_init,
                    float std);
/* The same with lm_head.weight split `split` over the TP group
 * (SL_SPLIT_VOCAB: T slices of ceil(V / T) rows, models/vocab_parallel.h). */
int sl_lm_head_spec_split(sl_model *m, const char *norm_name, int64_t C, int64_t V, int tied, sl_init_kind head_init,
                          float std, sl_split split);
/* The residual stream: L+1 buffers of (B*T, C), input of each block and of
 * the head (sl_model_buf); NULL when out of memory. On a pipeline stage
 * (m->local) stream[l] is NULL unless unit l or l+1 is computed here.
 * live (L+1 entries, or NULL): stream[l] = live[l] where that is not NULL
 * (a buffer the architecture shares between sets: models/decoder.c). */
float **sl_model_stream(sl_model *m, int64_t L, int64_t C, float *const *live);
/* One activation set of an architecture with a residual stream: what one
 * micro-batch keeps from its forward to its backward. */
typedef struct {
  float **stream; /* (L+1) x (B*T, C): input of block l; stream[L] feeds the head */
  void *layers;   /* (L) the architecture's per-layer struct of kept tensors */
  sl_lm_head head;
} sl_act_set;
/* Grows *sets to set+1 entries (*nsets = set+1) and gives set `set` its
 * stream (sl_model_stream) and L zeroed per-layer structs of layer_size
 * bytes; the caller fills those and the head. NULL when out of memory. */
sl_act_set *sl_act_set_new(sl_model *m, sl_act_set **sets, int *nsets, int set, int64_t L, int64_t C, size_t layer_size,
                           float *const *live);
void sl_act_sets_free(sl_act_set *sets, int nsets); /* host arrays only (buffers go with the model) */
/* Allocates the head's activations (sl_model_buf). */
int sl_lm_head_init(sl_model *m, sl_lm_head *h, int64_t C, int64_t V, float eps, int tied, int unit);
/* x (N, C): the residual stream; adds the batch's token losses to m->loss_sum. */
int sl_lm_head_fwd(sl_model *m, sl_lm_head *h, const float *flat, const float *x);
/* dres (N, C) := gradient of x; grads: the head's flat gradient; dln (N, C) scratch. */
int sl_lm_head_bwd(sl_model *m, sl_lm_head *h, const float *flat, float *grads, const float *x, float *dres,
                   float *dln);
int sl_lm_head_logits(sl_model *m, sl_lm_head *h, float *out);
/* rows x C of v times h->lscale (nothing when 0): the head's normed input, forward, and its gradient. */
void sl_lm_head_lscale(sl_model *m, const sl_lm_head *h, float *v, int64_t rows);
/* The final norm's weight: flat's first C floats, or 1 + them (Gemma: h->w1). */
const float *sl_lm_head_norm_w(sl_model *m, const sl_lm_head *h, const float *flat);
/* sl_lm_head_bwd split for zero-bubble schedules (models/lmhead_split.c):
 * the input half leaves dres as sl_lm_head_bwd does and keeps the final
 * norm's output gradient (N, C) in stash; a tied head's part of unit 0's
 * gradient goes into tied (V, C; zeroed first), else tied is unused. The
 * weight half adds the head's weight gradients into grads from stash: the
 * bits sl_lm_head_bwd adds. */
int sl_lm_head_bwd_input(sl_model *m, sl_lm_head *h, const float *flat, const float *x, float *dres, float *dln,
                         float *stash, float *tied);
int sl_lm_head_bwd_weight(sl_model *m, sl_lm_head *h, const float *flat, float *grads, const float *x,
                          const float *stash);

/* Spec-building helpers for model files. Each appends a tensor to a unit,
 * growing its list (SL_ENOMEM, the unit unchanged, when that fails); a unit
 * holds any number of tensors. sl_unit_free releases the list (the model's
 * units are freed by sl_model_destroy) and zeroes the unit's count, size
 * and list. */
int sl_unit_add(sl_unit_spec *u, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int decay,
                sl_init_kind init, float std);
/* The same for a tensor of whole HF shape (d0, d1) split `split` over the TP
 * group into `parts` equal slices (parts divides m->tp_size, and the split
 * dim except for SL_SPLIT_VOCAB; the caller checked): this rank holds slice
 * tp_rank / (T / parts), which T / parts ranks share. parts = T: a plain
 * column / row split. SL_SPLIT_VOCAB pads the rows to a multiple of parts:
 * each slice has ceil(d0 / parts) rows, and rows past d0 (at the end of the
 * last slices) are padding no file holds: zero when loaded, never saved. */
int sl_unit_add_split(const sl_model *m, sl_unit_spec *u, const char *name, int ndim, int64_t d0, int64_t d1, int decay,
                      sl_init_kind init, float std, sl_split split, int64_t parts);

/* A tensor of whole HF shape (d0, d1, d2) (ndim 1..3) column-split over the
 * TP group along dim 0, which stacks `stacks` equal parts (Mamba's in_proj:
 * its x rows then its z rows; 1: a plain column split): this rank holds rows
 * [r·P/T, (r+1)·P/T) of every part (P = d0 / stacks), packed part after
 * part (shape (d0/T, d1, d2)); stacks·T divides d0 (the caller checked). At
 * T = 1 the same as sl_unit_add. */
int sl_unit_add_stacked(const sl_model *m, sl_unit_spec *u, const char *name, int ndim, int64_t d0, int64_t d1,
                        int64_t d2, int decay, sl_init_kind init, float std, int64_t stacks);
/* The same with parts of different extents: parts[0..nparts) (nparts <=
 * SL_TP_PARTS_MAX) stacked along dim 0, each split over the TP group (T
 * divides each; the caller checked), packed part after part. reps (NULL:
 * all 1): part s split over T / reps[s] slots instead, each held by
 * reps[s] ranks (rank r: slot r / reps[s]; its gradient the caller's to
 * sum over them), counted once by the gradient norm and assembled from the
 * slot's first rank (the others' copies checked to be the same bits). */
int sl_unit_add_parts(const sl_model *m, sl_unit_spec *u, const char *name, int ndim, const int64_t *parts,
                      const int *reps, int nparts, int64_t d1, int64_t d2, int decay, sl_init_kind init, float std);
/* Makes the unit's last tensor, added as NAME[slab], slab `slab` of the fused HF tensor NAME of `slabs` slabs
 * (sl_tensor_spec slab): loaded from and saved into that tensor's index `slab` along a leading dimension. */
void sl_unit_slab(sl_unit_spec *u, int64_t slab, int64_t slabs);
/* The HF tensor name of t into buf: t->name, or for a slab its fused tensor's (the name without "[slab]"). */
const char *sl_tensor_hf_name(const sl_tensor_spec *t, char *buf, size_t cap);
/* The unit's tensor indices of the slabs of the fused tensor whose slab 0 is tensor i, in slab order, into
 * idx[0..t->slabs) (SL_EINTERNAL naming it when one is missing or repeated). */
int sl_unit_slab_members(const sl_unit_spec *u, int i, int *idx);
void sl_unit_free(sl_unit_spec *u);

#ifdef __cplusplus
}
#endif
#endif /* SL_MODEL_H */
