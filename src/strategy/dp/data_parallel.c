/* Synchronous data parallelism (Horovod, PyTorch DDP, FireCaffe, a single
 * parameter server as gather+broadcast): every rank computes the gradient
 * of its slice of the global batch, the gradients are summed by allreduce
 * over buckets of the gradient arena, and every rank applies the same
 * update. With overlap, a bucket's allreduce starts as soon as backprop has
 * produced all of its gradients (the arena is in layer order and backprop
 * runs last layer first, so buckets are cut from the end). One rank is the
 * plain single-worker trainer.
 *
 * The summing is the gradient reducer's (reducer.c: buckets, overlap,
 * priority order, ZeRO-1 sharding); this file is the step and the
 * strategy, and --balance's exchange of step times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/dp/balance.h"
#include "strategy/dp/dp.h"
#include "strategy/dp/reducer.h"

typedef struct {
  worker_t *w;
  reducer_t *reducer;
  float *sec;               /* --balance: every rank's compute seconds this step */
  char split[512];          /* --balance: the epoch's samples per rank, for the metrics */
  char extra[1024];         /* the metrics' strategy fields: split and compression */
} dp_state_t;

/* --balance: every rank's compute seconds, in one small allreduce of a
 * vector that is zero but for this rank's entry (so the sum is exact). */
static int share_step_times(dp_state_t *s) {
  worker_t *w = s->w;
  memset(s->sec, 0, (size_t)w->nranks * sizeof *s->sec);
  s->sec[w->rank] = (float)w->step_compute;
  double t0 = dt_now();
  DT_TRY(allreduce(w->coll, ALLREDUCE_TREE, s->sec, (size_t)w->nranks));
  worker_comm_since(w, t0);
  balance_observe(w->balance, s->sec);
  return 0;
}

static int plan_balance(dp_state_t *s) {
  worker_t *w = s->w;
  if (!w->balance) return 0;
  if (!(s->sec = calloc((size_t)w->nranks, sizeof *s->sec))) return dt_error("out of memory");
  return 0;
}

static int train_step(void *state, int epoch, int64_t k) {
  dp_state_t *s = state;
  worker_t *w = s->w;
  size_t begin, count, global;
  worker_step_slice(w, k, &begin, &count, &global);
  step_hooks_t hooks = reducer_begin_step(s->reducer, (int)count);
  if (worker_compute_gradient(w, begin, count, (int)global,
                              reducer_overlaps(s->reducer) ? &hooks : NULL) != 0)
    return -1;
  if (reducer_wait(s->reducer) != 0) return -1;
  if (s->sec && !reducer_defers(s->reducer) && share_step_times(s) != 0) return -1;
  return reducer_apply(s->reducer, k);
}

int dp_evaluate(worker_t *w, epoch_report_t *r, char *split, size_t cap) {
  if (w->balance) {
    balance_json(w->balance, r->steps, split, cap);
    r->extra_json = split;
  }
  return worker_epoch_figures(w, r, NULL, 0);
}

static int evaluate(void *state, epoch_report_t *r) {
  dp_state_t *s = state;
  char cx[512];
  reducer_compress_json(s->reducer, r, cx, sizeof cx);
  int rc = dp_evaluate(s->w, r, s->split, sizeof s->split);
  if (cx[0]) {
    snprintf(s->extra, sizeof s->extra, "%s%s%s", r->extra_json ? r->extra_json : "",
             r->extra_json ? "," : "", cx);
    r->extra_json = s->extra;
  }
  return rc;
}

int strategy_data_parallel(worker_t *w) {
  dp_state_t s = {.w = w};
  int rc = reducer_new(w, &s.reducer);
  if (rc == 0) rc = plan_balance(&s);
  driver_ops_t ops = {.step = train_step, .evaluate = evaluate};
  if (rc == 0) rc = driver_run(w, &ops, &s);
  reducer_free(s.reducer);
  free(s.sec);
  return rc;
}
