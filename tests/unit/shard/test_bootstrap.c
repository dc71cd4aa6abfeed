/* tests/unit/shard/test_bootstrap.c — the MPI-free rendezvous (shard/bootstrap.h) on
 * CPU: 4 forked processes share a fake 128-byte ncclUniqueId (random bytes
 * from rank 0) through fs:PATH and through tcp:127.0.0.1:PORT, and every
 * rank must end with rank 0's bytes (the oracle: the parent's copy of the
 * bytes, compared in each child). Also: the fs rendezvous leaves no file
 * behind; a rank whose rank 0 never comes times out with a message naming
 * the rendezvous; a length mismatch is refused; the environment parser
 * (SL_*, torchrun's RANK/WORLD_SIZE/MASTER_*, SLURM_*) and its errors. */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "shard/bootstrap.h"

static int npass, nfail;
static void check(int ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (ok) npass++;
  else nfail++;
}

static unsigned char ID[128];

/* Runs `size` ranks of one rendezvous in forked children; returns how many
 * ended with rank 0's bytes (exit 0). */
static int run_world(const char *method, const char *addr, int size, size_t n_rank_last) {
  pid_t pid[16];
  for (int r = 0; r < size; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      sl_boot_env e;
      memset(&e, 0, sizeof e);
      e.rank = r;
      e.size = size;
      snprintf(e.method, sizeof e.method, "%s", method);
      snprintf(e.addr, sizeof e.addr, "%s", addr);
      unsigned char blob[256];
      memset(blob, 0, sizeof blob);
      if (r == 0) memcpy(blob, ID, sizeof ID);
      size_t n = (r == size - 1 && n_rank_last) ? n_rank_last : sizeof ID;
      int rc = sl_boot_share(&e, blob, n, 5.0);
      if (rc) fprintf(stderr, "  rank %d: %s\n", r, sl_errmsg());
      _exit(rc == SL_OK && memcmp(blob, ID, sizeof ID) == 0 ? 0 : 1);
    }
  }
  int good = 0;
  for (int r = 0; r < size; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) good++;
  }
  return good;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &l) != 0) {
    close(fd);
    return 29500;
  }
  close(fd);
  return ntohs(a.sin_port);
}

static void clear_env(void) {
  const char *v[] = {"SL_RANK",      "SL_WORLD_SIZE", "SL_LOCAL_RANK", "RANK",           "WORLD_SIZE",  "LOCAL_RANK",
                     "SLURM_PROCID", "SLURM_NTASKS",  "SLURM_LOCALID", "SL_INIT_METHOD", "MASTER_ADDR", "MASTER_PORT"};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) unsetenv(v[i]);
}

/* Clears the rendezvous variables, then sets kv = {name, value, ..., NULL}. */
static void set_env(const char **kv) {
  clear_env();
  for (int i = 0; kv[i]; i += 2) setenv(kv[i], kv[i + 1], 1);
}

int main(void) {
  srand((unsigned)getpid());
  for (size_t i = 0; i < sizeof ID; i++) ID[i] = (unsigned char)(rand() & 255);
  char dir[] = "/tmp/sl-boot.XXXXXX", path[256], addr[64], msg[200];
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/nccl-id", dir);

  check(run_world("fs", path, 4, 0) == 4, "fs: 4 ranks get rank 0's 128 bytes");
  check(access(path, F_OK) != 0, "fs: the rendezvous file is removed afterwards");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  check(run_world("tcp", addr, 4, 0) == 4, "tcp: 4 ranks get rank 0's 128 bytes");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  check(run_world("tcp", addr, 2, 64) == 0, "tcp: a length mismatch fails on both ranks");

  /* rank 1 alone: rank 0 never comes */
  sl_boot_env e;
  memset(&e, 0, sizeof e);
  e.rank = 1;
  e.size = 2;
  snprintf(e.method, sizeof e.method, "fs");
  snprintf(e.addr, sizeof e.addr, "%s/never", dir);
  unsigned char b[128];
  double t0 = sl_now_s();
  int rc = sl_boot_share(&e, b, sizeof b, 0.3);
  snprintf(msg, sizeof msg, "fs: timeout without rank 0 (%.2f s): %s", sl_now_s() - t0, sl_errmsg());
  check(rc == SL_ECOMM && strstr(sl_errmsg(), "never") && sl_now_s() - t0 < 3, msg);
  snprintf(e.method, sizeof e.method, "tcp");
  snprintf(e.addr, sizeof e.addr, "127.0.0.1:%d", free_port());
  rc = sl_boot_share(&e, b, sizeof b, 0.3);
  check(rc == SL_ECOMM && strstr(sl_errmsg(), "could not connect"), "tcp: timeout without rank 0");

  /* environment */
  int found = -1;
  clear_env();
  check(sl_boot_from_env(&e, &found) == SL_OK && found == 0, "env: nothing set -> not found");
  setenv("SL_RANK", "2", 1);
  setenv("SL_WORLD_SIZE", "4", 1);
  setenv("SL_INIT_METHOD", "fs:/shared/id", 1);
  check(sl_boot_from_env(&e, &found) == SL_OK && found && e.rank == 2 && e.size == 4 && e.local_rank == 2 &&
            !strcmp(e.method, "fs") && !strcmp(e.addr, "/shared/id"),
        "env: SL_RANK/SL_WORLD_SIZE + fs:PATH");
  const char *torchrun[] = {"RANK",        "1",         "WORLD_SIZE",  "2",     "LOCAL_RANK", "1",
                            "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "29500", NULL};
  set_env(torchrun);
  check(sl_boot_from_env(&e, &found) == SL_OK && found && e.rank == 1 && e.size == 2 && !strcmp(e.method, "tcp") &&
            !strcmp(e.addr, "127.0.0.1:29500"),
        "env: torchrun RANK/WORLD_SIZE + MASTER_ADDR/PORT -> tcp");
  const char *slurm[] = {"SLURM_PROCID",   "3", "SLURM_NTASKS", "4", "SLURM_LOCALID", "1", "SL_INIT_METHOD",
                         "tcp:node1:4000", NULL};
  set_env(slurm);
  check(sl_boot_from_env(&e, &found) == SL_OK && e.rank == 3 && e.local_rank == 1 && !strcmp(e.addr, "node1:4000"),
        "env: SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID + tcp");
  setenv("SL_INIT_METHOD", "udp:x", 1);
  check(sl_boot_from_env(&e, &found) == SL_EINPUT && strstr(sl_errmsg(), "SL_INIT_METHOD"), "env: bad method refused");
  unsetenv("SL_INIT_METHOD");
  check(sl_boot_from_env(&e, &found) == SL_EINPUT && strstr(sl_errmsg(), "no rendezvous"),
        "env: 4 ranks without a rendezvous refused");
  setenv("SLURM_PROCID", "4", 1);
  setenv("SL_INIT_METHOD", "fs:/x", 1);
  check(sl_boot_from_env(&e, &found) == SL_EINPUT && strstr(sl_errmsg(), "SLURM_PROCID"), "env: rank >= size refused");
  clear_env();
  rmdir(dir);
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
