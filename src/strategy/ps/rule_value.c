/* value:V, the value bound. async, but a push is held back while the
 * change not yet seen by the slowest worker, |w_t - w_{t-d}|_inf, is >= V,
 * and its worker's next pull waits for it. w_{t-d} is the snapshot of the
 * live worker whose last pull is oldest (the versions in use are the
 * workers' snapshots). The slowest worker's own pushes always pass:
 * holding them could never restore the bound. Held pushes are applied in
 * arrival order, all of them at the end of an epoch. The bound is checked
 * per server, on its shard; the run goes on without a stopped worker. */
#include <math.h>
#include <stdlib.h>

#include "strategy/ps/ps_server.h"

typedef struct {
  int64_t arrivals; /* held pushes so far: the next one's arrival number */
} value_t;

static int value_init(ps_server_t *s) {
  if (!(s->rule_state = calloc(1, sizeof(value_t)))) return dt_error("out of memory");
  for (int w = 0; w < s->N; w++) s->workers[w].push.queued = -1;
  return 0;
}

static int value_push(ps_server_t *s, int src, const ps_req_t *req) {
  value_t *v = s->rule_state;
  ps_worker_state_t *ws = &s->workers[src];
  if (ws->push.held)
    return ps_server_reject(s, src, req, "worker %d has a push held back already (pull first)",
                            src);
  if (!ps_server_store_push(s, src, req)) return 0;
  ws->push.held = 1;
  ws->push.queued = v->arrivals++;
  return ps_server_ack(s, src, req);
}

/* PS_PULL_OWN: the worker's next pull waits for its own held push. */
static int value_pull_ready(const ps_server_t *s, int src, const ps_req_t *req) {
  return !(req->flags & PS_PULL_OWN) || !s->workers[src].push.held;
}

/* The live worker whose last pull is oldest. */
static int slowest_worker(const ps_server_t *s) {
  int slow = -1;
  for (int w = 0; w < s->N; w++)
    if (!s->workers[w].dead &&
        (slow < 0 || s->workers[w].pulled_version < s->workers[slow].pulled_version))
      slow = w;
  return slow;
}

static int bound_allows(const ps_server_t *s, int w) {
  int slow = slowest_worker(s);
  if (slow < 0 || s->workers[w].pulled_version <= s->workers[slow].pulled_version) return 1;
  const float *now = s->params, *then = s->workers[slow].snapshot;
  float change = 0;
  for (size_t i = 0; i < s->len; i++) {
    float d = fabsf(now[i] - then[i]);
    if (d > change) change = d;
  }
  return change < (float)s->cfg->schedule_param;
}

/* The held push that came first, or -1. */
static int oldest_held(const ps_server_t *s) {
  int next = -1;
  for (int w = 0; w < s->N; w++) {
    int64_t q = s->workers[w].push.queued;
    if (q >= 0 && (next < 0 || q < s->workers[next].push.queued)) next = w;
  }
  return next;
}

static void apply(ps_server_t *s, int w) {
  s->workers[w].push.queued = -1;
  ps_rule_apply_async(s, w);
}

/* Applies held pushes in arrival order while the bound allows. */
static void value_progress(ps_server_t *s) {
  for (;;) {
    int next = oldest_held(s);
    if (next < 0 || !bound_allows(s, next)) {
      /* the oldest cannot go; a push of the slowest worker still may */
      int slow = slowest_worker(s);
      if (slow < 0 || s->workers[slow].push.queued < 0) return;
      next = slow;
    }
    apply(s, next);
  }
}

static void value_epoch_end(ps_server_t *s) {
  for (int next; (next = oldest_held(s)) >= 0;) apply(s, next);
}

const ps_rule_ops_t ps_rule_value = {
    .pool = 1, .init = value_init, .push = value_push, .pull_ready = value_pull_ready,
    .progress = value_progress, .epoch_end = value_epoch_end};
