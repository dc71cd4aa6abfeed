/* tools/tools.h — subcommands of the shardlm CLI that live in their own
 * files. Each takes argv starting at the subcommand name and returns the
 * process exit status. */
#ifndef SL_TOOLS_H
#define SL_TOOLS_H

#include <stdio.h>

int sl_tool_bench(int argc, char **argv);                  /* tools/bench.c */
int sl_tool_plan(int argc, char **argv);                   /* tools/plan.c */
int sl_tool_pp_schedule(int argc, char **argv);            /* tools/pp_schedule.c */
int sl_tool_convert(int argc, char **argv);                /* tools/convert.c */
int sl_tool_prepare(int argc, char **argv);                /* tools/prepare.c */
int sl_tool_tokenize(int argc, char **argv);               /* tools/tokenize.c */
int sl_tool_detok(int argc, char **argv);                  /* tools/tokenize.c */
int sl_tool_tokenize_bench(int argc, char **argv);         /* tools/tokenize.c: bench tokenizer */
int sl_tool_eval(int argc, char **argv);                   /* tools/eval_cmd.c (argv[1] = "eval") */
int sl_tool_generate(int argc, char **argv);               /* tools/generate_cmd.c */
int sl_under_launcher(void);                               /* tools/main.c: started by mpirun / Slurm */
int sl_supervise(int argc, char **argv, int max_restarts); /* tools/supervise.c */
int sl_tool_bench_moe(int argc, char **argv);              /* tools/bench_moe.c: bench moe */
int sl_bench_gpu_main(int argc, char **argv);              /* tools/bench_gpu.c: bench gpu */

/* tools/bench.c, shared by the bench files: this executable's path; a
 * dataset of 64 random documents of 4096 tokens below vocab at prefix; the
 * mean of a metrics.jsonl key over the lines after the first skip (n_out:
 * how many had it); dir (made if absent)/config.json opened for writing;
 * dir/config.json of an untied Llama of those sizes (0 or -1). */
const char *sl_bench_self_exe(void);
FILE *sl_bench_config_file(const char *dir);
int sl_bench_write_data(const char *prefix, int vocab);
double sl_bench_metric_mean(const char *path, const char *key, int skip, int *n_out);
int sl_bench_write_llama(const char *dir, int hidden, int inter, int heads, int kv_heads, int layers, int vocab);

#endif
