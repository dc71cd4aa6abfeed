/* formats/savedir.c — atomic replacement of an output directory
 * (formats/savedir.h). */
#define _GNU_SOURCE
#include "formats/savedir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "formats/ckpt_io.h"

enum { PATH_CAP = 4400 };

/* dir without trailing slashes, split into parent and name. */
static int split(const char *dir, char *clean, char *parent, char *name) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  if (n == 0 || n >= PATH_CAP - 64) return sl_fail(SL_EINPUT, "'%s': not a usable output directory name", dir);
  memcpy(clean, dir, n);
  clean[n] = 0;
  const char *sl = strrchr(clean, '/');
  if (!sl) {
    strcpy(parent, ".");
    snprintf(name, PATH_CAP, "%s", clean);
  } else if (sl == clean) {
    strcpy(parent, "/");
    snprintf(name, PATH_CAP, "%s", sl + 1);
  } else {
    snprintf(parent, PATH_CAP, "%.*s", (int)(sl - clean), clean);
    snprintf(name, PATH_CAP, "%s", sl + 1);
  }
  if (!name[0] || !strcmp(name, ".") || !strcmp(name, ".."))
    return sl_fail(SL_EINPUT, "'%s': name the output directory itself (not . or ..)", dir);
  return SL_OK;
}

/* Removes PARENT/.NAME.tmp-<pid>-* left by saves whose process is gone. */
static void clean_stale(const char *parent, const char *name) {
  DIR *d = opendir(parent);
  if (!d) return;
  char prefix[PATH_CAP + 16], p[2 * PATH_CAP + 300];
  snprintf(prefix, sizeof prefix, ".%s.tmp-", name);
  size_t n = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, n)) continue;
    long pid = strtol(e->d_name + n, NULL, 10);
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {
      snprintf(p, sizeof p, "%s/%s", parent, e->d_name);
      if (sl_ckio_rmtree(p) == 0) sl_log(SL_LOG_INFO, "removed %s, left by an interrupted save", p);
    }
  }
  closedir(d);
}

int sl_savedir_begin(const char *dir, char *tmp, size_t cap) {
  static int counter;
  char clean[PATH_CAP], parent[PATH_CAP], name[PATH_CAP];
  struct stat sb;
  tmp[0] = 0;
  int rc = split(dir, clean, parent, name);
  if (rc) return rc;
  if (stat(clean, &sb) == 0 && !S_ISDIR(sb.st_mode))
    return sl_fail(SL_EINPUT, "%s exists and is not a directory: cannot save a model there", clean);
  if ((rc = sl_mkdirs(parent))) return rc;
  clean_stale(parent, name);
  if ((size_t)snprintf(tmp, cap, "%s/.%s.tmp-%d-%d", parent, name, (int)getpid(), counter++) >= cap)
    return sl_fail(SL_EINPUT, "%s: path too long", dir);
  if (mkdir(tmp, 0755) != 0) {
    rc = sl_fail(SL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    tmp[0] = 0;
  }
  return rc;
}

static int is_weight_file(const char *n) {
  size_t l = strlen(n);
  return (l > 12 && !strcmp(n + l - 12, ".safetensors")) || !strcmp(n, "model.safetensors.index.json");
}

static int copy_file(const char *src, const char *dst) {
  int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = SL_OK;
  if (in < 0) return sl_fail(SL_EIO, "%s: cannot read: %s", src, strerror(errno));
  out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) rc = sl_fail(SL_EIO, "%s: cannot write: %s", dst, strerror(errno));
  char buf[65536];
  ssize_t n;
  while (!rc && (n = read(in, buf, sizeof buf)) != 0) {
    if (n < 0) rc = errno == EINTR ? SL_OK : sl_fail(SL_EIO, "%s: read failed: %s", src, strerror(errno));
    else rc = sl_write_all(out, buf, (size_t)n, dst);
  }
  if (out >= 0 && close(out) != 0 && !rc) rc = sl_fail(SL_EIO, "%s: close failed: %s", dst, strerror(errno));
  close(in);
  return rc;
}

