/* engine/agree.c — canonical run texts and the start-up rank agreement
 * (engine/agree.h). */
#define _GNU_SOURCE
#include "engine/agree.h"
#include "data/sampler.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"

typedef struct {
  char *p;
  size_t n, cap;
  int err;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->err) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (w < 0) {
      b->err = 1;
      return;
    }
    if (b->p && b->n + (size_t)w < b->cap) {
      b->n += (size_t)w;
      return;
    }
    size_t nc = (b->cap ? b->cap * 2 : 4096) + (size_t)w;
    char *q = realloc(b->p, nc);
    if (!q) {
      b->err = 1;
      return;
    }
    b->p = q;
    b->cap = nc;
  }
}

/* Fields that only shape a random initialisation (transformers' and
 * state-spaces' names): left out of a checkpoint's text, whose weights are
 * already initialised. A field missing here is compared, never skipped. */
static int init_only(const char *key, size_t len) {
  static const char *const k[] = {"initializer_range", "time_step_min",           "time_step_max",
                                  "time_step_floor",   "time_step_scale",         "time_step_init_scheme",
                                  "ssm_cfg.dt_min",    "ssm_cfg.dt_max",          "ssm_cfg.dt_init_floor",
                                  "ssm_cfg.dt_scale",  "rescale_prenorm_residual"};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (strlen(k[i]) == len && !memcmp(k[i], key, len)) return 1;
  return 0;
}

int sl_model_canonical(const sl_model_config *c, int with_init, char *buf, size_t cap) {
  /* the family, then every config.json field the reader looked at (c->fields,
   * formats/hfconfig.c: complete by construction), "model." before each */
  int n = snprintf(buf, cap, "model.arch=%s\n%s", sl_arch_name(c->arch), SL_MODEL_CANON_TAG);
  if (n < 0 || (size_t)n >= cap) return SL_EINTERNAL;
  for (const char *l = c->fields; *l;) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) : strlen(l);
    const char *eq = memchr(l, '=', len);
    if (with_init || !eq || !init_only(l, (size_t)(eq - l))) {
      int m = snprintf(buf + n, cap - (size_t)n, "model.%.*s\n", (int)len, l);
      if (m < 0 || (size_t)(n + m) >= cap) return SL_EINTERNAL;
      n += m;
    }
    l += len + (e ? 1 : 0);
  }
  return SL_OK;
}

uint64_t sl_canon_hash(const char *text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 0x100000001b3ull;
  return h;
}

/* One line of a text: [s, s+len), the rest after it. */
static size_t line_len(const char *s) {
  const char *e = strchr(s, '\n');
  return e ? (size_t)(e - s) : strlen(s);
}

static void split_kv(const char *s, size_t len, char *key, size_t kcap, char *val, size_t vcap) {
  const char *eq = memchr(s, '=', len);
  size_t kl = eq ? (size_t)(eq - s) : len;
  if (key) snprintf(key, kcap, "%.*s", (int)kl, s);
  if (val) snprintf(val, vcap, "%.*s", eq ? (int)(len - kl - 1) : 0, eq ? eq + 1 : "");
}

int sl_canon_diff(const char *a, const char *b, char *key, size_t kcap, char *va, char *vb, size_t vcap) {
  while (*a || *b) {
    size_t la = line_len(a), lb = line_len(b);
    if (la != lb || memcmp(a, b, la)) {
      char ka[256], kb[256];
      split_kv(a, la, ka, sizeof ka, va, vcap);
      split_kv(b, lb, kb, sizeof kb, vb, vcap);
      if (strcmp(ka, kb) && *a && *b) { /* a line only one side has: name both keys */
        snprintf(va, vcap, "%.*s", (int)la, a);
        snprintf(vb, vcap, "%.*s", (int)lb, b);
      }
      snprintf(key, kcap, "%s", *a ? ka : kb);
      return 1;
    }
    a += la + (a[la] ? 1 : 0);
    b += lb + (b[lb] ? 1 : 0);
  }
  return 0;
}

/* The value of key (a "model.NAME" line) in text, or NULL. */
static const char *text_value(const char *text, const char *key, size_t klen, size_t *vlen) {
  for (const char *l = text; *l;) {
    size_t len = line_len(l);
    if (len > klen && !memcmp(l, key, klen) && l[klen] == '=') {
      *vlen = len - klen - 1;
      return l + klen + 1;
    }
    l += len + (l[len] ? 1 : 0);
  }
  return NULL;
}

