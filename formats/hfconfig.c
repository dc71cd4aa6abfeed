/* formats/hfconfig.c — config.json parsing, validation and saving for Llama,
 * Mistral, Qwen2, Mamba (HF and original state-spaces forms) and Falcon-Mamba.
 */
#define _GNU_SOURCE
#include "formats/hfconfig.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

#define CFG_MAX_DIM ((int64_t)1 << 26) /* sanity bound on any size field (vocab_size's) */
/* Plausibility limits per field (docs/formats.md), generous for every real
 * model up to and past 1T parameters (Llama-3.1-405B: 126 layers, hidden
 * 16384, intermediate 53248, 128 heads): they keep the engine check's own
 * cost bounded (it walks every layer) and the size products far from
 * overflow. */
#define CFG_MAX_LAYERS SL_CFG_MAX_LAYERS
#define CFG_MAX_HIDDEN ((int64_t)1 << 17)
#define CFG_MAX_INTER ((int64_t)1 << 20)
#define CFG_MAX_HEADS 4096
#define CFG_MAX_EXPERTS 1024
#define CFG_MAX_HEAD_DIM 4096
#define CFG_MAX_POS ((int64_t)1 << 27)
#define CFG_MAX_STATE 4096
#define CFG_MAX_EXPAND 64
#define CFG_MAX_CONV 1024

const char *sl_arch_name(sl_arch a) {
  switch (a) {
  case SL_ARCH_LLAMA: return "llama";
  case SL_ARCH_MISTRAL: return "mistral";
  case SL_ARCH_MAMBA: return "mamba";
  case SL_ARCH_QWEN2: return "qwen2";
  case SL_ARCH_MIXTRAL: return "mixtral";
  case SL_ARCH_QWEN3_MOE: return "qwen3_moe";
  case SL_ARCH_QWEN3: return "qwen3";
  case SL_ARCH_GEMMA2: return "gemma2";
  case SL_ARCH_GEMMA3: return "gemma3_text";
  case SL_ARCH_MAMBA2: return "mamba2";
  case SL_ARCH_NEMOTRON_H: return "nemotron_h";
  case SL_ARCH_GRANITE_H: return "granitemoehybrid";
  case SL_ARCH_GRANITE: return "granite";
  default: return "unknown";
  }
}

static const char *jtype(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

/* ---- transformers' defaults, per model type -------------------------------
 * The value transformers gives a field that config.json leaves out, read from
 * each family's configuration class (transformers' models/<type>/
 * configuration_<type>.py: the __init__ / dataclass defaults and what
 * __post_init__ derives), for every field this reader takes a default for.
 * One column per family, in k_arch's row order. NA: the family does not read
 * the field; NONE: None there (no token id, no window, no softcap);
 * HEADS: num_key_value_heads None -> num_attention_heads; HDIV: head_dim None
 * -> hidden_size / num_attention_heads; EXPANDH: expand * hidden_size;
 * AUTO: time_step_rank "auto" -> ceil(hidden_size / 16). tests/cli/train/
 * test_config_defaults.sh checks every column against its own transcription
 * of the same classes. */
#define NA NAN
#define NONE (-1.0)
#define HEADS (-2.0)
#define HDIV (-3.0)
#define EXPANDH (-4.0)
#define AUTO (-5.0)
/* the families: config.json's architectures[0] or model_type; the row is the defaults' column */
static const struct {
  const char *cls, *type;
  sl_arch arch;
} k_arch[] = {
    {"LlamaForCausalLM", "llama", SL_ARCH_LLAMA},
    {"MistralForCausalLM", "mistral", SL_ARCH_MISTRAL},
    {"MambaForCausalLM", "mamba", SL_ARCH_MAMBA},
    {"Qwen2ForCausalLM", "qwen2", SL_ARCH_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", SL_ARCH_QWEN3},
    {"FalconMambaForCausalLM", "falcon_mamba", SL_ARCH_MAMBA}, /* with mixer_rms */
    {"MixtralForCausalLM", "mixtral", SL_ARCH_MIXTRAL},
    {"Qwen3MoeForCausalLM", "qwen3_moe", SL_ARCH_QWEN3_MOE},
    {"Gemma2ForCausalLM", "gemma2", SL_ARCH_GEMMA2},
    {"Gemma3ForCausalLM", "gemma3_text", SL_ARCH_GEMMA3},
    {"Mamba2ForCausalLM", "mamba2", SL_ARCH_MAMBA2},
    {"NemotronHForCausalLM", "nemotron_h", SL_ARCH_NEMOTRON_H},
    {"GraniteMoeHybridForCausalLM", "granitemoehybrid", SL_ARCH_GRANITE_H},
    {"GraniteForCausalLM", "granite", SL_ARCH_GRANITE},
};
#define NFAM ((int)(sizeof k_arch / sizeof k_arch[0]))
// clang-format off
static const struct {
  const char *key;
  double v[14];
} k_defaults[] = {
    /*                         llama    mistral  mamba    qwen2    qwen3    falcon_m mixtral  qwen3moe gemma2   gemma3_text mamba2 nemotron_h granitemoehybrid granite */
    {"vocab_size",            {32000,   32000,   50280,   151936,  151936,  50280,   32000,   151936,  256000,  262208, 32768, 131072, 32000, 32000}},
    {"hidden_size",           {4096,    4096,    768,     4096,    4096,    768,     4096,    2048,    2304,    2304, 4096, 4096, 4096, 4096}},
    {"intermediate_size",     {11008,   14336,   EXPANDH, 22016,   22016,   EXPANDH, 14336,   6144,    9216,    9216, EXPANDH, 21504, 11008, 11008}},
    {"num_hidden_layers",     {32,      32,      32,      32,      32,      32,      32,      24,      26,      26, 64, NA, 32, 32}},
    {"num_attention_heads",   {32,      32,      NA,      32,      32,      NA,      32,      32,      8,       8, NA, 32, 32, 32}},
    {"num_key_value_heads",   {HEADS,   8,       NA,      32,      32,      NA,      8,       4,       4,       4, NA, 8, HEADS, HEADS}},
    {"head_dim",              {HDIV,    HDIV,    NA,      HDIV,    128,     NA,      HDIV,    HDIV,    256,     256, 64, 128, HDIV, HDIV}},
    {"max_position_embeddings",{2048,   131072,  0,       32768,   32768,   0,       131072,  32768,   8192,    131072, 0, 4096, 2048, 2048}},
    {"rms_norm_eps",          {1e-6,    1e-6,    NA,      1e-6,    1e-6,    NA,      1e-5,    1e-6,    1e-6,    1e-6, NA, NA, 1e-6, 1e-6}},
    {"rope_theta",            {1e4,     1e4,     NA,      1e4,     1e4,     NA,      1e6,     1e4,     1e4,     1e6, NA, NA, NA, 1e4}},
    {"initializer_range",     {0.02,    0.02,    0.1,     0.02,    0.02,    0.1,     0.02,    0.02,    0.02,    0.02, 0.1, 0.02, 0.02, 0.02}},
    {"tie_word_embeddings",   {0,       0,       1,       0,       0,       1,       0,       0,       1,       1, 0, 0, 0, 0}},
    {"bos_token_id",          {1,       1,       0,       NONE,    NONE,    0,       1,       NONE,    2,       2, 0, 1, 1, 1}},
    {"eos_token_id",          {2,       2,       0,       NONE,    NONE,    0,       2,       NONE,    1,       1, 2, 2, 2, 2}},
    {"sliding_window",        {NA,      4096,    NA,      4096,    4096,    NA,      NONE,    NA,      4096,    4096, NA, NONE, NA, NA}},
    {"use_sliding_window",    {NA,      NA,      NA,      0,       0,       NA,      NA,      0,       NA,      NA, NA, NA, NA, NA}},
    {"max_window_layers",     {NA,      NA,      NA,      28,      28,      NA,      NA,      NA,      NA,      NA, NA, NA, NA, NA}},
    {"attention_bias",        {0,       0,       NA,      NA,      0,       NA,      0,       0,       0,       0, NA, 0, 0, 0}},
    {"mlp_bias",              {0,       0,       NA,      NA,      NA,      NA,      0,       NA,      NA,      NA, NA, 0, NA, 0}},
    {"num_local_experts",     {NA,      NA,      NA,      NA,      NA,      NA,      8,       NA,      NA,      NA, NA, NA, 8, NA}},
    {"num_experts",           {NA,      NA,      NA,      NA,      NA,      NA,      NA,      128,     NA,      NA, NA, NA, NA, NA}},
    {"num_experts_per_tok",   {NA,      NA,      NA,      NA,      NA,      NA,      2,       8,       NA,      NA, NA, 2, 2, NA}},
    {"moe_intermediate_size", {NA,      NA,      NA,      NA,      NA,      NA,      NA,      768,     NA,      NA, NA, 7688, NA, NA}},
    {"norm_topk_prob",        {NA,      NA,      NA,      NA,      NA,      NA,      NA,      0,       NA,      NA, NA, 1, NA, NA}},
    {"n_routed_experts",      {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 8, NA, NA}},
    {"n_shared_experts",      {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, NA, NA}},
    {"moe_shared_expert_intermediate_size", {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 7688, NA, NA}},
    {"routed_scaling_factor", {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1.0, NA, NA}},
    {"n_group",               {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, NA, NA}},
    {"topk_group",            {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, NA, NA}},
    {"decoder_sparse_step",   {NA,      NA,      NA,      NA,      NA,      NA,      NA,      1,       NA,      NA, NA, NA, NA, NA}},
    {"router_aux_loss_coef",  {NA,      NA,      NA,      NA,      NA,      NA,      0.001,   0.001,   NA,      NA, NA, NA, 0.001, NA}},
    {"router_jitter_noise",   {NA,      NA,      NA,      NA,      NA,      NA,      0,       NA,      NA,      NA, NA, NA, NA, NA}},
    {"output_router_logits",  {NA,      NA,      NA,      NA,      NA,      NA,      0,       0,       NA,      NA, NA, NA, 0, NA}},
    {"query_pre_attn_scalar", {NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      256,     256, NA, NA, NA, NA}},
    {"attn_logit_softcapping",{NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      50.0,    NONE, NA, NA, NA, NA}},
    {"final_logit_softcapping",{NA,     NA,      NA,      NA,      NA,      NA,      NA,      NA,      30.0,    NONE, NA, NA, NA, NA}},
    {"rope_local_base_freq",  {NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      1e4, NA, NA, NA, NA}},
    {"sliding_window_pattern",{NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      6, NA, NA, NA, NA}},
    {"state_size",            {NA,      NA,      16,      NA,      NA,      16,      NA,      NA,      NA,      NA, 128, NA, NA, NA}},
    {"expand",                {NA,      NA,      2,       NA,      NA,      2,       NA,      NA,      NA,      NA, 2, 2, NA, NA}},
    {"conv_kernel",           {NA,      NA,      4,       NA,      NA,      4,       NA,      NA,      NA,      NA, 4, 4, NA, NA}},
    {"time_step_rank",        {NA,      NA,      AUTO,    NA,      NA,      AUTO,    NA,      NA,      NA,      NA, NA, NA, NA, NA}},
    {"layer_norm_epsilon",    {NA,      NA,      1e-5,    NA,      NA,      1e-5,    NA,      NA,      NA,      NA, 1e-5, 1e-5, NA, NA}},
    {"use_bias",              {NA,      NA,      0,       NA,      NA,      0,       NA,      NA,      NA,      NA, 0, 0, NA, NA}},
    {"use_conv_bias",         {NA,      NA,      1,       NA,      NA,      1,       NA,      NA,      NA,      NA, 1, 1, NA, NA}},
    {"residual_in_fp32",      {NA,      NA,      1,       NA,      NA,      1,       NA,      NA,      NA,      NA, 1, 0, NA, NA}},
    {"time_step_min",         {NA,      NA,      0.001,   NA,      NA,      0.001,   NA,      NA,      NA,      NA, 0.001, 0.001, NA, NA}},
    {"time_step_max",         {NA,      NA,      0.1,     NA,      NA,      0.1,     NA,      NA,      NA,      NA, 0.1, 0.1, NA, NA}},
    {"time_step_floor",       {NA,      NA,      1e-4,    NA,      NA,      1e-4,    NA,      NA,      NA,      NA, 1e-4, 1e-4, NA, NA}},
    {"time_step_scale",       {NA,      NA,      1.0,     NA,      NA,      1.0,     NA,      NA,      NA,      NA, NA, NA, NA, NA}},
    {"mixer_rms_eps",         {NA,      NA,      NA,      NA,      NA,      1e-6,    NA,      NA,      NA,      NA, NA, NA, NA, NA}},
    {"num_heads",             {NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      128, NA, NA, NA}},
    {"n_groups",              {NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      8, 8, NA, NA}},
    {"chunk_size",            {NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      NA,      256, 128, NA, NA}},
    {"ssm_state_size",        {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 128, NA, NA}},
    {"mamba_num_heads",       {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 128, NA, NA}},
    {"mamba_head_dim",        {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 64, NA, NA}},
    {"shared_intermediate_size", {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1024, NA}},
    {"embedding_multiplier",    {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, 1}},
    {"logits_scaling",          {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, 1}},
    {"residual_multiplier",     {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, 1}},
    {"attention_multiplier",    {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, 1}},
    {"mamba_n_heads",           {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 128, NA}},
    {"mamba_n_groups",          {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, NA}},
    {"mamba_d_state",           {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 256, NA}},
    {"mamba_d_conv",            {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 4, NA}},
    {"mamba_expand",            {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 2, NA}},
    {"mamba_chunk_size",        {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 256, NA}},
    {"mamba_conv_bias",         {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 1, NA}},
    {"mamba_proj_bias",         {NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, NA, 0, NA}},
};
// clang-format on

/* The default of key for c's family (c->arch_name's model type): SL_EINTERNAL
 * naming both when the table has none (a reader that takes a default the
 * table does not list: add the row). */
_Static_assert(sizeof k_arch / sizeof k_arch[0] == 14, "k_defaults has a column per k_arch row");
static int def_of(const sl_model_config *c, const char *key, double *out) {
  int col = -1;
  for (int i = 0; i < NFAM; i++)
    if (!strcmp(c->arch_name, k_arch[i].cls)) col = i;
  for (size_t r = 0; col >= 0 && r < sizeof k_defaults / sizeof k_defaults[0]; r++)
    if (!strcmp(k_defaults[r].key, key) && !isnan(k_defaults[r].v[col])) {
      *out = k_defaults[r].v[col];
      return SL_OK;
    }
  return sl_fail(SL_EINTERNAL,
                 "no transformers default for field '%s' of model type '%s' (formats/hfconfig.c k_defaults)", key,
                 col >= 0 ? k_arch[col].type : c->arch_name);
}

/* ---- the record of every field read (sl_model_config.fields) ---------------
 * Every read of a config.json member goes through jget, which records the key
 * and its value; the typed readers below then overwrite the value with the one
 * resolved after defaults. Nothing else in this file reads the JSON tree, so
 * the record names every field the model depends on (the agreement texts of
 * engine/agree.c are built from it). */
typedef struct {
  sl_model_config *c;
  size_t n;     /* bytes used in c->fields */
  int overflow; /* a line did not fit */
  struct {
    const json_t *obj;
    char name[64];
  } objs[8]; /* nested objects read so far, by the key that named them ("rope_scaling") */
  int nobj;
} fields_rec;
static _Thread_local fields_rec *g_rec;

/* key as recorded: "rope_scaling.factor" for a member of a nested object */
static void rec_key(const json_t *o, const char *key, char *out, size_t cap) {
  const char *pre = "";
  for (int i = 0; g_rec && i < g_rec->nobj; i++)
    if (g_rec->objs[i].obj == o) pre = g_rec->objs[i].name;
  snprintf(out, cap, "%s%s%s", pre, *pre ? "." : "", key);
}

/* Removes key's line; 1 if there was one. */
static int rec_del(const char *key) {
  fields_rec *r = g_rec;
  if (!r) return 0;
  char *f = r->c->fields;
  size_t kl = strlen(key);
  for (char *l = f; *l;) {
    char *e = strchr(l, '\n');
    size_t ll = e ? (size_t)(e - l) + 1 : strlen(l);
    if (!strncmp(l, key, kl) && l[kl] == '=') {
      memmove(l, l + ll, strlen(l + ll) + 1);
      r->n -= ll;
      return 1;
    }
    l += ll;
  }
  return 0;
}

/* key's line := key=val (an earlier line of the key is replaced) */
static void rec_put(const char *key, const char *val) {
  fields_rec *r = g_rec;
  if (!r) return;
  char *f = r->c->fields;
  size_t kl = strlen(key);
  rec_del(key);
  size_t need = kl + strlen(val) + 2;
  if (r->n + need + 1 > sizeof r->c->fields) {
    r->overflow = 1;
    return;
  }
  snprintf(f + r->n, sizeof r->c->fields - r->n, "%s=%s\n", key, val);
  r->n += need;
}

static void rec_fmt(const json_t *o, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rec_fmt(const json_t *o, const char *key, const char *fmt, ...) {
  if (!g_rec) return;
  char k[128], v[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  rec_key(o, key, k, sizeof k);
  rec_put(k, v);
}

/* json_object_get, recorded unless the key has a line already (a typed
 * reader's resolved value): "absent", "object" (its members are recorded as
 * they are read), or the compact JSON text (a long one as its length and
 * FNV-1a hash). The readers replace these raw values with resolved ones
 * (what the model does with the field), so that two spellings of the same
 * model (absent vs the default, null vs absent, a re-saved config.json) give
 * the same record; a raw value left over only makes the check stricter. */
static json_t *jget(json_t *o, const char *key) {
  json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
  if (!g_rec) return v;
  char k[128];
  rec_key(o, key, k, sizeof k);
  for (const char *l = g_rec->c->fields; *l;) { /* already resolved: keep */
    size_t kl = strlen(k), ll = strcspn(l, "\n");
    if (ll > kl && !strncmp(l, k, kl) && l[kl] == '=') {
      if (json_is_object(v) && g_rec->nobj < (int)(sizeof g_rec->objs / sizeof g_rec->objs[0])) {
        g_rec->objs[g_rec->nobj].obj = v;
        snprintf(g_rec->objs[g_rec->nobj++].name, sizeof g_rec->objs[0].name, "%s", k);
      }
      return v;
    }
    l += ll + (l[ll] ? 1 : 0);
  }
  if (!v) {
    rec_put(k, "absent");
  } else if (json_is_object(v)) {
    rec_put(k, "object");
    if (g_rec->nobj < (int)(sizeof g_rec->objs / sizeof g_rec->objs[0])) {
      g_rec->objs[g_rec->nobj].obj = v;
      snprintf(g_rec->objs[g_rec->nobj++].name, sizeof g_rec->objs[0].name, "%s", k);
    } else {
      g_rec->overflow = 1;
    }
  } else {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    if (!t) {
      g_rec->overflow = 1;
      return v;
    }
    if (strlen(t) > 160) {
      uint64_t h = 0xcbf29ce484222325ull;
      for (const unsigned char *q = (const unsigned char *)t; *q; q++) h = (h ^ *q) * 0x100000001b3ull;
      char b[64];
      snprintf(b, sizeof b, "%zu bytes, fnv1a %016llx", strlen(t), (unsigned long long)h);
      rec_put(k, b);
    } else {
      rec_put(k, t);
    }
    free(t);
  }
  return v;
}

/* by key (the text before '='), so "rope_scaling" sorts before "rope_scaling.factor" */
static int line_cmp(const void *a, const void *b) {
  const char *x = *(char *const *)a, *y = *(char *const *)b;
  size_t kx = strcspn(x, "="), ky = strcspn(y, "=");
  int c = strncmp(x, y, kx < ky ? kx : ky);
  if (c) return c;
  return kx != ky ? (kx < ky ? -1 : 1) : strcmp(x, y);
}

/* sorts c->fields' lines (the record's order is the reading code's, which
 * may change; the text must not) */
static int rec_finish(const char *p, sl_model_config *c, int overflow) {
  if (overflow)
    return sl_fail(SL_EINTERNAL, "%s: the record of the fields read exceeds %d bytes (SL_CFG_FIELDS_MAX)", p,
                   SL_CFG_FIELDS_MAX);
  char *lines[512], copy[SL_CFG_FIELDS_MAX];
  int n = 0;
  memcpy(copy, c->fields, sizeof copy);
  for (char *l = copy; *l && n < 512;) {
    char *e = strchr(l, '\n');
    if (!e) break;
    *e = 0;
    lines[n++] = l;
    l = e + 1;
  }
  qsort(lines, (size_t)n, sizeof lines[0], line_cmp);
  size_t o = 0;
  for (int i = 0; i < n; i++) o += (size_t)snprintf(c->fields + o, sizeof c->fields - o, "%s\n", lines[i]);
  return SL_OK;
}

/* ---- Python's non-finite literals ------------------------------------------
 * config.json files written by Python's json carry the bare tokens Infinity,
 * -Infinity and NaN (Mamba-2's "time_step_limit": [0.0, Infinity]), which
 * Python reads back and jansson refuses. nonfinite_pass rewrites each such
 * token outside strings into a marker string ("\u0001+Infinity", ...) that no
 * real config holds; nonfinite_value reads a marker back as the number. A
 * reader that wants a finite number refuses it naming the field. */
#define NF_MARK "\001"
static char *nonfinite_pass(const char *t, size_t n, size_t *out_n) {
  static const struct {
    const char *tok, *mark;
  } k[] = {{"-Infinity", "\"\\u0001-Infinity\""}, {"Infinity", "\"\\u0001+Infinity\""}, {"NaN", "\"\\u0001NaN\""}};
  size_t cap = n + 1, o = 0;
  for (size_t i = 0; i < n; i++)
    if (t[i] == 'I' || t[i] == 'N') cap += 16; /* at most one marker per such byte */
  char *b = malloc(cap);
  if (!b) return NULL;
  int in_str = 0;
  for (size_t i = 0; i < n;) {
    char ch = t[i];
    if (in_str) {
      b[o++] = ch, i++;
      if (ch == '\\' && i < n) b[o++] = t[i++];
      else if (ch == '"') in_str = 0;
      continue;
    }
    if (ch == '"') {
      in_str = 1, b[o++] = ch, i++;
      continue;
    }
    size_t j = 0;
    for (; j < sizeof k / sizeof k[0]; j++) {
      size_t tl = strlen(k[j].tok);
      if (i + tl <= n && !memcmp(t + i, k[j].tok, tl) && (i + tl == n || !isalnum((unsigned char)t[i + tl]))) {
        size_t ml = strlen(k[j].mark);
        memcpy(b + o, k[j].mark, ml);
        o += ml, i += tl;
        break;
      }
    }
    if (j == sizeof k / sizeof k[0]) b[o++] = ch, i++;
  }
  b[o] = 0;
  *out_n = o;
  return b;
}

/* 1 and *out when v is a number or a non-finite marker. */
static int nonfinite_value(const json_t *v, double *out) {
  if (json_is_number(v)) {
    *out = json_number_value(v);
    return 1;
  }
  const char *s = json_is_string(v) ? json_string_value(v) : NULL;
  if (!s || s[0] != NF_MARK[0]) return 0;
  if (!strcmp(s + 1, "+Infinity")) *out = INFINITY;
  else if (!strcmp(s + 1, "-Infinity")) *out = -INFINITY;
  else if (!strcmp(s + 1, "NaN")) *out = NAN;
  else return 0;
  return 1;
}

/* Field readers: absent or null -> default (or "missing" when required). */
static int get_int(const char *path, json_t *o, const char *key, int required, int64_t def, int64_t *out) {
  json_t *v = jget(o, key);
  if (!v || json_is_null(v)) {
    if (required) return sl_fail(SL_EINPUT, "%s: missing required field '%s' (an integer)", path, key);
    *out = def;
    rec_fmt(o, key, "%lld", (long long)def);
    return SL_OK;
  }
  /* every size of a real model fits far inside 2^31; bounding here keeps
   * the products formed from these fields (parameter counts) from overflowing */
  const int64_t lim = (int64_t)1 << 31;
  int64_t x;
  if (json_is_integer(v)) {
    x = (int64_t)json_integer_value(v);
  } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15) {
    x = (int64_t)json_real_value(v);
  } else {
    return sl_fail(SL_EINPUT, "%s: field '%s' must be an integer, found %s", path, key, jtype(v));
  }
  if (x >= lim || x < -lim)
    return sl_fail(SL_EINPUT, "%s: field '%s' is %lld, outside the supported range (|x| < 2^31)", path, key,
                   (long long)x);
  *out = x;
  rec_fmt(o, key, "%lld", (long long)x);
  return SL_OK;
}

static int get_num(const char *path, json_t *o, const char *key, double def, double *out) {
  json_t *v = jget(o, key);
  if (!v || json_is_null(v)) {
    *out = def;
    rec_fmt(o, key, "%.17g", def);
    return SL_OK;
  }
  if (!nonfinite_value(v, out))
    return sl_fail(SL_EINPUT, "%s: field '%s' must be a number, found %s", path, key, jtype(v));
  if (!isfinite(*out)) return sl_fail(SL_EINPUT, "%s: field '%s' must be finite, found %g", path, key, *out);
  rec_fmt(o, key, "%.17g", *out);
  return SL_OK;
}

static int get_bool(const char *path, json_t *o, const char *key, int def, int *out) {
  json_t *v = jget(o, key);
  if (!v || json_is_null(v)) {
    *out = def;
    rec_fmt(o, key, "%d", def);
    return SL_OK;
  }
  if (!json_is_boolean(v))
    return sl_fail(SL_EINPUT, "%s: field '%s' must be true or false, found %s", path, key, jtype(v));
  *out = json_is_true(v);
  rec_fmt(o, key, "%d", *out);
  return SL_OK;
}

/* The typed readers with the family's transformers default (k_defaults). */
static int dget_int(const char *p, json_t *o, const sl_model_config *c, const char *key, int64_t *out) {
  double d = 0;
  int rc = def_of(c, key, &d);
  return rc ? rc : get_int(p, o, key, 0, (int64_t)d, out);
}
static int dget_num(const char *p, json_t *o, const sl_model_config *c, const char *key, double *out) {
  double d = 0;
  int rc = def_of(c, key, &d);
  return rc ? rc : get_num(p, o, key, d, out);
}
static int dget_bool(const char *p, json_t *o, const sl_model_config *c, const char *key, int *out) {
  double d = 0;
  int rc = def_of(c, key, &d);
  return rc ? rc : get_bool(p, o, key, d != 0, out);
}

static int want_false(const char *path, json_t *o, const char *key, const char *why) {
  int b = 0;
  int rc = get_bool(path, o, key, 0, &b);
  if (rc) return rc;
  if (b) return sl_fail(SL_EINPUT, "%s: field '%s' = true is not supported (%s)", path, key, why);
  return SL_OK;
}

static int want_act(const char *path, json_t *o, const char *key) {
  json_t *v = jget(o, key);
  if (!v || json_is_null(v)) {
    rec_fmt(o, key, "silu");
    return SL_OK;
  }
  if (!json_is_string(v)) return sl_fail(SL_EINPUT, "%s: field '%s' must be a string, found %s", path, key, jtype(v));
  const char *s = json_string_value(v);
  if (strcmp(s, "silu") && strcmp(s, "swish"))
    return sl_fail(SL_EINPUT, "%s: field '%s' = '%s' is not supported (expected \"silu\")", path, key, s);
  rec_fmt(o, key, "silu"); /* absent, "silu" and "swish" are one */
  return SL_OK;
}

/* "auto" or an integer. */
static int get_dt_rank(const char *path, json_t *o, const char *key, int64_t hidden, int64_t *out) {
  json_t *v = jget(o, key);
  if (!v || json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), "auto"))) {
    *out = (hidden + 15) / 16;
    rec_fmt(o, key, "%lld", (long long)*out);
    return SL_OK;
  }
  if (json_is_string(v))
    return sl_fail(SL_EINPUT, "%s: field '%s' = '%s': expected \"auto\" or an integer", path, key,
                   json_string_value(v));
  return get_int(path, o, key, 1, 0, out);
}

