/* tools/supervise.c — `shardlm train --max-restarts N`: runs the job under a
 * local mpirun and, when it ends abnormally (a rank died or failed), starts
 * it again with --resume so it continues from the newest complete
 * checkpoint in --ckpt-dir, at most N times. Bad input (exit status 2) and
 * a non-finite loss (4) are not retried. The supervisor itself is a plain process outside MPI. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int sl_supervise(int argc, char **argv, int max_restarts);

static int run_once(char **args) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("shardlm: fork");
    return 1;
  }
  if (pid == 0) {
    execvp(args[0], args);
    fprintf(stderr, "shardlm: cannot start %s (is openmpi-bin installed?)\n", args[0]);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
  }
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
  if (len > 0) { self[len] = 0; args[k++] = self; }
  else args[k++] = argv[0];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if ((!strcmp(a, "--nproc") || !strcmp(a, "--max-restarts")) && i + 1 < argc) {
      if (!strcmp(a, "--nproc")) snprintf(np, sizeof np, "%s", argv[i + 1]);
      i++;
      continue;
    }
    if (!strncmp(a, "--nproc=", 8)) { snprintf(np, sizeof np, "%s", a + 8); continue; }
    if (!strncmp(a, "--max-restarts=", 15)) continue;
    if (!strcmp(a, "--resume")) has_resume = 1;
    args[k++] = argv[i];
  }
  int resume_at = k; /* "--resume" goes here from the first restart on */
  args[k] = NULL;
  int rc = 0;
  for (int attempt = 0;; attempt++) {
    rc = run_once(args);
    if (rc == 0 || rc == 2 || rc == 4) break; /* done, bad input or a non-finite run: a restart cannot fix them */
    if (attempt >= max_restarts) {
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
