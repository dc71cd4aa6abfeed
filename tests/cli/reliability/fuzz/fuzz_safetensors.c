/* tests/cli/reliability/fuzz/fuzz_safetensors.c — libFuzzer target: sl_st_parse on arbitrary
 * bytes; for accepted files, converts the first elements of small tensors. */
#include <stdint.h>
#include <stdlib.h>

#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl_st_file *f = NULL;
  if (sl_st_parse("fuzz.safetensors", data, size, &f) != 0) return 0;
  float buf[64];
  for (int64_t i = 0; i < sl_st_file_count(f); i++) {
    const sl_st_tensor *t = sl_st_file_tensor(f, i);
    int64_t n = t->numel < 64 ? t->numel : 64;
    sl_st_tensor_to_f32(t, 0, n, buf);
    sl_st_file_find(f, t->name);
  }
  sl_st_close_file(f);
  return 0;
}
