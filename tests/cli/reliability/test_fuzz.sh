#!/usr/bin/env bash
# Fuzzing (issue 5, test 6): builds libFuzzer targets (clang
# -fsanitize=fuzzer,address,undefined) for the safetensors header parser,
# the Megatron .idx parser, config.json parsing and the checkpoint manifest
# parser, seeds them with valid and invalid inputs from
# tests/cli/reliability/fuzz/gen_corpus.py, and runs each for SL_FUZZ_SECONDS (default 60, about a minute each as the issue asks)
# seconds. Any crash, leak or sanitizer report fails. Skipped (77) without
# clang + libFuzzer. SL_FUZZ_KEEP=DIR keeps corpora and artifacts there.
source "${SL_SRC:?}/tests/lib/run.sh" fuzz
SECS=${SL_FUZZ_SECONDS:-60}
CC=${SL_FUZZ_CC:-clang}
command -v $CC >/dev/null || skip "no clang"
# SL_FUZZ_KEEP=DIR: work in DIR instead of run.sh's $W, and keep it (SL_KEEP)
if [ -n "${SL_FUZZ_KEEP:-}" ]; then rmdir "$W"; W=$SL_FUZZ_KEEP; SL_KEEP=1; mkdir -p "$W"; fi
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' > $W/probe.c
$CC -fsanitize=fuzzer $W/probe.c -o $W/probe 2>/dev/null || skip "clang has no libFuzzer"
CFLAGS="-g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$SL_SRC"
ZSTD=""; pkg-config --exists libzstd && ZSTD="-DSL_USE_ZSTD=1 $(pkg-config --libs libzstd)"
JANSSON="$(pkg-config --cflags --libs jansson)"
LIBS="$SL_SRC/base/base.c $SL_SRC/base/env.c"
build() { # name sources...
  local n=$1; shift
  $CC $CFLAGS "$@" $LIBS $ZSTD $JANSSON -lm -lpthread -o $W/$n 2> $W/$n.build.log || { echo "building $n failed"; cat $W/$n.build.log; exit 1; }
}
build fuzz_safetensors $SL_SRC/tests/cli/reliability/fuzz/fuzz_safetensors.c $SL_SRC/formats/safetensors.c
build fuzz_idx $SL_SRC/tests/cli/reliability/fuzz/fuzz_idx.c $SL_SRC/formats/dataset.c
build fuzz_hfconfig $SL_SRC/tests/cli/reliability/fuzz/fuzz_hfconfig.c $SL_SRC/formats/hfconfig.c
build fuzz_manifest $SL_SRC/tests/cli/reliability/fuzz/fuzz_manifest.c $SL_SRC/formats/ckpt_io.c
"$PY" $SL_SRC/tests/cli/reliability/fuzz/gen_corpus.py $W/seeds || exit 1
for t in safetensors idx hfconfig manifest; do
  mkdir -p $W/corpus_$t $W/art_$t
  ( cd $W/art_$t && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
    $W/fuzz_$t -max_total_time=$SECS -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      $W/corpus_$t $W/seeds/$t > $W/$t.log 2>&1 )
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' $W/$t.log | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' $W/$t.log | tail -1)
  if [ $rc != 0 ] || ls $W/art_$t | grep -q .; then
    bad "fuzz_$t: FAILED (status $rc)"; grep -m5 -E 'ERROR|SUMMARY|runtime error' $W/$t.log
  else ok "fuzz_$t: ${SECS}s, ${runs:-?} inputs, $cov, 0 crashes"; fi
done
finish
