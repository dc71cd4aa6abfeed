/* tests/lib/rank_check.h — the pass/fail counter of the multi-rank C tests:
 * CHECK(cond, fmt, ...) counts a pass, or a failure printed with the rank
 * (the including file defines int R, npass, nfail). */
#ifndef SL_TESTS_RANK_CHECK_H
#define SL_TESTS_RANK_CHECK_H
#include <stdio.h>

#define CHECK(cond, ...)                                                                                               \
  do {                                                                                                                 \
    if (cond) {                                                                                                        \
      npass++;                                                                                                         \
    } else {                                                                                                           \
      nfail++;                                                                                                         \
      fprintf(stderr, "[rank %d] FAIL %s:%d: ", R, __FILE__, __LINE__);                                                \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fputc('\n', stderr);                                                                                             \
    }                                                                                                                  \
  } while (0)

#endif
