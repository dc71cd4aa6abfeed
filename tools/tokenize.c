/* tools/tokenize.c — `shardlm tokenize` (text -> ids), `shardlm detok`
 * (ids -> text) and `shardlm bench tokenizer` (tokens/s on a corpus), all
 * through data/tokenizer.h. For tests, debugging and measurements. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "data/tokenizer.h"
#include "tools/tools.h"

static int exit_of(int rc) { return rc == SL_OK ? 0 : rc == SL_EINPUT ? 2 : 1; }

static char *slurp(const char *path, size_t *n) {
  FILE *f = path ? fopen(path, "rb") : stdin;
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *b = malloc(cap);
  size_t r;
  while (b && (r = fread(b + len, 1, cap - len - 1, f)) > 0) {
    len += r;
    if (cap - len < 2) {
      char *nb = realloc(b, cap * 2);
      if (!nb) {
        free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap *= 2;
    }
  }
  if (b) b[len] = 0;
  if (path) fclose(f);
  *n = len;
  return b;
}

typedef struct {
  const char *tok, *input;
  int ids, jsonl, lines, info;
} tk_args;

static int parse(const char *cmd, int argc, char **argv, tk_args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) a->tok = argv[++i];
    else if (!strcmp(argv[i], "--input") && i + 1 < argc) a->input = argv[++i];
    else if (!strcmp(argv[i], "--ids")) a->ids = 1;
    else if (!strcmp(argv[i], "--jsonl")) a->jsonl = 1;
    else if (!strcmp(argv[i], "--lines")) a->lines = 1;
    else if (!strcmp(argv[i], "--info")) a->info = 1;
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    else {
      fprintf(stderr, "shardlm %s: unexpected argument '%s' (see --help)\n", cmd, argv[i]);
      return 2;
    }
  }
  if (!a->tok) {
    fprintf(stderr, "shardlm %s: --tokenizer PATH is required (a tokenizer.json, its directory, or 'bytes')\n", cmd);
    return 2;
  }
  return 0;
}

static int load(const char *cmd, const char *path, sl_tokenizer **t) {
  int rc = !strcmp(path, "bytes") ? sl_tokenizer_bytes(t) : sl_tokenizer_load(path, t);
  if (rc) fprintf(stderr, "shardlm %s: %s\n", cmd, sl_errmsg());
  return rc;
}

/* Documents of a buffer: the whole buffer, its lines, or its JSONL lines
 * (each a JSON string or an object with "text"). Calls fn per document. */
