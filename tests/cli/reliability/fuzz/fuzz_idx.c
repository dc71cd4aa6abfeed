/* tests/cli/reliability/fuzz/fuzz_idx.c — libFuzzer target: sl_idx_parse. The first 8 bytes
 * of the input are the .bin size it is validated against, the rest the .idx. */
#include <stdint.h>
#include <string.h>

#include "formats/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8) return 0;
  int64_t bin;
  memcpy(&bin, data, 8);
  sl_idx_info info;
  if (sl_idx_parse("fuzz.idx", data + 8, size - 8, bin, &info) == 0 && info.num_seqs > 0) {
    int32_t s;
    int64_t p, d;
    memcpy(&s, info.sizes + 4 * (info.num_seqs - 1), 4);
    memcpy(&p, info.pointers + 8 * (info.num_seqs - 1), 8);
    memcpy(&d, info.doc_idx + 8 * (info.num_doc_idx - 1), 8);
    (void)s;
    (void)p;
    (void)d;
  }
  return 0;
}
