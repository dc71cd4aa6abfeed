/* data/tok_bpe.c — the BPE model of tokenizer.json: vocabulary and merge
 * tables (loaded with jansson), and the tokenization of one pre-token as HF
 * tokenizers does it (initial symbols with byte fallback / unknown token,
 * then merges by rank through a min-heap over a linked list of symbols),
 * with a per-thread cache of pre-token -> ids. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "data/tok_internal.h"

static uint64_t mkey(int32_t a, int32_t b) { return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; }
static size_t mslot(uint64_t k, size_t cap) {
  k ^= k >> 33; /* murmur3 finalizer: both ids reach every bit */
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return (size_t)k & (cap - 1);
}

/* rank and merged id of the pair (a, b); 0 when it does not merge */
static inline int merge_get(const tok_bpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *nid) {
  if (!m->mcap) return 0;
  uint64_t k = mkey(a, b);
  size_t j = mslot(k, m->mcap);
  while (m->mkey[j]) {
    if (m->mkey[j] == k) {
      *rank = m->mrank[j];
      *nid = m->mnew[j];
      return 1;
    }
    j = (j + 1) & (m->mcap - 1);
  }
  return 0;
}

static void merge_put(tok_bpe *m, int32_t a, int32_t b, uint32_t rank, int32_t nid) {
  uint64_t k = mkey(a, b);
  size_t j = mslot(k, m->mcap);
  while (m->mkey[j] && m->mkey[j] != k) j = (j + 1) & (m->mcap - 1);
  if (!m->mkey[j]) m->nmerges++;
  m->mkey[j] = k;
  m->mrank[j] = rank; /* a later duplicate wins, as in HF's HashMap */
  m->mnew[j] = nid;
}

typedef struct {
  int32_t id;
  const char *key;
} idkey;
static int cmp_idkey(const void *x, const void *y) {
  const idkey *a = x, *b = y;
  if (a->id != b->id) return a->id < b->id ? -1 : 1;
  return strcmp(a->key, b->key);
}

/* two tokens with one id: decode could not tell them apart; refused */
static int check_unique_ids(json_t *vocab, const char *file) {
  int rc = SL_OK;
  const char *key;
  json_t *v;
  size_t nv = json_object_size(vocab), iv = 0;
  idkey *ik = malloc((nv ? nv : 1) * sizeof *ik);
  if (!ik) return sl_fail(SL_ENOMEM, "%s: out of memory", file);
  json_object_foreach(vocab, key, v) {
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX - 1)
      ik[iv++] = (idkey){(int32_t)json_integer_value(v), key};
  }
  qsort(ik, iv, sizeof *ik, cmp_idkey);
  for (size_t i = 1; i < iv; i++)
    if (ik[i].id == ik[i - 1].id) {
      rc = sl_fail(SL_EINPUT, "%s: model.vocab: tokens \"%s\" and \"%s\" both have id %d (every id must be unique)",
                   file, ik[i - 1].key, ik[i].key, (int)ik[i].id);
      break;
    }
  free(ik);
  return rc;
}

