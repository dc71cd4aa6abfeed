/* tests/unit/formats/test_io.c — file formats: safetensors (parse, bad inputs, streaming
 * writer, sharded dirs, F16/BF16 conversion against hand-computed values),
 * config.json (parse, defaults, bad inputs, save/load), Megatron indexed
 * datasets (hand-built .idx bytes, bad inputs, builder round trip, the
 * wrapping token stream against a reference, document starts of windows),
 * prepare (byte tokenizer) and
 * the metrics SVG plot. Prints one line per check, then "N passed, M failed".
 */
#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "formats/dataset.h"
#include "formats/hfconfig.h"
#include "formats/safetensors.h"
#include "tools/plot.h"

static int g_pass, g_fail;
static char g_dir[256];

static void check(int ok, const char *what) {
  if (ok) g_pass++;
  else g_fail++;
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) printf("     last message: %s\n", sl_errmsg());
}

/* rc must be SL_EINPUT and the message must name `file` and contain `word`. */
static void expect_input(int rc, const char *file, const char *word, const char *what) {
  const char *m = sl_errmsg();
  int ok = rc == SL_EINPUT && strstr(m, file) && strcasestr(m, word);
  char line[512];
  snprintf(line, sizeof line, "%s -> SL_EINPUT naming '%s' with '%s'", what, file, word);
  check(ok, line);
  if (!ok) printf("     rc=%d\n", rc);
  else printf("     msg: %s\n", m);
}

static char *path(const char *name) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
  return buf[k];
}

static int write_bytes(const char *p, const void *b, size_t n) {
  FILE *f = fopen(p, "wb");
  if (!f) return -1;
  size_t w = fwrite(b, 1, n, f);
  fclose(f);
  return w == n ? 0 : -1;
}

static char *read_text(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long L = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)L + 1);
  if (b && fread(b, 1, (size_t)L, f) != (size_t)L) L = 0;
  if (b) b[L] = 0;
  fclose(f);
  if (n) *n = (size_t)L;
  return b;
}

/* ---- safetensors images built by hand (independent of the writer) ---- */
static uint8_t *mk_st(const char *json, const void *data, size_t data_len, size_t *len) {
  size_t h = strlen(json);
  uint8_t *b = calloc(1, 8 + h + data_len + 1);
  uint64_t hl = h;
  memcpy(b, &hl, 8);
  memcpy(b + 8, json, h);
  if (data) memcpy(b + 8 + h, data, data_len);
  *len = 8 + h + data_len;
  return b;
}

static int parse_json_st(const char *json, size_t data_len, sl_st_file **f) {
  size_t len;
  uint8_t *b = mk_st(json, NULL, data_len, &len);
  int rc = sl_st_parse("bad.safetensors", b, len, f);
  if (rc == SL_OK) sl_st_close_file(*f);
  free(b);
  return rc;
}

