/* data/prepare.c — the `prepare` pipeline.
 *
 * Threads: one reader (inputs -> batches of raw records: JSON rows or .txt
 * documents, with file and line), `workers` tokenizers (batch -> tokens,
 * mask bytes, document lengths; bad rows become errors or skips), and the
 * caller's thread writing finished batches in input order into the dataset
 * builder (and the mask file). At most NSLOT batches exist at once, so
 * memory stays bounded whatever the corpus size.
 */
#define _GNU_SOURCE
#include "data/prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "data/chat.h"
#include "data/lineread.h"
#include "data/tokenizer.h"
#include "formats/dataset.h"

#define BATCH_BYTES (1u << 20) /* raw record bytes per batch */
#define BATCH_RECS 2048
#define ERRCAP 768

/* ---- batches ------------------------------------------------------------------ */
enum { SLOT_FREE, SLOT_QUEUED, SLOT_BUSY, SLOT_DONE };

typedef struct {
  int state;
  int64_t id;
  /* records */
  char *text; /* (tcap) record bytes back to back */
  size_t tlen, tcap;
  int64_t *roff;  /* (rcap + 1) record offsets into text */
  int64_t *rline; /* (rcap) first line of each record */
  int *rfile;     /* (rcap) input index */
  int nrec, rcap;
  /* results */
  int32_t *tok;  /* (kcap) tokens of all documents */
  uint8_t *mask; /* (kcap) loss mask bytes */
  int64_t ntok, kcap;
  int64_t *dlen; /* (dcap) tokens per document */
  int ndoc, dcap;
  int64_t skipped;
  int64_t dropped, dropped_docs; /* characters without a vocabulary entry, and their documents */
  int64_t drop_line;             /* the first such document: line, file, character */
  int drop_file;
  char drop_char[8];
  int rc;
  char err[ERRCAP];
} batch;

typedef struct {
  const sl_prep_cfg *cfg;
  int nslot;
  batch *slot;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t next_id; /* reader: id of the next batch */
  int reader_done; /* no more batches will be queued */
  int stop;        /* abandon everything */
  int reader_rc;
  char reader_err[ERRCAP];
  int64_t bytes_in;
  int use_mask;
  int eod, bos; /* ids to add, -1: none */
  sl_chat chat; /* --format messages */
} job;

static void batch_free(batch *b) {
  free(b->text);
  free(b->roff);
  free(b->rline);
  free(b->rfile);
  free(b->tok);
  free(b->mask);
  free(b->dlen);
}

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return 0;
  int64_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

static int batch_add_record(batch *b, const char *s, size_t n, int file, int64_t line, int join) {
  int64_t tcap = (int64_t)b->tcap;
  if (grow((void **)&b->text, &tcap, (int64_t)(b->tlen + n + 1), 1)) return SL_ENOMEM;
  b->tcap = (size_t)tcap;
  if (join) { /* continue the last record (a .txt paragraph): "\n" + line */
    b->text[b->tlen++] = '\n';
  } else {
    if (b->nrec + 2 > b->rcap) {
      int c = b->rcap ? 2 * b->rcap : 1024;
      int64_t *o = realloc(b->roff, (size_t)c * sizeof *o);
      if (o) b->roff = o;
      int64_t *l = realloc(b->rline, (size_t)c * sizeof *l);
      if (l) b->rline = l;
      int *f = realloc(b->rfile, (size_t)c * sizeof *f);
      if (f) b->rfile = f;
      if (!o || !l || !f) return SL_ENOMEM;
      b->rcap = c;
    }
    b->roff[b->nrec] = (int64_t)b->tlen;
    b->rline[b->nrec] = line;
    b->rfile[b->nrec] = file;
    b->nrec++;
  }
  memcpy(b->text + b->tlen, s, n);
  b->tlen += n;
  b->roff[b->nrec] = (int64_t)b->tlen;
  return SL_OK;
}

/* ---- reader thread ---------------------------------------------------------------- */
static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && !strcmp(s + n - m, suf);
}