/* the merge table: model.merges in rank order, every token in the vocabulary */
static int load_merges(json_t *merges, const char *file, tok_bpe *m) {
  int rc = SL_OK;
  char *tmp = NULL;
  size_t nm = json_array_size(merges), cap = 1024;
  while (cap < 2 * nm + 2) cap *= 2;
  m->mcap = cap;
  m->mkey = calloc(cap, sizeof *m->mkey);
  m->mrank = malloc(cap * sizeof *m->mrank);
  m->mnew = malloc(cap * sizeof *m->mnew);
  if (!m->mkey || !m->mrank || !m->mnew) return sl_fail(SL_ENOMEM, "%s: out of memory for %zu merges", file, nm);
  size_t plen = m->prefix ? strlen(m->prefix) : 0;
  for (size_t r = 0; r < nm; r++) {
    json_t *e = json_array_get(merges, r);
    const char *a, *b;
    size_t al, bl;
    if (json_is_string(e)) {
      a = json_string_value(e);
      const char *sp = strchr(a, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        rc = sl_fail(SL_EINPUT, "%s: model.merges[%zu] '%s': expected two tokens separated by one space", file, r, a);
        break;
      }
      al = (size_t)(sp - a);
      b = sp + 1;
      bl = strlen(b);
    } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
               json_is_string(json_array_get(e, 1))) {
      a = json_string_value(json_array_get(e, 0));
      al = json_string_length(json_array_get(e, 0));
      b = json_string_value(json_array_get(e, 1));
      bl = json_string_length(json_array_get(e, 1));
    } else {
      rc = sl_fail(SL_EINPUT, "%s: model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", file, r);
      break;
    }
    int32_t ia = tok_smap_get(&m->vocab, a, al), ib = tok_smap_get(&m->vocab, b, bl);
    free(tmp);
    tmp = malloc(al + bl + 1);
    if (!tmp) {
      rc = sl_fail(SL_ENOMEM, "out of memory");
      break;
    }
    size_t cut = plen < bl ? plen : bl;
    memcpy(tmp, a, al);
    memcpy(tmp + al, b + cut, bl - cut);
    int32_t in = tok_smap_get(&m->vocab, tmp, al + bl - cut);
    if (ia < 0 || ib < 0 || in < 0) {
      rc = sl_fail(SL_EINPUT, "%s: model.merges[%zu] ('%.*s', '%.*s'): token '%.*s' is not in the vocabulary", file, r,
                   (int)al, a, (int)bl, b,
                   ia < 0   ? (int)al
                   : ib < 0 ? (int)bl
                            : (int)(al + bl - cut),
                   ia < 0   ? a
                   : ib < 0 ? b
                            : tmp);
      break;
    }
    merge_put(m, ia, ib, (uint32_t)r, in);
  }
  free(tmp);
  return rc;
}

int tok_bpe_load(json_t *model, const char *file, tok_bpe *m) {
  memset(m, 0, sizeof *m);
  m->unk = -1;
  m->maxid = -1;
  int rc = SL_OK;
  json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
  if (!json_is_object(vocab)) return sl_fail(SL_EINPUT, "%s: model.vocab: expected an object token -> id", file);
  if (!json_is_array(merges)) return sl_fail(SL_EINPUT, "%s: model.merges: expected an array", file);
  json_t *dropout = json_object_get(model, "dropout");
  if (json_is_number(dropout) && json_number_value(dropout) > 0)
    return sl_fail(SL_EINPUT, "%s: model.dropout %g: BPE dropout is not supported (training-time randomness)", file,
                   json_number_value(dropout));
  const char *key;
  json_t *v;
  if ((rc = check_unique_ids(vocab, file))) return rc;
  json_object_foreach(vocab, key, v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX - 1)
      return sl_fail(SL_EINPUT, "%s: model.vocab[\"%s\"]: expected an id >= 0", file, key);
    int32_t id = (int32_t)json_integer_value(v);
    if ((rc = tok_smap_put(&m->vocab, key, strlen(key), id))) return rc;
    if (id > m->maxid) m->maxid = id;
  }
  m->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
  m->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
  m->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
  json_t *unk = json_object_get(model, "unk_token");
  if (json_is_string(unk)) {
    m->unk = tok_smap_get(&m->vocab, json_string_value(unk), json_string_length(unk));
    if (m->unk < 0)
      return sl_fail(SL_EINPUT, "%s: model.unk_token '%s' is not in the vocabulary", file, json_string_value(unk));
  }
  json_t *pre = json_object_get(model, "continuing_subword_prefix"),
         *suf = json_object_get(model, "end_of_word_suffix");
  if (json_is_string(pre) && json_string_length(pre)) m->prefix = strdup(json_string_value(pre));
  if (json_is_string(suf) && json_string_length(suf)) m->suffix = strdup(json_string_value(suf));
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    m->bytetok[b] = tok_smap_get(&m->vocab, name, 6);
  }
  return load_merges(merges, file, m);
}

