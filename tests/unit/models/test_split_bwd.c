/* tests/unit/models/test_split_bwd.c — the backward split into its input- and weight-
 * gradient halves (models/model.h: stash_numel, bwd_input, bwd_weight;
 * models/llama_split.c, mamba_split.c, lmhead_split.c), which the zb1p
 * pipeline schedule runs. Oracle: the unsplit bwd of every unit. Two
 * micro-batches in two activation sets run forward A, forward B, then the
 * input halves of A and of B (each keeping its own stash), then the weight
 * halves of A and of B, as zb1p defers W: every unit's gradient must equal
 * the unsplit backward's bit for bit, for Llama (untied), Mistral (tied:
 * the head's part of unit 0's gradient comes out of its input half, as the
 * executor sends it to rank 0), Mamba tied and untied with biases,
 * Falcon-Mamba (the dt/B/C norms), Mamba-2 (biases, two groups), Nemotron-H
 * (M*M-: Mamba-2, attention without RoPE and squared-ReLU MLP layers, every
 * bias, two groups; M*E-E: its MoE layers, the sparse MLP's split with the
 * shared expert), Mixtral (every layer sparse), under
 * every activation-checkpoint mode, with 1 and 2 threads. Tensor
 * parallelism: the same at TP 2 (one thread per TP rank, each with its own
 * model slice and a fake TP group, tests/lib/fake_tp.h), with and without
 * sequence parallelism, for Llama with one KV head (its k/v slice replicated
 * over both ranks), Mistral (tied), Mamba tied and untied, Falcon-Mamba, Mamba-2, Nemotron-H (both), Mixtral: the split runs
 * the unsplit backward's collectives (input-gradient ones in B, weight-
 * gradient ones in W) and every rank's gradients equal its unsplit ones bit
 * for bit. One process, CPU backend, no FSDP (the executor's part:
 * tests/cli/pp/test_pp_zb1p.sh, tests/cli/tp/test_tppp.sh).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "formats/hfconfig.h"
#include "kernels/kernels.h"
#include "models/model.h"
#include "tests/lib/check.h"
#include "tests/lib/fake_tp.h"
#include "tests/lib/tiny_models.h"

static const char *MAMBA_BIAS =
    "{\"architectures\": [\"MambaForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2,"
    " \"state_size\": 8, \"expand\": 2, \"conv_kernel\": 4, \"time_step_rank\": 4, \"vocab_size\": 300,"
    " \"layer_norm_epsilon\": 1e-5, \"use_bias\": true, \"tie_word_embeddings\": false}";

static const char *FALCON = /* Falcon-Mamba: the dt/B/C norms' backward runs in the input half */
    "{\"architectures\": [\"FalconMambaForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2,"
    " \"state_size\": 8, \"expand\": 2, \"conv_kernel\": 4, \"time_step_rank\": 4, \"vocab_size\": 300,"
    " \"layer_norm_epsilon\": 1e-5, \"mixer_rms_eps\": 1e-5, \"tie_word_embeddings\": false}";

static const char *MAMBA2 = /* Mamba-2: two groups, biases, the scan's parameter gradients through the stash */
    "{\"architectures\": [\"Mamba2ForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 2,"
    " \"state_size\": 8, \"expand\": 2, \"conv_kernel\": 4, \"num_heads\": 8, \"head_dim\": 8, \"n_groups\": 2,"
    " \"vocab_size\": 300, \"use_bias\": true, \"tie_word_embeddings\": false}";

/* Nemotron-H: all three layer kinds (Mamba-2 M, attention without RoPE *, squared-ReLU MLP -) in one
 * model of two block kinds, with every bias (use_bias, attention_bias, mlp_bias) and two groups */
static const char *NEMOTRON_H =
    "{\"architectures\": [\"NemotronHForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48,"
    " \"hybrid_override_pattern\": \"M*M-\", \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8,"
    " \"mamba_num_heads\": 8, \"mamba_head_dim\": 8, \"n_groups\": 2, \"ssm_state_size\": 8, \"conv_kernel\": 4,"
    " \"vocab_size\": 300, \"layer_norm_epsilon\": 1e-5, \"use_bias\": true, \"attention_bias\": true,"
    " \"mlp_bias\": true, \"tie_word_embeddings\": false}";