static int is_json_rows(const char *path) {
  static const char *sfx[] = {".jsonl",    ".jsonl.gz", ".jsonl.zst", ".json",      ".json.gz",
                              ".json.zst", ".ndjson",   ".ndjson.gz", ".ndjson.zst"};
  for (size_t i = 0; i < sizeof sfx / sizeof *sfx; i++)
    if (has_suffix(path, sfx[i])) return 1;
  return 0;
}

/* Waits for a free slot; returns NULL when the job stops. */
static batch *take_free(job *j) {
  pthread_mutex_lock(&j->mu);
  batch *b = NULL;
  while (!j->stop && !b) {
    for (int i = 0; i < j->nslot && !b; i++)
      if (j->slot[i].state == SLOT_FREE) b = &j->slot[i];
    if (!b) pthread_cond_wait(&j->cv, &j->mu);
  }
  pthread_mutex_unlock(&j->mu);
  if (b) {
    b->tlen = 0;
    b->nrec = 0;
    b->ntok = 0;
    b->ndoc = 0;
    b->skipped = 0;
    b->dropped = b->dropped_docs = b->drop_line = 0;
    b->rc = 0;
    b->err[0] = 0;
  }
  return b;
}

static void queue(job *j, batch *b, int64_t in) {
  pthread_mutex_lock(&j->mu);
  b->id = j->next_id++;
  b->state = SLOT_QUEUED;
  j->bytes_in = in;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static int read_input(job *j, sl_lineread *lr, int file, int rows, batch **bp, int64_t *in_done) {
  const sl_prep_cfg *c = j->cfg;
  int in_par = 0, rc = SL_OK;
  for (;;) {
    const char *line;
    size_t n;
    int eof;
    if ((rc = sl_lineread_next(lr, &line, &n, &eof))) return rc;
    if (eof) break;
    int blank = n == 0 || (n == 1 && line[0] == '\r');
    int join = 0;
    if (rows || c->docs == SL_DOCS_LINES) {
      if (blank) continue;
    } else if (c->docs == SL_DOCS_BLANK) {
      if (blank) {
        in_par = 0;
        continue;
      }
      join = in_par;
      in_par = 1;
    } else { /* whole file */
      join = in_par;
      in_par = 1;
    }
    batch *b = *bp;
    if (!join && (b->tlen >= BATCH_BYTES || b->nrec >= BATCH_RECS)) {
      queue(j, b, *in_done + sl_lineread_bytes_in(lr));
      if (!(b = *bp = take_free(j))) return SL_OK;
    }
    if (batch_add_record(b, line, n, file, sl_lineread_lineno(lr), join))
      return sl_fail(SL_ENOMEM, "out of memory reading %s", sl_lineread_name(lr));
  }
  *in_done += sl_lineread_bytes_in(lr);
  return SL_OK;
}

static void *reader_main(void *arg) {
  job *j = arg;
  const sl_prep_cfg *c = j->cfg;
  int rc = SL_OK;
  int64_t in_done = 0;
  batch *b = take_free(j);
  int n = c->mem_text ? 1 : c->ninputs;
  for (int f = 0; f < n && b && !rc; f++) {
    sl_lineread *lr = NULL;
    rc = c->mem_text ? sl_lineread_open_mem(c->mem_name, c->mem_text, (size_t)c->mem_len, &lr)
                     : sl_lineread_open(c->inputs[f], &lr);
    if (!rc) rc = read_input(j, lr, f, !c->mem_text && is_json_rows(c->inputs[f]), &b, &in_done);
    sl_lineread_close(lr);
  }
  pthread_mutex_lock(&j->mu);
  if (rc) {
    j->reader_rc = rc;
    snprintf(j->reader_err, ERRCAP, "%s", sl_errmsg());
    j->stop = 1;
  }
  if (b) {
    if (!rc && b->nrec > 0) {
      b->id = j->next_id++;
      b->state = SLOT_QUEUED;
    } else {
      b->state = SLOT_FREE;
    }
  }
  j->bytes_in = in_done;
  j->reader_done = 1;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

/* ---- workers ---------------------------------------------------------------------- */
typedef sl_chat_piece segment; /* a text to encode, its loss-mask byte */

static int out_tokens(batch *b, const int32_t *t, int64_t n, int mask) {
  if (n <= 0) return SL_OK; /* nothing to append (and no memcpy into a buffer not yet allocated) */
  int64_t cap = b->kcap;
  if (grow((void **)&b->tok, &cap, b->ntok + n, sizeof(int32_t))) return SL_ENOMEM;
  cap = b->kcap;
  if (grow((void **)&b->mask, &cap, b->ntok + n, 1)) return SL_ENOMEM;
  b->kcap = cap;
  memcpy(b->tok + b->ntok, t, (size_t)n * sizeof(int32_t));
  memset(b->mask + b->ntok, mask, (size_t)n);
  b->ntok += n;
  return SL_OK;
}

static const char *row_string(json_t *o, const char *key, const char **err) {
  json_t *v = json_object_get(o, key);
  if (!v) {
    *err = "is missing";
    return NULL;
  }
  if (!json_is_string(v)) {
    *err = "is not a string";
    return NULL;
  }
  return json_string_value(v);
}

/* Turns record r into segments; a message in err on bad input. */
static int record_segments(job *j, batch *b, int r, json_t **root, segment *seg, int cap, int *nseg, char *err) {
  const sl_prep_cfg *c = j->cfg;
  const char *s = b->text + b->roff[r];
  size_t n = (size_t)(b->roff[r + 1] - b->roff[r]);
  *nseg = 0;
  int rows = !c->mem_text && is_json_rows(c->inputs[b->rfile[r]]);
  if (!rows) {
    if (c->format != SL_PREP_TEXT) {
      snprintf(err, ERRCAP, "--format %s needs JSON rows (.jsonl), not a text file",
               c->format == SL_PREP_MESSAGES ? "messages" : "prompt-completion");
      return SL_EINPUT;
    }
    seg[(*nseg)++] = (segment){s, n, 1, NULL, 0};
    return SL_OK;
  }
  json_error_t je;
  *root = json_loadb(s, n, 0, &je);
  if (!*root) {
    snprintf(err, ERRCAP, "invalid JSON (column %d): %s", je.column, je.text);
    return SL_EINPUT;
  }
  if (!json_is_object(*root)) {
    snprintf(err, ERRCAP, "a row must be a JSON object");
    return SL_EINPUT;
  }
  const char *e = NULL;
  if (c->format == SL_PREP_TEXT) {
    const char *key = c->json_key ? c->json_key : "text";
    const char *v = row_string(*root, key, &e);
    if (!v) {
      snprintf(err, ERRCAP, "key \"%s\" %s", key, e);
      return SL_EINPUT;
    }
    seg[(*nseg)++] = (segment){v, json_string_length(json_object_get(*root, key)), 1, NULL, 0};
    return SL_OK;
  }
  if (c->format == SL_PREP_PROMPT_COMPLETION) {
    const char *p = row_string(*root, "prompt", &e);
    if (!p) {
      snprintf(err, ERRCAP, "key \"prompt\" %s", e);
      return SL_EINPUT;
    }
    const char *q = row_string(*root, "completion", &e);
    if (!q) {
      snprintf(err, ERRCAP, "key \"completion\" %s", e);
      return SL_EINPUT;
    }
    seg[(*nseg)++] = (segment){p, json_string_length(json_object_get(*root, "prompt")), 0, NULL, 0};
    seg[(*nseg)++] = (segment){q, json_string_length(json_object_get(*root, "completion")), 1, NULL, 0};
    return SL_OK;
  }
  return sl_chat_render(&j->chat, json_object_get(*root, "messages"), seg, cap, nseg, err, ERRCAP);
}

/* Encodes seg and appends its tokens; with a head (seg->nhead), the tokens
 * that begin like the head's own encoding get mask 0, the rest seg->mask. */
static int encode_append(const sl_tokenizer *tk, batch *b, const segment *seg, int64_t *drop, char *first) {
  if (seg->n == 0) return SL_OK;
  int32_t *ids = NULL, *hids = NULL;
  int64_t k = 0, hk = 0, head = 0;
  int rc = sl_tokenizer_encode(tk, seg->s, seg->n, &ids, &k);
  char f[8];
  int64_t d = rc ? 0 : sl_tokenizer_dropped(f);
  if (d && !*drop) memcpy(first, f, 8);
  *drop += d;
  if (!rc && seg->nhead && seg->mask) {
    rc = sl_tokenizer_encode(tk, seg->s, seg->nhead, &hids, &hk);
    (void)sl_tokenizer_dropped(f); /* counted in the whole */
    while (head < hk && head < k && hids[head] == ids[head]) head++;
  } else if (seg->nhead) head = k;
  if (!rc && (out_tokens(b, ids, head, 0) || out_tokens(b, ids + head, k - head, seg->mask)))
    rc = sl_fail(SL_ENOMEM, "out of memory");
  free(ids);
  free(hids);
  return rc;
}

typedef struct {
  job *j;
  const sl_tokenizer *tk; /* shared: encode is thread-safe (its caches are per thread) */
  int hf;                 /* a Hugging Face tokenizer: text must be UTF-8 */
  segment *seg;           /* (MAXSEG) */
} worker;
#define MAXSEG (3 * 4096)

static int process_record(worker *w, batch *b, int r, char *err) {
  job *j = w->j;
  const sl_tokenizer *tk = w->tk;
  segment *seg = w->seg;
  json_t *root = NULL;
  int nseg = 0, rc = record_segments(j, b, r, &root, seg, MAXSEG, &nseg, err);
  int64_t start = b->ntok, drop = 0;
  char first[8] = "";
  size_t bad;
  /* JSON strings are valid UTF-8 already (jansson refuses others); a .txt document is checked */
  if (!rc && w->hf && !root && nseg == 1 && sl_utf8_valid(seg[0].s, seg[0].n, &bad)) {
    snprintf(err, ERRCAP, "invalid UTF-8 at byte %zu of the document", bad);
    rc = SL_EINPUT;
  }
  if (!rc && j->bos >= 0 && out_tokens(b, &j->bos, 1, 0)) rc = SL_ENOMEM;
  for (int i = 0; i < nseg && !rc; i++) {
    rc = encode_append(tk, b, &seg[i], &drop, first);
    if (rc && rc != SL_ENOMEM) snprintf(err, ERRCAP, "%s", sl_errmsg());
  }
  if (!rc && drop && j->cfg->strict) {
    snprintf(err, ERRCAP,
             "character '%s' has no vocabulary entry (the tokenizer has neither byte fallback nor an unk token); "
             "--strict refuses it (%lld such characters in this document)",
             first, (long long)drop);
    rc = SL_EINPUT;
  }
  if (!rc && j->eod >= 0 && out_tokens(b, &j->eod, 1, 1)) rc = SL_ENOMEM;
  if (!rc && b->ntok > start) { /* an empty text without EOD/BOS adds no document */
    int64_t cap = b->dcap;
    if (grow((void **)&b->dlen, &cap, b->ndoc + 1, sizeof(int64_t))) rc = SL_ENOMEM;
    else {
      b->dcap = (int)cap;
      b->dlen[b->ndoc++] = b->ntok - start;
    }
  }
  if (!rc && drop) {
    if (!b->dropped) {
      b->drop_line = b->rline[r];
      b->drop_file = b->rfile[r];
      memcpy(b->drop_char, first, 8);
    }
    b->dropped += drop;
    b->dropped_docs++;
  }
  if (rc) b->ntok = start; /* drop what this record wrote */
  if (rc == SL_ENOMEM) snprintf(err, ERRCAP, "out of memory");
  sl_chat_pieces_free(seg, nseg);
  json_decref(root);
  return rc;
}

static void work_batch(worker *w, batch *b) {
  const sl_prep_cfg *c = w->j->cfg;
  char err[ERRCAP];
  for (int r = 0; r < b->nrec; r++) {
    err[0] = 0;
    int rc = process_record(w, b, r, err);
    if (!rc) continue;
    if (rc == SL_EINPUT && c->skip_bad) {
      b->skipped++;
      continue;
    }
    const char *file = c->mem_text ? c->mem_name : c->inputs[b->rfile[r]];
    b->rc = rc;
    snprintf(b->err, ERRCAP, "%s:%lld: %s%s", file, (long long)b->rline[r], err,
             rc == SL_EINPUT ? " (--skip-bad skips such rows)" : "");
    return;
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  job *j = w->j;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    batch *b = NULL;
    while (!j->stop && !b) {
      for (int i = 0; i < j->nslot; i++) /* the oldest queued batch first */
        if (j->slot[i].state == SLOT_QUEUED && (!b || j->slot[i].id < b->id)) b = &j->slot[i];
      if (b) break;
      if (j->reader_done) break;
      pthread_cond_wait(&j->cv, &j->mu);
    }
    if (b) b->state = SLOT_BUSY;
    pthread_mutex_unlock(&j->mu);
    if (!b) return NULL;
    work_batch(w, b);
    pthread_mutex_lock(&j->mu);
    b->state = SLOT_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
  }
}

/* ---- output ----------------------------------------------------------------------- */
typedef struct {
  char *path, *tmp;
  int fd;
  uint8_t *buf;
  size_t n;
  int64_t count;
} mask_writer;

static int mask_open(mask_writer *m, const char *prefix) {
  memset(m, 0, sizeof *m);
  m->fd = -1;
  if (asprintf(&m->path, "%s.lmask", prefix) < 0 || asprintf(&m->tmp, "%s.lmask.tmp.%d", prefix, (int)getpid()) < 0 ||
      !(m->buf = malloc(BATCH_BYTES)))
    return sl_fail(SL_ENOMEM, "out of memory");
  m->fd = open(m->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (m->fd < 0) return sl_fail(SL_EIO, "%s: cannot create: %s", m->tmp, strerror(errno));
  uint8_t hdr[16] = {'S', 'L', 'L', 'M', 'A', 'S', 'K', '1'};
  return sl_write_all(m->fd, hdr, 16, m->tmp);
}

static int mask_add(mask_writer *m, const uint8_t *v, int64_t n) {
  while (n > 0) {
    size_t k = BATCH_BYTES - m->n;
    if ((int64_t)k > n) k = (size_t)n;
    memcpy(m->buf + m->n, v, k);
    m->n += k;
    v += k;
    n -= (int64_t)k;
    m->count += (int64_t)k;
    if (m->n == BATCH_BYTES) {
      int rc = sl_write_all(m->fd, m->buf, m->n, m->tmp);
      m->n = 0;
      if (rc) return rc;
    }
  }
  return SL_OK;
}

/* Writes the count into the header and syncs; the rename comes after the dataset's. */
static int mask_finish(mask_writer *m) {
  int rc = sl_write_all(m->fd, m->buf, m->n, m->tmp);
  uint64_t cnt = (uint64_t)m->count;
  if (!rc && pwrite(m->fd, &cnt, 8, 8) != 8) rc = sl_fail(SL_EIO, "%s: write failed: %s", m->tmp, strerror(errno));
  if (!rc && fsync(m->fd) != 0) rc = sl_fail(SL_EIO, "%s: fsync failed: %s", m->tmp, strerror(errno));
  return rc;
}

static void mask_close(mask_writer *m, int keep) {
  if (m->fd >= 0) close(m->fd);
  if (!keep && m->tmp) unlink(m->tmp);
  free(m->path);
  free(m->tmp);
  free(m->buf);
  memset(m, 0, sizeof *m);
  m->fd = -1;
}

static void progress_line(const sl_prep_stats *st, int64_t bytes_in, double t0, int final) {
  double dt = sl_now_s() - t0;
  fprintf(stderr, "\rprepare: %lld documents  %.1f MB read  %lld tokens  %.0f tokens/s%s%s", (long long)st->documents,
          bytes_in / 1e6, (long long)st->tokens, dt > 0 ? st->tokens / dt : 0.0, st->skipped ? "  (skipped " : "",
          st->skipped ? "bad rows)" : "   ");
  if (final) fputc('\n', stderr);
  fflush(stderr);
}

/* ---- the job --------------------------------------------------------------------- */
static int load_tokenizer(const sl_prep_cfg *c, sl_tokenizer **t) {
  return c->tokenizer ? sl_tokenizer_load(c->tokenizer, t) : sl_tokenizer_bytes(t);
}

static int setup_template(job *j) {
  const sl_prep_cfg *c = j->cfg;
  return c->format == SL_PREP_MESSAGES ? sl_chat_setup(c->chat_template, c->chat_roles, c->nchat_roles, &j->chat)
                                       : SL_OK;
}

/* --output and --input given, the output a prefix; the output's directory is made as needed */
static int check_output(const sl_prep_cfg *c) {
  if (!c->output || !*c->output) return sl_fail(SL_EINPUT, "prepare: --output PREFIX is required");
  if (!c->mem_text && c->ninputs < 1) return sl_fail(SL_EINPUT, "prepare: at least one --input is required");
  size_t olen = strlen(c->output);
  if (c->output[olen - 1] == '/')
    return sl_fail(SL_EINPUT,
                   "prepare: --output '%s' ends in '/': it is a file-name prefix (PREFIX.bin, PREFIX.idx), "
                   "e.g. '%scorpus'",
                   c->output, c->output);
  const char *slash = strrchr(c->output, '/');
  if (slash && slash != c->output) { /* the output's directory is made as needed */
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - c->output), c->output);
    int rc = sl_mkdirs(dir);
    if (rc) return rc;
  }
  return SL_OK;
}

/* the end-of-document and beginning-of-sequence ids to add (j->eod, j->bos), if the tokenizer has them */
static int special_ids(const sl_prep_cfg *c, const sl_tokenizer *tk, job *j) {
  int32_t eos = sl_tokenizer_eos_id(tk), bos = sl_tokenizer_bos_id(tk);
  int append = c->append_eod < 0 ? c->tokenizer == NULL : c->append_eod;
  if (append && eos < 0)
    return sl_fail(SL_EINPUT,
                   "%s: --append-eod: the tokenizer has no end-of-sequence token "
                   "(tokenizer_config.json eos_token)",
                   c->tokenizer ? c->tokenizer : "byte-level");
  int prepend = c->prepend_bos || j->chat.bos;
  if (prepend && bos < 0)
    return sl_fail(SL_EINPUT,
                   "%s: %s: the tokenizer has no beginning-of-sequence token "
                   "(tokenizer_config.json bos_token)",
                   c->tokenizer ? c->tokenizer : "byte-level",
                   c->prepend_bos ? "--prepend-bos" : "--chat-template's template starts with bos_token");
  j->eod = append ? eos : -1;
  j->bos = prepend ? bos : -1;
  return SL_OK;
}

/* Waits for batch `next` (*bp; NULL when stopped, finished, or at a progress tick). *in: the bytes read
 * so far; *finished: no batch `next` will come. Returns the reader's error, if it stopped the job. */
static int wait_batch(job *j, int64_t next, batch **bp, int64_t *in, int *finished) {
  int rc = SL_OK;
  pthread_mutex_lock(&j->mu);
  batch *b = NULL;
  for (;;) {
    for (int i = 0; i < j->nslot && !b; i++)
      if (j->slot[i].state == SLOT_DONE && j->slot[i].id == next) b = &j->slot[i];
    if (b || j->stop || (j->reader_done && next == j->next_id)) break;
    if (j->cfg->progress) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 250000000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&j->cv, &j->mu, &ts);
      break;
    }
    pthread_cond_wait(&j->cv, &j->mu);
  }
  *in = j->bytes_in;
  *finished = !b && (j->stop || (j->reader_done && next == j->next_id));
  if (j->stop && j->reader_rc) rc = sl_fail(j->reader_rc, "%s", j->reader_err);
  pthread_mutex_unlock(&j->mu);
  *bp = b;
  return rc;
}

