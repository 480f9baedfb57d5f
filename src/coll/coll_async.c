/* coll_async: collectives that overlap the caller's compute.
 *
 * Requests run one at a time, in submission order, each by whichever
 * thread gets to it first: a progress thread takes them while the caller
 * computes; once the caller waits (it has nothing else to do) it runs the
 * ones not yet started itself. The last bucket of a backward pass is thus
 * reduced by the compute thread without a hand-off, and only a request
 * that is already running costs the caller a wait. Waking a sleeping
 * thread costs 50-400 us on a VM, so the caller spins (yielding its core,
 * which the progress thread may need) before it sleeps.
 * The queue is a fixed ring allocated once; submitting never allocates. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"

#define ASYNC_QUEUE 1024

typedef enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER } op_kind_t;

typedef struct {
  op_kind_t kind;
  allreduce_algo_t algo;
  float *buf;
  size_t count;
} async_op_t;

struct coll_async {
  coll_ctx_t *ctx;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  async_op_t q[ASYNC_QUEUE];
  size_t head, tail;          /* ops [head, tail) not started yet */
  atomic_size_t done;         /* ops finished (submitted - done = in flight) */
  atomic_int running;         /* a thread is running an op */
  int stop, failed;
  char error[512];
  double busy;
};

/* Waits of the progress thread spin this long before sleeping: longer, and
 * they take the core that the rank's compute thread needs (measured, mlp on
 * 2 workers and 2 cores: 49-51k samples/s with 20 us, 38-45k with 5 ms). */
#define PROGRESS_SPIN 20e-6
/* The caller, waiting, yields its core this long before it sleeps. */
#define CALLER_SPIN 5e-3

static int run_op(coll_ctx_t *ctx, const async_op_t *op) {
  switch (op->kind) {
  case OP_REDUCE_SCATTER: return reduce_scatter_ring_inplace(ctx, op->buf, op->count);
  case OP_ALLGATHER: return allgather_ring(ctx, op->buf, op->count);
  default: return allreduce(ctx, op->algo, op->buf, op->count);
  }
}

/* Runs the oldest pending op; called and returns with mu held. */
static void run_next(coll_async_t *a) {
  async_op_t op = a->q[a->head % ASYNC_QUEUE];
  a->head++;
  atomic_store(&a->running, 1);
  int skip = a->failed;
  pthread_mutex_unlock(&a->mu);
  double t0 = dt_now();
  int rc = skip ? 0 : run_op(a->ctx, &op);
  double dt = dt_now() - t0;
  pthread_mutex_lock(&a->mu);
  a->busy += dt;
  if (rc != 0 && !a->failed) {
    a->failed = 1;
    snprintf(a->error, sizeof a->error, "%s", dt_errmsg());
  }
  atomic_store(&a->running, 0);
  atomic_fetch_add(&a->done, 1);
  pthread_cond_broadcast(&a->cv);
}

static void *progress_main(void *arg) {
  coll_async_t *a = arg;
  comm_set_wait_spin(coll_ctx_comm(a->ctx), PROGRESS_SPIN);
  pthread_mutex_lock(&a->mu);
  for (;;) {
    while ((a->head == a->tail || atomic_load(&a->running)) && !a->stop)
      pthread_cond_wait(&a->cv, &a->mu);
    if (a->stop) break;
    run_next(a);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

int coll_async_new(coll_ctx_t *ctx, coll_async_t **out) {
  coll_async_t *a = calloc(1, sizeof *a);
  if (!a) return dt_error("out of memory");
  a->ctx = ctx;
  atomic_init(&a->done, 0);
  atomic_init(&a->running, 0);
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  if (pthread_create(&a->thread, NULL, progress_main, a) != 0) {
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
    return dt_error("cannot start the communication progress thread");
  }
  *out = a;
  return 0;
}

static void submit(coll_async_t *a, async_op_t op) {
  pthread_mutex_lock(&a->mu);
  while (a->tail - atomic_load(&a->done) >= ASYNC_QUEUE) pthread_cond_wait(&a->cv, &a->mu);
  a->q[a->tail % ASYNC_QUEUE] = op;
  a->tail++;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

void coll_async_allreduce(coll_async_t *a, allreduce_algo_t algo, float *buf, size_t count) {
  submit(a, (async_op_t){OP_ALLREDUCE, algo, buf, count});
}

void coll_async_reduce_scatter(coll_async_t *a, float *buf, size_t count) {
  submit(a, (async_op_t){OP_REDUCE_SCATTER, ALLREDUCE_RING, buf, count});
}

void coll_async_allgather(coll_async_t *a, float *buf, size_t count) {
  submit(a, (async_op_t){OP_ALLGATHER, ALLREDUCE_RING, buf, count});
}

/* Spins, yielding the core, until the running op ends or `seconds` pass. */
static void spin_while_running(coll_async_t *a, double seconds) {
  double until = dt_now() + seconds;
  while (atomic_load(&a->running) && dt_now() < until) sched_yield();
}

int coll_async_wait(coll_async_t *a, double *busy_sec) {
  pthread_mutex_lock(&a->mu);
  while (atomic_load(&a->done) != a->tail) {
    if (!atomic_load(&a->running) && a->head != a->tail) {
      run_next(a);
      continue;
    }
    pthread_mutex_unlock(&a->mu);
    spin_while_running(a, CALLER_SPIN);
    pthread_mutex_lock(&a->mu);
    if (atomic_load(&a->running)) pthread_cond_wait(&a->cv, &a->mu);
  }
  int failed = a->failed;
  if (busy_sec) *busy_sec = a->busy;
  a->busy = 0;
  if (failed) dt_error("%s", a->error);
  pthread_mutex_unlock(&a->mu);
  return failed ? -1 : 0;
}

void coll_async_free(coll_async_t *a) {
  if (!a) return;
  pthread_mutex_lock(&a->mu);
  a->stop = 1;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->thread, NULL);
  pthread_mutex_destroy(&a->mu);
  pthread_cond_destroy(&a->cv);
  free(a);
}
