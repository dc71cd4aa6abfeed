/* tools/convert.c — shardlm convert (placeholder until checkpoints land). */
#include <stdio.h>

#include "tools/tools.h"

int sl_tool_convert(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "shardlm convert: not implemented in this build\n");
  return 2;
}