int sl_check_ckpt_model(const char *dir, const char *recorded, const sl_model_config *mc) {
  if (!recorded) {
    sl_log0(SL_LOG_WARN,
            "%s/manifest.json records no model config (an older checkpoint): only the tensor shapes "
            "are checked against the model",
            dir);
    return SL_OK;
  }
  char now[SL_MODEL_CANON_MAX], key[256], was[512], is[512];
  if (sl_model_canonical(mc, 0, now, sizeof now)) return sl_fail(SL_EINTERNAL, "model config text too long");
  if (strstr(recorded, SL_MODEL_CANON_TAG)) { /* every field the model reads, on both sides */
    if (!sl_canon_diff(recorded, now, key, sizeof key, was, is, sizeof was)) return SL_OK;
    return sl_fail(SL_EINPUT,
                   "%s/manifest.json: the checkpoint was written for a different model: %s is %s there but %s in "
                   "this model's config.json (refusing: same tensor shapes do not mean the same computation)",
                   dir, key, was[0] ? was : "(absent)", is[0] ? is : "(absent)");
  }
  /* an older checkpoint's hand-listed fields: those it has are compared, the
   * others cannot be */
  int unchecked = 0;
  for (const char *l = now; *l;) {
    size_t len = line_len(l), vlen = 0;
    const char *eq = memchr(l, '=', len);
    size_t klen = eq ? (size_t)(eq - l) : len;
    const char *v = text_value(recorded, l, klen, &vlen);
    if (!v) {
      unchecked += strncmp(l, SL_MODEL_CANON_TAG, klen) != 0;
    } else if (vlen != len - klen - 1 || memcmp(v, eq + 1, vlen)) {
      return sl_fail(SL_EINPUT,
                     "%s/manifest.json: the checkpoint was written for a different model: %.*s is %.*s there but "
                     "%.*s in this model's config.json (refusing: same tensor shapes do not mean the same "
                     "computation)",
                     dir, (int)klen, l, (int)vlen, v, (int)(len - klen - 1), eq + 1);
    }
    l += len + (l[len] ? 1 : 0);
  }
  if (unchecked)
    sl_log0(SL_LOG_WARN,
            "%s/manifest.json was written by an older shardlm that recorded fewer model fields: %d field(s) of "
            "config.json could not be checked against the checkpoint",
            dir, unchecked);
  return SL_OK;
}

static int weight_file(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return (n > 12 && !strcmp(e->d_name + n - 12, ".safetensors")) || !strcmp(e->d_name, "config.json") ||
         !strncmp(e->d_name, "tokenizer", 9) || /* tokenizer.json, tokenizer_config.json, tokenizer.model */
         (n > 5 && strstr(e->d_name, ".index.json") && !strcmp(e->d_name + n - 5, ".json"));
}

static void list_files(sbuf *b, const char *dir) {
  struct dirent **ents = NULL;
  int n = scandir(dir, &ents, weight_file, alphasort);
  sb_printf(b, "weights.files=%d\n", n < 0 ? 0 : n);
  for (int i = 0; i < n; i++) {
    char p[SL_PATH_MAX + 300];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, ents[i]->d_name);
    long long sz = stat(p, &st) == 0 ? (long long)st.st_size : -1;
    sb_printf(b, "weights.%s=%lld bytes\n", ents[i]->d_name, sz);
    free(ents[i]);
  }
  free(ents);
}

/* The sizes of each dataset's files: --data is one prefix or a blend. */
static void data_files(sbuf *b, const char *spec) {
  char buf[SL_PATH_MAX], *pre[64];
  double w[64];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", spec);
  if (sl_blend_parse(buf, 64, w, pre, &n)) { /* the sampler reports a bad spec; hash the text */
    sl_clear_error();
    sb_printf(b, "data=%s\n", spec);
    return;
  }
  const char *ext[] = {".bin", ".idx", ".lmask"};
  for (int d = 0; d < n; d++) {
    for (int i = 0; i < 3; i++) {
      char p[SL_PATH_MAX + 16];
      struct stat st;
      snprintf(p, sizeof p, "%s%s", pre[d], ext[i]);
      if (stat(p, &st) == 0) sb_printf(b, "data%d%s=%lld bytes\n", d, ext[i], (long long)st.st_size);
      else sb_printf(b, "data%d%s=absent\n", d, ext[i]);
    }
  }
}

