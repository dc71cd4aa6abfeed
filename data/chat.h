/* data/chat.h — `prepare --format messages`: a row's messages rendered as
 * the pieces to encode (text + loss-mask byte), by a per-message template
 * holding {content} and {role} (each any number of times, anywhere) or a
 * named preset of a family's published chat template (chatml, qwen2.5,
 * qwen3, gemma, llama3; docs/formats.md). */
#ifndef SL_DATA_CHAT_H
#define SL_DATA_CHAT_H

#include <jansson.h>
#include <stddef.h>

#define SL_CHAT_MAXROLES 8

typedef struct {
  char *head, *tail;          /* the template split at its first {content}; escapes (\n \t \\) applied; every
                               * {role} of both and every later {content} (in tail) is rendered */
  const char *preset;         /* its name, NULL for a literal template */
  int trim;                   /* content | trim (Python str.strip), as Gemma's and Llama 3's templates */
  int bos;                    /* the template starts with bos_token */
  int gemma;                  /* a leading system message joins the first user turn; roles alternate */
  int qwen3;                  /* reasoning: "<think>\n{r}\n</think>\n\n" on assistant turns after the last query */
  int qwen;                   /* tool calls / tool messages are refused (rendered otherwise by Qwen's templates) */
  const char *default_system; /* rendered first when the row has no leading system message */
  const char *from[SL_CHAT_MAXROLES], *to[SL_CHAT_MAXROLES]; /* role map: from[i] (nfrom[i] bytes) -> to[i] */
  size_t nfrom[SL_CHAT_MAXROLES];
  int nroles;
} sl_chat;

/* tmpl: a preset name or a literal template; roles: "FROM=TO" strings (nroles
 * of them, applied before the preset's own). SL_EINPUT with a message on bad input. */
int sl_chat_setup(const char *tmpl, const char *const *roles, int nroles, sl_chat *c);
void sl_chat_free(sl_chat *c);

typedef struct {
  const char *s; /* text to encode: a slice of the row or own */
  size_t n;
  int mask;     /* loss-mask byte of its tokens */
  char *own;    /* allocated for this piece (freed by sl_chat_pieces_free), or NULL */
  size_t nhead; /* > 0: s[0..nhead) is a message's head, whose tokens never count: the
                 * tokens of s that begin like the encoding of the head alone get 0 */
} sl_chat_piece;

/* Renders the messages array of one row into pieces (at most cap), one per
 * message: head + content + tail encoded together, as transformers tokenizes
 * the rendered text (a token may straddle the head and the content); a
 * message in err (errcap bytes) on bad input, returning SL_EINPUT. */
int sl_chat_render(const sl_chat *c, json_t *msgs, sl_chat_piece *p, int cap, int *np, char *err, size_t errcap);
void sl_chat_pieces_free(sl_chat_piece *p, int n);

#endif
