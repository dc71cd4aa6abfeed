/* tools/main.c — the shardlm command line: train | prepare | dump | plot |
 * bench | plan | convert. The only place that turns status codes into exit
 * statuses (bad input: 2; non-finite loss / gradient: 4; any other failure: 1). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "engine/signals.h"
#include "engine/trainer.h"
#include "formats/dataset.h"
#include "shard/comm.h"
#include "tools/plot.h"
#include "tools/tools.h"

static int exit_code(int rc) { return rc == SL_OK ? 0 : rc == SL_EINPUT ? 2 : rc == SL_ENONFINITE ? 4 : 1; }

static void usage(FILE *f) {
  fprintf(f, "usage: shardlm <command> [flags]\n"
             "  train    train a model (no flags: the built-in demo, 2 ranks, ZeRO-3)\n"
             "  prepare  --input FILE --output PREFIX [--tokenizer DIR]: Megatron dataset\n"
             "  dump     one forward/backward to a safetensors file (tests)\n"
             "  plot     METRICS.jsonl [OUT.svg]: loss and throughput curves\n"
             "  bench    train|adam|nvme|gemm|comm: measured figures\n"
             "  plan     predict memory, communication and speed of configurations\n"
             "  pp-schedule --pp P --micro-batches M: the pipeline schedule per rank, its bubble\n"
             "  convert  between training checkpoints and Hugging Face directories\n"
             "  tokenize --tokenizer PATH: text -> token ids (tokenizer.json); detok: ids -> text\n"
             "  eval     --model DIR --data PREFIX --seq-len T --max-samples N: held-out loss\n"
             "  generate --model DIR --prompt TEXT: sample a continuation (KV cache, CPU)\n"
             "run 'shardlm train --help' for the training flags, 'shardlm --help-env' for the environment.\n");
}

int sl_under_launcher(void) {
  /* SLURM_PROCID alone is also set in an sbatch shell, which is not a launcher */
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_RANK") || getenv("PMIX_RANK") ||
         (getenv("SLURM_PROCID") && getenv("SLURM_STEP_ID"));
}

/* srun started several tasks but gave them no PMIx bootstrap: each would be a
 * world of one (or OpenMPI aborts). Returns 1 after saying what to do. */