static void test_st_bad(void) {
  sl_st_file *f;
  uint8_t tiny[5] = {1, 0, 0, 0, 0};
  expect_input(sl_st_parse("bad.safetensors", tiny, 5, &f), "bad.safetensors", "truncated",
               "st: truncated header (5 bytes)");
  uint8_t big[20] = {0};
  uint64_t hl = 1000;
  memcpy(big, &hl, 8);
  expect_input(sl_st_parse("bad.safetensors", big, 20, &f), "bad.safetensors", "exceeds",
               "st: header length beyond the file");
  expect_input(parse_json_st("{\"a\": {\"dtype\": \"F32\",", 0, &f), "bad.safetensors", "malformed JSON",
               "st: malformed JSON");
  expect_input(parse_json_st("[1, 2]  ", 0, &f), "bad.safetensors", "JSON", "st: header not an object");
  expect_input(parse_json_st("{\"w\": {\"dtype\": \"F33\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, &f),
               "bad.safetensors", "unknown dtype 'F33'", "st: unknown dtype");
  expect_input(parse_json_st("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24, &f),
               "bad.safetensors", "size mismatch", "st: shape/size mismatch");
  expect_input(parse_json_st("{\"model.layers.0.self_attn.q_proj.weight\": {\"dtype\": \"F32\", "
                             "\"shape\": [32, 32], \"data_offsets\": [0, 4096]}}",
                             1024, &f),
               "bad.safetensors", "offsets [0, 4096) exceed the data section of 1024",
               "st: offsets beyond the data section");
  expect_input(parse_json_st("{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
                             " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}",
                             24, &f),
               "bad.safetensors", "overlapping", "st: overlapping tensors");
  expect_input(parse_json_st("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                             " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
                             8, &f),
               "bad.safetensors", "duplicate", "st: duplicate names");
  expect_input(parse_json_st("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, &f),
               "bad.safetensors", "non-negative", "st: negative shape");
  expect_input(parse_json_st("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, &f),
               "bad.safetensors", "offsets", "st: reversed offsets");
  expect_input(parse_json_st("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": \"0\"}}", 4, &f),
               "bad.safetensors", "data_offsets", "st: data_offsets of the wrong type");
  expect_input(parse_json_st("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, &f), "bad.safetensors", "dtype",
               "st: missing dtype");
  expect_input(parse_json_st("{\"__metadata__\": 5}", 0, &f), "bad.safetensors", "__metadata__",
               "st: metadata not an object");
  /* valid, with a zero-size tensor inside another's range and metadata */
  int rc = parse_json_st("{\"__metadata__\": {\"format\": \"pt\"}, \"a\": {\"dtype\": \"F32\", \"shape\": [4], "
                         "\"data_offsets\": [0, 16]}, \"e\": {\"dtype\": \"BF16\", \"shape\": [0, 3], "
                         "\"data_offsets\": [8, 8]}, \"i\": {\"dtype\": \"I64\", \"shape\": [1], "
                         "\"data_offsets\": [16, 24]}}",
                         24, &f);
  check(rc == SL_OK, "st: valid header with empty tensor, I64 and metadata parses");
  /* a non-loadable dtype is refused by name when read */
  size_t len;
  uint8_t *b = mk_st("{\"pos\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", NULL, 8, &len);
  if (sl_st_parse("ids.safetensors", b, len, &f) == SL_OK) {
    float x;
    expect_input(sl_st_tensor_to_f32(sl_st_file_find(f, "pos"), 0, 1, &x), "ids.safetensors", "I64",
                 "st: reading an I64 tensor as fp32");
    sl_st_close_file(f);
  } else {
    check(0, "st: I64 file parses");
  }
  free(b);
}

static void test_f16_bf16(void) {
  /* hand-computed: value = (-1)^s * 2^(e-15) * (1 + m/1024), subnormal m * 2^-24 */
  static const struct {
    uint16_t h;
    double v;
  } f16[] = {{0x3C00, 1.0},
             {0xC000, -2.0},
             {0x7BFF, 65504.0},
             {0x0001, 5.9604644775390625e-08},
             {0x03FF, 6.097555160522461e-05},
             {0x0400, 6.103515625e-05},
             {0x3555, 0.333251953125},
             {0x0000, 0.0},
             {0xB800, -0.5}};
  int ok = 1;
  for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++) ok &= sl_f16_to_f32(f16[i].h) == (float)f16[i].v;
  ok &= isinf(sl_f16_to_f32(0x7C00)) && sl_f16_to_f32(0x7C00) > 0 && isinf(sl_f16_to_f32(0xFC00)) &&
        sl_f16_to_f32(0xFC00) < 0 && isnan(sl_f16_to_f32(0x7E00)) && signbit(sl_f16_to_f32(0x8000));
  check(ok, "f16 -> f32 on hand-computed values (normal, subnormal, max, inf, nan, -0)");
  static const struct {
    uint16_t b;
    double v;
  } bf[] = {
      {0x3F80, 1.0}, {0xC049, -3.140625}, {0x4780, 65536.0}, {0x0001, 9.183549615799121e-41}, {0x3EAB, 0.333984375}};
  ok = 1;
  for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++) ok &= sl_bf16_to_f32(bf[i].b) == (float)bf[i].v;
  ok &= isinf(sl_bf16_to_f32(0x7F80)) && isnan(sl_bf16_to_f32(0x7FC0));
  check(ok, "bf16 -> f32 on hand-computed values");
  /* f32 -> bf16 round to nearest even: 1+2^-8 is a tie -> 1.0 (even);
   * 1+3*2^-8 is a tie -> 1+2^-6 (0x3F82, even); 1+2^-8+2^-20 rounds up. */
  ok = sl_f32_to_bf16(1.0f) == 0x3F80 && sl_f32_to_bf16(1.00390625f) == 0x3F80 &&
       sl_f32_to_bf16(1.01171875f) == 0x3F82 && sl_f32_to_bf16(1.0039072036743164f) == 0x3F81 &&
       sl_f32_to_bf16(-2.5f) == 0xC020 && (sl_f32_to_bf16(NAN) & 0x7FC0) == 0x7FC0 &&
       sl_f32_to_bf16(INFINITY) == 0x7F80 && sl_f32_to_bf16(3.3895313892515355e38f) == 0x7F7F;
  check(ok, "f32 -> bf16 rounds to nearest even, keeps NaN/inf");
  /* f32 -> f16 (--save-dtype fp16), every f16: exact values map back, a
   * midpoint of neighbours goes to the even one, just above / below it to
   * the upper / lower one (subnormals and the step to inf included) */
  ok = 1;
  for (uint32_t h = 0; h < 0x10000u && ok; h++) {
    uint16_t a = (uint16_t)h;
    if ((a & 0x7C00) == 0x7C00) continue; /* inf / NaN */
    float fa = sl_f16_to_f32(a);
    ok &= sl_f32_to_f16(fa) == a;
    uint16_t b = (uint16_t)(a + 1); /* the next away from zero (0x7C00: inf) */
    float fb = (b & 0x7FFF) == 0x7C00 ? copysignf(65536.0f, fa) : sl_f16_to_f32(b);
    float mid = (fa + fb) / 2; /* exact in f32 */
    ok &= sl_f32_to_f16(mid) == ((a & 1) ? b : a);
    ok &= sl_f32_to_f16(nextafterf(mid, fb)) == b && sl_f32_to_f16(nextafterf(mid, fa)) == a;
  }
  ok &= sl_f32_to_f16(INFINITY) == 0x7C00 && sl_f32_to_f16(-INFINITY) == 0xFC00 &&
        (sl_f32_to_f16(NAN) & 0x7E00) == 0x7E00 && sl_f32_to_f16(1e30f) == 0x7C00 && sl_f32_to_f16(1e-30f) == 0 &&
        sl_f32_to_f16(-0.0f) == 0x8000;
  check(ok, "f32 -> f16 rounds to nearest even on every f16 midpoint, subnormals and inf");
  /* an F16 + BF16 file read through a model dir */
  uint16_t data[6] = {0x3C00, 0xC000, 0x3555, 0x3F80, 0xC049, 0x4780};
  size_t len;
  uint8_t *b = mk_st("{\"h\": {\"dtype\": \"F16\", \"shape\": [3], \"data_offsets\": [0, 6]}, "
                     "\"b\": {\"dtype\": \"BF16\", \"shape\": [1, 3], \"data_offsets\": [6, 12]}}     ",
                     data, 12, &len);
  mkdir(path("half"), 0755);
  write_bytes(path("half/model.safetensors"), b, len);
  free(b);
  sl_st_set *s = NULL;
  float x[3] = {0}, y[3] = {0};
  int64_t sh3[1] = {3}, sh13[2] = {1, 3};
  int rc = sl_st_open_dir(path("half"), &s);
  rc = rc ? rc : !s ? -1 : sl_st_read_f32(s, "h", 1, sh3, x);
  rc = rc ? rc : sl_st_read_f32(s, "b", 2, sh13, y);
  check(rc == 0 && x[0] == 1.0f && x[1] == -2.0f && x[2] == 0.333251953125f && y[0] == 1.0f && y[1] == -3.140625f &&
            y[2] == 65536.0f,
        "F16/BF16 tensors of a file read as fp32 through sl_st_read_f32");
  float part[2];
  rc = s ? sl_st_read_f32_slice(s, "h", 1, sh3, 1, 2, part) : -1;
  check(rc == 0 && part[0] == -2.0f && part[1] == 0.333251953125f, "sl_st_read_f32_slice reads [1, 3)");
  if (s) {
    int64_t wrong[1] = {4};
    expect_input(sl_st_read_f32(s, "h", 1, wrong, x), "half/model.safetensors", "expected [4], found [3]",
                 "st: wrong shape");
    expect_input(sl_st_read_f32(s, "model.norm.weight", 1, sh3, x), "half", "model.norm.weight", "st: missing tensor");
    check(strstr(sl_errmsg(), "missing") != NULL, "st: missing-tensor message says 'missing'");
  }
  sl_st_close_set(s);
}

/* fill: value of element k of tensor i */
static float val(int64_t i, int64_t k) { return (float)sin(0.37 * (double)k + 1.3 * (double)i) * (float)(i + 1); }
static int fill_fn(void *ctx, int64_t i, const sl_st_wtensor *t, float *dst) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  for (int64_t k = 0; k < n; k++) dst[k] = val(i, k);
  (*(int *)ctx)++;
  return SL_OK;
}

static int verify_set(const sl_st_set *s, const sl_st_wtensor *ts, int n) {
  int ok = 1;
  for (int i = 0; i < n; i++) {
    int64_t numel = 1;
    for (int d = 0; d < ts[i].ndim; d++) numel *= ts[i].shape[d];
    float *x = malloc((size_t)(numel ? numel : 1) * 4);
    int rc = sl_st_read_f32(s, ts[i].name, ts[i].ndim, ts[i].shape, x);
    const sl_st_tensor *t = sl_st_find(s, ts[i].name);
    ok &= rc == 0 && t && t->dtype == ts[i].dtype;
    for (int64_t k = 0; rc == 0 && k < numel; k++) {
      float want = ts[i].dtype == SL_ST_F32 ? val(i, k) : sl_bf16_to_f32(sl_f32_to_bf16(val(i, k)));
      ok &= memcmp(&want, &x[k], 4) == 0;
    }
    free(x);
  }
  return ok;
}

static void test_st_write(void) {
  sl_st_wtensor ts[] = {
      {"model.embed_tokens.weight", 2, {7, 5}, SL_ST_F32},
      {"model.layers.0.input_layernorm.weight", 1, {5}, SL_ST_BF16},
      {"scalar", 0, {0}, SL_ST_F32},
      {"empty", 2, {0, 3}, SL_ST_F32},
      {"odd \"quoted\" name", 1, {3}, SL_ST_BF16},
      {"lm_head.weight", 2, {7, 5}, SL_ST_F32},
  };
  int n = 6, calls = 0;
  mkdir(path("one"), 0755);
  int rc = sl_st_write_dir(path("one"), ts, n, fill_fn, &calls, 0);
  check(rc == 0 && calls == 5, "st writer: single file written, fill called once per non-empty tensor");
  size_t len;
  char *raw = read_text(path("one/model.safetensors"), &len);
  uint64_t hl = 0;
  if (raw) memcpy(&hl, raw, 8);
  int ok = raw && (8 + hl) % 8 == 0 && !strncmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\"}", 31);
  const char *last = raw ? raw + 8 : NULL;
  for (int i = 0; ok && i < n; i++) {
    char key[128];
    snprintf(key, sizeof key, "%s", ts[i].name);
    const char *p = strstr(last, i == 4 ? "odd \\\"quoted\\\" name" : key);
    ok &= p != NULL && p > last;
    if (p) last = p;
  }
  /* contiguous data, data section = sum of tensor sizes */
  ok &= raw && len == 8 + hl + 7 * 5 * 4 + 5 * 2 + 4 + 3 * 2 + 7 * 5 * 4;
  check(ok, "st writer: header 8-byte aligned, metadata first, keys in the given order, packed data");
  free(raw);
  sl_st_set *s = NULL;
  rc = sl_st_open_dir(path("one"), &s);
  check(rc == 0 && s && sl_st_set_count(s) == n && verify_set(s, ts, n),
        "st round trip (single file): F32 bit-exact, BF16 = rne(fp32)");
  sl_st_close_set(s);

  /* sharded: limit 145 bytes -> shards {0}, {1,2,3,4}, {5} */
  calls = 0;
  rc = sl_st_write_dir(path("one"), ts, n, fill_fn, &calls, 145);
  struct stat st;
  ok = rc == 0 && stat(path("one/model.safetensors"), &st) != 0 &&
       stat(path("one/model-00001-of-00003.safetensors"), &st) == 0 &&
       stat(path("one/model-00003-of-00003.safetensors"), &st) == 0 &&
       stat(path("one/model-00004-of-00004.safetensors"), &st) != 0;
  check(ok, "st writer: sharded layout model-0000i-of-00003 replaces the single file");
  char *idx = read_text(path("one/model.safetensors.index.json"), NULL);
  ok = idx && strstr(idx, "\"total_size\": 300") &&
       strstr(idx, "\"model.embed_tokens.weight\": \"model-00001-of-00003.safetensors\"") &&
       strstr(idx, "\"scalar\": \"model-00002-of-00003.safetensors\"") &&
       strstr(idx, "\"lm_head.weight\": \"model-00003-of-00003.safetensors\"");
  check(ok, "st writer: index.json has metadata.total_size and the weight_map");
  free(idx);
  s = NULL;
  rc = sl_st_open_dir(path("one"), &s);
  check(rc == 0 && s && sl_st_set_count(s) == n && verify_set(s, ts, n), "st round trip (sharded + index): bit-exact");
  sl_st_close_set(s);

  /* the index points at a shard that does not exist / does not hold the tensor */
  mkdir(path("idx"), 0755);
  const char *bad1 = "{\"metadata\": {}, \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\"}}";
  write_bytes(path("idx/model.safetensors.index.json"), bad1, strlen(bad1));
  expect_input(sl_st_open_dir(path("idx"), &s), "model.safetensors.index.json", "does not exist",
               "st index: shard file missing");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "cp %s %s", path("one/model-00001-of-00003.safetensors"),
           path("idx/model-00001-of-00002.safetensors"));
  check(system(cmd) == 0, "copy a shard");
  expect_input(sl_st_open_dir(path("idx"), &s), "model.safetensors.index.json", "does not contain",
               "st index: tensor not in the named shard");
  const char *bad2 = "{\"weight_map\": {\"a\": \"../x.safetensors\"}}";
  write_bytes(path("idx/model.safetensors.index.json"), bad2, strlen(bad2));
  expect_input(sl_st_open_dir(path("idx"), &s), "model.safetensors.index.json", "file name",
               "st index: shard path escaping the directory");
  write_bytes(path("idx/model.safetensors.index.json"), "{\"weight_map\": 3", 16);
  expect_input(sl_st_open_dir(path("idx"), &s), "model.safetensors.index.json", "malformed",
               "st index: malformed JSON");

  /* back to one file: the shards and index go away */
  rc = sl_st_write_dir(path("one"), ts, n, fill_fn, &calls, 0);
  ok = rc == 0 && stat(path("one/model.safetensors"), &st) == 0 &&
       stat(path("one/model.safetensors.index.json"), &st) != 0 &&
       stat(path("one/model-00002-of-00003.safetensors"), &st) != 0;
  check(ok, "st writer: rewriting as one file removes the stale index and shards");

  /* no weight files -> SL_OK, NULL; a missing directory -> SL_EINPUT */
  mkdir(path("empty"), 0755);
  s = (sl_st_set *)1;
  rc = sl_st_open_dir(path("empty"), &s);
  check(rc == SL_OK && s == NULL, "st: a directory without weight files reports 'no weights' (OK, NULL)");
  expect_input(sl_st_open_dir(path("nope"), &s), "nope", "does not exist", "st: missing model directory");

  /* a truncated file on disk */
  char *full = read_text(path("one/model.safetensors"), &len);
  mkdir(path("trunc"), 0755);
  write_bytes(path("trunc/model.safetensors"), full, len - 10);
  free(full);
  expect_input(sl_st_open_dir(path("trunc"), &s), "trunc/model.safetensors", "exceed",
               "st: file truncated inside the data section");

  sl_st_wtensor dup[2] = {{"a", 1, {1}, SL_ST_F32}, {"a", 1, {1}, SL_ST_F32}};
  expect_input(sl_st_write_file(path("dup.safetensors"), dup, 2, fill_fn, &calls), "dup.safetensors", "duplicate",
               "st writer: duplicate names refused");
  check(stat(path("dup.safetensors"), &st) != 0, "st writer: nothing left behind after a refused write");
}

