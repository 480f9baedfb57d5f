/* The asynchronous pipelines against their update rules, computed here
 * by hand on one rank: PipeDream (weight stashing, with and without
 * vertical sync), PipeDream-2BW and DDG. The engine runs P ranks (threads,
 * comm local) on a small synthetic task; the reference keeps every weight
 * version of every stage and computes each unit's gradient with one
 * whole-model forward and backward whose weights are, stage by stage, the
 * versions the rule names (stage_use_weights), then applies plain SGD to
 * each stage's newest version. With stages split where a stage has two
 * weight layers, the rules differ from one another, and each run is
 * checked both to match its own rule (to float rounding, 1e-5) and to
 * differ from the others' (by far more): a PipeDream whose backward used
 * the current weights instead of the stashed ones fails.
 *
 * The rules, for unit (batch) i on stage s of P, d = P - 1 - s, SGD at lr:
 *   pipedream   forward and backward on W_s(max(0, i - d)): the newest at
 *               its forward (stage s has then applied the units before
 *               i - d), stashed for its backward;
 *   vertical    forward and backward on W_s(max(0, i - (P - 1))), the
 *               version stage 0 used;
 *   ddg         forward on W_s(max(0, i - d)), backward on W_s(i) (the
 *               weights as they are at its backward: stored activations,
 *               no stash), as Huo et al.'s code does;
 *   2bw         step j's M micro-batches forward and backward on
 *               W(max(0, j - 1)), summed, then W(j + 1) = W(j) - lr g(j):
 *               one step of delay, W(t+1) = W(t) - lr grad f(W(t-1));
 *   every update W_s(u + 1) = W_s(u) - lr g_s(u), the units in order. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/train.h"
#include "strategy/pipe/pipe.h"
#include "test.h"

enum { STEPS = 10, MAXV = STEPS + 2 };

typedef struct {
  train_config_t cfg;
  dataset_t train, test;
  float *start, *final;   /* rank 0's whole model, before and after */
  size_t nparams;
} run_t;

static char model_path[96];

static int engine_rank(comm_t *c, void *arg) {
  run_t *r = arg;
  worker_t w;
  int rc = worker_init(&w, &r->cfg, c, &r->train, &r->test);
  if (rc == 0 && comm_rank(c) == 0) {
    r->nparams = w.model->nparams;
    r->start = malloc(r->nparams * sizeof(float));
    memcpy(r->start, w.model->params, r->nparams * sizeof(float));
  }
  if (rc == 0) rc = strategy_pipeline(&w);
  if (rc == 0 && comm_rank(c) == 0) {
    r->final = malloc(r->nparams * sizeof(float));
    memcpy(r->final, w.model->params, r->nparams * sizeof(float));
  }
  worker_free(&w);
  return rc;
}

static void setup(run_t *r, const char *sched, int P, int M, const char *partition) {
  memset(r, 0, sizeof *r);
  train_config_default(&r->cfg);
  snprintf(r->cfg.model, sizeof r->cfg.model, "%s", model_path);
  r->cfg.batch = 8;
  r->cfg.lr = 0.2;
  r->cfg.optim.momentum = 0;
  r->cfg.optim.weight_decay = 0;
  r->cfg.seed = 5;
  r->cfg.progress = 0;
  r->cfg.max_steps = STEPS;
  r->cfg.workers = P;
  r->cfg.pipe.stages = P;
  r->cfg.pipe.micro_batches = M;
  snprintf(r->cfg.pipe.partition, sizeof r->cfg.pipe.partition, "%s", partition);
  int V;
  pipe_kind_t k;
  if (!strcmp(sched, "vertical")) sched = "pipedream", r->cfg.pipe.vertical_sync = 1;
  CHECK_OK(pipe_kind_parse(sched, &k, &V));
  r->cfg.pipe.schedule = (int)k;
  CHECK_OK(dataset_synthetic_split(256, 1, 8, 8, 4, 7, 1, &r->train));
  CHECK_OK(dataset_synthetic_split(64, 1, 8, 8, 4, 7, 0, &r->test));
}

