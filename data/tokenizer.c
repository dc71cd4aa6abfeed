/* data/tokenizer.c — the public tokenizer API (data/tokenizer.h): the
 * built-in byte-level tokenizer, loading tokenizer.json (+ the special
 * tokens of tokenizer_config.json), the encode pipeline of HF tokenizers
 * (added tokens -> normalizer -> normalized added tokens -> pre-tokenizer
 * -> BPE) and decode (ids -> tokens -> decoder). Pipeline steps live in
 * tok_pipe.c / tok_dec.c, the model in tok_bpe.c. */
#define _GNU_SOURCE
#include "data/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "data/tok_internal.h"

static atomic_uint_fast64_t g_serial = 1;

int sl_tokenizer_bytes(sl_tokenizer **out) {
  *out = NULL;
  sl_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  t->kind = TOK_BYTES;
  t->vocab_size = 257;
  t->eos = 256;
  t->bos = -1;
  *out = t;
  return SL_OK;
}

void sl_tokenizer_free(sl_tokenizer *t) {
  if (!t) return;
  tok_step_free(t->norm);
  tok_step_free(t->pre);
  tok_step_free(t->dec);
  tok_bpe_free(&t->bpe);
  for (int i = 0; i < t->nadded; i++) {
    free(t->added[i].content);
    free(t->added[i].norm);
  }
  free(t->added);
  free(t->addidx[0]);
  free(t->addidx[1]);
  free(t->tokoff);
  free(t->toklen);
  tb_free(&t->tokstr);
  free(t);
}

int64_t sl_tokenizer_vocab_size(const sl_tokenizer *t) { return t->vocab_size; }
int32_t sl_tokenizer_eos_id(const sl_tokenizer *t) { return t->eos; }
int32_t sl_tokenizer_bos_id(const sl_tokenizer *t) { return t->bos; }

/* ---- loading ---- */

static int32_t added_id(const sl_tokenizer *t, const char *s) {
  for (int i = 0; i < t->nadded; i++)
    if (!strcmp(t->added[i].content, s)) return t->added[i].id;
  return -1;
}

static int32_t token_id(const sl_tokenizer *t, const char *s) {
  int32_t id = added_id(t, s);
  return id >= 0 ? id : tok_smap_get(&t->bpe.vocab, s, strlen(s));
}

/* eos_token / bos_token of tokenizer_config.json: a string or {"content": ...};
 * *set: the key is there (null says "none", as Qwen's "bos_token": null). */
static const char *config_token(json_t *cfg, const char *key, int *set) {
  json_t *v = json_object_get(cfg, key);
  *set = v != NULL;
  if (json_is_object(v)) v = json_object_get(v, "content");
  return json_string_value(v);
}

/* eos_token_id / bos_token_id of generation_config.json: an id or a list of
 * ids (the first is taken); -1 when absent or null. */
static int gen_token(const sl_tokenizer *t, json_t *gen, const char *file, const char *key, int32_t *id) {
  json_t *v = json_object_get(gen, key);
  if (json_is_array(v)) v = json_array_get(v, 0);
  *id = -1;
  if (!v || json_is_null(v)) return SL_OK;
  double d = json_is_number(v) ? json_number_value(v) : -1;
  if (d < 0 || d >= (double)t->vocab_size || d != (double)(int64_t)d)
    return sl_fail(SL_EINPUT, "%s: %s: expected a token id (or a list of them) below the vocabulary size %lld", file,
                   key, (long long)t->vocab_size);
  *id = (int32_t)d;
  return SL_OK;
}

/* The eos / bos ids, first found of: tokenizer_config.json's eos_token /
 * bos_token (null: none), generation_config.json's eos_token_id /
 * bos_token_id, the first added token named like an eos / bos. */
