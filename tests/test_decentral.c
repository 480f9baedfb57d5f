/* Decentralized optimization: each method's merge rule checked against the
 * formula written out here, with lr = 0 and a distinct starting point per
 * rank (start_r = init + s_r u, s_r = 0.05 (r+1), u_i = sin(0.37 i)), so
 * that only the merges move the replicas; local SGD with tau = 1 against
 * synchronous data parallelism; gossip's conservation of mass; selection,
 * rank counts and the stability range of the elastic coefficients. Ranks
 * are threads (comm local) on a small synthetic task and a small model. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "strategy/decentral/decentral.h"
#include "strategy/dp/dp.h"
#include "dtrain/train.h"
#include "dtrain/safetensors.h"
#include "test.h"

#define MAXR 8

typedef struct {
  train_config_t cfg;
  dataset_t train, test;
  strategy_fn strategy;
  int perturb;
  float *start[MAXR], *final[MAXR];
  uint64_t sent[MAXR], received[MAXR]; /* each rank's training bytes (the driver's count) */
  size_t nparams;
  int ntensors;
  tensor_info_t tensors[16];
} run_t;

static char model_path[96], tmp_dir[64];

static double scale_of(int rank) { return 0.05 * (rank + 1); }
static float direction(size_t i) { return sinf(0.37f * (float)i); }

static float *copy_params(const model_t *m) {
  float *p = malloc(m->nparams * sizeof *p);
  if (p) memcpy(p, m->params, m->nparams * sizeof *p);
  return p;
}

static int rank_fn(comm_t *c, void *arg) {
  run_t *r = arg;
  int me = comm_rank(c);
  worker_t w;
  int rc = worker_init(&w, &r->cfg, c, &r->train, &r->test);
  if (rc == 0 && r->perturb)
    for (size_t i = 0; i < w.model->nparams; i++)
      w.model->params[i] += (float)scale_of(me) * direction(i);
  if (rc == 0) {
    r->start[me] = copy_params(w.model);
    if (me == 0) {
      r->nparams = w.model->nparams;
      r->ntensors = w.model->ntensors < 16 ? w.model->ntensors : 16;
      memcpy(r->tensors, w.model->tensors, (size_t)r->ntensors * sizeof *r->tensors);
    }
    rc = r->strategy(&w);
  }
  if (rc == 0) r->final[me] = copy_params(w.model);
  r->sent[me] = w.run_bytes_sent;
  r->received[me] = w.run_bytes_received;
  worker_free(&w);
  return rc;
}

/* A run: the method, how long, and from which starting points. */
typedef struct {
  strategy_fn strategy;
  exchange_t exchange;
  schedule_t schedule;
  int perturb;       /* distinct starting points */
  int workers;       /* 0: 4 */
  int epochs;        /* 0: 1 */
  int64_t max_steps; /* 0: no limit */
} run_spec_t;

/* 4 workers, batch 8, 16 steps an epoch, plain SGD at lr 0 unless changed. */
static void setup(run_t *r, run_spec_t spec) {
  memset(r, 0, sizeof *r);
  train_config_default(&r->cfg);
  r->cfg.exchange = spec.exchange;
  r->cfg.schedule = spec.schedule;
  r->perturb = spec.perturb;
  r->cfg.workers = spec.workers ? spec.workers : 4;
  if (spec.epochs) r->cfg.epochs = spec.epochs;
  r->cfg.max_steps = spec.max_steps;
  snprintf(r->cfg.model, sizeof r->cfg.model, "%s", model_path);
  r->cfg.batch = 8;
  r->cfg.lr = 0;
  r->cfg.progress = 0;
  r->cfg.seed = 7;
  r->cfg.optimization = OPTIMIZATION_DECENTRAL;
  r->strategy = spec.strategy;
  CHECK_OK(dataset_synthetic_split(512, 1, 8, 8, 4, 7, 1, &r->train));
  CHECK_OK(dataset_synthetic_split(128, 1, 8, 8, 4, 7, 0, &r->test));
}

/* The epoch lines go to stdout, where only PASS/FAIL lines belong. */
static int run(run_t *r) {
  CHECK_OK(train_config_check(&r->cfg));
  fflush(stdout);
  int saved = dup(1), null = open("/dev/null", O_WRONLY);
  if (null >= 0) dup2(null, 1);
  int rc = comm_local_run(strategy_total_ranks(&r->cfg), NULL, rank_fn, r);
  fflush(stdout);
  if (saved >= 0) dup2(saved, 1), close(saved);
  if (null >= 0) close(null);
  return rc;
}

static void teardown(run_t *r) {
  for (int i = 0; i < MAXR; i++) free(r->start[i]), free(r->final[i]);
  dataset_free(&r->train);
  dataset_free(&r->test);
}

/* The starting point of rank `rank`, element i, from rank 0's start. */
static double start_value(const run_t *r, int rank, size_t i) {
  return (double)r->start[0][i] - scale_of(0) * direction(i) + scale_of(rank) * direction(i);
}

static double mean_start(const run_t *r, int nworkers, size_t i) {
  double s = 0;
  for (int k = 0; k < nworkers; k++) s += start_value(r, k, i);
  return s / nworkers;
}

/* max over i of |got[i] - want(i)| */
#define MAX_ERR(err, n, expr)                           \
  do {                                                  \
    err = 0;                                            \
    for (size_t i = 0; i < (n); i++) {                  \
      double e_ = fabs(expr);                           \
      if (e_ > err) err = e_;                           \
    }                                                   \
  } while (0)

/* Every replica k in [from, to) is within tol of `want`, an expression of k
 * and i: max over i of |final[k][i] - want| < tol. A rank without a
 * replica fails. */
#define CHECK_REPLICAS(r, from, to, want, tol)                                    \
  do {                                                                            \
    for (int k = (from); k < (to); k++) {                                         \
      double err_ = 1;                                                            \
      if ((r)->final[k]) MAX_ERR(err_, (r)->nparams, (r)->final[k][i] - (want));  \
      CHECK(err_ < (tol));                                                        \
    }                                                                             \
  } while (0)

