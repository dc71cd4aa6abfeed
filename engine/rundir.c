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
#include <unistd.h>

#include "base/base.h"
#include "formats/ckpt_io.h"

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