/* One finished batch into the dataset (and the mask file) and the figures; then its slot is free. */
static int write_batch(job *j, sl_dataset_builder *bld, mask_writer *mw, batch *b, sl_prep_stats *st) {
  const sl_prep_cfg *c = j->cfg;
  int rc = SL_OK;
  if (b->rc) rc = sl_fail(b->rc, "%s", b->err);
  int64_t off = 0;
  for (int d = 0; d < b->ndoc && !rc; d++) {
    rc = sl_dataset_builder_add_document(bld, b->tok + off, b->dlen[d]);
    if (!rc && j->use_mask) rc = mask_add(mw, b->mask + off, b->dlen[d]);
    for (int64_t k = 0; k < b->dlen[d]; k++) st->loss_tokens += j->use_mask ? b->mask[off + k] : 1;
    off += b->dlen[d];
  }
  st->documents += b->ndoc;
  st->tokens += b->ntok;
  st->skipped += b->skipped;
  if (b->dropped && !st->dropped) {
    st->drop_line = b->drop_line;
    st->drop_file = c->mem_text ? c->mem_name : c->inputs[b->drop_file];
    memcpy(st->drop_char, b->drop_char, 8);
  }
  st->dropped += b->dropped;
  st->dropped_docs += b->dropped_docs;
  pthread_mutex_lock(&j->mu);
  b->state = SLOT_FREE;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
  return rc;
}

