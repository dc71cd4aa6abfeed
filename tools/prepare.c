/* tools/prepare.c — `shardlm prepare`: flags -> sl_prep_cfg, a progress
 * line on a terminal, a one-line summary. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "data/chat.h"
#include "data/prepare.h"
#include "formats/dataset.h"
#include "tools/tools.h"

static void usage(FILE *f) {
  fprintf(f, "usage: shardlm prepare --input FILE [--input FILE ...] --output PREFIX [flags]\n"
             "Writes a Megatron indexed dataset PREFIX.bin + PREFIX.idx (+ PREFIX.lmask for the\n"
             "fine-tuning formats). Inputs by suffix: .jsonl / .json / .ndjson rows, or text; any of\n"
             "them may be compressed (.gz, .zst).\n"
             "  --tokenizer PATH      tokenizer.json or a model directory holding it (default: the\n"
             "                        built-in byte-level tokenizer: bytes 0-255, end-of-document 256)\n"
             "  --format F            text (default) | prompt-completion | messages\n"
             "  --json-key KEY        --format text: the row's text field (default: text)\n"
             "  --chat-template T     --format messages: a preset of a family's published template,\n"
             "                        chatml | qwen2.5 | qwen3 | gemma | llama3 (docs/formats.md), or\n"
             "                        each message rendered as T, with {role} and {content} (\\n and\n"
             "                        \\t escapes); only assistant content + the part after {content}\n"
             "                        count in the loss\n"
             "  --chat-role FROM=TO   spell role FROM as TO in the template (e.g. assistant=model;\n"
             "                        repeatable; the gemma preset has that one built in)\n"
             "  --split-lines         .txt: every non-empty line is a document\n"
             "  --split-blank-lines   .txt: documents separated by blank lines (the default)\n"
             "  --doc-per-file        .txt: each file is one document\n"
             "  --append-eod          end every document with the tokenizer's end-of-sequence id\n"
             "                        (default: on for byte-level, off for a tokenizer)\n"
             "  --no-append-eod       do not\n"
             "  --prepend-bos         start every document with the tokenizer's beginning-of-sequence id\n"
             "  --skip-bad            count and skip bad rows (invalid JSON or UTF-8, a missing key)\n"
             "                        instead of stopping at the first\n"
             "  --strict              refuse a document holding a character the tokenizer has no\n"
             "                        vocabulary entry for (BPE without byte fallback or unk token:\n"
             "                        such characters are dropped, counted and warned about)\n"
             "  --workers N           tokenizing threads (default: online CPUs)\n"
             "  --quiet               no progress line or summary\n");
}

/* After a successful run: the dropped-characters warning, then (unless quiet) the summary line. */
static void report(const sl_prep_cfg *c, const sl_prep_stats *st, int quiet) {
  if (st->dropped)
    fprintf(stderr,
            "shardlm prepare: warning: %lld characters in %lld documents have no vocabulary entry and were dropped "
            "(the tokenizer has neither byte fallback nor an unk token; Hugging Face tokenizers drops them too), "
            "the first '%s' at %s:%lld; --strict refuses such documents\n",
            (long long)st->dropped, (long long)st->dropped_docs, st->drop_char, st->drop_file,
            (long long)st->drop_line);
  if (!quiet) {
    if (st->has_mask) printf("wrote %s.bin, %s.idx and %s.lmask", c->output, c->output, c->output);
    else printf("wrote %s.bin and %s.idx", c->output, c->output);
    printf(": %lld documents, %lld tokens (%s, vocab %lld", (long long)st->documents, (long long)st->tokens,
           st->dtype == SL_IDX_UINT16 ? "uint16" : "int32", (long long)st->vocab);
    if (!c->tokenizer) printf(", byte-level, end-of-document %d", SL_BYTE_EOD);
    else {
      printf(st->eos < 0 ? ", eos none" : ", eos %d", st->eos);
      printf(st->bos < 0 ? ", bos none" : ", bos %d", st->bos);
    }
    printf(")");
    if (st->has_mask) printf(", %lld of them counted in the loss", (long long)st->loss_tokens);
    if (st->skipped) printf(", %lld bad rows skipped", (long long)st->skipped);
    printf("; %.1f MB read in %.2f s, %.0f tokens/s\n", st->bytes_in / 1e6, st->seconds,
           st->seconds > 0 ? st->tokens / st->seconds : 0.0);
  }
}

