/* The clock rules: ssp:S, stale synchronous parallel (Ho et al. 2013, as
 * the taxonomy states it), and sync, which is ssp:0.
 *
 * Worker w's c-th push has clock c. A pull by a worker at clock t waits
 * until the slowest worker has pushed clock t - S - 1, and may then see
 * other workers' updates up to clock t + S - 1, never later: a push of
 * clock c is applied as soon as c < (slowest clock) + S, and held back
 * until then. Pushes released together (the last push of a clock under
 * sync; held-back ones when the slowest worker moves) are summed in worker
 * order, as allreduce:naive sums, and make one optimizer step with lr(c);
 * a push applicable on arrival makes a step of its own. So ssp:0 is sync
 * bit for bit, and with S >= 1 and no straggler the server behaves as
 * async does. Every clock needs every worker: the run cannot go on
 * without one. */
#include "strategy/ps/ps_server.h"

static int bound(const ps_server_t *s) {
  return s->cfg->schedule == SCHEDULE_SSP ? (int)s->cfg->schedule_param : 0;
}

static int64_t slowest_clock(const ps_server_t *s) { return ps_server_slowest_clock(s); }

static int ssp_init(ps_server_t *s) {
  for (int w = 0; w < s->N; w++)
    s->workers[w].push.clock = s->version; /* resumed: sync and ssp checkpoints count clocks */
  return 0;
}

/* Worker w's held push and its push of the next clock change places.
 * That second push exists only on a shard taken over: the worker saw the
 * dead primary apply a clock whose other pushes this copy never got, and
 * pushed the next one; written over the held push, it would replace that
 * clock's gradient in the sum (the weights then differ from an undisturbed
 * run's), so it waits here until the held one is applied. */
static void swap_ahead(ps_worker_state_t *ws) {
  float *g = ws->push.grad;
  int64_t v = ws->push.version, b = ws->push.batch, e = ws->push.epoch;
  int held = ws->push.held;
  ws->push.grad = ws->push.ahead, ws->push.ahead = g;
  ws->push.version = ws->push.ahead_version, ws->push.ahead_version = v;
  ws->push.batch = ws->push.ahead_batch, ws->push.ahead_batch = b;
  ws->push.epoch = ws->push.ahead_epoch, ws->push.ahead_epoch = e;
  ws->push.held = ws->push.ahead_held, ws->push.ahead_held = held;
}

static int ssp_push(ps_server_t *s, int src, const ps_req_t *req) {
  ps_worker_state_t *ws = &s->workers[src];
  int64_t c = req->clock, slowest = slowest_clock(s);
  if (c != ws->push.clock)
    return ps_server_reject(s, src, req, "worker %d pushed clock %lld but its next clock is "
                            "%lld", src, (long long)c, (long long)ws->push.clock);
  /* A shard taken over from a dead primary may lack a push that primary
   * received and never forwarded: its worker sends it again, and until then
   * the slowest clock here is one behind the one the pusher saw. The push
   * is held all the same (beside its clock before, if that is held still:
   * swap_ahead), and applied only within the bound. */
  if (c > slowest + bound(s) + (s->repl.took_over ? 1 : 0))
    return ps_server_reject(s, src, req, "clock %lld is more than %d ahead of the slowest "
                            "worker's (%lld)", (long long)c, bound(s), (long long)slowest);
  int ahead = ws->push.held; /* only there: its push of the clock before is held still */
  if (ahead && ws->push.ahead_held)
    return ps_server_reject(s, src, req, "worker %d pushed clock %lld with two clocks held", src,
                            (long long)c);
  if (ahead && !ws->push.ahead && !(ws->push.ahead = dt_alloc_floats(s->len))) return -1;
  if (ahead) swap_ahead(ws); /* received (and forwarded) through the push slot */
  int stored = ps_server_store_push(s, src, req), rc = 0;
  if (stored) {
    ws->push.held = 1;
    ws->push.clock++;
    rc = ps_server_ack(s, src, req);
  }
  if (ahead) swap_ahead(ws);
  return rc;
}

/* The delay bound: a worker at clock t sees every update up to the
 * slowest worker's clock. */
static int ssp_pull_ready(const ps_server_t *s, int src, const ps_req_t *req) {
  return req->clock <= slowest_clock(s);
}

/* Applies, clock by clock, the held pushes whose clock is now within the
 * bound; the pushes of one clock make one step, summed in worker order. */
static void ssp_progress(ps_server_t *s) {
  for (;;) {
    int64_t limit = slowest_clock(s) + bound(s), c = -1;
    for (int w = 0; w < s->N; w++) {
      const ps_worker_state_t *ws = &s->workers[w];
      if (ws->push.held && ws->push.batch < limit && (c < 0 || ws->push.batch < c))
        c = ws->push.batch;
    }
    if (c < 0) return;
    float *g = NULL;
    for (int w = 0; w < s->N; w++) {
      ps_worker_state_t *ws = &s->workers[w];
      if (!ws->push.held || ws->push.batch != c) continue;
      if (!g) g = ws->push.grad;
      else kern_add(s->len, ws->push.grad, g);
      /* the age of the parameters the gradient was computed on: updates
       * since its pull, less (lazy) the worker's own, which its cache holds */
      int64_t own = s->cfg->ps.refresh_lazy ? ws->own_steps - ws->own_steps_at_pull : 0;
      ps_server_staleness_was(s, ws->push.epoch, s->version - ws->push.version - own);
      ws->own_steps++;
      ws->push.held = 0;
    }
    ps_server_step(s, g, ps_server_lr_of_step(s, c));
    for (int w = 0; w < s->N; w++) /* a push of the next clock takes the slot */
      if (!s->workers[w].push.held && s->workers[w].push.ahead_held) swap_ahead(&s->workers[w]);
  }
}

static int ssp_may_lose(const ps_server_t *s, int w, double silent, int lost, int over) {
  return dt_error("worker %d has stopped (nothing heard from it for %.1f s); --schedule %s "
                  "needs every worker: use --schedule async or backup:B to go on without it",
                  w, silent, schedule_name(s->cfg->schedule));
}

/* A pull at clock t waits for the workers that have pushed fewer than t
 * clocks: named with their counts. */
static void ssp_held_for(const ps_server_t *s, const ps_req_t *req, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "for");
  int slow = 0;
  for (int w = 0; w < s->N && n < cap; w++) {
    int64_t c = s->workers[w].push.clock;
    if (c >= req->clock) continue;
    n += (size_t)snprintf(buf + n, cap - n, "%s worker %d (%lld clock%s pushed)", slow++ ? "," : "",
                          w, (long long)c, c == 1 ? "" : "s");
  }
  if (n < cap) snprintf(buf + n, cap - n, " to push clock %lld", (long long)req->clock);
}

const ps_rule_ops_t ps_rule_ssp = {
    .pool = 0, .init = ssp_init, .push = ssp_push, .pull_ready = ssp_pull_ready,
    .progress = ssp_progress, .may_lose = ssp_may_lose, .held_for = ssp_held_for};
