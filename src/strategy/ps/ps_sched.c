/* The schedules, as rules of one server: what a push does and when a pull
 * may be answered.
 *
 *   sync, ssp:S  clocks (Ho et al. 2013, as the taxonomy states it). Worker
 *                w's c-th push has clock c. A pull by a worker at clock t
 *                waits until the slowest worker has pushed clock t - S - 1,
 *                and may then see other workers' updates up to clock
 *                t + S - 1, never later: a push of clock c is applied as
 *                soon as c < (slowest clock) + S, and held back until then.
 *                Pushes released together (the last push of a clock under
 *                sync; held-back ones when the slowest worker moves) are
 *                summed in worker order, as allreduce:naive sums, and make
 *                one optimizer step with lr(c); a push applicable on
 *                arrival makes a step of its own. So ssp:0 is sync bit for
 *                bit, and with S >= 1 and no straggler the server behaves
 *                as async does.
 *   async        Downpour: every push is applied on arrival, lr of its batch
 *                (divided by the staleness with --staleness-lr; corrected by
 *                DC-ASGD with --dc-asgd). ssp:inf is async.
 *   value:V      async, but a push is held back while the change not yet
 *                seen by the slowest worker, |w_t - w_{t-d}|_inf, is >= V,
 *                and its worker's next pull waits for it. The slowest
 *                worker's own pushes always pass (holding them could never
 *                restore the bound).
 *   backup:B     a step takes the first N - B pushes computed on the current
 *                version and drops later ones (Chen et al. 2016).
 *
 * Every gradient arrives averaged over the global batch (N x batch), so a
 * step of one worker's push is 1/N of a synchronous step. Staleness of a
 * push: optimizer steps this shard took between the pull its gradient was
 * computed on and the push's own step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

enum { RULE_CLOCK, RULE_ASYNC, RULE_VALUE, RULE_BACKUP };

static int rule(const ps_server_t *s) {
  switch (s->cfg->schedule) {
  case SCHEDULE_VALUE: return RULE_VALUE;
  case SCHEDULE_BACKUP: return RULE_BACKUP;
  case SCHEDULE_ASYNC: return RULE_ASYNC;
  case SCHEDULE_SSP: return isinf(s->cfg->schedule_param) ? RULE_ASYNC : RULE_CLOCK;
  default: return RULE_CLOCK;
  }
}

int ps_sched_init(ps_server_t *s) {
  int r = rule(s);
  s->pool = r != RULE_CLOCK;
  s->S = r == RULE_CLOCK && s->cfg->schedule == SCHEDULE_SSP ? (int)s->cfg->schedule_param : 0;
  s->backup = r == RULE_BACKUP ? (int)s->cfg->schedule_param : 0;
  s->value_bound = r == RULE_VALUE ? s->cfg->schedule_param : 0;
  size_t n = (size_t)s->N;
  s->slot = calloc(n, sizeof *s->slot);
  s->have = calloc(n, sizeof *s->have);
  s->slot_version = calloc(n, sizeof *s->slot_version);
  s->slot_batch = calloc(n, sizeof *s->slot_batch);
  s->slot_epoch = calloc(n, sizeof *s->slot_epoch);
  s->clock_of = calloc(n, sizeof *s->clock_of);
  s->queue = calloc(n, sizeof *s->queue);
  s->pulled_version = calloc(n, sizeof *s->pulled_version);
  if (!s->slot || !s->have || !s->slot_version || !s->slot_batch || !s->slot_epoch ||
      !s->clock_of || !s->queue || !s->pulled_version)
    return dt_error("out of memory");
  for (int w = 0; w < s->N; w++) {
    s->pulled_version[w] = s->version - 1;
    s->queue[w] = -1;
    s->clock_of[w] = s->version; /* resumed: sync and ssp checkpoints count clocks */
  }
  s->snap = calloc(n, sizeof *s->snap);
  if (!s->snap) return dt_error("out of memory");
  for (int w = 0; w < s->N; w++) {
    if (!(s->snap[w] = dt_alloc_floats(s->len))) return -1;
    memcpy(s->snap[w], s->params, s->len * sizeof(float)); /* everyone starts from these */
  }
  return 0;
}

