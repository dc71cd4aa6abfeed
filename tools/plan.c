/* tools/plan.c — shardlm plan (placeholder until the planner lands). */
#include <stdio.h>

#include "tools/tools.h"

int sl_tool_plan(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "shardlm plan: not implemented in this build\n");
  return 2;
}
