/* Hogwild! (Niu, Recht, Ré & Wright 2011): worker threads update one
 * shared parameter arena in place, without locks. Each worker copies the
 * shared parameters (as they are at that moment: other workers may be
 * writing), computes its batch's gradient, and applies its optimizer step
 * straight to the shared arena. Batches come from the epoch's shared
 * order through an atomic counter, so a fast worker takes more of them.
 *
 * The writes race by design (that is the method): a concurrent read may
 * see a partly updated vector, and under ThreadSanitizer this strategy is
 * reported. Each worker keeps its own momentum. Shared memory is a
 * transport facility (comm_shared_alloc): --comm local only.
 *
 * Staleness of an update: updates other workers applied between this
 * worker's read of the parameters and its own write. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/dp/dp.h"
#include "strategy/balance.h"

#define HEADER 64 /* bytes before the parameters: counters on their own line */

typedef struct {
  _Atomic int64_t next;      /* next batch of the epoch's order */
  _Atomic int64_t updates;   /* updates applied so far */
} hog_counters_t;

typedef struct {
  worker_t *w;
  hog_counters_t *ctr;
  float *params;             /* the shared arena */
  int64_t batches_per_epoch;
  int64_t cap;               /* --max-steps: batches of all workers (INT64_MAX: none) */
  /* this worker's epoch: loss, samples, correct, staleness sum/count/max, batches, seconds */
  double sums[8];
  char extra[1024];
} hog_t;

static double lr_of_batch(const hog_t *h, int64_t epoch, int64_t q) {
  const worker_t *w = h->w;
  return lr_at(&w->sched, epoch * w->steps_per_epoch + q * w->steps_per_epoch / h->batches_per_epoch);
}

static int hog_batch(hog_t *h, int64_t epoch, int64_t q) {
  worker_t *w = h->w;
  const train_config_t *cfg = w->cfg;
  model_t *m = w->model;
  size_t begin = (size_t)q * (size_t)cfg->batch;
  size_t count = w->train->n - begin < (size_t)cfg->batch ? w->train->n - begin : (size_t)cfg->batch;
  memcpy(m->params, h->params, m->nparams * sizeof(float)); /* racy read, by design */
  int64_t seen = atomic_load_explicit(&h->ctr->updates, memory_order_relaxed);
  double loss0 = w->epoch_loss_sum;
  int64_t n0 = w->epoch_samples;
  double c0 = w->epoch_correct;
  w->step = epoch * h->batches_per_epoch + q; /* dropout masks: a function of the batch */
  DT_TRY(worker_compute_gradient(w, begin, count, cfg->batch * w->nranks, NULL));
  double t0 = dt_now();
  int64_t before = atomic_fetch_add_explicit(&h->ctr->updates, 1, memory_order_relaxed);
  optim_step(w->opt, h->params, m->grads, w->segs, w->nsegs, (float)lr_of_batch(h, epoch, q));
  w->timers.compute += dt_now() - t0;
  double staleness = (double)(before - seen);
  h->sums[0] += w->epoch_loss_sum - loss0;
  h->sums[1] += (double)(w->epoch_samples - n0);
  h->sums[2] += (double)(w->epoch_correct - c0);
  h->sums[3] += staleness;
  h->sums[4] += 1;
  if (staleness > h->sums[5]) h->sums[5] = staleness;
  h->sums[6] += 1;
  return 0;
}

/* Rank 0 gets every worker's sums; fills the report's training figures. */
static int epoch_figures(hog_t *h, epoch_report_t *r) {
  worker_t *w = h->w;
  int N = w->nranks;
  float *mine = calloc(8, sizeof *mine), *got = calloc((size_t)N * 8, sizeof *got);
  int rc = mine && got ? 0 : dt_error("out of memory");
  for (int i = 0; rc == 0 && i < 8; i++) mine[i] = (float)h->sums[i];
  if (rc == 0 && N > 1) rc = gather_to_root(w->coll, 0, mine, got, 8);
  if (rc == 0 && N == 1) memcpy(got, mine, 8 * sizeof *got);
  if (rc == 0 && w->rank == 0) {
    double loss = 0, samples = 0, correct = 0, st = 0, stn = 0, stmax = 0;
    for (int i = 0; i < N; i++) {
      const float *g = got + 8 * i;
      loss += g[0], samples += g[1], correct += g[2], st += g[3], stn += g[4];
      if (g[5] > stmax) stmax = g[5];
    }
    r->train_loss = samples > 0 ? loss / samples : 0;
    r->train_acc = samples > 0 ? correct / samples : 0;
    r->samples = samples;
    r->samples_per_sec = r->epoch_sec > 0 ? samples / r->epoch_sec : 0;
    size_t n = (size_t)snprintf(h->extra, sizeof h->extra,
                                "\"exchange\":\"shared\",\"schedule\":\"async\",\"staleness_mean\":"
                                "%.4g,\"staleness_max\":%.0f,\"batches\":[",
                                stn > 0 ? st / stn : 0, stmax);
    for (int i = 0; i < N && n < sizeof h->extra; i++)
      n += (size_t)snprintf(h->extra + n, sizeof h->extra - n, "%s%.0f", i ? "," : "", got[8 * i + 6]);
    if (n < sizeof h->extra) snprintf(h->extra + n, sizeof h->extra - n, "]");
    r->extra_json = h->extra;
  }
  free(mine), free(got);
  return rc;
}

