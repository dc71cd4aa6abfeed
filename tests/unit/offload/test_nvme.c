/* tests/unit/offload/test_nvme.c — the offload tiers: NVMe block store round trips (odd
 * sizes, unaligned buffers, queue depth 1 and 32, io_uring and pread
 * backends, many requests in flight), the streamed NVMe AdamW step
 * bit-identical to sl_ops_cpu()->adamw on whole in-memory arrays over 3 steps
 * (tiles that do not divide n, per-range weight decay, bf16 copy), the cpu /
 * none tiers likewise, host bytes within the budget, checkpoint read/write,
 * and space errors reported as SL_EIO naming the file.
 * Uses a temp dir under $TMPDIR (default /tmp).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "offload/offload.h"
#include "tests/lib/check.h"

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static float frand(void) { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static char g_dir[512];

static void *aligned(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes ? bytes : 4096) != 0) return NULL;
  return p;
}

/* ---- block store round trips ------------------------------------------------- */
static void roundtrips(const char *backend, int qd, int64_t block) {
  setenv("SL_NVME_BACKEND", backend, 1);
  sl_nvme *s = NULL;
  const int64_t cap = (int64_t)12 << 20;
  int rc = sl_nvme_open(g_dir, "rt.bin", cap, block, qd, &s);
  CHECK(rc == SL_OK, "open (%s, qd %d)", backend, qd);
  if (rc) return;
  printf("store backend %s (asked %s), qd %d, block %lld\n", sl_nvme_backend(s), backend, qd, (long long)block);
  /* (offset, bytes, unaligned buffer?) — odd sizes and several chunks */
  struct {
    int64_t off, bytes;
    int unaligned;
  } cases[] = {
      {0, 4096, 0},          {4096, 3 * 4096 + 17, 0}, {8 << 12, 1, 0}, {1 << 20, (5 << 20) + 123, 0},
      {7 << 20, 1000001, 1}, {9 << 20, 3 << 20, 1},
  };
  enum { NC = sizeof cases / sizeof cases[0] };
  char *src[NC], *dst[NC], *base_src[NC], *base_dst[NC];
  uint64_t tw[NC], tr[NC];
  /* all writes in flight at once, waited in reverse order */
  for (int i = 0; i < NC; i++) {
    size_t b = (size_t)cases[i].bytes;
    base_src[i] = aligned(b + 4096);
    base_dst[i] = aligned(b + 4096);
    src[i] = base_src[i] + cases[i].unaligned * 3;
    dst[i] = base_dst[i] + cases[i].unaligned * 5;
    for (size_t k = 0; k < b; k++) src[i][k] = (char)(rnd() >> 56);
    memset(dst[i], 0x5a, b);
    rc = sl_nvme_write_async(s, cases[i].off, src[i], cases[i].bytes, &tw[i]);
    CHECK(rc == SL_OK, "write_async case %d", i);
  }
  int wrc = SL_OK;
  for (int i = NC - 1; i >= 0; i--) wrc |= sl_nvme_wait(s, tw[i]);
  CHECK(wrc == SL_OK, "wait writes");
  CHECK(sl_nvme_fsync(s) == SL_OK, "fsync");
  for (int i = 0; i < NC; i++)
    CHECK(sl_nvme_read_async(s, cases[i].off, dst[i], cases[i].bytes, &tr[i]) == SL_OK, "read_async case %d", i);
  CHECK(sl_nvme_wait_all(s) == SL_OK, "wait_all reads");
  for (int i = 0; i < NC; i++) {
    CHECK(memcmp(src[i], dst[i], (size_t)cases[i].bytes) == 0,
          "%s qd %d: case %d (offset %lld, %lld bytes%s) read back differs", backend, qd, i, (long long)cases[i].off,
          (long long)cases[i].bytes, cases[i].unaligned ? ", unaligned buffer" : "");
    free(base_src[i]);
    free(base_dst[i]);
  }
  /* misuse is reported, not crashed on */
  uint64_t t;
  char one[8] = {0};
  CHECK(sl_nvme_read_async(s, 100, one, 8, &t) == SL_EINPUT, "unaligned offset must be SL_EINPUT");
  CHECK(sl_nvme_read_async(s, cap - 4096, one, 8192, &t) == SL_EINPUT, "read past the end must be SL_EINPUT");
  CHECK(sl_nvme_wait(s, 999999) == SL_EINPUT, "unknown ticket must be SL_EINPUT");
  CHECK(sl_nvme_close(s, 1) == SL_OK, "close");
  char path[700];
  snprintf(path, sizeof path, "%s/rt.bin", g_dir);
  CHECK(access(path, F_OK) != 0, "close(unlink=1) must remove %s", path);
  unsetenv("SL_NVME_BACKEND");
}