static int want_pos_emb(const char *p, json_t *o);

/* bos_token_id: absent -> the family's default, null -> none (-1). */
static int get_bos(const char *p, json_t *o, sl_model_config *c) {
  json_t *v = jget(o, "bos_token_id");
  if (v && json_is_null(v)) {
    c->bos_token_id = -1;
    rec_fmt(o, "bos_token_id", "-1");
    return SL_OK;
  }
  return dget_int(p, o, c, "bos_token_id", &c->bos_token_id);
}

/* eos_token_id: an integer, or a list of integers (Llama 3.1 / 3.3 Instruct:
 * [128001, 128008, 128009]); eos_token_id keeps the first. */
static int get_eos(const char *p, json_t *o, sl_model_config *c) {
  json_t *v = jget(o, "eos_token_id");
  double d = NONE;
  c->n_eos = 0;
  c->eos_token_id = -1;
  if (!v || json_is_null(v)) { /* absent: the family's default; null: none */
    int rc = v ? SL_OK : def_of(c, "eos_token_id", &d);
    if (rc) return rc;
    if (d >= 0) c->eos_token_ids[c->n_eos++] = c->eos_token_id = (int64_t)d;
    rec_fmt(o, "eos_token_id", "%lld", (long long)c->eos_token_id);
    return SL_OK;
  }
  if (!json_is_array(v)) {
    int rc = get_int(p, o, "eos_token_id", 0, -1, &c->eos_token_id);
    if (!rc && c->eos_token_id >= 0) c->eos_token_ids[c->n_eos++] = c->eos_token_id;
    return rc;
  }
  size_t n = json_array_size(v);
  if (n == 0 || n > SL_MAX_EOS)
    return sl_fail(SL_EINPUT, "%s: field 'eos_token_id' is a list of %zu ids; expected 1 to %d", p, n, SL_MAX_EOS);
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(v, i);
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= ((json_int_t)1 << 31))
      return sl_fail(SL_EINPUT, "%s: field 'eos_token_id' entry %zu must be a non-negative integer, found %s", p, i,
                     jtype(e));
    c->eos_token_ids[c->n_eos++] = (int64_t)json_integer_value(e);
  }
  c->eos_token_id = c->eos_token_ids[0];
  char l[SL_MAX_EOS * 24] = "";
  for (int i = 0, m = 0; i < c->n_eos; i++)
    m += snprintf(l + m, sizeof l - (size_t)m, "%s%lld", i ? "," : "", (long long)c->eos_token_ids[i]);
  rec_fmt(o, "eos_token_id", "%s", l);
  return SL_OK;
}

const char *sl_rope_type_name(sl_rope_type t) {
  switch (t) {
  case SL_ROPE_LINEAR: return "linear";
  case SL_ROPE_LLAMA3: return "llama3";
  case SL_ROPE_YARN: return "yarn";
  default: return "default";
  }
}

/* The name messages give the rope object (rope_scaling, or transformers 5's rope_parameters). */
static _Thread_local const char *g_rs = "rope_scaling";

/* A number of rope_scaling (messages name it rope_scaling.KEY): required, or
 * absent/null -> def. */
static int rs_num(const char *p, json_t *rs, const char *key, int required, double def, double *out) {
  json_t *v = jget(rs, key);
  if (!v || json_is_null(v)) {
    if (required) return sl_fail(SL_EINPUT, "%s: missing required field '%s.%s' (a number)", p, g_rs, key);
    *out = def;
    rec_fmt(rs, key, "%.17g", def);
    return SL_OK;
  }
  if (!json_is_number(v))
    return sl_fail(SL_EINPUT, "%s: field '%s.%s' must be a number, found %s", p, g_rs, key, jtype(v));
  *out = json_number_value(v);
  if (!isfinite(*out)) return sl_fail(SL_EINPUT, "%s: field '%s.%s' must be finite", p, g_rs, key);
  rec_fmt(rs, key, "%.17g", *out);
  return SL_OK;
}

static int rs_pos(const char *p, const char *key, double v) {
  if (!(v > 0)) return sl_fail(SL_EINPUT, "%s: field '%s.%s' must be positive, found %g", p, g_rs, key, v);
  return SL_OK;
}

static int rs_orig(const char *p, json_t *rs, int required, int64_t def, int64_t *out) {
  double d = 0;
  int rc = rs_num(p, rs, "original_max_position_embeddings", required, (double)def, &d);
  if (rc) return rc;
  if (d != floor(d) || !(d > 0) || d > (double)CFG_MAX_POS)
    return sl_fail(SL_EINPUT,
                   "%s: field '%s.original_max_position_embeddings' must be a positive integer "
                   "up to %lld, found %g",
                   p, g_rs, (long long)CFG_MAX_POS, d);
  *out = (int64_t)d;
  return SL_OK;
}

/* YaRN's get_mscale (transformers modeling_rope_utils.py), in double as Python computes it. */
static double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

/* rope_scaling: null/absent, or an object with rope_type (or the older
 * "type"): default, linear, llama3, yarn (transformers' semantics,
 * docs/formats.md). */
static int parse_rope_scaling_fields(const char *p, json_t *rs, sl_model_config *c) {
  sl_rope_scaling *r = &c->rope_scaling;
  memset(r, 0, sizeof *r);
  if (!rs || json_is_null(rs)) return SL_OK;
  if (!json_is_object(rs))
    return sl_fail(SL_EINPUT, "%s: field '%s' must be an object or null, found %s", p, g_rs, jtype(rs));
  const char *key = "rope_type";
  json_t *t = jget(rs, key);
  if (!t || json_is_null(t)) t = jget(rs, key = "type");
  if (!t || json_is_null(t)) return sl_fail(SL_EINPUT, "%s: missing required field '%s.rope_type' (a string)", p, g_rs);
  if (!json_is_string(t))
    return sl_fail(SL_EINPUT, "%s: field '%s.%s' must be a string, found %s", p, g_rs, key, jtype(t));
  const char *ty = json_string_value(t);
  int rc;
  if (!strcmp(ty, "default")) return SL_OK;
  if (!strcmp(ty, "dynamic"))
    return sl_fail(SL_EINPUT,
                   "%s: field '%s.%s' = \"dynamic\" is not supported: dynamic NTK scaling changes the "
                   "frequencies with the sequence length at inference, and training uses fixed frequencies "
                   "(supported: default, linear, llama3, yarn)",
                   p, g_rs, key);
  if (!strcmp(ty, "linear")) {
    r->type = SL_ROPE_LINEAR;
    if ((rc = rs_num(p, rs, "factor", 1, 0, &r->factor)) || (rc = rs_pos(p, "factor", r->factor))) return rc;
    return SL_OK;
  }
  if (!strcmp(ty, "llama3")) {
    r->type = SL_ROPE_LLAMA3;
    if ((rc = rs_num(p, rs, "factor", 1, 0, &r->factor)) || (rc = rs_pos(p, "factor", r->factor)) ||
        (rc = rs_num(p, rs, "low_freq_factor", 1, 0, &r->low_freq_factor)) ||
        (rc = rs_pos(p, "low_freq_factor", r->low_freq_factor)) ||
        (rc = rs_num(p, rs, "high_freq_factor", 1, 0, &r->high_freq_factor)) ||
        (rc = rs_pos(p, "high_freq_factor", r->high_freq_factor)) ||
        (rc = rs_orig(p, rs, 1, 0, &r->original_max_position_embeddings)))
      return rc;
    if (!(r->high_freq_factor > r->low_freq_factor))
      return sl_fail(SL_EINPUT,
                     "%s: field '%s.high_freq_factor' = %g must be greater than "
                     "'%s.low_freq_factor' = %g",
                     p, g_rs, r->high_freq_factor, g_rs, r->low_freq_factor);
    return SL_OK;
  }
  if (!strcmp(ty, "yarn")) {
    r->type = SL_ROPE_YARN;
    int64_t mp = c->max_position_embeddings;
    json_t *orig = jget(rs, "original_max_position_embeddings");
    int has_orig = orig && !json_is_null(orig);
    json_t *tr = jget(rs, "truncate");
    double af = 0;
    if ((rc = rs_num(p, rs, "factor", 1, 0, &r->factor)) || (rc = rs_pos(p, "factor", r->factor)) ||
        (rc = rs_num(p, rs, "beta_fast", 0, 32, &r->beta_fast)) ||
        (rc = rs_num(p, rs, "beta_slow", 0, 1, &r->beta_slow)) || (rc = rs_num(p, rs, "mscale", 0, 0, &r->mscale)) ||
        (rc = rs_num(p, rs, "mscale_all_dim", 0, 0, &r->mscale_all_dim)) ||
        (rc = rs_num(p, rs, "attention_factor", 0, 0, &af)) ||
        (rc = rs_orig(p, rs, 0, mp, &r->original_max_position_embeddings)))
      return rc;
    if (tr && !json_is_null(tr) && !json_is_boolean(tr))
      return sl_fail(SL_EINPUT, "%s: field '%s.truncate' must be true or false, found %s", p, g_rs, jtype(tr));
    r->truncate = !(tr && json_is_false(tr));
    /* transformers: beta_fast = get("beta_fast") or 32 (a 0 reads as unset) */
    if (r->beta_fast == 0) r->beta_fast = 32;
    if (r->beta_slow == 0) r->beta_slow = 1;
    if ((rc = rs_pos(p, "beta_fast", r->beta_fast)) || (rc = rs_pos(p, "beta_slow", r->beta_slow))) return rc;
    /* transformers: an original_max_position_embeddings in rope_scaling sets
     * factor = max_position_embeddings / original (DeepSeek-V3's form) */
    if (has_orig) r->factor = (double)mp / (double)r->original_max_position_embeddings;
    json_t *afv = jget(rs, "attention_factor");
    r->attention_factor_given = afv && !json_is_null(afv);
    if (r->attention_factor_given) r->attention_factor = af;
    else if (r->mscale != 0 && r->mscale_all_dim != 0)
      r->attention_factor = yarn_mscale(r->factor, r->mscale) / yarn_mscale(r->factor, r->mscale_all_dim);
    else r->attention_factor = yarn_mscale(r->factor, 1.0);
    return SL_OK;
  }
  return sl_fail(SL_EINPUT, "%s: field '%s.%s' = \"%s\" is not supported (supported: default, linear, llama3, yarn)", p,
                 g_rs, key, ty);
}

