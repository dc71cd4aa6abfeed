/* tests/cli/sharding/test_rendezvous.c — the processes that
 * test_rendezvous.sh starts around the MPI-free NCCL rendezvous
 * (shard/bootstrap.c). No MPI: each rank is its own process, with its rank,
 * world and rendezvous in the environment, as torchrun or srun give them.
 *
 *   rank SEED TIMEOUT          a rank: sl_boot_from_env, then sl_boot_share
 *                              of the 129-byte message sl_comm_nccl_create_boot
 *                              hands out ({1, ncclUniqueId}: here 128 bytes
 *                              made from SEED on rank 0, zeros elsewhere);
 *                              prints "rank R of N: id HEX"; exit 0, 2 on bad
 *                              input (SL_EINPUT), 1 on any other failure
 *   id SEED                    prints the HEX that rank 0 hands out
 *   port                       prints a free TCP port of 127.0.0.1
 *   stray HOST:PORT HOW        connects (retrying until something listens),
 *                              prints "stray from ADDR" (its own address),
 *                              then HOW: close (at once), garbage (sends an
 *                              HTTP request), silent (sends nothing), and
 *                              reads until the peer closes (at most 20 s)
 *   impostor HOST:PORT RANK SIZE SEED   knows the protocol but not the secret:
 *                              reads rank 0's hello, answers with a
 *                              well-formed proof for RANK of SIZE whose HMAC
 *                              is random, reads until the peer closes, and
 *                              prints "impostor from ADDR: received N bytes,
 *                              id seen: yes|no" (yes when any 8 bytes of
 *                              SEED's id occur in what it received) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "shard/bootstrap.h"

enum { MSG = 129 };

static void make_id(unsigned seed, unsigned char *m) {
  uint64_t z = 0x9e3779b97f4a7c15ull * (seed + 1);
  m[0] = 1;
  for (int i = 1; i < MSG; i++) {
    z ^= z << 13;
    z ^= z >> 7;
    z ^= z << 17;
    m[i] = (unsigned char)(z >> 24);
  }
}

static void print_hex(const unsigned char *m, size_t n) {
  for (size_t i = 0; i < n; i++) printf("%02x", m[i]);
}

/* Connects to HOST:PORT, retrying for 20 s; prints nothing. */
static int dial(const char *hostport, char *self, size_t nself) {
  char host[256];
  const char *c = strrchr(hostport, ':');
  if (!c) return -1;
  snprintf(host, sizeof host, "%.*s", (int)(c - hostport), hostport);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, c + 1, &hints, &ai) != 0) return -1;
  int fd = -1;
  for (int i = 0; i < 1000 && fd < 0; i++) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
      struct timespec ts = {0, 20000000L};
      nanosleep(&ts, NULL);
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) return -1;
  struct sockaddr_in me;
  socklen_t l = sizeof me;
  getsockname(fd, (struct sockaddr *)&me, &l);
  char ip[64];
  inet_ntop(AF_INET, &me.sin_addr, ip, sizeof ip);
  snprintf(self, nself, "%s:%d", ip, ntohs(me.sin_port));
  struct timeval tv = {20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

/* Reads until the peer closes (or 20 s); returns the bytes in buf. */
static size_t drain(int fd, unsigned char *buf, size_t cap) {
  size_t got = 0;
  for (;;) {
    unsigned char tmp[512];
    ssize_t k = recv(fd, tmp, sizeof tmp, 0);
    if (k <= 0) break;
    for (ssize_t i = 0; i < k && got < cap; i++) buf[got++] = tmp[i];
  }
  return got;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc >= 4 && !strcmp(argv[1], "rank")) {
    sl_boot_env e;
    int found = 0;
    if (sl_boot_from_env(&e, &found) != SL_OK || !found) {
      fprintf(stderr, "rendezvous: %s\n", found ? sl_errmsg() : "no SL_RANK/RANK/SLURM_PROCID in the environment");
      return 2;
    }
    unsigned char m[MSG];
    memset(m, 0, sizeof m);
    if (e.rank == 0) make_id((unsigned)atoi(argv[2]), m);
    double t0 = sl_now_s();
    int rc = sl_boot_share(&e, m, sizeof m, atof(argv[3]));
    if (rc) {
      fprintf(stderr, "rendezvous: rank %d failed after %.2f s: %s\n", e.rank, sl_now_s() - t0, sl_errmsg());
      return rc == SL_EINPUT ? 2 : 1;
    }
    printf("rank %d of %d: id ", e.rank, e.size);
    print_hex(m, sizeof m);
    printf("\n");
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "id")) {
    unsigned char m[MSG];
    make_id((unsigned)atoi(argv[2]), m);
    print_hex(m, sizeof m);
    printf("\n");
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "port")) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &l) != 0) return 1;
    printf("%d\n", ntohs(a.sin_port));
    close(fd);
    return 0;
  }
  if (argc >= 4 && !strcmp(argv[1], "stray")) {
    char self[96];
    int fd = dial(argv[2], self, sizeof self);
    if (fd < 0) return 1;
    printf("stray from %s\n", self);
    if (!strcmp(argv[3], "close")) {
      close(fd);
      return 0;
    }
    if (!strcmp(argv[3], "garbage")) {
      const char *req = "GET /health HTTP/1.0\r\n\r\n";
      (void)!send(fd, req, strlen(req), MSG_NOSIGNAL);
    }
    unsigned char buf[4096];
    size_t got = drain(fd, buf, sizeof buf);
    printf("stray from %s: received %zu bytes before the peer closed\n", self, got);
    close(fd);
    return 0;
  }
  if (argc >= 6 && !strcmp(argv[1], "impostor")) {
    char self[96];
    int fd = dial(argv[2], self, sizeof self);
    if (fd < 0) return 1;
    unsigned char buf[8192], proof[88];
    size_t got = 0;
    while (got < 56) { /* the hello: magic, u64 n, u32 size, u32 0, nonce[32] */
      ssize_t k = recv(fd, buf + got, 56 - got, 0);
      if (k <= 0) break;
      got += (size_t)k;
    }
    memcpy(proof, "SLBOOTR2", 8);
    uint32_t r = (uint32_t)atoi(argv[3]), sz = (uint32_t)atoi(argv[4]);
    uint64_t n = MSG;
    for (int i = 0; i < 4; i++) proof[8 + i] = (unsigned char)(r >> (8 * i));
    for (int i = 0; i < 4; i++) proof[12 + i] = (unsigned char)(sz >> (8 * i));
    for (int i = 0; i < 8; i++) proof[16 + i] = (unsigned char)(n >> (8 * i));
    srand((unsigned)getpid());
    for (int i = 24; i < 88; i++) proof[i] = (unsigned char)rand(); /* nonce and a guessed HMAC */
    (void)!send(fd, proof, sizeof proof, MSG_NOSIGNAL);
    got += drain(fd, buf + got, sizeof buf - got);
    close(fd);
    unsigned char m[MSG];
    make_id((unsigned)atoi(argv[5]), m);
    int seen = 0;
    for (int i = 1; i + 8 <= MSG && !seen; i++) seen = memmem(buf, got, m + i, 8) != NULL;
    printf("impostor from %s: received %zu bytes, id seen: %s\n", self, got, seen ? "yes" : "no");
    return 0;
  }
  fprintf(stderr, "usage: test_rendezvous rank SEED TIMEOUT | id SEED | port | stray HOST:PORT close|garbage|silent | "
                  "impostor HOST:PORT RANK SIZE SEED\n");
  return 2;
}