/* Nemotron-H with MoE layers (M*E-E): the sparse MLP's split (the router's and the experts' dW in W from the
 * stash's received-row gradients and exchange plan), the shared expert beside it, relu^2 experts, mlp_bias */
static const char *NEMOTRON_MOE =
    "{\"architectures\": [\"NemotronHForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48,"
    " \"hybrid_override_pattern\": \"M*E-E\", \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8,"
    " \"mamba_num_heads\": 8, \"mamba_head_dim\": 8, \"n_groups\": 2, \"ssm_state_size\": 8, \"conv_kernel\": 4,"
    " \"vocab_size\": 300, \"layer_norm_epsilon\": 1e-5, \"mlp_bias\": true, \"tie_word_embeddings\": false,"
    " \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 24,"
    " \"moe_shared_expert_intermediate_size\": 40, \"routed_scaling_factor\": 2.5}";

/* Mixtral (4 experts, top 2, SwiGLU experts, every layer sparse) */
static const char *MIXTRAL =
    "{\"architectures\": [\"MixtralForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 24,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 300,"
    " \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": false}";

static const char *LLAMA_KV1 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"num_hidden_layers\": 2, \"vocab_size\": 300,"
    " \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false}";

/* Qwen3 (q/k norms, head_dim 12) with attention_bias; one KV head, so TP 2 replicates it */
static const char *QWEN3_B =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 12, \"num_hidden_layers\": 2,"
    " \"vocab_size\": 300, \"rms_norm_eps\": 1e-5, \"attention_bias\": true, \"tie_word_embeddings\": false}";

/* Llama with attention_bias and mlp_bias */
static const char *LLAMA_B =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 48,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 300,"
    " \"rms_norm_eps\": 1e-5, \"attention_bias\": true, \"mlp_bias\": true, \"tie_word_embeddings\": false}";

enum { B = 2, T = 8, NMB = 2, MAXU = 12 };

/* One TP rank's run of a case (the whole case at T = 1); its results are
 * checked by the main thread. */
typedef struct {
  const char *label, *json;
  sl_actckpt ac;
  int threads, sp;
  sl_tp_group tp;
  fake_tp_rank fr;
  int rc, U;
  int64_t n[MAXU], bad[NMB][MAXU], nz[NMB][MAXU];
} rank_job;

static float **grad_set(const sl_model *m) {
  float **g = calloc((size_t)m->nunits, sizeof *g);
  for (int u = 0; u < m->nunits; u++) {
    g[u] = sl_alloc((size_t)m->units[u].numel * 4, "grads");
    memset(g[u], 0, (size_t)m->units[u].numel * 4);
  }
  return g;
}
static void free_set(float **g, int U) {
  for (int u = 0; u < U; u++) sl_free(g[u]);
  free(g);
}

static int fwd_mb(sl_model *m, world *w, int set, const int32_t *tok, const int32_t *tgt, float scale) {
  int rc = sl_model_use_acts(m, set);
  sl_model_set_batch(m, tok, tgt, scale);
  for (int u = 0; u < m->nunits && !rc; u++) rc = m->vt->fwd(m, u, w->params[u]);
  return rc;
}