static int special_ids(sl_tokenizer *t, json_t *cfg, json_t *gen, const char *genfile) {
  static const char *const eos[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>", "<eos>", NULL};
  static const char *const bos[] = {"<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>", NULL};
  int eset, bset;
  const char *e = config_token(cfg, "eos_token", &eset), *b = config_token(cfg, "bos_token", &bset);
  t->eos = e ? token_id(t, e) : -1;
  t->bos = b ? token_id(t, b) : -1;
  if (!eset && gen_token(t, gen, genfile, "eos_token_id", &t->eos)) return SL_EINPUT;
  if (!bset && gen_token(t, gen, genfile, "bos_token_id", &t->bos)) return SL_EINPUT;
  for (int i = 0; !eset && t->eos < 0 && eos[i]; i++) t->eos = added_id(t, eos[i]);
  for (int i = 0; !bset && t->bos < 0 && bos[i]; i++) t->bos = added_id(t, bos[i]);
  return SL_OK;
}

/* The added tokens. Their ids are assigned as HF tokenizers does when it
 * loads the file (AddedVocabulary::add_tokens): a content already in the
 * model's vocabulary takes that id, a repeated content its first id, any
 * other the next id from the model's vocabulary size up; the "id" of the
 * file only draws a warning when it differs. */
static int added_one(sl_tokenizer *t, json_t *e, size_t i, const char *file, tok_smap *seen, int64_t next,
                     int64_t *maxadded);
static int load_added(sl_tokenizer *t, json_t *arr, const char *file) {
  if (!arr || json_is_null(arr)) return SL_OK;
  if (!json_is_array(arr)) return sl_fail(SL_EINPUT, "%s: added_tokens: expected an array", file);
  t->added = calloc(json_array_size(arr) + 1, sizeof *t->added);
  if (!t->added) return sl_fail(SL_ENOMEM, "%s: out of memory", file);
  int64_t next = (int64_t)t->bpe.vocab.n, maxadded = -1;
  tok_smap seen = {0}; /* content -> index in t->added */
  int rc = SL_OK;
  for (size_t i = 0; !rc && i < json_array_size(arr); i++)
    rc = added_one(t, json_array_get(arr, i), i, file, &seen, next, &maxadded);
  tok_smap_free(&seen);
  return rc;
}

/* One entry of added_tokens (see load_added). */
static int added_one(sl_tokenizer *t, json_t *e, size_t i, const char *file, tok_smap *seen, int64_t next,
                     int64_t *maxadded) {
  {
    json_t *c = json_object_get(e, "content"), *id = json_object_get(e, "id");
    if (!json_is_string(c) || !json_is_integer(id))
      return sl_fail(SL_EINPUT, "%s: added_tokens[%zu]: expected a string \"content\" and an integer \"id\"", file, i);
    if (!json_string_length(c)) return SL_OK; /* HF ignores empty tokens */
    int32_t k = tok_smap_get(seen, json_string_value(c), json_string_length(c));
    tok_added *a = k >= 0 ? &t->added[k] : NULL;
    int32_t want;
    if (a) want = a->id, free(a->content), free(a->norm), a->norm = NULL;
    else {
      if (tok_smap_put(seen, json_string_value(c), json_string_length(c), t->nadded)) return SL_ENOMEM;
      a = &t->added[t->nadded++];
      want = tok_smap_get(&t->bpe.vocab, json_string_value(c), json_string_length(c));
      if (want < 0) {
        if (*maxadded >= 0) want = (int32_t)(*maxadded >= next ? *maxadded + 1 : next);
        else want = (int32_t)next;
      }
    }
    if (want > *maxadded) *maxadded = want;
    if (json_integer_value(id) != want)
      sl_log(SL_LOG_WARN,
             "%s: added token '%s' has id %lld in the file; Hugging Face tokenizers gives it %d, as does shardlm", file,
             json_string_value(c), (long long)json_integer_value(id), want);
    a->len = json_string_length(c);
    a->content = malloc(a->len + 1);
    if (!a->content) return sl_fail(SL_ENOMEM, "%s: out of memory", file);
    memcpy(a->content, json_string_value(c), a->len + 1);
    a->id = want;
    a->single_word = json_is_true(json_object_get(e, "single_word"));
    a->lstrip = json_is_true(json_object_get(e, "lstrip"));
    a->rstrip = json_is_true(json_object_get(e, "rstrip"));
    a->special = json_is_true(json_object_get(e, "special"));
    json_t *nz = json_object_get(e, "normalized");
    a->normalized = json_is_boolean(nz) ? json_is_true(nz) : !a->special;
    if (a->normalized && t->norm) {
      tok_buf b = {0};
      int moved = 0;
      int rc = tok_normalize(t->norm, a->content, a->len, &b, &moved);
      if (rc) {
        tb_free(&b);
        return rc;
      }
      a->norm = b.p ? b.p : strdup("");
      a->normlen = b.n;
    }
  }
  return SL_OK;
}

static const sl_tokenizer *g_sort_t; /* qsort context (load is single-threaded per call) */
static int g_sort_k;
static int by_first_then_longest(const void *x, const void *y) {
  const tok_added *a = &g_sort_t->added[*(const int *)x], *b = &g_sort_t->added[*(const int *)y];
  const char *ca = g_sort_k && a->norm ? a->norm : a->content, *cb = g_sort_k && b->norm ? b->norm : b->content;
  size_t la = g_sort_k && a->norm ? a->normlen : a->len, lb = g_sort_k && b->norm ? b->normlen : b->len;
  if ((unsigned char)ca[0] != (unsigned char)cb[0]) return (unsigned char)ca[0] - (unsigned char)cb[0];
  if (la != lb) return la > lb ? -1 : 1;
  return *(const int *)x - *(const int *)y; /* equal: the first added wins */
}

static int index_added(sl_tokenizer *t) {
  for (int k = 0; k < 2; k++) {
    t->addidx[k] = malloc((size_t)(t->nadded + 1) * sizeof(int));
    if (!t->addidx[k]) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
    int n = 0;
    for (int i = 0; i < t->nadded; i++) {
      const tok_added *a = &t->added[i];
      if (a->normalized == k && (k && a->norm ? a->normlen : a->len) > 0) t->addidx[k][n++] = i;
    }
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    g_sort_t = t;
    g_sort_k = k;
    qsort(t->addidx[k], (size_t)n, sizeof(int), by_first_then_longest);
    pthread_mutex_unlock(&mu);
    int j = 0;
    for (int b = 0; b <= 256; b++) {
      while (j < n) {
        const tok_added *a = &t->added[t->addidx[k][j]];
        unsigned char c = (unsigned char)(k && a->norm ? a->norm : a->content)[0];
        if (c >= b) break;
        j++;
      }
      t->addstart[k][b] = j;
    }
    t->addstart[k][256] = n;
  }
  return SL_OK;
}

/* id -> token string, added tokens over the model's vocabulary */
static int build_id_table(sl_tokenizer *t, const char *file) {
  int64_t V = t->bpe.maxid + 1;
  for (int i = 0; i < t->nadded; i++)
    if (t->added[i].id + 1 > V) V = t->added[i].id + 1;
  t->vocab_size = V;
  t->tokoff = malloc((size_t)(V ? V : 1) * sizeof *t->tokoff);
  t->toklen = malloc((size_t)(V ? V : 1) * sizeof *t->toklen);
  if (!t->tokoff || !t->toklen) return sl_fail(SL_ENOMEM, "%s: out of memory for %lld ids", file, (long long)V);
  for (int64_t i = 0; i < V; i++) t->toklen[i] = UINT32_MAX;
  const tok_smap *m = &t->bpe.vocab;
  for (size_t j = 0; j < m->cap; j++)
    if (m->s[j].h) {
      t->tokoff[m->s[j].val] = m->s[j].off;
      t->toklen[m->s[j].val] = m->s[j].len;
    }
  if (tb_put(&t->tokstr, m->keys.p, m->keys.n)) return SL_ENOMEM;
  for (int i = 0; i < t->nadded; i++) {
    t->tokoff[t->added[i].id] = (uint32_t)t->tokstr.n;
    t->toklen[t->added[i].id] = (uint32_t)t->added[i].len;
    if (tb_put(&t->tokstr, t->added[i].content, t->added[i].len)) return SL_ENOMEM;
  }
  return SL_OK;
}

static int load_json(const char *file, size_t flags, json_t **out) {
  json_error_t err;
  *out = NULL;
  /* read whole, then parse: json_load_file reads a byte at a time */
  FILE *f = fopen(file, "rb");
  if (!f) return sl_fail(SL_EINPUT, "%s: cannot open", file);
  tok_buf b = {0};
  char chunk[1 << 16];
  size_t r;
  int rc = SL_OK;
  while (!rc && (r = fread(chunk, 1, sizeof chunk, f)) > 0) rc = tb_put(&b, chunk, r);
  int bad = ferror(f);
  fclose(f);
  if (!rc && bad) rc = sl_fail(SL_EIO, "%s: read error", file);
  if (!rc) *out = json_loadb(b.p ? b.p : "", b.n, flags, &err);
  tb_free(&b);
  if (rc) return rc;
  if (!*out)
    return sl_fail(SL_EINPUT, "%s: line %d: %s%s", file, err.line, err.text,
                   strstr(err.text, "duplicate") ? " (a JSON object with the same key twice is refused)" : "");
  if (!json_is_object(*out)) {
    json_decref(*out);
    *out = NULL;
    return sl_fail(SL_EINPUT, "%s: expected a JSON object", file);
  }
  return SL_OK;
}

int sl_tokenizer_load(const char *path, sl_tokenizer **out) {
  *out = NULL;
  tok_tables_init();
  struct stat st;
  if (stat(path, &st)) return sl_fail(SL_EINPUT, "tokenizer %s: no such file or directory", path);
  char file[4096], cfgfile[4096], genfile[4096];
  if (S_ISDIR(st.st_mode)) {
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
    snprintf(cfgfile, sizeof cfgfile, "%s/tokenizer_config.json", path);
    snprintf(genfile, sizeof genfile, "%s/generation_config.json", path);
    if (stat(file, &st)) {
      char spm[4096];
      snprintf(spm, sizeof spm, "%s/tokenizer.model", path);
      return sl_fail(SL_EINPUT, "tokenizer %s: the directory has no tokenizer.json%s", path,
                     stat(spm, &st) ? ""
                                    : " (only a SentencePiece tokenizer.model, which shardlm does not read: save the "
                                      "tokenizer with Hugging Face transformers to get tokenizer.json)");
    }
  } else {
    snprintf(file, sizeof file, "%s", path);
    const char *sl = strrchr(path, '/');
    snprintf(cfgfile, sizeof cfgfile, "%.*stokenizer_config.json", sl ? (int)(sl - path + 1) : 0, path);
    snprintf(genfile, sizeof genfile, "%.*sgeneration_config.json", sl ? (int)(sl - path + 1) : 0, path);
  }
  json_t *j = NULL, *cfg = NULL, *gen = NULL;
  sl_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  t->kind = TOK_HF;
  t->serial = atomic_fetch_add(&g_serial, 1);
  int rc = load_json(file, JSON_REJECT_DUPLICATES, &j);
  /* only strings are read from the config; model_max_length can be 1e30 */
  if (!rc && !stat(cfgfile, &st)) rc = load_json(cfgfile, JSON_DECODE_INT_AS_REAL, &cfg);
  if (!rc && !stat(genfile, &st)) rc = load_json(genfile, JSON_DECODE_INT_AS_REAL, &gen);
  json_t *model = rc ? NULL : json_object_get(j, "model");
  if (!rc && !json_is_object(model)) rc = sl_fail(SL_EINPUT, "%s: expected an object \"model\"", file);
  if (!rc) {
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type ? strcmp(type, "BPE") : !json_object_get(model, "merges"))
      rc = sl_fail(SL_EINPUT,
                   "%s: model type '%s' is not supported: shardlm implements BPE tokenizers only "
                   "(Unigram, WordPiece and WordLevel are refused; see docs/formats.md)",
                   file, type ? type : "?");
  }
  char what[4200];
  snprintf(what, sizeof what, "%s: normalizer", file);
  if (!rc) rc = tok_parse_step(json_object_get(j, "normalizer"), TK_NORM, what, &t->norm);
  snprintf(what, sizeof what, "%s: pre_tokenizer", file);
  if (!rc) rc = tok_parse_step(json_object_get(j, "pre_tokenizer"), TK_PRE, what, &t->pre);
  snprintf(what, sizeof what, "%s: decoder", file);
  if (!rc) rc = tok_parse_step(json_object_get(j, "decoder"), TK_DEC, what, &t->dec);
  if (!rc) rc = tok_bpe_load(model, file, &t->bpe);
  if (!rc) rc = load_added(t, json_object_get(j, "added_tokens"), file);
  if (!rc) rc = index_added(t);
  if (!rc) rc = build_id_table(t, file);
  if (!rc) rc = special_ids(t, cfg, gen, genfile);
  json_decref(j);
  json_decref(cfg);
  json_decref(gen);
  if (rc) sl_tokenizer_free(t);
  else *out = t;
  return rc;
}

