#!/usr/bin/env bash
# tests/lib/run_test.sh CMD... — how ctest runs every test (tests/CMakeLists.txt).
# A test that skips (exit 77: mpirun, torch, node or a command missing) is a
# skip for ctest, except under SL_REQUIRE_ALL=1 (CI, .ci/run): then it fails,
# so a check never vanishes because a dependency is missing. Tests that need
# hardware no CI machine has (label gpu) set SL_SKIP_OK=1 and may still skip.
# SL_TEST_THREADS=N runs every test with OMP_NUM_THREADS=N instead of the 2
# tests/CMakeLists.txt sets (the noise matrix in docs/CONTRIBUTING.md).
[ -n "${SL_TEST_THREADS:-}" ] && export OMP_NUM_THREADS="$SL_TEST_THREADS"
"$@"
rc=$?
if [ "$rc" -eq 77 ] && [ "${SL_REQUIRE_ALL:-0}" = 1 ] && [ "${SL_SKIP_OK:-0}" != 1 ]; then
  echo "FAIL: the test skipped (exit 77) under SL_REQUIRE_ALL=1: a dependency tools/setup installs is missing"
  exit 1
fi
exit "$rc"
