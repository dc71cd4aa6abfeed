/* tests/unit/formats/test_ckpt_io.c — unit tests of formats/ckpt_io.c: XXH64 against
 * published vectors and against zstd's frame checksum (an independent
 * implementation), streaming == one-shot, shard writer + range reader
 * round trip over uneven slices, manifest dump/parse round trip, and the
 * parser refusing gaps, overlaps and out-of-bounds frames.
 * Helper mode for scripts: test_ckpt_io --xxh64 FILE prints the file's hash
 * in the manifest.json.xxh64 format. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "formats/ckpt_io.h"
#include "shard/shardmath.h"

static int fails = 0;
#define CHECK(c, ...)                                                                                                  \
  do {                                                                                                                 \
    if (!(c)) {                                                                                                        \
      fails++;                                                                                                         \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                      \
      printf(__VA_ARGS__);                                                                                             \
      printf("\n");                                                                                                    \
    }                                                                                                                  \
  } while (0)

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--xxh64")) {
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    static char buf[1 << 24];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    printf("%016" PRIx64 "\n", sl_xxh64(buf, n, 0));
    return 0;
  }
  /* XXH64 reference vectors (xxhash's published values) */
  CHECK(sl_xxh64("", 0, 0) == 0xEF46DB3751D8E999ull, "xxh64('')");
  CHECK(sl_xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ull, "xxh64('abc')");
  /* 1000 bytes (i*7 mod 256): `zstd --check` stores the low 32 bits of XXH64 = a9cfc168 */
  uint8_t v[1000];
  for (int i = 0; i < 1000; i++) v[i] = (uint8_t)(i * 7);
  uint64_t h = sl_xxh64(v, sizeof v, 0);
  CHECK((uint32_t)h == 0xa9cfc168u, "xxh64 vs zstd frame checksum: %08x", (unsigned)(uint32_t)h);
  sl_xxh64_state s;
  sl_xxh64_init(&s, 0);
  for (int a = 0; a < 1000;) {
    int n = 1 + (a * 13) % 41;
    if (a + n > 1000) n = 1000 - a;
    sl_xxh64_update(&s, v + a, (size_t)n);
    a += n;
  }
  CHECK(sl_xxh64_digest(&s) == h, "streaming xxh64");

  /* writer / reader over 3 uneven slices of two units */
  char dir[] = "/tmp/sl_ckio_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  int64_t numel[2] = {1001, 37};
  float *x[2][3];
  for (int u = 0; u < 2; u++)
    for (int k = 0; k < 3; k++) {
      x[u][k] = malloc(sizeof(float) * (size_t)numel[u]);
      for (int64_t i = 0; i < numel[u]; i++) x[u][k][i] = (float)(u * 1000 + k * 0.25 + i * 1e-3);
    }
  sl_ckio_manifest m;
  memset(&m, 0, sizeof m);
  m.version = 1;
  m.step = 5;
  m.next_sample = 77;
  m.seed = 0xfeedfacecafebeefull;
  m.has_seed = 1;
  m.world_size = 3;
  m.zero = 3;
  m.shard_group = 3;
  m.replica_size = 1;
  m.align = 16;
#ifdef SL_USE_ZSTD
  snprintf(m.compression, sizeof m.compression, "%s", "zstd");
#else
  snprintf(m.compression, sizeof m.compression, "%s", "none");