static void teardown(run_t *r) {
  free(r->start), free(r->final);
  dataset_free(&r->train);
  dataset_free(&r->test);
}

static int run_engine(run_t *r) {
  CHECK_OK(train_config_check(&r->cfg));
  fflush(stdout);
  int saved = dup(1), null = open("/dev/null", O_WRONLY);
  if (null >= 0) dup2(null, 1); /* the epoch lines */
  int rc = comm_local_run(r->cfg.pipe.stages, NULL, engine_rank, r);
  fflush(stdout);
  if (saved >= 0) dup2(saved, 1), close(saved);
  if (null >= 0) close(null);
  return rc;
}

/* ---- the reference ------------------------------------------------------------ */

typedef enum { RULE_PIPEDREAM, RULE_VERTICAL, RULE_DDG, RULE_2BW, RULE_SGD } rule_t;

typedef struct {
  const run_t *r;
  rule_t rule;
  int P, M;
  int first[8];          /* first layer of each stage */
  float *out;            /* the final weights */
} ref_t;

/* Unit i's forward (or backward) version on stage s under the rule. */
static int version(const ref_t *f, int s, int i, int backward) {
  int d = f->P - 1 - s, j = i; /* 2bw, sgd: a unit is a whole step */
  switch (f->rule) {
  case RULE_PIPEDREAM: return i - d > 0 ? i - d : 0;
  case RULE_VERTICAL: return i - (f->P - 1) > 0 ? i - (f->P - 1) : 0;
  case RULE_DDG: return backward ? i : (i - d > 0 ? i - d : 0);
  case RULE_2BW: return j - 1 > 0 ? j - 1 : 0;
  default: return j;
  }
}

static int reference_rank(comm_t *c, void *arg) {
  ref_t *f = arg;
  train_config_t cfg = f->r->cfg;
  cfg.pipe.stages = cfg.pipe.micro_batches = cfg.workers = 1;
  worker_t w;
  RCHECK_OK(worker_init(&w, &cfg, c, &f->r->train, &f->r->test));
  model_t *m = w.model;
  size_t n = m->nparams;
  int B = cfg.batch, units = STEPS, per = B; /* M = 1, or 2bw's steps taken whole */
  float *ver = malloc((size_t)MAXV * n * sizeof(float)); /* ver[u]: every stage's version u */
  float *fw = malloc(n * sizeof(float)), *bw = malloc(n * sizeof(float)), *x = malloc((size_t)B * 784 * 4);
  int32_t *y = malloc((size_t)B * sizeof *y);
  uint32_t *order = malloc(w.train->n * sizeof *order);
  stage_t *st;
  RCHECK_OK(stage_new(m, 0, m->nlayers - 1, 1, B, &st));
  memcpy(ver, m->params, n * sizeof(float));
  data_epoch_order(cfg.seed, 0, order, w.train->n);
  f->first[f->P] = m->nlayers;
  for (int i = 0; i < units; i++) {
    for (int s = 0; s < f->P; s++) { /* the weights of unit i, stage by stage */
      size_t lo = m->layers[f->first[s]].param_off;
      size_t hi = m->layers[f->first[s + 1] - 1].param_off + m->layers[f->first[s + 1] - 1].param_len;
      memcpy(fw + lo, ver + (size_t)version(f, s, i, 0) * n + lo, (hi - lo) * sizeof(float));
      memcpy(bw + lo, ver + (size_t)version(f, s, i, 1) * n + lo, (hi - lo) * sizeof(float));
    }
    data_gather(w.train, order + (size_t)i * per, (size_t)per, x, y);
    RCHECK_OK(stage_use_weights(st, 0, fw));
    RCHECK_OK(stage_forward(st, 0, x, per, 1, NULL, NULL));
    RCHECK_OK(stage_loss(st, 0, y, B, NULL, NULL));
    RCHECK_OK(stage_use_weights(st, 0, bw));
    RCHECK_OK(stage_backward(st, 0, NULL, NULL, 0, NULL, NULL));
    /* SGD on the newest version: one update per unit, or per step (2bw) */
    float *cur = ver + (size_t)i * n, *next = ver + (size_t)(i + 1) * n;
    for (size_t k = 0; k < n; k++) next[k] = cur[k] - (float)cfg.lr * m->grads[k];
  }
  memcpy(f->out, ver + (size_t)units * n, n * sizeof(float));
  stage_free(st);
  free(ver), free(fw), free(bw), free(x), free(y), free(order);
  worker_free(&w);
  return 0;
}

