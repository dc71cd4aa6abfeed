#!/bin/bash
# tests/cli/reliability/test_harden_check_asan.sh — the engine under AddressSanitizer +
# UndefinedBehaviorSanitizer (issue 11): configures a -DSL_SANITIZE=ON CPU
# build in a temporary directory (-O1, asserts on, warnings not fatal here:
# the normal build enforces them), builds the
# fast unit tests and the CLI, runs the unit tests, and trains a tiny model on
# 1 and 2 ranks plus a refused start (rank disagreement). Any sanitizer report
# fails the test (UBSan does not recover; ASan aborts). Skipped (77) when this
# build is already a sanitizer build (the whole suite runs under it then) or
# the compiler cannot link -fsanitize=address,undefined.
# Cost: one configure + ~60 C files; about 2-3 minutes on 2 idle cores.
source "${SL_SRC:?}/tests/lib/run.sh" harden_check_asan
# shellcheck source=tests/lib/harden_check.sh
source "$SL_SRC/tests/lib/harden_check.sh"
if grep -q "^SL_SANITIZE:BOOL=ON" "$SL_BUILD/CMakeCache.txt" 2> /dev/null; then
  skip "$SL_BUILD is a sanitizer build already"
fi
echo 'int main(void) { return 0; }' > "$W/probe.c"
cc -fsanitize=address,undefined "$W/probe.c" -o "$W/probe" 2> /dev/null && "$W/probe" ||
  skip "the compiler cannot build with -fsanitize=address,undefined"
t0=$SECONDS
jobs=$(nproc 2> /dev/null || echo 2); [ "$jobs" -gt 4 ] && jobs=4
if ! cmake -S "$SL_SRC" -B "$W/b" -DSL_SANITIZE=ON -DSL_WITH_CUDA=OFF -DSL_WERROR=OFF -DCMAKE_BUILD_TYPE=SlSanitize \
     -DCMAKE_C_FLAGS_SLSANITIZE="-O1" > "$W/configure.log" 2>&1; then
  no "configure" "$W/configure.log"; finish
fi
UNITS="test_memops test_ckpt_io test_io test_plan test_unit_tensors"
if ! cmake --build "$W/b" -j "$jobs" --target shardlm $UNITS > "$W/build.log" 2>&1; then
  no "build" "$W/build.log"; finish
fi
ok "sanitizer build in $((SECONDS - t0)) s"
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
export SL_SRC SL_BUILD="$W/b" OMP_NUM_THREADS=2
for u in $UNITS; do expect "$u" 0 "" "$W/b/tests/$u"; done
# MPI's own allocations at exit are not ours: no leak check through mpirun
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=0
B="$W/b/shardlm"
tiny_config "$W/m" '"rope_theta": 10000.0'
tiny_data "$W/data" # with the sanitizer build's $B
RUN="train --model $W/m --init random --data $W/data --steps 3 --micro-batch 2 --seq-len 16 --threads 1 --summary false --plot false"
expect "train on 1 rank" 0 "trained 3 steps" "$B" $RUN --out-dir "$W/o1" --ckpt-dir "$W/ck" --save "$W/hf"
expect "resume" 0 "resumed from" "$B" $RUN --steps 4 --out-dir "$W/o1" --ckpt-dir "$W/ck" --resume
# an odd row count and vocabulary: the LM-head row sums were once misaligned (UBSan)
tiny_config "$W/odd" '"rope_theta": 10000.0, "vocab_size": 301'
expect "odd rows x odd vocabulary" 0 "trained 2 steps" "$B" train --model "$W/odd" --init random --data "$W/data" --steps 2 \
  --micro-batch 1 --seq-len 15 --threads 1 --summary false --plot false --out-dir "$W/o4"
if command -v mpirun > /dev/null; then
  expect "train on 2 ranks, ZeRO-3" 0 "trained 3 steps" $MPI -np 2 "$B" $RUN --out-dir "$W/o2"
  expect "disagreeing ranks refused" 2 "ranks disagree on train.lr" \
    $MPI -np 1 "$B" $RUN --out-dir "$W/o3" --lr 1e-3 : -np 1 "$B" $RUN --out-dir "$W/o3" --lr 2e-3
fi
for f in "$W"/log*; do
  grep -qE "runtime error|ERROR: (Address|Leak|Undefined)Sanitizer|SUMMARY: " "$f" && no "sanitizer report in $(basename "$f")" "$f"
done
echo "total $((SECONDS - t0)) s"
finish
