/* models/llama_internal.h — the private state of the Llama/Mistral/Qwen block
 * kind (models/llama.c), shared with the split backward of zero-bubble
 * pipeline schedules (models/llama_split.c). Not part of the model
 * interface. */
#ifndef SL_LLAMA_INTERNAL_H
#define SL_LLAMA_INTERNAL_H

#include <stdint.h>

#include "models/decoder.h"
#include "models/linear.h"

typedef struct {
  float *ln1;   /* (N, C) */
  float *rstd1; /* (N) */
  float *qkv;   /* (N, Q) after RoPE */
  float *att;   /* (N, A) attention output before Wo */
  float *lse;   /* (B, nh, T) */
  float *xmid;  /* (N, C) residual after attention */
  float *ln2;   /* (N, C) */
  float *rstd2; /* (N) */
  float *gu;    /* (N, 2I) gate | up; MoE: (N*k, 2I) in expert-group order */
  float *h;     /* (N, I) silu(gate) * up (Gemma: gelu_tanh(gate) * up); MoE: (N*k, I) */
  /* mixture of experts (p->E > 0; else NULL): kernels/kernels.h's moe_* ops */
  float *logits, *probs; /* (N, E) the router's logits and fp32 softmax */
  float *wts;            /* (N, k) routing weights */
  int32_t *sel, *perm, *pos, *offs; /* (N, k), (N*k), (N*k), (2E+1) the choices and the expert grouping */
  float *zlse;                      /* (N) the router logits' logsumexp (the z-loss's; NULL without it) */
  float *xp, *yp;        /* (N*k, C) the permuted ln2 rows and the experts' outputs */
  float *xr, *yr;        /* (EP*N*k, C) under EP: the rows received for this rank's experts and their outputs
                            (at EP = 1: xp and yp) */
  float *sgu, *sh;       /* (N, gw Is), (N, Is) the shared expert's up (gate|up) and activation (Nemotron-H) */
  float *qkr;   /* (N, Q) q|k|v before the q/k norms (Qwen3's qk_norm; NULL without) */
  float *qkrs;  /* (nh + nkv, N) the q/k norms' rstd, head by head (qk_norm) */
  /* Gemma's sandwich norms (NULL otherwise): the Wo and Wdown outputs
   * before their post-norms, and those norms' statistics */
  float *ao;    /* (n, C) */
  float *rstd3; /* (n) */
  float *mo;    /* (n, C) */
  float *rstd4; /* (n) */
} layer_acts;

/* The q/k/v biases (Qwen2; Llama / Qwen3 attention_bias): (Q) after the
 * packed Wqkv, so the qkv GEMM adds one bias vector; o_proj's (C) after Wo;
 * Qwen3's q/k norm weights (hd each) after that; gate|up's (2I) after Wgu,
 * down_proj's (C) after Wd (Llama mlp_bias); Gemma's post-attention norm
 * (C) before ln2 (its pre-feedforward norm), its post-feedforward norm (C)
 * last. models/llama.c's layout. */

/* The block kind's state (sl_dec(m)->blk); the skeleton's (the residual
 * stream, activation sets, head, dres, dln, xl) is models/decoder.h's. */
