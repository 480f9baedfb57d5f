/* The epoch/step driver: the one loop every strategy runs on (worker.h).
 * A strategy gives its step, its evaluation and, where it needs them, the
 * moments around them as hooks; the driver owns the epochs, --max-steps,
 * the progress line, the epoch's timing, the report and the checkpoint
 * (through worker_report_epoch), and the final "done" line. */
#include <string.h>

#include "strategy/worker.h"

/* Whether the run has taken its --max-steps (the driver's own limit). */
static int step_limit_reached(const worker_t *w, const driver_ops_t *ops) {
  return !ops->open_ended && w->cfg->max_steps && w->step >= w->cfg->max_steps;
}

/* The epoch's steps; *taken gets how many ran. Returns DRIVE_NEXT when the
 * epoch ran out of steps, or what the step hook ended it with. */
static int run_steps(worker_t *w, const driver_ops_t *ops, void *st, int epoch, int64_t *taken) {
  int64_t k = 0;
  int rc = DRIVE_NEXT;
  for (; ops->open_ended || k < w->steps_per_epoch; k++) {
    if (step_limit_reached(w, ops)) break;
    double t0 = 0;
    if (dt_trace) trace_set_step(dt_trace, w->step), t0 = dt_now();
    rc = ops->step(st, epoch, k);
    if (dt_trace) trace_slice(dt_trace, TRACE_STEP, "step", k, t0, dt_now());
    if (rc != DRIVE_NEXT) break;
    if (!ops->open_ended) worker_progress(w, epoch, k, w->steps_per_epoch);
    if (!ops->open_ended && worker_step_checkpoint_due(w, k, w->step) &&
        worker_checkpoint_step(w, epoch, k) != 0) {
      rc = -1;
      break;
    }
  }
  *taken = k;
  return rc;
}

/* The epoch's training traffic on this rank, from the transport's
 * counters (they include every communicator split from the rank's), and
 * its layers' costs, before the evaluation adds its passes. */
static void count_bytes(worker_t *w, comm_bytes_t b0) {
  comm_bytes_t b1 = comm_bytes(w->comm);
  w->timers.bytes_sent = b1.sent - b0.sent;
  w->timers.bytes_received = b1.received - b0.received;
  memcpy(w->timers.layers, w->model->cost, sizeof w->timers.layers);
  w->run_bytes_sent += w->timers.bytes_sent;
  w->run_bytes_received += w->timers.bytes_received;
}

/* What the driver knows of an epoch before the strategy's evaluation:
 * its timing and, for steps of the global batch, its throughput. */
static void fill_report(worker_t *w, epoch_report_t *r, int epoch, int64_t taken, double train_sec) {
  size_t samples = taken >= w->steps_per_epoch ? w->train->n - w->epoch_offset
                                               : (size_t)taken * w->cfg->batch * w->nranks;
  *r = (epoch_report_t){.epoch = epoch, .steps = taken, .epoch_sec = train_sec, .timers = w->timers};
  r->timers.wait = -1; /* not measured, unless the evaluation does (worker_epoch_figures) */
  /* Waits on overlapped exchanges include the hand-off to the
   * communication thread (its wake-up, slow on a loaded host), which the
   * thread's own busy time does not: communication took at least as long
   * as the compute waited for it. */
  if (r->timers.comm < r->timers.comm_exposed) r->timers.comm = r->timers.comm_exposed;
  r->lr = lr_at(&w->sched, w->step > 0 ? w->step - 1 : 0);
  r->samples = (double)samples;
  r->samples_per_sec = train_sec > 0 ? r->samples / train_sec : 0;
}

/* 0 when the epoch was reported, DRIVE_SKIP when this rank has nothing
 * to report for it, -1 on error. */
static int report_epoch(worker_t *w, const driver_ops_t *ops, void *st, epoch_report_t *r) {
  double eval_t0 = dt_now();
  int rc = ops->evaluate(st, r);
  if (dt_trace) trace_slice(dt_trace, TRACE_EVAL, "evaluate", r->epoch, eval_t0, dt_now());
  if (rc != 0) return rc == DRIVE_SKIP ? DRIVE_SKIP : -1;
  if (r->eval_sec == 0) r->eval_sec = dt_now() - eval_t0;
  rc = ops->report ? ops->report(st, r) : worker_report_epoch(w, r);
  if (ops->after_report) ops->after_report(st);
  return rc;
}

static int drive(worker_t *w, const driver_ops_t *ops, void *st) {
  const train_config_t *cfg = w->cfg;
  epoch_report_t r, last = {0};
  int have_report = 0;
  double run_t0 = dt_now(), samples = 0;
  for (int epoch = w->first_epoch; epoch < cfg->epochs; epoch++) {
    double t0 = dt_now();
    worker_begin_epoch(w, epoch);
    if (ops->begin_epoch && ops->begin_epoch(st, epoch) != 0) return -1;
    comm_bytes_t b0 = comm_bytes(w->comm);
    int64_t taken;
    int rc = run_steps(w, ops, st, epoch, &taken);
    if (rc < 0) return dt_error_prefix("epoch %d: ", epoch + 1);
    if (rc == DRIVE_STOPPED) return DRIVE_STOPPED;
    int end = ops->end_epoch ? ops->end_epoch(st, epoch) : 0;
    if (end < 0) return dt_error_prefix("epoch %d: ", epoch + 1);
    if (end == DRIVE_RUN_END) rc = DRIVE_RUN_END;
    count_bytes(w, b0);
    fill_report(w, &r, epoch, taken, dt_now() - t0);
    int reported = report_epoch(w, ops, st, &r);
    if (reported < 0) return -1;
    if (reported == 0) last = r, have_report = 1, samples += r.samples;
    if (rc == DRIVE_RUN_END || step_limit_reached(w, ops) || r.budget_spent) break;
  }
  if (ops->end_run && ops->end_run(st) != 0) return -1;
  return worker_report_done(w, have_report ? &last : NULL, samples, dt_now() - run_t0);
}

int driver_run(worker_t *w, const driver_ops_t *ops, void *st) {
  int rc = drive(w, ops, st);
  /* a failed rank fails its world before the strategy's teardown, which may
   * wait on its peers (allreduce:shm's table): they stop now, not at their
   * timeout, and a straggler's emulated sleep ends with them */
  if (rc < 0 && w->comm) comm_fail(w->comm);
  return rc;
}

double worker_comm_since(worker_t *w, double t0) {
  double dt = dt_now() - t0;
  if (dt_trace) trace_slice(dt_trace, TRACE_WAIT, "blocking exchange", 0, t0, t0 + dt);
  w->timers.comm += dt;
  w->timers.comm_exposed += dt;
  return dt;
}
