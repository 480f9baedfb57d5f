/* Load-balanced synchronous steps (balance.c): a step's samples are split
 * whole and contiguous, evenly until measured, in proportion to measured
 * speed within the bounds, evenly in a short last step; and the same
 * observations give every rank the same split. */
#include <math.h>
#include <string.h>

#include "strategy/balance.h"
#include "test.h"

/* Every rank's slice of a step of `n` samples: contiguous, in rank order,
 * covering [0, n). Returns the counts in `count`. */
static int split_is_a_partition(balance_t *b, size_t n, int *count) {
  size_t next = 0;
  int ok = 1;
  for (int r = 0; r < b->nranks; r++) {
    size_t off, len;
    balance_split(b, n, r, &off, &len);
    ok &= off == next;
    next = off + len;
    count[r] = (int)len;
  }
  return ok && next == n;
}

static void test_even_until_measured(void) {
  balance_t *b;
  CHECK_OK(balance_new(3, 64, 128, &b));
  int c[3];
  CHECK(split_is_a_partition(b, 192, c));
  CHECK(c[0] == 64 && c[1] == 64 && c[2] == 64);
  CHECK(split_is_a_partition(b, 100, c));
  CHECK(c[0] + c[1] + c[2] == 100 && c[0] >= 33 && c[0] <= 34 && c[2] >= 33 && c[2] <= 34);
  balance_free(b);
}

/* Seconds each of two ranks takes for this step's split at true speeds v[r]. */
static void time_step(const balance_t *b, const double v[2], float sec[2]) {
  for (int r = 0; r < 2; r++) sec[r] = (float)(b->count[r] / v[r]);
}

static void test_split_follows_speed(void) {
  balance_t *b;
  CHECK_OK(balance_new(2, 64, 128, &b));
  int c[2];
  float sec[2];
  double v[2] = {64000, 64000 / 3.0}; /* rank 1 three times slower per sample */
  CHECK(split_is_a_partition(b, 128, c)); /* 64 + 64 until measured */
  time_step(b, v, sec);
  balance_observe(b, sec);
  CHECK(split_is_a_partition(b, 128, c));
  CHECK(c[0] == 96 && c[1] == 32);
  time_step(b, v, sec); /* the same speeds: the split stays */
  balance_observe(b, sec);
  CHECK(split_is_a_partition(b, 128, c));
  CHECK(c[0] == 96 && c[1] == 32);
  /* rank 0 slows to half speed for good: its share shrinks step by step,
   * to the new ratio 3:2 */
  v[0] = 32000;
  time_step(b, v, sec);
  balance_observe(b, sec);
  CHECK(split_is_a_partition(b, 128, c));
  CHECK(c[0] < 96 && c[0] > 80);
  for (int i = 0; i < 40; i++) {
    time_step(b, v, sec);
    balance_observe(b, sec);
    CHECK(split_is_a_partition(b, 128, c));
  }
  CHECK(c[0] >= 76 && c[0] <= 78);
  /* one step ten times slower on rank 1 (the host ran something else):
   * the split moves by a few samples only, and comes back */
  time_step(b, v, sec);
  sec[1] *= 10;
  balance_observe(b, sec);
  CHECK(split_is_a_partition(b, 128, c));
  CHECK(c[0] >= 76 && c[0] <= 82);
  for (int i = 0; i < 40; i++) {
    time_step(b, v, sec);
    balance_observe(b, sec);
    CHECK(split_is_a_partition(b, 128, c));
  }
  CHECK(c[0] >= 76 && c[0] <= 78);
  balance_free(b);
}

