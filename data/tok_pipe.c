/* data/tok_pipe.c — the Hugging Face tokenizer pipeline steps other than
 * the model: parsing of normalizer / pre_tokenizer / decoder objects of
 * tokenizer.json, and running them (Oniguruma for regexes, utf8proc for
 * Unicode normalization). Semantics follow HF tokenizers (Rust) exactly
 * where the docs (docs/formats.md) do not say otherwise. */
#define _GNU_SOURCE
#include <oniguruma.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"
#include "data/tok_internal.h"

/* ---- regexes ---- */
static pthread_once_t g_onig_once = PTHREAD_ONCE_INIT;
static void onig_init_once(void) {
  OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
  onig_initialize(enc, 1);
  tok_bytelevel_init();
}

void tok_tables_init(void) { pthread_once(&g_onig_once, onig_init_once); }

int tok_regex(const char *pat, size_t n, const char *what, void **out) {
  pthread_once(&g_onig_once, onig_init_once);
  OnigRegex re = NULL;
  OnigErrorInfo ei;
  int r = onig_new(&re, (const OnigUChar *)pat, (const OnigUChar *)pat + n, ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                   ONIG_SYNTAX_DEFAULT, &ei);
  if (r != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &ei);
    return sl_fail(SL_EINPUT, "%s: bad regular expression '%.*s': %s", what, (int)n, pat, (char *)msg);
  }
  *out = re;
  return SL_OK;
}

void tok_regex_free(void *re) {
  if (re) onig_free((OnigRegex)re);
}

/* GPT-2's pattern, used by the ByteLevel pre-tokenizer with use_regex. */
static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static void *g_gpt2;
static pthread_once_t g_gpt2_once = PTHREAD_ONCE_INIT;
static void gpt2_once(void) {
  if (tok_regex(GPT2_RE, sizeof GPT2_RE - 1, "ByteLevel", &g_gpt2)) g_gpt2 = NULL;
}

/* ---- segments: (start, end, is_match) covering a string ---- */
typedef struct {
  uint32_t s, e;
  uint8_t m;
} seg;
typedef struct {
  seg *v;
  size_t n, cap;
} segs;

static int seg_push(segs *g, size_t s, size_t e, int m) {
  if (g->n == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 64;
    seg *v = realloc(g->v, cap * sizeof *v);
    if (!v) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
    g->v = v;
    g->cap = cap;
  }
  g->v[g->n++] = (seg){(uint32_t)s, (uint32_t)e, (uint8_t)m};
  return SL_OK;
}

static _Thread_local OnigRegion *tl_region;
static pthread_key_t g_region_key; /* frees tl_region at thread exit */
static pthread_once_t g_region_once = PTHREAD_ONCE_INIT;
static void region_free(void *p) { onig_region_free((OnigRegion *)p, 1); }
static void region_key(void) { pthread_key_create(&g_region_key, region_free); }

/* HF SysRegex::find_matches (onig find_iter: no empty match right after a match). */
static int regex_segs(void *re, const char *s, size_t n, segs *g) {
  g->n = 0;
  if (!n) return seg_push(g, 0, 0, 0);
  if (!tl_region) {
    if (!(tl_region = onig_region_new())) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
    pthread_once(&g_region_once, region_key);
    pthread_setspecific(g_region_key, tl_region);
  }
  const OnigUChar *u = (const OnigUChar *)s;
  size_t pos = 0, prev = 0;
  long last_end = -1;
  while (pos <= n) {
    int r = onig_search((OnigRegex)re, u, u + n, u + pos, u + n, tl_region, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0) return sl_fail(SL_EINTERNAL, "tokenizer: regex search failed (%d)", r);
    size_t st = (size_t)tl_region->beg[0], en = (size_t)tl_region->end[0];
    if (st == en && last_end == (long)en) {
      if (pos >= n) break;
      int l;
      tok_u8dec(s + pos, n - pos, &l);
      pos += (size_t)l;
      continue;
    }
    if (prev != st && seg_push(g, prev, st, 0)) return SL_ENOMEM;
    if (seg_push(g, st, en, 1)) return SL_ENOMEM;
    prev = en;
    pos = en;
    last_end = (long)en;
  }
  if (prev != n) return seg_push(g, prev, n, 0);
  return SL_OK;
}

/* Literal pattern (HF escapes a String pattern into a regex). */
static int literal_segs(const char *p, size_t pn, const char *s, size_t n, segs *g) {
  g->n = 0;
  if (!n) return seg_push(g, 0, 0, 0);
  size_t prev = 0, i = 0;
  while (pn && i + pn <= n) {
    const char *f = memmem(s + i, n - i, p, pn);
    if (!f) break;
    size_t st = (size_t)(f - s);
    if (prev != st && seg_push(g, prev, st, 0)) return SL_ENOMEM;
    if (seg_push(g, st, st + pn, 1)) return SL_ENOMEM;
    i = prev = st + pn;
  }
  if (prev != n) return seg_push(g, prev, n, 0);
  return SL_OK;
}

