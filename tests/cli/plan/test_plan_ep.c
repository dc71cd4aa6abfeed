/* tests/cli/plan/test_plan_ep.c — the helper of test_plan_ep.sh: the
 * planner's closed forms under expert parallelism against the engine check
 * (sl_train_dry_run, the trainer on the counting backends), exactly:
 *   - sl_plan_ep_alltoall_bytes against the step's counted all-to-all bytes,
 *     a tiny Mixtral (4 experts, top 2, 2 layers) at world 4, EP 2 and 4,
 *     activation checkpointing none / selective / full, 1 and 2 micro-batches;
 *   - sl_plan_ep_states (dense tensors over the shard group, each experts
 *     unit's 1/EP over the S/EP ranks holding it) against the params, grads
 *     and optim arenas held when the step starts, ZeRO 0-3, and the held
 *     elements (dense + experts / EP) against the dry run's;
 *   - negative controls: the states of EP 1 against the engine at EP 2 must
 *     not compare equal; with --plant-row the expected all-to-all bytes are
 *     one row (hidden_size fp32) more, and every all-to-all check must fail
 *     (the script runs that);
 *   - the search on the published configs (argv[1], argv[2]: Mixtral-8x7B,
 *     Qwen3-30B-A3B) on 8 GPUs offers EP layouts, and each one's all-to-all
 *     bytes (the dry runs of 3 and 4 layers, scaled) equal the closed form.
 * Prints "a2a EP AC ACCUM BYTES" per case (the script compares the CLI's
 * engine check with it) and "N passed, M failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/dryrun.h"
#include "formats/hfconfig.h"
#include "plan/planner.h"

#include "tests/lib/check.h"

static const char *MIXTRAL =
    "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\", \"hidden_size\": 32,"
    " \"intermediate_size\": 24, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_hidden_layers\": 2,"
    " \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"vocab_size\": 300, \"rms_norm_eps\": 1e-5,"
    " \"rope_theta\": 10000.0, \"tie_word_embeddings\": false}";

/* The comparison every check uses: equal to the byte (the negative controls run it too). */
static int same(double got, double want) { return got == want; }

/* The engine check of run r (world 4, rank 0) into *out. */
static int dry(const sl_model_config *mc, const sl_plan_run *r, sl_dry_result *out) {
  sl_train_cfg c;
  sl_train_cfg_defaults(&c);
  sl_plan_run_train_cfg(r, &c);
  return sl_train_dry_run(&c, mc, r->world, 0, out);
}

static const char *ac_name(sl_actckpt a) {
  return a == SL_AC_FULL ? "full" : a == SL_AC_SELECTIVE ? "selective" : "none";
}

/* The all-to-all closed form against the engine check: EP 2 and 4, every checkpointing mode, 1 and 2 micro-batches. */
static void test_alltoall(const sl_model_config *mc, const sl_plan_model *m, int plant) {
  for (int ep = 2; ep <= 4; ep *= 2)
    for (int ac = 0; ac <= 2; ac++)
      for (int A = 1; A <= 2; A++) {
        sl_plan_run r;
        sl_plan_run_engine(&r, NULL, NULL);
        r.world = 4, r.zero = 3, r.micro_batch = 3, r.seq_len = 16, r.grad_accum = A, r.ac = (sl_actckpt)ac, r.ep = ep;
        sl_dry_result d;
        int rc = dry(mc, &r, &d);
        CHECK(rc == SL_OK, "dry run EP %d: %s", ep, sl_errmsg());
        if (rc) continue;
        double want = sl_plan_ep_alltoall_bytes(m, &r, m->nmoe), got = (double)d.comm[SL_COLL_ALLTOALL];
        if (plant) want += 4.0 * (double)m->C; /* the negative control: one row off */
        printf("a2a %d %s %d %.0f\n", ep, ac_name((sl_actckpt)ac), A, want);
        CHECK(same(got, want), "EP %d ckpt %s accum %d: the engine counts %.0f all-to-all bytes, the closed form %.0f",
              ep, ac_name((sl_actckpt)ac), A, got, want);
      }
}

/* The same under TP 2 (EP 2 at world 4, EP 4 at world 8; every TP rank exchanges whole rows of its EP group): where
 * the engine refuses --tp with --ep it says so and nothing is compared. */
static void test_alltoall_tp(const sl_model_config *mc, const sl_plan_model *m, int plant) {
  for (int ep = 2; ep <= 4; ep *= 2)
    for (int ac = 0; ac <= 2; ac += 2) {
      sl_plan_run r;
      sl_plan_run_engine(&r, NULL, NULL);
      r.world = 2 * ep, r.tp = 2, r.zero = 3, r.micro_batch = 3, r.seq_len = 16, r.ac = (sl_actckpt)ac, r.ep = ep;
      sl_dry_result d;
      int rc = dry(mc, &r, &d);
      if (rc == SL_EINPUT && strstr(sl_errmsg(), "--tp")) {
        printf("note: EP x TP not compared: %s\n", sl_errmsg());
        return;
      }
      CHECK(rc == SL_OK, "dry run EP %d x TP 2: %s", ep, sl_errmsg());
      if (rc) continue;
      double want = sl_plan_ep_alltoall_bytes(m, &r, m->nmoe) + (plant ? 4.0 * (double)m->C : 0);
      double got = (double)d.comm[SL_COLL_ALLTOALL];
      printf("a2a-tp %d %s 1 %.0f\n", ep, ac_name((sl_actckpt)ac), want);
      CHECK(same(got, want), "EP %d x TP 2 ckpt %s: the engine counts %.0f all-to-all bytes, the closed form %.0f", ep,
            ac_name((sl_actckpt)ac), got, want);
    }
}

