/* data/prepare.h — `shardlm prepare`: corpora (.jsonl, .jsonl.gz,
 * .jsonl.zst, .txt, any of them compressed) through a tokenizer (Hugging
 * Face tokenizer.json, or the built-in byte-level one) into a Megatron
 * indexed dataset PREFIX.bin/.idx, plus a loss mask PREFIX.lmask for
 * fine-tuning formats. Streaming with bounded memory: one reader thread,
 * N tokenizing workers, output written in input order. Layout of the files:
 * docs/formats.md.
 */
#ifndef SL_PREPARE_H
#define SL_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SL_PREP_TEXT = 0,          /* one document per JSON row (--json-key) or per .txt document */
  SL_PREP_PROMPT_COMPLETION, /* {"prompt": P, "completion": C}: only C (and EOD) count in the loss */
  SL_PREP_MESSAGES,          /* {"messages": [{"role", "content"}...]}: assistant turns count */
} sl_prep_format;

typedef enum {
  SL_DOCS_BLANK = 0, /* .txt: documents separated by blank lines (a file without any is one) */
  SL_DOCS_LINES,     /* .txt: every non-empty line is a document */
  SL_DOCS_FILE,      /* .txt: the whole file is one document */
} sl_prep_docs;

typedef struct {
  const char *const *inputs; /* (ninputs) paths; kind by suffix: .jsonl[.gz|.zst] / .json[.gz|.zst] rows, else text */
  int ninputs;
  const char *mem_text; /* instead of inputs: one in-memory .txt (the built-in corpus) */
  int64_t mem_len;
  const char *mem_name;
  const char *output;    /* PREFIX */
  const char *tokenizer; /* tokenizer.json or its directory; NULL: byte-level */
  const char *json_key;  /* NULL: "text" */
  sl_prep_format format;
  sl_prep_docs docs;
  int append_eod;            /* <0: default (byte-level: on, tokenizer: off) */
  int prepend_bos;           /* add the tokenizer's BOS at the start of every document */
  int skip_bad;              /* count and skip bad rows instead of stopping */
  int workers;               /* tokenizing threads (<= 0: online CPUs) */
  const char *chat_template; /* SL_PREP_MESSAGES: a preset name or a per-message "...{role}...{content}..." */
  const char *const *chat_roles; /* "FROM=TO" role names for the template (nchat_roles) */
  int nchat_roles;
  int progress;              /* redraw a progress line on stderr */
  int strict;                /* refuse a document with a character the tokenizer drops (no vocabulary entry) */
} sl_prep_cfg;

typedef struct {
  int64_t documents;
  int64_t tokens;        /* written, EOD / BOS included */
  int64_t loss_tokens;   /* tokens whose mask byte is 1 (= tokens without a mask file) */
  int64_t skipped;       /* bad rows skipped (--skip-bad) */
  int64_t bytes_in;      /* input bytes read (compressed size for compressed inputs) */
  int64_t vocab;         /* the tokenizer's vocabulary size */
  int32_t eos, bos;      /* its end / beginning-of-sequence ids (-1: none) */
  int dtype;             /* SL_IDX_UINT16 or SL_IDX_INT32 (Megatron's rule) */
  int has_mask;          /* PREFIX.lmask was written */
  int64_t dropped;       /* characters without a vocabulary entry, dropped (BPE without byte fallback / unk) */
  int64_t dropped_docs;  /* documents that lost such characters */
  const char *drop_file; /* the first of them: file, line, character (UTF-8) */
  int64_t drop_line;
  char drop_char[8];
  double seconds;
} sl_prep_stats;

/* Runs the whole job; on failure no output file is left at PREFIX.*. */
int sl_prepare(const sl_prep_cfg *cfg, sl_prep_stats *st);

/* Checks s[0..n) is UTF-8; on failure *bad is the byte offset of the first
 * invalid sequence. */
int sl_utf8_valid(const char *s, size_t n, size_t *bad);

#ifdef __cplusplus
}
#endif
#endif /* SL_PREPARE_H */
