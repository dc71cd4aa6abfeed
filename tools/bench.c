/* tools/bench.c — shardlm bench: measured figures, never asserted. */
#include <stdio.h>
#include <string.h>

#include "tools/tools.h"

int sl_bench_offload_main(int argc, char **argv) __attribute__((weak)); /* tools/bench_offload.c */

int sl_tool_bench(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: shardlm bench adam|nvme [flags]\n");
    return 2;
  }
  if (!strcmp(argv[1], "adam") || !strcmp(argv[1], "nvme")) {
    if (!sl_bench_offload_main) {
      fprintf(stderr, "shardlm bench %s: not built\n", argv[1]);
      return 2;
    }
    return sl_bench_offload_main(argc - 1, argv + 1);
  }
  fprintf(stderr, "shardlm bench: unknown benchmark '%s'\n", argv[1]);
  return 2;
}