/* Reads the checkpoint's model tensors into arena order. */
static float *read_checkpoint(const run_t *r, const char *path) {
  safetensors_t st;
  float *out = calloc(r->nparams, sizeof *out);
  if (!out || safetensors_read(path, &st) != 0) {
    free(out);
    return NULL;
  }
  for (int t = 0; t < r->ntensors; t++) {
    const st_tensor_t *x = safetensors_find(&st, r->tensors[t].name);
    if (x && x->len == r->tensors[t].len) memcpy(out + r->tensors[t].off, x->data, x->len * 4);
  }
  safetensors_free(&st);
  return out;
}

/* ---- local SGD / model averaging -------------------------------------------- */

/* With tau = 1, plain SGD and per-worker mean gradients, averaging the
 * replicas after each step is averaging the gradients: the same weights
 * as data parallelism up to float rounding (measured: ~1e-7). Also over a
 * whole epoch of 3 workers whose last step is short (500 = 20 x 24 + 20). */
static void check_equals_data_parallel(int workers, size_t ntrain, int64_t max_steps) {
  run_t dp, ls;
  setup(&dp, (run_spec_t){strategy_data_parallel, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC, .workers = workers,
                          .max_steps = max_steps});
  setup(&ls, (run_spec_t){strategy_local_sgd, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC, .workers = workers,
                          .max_steps = max_steps});
  run_t *both[2] = {&dp, &ls};
  for (int k = 0; k < 2; k++) {
    run_t *r = both[k];
    r->cfg.lr = 0.1;
    dataset_free(&r->train);
    CHECK_OK(dataset_synthetic_split(ntrain, 1, 8, 8, 4, 7, 1, &r->train));
  }
  dp.cfg.optimization = OPTIMIZATION_CENTRAL;
  ls.cfg.algo = ALLREDUCE_RING;
  ls.cfg.decentral.tau = 1;
  CHECK_OK(run(&dp));
  CHECK_OK(run(&ls));
  if (dp.final[0] && ls.final[0]) {
    double err;
    MAX_ERR(err, dp.nparams, (double)dp.final[0][i] - ls.final[0][i]);
    CHECK(err <= 2e-6);
    for (int k = 1; k < workers; k++)
      CHECK(ls.final[k] && !memcmp(ls.final[k], ls.final[0], ls.nparams * sizeof(float)));
    fprintf(stderr, "  local SGD tau=1 vs data parallel, %d workers: max |diff| %.3g\n", workers, err);
  }
  teardown(&dp);
  teardown(&ls);
}

static void test_local_sgd_tau1_equals_data_parallel(void) { check_equals_data_parallel(4, 512, 20); }
static void test_local_sgd_tau1_short_last_step(void) { check_equals_data_parallel(3, 500, 0); }

/* lr = 0, tau = 3: after 3 steps every replica is the mean of the starts. */
static void test_local_sgd_averages_distinct_starts(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_local_sgd, EXCHANGE_MASTER, SCHEDULE_SYNC, .perturb = 1, .max_steps = 3});
  r.cfg.decentral.tau = 3;
  CHECK_OK(run(&r));
  CHECK_REPLICAS(&r, 0, 4, mean_start(&r, 4, i), 1e-6);
  teardown(&r);
}

/* ---- EASGD -------------------------------------------------------------------- */

/* One synchronous round (lr = 0, tau = 1, one step), alpha 0.2, beta 0.6:
 *   w_i' = w_i - alpha (w_i - c),   c' = c + (beta/p) sum_i (w_i - c)
 * The master is rank 4 and starts from start_4. */
static void test_easgd_sync_elastic_rule(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_easgd, EXCHANGE_MASTER, SCHEDULE_SYNC, .perturb = 1, .max_steps = 1});
  r.cfg.decentral.alpha = 0.2;
  r.cfg.decentral.beta = 0.6;
  CHECK(strategy_total_ranks(&r.cfg) == 5);
  CHECK_OK(run(&r));
  CHECK_REPLICAS(&r, 0, 4, start_value(&r, k, i) - 0.2 * (start_value(&r, k, i) - start_value(&r, 4, i)), 1e-6);
  CHECK_REPLICAS(&r, 4, 5, start_value(&r, 4, i) + 0.15 * (4 * mean_start(&r, 4, i) - 4 * start_value(&r, 4, i)),
                 1e-6);
  teardown(&r);
}

/* DeepSpark's moving-rate decay G^min(k/S, L), by hand: G 0.5, S 3, L 2. */
static void test_elastic_decay(void) {
  train_config_t c;
  train_config_default(&c);
  CHECK(elastic_decay(&c, 1000) == 1); /* off */
  c.decentral.alpha_decay = 0.5;
  c.decentral.alpha_decay_every = 3;
  c.decentral.alpha_decay_limit = 2;
  const double want[10] = {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25};
  for (int k = 0; k < 10; k++) CHECK(elastic_decay(&c, k) == want[k]);
  CHECK(elastic_decay(&c, 1000000) == 0.25);
  c.decentral.alpha_decay_limit = 0; /* no limit */
  CHECK(elastic_decay(&c, 9) == 0.125);
}

/* Two synchronous rounds with --alpha-decay 0.5,1 (lr = 0, tau = 1): the
 * first with alpha 0.2, beta 0.6, the second with 0.1 and 0.3, written
 * out per element from the starts. */
static double easgd_two_rounds(const run_t *r, int rank, size_t i) {
  double w[4], c = start_value(r, 4, i), alpha = 0.2, beta = 0.6;
  for (int k = 0; k < 4; k++) w[k] = start_value(r, k, i);
  for (int round = 0; round < 2; round++, alpha /= 2, beta /= 2) {
    double pull = 0;
    for (int k = 0; k < 4; k++) pull += beta / 4 * (w[k] - c), w[k] -= alpha * (w[k] - c);
    c += pull;
  }
  return rank == 4 ? c : w[rank];
}

