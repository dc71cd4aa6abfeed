/* shard/bootstrap.c — the file and TCP rendezvous of shard/bootstrap.h:
 * ranks from the environment, a job key every rank proves it holds, rank
 * 0's blob handed to every other rank encrypted and authenticated under it.
 *
 * Key: K = HMAC-SHA256(secret, "shardlm-boot-key" || job id), the secret
 * from SL_JOB_SECRET, else (fs:) the key file PATH.key, else (tcp:) the
 * per-user key file $HOME/.shardlm/boot-key with the launcher's job id
 * (SLURM_JOB_ID, else TORCHELASTIC_RUN_ID) mixed in. A key file is made by
 * whichever rank finds none: 64 random hex digits written to a temporary
 * name opened O_CREAT|O_EXCL mode 0600, then linked to the name (the first
 * link wins, the others read the winner's); a key file that is not this
 * user's, or that others may read, is refused.
 *
 * fs:PATH  (every file mode 0600, written under a temporary O_EXCL name and
 *          renamed)
 *   PATH           "SLBOOT02" | u64 n | u32 size | u32 0 | nonce[32] | ct[n]
 *                  | HMAC(K, "fs" | the 56 bytes before ct | ct)
 *   PATH.ack.<r>   HMAC(K, "ack" | nonce | u32 r): rank 0 counts an ack only
 *                  when it matches this rendezvous' nonce.
 * tcp:HOST:PORT  per connection (rank 0 serves many at once, non-blocking,
 *   each with its own deadline):
 *   rank 0 -> r    hello  "SLBOOT02" | u64 n | u32 size | u32 0 | nonce0[32]
 *   r -> rank 0    proof  "SLBOOTR2" | u32 rank | u32 size | u64 n |
 *                         nonce1[32] | HMAC(K, "rank" | hello | the 56 bytes)
 *   rank 0 -> r    'A' | HMAC(K, "root" | hello | proof | ct) | ct[n], or one
 *                  refusal byte: 'N' (bad proof), 'S' (world size), 'L'
 *                  (length), 'D' (rank taken) and close
 *   r -> rank 0    'k' once the rank has checked rank 0's HMAC
 * ct = blob XOR a keystream of HMAC(K, "stream" | nonces | u64 block), so
 * the blob never crosses the wire or sits in a file in clear. A connection
 * that closes, sends anything but a valid proof or stays silent is dropped
 * and logged (one line naming its address); it never fails the job. */
#define _GNU_SOURCE
#include "shard/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "shard/hmac.h"

static const char MAGIC[8] = {'S', 'L', 'B', 'O', 'O', 'T', '0', '2'};      /* rank 0's hello, the fs file */
static const char MAGIC_RANK[8] = {'S', 'L', 'B', 'O', 'O', 'T', 'R', '2'}; /* a rank's proof */
enum {
  NONCE = 32,
  MACN = 32,
  HELLO = 24 + NONCE,        /* magic, u64 n, u32 size, u32 0, nonce */
  PROOF = 24 + NONCE + MACN, /* magic, u32 rank, u32 size, u64 n, nonce, mac */
  MIN_SECRET = 16,           /* characters of SL_JOB_SECRET */
  MAX_CONN = 64,             /* connections rank 0 serves at once */
};
static const double CONN_S = 10.0; /* a connection's time to authenticate and take the id */

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* ---- environment ---------------------------------------------------------- */

static int parse_int(const char *var, const char *v, int lo, int hi, int *out) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || !end || *end || end == v || x < lo || x > hi)
    return sl_fail(SL_EINPUT, "%s='%s': expected an integer in [%d, %d]", var, v, lo, hi);
  *out = (int)x;
  return SL_OK;
}

/* Set 0 is shardlm's own (base/env.c's table), the others the launchers'. */
static const char *boot_var(int set, const char *name) { return set == 0 ? sl_env_str(name) : getenv(name); }

