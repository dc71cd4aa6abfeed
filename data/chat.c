/* data/chat.c — chat templates of `prepare --format messages` (data/chat.h).
 * The presets follow the families' published Jinja chat_template of
 * tokenizer_config.json for rows of {"role", "content"} messages with
 * add_generation_prompt false (Qwen3's reasoning content included); what
 * those templates render otherwise (tools) is refused per row. */
#define _GNU_SOURCE
#include "data/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

typedef struct {
  const char *name, *tmpl;
  int trim, bos, gemma, qwen3, qwen;
  const char *default_system;
  const char *from, *to;
} preset;

static const preset k_presets[] = {
    {"chatml", "<|im_start|>{role}\\n{content}<|im_end|>\\n", 0, 0, 0, 0, 0, NULL, NULL, NULL},
    {"qwen2.5", "<|im_start|>{role}\\n{content}<|im_end|>\\n", 0, 0, 0, 0, 1,
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n", NULL,
     NULL},
    {"qwen3", "<|im_start|>{role}\\n{content}<|im_end|>\\n", 0, 0, 0, 1, 1, NULL, NULL, NULL},
    {"gemma", "<start_of_turn>{role}\\n{content}<end_of_turn>\\n", 1, 1, 1, 0, 0, NULL, "assistant", "model"},
    {"llama3", "<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>", 1, 1, 0, 0, 0, NULL, NULL, NULL},
};
#define NPRESETS (int)(sizeof k_presets / sizeof k_presets[0])

void sl_chat_free(sl_chat *c) {
  free(c->head);
  free(c->tail);
  c->head = c->tail = NULL;
}

/* \n, \t and \\ escapes, as a shell passes them literally */
static char *unescape(const char *t) {
  char *u = malloc(strlen(t) + 1), *w = u;
  if (!u) return NULL;
  for (const char *p = t; *p; p++) {
    if (p[0] == '\\' && (p[1] == 'n' || p[1] == 't' || p[1] == '\\')) {
      *w++ = p[1] == 'n' ? '\n' : p[1] == 't' ? '\t' : '\\';
      p++;
    } else *w++ = *p;
  }
  *w = 0;
  return u;
}

int sl_chat_setup(const char *t, const char *const *roles, int nroles, sl_chat *c) {
  memset(c, 0, sizeof *c);
  if (!t || !*t)
    return sl_fail(SL_EINPUT,
                   "--format messages needs --chat-template: a preset (chatml, qwen2.5, qwen3, gemma, llama3) or a "
                   "template with {role} and {content}, e.g. '<|im_start|>{role}\\n{content}<|im_end|>\\n' (ChatML); "
                   "Jinja templates are not supported");
  const preset *p = NULL;
  for (int i = 0; i < NPRESETS; i++)
    if (!strcmp(t, k_presets[i].name)) p = &k_presets[i];
  if (p) {
    t = p->tmpl;
    *c = (sl_chat){.preset = p->name,
                   .trim = p->trim,
                   .bos = p->bos,
                   .gemma = p->gemma,
                   .qwen3 = p->qwen3,
                   .qwen = p->qwen,
                   .default_system = p->default_system};
  }
  if (!strstr(t, "{content}"))
    return sl_fail(SL_EINPUT,
                   "--chat-template must be a preset (chatml, qwen2.5, qwen3, gemma, llama3) or contain {content}, "
                   "found '%s'",
                   t);
  if (nroles + (p && p->from) > SL_CHAT_MAXROLES)
    return sl_fail(SL_EINPUT, "--chat-role: at most %d role names", SL_CHAT_MAXROLES - 1);
  for (int i = 0; i < nroles; i++) {
    const char *eq = strchr(roles[i], '=');
    if (!eq || eq == roles[i] || !eq[1])
      return sl_fail(SL_EINPUT, "--chat-role expects FROM=TO (e.g. assistant=model), found '%s'", roles[i]);
    c->from[c->nroles] = roles[i];
    c->nfrom[c->nroles] = (size_t)(eq - roles[i]);
    c->to[c->nroles++] = eq + 1;
  }
  if (p && p->from) {
    c->from[c->nroles] = p->from;
    c->nfrom[c->nroles] = strlen(p->from);
    c->to[c->nroles++] = p->to;
  }
  char *u = unescape(t);
  if (!u) return SL_ENOMEM;
  char *uc = strstr(u, "{content}");
  *uc = 0;
  c->head = strdup(u);
  c->tail = strdup(uc + 9);
  free(u);
  if (!c->head || !c->tail) {
    sl_chat_free(c);
    return SL_ENOMEM;
  }
  return SL_OK;
}

