/* Synchronous data parallelism through shared memory (--exchange shared
 * --schedule sync; --comm local, whose ranks are threads of one process).
 *
 * Each step every rank reads the others' memory in place instead of
 * sending messages: rank r sums block r (coll_block) of every rank's
 * gradient arena, steps block r of its own parameters with block r of one
 * shared optimizer state, then writes its new block r straight into every
 * other rank's parameters. The optimizer is thus sharded (each rank
 * does 1/P of its work and touches 1/P of its state, as in ZeRO stage 1),
 * and the only data crossing between cores is what must: the others'
 * gradients for this rank's block, and their blocks of the new
 * parameters, once each, in streams. Each rank keeps its own copy of the
 * parameters: sgemm reading one shared arena that another core has just
 * written ran ~20% slower here (measured) than on a private copy.
 *
 * The sum, the step and the push go through the block one 8 KiB chunk at
 * a time, each chunk summed, stepped and pushed while it is in L1: one
 * pass over the block instead of three (measured here on mlp: 235-250 us
 * a step for the three passes, 180-225 us for the one), pushed with
 * plain stores (sum_step_push).
 *
 * With --balance each rank also writes its compute seconds into a shared
 * table before the first barrier, and every rank reads the table before
 * the second (balance.c).
 *
 * Two barriers a step: every gradient is complete before anyone sums it,
 * and every block is stepped and pushed before anyone reads parameters
 * again. Between the two, rank r writes only block r (its own and the
 * others'), and nobody else reads or writes block r. Sums run in rank
 * order and the update rules are element-wise, so the chunks give the
 * bits of three whole passes; runs are bitwise repeatable and equal one
 * worker with a P-times larger batch to rounding. LARS scales each tensor
 * by its norms, which a block does not hold whole: refused. */
#include <stdlib.h>
#include <string.h>

#include "strategy/dp/dp.h"
#include "strategy/balance.h"

typedef struct {
  worker_t *w;
  float *state;                   /* shared optimizer state */
  const float **grads;            /* shared: every rank's gradient arena ... */
  float **params;                 /* ... and parameter arena */
  const float **from;             /* this rank's block of each of them */
  const float **part;             /* one chunk of each of from[] */
  float *sec;                     /* shared, --balance: each rank's compute seconds this step */
  optim_segment_t block;          /* this rank's part of the arena */
  char split[512];                /* --balance: the epoch's samples per rank, for the metrics */
} shared_sync_t;

/* One optimizer state for all ranks, holding rank 0's values (the same as
 * every rank's: all start from the same checkpoint or from zeros). */
static int share_optimizer_state(shared_sync_t *s) {
  optimizer_t *o = s->w->opt;
  comm_t *c = s->w->comm;
  if (!o->nstate) return 0;
  DT_TRY(comm_shared_alloc(c, (size_t)o->nstate * o->n * sizeof(float), (void **)&s->state));
  if (comm_rank(c) == 0)
    for (int i = 0; i < o->nstate; i++) memcpy(s->state + (size_t)i * o->n, o->state[i], o->n * sizeof(float));
  DT_TRY(comm_barrier(c));
  optim_use_state(o, s->state);
  return 0;
}

static int setup(shared_sync_t *s) {
  worker_t *w = s->w;
  model_t *m = w->model;
  comm_t *c = w->comm;
  if (w->opt->cfg.kind == OPTIM_LARS)
    return dt_error("options --optimizer lars and --exchange shared --schedule sync do not "
                    "combine: LARS needs whole tensors, a rank steps a block (use --exchange "
                    "allreduce)");
  DT_TRY(share_optimizer_state(s));
  if (w->balance) DT_TRY(comm_shared_alloc(c, (size_t)w->nranks * sizeof(float), (void **)&s->sec));
  DT_TRY(comm_shared_alloc(c, 2 * (size_t)w->nranks * sizeof(float *), (void **)&s->grads));
  s->params = (float **)(s->grads + w->nranks);
  s->grads[w->rank] = m->grads;
  s->params[w->rank] = m->params;
  coll_block(m->nparams, w->nranks, w->rank, &s->block.off, &s->block.len);
  s->from = calloc((size_t)w->nranks, sizeof *s->from);
  s->part = calloc((size_t)w->nranks, sizeof *s->part);
  if (!s->from || !s->part) return dt_error("out of memory");
  DT_TRY(comm_barrier(c)); /* the tables are complete */
  for (int q = 0; q < w->nranks; q++) s->from[q] = s->grads[q] + s->block.off;
  if (w->rank != 0) memcpy(m->params, s->params[0], m->nparams * sizeof(float));
  return comm_barrier(c); /* rank 0's parameters on every rank */
}

/* Failure-safe: comm_shared_free of the tables returns once every rank is
 * here (or has ended), so no peer still pushes into this rank's
 * parameters or reads its gradients; only then is the shared optimizer
 * state copied back and freed, and the caller may free the arenas. */
static void teardown(shared_sync_t *s) {
  optimizer_t *o = s->w->opt;
  free(s->from);
  free(s->part);
  comm_shared_free(s->w->comm, s->grads);
  comm_shared_free(s->w->comm, s->sec);
  if (s->state && o->state[0] == s->state) {
    for (int i = 0; i < o->nstate; i++) memcpy(o->state_own[i], o->state[i], o->n * sizeof(float));
    optim_use_state(o, NULL);
  }
  comm_shared_free(s->w->comm, s->state);
}

/* Floats of the block summed, stepped and pushed at a time: 8 KiB, so that
 * the chunk of each operand (own and others' gradients, parameters,
 * optimizer state) stays in L1 from the sum to the push. */