static int srun_without_pmix(void) {
  const char *n = getenv("SLURM_NTASKS"), *step = getenv("SLURM_STEP_ID");
  if (!n || !step || atoi(n) < 2 || getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_SIZE")) return 0;
  if (getenv("SLURM_PROCID") && atoi(getenv("SLURM_PROCID")) == 0)
    fprintf(stderr,
            "shardlm: srun started %s tasks without a PMIx bootstrap; run `srun --mpi=pmix ...` "
            "(list the plugins with `srun --mpi=list`) or set MpiDefault=pmix in slurm.conf\n",
            n);
  return 1;
}

/* sl_supervise with the run directory passed on (every rank, and every
 * restart, writes into the one this process chose). */
static int supervise_in(int argc, char **argv, const sl_train_cfg *cfg, int restarts) {
  char **a = calloc((size_t)argc + 3, sizeof(char *));
  if (!a) return 1;
  memcpy(a, argv, sizeof(char *) * (size_t)argc);
  int n = argc;
  if (cfg->out_dir_auto && !strncmp(cfg->out_dir, "runs/", 5) && !strchr(cfg->out_dir + 5, '/')) {
    a[n++] = "--run-name"; /* the name chosen here; rank 0 then points runs/latest at it */
    a[n++] = (char *)cfg->out_dir + 5;
  } /* else --out-dir given, or a resumed run's directory, which every rank reads from CKPT_DIR/run-dir */
  int rc = sl_supervise(n, a, restarts);
  free(a);
  return rc;
}

static int cmd_train(int argc, char **argv, int dump) {
  sl_train_cfg cfg;
  sl_train_cfg_defaults(&cfg);
  const char *out = NULL;
  int demo = argc == 2, print_cfg = 0;
  int nargs = 0;
  char **args = calloc((size_t)argc + 1, sizeof(char *));
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--help-env")) {
      sl_env_print(stdout);
      free(args);
      return 0;
    }
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: shardlm %s [--config FILE.json|FILE.yaml] [--print-config] [--name value ...]\n",
             dump ? "dump --out FILE" : "train");
      sl_train_cfg_usage(stdout);
      free(args);
      return 0;
    }
    if (!strcmp(argv[i], "--print-config")) {
      print_cfg = 1;
      continue;
    }
    if (dump && !strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
      continue;
    }
    args[nargs++] = argv[i];
  }
  int rc = sl_train_cfg_parse_args(&cfg, nargs, args);
  free(args);
  if (rc) {
    fprintf(stderr, "shardlm: %s\n", sl_errmsg());
    return exit_code(rc);
  }
  if ((rc = sl_train_cfg_run_dir(&cfg))) { /* runs/NAME, or the resumed run's (rank 0's is the one written) */
    fprintf(stderr, "shardlm: %s\n", sl_errmsg());
    return exit_code(rc);
  }
  if (print_cfg) { /* the resolved settings, in the --config file's format (YAML or JSON) */
    const char *cf = NULL;
    for (int i = 2; i + 1 < argc; i++)
      if (!strcmp(argv[i], "--config")) cf = argv[i + 1];
    size_t cl = cf ? strlen(cf) : 0;
    int yaml = cf && ((cl > 5 && !strcmp(cf + cl - 5, ".yaml")) || (cl > 4 && !strcmp(cf + cl - 4, ".yml")));
    char *t = yaml ? sl_train_cfg_yaml(&cfg, NULL) : sl_train_cfg_json(&cfg, NULL);
    if (!t) return 1;
    printf("%s%s", t, yaml ? "" : "\n");
    free(t);
    return 0;
  }
  if (demo) {
    /* the README's main job: built-in model and corpus, 2 ranks, ZeRO-3 */
    cfg.nproc = 2;
    if (strlen(cfg.out_dir) + 7 > sizeof cfg.save) return 2;
    memcpy(cfg.save, cfg.out_dir, strlen(cfg.out_dir));
    memcpy(cfg.save + strlen(cfg.out_dir), "/model", 7);
  }
  if (dump && !out) {
    fprintf(stderr, "shardlm dump: --out FILE.safetensors is required\n");
    return 2;
  }
  if (!dump && cfg.max_restarts > 0 && !sl_under_launcher()) {
    if (!cfg.ckpt_dir[0]) {
      fprintf(stderr, "shardlm: --max-restarts needs --ckpt-dir\n");
      return 2;
    }
    return supervise_in(argc, argv, &cfg, (int)cfg.max_restarts);
  }
  if (cfg.nproc > 1 && !sl_under_launcher()) {
    if (demo) {
      /* pass the demo's settings through explicitly */
      char **a2 = calloc(10, sizeof(char *));
      a2[0] = argv[0];
      a2[1] = "train";
      a2[2] = "--nproc";
      a2[3] = "2";
      a2[4] = "--save";
      a2[5] = cfg.save;
      a2[6] = "--run-name"; /* runs/NAME as chosen here (cfg.save is in it); rank 0 points runs/latest at it */
      a2[7] = cfg.out_dir + 5;
      return sl_supervise(8, a2, 0);
    }
    return supervise_in(argc, argv, &cfg, 0); /* a local mpirun; signals reach the ranks (tools/supervise.c) */
  }
  if (srun_without_pmix()) return 2;
  if (!dump) sl_signals_install(); /* from here on SIGTERM/SIGINT mean: checkpoint and stop */
  sl_comm *world = NULL;
  if (sl_comm_world_init(&argc, &argv, cfg.comm_timeout, &world) != SL_COMM_OK) {
    fprintf(stderr, "shardlm: cannot start communication: %s\n", sl_comm_last_error());
    return 1;
  }
  int rank = sl_comm_rank(world), size = sl_comm_size(world);
  sl_log_set_rank(rank, size);
  if (cfg.nproc > 0 && cfg.nproc != size)
    rc = sl_fail(SL_EINPUT,
                 "--nproc %lld, but this job was launched with %d rank%s (drop --nproc under mpirun/srun, "
                 "or make them agree)",
                 (long long)cfg.nproc, size, size > 1 ? "s" : "");
  else {
    sl_train_set_plotter(sl_plot_metrics);
    rc = dump ? sl_train_dump(&cfg, world, out) : sl_train_run(&cfg, world);
  }
  if (rc) {
    if (size > 1) fprintf(stderr, "[rank %d] shardlm: %s\n", rank, sl_errmsg());
    else fprintf(stderr, "shardlm: %s\n", sl_errmsg());
    fflush(stderr);
    if (size > 1) sl_comm_abort(exit_code(rc)); /* others may wait in a collective */
  }
  sl_comm_destroy(world);
  sl_comm_world_finalize();
  if (!rc && sl_signals_stopped()) return 128 + sl_signals_stopped(); /* 143 SIGTERM, 130 SIGINT */
  return exit_code(rc);
}

static int cmd_plot(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: shardlm plot METRICS.jsonl [OUT.svg]\n");
    return 2;
  }
  char svg[4096];
  if (argc > 3) snprintf(svg, sizeof svg, "%s", argv[3]);
  else {
    snprintf(svg, sizeof svg, "%s", argv[2]);
    char *dot = strrchr(svg, '.');
    if (dot && strchr(dot, '/') == NULL) *dot = 0;
    strncat(svg, ".svg", sizeof svg - strlen(svg) - 1);
  }
  int rc = sl_plot_metrics(argv[2], svg);
  if (rc) {
    fprintf(stderr, "shardlm plot: %s\n", sl_errmsg());
    return exit_code(rc);
  }
  printf("plot: %s\n", svg);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--help-env")) {
    sl_env_print(stdout);
    return 0;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "train")) return cmd_train(argc, argv, 0);
  if (!strcmp(cmd, "dump")) return cmd_train(argc, argv, 1);
  if (!strcmp(cmd, "prepare")) return sl_tool_prepare(argc, argv);
  if (!strcmp(cmd, "plot")) return cmd_plot(argc, argv);
  if (!strcmp(cmd, "bench")) return sl_tool_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "plan")) return sl_tool_plan(argc - 1, argv + 1);
  if (!strcmp(cmd, "pp-schedule")) return sl_tool_pp_schedule(argc - 1, argv + 1);
  if (!strcmp(cmd, "convert")) return sl_tool_convert(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenize")) return sl_tool_tokenize(argc - 1, argv + 1);
  if (!strcmp(cmd, "detok")) return sl_tool_detok(argc - 1, argv + 1);
  if (!strcmp(cmd, "eval")) return sl_tool_eval(argc, argv);
  if (!strcmp(cmd, "generate")) return sl_tool_generate(argc - 1, argv + 1);
  fprintf(stderr, "shardlm: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