/* ---- encode ---- */

static int is_word_before(const char *s, size_t at) {
  if (!at) return 0;
  size_t k = at - 1;
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  int l;
  return tok_is_word(tok_u8dec(s + k, at - k, &l));
}

/* HF AddedVocabulary::find_matches over the split x (leftmost-longest, then
 * single_word: no \w character on either side; lstrip / rstrip: the
 * whitespace run before / after joins the token); pushes the pieces to out. */
static int added_pieces(const sl_tokenizer *t, int normalized, tok_pieces *sp, tok_piece x, tok_piece **out,
                        size_t *nout, size_t *capout) {
#define EMIT(O, L, ID, OR)                                                                                             \
  do {                                                                                                                 \
    if (*nout == *capout) {                                                                                            \
      size_t c_ = *capout ? *capout * 2 : 64;                                                                          \
      tok_piece *v_ = realloc(*out, c_ * sizeof *v_);                                                                  \
      if (!v_) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");                                                  \
      *out = v_;                                                                                                       \
      *capout = c_;                                                                                                    \
    }                                                                                                                  \
    (*out)[(*nout)++] = (tok_piece){(O), (L), (ID), (uint8_t)(OR)};                                                    \
  } while (0)
  const char *s = sp->arena.p + x.off;
  size_t n = x.len, startoff = 0, i = 0;
  while (i < n) {
    int best = -1;
    size_t blen = 0;
    unsigned char b0 = (unsigned char)s[i];
    for (int j = t->addstart[normalized][b0]; j < t->addstart[normalized][b0 + 1]; j++) {
      const tok_added *a = &t->added[t->addidx[normalized][j]];
      const char *c = normalized && a->norm ? a->norm : a->content;
      size_t cl = normalized && a->norm ? a->normlen : a->len;
      if (i + cl <= n && !memcmp(c, s + i, cl)) {
        best = t->addidx[normalized][j];
        blen = cl;
        break;
      }
    }
    if (best < 0) {
      i++;
      continue;
    }
    const tok_added *a = &t->added[best];
    size_t start = i, stop = i + blen;
    i = stop;
    if (a->single_word) {
      int l;
      int before = is_word_before(s, start), after = stop < n && tok_is_word(tok_u8dec(s + stop, n - stop, &l));
      if (before || after) continue;
    }
    if (a->lstrip) {
      size_t k = start;
      while (k > 0) {
        size_t q = k - 1;
        while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
        int l;
        if (!tok_is_ws(tok_u8dec(s + q, k - q, &l))) break;
        k = q;
      }
      start = k > startoff ? k : startoff;
    }
    if (a->rstrip) {
      int l;
      while (stop < n && tok_is_ws(tok_u8dec(s + stop, n - stop, &l))) stop += (size_t)l;
      i = stop;
    }
    if (startoff < start) EMIT(x.off + (uint32_t)startoff, (uint32_t)(start - startoff), -1, x.origin && !startoff);
    EMIT(x.off + (uint32_t)start, (uint32_t)(stop - start), a->id, 0);
    startoff = stop;
  }
  if (startoff < n) EMIT(x.off + (uint32_t)startoff, (uint32_t)(n - startoff), -1, x.origin && !startoff);
#undef EMIT
  return SL_OK;
}

/* Runs added_pieces over every text split of sp. */
static int added_pass(const sl_tokenizer *t, int normalized, tok_pieces *sp) {
  if (!t->addstart[normalized][256]) return SL_OK;
  tok_piece *v = NULL;
  size_t n = 0, cap = 0;
  int rc = SL_OK;
  for (size_t i = 0; !rc && i < sp->n; i++) {
    if (sp->v[i].id >= 0) {
      tok_piece x = sp->v[i];
      if (n == cap) {
        size_t c = cap ? cap * 2 : 64;
        tok_piece *nv = realloc(v, c * sizeof *nv);
        if (!nv) {
          rc = sl_fail(SL_ENOMEM, "tokenizer: out of memory");
          break;
        }
        v = nv;
        cap = c;
      }
      v[n++] = x;
    } else rc = added_pieces(t, normalized, sp, sp->v[i], &v, &n, &cap);
  }
  free(sp->v);
  sp->v = v;
  sp->n = n;
  sp->cap = cap;
  return rc;
}

int64_t sl_tokenizer_dropped(char first[8]) { return tok_dropped(first); }

int sl_tokenizer_encode(const sl_tokenizer *t, const char *text, size_t len, int32_t **ids, int64_t *n) {
  *ids = NULL;
  *n = 0;
  tok_drop_reset();
  if (t->kind == TOK_BYTES) {
    int32_t *o = malloc((len ? len : 1) * sizeof *o);
    if (!o) return sl_fail(SL_ENOMEM, "tokenizer: out of memory for %zu ids", len);
    for (size_t i = 0; i < len; i++) o[i] = (unsigned char)text[i];
    *ids = o;
    *n = (int64_t)len;
    return SL_OK;
  }
  size_t bad = tok_u8invalid(text, len);
  if (bad != (size_t)-1) return sl_fail(SL_EINPUT, "tokenizer: the text is not valid UTF-8 at byte %zu", bad);
  if (len > UINT32_MAX / 4) return sl_fail(SL_EINPUT, "tokenizer: a text of %zu bytes is too long (split it)", len);
  tok_pieces sp = {0};
  tok_buf nb = {0};
  int32_t *out = NULL;
  int64_t cnt = 0, cap = 0;
  uint32_t off = 0;
  int rc = tok_arena_put(&sp, text, len, &off);
  if (!rc && len) rc = tok_push(&sp, 0, (uint32_t)len, -1, 1);
  if (!rc) rc = added_pass(t, 0, &sp);
  if (!rc && t->norm) {
    for (size_t i = 0; !rc && i < sp.n; i++) {
      if (sp.v[i].id >= 0) continue;
      int moved = 0;
      rc = tok_normalize(t->norm, sp.arena.p + sp.v[i].off, sp.v[i].len, &nb, &moved);
      if (!rc) rc = tok_arena_put(&sp, nb.p ? nb.p : "", nb.n, &off);
      sp.v[i].off = off;
      sp.v[i].len = (uint32_t)nb.n;
      if (moved) sp.v[i].origin = 0;
    }
  }
  if (!rc) rc = added_pass(t, 1, &sp);
  if (!rc) {
    /* drop empty text pieces (HF filters them after every split) */
    size_t k = 0;
    for (size_t i = 0; i < sp.n; i++)
      if (sp.v[i].id >= 0 || sp.v[i].len) sp.v[k++] = sp.v[i];
    sp.n = k;
  }
  if (!rc && t->pre) rc = tok_pretokenize(t->pre, &sp);
  for (size_t i = 0; !rc && i < sp.n; i++) {
    if (sp.v[i].id >= 0) {
      if (cnt == cap) {
        int64_t c = cap ? cap * 2 : 256;
        int32_t *p = realloc(out, (size_t)c * sizeof *p);
        if (!p) {
          rc = sl_fail(SL_ENOMEM, "tokenizer: out of memory");
          break;
        }
        out = p;
        cap = c;
      }
      out[cnt++] = sp.v[i].id;
    } else rc = tok_bpe_word(&t->bpe, t->serial, sp.arena.p + sp.v[i].off, sp.v[i].len, &out, &cnt, &cap);
  }
  tok_pieces_free(&sp);
  tb_free(&nb);
  if (rc) {
    free(out);
    return rc;
  }
  if (!out) out = malloc(sizeof *out);
  if (!out) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  *ids = out;
  *n = cnt;
  return SL_OK;
}

/* ---- decode ---- */

static int decode_bytes(const int32_t *ids, int64_t n, char **text, size_t *len) {
  char *o = malloc((size_t)n + 1);
  if (!o) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  size_t k = 0;
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] > 256) {
      free(o);
      return sl_fail(SL_EINPUT, "tokenizer: id %d at position %lld is outside the byte-level vocabulary 0..256", ids[i],
                     (long long)i);
    }
    if (ids[i] < 256) o[k++] = (char)ids[i]; /* EOD 256 decodes to nothing */
  }
  o[k] = 0;
  *text = o;
  *len = k;
  return SL_OK;
}