void ps_sched_free(ps_server_t *s) {
  for (int w = 0; s->slot && w < s->N; w++) dt_free(s->slot[w]);
  for (int w = 0; s->snap && w < s->N; w++) dt_free(s->snap[w]);
  free(s->slot), free(s->have), free(s->slot_version), free(s->slot_batch), free(s->slot_epoch);
  free(s->clock_of), free(s->queue), free(s->pulled_version), free(s->snap);
}

/* lr of batch j of the shared order: the synchronous step that covers the
 * same fraction of the same epoch, so every schedule follows one curve. */
double ps_lr_of_batch(const ps_server_t *s, int64_t batch) {
  int64_t B = s->batches_per_epoch, e = batch / B, q = batch % B;
  return lr_at(&s->sched, e * s->steps_per_epoch + q * s->steps_per_epoch / B);
}

static float *slot_buffer(ps_server_t *s, size_t i) {
  if (!s->slot[i]) s->slot[i] = dt_alloc_floats(s->len);
  return s->slot[i];
}

/* Receives a push's values. 1: stored; 0: lost (logged; the server goes on). */
static int receive_values(ps_server_t *s, int src, const ps_req_t *req, float *dst) {
  if (!dst) return 0;
  if (comm_recv(s->world, src, PS_TAG_DATA, dst, req->nvalues * sizeof(float)) != 0) {
    dt_log(DT_LOG_ERROR, "server %d (rank %d): push from rank %d: %s", s->index, s->rank, src,
           dt_errmsg());
    return 0;
  }
  return 1;
}

static int ack(ps_server_t *s, int src, const ps_req_t *req) {
  ps_reply_t rep = {.version = s->version, .opt_steps = s->opt->steps, .epoch = req->epoch};
  return ps_server_reply(s, src, req, &rep, NULL, 0, 0);
}

static void record_staleness(ps_server_t *s, int64_t epoch, int64_t computed_on) {
  if (s->coord) ps_coord_staleness(s, epoch, (double)(s->version - computed_on));
}

/* The one place where the shard changes. */
static void step_optimizer(ps_server_t *s, const float *g, double lr) {
  ps_server_wait_state_sends(s);
  optim_step(s->opt, s->params, g, s->segs, s->nsegs, (float)lr);
  s->version++;
}

/* ---- clocks: sync and ssp:S --------------------------------------------------- */

static int64_t slowest_clock(const ps_server_t *s) {
  int64_t m = s->clock_of[0];
  for (int w = 1; w < s->N; w++)
    if (s->clock_of[w] < m) m = s->clock_of[w];
  return m;
}

static int push_clock(ps_server_t *s, int src, const ps_req_t *req) {
  int64_t c = req->clock;
  if (c != s->clock_of[src])
    return ps_server_reject(s, src, req, "worker %d pushed clock %lld but its next clock is "
                            "%lld", src, (long long)c, (long long)s->clock_of[src]);
  if (c > slowest_clock(s) + s->S)
    return ps_server_reject(s, src, req, "clock %lld is more than %d ahead of the slowest "
                            "worker's (%lld)", (long long)c, s->S, (long long)slowest_clock(s));
  if (!receive_values(s, src, req, slot_buffer(s, (size_t)src))) return 0;
  s->have[src] = 1;
  s->slot_version[src] = req->version;
  s->slot_batch[src] = c;
  s->slot_epoch[src] = req->epoch;
  s->clock_of[src]++;
  return ack(s, src, req);
}

/* Applies, clock by clock, the held pushes whose clock is now within the
 * bound; the pushes of one clock make one step, summed in worker order. */