/* A rope theta inside rope_parameters (transformers 5): it must agree with
 * the top-level field when config.json has both. */
static int rp_theta(const char *p, json_t *o, json_t *obj, const char *name, const char *top, double *out) {
  json_t *t = jget(obj, "rope_theta");
  if (!t || json_is_null(t)) return SL_OK;
  if (!json_is_number(t) || !(json_number_value(t) > 0) || !isfinite(json_number_value(t)))
    return sl_fail(SL_EINPUT, "%s: field '%s.rope_theta' must be a positive number", p, name);
  json_t *tv = jget(o, top);
  if (tv && !json_is_null(tv) && json_is_number(tv) && json_number_value(tv) != json_number_value(t))
    return sl_fail(SL_EINPUT, "%s: field '%s.rope_theta' = %g and field '%s' = %g disagree", p, name,
                   json_number_value(t), top, json_number_value(tv));
  *out = json_number_value(t);
  return SL_OK;
}

/* rope_scaling, or transformers 5's rope_parameters ({"rope_type", "rope_theta",
 * the rule's fields}; Gemma 3: one per layer type, "full_attention" and
 * "sliding_attention", the latter's theta being rope_local_base_freq). Both
 * in one file are refused (transformers 5 reads only rope_parameters). */
static int parse_rope(const char *p, json_t *o, sl_model_config *c) {
  json_t *rs = jget(o, "rope_scaling"), *rp = jget(o, "rope_parameters");
  if (!rp || json_is_null(rp)) return parse_rope_scaling_fields(p, rs, c);
  if (!json_is_object(rp))
    return sl_fail(SL_EINPUT, "%s: field 'rope_parameters' must be an object or null, found %s", p, jtype(rp));
  if (rs && !json_is_null(rs))
    return sl_fail(SL_EINPUT,
                   "%s: fields 'rope_scaling' and 'rope_parameters' are both set (transformers 5 reads only "
                   "rope_parameters): keep one",
                   p);
  json_t *full = jget(rp, "full_attention"), *slide = jget(rp, "sliding_attention"), *main = rp;
  int rc;
  g_rs = "rope_parameters";
  if (full || slide) {
    if (c->arch != SL_ARCH_GEMMA3 || !full || !json_is_object(full) || (slide && !json_is_object(slide))) {
      g_rs = "rope_scaling";
      return sl_fail(SL_EINPUT,
                     "%s: field 'rope_parameters' per layer type is supported for Gemma 3 only, as an object "
                     "'full_attention' (and 'sliding_attention' with the local layers' rope_theta)",
                     p);
    }
    main = full;
    g_rs = "rope_parameters.full_attention";
    if (slide) {
      json_t *st = jget(slide, "rope_type");
      if (st && !json_is_null(st) && !(json_is_string(st) && !strcmp(json_string_value(st), "default")))
        rc = sl_fail(SL_EINPUT,
                     "%s: field 'rope_parameters.sliding_attention.rope_type' must be \"default\" (scaled local "
                     "layers are not implemented)",
                     p);
      else
        rc = rp_theta(p, o, slide, "rope_parameters.sliding_attention", "rope_local_base_freq",
                      &c->rope_local_base_freq);
      if (rc) {
        g_rs = "rope_scaling";
        return rc;
      }
    }
  }
  rc = rp_theta(p, o, main, g_rs, "rope_theta", &c->rope_theta);
  if (!rc) rc = parse_rope_scaling_fields(p, main, c);
  g_rs = "rope_scaling";
  return rc;
}

/* The rope, recorded as what the RoPE code uses (sl_rope_scaling, as --save
 * writes it): the theta(s), the rule's name (absent, null and "default" are
 * one) and its fields, YaRN's derived factor and attention factor (mscale
 * folded in) resolved; whichever of rope_scaling / rope_parameters spelled it. */
static int parse_rope_scaling(const char *p, json_t *o, sl_model_config *c) {
  int rc = parse_rope(p, o, c);
  if (rc || !g_rec) return rc;
  const sl_rope_scaling *r = &c->rope_scaling;
  char *f = g_rec->c->fields;
  for (char *l = f; *l;) { /* the lines as spelled */
    size_t e = strcspn(l, "\n"), ll = e + (l[e] ? 1 : 0);
    if (!strncmp(l, "rope_scaling", 12) || !strncmp(l, "rope_parameters", 15)) {
      memmove(l, l + ll, strlen(l + ll) + 1);
      g_rec->n -= ll;
    } else {
      l += ll;
    }
  }
  rec_fmt(o, "rope_theta", "%.17g", c->rope_theta);
  if (c->arch == SL_ARCH_GEMMA3) rec_fmt(o, "rope_local_base_freq", "%.17g", c->rope_local_base_freq);
  rec_put("rope_scaling", sl_rope_type_name(r->type));
  char v[64];
#define RS_NUM(k, x)                                                                                                   \
  do {                                                                                                                 \
    snprintf(v, sizeof v, "%.17g", (double)(x));                                                                       \
    rec_put("rope_scaling." k, v);                                                                                     \
  } while (0)
  if (r->type != SL_ROPE_DEFAULT) RS_NUM("factor", r->factor);
  if (r->type == SL_ROPE_LLAMA3) {
    RS_NUM("low_freq_factor", r->low_freq_factor);
    RS_NUM("high_freq_factor", r->high_freq_factor);
  }
  if (r->type == SL_ROPE_YARN) {
    RS_NUM("beta_fast", r->beta_fast);
    RS_NUM("beta_slow", r->beta_slow);
    RS_NUM("attention_factor", r->attention_factor);
    RS_NUM("truncate", r->truncate);
  }
  if (r->type == SL_ROPE_LLAMA3 || r->type == SL_ROPE_YARN)
    RS_NUM("original_max_position_embeddings", r->original_max_position_embeddings);
#undef RS_NUM
  return SL_OK;
}

static void set_defaults(sl_model_config *c) {
  memset(c, 0, sizeof *c);
  c->initializer_range = 0.02;
  c->bos_token_id = c->eos_token_id = -1;
  c->rms_norm_eps = 1e-6;
  c->rope_theta = 10000.0;
  c->state_size = 16;
  c->expand = 2;
  c->conv_kernel = 4;
  c->layer_norm_epsilon = 1e-5;
  c->use_conv_bias = 1;
  c->residual_in_fp32 = 1;
  c->time_step_min = 0.001;
  c->time_step_max = 0.1;
  c->time_step_floor = 1e-4;
  c->time_step_scale = 1.0;
  c->pad_vocab_size_multiple = 1;
  c->mixer_rms_eps = 1e-6;
  c->dt_limit[0] = 0.0;
  c->dt_limit[1] = INFINITY;
}

/* Qwen3-MoE's layer plan: every layer sparse (mlp_only_layers empty,
 * decoder_sparse_step 1, as the published models); dense layers among the
 * sparse ones are refused naming the field. */
static int qwen3_moe_layers(const char *p, json_t *o, sl_model_config *c) {
  int64_t step;
  int rc = dget_int(p, o, c, "decoder_sparse_step", &step);
  if (rc) return rc;
  if (step != 1)
    return sl_fail(SL_EINPUT,
                   "%s: field 'decoder_sparse_step' = %lld is not supported (expected 1: dense layers among the "
                   "sparse ones are not implemented)",
                   p, (long long)step);
  json_t *dl = jget(o, "mlp_only_layers");
  if (dl && !json_is_null(dl) && (!json_is_array(dl) || json_array_size(dl)))
    return sl_fail(SL_EINPUT,
                   "%s: field 'mlp_only_layers' is not supported unless empty (dense layers among the sparse ones "
                   "are not implemented)",
                   p);
  if ((rc = dget_int(p, o, c, "moe_intermediate_size", &c->moe_intermediate)) ||
      (rc = dget_bool(p, o, c, "norm_topk_prob", &c->moe_norm_topk)))
    return rc;
  if (c->moe_intermediate < 1 || c->moe_intermediate > CFG_MAX_INTER)
    return sl_fail(SL_EINPUT, "%s: field 'moe_intermediate_size' must be in [1, %lld], found %lld", p,
                   (long long)CFG_MAX_INTER, (long long)c->moe_intermediate);
  return SL_OK;
}

/* The sparse MLP (transformers' MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock):
 * E experts, top-k token-choice routing whose k weights are renormalised
 * always (Mixtral: num_local_experts, intermediate_size) or with
 * norm_topk_prob (Qwen3-MoE: num_experts, moe_intermediate_size). The
 * load-balancing loss transformers adds only with output_router_logits, and
 * Mixtral's training-time router jitter, are not implemented: refused by
 * name. */
static int parse_moe(const char *p, json_t *o, sl_model_config *c) {
  int rc, q3 = c->arch == SL_ARCH_QWEN3_MOE;
  double jitter = 0;
  const char *ne = q3 ? "num_experts" : "num_local_experts";
  if ((rc = dget_int(p, o, c, ne, &c->moe_experts)) || (rc = dget_int(p, o, c, "num_experts_per_tok", &c->moe_topk)) ||
      (rc = dget_num(p, o, c, "router_aux_loss_coef", &c->router_aux_loss_coef)) ||
      (!q3 && (rc = dget_num(p, o, c, "router_jitter_noise", &jitter))) ||
      (rc = dget_bool(p, o, c, "output_router_logits", &c->output_router_logits)))
    return rc;
  if (!(c->router_aux_loss_coef >= 0))
    return sl_fail(SL_EINPUT, "%s: field 'router_aux_loss_coef' must be >= 0, found %g", p, c->router_aux_loss_coef);
  c->moe_intermediate = c->intermediate_size;
  c->moe_norm_topk = 1;
  if (q3 && (rc = qwen3_moe_layers(p, o, c))) return rc;
  if (c->moe_experts < 1 || c->moe_experts > CFG_MAX_EXPERTS)
    return sl_fail(SL_EINPUT, "%s: field '%s' must be in [1, %d], found %lld", p, ne, CFG_MAX_EXPERTS,
                   (long long)c->moe_experts);
  if (c->moe_topk < 1 || c->moe_topk > c->moe_experts || c->moe_topk > 64)
    return sl_fail(SL_EINPUT, "%s: field 'num_experts_per_tok' must be in [1, min(64, %s = %lld)], found %lld", p, ne,
                   (long long)c->moe_experts, (long long)c->moe_topk);
  if (jitter != 0)
    return sl_fail(SL_EINPUT,
                   "%s: field 'router_jitter_noise' = %g is not supported (expected 0: router jitter is not "
                   "implemented)",
                   p, jitter);
  return SL_OK;
}

/* layer_types (Qwen3-MoE): accepted when every layer is "full_attention",
 * refused naming the field otherwise. */
static int want_full_attention(const char *p, json_t *o) {
  json_t *lt = jget(o, "layer_types");
  if (!lt || json_is_null(lt)) return SL_OK;
  if (!json_is_array(lt)) return sl_fail(SL_EINPUT, "%s: field 'layer_types' must be a list, found %s", p, jtype(lt));
  for (size_t i = 0; i < json_array_size(lt); i++) {
    json_t *e = json_array_get(lt, i);
    if (!json_is_string(e))
      return sl_fail(SL_EINPUT, "%s: field 'layer_types'[%zu] must be a string, found %s", p, i, jtype(e));
    if (strcmp(json_string_value(e), "full_attention"))
      return sl_fail(SL_EINPUT,
                     "%s: field 'layer_types'[%zu] = \"%s\" is not supported (expected \"full_attention\": "
                     "sliding windows are not implemented for Qwen3-MoE)",
                     p, i, json_string_value(e));
  }
  return SL_OK;
}

/* No layer slides: the config is use_sliding_window false's (rank texts, --save). */
static int qwen_no_window(sl_model_config *c) {
  int any = 0;
  for (int64_t i = 0; i < c->num_hidden_layers; i++) any |= c->layer_sliding[i];
  if (!any) c->sliding_window = 0;
  return SL_OK;
}

/* Qwen2 / Qwen3's per-layer attention type, as transformers'
 * configuration_qwen2.py / configuration_qwen3.py (Qwen2Config.__init__):
 * sliding_window is kept only with use_sliding_window (default 4096; null:
 * none); layer_types, when absent, is "sliding_attention" on the layers
 * i >= max_window_layers (default 28) while a window is kept and
 * "full_attention" elsewhere; modeling_qwen2.py's Qwen2Attention gives
 * sliding_window to the layers whose type is "sliding_attention". A sliding
 * entry without a window is refused (transformers'
 * create_sliding_window_causal_mask has none to apply). */
static int qwen_layer_types(const char *p, json_t *o, sl_model_config *c) {
  int use = 0, rc;
  int64_t L = c->num_hidden_layers;
  json_t *sw = jget(o, "sliding_window"), *lt = jget(o, "layer_types");
  if ((rc = dget_bool(p, o, c, "use_sliding_window", &use)) ||
      (rc = dget_int(p, o, c, "max_window_layers", &c->max_window_layers)))
    return rc;
  c->sliding_window = 0;
  if (use && !(sw && json_is_null(sw))) {
    if ((rc = dget_int(p, o, c, "sliding_window", &c->sliding_window))) return rc;
    if (c->sliding_window <= 0)
      return sl_fail(SL_EINPUT,
                     "%s: field 'sliding_window' must be positive or null with use_sliding_window, found %lld", p,
                     (long long)c->sliding_window);
  }
  if (L < 1 || L > SL_CFG_MAX_LAYERS) return SL_OK; /* sl_hfconfig_validate names num_hidden_layers */
  if (!lt || json_is_null(lt)) {
    for (int64_t i = 0; i < L; i++) c->layer_sliding[i] = c->sliding_window > 0 && i >= c->max_window_layers;
    return qwen_no_window(c);
  }
  if (!json_is_array(lt) || (int64_t)json_array_size(lt) != L)
    return sl_fail(SL_EINPUT, "%s: field 'layer_types' must be a list of num_hidden_layers = %lld strings", p,
                   (long long)L);
  for (int64_t i = 0; i < L; i++) {
    json_t *e = json_array_get(lt, (size_t)i);
    const char *t = json_is_string(e) ? json_string_value(e) : NULL;
    if (!t)
      return sl_fail(SL_EINPUT, "%s: field 'layer_types'[%lld] must be a string, found %s", p, (long long)i, jtype(e));
    if (strcmp(t, "sliding_attention") && strcmp(t, "full_attention"))
      return sl_fail(SL_EINPUT,
                     "%s: field 'layer_types'[%lld] = \"%s\" is not supported (expected \"full_attention\" or "
                     "\"sliding_attention\")",
                     p, (long long)i, t);
    c->layer_sliding[i] = !strcmp(t, "sliding_attention");
    if (c->layer_sliding[i] && c->sliding_window <= 0)
      return sl_fail(SL_EINPUT,
                     "%s: field 'layer_types'[%lld] is \"sliding_attention\" but no window is set (use_sliding_window "
                     "is false or sliding_window null; transformers has no window to apply)",
                     p, (long long)i);
  }
  return qwen_no_window(c);
}

/* Mistral's window on every layer, Gemma's on the layers i with
 * (i + 1) % window_every != 0 (window_every 0: every layer). */
static void window_pattern(sl_model_config *c) {
  for (int64_t i = 0; i < c->num_hidden_layers && i < SL_CFG_MAX_LAYERS; i++)
    c->layer_sliding[i] = c->sliding_window > 0 && !(c->window_every && (i + 1) % c->window_every == 0);
}

int sl_cfg_moe_layer(const sl_model_config *c, int64_t l) {
  return c->moe_experts > 0 && (!c->layer_pattern[0] || c->layer_pattern[l] == 'E');
}

int64_t sl_cfg_moe_layers(const sl_model_config *c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c->num_hidden_layers; l++) n += sl_cfg_moe_layer(c, l);
  return n;
}

int64_t sl_cfg_layer_window(const sl_model_config *c, int64_t l) {
  return l >= 0 && l < SL_CFG_MAX_LAYERS && c->layer_sliding[l] ? c->sliding_window : 0;
}

/* The Llama block's options by architecture (transformers' modeling_llama.py,
 * modeling_qwen2.py, modeling_qwen3.py): Llama's attention_bias (q/k/v/o) and
 * mlp_bias (gate/up/down); Qwen2's q/k/v biases (o_proj unbiased, no field
 * says so); Qwen3's per-head q/k RMSNorm with attention_bias (q/k/v/o);
 * Gemma's options are parse_gemma's. */
