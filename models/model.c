/* models/model.c — architecture-independent model plumbing: the registry
 * of architectures (sl_arch -> block kind, models/decoder.h) and their
 * capabilities, unit spec building, deterministic initialisation, loading
 * from and saving to HF safetensors one unit at a time. */
#include "models/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "formats/savedir.h"
#include "models/decoder.h"
#include "models/linear.h"
#include <errno.h>
#include <sys/stat.h>

int sl_unit_add(sl_unit_spec *u, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int decay,
                sl_init_kind init, float std) {
  if (u->ntensors == u->cap) { /* grow the list: doubling, from 8 rows */
    int cap = u->cap ? 2 * u->cap : 8;
    sl_tensor_spec *nt = realloc(u->t, sizeof *nt * (size_t)cap);
    if (!nt) return sl_fail(SL_ENOMEM, "out of memory for tensor %d (%s) of unit %s", u->ntensors, name, u->kind);
    u->t = nt;
    u->cap = cap;
  }
  sl_tensor_spec *t = &u->t[u->ntensors++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  t->shape[0] = d0;
  t->shape[1] = ndim > 1 ? d1 : 1;
  t->shape[2] = ndim > 2 ? d2 : 1;
  t->numel = t->shape[0] * t->shape[1] * t->shape[2];
  t->offset = u->numel;
  t->decay = decay;
  t->init = init;
  t->std = std;
  t->split = SL_SPLIT_NONE;
  t->split_dim = -1;
  for (int d = 0; d < 3; d++) t->full[d] = t->shape[d];
  t->tp_replicas = 1; /* T for a whole tensor at T > 1: set by sl_model_create_full */
  t->tp_stack = 1;
  u->numel += t->numel;
  return SL_OK;
}

void sl_unit_slab(sl_unit_spec *u, int64_t slab, int64_t slabs) {
  sl_tensor_spec *t = &u->t[u->ntensors - 1];
  t->slab = slab;
  t->slabs = slabs;
}

const char *sl_tensor_hf_name(const sl_tensor_spec *t, char *buf, size_t cap) {
  const char *br = t->slabs ? strrchr(t->name, '[') : NULL;
  snprintf(buf, cap, "%.*s", br ? (int)(br - t->name) : (int)strlen(t->name), t->name);
  return buf;
}

int sl_unit_slab_members(const sl_unit_spec *u, int i, int *idx) {
  const sl_tensor_spec *t0 = &u->t[i];
  char a[SL_TENSOR_NAME_MAX], b[SL_TENSOR_NAME_MAX];
  sl_tensor_hf_name(t0, a, sizeof a);
  for (int64_t s = 0; s < t0->slabs; s++) idx[s] = -1;
  for (int k = 0; k < u->ntensors; k++) {
    const sl_tensor_spec *t = &u->t[k];
    if (t->slabs != t0->slabs || strcmp(sl_tensor_hf_name(t, b, sizeof b), a)) continue;
    if (t->slab < 0 || t->slab >= t0->slabs || idx[t->slab] >= 0)
      return sl_fail(SL_EINTERNAL, "unit %s: fused tensor '%s': slab %lld out of range or repeated", u->kind, a,
                     (long long)t->slab);
    idx[t->slab] = k;
  }
  for (int64_t s = 0; s < t0->slabs; s++)
    if (idx[s] < 0)
      return sl_fail(SL_EINTERNAL, "unit %s: fused tensor '%s': slab %lld of %lld missing", u->kind, a, (long long)s,
                     (long long)t0->slabs);
  return SL_OK;
}

void sl_unit_free(sl_unit_spec *u) {
  free(u->t);
  u->t = NULL;
  u->ntensors = u->cap = 0;
  u->numel = 0;
}

int sl_unit_add_split(const sl_model *m, sl_unit_spec *u, const char *name, int ndim, int64_t d0, int64_t d1, int decay,
                      sl_init_kind init, float std, sl_split split, int64_t parts) {
  if (split == SL_SPLIT_NONE || m->tp_size == 1) /* the whole tensor */
    return sl_unit_add(u, name, ndim, d0, d1, 0, decay, init, std);
  int dim = split == SL_SPLIT_ROW ? ndim - 1 : 0;
  int64_t full[2] = {d0, d1}, local[2] = {d0, d1};
  int replicas = m->tp_size / (int)parts;
  local[dim] = (full[dim] + parts - 1) / parts; /* VOCAB pads to a multiple of parts; the others divide */
  int rc = sl_unit_add(u, name, ndim, local[0], local[1], 0, decay, init, std);
  if (rc) return rc;
  sl_tensor_spec *t = &u->t[u->ntensors - 1];
  t->split = split;
  t->split_dim = dim;
  t->full[0] = d0;
  t->full[1] = ndim > 1 ? d1 : 1;
  t->tp_off = (int64_t)(m->tp_rank / replicas) * local[dim];
  t->tp_replicas = replicas;
  return SL_OK;
}

int sl_unit_add_stacked(const sl_model *m, sl_unit_spec *u, const char *name, int ndim, int64_t d0, int64_t d1,
                        int64_t d2, int decay, sl_init_kind init, float std, int64_t stacks) {
  int64_t T = m->tp_size;
  int rc = sl_unit_add(u, name, ndim, T > 1 ? d0 / T : d0, d1, d2, decay, init, std);
  if (rc || T == 1) return rc;
  sl_tensor_spec *t = &u->t[u->ntensors - 1];
  t->split = SL_SPLIT_COL;
  t->split_dim = 0;
  t->full[0] = d0;
  t->tp_off = m->tp_rank * (d0 / (stacks * T));
  t->tp_stack = (int)stacks;
  t->tp_size = (int)T;
  for (int s = 0; s < stacks && s < SL_TP_PARTS_MAX; s++) t->tp_part[s] = d0 / stacks, t->tp_part_rep[s] = 1;
  return SL_OK;
}

int sl_unit_add_parts(const sl_model *m, sl_unit_spec *u, const char *name, int ndim, const int64_t *parts,
                      const int *reps, int nparts, int64_t d1, int64_t d2, int decay, sl_init_kind init, float std) {
  int64_t T = m->tp_size, d0 = 0, local = 0;
  if (nparts < 1 || nparts > SL_TP_PARTS_MAX)
    return sl_fail(SL_EINPUT, "tensor %s: %d stacked parts (1..%d)", name, nparts, SL_TP_PARTS_MAX);
  for (int s = 0; s < nparts; s++) {
    int rep = reps ? reps[s] : 1;
    if (rep < 1 || T % rep || (s == 0 && rep != 1) || parts[s] % (T / rep))
      return sl_fail(SL_EINTERNAL, "tensor %s: part %d (%lld rows) cannot be split over %lld TP ranks in %d copies",
                     name, s, (long long)parts[s], (long long)T, rep);
    d0 += parts[s];
    local += parts[s] / (T / rep);
  }
  int rc = sl_unit_add(u, name, ndim, T > 1 ? local : d0, d1, d2, decay, init, std);
  if (rc || T == 1) return rc;
  sl_tensor_spec *t = &u->t[u->ntensors - 1];
  t->split = SL_SPLIT_COL;
  t->split_dim = 0;
  t->full[0] = d0;
  t->tp_off = m->tp_rank * (parts[0] / T);
  t->tp_stack = nparts;
  t->tp_size = (int)T;
  for (int s = 0; s < nparts; s++) t->tp_part[s] = parts[s], t->tp_part_rep[s] = reps ? reps[s] : 1;
  return SL_OK;
}

/* ---- the registry: each architecture's block kinds on the decoder skeleton ---- */
static const struct {
  sl_arch arch;
  const sl_block_kind *kind;  /* every layer's, or a hybrid's layers that are not other's */
  const sl_block_kind *other; /* a hybrid's second kind (NULL: none) */
  const char *other_layers;   /* the letters of cfg.layer_pattern that are other's layers */
} arch_kinds[] = {
    {SL_ARCH_LLAMA, &sl_llama_block, NULL, NULL},
    {SL_ARCH_MISTRAL, &sl_llama_block, NULL, NULL},
    {SL_ARCH_QWEN2, &sl_llama_block, NULL, NULL}, /* Llama with q/k/v biases (cfg.qkv_bias) */
    {SL_ARCH_GRANITE, &sl_llama_block, NULL, NULL}, /* Llama with the muP multipliers (cfg.embedding_mult, ...) */
    {SL_ARCH_QWEN3, &sl_llama_block, NULL, NULL}, /* Llama with q/k norms (cfg.qk_norm), attention_bias */
    {SL_ARCH_MIXTRAL, &sl_llama_block, NULL, NULL},   /* Llama attention, a sparse MLP of experts (cfg.moe_experts) */
    {SL_ARCH_QWEN3_MOE, &sl_llama_block, NULL, NULL}, /* Qwen3's attention, the sparse MLP (norm_topk_prob) */
    {SL_ARCH_GEMMA2, &sl_llama_block, NULL, NULL}, /* the Gemma options (cfg.gemma) */
    {SL_ARCH_GEMMA3, &sl_llama_block, NULL, NULL}, /* the Gemma options with q/k norms, two RoPE tables */
    {SL_ARCH_MAMBA, &sl_mamba_block, NULL, NULL},
    {SL_ARCH_MAMBA2, &sl_mamba2_block, NULL, NULL}, /* Mamba-2 (models/mamba2.c) */
    /* Nemotron-H: '*' (attention) and '-' (MLP) layers are Llama's sub-layers alone (models/llama.c: a
       layer's parts), 'M' layers Mamba-2's */
    {SL_ARCH_NEMOTRON_H, &sl_llama_block, &sl_mamba2_block, "M"},
    /* Granite 4.0-H: each HF layer two decoder layers, a mixer ('M' Mamba-2 or '*' attention) and '-' its MLP */
    {SL_ARCH_GRANITE_H, &sl_llama_block, &sl_mamba2_block, "M"},
};

/* cfg's kinds (kinds[0..*nk-1]) and each layer's index among them (lk, L
 * entries; NULL: a single kind needs none); SL_EINPUT for an unknown
 * architecture. Only the kinds some layer uses. */
static int arch_layout(const sl_model_config *cfg, const sl_block_kind **kinds, int *nk, unsigned char *lk) {
  for (size_t i = 0; i < sizeof arch_kinds / sizeof arch_kinds[0]; i++) {
    if (arch_kinds[i].arch != cfg->arch) continue;
    *nk = 0;
    int which[2] = {-1, -1};
    for (int64_t l = 0; l < cfg->num_hidden_layers || (l == 0 && !arch_kinds[i].other); l++) {
      int o = arch_kinds[i].other && l < cfg->num_hidden_layers && cfg->layer_pattern[l] &&
              strchr(arch_kinds[i].other_layers, cfg->layer_pattern[l]);
      if (which[o] < 0) {
        which[o] = (*nk)++;
        kinds[which[o]] = o ? arch_kinds[i].other : arch_kinds[i].kind;
      }
      if (lk && l < cfg->num_hidden_layers) lk[l] = (unsigned char)which[o];
    }
    return SL_OK;
  }
  return sl_fail(SL_EINPUT, "unsupported architecture '%s'", cfg->arch_name);
}

int sl_model_caps_of(const sl_model_config *cfg, sl_model_caps *out) {
  const sl_block_kind *kinds[SL_DEC_MAX_KINDS];
  int nk = 0;
  memset(out, 0, sizeof *out);
  int rc = arch_layout(cfg, kinds, &nk, NULL);
  for (int k = 0; k < nk && !rc; k++) {
    sl_model_caps kc;
    kinds[k]->caps(cfg, &kc);
    sl_dec_caps_merge(out, &kc, k == 0);
  }
  return rc;
}

int sl_model_create_specs(const sl_model_config *cfg, sl_model **out) {
  return sl_model_create(cfg, NULL, NULL, 0, 0, SL_AC_NONE, out);
}

int sl_model_create(const sl_model_config *cfg, const sl_ops *ops, sl_kctx *k, int64_t B, int64_t T, sl_actckpt ac,
                    sl_model **out) {
  return sl_model_create_full(cfg, ops, k, B, T, ac, 0, 1, 0, NULL, 0, out);
}

int sl_model_boundary(sl_model *m, int u, float **act, float **grad, int64_t *n) {
  if (u < 1 || u >= m->nunits || !m->vt->boundary || m->nacts < 1)
    return sl_fail(SL_EINPUT, "model boundary: unit %d has no residual-stream input (units 1..%d)", u, m->nunits - 1);
  return m->vt->boundary(m, u, act, grad, n);
}

int sl_model_create_full(const sl_model_config *cfg, const sl_ops *ops, sl_kctx *k, int64_t B, int64_t T, sl_actckpt ac,
                         int tp_rank, int tp_size, int sp, const unsigned char *local, int nlocal, sl_model **out) {
  const sl_model_layout lay = {tp_rank, tp_size, sp, local, nlocal, 0, 1, 0, 0};
  return sl_model_create_layout(cfg, ops, k, B, T, ac, &lay, out);
}

/* Companion units (a MoE layer's experts) follow the stage flag of the unit that computes them. */
static int copy_local(sl_model *m, const unsigned char *local, int nlocal) {
  if (!(m->local = malloc((size_t)m->nunits))) return sl_fail(SL_ENOMEM, "out of memory creating the model");
  for (int u = 0; u < m->nunits; u++) m->local[u] = local[u < nlocal ? u : m->units[u].companion_of];
  return SL_OK;
}

int sl_model_create_layout(const sl_model_config *cfg, const sl_ops *ops, sl_kctx *k, int64_t B, int64_t T,
                           sl_actckpt ac, const sl_model_layout *lay, sl_model **out) {
  *out = NULL;
  int tp_rank = lay->tp_rank, tp_size = lay->tp_size, sp = lay->sp, nlocal = lay->nlocal;
  const unsigned char *local = lay->local;
  if (lay->ep_size < 1 || lay->ep_rank < 0 || lay->ep_rank >= lay->ep_size)
    return sl_fail(SL_EINPUT, "expert-parallel rank %d of %d is out of range", lay->ep_rank, lay->ep_size);
  if (lay->ep_size > 1 && (!cfg->moe_experts || cfg->moe_experts % lay->ep_size))
    return sl_fail(SL_EINPUT, "--ep %d must divide the number of experts (%s has %lld)", lay->ep_size,
                   cfg->arch_name, (long long)cfg->moe_experts);
  sp = sp && tp_size > 1;
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size)
    return sl_fail(SL_EINPUT, "tensor-parallel rank %d of %d is out of range", tp_rank, tp_size);
  if (sp && B > 0 && (B * T) % tp_size)
    return sl_fail(SL_EINPUT,
                   "--sequence-parallel splits the micro-batch's tokens over the TP ranks: --micro-batch "
                   "%lld x --seq-len %lld = %lld tokens is not divisible by --tp %d",
                   (long long)B, (long long)T, (long long)(B * T), tp_size);
  if (local && nlocal < cfg->num_hidden_layers + 2)
    return sl_fail(SL_EINPUT, "model stage: %d unit flags for a model of %lld units", nlocal,
                   (long long)cfg->num_hidden_layers + 2);
  if (B < 0 || T < 0 || (B == 0) != (T == 0))
    return sl_fail(SL_EINPUT, "micro-batch (%lld) and seq-len (%lld) must be >= 1", (long long)B, (long long)T);
  sl_model *m = calloc(1, sizeof *m);
  if (!m) return sl_fail(SL_ENOMEM, "out of memory creating the model");
  m->cfg = *cfg;
  m->ops = ops;
  m->k = k;
  m->B = B;
  m->T = T;
  m->ac = ac;
  m->tp_rank = tp_rank;
  m->tp_size = tp_size;
  m->sp = sp;
  m->ep_rank = lay->ep_rank;
  m->ep_size = lay->ep_size;
  m->act_bf16 = lay->act_bf16;
  m->res_bf16 = lay->res_bf16; /* and the kind's caps.bf16_stream: sl_decoder_create */
  m->access.tp = sl_tp_single();
  m->access.ep = (sl_ep_group){.rank = 0, .size = 1};
  const sl_block_kind *kinds[SL_DEC_MAX_KINDS];
  int nk = 0;
  unsigned char lk[SL_CFG_MAX_LAYERS];
  /* the unit specs first (the stage flags cover the companion units too), then the activations */
  int rc = cfg->num_hidden_layers > SL_CFG_MAX_LAYERS
               ? sl_fail(SL_EINPUT, "num_hidden_layers %lld is over %d", (long long)cfg->num_hidden_layers,
                         SL_CFG_MAX_LAYERS)
               : arch_layout(cfg, kinds, &nk, lk);
  if (!rc) rc = sl_decoder_create(m, kinds, nk, nk > 1 ? lk : NULL);
  if (!rc && local) rc = copy_local(m, local, nlocal);
  if (!rc && B > 0) rc = sl_decoder_buffers(m);
  if (!rc && B > 0) { /* set 0, allocated by the constructor */
    if (!(m->batches = calloc(1, sizeof *m->batches))) rc = sl_fail(SL_ENOMEM, "out of memory creating the model");
    m->nacts = 1;
  }
  if (rc) {
    sl_model_destroy(m);
    return rc;
  }
  for (int u = 0; u < m->nunits; u++) /* a whole tensor is held by every TP rank */
    for (int i = 0; i < m->units[u].ntensors; i++)
      if (m->units[u].t[i].split == SL_SPLIT_NONE) m->units[u].t[i].tp_replicas = tp_size;
  *out = m;
  return SL_OK;
}

