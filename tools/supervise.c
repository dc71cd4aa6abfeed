/* tools/supervise.c — `shardlm train --nproc N` and `--max-restarts N`: runs
 * the job under a local mpirun and, when it ends abnormally (a rank died or
 * failed), starts it again with --resume so it continues from the newest
 * complete checkpoint in --ckpt-dir, at most N times (0 for plain --nproc). Bad input (exit status 2)
 * and a non-finite run (4) are not retried. The supervisor itself is a plain process outside MPI.
 * Signals: SIGTERM / SIGINT to the supervisor go to every rank of the job
 * (mpirun puts each rank in a process group of its own, so the supervisor
 * walks /proc for the descendants of mpirun); the ranks finish their step,
 * checkpoint and exit 143 / 130, mpirun passes that status on, and the
 * supervisor exits with it (no restart). The job runs in its own process
 * group with stdin from /dev/null; the supervisor is a child subreaper, so a
 * rank whose mpirun died is still found and killed: nothing is orphaned. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"

int sl_supervise(int argc, char **argv, int max_restarts);

static volatile sig_atomic_t got_sig, nsig;

static void on_signal(int sig) {
  got_sig = sig;
  nsig++;
}

static pid_t parent_of(pid_t p) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *e = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
  int ppid = -1;
  char st;
  if (!e || sscanf(e + 1, " %c %d", &st, &ppid) != 2 || st == 'Z') return -1; /* zombies are done */
  return (pid_t)ppid;
}

/* Sends sig to every living descendant of root (not root itself); returns how many. */
static int signal_descendants(pid_t root, int sig) {
  enum { MAXP = 4096 };
  static pid_t pid[MAXP], ppid[MAXP];
  int n = 0, hits = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < MAXP) {
    char *end;
    long v = strtol(de->d_name, &end, 10);
    if (*end || v <= 0) continue;
    pid[n] = (pid_t)v;
    ppid[n] = parent_of(pid[n]);
    n++;
  }
  closedir(d);
  /* mark descendants: repeat until no new one is found (trees are shallow) */
  static char in[MAXP];
  memset(in, 0, sizeof in);
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < n; i++) {
      if (in[i]) continue;
      int up = ppid[i] == root;
      for (int j = 0; j < n && !up; j++) up = in[j] && pid[j] == ppid[i];
      if (up) {
        in[i] = 1;
        changed = 1;
      }
    }
  }
  for (int i = 0; i < n; i++)
    if (in[i] && kill(pid[i], sig) == 0) hits++;
  return hits;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Seconds the ranks get to checkpoint after a forwarded signal before the job is killed. */
static double stop_grace(void) {
  double g = sl_env_double("SL_STOP_GRACE");
  return g > 0 ? g : 600;
}

static int run_once(char **args) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("shardlm: fork");
    return 1;
  }
  if (pid == 0) {
    setpgid(0, 0); /* the job's own group: a terminal's Ctrl-C reaches the supervisor only */
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
      dup2(fd, 0);
      close(fd);
    }
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    execvp(args[0], args);
    fprintf(stderr, "shardlm: cannot start %s (is openmpi-bin installed?)\n", args[0]);
    _exit(127);
  }
  setpgid(pid, pid);
  int st = 0, seen = 0, killed = 0;
  double deadline = 0;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      st = 1 << 8;
      break;
    }                  /* exit status 1 */
    if (nsig > seen) { /* forward each signal to the ranks (a second one: they stop at once) */
      int n = signal_descendants(pid, got_sig);
      if (n > 0) { /* none yet: mpirun is still starting them; try again next round */
        seen = nsig;
        fprintf(stderr, "shardlm: %s: passed on to %d process%s of the job; waiting for the checkpoint\n",
                got_sig == SIGINT ? "SIGINT" : "SIGTERM", n, n == 1 ? "" : "es");
      }
      if (!deadline) deadline = now_s() + stop_grace();
    }
    if (deadline && now_s() > deadline && killed < 2) {
      fprintf(stderr, "shardlm: the job did not stop within SL_STOP_GRACE=%.0f s: %s\n", stop_grace(),
              killed ? "killing it" : "terminating mpirun");
      if (killed) {
        signal_descendants(pid, SIGKILL);
        kill(-pid, SIGKILL);
      } else kill(pid, SIGTERM);
      killed++;
      deadline = now_s() + 10;
    }
    usleep(20000);
  }
  /* nothing outlives the job: ranks whose mpirun is gone were handed to us (subreaper) */
  kill(-pid, SIGKILL);
  while (waitpid(-1, NULL, WNOHANG) > 0) {}
  int left = signal_descendants(getpid(), SIGKILL);
  if (left > 0) fprintf(stderr, "shardlm: killed %d process%s left over by the job\n", left, left == 1 ? "" : "es");
  while (left > 0 && waitpid(-1, NULL, 0) > 0) {}
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* argv: the shardlm command line (argv[0] the program, argv[1] "train"). */
int sl_supervise(int argc, char **argv, int max_restarts) {
  char **args = calloc((size_t)argc + 16, sizeof(char *));
  if (!args) return 1;
  char np[32] = "1", self[4096];
  int k = 0, has_resume = 0;
  args[k++] = "mpirun";
  if (getuid() == 0) args[k++] = "--allow-run-as-root";
  args[k++] = "--oversubscribe";
  args[k++] = "--bind-to";
  args[k++] = "none";
  args[k++] = "-np";
  args[k++] = np;
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) {
    self[len] = 0;
    args[k++] = self;
  } else args[k++] = argv[0];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if ((!strcmp(a, "--nproc") || !strcmp(a, "--max-restarts")) && i + 1 < argc) {
      if (!strcmp(a, "--nproc")) snprintf(np, sizeof np, "%s", argv[i + 1]);
      i++;
      continue;
    }
    if (!strncmp(a, "--nproc=", 8)) {
      snprintf(np, sizeof np, "%s", a + 8);
      continue;
    }
    if (!strncmp(a, "--max-restarts=", 15)) continue;
    if (!strcmp(a, "--resume")) has_resume = 1;
    args[k++] = argv[i];
  }
  int resume_at = k; /* "--resume" goes here from the first restart on */
  args[k] = NULL;
  int rc = 0;
  sl_env_put("SL_TTY", isatty(STDOUT_FILENO) ? "1" : "0", 1); /* rank 0's progress line: mpirun gives ranks a pipe */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  for (int attempt = 0;; attempt++) {
    if (attempt > 0 && nsig) break; /* a stop was asked for between two runs */
    rc = run_once(args);
    if (rc == 0 || rc == 2 || rc == 4) break; /* done, bad input or a non-finite run: a restart cannot fix them */
    if (nsig) { /* stopped on request: pass the job's status on (143 / 130 after a checkpoint) */
      fprintf(stderr, "shardlm: the job stopped on %s (status %d)%s\n", got_sig == SIGINT ? "SIGINT" : "SIGTERM", rc,
              max_restarts > 0 ? "; not restarting" : "");
      break;
    }
    if (attempt >= max_restarts) {
      if (max_restarts > 0)
        fprintf(stderr, "shardlm: the job failed (status %d) and all %d restart%s are used up\n", rc, max_restarts,
                max_restarts == 1 ? "" : "s");
      break;
    }
    fprintf(stderr, "shardlm: the job failed (status %d); restarting from the latest checkpoint (restart %d of %d)\n",
            rc, attempt + 1, max_restarts);
    if (!has_resume) {
      args[resume_at] = "--resume";
      args[resume_at + 1] = NULL;
      has_resume = 1;
    }
  }
  free(args);
  return rc;
}