static int parse_block_options(const char *p, json_t *o, sl_model_config *c) {
  int rc, ab = 0;
  if (c->gemma) return SL_OK; /* attention_bias checked in parse_gemma; no MLP bias field */
  if (c->arch == SL_ARCH_QWEN3_MOE) {
    if ((rc = want_false(p, o, "use_sliding_window", "sliding windows are not implemented for Qwen3-MoE"))) return rc;
  } else if ((c->arch == SL_ARCH_QWEN2 || c->arch == SL_ARCH_QWEN3) && (rc = qwen_layer_types(p, o, c))) {
    return rc;
  }
  if (c->arch == SL_ARCH_QWEN2) {
    c->qkv_bias = 1;
    return want_false(p, o, "use_mrope", "multimodal RoPE is not implemented");
  }
  if (c->arch == SL_ARCH_MISTRAL || c->arch == SL_ARCH_MIXTRAL) {
    if ((rc = want_false(p, o, "attention_bias", "q/k/v/o projections have no bias here")) ||
        (rc = want_false(p, o, "mlp_bias", "MLP projections have no bias here")))
      return rc;
    return SL_OK;
  }
  if ((rc = dget_bool(p, o, c, "attention_bias", &ab))) return rc;
  c->qkv_bias = c->o_bias = ab;
  if (c->arch == SL_ARCH_QWEN3 || c->arch == SL_ARCH_QWEN3_MOE) {
    c->qk_norm = 1;
    return c->arch == SL_ARCH_QWEN3_MOE ? want_full_attention(p, o) : SL_OK;
  }
  return dget_bool(p, o, c, "mlp_bias", &c->mlp_bias); /* Llama */
}

/* A softcap: absent -> def (0: none), null -> 0 (none), else a positive number. */
static int get_cap(const char *p, json_t *o, const char *key, double def, double *out) {
  json_t *v = jget(o, key);
  if (!v || json_is_null(v)) {
    *out = v ? 0 : def;
    rec_fmt(o, key, "%.17g", *out);
    return SL_OK;
  }
  int rc = get_num(p, o, key, def, out);
  if (!rc && !(*out > 0)) return sl_fail(SL_EINPUT, "%s: field '%s' must be positive or null, found %g", p, key, *out);
  return rc;
}

/* Gemma's layer_types, when given: "sliding_attention" on layers i with
 * (i + 1) % k != 0, "full_attention" on the others, for one k (Gemma 2: 2;
 * Gemma 3: read from the list, the first full layer's index + 1, 0 when none
 * is full: a window on every layer), which must match `pattern` when that
 * is not -1. Sets c->window_every. */
static int gemma_layer_types(const char *p, json_t *o, sl_model_config *c, int64_t pattern) {
  json_t *lt = jget(o, "layer_types");
  if (!lt || json_is_null(lt)) return SL_OK;
  if (!json_is_array(lt) || (int64_t)json_array_size(lt) != c->num_hidden_layers)
    return sl_fail(SL_EINPUT, "%s: field 'layer_types' must be an array of num_hidden_layers = %lld strings", p,
                   (long long)c->num_hidden_layers);
  int64_t k = 0;
  for (size_t i = 0; i < json_array_size(lt) && !k; i++) {
    json_t *t = json_array_get(lt, i);
    if (json_is_string(t) && !strcmp(json_string_value(t), "full_attention")) k = (int64_t)i + 1;
  }
  if (pattern >= 0 && k != pattern && !(k == 0 && pattern > c->num_hidden_layers))
    return sl_fail(SL_EINPUT,
                   "%s: field 'layer_types' has its first full_attention layer at %lld (expected %lld: the "
                   "sliding_window_pattern / Gemma 2 alternation)",
                   p, (long long)k - 1, (long long)pattern - 1);
  for (size_t i = 0; i < json_array_size(lt); i++) {
    json_t *t = json_array_get(lt, i);
    const char *want = k && (i + 1) % (size_t)k == 0 ? "full_attention" : "sliding_attention";
    if (!json_is_string(t) || strcmp(json_string_value(t), want))
      return sl_fail(SL_EINPUT,
                     "%s: field 'layer_types[%zu]' is not \"%s\": only a periodic pattern (sliding on layers i with "
                     "(i + 1) %% %lld != 0) is implemented",
                     p, i, want, (long long)k);
  }
  c->window_every = (int)k;
  return SL_OK;
}

/* Gemma 2 and Gemma 3 text (transformers' configuration_gemma2.py /
 * configuration_gemma3.py defaults): the activation, softcaps,
 * query_pre_attn_scalar, the sliding window's layers (Gemma 2: every other;
 * Gemma 3: sliding_window_pattern or layer_types), Gemma 3's q/k norms, its
 * rope_theta default and the sliding layers' rope_local_base_freq. */
static int parse_gemma(const char *p, json_t *o, sl_model_config *c) {
  int rc, g3 = c->arch == SL_ARCH_GEMMA3;
  int64_t pat = 2;
  c->gemma = 1;
  c->qk_norm = g3;
  c->window_every = 2;
  json_t *ha = jget(o, "hidden_activation");
  const char *key = ha && !json_is_null(ha) ? "hidden_activation" : "hidden_act";
  json_t *v = jget(o, key);
  if (v && !json_is_null(v) && !(json_is_string(v) && !strcmp(json_string_value(v), "gelu_pytorch_tanh")))
    return sl_fail(SL_EINPUT, "%s: field '%s' must be \"gelu_pytorch_tanh\" (Gemma's GeGLU)", p, key);
  double cap_a = 0, cap_f = 0;
  if ((rc = def_of(c, "attn_logit_softcapping", &cap_a)) || (rc = def_of(c, "final_logit_softcapping", &cap_f)) ||
      (rc = get_cap(p, o, "attn_logit_softcapping", cap_a == NONE ? 0 : cap_a, &c->attn_logit_softcapping)) ||
      (rc = get_cap(p, o, "final_logit_softcapping", cap_f == NONE ? 0 : cap_f, &c->final_logit_softcapping)) ||
      (rc = dget_num(p, o, c, "query_pre_attn_scalar", &c->query_pre_attn_scalar)) ||
      (rc = dget_int(p, o, c, "sliding_window", &c->sliding_window)) ||
      (rc = want_false(p, o, "attention_bias", "q/k/v/o projections have no bias here")))
    return rc;
  if (!(c->query_pre_attn_scalar > 0))
    return sl_fail(SL_EINPUT, "%s: field 'query_pre_attn_scalar' must be positive, found %g", p,
                   c->query_pre_attn_scalar);
  if (g3) {
    json_t *sp = jget(o, "sliding_window_pattern");
    if ((rc = dget_num(p, o, c, "rope_local_base_freq", &c->rope_local_base_freq)) ||
        (rc = dget_int(p, o, c, "sliding_window_pattern", &pat)) ||
        (rc = want_false(p, o, "use_bidirectional_attention", "bidirectional attention is not implemented")))
      return rc;
    if (c->attn_logit_softcapping > 0)
      return sl_fail(SL_EINPUT,
                     "%s: field 'attn_logit_softcapping' = %g is not supported for Gemma 3 (expected null, as "
                     "the published configs: a capped Gemma 3 attention is not implemented)",
                     p, c->attn_logit_softcapping);
    if (!(c->rope_local_base_freq > 0))
      return sl_fail(SL_EINPUT, "%s: field 'rope_local_base_freq' must be positive, found %g", p,
                     c->rope_local_base_freq);
    if (pat < 1 || pat > INT32_MAX)
      return sl_fail(SL_EINPUT, "%s: field 'sliding_window_pattern' must be a positive integer, found %lld", p,
                     (long long)pat);
    c->window_every = (int)pat;
    if (!sp || json_is_null(sp)) pat = -1; /* layer_types alone says which layers slide */
  }
  return gemma_layer_types(p, o, c, pat);
}

/* Mistral / Mixtral's sliding_window: absent -> the family's default
 * (MistralConfig 4096, MixtralConfig None), null -> none. */
static int get_window(const char *p, json_t *o, sl_model_config *c) {
  double d = 0;
  int rc = def_of(c, "sliding_window", &d);
  json_t *v = jget(o, "sliding_window");
  if (rc) return rc;
  if (v && json_is_null(v)) {
    c->sliding_window = 0;
    rec_fmt(o, "sliding_window", "0");
    return SL_OK;
  }
  rc = get_int(p, o, "sliding_window", 0, d == NONE ? 0 : (int64_t)d, &c->sliding_window);
  return rc;
}

static int parse_attn(const char *p, json_t *o, sl_model_config *c) {
  int rc;
  int mistral = c->arch == SL_ARCH_MISTRAL || c->arch == SL_ARCH_MIXTRAL, gemma2 = c->arch == SL_ARCH_GEMMA2,
      gemma3 = c->arch == SL_ARCH_GEMMA3, gemma = gemma2 || gemma3;
  int64_t kv = 0;
  if ((rc = dget_int(p, o, c, "hidden_size", &c->hidden_size)) ||
      (rc = dget_int(p, o, c, "intermediate_size", &c->intermediate_size)) ||
      (rc = dget_int(p, o, c, "num_hidden_layers", &c->num_hidden_layers)) ||
      (rc = dget_int(p, o, c, "num_attention_heads", &c->num_attention_heads)) ||
      (rc = dget_int(p, o, c, "vocab_size", &c->vocab_size)) || (rc = dget_int(p, o, c, "num_key_value_heads", &kv)) ||
      (rc = dget_int(p, o, c, "max_position_embeddings", &c->max_position_embeddings)) ||
      (rc = dget_num(p, o, c, "rms_norm_eps", &c->rms_norm_eps)) ||
      (rc = dget_num(p, o, c, "rope_theta", &c->rope_theta)) ||
      (rc = dget_num(p, o, c, "initializer_range", &c->initializer_range)) ||
      (rc = dget_bool(p, o, c, "tie_word_embeddings", &c->tie_word_embeddings)) || (rc = get_bos(p, o, c)) ||
      (rc = get_eos(p, o, c)) || (rc = gemma ? parse_gemma(p, o, c) : want_act(p, o, "hidden_act")))
    return rc;
  c->num_key_value_heads = kv == (int64_t)HEADS ? c->num_attention_heads : kv; /* Llama: None -> heads */
  json_t *kvv = jget(o, "num_key_value_heads");
  if ((!kvv || json_is_null(kvv)) && c->num_attention_heads > 0 && c->num_key_value_heads > 0 &&
      c->num_attention_heads % c->num_key_value_heads != 0)
    return sl_fail(SL_EINPUT,
                   "%s: field 'num_key_value_heads' is absent, and transformers' default for model type '%s' (%lld) "
                   "does not divide num_attention_heads = %lld: write num_key_value_heads into config.json",
                   p, sl_arch_name(c->arch), (long long)c->num_key_value_heads, (long long)c->num_attention_heads);
  rec_fmt(o, "num_key_value_heads", "%lld", (long long)c->num_key_value_heads);
  if ((rc = parse_block_options(p, o, c))) return rc;
  if (mistral && (rc = get_window(p, o, c))) return rc;
  if (mistral || gemma) window_pattern(c);
  if ((c->arch == SL_ARCH_MIXTRAL || c->arch == SL_ARCH_QWEN3_MOE) && (rc = parse_moe(p, o, c))) return rc;
  if ((rc = want_pos_emb(p, o))) return rc;
  if ((rc = parse_rope_scaling(p, o, c))) return rc;
  if (gemma3 && c->rope_scaling.type != SL_ROPE_DEFAULT && c->rope_scaling.type != SL_ROPE_LINEAR)
    return sl_fail(SL_EINPUT,
                   "%s: field 'rope_scaling' of type %s is not supported for Gemma 3 (expected null, default or "
                   "linear: the published configs' rules)",
                   p, sl_rope_type_name(c->rope_scaling.type));
  if (c->num_attention_heads <= 0)
    return sl_fail(SL_EINPUT, "%s: field 'num_attention_heads' must be positive, found %lld", p,
                   (long long)c->num_attention_heads);
#ifdef SL_CFG_TEST_FIELD /* tests/unit/formats/test_cfg_fields.c: a field a new family might read */
  double made_up = 0;
  if ((rc = get_num(p, o, "made_up_field", 0.25, &made_up))) return rc;
#endif
  if ((rc = dget_int(p, o, c, "head_dim", &c->head_dim))) return rc;
  if (c->head_dim == (int64_t)HDIV) { /* None: hidden_size / num_attention_heads (Qwen3: 128; Gemma: 256) */
    if (c->hidden_size % c->num_attention_heads != 0)
      return sl_fail(SL_EINPUT,
                     "%s: num_attention_heads = %lld does not divide hidden_size = %lld (and no "
                     "head_dim is given)",
                     p, (long long)c->num_attention_heads, (long long)c->hidden_size);
    c->head_dim = c->hidden_size / c->num_attention_heads;
    rec_fmt(o, "head_dim", "%lld", (long long)c->head_dim);
  }
  return SL_OK;
}

/* The fields Mamba and Mamba-2 (HF) share, with the family's transformers defaults. */
static int ssm_common_hf(const char *p, json_t *o, sl_model_config *c) {
  int rc;
  if ((rc = dget_int(p, o, c, "hidden_size", &c->hidden_size)) ||
      (rc = dget_int(p, o, c, "num_hidden_layers", &c->num_hidden_layers)) ||
      (rc = dget_int(p, o, c, "vocab_size", &c->vocab_size)) ||
      (rc = dget_int(p, o, c, "state_size", &c->state_size)) || (rc = dget_int(p, o, c, "expand", &c->expand)) ||
      (rc = dget_int(p, o, c, "conv_kernel", &c->conv_kernel)) ||
      (rc = dget_num(p, o, c, "layer_norm_epsilon", &c->layer_norm_epsilon)) ||
      (rc = dget_bool(p, o, c, "use_bias", &c->use_bias)) ||
      (rc = dget_bool(p, o, c, "use_conv_bias", &c->use_conv_bias)) ||
      (rc = dget_bool(p, o, c, "residual_in_fp32", &c->residual_in_fp32)) ||
      (rc = dget_bool(p, o, c, "tie_word_embeddings", &c->tie_word_embeddings)) ||
      (rc = dget_num(p, o, c, "initializer_range", &c->initializer_range)) ||
      (rc = dget_num(p, o, c, "time_step_min", &c->time_step_min)) ||
      (rc = dget_num(p, o, c, "time_step_max", &c->time_step_max)) ||
      (rc = dget_num(p, o, c, "time_step_floor", &c->time_step_floor)) ||
      (rc = dget_int(p, o, c, "max_position_embeddings", &c->max_position_embeddings)) || (rc = get_bos(p, o, c)) ||
      (rc = get_eos(p, o, c)) || (rc = want_act(p, o, "hidden_act")) || (rc = want_pos_emb(p, o)))
    return rc;
  return SL_OK;
}

static int parse_mamba_hf(const char *p, json_t *o, sl_model_config *c) {
  int rc;
  double d = 0;
  if ((rc = ssm_common_hf(p, o, c)) || (rc = def_of(c, "intermediate_size", &d)) ||
      (rc = def_of(c, "time_step_rank", &d)))
    return rc;
  int64_t inter_def = c->expand * c->hidden_size; /* k_defaults: EXPANDH; time_step_rank AUTO (get_dt_rank) */
  if ((rc = get_int(p, o, "intermediate_size", 0, inter_def, &c->intermediate_size)) ||
      (rc = get_dt_rank(p, o, "time_step_rank", c->hidden_size, &c->time_step_rank)) ||
      (rc = dget_num(p, o, c, "time_step_scale", &c->time_step_scale)))
    return rc;
  /* Falcon-Mamba (transformers' modeling_falcon_mamba.py): the same mixer with
   * a weightless RMSNorm of dt, B and C after the x_proj split. use_mambapy /
   * use_falcon_mambapy and use_associative_scan pick an implementation of the
   * same scan (accepted, like time_step_init_scheme and rescale_prenorm_residual,
   * which only shape HF's own init). */
  if (c->mixer_rms && (rc = dget_num(p, o, c, "mixer_rms_eps", &c->mixer_rms_eps))) return rc;
  return SL_OK;
}

/* time_step_limit: a list of two numbers (Python's json writes the default's
 * upper bound as Infinity), lo <= hi, lo >= 0; absent or null: (0, inf). */
static int get_dt_limit_as(const char *p, json_t *o, sl_model_config *c, const char *key) {
  json_t *v = jget(o, key);
  c->dt_limit[0] = 0.0, c->dt_limit[1] = INFINITY;
  if (v && !json_is_null(v)) {
    double a = 0, b = 0;
    if (!json_is_array(v) || json_array_size(v) != 2 || !nonfinite_value(json_array_get(v, 0), &a) ||
        !nonfinite_value(json_array_get(v, 1), &b))
      return sl_fail(SL_EINPUT, "%s: field '%s' must be a list of two numbers [min, max], found %s", p, key,
                     jtype(v));
    if (!(a >= 0) || !(b >= a) || isinf(a))
      return sl_fail(SL_EINPUT, "%s: field '%s' = [%g, %g]: expected 0 <= min <= max, min finite", p, key, a, b);
    c->dt_limit[0] = a, c->dt_limit[1] = b;
  }
  rec_fmt(o, "time_step_limit", "[%.17g, %.17g]", c->dt_limit[0], c->dt_limit[1]);
  if (strcmp(key, "time_step_limit")) rec_del(key); /* a legacy spelling: recorded as the modern one */
  return SL_OK;
}
static int get_dt_limit(const char *p, json_t *o, sl_model_config *c) { return get_dt_limit_as(p, o, c, "time_step_limit"); }

/* transformers' Mamba2Config (modeling_mamba2.py: Mamba2Mixer). d_inner is
 * expand * hidden_size (the config has no intermediate_size); time_step_rank
 * is read by nothing in Mamba-2 (no dt_proj) and rms_norm changes nothing
 * (the mixer always applies its gated norm): both accepted. */
