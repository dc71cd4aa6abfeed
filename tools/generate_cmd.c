/* tools/generate_cmd.c — `shardlm generate` (being written). */
#include <stdio.h>
#include "tools/tools.h"
int sl_tool_generate(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "shardlm generate: not available in this build yet\n");
  return 2;
}