/* After the last batch: the dataset and the mask file finished and put in place (*bld: NULL once
 * finished); a stale mask at the prefix removed when this dataset has none. */
static int finish_outputs(const job *j, sl_dataset_builder **bld, mask_writer *mw, sl_prep_stats *st) {
  const sl_prep_cfg *c = j->cfg;
  int rc = SL_OK;
  if (st->documents == 0)
    rc =
        sl_fail(SL_EINPUT, "%s%s: no documents: %lld bytes read hold no text (empty, only blank lines%s)",
                c->mem_text ? c->mem_name : c->inputs[0], !c->mem_text && c->ninputs > 1 ? " and the other inputs" : "",
                (long long)st->bytes_in, st->skipped ? ", or every row was bad and skipped" : "");
  if (!rc && j->use_mask) rc = mask_finish(mw);
  if (!rc) {
    rc = sl_dataset_builder_finish(*bld);
    *bld = NULL;
  }
  if (!rc && j->use_mask) {
    if (rename(mw->tmp, mw->path) != 0)
      rc = sl_fail(SL_EIO, "cannot rename %s into place: %s", mw->tmp, strerror(errno));
    else {
      sl_fsync_parent(mw->path);
      st->has_mask = 1;
    }
  } else if (!rc) { /* a mask left from an earlier fine-tuning dataset at this prefix would be wrong now */
    char *p = NULL;
    if (asprintf(&p, "%s.lmask", c->output) >= 0) {
      unlink(p);
      free(p);
    }
  }
  return rc;
}

