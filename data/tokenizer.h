/* data/tokenizer.h — text <-> token ids. Two kinds behind one handle:
 * the built-in byte-level tokenizer of `shardlm prepare` (bytes 0..255,
 * end-of-document 256, vocabulary 257) and Hugging Face `tokenizer.json`
 * files (normalizers, pre-tokenizers, BPE model, added tokens, decoders),
 * id for id with HF tokenizers' encode(text, add_special_tokens=False).
 * What is supported and refused: docs/formats.md, "Tokenizers".
 * A loaded tokenizer is read-only: encode/decode may run on many threads. */
#ifndef SL_TOKENIZER_H
#define SL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_tokenizer sl_tokenizer;
/* path: a directory holding tokenizer.json (+ tokenizer_config.json) or a tokenizer.json file. */
int sl_tokenizer_load(const char *path, sl_tokenizer **out);
/* The built-in byte-level tokenizer of `shardlm prepare` (bytes 0..255, EOD 256). */
int sl_tokenizer_bytes(sl_tokenizer **out);
void sl_tokenizer_free(sl_tokenizer *t);
/* HF encode(text, add_special_tokens=False). *ids is malloc'd (caller frees). */
int sl_tokenizer_encode(const sl_tokenizer *t, const char *text, size_t len, int32_t **ids, int64_t *n);
/* Characters the last sl_tokenizer_encode on this thread dropped because
 * the vocabulary has no entry for them and the BPE model neither byte
 * fallback nor an unk token (HF tokenizers drops them too); first: the first
 * of them, UTF-8, NUL-terminated. */
int64_t sl_tokenizer_dropped(char first[8]);
/* HF decode(ids, skip_special_tokens=False). *text is malloc'd, NUL-terminated. */
int sl_tokenizer_decode(const sl_tokenizer *t, const int32_t *ids, int64_t n, char **text, size_t *len);
int64_t sl_tokenizer_vocab_size(const sl_tokenizer *t); /* highest id + 1, added tokens included */
int32_t sl_tokenizer_eos_id(const sl_tokenizer *t);     /* -1 when none */
int32_t sl_tokenizer_bos_id(const sl_tokenizer *t);     /* -1 when none */

#endif
