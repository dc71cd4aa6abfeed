/* tools/eval_cmd.c — `shardlm eval`: loss and perplexity of a saved model
 * over the first N windows of a dataset in sequential order, on one process
 * or sharded (mpirun / --nproc), with every training flag that shapes the
 * layout (--zero, --offload-params, --backend, ...) accepted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/trainer.h"
#include "formats/safetensors.h"
#include "shard/comm.h"
#include "tools/tools.h"

static int code(int rc) { return rc == SL_OK ? 0 : rc == SL_EINPUT ? 2 : 1; }

static const char *USAGE =
    "usage: shardlm eval --model HF_DIR --data PREFIX --seq-len T --max-samples N [--micro-batch B] [--json]\n"
    "       [--nproc P] [--zero S] [any other 'shardlm train' flag shaping the layout]\n";

int sl_tool_eval(int argc, char **argv) {
  sl_train_cfg cfg;
  sl_train_cfg_defaults(&cfg);
  cfg.summary = 0;
  cfg.plot = 0;
  long long n = -1;
  int json = 0, nargs = 0;
  char **args = calloc((size_t)argc + 1, sizeof(char *));
  if (!args) return 1;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(USAGE, stdout);
      free(args);
      return 0;
    }
    if (!strcmp(argv[i], "--json")) {
      json = 1;
      continue;
    }
    if (!strcmp(argv[i], "--max-samples") && i + 1 < argc) {
      char *end;
      n = strtoll(argv[++i], &end, 10);
      if (!*argv[i] || *end) n = -2;
      continue;
    }
    args[nargs++] = argv[i];
  }
  int rc = sl_train_cfg_parse_args(&cfg, nargs, args);
  free(args);
  if (rc) {
    fprintf(stderr, "shardlm eval: %s\n%s", sl_errmsg(), USAGE);
    return code(rc);
  }
  if (!cfg.model[0] || !cfg.data[0] || n == -1) {
    fprintf(stderr, "shardlm eval: --model, --data and --max-samples are required\n%s", USAGE);
    return 2;
  }
  if (n < 1) {
    fprintf(stderr, "shardlm eval: --max-samples must be an integer >= 1 (windows to evaluate)\n");
    return 2;
  }
  if (!strcmp(cfg.init, "random")) {
    fprintf(stderr,
            "shardlm eval: --init random: eval measures the weights of --model %s; there is nothing to "
            "initialise (drop the flag)\n",
            cfg.model);
    return 2;
  }
  sl_st_set *w = NULL; /* a model without weights would be evaluated at its random init */
  if ((rc = sl_st_open_dir(cfg.model, &w)) || !w) {
    if (!rc) sl_fail(SL_EINPUT, "%s: no *.safetensors weights to evaluate", cfg.model);
    fprintf(stderr, "shardlm eval: %s\n", sl_errmsg());
    return 2;
  }
  sl_st_close_set(w);
  if (cfg.nproc > 1 && !sl_under_launcher()) return sl_supervise(argc, argv, 0); /* a local mpirun */
  sl_comm *world = NULL;
  if (sl_comm_world_init(&argc, &argv, cfg.comm_timeout, &world) != SL_COMM_OK) {
    fprintf(stderr, "shardlm eval: cannot start communication: %s\n", sl_comm_last_error());
    return 1;
  }
  int rank = sl_comm_rank(world), size = sl_comm_size(world);
  sl_log_set_rank(rank, size);
  sl_eval_result r;
  rc = sl_train_eval(&cfg, world, (int64_t)n, &r);
  if (rc) {
    if (size > 1) fprintf(stderr, "[rank %d] shardlm eval: %s\n", rank, sl_errmsg());
    else fprintf(stderr, "shardlm eval: %s\n", sl_errmsg());
    fflush(stderr);
    if (size > 1) sl_comm_abort(code(rc));
  } else if (rank == 0) {
    if (json)
      printf("{\"loss\": %.9g, \"perplexity\": %.9g, \"tokens\": %lld, \"samples\": %lld, \"seq_len\": %lld, "
             "\"ranks\": %d}\n",
             r.loss, r.ppl, (long long)r.tokens, (long long)r.samples, (long long)cfg.seq_len, size);
    else
      printf("eval: loss %.6f  perplexity %.4f  (%lld windows of %lld tokens, %lld predicted tokens, %d rank%s)\n",
             r.loss, r.ppl, (long long)r.samples, (long long)cfg.seq_len, (long long)r.tokens, size,
             size > 1 ? "s" : "");
  }
  sl_comm_destroy(world);
  sl_comm_world_finalize();
  return code(rc);
}
