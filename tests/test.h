/* A minimal test harness: each test is a function; RUN prints one
 * "PASS name" or "FAIL name" line, which tests/run.sh counts.
 *
 * CHECK* count a failure in the running test and go on. RCHECK* are for
 * functions that return 0 or -1, such as the rank functions that
 * comm_local_run runs: a failed check returns -1 with the check in the
 * error line, and the test checks the runner's result with CHECK_OK. */
#ifndef DTRAIN_TEST_H
#define DTRAIN_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/comm.h"
#include "dtrain/core.h"

static int test_failures_in_current;
static int tests_passed, tests_failed;

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      test_failures_in_current++;                                                \
    }                                                                            \
  } while (0)

/* expr returns 0 on success; on failure print the library's error line. */
#define CHECK_OK(expr)                                                              \
  do {                                                                              \
    if ((expr) != 0) {                                                              \
      fprintf(stderr, "  %s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,        \
              dt_errmsg());                                                         \
      test_failures_in_current++;                                                   \
    }                                                                               \
  } while (0)

/* expr must fail, and its error line must contain `needle`. */
#define CHECK_FAILS_WITH(expr, needle)                                              \
  do {                                                                              \
    dt_error_clear();                                                               \
    if ((expr) == 0) {                                                              \
      fprintf(stderr, "  %s:%d: %s succeeded, expected failure\n", __FILE__,        \
              __LINE__, #expr);                                                     \
      test_failures_in_current++;                                                   \
    } else if (!strstr(dt_errmsg(), (needle))) {                                    \
      fprintf(stderr, "  %s:%d: error '%s' does not mention '%s'\n", __FILE__,      \
              __LINE__, dt_errmsg(), (needle));                                     \
      test_failures_in_current++;                                                   \
    }                                                                               \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                       \
  do {                                                                              \
    double a_ = (a), b_ = (b);                                                      \
    if (!(fabs(a_ - b_) <= (tol))) {                                                \
      fprintf(stderr, "  %s:%d: %s = %.9g, expected %.9g (tol %g)\n", __FILE__,     \
              __LINE__, #a, a_, b_, (double)(tol));                                 \
      test_failures_in_current++;                                                   \
    }                                                                               \
  } while (0)

#define RCHECK(cond)                                                              \
  do {                                                                            \
    if (!(cond)) return dt_error("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
  } while (0)

#define RCHECK_OK(expr)                                                           \
  do {                                                                            \
    if ((expr) != 0) return dt_error_prefix("%s:%d: %s: ", __FILE__, __LINE__, #expr); \
  } while (0)

/* expr must fail (return non-zero) with an error line containing needle. */
#define RCHECK_FAILS_WITH(expr, needle)                                           \
  do {                                                                            \
    dt_error_clear();                                                             \
    if ((expr) == 0) return dt_error("%s:%d: %s succeeded, expected failure", __FILE__, __LINE__, #expr); \
    if (!strstr(dt_errmsg(), (needle)))                                           \
      return dt_error("%s:%d: error '%s' does not mention '%s'", __FILE__, __LINE__, dt_errmsg(), (needle)); \
  } while (0)

/* ---- checks on any transport ---------------------------------------------
 * Rank functions shared by test_comm (the local transport) and
 * mpi_coll_check (mpi). */

/* Rank 0 sends n ints on tag 1 and n on tag 2, interleaved (n <= 100);
 * rank 1 takes the tag-2 ones first, then the tag-1 ones: each tag's
 * messages arrive in order, and a receive on tag 2 skips the earlier tag-1
 * messages. Any other rank has nothing to do. */
static inline int check_order_by_tag(comm_t *c, int n) {
  comm_req_t *r[200];
  int v[200];
  RCHECK(n <= 100);
  if (comm_size(c) < 2 || comm_rank(c) > 1) return 0;
  if (comm_rank(c) == 0) {
    for (int i = 0; i < n; i++) {
      v[i] = i, v[n + i] = 1000 + i;
      RCHECK_OK(comm_isend(c, 1, 1, &v[i], sizeof(int), &r[i]));
      RCHECK_OK(comm_isend(c, 1, 2, &v[n + i], sizeof(int), &r[n + i]));
    }
    RCHECK_OK(comm_waitall(c, 2 * n, r));
    return 0;
  }
  for (int i = 0; i < n; i++) {
    int x = -1;
    RCHECK_OK(comm_recv(c, 0, 2, &x, sizeof x));
    RCHECK(x == 1000 + i);
  }
  for (int i = 0; i < n; i++) {
    int x = -1;
    RCHECK_OK(comm_recv(c, 0, 1, &x, sizeof x));
    RCHECK(x == i);
  }
  return 0;
}

static inline void test_run(const char *name, void (*fn)(void)) {
  test_failures_in_current = 0;
  dt_error_clear();
  fn();
  if (test_failures_in_current) {
    printf("FAIL %s\n", name);
    tests_failed++;
  } else {
    printf("PASS %s\n", name);
    tests_passed++;
  }
  fflush(stdout);
}

#define RUN(fn) test_run(#fn, fn)
#define TEST_MAIN_END() return tests_failed ? 1 : 0

#endif
