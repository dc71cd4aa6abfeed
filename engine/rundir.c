/* engine/rundir.c — the lock on --ckpt-dir and the foreign-checkpoint rule
 * (engine/rundir.h). */
#define _GNU_SOURCE
#include "engine/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "formats/ckpt_io.h"
#include "formats/traincfg.h"

int sl_rundir_claim(const char *ckpt_dir, int resume, int *lock_fd) {
  *lock_fd = -1;
  int rc = sl_mkdirs(ckpt_dir);
  if (rc) return rc;
  char path[4200];
  snprintf(path, sizeof path, "%s/.lock", ckpt_dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return sl_fail(SL_EIO, "%s: cannot open the run lock: %s", path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK)
      return sl_fail(SL_EINPUT,
                     "--ckpt-dir %s is in use by another run (it holds the lock %s); wait for it to "
                     "end or choose another --ckpt-dir",
                     ckpt_dir, path);
    return sl_fail(SL_EIO, "%s: cannot lock: %s", path, strerror(e));
  }
  if (!resume) {
    int64_t *steps = NULL;
    int n = 0;
    rc = sl_ckio_list(ckpt_dir, &steps, &n);
    if (!rc && n > 0)
      rc = sl_fail(SL_EINPUT,
                   "--ckpt-dir %s already holds %d checkpoint%s (newest: step %lld) of an earlier run; "
                   "pass --resume to continue from it, or choose a new --ckpt-dir (a fresh run would overwrite "
                   "them)",
                   ckpt_dir, n, n > 1 ? "s" : "", (long long)steps[0]);
    free(steps);
  }
  if (rc) close(fd);
  else *lock_fd = fd;
  return rc;
}

void sl_rundir_release(int *lock_fd) {
  if (*lock_fd >= 0) close(*lock_fd);
  *lock_fd = -1;
}

int sl_rundir_record(const sl_train_cfg *c, const char *model_hash) {
  char started[32], path[SL_PATH_MAX + 32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%S%z", &tm);
  const char *extra[] = {"_model_config_hash", model_hash, "_started", started, NULL};
  char *js = sl_train_cfg_json(c, extra);
  if (!js) return sl_fail(SL_ENOMEM, "out of memory writing run.json");
  snprintf(path, sizeof path, "%s/run.json", c->out_dir);
  char *text = malloc(strlen(js) + 2);
  int rc = text ? SL_OK : sl_fail(SL_ENOMEM, "out of memory");
  if (text) {
    sprintf(text, "%s\n", js);
    rc = sl_write_text_atomic(path, text);
  }
  free(text);
  free(js);
  if (rc) return rc;
  if (c->out_dir_auto && !strncmp(c->out_dir, "runs/", 5) && !strchr(c->out_dir + 5, '/')) {
    struct stat st;
    char tmp[64];
    snprintf(tmp, sizeof tmp, "runs/.latest.%d", (int)getpid());
    unlink(tmp);
    if (lstat("runs/latest", &st) == 0 && !S_ISLNK(st.st_mode))
      sl_log(SL_LOG_WARN,
             "runs/latest is a directory (an older shardlm's default output): left as it is; this run is %s",
             c->out_dir);
    else if (symlink(c->out_dir + 5, tmp) != 0 || rename(tmp, "runs/latest") != 0)
      sl_log(SL_LOG_WARN, "could not point runs/latest at %s: %s", c->out_dir, strerror(errno)), unlink(tmp);
  }
  if (c->ckpt_dir[0]) {
    char abs[SL_PATH_MAX], line[SL_PATH_MAX + 2];
    if (!realpath(c->out_dir, abs)) snprintf(abs, sizeof abs, "%s", c->out_dir);
    snprintf(line, sizeof line, "%s\n", abs);
    snprintf(path, sizeof path, "%s/run-dir", c->ckpt_dir);
    rc = sl_write_text_atomic(path, line);
  }
  return rc;
}