static int parse_mamba2_hf(const char *p, json_t *o, sl_model_config *c) {
  int rc;
  int rmsn = 1;
  if ((rc = ssm_common_hf(p, o, c)) || (rc = dget_int(p, o, c, "num_heads", &c->ssm_heads)) ||
      (rc = dget_int(p, o, c, "head_dim", &c->ssm_head_dim)) || (rc = dget_int(p, o, c, "n_groups", &c->ssm_groups)) ||
      (rc = dget_int(p, o, c, "chunk_size", &c->ssm_chunk)) || (rc = get_dt_limit(p, o, c)) ||
      (rc = get_bool(p, o, "rms_norm", 1, &rmsn)))
    return rc;
  c->intermediate_size = c->expand * c->hidden_size;
  rec_fmt(o, "intermediate_size", "%lld", (long long)c->intermediate_size);
  return SL_OK;
}

/* key, or transformers' legacy spelling old when only that is present
 * (NemotronHConfig's __post_init__: mamba_n_groups -> n_groups, ...). */
static const char *legacy_key(json_t *o, const char *key, const char *old) {
  json_t *v = jget(o, key);
  if ((v && !json_is_null(v)) || !old) return key;
  if (jget(o, old)) return old; /* its line becomes key's (lget_*) */
  rec_del(old);                 /* absent: the old spelling leaves no line, so a re-saved file reads the same */
  return key;
}
static int lget_int(const char *p, json_t *o, const sl_model_config *c, const char *key, const char *old, int64_t *out) {
  double d = 0;
  const char *k = legacy_key(o, key, old);
  int rc = def_of(c, key, &d);
  if (!rc) rc = get_int(p, o, k, 0, (int64_t)d, out);
  if (!rc && k != key) rec_fmt(o, key, "%lld", (long long)*out), rec_del(k);
  return rc;
}
static int lget_num(const char *p, json_t *o, const sl_model_config *c, const char *key, const char *old, double *out) {
  double d = 0;
  const char *k = legacy_key(o, key, old);
  int rc = def_of(c, key, &d);
  if (!rc) rc = get_num(p, o, k, d, out);
  if (!rc && k != key) rec_fmt(o, key, "%.17g", *out), rec_del(k);
  return rc;
}

/* A string field that must be `want` (absent: the default, which is). */
static int want_str(const char *p, json_t *o, const char *key, const char *want) {
  json_t *v = jget(o, key);
  if (v && !json_is_null(v) && (!json_is_string(v) || strcmp(json_string_value(v), want)))
    return sl_fail(SL_EINPUT, "%s: field '%s' = %s is not supported (expected \"%s\")", p, key,
                   json_is_string(v) ? json_string_value(v) : jtype(v), want);
  rec_fmt(o, key, "%s", want);
  return SL_OK;
}

/* Nemotron-H's layers: hybrid_override_pattern ("M-M*-...", Megatron-Core's
 * letters) or layers_block_type / layer_types (transformers 5's names:
 * mamba | linear_attention, attention | full_attention, mlp, moe) into
 * c->layer_pattern; num_hidden_layers is the pattern's length (transformers
 * warns about another value and takes the pattern's: so does this reader). */
static int nemotron_layers(const char *p, json_t *o, sl_model_config *c) {
  json_t *pat = jget(o, "hybrid_override_pattern"), *lt = jget(o, "layers_block_type");
  const char *field = "layers_block_type";
  if (!lt || json_is_null(lt)) lt = jget(o, "layer_types"), field = "layer_types";
  size_t n = 0;
  if (lt && !json_is_null(lt)) {
    if (!json_is_array(lt)) return sl_fail(SL_EINPUT, "%s: field '%s' must be a list of strings, found %s", p, field, jtype(lt));
    static const struct { const char *name; char ch; } k[] = {
        {"mamba", 'M'}, {"linear_attention", 'M'}, {"attention", '*'}, {"full_attention", '*'}, {"mlp", '-'}, {"moe", 'E'}};
    for (n = 0; n < json_array_size(lt) && n < SL_CFG_MAX_LAYERS; n++) {
      json_t *e = json_array_get(lt, n);
      char ch = 0;
      for (size_t i = 0; json_is_string(e) && i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(json_string_value(e), k[i].name)) ch = k[i].ch;
      if (!ch)
        return sl_fail(SL_EINPUT, "%s: field '%s'[%zu] = %s (expected mamba, attention, mlp or moe)", p, field, n,
                       json_is_string(e) ? json_string_value(e) : jtype(e));
      c->layer_pattern[n] = ch;
    }
  } else if (pat && !json_is_null(pat)) {
    if (!json_is_string(pat))
      return sl_fail(SL_EINPUT, "%s: field 'hybrid_override_pattern' must be a string, found %s", p, jtype(pat));
    const char *q = json_string_value(pat);
    for (n = 0; q[n] && n < SL_CFG_MAX_LAYERS; n++) {
      if (!strchr("M*-E", q[n]))
        return sl_fail(SL_EINPUT, "%s: field 'hybrid_override_pattern' has '%c' at layer %zu (expected M, *, - or E)",
                       p, q[n], n);
      c->layer_pattern[n] = q[n];
    }
  } else {
    return sl_fail(SL_EINPUT, "%s: Nemotron-H needs 'hybrid_override_pattern' (or 'layers_block_type'): each layer's kind", p);
  }
  c->layer_pattern[n] = 0;
  if (n == 0 || n >= SL_CFG_MAX_LAYERS)
    return sl_fail(SL_EINPUT, "%s: the layer pattern has %zu layers (expected 1 to %d)", p, n, SL_CFG_MAX_LAYERS - 1);
  int64_t given = -1;
  int rc = get_int(p, o, "num_hidden_layers", 0, -1, &given);
  if (rc) return rc;
  if (given >= 0 && given != (int64_t)n)
    sl_log(SL_LOG_WARN, "%s: num_hidden_layers %lld differs from the layer pattern's %zu layers: the pattern's is used, "
           "as transformers does", p, (long long)given, n);
  c->num_hidden_layers = (int64_t)n;
  rec_put("hybrid_override_pattern", c->layer_pattern);
  rec_fmt(o, "num_hidden_layers", "%zu", n);
  rec_del("layers_block_type"), rec_del("layer_types");
  return SL_OK;
}

/* Nemotron-H's MoE layers ('E'; transformers' NemotronHMoE, Nemotron 3 Nano):
 * DeepSeek-V3's router (DeepseekV3TopkRouter: sigmoid scores, the expert
 * bias e_score_correction_bias for the choice only, the chosen scores
 * renormalised with norm_topk_prob, times routed_scaling_factor) over
 * n_routed_experts non-gated squared-ReLU experts of moe_intermediate_size,
 * plus one shared expert of moe_shared_expert_intermediate_size. Read only
 * when the pattern has an 'E' (a dense config's fields stay as they were).
 * Refused by name: group-limited routing (topk_group < n_group), the latent
 * MoE (moe_latent_size), a shared-expert count other than 1. */
static int nemotron_moe(const char *p, json_t *o, sl_model_config *c) {
  int64_t ng = 1, tg = 1, ns = 1;
  int rc;
  if ((rc = dget_int(p, o, c, "n_routed_experts", &c->moe_experts)) ||
      (rc = dget_int(p, o, c, "num_experts_per_tok", &c->moe_topk)) ||
      (rc = dget_int(p, o, c, "moe_intermediate_size", &c->moe_intermediate)) ||
      (rc = dget_int(p, o, c, "moe_shared_expert_intermediate_size", &c->moe_shared_intermediate)) ||
      (rc = dget_int(p, o, c, "n_shared_experts", &ns)) ||
      (rc = dget_num(p, o, c, "routed_scaling_factor", &c->moe_routed_scale)) ||
      (rc = dget_bool(p, o, c, "norm_topk_prob", &c->moe_norm_topk)) || (rc = dget_int(p, o, c, "n_group", &ng)) ||
      (rc = dget_int(p, o, c, "topk_group", &tg)))
    return rc;
  json_t *lat = jget(o, "moe_latent_size");
  if (lat && !json_is_null(lat))
    return sl_fail(SL_EINPUT, "%s: field 'moe_latent_size' = %s: the latent MoE is not supported (expected null)", p,
                   jtype(lat));
  rec_put("moe_latent_size", "null");
  if (c->moe_experts < 1 || c->moe_experts > CFG_MAX_EXPERTS)
    return sl_fail(SL_EINPUT, "%s: field 'n_routed_experts' must be in [1, %d], found %lld", p, CFG_MAX_EXPERTS,
                   (long long)c->moe_experts);
  if (c->moe_topk < 1 || c->moe_topk > c->moe_experts || c->moe_topk > 64)
    return sl_fail(SL_EINPUT, "%s: field 'num_experts_per_tok' must be in [1, min(64, n_routed_experts = %lld)], found %lld",
                   p, (long long)c->moe_experts, (long long)c->moe_topk);
  if (c->moe_intermediate < 1 || c->moe_intermediate > CFG_MAX_INTER)
    return sl_fail(SL_EINPUT, "%s: field 'moe_intermediate_size' must be in [1, %lld], found %lld", p,
                   (long long)CFG_MAX_INTER, (long long)c->moe_intermediate);
  if (c->moe_shared_intermediate < 1 || c->moe_shared_intermediate > CFG_MAX_INTER)
    return sl_fail(SL_EINPUT, "%s: field 'moe_shared_expert_intermediate_size' must be in [1, %lld], found %lld", p,
                   (long long)CFG_MAX_INTER, (long long)c->moe_shared_intermediate);
  if (ns != 1)
    return sl_fail(SL_EINPUT, "%s: field 'n_shared_experts' = %lld is not supported (expected 1: transformers builds one "
                   "shared expert)", p, (long long)ns);
  if (!(c->moe_routed_scale > 0) || !isfinite(c->moe_routed_scale))
    return sl_fail(SL_EINPUT, "%s: field 'routed_scaling_factor' must be positive, found %g", p, c->moe_routed_scale);
  if (ng < 1 || c->moe_experts % ng || tg < 1 || tg > ng)
    return sl_fail(SL_EINPUT, "%s: fields 'n_group' = %lld, 'topk_group' = %lld: n_group must divide n_routed_experts "
                   "(%lld) and 1 <= topk_group <= n_group", p, (long long)ng, (long long)tg, (long long)c->moe_experts);
  if (tg < ng)
    return sl_fail(SL_EINPUT, "%s: 'topk_group' = %lld < 'n_group' = %lld: group-limited routing is not supported "
                   "(expected topk_group = n_group)", p, (long long)tg, (long long)ng);
  c->moe_sigmoid = 1;
  c->router_aux_loss_coef = 0; /* NemotronHMoE adds no load-balancing loss */
  return SL_OK;
}

/* transformers' NemotronHConfig (modeling_nemotron_h.py): a residual stream of
 * layers norm -> mixer -> residual, the mixer Mamba-2 (M: its width
 * mamba_num_heads x mamba_head_dim, the gated norm per group), attention
 * without position embeddings (*) or a squared-ReLU MLP (-). */
static int parse_nemotron_h(const char *p, json_t *o, sl_model_config *c) {
  int rc, bias = 0;
  int64_t hd = 0;
  if ((rc = nemotron_layers(p, o, c)) || (rc = dget_int(p, o, c, "hidden_size", &c->hidden_size)) ||
      (rc = dget_int(p, o, c, "intermediate_size", &c->intermediate_size)) ||
      (rc = dget_int(p, o, c, "vocab_size", &c->vocab_size)) ||
      (rc = dget_int(p, o, c, "num_attention_heads", &c->num_attention_heads)) ||
      (rc = dget_int(p, o, c, "num_key_value_heads", &c->num_key_value_heads)) ||
      (rc = lget_int(p, o, c, "head_dim", "attention_head_dim", &hd)) ||
      (rc = dget_int(p, o, c, "max_position_embeddings", &c->max_position_embeddings)) ||
      (rc = dget_num(p, o, c, "initializer_range", &c->initializer_range)) ||
      (rc = dget_bool(p, o, c, "tie_word_embeddings", &c->tie_word_embeddings)) || (rc = get_bos(p, o, c)) ||
      (rc = get_eos(p, o, c)) || (rc = dget_bool(p, o, c, "attention_bias", &bias)) ||
      (rc = dget_bool(p, o, c, "mlp_bias", &c->mlp_bias)) ||
      (rc = dget_num(p, o, c, "layer_norm_epsilon", &c->layer_norm_epsilon)) ||
      (rc = dget_bool(p, o, c, "use_bias", &c->use_bias)) ||
      (rc = dget_bool(p, o, c, "residual_in_fp32", &c->residual_in_fp32)) ||
      (rc = lget_int(p, o, c, "ssm_state_size", NULL, &c->state_size)) ||
      (rc = lget_int(p, o, c, "mamba_num_heads", NULL, &c->ssm_heads)) ||
      (rc = lget_int(p, o, c, "mamba_head_dim", NULL, &c->ssm_head_dim)) ||
      (rc = lget_int(p, o, c, "n_groups", "mamba_n_groups", &c->ssm_groups)) ||
      (rc = lget_int(p, o, c, "conv_kernel", "mamba_d_conv", &c->conv_kernel)) ||
      (rc = lget_int(p, o, c, "expand", "mamba_expand", &c->expand)) ||
      (rc = lget_int(p, o, c, "chunk_size", "mamba_chunk_size", &c->ssm_chunk)) ||
      (rc = lget_num(p, o, c, "time_step_min", "mamba_dt_min", &c->time_step_min)) ||
      (rc = lget_num(p, o, c, "time_step_max", "mamba_dt_max", &c->time_step_max)) ||
      (rc = lget_num(p, o, c, "time_step_floor", "mamba_dt_init_floor", &c->time_step_floor)) ||
      (rc = get_dt_limit_as(p, o, c, legacy_key(o, "time_step_limit", "mamba_dt_limit"))) ||
      (rc = want_str(p, o, "mlp_hidden_act", "relu2")) ||
      (rc = want_act(p, o, "mamba_hidden_act")))
    return rc;
  int cb = 1;
  const char *cbk = legacy_key(o, "use_conv_bias", "mamba_conv_bias");
  if ((rc = get_bool(p, o, cbk, 1, &cb))) return rc;
  c->use_conv_bias = cb;
  if (cbk[0] == 'm') rec_fmt(o, "use_conv_bias", "%d", cb), rec_del(cbk);
  json_t *sw = jget(o, "sliding_window");
  if (sw && !json_is_null(sw))
    return sl_fail(SL_EINPUT, "%s: field 'sliding_window' = %s: Nemotron-H's attention is full causal here (expected null)",
                   p, jtype(sw));
  c->head_dim = hd;
  c->qkv_bias = c->o_bias = bias; /* JambaAttention: attention_bias on q, k, v and o */
  c->rms_norm_eps = c->layer_norm_epsilon; /* the block norms' (NemotronHRMSNorm) and the final norm's */
  c->rope_theta = 1e4; /* no RoPE: the table the attention kind builds is never read */
  c->mlp_relu2 = 1;
  c->no_rope = 1;
  return strchr(c->layer_pattern, 'E') ? nemotron_moe(p, o, c) : SL_OK;
}

/* A multiplier field: a positive number (the family's default when absent). */
static int get_mult(const char *p, json_t *o, const sl_model_config *c, const char *key, double *out) {
  int rc = dget_num(p, o, c, key, out);
  if (!rc && !(*out > 0)) return sl_fail(SL_EINPUT, "%s: field '%s' must be positive, found %g", p, key, *out);
  return rc;
}

/* transformers' GraniteConfig (modeling_granite.py): Llama's layers with the muP multipliers: embeddings times
 * embedding_multiplier, attention scores times attention_multiplier (the scale, not head_dim^-0.5), each residual
 * update times residual_multiplier, the logits divided by logits_scaling. */
static int granite_mults(const char *p, json_t *o, sl_model_config *c) {
  int rc;
  if ((rc = get_mult(p, o, c, "embedding_multiplier", &c->embedding_mult)) ||
      (rc = get_mult(p, o, c, "logits_scaling", &c->logits_scaling)) ||
      (rc = get_mult(p, o, c, "residual_multiplier", &c->residual_mult)) ||
      (rc = get_mult(p, o, c, "attention_multiplier", &c->attention_mult)))
    return rc;
  return SL_OK;
}

/* Granite 4.0-H's experts (GraniteMoeHybridMoE = GraniteMoeMoE): every MLP
 * sub-layer adds to its shared MLP (shared_intermediate_size) num_local_experts
 * SwiGLU experts of intermediate_size, num_experts_per_tok of them a token;
 * the router (block_sparse_moe.router.layer) takes the top k logits and a
 * softmax over them (= the softmax over all, renormalised over the k: the
 * sparse MLP's norm_topk_prob). Its load-balancing loss, added by transformers
 * only with output_router_logits, is Mixtral's. */
static int granite_moe(const char *p, json_t *o, sl_model_config *c, int64_t experts) {
  int rc;
  if ((rc = dget_int(p, o, c, "num_experts_per_tok", &c->moe_topk)) ||
      (rc = dget_int(p, o, c, "intermediate_size", &c->moe_intermediate)) ||
      (rc = dget_num(p, o, c, "router_aux_loss_coef", &c->router_aux_loss_coef)) ||
      (rc = dget_bool(p, o, c, "output_router_logits", &c->output_router_logits)))
    return rc;
  c->moe_experts = experts;
  if (c->moe_topk < 1 || c->moe_topk > experts || c->moe_topk > 64)
    return sl_fail(SL_EINPUT, "%s: field 'num_experts_per_tok' must be in [1, min(64, num_local_experts = %lld)], found %lld",
                   p, (long long)experts, (long long)c->moe_topk);
  if (c->moe_intermediate < 1 || c->moe_intermediate > CFG_MAX_INTER)
    return sl_fail(SL_EINPUT, "%s: field 'intermediate_size' (the experts' width) must be in [1, %lld], found %lld", p,
                   (long long)CFG_MAX_INTER, (long long)c->moe_intermediate);
  if (!(c->router_aux_loss_coef >= 0))
    return sl_fail(SL_EINPUT, "%s: field 'router_aux_loss_coef' must be >= 0, found %g", p, c->router_aux_loss_coef);
  c->moe_norm_topk = 1;
  c->moe_shared_intermediate = c->intermediate_size; /* the shared MLP, beside the experts */
  c->moe_fused = 1; /* input_linear (E, 2I, C), output_linear (E, C, I): one tensor each for all experts */
  return SL_OK;
}