/* ---- config.json ---- */
static int cfg(const char *json, sl_model_config *c) {
  return sl_hfconfig_parse("cfg/config.json", json, strlen(json), c);
}

static void test_config(void) {
  sl_model_config c;
  int rc = cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 176, "
               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 300, \"rms_norm_eps\": 1e-5}",
               &c);
  check(rc == 0 && c.arch == SL_ARCH_LLAMA && c.num_key_value_heads == 4 && c.head_dim == 16 &&
            c.rope_theta == 10000.0 && !c.tie_word_embeddings && c.rms_norm_eps == 1e-5 &&
            !strcmp(c.arch_name, "LlamaForCausalLM"),
        "config: llama with defaults (kv = heads, head_dim = hidden/heads, theta 1e4, untied)");
  rc = cfg("{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1, "
           "\"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"vocab_size\": 260, \"sliding_window\": null, "
           "\"head_dim\": 32, \"rope_theta\": 1000000.0, \"tie_word_embeddings\": true}",
           &c);
  check(rc == 0 && c.arch == SL_ARCH_MISTRAL && c.sliding_window == 0 && c.head_dim == 32 &&
            c.num_key_value_heads == 2 && c.tie_word_embeddings && c.rope_theta == 1e6,
        "config: mistral by model_type, null sliding window, explicit head_dim, GQA");
  rc = cfg("{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
           "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 260, "
           "\"sliding_window\": 16}",
           &c);
  check(rc == 0 && c.sliding_window == 16, "config: mistral sliding_window 16");
  rc = cfg("{\"architectures\": [\"MambaForCausalLM\"], \"hidden_size\": 40, \"num_hidden_layers\": 2, "
           "\"vocab_size\": 257, \"state_size\": 8, \"time_step_rank\": \"auto\"}",
           &c);
  check(rc == 0 && c.arch == SL_ARCH_MAMBA && c.time_step_rank == 3 && c.intermediate_size == 80 &&
            c.tie_word_embeddings && c.conv_kernel == 4 && c.use_conv_bias && !c.use_bias && !c.ssm_original_format &&
            c.layer_norm_epsilon == 1e-5,
        "config: HF mamba (auto dt rank = ceil(40/16) = 3, intermediate = 2*40, tied)");
  rc = cfg("{\"d_model\": 768, \"n_layer\": 24, \"vocab_size\": 50277, \"ssm_cfg\": {}, \"rms_norm\": true, "
           "\"residual_in_fp32\": true, \"fused_add_norm\": true, \"pad_vocab_size_multiple\": 8}",
           &c);
  check(rc == 0 && c.arch == SL_ARCH_MAMBA && c.ssm_original_format && c.vocab_size == 50280 && c.hidden_size == 768 &&
            c.num_hidden_layers == 24 && c.time_step_rank == 48 && c.intermediate_size == 1536 && c.state_size == 16 &&
            c.tie_word_embeddings,
        "config: state-spaces mamba (vocab 50277 padded to 50280, dt rank 48)");

  const char *L = "\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2, \"vocab_size\": 300";
  char j[1024];
