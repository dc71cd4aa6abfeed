/* data/tok_util.c — the tokenizer's building blocks: growable buffers,
 * UTF-8 decoding and character classes, the string -> id hash map and the
 * split list (data/tok_internal.h). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"
#include "data/tok_internal.h"

int tb_reserve(tok_buf *b, size_t extra) {
  if (b->n + extra + 1 <= b->cap) return SL_OK;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + extra + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) return sl_fail(SL_ENOMEM, "tokenizer: out of memory (%zu bytes)", cap);
  b->p = p;
  b->cap = cap;
  return SL_OK;
}

int tb_put(tok_buf *b, const void *s, size_t n) {
  if (b->n + n + 1 > b->cap && tb_reserve(b, n)) return SL_ENOMEM;
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return SL_OK;
}

void tb_free(tok_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

int32_t tok_u8dec(const char *s, size_t n, int *len) {
  const unsigned char *u = (const unsigned char *)s;
  if (u[0] < 0x80 || n < 2) {
    *len = 1;
    return u[0];
  }
  if (u[0] < 0xE0) {
    *len = 2;
    return ((u[0] & 0x1F) << 6) | (u[1] & 0x3F);
  }
  if (u[0] < 0xF0 || n < 4) {
    *len = 3;
    return ((u[0] & 0x0F) << 12) | ((u[1] & 0x3F) << 6) | (u[2] & 0x3F);
  }
  *len = 4;
  return ((u[0] & 0x07) << 18) | ((u[1] & 0x3F) << 12) | ((u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}

int tok_u8enc(int32_t cp, char *out) { return (int)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out); }

size_t tok_u8invalid(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint64_t w; /* ASCII fast path: 8 bytes at a time */
    while (i + 8 <= n && (memcpy(&w, s + i, 8), !(w & 0x8080808080808080ull))) i += 8;
    if (i >= n) break;
    if (!((unsigned char)s[i] & 0x80)) {
      i++;
      continue;
    }
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) return i;
    i += (size_t)k;
  }
  return (size_t)-1;
}

int tok_is_ws(int32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int tok_is_numeric(int32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  int k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

/* Rust regex's Unicode \w: Alphabetic, marks, connector punctuation, decimal
 * digits, Join_Control (Alphabetic approximated by L*, Nl and the letter-like
 * symbols of Other_Alphabetic that are not marks). */
int tok_is_word(int32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z') || c == '_';
  if (c == 0x200C || c == 0x200D) return 1;
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189))
    return 1;
  int k = utf8proc_category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
         k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}

/* ---- the map ---- */
uint64_t tok_hash(const char *s, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  memcpy(&w, s + i, n - i);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33; /* finalizer: the table index takes the low bits */
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h ? h : 1;
}

static int smap_grow(tok_smap *m) {
  size_t cap = m->cap ? m->cap * 2 : 1024;
  tok_slot *ns = calloc(cap, sizeof *ns);
  if (!ns) return sl_fail(SL_ENOMEM, "tokenizer: out of memory for a map of %zu entries", cap);
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->s[i].h) continue;
    size_t j = m->s[i].h & (cap - 1);
    while (ns[j].h) j = (j + 1) & (cap - 1);
    ns[j] = m->s[i];
  }
  free(m->s);
  m->s = ns;
  m->cap = cap;
  return SL_OK;
}

int32_t tok_smap_geth(const tok_smap *m, const char *k, size_t n, uint64_t h) {
  if (!m->cap) return -1;
  size_t j = h & (m->cap - 1);
  while (m->s[j].h) {
    const tok_slot *e = &m->s[j];
    if (e->h == h && e->len == n && !memcmp(m->keys.p + e->off, k, n)) return e->val;
    j = (j + 1) & (m->cap - 1);
  }
  return -1;
}

int32_t tok_smap_get(const tok_smap *m, const char *k, size_t n) { return tok_smap_geth(m, k, n, tok_hash(k, n)); }

int tok_smap_put(tok_smap *m, const char *k, size_t n, int32_t v) {
  if ((m->n + 1) * 2 > m->cap && smap_grow(m)) return SL_ENOMEM;
  uint64_t h = tok_hash(k, n);
  size_t j = h & (m->cap - 1);
  while (m->s[j].h) {
    tok_slot *e = &m->s[j];
    if (e->h == h && e->len == n && !memcmp(m->keys.p + e->off, k, n)) {
      e->val = v;
      return SL_OK;
    }
    j = (j + 1) & (m->cap - 1);
  }
  if (m->keys.n + n > UINT32_MAX) return sl_fail(SL_EINPUT, "tokenizer: vocabulary strings exceed 4 GiB");
  uint32_t off = (uint32_t)m->keys.n;
  if (tb_put(&m->keys, k, n)) return SL_ENOMEM;
  m->s[j] = (tok_slot){h, off, (uint32_t)n, v};
  m->n++;
  return SL_OK;
}

void tok_smap_free(tok_smap *m) {
  free(m->s);
  tb_free(&m->keys);
  memset(m, 0, sizeof *m);
}

/* ---- splits ---- */
int tok_push(tok_pieces *s, uint32_t off, uint32_t len, int32_t id, int origin) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    tok_piece *v = realloc(s->v, cap * sizeof *v);
    if (!v) return sl_fail(SL_ENOMEM, "tokenizer: out of memory for %zu splits", cap);
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = (tok_piece){off, len, id, (uint8_t)origin};
  return SL_OK;
}

int tok_arena_put(tok_pieces *s, const char *p, size_t n, uint32_t *off) {
  if (s->arena.n + n > UINT32_MAX) return sl_fail(SL_EINPUT, "tokenizer: a text over 4 GiB");
  *off = (uint32_t)s->arena.n;
  return tb_put(&s->arena, p, n);
}

void tok_pieces_free(tok_pieces *s) {
  tb_free(&s->arena);
  free(s->v);
  memset(s, 0, sizeof *s);
}