static void test_easgd_sync_alpha_decay(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_easgd, EXCHANGE_MASTER, SCHEDULE_SYNC, .perturb = 1, .max_steps = 2});
  r.cfg.decentral.alpha = 0.2;
  r.cfg.decentral.beta = 0.6;
  r.cfg.decentral.alpha_decay = 0.5;
  r.cfg.decentral.alpha_decay_every = 1;
  CHECK_OK(run(&r));
  CHECK_REPLICAS(&r, 0, 5, easgd_two_rounds(&r, k, i), 1e-6);
  teardown(&r);
}

/* The same decay on the asynchronous path, where the master takes the
 * factor from its count of the requesting worker's exchanges: one worker
 * (rank 0, master rank 1), two exchanges, p = 1. */
static double easgd_async_two_exchanges(const run_t *r, int rank, size_t i) {
  double w = start_value(r, 0, i), c = start_value(r, 1, i), alpha = 0.2, beta = 0.6;
  for (int x = 0; x < 2; x++, alpha /= 2, beta /= 2) {
    double d = w - c;
    c += beta * d, w -= alpha * d;
  }
  return rank == 1 ? c : w;
}

static void test_easgd_async_alpha_decay(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_easgd, EXCHANGE_MASTER, SCHEDULE_ASYNC, .perturb = 1, .workers = 1,
                         .max_steps = 2});
  r.cfg.decentral.alpha = 0.2;
  r.cfg.decentral.beta = 0.6;
  r.cfg.decentral.alpha_decay = 0.5;
  r.cfg.decentral.alpha_decay_every = 1;
  CHECK_OK(run(&r));
  CHECK_REPLICAS(&r, 0, 2, easgd_async_two_exchanges(&r, k, i), 1e-6);
  teardown(&r);
}

/* Asynchronous, lr = 0: exchanges in any order pull the replicas and the
 * centre together; after 320 steps they agree, and the checkpointed
 * consensus is the centre. */
static void test_easgd_async_replicas_meet_the_centre(void) {
  run_t r;
  char ckpt[128];
  setup(&r, (run_spec_t){strategy_easgd, EXCHANGE_MASTER, SCHEDULE_ASYNC, .perturb = 1, .epochs = 20});
  snprintf(ckpt, sizeof ckpt, "%s/easgd.st", tmp_dir);
  snprintf(r.cfg.checkpoint, sizeof r.cfg.checkpoint, "%s", ckpt);
  CHECK_OK(run(&r));
  float *centre = read_checkpoint(&r, ckpt);
  CHECK(centre != NULL);
  if (centre) CHECK_REPLICAS(&r, 0, 5, centre[i], 1e-4);
  free(centre);
  teardown(&r);
}

/* ---- MPCA-SGD ------------------------------------------------------------------- */

/* The rules by hand: c = (1, 2, -1), c_prev = (0.5, 2, 0), gamma 0.5 gives
 * c^ = (1.25, 2, -1.5); w = (2, 1, 0), rho 0.4 adds 0.4 (w - c^) =
 * (0.3, -0.4, 0.6) to g = (0.1, 0, 0). */
static void test_mpca_rules(void) {
  const float c[3] = {1, 2, -1}, prev[3] = {0.5f, 2, 0}, w[3] = {2, 1, 0};
  float target[3], g[3] = {0.1f, 0, 0};
  mpca_extrapolate(3, c, prev, 0.5f, target);
  CHECK(target[0] == 1.25f && target[1] == 2 && target[2] == -1.5f);
  mpca_penalize(3, w, target, 0.4f, g);
  CHECK_NEAR(g[0], 0.4, 1e-7);
  CHECK_NEAR(g[1], -0.4, 1e-7);
  CHECK_NEAR(g[2], 0.6, 1e-7);
}

/* Per round, what a rank sends (and receives) on the binomial trees
 * rooted at the master: its own S up (not the master) plus its children's
 * down the broadcast; the same count the other way. */
static uint64_t tree_round_models(int rank, int root, int P) {
  int vr = (rank - root + P) % P, children = 0;
  for (int m = 1; m < P && !(vr & m); m <<= 1)
    if (vr + m < P) children++;
  return (uint64_t)(vr != 0) + (uint64_t)children;
}

/* lr = 0, tau 2, 4 steps: the replicas stay at their starts, and the
 * master's centre moves twice, c <- 0.7 c + 0.3 mean(w); every rank's
 * bytes are 2 rounds of the tree's formula (the master, rank 4 of 5, and
 * rank 1 relay 3 and 2 models a round, the other workers 1). */
static void test_mpca_centre_rounds_and_bytes(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_mpca, EXCHANGE_MASTER, SCHEDULE_SOFT, .perturb = 1, .max_steps = 4});
  r.cfg.decentral.tau = 2;
  r.cfg.decentral.beta = 0.3;
  CHECK(strategy_total_ranks(&r.cfg) == 5);
  CHECK_OK(run(&r));
  CHECK_REPLICAS(&r, 0, 4, start_value(&r, k, i), 1e-7);
  CHECK_REPLICAS(&r, 4, 5, 0.49 * start_value(&r, 4, i) + (0.3 * 0.7 + 0.3) * mean_start(&r, 4, i), 1e-6);
  uint64_t S = 4 * (uint64_t)r.nparams, total = 0;
  for (int k = 0; k < 5; k++) {
    uint64_t want = 2 * tree_round_models(k, 4, 5) * S;
    CHECK(r.sent[k] == want && r.received[k] == want);
    total += r.sent[k];
  }
  CHECK(tree_round_models(4, 4, 5) == 3 && tree_round_models(1, 4, 5) == 2 && tree_round_models(0, 4, 5) == 1);
  CHECK(total == 2 * 2 * 4 * S); /* 2 rounds of 2 p S */
  teardown(&r);
}

/* The penalty goes through the worker's step: one plain-SGD step (lr 0.1,
 * tau 1) with rho 0.5 and with rho 0.25, from distinct starts, computes
 * the same gradient, so the replicas differ by -lr (0.5 - 0.25)(w_0 - c_0),
 * c_0 the master's start. */