void tok_bpe_free(tok_bpe *m) {
  tok_smap_free(&m->vocab);
  free(m->mkey);
  free(m->mrank);
  free(m->mnew);
  free(m->prefix);
  free(m->suffix);
  memset(m, 0, sizeof *m);
}

/* ---- per-thread scratch and cache ---- */
typedef struct {
  uint64_t key; /* rank << 32 | pos: lower rank first, then leftmost */
  int32_t nid;  /* the merged id the pair had when pushed */
} hent;
typedef struct {
  uint64_t serial;
  tok_smap map;  /* pre-token -> offset in pool */
  int32_t *pool; /* [count, ids...] per entry */
  size_t npool, cappool;
  int32_t *id, *prev, *next, *len; /* symbols */
  size_t cap;
  hent *heap; /* min-heap of candidate merges */
  size_t hn, hcap;
  char *word;
  size_t wcap;
} tok_tls;
static _Thread_local tok_tls tl;
/* characters dropped (no vocabulary entry, byte fallback or unk token) since tok_drop_reset */
static _Thread_local int64_t tl_dropped;
static _Thread_local char tl_drop_first[8];
void tok_drop_reset(void) { tl_dropped = 0; }
int64_t tok_dropped(char first[8]) {
  if (first) memcpy(first, tl_drop_first, 8);
  return tl_dropped;
}

/* Frees a thread's scratch and cache when the thread exits. */
static pthread_key_t g_tls_key;
static pthread_once_t g_tls_once = PTHREAD_ONCE_INIT;
static void tls_free(void *p) {
  tok_tls *x = p;
  tok_smap_free(&x->map);
  free(x->pool);
  free(x->id);
  free(x->prev);
  free(x->next);
  free(x->len);
  free(x->heap);
  free(x->word);
  memset(x, 0, sizeof *x);
}
static void tls_key(void) { pthread_key_create(&g_tls_key, tls_free); }

enum { CACHE_MAX_ENTRIES = 1 << 18, CACHE_MAX_IDS = 1 << 23, CACHE_MAX_WORD = 256 };

static void cache_reset(uint64_t serial) {
  if (!tl.serial) { /* first use in this thread */
    pthread_once(&g_tls_once, tls_key);
    pthread_setspecific(g_tls_key, &tl);
  }
  tok_smap_free(&tl.map);
  tl.npool = 0;
  tl.serial = serial;
}

static int grow_syms(size_t n) {
  if (n <= tl.cap) return SL_OK;
  size_t cap = tl.cap ? tl.cap : 64;
  while (cap < n) cap *= 2;
  int32_t *a = realloc(tl.id, cap * 4), *b = a ? realloc(tl.prev, cap * 4) : NULL;
  if (a) tl.id = a;
  if (b) tl.prev = b;
  int32_t *c = b ? realloc(tl.next, cap * 4) : NULL;
  if (c) tl.next = c;
  int32_t *d = c ? realloc(tl.len, cap * 4) : NULL;
  if (d) tl.len = d;
  hent *h = d ? realloc(tl.heap, cap * sizeof *h) : NULL;
  if (h) tl.heap = h;
  if (!h) return sl_fail(SL_ENOMEM, "tokenizer: out of memory for a word of %zu characters", n);
  tl.cap = cap;
  tl.hcap = cap;
  return SL_OK;
}

static int heap_push(uint32_t rank, int32_t pos, int32_t nid) {
  hent x = {((uint64_t)rank << 32) | (uint32_t)pos, nid};
  if (tl.hn == tl.hcap) {
    hent *h = realloc(tl.heap, tl.hcap * 2 * sizeof *h);
    if (!h) return sl_fail(SL_ENOMEM, "tokenizer: out of memory");
    tl.heap = h;
    tl.hcap *= 2;
  }
  size_t i = tl.hn++;
  while (i) {
    size_t p = (i - 1) / 2;
    if (tl.heap[p].key <= x.key) break;
    tl.heap[i] = tl.heap[p];
    i = p;
  }
  tl.heap[i] = x;
  return SL_OK;
}

