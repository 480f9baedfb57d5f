/* PipeDream's partition (src/perf/partition.c): the dynamic program
 * against brute force over every partition of small layer vectors
 * (every cut set, every replica count), a transfer term that moves the
 * cut, replication chosen when one layer dominates, the cuts a graph
 * allows, and the engine's `--partition balanced` (pipe_partition)
 * cutting by the same rule. */
#include "dtrain/nn.h"
#include "perf/partition.h"
#include "strategy/pipe/pipe.h"
#include "dtrain/train.h"
#include "test.h"

/* The least cost of part with replicas given to stages k.. from `left`
 * machines (every one used, at least one a stage). */
static double best_replicas(const partition_problem_t *p, partition_t *part, int k, int left) {
  if (k == part->stages - 1) {
    part->replicas[k] = left;
    return partition_cost(p, part);
  }
  double best = -1;
  for (int r = 1; r <= left - (part->stages - 1 - k); r++) {
    part->replicas[k] = r;
    double c = best_replicas(p, part, k + 1, left - r);
    if (best < 0 || c < best) best = c;
  }
  return best;
}

/* The least cost over every partition of p into stages whose replicas sum
 * to M (stages of one machine each and exactly M of them when one_each). */
static double brute(const partition_problem_t *p, int M, int one_each) {
  int n = p->nlayers;
  double best = -1;
  for (unsigned mask = 0; mask < 1u << (n - 1); mask++) { /* bit i - 1: a stage starts at layer i */
    partition_t part = {0};
    int ok = 1;
    for (int i = 1; i < n; i++)
      if (mask >> (i - 1) & 1) {
        if (p->can_start && !p->can_start[i]) ok = 0;
        part.first[++part.stages] = i;
      }
    part.first[++part.stages] = n;
    if (!ok || part.stages > M || (one_each && part.stages != M)) continue;
    double c = best_replicas(p, &part, 0, M);
    if (best < 0 || c < best) best = c;
  }
  return best;
}

static unsigned lcg(unsigned *s) { return *s = *s * 1103515245u + 12345u, (*s >> 16) & 0x7fff; }

/* Random small vectors: the DP's cost equals brute force's, and the
 * partition it returns costs what it says. */
static void test_dp_equals_brute_force(void) {
  unsigned seed = 7;
  for (int trial = 0; trial < 200; trial++) {
    int n = 1 + (int)(lcg(&seed) % 7), M = 1 + (int)(lcg(&seed) % 4);
    double sec[8], act[8], par[8];
    int can[8];
    for (int i = 0; i < n; i++) {
      sec[i] = 1e-3 * (1 + lcg(&seed) % 50);
      act[i] = 1e3 * (lcg(&seed) % 40);
      par[i] = 1e4 * (lcg(&seed) % 30);
      can[i] = i == 0 || lcg(&seed) % 4 != 0;
    }
    partition_problem_t p = {n, sec, act, par, trial % 3 ? can : NULL, trial % 2 ? 1e6 : 0};
    partition_t got;
    if (partition_pipedream(&p, M, &got) != 0) {
      CHECK(0);
      continue;
    }
    double b = brute(&p, M, 0);
    CHECK_NEAR(got.slowest, b, 1e-12);
    CHECK_NEAR(partition_cost(&p, &got), got.slowest, 1e-12);
    int machines = 0;
    for (int k = 0; k < got.stages; k++) machines += got.replicas[k];
    CHECK(machines == M && got.first[0] == 0 && got.first[got.stages] == n);
    int stages_possible = 1;
    for (int i = 1; i < n; i++) stages_possible += !p.can_start || can[i];
    if (M > stages_possible) continue;
    partition_t one;
    CHECK_OK(partition_stages(&p, M, &one));
    CHECK(one.stages == M);
    CHECK_NEAR(one.slowest, brute(&p, M, 1), 1e-12);
  }
}

/* Layers 1, 1, 1, 1 s; layers 0 and 1 put out 4 MB, layer 2 0.3 MB.
 * Without a link cost the two stages cut in the middle (2 | 2 s); on a
 * 2 MB/s link the first two cuts' transfers (2 x 4 MB / 2 MB/s = 4 s) are
 * dearer than a stage of 3 layers, so the cut moves to before layer 3
 * (3 | 1 s, transfer 0.3 s). */
