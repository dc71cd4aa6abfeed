/* tests/unit/offload/test_optstate_backend.c — optimizer state of tier none in a
 * backend's memory (sl_optstate_cfg.ops: the trainer's no-offload case,
 * device memory on CUDA), here on the CPU backend. Oracle: the backend's
 * adamw called range by range on plain arrays, as the trainer did before
 * the tiers moved into offload/optstate.c. Checks over 3 steps with
 * per-range weight decay and clipping: master, m and v bit-identical to the
 * oracle and to the host none tier; init with padding (nvalid < n, the
 * shard's tail zero), also for the nvme tier; checkpoint read / write
 * round trips; resident / host_field / on_backend; SL_ARENA_OPTIM
 * accounting; a bf16 copy refused.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "offload/offload.h"
#include "tests/lib/check.h"

enum { N = 3001, NVALID = 2500 };

static int64_t ndiff(const float *a, const float *b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

int main(void) {
  const sl_ops *o = sl_ops_cpu();
  sl_kctx *k = o->ctx_create(2);
  size_t fb = (size_t)N * 4;
  float *p0 = malloc(fb), *g = malloc(fb), *rp = calloc(N, 4), *rm = calloc(N, 4), *rv = calloc(N, 4);
  float *chk = malloc(fb);
  uint64_t s = 7;
  for (int i = 0; i < N; i++) p0[i] = (float)((double)(sl_splitmix64(&s) >> 11) / 9007199254740992.0 - 0.5);
  memcpy(rp, p0, (size_t)NVALID * 4); /* the padding stays 0 */
  sl_adam_range r[3] = {{0, 1000, 0.1f}, {1000, 1500, 0.0f}, {2500, N - 2500, 0.0f}};

  sl_mem_stats m0, m1;
  sl_mem_get(&m0);
  sl_optstate *be = NULL, *host = NULL;
  sl_optstate_cfg cb = {.tier = SL_TIER_NONE, .n = N, .name = "backend", .ops = o, .k = k};
  sl_optstate_cfg ch = {.tier = SL_TIER_NONE, .n = N, .name = "host"};
  int rc = sl_optstate_create(&cb, &be);
  rc |= sl_optstate_create(&ch, &host);
  CHECK(rc == SL_OK, "create");
  if (rc) return 1;
  sl_mem_get(&m1);
  CHECK(m1.cur[SL_ARENA_OPTIM] - m0.cur[SL_ARENA_OPTIM] == 2 * 3 * (int64_t)fb, "SL_ARENA_OPTIM grows by %lld",
        (long long)(m1.cur[SL_ARENA_OPTIM] - m0.cur[SL_ARENA_OPTIM]));
  CHECK(sl_optstate_on_backend(be) && !sl_optstate_on_backend(host), "on_backend");
  CHECK(sl_optstate_resident(be, SL_OPT_V) &&
            sl_optstate_host_field(be, SL_OPT_V) == sl_optstate_resident(be, SL_OPT_V),
        "a CPU backend's state is host-addressable");
  rc = sl_optstate_init(be, p0, NVALID) | sl_optstate_init(host, p0, NVALID);
  CHECK(rc == SL_OK && ndiff(sl_optstate_resident(be, SL_OPT_MASTER), rp, N) == 0 &&
            ndiff(sl_optstate_resident(host, SL_OPT_MASTER), rp, N) == 0,
        "init: %d valid values, the padding zero", NVALID);
  CHECK(sl_optstate_init(be, p0, N + 1) == SL_EINPUT, "init beyond n refused");

  for (int64_t step = 1; step <= 3; step++) {
    for (int i = 0; i < N; i++) g[i] = (float)((double)(sl_splitmix64(&s) >> 11) / 9007199254740992.0 - 0.5);
    sl_adam_hyper h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, step, 0.75f};
    for (int i = 0; i < 3; i++) /* the oracle: the trainer's former tier-none loop */
      o->adamw(k, rp + r[i].offset, rm + r[i].offset, rv + r[i].offset, g + r[i].offset, r[i].count, h.lr, h.beta1,
               h.beta2, h.eps, r[i].wd, h.step, h.grad_scale);
    rc = sl_optstate_step(be, g, r, 3, &h, NULL, NULL);
    rc |= sl_optstate_step(host, g, r, 3, &h, NULL, NULL);
    CHECK(rc == SL_OK, "step %lld", (long long)step);
  }
  const float *want[3] = {rp, rm, rv};
  for (int f = 0; f < 3; f++) {
    CHECK(ndiff(sl_optstate_resident(be, (sl_optfield)f), want[f], N) == 0, "backend field %d after 3 steps", f);
    CHECK(sl_optstate_read(host, (sl_optfield)f, 0, N, chk) == SL_OK && ndiff(chk, want[f], N) == 0,
          "host field %d after 3 steps", f);
  }
  /* checkpoint access: partial read, write round trip, params_out copy */
  CHECK(sl_optstate_read_m(be, 17, 900, chk) == SL_OK && ndiff(chk, rm + 17, 900) == 0, "partial read of m");
  for (int i = 0; i < 100; i++) chk[i] = (float)i;
  CHECK(sl_optstate_write(be, SL_OPT_V, 2950, 51, chk) == SL_OK &&
            ndiff(sl_optstate_resident(be, SL_OPT_V) + 2950, chk, 51) == 0,
        "write of v");
  CHECK(sl_optstate_write(be, SL_OPT_V, 2990, 51, chk) == SL_EINPUT, "write past n refused");
  float *out = o->alloc(k, fb);
  sl_adam_hyper h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 4, 1.0f};
  rc = sl_optstate_step(be, g, r, 3, &h, out, NULL);
  CHECK(rc == SL_OK && ndiff(out, sl_optstate_resident(be, SL_OPT_MASTER), N) == 0, "params_out holds the master");
  uint16_t b16[4];
  CHECK(sl_optstate_step(be, g, r, 3, &h, NULL, b16) == SL_EINPUT, "bf16 copy from backend memory refused");
  o->free(k, out);
  sl_optstate_destroy(be);
  sl_optstate_destroy(host);
  sl_mem_get(&m1);
  CHECK(m1.cur[SL_ARENA_OPTIM] == m0.cur[SL_ARENA_OPTIM], "SL_ARENA_OPTIM back to %lld",
        (long long)m0.cur[SL_ARENA_OPTIM]);

  /* nvme: init with padding, tiles of 1024 elements */
  const char *tmp = getenv("TMPDIR");
  char d[512];
  snprintf(d, sizeof d, "%s/sl-optbe.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(d)) {
    sl_optstate *nv = NULL;
    sl_optstate_cfg cn = {.tier = SL_TIER_NVME, .n = N, .name = "nv", .nvme_dir = d, .tile_elems = 1024};
    rc = sl_optstate_create(&cn, &nv);
    if (!rc) rc = sl_optstate_init(nv, p0, NVALID);
    float *z = calloc(N, 4);
    memcpy(z, p0, (size_t)NVALID * 4);
    CHECK(rc == SL_OK && sl_optstate_read_master(nv, 0, N, chk) == SL_OK && ndiff(chk, z, N) == 0,
          "nvme init: %d valid values over 3 tiles, the padding zero", NVALID);
    CHECK(nv && sl_optstate_resident(nv, SL_OPT_MASTER) == NULL && sl_optstate_host_field(nv, SL_OPT_M) == NULL,
          "nvme: no resident array");
    sl_optstate_destroy(nv);
    free(z);
    rmdir(d);
  } else {
    CHECK(0, "mkdtemp");
  }
  free(p0);
  free(g);
  free(rp);
  free(rm);
  free(rv);
  free(chk);
  o->ctx_destroy(k);
  return CHECK_SUMMARY();
}
