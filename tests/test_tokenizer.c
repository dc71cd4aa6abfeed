/* tests/test_tokenizer.c — the tokenizer API (engine/tokenizer.h) without
 * any oracle: the built-in byte-level tokenizer (ids are the input bytes,
 * EOD 256 decodes to nothing) and load refusals of bad files. The HF
 * tokenizers oracle comparison is tests/test_tokenizer_hf.sh.
 * Prints one line per check, then "N passed, M failed". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/tokenizer.h"

static int g_pass, g_fail;

static void check(int ok, const char *what) {
  if (ok) g_pass++;
  else g_fail++;
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) printf("     last message: %s\n", sl_errmsg());
}

static void test_bytes(void) {
  sl_tokenizer *t = NULL;
  check(sl_tokenizer_bytes(&t) == SL_OK && t, "bytes tokenizer created");
  if (!t) return;
  check(sl_tokenizer_vocab_size(t) == 257, "bytes vocab 257");
  check(sl_tokenizer_eos_id(t) == 256, "bytes eos 256");
  check(sl_tokenizer_bos_id(t) == -1, "bytes no bos");
  const char text[] = "h\xc3\xa9\x00\xff!";
  int32_t *ids = NULL;
  int64_t n = 0;
  int rc = sl_tokenizer_encode(t, text, 6, &ids, &n);
  const int32_t want[] = {'h', 0xc3, 0xa9, 0, 0xff, '!'};
  check(rc == SL_OK && n == 6 && !memcmp(ids, want, sizeof want), "bytes encode: each byte is its value");
  free(ids);
  const int32_t dec[] = {'a', 256, 'b', 0xe2, 0x82, 0xac};
  char *s = NULL;
  size_t len = 0;
  rc = sl_tokenizer_decode(t, dec, 6, &s, &len);
  check(rc == SL_OK && len == 5 && !memcmp(s, "ab\xe2\x82\xac", 6), "bytes decode: EOD decodes to nothing, NUL-terminated");
  free(s);
  const int32_t bad[] = {'a', 257};
  rc = sl_tokenizer_decode(t, bad, 2, &s, &len);
  check(rc == SL_EINPUT && strstr(sl_errmsg(), "257"), "bytes decode: id 257 refused");
  rc = sl_tokenizer_encode(t, "", 0, &ids, &n);
  check(rc == SL_OK && n == 0, "bytes encode: empty text");
  free(ids);
  sl_tokenizer_free(t);
}

int main(void) {
  test_bytes();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