static void test_mpca_penalty_in_the_step(void) {
  run_t a, b;
  run_t *both[2] = {&a, &b};
  for (int k = 0; k < 2; k++) {
    setup(both[k], (run_spec_t){strategy_mpca, EXCHANGE_MASTER, SCHEDULE_SOFT, .perturb = 1, .max_steps = 1});
    both[k]->cfg.lr = 0.1;
    both[k]->cfg.decentral.rho = k ? 0.25 : 0.5;
    CHECK_OK(run(both[k]));
  }
  for (int k = 0; k < 4; k++) {
    double err = 1;
    if (a.final[k] && b.final[k])
      MAX_ERR(err, a.nparams, (double)a.final[k][i] - b.final[k][i] +
                                  0.1 * 0.25 * (start_value(&a, k, i) - start_value(&a, 4, i)));
    CHECK(err < 2e-6);
  }
  teardown(&a);
  teardown(&b);
}

/* ---- D-PSGD -------------------------------------------------------------------- */

/* One step, lr = 0, W = 0.25: w_i' = 0.5 w_i + 0.25 (w_{i-1} + w_{i+1}). */
static void test_dpsgd_mixing_rule(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_dpsgd, EXCHANGE_NEIGHBORS, SCHEDULE_SYNC, .perturb = 1, .max_steps = 1});
  r.cfg.decentral.neighbor_weight = 0.25;
  CHECK_OK(run(&r));
  /* the left neighbour of k is k + 3 mod 4, the right one k + 1 mod 4 */
  CHECK_REPLICAS(&r, 0, 4,
                 0.5 * start_value(&r, k, i) +
                     0.25 * (start_value(&r, (k + 3) % 4, i) + start_value(&r, (k + 1) % 4, i)),
                 1e-6);
  teardown(&r);
}

/* ---- AD-PSGD ------------------------------------------------------------------ */

/* The two sides of one average, by hand: the passive replica x_j = (3, 6, -1)
 * takes the request s = (1, 2, 1): it replies (3, 6, -1) and becomes
 * (2, 4, 0). The active one sent s and has since taken a step to
 * (1.5, 2, 1); with the reply it becomes x + (reply - s)/2 = (2.5, 4, 0):
 * the average (2, 4, 0) plus its step since s, (0.5, 0, 0). */
static void test_adpsgd_average_rule(void) {
  float xj[3] = {3, 6, -1}, s[3] = {1, 2, 1}, reply[3], xi[3] = {1.5f, 2, 1};
  adpsgd_passive_average(3, xj, s, reply);
  CHECK(reply[0] == 3 && reply[1] == 6 && reply[2] == -1);
  CHECK(xj[0] == 2 && xj[1] == 4 && xj[2] == 0);
  adpsgd_active_average(3, xi, s, reply);
  CHECK(xi[0] == 2.5f && xi[1] == 4 && xi[2] == 0);
}

/* The bipartite graph: odd ranks active, their ring neighbours passive;
 * with an odd p the edge p-1 -- 0 (two passive ranks) is left out. */
static void test_adpsgd_neighbours(void) {
  struct { int rank, p, n, a, b; } rows[] = {
      {1, 4, 2, 0, 2}, {3, 4, 2, 2, 0}, {0, 4, 2, 3, 1}, {2, 4, 2, 1, 3},
      {0, 3, 1, 1, -1}, {1, 3, 2, 0, 2}, {2, 3, 1, 1, -1},
      {0, 2, 1, 1, -1}, {1, 2, 1, 0, -1}, {4, 5, 1, 3, -1}, {0, 5, 1, 1, -1},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int nb[2] = {-1, -1};
    int n = adpsgd_neighbours(rows[i].rank, rows[i].p, nb);
    CHECK(n == rows[i].n && nb[0] == rows[i].a && (n < 2 || nb[1] == rows[i].b));
  }
}

/* Two workers, one step, lr = 0: rank 1 sends its start to rank 0, which
 * serves it at the latest in the epoch's drain; both replicas are then
 * the mean of the two starts. */
static void test_adpsgd_one_exchange(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_adpsgd, EXCHANGE_NEIGHBORS, SCHEDULE_ASYNC, .perturb = 1,
                         .workers = 2, .max_steps = 1});
  CHECK_OK(run(&r));
  CHECK_REPLICAS(&r, 0, 2, 0.5 * (start_value(&r, 0, i) + start_value(&r, 1, i)), 1e-6);
  teardown(&r);
}

/* lr = 0, distinct starts, 4 and 3 workers: every average keeps the sum
 * of the replicas, so the consensus stays the mean of the starts, and the
 * replicas converge to it. */
static void check_adpsgd_converges(int workers) {
  run_t r;
  char ckpt[128];
  setup(&r, (run_spec_t){strategy_adpsgd, EXCHANGE_NEIGHBORS, SCHEDULE_ASYNC, .perturb = 1,
                         .workers = workers, .epochs = 40});
  snprintf(ckpt, sizeof ckpt, "%s/adpsgd%d.st", tmp_dir, workers);
  snprintf(r.cfg.checkpoint, sizeof r.cfg.checkpoint, "%s", ckpt);
  CHECK_OK(run(&r));
  float *consensus = read_checkpoint(&r, ckpt);
  double err = 1, spread0 = 0;
  if (consensus) MAX_ERR(err, r.nparams, consensus[i] - mean_start(&r, workers, i));
  CHECK(err < 1e-5);
  MAX_ERR(spread0, r.nparams, start_value(&r, workers - 1, i) - mean_start(&r, workers, i));
  double worst = 0;
  for (int k = 0; k < workers; k++) {
    double e = 1;
    if (r.final[k]) MAX_ERR(e, r.nparams, r.final[k][i] - mean_start(&r, workers, i));
    if (e > worst) worst = e;
  }
  fprintf(stderr, "  AD-PSGD, %d workers: replicas within %.3g of the mean (starts %.3g)\n", workers, worst, spread0);
  CHECK_REPLICAS(&r, 0, workers, mean_start(&r, workers, i), 1e-3 * spread0);
  free(consensus);
  teardown(&r);
}
static void test_adpsgd_converges_4(void) { check_adpsgd_converges(4); }
static void test_adpsgd_converges_3(void) { check_adpsgd_converges(3); }