/* The role as the template spells it: the first FROM=TO matching. */
static const char *map_role(const sl_chat *c, const char *role) {
  size_t n = strlen(role);
  for (int i = 0; i < c->nroles; i++)
    if (c->nfrom[i] == n && !strncmp(c->from[i], role, n)) return c->to[i];
  return role;
}

/* A part of the template (head or tail) with every "{role}" replaced by
 * role and every "{content}" by body[0..nb), in one pass (what is
 * substituted is not scanned again). *n: its length. */
static char *render_part(const char *t, const char *role, const char *body, size_t nb, size_t *n) {
  size_t cap = strlen(t) + 1, rl = strlen(role);
  for (const char *p = t; (p = strstr(p, "{role}")); p += 6) cap += rl;
  for (const char *p = t; (p = strstr(p, "{content}")); p += 9) cap += nb;
  char *o = malloc(cap), *w = o;
  if (!o) return NULL;
  for (const char *p = t; *p;) {
    if (!strncmp(p, "{role}", 6)) {
      memcpy(w, role, rl);
      w += rl;
      p += 6;
    } else if (!strncmp(p, "{content}", 9)) {
      if (nb) memcpy(w, body, nb);
      w += nb;
      p += 9;
    } else *w++ = *p++;
  }
  *w = 0;
  *n = (size_t)(w - o);
  return o;
}

