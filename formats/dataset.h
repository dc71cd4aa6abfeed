/* formats/dataset.h — Megatron indexed datasets (PREFIX.idx + PREFIX.bin):
 * a validating memory-mapped reader exposing the single token stream of the
 * parity contract, an atomic builder, and `prepare` (the byte-level
 * tokenizer: bytes 0..255, end-of-document 256, uint16). Layout:
 * docs/formats.md.
 */
#ifndef SL_DATASET_H
#define SL_DATASET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Megatron dtype codes. Integer codes 1,2,3,4,5,8 are accepted; 6, 7 (floats)
 * are refused. */
enum {
  SL_IDX_UINT8 = 1,
  SL_IDX_INT8 = 2,
  SL_IDX_INT16 = 3,
  SL_IDX_INT32 = 4,
  SL_IDX_INT64 = 5,
  SL_IDX_FLOAT64 = 6,
  SL_IDX_FLOAT32 = 7,
  SL_IDX_UINT16 = 8,
};

#define SL_BYTE_EOD 256       /* end-of-document token of the byte tokenizer */
#define SL_BYTE_VOCAB 257     /* smallest vocab_size a model trained on it needs */
#define SL_BYTE_VOCAB_MAX 512 /* largest vocab_size taken for a byte-level model without a tokenizer (padding) */

/* A parsed .idx image; the three arrays point into the caller's buffer
 * (unaligned: read them with memcpy). */
typedef struct {
  int dtype;               /* SL_IDX_* */
  int elem_size;           /* bytes per token in .bin */
  int64_t num_seqs;        /* S */
  int64_t num_doc_idx;     /* D = documents + 1 */
  const uint8_t *sizes;    /* int32[S] tokens per sequence */
  const uint8_t *pointers; /* int64[S] byte offset of each sequence in .bin */
  const uint8_t *doc_idx;  /* int64[D] 0 = doc_idx[0] <= ... <= doc_idx[D-1] = S */
  int64_t total_tokens;    /* sum of sizes */
} sl_idx_info;

/* Parses and validates a whole .idx image (len bytes) against a .bin of
 * bin_bytes bytes. path_for_msgs is used in messages. Fuzzing entry point. */
int sl_idx_parse(const char *path_for_msgs, const uint8_t *buf, size_t len, int64_t bin_bytes, sl_idx_info *out);

/* ---- reader ------------------------------------------------------------------ */
typedef struct sl_dataset sl_dataset;

/* Opens and validates PREFIX.idx and PREFIX.bin (both memory-mapped). */
int sl_dataset_open(const char *prefix, sl_dataset **out);
void sl_dataset_close(sl_dataset *ds);
int64_t sl_dataset_num_seqs(const sl_dataset *ds);
int64_t sl_dataset_num_docs(const sl_dataset *ds);
int64_t sl_dataset_num_tokens(const sl_dataset *ds); /* length of the stream */
int sl_dataset_dtype(const sl_dataset *ds);          /* SL_IDX_* */
/* Tokens of sequence i: *n tokens converted into dst (NULL to query *n). */
int sl_dataset_sequence(const sl_dataset *ds, int64_t i, int32_t *dst, int64_t *n);

/* Reads n tokens of the stream formed by all sequences concatenated in index
 * order, from stream position start (>= 0, taken modulo the stream length),
 * wrapping around at the end. O(log S + n). Sample j of length T is
 * sl_dataset_tokens(ds, j*T, T+1, dst). */
int sl_dataset_tokens(const sl_dataset *ds, int64_t start, int64_t n, int32_t *dst);

/* Tokens of the stream before document d (0..num_docs; num_docs: all). */
int64_t sl_dataset_doc_offset(const sl_dataset *ds, int64_t d);
/* The documents of the stream window [start, start + n) (positions as
 * sl_dataset_tokens: modulo the stream, inside a range): first[i] = 1 where
 * the token at start + i begins a document of the index's document list
 * (doc_idx), or is the stream's position 0 (the first token of the range,
 * which also follows the wrap); else 0. O(documents in the window x log). */
int sl_dataset_doc_starts(const sl_dataset *ds, int64_t start, int64_t n, uint8_t *first);
/* Occurrences of token id inside documents: anywhere but as a document's
 * last token (the whole dataset, whatever the range). O(tokens). */
int sl_dataset_count_inside(const sl_dataset *ds, int64_t id, int64_t *count);
/* Restricts the stream to tokens [lo, hi) of the whole stream (a --split
 * range): sl_dataset_num_tokens and sl_dataset_tokens (position 0 = lo,
 * wrapping inside the range) see only that part. */
int sl_dataset_set_range(sl_dataset *ds, int64_t lo, int64_t hi);

/* Checks every token is in [0, vocab); the message names the .bin file, the
 * stream position, the sequence and the value. */
int sl_dataset_check_vocab(const sl_dataset *ds, int64_t vocab);

/* ---- writer ------------------------------------------------------------------ */
typedef struct sl_dataset_builder sl_dataset_builder;

/* Starts PREFIX.bin / PREFIX.idx (written under temporary names). */
int sl_dataset_builder_create(const char *prefix, int dtype, sl_dataset_builder **out);
/* Appends tokens to the current document (each must fit the dtype). */
int sl_dataset_builder_add_tokens(sl_dataset_builder *b, const int32_t *tokens, int64_t n);
/* Closes the current document (one sequence, one document). */
int sl_dataset_builder_end_document(sl_dataset_builder *b);
/* add_tokens + end_document. */
int sl_dataset_builder_add_document(sl_dataset_builder *b, const int32_t *tokens, int64_t n);
/* Writes the index, fsyncs and renames both files into place; frees b. */
int sl_dataset_builder_finish(sl_dataset_builder *b);
/* Discards the temporary files; frees b. */
void sl_dataset_builder_abort(sl_dataset_builder *b);

/* ---- prepare: byte-level tokenizer --------------------------------------------- */
typedef struct {
  int64_t documents;
  int64_t tokens; /* including one end-of-document token per document */
} sl_prepare_stats;

/* Documents are separated by one or more blank lines (empty, or just "\r");
 * a document is its lines' bytes verbatim, joined by their "\n", without the
 * last line's "\n"; each is followed by token 256. Writes uint16 (code 8). */
int sl_prepare_text(const char *input_path, const char *out_prefix, sl_prepare_stats *st);
/* The same on text[0..len); name_for_msgs names the source in messages. */
int sl_prepare_text_mem(const char *name_for_msgs, const char *text, size_t len, const char *out_prefix,
                        sl_prepare_stats *st);

#ifdef __cplusplus
}
#endif
#endif /* SL_DATASET_H */