/* The states closed form against the arenas held when the step starts, ZeRO 0-3 at EP 1, 2, 4. */
static void test_states(const sl_model_config *mc, const sl_plan_model *m) {
  const sl_arena ar[3] = {SL_ARENA_PARAMS, SL_ARENA_GRADS, SL_ARENA_OPTIM};
  for (int zero = 0; zero <= 3; zero++)
    for (int ep = 1; ep <= 4; ep *= 2) {
      sl_plan_run r;
      sl_plan_run_engine(&r, NULL, NULL);
      r.world = 4, r.zero = zero, r.micro_batch = 2, r.seq_len = 16, r.ep = ep;
      sl_dry_result d;
      int rc = dry(mc, &r, &d);
      CHECK(rc == SL_OK, "dry run ZeRO-%d EP %d: %s", zero, ep, sl_errmsg());
      if (rc) continue;
      double dense[3], expert[3], d1[3], e1[3];
      sl_plan_ep_states(m, 4, ep, zero, 4, dense, expert);
      sl_plan_ep_states(m, 4, 1, zero, 4, d1, e1);
      for (int i = 0; i < 3; i++) {
        CHECK(same((double)d.start[ar[i]], dense[i] + expert[i]),
              "ZeRO-%d EP %d %s: the engine holds %lld bytes, the closed form %.0f (experts %.0f)", zero, ep,
              sl_arena_name(ar[i]), (long long)d.start[ar[i]], dense[i] + expert[i], expert[i]);
        if (ep > 1 && zero < 3 && i == 0) /* negative control: the experts' whole held units differ from EP 1's */
          CHECK(!same((double)d.start[ar[i]], d1[i] + e1[i]), "ZeRO-%d EP %d: EP 1's states compare equal", zero, ep);
      }
      int64_t held = 0;
      for (int u = 0; u < m->nunits; u++) held += m->numel[u] - m->enumel[u] + m->enumel[u] / ep;
      CHECK(d.nparams == held, "EP %d: the engine holds %lld parameters, dense + experts / EP = %lld", ep,
            (long long)d.nparams, (long long)held);
    }
}

/* The search on a published config (8 GPUs of 80 GB, seq 4096, 4 Mi tokens): EP layouts listed, each one's
 * all-to-all bytes the closed form's. */
static void test_search(const char *path) {
  sl_model_config mc;
  sl_plan_model m;
  int rc = sl_hfconfig_load(path, &mc);
  if (!rc) rc = sl_plan_model_init(&mc, &m);
  CHECK(rc == SL_OK, "%s: %s", path, sl_errmsg());
  if (rc) return;
  sl_plan_cluster c;
  sl_plan_cluster_defaults(&c);
  c.gpus = c.gpus_per_node = 8;
  sl_plan_cand *v = NULL;
  int n = 0, neps = 0, bad = 0, degrees = 0;
  rc = sl_plan_search(&m, &c, &v, &n);
  CHECK(rc == SL_OK, "search %s: %s", path, sl_errmsg());
  if (!rc)
    for (int i = 0; i < n; i++) {
      if (v[i].ep <= 1 || v[i].needs_mode) continue;
      neps++;
      degrees |= 1 << v[i].ep;
      sl_plan_run r;
      sl_plan_run_engine(&r, NULL, NULL);
      r.micro_batch = v[i].micro_batch, r.seq_len = c.seq_len, r.grad_accum = v[i].grad_accum, r.ac = v[i].ac;
      r.ep = v[i].ep;
      double want = sl_plan_ep_alltoall_bytes(&m, &r, m.nmoe / v[i].pp);
      if (!same(v[i].comm_bytes[SL_PLAN_A2A], want) && bad++ < 3)
        printf("  %s: EP %d PP %d %lldx%lld: %.0f all-to-all bytes, closed form %.0f\n", path, v[i].ep, v[i].pp,
               (long long)v[i].micro_batch, (long long)v[i].grad_accum, v[i].comm_bytes[SL_PLAN_A2A], want);
    }
  printf("%s: %d candidates, %d with EP > 1 (degrees mask %#x)\n", path, n, neps, degrees);
  CHECK(degrees == (1 << 2 | 1 << 4 | 1 << 8), "%s: EP degrees searched %#x, want 2, 4 and 8", path, degrees);
  CHECK(bad == 0, "%s: %d EP candidates whose all-to-all bytes are not the closed form's", path, bad);
  free(v);
  sl_plan_model_free(&m);
}

int main(int argc, char **argv) {
  char dir[] = "/tmp/sl-plan-ep.XXXXXX", path[64];
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  fputs(MIXTRAL, f);
  fclose(f);
  sl_model_config mc;
  sl_plan_model m;
  int rc = sl_hfconfig_load(path, &mc);
  if (!rc) rc = sl_plan_model_init(&mc, &m);
  unlink(path);
  rmdir(dir);
  CHECK(rc == SL_OK, "tiny Mixtral: %s", sl_errmsg());
  if (rc) return CHECK_SUMMARY();
  int plant = argc > 1 && !strcmp(argv[1], "--plant-row");
  test_alltoall(&mc, &m, plant);
  test_alltoall_tp(&mc, &m, plant);
  if (!plant) test_states(&mc, &m);
  sl_plan_model_free(&m);
  for (int i = 1 + plant; i < argc; i++) test_search(argv[i]);
  return CHECK_SUMMARY();
}