/* ---- streamed AdamW vs in memory ----------------------------------------------------- */
static int64_t ndiff(const void *a, const void *b, int64_t n, size_t esz) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += memcmp((const char *)a + i * esz, (const char *)b + i * esz, esz) != 0;
  return d;
}

static void adam_tiers(void) {
  const sl_ops *ops = sl_ops_cpu();
  const int64_t n = 100003, tile = 10240; /* 10 tiles, the last one partial */
  const sl_adam_range ranges[4] = {{0, 30000, 0.1f}, {30000, 1, 0.0f}, {30001, 0, 0.3f}, {30001, n - 30001, 0.05f}};
  size_t fb = (size_t)n * 4;
  float *p0 = malloc(fb), *g = malloc(fb);
  float *rp = malloc(fb), *rm = calloc(n, 4), *rv = calloc(n, 4);
  float *out = malloc(fb), *chk = malloc(fb);
  uint16_t *b16 = malloc((size_t)n * 2);
  for (int64_t i = 0; i < n; i++) p0[i] = frand();
  memcpy(rp, p0, fb);

  sl_optstate *st[3] = {NULL, NULL, NULL};
  const int64_t budget = 3 * sl_offload_tile_bytes(tile);
  sl_mem_reset_peaks();
  sl_mem_stats ms0;
  sl_mem_get(&ms0);
  for (int t = 0; t < 3; t++) {
    sl_optstate_cfg c = {.tier = (sl_tier)t,
                         .n = n,
                         .name = t == 2 ? "adam_state.bin" : "st",
                         .nvme_dir = g_dir,
                         .budget_bytes = budget,
                         .tile_elems = tile,
                         .block_bytes = 64 << 10,
                         .qd = 8};
    int rc = sl_optstate_create(&c, &st[t]);
    CHECK(rc == SL_OK, "create tier %d", t);
    if (rc) goto out;
    CHECK(sl_optstate_init_master(st[t], p0) == SL_OK, "init tier %d", t);
  }
  CHECK(sl_optstate_host_bytes(st[2]) <= budget, "nvme tier holds %lld host bytes > budget %lld",
        (long long)sl_optstate_host_bytes(st[2]), (long long)budget);
  for (int64_t step = 1; step <= 3; step++) {
    for (int64_t i = 0; i < n; i++) g[i] = frand() * 0.1f * (float)step;
    sl_adam_hyper h = {.lr = 1e-3f * (float)step,
                       .beta1 = 0.9f,
                       .beta2 = 0.95f,
                       .eps = 1e-8f,
                       .weight_decay = 0.0f,
                       .step = step,
                       .grad_scale = step == 2 ? 0.7f : 1.0f};
    /* the oracle: the op on whole in-memory arrays, range by range */
    for (int r = 0; r < 4; r++)
      ops->adamw(NULL, rp + ranges[r].offset, rm + ranges[r].offset, rv + ranges[r].offset, g + ranges[r].offset,
                 ranges[r].count, h.lr, h.beta1, h.beta2, h.eps, ranges[r].wd, step, h.grad_scale);
    for (int t = 0; t < 3; t++) {
      memset(out, 0xff, fb);
      memset(b16, 0xff, (size_t)n * 2);
      int rc = sl_optstate_step(st[t], g, ranges, 4, &h, out, step == 3 ? b16 : NULL);
      CHECK(rc == SL_OK, "step %lld tier %d", (long long)step, t);
      int64_t d = ndiff(out, rp, n, 4);
      CHECK(d == 0, "step %lld tier %d: %lld params differ from in-memory adamw", (long long)step, t, (long long)d);
      if (step == 3) {
        int64_t db = 0;
        for (int64_t i = 0; i < n; i++) db += b16[i] != sl_f32_to_bf16_scalar(rp[i]);
        CHECK(db == 0, "tier %d: %lld bf16 params differ", t, (long long)db);
      }
    }
  }
  sl_mem_stats ms;
  sl_mem_get(&ms);
  int64_t host_peak = ms.peak[SL_ARENA_HOST_OPTIM] - ms0.cur[SL_ARENA_HOST_OPTIM];
  /* the cpu tier holds 3n floats; the nvme tier adds its 3 tile buffers */
  CHECK(host_peak <= (int64_t)(3 * fb) + budget, "SL_ARENA_HOST_OPTIM peak %lld > cpu tier %lld + nvme budget %lld",
        (long long)host_peak, (long long)(3 * fb), (long long)budget);
  CHECK(sl_optstate_host_bytes(st[1]) == (int64_t)(3 * fb), "cpu tier host bytes");
  /* checkpoint view: master, m, v bit-identical in every tier */
  const float *want[3] = {rp, rm, rv};
  for (int t = 0; t < 3; t++)
    for (int f = 0; f < 3; f++) {
      memset(chk, 0, fb);
      int rc = sl_optstate_read(st[t], (sl_optfield)f, 0, n, chk);
      int64_t d = ndiff(chk, want[f], n, 4);
      CHECK(rc == SL_OK && d == 0, "tier %d field %d: %lld elements differ after 3 steps", t, f, (long long)d);
    }
  /* partial read across a tile boundary, then a write (resume) round trip */
  {
    int64_t off = tile - 5, cnt = 2 * tile + 11;
    int rc = sl_optstate_read_v(st[2], off, cnt, chk);
    CHECK(rc == SL_OK && ndiff(chk, rv + off, cnt, 4) == 0, "nvme partial read of v");
    for (int64_t i = 0; i < cnt; i++) chk[i] = (float)i;
    rc = sl_optstate_write(st[2], SL_OPT_M, off, cnt, chk);
    float *back = malloc((size_t)cnt * 4);
    rc |= sl_optstate_read_m(st[2], off, cnt, back);
    CHECK(rc == SL_OK && ndiff(back, chk, cnt, 4) == 0, "nvme write/read of m");
    rc = sl_optstate_read_m(st[2], off - 7, 7, back);
    CHECK(rc == SL_OK && ndiff(back, rm + off - 7, 7, 4) == 0, "write must not touch neighbours");
    rc = sl_optstate_read_master(st[2], n - 3, 3, back);
    CHECK(rc == SL_OK && ndiff(back, rp + n - 3, 3, 4) == 0, "read of the last elements");
    free(back);
  }
  /* bad ranges and budgets are input errors */
  {
    sl_adam_range bad[2] = {{0, 10, 0.1f}, {11, n - 11, 0.1f}};
    sl_adam_hyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .step = 4, .grad_scale = 1.0f};
    CHECK(sl_optstate_step(st[2], g, bad, 2, &h, NULL, NULL) == SL_EINPUT, "gap in ranges must be SL_EINPUT");
    sl_optstate *x = NULL;
    sl_optstate_cfg c = {
        .tier = SL_TIER_NVME, .n = n, .nvme_dir = g_dir, .budget_bytes = budget - 1, .tile_elems = tile};
    CHECK(sl_optstate_create(&c, &x) == SL_EINPUT, "tiles over the budget must be SL_EINPUT");
    c.tile_elems = 0; /* derived from the budget */
    int rc = sl_optstate_create(&c, &x);
    CHECK(rc == SL_OK && sl_optstate_host_bytes(x) <= budget - 1, "derived tile must fit the budget");
    sl_optstate_destroy(x);
  }
