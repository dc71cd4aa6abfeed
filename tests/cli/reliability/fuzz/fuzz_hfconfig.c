/* tests/cli/reliability/fuzz/fuzz_hfconfig.c — libFuzzer target: sl_hfconfig_parse. */
#include <stdint.h>

#include "formats/hfconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl_model_config c;
  sl_hfconfig_parse("fuzz/config.json", (const char *)data, size, &c);
  return 0;
}