int sl_model_set_nacts(sl_model *m, int n) {
  if (m->nacts < 1) return sl_fail(SL_EINPUT, "activation sets: the model was built without activations (specs only)");
  if (n < 1) return sl_fail(SL_EINPUT, "activation sets: %d requested; expected >= 1", n);
  if (n <= m->nacts) return SL_OK;
  sl_act_batch *nb = realloc(m->batches, sizeof *nb * (size_t)n);
  if (!nb) return sl_fail(SL_ENOMEM, "out of memory for %d activation sets", n);
  m->batches = nb;
  for (; m->nacts < n; m->nacts++) {
    memset(&m->batches[m->nacts], 0, sizeof *nb);
    int rc = m->vt->alloc_acts(m, m->nacts);
    if (rc) return sl_fail_ctx(rc, "allocating activation set %d of %d", m->nacts, n);
  }
  return SL_OK;
}

int sl_model_use_acts(sl_model *m, int set) {
  if (set < 0 || set >= m->nacts)
    return sl_fail(SL_EINTERNAL, "activation set %d selected; the model holds %d", set, m->nacts);
  if (set == m->act) return SL_OK;
  m->batches[m->act] = (sl_act_batch){m->tokens, m->targets, m->seg, m->loss_scale, m->loss_sum};
  const sl_act_batch *b = &m->batches[set];
  m->tokens = b->tokens;
  m->targets = b->targets;
  m->seg = b->seg;
  m->loss_scale = b->loss_scale;
  m->loss_sum = b->loss_sum;
  m->act = set;
  m->vt->use_acts(m, set);
  return SL_OK;
}

