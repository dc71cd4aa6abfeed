/* data/tok_dec.c — tokenizer.json pipeline objects: parsing normalizer,
 * pre_tokenizer and decoder objects into tok_step trees (refusing what is
 * not implemented, by name), and running the decoders of decode(). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "data/tok_internal.h"

void tok_step_free(tok_step *s) {
  if (!s) return;
  for (int i = 0; i < s->nkids; i++) tok_step_free(s->kids[i]);
  free(s->kids);
  free(s->pat);
  free(s->content);
  tok_regex_free(s->re);
  free(s);
}

static int jbool(json_t *o, const char *k, int dflt) {
  json_t *v = json_object_get(o, k);
  return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int dupstr(const char *s, size_t n, char **out, size_t *len) {
  *out = malloc(n + 1);
  if (!*out) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  memcpy(*out, s, n);
  (*out)[n] = 0;
  if (len) *len = n;
  return SL_OK;
}

/* A string field holding exactly one character: its code point in *cp. */
static int one_char(json_t *o, const char *k, const char *what, const char *dflt, tok_step *s) {
  json_t *v = json_object_get(o, k);
  const char *p = json_is_string(v) ? json_string_value(v) : dflt;
  size_t n = json_is_string(v) ? json_string_length(v) : strlen(dflt);
  int l = 0;
  if (n) tok_u8dec(p, n, &l);
  if (!n || (size_t)l != n) return sl_fail(SL_EINPUT, "%s.%s: expected one character, found '%s'", what, k, p);
  s->ch = tok_u8dec(p, n, &l);
  return dupstr(p, n, &s->pat, &s->patlen);
}

/* {"String": s} or {"Regex": r} */
static int pattern(json_t *o, const char *what, tok_step *s) {
  json_t *p = json_object_get(o, "pattern");
  json_t *str = json_object_get(p, "String"), *re = json_object_get(p, "Regex");
  if (json_is_string(str)) return dupstr(json_string_value(str), json_string_length(str), &s->pat, &s->patlen);
  if (json_is_string(re)) return tok_regex(json_string_value(re), json_string_length(re), what, &s->re);
  return sl_fail(SL_EINPUT, "%s.pattern: expected {\"String\": ...} or {\"Regex\": ...}", what);
}

static int behavior(json_t *o, const char *what, int dflt, int *out) {
  json_t *v = json_object_get(o, "behavior");
  *out = dflt;
  if (!v) return SL_OK;
  const char *b = json_string_value(v);
  static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  for (int i = 0; b && i < 5; i++)
    if (!strcmp(b, names[i])) {
      *out = i;
      return SL_OK;
    }
  return sl_fail(
      SL_EINPUT,
      "%s.behavior: expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous, found '%s'", what,
      b ? b : "(not a string)");
}

static int prepend_scheme(json_t *o, const char *what, int *out) {
  json_t *v = json_object_get(o, "prepend_scheme");
  if (json_is_string(v)) {
    const char *p = json_string_value(v);
    if (!strcmp(p, "always")) *out = TM_ALWAYS;
    else if (!strcmp(p, "first")) *out = TM_FIRST;
    else if (!strcmp(p, "never")) *out = TM_NEVER;
    else return sl_fail(SL_EINPUT, "%s.prepend_scheme: expected always, first or never, found '%s'", what, p);
    return SL_OK;
  }
  *out = jbool(o, "add_prefix_space", 1) ? TM_ALWAYS : TM_NEVER;
  return SL_OK;
}

static const char *const KIND_NAME[] = {"normalizer", "pre_tokenizer", "decoder"};

/* a Sequence: its members, each parsed as a step of the same kind (null members left out) */
static int parse_seq(json_t *j, int kind, const char *what, const char *sub, tok_step *s) {
  int rc = SL_OK;
  static const char *const member[] = {"normalizers", "pretokenizers", "decoders"};
  s->type = kind == TK_NORM ? TN_SEQ : kind == TK_PRE ? TP_SEQ : TD_SEQ;
  json_t *a = json_object_get(j, member[kind]);
  if (!json_is_array(a)) return sl_fail(SL_EINPUT, "%s: expected an array \"%s\"", sub, member[kind]);
  s->kids = calloc(json_array_size(a) + 1, sizeof *s->kids);
  if (!s->kids) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  for (size_t i = 0; !rc && i < json_array_size(a); i++) {
    char w[300];
    snprintf(w, sizeof w, "%s.%s[%zu]", what, member[kind], i);
    rc = tok_parse_step(json_array_get(a, i), kind, w, &s->kids[s->nkids]);
    if (!rc && s->kids[s->nkids]) s->nkids++;
  }
  return rc;
}