int sl_boot_from_env(sl_boot_env *e, int *found) {
  static const char *sets[3][4] = {{"SL_RANK", "SL_WORLD_SIZE", "SL_LOCAL_RANK", "SL_RANK/SL_WORLD_SIZE"},
                                   {"RANK", "WORLD_SIZE", "LOCAL_RANK", "RANK/WORLD_SIZE"},
                                   {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_PROCID/SLURM_NTASKS"}};
  memset(e, 0, sizeof *e);
  *found = 0;
  int k = 0;
  while (k < 3 && !boot_var(k, sets[k][0])) k++;
  if (k == 3) return SL_OK;
  const char *r = boot_var(k, sets[k][0]), *s = boot_var(k, sets[k][1]), *l = boot_var(k, sets[k][2]);
  if (!s) return sl_fail(SL_EINPUT, "%s is set but %s is not", sets[k][0], sets[k][1]);
  int rc = parse_int(sets[k][1], s, 1, 1 << 20, &e->size);
  if (!rc) rc = parse_int(sets[k][0], r, 0, e->size - 1, &e->rank);
  if (!rc && l) rc = parse_int(sets[k][2], l, 0, e->size - 1, &e->local_rank);
  else if (!rc) e->local_rank = e->rank;
  if (rc) return rc;
  snprintf(e->source, sizeof e->source, "%s", sets[k][3]);
  const char *m = sl_env_str("SL_INIT_METHOD");
  if (m && *m) {
    if (!strncmp(m, "fs:", 3) && m[3]) {
      snprintf(e->method, sizeof e->method, "fs");
      snprintf(e->addr, sizeof e->addr, "%s", m + 3);
    } else if (!strncmp(m, "tcp:", 4) && strchr(m + 4, ':')) {
      snprintf(e->method, sizeof e->method, "tcp");
      snprintf(e->addr, sizeof e->addr, "%s", m + 4);
    } else {
      return sl_fail(SL_EINPUT, "SL_INIT_METHOD='%s': expected fs:PATH or tcp:HOST:PORT", m);
    }
  } else if (getenv("MASTER_ADDR") && getenv("MASTER_PORT")) {
    snprintf(e->method, sizeof e->method, "tcp");
    snprintf(e->addr, sizeof e->addr, "%s:%s", getenv("MASTER_ADDR"), getenv("MASTER_PORT"));
  } else if (e->size > 1) {
    return sl_fail(SL_EINPUT,
                   "%s give a world of %d ranks but no rendezvous: set SL_INIT_METHOD=fs:PATH "
                   "or tcp:HOST:PORT (or MASTER_ADDR and MASTER_PORT)",
                   e->source, e->size);
  }
  *found = 1;
  return SL_OK;
}

/* ---- the job key -------------------------------------------------------------- */

typedef struct {
  unsigned char k[32];
  char from[1200]; /* where the secret came from, for messages */
  char file[1200]; /* fs: the key file beside the rendezvous, removed by rank 0 at the end; else "" */
} boot_key;

/* HMAC(K, label | a | b | c) */
static void mac3(const unsigned char k[32], const char *label, const void *a, size_t na, const void *b, size_t nb,
                 const void *c, size_t nc, unsigned char out[MACN]) {
  sl_hmac h;
  sl_hmac_init(&h, k, 32);
  sl_hmac_update(&h, label, strlen(label) + 1);
  if (na) sl_hmac_update(&h, a, na);
  if (nb) sl_hmac_update(&h, b, nb);
  if (nc) sl_hmac_update(&h, c, nc);
  sl_hmac_final(&h, out);
}

/* buf ^= the keystream HMAC(K, "stream" | ctx | u64 block) */
static void xor_stream(const unsigned char k[32], const unsigned char *ctx, size_t nctx, unsigned char *buf, size_t n) {
  for (uint64_t blk = 0; blk * MACN < n; blk++) {
    unsigned char ctr[8], ks[MACN];
    put_u64(ctr, blk);
    mac3(k, "stream", ctx, nctx, ctr, 8, NULL, 0, ks);
    for (size_t i = 0; i < MACN && blk * MACN + i < n; i++) buf[blk * MACN + i] ^= ks[i];
  }
}

static int is_hex64(const char *s) {
  for (int i = 0; i < 64; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

/* Reads the key file at path, or makes it: 64 random hex digits and a
 * newline written to a temporary name created O_EXCL with mode 0600, then
 * linked to path (atomic: the first rank to link wins; a rank that loses
 * reads the winner's). A key file that is not a regular file of this user,
 * or that anyone else may read or write, is refused. */
static int key_file(const char *path, char hex[65]) {
  for (int attempt = 0; attempt < 4; attempt++) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st;
      char buf[80];
      ssize_t k = -1;
      int st_ok = fstat(fd, &st) == 0;
      int mine = st_ok && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 077);
      if (mine) k = read(fd, buf, sizeof buf);
      close(fd);
      if (!mine)
        return sl_fail(SL_ECOMM,
                       "bootstrap: the key file %s is not a private file of this user (mode %04o, owner uid %u; "
                       "uid %u needs a regular file of mode 0600): remove it (the ranks then make a new one) or "
                       "set SL_JOB_SECRET",
                       path, st_ok ? (unsigned)(st.st_mode & 07777) : 0u, st_ok ? (unsigned)st.st_uid : 0u,
                       (unsigned)geteuid());
      if (k < 64 || !is_hex64(buf) || (k > 64 && !(k == 65 && buf[64] == '\n')))
        return sl_fail(SL_ECOMM,
                       "bootstrap: the key file %s holds %zd bytes, not 64 hex digits and a newline: remove it "
                       "(the ranks then make a new one) or set SL_JOB_SECRET",
                       path, k);
      memcpy(hex, buf, 64);
      hex[64] = 0;
      return SL_OK;
    }
    if (errno != ENOENT) return sl_fail(SL_ECOMM, "bootstrap: cannot open the key file %s: %s", path, strerror(errno));
    unsigned char r[32];
    if (sl_random_bytes(r, sizeof r))
      return sl_fail(SL_ECOMM, "bootstrap: no random bytes for the key file %s: %s", path, strerror(errno));
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", r[i]);
    hex[64] = '\n';
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.%02x%02x%02x", path, (int)getpid(), r[0] ^ r[5], r[1] ^ r[9], r[2] ^ r[7]);
    int t = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (t < 0) return sl_fail(SL_ECOMM, "bootstrap: cannot create the key file %s: %s", tmp, strerror(errno));
    ssize_t w = write(t, hex, 65);
    int bad = w != 65 || fsync(t) != 0;
    int e = errno;
    close(t);
    int linked = !bad && link(tmp, path) == 0;
    if (!bad && !linked) e = errno;
    unlink(tmp);
    hex[64] = 0;
    if (linked) return SL_OK;
    if (bad || e != EEXIST)
      return sl_fail(SL_ECOMM, "bootstrap: cannot write the key file %s: %s (or set SL_JOB_SECRET)", path, strerror(e));
    /* another rank linked its key first: read that one */
  }
  return sl_fail(SL_ECOMM, "bootstrap: the key file %s keeps appearing and vanishing", path);
}

/* The job key of this rendezvous and, in key->from, where its secret came from. */
static int job_key(const sl_boot_env *e, boot_key *key) {
  memset(key, 0, sizeof *key);
  char hex[65], path[1200];
  const char *secret = sl_env_str("SL_JOB_SECRET"), *job = "";
  int fs = !strcmp(e->method, "fs");
  if (secret) {
    if (strlen(secret) < MIN_SECRET)
      return sl_fail(SL_EINPUT,
                     "SL_JOB_SECRET is %zu characters: it needs at least %d (the same on every rank of the job, e.g. "
                     "SL_JOB_SECRET=$(openssl rand -hex 32))",
                     strlen(secret), MIN_SECRET);
    snprintf(key->from, sizeof key->from, "SL_JOB_SECRET");
  } else if (fs) {
    snprintf(path, sizeof path, "%s.key", e->addr);
    int rc = key_file(path, hex);
    if (rc) return rc;
    secret = hex;
    snprintf(key->from, sizeof key->from, "the key file %s", path);
    snprintf(key->file, sizeof key->file, "%s", path);
  } else {
    const char *home = getenv("HOME");
    if (!home || !*home)
      return sl_fail(SL_EINPUT,
                     "bootstrap tcp:%s needs a job secret: set SL_JOB_SECRET (the same on every rank, e.g. "
                     "$(openssl rand -hex 32)), or HOME for the per-user key file $HOME/.shardlm/boot-key",
                     e->addr);
    snprintf(path, sizeof path, "%s/.shardlm", home);
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
      return sl_fail(SL_ECOMM, "bootstrap tcp:%s: cannot make %s for the per-user key: %s (or set SL_JOB_SECRET)",
                     e->addr, path, strerror(errno));
    snprintf(path, sizeof path, "%s/.shardlm/boot-key", home);
    int rc = key_file(path, hex);
    if (rc) return rc;
    secret = hex;
    const char *slurm = getenv("SLURM_JOB_ID"), *torch = getenv("TORCHELASTIC_RUN_ID");
    job = slurm && *slurm ? slurm : torch && *torch ? torch : "";
    snprintf(key->from, sizeof key->from, "the per-user key file %s%s%s%s", path, *job ? " and the job id " : "", job,
             *job ? (slurm && *slurm ? " (SLURM_JOB_ID)" : " (TORCHELASTIC_RUN_ID)") : "");
  }
  sl_hmac h;
  sl_hmac_init(&h, secret, strlen(secret));
  sl_hmac_update(&h, "shardlm-boot-key", 17);
  sl_hmac_update(&h, job, strlen(job));
  sl_hmac_final(&h, key->k);
  memset(hex, 0, sizeof hex);
  return SL_OK;
}

/* ---- fs --------------------------------------------------------------------- */

static int read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  size_t put = 0;
  while (put < n) {
    ssize_t w = write(fd, (const char *)buf + put, n - put);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    put += (size_t)w;
  }
  return 0;
}