static float *model_buf(sl_model *m, int64_t n, sl_arena arena, int bf16);
float *sl_model_buf(sl_model *m, int64_t n, sl_arena arena) { return model_buf(m, n, arena, 0); }
float *sl_model_buf_bf16(sl_model *m, int64_t n, sl_arena arena) { return model_buf(m, n, arena, 1); }

/* The live layer of bf16 storage (m->rec set, models/decoder.c) is the
 * working set of the block being computed, not kept: workspace. */
static float *model_buf(sl_model *m, int64_t n, sl_arena arena, int bf16) {
  if (m->nbufs == m->capbufs) {
    int nc = m->capbufs ? m->capbufs * 2 : 64;
    void **nb = realloc(m->bufs, sizeof(void *) * (size_t)nc);
    if (!nb) return NULL;
    m->bufs = nb;
    m->capbufs = nc;
  }
  float *x = m->ops->alloc(m->k, (size_t)n * 4);
  if (!x) return NULL;
  m->bufs[m->nbufs++] = x;
  if (m->rec && arena == SL_ARENA_ACTS) {
    if (sl_buf_recs_add(m->rec, x, n, bf16)) return NULL;
    arena = SL_ARENA_WORKSPACE;
  }
  sl_mem_add(arena, n * 4);
  m->buf_bytes[arena == SL_ARENA_ACTS ? 0 : 1] += n * 4;
  if (arena == SL_ARENA_ACTS) m->act_bytes += n * 4;
  return x;
}