/* Top-level regular files of old that tmp lacks: hard-linked (copied where
 * links fail). Sets *subdirs when old holds directories (moved after the swap). */
static int carry_over(const char *old, const char *tmp, int *subdirs) {
  DIR *d = opendir(old);
  *subdirs = 0;
  if (!d) return errno == ENOENT ? SL_OK : sl_fail(SL_EIO, "%s: cannot list: %s", old, strerror(errno));
  struct dirent *e;
  int rc = SL_OK;
  char src[PATH_CAP + 300], dst[PATH_CAP + 300];
  struct stat sb;
  while (!rc && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || is_weight_file(e->d_name)) continue;
    snprintf(src, sizeof src, "%s/%s", old, e->d_name);
    snprintf(dst, sizeof dst, "%s/%s", tmp, e->d_name);
    if (lstat(dst, &sb) == 0 || lstat(src, &sb) != 0) continue; /* the new content has it */
    if (S_ISDIR(sb.st_mode)) {
      *subdirs = 1;
      continue;
    }
    if (!S_ISREG(sb.st_mode)) continue;
    if (link(src, dst) != 0) rc = copy_file(src, dst);
  }
  closedir(d);
  return rc;
}

static int fsync_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return sl_fail(SL_EIO, "%s: cannot list: %s", dir, strerror(errno));
  struct dirent *e;
  int rc = SL_OK;
  char p[PATH_CAP + 300];
  while (!rc && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    rc = sl_ckio_fsync_path(p);
  }
  closedir(d);
  return rc ? rc : sl_ckio_fsync_path(dir);
}

/* Moves the directories of from (the old content) into to (the new one). */
static void move_subdirs(const char *from, const char *to) {
  DIR *d = opendir(from);
  if (!d) return;
  struct dirent *e;
  char a[PATH_CAP + 300], b[PATH_CAP + 300];
  struct stat sb;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(a, sizeof a, "%s/%s", from, e->d_name);
    snprintf(b, sizeof b, "%s/%s", to, e->d_name);
    if (lstat(a, &sb) == 0 && S_ISDIR(sb.st_mode) && lstat(b, &sb) != 0 && rename(a, b) != 0)
      sl_log(SL_LOG_WARN, "%s: could not move into %s: %s", a, to, strerror(errno));
  }
  closedir(d);
}

int sl_savedir_commit(const char *dir, const char *tmp) {
  char clean[PATH_CAP], parent[PATH_CAP], name[PATH_CAP];
  int subdirs = 0, rc = split(dir, clean, parent, name);
  struct stat sb;
  int exists = !rc && stat(clean, &sb) == 0;
  if (!rc && exists) rc = carry_over(clean, tmp, &subdirs);
  if (!rc) rc = fsync_tree(tmp);
  if (rc) goto fail;
  if (!exists) {
    if (rename(tmp, clean) != 0) {
      rc = sl_fail(SL_EIO, "rename %s -> %s failed: %s", tmp, clean, strerror(errno));
      goto fail;
    }
    sl_fsync_parent(clean);
    return SL_OK;
  }
  /* tmp <-> dir in one step; tmp then holds the old content */
  char old[PATH_CAP + 16];
  snprintf(old, sizeof old, "%s", tmp);
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, clean, RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS) {
      rc = sl_fail(SL_EIO, "exchanging %s and %s failed: %s", tmp, clean, strerror(errno));
      goto fail;
    }
    /* no RENAME_EXCHANGE on this file system: dir -> old name, tmp -> dir */
    snprintf(old, sizeof old, "%s.old", tmp);
    if (rename(clean, old) != 0) {
      rc = sl_fail(SL_EIO, "rename %s -> %s failed: %s", clean, old, strerror(errno));
      goto fail;
    }
    if (rename(tmp, clean) != 0) {
      rc = sl_fail(SL_EIO, "rename %s -> %s failed: %s", tmp, clean, strerror(errno));
      if (rename(old, clean) != 0)
        sl_log(SL_LOG_ERROR, "the previous content of %s is in %s: %s", clean, old, strerror(errno));
      goto fail;
    }
  }
  sl_fsync_parent(clean);
  if (subdirs) move_subdirs(old, clean);
  if (sl_ckio_rmtree(old) != 0)
    sl_log(SL_LOG_WARN, "%s: could not remove the previous content: %s", old, strerror(errno));
  return SL_OK;
