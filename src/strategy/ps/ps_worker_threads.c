/* Project Adam's threads on a model training machine (--worker-threads T;
 * Chilimbi et al. 2014, sec. 3.1: "multi-threaded training ... each
 * thread works on a different image ... the threads share the model
 * weights ... updates to the shared weights without locks"). A parameter
 * server worker's batch is cut into T shares; each thread runs the whole
 * model (a stage over all layers: its own activations, the worker's one
 * parameter arena) on its share's images, writes its gradient into an
 * arena of its own, and at once applies -lr g_t to the shared weights
 * with no lock, Hogwild style (Niu et al. 2011; strategy/dp/hogwild.c):
 * the other threads may be reading them mid-pass. That local step is the
 * plain one of SSP's read-my-writes (--ps-refresh lazy); the servers'
 * optimizer state (momentum) stays theirs alone.
 *
 * --ps-push factors: a dense layer's factors are the batch's rows, so
 * the push concatenates the threads' rows (each thread's dY and X from
 * its own activations), one payload as one thread's would be.
 *
 * The machine's accumulated update is the threads' gradients summed:
 * after the threads meet, thread i adds every thread's slice i into
 * model->grads (disjoint slices: no lock and no lost writes), which the
 * worker then pushes as it pushes one gradient. The gradient's scale is
 * the worker's (each share averaged over the same denominator), so the
 * servers see one worker's push per batch, as with one thread.
 *
 * The local writes race by design (that is the method): ThreadSanitizer
 * reports them, and the tests skip T > 1 under it, as Hogwild's do. T = 1
 * is not this file: the worker computes as it always has.
 *
 * Threads: the worker's own thread takes share 0; T - 1 helpers, started
 * once, wait at a barrier for each batch, meet at a second once every
 * share's update is applied and its gradient written, and at a third
 * once their slices of the sum are added. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

#define SLICE_ALIGN 16 /* floats: slices of the sum start on 64-byte lines */

typedef struct {
  struct ps_wthreads *pool;
  int i;
  stage_t *stage;            /* all layers: this thread's activations */
  float *grads;              /* this thread's gradient [nparams] */
  float *x;                  /* its share's inputs */
  int32_t *y;                /* and labels */
  size_t begin, count;       /* its share of the batch (epoch order) */
  double loss, correct;
  int rc;
  layer_cost_t cost[LAYER_KIND_COUNT]; /* its passes' meters, added to the model's after each batch */
} wthread_t;

struct ps_wthreads {
  worker_t *w;
  int T;
  wthread_t *th;             /* [T] */
  pthread_t *threads;        /* [T - 1] helpers */
  pthread_barrier_t start, applied, summed;
  int barriers, started, stop;
  /* the batch being computed, set by the worker's thread before `start` */
  int denom;
  float lr;
};

static size_t slice_bound(size_t len, int i, int T) {
  return i >= T ? len : len * (size_t)i / (size_t)T / SLICE_ALIGN * SLICE_ALIGN;
}

/* Forward, loss and backward of the thread's share into its gradient,
 * then its step on the shared weights (racy by design). */
static void train_share(wthread_t *t) {
  ps_wthreads_t *pool = t->pool;
  worker_t *w = pool->w;
  model_t *m = w->model;
  t->loss = t->correct = 0;
  t->rc = 0;
  if (t->count == 0) { /* a short batch: nothing for this thread */
    kern_zero(m->nparams, t->grads);
    return;
  }
  data_gather(w->train, w->order + t->begin, t->count, t->x, t->y);
  rng_t rng; /* dropout masks: a pure function of (seed, step, rank, thread) */
  rng_seed(&rng, rng_derive(w->cfg->seed, 0xada,
                            (uint64_t)(w->step * w->nranks + w->rank) * (uint64_t)pool->T + (uint64_t)t->i));
  int n = (int)t->count;
  if (stage_forward(t->stage, 0, t->x, n, 1, &rng, NULL) != 0 ||
      stage_loss(t->stage, 0, t->y, pool->denom, &t->loss, &t->correct) != 0) {
    t->rc = -1;
    return;
  }
  if (!isfinite(t->loss)) return; /* the worker's thread reports it */
  if (stage_backward(t->stage, 0, NULL, NULL, 0, NULL, NULL) != 0) {
    t->rc = -1;
    return;
  }
  kern_axpy(m->nparams, -pool->lr, t->grads, m->params); /* lock-free, racing the others */
}

/* Slice i of model->grads: the threads' gradients summed, in thread order. */
static void sum_slice(ps_wthreads_t *pool, int i) {
  model_t *m = pool->w->model;
  size_t lo = slice_bound(m->nparams, i, pool->T), hi = slice_bound(m->nparams, i + 1, pool->T);
  memcpy(m->grads + lo, pool->th[0].grads + lo, (hi - lo) * sizeof(float));
  for (int k = 1; k < pool->T; k++) kern_add(hi - lo, pool->th[k].grads + lo, m->grads + lo);
}

static void *helper(void *arg) {
  wthread_t *t = arg;
  ps_wthreads_t *pool = t->pool;
  for (;;) {
    pthread_barrier_wait(&pool->start);
    if (pool->stop) return NULL;
    train_share(t);
    pthread_barrier_wait(&pool->applied);
    sum_slice(pool, t->i);
    pthread_barrier_wait(&pool->summed);
  }
}