void sl_model_destroy(sl_model *m) {
  if (!m) return;
  if (m->vt && m->vt->destroy) m->vt->destroy(m);
  for (int i = 0; i < m->nbufs; i++) m->ops->free(m->k, m->bufs[i]);
  sl_mem_sub(SL_ARENA_ACTS, m->buf_bytes[0]);
  sl_mem_sub(SL_ARENA_WORKSPACE, m->buf_bytes[1]);
  free(m->bufs);
  for (int u = 0; m->units && u < m->nunits; u++) sl_unit_free(&m->units[u]);
  free(m->units);
  free(m->pinned);
  free(m->batches);
  free(m->local);
  free(m);
}

void sl_model_set_batch(sl_model *m, const int32_t *tokens, const int32_t *targets, float loss_scale) {
  m->tokens = tokens;
  m->targets = targets;
  m->loss_scale = loss_scale;
  m->loss_sum = 0.0;
}

void sl_model_set_loss_slot(sl_model *m, int slot) {
  m->loss_dev = slot >= 0;
  m->loss_slot = slot;
}

void sl_model_loss_add(sl_model *m, const float *losses, int64_t n) {
  if (m->loss_dev) m->ops->scalar_acc(m->k, m->loss_slot, losses, n, 0);
  else m->loss_sum += m->ops->sum(m->k, losses, n);
}

void sl_model_loss_add_value(sl_model *m, double v) {
  if (m->loss_dev) m->ops->scalar_add(m->k, m->loss_slot, v);
  else m->loss_sum += v;
}

int64_t sl_model_num_params(const sl_model *m) {
  int64_t n = 0;
  for (int u = 0; u < m->nunits; u++) n += m->units[u].numel;
  return n;
}

int64_t sl_model_max_unit_numel(const sl_model *m) {
  int64_t n = 0;
  for (int u = 0; u < m->nunits; u++)
    if (m->units[u].numel > n) n = m->units[u].numel;
  return n;
}

/* ---- the shared LM head unit ------------------------------------------------ */
int sl_lm_head_spec(sl_model *m, const char *norm_name, int64_t C, int64_t V, int tied, sl_init_kind head_init,
                    float std) {
  return sl_lm_head_spec_split(m, norm_name, C, V, tied, head_init, std, SL_SPLIT_NONE);
}

int sl_lm_head_spec_split(sl_model *m, const char *norm_name, int64_t C, int64_t V, int tied, sl_init_kind head_init,
                          float std, sl_split split) {
  sl_unit_spec *h = &m->units[sl_model_head_unit(m)];
  snprintf(h->kind, sizeof h->kind, "head");
  h->layer = -1;
  int rc = sl_unit_add(h, norm_name, 1, C, 0, 0, 0, SL_INIT_ONES, std);
  if (rc) return rc;
  if (!tied) return sl_unit_add_split(m, h, "lm_head.weight", 2, V, C, 1, head_init, std, split, m->tp_size);
  m->pinned[0] = 1;
  return SL_OK;
}