int sl_tool_prepare(int argc, char **argv) {
  sl_prep_cfg c = {.append_eod = -1, .docs = SL_DOCS_BLANK};
  const char **inputs = calloc((size_t)argc, sizeof(char *));
  const char *roles[SL_CHAT_MAXROLES];
  int quiet = 0, rc = 0;
  if (!inputs) return 1;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                                                                        \
  do {                                                                                                                 \
    if (!v) {                                                                                                          \
      fprintf(stderr, "shardlm prepare: %s needs a value (see --help)\n", a);                                          \
      free(inputs);                                                                                                    \
      return 2;                                                                                                        \
    }                                                                                                                  \
    i++;                                                                                                               \
  } while (0)
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      free(inputs);
      return 0;
    } else if (!strcmp(a, "--input")) {
      NEEDV();
      inputs[c.ninputs++] = v;
    } else if (!strcmp(a, "--output")) {
      NEEDV();
      c.output = v;
    } else if (!strcmp(a, "--tokenizer")) {
      NEEDV();
      c.tokenizer = v;
    } else if (!strcmp(a, "--json-key")) {
      NEEDV();
      c.json_key = v;
    } else if (!strcmp(a, "--chat-template")) {
      NEEDV();
      c.chat_template = v;
    } else if (!strcmp(a, "--chat-role")) {
      NEEDV();
      if (c.nchat_roles == SL_CHAT_MAXROLES - 1) {
        fprintf(stderr, "shardlm prepare: --chat-role: at most %d of them\n", SL_CHAT_MAXROLES - 1);
        free(inputs);
        return 2;
      }
      roles[c.nchat_roles++] = v;
    } else if (!strcmp(a, "--format")) {
      NEEDV();
      if (!strcmp(v, "text")) c.format = SL_PREP_TEXT;
      else if (!strcmp(v, "prompt-completion")) c.format = SL_PREP_PROMPT_COMPLETION;
      else if (!strcmp(v, "messages")) c.format = SL_PREP_MESSAGES;
      else {
        fprintf(stderr, "shardlm prepare: --format must be text, prompt-completion or messages, found '%s'\n", v);
        free(inputs);
        return 2;
      }
    } else if (!strcmp(a, "--workers")) {
      NEEDV();
      char *end;
      long n = strtol(v, &end, 10);
      if (*end || end == v || n < 1 || n > 256) {
        fprintf(stderr, "shardlm prepare: --workers must be an integer in [1, 256], found '%s'\n", v);
        free(inputs);
        return 2;
      }
      c.workers = (int)n;
    } else if (!strcmp(a, "--split-lines")) c.docs = SL_DOCS_LINES;
    else if (!strcmp(a, "--split-blank-lines")) c.docs = SL_DOCS_BLANK;
    else if (!strcmp(a, "--doc-per-file")) c.docs = SL_DOCS_FILE;
    else if (!strcmp(a, "--append-eod")) c.append_eod = 1;
    else if (!strcmp(a, "--no-append-eod")) c.append_eod = 0;
    else if (!strcmp(a, "--prepend-bos")) c.prepend_bos = 1;
    else if (!strcmp(a, "--skip-bad")) c.skip_bad = 1;
    else if (!strcmp(a, "--quiet")) quiet = 1;
    else if (!strcmp(a, "--strict")) c.strict = 1;
    else {
      fprintf(stderr, "shardlm prepare: unexpected argument '%s' (see --help)\n", a);
      free(inputs);
      return 2;
    }
#undef NEEDV
  }
  if (c.ninputs == 0 || !c.output) {
    fprintf(stderr, "shardlm prepare: --input FILE and --output PREFIX are required (see --help)\n");
    free(inputs);
    return 2;
  }
  c.inputs = inputs;
  c.chat_roles = roles;
  c.progress = !quiet && isatty(STDERR_FILENO);
  sl_prep_stats st;
  rc = sl_prepare(&c, &st);
  free(inputs);
  if (rc) {
    fprintf(stderr, "shardlm prepare: %s\n", sl_errmsg());
    return rc == SL_EINPUT ? 2 : 1;
  }
  report(&c, &st, quiet);
  return 0;
}
