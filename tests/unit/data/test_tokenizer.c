/* tests/unit/data/test_tokenizer.c — the tokenizer API (data/tokenizer.h) without
 * the HF oracle: the built-in byte-level tokenizer (ids are the input bytes,
 * EOD 256 decodes to nothing), encoding from 4 threads at once giving the
 * ids of one thread (the per-thread caches and shared regexes), and bad
 * text. The HF tokenizers comparison is tests/cli/tokenizer/test_tokenizer_hf.sh.
 * Prints one line per check, then "N passed, M failed". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "data/tokenizer.h"

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
  check(rc == SL_OK && len == 5 && !memcmp(s, "ab\xe2\x82\xac", 6),
        "bytes decode: EOD decodes to nothing, NUL-terminated");
  free(s);
  const int32_t bad[] = {'a', 257};
  rc = sl_tokenizer_decode(t, bad, 2, &s, &len);
  check(rc == SL_EINPUT && strstr(sl_errmsg(), "257"), "bytes decode: id 257 refused");
  rc = sl_tokenizer_encode(t, "", 0, &ids, &n);
  check(rc == SL_OK && n == 0, "bytes encode: empty text");
  free(ids);
  sl_tokenizer_free(t);
}

enum { NDOC = 64, NTHREAD = 4 };
static const sl_tokenizer *g_tok;
static char *g_doc[NDOC];
static int32_t *g_ids[NDOC];
static int64_t g_n[NDOC];

static void *worker(void *arg) {
  intptr_t bad = 0;
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < NDOC; i++) {
      int k = (i + (int)(intptr_t)arg * 7) % NDOC;
      int32_t *ids = NULL;
      int64_t n = 0;
      if (sl_tokenizer_encode(g_tok, g_doc[k], strlen(g_doc[k]), &ids, &n) || n != g_n[k] ||
          memcmp(ids, g_ids[k], (size_t)n * sizeof *ids))
        bad++;
      free(ids);
    }
  return (void *)bad;
}

/* Documents: lines of the oracle test's corpus (JSON strings, read raw). */
static void test_threads(const char *src) {
  char p[1024];
  snprintf(p, sizeof p, "%s/tests/fixtures/tokenizer/synth_c.json", src);
  sl_tokenizer *t = NULL;
  if (sl_tokenizer_load(p, &t)) {
    check(0, "load synth_c.json");
    return;
  }
  snprintf(p, sizeof p, "%s/tests/fixtures/tokenizer/random_corpus.jsonl", src);
  FILE *f = fopen(p, "r");
  char line[8192];
  int nd = 0;
  while (f && nd < NDOC && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    g_doc[nd++] = strdup(line);
  }
  if (f) fclose(f);
  check(nd == NDOC, "64 documents read");
  if (nd != NDOC) {
    sl_tokenizer_free(t);
    return;
  }
  /* references from a fresh thread-local cache: another tokenizer first */
  g_tok = t;
  int ok = 1;
  for (int i = 0; i < NDOC; i++) ok &= sl_tokenizer_encode(t, g_doc[i], strlen(g_doc[i]), &g_ids[i], &g_n[i]) == SL_OK;
  check(ok, "single-thread encode of 64 documents");
  pthread_t th[NTHREAD];
  for (intptr_t i = 0; i < NTHREAD; i++) pthread_create(&th[i], NULL, worker, (void *)i);
  intptr_t bad = 0;
  for (int i = 0; i < NTHREAD; i++) {
    void *r;
    pthread_join(th[i], &r);
    bad += (intptr_t)r;
  }
  check(bad == 0, "4 threads x 3 passes: the single-thread ids every time");
  /* a second tokenizer in the same thread: its own cache */
  sl_tokenizer *b = NULL;
  sl_tokenizer_bytes(&b);
  int32_t *ids = NULL;
  int64_t n = 0;
  sl_tokenizer_encode(b, g_doc[0], strlen(g_doc[0]), &ids, &n);
  check(n == (int64_t)strlen(g_doc[0]), "bytes tokenizer in the same thread unaffected");
  free(ids);
  sl_tokenizer_encode(t, g_doc[1], strlen(g_doc[1]), &ids, &n);
  check(n == g_n[1] && !memcmp(ids, g_ids[1], (size_t)n * 4), "then the HF tokenizer again: same ids");
  free(ids);
  int rc = sl_tokenizer_encode(t, "ab\xc3(", 4, &ids, &n);
  check(rc == SL_EINPUT && strstr(sl_errmsg(), "UTF-8 at byte 2"), "invalid UTF-8 -> SL_EINPUT naming the byte");
  sl_tokenizer_free(b);
  for (int i = 0; i < NDOC; i++) {
    free(g_doc[i]);
    free(g_ids[i]);
  }
  sl_tokenizer_free(t);
}

int main(void) {
  test_bytes();
  const char *src = getenv("SL_SRC");
  test_threads(src ? src : ".");
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