#define BAD(body, word, what)                                                                                          \
  snprintf(j, sizeof j, "{%s, %s}", L, body);                                                                          \
  expect_input(cfg(j, &c), "cfg/config.json", word, what)
  snprintf(j, sizeof j, "{%s, \"intermediate_size\": 64, \"num_attention_heads\": 4}", L);
  rc = cfg(j, &c); /* an absent field takes LlamaConfig's default, as transformers does */
  check(rc == 0 && c.hidden_size == 4096 && c.head_dim == 1024, "config: absent hidden_size = LlamaConfig's 4096");
  BAD("\"hidden_size\": \"64\", \"intermediate_size\": 64, \"num_attention_heads\": 4", "must be an integer",
      "config: hidden_size of the wrong JSON type");
  BAD("\"hidden_size\": -64, \"intermediate_size\": 64, \"num_attention_heads\": 4", "positive",
      "config: negative hidden_size");
  BAD("\"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 5", "does not divide",
      "config: heads not dividing hidden");
  BAD("\"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 3",
      "num_key_value_heads", "config: kv heads not dividing heads");
  BAD("\"hidden_size\": 12, \"intermediate_size\": 64, \"num_attention_heads\": 4", "odd", "config: odd head_dim");
  BAD("\"hidden_size\": 64, \"intermediate_size\": 0, \"num_attention_heads\": 4", "intermediate_size",
      "config: zero intermediate_size");
  /* rope_scaling (transformers' modeling_rope_utils.py rules) */
#define RS "\"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, \"rope_scaling\": "
  BAD(RS "{\"rope_type\": \"dynamic\", \"factor\": 2.0}", "changes the frequencies with the sequence length",
      "config: rope_scaling dynamic refused with the reason");
  BAD(RS "{\"rope_type\": \"longrope\", \"factor\": 2.0}", "'rope_scaling.rope_type' = \"longrope\"",
      "config: rope_scaling of an unknown type refused naming it");
  BAD(RS "{\"type\": \"su\"}", "'rope_scaling.type' = \"su\"", "config: the old 'type' spelling names itself");
  BAD(RS "{\"rope_type\": \"linear\"}", "missing required field 'rope_scaling.factor'",
      "config: rope_scaling linear without factor");
  BAD(RS "{\"rope_type\": \"linear\", \"factor\": \"2\"}", "'rope_scaling.factor' must be a number",
      "config: rope_scaling factor of the wrong type");
  BAD(RS "{\"rope_type\": \"linear\", \"factor\": 0}", "'rope_scaling.factor' must be positive",
      "config: rope_scaling factor 0");
  BAD(RS "{\"factor\": 2.0}", "'rope_scaling.rope_type'", "config: rope_scaling without a type");
  BAD(RS "[1]", "'rope_scaling' must be an object", "config: rope_scaling not an object");
  BAD(RS "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}",
      "'rope_scaling.original_max_position_embeddings'", "config: llama3 without original_max_position_embeddings");
  BAD(RS "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"high_freq_factor\": 4.0, "
         "\"original_max_position_embeddings\": 8192}",
      "'rope_scaling.low_freq_factor'", "config: llama3 without low_freq_factor");
  BAD(RS "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, \"high_freq_factor\": 4.0, "
         "\"original_max_position_embeddings\": 8192}",
      "high_freq_factor", "config: llama3 with high_freq_factor <= low_freq_factor");
  BAD(RS "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
         "\"original_max_position_embeddings\": 8192.5}",
      "original_max_position_embeddings", "config: llama3 with a fractional original_max_position_embeddings");
  BAD(RS "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"truncate\": 1, \"attention_factor\": 1.0}",
      "'rope_scaling.truncate'", "config: yarn truncate of the wrong type");
  rc =
      cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2, \"vocab_size\": 300, " RS "null}", &c);
  check(rc == 0 && c.rope_scaling.type == SL_ROPE_DEFAULT, "config: rope_scaling null is plain RoPE");
  rc = cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2, \"vocab_size\": 300, " RS
           "{\"type\": \"linear\", \"factor\": 2.0}}",
           &c);
  check(rc == 0 && c.rope_scaling.type == SL_ROPE_LINEAR && c.rope_scaling.factor == 2.0,
        "config: rope_scaling linear (old 'type' spelling)");
  rc = cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2, \"vocab_size\": 300, " RS
           "{\"rope_type\": \"default\"}}",
           &c);
  check(rc == 0 && c.rope_scaling.type == SL_ROPE_DEFAULT, "config: rope_scaling default");
  rc = cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2, \"vocab_size\": 300, "
           "\"max_position_embeddings\": 4096, " RS
           "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"attention_factor\": 1.0, \"beta_fast\": 0}}",
           &c);
  check(rc == 0 && c.rope_scaling.type == SL_ROPE_YARN && c.rope_scaling.factor == 4.0 &&
            c.rope_scaling.beta_fast == 32 && c.rope_scaling.beta_slow == 1 &&
            c.rope_scaling.original_max_position_embeddings == 4096 && c.rope_scaling.truncate,
        "config: yarn with attention_factor 1 (beta_fast 0 reads as unset, as transformers' `or 32`)");
  rc = cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2, \"vocab_size\": 300, " RS
           "{\"rope_type\": \"yarn\", \"factor\": 4.0}}",
           &c);
  check(rc == 0 && c.rope_scaling.attention_factor == 0.1 * log(4.0) + 1.0,
        "config: yarn's default attention factor 0.1 ln 4 + 1");
  rc = cfg("{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2, \"vocab_size\": 300, "
           "\"max_position_embeddings\": 163840, " RS
           "{\"rope_type\": \"yarn\", \"factor\": 40, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, "
           "\"original_max_position_embeddings\": 4096}}",
           &c);
  check(rc == 0 && c.rope_scaling.factor == 40.0 && c.rope_scaling.attention_factor == 1.0 &&
            c.rope_scaling.original_max_position_embeddings == 4096,
        "config: yarn in DeepSeek-V3's form (mscale = mscale_all_dim: attention factor 1; factor = 163840 / 4096)");
#undef RS
  BAD("\"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, \"eos_token_id\": [1, \"2\"]",
      "'eos_token_id' entry 1", "config: eos_token_id list with a non-integer");
  BAD("\"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, \"eos_token_id\": []",
      "eos_token_id", "config: empty eos_token_id list");
  BAD("\"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, \"hidden_act\": \"gelu\"",
      "hidden_act", "config: non-silu activation refused");
  BAD("\"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, \"tie_word_embeddings\": 1",
      "tie_word_embeddings", "config: boolean of the wrong type");
