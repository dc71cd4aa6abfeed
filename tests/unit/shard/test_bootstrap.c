/* tests/unit/shard/test_bootstrap.c — the MPI-free rendezvous (shard/bootstrap.h) on
 * CPU: 4 forked processes share a fake 129-byte NCCL message (random bytes
 * from rank 0) through fs:PATH and through tcp:127.0.0.1:PORT, and every
 * rank must end with rank 0's bytes (the oracle: the parent's copy of the
 * bytes, compared in each child). Also: SHA-256 against FIPS 180-2's
 * examples and HMAC-SHA256 against RFC 4231's test cases (shard/hmac.h); the
 * job key (SL_JOB_SECRET, the fs key file PATH.key, the per-user key
 * $HOME/.shardlm/boot-key: made mode 0600, refused when others may read it,
 * a short secret refused); the fs rendezvous leaves no file behind; a rank
 * with another secret fails at once with a message naming the secret while
 * rank 0 waits on for the real one; two processes claiming one rank fail
 * the job at once; a rank whose rank 0 never comes times out with a
 * message naming the rendezvous; a length mismatch is refused; the
 * environment parser (SL_*, torchrun's RANK/WORLD_SIZE/MASTER_*,
 * SLURM_*) and its errors. tests/cli/sharding/test_rendezvous.sh drives the
 * same code as separate processes with strays and impostors. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "shard/bootstrap.h"
#include "shard/hmac.h"

static int npass, nfail;
static void check(int ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (ok) npass++;
  else nfail++;
}

static unsigned char ID[129];
static int g_last_as = -1; /* >= 0: the last process claims this rank instead of its own */

/* Runs `size` ranks of one rendezvous in forked children, each with timeout
 * timeout_s; the last rank may expect another length (n_rank_last) or hold
 * another secret (secret_last). code[r]: 0 when rank r ended with rank 0's
 * bytes, 3 when it failed within 1 s with a message holding `fast_msg`,
 * else 1. Returns how many got the bytes. */
static int run_world_opt(const char *method, const char *addr, int size, size_t n_rank_last, const char *secret_last,
                         double timeout_s, const char *fast_msg, int *code) {
  pid_t pid[16];
  for (int r = 0; r < size; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      sl_boot_env e;
      memset(&e, 0, sizeof e);
      e.rank = r == size - 1 && g_last_as >= 0 ? g_last_as : r;
      e.size = size;
      snprintf(e.method, sizeof e.method, "%s", method);
      snprintf(e.addr, sizeof e.addr, "%s", addr);
      if (r == size - 1 && secret_last) setenv("SL_JOB_SECRET", secret_last, 1);
      unsigned char blob[256];
      memset(blob, 0, sizeof blob);
      if (r == 0) memcpy(blob, ID, sizeof ID);
      size_t n = (r == size - 1 && n_rank_last) ? n_rank_last : sizeof ID;
      double t0 = sl_now_s();
      int rc = sl_boot_share(&e, blob, n, timeout_s);
      double dt = sl_now_s() - t0;
      if (rc) fprintf(stderr, "  rank %d (%.2f s): %s\n", r, dt, sl_errmsg());
      if (rc == SL_OK && memcmp(blob, ID, sizeof ID) == 0) _exit(0);
      _exit(rc && fast_msg && strstr(sl_errmsg(), fast_msg) && dt < 1.0 ? 3 : 1);
    }
  }
  int good = 0;
  for (int r = 0; r < size; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    int c = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    if (code) code[r] = c;
    good += c == 0;
  }
  return good;
}

static int run_world(const char *method, const char *addr, int size, size_t n_rank_last) {
  return run_world_opt(method, addr, size, n_rank_last, NULL, 5.0, NULL, NULL);
}

static int hex_is(const unsigned char *d, const char *hex) {
  char got[65];
  for (int i = 0; i < 32; i++) snprintf(got + 2 * i, 3, "%02x", d[i]);
  return !strcmp(got, hex);
}

/* FIPS 180-2 appendix B and RFC 4231 section 4 (test case 5, a truncated
 * output, is not a property of the function). */