#endif
  m.config = strdup("lr=0.001\n");
  m.nunits = 2;
  m.units = calloc(2, sizeof *m.units);
  m.nfiles = 3;
  m.files = calloc(3, sizeof *m.files);
  for (int u = 0; u < 2; u++) {
    sl_slice sl;
    sl_shard_slice(numel[u], 3, 16, 0, &sl);
    m.units[u].numel = numel[u];
    m.units[u].padded = sl.padded;
    m.units[u].shard = sl.shard;
    m.units[u].ntensors = 1;
    m.units[u].t = calloc(1, sizeof *m.units[u].t);
    snprintf(m.units[u].t[0].name, sizeof m.units[u].t[0].name, "t%d", u);
    m.units[u].t[0].ndim = 1;
    m.units[u].t[0].shape[0] = numel[u];
    m.units[u].t[0].numel = numel[u];
  }
  for (int r = 0; r < 3; r++) {
    sl_ckio_writer w;
    int rc = sl_ckio_writer_open(&w, dir, r);
    for (int u = 0; u < 2 && !rc; u++) {
      sl_slice sl;
      sl_shard_slice(numel[u], 3, 16, r, &sl);
      if (sl.valid > 0)
        rc = sl_ckio_writer_add(&w, u, sl.offset, sl.offset + sl.valid, x[u][0] + sl.offset, x[u][1] + sl.offset,
                                r == 2 ? NULL : x[u][2] + sl.offset);
    }
    if (!rc) rc = sl_ckio_writer_close(&w);
    CHECK(!rc, "writer %d: %s", r, sl_errmsg());
    m.files[r] = w.meta;
  }
  static const float bias[3] = {0.1f, -1e-7f, 0.015f}; /* a MoE expert bias: floats back bit for bit */
  m.moe_bias = malloc(sizeof bias);
  memcpy(m.moe_bias, bias, sizeof bias);
  m.n_moe_bias = 3;
  CHECK(sl_ckio_write_manifest(dir, &m) == SL_OK, "write manifest: %s", sl_errmsg());
  sl_ckio_manifest m2;
  CHECK(sl_ckio_manifest_load(dir, &m2) == SL_OK, "load manifest: %s", sl_errmsg());
  CHECK(m2.step == 5 && m2.next_sample == 77 && m2.seed == m.seed && m2.nfiles == 3 && !strcmp(m2.config, m.config),
        "manifest round trip");
  CHECK(m2.n_moe_bias == 3 && m2.moe_bias && !memcmp(m2.moe_bias, bias, sizeof bias), "expert bias round trip");
  for (int i = 0; i < 3; i++) CHECK(sl_ckio_verify_file(dir, &m2, i) == SL_OK, "verify %d: %s", i, sl_errmsg());
  float got[1001];
  int64_t ranges[][2] = {{0, 1001}, {3, 4}, {300, 700}, {333, 335}, {1000, 1001}, {640, 672}};
  for (int q = 0; q < 6; q++)
    for (int k = 0; k < 3; k++) {
      int64_t lo = ranges[q][0], hi = ranges[q][1];
      CHECK(sl_ckio_read_range(dir, &m2, 0, k, lo, hi, got) == SL_OK, "read: %s", sl_errmsg());
      for (int64_t i = lo; i < hi; i++) {
        float want = (k == 2 && lo + (i - lo) >= 672) ? 0.0f : x[0][k][i]; /* rank 2 wrote zeros for v */
        if (got[i - lo] != want) {
          CHECK(0, "unit 0 kind %d element %lld: %g != %g", k, (long long)i, got[i - lo], want);
          break;
        }
      }
    }
  CHECK(sl_ckio_read_range(dir, &m2, 1, 1, 0, 37, got) == SL_OK && !memcmp(got, x[1][1], 37 * 4), "unit 1");
  /* the parser refuses a gap / overlap / frame past the end */
  char *text;
  sl_ckio_manifest bad;
  m2.files[1].pieces[0].lo += 1;
  for (int k = 0; k < 3; k++) { /* a frame stored raw (no zstd) shrinks with its content */
    m2.files[1].pieces[0].fr[k].raw -= 4;
    if (!m2.files[1].pieces[0].fr[k].zstd) m2.files[1].pieces[0].fr[k].bytes -= 4;
  }
  sl_ckio_manifest_dump(&m2, &text);
  CHECK(sl_ckio_manifest_parse("x", text, strlen(text), &bad) == SL_EINPUT && strstr(sl_errmsg(), "cover"), "gap: %s",
        sl_errmsg());
  free(text);
  m2.files[1].pieces[0].lo -= 1;
  for (int k = 0; k < 3; k++) {
    m2.files[1].pieces[0].fr[k].raw += 4;
    if (!m2.files[1].pieces[0].fr[k].zstd) m2.files[1].pieces[0].fr[k].bytes += 4;
  }
  m2.files[1].pieces[0].fr[0].bytes = m2.files[1].bytes + 1;
  sl_ckio_manifest_dump(&m2, &text);
  CHECK(sl_ckio_manifest_parse("x", text, strlen(text), &bad) == SL_EINPUT, "frame past end");
  free(text);
  {
    const char *bad_bias = "{\"format\": \"shardlm-checkpoint\", \"version\": 1, \"step\": 1, \"next_sample\": 0, "
                           "\"world_size\": 1, \"zero\": 0, \"shard_group\": 1, \"replica_size\": 1, \"align\": 1, "
                           "\"rng_seed\": null, \"compression\": \"none\", \"moe_expert_bias\": [0.5, \"x\"]}";
    CHECK(sl_ckio_manifest_parse("x", bad_bias, strlen(bad_bias), &bad) == SL_EINPUT &&
              strstr(sl_errmsg(), "moe_expert_bias"),
          "a non-number expert bias: %s", sl_errmsg());
    sl_ckio_manifest_free(&bad);
  }
  sl_ckio_manifest_free(&m2);
  sl_ckio_manifest_free(&m);
  sl_ckio_rmtree(dir);
  for (int u = 0; u < 2; u++)
    for (int k = 0; k < 3; k++) free(x[u][k]);
  printf("%s (%d failures)\n", fails ? "FAIL" : "ok", fails);
  return fails ? 1 : 0;
}