static int thread_new(ps_wthreads_t *pool, int i, int share) {
  worker_t *w = pool->w;
  model_t *m = w->model;
  wthread_t *t = &pool->th[i];
  t->pool = pool, t->i = i;
  DT_TRY(stage_new(m, 0, m->nlayers - 1, 1, share, &t->stage));
  if (!(t->grads = dt_alloc_floats(m->nparams))) return -1;
  DT_TRY(stage_use_grads(t->stage, 0, t->grads));
  stage_meter_into(t->stage, t->cost);
  t->x = dt_alloc_floats((size_t)share * w->train->dim);
  t->y = dt_alloc((size_t)share * dataset_ylen(w->train) * sizeof(int32_t));
  return t->x && t->y ? 0 : -1;
}

int ps_wthreads_new(worker_t *w, int T, ps_wthreads_t **out) {
  *out = NULL;
  if (T <= 1) return 0;
  ps_wthreads_t *pool = calloc(1, sizeof *pool);
  if (!pool) return dt_error("out of memory");
  *out = pool;
  pool->w = w, pool->T = T;
  pool->th = calloc((size_t)T, sizeof *pool->th);
  pool->threads = calloc((size_t)T, sizeof *pool->threads);
  if (!pool->th || !pool->threads) return dt_error("out of memory");
  int share = (worker_max_batch(w->cfg) + T - 1) / T;
  for (int i = 0; i < T; i++)
    if (thread_new(pool, i, share) != 0) return dt_error_prefix("--worker-threads %d: ", T);
  if (pthread_barrier_init(&pool->start, NULL, (unsigned)T) != 0 ||
      pthread_barrier_init(&pool->applied, NULL, (unsigned)T) != 0 ||
      pthread_barrier_init(&pool->summed, NULL, (unsigned)T) != 0)
    return dt_error("--worker-threads %d: cannot set up the barriers", T);
  pool->barriers = 1;
  for (int i = 1; i < T; i++) {
    if (pthread_create(&pool->threads[i - 1], NULL, helper, &pool->th[i]) != 0) {
      pool->started = i - 1;
      return dt_error("--worker-threads %d: cannot start thread %d", T, i);
    }
    pool->started = i;
  }
  return 0;
}

void ps_wthreads_free(ps_wthreads_t *pool) {
  if (!pool) return;
  if (pool->started > 0 && pool->started < pool->T - 1)
    return; /* a failed start: its helpers wait at a barrier that cannot be met; the run ends */
  if (pool->started > 0) { /* every helper waits at `start` */
    pool->stop = 1;
    pthread_barrier_wait(&pool->start);
  }
  for (int i = 0; i < pool->started; i++) pthread_join(pool->threads[i], NULL);
  if (pool->barriers) {
    pthread_barrier_destroy(&pool->start);
    pthread_barrier_destroy(&pool->applied);
    pthread_barrier_destroy(&pool->summed);
  }
  for (int i = 0; pool->th && i < pool->T; i++) {
    stage_free(pool->th[i].stage);
    dt_free(pool->th[i].grads);
    dt_free(pool->th[i].x);
    dt_free(pool->th[i].y);
  }
  free(pool->th);
  free(pool->threads);
  free(pool);
}

/* Thread k's rows of a layer, from its stage (ps_factor_rows_fn). */
static const float *thread_rows(void *ctx, int k, int layer, int which, size_t *rows) {
  const ps_wthreads_t *pool = ctx;
  const wthread_t *t = &pool->th[k];
  *rows = t->count;
  if (layer < 0 || !t->count) return NULL;
  return which ? stage_layer_input(t->stage, 0, layer) : stage_layer_dout(t->stage, 0, layer);
}

size_t ps_wthreads_factor_pack(ps_wthreads_t *pool, const ps_factor_plan_t *p, const float *grads,
                               size_t lo, size_t hi, void *buf) {
  return ps_factor_pack_parts(p, pool->T, thread_rows, pool, grads, lo, hi, buf);
}

int ps_wthreads_gradient(ps_wthreads_t *pool, size_t begin, size_t count, int denom, float lr) {
  worker_t *w = pool->w;
  DT_TRY(worker_stopped(w));
  double t0 = dt_now();
  for (int i = 0; i < pool->T; i++) { /* share i: images [begin + i count / T, ...) */
    size_t a = count * (size_t)i / (size_t)pool->T, b = count * (size_t)(i + 1) / (size_t)pool->T;
    pool->th[i].begin = begin + a, pool->th[i].count = b - a;
  }
  pool->denom = denom, pool->lr = lr;
  pthread_barrier_wait(&pool->start);
  train_share(&pool->th[0]);
  pthread_barrier_wait(&pool->applied);
  sum_slice(pool, 0);
  pthread_barrier_wait(&pool->summed);
  double loss = 0, correct = 0;
  for (int i = 0; i < pool->T; i++) {
    wthread_t *t = &pool->th[i];
    if (t->rc != 0) return dt_error_prefix("--worker-threads, thread %d: ", i);
    loss += t->loss, correct += t->correct;
    for (int k = 0; k < LAYER_KIND_COUNT; k++) { /* thread-seconds, by layer kind */
      layer_cost_t *c = &w->model->cost[k];
      c->compute_sec += t->cost[k].compute_sec, c->comm_sec += t->cost[k].comm_sec;
      c->bytes_sent += t->cost[k].bytes_sent, c->bytes_received += t->cost[k].bytes_received;
    }
    memset(t->cost, 0, sizeof t->cost);
  }
  if (!isfinite(loss)) return worker_step_diverged(w, loss);
  w->epoch_loss_sum += loss;
  w->epoch_samples += (int64_t)count;
  w->epoch_correct += correct;
  double dt = dt_now() - t0;
  if (w->comm) comm_compute_delay(w->comm, dt);
  w->step_compute = dt;
  w->timers.compute += dt;
  return 0;
}