static void apply_clocks(ps_server_t *s) {
  for (;;) {
    int64_t limit = slowest_clock(s) + s->S, c = -1;
    for (int w = 0; w < s->N; w++)
      if (s->have[w] && s->slot_batch[w] < limit && (c < 0 || s->slot_batch[w] < c))
        c = s->slot_batch[w];
    if (c < 0) return;
    float *g = NULL;
    for (int w = 0; w < s->N; w++) {
      if (!s->have[w] || s->slot_batch[w] != c) continue;
      if (!g) g = s->slot[w];
      else kern_add(s->len, s->slot[w], g);
      record_staleness(s, s->slot_epoch[w], s->slot_version[w]);
      s->have[w] = 0;
    }
    step_optimizer(s, g, lr_at(&s->sched, c));
  }
}

/* ---- async, value bound -------------------------------------------------------- */

/* DC-ASGD (Zheng et al. 2017): g + lambda g*g*(w_now - w_then), w_then being
 * what the worker pulled last. */
static void compensate_delay(ps_server_t *s, int w, float *g) {
  float lambda = (float)s->cfg->dc_asgd;
  const float *now = s->params, *then = s->snap[w];
  for (size_t i = 0; i < s->len; i++) g[i] += lambda * g[i] * g[i] * (now[i] - then[i]);
}

static void apply_one(ps_server_t *s, int w) {
  float *g = s->slot[w];
  int64_t staleness = s->version - s->slot_version[w];
  double lr = ps_lr_of_batch(s, s->slot_batch[w]);
  if (s->cfg->staleness_lr && staleness > 1) lr /= (double)staleness;
  if (s->cfg->dc_asgd > 0) compensate_delay(s, w, g);
  record_staleness(s, s->slot_epoch[w], s->slot_version[w]);
  s->have[w] = 0;
  s->queue[w] = -1;
  step_optimizer(s, g, lr);
}

static int store_pool_push(ps_server_t *s, int src, const ps_req_t *req, float *dst) {
  if (!receive_values(s, src, req, dst)) return 0;
  s->epoch_pushes++;
  s->slot_version[src] = req->version;
  s->slot_batch[src] = req->clock;
  s->slot_epoch[src] = req->epoch;
  return 1;
}

static int push_async(ps_server_t *s, int src, const ps_req_t *req) {
  if (!store_pool_push(s, src, req, slot_buffer(s, (size_t)src))) return 0;
  apply_one(s, src);
  return ack(s, src, req);
}

static int push_value(ps_server_t *s, int src, const ps_req_t *req) {
  if (s->have[src])
    return ps_server_reject(s, src, req, "worker %d has a push held back already (pull first)",
                            src);
  if (!store_pool_push(s, src, req, slot_buffer(s, (size_t)src))) return 0;
  s->have[src] = 1;
  s->queue[src] = s->queue_seq++;
  return ack(s, src, req);
}

/* The live worker whose last pull is oldest: w_{t-d} is its snapshot. */
static int slowest_worker(const ps_server_t *s) {
  int slow = -1;
  for (int w = 0; w < s->N; w++)
    if (!s->dead[w] && (slow < 0 || s->pulled_version[w] < s->pulled_version[slow])) slow = w;
  return slow;
}

static int value_allows(const ps_server_t *s, int w) {
  int slow = slowest_worker(s);
  if (s->flushing || slow < 0 || s->pulled_version[w] <= s->pulled_version[slow]) return 1;
  const float *now = s->params, *then = s->snap[slow];
  float change = 0;
  for (size_t i = 0; i < s->len; i++) {
    float d = fabsf(now[i] - then[i]);
    if (d > change) change = d;
  }
  return change < (float)s->value_bound;
}

/* Applies held-back pushes in arrival order while the bound allows. */
static void apply_queued(ps_server_t *s) {
  for (;;) {
    int next = -1;
    for (int w = 0; w < s->N; w++)
      if (s->queue[w] >= 0 && (next < 0 || s->queue[w] < s->queue[next])) next = w;
    if (next < 0 || !value_allows(s, next)) {
      /* the oldest cannot go; a push of the slowest worker still may */
      int slow = slowest_worker(s);
      if (slow < 0 || s->queue[slow] < 0) return;
      next = slow;
    }
    apply_one(s, next);
  }
}

/* ---- backup workers ---------------------------------------------------------------- */