float **sl_model_stream(sl_model *m, int64_t L, int64_t C, float *const *live) {
  float **s = calloc((size_t)(L + 1), sizeof(float *));
  if (!s) return NULL;
  for (int64_t l = 0; l <= L; l++) {
    if (live && (s[l] = live[l])) continue;
    /* stream[l] is unit l's output and unit l+1's input: not kept when
     * neither is computed here (another pipeline stage's) */
    if (m->local && !m->local[l] && !m->local[l + 1]) continue;
    if (!(s[l] = sl_model_buf(m, m->B * m->T / (m->sp ? m->tp_size : 1) * C, SL_ARENA_ACTS))) {
      free(s);
      return NULL;
    }
  }
  return s;
}

sl_act_set *sl_act_set_new(sl_model *m, sl_act_set **sets, int *nsets, int set, int64_t L, int64_t C, size_t layer_size,
                           float *const *live) {
  sl_act_set *ns = realloc(*sets, sizeof *ns * (size_t)(set + 1));
  if (!ns) return NULL;
  *sets = ns;
  *nsets = set + 1;
  sl_act_set *a = &ns[set];
  memset(a, 0, sizeof *a);
  a->stream = sl_model_stream(m, L, C, live);
  a->layers = calloc((size_t)L, layer_size);
  return a->stream && a->layers ? a : NULL;
}

void sl_act_sets_free(sl_act_set *sets, int nsets) {
  for (int i = 0; i < nsets; i++) {
    free(sets[i].stream);
    free(sets[i].layers);
  }
  free(sets);
}

int sl_lm_head_init(sl_model *m, sl_lm_head *h, int64_t C, int64_t V, float eps, int tied, int unit) {
  h->N = m->B * m->T;
  h->C = C;
  h->V = V;
  h->eps = eps;
  h->tied = tied;
  h->unit = unit;
  h->softcap = 0.0f; /* Gemma's options: the caller sets them after init */
  h->w1 = NULL;
  h->lscale = 0.0f;
  if (!(h->lnf = sl_model_buf(m, h->N * C, SL_ARENA_ACTS)) || !(h->rstdf = sl_model_buf(m, h->N, SL_ARENA_ACTS)) ||
      !(h->lse = sl_model_buf(m, h->N, SL_ARENA_ACTS)) || !(h->losses = sl_model_buf(m, h->N, SL_ARENA_ACTS)))
    return SL_ENOMEM;
  return SL_OK;
}

static int head_weight(sl_model *m, const sl_lm_head *h, const float *flat, const float **W) {
  if (!h->tied) {
    *W = flat + h->C;
    return SL_OK;
  }
  return m->access.params(m->access.user, 0, W);
}

void sl_lm_head_lscale(sl_model *m, const sl_lm_head *h, float *v, int64_t rows) {
  if (h->lscale > 0) m->ops->scale_add(m->k, v, h->lscale, 0.0f, rows * h->C);
}

const float *sl_lm_head_norm_w(sl_model *m, const sl_lm_head *h, const float *flat) {
  if (!h->w1) return flat;
  m->ops->copy(m->k, h->w1, flat, (size_t)h->C * 4);
  m->ops->scale_add(m->k, h->w1, 1.0f, 1.0f, h->C);
  return h->w1;
}

int sl_lm_head_fwd(sl_model *m, sl_lm_head *h, const float *flat, const float *x) {
  const float *W;
  int rc = head_weight(m, h, flat, &W);
  if (rc) return rc;
  m->ops->rmsnorm_fwd(m->k, h->lnf, h->rstdf, x, sl_lm_head_norm_w(m, h, flat), h->N, h->C, h->C, h->eps);
  sl_lm_head_lscale(m, h, h->lnf, h->N);
  m->ops->lmhead_ce_fwd(m->k, h->losses, h->lse, h->lnf, W, m->targets, h->N, h->C, h->V, h->softcap);
  sl_model_loss_add(m, h->losses, h->N);
  return SL_OK;
}

int sl_lm_head_bwd(sl_model *m, sl_lm_head *h, const float *flat, float *grads, const float *x, float *dres,
                   float *dln) {
  const float *W;
  float *dW = grads + h->C;
  int rc = head_weight(m, h, flat, &W);
  if (!rc && h->tied) rc = m->access.grads(m->access.user, 0, &dW);
  if (rc) return rc;
  size_t bytes = (size_t)(h->N * h->C) * 4;
  m->ops->zero(m->k, dres, bytes);
  m->ops->zero(m->k, dln, bytes);
  m->ops->lmhead_ce_bwd(m->k, dln, dW, h->lnf, W, m->targets, h->lse, m->loss_scale, h->N, h->C, h->V, h->softcap);
  sl_lm_head_lscale(m, h, dln, h->N);
  m->ops->rmsnorm_bwd(m->k, dres, grads, dln, x, sl_lm_head_norm_w(m, h, flat), h->rstdf, h->N, h->C, h->C);
  return SL_OK;
}

int sl_lm_head_logits(sl_model *m, sl_lm_head *h, float *out) {
  const float *W;
  int rc = m->access.params(m->access.user, h->tied ? 0 : h->unit, &W);
  if (rc) return rc;
  if (!h->tied) W += h->C;
  sl_lin head = sl_lin_one("lm_head", "lm_head", h->C, h->V, SL_LIN_COL);
  sl_lin_fwd(m, &head, out, h->lnf, W, NULL, h->N);
  if (h->softcap > 0) m->ops->softcap(m->k, out, h->softcap, h->N * h->V); /* the logits the loss sees */
  return SL_OK;
}

int sl_actckpt_from_name(const char *name) {
  if (!name) return -1;
  if (!strcmp(name, "none")) return SL_AC_NONE;
  if (!strcmp(name, "selective")) return SL_AC_SELECTIVE;
  if (!strcmp(name, "full")) return SL_AC_FULL;
  return -1;
}