/* ---- GoSGD -------------------------------------------------------------------- */

static int read_metric(const char *line, const char *key, double *v) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return -1;
  *v = strtod(p + strlen(pat), NULL);
  return 0;
}

/* Every epoch line: sum of weights 1 after the drain, and weights held
 * plus weights in flight 1 before it; returns the epochs seen. */
static int check_mass(const char *metrics, double tol, int64_t *in_flight_seen) {
  FILE *f = fopen(metrics, "r");
  char line[4096];
  int epochs = 0;
  *in_flight_seen = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f)) {
    double sum, before, flight, msgs;
    if (!strstr(line, "\"event\":\"epoch\"")) continue;
    epochs++;
    CHECK(read_metric(line, "alpha_sum", &sum) == 0 && fabs(sum - 1) <= tol);
    CHECK(read_metric(line, "alpha_sum_before_drain", &before) == 0 &&
          read_metric(line, "alpha_in_flight", &flight) == 0 && fabs(before + flight - 1) <= tol);
    if (read_metric(line, "messages_in_flight", &msgs) == 0) *in_flight_seen += (int64_t)msgs;
  }
  fclose(f);
  return epochs;
}

/* lr = 0, distinct starts, p = 0.5: the consensus (sum a_i w_i) is the
 * mean of the starts at every evaluation (mass conservation), and the
 * replicas themselves converge to it. */
static void test_gossip_converges_to_mean_of_starts(void) {
  run_t r;
  char ckpt[128], metrics[128];
  setup(&r, (run_spec_t){strategy_gossip, EXCHANGE_GOSSIP, SCHEDULE_ASYNC, .perturb = 1, .epochs = 20});
  r.cfg.decentral.gossip_p = 0.5;
  snprintf(ckpt, sizeof ckpt, "%s/gossip.st", tmp_dir);
  snprintf(metrics, sizeof metrics, "%s/gossip.jsonl", tmp_dir);
  snprintf(r.cfg.checkpoint, sizeof r.cfg.checkpoint, "%s", ckpt);
  snprintf(r.cfg.metrics, sizeof r.cfg.metrics, "%s", metrics);
  CHECK_OK(run(&r));
  float *consensus = read_checkpoint(&r, ckpt);
  double err = 1, spread0 = 0;
  if (consensus) MAX_ERR(err, r.nparams, consensus[i] - mean_start(&r, 4, i));
  CHECK(err < 1e-5);
  MAX_ERR(spread0, r.nparams, start_value(&r, 3, i) - mean_start(&r, 4, i));
  CHECK_REPLICAS(&r, 0, 4, mean_start(&r, 4, i), 1e-3 * spread0);
  int64_t in_flight;
  CHECK(check_mass(metrics, 1e-12, &in_flight) == 20);
  free(consensus);
  teardown(&r);
}

/* Mass with 3 workers (weights 1/3 are not exact in binary) and lr > 0,
 * p = 1: sum a_i = 1 to rounding after every drain; before it, the weights
 * in flight make up the difference. */
static void test_gossip_mass_with_messages_in_flight(void) {
  run_t r;
  char metrics[128];
  setup(&r, (run_spec_t){strategy_gossip, EXCHANGE_GOSSIP, SCHEDULE_ASYNC, .workers = 3, .epochs = 8});
  r.cfg.lr = 0.05;
  r.cfg.decentral.gossip_p = 1;
  snprintf(metrics, sizeof metrics, "%s/mass.jsonl", tmp_dir);
  snprintf(r.cfg.metrics, sizeof r.cfg.metrics, "%s", metrics);
  CHECK_OK(run(&r));
  int64_t in_flight;
  CHECK(check_mass(metrics, 1e-9, &in_flight) == 8);
  fprintf(stderr, "  gossip: %lld messages in flight at epoch ends, accounted for\n",
          (long long)in_flight);
  teardown(&r);
}

/* ---- TreeEASGD ------------------------------------------------------------------ */

/* lr = 0: elastic pulls along the tree bring every replica to the root's. */
static void test_tree_replicas_meet_the_root(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_tree_easgd, EXCHANGE_TREE, SCHEDULE_ASYNC, .perturb = 1, .workers = 7,
                         .epochs = 10});
  r.cfg.decentral.tree_fanout = 2;
  CHECK_OK(run(&r));
  double spread0;
  MAX_ERR(spread0, r.nparams, start_value(&r, 6, i) - start_value(&r, 0, i));
  for (int k = 1; k < 7; k++) {
    double err = 1;
    if (r.final[k] && r.final[0]) MAX_ERR(err, r.nparams, r.final[k][i] - r.final[0][i]);
    CHECK(err < 1e-2 * spread0);
  }
  teardown(&r);
}

/* The periods are set per node by its depth (the taxonomy: tau_up^i and
 * tau_down^i "for each worker based on its depth in the hierarchy"); level
 * l is the links between depths l-1 and l, and --tau-up/--tau-down give a
 * period per level from the root, the last one holding for deeper levels.
 * Which rank sends after which of its steps (1..8), written out by hand:
 * '.' nothing, 'u' up to its parent, 'd' down to its children, 'b' both. */