static float *reference(const run_t *r, rule_t rule, int P, int M, const int *first) {
  ref_t f = {r, rule, P, M, {0}, malloc(r->nparams * sizeof(float))};
  memcpy(f.first, first, (size_t)P * sizeof *first);
  CHECK_OK(comm_local_run(1, NULL, reference_rank, &f));
  return f.out;
}

static double max_diff(const float *a, const float *b, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++)
    if (fabs((double)a[i] - b[i]) > e) e = fabs((double)a[i] - b[i]);
  return e;
}

/* The engine's run of `sched` matches rule `want`, and differs from each
 * of the others by more than 100x the tolerance. */
static void check_rule(const char *sched, rule_t want, int P, int M, const int *first, const char *partition) {
  run_t r;
  setup(&r, sched, P, M, partition);
  CHECK_OK(run_engine(&r));
  if (!r.final) return teardown(&r);
  const char *names[] = {"pipedream", "vertical", "ddg", "2bw", "sgd"};
  for (int k = 0; k <= RULE_SGD; k++) {
    if ((want == RULE_2BW) != (k == RULE_2BW || k == RULE_SGD)) continue; /* units: batches, or steps */
    float *ref = reference(&r, (rule_t)k, P, M, first);
    double e = max_diff(ref, r.final, r.nparams), moved = max_diff(r.start, r.final, r.nparams);
    fprintf(stderr, "  %s P=%d M=%d against the %s rule: max |diff| %.3g (moved %.3g)\n", sched, P, M,
            names[k], e, moved);
    if ((int)want == k) CHECK(e < 1e-5 && moved > 1e-2);
    else CHECK(e > 1e-3);
    free(ref);
  }
  teardown(&r);
}

/* Stage 0 = two dense layers (the second's backward reads its weights). */
static void test_pipedream_stashes_weights(void) {
  int two[2] = {0, 2}, three[3] = {0, 2, 3};
  check_rule("pipedream", RULE_PIPEDREAM, 2, 1, two, "0,2");
  check_rule("pipedream", RULE_PIPEDREAM, 3, 1, three, "0,2,3");
}

static void test_pipedream_vertical_sync(void) {
  int three[3] = {0, 2, 3};
  check_rule("vertical", RULE_VERTICAL, 3, 1, three, "0,2,3");
}

static void test_ddg_delayed_gradients(void) {
  int two[2] = {0, 2}, three[3] = {0, 2, 3};
  check_rule("ddg", RULE_DDG, 2, 1, two, "0,2");
  check_rule("ddg", RULE_DDG, 3, 1, three, "0,2,3");
}

static void test_2bw_one_step_delay(void) {
  int two[2] = {0, 2}, three[3] = {0, 2, 3};
  check_rule("2bw", RULE_2BW, 2, 2, two, "0,2");
  check_rule("2bw", RULE_2BW, 3, 4, three, "0,2,3");
}

int main(void) {
  kern_set_threads(1);
  snprintf(model_path, sizeof model_path, "/tmp/dtrain-pipe-async-%d.model", (int)getpid());
  FILE *mf = fopen(model_path, "w");
  if (!mf) return 1;
  fputs("dense units=16\nrelu\ndense units=16\nrelu\ndense units=12\nrelu\ndense units=4\n", mf);
  fclose(mf);
  RUN(test_pipedream_stashes_weights);
  RUN(test_pipedream_vertical_sync);
  RUN(test_ddg_delayed_gradients);
  RUN(test_2bw_one_step_delay);
  unlink(model_path);
  TEST_MAIN_END();
}