typedef int (*doc_fn)(void *ctx, const char *text, size_t len, long line);
static int for_docs(char *buf, size_t n, int lines, int jsonl, doc_fn fn, void *ctx) {
  if (!lines && !jsonl) return fn(ctx, buf, n, 1);
  long ln = 0;
  for (size_t i = 0; i < n;) {
    char *e = memchr(buf + i, '\n', n - i);
    size_t end = e ? (size_t)(e - buf) : n;
    ln++;
    int rc;
    if (jsonl) {
      if (end == i) {
        i = end + 1;
        continue;
      }
      json_error_t err;
      json_t *j = json_loadb(buf + i, end - i, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
      json_t *s = json_is_object(j) ? json_object_get(j, "text") : j;
      if (!json_is_string(s)) {
        json_decref(j);
        return sl_fail(SL_EINPUT, "line %ld: expected a JSON string or {\"text\": ...}%s%s", ln, j ? "" : ": ",
                       j ? "" : err.text);
      }
      rc = fn(ctx, json_string_value(s), json_string_length(s), ln);
      json_decref(j);
    } else rc = fn(ctx, buf + i, end - i, ln);
    if (rc) return rc;
    i = end + 1;
  }
  return SL_OK;
}

typedef struct {
  const sl_tokenizer *t;
  const tk_args *a;
  int64_t tokens;
} enc_ctx;

static int enc_one(void *vc, const char *text, size_t len, long line) {
  enc_ctx *c = vc;
  int32_t *ids = NULL;
  int64_t n = 0;
  int rc = sl_tokenizer_encode(c->t, text, len, &ids, &n);
  if (rc) return sl_fail_ctx(rc, "line %ld", line);
  for (int64_t i = 0; i < n; i++) {
    if (c->a->ids) {
      printf(i ? " %d" : "%d", ids[i]);
      continue;
    }
    char *s = NULL;
    size_t sl = 0;
    if (sl_tokenizer_decode(c->t, ids + i, 1, &s, &sl) == SL_OK) {
      json_t *js = json_stringn(s, sl);
      char *d = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
      printf("%s%d:%s", i ? " " : "", ids[i], d ? d : "?");
      free(d);
      json_decref(js);
    }
    free(s);
  }
  printf("\n");
  free(ids);
  return SL_OK;
}

int sl_tool_tokenize(int argc, char **argv) {
  tk_args a;
  int p = parse("tokenize", argc, argv, &a);
  if (p) {
    if (p == 1)
      printf("usage: shardlm tokenize --tokenizer PATH|bytes [--input FILE] [--ids] [--lines|--jsonl] [--info]\n"
             "  prints the ids of the text (stdin or FILE; per line with --lines; per JSON string or\n"
             "  {\"text\":...} line with --jsonl), one line per text; without --ids each id with its token.\n"
             "  --info: vocabulary size, end-of-sequence and beginning-of-sequence ids as JSON\n");
    return p == 1 ? 0 : 2;
  }
  sl_tokenizer *t = NULL;
  int lrc = load("tokenize", a.tok, &t);
  if (lrc) return exit_of(lrc);
  if (a.info) {
    printf("{\"vocab_size\": %lld, \"eos_id\": %d, \"bos_id\": %d}\n", (long long)sl_tokenizer_vocab_size(t),
           sl_tokenizer_eos_id(t), sl_tokenizer_bos_id(t));
    sl_tokenizer_free(t);
    return 0;
  }
  size_t n = 0;
  char *buf = slurp(a.input, &n);
  if (!buf) {
    fprintf(stderr, "shardlm tokenize: cannot read %s\n", a.input ? a.input : "stdin");
    sl_tokenizer_free(t);
    return 2;
  }
  enc_ctx c = {t, &a, 0};
  int rc = for_docs(buf, n, a.lines, a.jsonl, enc_one, &c);
  if (rc) fprintf(stderr, "shardlm tokenize: %s%s%s\n", a.input ? a.input : "stdin", ": ", sl_errmsg());
  free(buf);
  sl_tokenizer_free(t);
  return exit_of(rc);
}

/* ids of one line -> text */
static int detok_line(const sl_tokenizer *t, char *s, size_t n, long line, int jsonl) {
  int32_t *ids = malloc((n / 2 + 1) * sizeof *ids);
  int64_t k = 0;
  int rc = ids ? SL_OK : sl_fail(SL_ENOMEM, "out of memory");
  char *p = s, *end = s + n;
  while (!rc && p < end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == ',')) p++;
    if (p >= end) break;
    char *e;
    long v = strtol(p, &e, 10);
    if (e == p || e > end || v < INT32_MIN || v > INT32_MAX)
      rc = sl_fail(SL_EINPUT, "line %ld: expected token ids, found '%.20s'", line, p);
    ids[k++] = (int32_t)v;
    p = e;
  }
  char *text = NULL;
  size_t len = 0;
  if (!rc) rc = sl_tokenizer_decode(t, ids, k, &text, &len);
  if (!rc && jsonl) {
    json_t *js = json_stringn(text, len);
    char *d = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
    printf("%s\n", d ? d : "null");
    free(d);
    json_decref(js);
  } else if (!rc) fwrite(text, 1, len, stdout);
  if (rc && !strstr(sl_errmsg(), "line ")) sl_fail_ctx(rc, "line %ld", line);
  free(text);
  free(ids);
  return rc;
}

