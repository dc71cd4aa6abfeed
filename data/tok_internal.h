/* data/tok_internal.h — what the tokenizer files share: growable byte
 * buffers, string -> id hash maps, the list of text splits the pipeline
 * works on, the pipeline steps (normalizers, pre-tokenizers, decoders),
 * the BPE model and the tokenizer struct itself. Not a public header. */
#ifndef SL_TOK_INTERNAL_H
#define SL_TOK_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"

/* ---- growable bytes ---- */
typedef struct {
  char *p;
  size_t n, cap;
} tok_buf;
int tb_reserve(tok_buf *b, size_t extra); /* SL_ENOMEM on failure */
int tb_put(tok_buf *b, const void *s, size_t n);
void tb_free(tok_buf *b);

/* ---- UTF-8 ---- */
/* Decodes one code point at s (n bytes left, valid UTF-8); *len its bytes. */
int32_t tok_u8dec(const char *s, size_t n, int *len);
int tok_u8enc(int32_t cp, char *out); /* bytes written (1..4) */
/* Offset of the first invalid byte, or (size_t)-1 when s is valid UTF-8. */
size_t tok_u8invalid(const char *s, size_t n);
int tok_is_ws(int32_t cp);      /* Unicode White_Space (Rust char::is_whitespace) */
int tok_is_word(int32_t cp);    /* Rust regex \w (HF single_word's word characters) */
int tok_is_numeric(int32_t cp); /* Rust char::is_numeric: Nd, Nl, No */

/* ---- string -> int32 map (open addressing, keys copied) ---- */
typedef struct {
  uint64_t h;   /* hash, 0 = empty slot */
  uint32_t off; /* key offset in keys */
  uint32_t len; /* key bytes */
  int32_t val;
} tok_slot;
typedef struct {
  tok_slot *s; /* [cap], one cache line holds four */
  size_t cap, n;
  tok_buf keys;
} tok_smap;
uint64_t tok_hash(const char *s, size_t n);
int tok_smap_put(tok_smap *m, const char *k, size_t n, int32_t v); /* overwrites */
/* Value of key k or -1. */
int32_t tok_smap_get(const tok_smap *m, const char *k, size_t n);
int32_t tok_smap_geth(const tok_smap *m, const char *k, size_t n, uint64_t h);
void tok_smap_free(tok_smap *m);

/* ---- pieces: the text after pre-tokenization (HF calls them "splits"), each a slice of an arena ---- */
typedef struct {
  uint32_t off, len; /* bytes in the arena */
  int32_t id;        /* >= 0: an added token already decided; -1: text */
  uint8_t origin;    /* starts at offset 0 of the original text */
} tok_piece;
typedef struct {
  tok_buf arena;
  tok_piece *v;
  size_t n, cap;
} tok_pieces;
int tok_push(tok_pieces *s, uint32_t off, uint32_t len, int32_t id, int origin);
/* Appends text to the arena; *off is where it went. */
int tok_arena_put(tok_pieces *s, const char *p, size_t n, uint32_t *off);
void tok_pieces_free(tok_pieces *s);

/* ---- pipeline steps ---- */
enum {
  /* normalizers */
  TN_SEQ = 1,
  TN_NFC,
  TN_NFD,
  TN_NFKC,
  TN_NFKD,
  TN_LOWER,
  TN_STRIP,
  TN_REPLACE,
  TN_PREPEND,
  TN_STRIPACC,
  /* pre-tokenizers */
  TP_SEQ,
  TP_BYTELEVEL,
  TP_SPLIT,
  TP_METASPACE,
  TP_DIGITS,
  TP_WSSPLIT,
  TP_WHITESPACE,
  TP_PUNCT,
  TP_CHARDELIM,
  /* decoders */
  TD_SEQ,
  TD_BYTELEVEL,
  TD_METASPACE,
  TD_BYTEFALLBACK,
  TD_FUSE,
  TD_STRIP,
  TD_REPLACE,
  TD_BPE,
};
/* split behaviours (HF SplitDelimiterBehavior) */
enum { TB_REMOVED, TB_ISOLATED, TB_MERGED_PREV, TB_MERGED_NEXT, TB_CONTIGUOUS };
enum { TM_ALWAYS, TM_FIRST, TM_NEVER }; /* Metaspace prepend_scheme */

