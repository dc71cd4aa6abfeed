/* shard/hmac.c — SHA-256 and HMAC-SHA256 of shard/hmac.h, written from
 * FIPS 180-4 section 6.2 and RFC 2104; the kernel's random bytes. */
#define _GNU_SOURCE
#include "shard/hmac.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void block(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[t] + w[t];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += k;
}

void sl_sha256_init(sl_sha256 *c) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(c->h, h0, sizeof h0);
  c->bytes = 0;
  c->nbuf = 0;
}

void sl_sha256_update(sl_sha256 *c, const void *p, size_t n) {
  const unsigned char *s = p;
  c->bytes += n;
  if (c->nbuf) {
    size_t k = 64 - c->nbuf < n ? 64 - c->nbuf : n;
    memcpy(c->buf + c->nbuf, s, k);
    c->nbuf += k;
    s += k;
    n -= k;
    if (c->nbuf < 64) return;
    block(c->h, c->buf);
    c->nbuf = 0;
  }
  for (; n >= 64; s += 64, n -= 64) block(c->h, s);
  memcpy(c->buf, s, n);
  c->nbuf = n;
}

void sl_sha256_final(sl_sha256 *c, unsigned char out[32]) {
  uint64_t bits = c->bytes * 8;
  unsigned char pad[72] = {0x80};
  size_t np = (c->nbuf < 56 ? 56 : 120) - c->nbuf; /* 0x80, zeros, to 56 mod 64 */
  for (int i = 0; i < 8; i++) pad[np + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
  sl_sha256_update(c, pad, np + 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (unsigned char)(c->h[i] >> 24);
    out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
    out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
    out[4 * i + 3] = (unsigned char)c->h[i];
  }
  memset(c, 0, sizeof *c);
}

void sl_sha256_of(const void *p, size_t n, unsigned char out[32]) {
  sl_sha256 c;
  sl_sha256_init(&c);
  sl_sha256_update(&c, p, n);
  sl_sha256_final(&c, out);
}

void sl_hmac_init(sl_hmac *c, const void *key, size_t nkey) {
  unsigned char k[64], pad[64];
  memset(k, 0, sizeof k);
  if (nkey > 64) sl_sha256_of(key, nkey, k); /* a long key is hashed first */
  else if (nkey) memcpy(k, key, nkey);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
  sl_sha256_init(&c->in);
  sl_sha256_update(&c->in, pad, 64);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
  sl_sha256_init(&c->out);
  sl_sha256_update(&c->out, pad, 64);
  memset(k, 0, sizeof k);
  memset(pad, 0, sizeof pad);
}

void sl_hmac_update(sl_hmac *c, const void *p, size_t n) { sl_sha256_update(&c->in, p, n); }

void sl_hmac_final(sl_hmac *c, unsigned char out[32]) {
  unsigned char inner[32];
  sl_sha256_final(&c->in, inner);
  sl_sha256_update(&c->out, inner, 32);
  sl_sha256_final(&c->out, out);
  memset(inner, 0, sizeof inner);
}

void sl_hmac_of(const void *key, size_t nkey, const void *p, size_t n, unsigned char out[32]) {
  sl_hmac c;
  sl_hmac_init(&c, key, nkey);
  sl_hmac_update(&c, p, n);
  sl_hmac_final(&c, out);
}

int sl_ct_equal(const void *a, const void *b, size_t n) {
  const volatile unsigned char *x = a, *y = b;
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++) d |= (unsigned char)(x[i] ^ y[i]);
  return d == 0;
}

int sl_random_bytes(void *p, size_t n) {
  unsigned char *s = p;
  size_t got = 0;
  while (got < n) {
    ssize_t k = getrandom(s + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  if (got == n) return 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  while (got < n) {
    ssize_t k = read(fd, s + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  close(fd);
  return got == n ? 0 : -1;
}