/* ---- deterministic init: one stream per (seed, tensor name) ---------------- */
static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static void init_normal(float *dst, int64_t n, float std, uint64_t seed) {
  uint64_t st = seed;
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = ((sl_splitmix64(&st) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (sl_splitmix64(&st) >> 11) * (1.0 / 9007199254740992.0);
    double r = sqrt(-2.0 * log(u1));
    dst[i] = (float)(r * cos(2.0 * M_PI * u2) * std);
    if (i + 1 < n) dst[i + 1] = (float)(r * sin(2.0 * M_PI * u2) * std);
  }
}

/* Copies this rank's slice [off, off + len) along t->split_dim between the
 * whole tensor (shape t->full) and the slice (shape t->shape), both
 * row-major: to_whole 0 whole -> slice, 1 slice -> whole. A stacked dim 0
 * (tp_stack parts of tp_part[s] each) copies the slot's run of every part,
 * the slot being off / (tp_part[0] / T) (tp_off's definition). */
/* Indices of the slice at off along the split dim that lie inside the whole
 * tensor (fewer than the slice's extent where a padded vocabulary ends). */
static int64_t slice_valid(const sl_tensor_spec *t, int64_t off) {
  int64_t n = t->full[t->split_dim] / t->tp_stack - off, len = t->shape[t->split_dim] / t->tp_stack;
  return n < 0 ? 0 : n < len ? n : len;
}

/* A stacked tensor's part s: the rows of one rank's run of it. */
static int64_t part_run(const sl_tensor_spec *t, int s) { return t->tp_part[s] / (t->tp_size / t->tp_part_rep[s]); }

static void slice_copy(const sl_tensor_spec *t, int64_t off, float *whole, float *slice, int to_whole) {
  int dim = t->split_dim;
  if (t->tp_stack > 1) { /* dim 0 stacks parts of their own extents: the rank's run of each, packed */
    int64_t inner = t->full[1] * t->full[2], T = t->tp_size, rank = off / (t->tp_part[0] / T);
    for (int64_t s = 0, w0 = 0, l0 = 0; s < t->tp_stack; s++) {
      int64_t len = part_run(t, (int)s), slot = rank / t->tp_part_rep[s];
      float *w = whole + (w0 + slot * len) * inner, *p = slice + l0 * inner;
      if (to_whole) memcpy(w, p, (size_t)(len * inner) * 4);
      else memcpy(p, w, (size_t)(len * inner) * 4);
      w0 += t->tp_part[s], l0 += len;
    }
    return;
  }
  int64_t outer = 1, inner = 1, len = t->shape[dim], fdim = t->full[dim], valid = slice_valid(t, off);
  for (int d = 0; d < dim; d++) outer *= t->full[d];
  for (int d = dim + 1; d < t->ndim; d++) inner *= t->full[d];
  for (int64_t o = 0; o < outer && valid > 0; o++) {
    float *w = whole + (o * fdim + off) * inner, *p = slice + o * len * inner;
    if (to_whole) memcpy(w, p, (size_t)(valid * inner) * 4);
    else memcpy(p, w, (size_t)(valid * inner) * 4);
  }
}

static int init_tensor(const sl_model *m, int u, int i, const sl_tensor_spec *t, int64_t numel, float *dst,
                       uint64_t seed) {
  uint64_t s = seed ^ name_hash(t->name);
  switch (t->init) {
  case SL_INIT_NORMAL: init_normal(dst, numel, t->std, s); break;
  case SL_INIT_ONES:
    for (int64_t j = 0; j < numel; j++) dst[j] = 1.0f;
    break;
  case SL_INIT_ZEROS: memset(dst, 0, (size_t)numel * 4); break;
  case SL_INIT_CUSTOM: return m->vt->init_custom((sl_model *)m, u, i, dst, s);
  }
  return SL_OK;
}

/* Reads the box [off, off + len) along dim (dim < 0: all) of t's HF tensor (its slab, for a fused one's). */
static int read_box(const sl_st_set *w, const sl_tensor_spec *t, const int64_t *shape, int dim, int64_t off,
                    int64_t len, float *dst) {
  if (t->slabs) {
    char hf[SL_TENSOR_NAME_MAX];
    return sl_st_read_f32_slab(w, sl_tensor_hf_name(t, hf, sizeof hf), t->slabs, t->slab, t->ndim, shape, dim, off,
                               len, dst);
  }
  if (dim < 0) return sl_st_read_f32(w, t->name, t->ndim, shape, dst);
  return sl_st_read_f32_box(w, t->name, t->ndim, shape, dim, off, len, dst);
}

int sl_model_unit_load(const sl_model *m, int u, const sl_st_set *weights, uint64_t seed, float *flat) {
  const sl_unit_spec *us = &m->units[u];
  for (int i = 0; i < us->ntensors; i++) {
    const sl_tensor_spec *t = &us->t[i];
    float *dst = flat + t->offset;
    int rc;
    if (t->split == SL_SPLIT_NONE) {
      rc = weights ? read_box(weights, t, t->shape, -1, 0, 0, dst) : init_tensor(m, u, i, t, t->numel, dst, seed);
    } else if (weights) {
      /* padding rows of a vocabulary slice stay as the caller zeroed them; a stacked dim (0) is
       * read part by part */
      rc = SL_OK;
      if (t->tp_stack == 1) {
        rc = read_box(weights, t, t->full, t->split_dim, t->tp_off, slice_valid(t, t->tp_off), dst);
      } else {
        int64_t inner = t->full[1] * t->full[2], rank = m->tp_rank;
        for (int64_t s = 0, w0 = 0, l0 = 0; s < t->tp_stack && !rc; w0 += t->tp_part[s], l0 += part_run(t, (int)s), s++)
          rc = read_box(weights, t, t->full, 0, w0 + rank / t->tp_part_rep[s] * part_run(t, (int)s),
                        part_run(t, (int)s), dst + l0 * inner);
      }
    } else { /* the slice of the whole tensor's init */
      int64_t n = t->full[0] * t->full[1] * t->full[2];
      float *whole = sl_alloc((size_t)n * 4, "tensor init");
      rc = whole ? init_tensor(m, u, i, t, n, whole, seed) : SL_ENOMEM;
      if (!rc) slice_copy(t, t->tp_off, whole, dst, 0);
      sl_free(whole);
    }
    if (rc) return rc;
  }
  return SL_OK;
}

/* ---- save ------------------------------------------------------------------ */
typedef struct {
  const sl_model *m;
  sl_unit_fill_fn fill;
  void *ctx;
  int *tensor_unit, *tensor_idx; /* per written tensor (unit -1: layer tensor_idx's expert bias) */
  int cached_unit;
  float *flat;
  const float *moe_bias; /* (L, E) or NULL */
} save_ctx;

/* The whole tensor t from the T ranks' flats of its unit (unit_numel each):
 * each slice from the first rank holding it; the other holders' copies
 * must be the same bits (replicated weights never drift apart). */
static int assemble(const sl_model *m, const sl_tensor_spec *t, const float *flats, int64_t unit_numel, float *dst) {
  int T = m->tp_size;
  for (int r = 0; r < T; r++) {
    const float *mine = flats + (int64_t)r * unit_numel + t->offset;
    int first = r % t->tp_replicas == 0;
    if (t->tp_stack > 1) { /* part by part: each run from the first rank holding it, the others' checked */
      int64_t inner = t->full[1] * t->full[2];
      for (int s = 0, w0 = 0, l0 = 0; s < t->tp_stack; w0 += (int)t->tp_part[s], l0 += (int)part_run(t, s), s++) {
        int rep = t->tp_part_rep[s], r0 = r - r % rep;
        int64_t len = part_run(t, s) * inner;
        const float *run = mine + l0 * inner;
        if (r == r0) memcpy(dst + (w0 + (r / rep) * part_run(t, s)) * inner, run, (size_t)len * 4);
        else if (memcmp(run, flats + (int64_t)r0 * unit_numel + t->offset + l0 * inner, (size_t)len * 4))
          return sl_fail(SL_EINTERNAL,
                         "tensor '%s': the copies TP ranks %d and %d hold of its part %d differ (replicated "
                         "weights drifted apart)",
                         t->name, r0, r, s);
      }
    } else if (first && t->split != SL_SPLIT_NONE) {
      int64_t run = t->tp_stack > 1 ? t->tp_part[0] / (t->full[0] / t->shape[0]) : t->shape[t->split_dim];
      int64_t off = (int64_t)(r / t->tp_replicas) * run;
      slice_copy(t, off, dst, (float *)mine, 1);
    } else if (first) {
      memcpy(dst, mine, (size_t)t->numel * 4);
    } else if (memcmp(mine, flats + (int64_t)(r - r % t->tp_replicas) * unit_numel + t->offset, (size_t)t->numel * 4)) {
      return sl_fail(SL_EINTERNAL,
                     "tensor '%s': the copies TP ranks %d and %d hold differ (replicated "
                     "weights drifted apart)",
                     t->name, r - r % t->tp_replicas, r);
    }
  }
  return SL_OK;
}

int64_t sl_model_unit_whole_numel(const sl_model *m, int u) {
  int64_t n = 0;
  for (int i = 0; i < m->units[u].ntensors; i++) {
    const int64_t *f = m->units[u].t[i].full;
    n += f[0] * f[1] * f[2];
  }
  return n;
}

int sl_model_unit_to_whole(const sl_model *m, int u, const float *flats, float *whole) {
  const sl_unit_spec *us = &m->units[u];
  int rc = SL_OK;
  for (int i = 0; i < us->ntensors && !rc; i++) {
    const sl_tensor_spec *t = &us->t[i];
    rc = assemble(m, t, flats, us->numel, whole);
    whole += t->full[0] * t->full[1] * t->full[2];
  }
  return rc;
}

void sl_model_unit_from_whole(const sl_model *m, int u, const float *whole, float *flat) {
  const sl_unit_spec *us = &m->units[u];
  memset(flat, 0, (size_t)us->numel * 4); /* padding rows of a vocabulary slice */
  for (int i = 0; i < us->ntensors; i++) {
    const sl_tensor_spec *t = &us->t[i];
    if (t->split == SL_SPLIT_NONE) memcpy(flat + t->offset, whole, (size_t)t->numel * 4);
    else slice_copy(t, t->tp_off, (float *)whole, flat + t->offset, 0);
    whole += t->full[0] * t->full[1] * t->full[2];
  }
}

static int save_fill(void *vctx, int64_t index, const sl_st_wtensor *wt, float *dst) {
  save_ctx *sc = vctx;
  int u = sc->tensor_unit[index], ti = sc->tensor_idx[index];
  if (u < 0) { /* an expert bias row (none held: zeros, Nemotron-H's initial bias) */
    if (sc->moe_bias)
      memcpy(dst, sc->moe_bias + (int64_t)ti * sc->m->cfg.moe_experts, (size_t)sc->m->cfg.moe_experts * 4);
    else memset(dst, 0, (size_t)sc->m->cfg.moe_experts * 4);
    return SL_OK;
  }
  if (sc->cached_unit != u) {
    int rc = sc->fill(sc->ctx, u, sc->flat);
    if (rc) return rc;
    sc->cached_unit = u;
  }
  const sl_unit_spec *us = &sc->m->units[u];
  const sl_tensor_spec *t = &us->t[ti];
  int one = ti, *idx = &one, rc = SL_OK;
  int64_t n = 1;
  (void)wt;
  if (t->slabs) { /* a fused tensor: its slabs one after the other */
    if (!(idx = malloc((size_t)t->slabs * sizeof *idx))) return sl_fail(SL_ENOMEM, "out of memory");
    rc = sl_unit_slab_members(us, ti, idx);
    n = t->slabs;
  }
  for (int64_t j = 0; j < n && !rc; j++) {
    const sl_tensor_spec *tj = &us->t[idx[j]];
    float *d = dst + j * tj->full[0] * tj->full[1] * tj->full[2];
    if (sc->m->tp_size > 1) rc = assemble(sc->m, tj, sc->flat, us->numel, d);
    else memcpy(d, sc->flat + tj->offset, (size_t)tj->numel * 4);
  }
  if (idx != &one) free(idx);
  return rc;
}

/* The MoE layers whose expert bias b (L, E) is written (into which, nb of them): every one when any value is
 * nonzero (a zero bias routes as none), or always for a family whose checkpoints hold it (Nemotron-H). */
static int bias_layers(const sl_model *m, const float *b, int *which) {
  int64_t L = m->cfg.num_hidden_layers, E = m->cfg.moe_experts;
  int any = m->cfg.moe_experts > 0 && m->cfg.moe_sigmoid, nb = 0;
  for (int64_t i = 0; b && E > 0 && i < L * E && !any; i++) any = b[i] != 0.0f;
  for (int64_t l = 0; any && l < L; l++)
    if (sl_cfg_moe_layer(&m->cfg, l)) which[nb++] = (int)l;
  return nb;
}

int sl_model_save(const sl_model *m, const char *dir, sl_unit_fill_fn fill, void *ctx, int64_t max_shard_bytes,
                  const float *moe_bias, sl_st_dtype dtype, const char *src_dir) {
  char tmp[4600]; /* the new directory is written beside dir, then swapped in (formats/savedir.h) */
  int rc = sl_savedir_begin(dir, tmp, sizeof tmp);
  if (rc) return rc;
  int nt = 0, *bl = calloc((size_t)m->cfg.num_hidden_layers + 1, sizeof *bl), nb = bl ? bias_layers(m, moe_bias, bl) : 0;
  char(*bnames)[SL_TENSOR_NAME_MAX] = nb ? calloc((size_t)nb, sizeof *bnames) : NULL;
  for (int u = 0; u < m->nunits; u++) nt += m->units[u].ntensors;
  sl_st_wtensor *ws = calloc((size_t)(nt + nb), sizeof *ws);
  save_ctx sc = {.m = m, .fill = fill, .ctx = ctx, .cached_unit = -1, .moe_bias = moe_bias};
  sc.tensor_unit = calloc((size_t)(nt + nb), sizeof(int));
  sc.tensor_idx = calloc((size_t)(nt + nb), sizeof(int));
  sc.flat = sl_alloc((size_t)(sl_model_max_unit_numel(m) * m->tp_size) * 4, "save buffer");
  char(*hfn)[SL_TENSOR_NAME_MAX] = calloc((size_t)(nt + nb + 1), sizeof *hfn); /* fused tensors' names */
  if (!ws || !bl || !sc.tensor_unit || !sc.tensor_idx || !sc.flat || !hfn || (nb && !bnames)) {
    rc = sl_fail(SL_ENOMEM, "out of memory saving %s", dir);
    goto done;
  }
  int n = 0;
  for (int u = 0; u < m->nunits; u++)
    for (int i = 0; i < m->units[u].ntensors; i++) {
      const sl_tensor_spec *t = &m->units[u].t[i];
      if (t->slabs && t->slab) continue; /* a fused tensor is written at its slab 0 */
      /* a state-spaces checkpoint is written back in the HF form its config.json has */
      ws[n].name = (m->cfg.ssm_original_format && !strcmp(t->name, "backbone.embedding.weight"))
                       ? "backbone.embeddings.weight"
                       : t->name;
      if (t->slabs) ws[n].name = sl_tensor_hf_name(t, hfn[n], sizeof hfn[n]);
      ws[n].ndim = t->ndim + (t->slabs > 0);
      if (t->slabs) ws[n].shape[0] = t->slabs;
      for (int d = 0; d < t->ndim; d++) ws[n].shape[d + (t->slabs > 0)] = t->full[d];
      ws[n].dtype = dtype;
      sc.tensor_unit[n] = u;
      sc.tensor_idx[n] = i;
      n++;
    }
  for (int j = 0; j < nb; j++, n++) { /* DeepSeek-V3's naming: transformers' Mixtral / Qwen3-MoE have no such tensor */
    sl_model_moe_bias_name(&m->cfg, bl[j], bnames[j], sizeof bnames[j]);
    ws[n] = (sl_st_wtensor){.name = bnames[j], .ndim = 1, .shape = {m->cfg.moe_experts}, .dtype = SL_ST_F32};
    sc.tensor_unit[n] = -1;
    sc.tensor_idx[n] = bl[j];
  }
  if (nb && !m->cfg.moe_sigmoid)
    sl_log(SL_LOG_WARN,
           "%s: the expert bias is saved as %s and the other layers' (DeepSeek-V3's naming; shardlm reads it "
           "back): transformers' %s has no expert bias and ignores it, so its top-k selection differs from shardlm's",
           dir, bnames[0], m->cfg.arch_name);
  char path[4700];
  snprintf(path, sizeof path, "%s/config.json", tmp);
  rc = sl_hfconfig_save_as(path, &m->cfg, sl_savedir_torch_dtype(dtype));
  if (!rc) rc = sl_st_write_dir(tmp, ws, n, save_fill, &sc, max_shard_bytes);
  if (!rc) rc = sl_savedir_copy_aux(src_dir, tmp);
  if (!rc) rc = sl_savedir_commit(dir, tmp);
done:
  if (rc) {
    sl_savedir_abort(tmp);
    rc = sl_fail_ctx(rc, "%s was not written (an existing directory there is untouched)", dir);
  }
  free(ws);
  free(hfn);
  free(bl);
  free(bnames);
  free(sc.tensor_unit);
  free(sc.tensor_idx);
  sl_free(sc.flat);
  return rc;
}