fail:
  sl_savedir_abort(tmp);
  return rc;
}

void sl_savedir_abort(const char *tmp) {
  if (tmp && tmp[0]) sl_ckio_rmtree(tmp);
}

const char *sl_savedir_torch_dtype(sl_st_dtype d) {
  return d == SL_ST_BF16 ? "bfloat16" : d == SL_ST_F16 ? "float16" : "float32";
}

/* The torch_dtype (or transformers' newer dtype) of config.json p when it names a float dtype. */
static int config_dtype(const char *p, sl_st_dtype *out) {
  json_error_t err;
  json_t *o = json_load_file(p, 0, &err);
  if (!o) return SL_OK; /* the model's own load names a missing or bad config.json */
  json_t *v = json_object_get(o, "torch_dtype");
  if (!json_is_string(v)) v = json_object_get(o, "dtype");
  const char *s = json_is_string(v) ? json_string_value(v) : "";
  if (!strcmp(s, "bfloat16")) *out = SL_ST_BF16;
  else if (!strcmp(s, "float16")) *out = SL_ST_F16;
  json_decref(o);
  return SL_OK;
}

int sl_savedir_dtype(const char *save_dtype, const char *model_dir, sl_st_dtype *out) {
  *out = SL_ST_F32;
  if (!save_dtype || !strcmp(save_dtype, "fp32")) return SL_OK;
  if (!strcmp(save_dtype, "bf16") || !strcmp(save_dtype, "fp16")) {
    *out = save_dtype[0] == 'b' ? SL_ST_BF16 : SL_ST_F16;
    return SL_OK;
  }
  if (strcmp(save_dtype, "auto"))
    return sl_fail(SL_EINPUT, "--save-dtype must be auto, fp32, bf16 or fp16, found '%s'", save_dtype);
  if (!model_dir || !model_dir[0]) return SL_OK;
  struct stat sb;
  if (stat(model_dir, &sb) == 0 && !S_ISDIR(sb.st_mode)) return config_dtype(model_dir, out); /* a config.json */
  sl_st_set *set = NULL;
  int rc = sl_st_open_dir(model_dir, &set);
  if (rc) return rc;
  if (!set) {
    char p[PATH_CAP + 32];
    snprintf(p, sizeof p, "%s/config.json", model_dir);
    return config_dtype(p, out);
  }
  int64_t n[3] = {0, 0, 0}; /* F32, BF16, F16 elements */
  for (int64_t i = 0; i < sl_st_set_count(set); i++) {
    const sl_st_tensor *t = sl_st_set_tensor(set, i);
    if (t->dtype == SL_ST_F32) n[0] += t->numel;
    else if (t->dtype == SL_ST_BF16) n[1] += t->numel;
    else if (t->dtype == SL_ST_F16) n[2] += t->numel;
  }
  sl_st_close_set(set);
  if (n[1] > n[0] && n[1] >= n[2]) *out = SL_ST_BF16;
  else if (n[2] > n[0] && n[2] > n[1]) *out = SL_ST_F16;
  return SL_OK;
}

int sl_savedir_copy_aux(const char *src_dir, const char *tmp) {
  static const char *const names[] = {
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.json",
      "merges.txt",     "added_tokens.json",     "generation_config.json"};
  struct stat sb;
  if (!src_dir || !src_dir[0] || stat(src_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return SL_OK;
  char src[PATH_CAP + 64], dst[PATH_CAP + 64];
  int rc = SL_OK;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !rc; i++) {
    snprintf(src, sizeof src, "%s/%s", src_dir, names[i]);
    if (stat(src, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    snprintf(dst, sizeof dst, "%s/%s", tmp, names[i]);
    unlink(dst);
    rc = copy_file(src, dst);
  }
  return rc;
}