/* Python's str.isspace over the UTF-8 character at s (*len its bytes; 0 if not space). */
static int py_space(const unsigned char *s, size_t n) {
  if (n >= 1 && ((s[0] >= 9 && s[0] <= 13) || (s[0] >= 0x1c && s[0] <= 0x20))) return 1;
  if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
  if (n >= 3 && s[0] == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3; /* U+1680 */
  if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 &&
      (s[2] <= 0x8A || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF)) /* U+2000-200A, 2028, 2029, 202F */
    return 3;
  if (n >= 3 && s[0] == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3; /* U+205F */
  if (n >= 3 && s[0] == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
  return 0;
}

/* Jinja's trim (Python str.strip()) of s[0..*n): moves s, shortens *n. */
static const char *py_strip(const char *s, size_t *n) {
  int k;
  while (*n && (k = py_space((const unsigned char *)s, *n))) s += k, *n -= (size_t)k;
  for (size_t e = *n; e > 0;) { /* scan back to the start of the last character */
    size_t b = e - 1;
    while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
    if (py_space((const unsigned char *)s + b, e - b) != (int)(e - b)) break;
    e = b;
    *n = e;
  }
  return s;
}

static int piece(sl_chat_piece *p, int cap, int *np, const char *s, size_t n, int mask, char *own, char *err,
                 size_t errcap) {
  if (*np == cap) {
    free(own);
    snprintf(err, errcap, "more than %d messages in one row", cap - 1);
    return SL_EINPUT;
  }
  p[(*np)++] = (sl_chat_piece){s, n, mask, own, 0};
  return SL_OK;
}

/* Refusals of one message under the preset; 0 when it renders. */
static int refuse_message(const sl_chat *c, json_t *m, size_t i, const char *role, char *err, size_t errcap) {
  if (c->qwen && (!strcmp(role, "tool") || json_object_get(m, "tool_calls"))) {
    snprintf(err, errcap, "messages[%zu]: tool calls and \"tool\" messages are not supported by --chat-template %s", i,
             c->preset);
    return SL_EINPUT;
  }
  json_t *rc = json_object_get(m, "reasoning_content");
  if (c->qwen3 && rc && !json_is_null(rc) && !json_is_string(rc)) {
    snprintf(err, errcap, "messages[%zu]: \"reasoning_content\" must be a string or null", i);
    return SL_EINPUT;
  }
  return SL_OK;
}

/* Qwen3's last_query_index: the last user message that is not a wrapped tool response (default: the last). */
static size_t last_query(json_t *msgs) {
  size_t n = json_array_size(msgs);
  for (size_t i = n; i-- > 0;) {
    json_t *m = json_array_get(msgs, i);
    const char *r = json_string_value(json_object_get(m, "role"));
    const char *s = json_string_value(json_object_get(m, "content"));
    size_t l = s ? strlen(s) : 0;
    if (r && !strcmp(r, "user") &&
        !(s && !strncmp(s, "<tool_response>", 15) && l >= 16 && !strcmp(s + l - 16, "</tool_response>")))
      return i;
  }
  return n - 1;
}

/* Qwen3's split of an assistant message: reasoning_content when given, else
 * the text before "</think>" (after "<think>", newlines trimmed) and the
 * content after it (leading newlines dropped); *r is stripped of newlines
 * at both ends. Returns 1 (the message is one Qwen3 renders so). */
static int qwen3_reasoning(json_t *m, const char **s, size_t *n, const char **r, size_t *nr) {
  json_t *rc = json_object_get(m, "reasoning_content");
  const char *end = memmem(*s, *n, "</think>", 8);
  if (json_is_string(rc)) {
    *r = json_string_value(rc);
    *nr = json_string_length(rc);
  } else if (end) {
    const char *a = *s, *e = end, *p;
    while ((p = memmem(a, (size_t)(e - a), "<think>", 7))) a = p + 7; /* after the last <think> before </think> */
    *r = a;
    *nr = (size_t)(e - a);
    const char *last = end, *q;
    while ((q = memmem(last + 8, (size_t)(*s + *n - last - 8), "</think>", 8))) last = q;
    *n -= (size_t)(last + 8 - *s);
    *s = last + 8;
    while (*n && **s == '\n') (*s)++, (*n)--; /* .lstrip('\n') */
  }
  while (*nr && **r == '\n') (*r)++, (*nr)--;
  while (*nr && (*r)[*nr - 1] == '\n') (*nr)--;
  return 1;
}

/* Content given as a list of parts (Hugging Face's multimodal message
 * format): the text parts joined in order, as the families' templates render
 * a text-only list (Gemma 3 trims each part; a Gemma system message keeps
 * only its first part there, so one of several parts is refused), replacing
 * the list in m. Any other part (image, audio, ...) is refused by its type. */
static int join_parts(const sl_chat *c, json_t *m, size_t i, int gemma_system, char *err, size_t errcap) {
  json_t *x = json_object_get(m, "content"), *q;
  size_t k, len = 0;
  json_array_foreach(x, k, q) {
    json_t *ty = json_object_get(q, "type"), *tx = json_object_get(q, "text");
    if (!json_is_object(q) || !json_is_string(ty)) {
      snprintf(err, errcap, "messages[%zu].content[%zu]: a content part must be an object with a string \"type\"", i,
               k);
      return SL_EINPUT;
    }
    if (strcmp(json_string_value(ty), "text")) {
      snprintf(err, errcap,
               "messages[%zu].content[%zu]: a part of type \"%s\" is not supported: prepare renders text only "
               "({\"type\": \"text\", \"text\": ...} parts)",
               i, k, json_string_value(ty));
      return SL_EINPUT;
    }
    if (!json_is_string(tx)) {
      snprintf(err, errcap, "messages[%zu].content[%zu]: a \"text\" part needs a string \"text\"", i, k);
      return SL_EINPUT;
    }
    len += json_string_length(tx);
  }
  if (gemma_system && json_array_size(x) > 1) {
    snprintf(err, errcap,
             "messages[%zu]: --chat-template gemma: a system message given as %zu parts (Gemma 3's template "
             "renders only the first): give it as one string or one part",
             i, json_array_size(x));
    return SL_EINPUT;
  }
  char *buf = malloc(len + 1), *w = buf;
  if (!buf) return SL_ENOMEM;
  json_array_foreach(x, k, q) {
    json_t *tx = json_object_get(q, "text");
    const char *t = json_string_value(tx);
    size_t n = json_string_length(tx);
    if (c->gemma && !gemma_system) t = py_strip(t, &n); /* {{ item['text'] | trim }} */
    if (n) memcpy(w, t, n);
    w += n;
  }
  json_t *joined = json_stringn(buf, (size_t)(w - buf));
  free(buf);
  if (!joined || json_object_set_new(m, "content", joined)) return SL_ENOMEM;
  return SL_OK;
}

/* Checks every message: an object with string "role" and "content" (a list
 * of text parts is joined into one string), and what the preset refuses. */
static int check_messages(const sl_chat *c, json_t *msgs, char *err, size_t errcap) {
  if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
    snprintf(err, errcap, "key \"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
    return SL_EINPUT;
  }
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    json_t *r = json_object_get(m, "role"), *x = json_object_get(m, "content");
    if (!json_is_object(m) || !json_is_string(r) || !(json_is_string(x) || json_is_array(x))) {
      snprintf(err, errcap, "messages[%zu]: %s", i,
               !json_is_object(m)   ? "is not an object"
               : !json_is_string(r) ? "\"role\" is missing or not a string"
                                    : "\"content\" is missing or neither a string nor a list of text parts");
      return SL_EINPUT;
    }
    int rc = json_is_array(x)
                 ? join_parts(c, m, i, c->gemma && i == 0 && !strcmp(json_string_value(r), "system"), err, errcap)
                 : SL_OK;
    if (rc) return rc;
    if (refuse_message(c, m, i, json_string_value(r), err, errcap)) return SL_EINPUT;
  }
  return SL_OK;
}

int sl_chat_render(const sl_chat *c, json_t *msgs, sl_chat_piece *p, int cap, int *np, char *err, size_t errcap) {
  *np = 0;
  int rc = check_messages(c, msgs, err, errcap);
  if (rc) return rc;
  size_t nm = json_array_size(msgs), first = 0, nsys = 0;
  const char *r0 = json_string_value(json_object_get(json_array_get(msgs, 0), "role")), *sys = NULL;
  if (c->default_system && strcmp(r0, "system") &&
      piece(p, cap, np, c->default_system, strlen(c->default_system), 0, NULL, err, errcap))
    return SL_EINPUT;
  if (c->gemma && !strcmp(r0, "system")) { /* Gemma 3: first_user_prefix */
    json_t *x = json_object_get(json_array_get(msgs, 0), "content");
    sys = json_string_value(x);
    nsys = json_string_length(x);
    first = 1;
  }
  size_t lq = c->qwen3 ? last_query(msgs) : 0;
  for (size_t i = first; i < nm; i++) {
    json_t *m = json_array_get(msgs, i), *x = json_object_get(m, "content");
    const char *role = json_string_value(json_object_get(m, "role")), *s = json_string_value(x);
    size_t n = json_string_length(x);
    if (c->gemma && !strcmp(role, "user") != ((i - first) % 2 == 0)) {
      snprintf(err, errcap,
               "messages[%zu]: --chat-template gemma: the roles must alternate user/assistant/user/... after an "
               "optional leading system message (Gemma's template raises otherwise)",
               i);
      return SL_EINPUT;
    }
    int asst = !strcmp(role, "assistant");
    if (c->trim) s = py_strip(s, &n);
    /* o = head + pre + r + post + content + tail */
    const char *pre = "", *r = "", *post = "";
    size_t npre = 0, nr = 0;
    if (sys && i == first) pre = sys, npre = nsys, post = "\n\n"; /* Gemma 3: system + "\n\n" + user content */
    else if (c->qwen3 && asst && qwen3_reasoning(m, &s, &n, &r, &nr) && (i == nm - 1 || nr) && i > lq) {
      while (n && *s == '\n') s++, n--; /* content.lstrip('\n') after the reasoning block */
      pre = "<think>\n", npre = 8, post = "\n</think>\n\n";
    }
    if (!npre) nr = 0;
    /* o = head + body + tail, body = pre + r + post + content; {role} and {content} rendered in head and tail */
    size_t npost = strlen(post), nb = npre + nr + npost + n, nh = 0, nt = 0;
    char *body = malloc(nb + 1), *w = body;
    if (!body) return SL_ENOMEM;
    memcpy(w, pre, npre), w += npre;
    memcpy(w, r, nr), w += nr;
    memcpy(w, post, npost), w += npost;
    if (n) memcpy(w, s, n);
    const char *rn = map_role(c, role);
    char *h = render_part(c->head, rn, body, nb, &nh), *t = render_part(c->tail, rn, body, nb, &nt);
    char *o = h && t ? malloc(nh + nb + nt + 1) : NULL;
    if (o) {
      memcpy(o, h, nh);
      memcpy(o + nh, body, nb);
      memcpy(o + nh + nb, t, nt + 1);
    }
    free(h);
    free(t);
    free(body);
    if (!o) return SL_ENOMEM;
    if (piece(p, cap, np, o, nh + nb + nt, asst, o, err, errcap)) return SL_EINPUT;
    p[*np - 1].nhead = nh; /* the head never counts */
  }
  return SL_OK;
}

void sl_chat_pieces_free(sl_chat_piece *p, int n) {
  for (int i = 0; i < n; i++) {
    free(p[i].own);
    p[i].own = NULL;
  }
}