static void *run_rank(void *arg) {
  rank_job *j = arg;
  const char *label = j->label;
  sl_model_config cfg;
  j->rc = sl_hfconfig_parse(label, j->json, strlen(j->json), &cfg);
  if (j->rc) return NULL;
  const sl_ops *o = sl_ops_cpu();
  sl_kctx *k = o->ctx_create(j->threads);
  sl_model *m = NULL;
  int rc = sl_model_create_full(&cfg, o, k, B, T, j->ac, j->tp.rank, j->tp.size, j->sp, NULL, 0, &m);
  if (!rc) rc = sl_model_set_nacts(m, NMB);
  if (!rc && (!m->vt->bwd_input || !m->vt->bwd_weight || !m->vt->stash_numel))
    rc = sl_fail(SL_EINTERNAL, "%s: no split backward", label);
  if (!rc && m->nunits > MAXU) rc = sl_fail(SL_EINTERNAL, "%s: %d units, the test holds %d", label, m->nunits, MAXU);
  if (rc) {
    j->rc = rc;
    sl_model_destroy(m);
    o->ctx_destroy(k);
    return NULL;
  }
  int U = m->nunits, tied = cfg.tie_word_embeddings;
  j->U = U;
  world w = {calloc((size_t)U, sizeof(float *)), NULL};
  for (int u = 0; u < U; u++) {
    w.params[u] = sl_alloc((size_t)m->units[u].numel * 4, "params");
    sl_model_unit_load(m, u, NULL, 4321, w.params[u]);
  }
  m->access = (sl_unit_access){&w, acc_params, acc_grads, j->tp, {.rank = 0, .size = 1}};
  int32_t tok[NMB][B * T], tgt[NMB][B * T];
  uint64_t s = 7;
  for (int mb = 0; mb < NMB; mb++)
    for (int i = 0; i < B * T; i++) {
      tok[mb][i] = (int32_t)(sl_splitmix64(&s) % 300);
      tgt[mb][i] = i % 7 == 2 ? -1 : (int32_t)(sl_splitmix64(&s) % 300);
    }
  const float scale = 1.0f / (NMB * B * T);
  float **ref[NMB], **got[NMB], *stash[NMB][MAXU], *tbuf[NMB];
  int64_t head_n = m->units[0].numel;
  for (int mb = 0; mb < NMB; mb++) {
    ref[mb] = grad_set(m);
    got[mb] = grad_set(m);
    tbuf[mb] = sl_alloc((size_t)head_n * 4, "tied");
    for (int u = 0; u < U; u++) stash[mb][u] = sl_alloc((size_t)m->vt->stash_numel(m, u) * 4, "stash");
  }
  /* oracle: forward and unsplit backward of each micro-batch in set 0 */
  for (int mb = 0; mb < NMB && !rc; mb++) {
    rc = fwd_mb(m, &w, 0, tok[mb], tgt[mb], scale);
    w.grads = ref[mb];
    for (int u = U - 1; u >= 0 && !rc; u--) rc = m->vt->bwd(m, u, w.params[u], ref[mb][u]);
  }
  /* split, as zb1p runs it: F A, F B, B A, B B, W A, W B */
  for (int mb = 0; mb < NMB && !rc; mb++) rc = fwd_mb(m, &w, mb, tok[mb], tgt[mb], scale);
  for (int mb = 0; mb < NMB && !rc; mb++) {
    rc = sl_model_use_acts(m, mb);
    w.grads = NULL; /* the input half touches no gradient buffer */
    for (int u = U - 1; u >= 0 && !rc; u--)
      rc = m->vt->bwd_input(m, u, w.params[u], stash[mb][u], u == U - 1 && tied ? tbuf[mb] : NULL);
  }
  for (int mb = 0; mb < NMB && !rc; mb++) {
    rc = sl_model_use_acts(m, mb);
    if (tied) memcpy(got[mb][0], tbuf[mb], (size_t)head_n * 4); /* the head's part first, as rank 0 does */
    w.grads = got[mb]; /* a MoE layer's weight half adds its experts' gradients into its companion unit's */
    for (int u = U - 1; u >= 0 && !rc; u--) rc = m->vt->bwd_weight(m, u, w.params[u], got[mb][u], stash[mb][u]);
  }
  j->rc = rc;
  for (int mb = 0; mb < NMB && !rc; mb++)
    for (int u = 0; u < U; u++) {
      int64_t n = m->units[u].numel, bad = 0, nz = 0;
      for (int64_t i = 0; i < n; i++) {
        bad += memcmp(&got[mb][u][i], &ref[mb][u][i], 4) != 0;
        nz += ref[mb][u][i] != 0.0f;
      }
      j->n[u] = n;
      j->bad[mb][u] = bad;
      j->nz[mb][u] = nz;
    }
  for (int mb = 0; mb < NMB; mb++) {
    free_set(ref[mb], U);
    free_set(got[mb], U);
    sl_free(tbuf[mb]);
    for (int u = 0; u < U; u++) sl_free(stash[mb][u]);
  }
  free_set(w.params, U);
  sl_model_destroy(m);
  o->ctx_destroy(k);
  return NULL;
}