/* path := a | b | c, mode 0600 from creation: a temporary name opened
 * O_EXCL, written, fsynced, renamed over path. */
static int write_file_atomic(const char *path, const void *a, size_t na, const void *b, size_t nb, const void *c,
                             size_t nc) {
  char tmp[1300];
  unsigned char r[4] = {0};
  (void)sl_random_bytes(r, sizeof r);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d.%02x%02x%02x%02x", path, (int)getpid(), r[0], r[1], r[2], r[3]);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return sl_fail(SL_ECOMM, "bootstrap fs: cannot create %s: %s", tmp, strerror(errno));
  int bad = write_full(fd, a, na) || (nb && write_full(fd, b, nb)) || (nc && write_full(fd, c, nc)) || fsync(fd);
  int e = errno;
  close(fd);
  if (bad || rename(tmp, path) != 0) {
    if (!bad) e = errno;
    unlink(tmp);
    return sl_fail(SL_ECOMM, "bootstrap fs: cannot write %s: %s", path, strerror(e));
  }
  return SL_OK;
}

static void ack_mac(const boot_key *key, const unsigned char *nonce, int rank, unsigned char out[MACN]) {
  unsigned char r[4];
  put_u32(r, (uint32_t)rank);
  mac3(key->k, "ack", nonce, NONCE, r, 4, NULL, 0, out);
}