static hent heap_pop(void) {
  hent top = tl.heap[0], x = tl.heap[--tl.hn];
  size_t i = 0, n = tl.hn;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && tl.heap[c + 1].key < tl.heap[c].key) c++;
    if (x.key <= tl.heap[c].key) break;
    tl.heap[i] = tl.heap[c];
    i = c;
  }
  if (n) tl.heap[i] = x;
  return top;
}

static int out_push(int32_t **ids, int64_t *n, int64_t *cap, int32_t v) {
  if (*n == *cap) {
    int64_t c = *cap ? *cap * 2 : 256;
    int32_t *p = realloc(*ids, (size_t)c * sizeof *p);
    if (!p) return sl_fail(SL_ENOMEM, "tokenizer: out of memory for %lld ids", (long long)c);
    *ids = p;
    *cap = c;
  }
  (*ids)[(*n)++] = v;
  return SL_OK;
}

/* Looks a character (with prefix / suffix as the position asks) up. */
static int32_t sym_lookup(const tok_bpe *m, const char *c, size_t l, int first, int last) {
  if ((!m->prefix || first) && (!m->suffix || !last)) return tok_smap_get(&m->vocab, c, l);
  size_t pl = m->prefix && !first ? strlen(m->prefix) : 0, sl = m->suffix && last ? strlen(m->suffix) : 0;
  if (pl + l + sl > tl.wcap) {
    char *w = realloc(tl.word, pl + l + sl + 16);
    if (!w) return -1;
    tl.word = w;
    tl.wcap = pl + l + sl + 16;
  }
  memcpy(tl.word, m->prefix, pl);
  memcpy(tl.word + pl, c, l);
  if (sl) memcpy(tl.word + pl + l, m->suffix, sl);
  return tok_smap_get(&m->vocab, tl.word, pl + l + sl);
}

/* The initial symbols of a word (tl.id, tl.len, a linked list); returns their number. A character
 * without a vocabulary entry: its bytes (byte fallback), the unknown token (fused), or dropped (counted). */
static int32_t initial_symbols(const tok_bpe *m, const char *s, size_t n) {
  int32_t ns = 0, unk = -1, unklen = 0;
#define ADD(ID, L)                                                                                                     \
  do {                                                                                                                 \
    tl.id[ns] = (ID);                                                                                                  \
    tl.len[ns] = (L);                                                                                                  \
    tl.prev[ns] = ns - 1;                                                                                              \
    tl.next[ns] = ns + 1;                                                                                              \
    ns++;                                                                                                              \
  } while (0)
  for (size_t i = 0; i < n;) {
    int l;
    tok_u8dec(s + i, n - i, &l);
    int32_t id = sym_lookup(m, s + i, (size_t)l, i == 0, i + (size_t)l == n);
    if (id >= 0) {
      if (unk >= 0) {
        ADD(unk, unklen);
        unk = -1;
      }
      ADD(id, l);
    } else {
      int done = 0;
      if (m->byte_fallback) {
        int all = 1;
        for (int k = 0; k < l; k++) all &= m->bytetok[(unsigned char)s[i + k]] >= 0;
        if (all) {
          for (int k = 0; k < l; k++) ADD(m->bytetok[(unsigned char)s[i + k]], 1);
          done = 1;
        }
      }
      if (!done && m->unk < 0) { /* dropped, as HF tokenizers drops it */
        if (!tl_dropped++) {
          memset(tl_drop_first, 0, sizeof tl_drop_first);
          memcpy(tl_drop_first, s + i, (size_t)l < 7 ? (size_t)l : 7);
        }
      }
      if (!done && m->unk >= 0) {
        if (unk >= 0 && m->fuse_unk) unklen += l;
        else {
          if (unk >= 0) ADD(unk, unklen);
          unk = m->unk;
          unklen = l;
        }
      }
    }
    i += (size_t)l;
  }
  if (unk >= 0) ADD(unk, unklen);
#undef ADD
  if (ns) tl.next[ns - 1] = -1;
  return ns;
}