enum { CP_NUMERIC, CP_WS, CP_EQ, CP_PUNCT };
static int cp_is(int kind, int32_t c, int32_t eq) {
  switch (kind) {
  case CP_NUMERIC: return tok_is_numeric(c);
  case CP_WS: return tok_is_ws(c);
  case CP_EQ: return c == eq;
  default: {
    if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    int k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
  }
  }
}

/* HF's Pattern for Fn(char) -> bool: each matching char its own match. */
static int char_segs(int kind, int32_t eq, const char *s, size_t n, segs *g) {
  g->n = 0;
  if (!n) return seg_push(g, 0, 0, 0);
  size_t last = 0, i = 0;
  while (i < n) {
    int l;
    int32_t c = tok_u8dec(s + i, n - i, &l);
    if (cp_is(kind, c, eq)) {
      if (last < i && seg_push(g, last, i, 0)) return SL_ENOMEM;
      if (seg_push(g, i, i + (size_t)l, 1)) return SL_ENOMEM;
      last = i + (size_t)l;
    }
    i += (size_t)l;
  }
  if (n > last) return seg_push(g, last, n, 0);
  return SL_OK;
}

/* Applies a split behaviour to segments in place (HF NormalizedString::split);
 * on return g holds the kept pieces (m = 1: removed). */
static void behave(segs *g, int beh, int invert) {
  if (invert)
    for (size_t i = 0; i < g->n; i++) g->v[i].m = !g->v[i].m;
  size_t k = 0;
  int prevm = 0;
  switch (beh) {
  case TB_ISOLATED:
    for (size_t i = 0; i < g->n; i++) g->v[i].m = 0;
    return;
  case TB_REMOVED: return;
  case TB_CONTIGUOUS:
  case TB_MERGED_PREV:
    for (size_t i = 0; i < g->n; i++) {
      seg x = g->v[i];
      int merge = beh == TB_CONTIGUOUS ? x.m == prevm : (x.m && !prevm);
      if (merge && k) g->v[k - 1].e = x.e;
      else g->v[k++] = (seg){x.s, x.e, 0};
      prevm = x.m;
    }
    g->n = k;
    return;
  case TB_MERGED_NEXT: {
    /* built backwards at the tail, then moved to the front */
    size_t n = g->n;
    seg *t = g->v;
    size_t w = n; /* next write index from the end */
    for (size_t i = n; i-- > 0;) {
      seg x = t[i];
      if (x.m && !prevm && w < n) t[w].s = x.s;
      else t[--w] = (seg){x.s, x.e, 0};
      prevm = x.m;
    }
    memmove(t, t + w, (n - w) * sizeof *t);
    g->n = n - w;
    return;
  }
  }
}

/* ---- normalizers ---- */
static int u8map(const char *s, size_t n, int opts, tok_buf *out) {
  utf8proc_uint8_t *dst = NULL;
  utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)opts);
  if (r < 0) return sl_fail(SL_EINPUT, "tokenizer: Unicode normalization failed: %s", utf8proc_errmsg(r));
  int rc = tb_put(out, dst, (size_t)r);
  free(dst);
  return rc;
}

