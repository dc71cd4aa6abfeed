/* tools/generate_cmd.c — `shardlm generate`: sample a continuation of a
 * prompt from an HF model directory, one process: `--decode cache`
 * (models/generate.c: KV cache / recurrent state, the CPU) or `--decode
 * forward` (engine/fwd_session.c: each token from one training forward of the
 * window so far, any backend; the default on a device). The
 * tokenizer: --tokenizer, else the model directory's tokenizer.json; without
 * one the model must be byte-level (vocab_size 257..512, or --tokenizer
 * bytes): prompt bytes in, bytes out (end-of-document 256 stops). --prompt-ids and
 * --print-ids work on token ids directly (tests). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "data/tokenizer.h"
#include "engine/trainer.h"
#include "formats/dataset.h"
#include "formats/hfconfig.h"
#include "kernels/registry.h"
#include "models/generate.h"
#include "shard/comm.h"
#include "tools/tools.h"

static const char *USAGE =
    "usage: shardlm generate --model HF_DIR (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "       [--tokenizer DIR|tokenizer.json|bytes (default: HF_DIR/tokenizer.json; without one, a byte-level\n"
    "        model, vocab_size 257..512)]\n"
    "       [--max-new-tokens N (64)] [--temperature X (1.0; 0: greedy)] [--top-p P (1.0)] [--seed S (1234)]\n"
    "       [--print-ids] [--backend cpu|cuda|auto (cpu; auto: cuda when usable)] [--decode cache|forward (cache on\n"
    "        the CPU, forward on a device)] [--compute-dtype fp32|bf16|auto (auto; --decode forward)] [--threads N]\n"
    "  --decode cache: the K/V cache and recurrent states, one token a step (the CPU); forward: each new token\n"
    "  from one training forward of the window so far (every family, any backend; O(window) per token)\n";

/* ---- text <-> ids through the tokenizer (data/tokenizer.h) ---------------- */
typedef struct {
  const sl_tokenizer *tk;
  int bytes;    /* the byte-level tokenizer: ids are bytes, printed as they come */
  int32_t *gen; /* (cap) ids generated so far */
  int64_t n, cap;
  size_t printed; /* bytes of decode(gen) already written */
} emitter;

static int text_to_ids(const sl_tokenizer *tk, const char *text, int32_t **ids, int64_t *n) {
  return sl_tokenizer_encode(tk, text, strlen(text), ids, n);
}

/* Streams the decoded text: decode(all ids so far) and print what is new,
 * holding back an incomplete UTF-8 sequence (a byte-level BPE token can end
 * inside a character). */
static void emit_text(void *user, int32_t id) {
  emitter *e = user;
  if (e->bytes) {
    if (id >= 0 && id < 256) putchar(id);
    else if (id != SL_BYTE_EOD) printf("<|%d|>", id);
    fflush(stdout);
    return;
  }
  if (e->n == e->cap) {
    int64_t c = e->cap ? 2 * e->cap : 256;
    int32_t *g = realloc(e->gen, (size_t)c * sizeof *g);
    if (!g) return;
    e->gen = g;
    e->cap = c;
  }
  e->gen[e->n++] = id;
  char *txt = NULL;
  size_t len = 0;
  if (sl_tokenizer_decode(e->tk, e->gen, e->n, &txt, &len) == SL_OK && len > e->printed) {
    size_t end = len;
    if (len >= 3 && !memcmp(txt + len - 3, "\xef\xbf\xbd", 3)) end = len - 3; /* U+FFFD: wait for more */
    if (end > e->printed) {
      fwrite(txt + e->printed, 1, end - e->printed, stdout);
      e->printed = end;
    }
  }
  free(txt);
  fflush(stdout);
}
/* ------------------------------------------------------------------------------ */

static int parse_ids(const char *s, int32_t **ids, int64_t *n) {
  int64_t cap = 1;
  for (const char *p = s; *p; p++) cap += *p == ',';
  *ids = malloc((size_t)cap * sizeof(int32_t));
  if (!*ids) return sl_fail(SL_ENOMEM, "out of memory");
  *n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ','))
      return sl_fail(SL_EINPUT, "--prompt-ids expects comma-separated token ids like 1,2,3, found '%s'", s);
    (*ids)[(*n)++] = (int32_t)v;
    p = *end ? end + 1 : end;
  }
  return SL_OK;
}

static int num(const char *flag, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  *out = strtod(v, &end);
  if (!*v || *end || errno || !(*out >= lo && *out <= hi))
    return sl_fail(SL_EINPUT, "%s expects a number in [%g, %g], found '%s'", flag, lo, hi, v);
  return SL_OK;
}