/* 1: PATH.ack.<r> holds this rendezvous' ack of rank r; 0: absent; -1:
 * present but not this rendezvous' (another job's, or forged) */
static int ack_state(const char *addr, int r, const unsigned char want[MACN]) {
  char ack[1200];
  snprintf(ack, sizeof ack, "%s.ack.%d", addr, r);
  int fd = open(ack, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  unsigned char got[MACN + 1];
  ssize_t k = read(fd, got, sizeof got);
  close(fd);
  return k == MACN && sl_ct_equal(got, want, MACN) ? 1 : -1;
}

static void fs_cleanup(const sl_boot_env *e, const boot_key *key) {
  char ack[1200];
  unlink(e->addr);
  for (int r = 1; r < e->size; r++) {
    snprintf(ack, sizeof ack, "%s.ack.%d", e->addr, r);
    unlink(ack);
  }
  if (key->file[0]) unlink(key->file);
}

static int share_fs(const sl_boot_env *e, const boot_key *key, void *blob, size_t n, double timeout_s) {
  double t_end = sl_now_s() + timeout_s;
  unsigned char hdr[HELLO], mac[MACN], want[MACN];
  if (e->rank == 0) {
    memcpy(hdr, MAGIC, 8);
    put_u64(hdr + 8, n);
    put_u32(hdr + 16, (uint32_t)e->size);
    put_u32(hdr + 20, 0);
    if (sl_random_bytes(hdr + 24, NONCE))
      return sl_fail(SL_ECOMM, "bootstrap fs:%s: no random bytes: %s", e->addr, strerror(errno));
    unsigned char *ct = malloc(n ? n : 1);
    if (!ct) return sl_fail(SL_ENOMEM, "bootstrap fs:%s: %zu bytes", e->addr, n);
    memcpy(ct, blob, n);
    xor_stream(key->k, hdr + 24, NONCE, ct, n);
    mac3(key->k, "fs", hdr, HELLO, ct, n, NULL, 0, mac);
    int rc = write_file_atomic(e->addr, hdr, HELLO, ct, n, mac, MACN);
    free(ct);
    if (rc) return rc;
    int missing = 0, foreign = 0;
    for (int r = 1; r < e->size; r++) {
      ack_mac(key, hdr + 24, r, want);
      int s;
      while ((s = ack_state(e->addr, r, want)) != 1 && sl_now_s() < t_end) nap_ms(10);
      if (s != 1) missing++;
    }
    if (missing) {
      char list[512] = "";
      size_t l = 0;
      for (int r = 1; r < e->size && l < sizeof list - 16; r++) {
        ack_mac(key, hdr + 24, r, want);
        int s = ack_state(e->addr, r, want);
        if (s == 1) continue;
        foreign += s < 0;
        l += (size_t)snprintf(list + l, sizeof list - l, "%s%d%s", l ? ", " : "", r, s < 0 ? " (a foreign ack)" : "");
      }
      fs_cleanup(e, key);
      return sl_fail(SL_ECOMM, "bootstrap fs:%s: %d of %d ranks did not read the id within %.1f s (ranks %s)%s",
                     e->addr, missing, e->size - 1, timeout_s, list,
                     foreign ? "; a foreign ack is one not made with this rendezvous' key and nonce: a file left "
                               "by another job (use a fresh path per job) or a rank with another secret"
                             : "");
    }
    fs_cleanup(e, key);
    return SL_OK;
  }
  for (;;) {
    int fd = open(e->addr, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st;
      int ok = fstat(fd, &st) == 0 && (size_t)st.st_size >= HELLO && read_full(fd, hdr, HELLO) == 0;
      if (ok && (memcmp(hdr, MAGIC, 8) != 0 || get_u64(hdr + 8) != n || get_u32(hdr + 16) != (uint32_t)e->size)) {
        close(fd);
        return sl_fail(SL_ECOMM,
                       "bootstrap fs:%s: not this job's rendezvous file: magic %.8s, %llu bytes of a %u-rank world "
                       "(this rank of %d expects %.8s, %zu bytes)",
                       e->addr, (const char *)hdr, (unsigned long long)get_u64(hdr + 8), get_u32(hdr + 16), e->size,
                       MAGIC, n);
      }
      if (ok && (size_t)st.st_size != HELLO + n + MACN) {
        close(fd);
        return sl_fail(SL_ECOMM, "bootstrap fs:%s: the rendezvous file holds %lld bytes, expected %zu", e->addr,
                       (long long)st.st_size, (size_t)HELLO + n + MACN);
      }
      ok = ok && read_full(fd, blob, n) == 0 && read_full(fd, mac, MACN) == 0;
      close(fd);
      if (ok) {
        mac3(key->k, "fs", hdr, HELLO, blob, n, NULL, 0, want);
        if (!sl_ct_equal(want, mac, MACN)) {
          memset(blob, 0, n);
          return sl_fail(SL_ECOMM,
                         "bootstrap fs:%s: rank %d: the rendezvous file was not written with this rank's job secret "
                         "(from %s): rank 0 uses another secret, or the file is left from another job (use a fresh "
                         "path per job)",
                         e->addr, e->rank, key->from);
        }
        xor_stream(key->k, hdr + 24, NONCE, blob, n);
        break;
      }
    }
    if (sl_now_s() >= t_end)
      return sl_fail(SL_ECOMM, "bootstrap fs:%s: rank %d found no id from rank 0 within %.1f s", e->addr, e->rank,
                     timeout_s);
    nap_ms(10);
  }
  char ack[1200];
  snprintf(ack, sizeof ack, "%s.ack.%d", e->addr, e->rank);
  ack_mac(key, hdr + 24, e->rank, want);
  return write_file_atomic(ack, want, MACN, NULL, 0, NULL, 0);
}

/* ---- tcp -------------------------------------------------------------------- */

static int split_hostport(const sl_boot_env *e, char *host, size_t nh, char *port, size_t np) {
  const char *c = strrchr(e->addr, ':');
  if (!c || c == e->addr || !c[1]) return sl_fail(SL_EINPUT, "bootstrap tcp:%s: expected HOST:PORT", e->addr);
  snprintf(host, nh, "%.*s", (int)(c - e->addr), e->addr);
  snprintf(port, np, "%s", c + 1);
  return SL_OK;
}

static void peer_name(const struct sockaddr *sa, socklen_t l, char *out, size_t n) {
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(sa, l, h, sizeof h, s, sizeof s, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    snprintf(out, n, "(unknown address)");
  else snprintf(out, n, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, s);
}

/* Waits until fd is readable/writable or the deadline passes. */
static int wait_fd(int fd, short ev, double t_end) {
  for (;;) {
    double left = t_end - sl_now_s();
    if (left <= 0) return -1;
    struct pollfd p = {fd, ev, 0};
    int r = poll(&p, 1, (int)(left * 1000) + 1);
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return -1;
  }
}

/* 0: n bytes moved; -1: error, end of stream or deadline (*done says how many moved). */
static int io_deadline(int fd, void *buf, size_t n, int wr, double t_end, size_t *done_out) {
  size_t done = 0;
  int rc = 0;
  while (done < n) {
    if (wait_fd(fd, wr ? POLLOUT : POLLIN, t_end)) {
      rc = -1;
      break;
    }
    ssize_t k =
        wr ? send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL) : recv(fd, (char *)buf + done, n - done, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) {
      rc = -1;
      break;
    }
    done += (size_t)k;
  }
  if (done_out) *done_out = done;
  return rc;
}

/* One connection rank 0 serves. */
typedef struct {
  int fd, st; /* st: 0 free, 1 sending the hello, 2 reading the proof, 3 sending the id, 4 reading the ack */
  int rank;   /* the rank it proved to be (st >= 3) */
  double t_end;
  char peer[96];
  unsigned char hello[HELLO], proof[PROOF];
  size_t got;         /* bytes of the proof read */
  unsigned char *out; /* the reply being sent (st 3) */
  size_t nout, sent;
} conn;

typedef struct {
  const sl_boot_env *e;
  const boot_key *key;
  const void *blob;
  size_t n;
  int nauth_fail;     /* connections that failed the proof */
  char last_fail[96]; /* the address of the last one */
} server;

static void conn_close(conn *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->out);
  memset(c, 0, sizeof *c);
  c->fd = -1;
}