/* a normalizer's type and settings (s->type stays 0 for an unsupported type) */
static int parse_norm(json_t *j, const char *type, const char *sub, tok_step *s) {
  int rc = SL_OK;
  if (!strcmp(type, "NFC")) s->type = TN_NFC;
  else if (!strcmp(type, "NFD")) s->type = TN_NFD;
  else if (!strcmp(type, "NFKC")) s->type = TN_NFKC;
  else if (!strcmp(type, "NFKD")) s->type = TN_NFKD;
  else if (!strcmp(type, "Lowercase")) s->type = TN_LOWER;
  else if (!strcmp(type, "StripAccents")) s->type = TN_STRIPACC;
  else if (!strcmp(type, "Strip")) {
    s->type = TN_STRIP;
    s->a = jbool(j, "strip_left", 1);
    s->b = jbool(j, "strip_right", 1);
  } else if (!strcmp(type, "Replace")) {
    s->type = TN_REPLACE;
    json_t *c = json_object_get(j, "content");
    if (!json_is_string(c)) rc = sl_fail(SL_EINPUT, "%s: expected a string \"content\"", sub);
    else rc = dupstr(json_string_value(c), json_string_length(c), &s->content, &s->contentlen);
    if (!rc) rc = pattern(j, sub, s);
  } else if (!strcmp(type, "Prepend")) {
    s->type = TN_PREPEND;
    json_t *c = json_object_get(j, "prepend");
    if (!json_is_string(c)) rc = sl_fail(SL_EINPUT, "%s: expected a string \"prepend\"", sub);
    else rc = dupstr(json_string_value(c), json_string_length(c), &s->pat, &s->patlen);
  }
  return rc;
}

/* a pre-tokenizer's type and settings (s->type stays 0 for an unsupported type) */
static int parse_pre(json_t *j, const char *type, const char *sub, tok_step *s) {
  int rc = SL_OK;
  if (!strcmp(type, "ByteLevel")) {
    s->type = TP_BYTELEVEL;
    s->a = jbool(j, "add_prefix_space", 1);
    s->b = jbool(j, "use_regex", 1);
  } else if (!strcmp(type, "Split")) {
    s->type = TP_SPLIT;
    rc = pattern(j, sub, s);
    if (!rc) rc = behavior(j, sub, TB_ISOLATED, &s->a);
    s->b = jbool(j, "invert", 0);
  } else if (!strcmp(type, "Metaspace")) {
    s->type = TP_METASPACE;
    rc = one_char(j, "replacement", sub, "\xe2\x96\x81", s);
    if (!rc) rc = prepend_scheme(j, sub, &s->a);
    s->b = jbool(j, "split", 1);
  } else if (!strcmp(type, "Digits")) {
    s->type = TP_DIGITS;
    s->a = jbool(j, "individual_digits", 0);
  } else if (!strcmp(type, "WhitespaceSplit")) s->type = TP_WSSPLIT;
  else if (!strcmp(type, "Whitespace")) s->type = TP_WHITESPACE;
  else if (!strcmp(type, "Punctuation")) {
    s->type = TP_PUNCT;
    rc = behavior(j, sub, TB_ISOLATED, &s->a);
  } else if (!strcmp(type, "CharDelimiterSplit")) {
    s->type = TP_CHARDELIM;
    rc = one_char(j, "delimiter", sub, "", s);
  }
  return rc;
}

/* a decoder's type and settings (s->type stays 0 for an unsupported type) */
static int parse_dec(json_t *j, const char *type, const char *sub, tok_step *s) {
  int rc = SL_OK;
  if (!strcmp(type, "ByteLevel")) s->type = TD_BYTELEVEL;
  else if (!strcmp(type, "ByteFallback")) s->type = TD_BYTEFALLBACK;
  else if (!strcmp(type, "Fuse")) s->type = TD_FUSE;
  else if (!strcmp(type, "Metaspace")) {
    s->type = TD_METASPACE;
    rc = one_char(j, "replacement", sub, "\xe2\x96\x81", s);
    if (!rc) rc = prepend_scheme(j, sub, &s->a);
  } else if (!strcmp(type, "Strip")) {
    s->type = TD_STRIP;
    rc = one_char(j, "content", sub, " ", s);
    s->a = (int)json_integer_value(json_object_get(j, "start"));
    s->b = (int)json_integer_value(json_object_get(j, "stop"));
  } else if (!strcmp(type, "Replace")) {
    s->type = TD_REPLACE;
    json_t *c = json_object_get(j, "content");
    if (!json_is_string(c)) rc = sl_fail(SL_EINPUT, "%s: expected a string \"content\"", sub);
    else rc = dupstr(json_string_value(c), json_string_length(c), &s->content, &s->contentlen);
    if (!rc) rc = pattern(j, sub, s);
  } else if (!strcmp(type, "BPEDecoder")) {
    s->type = TD_BPE;
    json_t *c = json_object_get(j, "suffix");
    rc = json_is_string(c) ? dupstr(json_string_value(c), json_string_length(c), &s->pat, &s->patlen)
                           : dupstr("</w>", 4, &s->pat, &s->patlen);
  }
  return rc;
}