typedef struct {
  int64_t N, C, nh, nkv, hd, Q, A, I;         /* nh, nkv, Q, A, I: this TP rank's */
  int64_t *lwin;                              /* (L) host: each layer's attention window, 0: full causal */
  int64_t kvrep, kvslot, kvgroups;            /* k/v slice shared by kvrep TP ranks; its index of kvgroups */
  int64_t qb;                                 /* q|k|v bias floats after Wqkv: Q (qkv_bias), else 0 */
  int64_t ob, qkn, mb; /* floats of o_proj's bias (C or 0), the q/k norms (2*hd or 0), gate|up's bias (2I or 0) */
  int64_t db;          /* floats of down_proj's bias (C or 0) */
  float *kvsum; /* (kvgroups + 1, 2*nkv*hd*C [+ 2*nkv*hd: k/v biases]) replicated k/v gradient exchange,
                   then the slice's earlier micro-batches' sum (kvrep > 1; kv_grad_begin) */
  int64_t E, k;    /* mixture of experts: E experts (0: the dense MLP), k chosen a token */
  int64_t Ie, Is;  /* this rank's width of an expert and of the shared expert (0: none; Nemotron-H) */
  unsigned char *moel; /* (L) host: which layers are sparse (NULL: every layer when E > 0) */
  int dense_ffn;   /* some layer has the dense MLP */
  int norm_topk;   /* renormalise the k routing weights */
  int moe_mode;    /* the router's kernels/kernels.h mode: SL_MOE_NORM, SL_MOE_SIGMOID */
  float rscale;    /* the routed weights' scale (routed_scaling_factor; 1: none) */
  int mbias;       /* the MLPs have biases (mlp_bias) */
  int ep;          /* EP ranks (m->ep_size): this rank holds E/ep experts */
  int misroute;    /* SL_FAULT_EP_MISROUTE (a test's negative control) */
  int32_t *hoffs;  /* (2E+1) host: a layer's expert groups, then its dropped slots' (the balanced split, nothing
                      dropped, under the counting backend) */
  int64_t *load;   /* (L, E) host: tokens each expert received since sl_model_moe_load */
  float aux_coef;  /* the load-balancing loss's coefficient (router_aux_loss_coef with output_router_logits; 0: none) */
  double *acnt, *aprob; /* (E) host: the micro-batch's slots and probability sums per expert over its layers */
  float *hprob;         /* (N, E) host: a layer's probabilities, read back for aprob */
  float *gp;            /* (E) backend: the aux loss's gradient of every probability (moe_route_bwd) */
  struct sl_moe_route *rt; /* the routing options' state (models/llama_moe.c; NULL without a backend) */
  float eps;
  float *inv_freq;  /* (hd/2) backend memory: the RoPE frequencies (models/rope.h), B > 0 */
  float *inv_freq_local; /* (hd/2) Gemma 3's sliding layers' (rope_local_base_freq), else NULL */
  float scale;      /* attention's softmax scale (sl_rope_score_scale) */
  int sp;           /* sequence parallelism (rows n = N/T of the stream per rank) */
  int gemma;        /* Gemma 2: (1 + w) norms, post-attention / post-feedforward norms, GeGLU */
  float softcap;    /* attention-logit softcap (Gemma 2), 0: none */
  int plus_one;     /* Gemma: the norms multiply by 1 + w (0 under SL_TEST_GEMMA_OFF=plus_one) */
  int no_post;      /* SL_TEST_GEMMA_OFF=post_norms: Gemma's post norms are the identity (a test hook) */
  float *w1;        /* (4C + qkn) Gemma: the (1 + w) weights of the block's four norms, then
                       Gemma 3's q/k norms' (workspace) */
  float *dpost;     /* (N, C) Gemma: a post-norm's input gradient (workspace) */
  int64_t n;        /* token rows of the residual stream on this rank: N, or N/T under sp */
  /* backward scratch (workspace), besides the skeleton's dres, dln, xl */
  float *dh;    /* (N, I) */
  float *dgu;   /* (N, 2I) */
  float *dsgu;  /* (N, gw Is) the shared expert's gate|up gradient; sy (N, C) its output (a MoE layer's forward) */
  float *sy;
  float *datt;  /* (N, A) */
  float *dqkv;  /* (N, Q) */
  float *gnorm; /* (2, C) under sp: the micro-batch's part of ln1's, ln2's weight gradient */
  float *dyp, *dxp, *dwts, *dlogits; /* MoE: (N*k, C), (N*k, C), (N*k), (N, E) */
  float *dyr, *dxr;                  /* MoE under EP: (EP*N*k, C) the received rows' gradients (EP = 1: dyp, dxp) */
  int64_t *ecnt;                     /* (2 * EP * E/EP + 2 * EP) host: rows per (peer, local expert) sent and
                                        received, then rows per peer sent and received */
  float *dqn;   /* (N, Q) qk_norm: the gradient of q|k|v after the norms (before: dqkv) */
  float *gqk;   /* (2, hd) qk_norm under TP: the micro-batch's part of the q/k norms' weight gradient */
  float *zhd;   /* (hd) qk_norm: zeros (a norm of weight 0 zeroes the q/k heads of dqkv) */
  float *rjunk; /* (N) qk_norm: that zeroing norm's discarded rstd */
  /* the projections (models/linear.h): q|k|v, o_proj, gate|up, down_proj; MoE: the router, an expert's
   * gate|up and down (Mixtral's w1|w3 and w2) */
  sl_lin lqkv, lo, lgu, ldown, lrouter, legu, ledown, lsgu, lsdown; /* ..., the shared expert's */
  /* hybrids: each layer's parts (LP_*, (L) host; NULL: both on every layer), the MLP's activation */
  unsigned char *parts;
  int relu2;   /* up_proj -> relu^2 -> down_proj (Nemotron-H), no gate */
  int64_t gw;  /* the rows of gate|up per MLP channel: 2, or 1 (relu2: up alone) */
  int no_rope; /* attention without RoPE (Nemotron-H) */
  const char *pre; /* the layers' tensor prefix ("model.layers", "backbone.layers") */
  int64_t div;     /* decoder layers per HF layer (Granite 4.0-H: 2; names take layer l / div) */
  const char *n_ln1, *n_ln2; /* the norms of an attention part and of an MLP part ("input_layernorm.weight", ...) */
  const char *m_att, *m_mlp; /* their modules ("self_attn", "mlp"; Nemotron-H "mixer"; Granite's "shared_mlp") */
  int packed_gu;   /* gate | up stored as one HF tensor <m_mlp>.input_linear, down as output_linear (Granite) */
  float rmult;     /* a part's output times this before its residual add (Granite's residual_multiplier; 1: none) */
} llama_priv;