typedef struct tok_step {
  int type;
  struct tok_step **kids; /* Sequence members */
  int nkids;
  char *pat; /* literal pattern / prepend text / replacement (UTF-8) */
  size_t patlen;
  char *content; /* Replace content */
  size_t contentlen;
  void *re;   /* OnigRegex when the pattern is a regex */
  int32_t ch; /* a single code point (Metaspace replacement, Strip content) */
  /* Strip: a left, b right; ByteLevel: a add_prefix_space, b use_regex;
   * Split: a behaviour (TB_*), b invert; Metaspace: a prepend scheme (TM_*),
   * b split; Digits: a individual_digits; Punctuation: a behaviour;
   * Strip decoder: a start, b stop (characters) */
  int a, b;
} tok_step;

/* Parses one normalizer / pre_tokenizer / decoder object (NULL/null -> *out NULL).
 * what names the field for messages. */
int tok_parse_step(json_t *j, int kind, const char *what, tok_step **out);
enum { TK_NORM, TK_PRE, TK_DEC };
void tok_step_free(tok_step *s);
/* Normalizes s[0..n) into out (cleared first). *moved is set when leading
 * characters were removed, so that the result no longer starts at the
 * original offset of s (HF's offsets_original, which Metaspace "first" reads). */
int tok_normalize(const tok_step *st, const char *s, size_t n, tok_buf *out, int *moved);
/* Pre-tokenizes every text split (id < 0) of sp in place. */
int tok_pretokenize(const tok_step *st, tok_pieces *sp);
/* Runs a decoder over the token strings of sp (each split one token). */
int tok_decode_chain(const tok_step *st, tok_pieces *sp);
/* Byte <-> the printable code point ByteLevel uses. */
extern int32_t tok_byte2cp[256];
int tok_cp2byte(int32_t cp); /* -1 when cp is no byte's image */
void tok_bytelevel_init(void);
/* Oniguruma and the ByteLevel byte <-> code point tables, once per process
 * (at every load: a tokenizer without any regex still needs the tables). */
void tok_tables_init(void);
/* Compiles an Oniguruma regex (UTF-8); SL_EINPUT naming what on error. */
int tok_regex(const char *pat, size_t n, const char *what, void **out);
void tok_regex_free(void *re);
/* Finds the (start,end,is_match) segments of a regex / literal in s. */

/* ---- BPE model ---- */
typedef struct {
  tok_smap vocab;  /* token string -> id */
  uint64_t *mkey;  /* [mcap] (a << 32 | b) + 1, 0 = empty */
  uint32_t *mrank; /* [mcap] */
  int32_t *mnew;   /* [mcap] merged id */
  size_t mcap, nmerges;
  int32_t unk; /* -1 none */
  int byte_fallback, fuse_unk, ignore_merges;
  char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix (NULL none) */
  int32_t bytetok[256];  /* <0xNN> ids (byte_fallback), -1 missing */
  int32_t maxid;
} tok_bpe;
int tok_bpe_load(json_t *model, const char *file, tok_bpe *m);
void tok_bpe_free(tok_bpe *m);
/* Appends the ids of one pre-token; cache is the caller's thread's. */
int tok_bpe_word(const tok_bpe *m, uint64_t serial, const char *s, size_t n, int32_t **ids, int64_t *nids,
                 int64_t *cap);

void tok_drop_reset(void);
int64_t tok_dropped(char first[8]);

/* ---- the tokenizer ---- */
typedef struct {
  char *content;
  size_t len;
  char *norm; /* content after the normalizer (normalized tokens) */
  size_t normlen;
  int32_t id;
  uint8_t single_word, lstrip, rstrip, normalized, special;
} tok_added;

struct sl_tokenizer {
  int kind;        /* TOK_BYTES | TOK_HF */
  uint64_t serial; /* distinct per load: tags thread caches */
  tok_step *norm, *pre, *dec;
  tok_bpe bpe;
  tok_added *added;
  int nadded;
  /* added tokens by first byte, longest first: for the raw [0] and the
   * normalized [1] pass, addidx[k][addstart[k][b] .. addstart[k][b+1]) */
  int *addidx[2];
  int addstart[2][257];
  int64_t vocab_size;
  int32_t eos, bos;
  /* id -> token string for decode */
  uint32_t *tokoff, *toklen; /* [vocab_size]; toklen UINT32_MAX = no token */
  tok_buf tokstr;
};
enum { TOK_BYTES = 0, TOK_HF = 1 };

#endif