static void test_bounds(void) {
  balance_t *b;
  CHECK_OK(balance_new(2, 64, 128, &b)); /* shares within [64/8, 2*64] */
  int c[2];
  CHECK(split_is_a_partition(b, 128, c));
  float sec[2] = {0.001f, 1.0f}; /* rank 1 ~1000x slower (the first measurement counts whole) */
  balance_observe(b, sec);
  CHECK(split_is_a_partition(b, 128, c));
  CHECK(c[1] == 8 && c[0] == 120);
  /* a short last step with fewer samples than the lower bounds: even */
  CHECK(split_is_a_partition(b, 9, c));
  CHECK(c[0] + c[1] == 9 && (c[0] == 4 || c[0] == 5));
  /* the upper bound holds with many ranks and one fast one */
  balance_t *m;
  CHECK_OK(balance_new(4, 8, 16, &m));
  int d[4];
  CHECK(split_is_a_partition(m, 32, d));
  float t[4] = {0.0001f, 1, 1, 1};
  balance_observe(m, t);
  CHECK(split_is_a_partition(m, 32, d));
  CHECK(d[0] == 16 && d[1] + d[2] + d[3] == 16 && d[1] >= 1 && d[3] >= 1);
  balance_free(m);
  balance_free(b);
}

/* Two ranks' balancers, made alike: *a and *b. */
static int balance_pair_new(int nranks, int batch, int max_share, balance_t **a, balance_t **b) {
  int rc_a = balance_new(nranks, batch, max_share, a);
  int rc_b = balance_new(nranks, batch, max_share, b);
  return rc_a || rc_b ? -1 : 0;
}

static void balance_pair_free(balance_t *a, balance_t *b) {
  balance_free(a);
  balance_free(b);
}

/* Two ranks' balancers fed the same times agree on every split. */
static void test_same_inputs_same_split(void) {
  balance_t *a, *b;
  CHECK_OK(balance_pair_new(5, 32, 64, &a, &b));
  rng_t rng;
  rng_seed(&rng, 7);
  int same = 1, ca[5], cb[5];
  for (int step = 0; step < 200; step++) {
    size_t n = step % 50 == 49 ? 37 : 160;
    same &= split_is_a_partition(a, n, ca) && split_is_a_partition(b, n, cb);
    same &= !memcmp(ca, cb, sizeof ca);
    float sec[5];
    for (int r = 0; r < 5; r++) sec[r] = ca[r] * (0.5f + (float)rng_uniform(&rng)) * 1e-5f;
    balance_observe(a, sec);
    balance_observe(b, sec);
  }
  CHECK(same);
  char json[128];
  balance_json(a, 200, json, sizeof json);
  CHECK(!strncmp(json, "\"batch_per_rank\":[", 18) && json[strlen(json) - 1] == ']');
  balance_pair_free(a, b);
}

/* A checkpoint's speeds give a fresh balancer the same split; a NaN or a
 * negative speed in the file is refused and changes nothing. */
static void test_speeds_round_trip(void) {
  balance_t *a, *b;
  CHECK_OK(balance_pair_new(2, 64, 128, &a, &b));
  int ca[2], cb[2];
  float sec[2] = {0.001f, 0.003f}, saved[2];
  split_is_a_partition(a, 128, ca);
  balance_observe(a, sec);
  balance_get_speeds(a, saved);
  float bad[2] = {saved[0], NAN}, neg[2] = {-1, saved[1]};
  CHECK(balance_set_speeds(b, bad, "ckpt") == -1);
  CHECK(balance_set_speeds(b, neg, "ckpt") == -1);
  CHECK(split_is_a_partition(b, 128, cb) && cb[0] == 64 && cb[1] == 64); /* still unmeasured */
  CHECK_OK(balance_set_speeds(b, saved, "ckpt"));
  CHECK(split_is_a_partition(a, 128, ca) && split_is_a_partition(b, 128, cb));
  CHECK(ca[0] == 96 && cb[0] == 96 && ca[1] == 32 && cb[1] == 32);
  balance_pair_free(a, b);
}

int main(void) {
  RUN(test_even_until_measured);
  RUN(test_split_follows_speed);
  RUN(test_bounds);
  RUN(test_same_inputs_same_split);
  RUN(test_speeds_round_trip);
  TEST_MAIN_END();
}