/* transformers' GraniteMoeHybridConfig (modeling_granitemoehybrid.py), dense
 * (num_local_experts 0: Granite 4.0-H Micro): each HF layer is a mixer
 * sub-layer (BambaMixer, i.e. Mamba-2, or attention without RoPE, scaled by
 * attention_multiplier) and the shared MLP (SwiGLU, input_linear packs
 * gate | up), each output times residual_multiplier before its residual add;
 * the embeddings times embedding_multiplier, the logits divided by
 * logits_scaling. The decoder runs the sub-layers as layers of their own
 * (layer_div 2). */
static int parse_granite_h(const char *p, json_t *o, sl_model_config *c) {
  int rc, bias = 0;
  int64_t n = 0, kv = 0, experts = 0;
  if ((rc = dget_int(p, o, c, "num_hidden_layers", &n)) || (rc = dget_int(p, o, c, "hidden_size", &c->hidden_size)) ||
      (rc = dget_int(p, o, c, "vocab_size", &c->vocab_size)) ||
      (rc = dget_int(p, o, c, "num_attention_heads", &c->num_attention_heads)) ||
      (rc = dget_int(p, o, c, "num_key_value_heads", &kv)) ||
      (rc = dget_int(p, o, c, "max_position_embeddings", &c->max_position_embeddings)) ||
      (rc = dget_num(p, o, c, "rms_norm_eps", &c->rms_norm_eps)) ||
      (rc = dget_num(p, o, c, "initializer_range", &c->initializer_range)) ||
      (rc = dget_bool(p, o, c, "tie_word_embeddings", &c->tie_word_embeddings)) || (rc = get_bos(p, o, c)) ||
      (rc = get_eos(p, o, c)) || (rc = dget_bool(p, o, c, "attention_bias", &bias)) ||
      (rc = dget_int(p, o, c, "num_local_experts", &experts)) ||
      (rc = dget_int(p, o, c, "shared_intermediate_size", &c->intermediate_size)) ||
      (rc = get_mult(p, o, c, "embedding_multiplier", &c->embedding_mult)) ||
      (rc = get_mult(p, o, c, "logits_scaling", &c->logits_scaling)) ||
      (rc = get_mult(p, o, c, "residual_multiplier", &c->residual_mult)) ||
      (rc = get_mult(p, o, c, "attention_multiplier", &c->attention_mult)) ||
      (rc = dget_int(p, o, c, "mamba_n_heads", &c->ssm_heads)) ||
      (rc = dget_int(p, o, c, "mamba_n_groups", &c->ssm_groups)) ||
      (rc = dget_int(p, o, c, "mamba_d_state", &c->state_size)) ||
      (rc = dget_int(p, o, c, "mamba_d_conv", &c->conv_kernel)) ||
      (rc = dget_int(p, o, c, "mamba_expand", &c->expand)) ||
      (rc = dget_int(p, o, c, "mamba_chunk_size", &c->ssm_chunk)) ||
      (rc = dget_bool(p, o, c, "mamba_conv_bias", &c->use_conv_bias)) ||
      (rc = dget_bool(p, o, c, "mamba_proj_bias", &c->use_bias)) || (rc = want_act(p, o, "hidden_act")))
    return rc;
  if (experts < 0 || experts > CFG_MAX_EXPERTS)
    return sl_fail(SL_EINPUT, "%s: field 'num_local_experts' must be in [0, %d], found %lld", p, CFG_MAX_EXPERTS,
                   (long long)experts);
  if (experts > 0 && (rc = granite_moe(p, o, c, experts))) return rc;
  json_t *pe = jget(o, "position_embedding_type");
  if (pe && !json_is_null(pe) && !(json_is_string(pe) && !strcmp(json_string_value(pe), "nope")))
    return sl_fail(SL_EINPUT,
                   "%s: field 'position_embedding_type' = %s is not supported (expected null or \"nope\": Granite "
                   "4.0-H's attention has no position embeddings)",
                   p, json_is_string(pe) ? json_string_value(pe) : jtype(pe));
  rec_put("position_embedding_type", "nope");
  c->num_key_value_heads = kv == (int64_t)HEADS ? c->num_attention_heads : kv;
  rec_fmt(o, "num_key_value_heads", "%lld", (long long)c->num_key_value_heads);
  if (c->num_attention_heads <= 0 || c->hidden_size % c->num_attention_heads)
    return sl_fail(SL_EINPUT, "%s: num_attention_heads = %lld must divide hidden_size = %lld", p,
                   (long long)c->num_attention_heads, (long long)c->hidden_size);
  c->head_dim = c->hidden_size / c->num_attention_heads; /* GraniteMoeSharedAttention's */
  json_t *dh = jget(o, "mamba_d_head");
  int64_t Dm = c->expand * c->hidden_size;
  if (!dh || json_is_null(dh) || (json_is_string(dh) && !strcmp(json_string_value(dh), "auto"))) {
    if (c->ssm_heads <= 0 || Dm % c->ssm_heads)
      return sl_fail(SL_EINPUT, "%s: mamba_n_heads = %lld must divide mamba_expand x hidden_size = %lld", p,
                     (long long)c->ssm_heads, (long long)Dm);
    c->ssm_head_dim = Dm / c->ssm_heads;
    rec_fmt(o, "mamba_d_head", "%lld", (long long)c->ssm_head_dim);
  } else if ((rc = get_int(p, o, "mamba_d_head", 1, 0, &c->ssm_head_dim))) {
    return rc;
  }
  if (c->ssm_head_dim * c->ssm_heads != Dm)
    return sl_fail(SL_EINPUT,
                   "%s: mamba_n_heads %lld x mamba_d_head %lld = %lld, but mamba_expand x hidden_size is %lld "
                   "(transformers refuses this config too)",
                   p, (long long)c->ssm_heads, (long long)c->ssm_head_dim, (long long)(c->ssm_heads * c->ssm_head_dim),
                   (long long)Dm);
  if (n <= 0 || 2 * n >= SL_CFG_MAX_LAYERS)
    return sl_fail(SL_EINPUT, "%s: num_hidden_layers = %lld (expected 1 to %d for a hybrid of two sub-layers a layer)",
                   p, (long long)n, SL_CFG_MAX_LAYERS / 2 - 1);
  json_t *lt = jget(o, "layer_types");
  if (lt && !json_is_null(lt) && (!json_is_array(lt) || (int64_t)json_array_size(lt) != n))
    return sl_fail(SL_EINPUT, "%s: field 'layer_types' must be a list of num_hidden_layers = %lld strings, found %s", p,
                   (long long)n, json_is_array(lt) ? "a list of another length" : jtype(lt));
  for (int64_t i = 0; i < n; i++) { /* absent: every layer Mamba (transformers' layers_block_type) */
    json_t *e = lt && !json_is_null(lt) ? json_array_get(lt, (size_t)i) : NULL;
    const char *t = e ? (json_is_string(e) ? json_string_value(e) : "") : "mamba";
    if (strcmp(t, "mamba") && strcmp(t, "attention"))
      return sl_fail(SL_EINPUT, "%s: field 'layer_types'[%lld] = %s (expected \"mamba\" or \"attention\")", p,
                     (long long)i, json_is_string(e) ? json_string_value(e) : jtype(e));
    c->layer_pattern[2 * i] = t[0] == 'm' ? 'M' : '*';
    c->layer_pattern[2 * i + 1] = experts > 0 ? 'E' : '-'; /* the MLP sub-layer: shared MLP (+ experts) */
  }
  c->layer_pattern[2 * n] = 0;
  rec_put("layer_types", c->layer_pattern);
  c->hf_layers = n;
  c->layer_div = 2;
  c->num_hidden_layers = 2 * n; /* the decoder's layers: two sub-layers each */
  c->qkv_bias = c->o_bias = bias;
  c->layer_norm_epsilon = c->rms_norm_eps; /* BambaMixer's gated norm takes rms_norm_eps */
  c->rope_theta = 1e4;                     /* no RoPE: the table the attention kind builds is never read */
  c->no_rope = 1;
  return SL_OK;
}

/* state-spaces/mamba config.json (mamba_ssm's MambaConfig): d_model, n_layer, vocab_size,
 * pad_vocab_size_multiple, tie_embeddings, ssm_cfg {layer: "Mamba1" | "Mamba2", ...}. The fields both
 * layers share; *ssm is ssm_cfg (an empty object, owned by *empty, when absent: its fields take their
 * defaults, recorded as ssm_cfg.KEY). */
static int ss_common(const char *p, json_t *o, sl_model_config *c, json_t **ssm, json_t **empty) {
  int rc, rms = 1;
  int64_t d_inter = 0;
  c->ssm_original_format = 1;
  *ssm = jget(o, "ssm_cfg");
  if (!(*empty = json_object())) return sl_fail(SL_ENOMEM, "out of memory");
  if (*ssm && !json_is_null(*ssm) && !json_is_object(*ssm))
    return sl_fail(SL_EINPUT, "%s: field 'ssm_cfg' must be an object, found %s", p, jtype(*ssm));
  if (!*ssm || json_is_null(*ssm)) {
    *ssm = *empty;
    if (g_rec && g_rec->nobj < (int)(sizeof g_rec->objs / sizeof g_rec->objs[0])) {
      g_rec->objs[g_rec->nobj].obj = *empty;
      snprintf(g_rec->objs[g_rec->nobj++].name, sizeof g_rec->objs[0].name, "ssm_cfg");
    }
  }
  json_t *attn = jget(o, "attn_layer_idx");
  rc = get_int(p, o, "d_model", 1, 0, &c->hidden_size);
  if (!rc) rc = get_int(p, o, "n_layer", 1, 0, &c->num_hidden_layers);
  if (!rc) rc = get_int(p, o, "vocab_size", 1, 0, &c->vocab_size);
  if (!rc) rc = get_int(p, o, "pad_vocab_size_multiple", 0, 8, &c->pad_vocab_size_multiple);
  if (!rc) rc = get_bool(p, o, "tie_embeddings", 1, &c->tie_word_embeddings);
  if (!rc) rc = get_bool(p, o, "rms_norm", 1, &rms);
  if (!rc) rc = get_bool(p, o, "residual_in_fp32", 1, &c->residual_in_fp32);
  if (!rc) rc = get_int(p, o, "d_intermediate", 0, 0, &d_inter);
  if (!rc && !rms) rc = sl_fail(SL_EINPUT, "%s: field 'rms_norm' = false (LayerNorm) is not supported", p);
  if (!rc && d_inter != 0)
    rc = sl_fail(SL_EINPUT, "%s: field 'd_intermediate' = %lld (MLP blocks) is not supported, expected 0", p,
                 (long long)d_inter);
  if (!rc && attn && !(json_is_array(attn) && json_array_size(attn) == 0) && !json_is_null(attn))
    rc = sl_fail(SL_EINPUT, "%s: field 'attn_layer_idx' (hybrid attention) is not supported", p);
  if (rc) return rc;
  if (c->pad_vocab_size_multiple <= 0 || c->pad_vocab_size_multiple > CFG_MAX_DIM)
    return sl_fail(SL_EINPUT, "%s: field 'pad_vocab_size_multiple' must be positive, found %lld", p,
                   (long long)c->pad_vocab_size_multiple);
  if (c->vocab_size > 0 && c->vocab_size <= CFG_MAX_DIM) {
    int64_t m = c->pad_vocab_size_multiple;
    c->vocab_size = (c->vocab_size + m - 1) / m * m;
  }
  c->layer_norm_epsilon = 1e-5;
  c->initializer_range = 0.02;
  return SL_OK;
}

/* ssm_cfg.layer: absent (Mamba1) or the expected one. */
static int ss_layer(const char *p, json_t *ssm, const char *want) {
  json_t *layer = jget(ssm, "layer");
  if (!layer && !strcmp(want, "Mamba1")) return SL_OK;
  if (layer && json_is_string(layer) && !strcmp(json_string_value(layer), want)) return SL_OK;
  return sl_fail(SL_EINPUT, "%s: field 'ssm_cfg.layer' must be \"Mamba1\" or \"Mamba2\"", p);
}

static int parse_mamba_ss(const char *p, json_t *o, sl_model_config *c) {
  json_t *ssm = NULL, *empty = NULL;
  int rc = ss_common(p, o, c, &ssm, &empty);
  if (!rc) rc = get_int(p, ssm, "d_state", 0, 16, &c->state_size);
  if (!rc) rc = get_int(p, ssm, "d_conv", 0, 4, &c->conv_kernel);
  if (!rc) rc = get_int(p, ssm, "expand", 0, 2, &c->expand);
  if (!rc) rc = get_dt_rank(p, ssm, "dt_rank", c->hidden_size, &c->time_step_rank);
  if (!rc) rc = get_bool(p, ssm, "conv_bias", 1, &c->use_conv_bias);
  if (!rc) rc = get_bool(p, ssm, "bias", 0, &c->use_bias);
  if (!rc) rc = get_num(p, ssm, "dt_min", 0.001, &c->time_step_min);
  if (!rc) rc = get_num(p, ssm, "dt_max", 0.1, &c->time_step_max);
  if (!rc) rc = get_num(p, ssm, "dt_init_floor", 1e-4, &c->time_step_floor);
  if (!rc) rc = get_num(p, ssm, "dt_scale", 1.0, &c->time_step_scale);
  if (!rc) rc = ss_layer(p, ssm, "Mamba1");
  json_decref(empty);
  if (rc) return rc;
  if (c->expand > 0 && c->expand <= CFG_MAX_DIM && c->hidden_size > 0 && c->hidden_size <= CFG_MAX_DIM)
    c->intermediate_size = c->expand * c->hidden_size;
  return SL_OK;
}

/* mamba_ssm's Mamba2 layer (ssm_cfg.layer "Mamba2"): d_state (128), d_conv, expand, headdim (64),
 * ngroups (1), chunk_size (256), bias, conv_bias, dt_min / dt_max / dt_init_floor, dt_limit; the gated
 * norm after the gate (norm_before_gate false) and a per-head D (D_has_hdim false), the only forms
 * transformers' Mamba2 has, are required; d_ssm, when given, must be the whole d_inner. */
static int parse_mamba2_ss(const char *p, json_t *o, sl_model_config *c) {
  json_t *ssm = NULL, *empty = NULL;
  int before = 0, dhd = 0, rmsg = 1;
  int64_t d_ssm = -1;
  int rc = ss_common(p, o, c, &ssm, &empty);
  if (!rc) rc = get_int(p, ssm, "d_state", 0, 128, &c->state_size);
  if (!rc) rc = get_int(p, ssm, "d_conv", 0, 4, &c->conv_kernel);
  if (!rc) rc = get_int(p, ssm, "expand", 0, 2, &c->expand);
  if (!rc) rc = get_int(p, ssm, "headdim", 0, 64, &c->ssm_head_dim);
  if (!rc) rc = get_int(p, ssm, "ngroups", 0, 1, &c->ssm_groups);
  if (!rc) rc = get_int(p, ssm, "chunk_size", 0, 256, &c->ssm_chunk);
  if (!rc) rc = get_int(p, ssm, "d_ssm", 0, -1, &d_ssm);
  if (!rc) rc = get_bool(p, ssm, "conv_bias", 1, &c->use_conv_bias);
  if (!rc) rc = get_bool(p, ssm, "bias", 0, &c->use_bias);
  if (!rc) rc = get_bool(p, ssm, "rmsnorm", 1, &rmsg);
  if (!rc) rc = get_bool(p, ssm, "norm_before_gate", 0, &before);
  if (!rc) rc = get_bool(p, ssm, "D_has_hdim", 0, &dhd);
  if (!rc) rc = get_num(p, ssm, "dt_min", 0.001, &c->time_step_min);
  if (!rc) rc = get_num(p, ssm, "dt_max", 0.1, &c->time_step_max);
  if (!rc) rc = get_num(p, ssm, "dt_init_floor", 1e-4, &c->time_step_floor);
  if (!rc) rc = ss_layer(p, ssm, "Mamba2");
  if (!rc) { /* dt_limit: ssm_cfg's, as time_step_limit */
    json_t *lim = jget(ssm, "dt_limit");
    double a = 0, b = 0;
    c->dt_limit[0] = 0.0, c->dt_limit[1] = INFINITY;
    if (lim && !json_is_null(lim)) {
      if (!json_is_array(lim) || json_array_size(lim) != 2 || !nonfinite_value(json_array_get(lim, 0), &a) ||
          !nonfinite_value(json_array_get(lim, 1), &b))
        rc = sl_fail(SL_EINPUT, "%s: field 'ssm_cfg.dt_limit' must be a list of two numbers, found %s", p, jtype(lim));
      else c->dt_limit[0] = a, c->dt_limit[1] = b;
    }
    rec_fmt(ssm, "dt_limit", "[%.17g, %.17g]", c->dt_limit[0], c->dt_limit[1]);
  }
  json_decref(empty);
  if (rc) return rc;
  if (!rmsg) return sl_fail(SL_EINPUT, "%s: field 'ssm_cfg.rmsnorm' = false (no gated norm) is not supported", p);
  if (before) return sl_fail(SL_EINPUT, "%s: field 'ssm_cfg.norm_before_gate' = true is not supported", p);
  if (dhd) return sl_fail(SL_EINPUT, "%s: field 'ssm_cfg.D_has_hdim' = true is not supported", p);
  if (c->expand > 0 && c->expand <= CFG_MAX_DIM && c->hidden_size > 0 && c->hidden_size <= CFG_MAX_DIM)
    c->intermediate_size = c->expand * c->hidden_size;
  if (d_ssm >= 0 && d_ssm != c->intermediate_size)
    return sl_fail(SL_EINPUT, "%s: field 'ssm_cfg.d_ssm' = %lld: only d_ssm = expand x d_model (%lld) is supported", p,
                   (long long)d_ssm, (long long)c->intermediate_size);
  c->ssm_heads = c->ssm_head_dim > 0 ? c->intermediate_size / c->ssm_head_dim : 0;
  return SL_OK;
}

static int posl(const char *p, const char *key, int64_t v, int64_t lim) {
  if (v <= 0) return sl_fail(SL_EINPUT, "%s: field '%s' must be positive, found %lld", p, key, (long long)v);
  if (v > lim)
    return sl_fail(SL_EINPUT, "%s: field '%s' = %lld is implausibly large (limit %lld)", p, key, (long long)v,
                   (long long)lim);
  return SL_OK;
}
static int pos(const char *p, const char *key, int64_t v) { return posl(p, key, v, CFG_MAX_DIM); }

