/* formats/metrics.c — the metrics JSONL file (formats/metrics.h). */
#define _GNU_SOURCE
#include "formats/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

/* The lines of path worth keeping, concatenated (malloc'd), *dropped counted. */
static int kept_lines(const char *path, int64_t keep_upto, char **out, size_t *outn, int *dropped) {
  FILE *f = fopen(path, "r");
  *out = NULL;
  *outn = 0;
  *dropped = 0;
  if (!f) return errno == ENOENT ? SL_OK : sl_fail(SL_EIO, "%s: cannot read metrics: %s", path, strerror(errno));
  size_t cap = 0;
  char *line = NULL, *buf = NULL;
  ssize_t n;
  int rc = SL_OK;
  while ((n = getline(&line, &cap, f)) > 0) {
    json_t *j = line[n - 1] == '\n' ? json_loadb(line, (size_t)n, 0, NULL) : NULL; /* no newline: cut */
    json_t *st = json_is_object(j) ? json_object_get(j, "step") : NULL;
    int keep = json_is_object(j) && (!json_is_integer(st) || json_integer_value(st) <= keep_upto);
    json_decref(j);
    if (!keep) {
      (*dropped)++;
      continue;
    }
    char *nb = realloc(buf, *outn + (size_t)n + 1);
    if (!nb) {
      rc = sl_fail(SL_ENOMEM, "out of memory reading %s", path);
      break;
    }
    buf = nb;
    memcpy(buf + *outn, line, (size_t)n);
    *outn += (size_t)n;
  }
  if (!rc && ferror(f)) rc = sl_fail(SL_EIO, "%s: read failed: %s", path, strerror(errno));
  free(line);
  fclose(f);
  if (rc) free(buf);
  else *out = buf;
  return rc;
}

/* Rewrites path with the kept lines: temp name, fsync, rename. */
static int truncate_to(const char *path, int64_t keep_upto) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return SL_OK; /* new, or a device: nothing to cut */
  char *text = NULL;
  size_t n = 0;
  int dropped = 0, rc = kept_lines(path, keep_upto, &text, &n, &dropped);
  if (rc || !dropped) {
    free(text);
    return rc;
  }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) rc = sl_fail(SL_EIO, "%s: cannot write: %s", tmp, strerror(errno));
  if (!rc && n) rc = sl_write_all(fd, text, n, tmp);
  if (!rc && fsync(fd) != 0) rc = sl_fail(SL_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && !rc) rc = sl_fail(SL_EIO, "%s: close failed: %s", tmp, strerror(errno));
  if (!rc && rename(tmp, path) != 0) rc = sl_fail(SL_EIO, "rename %s -> %s failed: %s", tmp, path, strerror(errno));
  if (rc) unlink(tmp);
  else {
    sl_fsync_parent(path);
    sl_log(SL_LOG_INFO, "%s: removed %d line%s past step %lld (resumed run)", path, dropped, dropped > 1 ? "s" : "",
           (long long)keep_upto);
  }
  free(text);
  return rc;
}

int sl_metrics_open(const char *path, int64_t keep_upto, FILE **out) {
  *out = NULL;
  int rc = keep_upto >= 0 ? truncate_to(path, keep_upto) : SL_OK;
  if (rc) return sl_fail_ctx(rc, "resuming the metrics file");
  *out = fopen(path, keep_upto >= 0 ? "a" : "w");
  if (!*out) return sl_fail(SL_EIO, "%s: cannot write metrics: %s", path, strerror(errno));
  return SL_OK;
}

int sl_metrics_flush(FILE *f, const char *path) {
  errno = 0;
  if (fflush(f) != 0 || ferror(f))
    return sl_fail(SL_EIO, "%s: writing the metrics failed: %s", path, strerror(errno ? errno : EIO));
  return SL_OK;
}

int sl_metrics_sync(FILE *f, const char *path) {
  int rc = sl_metrics_flush(f, path);
  if (!rc && fsync(fileno(f)) != 0 && errno != EINVAL && errno != EROFS) /* devices/pipes cannot sync */
    rc = sl_fail(SL_EIO, "%s: fsync of the metrics failed: %s", path, strerror(errno));
  return rc;
}

int sl_metrics_close(FILE **f, const char *path) {
  if (!*f) return SL_OK;
  int rc = sl_metrics_flush(*f, path);
  if (fclose(*f) != 0 && !rc) rc = sl_fail(SL_EIO, "%s: closing the metrics failed: %s", path, strerror(errno));
  *f = NULL;
  return rc;
}