static void check_schedule(int p, int fanout, const char *up, const char *down, const char *const *rows) {
  train_config_t c;
  char tree[16], workers[16];
  snprintf(tree, sizeof tree, "tree:%d", fanout);
  snprintf(workers, sizeof workers, "%d", p);
  char *argv[] = {"train", "--optimization", "decentral", "--schedule", "async", "--exchange", tree,
                  "--workers", workers, "--tau-up", (char *)up, "--tau-down", (char *)down};
  CHECK_OK(train_options_parse(13, argv, &c));
  for (int rank = 0; rank < p; rank++) {
    char got[9] = {0};
    for (int s = 1; s <= 8; s++) {
      int u, d;
      tree_exchanges(&c, rank, p, s, &u, &d);
      got[s - 1] = u && d ? 'b' : u ? 'u' : d ? 'd' : '.';
    }
    if (strcmp(got, rows[rank]) != 0) {
      printf("  tree of %d, fan-out %d, --tau-up %s --tau-down %s: rank %d sends '%s', expected '%s'\n",
             p, fanout, up, down, rank, got, rows[rank]);
      CHECK(0);
    }
  }
}

static void test_tree_schedule_by_level(void) {
  /* 6 workers, fan-out 2: depth 1 = ranks 1, 2; depth 2 = 3, 4 (under 1), 5 (under 2).
   * up: level 1 every 2, level 2 every 3; down: the root every 4, depth 1 every step */
  const char *binary[] = {"...d...d", "dbdbdbdb", "dbdbdbdb", "..u..u..", "..u..u..", "..u..u.."};
  check_schedule(6, 2, "2,3", "4,1", binary);
  /* a chain of 5 (fan-out 1, depths 0..4): levels past the list take its last value
   * (up: 2, then 3 for levels 2, 3, 4; down: 1, then 2 for levels 2, 3, 4) */
  const char *chain[] = {"dddddddd", ".b.b.b.b", ".dud.b.d", ".dud.b.d", "..u..u.."};
  check_schedule(5, 1, "2,3", "1,2", chain);
  /* one value: one period for the whole tree, as before the levels */
  const char *global[] = {"..d..d..", ".udu.b.u", ".u.u.u.u", ".u.u.u.u"};
  check_schedule(4, 2, "2", "3", global);
  CHECK(tree_depth(0, 2) == 0 && tree_depth(2, 2) == 1 && tree_depth(3, 2) == 2 && tree_depth(6, 2) == 2 &&
        tree_depth(7, 2) == 3 && tree_depth(4, 1) == 4);
  CHECK(tree_levels(1, 2) == 0 && tree_levels(3, 2) == 1 && tree_levels(4, 2) == 2 && tree_levels(7, 2) == 2);
  /* more periods than the tree has levels would be ignored: refused */
  train_config_t c;
  train_config_default(&c);
  char *argv[] = {"train", "--optimization", "decentral", "--schedule", "async", "--exchange", "tree:2",
                  "--workers", "3", "--tau-up", "2,4"};
  CHECK_FAILS_WITH(train_options_parse(11, argv, &c),
                   "option --tau-up: 2 periods given, one a level of the tree from the root, but the "
                   "tree of 3 workers with fan-out 2 has 1 level");
  argv[8] = "4";
  CHECK_OK(train_options_parse(11, argv, &c));
  CHECK(c.decentral.tau_up_levels == 2 && c.decentral.tau_up[0] == 2 && c.decentral.tau_up[1] == 4 && c.decentral.tau_down_levels == 1 &&
        c.decentral.tau_down[0] == 1);
}

/* The schedule in a real run (threads): 7 workers, fan-out 2 (depth 1 =
 * ranks 1, 2; depth 2 = ranks 3, 4 under 1 and 5, 6 under 2), 8 steps,
 * --tau-up 2,3 --tau-down 4,1. Models each rank sends, by hand: the root
 * 2 children x 8/4 = 4; ranks 1, 2: 8/2 up + 2 children x 8/1 down = 20;
 * ranks 3..6: 8/3 -> 2 up. Received: the root 2 x 4 = 8; ranks 1, 2:
 * 8/4 from the root + 2 x 2 from their children = 6; ranks 3..6: 8. Each
 * model is S = 4 x params bytes; the end-of-epoch drain adds 8 bytes to
 * and from each of the 6 peers. (One global period could not give these:
 * the depth-1 ranks send up every 2 steps, the depth-2 ranks every 3.) */
static void test_tree_sends_by_level(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_tree_easgd, EXCHANGE_TREE, SCHEDULE_ASYNC, .workers = 7});
  char *argv[] = {"train", "--optimization", "decentral", "--schedule", "async", "--exchange", "tree:2",
                  "--tau-up", "2,3", "--tau-down", "4,1", "--workers", "7", "--batch", "8", "--lr", "0",
                  "--seed", "7", "--max-steps", "8", "--quiet", "--model", model_path};
  CHECK_OK(train_options_parse((int)(sizeof argv / sizeof argv[0]), argv, &r.cfg));
  CHECK_OK(run(&r));
  const uint64_t sent[7] = {4, 20, 20, 2, 2, 2, 2}, received[7] = {8, 6, 6, 8, 8, 8, 8};
  uint64_t S = 4 * (uint64_t)r.nparams, drain = 8 * 6;
  for (int k = 0; k < 7; k++) {
    if (r.sent[k] != sent[k] * S + drain || r.received[k] != received[k] * S + drain) {
      printf("  rank %d: sent %.2f received %.2f models, expected %d and %d\n", k,
             (double)(r.sent[k] - drain) / (double)S, (double)(r.received[k] - drain) / (double)S,
             (int)sent[k], (int)received[k]);
      CHECK(0);
    }
  }
  teardown(&r);
}

/* Every rank's training bytes against the strategy's describe_step: T
 * steps and `epochs` epochs (a drain each) of its bytes. */
