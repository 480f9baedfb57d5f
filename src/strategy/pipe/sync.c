/* The synchronous pipeline engine: the flush schedules (GPipe, 1F1B,
 * interleaved 1F1B) on the shared core (engine.h). A step runs the
 * schedule's list for this rank: its M micro-batches forward and backward,
 * their gradients accumulated in the chunks, then REDUCE -- the step's
 * sends delivered, the gradients summed over the replicas of the stage --
 * and STEP, one worker's update of the rank's parameters (the flush: every
 * stage updates after every backward, so all compute the gradient of the
 * whole batch on one version of the weights). */
#include <stdlib.h>

#include "strategy/pipe/engine.h"

typedef struct {
  pipe_engine_t e;            /* the shared core (first: the hooks are given &e) */
  pipe_schedule_t sched;      /* the step's program with M micro-batches */
  pipe_schedule_t short_sched; /* and with the m < M of a short last step, built when first met */
} sync_engine_t;

/* A step's program with m micro-batches, checked. */
static int build_schedule(const pipe_engine_t *e, int m, pipe_schedule_t *sc) {
  pipe_schedule_free(sc);
  DT_TRY(pipe_schedule_build(e->kind, e->P, e->V, m, 0, sc));
  return pipe_schedule_check(sc);
}

/* The program of a step with m micro-batches: M's, or the short last
 * step's, built the first time that m is met (one schedule for each m up
 * to M would take memory and time as M squared). */
static int step_schedule(sync_engine_t *y, int m, const pipe_schedule_t **out) {
  if (m != y->e.M && y->short_sched.M != m) DT_TRY(build_schedule(&y->e, m, &y->short_sched));
  *out = m == y->e.M ? &y->sched : &y->short_sched;
  return 0;
}

static int sync_setup(pipe_engine_t *e) {
  sync_engine_t *y = (sync_engine_t *)e;
  return build_schedule(e, e->M, &y->sched);
}

static void sync_teardown(pipe_engine_t *e) {
  sync_engine_t *y = (sync_engine_t *)e;
  pipe_schedule_free(&y->sched);
  pipe_schedule_free(&y->short_sched);
}

static int sync_step(pipe_engine_t *e, int64_t k, int m) {
  sync_engine_t *y = (sync_engine_t *)e;
  if (m == 0) { /* a replica with no sample: zero gradients, still in the sum */
    for (int v = 0; v < e->V; v++) {
      const stage_t *st = e->chunk[v].st;
      kern_zero(st->param_len, e->w->model->grads + st->param_off);
    }
    if (e->tie_len && e->s == e->tie_head) kern_zero(e->tie_len, e->w->model->grads + e->tie_off);
    DT_TRY(pipe_execute(e, (pipe_instr_t){PIPE_REDUCE, -1, 0}));
    return pipe_execute(e, (pipe_instr_t){PIPE_STEP, -1, 0});
  }
  for (int i = 0; i < m; i++) e->slot_n[i] = (int)e->mb_len[i];
  const pipe_schedule_t *sc;
  DT_TRY(step_schedule(y, m, &sc));
  return pipe_run_list(e, sc->prog[e->s], sc->len[e->s]);
}

/* REDUCE ends the step: its sends delivered first (counted as
 * communication), then the sum over the replicas. */
static int sync_reduce(pipe_engine_t *e) {
  double t0 = dt_now();
  DT_TRY(pipe_wait_sends(e));
  return pipe_reduce(e, t0);
}

/* STEP: one worker's update (it advances w->step and the lr schedule). */
static void sync_update(pipe_engine_t *e, int unit) {
  worker_apply_update_segs(e->w, e->segs, e->nsegs);
}

static const pipe_ops_t SYNC_OPS = {
    .setup = sync_setup,
    .teardown = sync_teardown,
    .step = sync_step,
    .reduce = sync_reduce,
    .update = sync_update,
};

int pipe_sync_run(worker_t *w) {
  sync_engine_t *y = calloc(1, sizeof *y);
  if (!y) return dt_error("out of memory");
  /* a slot per micro-batch: the schedule names them 0 .. M - 1 */
  int rc = pipe_engine_run(&y->e, w, &SYNC_OPS, w->cfg->pipe.micro_batches);
  free(y);
  return rc;
}