int sl_prepare(const sl_prep_cfg *c, sl_prep_stats *stp) {
  sl_prep_stats st;
  memset(&st, 0, sizeof st);
  double t0 = sl_now_s();
  int rc = check_output(c);
  if (rc) return rc;
  int nw = c->workers > 0 ? c->workers : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (nw < 1) nw = 1;
  if (nw > 256) nw = 256;
  job j;
  memset(&j, 0, sizeof j);
  j.cfg = c;
  j.nslot = 2 * nw + 2;
  j.use_mask = c->format != SL_PREP_TEXT;
  worker *ws = calloc((size_t)nw, sizeof *ws);
  pthread_t *th = calloc((size_t)nw, sizeof *th);
  j.slot = calloc((size_t)j.nslot, sizeof *j.slot);
  sl_dataset_builder *bld = NULL;
  mask_writer mw = {.fd = -1};
  rc = ws && th && j.slot ? SL_OK : sl_fail(SL_ENOMEM, "out of memory");
  int started = 0, reader_started = 0;
  pthread_t rd;
  if (!rc) rc = setup_template(&j);
  sl_tokenizer *tk = NULL;
  if (!rc) rc = load_tokenizer(c, &tk);
  for (int i = 0; i < nw && !rc; i++) {
    ws[i] = (worker){.j = &j, .tk = tk, .hf = c->tokenizer != NULL, .seg = malloc(MAXSEG * sizeof(segment))};
    if (!ws[i].seg) rc = sl_fail(SL_ENOMEM, "out of memory");
  }
  if (rc) goto out;
  st.vocab = sl_tokenizer_vocab_size(tk);
  st.eos = sl_tokenizer_eos_id(tk);
  st.bos = sl_tokenizer_bos_id(tk);
  if ((rc = special_ids(c, tk, &j))) goto out;
  st.dtype = st.vocab < 65500 ? SL_IDX_UINT16 : SL_IDX_INT32; /* Megatron's optimal_dtype */
  if ((rc = sl_dataset_builder_create(c->output, st.dtype, &bld))) goto out;
  if (j.use_mask && (rc = mask_open(&mw, c->output))) goto out;
  pthread_mutex_init(&j.mu, NULL);
  pthread_cond_init(&j.cv, NULL);
  for (; started < nw; started++)
    if (pthread_create(&th[started], NULL, worker_main, &ws[started])) break;
  reader_started = started == nw && pthread_create(&rd, NULL, reader_main, &j) == 0;
  if (!reader_started) {
    rc = sl_fail(SL_EINTERNAL, "prepare: cannot start threads");
    pthread_mutex_lock(&j.mu);
    j.stop = 1;
    pthread_cond_broadcast(&j.cv);
    pthread_mutex_unlock(&j.mu);
  }
  /* write batches in order */
  double last = 0;
  for (int64_t next = 0; reader_started && !rc;) {
    batch *b;
    int64_t in;
    int finished;
    rc = wait_batch(&j, next, &b, &in, &finished);
    if (c->progress && sl_now_s() - last > 0.25) {
      progress_line(&st, in, t0, 0);
      last = sl_now_s();
    }
    if (finished || rc) break;
    if (!b) continue;
    rc = write_batch(&j, bld, &mw, b, &st);
    next++;
  }
  pthread_mutex_lock(&j.mu);
  if (rc) j.stop = 1;
  pthread_cond_broadcast(&j.cv);
  pthread_mutex_unlock(&j.mu);
  if (reader_started) pthread_join(rd, NULL);
  pthread_mutex_lock(&j.mu);
  j.stop = 1; /* workers leave once the queue is drained or abandoned */
  pthread_cond_broadcast(&j.cv);
  pthread_mutex_unlock(&j.mu);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  st.bytes_in = j.bytes_in;
  if (!rc) rc = finish_outputs(&j, &bld, &mw, &st);
  if (c->progress && !rc) progress_line(&st, st.bytes_in, t0, 1);
out:
  if (bld) sl_dataset_builder_abort(bld);
  mask_close(&mw, st.has_mask);
  for (int i = 0; i < nw && ws; i++) free(ws[i].seg);
  sl_tokenizer_free(tk);
  if (j.slot) {
    for (int i = 0; i < j.nslot; i++) batch_free(&j.slot[i]);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
  }
  free(j.slot);
  free(ws);
  free(th);
  sl_chat_free(&j.chat);
  st.seconds = sl_now_s() - t0;
  if (stp) *stp = st;
  return rc;
}