static void check_described(const run_t *r, int64_t T, int epochs) {
  model_spec_t spec;
  model_t *m = NULL;
  step_desc_t d;
  CHECK_OK(model_spec_load(r->cfg.model, &spec));
  CHECK_OK(model_build(&spec, (shape_t){1, 8, 8}, 4, r->cfg.batch, &m));
  model_spec_free(&spec);
  CHECK_OK(strategy_describe(&r->cfg, m, &d));
  for (int k = 0; k < d.nranks; k++) {
    double es, ev;
    step_bytes_t b;
    step_rank_bytes(&d, k, &b);
    CHECK(!b.expected); /* exact, not expected */
    double s = b.sent, v = b.received;
    step_rank_epoch_bytes(&d, k, &es, &ev);
    double want_s = round((double)T * s + epochs * es), want_r = round((double)T * v + epochs * ev);
    if ((double)r->sent[k] != want_s || (double)r->received[k] != want_r) {
      printf("  rank %d: sent %llu received %llu, described %.0f and %.0f\n", k,
             (unsigned long long)r->sent[k], (unsigned long long)r->received[k], want_s, want_r);
      CHECK(0);
    }
  }
  step_desc_free(&d);
  model_free(m);
}

/* TreeEASGD's periods by level and MPCA-SGD's rounds, every rank as
 * described (T a multiple of every period). */
static void test_described_bytes_every_rank(void) {
  run_t r;
  setup(&r, (run_spec_t){strategy_tree_easgd, EXCHANGE_TREE, SCHEDULE_ASYNC, .workers = 7});
  char *argv[] = {"train", "--optimization", "decentral", "--schedule", "async", "--exchange", "tree:2",
                  "--tau-up", "2,3", "--tau-down", "4,1", "--workers", "7", "--batch", "4", "--lr", "0",
                  "--seed", "7", "--max-steps", "12", "--quiet", "--model", model_path};
  CHECK_OK(train_options_parse((int)(sizeof argv / sizeof argv[0]), argv, &r.cfg));
  CHECK(train_steps_per_epoch(&r.cfg, 512, 7) >= 12); /* one epoch */
  CHECK_OK(run(&r));
  check_described(&r, 12, 1);
  teardown(&r);
  setup(&r, (run_spec_t){strategy_mpca, EXCHANGE_MASTER, SCHEDULE_SOFT, .max_steps = 6});
  r.cfg.decentral.tau = 3;
  CHECK_OK(run(&r));
  check_described(&r, 6, 1);
  teardown(&r);
}

/* ---- selection, ranks, values ----------------------------------------------------- */

/* The selected descriptor's worker function (fn NULL when none). */
static int select_fn(const train_config_t *c, strategy_fn *fn) {
  const strategy_t *s = strategy_select(c);
  *fn = s ? s->run : NULL;
  return s ? 0 : -1;
}

static void test_selection_and_ranks(void) {
  train_config_t c;
  strategy_fn fn;
  train_config_default(&c);
  c.optimization = OPTIMIZATION_DECENTRAL;
  c.workers = 4;
  struct { exchange_t e; schedule_t s; double beta; strategy_fn want; int ranks; } rows[] = {
      {EXCHANGE_ALLREDUCE, SCHEDULE_SYNC, 0, strategy_local_sgd, 4},
      {EXCHANGE_MASTER, SCHEDULE_SYNC, 0, strategy_local_sgd, 4},
      {EXCHANGE_MASTER, SCHEDULE_SYNC, 0.9, strategy_easgd, 5},
      {EXCHANGE_MASTER, SCHEDULE_ASYNC, 0, strategy_easgd, 5},
      {EXCHANGE_NEIGHBORS, SCHEDULE_SYNC, 0, strategy_dpsgd, 4},
      {EXCHANGE_NEIGHBORS, SCHEDULE_ASYNC, 0, strategy_adpsgd, 4},
      {EXCHANGE_GOSSIP, SCHEDULE_ASYNC, 0, strategy_gossip, 4},
      {EXCHANGE_TREE, SCHEDULE_ASYNC, 0, strategy_tree_easgd, 4},
      {EXCHANGE_MASTER, SCHEDULE_SOFT, 0, strategy_mpca, 5},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    c.exchange = rows[i].e;
    c.schedule = rows[i].s;
    c.decentral.beta = rows[i].beta;
    c.decentral.tree_fanout = 2;
    c.decentral.gossip_p = 0.5;
    fn = NULL;
    CHECK_OK(select_fn(&c, &fn));
    CHECK(fn == rows[i].want);
    CHECK(strategy_total_ranks(&c) == rows[i].ranks);
  }
  c.decentral.beta = 0;
  c.exchange = EXCHANGE_GOSSIP;
  c.schedule = SCHEDULE_SYNC;
  CHECK_FAILS_WITH(select_fn(&c, &fn), "gossip:p + async = GoSGD");
  c.exchange = EXCHANGE_NEIGHBORS;
  c.schedule = SCHEDULE_SSP;
  CHECK_FAILS_WITH(train_config_check(&c), "--schedule ssp --exchange neighbors do not combine");
  c.exchange = EXCHANGE_MASTER;
  c.schedule = SCHEDULE_SOFT;
  c.decentral.rho = 20; /* lr rho = 1 */
  CHECK_FAILS_WITH(train_config_check(&c), "option --rho: lr x rho = 1");
  c.decentral.rho = 0;
  c.decentral.beta = 1.5;
  CHECK_FAILS_WITH(train_config_check(&c), "option --beta: 1.5 (MPCA-SGD");
  c.decentral.beta = 0;
  c.decentral.alpha = 0.1;
  CHECK_FAILS_WITH(train_config_check(&c), "option --alpha: MPCA-SGD's pull is its penalty --rho");
  c.decentral.alpha = 0;
  c.optimization = OPTIMIZATION_CENTRAL;
  CHECK_FAILS_WITH(train_config_check(&c), "option --schedule soft: MPCA-SGD's rounds");
}