int sl_check_agreement(sl_comm *world, const sl_train_cfg *cfg, const sl_model_config *mcfg, int64_t data_tokens) {
  int rank = sl_comm_rank(world), W = sl_comm_size(world), rc = SL_OK;
  sbuf b = {0};
  char mtext[SL_MODEL_CANON_MAX], tcfg[16384];
  if (sl_model_canonical(mcfg, 1, mtext, sizeof mtext) || sl_train_cfg_canonical(cfg, tcfg, sizeof tcfg))
    return sl_fail(SL_EINTERNAL, "configuration check: canonical text too long");
  sb_printf(&b, "%s", mtext);
  sb_printf(&b, "data.tokens=%lld\n", (long long)data_tokens);
  for (const char *s = tcfg; *s;) { /* "train." prefix on each settings line */
    size_t l = line_len(s);
    sb_printf(&b, "train.%.*s\n", (int)l, s);
    s += l + (s[l] ? 1 : 0);
  }
  if (cfg->model[0]) list_files(&b, cfg->model);
  if (cfg->data[0]) data_files(&b, cfg->data);
  if (b.err) {
    free(b.p);
    return sl_fail(SL_ENOMEM, "configuration check: out of memory");
  }
  if (W == 1) {
    free(b.p);
    return SL_OK;
  }
  /* cheap path: every rank's hash and length */
  int64_t mine[2] = {(int64_t)sl_canon_hash(b.p), (int64_t)b.n}, *all = calloc((size_t)W * 2, sizeof(int64_t));
  int *diff = calloc((size_t)W, sizeof(int));
  char *ref = NULL;
  if (!all || !diff) {
    rc = sl_fail(SL_ENOMEM, "configuration check: out of memory");
    goto done;
  }
  if (sl_comm_allgather_sync(world, mine, all, 2, SL_I64) != SL_COMM_OK) {
    rc = sl_fail(SL_ECOMM, "configuration check: %s", sl_comm_last_error());
    goto done;
  }
  int same = 1;
  for (int r = 1; r < W; r++) same &= all[2 * r] == all[0] && all[2 * r + 1] == all[1];
  if (same) goto done;
  /* a difference: every rank compares its text with rank 0's */
  size_t rlen = (size_t)all[1];
  if (!(ref = calloc(1, rlen + 1))) {
    rc = sl_fail(SL_ENOMEM, "configuration check: out of memory");
    goto done;
  }
  if (rank == 0) memcpy(ref, b.p, rlen);
  if (sl_comm_broadcast_sync(world, ref, (int64_t)rlen, SL_U8, 0) != SL_COMM_OK) {
    rc = sl_fail(SL_ECOMM, "configuration check: %s", sl_comm_last_error());
    goto done;
  }
  char key[256], v0[512], vr[512];
  int d = sl_canon_diff(ref, b.p, key, sizeof key, v0, vr, sizeof v0);
  if (sl_comm_allgather_sync(world, &d, diff, 1, SL_I32) != SL_COMM_OK) {
    rc = sl_fail(SL_ECOMM, "configuration check: %s", sl_comm_last_error());
    goto done;
  }
  char ranks[256] = "";
  size_t rn = 0;
  int first = -1;
  for (int r = 1; r < W; r++)
    if (diff[r] && rn + 16 < sizeof ranks) {
      rn += (size_t)snprintf(ranks + rn, sizeof ranks - rn, "%s%d", rn ? ", " : "", r);
      if (first < 0) first = r;
    }
  /* the first differing rank tells everyone the field and both values */
  char msg[3][512];
  if (rank == first) {
    snprintf(msg[0], sizeof msg[0], "%s", key);
    memcpy(msg[1], v0, 512);
    memcpy(msg[2], vr, 512);
  }
  if (first < 0 || sl_comm_broadcast_sync(world, msg, (int64_t)sizeof msg, SL_U8, first) != SL_COMM_OK) {
    rc = sl_fail(SL_EINPUT, "ranks disagree on the model, data or settings (rank 0 vs the others)");
    goto done;
  }
  rc = sl_fail(SL_EINPUT,
               "ranks disagree on %s: rank 0 has '%s' but rank %d has '%s' (ranks differing from rank 0: %s); "
               "every rank must see the same model files, data and settings",
               msg[0], msg[1], first, msg[2], ranks);
done:
  free(ref);
  free(diff);
  free(all);
  free(b.p);
  return rc;
}