/* The case at TP degree tp (one thread per TP rank above 1), sp: sequence
 * parallelism (tp > 1). */
static void check_model(const char *label, const char *json, sl_actckpt ac, int threads, int tp, int sp) {
  rank_job j[FAKE_TP_MAX];
  pthread_t th[FAKE_TP_MAX];
  fake_tp g;
  fake_tp_init(&g, tp);
  for (int r = 0; r < tp; r++) {
    j[r] = (rank_job){.label = label, .json = json, .ac = ac, .threads = threads, .sp = sp, .fr = {&g, r}};
    j[r].tp = tp > 1 ? fake_tp_group(&j[r].fr) : sl_tp_single();
  }
  if (tp == 1) run_rank(&j[0]);
  for (int r = 0; tp > 1 && r < tp; r++) pthread_create(&th[r], NULL, run_rank, &j[r]);
  for (int r = 0; tp > 1 && r < tp; r++) pthread_join(th[r], NULL);
  fake_tp_destroy(&g);
  for (int r = 0; r < tp; r++) {
    CHECK(j[r].rc == SL_OK, "%s ac %d threads %d tp %d sp %d rank %d: runs", label, (int)ac, threads, tp, sp, r);
    for (int mb = 0; mb < NMB && !j[r].rc; mb++)
      for (int u = 0; u < j[r].U; u++)
        CHECK(j[r].bad[mb][u] == 0 && j[r].nz[mb][u] > 0,
              "%s ac %d threads %d tp %d sp %d rank %d mb %d unit %d: %lld of %lld gradient values differ (%lld "
              "nonzero)",
              label, (int)ac, threads, tp, sp, r, mb, u, (long long)j[r].bad[mb][u], (long long)j[r].n[u],
              (long long)j[r].nz[mb][u]);
  }
}

int main(void) {
  sl_actckpt modes[3] = {SL_AC_NONE, SL_AC_SELECTIVE, SL_AC_FULL};
  for (int th = 1; th <= 2; th++)
    for (int i = 0; i < 3; i++) {
      check_model("llama", LLAMA, modes[i], th, 1, 0);
      check_model("mistral", MISTRAL, modes[i], th, 1, 0);
      check_model("mamba", MAMBA, modes[i], th, 1, 0);
      check_model("mamba-bias", MAMBA_BIAS, modes[i], th, 1, 0);
      check_model("qwen3-bias", QWEN3_B, modes[i], th, 1, 0);
      check_model("llama-bias", LLAMA_B, modes[i], th, 1, 0);
      check_model("falcon-mamba", FALCON, modes[i], th, 1, 0);
      check_model("mamba2", MAMBA2, modes[i], th, 1, 0);
      check_model("nemotron-h", NEMOTRON_H, modes[i], th, 1, 0);
      check_model("nemotron-h-moe", NEMOTRON_MOE, modes[i], th, 1, 0);
      check_model("mixtral", MIXTRAL, modes[i], th, 1, 0);
    }
  for (int sp = 0; sp <= 1; sp++) /* TP 2, one kernel thread per rank */
    for (int i = 0; i < 3; i++) {
      check_model("llama-kv1", LLAMA_KV1, modes[i], 1, 2, sp);
      check_model("mistral", MISTRAL, modes[i], 1, 2, sp);
      check_model("mamba", MAMBA, modes[i], 1, 2, sp);
      check_model("mamba-bias", MAMBA_BIAS, modes[i], 1, 2, sp);
      check_model("qwen3-bias", QWEN3_B, modes[i], 1, 2, sp);
      check_model("llama-bias", LLAMA_B, modes[i], 1, 2, sp);
      check_model("falcon-mamba", FALCON, modes[i], 1, 2, sp);
      check_model("mamba2", MAMBA2, modes[i], 1, 2, sp);
      check_model("nemotron-h", NEMOTRON_H, modes[i], 1, 2, sp);
      check_model("nemotron-h-moe", NEMOTRON_MOE, modes[i], 1, 2, sp);
      check_model("mixtral", MIXTRAL, modes[i], 1, 2, sp);
    }
  return CHECK_SUMMARY();
}