/* max_position_embeddings when the file gives it: positive, plausible. */
static int want_pos_emb(const char *p, json_t *o) {
  json_t *v = jget(o, "max_position_embeddings");
  int64_t x = 0;
  if (!v || json_is_null(v)) return SL_OK;
  int rc = get_int(p, o, "max_position_embeddings", 1, 0, &x);
  return rc ? rc : posl(p, "max_position_embeddings", x, CFG_MAX_POS);
}

int sl_hfconfig_validate(const char *p, const sl_model_config *c) {
  int rc;
  int ss = c->ssm_original_format;
  { /* the largest tensor must be addressable: checked in double, before any int64 product */
    double C = (double)c->hidden_size, I = (double)c->intermediate_size, V = (double)c->vocab_size;
    double H = (double)c->num_attention_heads + 2.0 * (double)c->num_key_value_heads;
    double hd = (double)c->head_dim, big = 1.0 * (double)((int64_t)1 << 40);
    if (V * C > big || I * C * 3 > big || H * hd * C > big || (double)c->expand * C * C * 2 > big ||
        (double)c->state_size * I > big)
      return sl_fail(SL_EINPUT,
                     "%s: the model's sizes give a tensor of more than 2^40 elements "
                     "(hidden %lld, intermediate %lld, vocab %lld): not a config this engine can train",
                     p, (long long)c->hidden_size, (long long)c->intermediate_size, (long long)c->vocab_size);
  }
  if ((rc = posl(p, ss ? "d_model" : "hidden_size", c->hidden_size, CFG_MAX_HIDDEN)) ||
      (rc = posl(p, ss ? "n_layer" : "num_hidden_layers", c->num_hidden_layers, CFG_MAX_LAYERS)) ||
      (rc = pos(p, "vocab_size", c->vocab_size)))
    return rc;
  if (c->max_position_embeddings < 0 || c->max_position_embeddings > CFG_MAX_POS) /* 0: unset */
    return posl(p, "max_position_embeddings", c->max_position_embeddings, CFG_MAX_POS);
  if (c->arch == SL_ARCH_LLAMA || c->arch == SL_ARCH_MISTRAL || c->arch == SL_ARCH_QWEN2 || c->arch == SL_ARCH_QWEN3 ||
      c->arch == SL_ARCH_MIXTRAL || c->arch == SL_ARCH_QWEN3_MOE || c->arch == SL_ARCH_GEMMA2 ||
      c->arch == SL_ARCH_GEMMA3 || c->arch == SL_ARCH_GRANITE) {
    if ((rc = posl(p, "intermediate_size", c->intermediate_size, CFG_MAX_INTER)) ||
        (rc = posl(p, "num_attention_heads", c->num_attention_heads, CFG_MAX_HEADS)) ||
        (rc = posl(p, "num_key_value_heads", c->num_key_value_heads, CFG_MAX_HEADS)) ||
        (rc = posl(p, "head_dim", c->head_dim, CFG_MAX_HEAD_DIM)))
      return rc;
    if (c->num_attention_heads % c->num_key_value_heads != 0)
      return sl_fail(SL_EINPUT, "%s: num_key_value_heads = %lld does not divide num_attention_heads = %lld", p,
                     (long long)c->num_key_value_heads, (long long)c->num_attention_heads);
    if (c->head_dim % 2 != 0)
      return sl_fail(SL_EINPUT, "%s: head_dim = %lld is odd; RoPE rotates pairs and needs it even", p,
                     (long long)c->head_dim);
    if (!(c->rms_norm_eps > 0))
      return sl_fail(SL_EINPUT, "%s: field 'rms_norm_eps' must be positive, found %g", p, c->rms_norm_eps);
    if (!(c->rope_theta > 0))
      return sl_fail(SL_EINPUT, "%s: field 'rope_theta' must be positive, found %g", p, c->rope_theta);
    if (c->sliding_window < 0)
      return sl_fail(SL_EINPUT, "%s: field 'sliding_window' must be >= 0 or null, found %lld", p,
                     (long long)c->sliding_window);
    if (c->sliding_window > CFG_MAX_POS) return posl(p, "sliding_window", c->sliding_window, CFG_MAX_POS);
  } else if (c->arch == SL_ARCH_MAMBA) {
    if ((rc = posl(p, ss ? "ssm_cfg.d_state" : "state_size", c->state_size, CFG_MAX_STATE)) ||
        (rc = posl(p, ss ? "ssm_cfg.expand" : "expand", c->expand, CFG_MAX_EXPAND)) ||
        (rc = posl(p, ss ? "ssm_cfg.d_conv" : "conv_kernel", c->conv_kernel, CFG_MAX_CONV)) ||
        (rc = posl(p, ss ? "ssm_cfg.dt_rank" : "time_step_rank", c->time_step_rank, CFG_MAX_HIDDEN)) ||
        (rc = posl(p, "intermediate_size", c->intermediate_size, CFG_MAX_INTER)))
      return rc;
    if (!(c->layer_norm_epsilon > 0))
      return sl_fail(SL_EINPUT, "%s: field 'layer_norm_epsilon' must be positive, found %g", p, c->layer_norm_epsilon);
    if (c->mixer_rms && !(c->mixer_rms_eps > 0))
      return sl_fail(SL_EINPUT, "%s: field 'mixer_rms_eps' must be positive, found %g", p, c->mixer_rms_eps);
    if (!(c->time_step_min > 0) || !(c->time_step_max >= c->time_step_min))
      return sl_fail(SL_EINPUT,
                     "%s: time_step_min = %g and time_step_max = %g: expected 0 < min "
                     "<= max",
                     p, c->time_step_min, c->time_step_max);
  } else if (c->arch == SL_ARCH_MAMBA2) {
    if ((rc = posl(p, ss ? "ssm_cfg.d_state" : "state_size", c->state_size, CFG_MAX_STATE)) ||
        (rc = posl(p, ss ? "ssm_cfg.expand" : "expand", c->expand, CFG_MAX_EXPAND)) ||
        (rc = posl(p, ss ? "ssm_cfg.d_conv" : "conv_kernel", c->conv_kernel, CFG_MAX_CONV)) ||
        (rc = posl(p, ss ? "ssm_cfg.headdim" : "head_dim", c->ssm_head_dim, CFG_MAX_INTER)) ||
        (rc = posl(p, ss ? "d_inner / ssm_cfg.headdim" : "num_heads", c->ssm_heads, CFG_MAX_INTER)) ||
        (rc = posl(p, ss ? "ssm_cfg.ngroups" : "n_groups", c->ssm_groups, CFG_MAX_HEADS)) ||
        (rc = posl(p, ss ? "ssm_cfg.chunk_size" : "chunk_size", c->ssm_chunk, CFG_MAX_POS)) ||
        (rc = posl(p, "intermediate_size", c->intermediate_size, CFG_MAX_INTER)))
      return rc;
    if (c->ssm_heads * c->ssm_head_dim != c->intermediate_size)
      return sl_fail(SL_EINPUT,
                     "%s: num_heads %lld x head_dim %lld = %lld, but the mixer's width expand x hidden_size is %lld "
                     "(transformers' Mamba2Mixer reshapes one into the other)",
                     p, (long long)c->ssm_heads, (long long)c->ssm_head_dim,
                     (long long)(c->ssm_heads * c->ssm_head_dim), (long long)c->intermediate_size);
    if (c->ssm_heads % c->ssm_groups != 0)
      return sl_fail(SL_EINPUT, "%s: n_groups = %lld does not divide num_heads = %lld", p, (long long)c->ssm_groups,
                     (long long)c->ssm_heads);
    if (!(c->layer_norm_epsilon > 0))
      return sl_fail(SL_EINPUT, "%s: field 'layer_norm_epsilon' must be positive, found %g", p, c->layer_norm_epsilon);
    if (!(c->time_step_min > 0) || !(c->time_step_max >= c->time_step_min))
      return sl_fail(SL_EINPUT, "%s: time_step_min = %g and time_step_max = %g: expected 0 < min <= max", p,
                     c->time_step_min, c->time_step_max);
    if (!(c->dt_limit[0] >= 0) || !(c->dt_limit[1] >= c->dt_limit[0]))
      return sl_fail(SL_EINPUT, "%s: time_step_limit [%g, %g]: expected 0 <= min <= max", p, c->dt_limit[0],
                     c->dt_limit[1]);
  } else if (c->arch == SL_ARCH_NEMOTRON_H || c->arch == SL_ARCH_GRANITE_H) {
    if ((rc = posl(p, c->arch == SL_ARCH_GRANITE_H ? "shared_intermediate_size" : "intermediate_size",
                   c->intermediate_size, CFG_MAX_INTER)) ||
        (rc = posl(p, "num_attention_heads", c->num_attention_heads, CFG_MAX_HEADS)) ||
        (rc = posl(p, "num_key_value_heads", c->num_key_value_heads, CFG_MAX_HEADS)) ||
        (rc = posl(p, "head_dim", c->head_dim, CFG_MAX_HEAD_DIM)) ||
        (rc = posl(p, "ssm_state_size", c->state_size, CFG_MAX_STATE)) ||
        (rc = posl(p, "conv_kernel", c->conv_kernel, CFG_MAX_CONV)) ||
        (rc = posl(p, "mamba_head_dim", c->ssm_head_dim, CFG_MAX_INTER)) ||
        (rc = posl(p, "mamba_num_heads", c->ssm_heads, CFG_MAX_INTER)) ||
        (rc = posl(p, "n_groups", c->ssm_groups, CFG_MAX_HEADS)) ||
        (rc = posl(p, "chunk_size", c->ssm_chunk, CFG_MAX_POS)) ||
        (rc = posl(p, "mamba_num_heads x mamba_head_dim", c->ssm_heads * c->ssm_head_dim, CFG_MAX_INTER)))
      return rc;
    if (c->num_attention_heads % c->num_key_value_heads != 0)
      return sl_fail(SL_EINPUT, "%s: num_key_value_heads = %lld does not divide num_attention_heads = %lld", p,
                     (long long)c->num_key_value_heads, (long long)c->num_attention_heads);
    if (c->ssm_heads % c->ssm_groups != 0)
      return sl_fail(SL_EINPUT, "%s: n_groups = %lld does not divide mamba_num_heads = %lld", p,
                     (long long)c->ssm_groups, (long long)c->ssm_heads);
    if (!(c->layer_norm_epsilon > 0))
      return sl_fail(SL_EINPUT, "%s: field 'layer_norm_epsilon' must be positive, found %g", p, c->layer_norm_epsilon);
    if (!(c->time_step_min > 0) || !(c->time_step_max >= c->time_step_min))
      return sl_fail(SL_EINPUT, "%s: time_step_min = %g and time_step_max = %g: expected 0 < min <= max", p,
                     c->time_step_min, c->time_step_max);
    if ((int64_t)strlen(c->layer_pattern) != c->num_hidden_layers)
      return sl_fail(SL_EINPUT, "%s: the layer pattern '%s' has %zu layers, num_hidden_layers is %lld", p,
                     c->layer_pattern, strlen(c->layer_pattern), (long long)c->num_hidden_layers);
  } else {
    return sl_fail(SL_EINPUT, "%s: unknown architecture", p);
  }
  return SL_OK;
}

/* the FalconMambaForCausalLM row (SL_ARCH_MAMBA with mixer_rms) */
static int falcon_row(int i) { return i >= 0 && !strcmp(k_arch[i].cls, "FalconMambaForCausalLM"); }

/* Gemma names not trained (Gemma 1, Gemma 3 multimodal: docs/models.md
 * "Gemma"); a refusal that says so, naming the field
 * and the value it read. NULL when `a` is not a Gemma name. */
static const char *gemma_refusal(const char *a) {
  static const struct {
    const char *name, *why;
  } k[] = {
      {"Gemma3ForConditionalGeneration",
       "a multimodal Gemma 3 checkpoint (text_config, language_model.* tensors and a vision tower) is not trained "
       "by shardlm, which trains text-only decoders: export the language model as a Gemma3ForCausalLM checkpoint "
       "(text_config as its config.json, language_model.model.* renamed model.*) to train it"},
      {"gemma3", "a multimodal Gemma 3 checkpoint is not trained by shardlm (see Gemma3ForConditionalGeneration)"},
      {"GemmaForCausalLM", "Gemma (1) is not supported"},
      {"gemma", "Gemma (1) is not supported"},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (!strcmp(a, k[i].name)) return k[i].why;
  return NULL;
}

/* The record's fields whose spellings vary for one model, replaced by what
 * the reader made of them: the family (architectures / model_type), the
 * per-layer windows (layer_types, sliding_window_pattern, max_window_layers,
 * use_sliding_window and a window no layer uses), the fields accepted only
 * in their one supported form. --save writes these differently from the
 * published files, and a resumed run must accept its own saved config.json. */
static void rec_resolve(sl_model_config *c, int row) {
  if (!g_rec) return;
  static const char *const drop[] = {"architectures",          "model_type",        "layer_types",
                                     "sliding_window_pattern", "max_window_layers", "use_sliding_window",
                                     "mlp_only_layers",        "hidden_act",        "hidden_activation",
                                     "ssm_cfg.layer",          "attn_layer_idx",    "sliding_window"};
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) rec_del(drop[i]);
  rec_put("family", k_arch[row].cls);
  if (c->arch == SL_ARCH_MAMBA || c->arch == SL_ARCH_MAMBA2 || c->arch == SL_ARCH_NEMOTRON_H ||
      c->arch == SL_ARCH_GRANITE_H) {
    rec_put("hidden_act", "silu");
    return;
  }
  rec_put("hidden_act", c->gemma ? "gelu_pytorch_tanh" : "silu");
  int64_t L = c->num_hidden_layers < SL_CFG_MAX_LAYERS ? c->num_hidden_layers : SL_CFG_MAX_LAYERS;
  char pat[SL_CFG_MAX_LAYERS + 1];
  int any = 0;
  for (int64_t l = 0; l < L; l++) any |= (pat[l] = sl_cfg_layer_window(c, l) > 0 ? 'S' : 'F') == 'S';
  pat[L > 0 ? L : 0] = 0;
  char v[64];
  snprintf(v, sizeof v, "%lld", any ? (long long)c->sliding_window : 0LL);
  rec_put("sliding_window", v);
  if (!any) return;
  if (strlen(pat) <= 160) {
    rec_put("layer_types", pat);
  } else {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *q = pat; *q; q++) h = (h ^ (unsigned char)*q) * 0x100000001b3ull;
    snprintf(v, sizeof v, "%zu layers, fnv1a %016llx", strlen(pat), (unsigned long long)h);
    rec_put("layer_types", v);
  }
}

int sl_hfconfig_parse(const char *p, const char *text, size_t len, sl_model_config *c) {
  int rc = SL_OK, row = -1;
  if (!p) p = "<memory>";
  set_defaults(c);
  fields_rec rec = {.c = c};
  g_rec = &rec;
  json_error_t je;
  size_t flen = 0;
  char *ftext = nonfinite_pass(text, len, &flen);
  if (!ftext) return sl_fail(SL_ENOMEM, "out of memory reading %s", p);
  json_t *o = json_loadb(ftext, flen, JSON_REJECT_DUPLICATES, &je);
  free(ftext);
  if (!o) return sl_fail(SL_EINPUT, "%s: malformed JSON (line %d, column %d): %s", p, je.line, je.column, je.text);
  if (!json_is_object(o)) {
    rc = sl_fail(SL_EINPUT, "%s: expected a JSON object, found %s", p, jtype(o));
    goto done;
  }
  json_t *archs = jget(o, "architectures"), *mt = jget(o, "model_type");
  if (archs && !json_is_null(archs)) {
    if (!json_is_array(archs) || json_array_size(archs) == 0 || !json_is_string(json_array_get(archs, 0))) {
      rc = sl_fail(SL_EINPUT, "%s: field 'architectures' must be a non-empty array of strings", p);
      goto done;
    }
    const char *a = json_string_value(json_array_get(archs, 0));
    if (gemma_refusal(a)) {
      rc = sl_fail(SL_EINPUT, "%s: field 'architectures' = '%s': %s", p, a, gemma_refusal(a));
      goto done;
    }
    for (size_t i = 0; i < sizeof k_arch / sizeof k_arch[0]; i++)
      if (!strcmp(a, k_arch[i].cls)) c->arch = k_arch[i].arch, row = (int)i;
    if (!c->arch) {
      rc = sl_fail(SL_EINPUT,
                   "%s: unknown architecture '%s' in 'architectures' (supported: "
                   "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
                   "Qwen3MoeForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, MambaForCausalLM, "
                   "FalconMambaForCausalLM, Mamba2ForCausalLM, NemotronHForCausalLM, GraniteMoeHybridForCausalLM)",
                   p, a);
      goto done;
    }
  } else if (mt && !json_is_null(mt)) {
    if (!json_is_string(mt)) {
      rc = sl_fail(SL_EINPUT, "%s: field 'model_type' must be a string, found %s", p, jtype(mt));
      goto done;
    }
    const char *a = json_string_value(mt);
    if (gemma_refusal(a)) {
      rc = sl_fail(SL_EINPUT, "%s: field 'model_type' = '%s': %s", p, a, gemma_refusal(a));
      goto done;
    }
    for (size_t i = 0; i < sizeof k_arch / sizeof k_arch[0]; i++)
      if (!strcmp(a, k_arch[i].type)) c->arch = k_arch[i].arch, row = (int)i;
    if (!c->arch) {
      rc = sl_fail(SL_EINPUT,
                   "%s: unknown architecture: model_type '%s' (supported: llama, "
                   "mistral, qwen2, qwen3, mixtral, qwen3_moe, gemma2, gemma3_text, mamba, falcon_mamba, mamba2, nemotron_h, "
                   "granitemoehybrid)",
                   p, a);
      goto done;
    }
  } else if (jget(o, "d_model") && jget(o, "n_layer")) {
    json_t *ssm = jget(o, "ssm_cfg"), *layer = json_is_object(ssm) ? jget(ssm, "layer") : NULL;
    c->arch = json_is_string(layer) && !strcmp(json_string_value(layer), "Mamba2") ? SL_ARCH_MAMBA2 : SL_ARCH_MAMBA;
    c->ssm_original_format = 1;
  } else {
    rc = sl_fail(SL_EINPUT,
                 "%s: unknown architecture: no 'architectures' or 'model_type' field "
                 "(and not a state-spaces Mamba config with d_model and n_layer)",
                 p);
    goto done;
  }
  if (row < 0)
    for (size_t i = 0; i < sizeof k_arch / sizeof k_arch[0] && row < 0; i++)
      if (k_arch[i].arch == c->arch) row = (int)i;
  snprintf(c->arch_name, sizeof c->arch_name, "%s", k_arch[row].cls);
  c->mixer_rms = falcon_row(row);
  if (c->arch == SL_ARCH_MAMBA) rc = c->ssm_original_format ? parse_mamba_ss(p, o, c) : parse_mamba_hf(p, o, c);
  else if (c->arch == SL_ARCH_MAMBA2) rc = c->ssm_original_format ? parse_mamba2_ss(p, o, c) : parse_mamba2_hf(p, o, c);
  else if (c->arch == SL_ARCH_NEMOTRON_H) rc = parse_nemotron_h(p, o, c);
  else if (c->arch == SL_ARCH_GRANITE_H) rc = parse_granite_h(p, o, c);
  else rc = parse_attn(p, o, c);
  if (!rc && c->arch == SL_ARCH_GRANITE) rc = granite_mults(p, o, c); /* Llama's layers with the muP multipliers */
  if (!rc) rc = sl_hfconfig_validate(p, c);
  if (!rc) rec_resolve(c, row);
done:
  g_rec = NULL;
  json_decref(o);
  if (!rc) rc = rec_finish(p, c, rec.overflow);
  return rc;
}