int sl_tool_detok(int argc, char **argv) {
  tk_args a;
  int p = parse("detok", argc, argv, &a);
  if (p) {
    if (p == 1)
      printf("usage: shardlm detok --tokenizer PATH|bytes [--input FILE] [--jsonl]\n"
             "  reads ids (stdin or FILE, separated by spaces/commas) and writes the text; with --jsonl\n"
             "  each input line is one sequence and its text is written as a JSON string line\n");
    return p == 1 ? 0 : 2;
  }
  sl_tokenizer *t = NULL;
  int lrc = load("detok", a.tok, &t);
  if (lrc) return exit_of(lrc);
  size_t n = 0;
  char *buf = slurp(a.input, &n);
  int rc = buf ? SL_OK : sl_fail(SL_EINPUT, "cannot read %s", a.input ? a.input : "stdin");
  if (!rc && !a.jsonl) {
    for (size_t i = 0; i < n; i++)
      if (buf[i] == '\n') buf[i] = ' ';
    rc = detok_line(t, buf, n, 1, 0);
  }
  long ln = 0;
  for (size_t i = 0; !rc && a.jsonl && i < n;) {
    char *e = memchr(buf + i, '\n', n - i);
    size_t end = e ? (size_t)(e - buf) : n;
    rc = detok_line(t, buf + i, end - i, ++ln, 1);
    i = end + 1;
  }
  if (rc) fprintf(stderr, "shardlm detok: %s\n", sl_errmsg());
  free(buf);
  sl_tokenizer_free(t);
  return exit_of(rc);
}

typedef struct {
  const sl_tokenizer *t;
  int64_t tokens, docs;
  size_t bytes;
} bench_ctx;

static int bench_one(void *vc, const char *text, size_t len, long line) {
  bench_ctx *c = vc;
  int32_t *ids = NULL;
  int64_t n = 0;
  int rc = sl_tokenizer_encode(c->t, text, len, &ids, &n);
  free(ids);
  if (rc) return sl_fail_ctx(rc, "line %ld", line);
  c->tokens += n;
  c->docs++;
  c->bytes += len;
  return SL_OK;
}

/* shardlm bench tokenizer --tokenizer PATH --input FILE [--lines|--jsonl] [--repeat N] */
int sl_tool_tokenize_bench(int argc, char **argv) {
  int repeat = 1;
  char **args = calloc((size_t)argc + 1, sizeof *args);
  int na = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
    else args[na++] = argv[i];
  }
  tk_args a;
  int p = parse("bench tokenizer", na, args, &a);
  free(args);
  if (p || !a.input || repeat < 1) {
    fprintf(p == 1 ? stdout : stderr,
            "usage: shardlm bench tokenizer --tokenizer PATH --input FILE [--lines|--jsonl] [--repeat N]\n"
            "  one thread; prints documents, tokens and tokens/s of encode (the tokenizer load not counted)\n");
    return p == 1 ? 0 : 2;
  }
  sl_tokenizer *t = NULL;
  double t0 = sl_now_s();
  int lrc = load("bench tokenizer", a.tok, &t);
  if (lrc) return exit_of(lrc);
  double tload = sl_now_s() - t0;
  size_t n = 0;
  char *buf = slurp(a.input, &n);
  if (!buf) {
    fprintf(stderr, "shardlm bench tokenizer: cannot read %s\n", a.input);
    sl_tokenizer_free(t);
    return 2;
  }
  bench_ctx c = {t, 0, 0, 0};
  int rc = SL_OK;
  t0 = sl_now_s();
  for (int r = 0; !rc && r < repeat; r++) rc = for_docs(buf, n, a.lines, a.jsonl, bench_one, &c);
  double dt = sl_now_s() - t0;
  if (rc) fprintf(stderr, "shardlm bench tokenizer: %s: %s\n", a.input, sl_errmsg());
  else
    printf("{\"bench\": \"tokenizer\", \"threads\": 1, \"docs\": %lld, \"bytes\": %zu, \"tokens\": %lld, \"seconds\": "
           "%.3f, "
           "\"tokens_per_s\": %.0f, \"mb_per_s\": %.2f, \"load_s\": %.3f}\n",
           (long long)c.docs, c.bytes, (long long)c.tokens, dt, c.tokens / dt, c.bytes / dt / 1e6, tload);
  free(buf);
  sl_tokenizer_free(t);
  return exit_of(rc);
}
