/* coll_async: collectives that overlap the caller's compute.
 *
 * Requests run one at a time, each by whichever thread gets to it first: a
 * progress thread takes them while the caller computes; once the caller
 * waits (it has nothing else to do) it runs the ones not yet started
 * itself. The last bucket of a backward pass is thus reduced by the
 * compute thread without a hand-off, and only a request that is already
 * running costs the caller a wait. Waking a sleeping thread costs 50-400
 * us on a VM, so the caller spins (yielding its core, which the progress
 * thread may need) before it sleeps.
 *
 * Order. FIFO runs requests in submission order, which is the same on
 * every rank. PRIORITY runs the most urgent request first (ByteScheduler,
 * P3): the one the next forward pass needs soonest. Which requests a rank
 * has been given by then depends on timing, so before each request the
 * ranks agree on one, as Horovod's coordinator does: each says how many
 * it holds that have not run (all ranks have run the same ones, and every
 * rank submits the same sequence, so what a rank holds is a prefix of it),
 * and all pick the most urgent of the shortest prefix. That costs one
 * small allgather per request, so callers cut large buffers into parts
 * of a few hundred KiB.
 *
 * The queue is a fixed ring of slots allocated once; submitting never
 * allocates.
 *
 * Bytes on the wire per rank: those of the requests (their own files'
 * formulas); in PRIORITY order, plus before each request the agreement,
 * an allgather_ring of one float per rank: (P-1) x 4 bytes sent and
 * received. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "dtrain/coll_async.h"

#define ASYNC_QUEUE 1024

typedef enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_CALL } op_kind_t;
typedef enum { SLOT_FREE, SLOT_PENDING, SLOT_RUNNING } slot_state_t;

typedef struct {
  op_kind_t kind;
  allreduce_algo_t algo;
  float *buf;
  size_t count;
  int priority;
  slot_state_t state;
  coll_async_fn fn;       /* OP_CALL */
  void *arg;
} async_op_t;

struct coll_async {
  coll_ctx_t *ctx;
  coll_order_t order;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  async_op_t q[ASYNC_QUEUE];
  size_t head, tail;          /* requests [head, tail) are not all finished; a request's
                                 ticket is its index, its slot q[ticket % ASYNC_QUEUE] */
  size_t nrun;                /* requests started (the same count on every rank) */
  atomic_size_t done;         /* requests finished */
  atomic_int running;         /* a thread is running (or agreeing on) a request */
  int stop, failed;
  char error[512];
  double busy;
  float *held;                /* PRIORITY: each rank's count of requests not run */
  dt_trace_t *trace;          /* the creating rank's trace (dt_trace), or NULL */
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
  case OP_CALL: return op->fn(ctx, op->arg);
  default: return allreduce(ctx, op->algo, op->buf, op->count);
  }
}

static int has_pending(const coll_async_t *a) { return a->nrun < a->tail; }

/* The agreement's message: one float a rank, each its count of requests. */
static size_t agree_floats(int P) { return (size_t)P; }

void coll_async_agree_bytes(coll_order_t order, int P, int rank, size_t *sent, size_t *received) {
  *sent = *received = 0;
  if (order == COLL_ORDER_PRIORITY) coll_allgather_bytes(P, rank, agree_floats(P), sent, received);
}

/* The number of submitted requests every rank holds: the shortest prefix.
 * Called with mu released and `running` set, so one thread a rank agrees. */
static int agree_on_prefix(coll_async_t *a, size_t tail, size_t *agreed) {
  comm_t *c = coll_ctx_comm(a->ctx);
  int n = comm_size(c), r = comm_rank(c);
  memset(a->held, 0, agree_floats(n) * sizeof *a->held);
  a->held[r] = (float)(tail - a->nrun); /* < ASYNC_QUEUE: exact in a float */
  if (allgather_ring(a->ctx, a->held, agree_floats(n)) != 0) return -1;
  float least = a->held[0];
  for (int i = 1; i < n; i++) least = a->held[i] < least ? a->held[i] : least;
  *agreed = a->nrun + (size_t)least;
  return 0;
}

/* The pending request to run next among tickets below `limit`. */
static async_op_t *pick(coll_async_t *a, size_t limit) {
  async_op_t *best = NULL;
  for (size_t t = a->head; t < limit; t++) {
    async_op_t *op = &a->q[t % ASYNC_QUEUE];
    if (op->state != SLOT_PENDING) continue;
    if (a->order == COLL_ORDER_FIFO) return op;
    if (!best || op->priority < best->priority) best = op;
  }
  return best;
}

static void fail(coll_async_t *a, const char *msg) {
  if (a->failed) return;
  a->failed = 1;
  snprintf(a->error, sizeof a->error, "%s", msg);
}

/* Runs one pending request; called and returns with mu held. */
static void run_next(coll_async_t *a) {
  atomic_store(&a->running, 1);
  size_t limit = a->tail;
  if (a->order == COLL_ORDER_PRIORITY && !a->failed) {
    pthread_mutex_unlock(&a->mu);
    int rc = agree_on_prefix(a, limit, &limit);
    pthread_mutex_lock(&a->mu);
    if (rc != 0) fail(a, dt_errmsg());
  }
  async_op_t *op = pick(a, a->failed ? a->tail : limit);
  op->state = SLOT_RUNNING;
  a->nrun++;
  async_op_t copy = *op;
  int skip = a->failed;
  pthread_mutex_unlock(&a->mu);
  double t0 = dt_now();
  int rc = skip ? 0 : run_op(a->ctx, &copy);
  double dt = dt_now() - t0;
  pthread_mutex_lock(&a->mu);
  a->busy += dt;
  if (rc != 0) fail(a, dt_errmsg());
  op->state = SLOT_FREE;
  while (a->head < a->tail && a->q[a->head % ASYNC_QUEUE].state == SLOT_FREE) a->head++;
  atomic_store(&a->running, 0);
  atomic_fetch_add(&a->done, 1);
  pthread_cond_broadcast(&a->cv);
}