#undef BAD
  expect_input(cfg("{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 64}", &c), "cfg/config.json",
               "unknown architecture", "config: unknown architecture");
  expect_input(cfg("{\"hidden_size\": 64}", &c), "cfg/config.json", "architecture", "config: no architecture");
  expect_input(cfg("{\"architectures\": \"LlamaForCausalLM\"}", &c), "cfg/config.json", "architectures",
               "config: architectures not an array");
  expect_input(cfg("{\"hidden_size\": 64,", &c), "cfg/config.json", "malformed", "config: malformed JSON");
  expect_input(cfg("{\"architectures\": [\"MambaForCausalLM\"], \"hidden_size\": 40, \"num_hidden_layers\": 2, "
                   "\"vocab_size\": 257, \"time_step_rank\": \"big\"}",
                   &c),
               "cfg/config.json", "time_step_rank", "config: mamba bad time_step_rank");
  expect_input(cfg("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba3\"}}", &c),
               "cfg/config.json", "ssm_cfg.layer", "config: state-spaces layer other than Mamba1 / Mamba2 refused");
  check(cfg("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba2\"}}", &c) == 0 &&
            c.arch == SL_ARCH_MAMBA2 && c.ssm_original_format && c.vocab_size == 16 && c.ssm_head_dim == 64 &&
            c.ssm_heads == 2 && c.ssm_groups == 1 && c.state_size == 128,
        "config: state-spaces Mamba2 (mamba_ssm defaults: headdim 64, ngroups 1, d_state 128; vocab padded to 8)");
  expect_input(cfg("{\"d_model\": 64, \"n_layer\": 2, \"vocab_size\": 10, \"ssm_cfg\": {\"layer\": \"Mamba2\", "
                   "\"norm_before_gate\": true}}",
                   &c),
               "cfg/config.json", "norm_before_gate", "config: state-spaces Mamba2 norm_before_gate refused");
  expect_input(sl_hfconfig_load(path("no/config.json"), &c), "no/config.json", "cannot open", "config: missing file");

  /* save -> load round trips */
  const char *srcs[3] = {
      "{\"model_type\": \"llama\", \"hidden_size\": 48, \"intermediate_size\": 100, \"num_hidden_layers\": 3, "
      "\"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"vocab_size\": 257, \"rms_norm_eps\": 1e-5, "
      "\"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"bos_token_id\": 1}",
      "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1, "
      "\"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"vocab_size\": 260, \"sliding_window\": 7, "
      "\"head_dim\": 8}",
      "{\"d_model\": 32, \"n_layer\": 2, \"vocab_size\": 257, \"ssm_cfg\": {\"d_state\": 4, \"dt_rank\": 5}, "
      "\"pad_vocab_size_multiple\": 8, \"tie_embeddings\": false}"};
  for (int k = 0; k < 3; k++) {
    sl_model_config a, b;
    char p[512];
    snprintf(p, sizeof p, "%s/config%d.json", g_dir, k);
    rc = cfg(srcs[k], &a);
    rc = rc ? rc : sl_hfconfig_save(p, &a);
    rc = rc ? rc : sl_hfconfig_load(p, &b);
    a.ssm_original_format = b.ssm_original_format;
    a.pad_vocab_size_multiple = b.pad_vocab_size_multiple;
    memcpy(a.fields, b.fields, sizeof a.fields); /* the fields read: the saved file has every one */
    int same = rc == 0 && memcmp(&a, &b, sizeof a) == 0;
    char *t = read_text(p, NULL);
    same &=
        t && strstr(t, "\"torch_dtype\": \"float32\"") && strstr(t, "\"architectures\"") && strstr(t, "\"model_type\"");
    free(t);
    char what[128];
    snprintf(what, sizeof what, "config: save -> load round trip (%s)", sl_arch_name(a.arch));
    check(same, what);
  }
  { /* rope_scaling llama3 round trip */
    sl_model_config a, b;
    char p[512];
    snprintf(p, sizeof p, "%s/config-llama3.json", g_dir);
    rc = cfg("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
             "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 300, "
             "\"eos_token_id\": [128001, 128008, 128009], \"rope_scaling\": "
             "{\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
             "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}}",
             &a);
    rc = rc ? rc : sl_hfconfig_save(p, &a);
    rc = rc ? rc : sl_hfconfig_load(p, &b);
    memcpy(a.fields, b.fields, sizeof a.fields);
    check(rc == 0 && a.rope_scaling.type == SL_ROPE_LLAMA3 && a.n_eos == 3 && a.eos_token_id == 128001 &&
              a.eos_token_ids[2] == 128009 && memcmp(&a, &b, sizeof a) == 0,
          "config: save -> load round trip (llama3 rope_scaling, eos_token_id a list)");
  }
}

/* ---- Megatron .idx built by hand ---- */
static uint8_t *mk_idx(int dtype, int64_t ns, const int32_t *sizes, const int64_t *ptrs, int64_t nd, const int64_t *doc,
                       size_t *len) {
  *len = 34 + 12 * (size_t)ns + 8 * (size_t)nd;
  uint8_t *b = calloc(1, *len);
  uint64_t v = 1;
  memcpy(b, "MMIDIDX\0\0", 9);
  memcpy(b + 9, &v, 8);
  b[17] = (uint8_t)dtype;
  memcpy(b + 18, &ns, 8);
  memcpy(b + 26, &nd, 8);
  memcpy(b + 34, sizes, 4 * (size_t)ns);
  memcpy(b + 34 + 4 * ns, ptrs, 8 * (size_t)ns);
  memcpy(b + 34 + 12 * ns, doc, 8 * (size_t)nd);
  return b;
}

/* The per-layer attention type (sl_cfg_layer_window) from each rule, and a
 * windowed Qwen2 through save and load. */
static int windows_are(const sl_model_config *c, const int64_t *want, int n) {
  for (int l = 0; l < n; l++)
    if (sl_cfg_layer_window(c, l) != want[l]) return 0;
  return c->num_hidden_layers == n;
}