static int one_of(const char *flag, const char *v, const char *a, const char *b, const char *c) {
  if (!strcmp(v, a) || !strcmp(v, b) || (c && !strcmp(v, c))) return SL_OK;
  if (!c) return sl_fail(SL_EINPUT, "%s must be %s or %s, found '%s'", flag, a, b, v);
  return sl_fail(SL_EINPUT, "%s must be %s, %s or %s, found '%s'", flag, a, b, c, v);
}

/* --decode forward: the engine's forward session (engine/trainer.h) as sl_generate's logits */
typedef struct {
  sl_fwd_session *s;
} fwd_user;
static int fwd_logits(void *user, const int32_t *seq, int64_t len, float *logits) {
  return sl_fwd_session_logits(((fwd_user *)user)->s, seq, len, logits);
}

int sl_tool_generate(int argc, char **argv) {
  const char *model = NULL, *tokenizer = NULL, *prompt = NULL, *prompt_ids = NULL;
  double max_new = 64, temp = 1.0, top_p = 1.0, seed = 1234;
  int print_ids = 0, rc = SL_OK;
  const char *backend = "cpu", *decode = NULL, *dtype = "auto";
  double threads = 0;
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(USAGE, stdout);
      return 0;
    }
    if (!strcmp(a, "--print-ids")) {
      print_ids = 1;
      continue;
    }
    if (!v) {
      rc = sl_fail(SL_EINPUT, "unexpected argument '%s' (or a flag without its value)", a);
      break;
    }
    i++;
    if (!strcmp(a, "--model")) model = v;
    else if (!strcmp(a, "--tokenizer")) tokenizer = v;
    else if (!strcmp(a, "--prompt")) prompt = v;
    else if (!strcmp(a, "--prompt-ids")) prompt_ids = v;
    else if (!strcmp(a, "--max-new-tokens")) rc = num(a, v, 0, 1e9, &max_new);
    else if (!strcmp(a, "--temperature")) rc = num(a, v, 0, 1e6, &temp);
    else if (!strcmp(a, "--top-p")) rc = num(a, v, 1e-9, 1, &top_p);
    else if (!strcmp(a, "--seed")) rc = num(a, v, 0, 9007199254740992.0, &seed);
    else if (!strcmp(a, "--backend")) rc = one_of(a, backend = v, "cpu", "cuda", "auto");
    else if (!strcmp(a, "--decode")) rc = one_of(a, decode = v, "cache", "forward", NULL);
    else if (!strcmp(a, "--compute-dtype")) rc = one_of(a, dtype = v, "fp32", "bf16", "auto");
    else if (!strcmp(a, "--threads")) rc = num(a, v, 0, 4096, &threads);
    else rc = sl_fail(SL_EINPUT, "unknown flag '%s'", a);
  }
  if (!rc && (!model || !prompt == !prompt_ids))
    rc = sl_fail(SL_EINPUT, "--model and one of --prompt TEXT / --prompt-ids IDS are required");
  /* the cache runs on the CPU; a device (--backend cuda, or auto's when one is usable) decodes by forward */
  if (!rc && !strcmp(backend, "auto")) {
    sl_backend_prepare();
    const sl_ops *ops = sl_backend_pick("auto", 1, "--backend");
    backend = ops && ops->is_device() ? "cuda" : "cpu";
  }
  if (!rc && !decode) decode = strcmp(backend, "cpu") ? "forward" : "cache";
  int fwd = decode && !strcmp(decode, "forward");
  if (!rc && !fwd && strcmp(backend, "cpu"))
    rc = sl_fail(SL_EINPUT, "--decode cache runs on the CPU (models/generate.c); --backend %s needs --decode forward",
                 backend);
  if (rc) {
    fprintf(stderr, "shardlm generate: %s\n%s", sl_errmsg(), USAGE);
    return 2;
  }
  int32_t *ids = NULL, *out = NULL;
  int64_t n = 0, nout = 0;
  sl_gen *g = NULL;
  sl_tokenizer *tk = NULL;
  emitter em = {0};
  /* no --tokenizer: the model directory's own tokenizer.json; without one, the byte-level tokenizer (implicit) */
  char own[4200];
  snprintf(own, sizeof own, "%s/tokenizer.json", model);
  int given = tokenizer != NULL;
  if (!tokenizer && access(own, R_OK) == 0) {
    tokenizer = own;
    fprintf(stderr, "shardlm generate: tokenizer %s (the model's; --tokenizer overrides)\n", own);
  }
  int bytes = !tokenizer || !strcmp(tokenizer, "bytes"), text = prompt || !print_ids;
  rc = bytes ? sl_tokenizer_bytes(&tk) : sl_tokenizer_load(tokenizer, &tk);
  if (!rc) rc = prompt_ids ? parse_ids(prompt_ids, &ids, &n) : text_to_ids(tk, prompt, &ids, &n);
  if (!rc) rc = fwd ? sl_gen_load_config(model, &g) : sl_gen_load(model, &g);
  if (!rc && !bytes && sl_tokenizer_vocab_size(tk) > sl_gen_vocab(g))
    rc = sl_fail(SL_EINPUT, "%s: the tokenizer has %lld ids but %s has vocab_size %lld: they do not belong together",
                 tokenizer, (long long)sl_tokenizer_vocab_size(tk), model, (long long)sl_gen_vocab(g));
  if (!rc && prompt && n == 0) rc = sl_fail(SL_EINPUT, "--prompt: the prompt encodes to no tokens");
  if (!rc && prompt && bytes && sl_gen_vocab(g) < SL_BYTE_VOCAB)
    rc = sl_fail(SL_EINPUT,
                 "--prompt without a tokenizer needs a byte-level model (vocab_size >= %d); %s has "
                 "vocab_size %lld (use --prompt-ids)",
                 SL_BYTE_VOCAB, model, (long long)sl_gen_vocab(g));
  /* bytes fed to (or printed from) a large vocabulary are garbage: only a byte-level model goes without one */
  if (!rc && text && bytes && !given && sl_gen_vocab(g) > SL_BYTE_VOCAB_MAX)
    rc = sl_fail(SL_EINPUT,
                 "%s has no tokenizer.json and its vocab_size %lld is not byte-level (%d..%d): %s would be "
                 "bytes. Pass --tokenizer DIR|tokenizer.json (the model's tokenizer), --tokenizer bytes if it was "
                 "trained on shardlm's byte tokens, or --prompt-ids with --print-ids",
                 model, (long long)sl_gen_vocab(g), SL_BYTE_VOCAB, SL_BYTE_VOCAB_MAX,
                 prompt ? "the prompt's ids" : "the printed text");
  if (!rc && !(out = malloc(sizeof(int32_t) * (size_t)(max_new > 0 ? max_new : 1))))
    rc = sl_fail(SL_ENOMEM, "out of memory");
  sl_comm *world = NULL;
  fwd_user fu = {0};
  if (!rc && fwd) { /* the window: the prompt and the new tokens, within the model's context */
    int64_t T = n + (int64_t)max_new, ctx = sl_gen_context(g);
    if (ctx > 0 && T > ctx) T = ctx;
    sl_train_cfg cfg;
    sl_train_cfg_defaults(&cfg);
    snprintf(cfg.model, sizeof cfg.model, "%s", model);
    snprintf(cfg.backend, sizeof cfg.backend, "%s", backend);
    snprintf(cfg.compute_dtype, sizeof cfg.compute_dtype, "%s", dtype);
    cfg.threads = (int64_t)threads;
    if (!sl_env_set("SL_LOG")) sl_log_set_level(SL_LOG_WARN); /* the session's start-up lines would mix with the text */
    if (sl_comm_world_init(&argc, &argv, cfg.comm_timeout, &world) != SL_COMM_OK)
      rc = sl_fail(SL_ECOMM, "cannot start communication: %s", sl_comm_last_error());
    if (!rc) rc = sl_fwd_session_open(&cfg, world, T > n ? T : n, &fu.s);
  }
  if (!rc) {
    int32_t stop[SL_MAX_EOS + 2];
    int nstop = sl_gen_eos_list(g, stop, SL_MAX_EOS);
    if (!bytes && sl_tokenizer_eos_id(tk) >= 0) stop[nstop++] = sl_tokenizer_eos_id(tk);
    if (prompt && bytes) stop[nstop++] = SL_BYTE_EOD;
    em = (emitter){.tk = tk, .bytes = bytes};
    sl_gen_opts o = {.temperature = temp,
                     .top_p = top_p,
                     .seed = (uint64_t)seed,
                     .max_new = (int64_t)max_new,
                     .stop = stop,
                     .nstop = nstop,
                     .emit = print_ids ? NULL : emit_text,
                     .user = &em,
                     .forward = fwd ? fwd_logits : NULL,
                     .forward_user = &fu};
    if (!print_ids && prompt) fputs(prompt, stdout);
    rc = sl_generate(g, ids, n, &o, out, &nout);
    if (!rc && print_ids) {
      for (int64_t i = 0; i < nout; i++) printf("%s%d", i ? "," : "", out[i]);
    }
    if (!rc) printf("\n");
    if (!rc && nout < (int64_t)max_new && sl_gen_context(g) > 0 && n + nout >= sl_gen_context(g))
      fprintf(stderr, "shardlm generate: stopped at the model's context of %lld positions\n",
              (long long)sl_gen_context(g));
  }
  if (rc) fprintf(stderr, "shardlm generate: %s\n", sl_errmsg());
  free(ids);
  free(out);
  free(em.gen);
  sl_fwd_session_close(fu.s);
  if (world) {
    sl_comm_destroy(world);
    sl_comm_world_finalize();
  }
  sl_gen_free(g);
  sl_tokenizer_free(tk);
  return rc == SL_OK ? 0 : rc == SL_EINPUT ? 2 : 1;
}