static void *progress_main(void *arg) {
  coll_async_t *a = arg;
  dt_trace = a->trace;
  comm_set_wait_spin(coll_ctx_comm(a->ctx), PROGRESS_SPIN);
  pthread_mutex_lock(&a->mu);
  for (;;) {
    while ((!has_pending(a) || atomic_load(&a->running)) && !a->stop)
      pthread_cond_wait(&a->cv, &a->mu);
    if (a->stop) break;
    run_next(a);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

int coll_async_new(coll_ctx_t *ctx, coll_order_t order, coll_async_t **out) {
  coll_async_t *a = calloc(1, sizeof *a);
  if (!a) return dt_error("out of memory");
  a->ctx = ctx;
  a->order = order;
  a->trace = dt_trace;
  if (order == COLL_ORDER_PRIORITY &&
      !(a->held = calloc(agree_floats(comm_size(coll_ctx_comm(ctx))), sizeof *a->held))) {
    free(a);
    return dt_error("out of memory");
  }
  atomic_init(&a->done, 0);
  atomic_init(&a->running, 0);
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  if (pthread_create(&a->thread, NULL, progress_main, a) != 0) {
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->held);
    free(a);
    return dt_error("cannot start the communication progress thread");
  }
  *out = a;
  return 0;
}

static size_t submit(coll_async_t *a, async_op_t op) {
  pthread_mutex_lock(&a->mu);
  while (a->tail - a->head >= ASYNC_QUEUE) pthread_cond_wait(&a->cv, &a->mu);
  size_t ticket = a->tail++;
  op.state = SLOT_PENDING;
  a->q[ticket % ASYNC_QUEUE] = op;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  return ticket;
}

size_t coll_async_allreduce(coll_async_t *a, allreduce_algo_t algo, float *buf, size_t count,
                            int priority) {
  return submit(a, (async_op_t){.kind = OP_ALLREDUCE, .algo = algo, .buf = buf, .count = count,
                                .priority = priority});
}

size_t coll_async_reduce_scatter(coll_async_t *a, float *buf, size_t count, int priority) {
  return submit(a, (async_op_t){.kind = OP_REDUCE_SCATTER, .algo = ALLREDUCE_RING, .buf = buf,
                                .count = count, .priority = priority});
}

size_t coll_async_allgather(coll_async_t *a, float *buf, size_t count, int priority) {
  return submit(a, (async_op_t){.kind = OP_ALLGATHER, .algo = ALLREDUCE_RING, .buf = buf,
                                .count = count, .priority = priority});
}

size_t coll_async_call(coll_async_t *a, coll_async_fn fn, void *arg, int priority) {
  return submit(a, (async_op_t){.kind = OP_CALL, .fn = fn, .arg = arg, .priority = priority});
}

/* Spins, yielding the core, until the running request ends or `seconds`
 * pass. `done`: the count of finished requests when the caller looked; the
 * thread that runs requests starts the next one at once, so a waiter that
 * watched `running` alone would miss the end of the one it waits for. */
static void spin_while_running(coll_async_t *a, size_t done, double seconds) {
  double until = dt_now() + seconds;
  while (atomic_load(&a->running) && atomic_load(&a->done) == done && dt_now() < until)
    sched_yield();
}

/* Whether request `ticket` has finished. Slots [head, tail) hold their
 * own requests (a slot is reused only once head has passed it). */
static int finished(const coll_async_t *a, size_t ticket) {
  return ticket < a->head || a->q[ticket % ASYNC_QUEUE].state == SLOT_FREE;
}

/* Runs or waits for requests until `ticket` has finished; called and
 * returns with mu held. */
static void wait_for(coll_async_t *a, size_t ticket) {
  while (!finished(a, ticket)) {
    if (!atomic_load(&a->running) && has_pending(a)) {
      run_next(a);
      continue;
    }
    size_t done = atomic_load(&a->done);
    pthread_mutex_unlock(&a->mu);
    spin_while_running(a, done, CALLER_SPIN);
    pthread_mutex_lock(&a->mu);
    if (atomic_load(&a->running) && atomic_load(&a->done) == done) pthread_cond_wait(&a->cv, &a->mu);
  }
}

static int report(coll_async_t *a) {
  int failed = a->failed;
  if (failed) dt_error("%s", a->error);
  pthread_mutex_unlock(&a->mu);
  return failed ? -1 : 0;
}

int coll_async_wait_one(coll_async_t *a, size_t ticket) {
  pthread_mutex_lock(&a->mu);
  wait_for(a, ticket);
  return report(a);
}

int coll_async_wait(coll_async_t *a, double *busy_sec) {
  pthread_mutex_lock(&a->mu);
  while (a->head < a->tail) wait_for(a, a->head);
  if (busy_sec) *busy_sec = a->busy;
  a->busy = 0;
  return report(a);
}

double coll_async_take_busy(coll_async_t *a) {
  pthread_mutex_lock(&a->mu);
  double busy = a->busy;
  a->busy = 0;
  pthread_mutex_unlock(&a->mu);
  return busy;
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
  free(a->held);
  free(a);
}