/* Drops a connection that never proved it belongs to the job: one log line. */
static void drop(const server *s, conn *c, const char *why) {
  sl_log(SL_LOG_WARN, "bootstrap tcp:%s: dropped a connection from %s: %s", s->e->addr, c->peer, why);
  conn_close(c);
}

/* A printable rendering of the first bytes a stray sent. */
static void printable(const unsigned char *p, size_t n, char *out, size_t nout) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 5 < nout; i++)
    o += (size_t)snprintf(out + o, nout - o, p[i] >= 32 && p[i] < 127 && p[i] != '"' && p[i] != '\\' ? "%c" : "\\x%02x",
                          p[i]);
  out[o] = 0;
}

/* The proof is complete: checks it and queues the reply. SL_OK and the
 * connection dropped or moved on; an error fails the job (only a peer that
 * holds the key can cause one: a misconfigured rank of this job). */
static int on_proof(server *s, conn *c, unsigned char *taken) {
  const sl_boot_env *e = s->e;
  unsigned char want[MACN];
  mac3(s->key->k, "rank", c->hello, HELLO, c->proof, PROOF - MACN, NULL, 0, want);
  if (!sl_ct_equal(want, c->proof + PROOF - MACN, MACN)) {
    s->nauth_fail++;
    snprintf(s->last_fail, sizeof s->last_fail, "%s", c->peer);
    (void)send(c->fd, "N", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    drop(s, c, "its proof does not match this job's key: it does not hold the job secret");
    return SL_OK;
  }
  uint32_t rank = get_u32(c->proof + 8), size = get_u32(c->proof + 12);
  uint64_t n = get_u64(c->proof + 16);
  char code = 0;
  int rc = SL_OK;
  if (size != (uint32_t)e->size) {
    code = 'S';
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: the rank at %s has a world of %u ranks, rank 0 one of %d", e->addr,
                 c->peer, size, e->size);
  } else if (rank < 1 || rank >= (uint32_t)e->size || taken[rank]) {
    code = 'D';
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: the rank at %s claims rank %u, %s", e->addr, c->peer, rank,
                 rank == 0 ? "which is rank 0's own" : "which another process already took: two ranks have one number");
  } else if (n != s->n) {
    code = 'L';
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %u (%s) expects %llu bytes, rank 0 sends %zu", e->addr, rank,
                 c->peer, (unsigned long long)n, s->n);
  }
  if (code) {
    (void)send(c->fd, &code, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    conn_close(c);
    return rc;
  }
  c->rank = (int)rank;
  taken[rank] = 1; /* claimed now, so that a second claim of it is refused even before this one acknowledges */
  c->nout = 1 + MACN + s->n;
  c->out = malloc(c->nout);
  if (!c->out) return sl_fail(SL_ENOMEM, "bootstrap tcp:%s: %zu bytes", e->addr, c->nout);
  unsigned char nonces[2 * NONCE];
  memcpy(nonces, c->hello + 24, NONCE);
  memcpy(nonces + NONCE, c->proof + 24, NONCE);
  c->out[0] = 'A';
  memcpy(c->out + 1 + MACN, s->blob, s->n);
  xor_stream(s->key->k, nonces, sizeof nonces, c->out + 1 + MACN, s->n);
  mac3(s->key->k, "root", c->hello, HELLO, c->proof, PROOF, c->out + 1 + MACN, s->n, c->out + 1);
  c->sent = 0;
  c->st = 3;
  return SL_OK;
}

