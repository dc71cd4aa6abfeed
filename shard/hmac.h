/* shard/hmac.h — SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), the
 * little that the rendezvous of shard/bootstrap.c needs to prove and check
 * knowledge of a job secret without sending it: no new dependency, checked
 * against the FIPS 180 and RFC 4231 vectors in tests/unit/shard/test_bootstrap.c. */
#ifndef SL_HMAC_H
#define SL_HMAC_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_sha256 {
  uint32_t h[8];
  uint64_t bytes;        /* message length so far */
  unsigned char buf[64]; /* the partial block */
  size_t nbuf;
} sl_sha256;

void sl_sha256_init(sl_sha256 *c);
void sl_sha256_update(sl_sha256 *c, const void *p, size_t n);
void sl_sha256_final(sl_sha256 *c, unsigned char out[32]);
void sl_sha256_of(const void *p, size_t n, unsigned char out[32]);

typedef struct sl_hmac {
  sl_sha256 in, out; /* inner hash running; outer hash keyed, waiting for the inner digest */
} sl_hmac;

void sl_hmac_init(sl_hmac *c, const void *key, size_t nkey);
void sl_hmac_update(sl_hmac *c, const void *p, size_t n);
void sl_hmac_final(sl_hmac *c, unsigned char out[32]);
void sl_hmac_of(const void *key, size_t nkey, const void *p, size_t n, unsigned char out[32]);

/* 1 when a[0..n) == b[0..n), in time independent of where they differ. */
int sl_ct_equal(const void *a, const void *b, size_t n);

/* n bytes from the kernel's CSPRNG (getrandom, else /dev/urandom); 0 on
 * success, -1 (errno set) when neither gives them. */
int sl_random_bytes(void *p, size_t n);

#endif /* SL_HMAC_H */