out:
  for (int t = 0; t < 3; t++) sl_optstate_destroy(st[t]);
  free(p0), free(g), free(rp), free(rm), free(rv), free(out), free(chk), free(b16);
}

/* ---- space errors -> SL_EIO with the path ----------------------------------------- */
static int mentions(const char *msg, const char *a, const char *b) {
  return strstr(msg, a) != NULL && strstr(msg, b) != NULL;
}

static void space_errors(void) {
  char mnt[600];
  snprintf(mnt, sizeof mnt, "%s/tiny", g_dir);
  /* a private mount namespace: the tiny tmpfs disappears with this process */
  int mounted = mkdir(mnt, 0700) == 0 && unshare(CLONE_NEWNS) == 0 &&
                mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                mount("tmpfs", mnt, "tmpfs", 0, "size=256k") == 0;
  if (mounted) {
    sl_nvme *s = NULL;
    int rc = sl_nvme_open(mnt, "full.bin", 4 << 20, 0, 0, &s);
    CHECK(rc == SL_EIO && mentions(sl_errmsg(), mnt, strerror(ENOSPC)),
          "ENOSPC on a 256 KiB tmpfs must be SL_EIO naming the path (rc %d)", rc);
    printf("ENOSPC (tiny tmpfs): %s\n", sl_errmsg());
    if (!rc) sl_nvme_close(s, 1);
    umount(mnt);
  } else {
    printf("note: cannot mount a tiny tmpfs (%s); simulating a full device with RLIMIT_FSIZE "
           "(EFBIG instead of ENOSPC)\n",
           strerror(errno));
  }
  /* RLIMIT_FSIZE: reservation beyond the limit, and an async write past it */
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 1 << 20;
  sl_nvme *s = NULL;
  CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
  int rc = sl_nvme_open(g_dir, "big.bin", 4 << 20, 0, 0, &s);
  setrlimit(RLIMIT_FSIZE, &old);
  CHECK(rc == SL_EIO && mentions(sl_errmsg(), g_dir, "big.bin"),
        "reserving past RLIMIT_FSIZE must be SL_EIO naming the file (rc %d)", rc);
  printf("file-size limit at open: %s\n", sl_errmsg());
  if (!rc) sl_nvme_close(s, 1);
  for (int be = 0; be < 2; be++) {
    setenv("SL_NVME_BACKEND", be ? "pread" : "io_uring", 1);
    rc = sl_nvme_open(g_dir, "w.bin", 4 << 20, 0, 4, &s);
    CHECK(rc == SL_OK, "open w.bin");
    if (rc) continue;
    char *buf = aligned(2 << 20);
    memset(buf, 1, 2 << 20);
    setrlimit(RLIMIT_FSIZE, &lim);
    uint64_t t;
    rc = sl_nvme_write_async(s, 512 << 10, buf, 2 << 20, &t); /* crosses the 1 MiB limit */
    if (rc == SL_OK) rc = sl_nvme_wait(s, t);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc == SL_EIO && mentions(sl_errmsg(), "w.bin", strerror(EFBIG)),
          "%s: async write past the limit must be SL_EIO naming the file (rc %d)", sl_nvme_backend(s), rc);
    printf("file-size limit on an async write (%s): %s\n", sl_nvme_backend(s), sl_errmsg());
    CHECK(sl_nvme_close(s, 1) == SL_OK, "close after a failed write");
    free(buf);
  }
  unsetenv("SL_NVME_BACKEND");
}

int main(void) {
  const char *td = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/sl_test_nvme_XXXXXX", td && *td ? td : "/tmp");
  if (!mkdtemp(g_dir)) {
    printf("cannot create a temp dir under %s: %s\n", td ? td : "/tmp", strerror(errno));
    return 1;
  }
  roundtrips("io_uring", 32, 0);
  roundtrips("io_uring", 1, 0);
  roundtrips("io_uring", 4, 64 << 10);
  roundtrips("pread", 32, 0);
  roundtrips("pread", 1, 64 << 10);
  adam_tiers();
  space_errors();
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
  return CHECK_SUMMARY();
}