/* Moves connection c on as far as it goes without blocking. */
static int on_io(server *s, conn *c, unsigned char *taken, int *served) {
  for (;;) {
    if (c->st == 1 || c->st == 3) {
      const unsigned char *buf = c->st == 1 ? c->hello : c->out;
      size_t nb = c->st == 1 ? HELLO : c->nout;
      ssize_t k = send(c->fd, buf + c->sent, nb - c->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) return SL_OK;
      if (k <= 0) {
        if (c->st == 1) {
          drop(s, c, "it closed without sending anything");
          return SL_OK;
        }
        int r = c->rank;
        char peer[96];
        snprintf(peer, sizeof peer, "%s", c->peer);
        conn_close(c);
        return sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d (%s) authenticated but broke off while taking the id: %s",
                       s->e->addr, r, peer, k < 0 ? strerror(errno) : "closed");
      }
      c->sent += (size_t)k;
      if (c->sent < nb) continue;
      c->sent = 0;
      c->st = c->st == 1 ? 2 : 4;
      continue;
    }
    if (c->st == 2) {
      ssize_t k = recv(c->fd, c->proof + c->got, PROOF - c->got, MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) return SL_OK;
      char why[200], pr[64];
      if (k <= 0) {
        if (c->got == 0) snprintf(why, sizeof why, "it closed without sending anything");
        else snprintf(why, sizeof why, "it closed after %zu of the proof's %d bytes", c->got, PROOF);
        drop(s, c, why);
        return SL_OK;
      }
      c->got += (size_t)k;
      size_t cmp = c->got < 8 ? c->got : 8;
      if (memcmp(c->proof, MAGIC_RANK, cmp) != 0) {
        printable(c->proof, c->got < 16 ? c->got : 16, pr, sizeof pr);
        snprintf(why, sizeof why, "it sent bytes that are not a shardlm rank's proof (\"%s\"%s)", pr,
                 c->got > 16 ? "..." : "");
        drop(s, c, why);
        return SL_OK;
      }
      if (c->got < PROOF) continue;
      return on_proof(s, c, taken);
    }
    if (c->st == 4) {
      unsigned char a = 0;
      ssize_t k = recv(c->fd, &a, 1, MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) return SL_OK;
      int r = c->rank;
      char peer[96];
      snprintf(peer, sizeof peer, "%s", c->peer);
      conn_close(c);
      if (k == 1 && a == 'k') {
        taken[r] = 2;
        (*served)++;
        return SL_OK;
      }
      return sl_fail(SL_ECOMM,
                     "bootstrap tcp:%s: rank %d (%s) authenticated but did not acknowledge the id (%s): it could not "
                     "check rank 0's proof",
                     s->e->addr, r, peer, k == 1 ? "a wrong byte" : "closed");
    }
    return SL_OK;
  }
}