static void test_transfer_term_moves_the_cut(void) {
  double sec[4] = {1, 1, 1, 1}, act[4] = {4e6, 4e6, 3e5, 1e5};
  partition_problem_t p = {4, sec, act, NULL, NULL, 0};
  partition_t part;
  CHECK_OK(partition_stages(&p, 2, &part));
  CHECK(part.first[1] == 2);
  CHECK_NEAR(part.slowest, 2, 1e-12);
  p.bandwidth = 2e6;
  CHECK_OK(partition_stages(&p, 2, &part));
  CHECK(part.first[1] == 3);
  CHECK_NEAR(part.slowest, 3, 1e-12);
  CHECK_NEAR(partition_transfer_sec(&p, 2), 4, 1e-12);
}

/* One layer of 8 s among three of 1 s, 4 machines, no parameters to
 * synchronise: a pipeline of one machine a stage is held to 8 s by the
 * heavy layer, so the DP replicates its stage (8 / m s) instead. With a
 * large parameter count on a slow link replication's synchronisation
 * costs more than it saves and the DP gives it one machine. */
static void test_replication_when_one_layer_dominates(void) {
  double sec[4] = {1, 8, 1, 1}, par[4] = {0, 0, 0, 0};
  partition_problem_t p = {4, sec, NULL, par, NULL, 1e6};
  partition_t part;
  CHECK_OK(partition_pipedream(&p, 4, &part));
  int heavy = -1;
  for (int k = 0; k < part.stages; k++)
    if (part.first[k] <= 1 && 1 < part.first[k + 1]) heavy = k;
  CHECK(heavy >= 0 && part.replicas[heavy] > 1);
  CHECK(part.slowest < 8);
  CHECK_NEAR(part.slowest, brute(&p, 4, 0), 1e-12);
  partition_t flat;
  CHECK_OK(partition_stages(&p, 4, &flat));
  CHECK_NEAR(flat.slowest, 8, 1e-12);
  par[1] = 1e9; /* 2 (m-1)/m 1 GB at 1 MB/s: far past 8 s for any m > 1 */
  CHECK_OK(partition_pipedream(&p, 4, &part));
  for (int k = 0; k < part.stages; k++)
    if (part.first[k] <= 1 && 1 < part.first[k + 1]) CHECK(part.replicas[k] == 1);
  CHECK_NEAR(part.slowest, 8, 1e-12);
}

static void test_refusals(void) {
  double sec[3] = {1, 1, 1};
  int can[3] = {1, 0, 0};
  partition_problem_t p = {3, sec, NULL, NULL, can, 0};
  partition_t part;
  CHECK_FAILS_WITH(partition_stages(&p, 2, &part), "cannot be cut into 2 stages");
  CHECK_FAILS_WITH(partition_pipedream(&p, 0, &part), "1 to 64 machines");
  CHECK_OK(partition_pipedream(&p, 2, &part)); /* one stage, replicated */
  CHECK(part.stages == 1 && part.replicas[0] == 2);
}

/* The engine's --partition balanced (pipe_partition with measured times)
 * cuts where partition_stages does, on a real model's valid cuts. */
static void test_engine_balanced_agrees(void) {
  model_spec_t spec;
  const char *text = "conv2d filters=4 kernel=3 pad=1\nrelu\nflatten\ndense units=16\nrelu\ndense units=10\n";
  CHECK_OK(model_spec_parse(text, "t", &spec));
  model_t *m = NULL;
  CHECK_OK(model_build(&spec, (shape_t){1, 8, 8}, 10, 8, &m));
  model_spec_free(&spec);
  if (!m) return;
  double sec[6] = {5, 1, 1, 4, 1, 2};
  train_config_t cfg;
  char *argv[] = {"train", "--pp", "3", "--workers", "3", NULL};
  CHECK_OK(train_options_parse(5, argv, &cfg));
  int first[4];
  CHECK_OK(pipe_partition(&cfg, m, sec, first));
  int cuts[6], can[6] = {1};
  for (int k = 0, nc = model_stage_cuts(m, cuts); k < nc; k++) can[cuts[k]] = 1;
  partition_problem_t p = {m->nlayers, sec, NULL, NULL, can, 0};
  partition_t part;
  CHECK_OK(partition_stages(&p, 3, &part));
  for (int k = 0; k < 3; k++) CHECK(first[k] == part.first[k]);
  CHECK(first[3] == m->nlayers);
  CHECK_NEAR(part.slowest, 5, 1e-12); /* the convolution alone */
  model_free(m);
}

int main(void) {
  RUN(test_dp_equals_brute_force);
  RUN(test_transfer_term_moves_the_cut);
  RUN(test_replication_when_one_layer_dominates);
  RUN(test_refusals);
  RUN(test_engine_balanced_agrees);
  TEST_MAIN_END();
}