enum { CHUNK = 2048 };

/* The others' gradients summed into this rank's block, the block stepped
 * and pushed into every other rank's parameters, chunk by chunk.
 * Pushing is the cheap direction: pulling the others' blocks after the
 * barrier read lines another core had just written and wrote lines it
 * had just read, 2-6x slower per byte here (measured on 512 KiB halves).
 * The push is a plain copy (memmove): streaming stores (a copy
 * around this core's caches) were 3-5% faster for the whole-block push of 2026-11-24, but in 8 KiB
 * chunks they made steps ~1% slower than the whole-block push, and plain
 * copies ~10% faster (mlp, 2 workers, interleaved pairs, 2026-11-26). */
static void sum_step_push(shared_sync_t *s, float lr) {
  worker_t *w = s->w;
  model_t *m = w->model;
  const size_t end = s->block.off + s->block.len;
  for (size_t off = s->block.off; off < end; off += CHUNK) {
    optim_segment_t part = {off, end - off < CHUNK ? end - off : CHUNK};
    for (int q = 0; q < w->nranks; q++) s->part[q] = s->from[q] + (off - s->block.off);
    kern_sum(part.len, w->nranks, s->part, m->grads + off);
    optim_step_segments(w->opt, m->params, m->grads, &part, 1, lr);
    for (int q = 0; q < w->nranks; q++)
      if (q != w->rank) kern_copy(part.len, m->params + off, s->params[q] + off);
  }
}

static int evaluate(void *state, epoch_report_t *r) {
  shared_sync_t *s = state;
  return dp_evaluate(s->w, r, s->split, sizeof s->split);
}

static int train_step(void *state, int epoch, int64_t k) {
  shared_sync_t *s = state;
  worker_t *w = s->w;
  size_t begin, count, global;
  worker_step_slice(w, k, &begin, &count, &global);
  if (worker_compute_gradient(w, begin, count, (int)global, NULL) != 0) return -1;
  if (s->sec) s->sec[w->rank] = (float)w->step_compute;
  double t0 = dt_now();
  if (comm_barrier(w->comm) != 0) return -1; /* every gradient is complete */
  if (s->sec) balance_observe(w->balance, s->sec); /* read before anyone's next write */
  /* the optimizer's arithmetic is inside the exchange now: its time counts as
   * exchange, not compute */
  sum_step_push(s, worker_begin_update(w));
  if (comm_barrier(w->comm) != 0) return -1; /* every block is stepped and pushed */
  worker_comm_since(w, t0);
  return 0;
}

int strategy_shared_sync(worker_t *w) {
  shared_sync_t s = {.w = w};
  int rc = setup(&s);
  driver_ops_t ops = {.step = train_step, .evaluate = evaluate};
  /* peers waiting on this rank stop now, not at their timeout (driver_run
   * fails the world for its own failures) */
  if (rc != 0) comm_fail(w->comm);
  else rc = driver_run(w, &ops, &s);
  teardown(&s);
  return rc;
}

static int shared_sync_matches(const train_config_t *c) {
  return train_axes(c, OPTIMIZATION_CENTRAL, EXCHANGE_SHARED, SCHEDULE_SYNC);
}

/* The step as data: nothing goes on a wire (0 bytes, as the transport
 * counts). Each rank's passes, the barrier, its block's sum and step
 * (coll_block: the update of len parameters, reading every rank's
 * gradient block), the barrier after the push. */
static int shared_sync_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int P = c->workers;
  for (int r = 0; r < P; r++) {
    size_t off, len;
    coll_block(m->nparams, P, r, &off, &len);
    int prev = step_add_passes(out, m, r, c->batch, NULL);
    if (prev != STEP_FAILED)
      prev = step_add(out, (step_task_t){TASK_SYNC, r, -1, .peer = -1, .group = P, .after = prev});
    if (prev != STEP_FAILED)
      prev = step_add(out, (step_task_t){TASK_UPDATE, r, -1, len, c->batch, .peer = -1, .after = prev});
    if (prev != STEP_FAILED)
      prev = step_add(out, (step_task_t){TASK_SYNC, r, -1, .peer = -1, .group = P, .after = prev});
    if (prev == STEP_FAILED) return -1;
  }
  return 0;
}

static int shared_refuse(const train_config_t *c) {
  if (c->optimization != OPTIMIZATION_CENTRAL || c->exchange != EXCHANGE_SHARED ||
      c->schedule == SCHEDULE_SYNC || c->schedule == SCHEDULE_ASYNC || c->schedule == SCHEDULE_SOFT)
    return 0;
  return dt_error("options --schedule %s and --exchange shared do not combine: shared "
                  "memory is --schedule sync (one arena, sharded steps) or async (Hogwild) "
                  "(use --exchange ps:K for %s)",
                  schedule_name(c->schedule), schedule_name(c->schedule));
}

const strategy_t STRATEGY_SHARED_SYNC = {
    .name = "synchronous data parallelism (shared memory)",
    .paper = "one arena, each rank steps its shard (ZeRO-1's split, in shared memory)",
    .axes = "--schedule sync --exchange shared",
    .optimization = OPTIMIZATION_CENTRAL,
    .compress = COMPRESS_REFUSED,
    .no_compress = "not with --exchange shared (shared sync): the ranks sum one shared arena in "
                   "place and nothing goes on a wire; use --exchange allreduce:ALGO",
    .matches = shared_sync_matches,
    .refuse = shared_refuse,
    .run = strategy_shared_sync,
    .describe_step = shared_sync_describe_step,
};