static int serve(const sl_boot_env *e, const boot_key *key, int lfd, const void *blob, size_t n, double t_end,
                 double timeout_s) {
  server s = {e, key, blob, n, 0, ""};
  conn cs[MAX_CONN];
  for (int i = 0; i < MAX_CONN; i++) {
    memset(&cs[i], 0, sizeof cs[i]);
    cs[i].fd = -1;
  }
  unsigned char *taken = calloc((size_t)e->size, 1);
  if (!taken) return sl_fail(SL_ENOMEM, "bootstrap tcp:%s: %d ranks", e->addr, e->size);
  int served = 0, rc = SL_OK;
  while (served < e->size - 1 && !rc) {
    double now = sl_now_s();
    for (int i = 0; i < MAX_CONN; i++) { /* per-connection deadlines */
      if (cs[i].st == 0 || now < cs[i].t_end) continue;
      if (cs[i].st >= 3) {
        rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d (%s) authenticated but did not take the id within %.1f s",
                     e->addr, cs[i].rank, cs[i].peer, CONN_S);
        break;
      }
      char why[96];
      snprintf(why, sizeof why, "it did not authenticate within %.1f s", CONN_S);
      drop(&s, &cs[i], why);
    }
    if (rc) break;
    if (now >= t_end) {
      char list[512] = "", hint[400] = "";
      size_t l = 0;
      for (int r = 1; r < e->size && l < sizeof list - 16; r++)
        if (taken[r] != 2) l += (size_t)snprintf(list + l, sizeof list - l, "%s%d", l ? ", " : "", r);
      if (s.nauth_fail)
        snprintf(hint, sizeof hint,
                 "; %d connection%s failed to prove the job secret (the last from %s): %s of this job, %s not "
                 "share rank 0's secret (%s)",
                 s.nauth_fail, s.nauth_fail > 1 ? "s" : "", s.last_fail,
                 s.nauth_fail > 1 ? "if those were ranks" : "if that was a rank",
                 s.nauth_fail > 1 ? "they do" : "it does", key->from);
      rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: only %d of %d ranks took the id within %.1f s (missing ranks %s)%s",
                   e->addr, served, e->size - 1, timeout_s, list, hint);
      break;
    }
    struct pollfd p[MAX_CONN + 1];
    int map[MAX_CONN + 1], np = 0, nfree = 0;
    double wake = t_end;
    for (int i = 0; i < MAX_CONN; i++) {
      if (cs[i].st == 0) {
        nfree++;
        continue;
      }
      p[np] = (struct pollfd){cs[i].fd, (short)(cs[i].st == 1 || cs[i].st == 3 ? POLLOUT : POLLIN), 0};
      map[np++] = i;
      if (cs[i].t_end < wake) wake = cs[i].t_end;
    }
    if (nfree) {
      p[np] = (struct pollfd){lfd, POLLIN, 0};
      map[np++] = -1;
    }
    int ms = (int)((wake - now) * 1000) + 1;
    int k = poll(p, (nfds_t)np, ms > 0 ? ms : 0);
    if (k < 0 && errno != EINTR) {
      rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: poll: %s", e->addr, strerror(errno));
      break;
    }
    for (int j = 0; k > 0 && j < np && !rc; j++) {
      if (!p[j].revents) continue;
      if (map[j] >= 0) {
        if (cs[map[j]].st) rc = on_io(&s, &cs[map[j]], taken, &served);
        continue;
      }
      for (int i = 0; i < MAX_CONN; i++) { /* accept while there are free slots */
        if (cs[i].st != 0) continue;
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        conn *c = &cs[i];
        c->fd = fd;
        peer_name((struct sockaddr *)&sa, sl, c->peer, sizeof c->peer);
        memcpy(c->hello, MAGIC, 8);
        put_u64(c->hello + 8, n);
        put_u32(c->hello + 16, (uint32_t)e->size);
        put_u32(c->hello + 20, 0);
        if (sl_random_bytes(c->hello + 24, NONCE)) {
          rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: no random bytes: %s", e->addr, strerror(errno));
          break;
        }
        c->st = 1;
        c->t_end = sl_now_s() + CONN_S;
        rc = on_io(&s, c, taken, &served);
        if (rc) break;
      }
    }
  }
  for (int i = 0; i < MAX_CONN; i++) {
    if (cs[i].st == 0) continue;
    if (cs[i].st <= 2) drop(&s, &cs[i], rc ? "rank 0 gives up" : "still unauthenticated when every rank had the id");
    else conn_close(&cs[i]);
  }
  free(taken);
  return rc;
}

/* A rank's side: connect (retrying until rank 0 listens), check the hello,
 * prove the key, check rank 0's proof, decrypt, acknowledge. */