int tok_parse_step(json_t *j, int kind, const char *what, tok_step **out) {
  *out = NULL;
  if (!j || json_is_null(j)) return SL_OK;
  const char *type = json_string_value(json_object_get(j, "type"));
  if (!json_is_object(j) || !type) return sl_fail(SL_EINPUT, "%s: expected an object with a \"type\"", what);
  tok_step *s = calloc(1, sizeof *s);
  if (!s) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
  char sub[256];
  snprintf(sub, sizeof sub, "%s (%s)", what, type);
  int rc = SL_OK;
  if (!strcmp(type, "Sequence")) {
    rc = parse_seq(j, kind, what, sub, s);
    goto done;
  }
  if (kind == TK_NORM) rc = parse_norm(j, type, sub, s);
  else if (kind == TK_PRE) rc = parse_pre(j, type, sub, s);
  else rc = parse_dec(j, type, sub, s);
  if (!rc && !s->type)
    rc = sl_fail(SL_EINPUT, "%s: %s type '%s' is not supported by shardlm (see docs/formats.md, Tokenizers)", what,
                 KIND_NAME[kind], type);
done:
  if (rc) tok_step_free(s);
  else *out = s;
  return rc;
}

/* ---- decoders ---- */

/* Rust String::from_utf8_lossy: one U+FFFD per maximal invalid subpart. */
static int lossy(const unsigned char *s, size_t n, tok_buf *out) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t need = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) need = 0;
    else if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else need = 99;
    size_t k = 1;
    if (need != 99)
      for (; k <= need && i + k < n; k++) {
        unsigned d = s[i + k];
        if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) break;
      }
    if (need != 99 && k == need + 1) {
      if (tb_put(out, s + i, k)) return SL_ENOMEM;
    } else if (tb_put(out, "\xef\xbf\xbd", 3)) return SL_ENOMEM;
    i += need == 99 ? 1 : k;
  }
  return SL_OK;
}

static int put_piece(tok_pieces *sp, const char *p, size_t n) {
  uint32_t off;
  if (tok_arena_put(sp, p, n, &off)) return SL_ENOMEM;
  return tok_push(sp, off, (uint32_t)n, -1, 0);
}

/* ByteLevel (tokens' characters back to bytes, then lossy UTF-8) and Fuse: all tokens into one */
static int dec_bytes(const tok_step *st, tok_pieces *sp, tok_piece *old, size_t nold, tok_buf *t, tok_buf *t2) {
  int rc = SL_OK;
  for (size_t i = 0; !rc && i < nold; i++) {
    const char *s = sp->arena.p + old[i].off;
    size_t n = old[i].len, at = t->n;
    if (st->type == TD_FUSE) {
      rc = tb_put(t, s, n);
      continue;
    }
    for (size_t k = 0; !rc && k < n;) {
      int l, b = tok_cp2byte(tok_u8dec(s + k, n - k, &l));
      if (b < 0) {
        t->n = at;
        rc = tb_put(t, s, n);
        break;
      }
      char c = (char)b;
      rc = tb_put(t, &c, 1);
      k += (size_t)l;
    }
  }
  if (rc) return rc;
  if (st->type == TD_FUSE) return put_piece(sp, t->p, t->n);
  t2->n = 0;
  rc = lossy((const unsigned char *)t->p, t->n, t2);
  return rc ? rc : put_piece(sp, t2->p ? t2->p : "", t2->n);
}