/* The merges by rank over the ns symbols, as HF tokenizers applies them. */
static int apply_merges(const tok_bpe *m, int32_t ns) {
  tl.hn = 0;
  uint32_t rank;
  int32_t nid;
  for (int32_t i = 0; i + 1 < ns; i++)
    if (merge_get(m, tl.id[i], tl.id[i + 1], &rank, &nid) && heap_push(rank, i, nid)) return SL_ENOMEM;
  while (tl.hn) {
    hent top = heap_pop();
    int32_t pos = (int32_t)(uint32_t)top.key, nx = tl.next[pos];
    if (tl.len[pos] == 0 || nx < 0) continue;
    /* HF: a stale entry is skipped unless the pair still makes the same id */
    if (!merge_get(m, tl.id[pos], tl.id[nx], &rank, &nid) || nid != top.nid) continue;
    tl.id[pos] = nid;
    tl.len[pos] += tl.len[nx];
    tl.len[nx] = 0;
    tl.next[pos] = tl.next[nx];
    if (tl.next[nx] >= 0) tl.prev[tl.next[nx]] = pos;
    int32_t pv = tl.prev[pos];
    if (pv >= 0 && merge_get(m, tl.id[pv], tl.id[pos], &rank, &nid) && heap_push(rank, pv, nid)) return SL_ENOMEM;
    if (tl.next[pos] >= 0 && merge_get(m, tl.id[pos], tl.id[tl.next[pos]], &rank, &nid) && heap_push(rank, pos, nid))
      return SL_ENOMEM;
  }
  return SL_OK;
}

/* The word's cnt ids w into this thread's cache (optional: nothing when memory runs out). */
static void cache_put(uint64_t serial, const char *s, size_t n, const int32_t *w, int64_t cnt) {
  if (tl.map.n >= CACHE_MAX_ENTRIES || tl.npool + (size_t)cnt + 1 > CACHE_MAX_IDS) cache_reset(serial);
  if (tl.npool + (size_t)cnt + 1 > tl.cappool) {
    size_t c = tl.cappool ? tl.cappool : 4096;
    while (c < tl.npool + (size_t)cnt + 1) c *= 2;
    int32_t *p = realloc(tl.pool, c * sizeof *p);
    if (!p) return; /* the cache is optional */
    tl.pool = p;
    tl.cappool = c;
  }
  if (!tok_smap_put(&tl.map, s, n, (int32_t)tl.npool)) {
    tl.pool[tl.npool] = (int32_t)cnt;
    memcpy(tl.pool + tl.npool + 1, w, (size_t)cnt * sizeof(int32_t));
    tl.npool += (size_t)cnt + 1;
  }
}

int tok_bpe_word(const tok_bpe *m, uint64_t serial, const char *s, size_t n, int32_t **ids, int64_t *nids,
                 int64_t *cap) {
  if (!n) return SL_OK;
  uint64_t h = tok_hash(s, n);
  if (m->ignore_merges) {
    int32_t id = tok_smap_geth(&m->vocab, s, n, h);
    if (id >= 0) return out_push(ids, nids, cap, id);
  }
  if (tl.serial != serial) cache_reset(serial);
  if (n < CACHE_MAX_WORD) {
    int32_t at = tok_smap_geth(&tl.map, s, n, h);
    if (at >= 0) {
      for (int32_t k = 0; k < tl.pool[at]; k++)
        if (out_push(ids, nids, cap, tl.pool[at + 1 + k])) return SL_ENOMEM;
      return SL_OK;
    }
  }
  if (grow_syms(n + 1)) return SL_ENOMEM; /* every symbol covers >= 1 byte */
  /* initial symbols */
  int64_t dropped0 = tl_dropped;
  int32_t ns = initial_symbols(m, s, n);
  /* merges */
  if (apply_merges(m, ns)) return SL_ENOMEM;
  int64_t first = *nids;
  for (int32_t i = ns ? 0 : -1; i >= 0; i = tl.next[i])
    if (out_push(ids, nids, cap, tl.id[i])) return SL_ENOMEM;
  /* cache */
  if (n < CACHE_MAX_WORD && tl_dropped == dropped0) /* a word that drops is not cached: it is counted each time */
    cache_put(serial, s, n, *ids + first, *nids - first);
  return SL_OK;
}