static int push_backup(ps_server_t *s, int src, const ps_req_t *req) {
  if (req->version > s->version)
    return ps_server_reject(s, src, req, "gradient computed on version %lld, which this server "
                            "has not made yet (%lld)", (long long)req->version,
                            (long long)s->version);
  if (req->version < s->version) { /* too late: the step was taken without it */
    if (!store_pool_push(s, src, req, s->drain)) return 0;
    if (s->coord) ps_coord_dropped(s, req->epoch);
    return ack(s, src, req);
  }
  if (s->have[src])
    return ps_server_reject(s, src, req, "worker %d pushed twice for version %lld", src,
                            (long long)req->version);
  if (!store_pool_push(s, src, req, slot_buffer(s, (size_t)src))) return 0;
  s->have[src] = 1;
  s->naccepted++;
  return ack(s, src, req);
}

/* Sums the accepted gradients in worker order; lr of the earliest batch. */
static void apply_backup_step(ps_server_t *s) {
  float *g = NULL;
  int64_t first = -1;
  for (int w = 0; w < s->N; w++) {
    if (!s->have[w]) continue;
    if (!g) g = s->slot[w];
    else kern_add(s->len, s->slot[w], g);
    if (first < 0 || s->slot_batch[w] < first) first = s->slot_batch[w];
    record_staleness(s, s->slot_epoch[w], s->slot_version[w]);
    s->have[w] = 0;
  }
  s->naccepted = 0;
  if (g) step_optimizer(s, g, ps_lr_of_batch(s, first));
}

/* ---- the interface ---------------------------------------------------------------- */

int ps_sched_push(ps_server_t *s, int src, const ps_req_t *req) {
  switch (rule(s)) {
  case RULE_CLOCK: return push_clock(s, src, req);
  case RULE_ASYNC: return push_async(s, src, req);
  case RULE_VALUE: return push_value(s, src, req);
  default: return push_backup(s, src, req);
  }
}

int ps_sched_pull_ready(const ps_server_t *s, int src, const ps_req_t *req) {
  if (!s->pool && req->clock > slowest_clock(s)) return 0; /* the delay bound */
  if ((req->flags & PS_PULL_NEWER) && s->version <= s->pulled_version[src]) return 0;
  if ((req->flags & PS_PULL_OWN) && s->pool && s->have[src]) return 0;
  if ((req->flags & PS_PULL_FLUSHED) && s->flushed_epoch < req->epoch) return 0;
  return 1;
}

/* A pull of the whole shard's parameters is what the worker computes on
 * next: kept as its snapshot (the reply is sent from it). */
void ps_sched_pulled(ps_server_t *s, int src, const ps_req_t *req) {
  if (req->which != 0 || req->begin != s->r.begin || req->count != s->len) return;
  s->pulled_version[src] = s->version;
  memcpy(s->snap[src], s->params, s->len * sizeof(float));
}

int ps_sched_flush(ps_server_t *s, int64_t epoch, int64_t pushes) {
  if (!s->pool) return 0;
  s->flush_epoch = epoch;
  s->flush_target = pushes;
  return 0;
}

/* An epoch closes at a server once it has every push of it: then a
 * partial backup step and held-back pushes are applied. */
static void finish_flush(ps_server_t *s) {
  if (s->flush_epoch <= s->flushed_epoch || s->epoch_pushes < s->flush_target) return;
  s->flushing = 1;
  if (rule(s) == RULE_BACKUP && s->naccepted > 0) apply_backup_step(s);
  if (rule(s) == RULE_VALUE) apply_queued(s);
  s->flushing = 0;
  s->flushed_epoch = s->flush_epoch;
  s->epoch_pushes = 0;
}

int ps_sched_progress(ps_server_t *s) {
  switch (rule(s)) {
  case RULE_CLOCK: apply_clocks(s); break;
  case RULE_VALUE: apply_queued(s); break;
  case RULE_BACKUP:
    if (s->naccepted >= s->N - s->backup) apply_backup_step(s);
    break;
  default: break;
  }
  finish_flush(s);
  return 0;
}