static void crypto_vectors(void) {
  unsigned char d[32], key[131], msg[50];
  sl_sha256_of("abc", 3, d);
  check(hex_is(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"), "sha256(\"abc\")");
  sl_sha256_of("", 0, d);
  check(hex_is(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), "sha256(\"\")");
  const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sl_sha256_of(m2, strlen(m2), d);
  check(hex_is(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"), "sha256(448-bit message)");
  sl_sha256 c;
  sl_sha256_init(&c);
  char as[1000];
  memset(as, 'a', sizeof as);
  for (int i = 0; i < 1000; i++) sl_sha256_update(&c, as, i % 2 ? 1000 : 999); /* uneven pieces */
  sl_sha256_update(&c, as, 500);
  sl_sha256_final(&c, d);
  check(hex_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
        "sha256(a million 'a'), fed in pieces of 999 and 1000 bytes");
  memset(key, 0x0b, 20);
  sl_hmac_of(key, 20, "Hi There", 8, d);
  check(hex_is(d, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"), "hmac: RFC 4231 case 1");
  sl_hmac_of("Jefe", 4, "what do ya want for nothing?", 28, d);
  check(hex_is(d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"), "hmac: RFC 4231 case 2");
  memset(key, 0xaa, 20);
  memset(msg, 0xdd, 50);
  sl_hmac_of(key, 20, msg, 50, d);
  check(hex_is(d, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"), "hmac: RFC 4231 case 3");
  for (int i = 0; i < 25; i++) key[i] = (unsigned char)(i + 1);
  memset(msg, 0xcd, 50);
  sl_hmac_of(key, 25, msg, 50, d);
  check(hex_is(d, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"), "hmac: RFC 4231 case 4");
  memset(key, 0xaa, 131);
  const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  sl_hmac_of(key, 131, m6, strlen(m6), d);
  check(hex_is(d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        "hmac: RFC 4231 case 6 (a key longer than a block)");
  const char *m7 = "This is a test using a larger than block-size key and a larger than block-size data. The key "
                   "needs to be hashed before being used by the HMAC algorithm.";
  sl_hmac h;
  sl_hmac_init(&h, key, 131);
  sl_hmac_update(&h, m7, 10);
  sl_hmac_update(&h, m7 + 10, strlen(m7) - 10);
  sl_hmac_final(&h, d);
  check(hex_is(d, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
        "hmac: RFC 4231 case 7 (long key and data, in two pieces)");
  check(sl_ct_equal("abcd", "abcd", 4) && !sl_ct_equal("abcd", "abce", 4), "constant-time compare");
}

static unsigned mode_of(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0u;
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
  char dir[] = "/tmp/sl-boot.XXXXXX", path[256], key[300], addr[64], msg[600], home[300];
  if (!mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/nccl-id", dir);
  snprintf(key, sizeof key, "%s.key", path);
  snprintf(home, sizeof home, "%s/home", dir);
  mkdir(home, 0755);
  setenv("HOME", home, 1); /* the per-user key of tcp without a secret goes here */
  unsetenv("SL_JOB_SECRET");
  unsetenv("SLURM_JOB_ID");
  unsetenv("TORCHELASTIC_RUN_ID");
  crypto_vectors();

  check(run_world("fs", path, 4, 0) == 4, "fs: 4 ranks get rank 0's 129 bytes (key file PATH.key)");
  check(access(path, F_OK) != 0 && access(key, F_OK) != 0, "fs: the rendezvous and key files are removed afterwards");
  setenv("SL_JOB_SECRET", "0123456789abcdef-unit", 1);
  check(run_world("fs", path, 3, 0) == 3, "fs: 3 ranks with SL_JOB_SECRET");
  int code[16];
  int good =
      run_world_opt("fs", path, 2, 0, "another-secret-of-16+", 1.0, "not written with this rank's job secret", code);
  check(good == 0 && code[1] == 3, "fs: a rank with another SL_JOB_SECRET fails within 1 s, naming the secret");
  unsetenv("SL_JOB_SECRET");
  /* a key file others may read is refused, never used */
  int fd = open(key, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd >= 0) {
    (void)!write(fd, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", 65);
    fchmod(fd, 0644);
    close(fd);
  }
  sl_boot_env e;
  memset(&e, 0, sizeof e);
  e.rank = 1;
  e.size = 2;
  snprintf(e.method, sizeof e.method, "fs");
  snprintf(e.addr, sizeof e.addr, "%s", path);
  unsigned char b[129];
  int rc = sl_boot_share(&e, b, sizeof b, 0.3);
  snprintf(msg, sizeof msg, "fs: a key file of mode 0644 is refused: %s", sl_errmsg());
  check(rc == SL_ECOMM && strstr(sl_errmsg(), "not a private file") && strstr(sl_errmsg(), "0644"), msg);
  unlink(key);

  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  check(run_world("tcp", addr, 4, 0) == 4, "tcp: 4 ranks get rank 0's 129 bytes (per-user key)");
  char hkey[400], hdir[340];
  snprintf(hdir, sizeof hdir, "%s/.shardlm", home);
  snprintf(hkey, sizeof hkey, "%s/boot-key", hdir);
  snprintf(msg, sizeof msg, "tcp: the per-user key %s is mode 0600 (%04o), its directory 0700 (%04o)", hkey,
           mode_of(hkey), mode_of(hdir));
  check(mode_of(hkey) == 0600 && mode_of(hdir) == 0700, msg);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  setenv("SLURM_JOB_ID", "4242", 1);
  good = run_world_opt("tcp", addr, 2, 0, NULL, 3.0, NULL, code);
  check(good == 2, "tcp: the per-user key with a Slurm job id");
  unsetenv("SLURM_JOB_ID");
  setenv("SL_JOB_SECRET", "0123456789abcdef-unit", 1);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  check(run_world("tcp", addr, 3, 0) == 3, "tcp: 3 ranks with SL_JOB_SECRET");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  check(run_world("tcp", addr, 2, 64) == 0, "tcp: a length mismatch fails on both ranks");
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  double t0 = sl_now_s();
  good = run_world_opt("tcp", addr, 3, 0, "another-secret-of-16+", 1.0, "do not share one secret", code);
  snprintf(msg, sizeof msg, "tcp: a rank with another secret fails within 1 s (code %d), rank 0 times out (%.1f s)",
           code[2], sl_now_s() - t0);
  check(good == 1 && code[1] == 0 && code[2] == 3 && code[0] == 1, msg);
  g_last_as = 1; /* ranks 0, 1, 1 */
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  good = run_world_opt("tcp", addr, 3, 0, NULL, 3.0, "another process already took", code);
  snprintf(msg, sizeof msg, "tcp: two processes claiming rank 1: rank 0 and the second fail at once (%d %d %d)",
           code[0], code[1], code[2]);
  check(good <= 1 && code[0] == 3 && (code[1] == 3 || code[2] == 3), msg);
  g_last_as = -1;
  setenv("SL_JOB_SECRET", "short", 1);
  rc = sl_boot_share(&e, b, sizeof b, 0.3);
  check(rc == SL_EINPUT && strstr(sl_errmsg(), "SL_JOB_SECRET is 5 characters"),
        "a secret under 16 characters is refused");
  unsetenv("SL_JOB_SECRET");

  /* rank 1 alone: rank 0 never comes */
  snprintf(e.addr, sizeof e.addr, "%s/never", dir);
  t0 = sl_now_s();
  rc = sl_boot_share(&e, b, sizeof b, 0.3);
  snprintf(msg, sizeof msg, "fs: timeout without rank 0 (%.2f s): %s", sl_now_s() - t0, sl_errmsg());
  check(rc == SL_ECOMM && strstr(sl_errmsg(), "never") && sl_now_s() - t0 < 3, msg);
  snprintf(key, sizeof key, "%s/never.key", dir);
  unlink(key);
  snprintf(e.method, sizeof e.method, "tcp");
  snprintf(e.addr, sizeof e.addr, "127.0.0.1:%d", free_port());
  rc = sl_boot_share(&e, b, sizeof b, 0.3);
  check(rc == SL_ECOMM && strstr(sl_errmsg(), "could not connect"), "tcp: timeout without rank 0");
  unlink(hkey);
  rmdir(hdir);
  rmdir(home);

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