static int norm_one(const tok_step *st, const char *s, size_t n, tok_buf *out, int *moved) {
  out->n = 0;
  if (tb_reserve(out, n + 8)) return SL_ENOMEM;
  out->p[0] = 0;
  switch (st->type) {
  case TN_NFC: return n ? u8map(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out) : SL_OK;
  case TN_NFD: return n ? u8map(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, out) : SL_OK;
  case TN_NFKC: return n ? u8map(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out) : SL_OK;
  case TN_NFKD: return n ? u8map(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out) : SL_OK;
  case TN_LOWER:
  case TN_STRIPACC: break;
  case TN_PREPEND:
    if (n && tb_put(out, st->pat, st->patlen)) return SL_ENOMEM;
    return tb_put(out, s, n);
  case TN_STRIP: {
    size_t a = 0, b = n;
    int l;
    if (st->a)
      while (a < b && tok_is_ws(tok_u8dec(s + a, b - a, &l))) a += (size_t)l;
    if (a) *moved = 1;
    if (st->b)
      while (b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        if (!tok_is_ws(tok_u8dec(s + k, b - k, &l))) break;
        b = k;
      }
    return tb_put(out, s + a, b - a);
  }
  case TN_REPLACE: {
    segs g = {0};
    int rc = st->re ? regex_segs(st->re, s, n, &g) : literal_segs(st->pat, st->patlen, s, n, &g);
    for (size_t i = 0; !rc && i < g.n; i++)
      rc = g.v[i].m ? tb_put(out, st->content, st->contentlen) : tb_put(out, s + g.v[i].s, g.v[i].e - g.v[i].s);
    if (g.n && g.v[0].m && g.v[0].e > 0 && !st->contentlen) *moved = 1;
    free(g.v);
    return rc;
  }
  default: return sl_fail(SL_EINTERNAL, "tokenizer: normalizer type %d", st->type);
  }
  /* per code point: Lowercase or StripAccents */
  for (size_t i = 0; i < n;) {
    int l;
    int32_t c = tok_u8dec(s + i, n - i, &l);
    char u[8];
    if (st->type == TN_STRIPACC) {
      int k = utf8proc_category(c); /* HF is_combining_mark: General_Category M */
      int mark = k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
      if (!mark && tb_put(out, s + i, (size_t)l)) return SL_ENOMEM;
      if (mark && !out->n) *moved = 1;
    } else if (c == 0x130) {
      if (tb_put(out, "i\xcc\x87", 3)) return SL_ENOMEM; /* Rust: U+0130 lowercases to i + U+0307 */
    } else {
      int k = tok_u8enc(c < 0x80 ? ((c >= 'A' && c <= 'Z') ? c + 32 : c) : utf8proc_tolower(c), u);
      if (tb_put(out, u, (size_t)k)) return SL_ENOMEM;
    }
    i += (size_t)l;
  }
  return SL_OK;
}

int tok_normalize(const tok_step *st, const char *s, size_t n, tok_buf *out, int *moved) {
  if (st->type != TN_SEQ) return norm_one(st, s, n, out, moved);
  tok_buf tmp = {0};
  out->n = 0;
  int rc = tb_put(out, s, n);
  for (int i = 0; !rc && i < st->nkids; i++) {
    rc = tok_normalize(st->kids[i], out->p, out->n, &tmp, moved);
    if (!rc) {
      tok_buf x = *out;
      *out = tmp;
      tmp = x;
    }
  }
  tb_free(&tmp);
  return rc;
}

/* ---- pre-tokenizers ---- */
int32_t tok_byte2cp[256];
static int16_t g_cp2byte[324];

void tok_bytelevel_init(void) {
  int k = 0;
  for (int b = 0; b < 256; b++) {
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    tok_byte2cp[b] = keep ? b : 256 + k++;
  }
  for (int i = 0; i < 324; i++) g_cp2byte[i] = -1;
  for (int b = 0; b < 256; b++) g_cp2byte[tok_byte2cp[b]] = (int16_t)b;
}

int tok_cp2byte(int32_t cp) { return cp >= 0 && cp < 324 ? g_cp2byte[cp] : -1; }

/* HF's Whitespace pre-tokenizer: Rust regex \w+|[^\w\s]+ (Unicode \w and
 * \s as in the Rust regex crate, which differ from Oniguruma's): the maximal
 * runs of word characters and of other non-space characters are matches. */
static int whitespace_segs(const char *s, size_t n, segs *g) {
  g->n = 0;
  if (!n) return seg_push(g, 0, 0, 0);
  size_t i = 0;
  while (i < n) {
    int l;
    int32_t c = tok_u8dec(s + i, n - i, &l);
    int cls = tok_is_word(c) ? 1 : tok_is_ws(c) ? 0 : 2;
    size_t j = i + (size_t)l;
    while (j < n) {
      int32_t d = tok_u8dec(s + j, n - j, &l);
      if ((tok_is_word(d) ? 1 : tok_is_ws(d) ? 0 : 2) != cls) break;
      j += (size_t)l;
    }
    if (seg_push(g, i, j, cls != 0)) return SL_ENOMEM;
    i = j;
  }
  return SL_OK;
}

/* Pushes the kept segments of g as splits of x (whose text starts at base). */
static int push_segs(tok_pieces *sp, const tok_piece *x, uint32_t base, const segs *g) {
  for (size_t i = 0; i < g->n; i++)
    if (!g->v[i].m && g->v[i].e > g->v[i].s &&
        tok_push(sp, base + g->v[i].s, g->v[i].e - g->v[i].s, -1, x->origin && g->v[i].s == 0))
      return SL_ENOMEM;
  return SL_OK;
}

static int bytelevel_map(tok_pieces *sp, const char *s, size_t n, int origin, tok_buf *tmp) {
  tmp->n = 0;
  if (tb_reserve(tmp, 2 * n)) return SL_ENOMEM;
  for (size_t i = 0; i < n; i++) tmp->n += (size_t)tok_u8enc(tok_byte2cp[(unsigned char)s[i]], tmp->p + tmp->n);
  uint32_t off;
  if (tok_arena_put(sp, tmp->p, tmp->n, &off)) return SL_ENOMEM;
  return tok_push(sp, off, (uint32_t)tmp->n, -1, origin);
}

