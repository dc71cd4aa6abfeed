/* tests/lib/check.h — the pass/fail counters of the C tests: CHECK(cond,
 * printf-args) counts a pass or prints FAIL with the location and the last
 * error message (base/base.h); a test ends with CHECK_SUMMARY(), which prints
 * "N passed, M failed" and gives the exit status. */
#ifndef SL_TEST_CHECK_H
#define SL_TEST_CHECK_H

#include <stdio.h>

#include "base/base.h"

static int g_pass, g_fail;
#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    if (cond) {                                                                                                        \
      g_pass++;                                                                                                        \
    } else {                                                                                                           \
      g_fail++;                                                                                                        \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                      \
      printf(__VA_ARGS__);                                                                                             \
      printf("  [last error: %s]\n", sl_errmsg());                                                                     \
    }                                                                                                                  \
  } while (0)
#define CHECK_SUMMARY() (printf("%d passed, %d failed\n", g_pass, g_fail), g_fail ? 1 : 0)

#endif /* SL_TEST_CHECK_H */
