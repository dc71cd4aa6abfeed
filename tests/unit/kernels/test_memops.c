/* tests/unit/kernels/test_memops.c — the op table's memory section against host
 * references: on the CPU table always, and on the CUDA table too when a
 * device exists. alloc zeroes, upload/download round-trip, copy, zero of a
 * sub-range, sum against a long-double reference (and exactly on integer
 * data, and bit-identical run to run), sync, is_device, the failure path of
 * alloc. Without NCCL it also checks that sl_comm_nccl_create reports
 * "built without NCCL". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "shard/comm.h"

static int npass, nfail;

#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    if (cond) {                                                                                                        \
      npass++;                                                                                                         \
    } else {                                                                                                           \
      nfail++;                                                                                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                             \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fputc('\n', stderr);                                                                                             \
    }                                                                                                                  \
  } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void check_table(const sl_ops *T, int expect_device) {
  const char *nm = T->name;
  sl_kctx *ctx = T->ctx_create(2);
  CHECK(ctx != NULL, "%s: ctx_create: %s", nm, sl_errmsg());
  if (!ctx) return;
  CHECK(T->alloc && T->free && T->zero && T->copy && T->upload && T->download && T->sum && T->sync && T->is_device,
        "%s: memory section incomplete", nm);
  CHECK(T->is_device() == expect_device, "%s: is_device %d, expected %d", nm, T->is_device(), expect_device);

  enum { NB = 4096 + 3 }; /* bytes, deliberately not a multiple of 4 */
  unsigned char *h = malloc(NB), *h2 = malloc(NB);
  unsigned char *a = T->alloc(ctx, NB), *b = T->alloc(ctx, NB);
  CHECK(a && b, "%s: alloc(%d): %s", nm, NB, sl_errmsg());
  if (!a || !b || !h || !h2) goto out;
  if (!expect_device) CHECK(((uintptr_t)a & 63) == 0, "%s: alloc not 64-byte aligned", nm);
  memset(h, 0xab, NB);
  T->download(ctx, h, a, NB);
  int zero = 1;
  for (int i = 0; i < NB; i++) zero &= h[i] == 0;
  CHECK(zero, "%s: alloc did not zero", nm);

  for (int i = 0; i < NB; i++) h[i] = (unsigned char)(i * 131 + 7);
  T->upload(ctx, a, h, NB);
  memset(h2, 0, NB);
  T->download(ctx, h2, a, NB);
  CHECK(memcmp(h, h2, NB) == 0, "%s: upload/download round trip differs", nm);

  T->copy(ctx, b, a, NB);
  T->zero(ctx, b + 100, 201);
  memset(h2, 0xcd, NB);
  T->download(ctx, h2, b, NB);
  int ok = 1;
  for (int i = 0; i < NB; i++) ok &= h2[i] == (i >= 100 && i < 301 ? 0 : h[i]);
  CHECK(ok, "%s: copy + zero of [100, 301) wrong", nm);
  CHECK(T->sync(ctx) == SL_OK, "%s: sync: %s", nm, sl_errmsg());

  /* sum: random data against a long-double reference, integer data exactly */
  enum { N = 100003 };
  float *x = malloc(N * sizeof *x);
  float *dx = T->alloc(ctx, N * sizeof *x);
  CHECK(x && dx, "%s: alloc of %d floats", nm, N);
  if (x && dx) {
    long double ref = 0, mag = 0;
    for (int i = 0; i < N; i++) {
      x[i] = urand() * 1000.0f;
      ref += x[i];
      mag += fabsl((long double)x[i]);
    }
    T->upload(ctx, dx, x, N * sizeof *x);
    double s1 = T->sum(ctx, dx, N), s2 = T->sum(ctx, dx, N);
    CHECK(fabsl((long double)s1 - ref) <= 1e-12L * mag, "%s: sum %.17g, reference %.17Lg", nm, s1, ref);
    CHECK(memcmp(&s1, &s2, sizeof s1) == 0, "%s: sum not bit-identical run to run", nm);
    double iref = 0;
    for (int i = 0; i < N; i++) {
      x[i] = (float)((i * 37) % 201 - 100);
      iref += x[i];
    }
    T->upload(ctx, dx, x, N * sizeof *x);
    double si = T->sum(ctx, dx, N);
    CHECK(si == iref, "%s: integer sum %.17g, expected %.17g", nm, si, iref);
    CHECK(T->sum(ctx, dx, 0) == 0.0, "%s: sum of 0 elements", nm);
    CHECK(T->sum(ctx, dx + 5, 1) == x[5], "%s: sum of 1 element", nm);
  }
  free(x);
  T->free(ctx, dx);

  void *z = T->alloc(ctx, 0);
  CHECK(z != NULL, "%s: alloc(0) returned NULL", nm);
  T->free(ctx, z);
  T->free(ctx, NULL);
  T->zero(ctx, NULL, 0);
  T->copy(ctx, NULL, NULL, 0);

  sl_clear_error();
  void *huge = T->alloc(ctx, (size_t)1 << 60);
  CHECK(huge == NULL && strlen(sl_errmsg()) > 0, "%s: alloc(2^60) gave %p, message '%s'", nm, huge, sl_errmsg());
  if (huge) T->free(ctx, huge);
  /* the context stays usable after a failed alloc */
  CHECK(T->sync(ctx) == SL_OK, "%s: sync after failed alloc: %s", nm, sl_errmsg());
  T->download(ctx, h2, a, 16);
  CHECK(memcmp(h, h2, 16) == 0 && T->sync(ctx) == SL_OK, "%s: download after failed alloc", nm);
out:
  T->free(ctx, a);
  T->free(ctx, b);
  free(h);
  free(h2);
  T->ctx_destroy(ctx);
}

/* sl_ops_check: the CPU table is complete; a NULL op is named, an optional
 * one is not. */
static void check_support(void) {
  CHECK(sl_ops_check(sl_ops_cpu()) == SL_OK, "cpu table complete: %s", sl_errmsg());
  sl_ops t = *sl_ops_cpu();
  t.linear_bwd = NULL;
  t.scan_fwd = NULL;
  t.ssd_bwd = NULL;
  t.mem_info = NULL;
  int rc = sl_ops_check(&t);
  CHECK(rc == SL_EINPUT && strstr(sl_errmsg(), "'cpu' does not support 3 op(s)") &&
            strstr(sl_errmsg(), "linear_bwd, scan_fwd, ssd_bwd") && !strstr(sl_errmsg(), "mem_info"),
        "missing ops named: rc %d '%s'", rc, sl_errmsg());
  CHECK(sl_ops_optional("mem_info") && !sl_ops_optional("adamw") && SL_OPS_COUNT == 71, "optional ops, count (%d)",
        (int)SL_OPS_COUNT);
}

int main(void) {
  check_support();
  check_table(sl_ops_cpu(), 0);
  const sl_ops *cu = sl_ops_cuda();
  if (cu) check_table(cu, 1);
  else printf("no CUDA device: CUDA table not checked (tests/unit/shard/test_cuda_nccl.c covers it)\n");
#ifndef SL_USE_NCCL
  sl_comm *c = (sl_comm *)1;
  int rc = sl_comm_nccl_create(NULL, NULL, &c);
  CHECK(rc == SL_COMM_ERR && c == NULL && strstr(sl_comm_last_error(), "built without NCCL"),
        "nccl stub: rc %d, message '%s'", rc, sl_comm_last_error());
#endif
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