/* parameter views of a block's flat buffer */
typedef struct {
  const float *ln1, *wqkv, *bqkv, *wo, *bo, *qn, *kn, *ln2, *wgu, *bgu, *wd, *bd; /* the optional ones NULL when absent */
  const float *wr; /* MoE: the router (E, C) after ln2, then expert e's gate|up and down at wgu + e * 3*I*C (NULL: dense) */
  const float *lnpa, *lnpf; /* Gemma's post-attention and post-feedforward norms, else NULL */
} blockw;

/* A layer's parts (p->parts): attention and MLP sub-layers, each norm -> mixer -> residual. Every family's layers
 * have both but a hybrid's (Nemotron-H: '*' attention alone, '-' MLP alone; models/model.c). */
enum { LP_ATTN = 1, LP_MLP = 2, LP_BOTH = 3 };
/* Layer l's parts (l < 0: the union, for buffers any layer may use). */
static inline int llama_parts(const llama_priv *p, int64_t l) { return l < 0 || !p->parts ? LP_BOTH : p->parts[l]; }
/* Whether layer l's MLP part is the mixture of experts (l < 0: any layer's). */
static inline int llama_moe_at(const llama_priv *p, int64_t l) { return p->E && (l < 0 || !p->moel || p->moel[l]); }
/* The width of layer l's dense MLP: the dense one's, or a MoE layer's shared expert's (0: none). */
static inline int64_t llama_ffn_width(const llama_priv *p, int64_t l) { return llama_moe_at(p, l) ? p->Is : p->I; }

static inline blockw block_views(const llama_priv *p, const float *flat, int64_t l) {
  blockw w = {0};
  int64_t C = p->C;
  int parts = llama_parts(p, l);
  const float *q = flat;
  if (parts & LP_ATTN) {
    w.ln1 = q;
    w.wqkv = q += C;
    w.bqkv = p->qb ? q + p->Q * C : NULL;
    w.wo = q += p->Q * C + p->qb;
    w.bo = p->ob ? q + C * p->A : NULL;
    q += C * p->A + p->ob;
    w.qn = p->qkn ? q : NULL;
    w.kn = p->qkn ? q + p->hd : NULL;
    q += p->qkn;
    w.lnpa = p->gemma ? q : NULL; /* Gemma: ln2 is pre_feedforward_layernorm */
    q += p->gemma ? C : 0;
  }
  if (parts & LP_MLP) { /* a MoE layer: the router, then its shared expert (if any) as the dense MLP's views */
    int moe = llama_moe_at(p, l);
    int64_t I = llama_ffn_width(p, l), mb = p->mbias && I ? p->gw * I : 0, db = I ? p->db : 0;
    w.ln2 = q;
    w.wr = moe ? q + C : NULL;
    w.wgu = q += C + (moe ? p->E * C : 0);
    w.bgu = mb ? q + p->gw * I * C : NULL;
    w.wd = q += p->gw * I * C + mb;
    w.bd = db ? q + C * I : NULL;
    w.lnpf = p->gemma ? q + C * I + db : NULL;
  }
  return w;
}

/* The block's kept activations of layer l in the selected set. */
static inline layer_acts *llama_layer(const sl_model *m, int l) { return sl_dec_layer(m, l); }
/* A replicated k/v slice's gradient (weights and biases of the gradient
 * views g) summed over the TP ranks sharing it (models/llama.c). */
