/* engine/tokenizer.c — the public tokenizer API (engine/tokenizer.h): the
 * built-in byte-level tokenizer and the entry points of the Hugging Face
 * tokenizer.json one. */
#include "engine/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

enum { TOK_BYTES = 0, TOK_HF = 1 };

struct sl_tokenizer {
  int kind; /* TOK_BYTES | TOK_HF */
};

int sl_tokenizer_bytes(sl_tokenizer **out) {
  *out = NULL;
  sl_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  t->kind = TOK_BYTES;
  *out = t;
  return SL_OK;
}

int sl_tokenizer_load(const char *path, sl_tokenizer **out) {
  *out = NULL;
  return sl_fail(SL_EINPUT, "tokenizer %s: Hugging Face tokenizer.json is not implemented yet", path);
}

void sl_tokenizer_free(sl_tokenizer *t) { free(t); }

int sl_tokenizer_encode(const sl_tokenizer *t, const char *text, size_t len, int32_t **ids, int64_t *n) {
  *ids = NULL;
  *n = 0;
  int32_t *o = malloc((len ? len : 1) * sizeof *o);
  if (!o) return sl_fail(SL_ENOMEM, "tokenizer: out of memory for %zu ids", len);
  for (size_t i = 0; i < len; i++) o[i] = (unsigned char)text[i];
  *ids = o;
  *n = (int64_t)len;
  return SL_OK;
}

/* Byte-level decode: ids 0..255 are bytes; the end-of-document id 256
 * decodes to nothing; any other id is bad input. */
int sl_tokenizer_decode(const sl_tokenizer *t, const int32_t *ids, int64_t n, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  char *o = malloc((size_t)n + 1);
  if (!o) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  size_t k = 0;
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] > 256) {
      free(o);
      return sl_fail(SL_EINPUT, "tokenizer: id %d at position %lld is outside the byte-level vocabulary 0..256",
                     ids[i], (long long)i);
    }
    if (ids[i] < 256) o[k++] = (char)ids[i];
  }
  o[k] = 0;
  *text = o;
  *len = k;
  return SL_OK;
}

int64_t sl_tokenizer_vocab_size(const sl_tokenizer *t) { return 257; }
int32_t sl_tokenizer_eos_id(const sl_tokenizer *t) { return 256; }
int32_t sl_tokenizer_bos_id(const sl_tokenizer *t) { return -1; }