static void test_elastic_stable_range(void) {
  train_config_t c;
  double a, b;
  train_config_default(&c);
  CHECK_OK(elastic_coefficients(&c, 4, &a, &b)); /* the paper's beta = 0.9, alpha = beta/p */
  CHECK_NEAR(a, 0.225, 1e-12);
  CHECK_NEAR(b, 0.9, 1e-12);
  CHECK_OK(elastic_coefficients(&c, 1, &a, &b));
  CHECK(a <= 0.5 && b < 1);
  c.decentral.alpha = 0.9;
  CHECK_FAILS_WITH(train_config_check(&c), "option --alpha: alpha = 0.9 is outside the stable range");
  c.decentral.alpha = 0.2;
  CHECK_OK(elastic_coefficients(&c, 4, &a, &b)); /* elastic symmetry */
  CHECK_NEAR(b, 0.8, 1e-12);
  CHECK_FAILS_WITH(elastic_coefficients(&c, 5, &a, &b), "beta = 1 is outside the stable range 0 < beta < 1");
  c.decentral.alpha = 0;
  c.decentral.beta = 1.5;
  CHECK_FAILS_WITH(train_config_check(&c), "option --beta");
  c.decentral.beta = 0;
  c.decentral.rho = 20; /* alpha = lr rho = 1 */
  CHECK_FAILS_WITH(train_config_check(&c), "option --rho");
  c.decentral.alpha = 0.1;
  CHECK_FAILS_WITH(train_config_check(&c), "give one of them");
  train_config_default(&c);
  c.optimization = OPTIMIZATION_DECENTRAL;
  c.exchange = EXCHANGE_MASTER;
  c.schedule = SCHEDULE_ASYNC;
  c.workers = 4;
  c.decentral.alpha = 0.3; /* beta = p alpha = 1.2 */
  CHECK_FAILS_WITH(train_config_check(&c), "option --alpha");
  c.workers = 2;
  CHECK_OK(train_config_check(&c));
}

/* dtrain launch's lost rank on local records its loss as the world's
 * failure before its strategy's teardown withdraws what it had posted.
 * Rank 1 sends rank 0 a model, which rank 0's receive matches; rank 1 then
 * takes SIGUSR1, stops (worker_stopped), withdraws the send as a teardown
 * does and is slow to end. Rank 0's receive fails as the peer's failure,
 * not as a cancelled message of its own, and the run's error is rank 1's
 * loss: the line launch reads. Before, rank 0's "the sender cancelled the
 * message" was recorded first and launch saw no lost rank (AD-PSGD, 3
 * runs in 100). */
static atomic_int lost_posted, lost_withdrawn;
static char lost_rank0_err[512];

static int lost_rank_fn(comm_t *c, void *arg) {
  (void)arg;
  float model[4] = {1, 2, 3, 4}, got[4];
  comm_req_t *req;
  if (comm_rank(c) == 1) {
    if (comm_isend(c, 0, 7, model, sizeof model, &req) != 0) return -1;
    while (!atomic_load(&lost_posted)) dt_sleep_until(dt_now() + 1e-4);
    dt_catch_rank_signal();
    pthread_kill(pthread_self(), SIGUSR1); /* launch_kill.py's tgkill */
    worker_t w;
    memset(&w, 0, sizeof w);
    w.comm = c, w.step = 5;
    int rc = worker_stopped(&w);
    comm_cancel(c, req); /* the teardown */
    atomic_store(&lost_withdrawn, 1);
    dt_sleep_until(dt_now() + 0.2); /* the rest of the teardown, before the thread ends */
    return rc;
  }
  if (comm_irecv(c, 1, 7, got, sizeof got, &req) != 0) return -1;
  atomic_store(&lost_posted, 1);
  while (!atomic_load(&lost_withdrawn)) dt_sleep_until(dt_now() + 1e-4);
  int rc = comm_wait(c, req);
  snprintf(lost_rank0_err, sizeof lost_rank0_err, "%s", rc ? dt_errmsg() : "");
  return rc;
}

static void test_lost_rank_fails_the_world_before_its_teardown(void) {
  atomic_store(&lost_posted, 0), atomic_store(&lost_withdrawn, 0);
  CHECK(comm_local_run(2, NULL, lost_rank_fn, NULL) != 0);
  CHECK(strstr(dt_errmsg(), "rank 1: stopped by SIGUSR1 at step 5: this rank is lost") != NULL);
  CHECK(strstr(lost_rank0_err, "peer rank 1 failed") != NULL);
  if (!strstr(dt_errmsg(), "this rank is lost")) printf("  run's error: %s\n", dt_errmsg());
  if (!strstr(lost_rank0_err, "peer rank 1 failed")) printf("  rank 0's error: %s\n", lost_rank0_err);
}

int main(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/dtrain-decentral.XXXXXX");
  if (!mkdtemp(tmp_dir)) return 1;
  snprintf(model_path, sizeof model_path, "%s/small.model", tmp_dir);
  FILE *f = fopen(model_path, "w");
  if (!f) return 1;
  fputs("dense units=32\nrelu\ndense units=4\n", f);
  fclose(f);
  kern_set_threads(1);
  RUN(test_selection_and_ranks);
  RUN(test_lost_rank_fails_the_world_before_its_teardown);
  RUN(test_elastic_stable_range);
  RUN(test_local_sgd_tau1_equals_data_parallel);
  RUN(test_local_sgd_tau1_short_last_step);
  RUN(test_local_sgd_averages_distinct_starts);
  RUN(test_easgd_sync_elastic_rule);
  RUN(test_easgd_async_replicas_meet_the_centre);
  RUN(test_elastic_decay);
  RUN(test_easgd_sync_alpha_decay);
  RUN(test_easgd_async_alpha_decay);
  RUN(test_dpsgd_mixing_rule);
  RUN(test_adpsgd_average_rule);
  RUN(test_adpsgd_neighbours);
  RUN(test_adpsgd_one_exchange);
  RUN(test_adpsgd_converges_4);
  RUN(test_adpsgd_converges_3);
  RUN(test_gossip_converges_to_mean_of_starts);
  RUN(test_gossip_mass_with_messages_in_flight);
  RUN(test_tree_replicas_meet_the_root);
  RUN(test_tree_schedule_by_level);
  RUN(test_tree_sends_by_level);
  RUN(test_described_bytes_every_rank);
  RUN(test_mpca_rules);
  RUN(test_mpca_centre_rounds_and_bytes);
  RUN(test_mpca_penalty_in_the_step);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
  if (getenv("KEEP") == NULL && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
  TEST_MAIN_END();
}