int sl_hfconfig_load(const char *path, sl_model_config *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return sl_fail(errno == ENOENT ? SL_EINPUT : SL_EIO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  int rc = SL_OK;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 65536;
      if (cap > ((size_t)64 << 20)) {
        rc = sl_fail(SL_EINPUT, "%s: larger than 64 MiB, not a config.json", path);
        break;
      }
      char *q = realloc(buf, cap);
      if (!q) {
        rc = sl_fail(SL_ENOMEM, "out of memory reading %s", path);
        break;
      }
      buf = q;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) {
      if (ferror(f)) rc = sl_fail(SL_EIO, "%s: read failed", path);
      break;
    }
  }
  fclose(f);
  if (!rc) rc = sl_hfconfig_parse(path, buf ? buf : "", n, out);
  free(buf);
  return rc;
}

/* ---- save ------------------------------------------------------------------ */

/* config.json's "rope_scaling" of c: null for plain RoPE, else the rule's
 * fields as transformers names them. */
static json_t *rope_scaling_json(const sl_model_config *c) {
  const sl_rope_scaling *r = &c->rope_scaling;
  if (r->type == SL_ROPE_DEFAULT) return json_null();
  json_t *rs = json_object();
  json_object_set_new(rs, "rope_type", json_string(sl_rope_type_name(r->type)));
  json_object_set_new(rs, "factor", json_real(r->factor));
  if (r->type == SL_ROPE_LLAMA3) {
    json_object_set_new(rs, "low_freq_factor", json_real(r->low_freq_factor));
    json_object_set_new(rs, "high_freq_factor", json_real(r->high_freq_factor));
  }
  if (r->type == SL_ROPE_YARN) {
    json_object_set_new(rs, "beta_fast", json_real(r->beta_fast));
    json_object_set_new(rs, "beta_slow", json_real(r->beta_slow));
    json_object_set_new(rs, "attention_factor", json_real(r->attention_factor));
    if (!r->truncate) json_object_set_new(rs, "truncate", json_false());
  }
  /* yarn: only when it differs (transformers then sets factor = max / original) */
  if (r->type == SL_ROPE_LLAMA3 ||
      (r->type == SL_ROPE_YARN && r->original_max_position_embeddings != c->max_position_embeddings))
    json_object_set_new(rs, "original_max_position_embeddings",
                        json_integer((json_int_t)r->original_max_position_embeddings));
  return rs;
}

/* Qwen2 / Qwen3's window fields: use_sliding_window false when no layer
 * slides (as before), else the window, max_window_layers and layer_types
 * (transformers then takes the list as it is). */
static void qwen_window_json(json_t *o, const sl_model_config *c) {
  int any = 0;
  for (int64_t i = 0; i < c->num_hidden_layers; i++) any |= sl_cfg_layer_window(c, i) > 0;
  json_object_set_new(o, "use_sliding_window", json_boolean(any));
  if (!any) return;
  json_t *lt = json_array();
  for (int64_t i = 0; i < c->num_hidden_layers; i++)
    json_array_append_new(lt, json_string(c->layer_sliding[i] ? "sliding_attention" : "full_attention"));
  json_object_set_new(o, "sliding_window", json_integer((json_int_t)c->sliding_window));
  json_object_set_new(o, "max_window_layers", json_integer((json_int_t)c->max_window_layers));
  json_object_set_new(o, "layer_types", lt);
}

#define SETI(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
#define SETR(k, v) json_object_set_new(o, k, json_real(v))
#define SETB(k, v) json_object_set_new(o, k, json_boolean(v))
#define SETS(k, v) json_object_set_new(o, k, json_string(v))
/* config.json members of an attention model (after num_hidden_layers), in transformers' order */
static void attn_fields_json(json_t *o, const sl_model_config *c) {
  SETI("intermediate_size", c->intermediate_size);
  SETI("num_attention_heads", c->num_attention_heads);
  SETI("num_key_value_heads", c->num_key_value_heads);
  SETI("head_dim", c->head_dim);
  SETS("hidden_act", c->gemma ? "gelu_pytorch_tanh" : "silu");
  SETR("rms_norm_eps", c->rms_norm_eps);
  SETR("rope_theta", c->rope_theta);
  json_object_set_new(o, "rope_scaling", rope_scaling_json(c));
  SETI("max_position_embeddings", c->max_position_embeddings > 0 ? c->max_position_embeddings : 2048);
  if (c->arch == SL_ARCH_MISTRAL || c->arch == SL_ARCH_MIXTRAL) {
    if (c->sliding_window > 0) SETI("sliding_window", c->sliding_window);
    else json_object_set_new(o, "sliding_window", json_null());
    if (c->arch == SL_ARCH_MIXTRAL) {
      SETI("num_local_experts", c->moe_experts);
      SETI("num_experts_per_tok", c->moe_topk);
      SETR("router_aux_loss_coef", c->router_aux_loss_coef);
      SETR("router_jitter_noise", 0.0);
      SETB("output_router_logits", c->output_router_logits);
    }
  } else if (c->arch == SL_ARCH_QWEN2) { /* q/k/v biases are Qwen2's own; no field says so */
    qwen_window_json(o, c);
    SETB("use_mrope", 0);
  } else if (c->arch == SL_ARCH_QWEN3 || c->arch == SL_ARCH_QWEN3_MOE) { /* q/k norms are Qwen3's own */
    SETB("attention_bias", c->o_bias);
    qwen_window_json(o, c);
    if (c->arch == SL_ARCH_QWEN3_MOE) { /* every layer sparse */
      SETI("num_experts", c->moe_experts);
      SETI("num_experts_per_tok", c->moe_topk);
      SETI("moe_intermediate_size", c->moe_intermediate);
      SETB("norm_topk_prob", c->moe_norm_topk);
      SETI("decoder_sparse_step", 1);
      json_object_set_new(o, "mlp_only_layers", json_array());
      SETR("router_aux_loss_coef", c->router_aux_loss_coef);
      SETB("output_router_logits", c->output_router_logits);
    }
  } else if (c->gemma) {
    SETS("hidden_activation", "gelu_pytorch_tanh");
    if (c->arch == SL_ARCH_GEMMA3) {
      SETI("sliding_window_pattern", c->window_every ? c->window_every : c->num_hidden_layers + 1); /* 0: all */
      SETR("rope_local_base_freq", c->rope_local_base_freq);
    }
    SETI("sliding_window", c->sliding_window);
    SETR("query_pre_attn_scalar", c->query_pre_attn_scalar);
    if (c->attn_logit_softcapping > 0) SETR("attn_logit_softcapping", c->attn_logit_softcapping);
    else json_object_set_new(o, "attn_logit_softcapping", json_null());
    if (c->final_logit_softcapping > 0) SETR("final_logit_softcapping", c->final_logit_softcapping);
    else json_object_set_new(o, "final_logit_softcapping", json_null());
    SETB("attention_bias", 0);
  } else {
    SETB("attention_bias", c->o_bias);
    SETB("mlp_bias", c->mlp_bias);
  }
  if (c->arch == SL_ARCH_GRANITE) {
    SETR("embedding_multiplier", c->embedding_mult);
    SETR("logits_scaling", c->logits_scaling);
    SETR("residual_multiplier", c->residual_mult);
    SETR("attention_multiplier", c->attention_mult);
  }
  SETR("attention_dropout", 0.0);
}

/* config.json members of a Mamba model (after num_hidden_layers) */
static void mamba_fields_json(json_t *o, const sl_model_config *c) {
  SETI("intermediate_size", c->intermediate_size);
  SETI("state_size", c->state_size);
  SETI("expand", c->expand);
  SETI("conv_kernel", c->conv_kernel);
  SETI("time_step_rank", c->time_step_rank);
  SETR("layer_norm_epsilon", c->layer_norm_epsilon);
  SETB("use_bias", c->use_bias);
  SETB("use_conv_bias", c->use_conv_bias);
  SETB("residual_in_fp32", c->residual_in_fp32);
  SETS("hidden_act", "silu");
  SETR("time_step_min", c->time_step_min);
  SETR("time_step_max", c->time_step_max);
  SETR("time_step_floor", c->time_step_floor);
  SETR("time_step_scale", c->time_step_scale);
  SETS("time_step_init_scheme", "random");
  if (c->mixer_rms) SETR("mixer_rms_eps", c->mixer_rms_eps);
}

/* Mamba-2's dt init range and time_step_limit (Python's bare Infinity, NF_MARK until written) */
static void dt_fields_json(json_t *o, const sl_model_config *c) {
  SETR("time_step_min", c->time_step_min);
  SETR("time_step_max", c->time_step_max);
  SETR("time_step_floor", c->time_step_floor);
  json_t *lim = json_array();
  for (int i = 0; i < 2; i++)
    json_array_append_new(lim, isinf(c->dt_limit[i]) ? json_string(NF_MARK "+Infinity") : json_real(c->dt_limit[i]));
  json_object_set_new(o, "time_step_limit", lim);
}

/* config.json members of a Mamba-2 model (after num_hidden_layers); an
 * infinite time_step_limit bound as Python writes it (sl_hfconfig_save_as
 * turns the marker into the bare Infinity) */
static void mamba2_fields_json(json_t *o, const sl_model_config *c) {
  SETI("num_heads", c->ssm_heads);
  SETI("head_dim", c->ssm_head_dim);
  SETI("n_groups", c->ssm_groups);
  SETI("state_size", c->state_size);
  SETI("expand", c->expand);
  SETI("conv_kernel", c->conv_kernel);
  SETI("chunk_size", c->ssm_chunk);
  SETR("layer_norm_epsilon", c->layer_norm_epsilon);
  SETB("use_bias", c->use_bias);
  SETB("use_conv_bias", c->use_conv_bias);
  SETB("residual_in_fp32", c->residual_in_fp32);
  SETB("rms_norm", 1);
  SETS("hidden_act", "silu");
  dt_fields_json(o, c);
}

int sl_hfconfig_save(const char *path, const sl_model_config *c) { return sl_hfconfig_save_as(path, c, "float32"); }

static void nemotron_h_fields_json(json_t *o, const sl_model_config *c) {
  SETS("hybrid_override_pattern", c->layer_pattern);
  SETI("intermediate_size", c->intermediate_size);
  SETI("num_attention_heads", c->num_attention_heads);
  SETI("num_key_value_heads", c->num_key_value_heads);
  SETI("head_dim", c->head_dim);
  SETB("attention_bias", c->o_bias);
  SETB("mlp_bias", c->mlp_bias);
  SETS("mlp_hidden_act", "relu2");
  json_object_set_new(o, "sliding_window", json_null());
  SETI("max_position_embeddings", c->max_position_embeddings > 0 ? c->max_position_embeddings : 4096);
  SETI("mamba_num_heads", c->ssm_heads);
  SETI("mamba_head_dim", c->ssm_head_dim);
  SETI("n_groups", c->ssm_groups);
  SETI("ssm_state_size", c->state_size);
  SETI("expand", c->expand);
  SETI("conv_kernel", c->conv_kernel);
  SETI("chunk_size", c->ssm_chunk);
  SETS("mamba_hidden_act", "silu");
  SETR("layer_norm_epsilon", c->layer_norm_epsilon);
  SETB("use_bias", c->use_bias);
  SETB("use_conv_bias", c->use_conv_bias);
  SETB("residual_in_fp32", c->residual_in_fp32);
  dt_fields_json(o, c);
  if (!c->moe_experts) return;
  SETI("n_routed_experts", c->moe_experts);
  SETI("num_experts_per_tok", c->moe_topk);
  SETI("moe_intermediate_size", c->moe_intermediate);
  SETI("moe_shared_expert_intermediate_size", c->moe_shared_intermediate);
  SETI("n_shared_experts", 1);
  SETR("routed_scaling_factor", c->moe_routed_scale);
  SETB("norm_topk_prob", c->moe_norm_topk);
  SETI("n_group", 1);
  SETI("topk_group", 1);
}
static void granite_h_fields_json(json_t *o, const sl_model_config *c) {
  SETI("num_hidden_layers", c->hf_layers);
  json_t *lt = json_array();
  for (int64_t i = 0; i < c->hf_layers; i++)
    json_array_append_new(lt, json_string(c->layer_pattern[2 * i] == 'M' ? "mamba" : "attention"));
  json_object_set_new(o, "layer_types", lt);
  SETI("num_attention_heads", c->num_attention_heads);
  SETI("num_key_value_heads", c->num_key_value_heads);
  SETB("attention_bias", c->o_bias);
  SETI("shared_intermediate_size", c->intermediate_size);
  SETI("num_local_experts", c->moe_experts);
  if (c->moe_experts) {
    SETI("num_experts_per_tok", c->moe_topk);
    SETI("intermediate_size", c->moe_intermediate);
    SETR("router_aux_loss_coef", c->router_aux_loss_coef);
    SETB("output_router_logits", c->output_router_logits);
  }
  SETS("position_embedding_type", "nope");
  SETS("hidden_act", "silu");
  SETR("rms_norm_eps", c->rms_norm_eps);
  SETI("max_position_embeddings", c->max_position_embeddings > 0 ? c->max_position_embeddings : 2048);
  SETR("embedding_multiplier", c->embedding_mult);
  SETR("logits_scaling", c->logits_scaling);
  SETR("residual_multiplier", c->residual_mult);
  SETR("attention_multiplier", c->attention_mult);
  SETI("mamba_n_heads", c->ssm_heads);
  SETI("mamba_d_head", c->ssm_head_dim);
  SETI("mamba_n_groups", c->ssm_groups);
  SETI("mamba_d_state", c->state_size);
  SETI("mamba_d_conv", c->conv_kernel);
  SETI("mamba_expand", c->expand);
  SETI("mamba_chunk_size", c->ssm_chunk);
  SETB("mamba_conv_bias", c->use_conv_bias);
  SETB("mamba_proj_bias", c->use_bias);
}
int sl_hfconfig_save_as(const char *path, const sl_model_config *c, const char *torch_dtype) {
  int rc = sl_hfconfig_validate(path, c);
  if (rc) return rc;
  json_t *o = json_object();
  if (!o) return sl_fail(SL_ENOMEM, "out of memory");
  const char *cls = "MambaForCausalLM", *type = sl_arch_name(c->arch);
  for (size_t i = 0; i < sizeof k_arch / sizeof k_arch[0]; i++)
    if (k_arch[i].arch == c->arch && falcon_row((int)i) == (c->mixer_rms != 0))
      cls = k_arch[i].cls, type = k_arch[i].type;
  json_t *arr = json_array();
  json_array_append_new(arr, json_string(cls));
  json_object_set_new(o, "architectures", arr);
  SETS("model_type", type);
  SETI("vocab_size", c->vocab_size);
  SETI("hidden_size", c->hidden_size);
  SETI("num_hidden_layers", c->num_hidden_layers);
  if (c->arch == SL_ARCH_MAMBA) mamba_fields_json(o, c);
  else if (c->arch == SL_ARCH_MAMBA2) mamba2_fields_json(o, c);
  else if (c->arch == SL_ARCH_NEMOTRON_H) nemotron_h_fields_json(o, c);
  else if (c->arch == SL_ARCH_GRANITE_H) granite_h_fields_json(o, c);
  else attn_fields_json(o, c);
  SETR("initializer_range", c->initializer_range);
  SETB("tie_word_embeddings", c->tie_word_embeddings);
  /* token ids: null for none (an absent one would read as the family's default) */
  if (c->bos_token_id >= 0) SETI("bos_token_id", c->bos_token_id);
  else json_object_set_new(o, "bos_token_id", json_null());
  if (c->n_eos > 1) {
    json_t *ea = json_array();
    for (int i = 0; i < c->n_eos; i++) json_array_append_new(ea, json_integer((json_int_t)c->eos_token_ids[i]));
    json_object_set_new(o, "eos_token_id", ea);
  } else if (c->eos_token_id >= 0) {
    SETI("eos_token_id", c->eos_token_id);
  } else {
    json_object_set_new(o, "eos_token_id", json_null());
  }
  SETB("use_cache", 1);
  SETS("torch_dtype", torch_dtype);
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  json_decref(o);
  if (!text) return sl_fail(SL_ENOMEM, "out of memory writing %s", path);
  static const char mark[] = "\"\\u0001+Infinity\""; /* the marker back to Python's bare Infinity */
  for (char *q; (q = strstr(text, mark));) {
    memcpy(q, "Infinity", 8);
    memmove(q + 8, q + sizeof mark - 1, strlen(q + sizeof mark - 1) + 1);
  }
  char *t2 = NULL;
  if (asprintf(&t2, "%s\n", text) < 0) t2 = NULL;
  free(text);
  if (!t2) return sl_fail(SL_ENOMEM, "out of memory writing %s", path);
  rc = sl_write_text_atomic(path, t2);
  free(t2);
  return rc;
}
#undef SETI
#undef SETR
#undef SETB
#undef SETS