static int join(const sl_boot_env *e, const boot_key *key, struct addrinfo *ai, void *blob, size_t n, double t_end,
                double timeout_s) {
  int fd = -1, rc = SL_OK;
  char peer[96] = "";
  for (;;) {
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
      fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
      if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
      } else if (fd >= 0) peer_name(p->ai_addr, p->ai_addrlen, peer, sizeof peer);
    }
    if (fd >= 0) break;
    if (sl_now_s() >= t_end)
      return sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d could not connect to rank 0 within %.1f s", e->addr, e->rank,
                     timeout_s);
    nap_ms(20);
  }
  unsigned char hello[HELLO], proof[PROOF], mac[MACN], st = 0;
  size_t got = 0;
  if (io_deadline(fd, hello, HELLO, 0, t_end, &got) || memcmp(hello, MAGIC, 8) != 0) {
    char pr[64];
    printable(hello, got < 8 ? got : 8, pr, sizeof pr);
    rc = sl_fail(SL_ECOMM,
                 "bootstrap tcp:%s: rank %d: %s is not a shardlm rank 0 of this version (it sent %zu bytes, \"%s\"; "
                 "expected %.8s)",
                 e->addr, e->rank, peer, got, pr, MAGIC);
    goto done;
  }
  memcpy(proof, MAGIC_RANK, 8);
  put_u32(proof + 8, (uint32_t)e->rank);
  put_u32(proof + 12, (uint32_t)e->size);
  put_u64(proof + 16, n);
  if (sl_random_bytes(proof + 24, NONCE)) {
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: no random bytes: %s", e->addr, strerror(errno));
    goto done;
  }
  mac3(key->k, "rank", hello, HELLO, proof, PROOF - MACN, NULL, 0, proof + PROOF - MACN);
  if (io_deadline(fd, proof, PROOF, 1, t_end, NULL) || io_deadline(fd, &st, 1, 0, t_end, NULL)) {
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d: rank 0 (%s) closed the connection without answering its proof",
                 e->addr, e->rank, peer);
    goto done;
  }
  if (st != 'A') {
    if (st == 'N')
      rc =
          sl_fail(SL_ECOMM,
                  "bootstrap tcp:%s: rank 0 (%s) refused rank %d's proof of the job secret: the ranks do not share one "
                  "secret (this rank's is from %s; set SL_JOB_SECRET to the same value on every rank)",
                  e->addr, peer, e->rank, key->from);
    else if (st == 'L')
      rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank 0 sends %llu bytes, rank %d expects %zu", e->addr,
                   (unsigned long long)get_u64(hello + 8), e->rank, n);
    else if (st == 'S')
      rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank 0 has a world of %u ranks, rank %d one of %d", e->addr,
                   get_u32(hello + 16), e->rank, e->size);
    else if (st == 'D')
      rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank 0 refused rank %d: another process already took that rank",
                   e->addr, e->rank);
    else rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank 0 answered rank %d's proof with 0x%02x", e->addr, e->rank, st);
    goto done;
  }
  if (io_deadline(fd, mac, MACN, 0, t_end, NULL) || io_deadline(fd, blob, n, 0, t_end, NULL)) {
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d: the id transfer from rank 0 (%s) broke off", e->addr, e->rank,
                 peer);
    goto done;
  }
  unsigned char want[MACN], nonces[2 * NONCE];
  mac3(key->k, "root", hello, HELLO, proof, PROOF, blob, n, want);
  if (!sl_ct_equal(want, mac, MACN)) {
    memset(blob, 0, n);
    rc = sl_fail(SL_ECOMM,
                 "bootstrap tcp:%s: rank %d: the peer at %s could not prove that it holds the job secret (from %s): "
                 "it is not this job's rank 0",
                 e->addr, e->rank, peer, key->from);
    goto done;
  }
  memcpy(nonces, hello + 24, NONCE);
  memcpy(nonces + NONCE, proof + 24, NONCE);
  xor_stream(key->k, nonces, sizeof nonces, blob, n);
  unsigned char k = 'k';
  if (io_deadline(fd, &k, 1, 1, t_end, NULL))
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank %d: rank 0 (%s) went away before the acknowledgement", e->addr,
                 e->rank, peer);
done:
  close(fd);
  return rc;
}

static int share_tcp(const sl_boot_env *e, const boot_key *key, void *blob, size_t n, double timeout_s) {
  char host[1024], port[64];
  int rc = split_hostport(e, host, sizeof host, port, sizeof port);
  if (rc) return rc;
  double t_end = sl_now_s() + timeout_s;
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (e->rank == 0) hints.ai_flags = AI_PASSIVE;
  int gai = getaddrinfo(host, port, &hints, &ai);
  if (gai != 0) return sl_fail(SL_EINPUT, "bootstrap tcp:%s: cannot resolve: %s", e->addr, gai_strerror(gai));
  if (e->rank != 0) {
    rc = join(e, key, ai, blob, n, t_end, timeout_s);
    freeaddrinfo(ai);
    return rc;
  }
  int one = 1;
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0)
    rc = sl_fail(SL_ECOMM, "bootstrap tcp:%s: rank 0 cannot listen: %s", e->addr, strerror(errno));
  else rc = serve(e, key, fd, blob, n, t_end, timeout_s);
  if (fd >= 0) close(fd);
  freeaddrinfo(ai);
  return rc;
}

int sl_boot_share(const sl_boot_env *e, void *blob, size_t n, double timeout_s) {
  if (!e || (!blob && n)) return sl_fail(SL_EINPUT, "sl_boot_share: NULL argument");
  if (e->size <= 1) return SL_OK;
  int fs = !strcmp(e->method, "fs"), tcp = !strcmp(e->method, "tcp");
  if (!fs && !tcp) return sl_fail(SL_EINPUT, "sl_boot_share: unknown rendezvous method '%s' (fs or tcp)", e->method);
  boot_key key;
  int rc = job_key(e, &key);
  if (!rc) rc = fs ? share_fs(e, &key, blob, n, timeout_s) : share_tcp(e, &key, blob, n, timeout_s);
  memset(&key, 0, sizeof key);
  return rc;
}