/* The steps so far, as the epoch and done lines count them: updates per
 * worker (each batch sets w->step to its index for its dropout masks). */
static void count_steps(hog_t *h) {
  h->w->step = atomic_load(&h->ctr->updates) / h->w->nranks;
}

/* Every update of the epoch is in; rank 0 evaluates the shared arena. */
static int evaluate(void *st, epoch_report_t *r) {
  hog_t *h = st;
  worker_t *w = h->w;
  count_steps(h);
  r->lr = lr_of_batch(h, r->epoch, h->batches_per_epoch - 1);
  DT_TRY(epoch_figures(h, r));
  if (w->rank != 0) return 0;
  memcpy(w->model->params, h->params, w->model->nparams * sizeof(float));
  double loss;
  double correct;
  worker_evaluate(w, 0, w->test->n, &loss, &correct);
  r->test_loss = loss / (double)w->test->n;
  r->test_acc = correct / (double)w->test->n;
  return 0;
}

static int begin_epoch(void *st, int epoch) {
  hog_t *h = st;
  if (h->w->rank == 0) atomic_store(&h->ctr->next, 0);
  memset(h->sums, 0, sizeof h->sums);
  return comm_barrier(h->w->comm);
}

/* Batches are handed out by one shared counter, so a worker takes as many
 * steps as it is fast; --max-steps caps the batches of all workers. */
static int step(void *st, int epoch, int64_t k) {
  hog_t *h = st;
  int64_t q = atomic_fetch_add(&h->ctr->next, 1);
  if (q >= h->batches_per_epoch) return DRIVE_EPOCH_END;
  if (epoch * h->batches_per_epoch + q >= h->cap) return DRIVE_RUN_END;
  DT_TRY(hog_batch(h, epoch, q));
  worker_progress(h->w, epoch, q / h->w->nranks, h->w->steps_per_epoch);
  return DRIVE_NEXT;
}

static int end_epoch(void *st, int epoch) {
  hog_t *h = st;
  DT_TRY(comm_barrier(h->w->comm)); /* every update of the epoch is in */
  return (int64_t)(epoch + 1) * h->batches_per_epoch >= h->cap ? DRIVE_RUN_END : 0;
}

static int end_run(void *st) {
  count_steps(st);
  return 0;
}

int strategy_hogwild(worker_t *w) {
  hog_t h = {.w = w};
  size_t bytes = HEADER + w->model->nparams * sizeof(float);
  void *shared;
  if (comm_shared_alloc(w->comm, bytes, &shared) != 0) {
    comm_shared_free(w->comm, shared);
    return -1;
  }
  h.ctr = shared;
  h.params = (float *)((char *)shared + HEADER);
  h.batches_per_epoch = ((int64_t)w->train->n + w->cfg->batch - 1) / w->cfg->batch;
  if (w->rank == 0) /* the initial (or resumed) parameters */
    memcpy(h.params, w->model->params, w->model->nparams * sizeof(float));
  h.cap = w->cfg->max_steps ? w->cfg->max_steps * w->nranks : INT64_MAX;
  driver_ops_t ops = {.begin_epoch = begin_epoch, .step = step, .end_epoch = end_epoch,
                      .evaluate = evaluate, .end_run = end_run, .open_ended = 1};
  int rc = driver_run(w, &ops, &h); /* failed, it has failed the world: peers stop now */
  comm_shared_free(w->comm, shared); /* waits for every rank: none still writes */
  return rc;
}

/* The step as data: each worker's local step on a copy of the shared
 * parameters, its update written to them in place; nothing on a wire.
 * Without a barrier the workers' steps interleave as their speed falls:
 * one step a worker is the mean, not a count. */
static int hogwild_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  for (int r = 0; r < c->workers; r++)
    if (step_add_local_step(out, m, r, c->batch) == STEP_FAILED) return -1;
  return 0;
}

static int hogwild_matches(const train_config_t *c) {
  return train_axes(c, OPTIMIZATION_CENTRAL, EXCHANGE_SHARED, SCHEDULE_ASYNC);
}

const strategy_t STRATEGY_HOGWILD = {
    .name = "Hogwild (shared memory)",
    .paper = "Recht et al. 2011, Hogwild!",
    .axes = "--schedule async --exchange shared",
    .optimization = OPTIMIZATION_CENTRAL,
    .compress = COMPRESS_REFUSED,
    .no_compress = "not with --exchange shared (Hogwild): the ranks sum one shared arena in "
                   "place and nothing goes on a wire; use --exchange allreduce:ALGO",
    .matches = hogwild_matches,
    .run = strategy_hogwild,
    .describe_step = hogwild_describe_step,
};