/* ByteFallback: runs of <0xNN> tokens into their bytes (U+FFFD per byte when not valid UTF-8) */
static int dec_byte_fallback(tok_pieces *sp, tok_piece *old, size_t nold, tok_buf *t) {
  int rc = SL_OK;
  for (size_t i = 0; !rc && i <= nold; i++) {
    const char *s = i < nold ? sp->arena.p + old[i].off : "";
    size_t n = i < nold ? old[i].len : 0;
    char *e;
    if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && s[3] != '+' && s[3] != '-') {
      char hx[3] = {s[3], s[4], 0};
      long v = strtol(hx, &e, 16);
      if (*e == 0) {
        char c = (char)v;
        rc = tb_put(t, &c, 1);
        continue;
      }
    }
    if (t->n) {
      if (tok_u8invalid(t->p, t->n) == (size_t)-1) rc = put_piece(sp, t->p, t->n);
      else
        for (size_t k = 0; !rc && k < t->n; k++) rc = put_piece(sp, "\xef\xbf\xbd", 3);
      t->n = 0;
    }
    if (!rc && i < nold) rc = tok_push(sp, old[i].off, old[i].len, -1, 0);
  }
  return rc;
}

/* Metaspace, Strip, Replace, BPEDecoder: token i (s, n) of nold into t */
static int dec_token(const tok_step *st, const char *s, size_t n, size_t i, size_t nold, tok_buf *t) {
  int rc = SL_OK;
  switch (st->type) {
  case TD_METASPACE:
    for (size_t k = 0; !rc && k < n;) {
      int l;
      int32_t c = tok_u8dec(s + k, n - k, &l);
      if (c == st->ch) rc = (i == 0 && st->a != TM_NEVER) ? SL_OK : tb_put(t, " ", 1);
      else rc = tb_put(t, s + k, (size_t)l);
      k += (size_t)l;
    }
    break;
  case TD_STRIP: {
    size_t a = 0, b = n;
    int l;
    for (int k = 0; k < st->a && a < b && tok_u8dec(s + a, b - a, &l) == st->ch; k++) a += (size_t)l;
    for (int k = 0; k < st->b && b > a; k++) {
      size_t q = b - 1;
      while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
      if (tok_u8dec(s + q, b - q, &l) != st->ch) break;
      b = q;
    }
    rc = tb_put(t, s + a, b - a);
    break;
  }
  case TD_REPLACE:
  case TD_BPE: {
    /* BPEDecoder: suffix -> " " (nothing in the last token) */
    const char *rep = st->type == TD_BPE ? (i + 1 == nold ? "" : " ") : st->content;
    size_t rl = st->type == TD_BPE ? strlen(rep) : st->contentlen;
    size_t k = 0;
    if (st->re) {
      tok_buf tmp = {0};
      int moved = 0;
      rc = tok_normalize(&(tok_step){.type = TN_REPLACE, .re = st->re, .content = (char *)rep, .contentlen = rl}, s, n,
                         &tmp, &moved);
      if (!rc) rc = tb_put(t, tmp.p ? tmp.p : "", tmp.n);
      tb_free(&tmp);
      break;
    }
    while (!rc && k < n) {
      const char *f = st->patlen ? memmem(s + k, n - k, st->pat, st->patlen) : NULL;
      size_t e = f ? (size_t)(f - s) : n;
      rc = tb_put(t, s + k, e - k);
      if (!rc && f) rc = tb_put(t, rep, rl);
      k = f ? e + st->patlen : n;
    }
    break;
  }
  default: return sl_fail(SL_EINTERNAL, "tokenizer: decoder type %d", st->type);
  }
  return rc;
}

static int dec_one(const tok_step *st, tok_pieces *sp, tok_piece *old, size_t nold, tok_buf *t, tok_buf *t2) {
  int rc = SL_OK;
  t->n = 0;
  switch (st->type) {
  case TD_BYTELEVEL:
  case TD_FUSE: return dec_bytes(st, sp, old, nold, t, t2);
  case TD_BYTEFALLBACK: return dec_byte_fallback(sp, old, nold, t);
  default: break;
  }
  /* per token */
  for (size_t i = 0; !rc && i < nold; i++) {
    const char *s = sp->arena.p + old[i].off;
    size_t n = old[i].len;
    t->n = 0;
    if (tb_reserve(t, n)) return SL_ENOMEM;
    rc = dec_token(st, s, n, i, nold, t);
    if (!rc) rc = put_piece(sp, t->p, t->n);
  }
  return rc;
}

int tok_decode_chain(const tok_step *st, tok_pieces *sp) {
  if (st->type == TD_SEQ) {
    for (int i = 0; i < st->nkids; i++) {
      int rc = tok_decode_chain(st->kids[i], sp);
      if (rc) return rc;
    }
    return SL_OK;
  }
  tok_piece *old = sp->v;
  size_t nold = sp->n;
  sp->v = NULL;
  sp->n = sp->cap = 0;
  tok_buf t = {0}, t2 = {0};
  int rc = dec_one(st, sp, old, nold, &t, &t2);
  free(old);
  tb_free(&t);
  tb_free(&t2);
  return rc;
}