static int pre_split(const tok_step *st, tok_pieces *sp, tok_piece x, segs *g, tok_buf *tmp, tok_buf *tmp2) {
  const char *s = sp->arena.p + x.off;
  size_t n = x.len;
  int rc = SL_OK;
  switch (st->type) {
  case TP_SPLIT:
    rc = st->re ? regex_segs(st->re, s, n, g) : literal_segs(st->pat, st->patlen, s, n, g);
    if (!rc) behave(g, st->a, st->b);
    break;
  case TP_DIGITS:
    rc = char_segs(CP_NUMERIC, 0, s, n, g);
    if (!rc) behave(g, st->a ? TB_ISOLATED : TB_CONTIGUOUS, 0);
    break;
  case TP_WSSPLIT: rc = char_segs(CP_WS, 0, s, n, g); break;
  case TP_CHARDELIM: rc = char_segs(CP_EQ, st->ch, s, n, g); break;
  case TP_PUNCT:
    rc = char_segs(CP_PUNCT, 0, s, n, g);
    if (!rc) behave(g, st->a, 0);
    break;
  case TP_WHITESPACE:
    rc = whitespace_segs(s, n, g);
    if (!rc) behave(g, TB_REMOVED, 1);
    break;
  case TP_METASPACE: {
    tmp->n = 0;
    int pre = 0;
    int starts = n >= st->patlen && !memcmp(s, st->pat, st->patlen);
    for (size_t i = 0; !rc && i < n; i++) rc = s[i] == ' ' ? tb_put(tmp, st->pat, st->patlen) : tb_put(tmp, s + i, 1);
    if (rc) return rc;
    if (n && s[0] == ' ') starts = 1;
    if (st->a == TM_ALWAYS && !starts) pre = 1;
    if (st->a == TM_FIRST && !starts && x.origin) pre = 1;
    uint32_t off = (uint32_t)sp->arena.n;
    if (pre && tb_put(&sp->arena, st->pat, st->patlen)) return SL_ENOMEM;
    uint32_t o2;
    if (tok_arena_put(sp, tmp->p, tmp->n, &o2)) return SL_ENOMEM;
    tok_piece y = {off, (uint32_t)(sp->arena.n - off), -1, x.origin};
    if (!st->b) return y.len ? tok_push(sp, y.off, y.len, -1, y.origin) : SL_OK;
    rc = char_segs(CP_EQ, st->ch, sp->arena.p + y.off, y.len, g);
    if (!rc) behave(g, TB_MERGED_NEXT, 0);
    return rc ? rc : push_segs(sp, &y, y.off, g);
  }
  case TP_BYTELEVEL: {
    tmp2->n = 0;
    if (st->a && (n == 0 || s[0] != ' ') && tb_put(tmp2, " ", 1)) return SL_ENOMEM;
    if (tb_put(tmp2, s, n)) return SL_ENOMEM;
    if (!st->b) return tmp2->n ? bytelevel_map(sp, tmp2->p, tmp2->n, x.origin, tmp) : SL_OK;
    pthread_once(&g_gpt2_once, gpt2_once);
    if (!g_gpt2) return sl_fail(SL_EINTERNAL, "tokenizer: GPT-2 regex");
    rc = regex_segs(g_gpt2, tmp2->p, tmp2->n, g);
    for (size_t i = 0; !rc && i < g->n; i++)
      if (g->v[i].e > g->v[i].s)
        rc = bytelevel_map(sp, tmp2->p + g->v[i].s, g->v[i].e - g->v[i].s, x.origin && !g->v[i].s, tmp);
    return rc;
  }
  default: return sl_fail(SL_EINTERNAL, "tokenizer: pre-tokenizer type %d", st->type);
  }
  return rc ? rc : push_segs(sp, &x, x.off, g);
}

int tok_pretokenize(const tok_step *st, tok_pieces *sp) {
  if (st->type == TP_SEQ) {
    for (int i = 0; i < st->nkids; i++) {
      int rc = tok_pretokenize(st->kids[i], sp);
      if (rc) return rc;
    }
    return SL_OK;
  }
  tok_piece *old = sp->v;
  size_t nold = sp->n;
  sp->v = NULL;
  sp->n = sp->cap = 0;
  segs g = {0};
  tok_buf tmp = {0}, tmp2 = {0};
  int rc = SL_OK;
  for (size_t i = 0; !rc && i < nold; i++)
    rc = old[i].id >= 0 ? tok_push(sp, old[i].off, old[i].len, old[i].id, old[i].origin)
                        : pre_split(st, sp, old[i], &g, &tmp, &tmp2);
  free(old);
  free(g.v);
  tb_free(&tmp);
  tb_free(&tmp2);
  return rc;
}