void sl_llama_kv_grad_begin(sl_model *m, const blockw *g);
int sl_llama_kv_grad_sum(sl_model *m, const blockw *g);
/* The mixture-of-experts MLP (models/llama_moe.c; p->E > 0). */
int sl_llama_moe_fwd(sl_model *m, llama_priv *p, int l, layer_acts *a, const blockw *w, float *out);
int64_t sl_llama_moe_load(sl_model *m, int64_t *out);
int sl_llama_moe_loss_term(sl_model *m);
int sl_llama_moe_init(sl_model *m, llama_priv *p);
void sl_llama_moe_free(sl_model *m, llama_priv *p);
int64_t sl_llama_moe_stats(sl_model *m, double *out);
int sl_llama_moe_bias_step(sl_model *m, const int64_t *load);
float *sl_llama_moe_bias(sl_model *m, int64_t *n);
int sl_llama_moe_bias_set(sl_model *m, const float *b);
int sl_llama_moe_bwd(sl_model *m, llama_priv *p, int l, const layer_acts *a, const blockw *w, const blockw *g,
                     const float *dout, float *dln);
/* Its split halves (models/llama_split.c): the input half keeps in stash (sl_llama_moe_stash_numel floats)
 * what the weight half's dW GEMMs read, which then add the bits sl_llama_moe_bwd adds. */
int64_t sl_llama_moe_stash_numel(const sl_model *m, const llama_priv *p);
int sl_llama_moe_bwd_input(sl_model *m, llama_priv *p, int l, const layer_acts *a, const blockw *w,
                           const float *dout, float *dln, float *stash);
int sl_llama_moe_bwd_weight(sl_model *m, llama_priv *p, int l, const layer_acts *a, const blockw *w, const blockw *g,
                            const float *stash);
/* Rows of the experts' buffers (received rows, gate|up, h, outputs, their
 * gradients): N k at EP 1; under EP the most a rank can receive, EP N k, or
 * E cap with a capacity (each EP rank sends an expert at most cap rows). */
int64_t sl_llama_moe_rows(const sl_model *m, const llama_priv *p);
int sl_llama_moe_alloc_layer(sl_model *m, llama_priv *p, layer_acts *a);
int sl_llama_moe_alloc_scratch(sl_model *m, llama_priv *p);
int sl_llama_moe_spec(sl_model *m, sl_unit_spec *b, int64_t l, float std);
int sl_llama_moe_has_experts(const sl_model *m, int64_t l);
int sl_llama_moe_experts_spec(sl_model *m, sl_unit_spec *u, int64_t l);
/* Qwen3's q/k norms (models/llama.c). Forward: a->qkr keeps q|k|v, the
 * q/k heads of a->qkv are normalised. Input half: dqkv (after RoPE's
 * backward) is copied to dy (N, Q) and becomes the gradient before the
 * norms; weight half: the norms' weight gradients from dy into g.qn, g.kn
 * (summed over TP: each rank's heads are a part). */
void sl_llama_qk_norm_bwd_input(sl_model *m, const layer_acts *a, const blockw *w, float *dy);
int sl_llama_qk_norm_bwd_weight(sl_model *m, const layer_acts *a, const blockw *w, const blockw *g, const float *dy);
/* Layer l's attention window (0: full causal) and RoPE table. */
int64_t sl_llama_layer_window(const llama_priv *p, int l);
const float *sl_llama_layer_freq(const llama_priv *p, int l);
/* The q/k norms' weights (2*hd): w->qn, or Gemma 3's 1 + w (in p->w1). */
const float *sl_llama_qk_norm_w(sl_model *m, const llama_priv *p, const blockw *w);
/* The weight a norm multiplies by: w, or Gemma's 1 + w in slot `slot` of p->w1. */
const float *sl_llama_norm_w(sl_model *m, const llama_priv *p, const float *w, int slot);
/* dout times p->rmult (Granite's residual multiplier; dout itself when 1), in d->dln (models/llama.c). */
const float *sl_llama_rmult_grad(sl_model *m, const llama_priv *p, const float *dout);
/* The split backward's block halves (models/llama_split.c): sl_block_kind's. */
int64_t sl_llama_stash_numel(const sl_model *m);
int sl_llama_bwd_input(sl_model *m, int l, const float *flat, float *stash);
int sl_llama_bwd_weight(sl_model *m, int l, const float *flat, float *grads, const float *stash);

#endif /* SL_LLAMA_INTERNAL_H */