int sl_tokenizer_decode(const sl_tokenizer *t, const int32_t *ids, int64_t n, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  if (t->kind == TOK_BYTES) return decode_bytes(ids, n, text, len);
  tok_pieces sp = {0};
  tok_buf o = {0};
  int rc = SL_OK;
  for (int64_t i = 0; !rc && i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->vocab_size) {
      rc = sl_fail(SL_EINPUT, "tokenizer: id %d at position %lld is outside the vocabulary 0..%lld", ids[i],
                   (long long)i, (long long)t->vocab_size - 1);
      break;
    }
    if (t->toklen[ids[i]] == UINT32_MAX) continue; /* a hole in the ids: HF skips it */
    uint32_t off;
    rc = tok_arena_put(&sp, t->tokstr.p + t->tokoff[ids[i]], t->toklen[ids[i]], &off);
    if (!rc) rc = tok_push(&sp, off, t->toklen[ids[i]], -1, 0);
  }
  if (!rc && t->dec) rc = tok_decode_chain(t->dec, &sp);
  for (size_t i = 0; !rc && i < sp.n; i++) {
    if (!t->dec && i && tb_put(&o, " ", 1)) rc = SL_ENOMEM; /* no decoder: HF joins tokens with spaces */
    if (!rc) rc = tb_put(&o, sp.arena.p + sp.v[i].off, sp.v[i].len);
  }
  if (!rc && !o.p) rc = tb_put(&o, "", 0);
  tok_pieces_free(&sp);
  if (rc) {
    tb_free(&o);
    return rc;
  }
  *text = o.p;
  *len = o.n;
  return SL_OK;
}