/* ---- UTF-8 ------------------------------------------------------------------------ */
int sl_utf8_valid(const char *s, size_t n, size_t *bad) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    int len;
    unsigned cp, min;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
      min = 0x10000;
    } else goto fail;
    if (i + (size_t)len > n) goto fail;
    for (int k = 1; k < len; k++) {
      if ((p[i + k] & 0xC0) != 0x80) goto fail;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto fail;
    i += (size_t)len;
  }
  return 0;
fail:
  if (bad) *bad = i;
  return 1;
}

/* ---- the byte-level entry points of formats/dataset.h ------------------------------- */
static int prepare_bytes(const char *in, const char *mem_name, const char *text, size_t len, const char *out_prefix,
                         sl_prepare_stats *st) {
  sl_prep_cfg c = {.inputs = in ? &in : NULL,
                   .ninputs = in ? 1 : 0,
                   .mem_text = in ? NULL : text,
                   .mem_len = (int64_t)len,
                   .mem_name = mem_name,
                   .output = out_prefix,
                   .append_eod = 1,
                   .docs = SL_DOCS_BLANK,
                   .workers = 1};
  sl_prep_stats ps;
  int rc = sl_prepare(&c, &ps);
  if (!rc && st) *st = (sl_prepare_stats){ps.documents, ps.tokens};
  return rc;
}

int sl_prepare_text_mem(const char *name, const char *text, size_t len, const char *out_prefix, sl_prepare_stats *st) {
  return prepare_bytes(NULL, name ? name : "<text>", text ? text : "", len, out_prefix, st);
}

int sl_prepare_text(const char *input_path, const char *out_prefix, sl_prepare_stats *st) {
  return prepare_bytes(input_path, NULL, NULL, 0, out_prefix, st);
}