static void test_layer_types(void) {
  sl_model_config c, b;
#define Q2                                                                                                             \
  "{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64, "                       \
  "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"vocab_size\": 100, "
  const struct {
    const char *json, *what;
    int64_t want[3];
  } cases[] = {
      {"{\"model_type\": \"mistral\", \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 3, "
       "\"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"vocab_size\": 100, \"sliding_window\": 16}",
       "mistral: every layer",
       {16, 16, 16}},
      {Q2 "\"use_sliding_window\": true, \"sliding_window\": 8, \"max_window_layers\": 1}", "qwen2: i >= 1", {0, 8, 8}},
      {Q2 "\"use_sliding_window\": false, \"sliding_window\": 8, \"max_window_layers\": 1}", "qwen2: off", {0, 0, 0}},
      {Q2 "\"use_sliding_window\": true, \"sliding_window\": null, \"max_window_layers\": 0}",
       "qwen2: null",
       {0, 0, 0}},
      {Q2 "\"use_sliding_window\": true, \"max_window_layers\": 2}", "qwen2: default 4096", {0, 0, 4096}},
      {Q2 "\"use_sliding_window\": true, \"sliding_window\": 8, \"max_window_layers\": 0, \"layer_types\": "
          "[\"sliding_attention\", \"full_attention\", \"sliding_attention\"]}",
       "qwen2: layer_types over max_window_layers",
       {8, 0, 8}},
      {"{\"architectures\": [\"Gemma2ForCausalLM\"], \"hidden_size\": 32, \"intermediate_size\": 64, "
       "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"vocab_size\": 100, \"sliding_window\": 4}",
       "gemma2: even layers",
       {4, 0, 4}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = cfg(cases[i].json, &c);
    char what[160];
    snprintf(what, sizeof what, "layer windows: %s", cases[i].what);
    check(rc == 0 && windows_are(&c, cases[i].want, 3), what);
  }
  char p[512];
  snprintf(p, sizeof p, "%s/qwen2_win.json", g_dir);
  int rc = cfg(cases[5].json, &c);
  rc = rc ? rc : sl_hfconfig_save(p, &c);
  rc = rc ? rc : sl_hfconfig_load(p, &b);
  check(rc == 0 && windows_are(&b, cases[5].want, 3) && b.sliding_window == 8,
        "layer windows: a windowed qwen2 saves and loads back");
  rc = cfg(Q2 "\"use_sliding_window\": true, \"sliding_window\": 8, \"max_window_layers\": 3}", &c);
  check(rc == 0 && c.sliding_window == 0, "layer windows: qwen2 with no layer >= max_window_layers keeps no window");
#undef Q2
}

static void test_idx_bad(void) {
  int32_t sizes[3] = {3, 0, 2};
  int64_t ptrs[3] = {0, 6, 6}, doc[3] = {0, 2, 3};
  size_t len;
  sl_idx_info in;
  uint8_t *g = mk_idx(SL_IDX_UINT16, 3, sizes, ptrs, 3, doc, &len), *b = malloc(len);
  int rc = sl_idx_parse("d/bad.idx", g, len, 10, &in);
  check(rc == 0 && in.num_seqs == 3 && in.num_doc_idx == 3 && in.total_tokens == 5 && in.elem_size == 2,
        "idx: hand-built index parses (3 sequences, 2 documents, 5 tokens)");
#define MUT(stmt, blen, word, what)                                                                                    \
  memcpy(b, g, len);                                                                                                   \
  stmt;                                                                                                                \
  expect_input(sl_idx_parse("d/bad.idx", b, len, blen, &in), "d/bad.idx", word, what)
  MUT(b[0] = 'X', 10, "magic", "idx: wrong magic");
  MUT(b[9] = 2, 10, "version", "idx: version 2");
  MUT(b[17] = 6, 10, "dtype", "idx: float64 dtype refused");
  MUT(b[17] = 7, 10, "dtype", "idx: float32 dtype refused");
  MUT(b[17] = 9, 10, "dtype", "idx: unknown dtype code");
  MUT(b[18] = 4, 10, "counts", "idx: sequence count larger than the file");
  MUT(b[26] = 2, 10, "counts", "idx: document count not matching the file");
  MUT((void)0, 9, "pointer", "idx: sequence beyond the .bin");
  MUT(b[34 + 12 + 7] = 0x80, 10, "pointer", "idx: negative pointer");
  MUT(b[34 + 3] = 0x80, 10, "negative size", "idx: negative size");
  MUT(b[34 + 36 + 8] = 5, 10, "monotonic", "idx: document index not monotonic");
  MUT(b[34 + 36] = 1, 10, "starts with", "idx: document index not starting at 0");
  MUT(b[34 + 36 + 16] = 2, 10, "ends with", "idx: document index not ending at the sequence count");
#undef MUT
  expect_input(sl_idx_parse("d/bad.idx", g, 20, 10, &in), "d/bad.idx", "truncated", "idx: file too short");
  uint8_t *big = realloc(g, len + 8);
  memset(big + len, 0, 8);
  expect_input(sl_idx_parse("d/bad.idx", big, len + 8, 10, &in), "d/bad.idx", "counts", "idx: trailing bytes");
  /* through open: the message names the .bin */
  write_bytes(path("short.idx"), big, len);
  write_bytes(path("short.bin"), "\0\0\0\0", 4);
  sl_dataset *ds;
  char pre[512];
  snprintf(pre, sizeof pre, "%s", path("short"));
  expect_input(sl_dataset_open(pre, &ds), "short.bin", "pointer", "dataset open: pointer beyond the .bin");
  expect_input(sl_dataset_open(path("absent"), &ds), "absent.idx", "cannot open", "dataset open: missing files");
  free(big);
  free(b);
}

static void test_dataset(void) {
  /* documents with an empty one; uint16 */
  const int32_t d0[] = {1, 2, 3}, d2[] = {4, 5}, d3[] = {6};
  sl_dataset_builder *b;
  char pre[512];
  snprintf(pre, sizeof pre, "%s", path("ds"));
  int rc = sl_dataset_builder_create(pre, SL_IDX_UINT16, &b);
  rc = rc ? rc : sl_dataset_builder_add_document(b, d0, 3);
  rc = rc ? rc : sl_dataset_builder_add_document(b, NULL, 0);
  rc = rc ? rc : sl_dataset_builder_add_tokens(b, d2, 1);
  rc = rc ? rc : sl_dataset_builder_add_tokens(b, d2 + 1, 1);
  rc = rc ? rc : sl_dataset_builder_end_document(b);
  rc = rc ? rc : sl_dataset_builder_add_document(b, d3, 1);
  rc = rc ? rc : sl_dataset_builder_finish(b);
  check(rc == 0, "dataset builder: 4 documents (one empty) written");
  /* the .idx bytes, checked field by field */
  size_t len;
  char *raw = read_text(path("ds.idx"), &len);
  int32_t sz[4];
  int64_t ptr[4], doc[5];
  uint64_t ver, ns, nd;
  int ok = raw && len == 34 + 12 * 4 + 8 * 5 && !memcmp(raw, "MMIDIDX\0\0", 9);
  if (ok) {
    memcpy(&ver, raw + 9, 8);
    memcpy(&ns, raw + 18, 8);
    memcpy(&nd, raw + 26, 8);
    memcpy(sz, raw + 34, 16);
    memcpy(ptr, raw + 50, 32);
    memcpy(doc, raw + 82, 40);
    ok = ver == 1 && raw[17] == 8 && ns == 4 && nd == 5 && sz[0] == 3 && sz[1] == 0 && sz[2] == 2 && sz[3] == 1 &&
         ptr[0] == 0 && ptr[1] == 6 && ptr[2] == 6 && ptr[3] == 10 && doc[0] == 0 && doc[4] == 4;
  }
  free(raw);
  raw = read_text(path("ds.bin"), &len);
  uint16_t want_bin[6] = {1, 2, 3, 4, 5, 6};
  ok &= raw && len == 12 && !memcmp(raw, want_bin, 12);
  free(raw);
  check(ok, "dataset builder: .idx header/sizes/pointers/doc index and .bin bytes as specified");
  sl_dataset *ds;
  rc = sl_dataset_open(pre, &ds);
  check(rc == 0 && sl_dataset_num_seqs(ds) == 4 && sl_dataset_num_docs(ds) == 4 && sl_dataset_num_tokens(ds) == 6 &&
            sl_dataset_dtype(ds) == SL_IDX_UINT16,
        "dataset open: counts");
  if (rc) return;
  ok = 1;
  int32_t out[64];
  for (int64_t s = 0; s < 20; s++)
    for (int64_t n = 0; n <= 17; n++) {
      memset(out, 0xff, sizeof out);
      ok &= sl_dataset_tokens(ds, s, n, out) == 0;
      for (int64_t k = 0; k < n; k++) ok &= out[k] == (int32_t)((s + k) % 6 + 1);
      ok &= out[n] == -1;
    }
  check(ok, "dataset stream: every (start, n) in [0,20)x[0,17] equals stream[(start+k) mod 6]");
  int32_t t5[5];
  ok = sl_dataset_tokens(ds, 4, 5, t5) == 0 && t5[0] == 5 && t5[1] == 6 && t5[2] == 1 && t5[3] == 2 && t5[4] == 3;
  check(ok, "dataset stream: sample wrapping at the end (5 6 | 1 2 3)");
  rc = sl_dataset_check_vocab(ds, 7);
  check(rc == 0, "dataset vocab check: all tokens < 7");
  expect_input(sl_dataset_check_vocab(ds, 6), "ds.bin", "position 5", "dataset vocab check: token 6 >= vocab 6");
  check(strstr(sl_errmsg(), "value 6") != NULL, "dataset vocab check: message has the value");
  sl_dataset_close(ds);

  /* many random documents (prefix-sum blocks), every dtype */
  static const int codes[6] = {1, 2, 3, 4, 5, 8};
  srand(7);
  for (int c = 0; c < 6; c++) {
    int32_t *stream = malloc(5000 * sizeof *stream);
    int64_t total = 0;
    snprintf(pre, sizeof pre, "%s/multi%d", g_dir, codes[c]);
    rc = sl_dataset_builder_create(pre, codes[c], &b);
    for (int d = 0; d < 300 && rc == 0; d++) {
      int32_t doc_t[12];
      int n = rand() % 12;
      for (int k = 0; k < n; k++) {
        int32_t v = rand() % 120;
        if (codes[c] == SL_IDX_INT8 || codes[c] == SL_IDX_INT16) v -= 60;
        if (codes[c] == SL_IDX_INT32 || codes[c] == SL_IDX_INT64) v = rand() - RAND_MAX / 2;
        doc_t[k] = stream[total++] = v;
      }
      rc = sl_dataset_builder_add_document(b, doc_t, n);
    }
    rc = rc ? rc : sl_dataset_builder_finish(b);
    rc = rc ? rc : sl_dataset_open(pre, &ds);
    ok = rc == 0 && sl_dataset_num_tokens(ds) == total && sl_dataset_num_seqs(ds) == 300;
    for (int q = 0; ok && q < 400; q++) {
      int64_t s = rand() % (3 * total), n = rand() % 40;
      int32_t o[40];
      ok &= sl_dataset_tokens(ds, s, n, o) == 0;
      for (int64_t k = 0; k < n; k++) ok &= o[k] == stream[(s + k) % total];
    }
    if (rc == 0) sl_dataset_close(ds);
    char what[160];
    snprintf(what, sizeof what, "dataset dtype code %d: 300 random documents, 400 random stream reads match", codes[c]);
    check(ok, what);
    free(stream);
  }
  rc = sl_dataset_builder_create(path("u8"), SL_IDX_UINT8, &b);
  int32_t too_big = 256;
  if (rc == 0) {
    expect_input(sl_dataset_builder_add_document(b, &too_big, 1), "u8.bin", "does not fit",
                 "dataset builder: 256 refused for uint8");
    sl_dataset_builder_abort(b);
  }
  struct stat st;
  check(stat(path("u8.bin"), &st) != 0, "dataset builder: abort leaves no .bin");
  expect_input(sl_dataset_builder_create(path("u8"), SL_IDX_FLOAT32, &b), "u8", "dtype",
               "dataset builder: float dtype refused");
}

/* Document starts of stream windows (--doc-attention-mask) against the
 * document list: documents of several sequences, an empty sequence, an empty
 * document, --split ranges starting inside a document, wrapping; and the
 * count of a token inside documents (not as a document's last token). */
static void test_doc_starts(void) {
  /* documents: seqs {0,1} = 3 tokens, {2} = 2, {} (empty), {3,4,5} = 5, {6} = 5: starts at 0, 3, 5, 10 */
  int32_t sizes[7] = {3, 0, 2, 4, 0, 1, 5};
  int64_t ptrs[7], doc[6] = {0, 2, 3, 3, 6, 7}, acc = 0;
  for (int i = 0; i < 7; i++) ptrs[i] = 2 * acc, acc += sizes[i];
  /* token 9: last of document 0 (2), first of 1 (3), end of a sequence inside 3 (8), last of 3 (9) and 4 (14) */
  uint16_t bin[15] = {1, 1, 9, 9, 1, 1, 1, 1, 9, 9, 1, 1, 1, 1, 9};
  size_t len;
  uint8_t *g = mk_idx(SL_IDX_UINT16, 7, sizes, ptrs, 6, doc, &len);
  write_bytes(path("docs.idx"), g, len);
  write_bytes(path("docs.bin"), bin, sizeof bin);
  free(g);
  sl_dataset *ds;
  int rc = sl_dataset_open(path("docs"), &ds);
  check(rc == 0 && sl_dataset_num_docs(ds) == 5 && sl_dataset_num_tokens(ds) == 15,
        "doc starts: hand-built index of 5 documents (one empty) over 7 sequences opens");
  if (rc) return;
  static const int is_start[15] = {1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0};
  static const int64_t ranges[4][2] = {{0, 15}, {3, 12}, {4, 15}, {6, 7}};
  int ok = 1;
  for (int r = 0; r < 4; r++) {
    int64_t lo = ranges[r][0], hi = ranges[r][1], L = hi - lo;
    if (r) ok &= sl_dataset_set_range(ds, lo, hi) == 0;
    for (int64_t s = 0; s < 40; s++)
      for (int64_t n = 0; n <= 33; n++) {
        uint8_t got[34];
        memset(got, 7, sizeof got);
        ok &= sl_dataset_doc_starts(ds, s, n, got) == 0 && got[n] == 7;
        for (int64_t k = 0; k < n; k++) {
          int64_t p = (s + k) % L;
          ok &= got[k] == (p == 0 || is_start[lo + p]);
        }
      }
  }
  check(ok, "doc starts: every window (start < 40, n <= 33) of the whole stream and of 3 ranges (one starting inside "
            "a document, one of a single token) as the document list says, position 0 of the range included");
  int64_t inside = -1;
  rc = sl_dataset_count_inside(ds, 9, &inside);
  check(rc == 0 && inside == 2, "count inside: token 9 inside documents twice (not as a document's last token)");
  rc = sl_dataset_count_inside(ds, 5, &inside);
  check(rc == 0 && inside == 0, "count inside: an absent token 0 times");
  sl_dataset_close(ds);
}

static void test_prepare(void) {
  const char *text = "hello\nworld\n\n\nfoo\r\n\r\nbar";
  char pre[512];
  snprintf(pre, sizeof pre, "%s", path("prep"));
  sl_prepare_stats st = {0, 0};
  int rc = sl_prepare_text_mem("builtin", text, strlen(text), pre, &st);
  /* by hand: "hello\nworld" 256 "foo\r" 256 "bar" 256 */
  int32_t want[64];
  int n = 0;
  for (const char *p = "hello\nworld"; *p; p++) want[n++] = (unsigned char)*p;
  want[n++] = 256;
  for (const char *p = "foo\r"; *p; p++) want[n++] = (unsigned char)*p;
  want[n++] = 256;
  for (const char *p = "bar"; *p; p++) want[n++] = (unsigned char)*p;
  want[n++] = 256;
  check(rc == 0 && st.documents == 3 && st.tokens == n, "prepare (memory): 3 documents, 21 tokens");
  sl_dataset *ds;
  int32_t got[64];
  rc = rc ? rc : sl_dataset_open(pre, &ds);
  int ok = rc == 0 && sl_dataset_num_tokens(ds) == n && sl_dataset_dtype(ds) == SL_IDX_UINT16 &&
           sl_dataset_num_docs(ds) == 3 && sl_dataset_tokens(ds, 0, n, got) == 0 && !memcmp(got, want, (size_t)n * 4);
  if (rc == 0) sl_dataset_close(ds);
  check(ok, "prepare (memory): tokens are the bytes, 256 after each document, blank lines split");
  write_bytes(path("in.txt"), text, strlen(text));
  snprintf(pre, sizeof pre, "%s", path("prep2"));
  rc = sl_prepare_text(path("in.txt"), pre, &st);
  char *a = read_text(path("prep.bin"), NULL), *b2 = read_text(path("prep2.bin"), NULL);
  check(rc == 0 && a && b2 && !memcmp(a, b2, (size_t)n * 2), "prepare (file) equals prepare (memory)");
  free(a);
  free(b2);
  expect_input(sl_prepare_text(path("missing.txt"), pre, &st), "missing.txt", "cannot open", "prepare: missing input");
  expect_input(sl_prepare_text_mem("blank.txt", "\n\n\r\n", 4, pre, &st), "blank.txt", "no documents",
               "prepare: only blank lines");
}

static void test_plot(void) {
  const char *jl = "{\"step\": 0, \"loss\": 5.5, \"tokens_per_s\": 1000}\n"
                   "not json\n"
                   "{\"step\": 1, \"loss\": 4.25}\n"
                   "{\"step\": 1, \"loss\": 4.0, \"tokens_per_s\": 1200.5}\n"
                   "{\"step\": 2, \"loss\": 3.5, \"tokens_per_s\": 1100, \"lr\": 1e-3}\n";
  write_bytes(path("m.jsonl"), jl, strlen(jl));
  int rc = sl_plot_metrics(path("m.jsonl"), path("m.svg"));
  char *s = read_text(path("m.svg"), NULL);
  int polys = 0, pts = 0;
  for (const char *p = s; p && (p = strstr(p, "<polyline")); p++) {
    polys++;
    const char *q = strstr(p, "points=\""), *e = q ? strchr(q + 8, '"') : NULL;
    for (const char *c = q; c && c < e; c++) pts += *c == ',';
  }
  check(rc == 0 && s && !strncmp(s, "<?xml", 5) && strstr(s, "<svg") && strstr(s, "</svg>") && strstr(s, "m.jsonl") &&
            strstr(s, "loss") && strstr(s, "tokens/s") && strstr(s, "learning rate") && !strstr(s, "gradient norm") &&
            polys == 3 && pts == 7,
        "plot: loss and tokens/s panels of 3 points, lr panel of 1 (bad lines skipped, no grad_norm panel)");
  free(s);
  write_bytes(path("e.jsonl"), "", 0);
  expect_input(sl_plot_metrics(path("e.jsonl"), path("e.svg")), "e.jsonl", "no metrics", "plot: empty file");
  expect_input(sl_plot_metrics(path("x.jsonl"), path("e.svg")), "x.jsonl", "cannot open", "plot: missing file");
}

/* Random byte mutations / truncations of valid images: every parser must
 * return SL_OK or SL_EINPUT, never crash (run under ASan to see overreads). */
static void mutate(uint8_t *b, size_t *len, unsigned *seed) {
  int k = 1 + rand_r(seed) % 4;
  for (int i = 0; i < k && *len; i++) b[rand_r(seed) % *len] = (uint8_t)rand_r(seed);
  if (rand_r(seed) % 8 == 0 && *len) *len = (size_t)rand_r(seed) % *len;
}

static void test_mutations(void) {
  unsigned seed = 12345;
  float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  size_t slen;
  uint8_t *st = mk_st("{\"__metadata__\": {\"format\": \"pt\"}, \"a\": {\"dtype\": \"F32\", \"shape\": [2, 2], "
                      "\"data_offsets\": [0, 16]}, \"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": "
                      "[16, 24]}, \"c\": {\"dtype\": \"F16\", \"shape\": [4], \"data_offsets\": [24, 32]}}",
                      data, 32, &slen);
  int ok = 1, parsed = 0;
  uint8_t *m = malloc(slen);
  for (int it = 0; it < 3000; it++) {
    size_t len = slen;
    memcpy(m, st, slen);
    mutate(m, &len, &seed);
    uint8_t *exact = malloc(len ? len : 1); /* exact-size copy so ASan sees overreads */
    memcpy(exact, m, len);
    sl_st_file *f;
    int rc = sl_st_parse("fuzz.safetensors", exact, len, &f);
    ok &= rc == SL_OK || rc == SL_EINPUT;
    if (rc == SL_OK) {
      parsed++;
      for (int64_t i = 0; i < sl_st_file_count(f); i++) {
        const sl_st_tensor *t = sl_st_file_tensor(f, i);
        float *x = malloc((size_t)(t->numel ? t->numel : 1) * 4);
        int r2 = t->numel < 1000000 ? sl_st_tensor_to_f32(t, 0, t->numel, x) : 0;
        ok &= r2 == SL_OK || r2 == SL_EINPUT;
        free(x);
      }
      sl_st_close_file(f);
    }
    free(exact);
  }
  free(m);
  free(st);
  char what[128];
  snprintf(what, sizeof what, "fuzz: 3000 mutated safetensors images -> OK (%d) or SL_EINPUT only", parsed);
  check(ok, what);

  int32_t sizes[3] = {3, 0, 2};
  int64_t ptrs[3] = {0, 6, 6}, doc[3] = {0, 2, 3};
  size_t ilen;
  uint8_t *idx = mk_idx(SL_IDX_UINT16, 3, sizes, ptrs, 3, doc, &ilen);
  m = malloc(ilen);
  ok = 1;
  parsed = 0;
  for (int it = 0; it < 3000; it++) {
    size_t len = ilen;
    memcpy(m, idx, ilen);
    mutate(m, &len, &seed);
    uint8_t *exact = malloc(len ? len : 1);
    memcpy(exact, m, len);
    sl_idx_info in;
    int rc = sl_idx_parse("fuzz.idx", exact, len, 8 + rand_r(&seed) % 4, &in);
    ok &= rc == SL_OK || rc == SL_EINPUT;
    parsed += rc == SL_OK;
    free(exact);
  }
  free(m);
  free(idx);
  snprintf(what, sizeof what, "fuzz: 3000 mutated .idx images -> OK (%d) or SL_EINPUT only", parsed);
  check(ok, what);

  const char *cj = "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
                   "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                   "\"vocab_size\": 300, \"sliding_window\": 8, \"rope_theta\": 10000.0}";
  size_t clen = strlen(cj);
  m = malloc(clen);
  ok = 1;
  parsed = 0;
  for (int it = 0; it < 3000; it++) {
    size_t len = clen;
    memcpy(m, cj, clen);
    mutate(m, &len, &seed);
    char *exact = malloc(len ? len : 1);
    memcpy(exact, m, len);
    sl_model_config c;
    int rc = sl_hfconfig_parse("fuzz.json", exact, len, &c);
    ok &= rc == SL_OK || rc == SL_EINPUT;
    parsed += rc == SL_OK;
    free(exact);
  }
  free(m);
  snprintf(what, sizeof what, "fuzz: 3000 mutated config.json texts -> OK (%d) or SL_EINPUT only", parsed);
  check(ok, what);
}

static int rm_one(const char *p, const struct stat *s, int flag, struct FTW *f) { return remove(p); }

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/sl_test_io.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_st_bad();
  test_f16_bf16();
  test_st_write();
  test_config();
  test_layer_types();
  test_idx_bad();
  test_dataset();
  test_doc_starts();
  test_prepare();
  test_plot();
  test_mutations();
  nftw(g_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
