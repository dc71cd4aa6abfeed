/* tests/cli/reliability/fuzz/fuzz_manifest.c — libFuzzer target: the checkpoint manifest
 * parser; an accepted manifest must serialize and parse again to the same
 * layout (round-trip property). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/ckpt_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl_ckio_manifest m, m2;
  if (sl_ckio_manifest_parse("fuzz/manifest.json", (const char *)data, size, &m) != 0) return 0;
  char *text = NULL;
  if (sl_ckio_manifest_dump(&m, &text) != 0) abort();
  if (sl_ckio_manifest_parse("roundtrip", text, strlen(text), &m2) != 0) abort();
  if (m2.nunits != m.nunits || m2.nfiles != m.nfiles || m2.step != m.step || m2.seed != m.seed) abort();
  for (int i = 0; i < m.nfiles; i++)
    if (m2.files[i].npieces != m.files[i].npieces || m2.files[i].bytes != m.files[i].bytes) abort();
  free(text);
  sl_ckio_manifest_free(&m);
  sl_ckio_manifest_free(&m2);
  return 0;
}
