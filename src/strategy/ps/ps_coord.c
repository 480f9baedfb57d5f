/* Server 0's second role: the coordinator.
 *
 * Batches. Under the pool schedules (async, ssp:inf, value, backup) the
 * workers draw batches of the shared, seeded order of the epoch
 * (data_epoch_order) one at a time with NEXT, so a fast worker takes more
 * of them than a slow one. When every batch has been handed out and every
 * batch handed out has been pushed (or its worker has stopped), the epoch
 * is closed: the servers are told how many pushes it had (FLUSH), worker 0
 * is answered END and reports, and its next NEXT opens the next epoch.
 * sync and ssp workers take their own slice of each synchronous step, as
 * allreduce data parallelism does, and never ask.
 *
 * Statistics. Pushes carry their batches' loss and the worker's running
 * totals (bytes, time blocked); staleness is measured here, on shard 0.
 * Worker 0 asks for an epoch's (STATS) when it reports.
 *
 * Liveness. A worker that owes something and has been silent for
 * max(3 s, 20 x its usual interval) has stopped. Under async its batches
 * are written off and training goes on; under backup:B it goes on while
 * at most B have stopped; sync and ssp need every worker, so the run
 * fails with the reason. A worker heard from again is taken back. Worker 0
 * is never given up on: it reports the run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

#define LEASE_MIN 3.0      /* seconds */
#define LEASE_MIN_DONE 2.0 /* seconds, once training is over (0.5 wrote off workers merely slowed, under TSAN: their late push then failed the run) */
#define LEASE_INTERVALS 20 /* times a worker's usual interval between requests */
#define STATS_RING 4

struct ps_coord {
  int epoch;                 /* pool: the epoch being handed out */
  int64_t next, cap;         /* next batch within the epoch; global batch limit (--max-steps) */
  int closed, done;
  int64_t *drawn, *settled;  /* per worker, batches of this epoch: handed out; pushed or lost */
  int64_t push_msgs;         /* push messages of this epoch */
  double *last_heard, *interval;
  int *bye;
  int nbye, ndead;
  ps_epoch_stats_t stats[STATS_RING];
  int64_t stats_epoch[STATS_RING];
  ps_worker_stats_t *ws;
  unsigned char *stats_buf;  /* the STATS answer in flight */
};

int ps_coord_init(ps_server_t *s) {
  ps_coord_t *c = calloc(1, sizeof *c);
  if (!c) return dt_error("out of memory");
  s->coord = c;
  size_t n = (size_t)s->N;
  c->drawn = calloc(n, sizeof *c->drawn);
  c->settled = calloc(n, sizeof *c->settled);
  c->last_heard = calloc(n, sizeof *c->last_heard);
  c->interval = calloc(n, sizeof *c->interval);
  c->bye = calloc(n, sizeof *c->bye);
  c->ws = calloc(n, sizeof *c->ws);
  c->stats_buf = malloc(sizeof(ps_epoch_stats_t) + n * sizeof(ps_worker_stats_t));
  if (!c->drawn || !c->settled || !c->last_heard || !c->interval || !c->bye || !c->ws ||
      !c->stats_buf)
    return dt_error("out of memory");
  double now = dt_now();
  for (size_t w = 0; w < n; w++) c->last_heard[w] = now;
  for (int i = 0; i < STATS_RING; i++) c->stats_epoch[i] = -1;
  c->epoch = s->first_epoch;
  c->cap = s->cfg->max_steps ? s->cfg->max_steps * s->N : INT64_MAX;
  c->done = c->epoch >= s->cfg->epochs;
  return 0;
}

void ps_coord_free(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  if (!c) return;
  free(c->drawn), free(c->settled), free(c->last_heard), free(c->interval), free(c->bye);
  free(c->ws), free(c->stats_buf);
  free(c);
  s->coord = NULL;
}

static ps_epoch_stats_t *stats_of(ps_coord_t *c, int64_t epoch) {
  int i = (int)(epoch % STATS_RING);
  if (c->stats_epoch[i] != epoch) {
    memset(&c->stats[i], 0, sizeof c->stats[i]);
    c->stats_epoch[i] = epoch;
  }
  return &c->stats[i];
}

void ps_coord_staleness(ps_server_t *s, int64_t epoch, double staleness) {
  ps_epoch_stats_t *st = stats_of(s->coord, epoch);
  st->staleness_sum += staleness;
  st->staleness_n += 1;
  if (staleness > st->staleness_max) st->staleness_max = staleness;
}

void ps_coord_dropped(ps_server_t *s, int64_t epoch) { stats_of(s->coord, epoch)->dropped += 1; }

static void send_to_servers(ps_server_t *s, int op, int64_t epoch, int64_t clock) {
  for (int k = 1; k < s->K; k++)
    if (ps_server_send_control(s, k, op, epoch, clock) != 0)
      dt_log(DT_LOG_ERROR, "coordinator: telling server %d: %s", k, dt_errmsg());
}

/* ---- what workers tell us ---------------------------------------------------- */

static void take_back(ps_server_t *s, int w) {
  ps_coord_t *c = s->coord;
  dt_log(DT_LOG_WARN, "worker %d is back after being given up on; taking it back", w);
  s->dead[w] = 0;
  c->ws[w].dead = 0;
  c->ndead--;
  send_to_servers(s, PS_OP_DEAD, 1, w);
}

void ps_coord_heard(ps_server_t *s, int src, const ps_req_t *req) {
  ps_coord_t *c = s->coord;
  double now = dt_now(), gap = now - c->last_heard[src];
  c->interval[src] = c->interval[src] > 0 ? 0.8 * c->interval[src] + 0.2 * gap : gap;
  c->last_heard[src] = now;
  if (s->dead[src]) take_back(s, src);
  if (req->op != PS_OP_PUSH) return;
  ps_epoch_stats_t *st = stats_of(c, req->epoch);
  st->loss_sum += req->loss_sum;
  st->samples += req->samples;
  st->correct += req->correct;
  ps_worker_stats_t *ws = &c->ws[src];
  ws->batches += (double)req->nbatches;
  ws->bytes_pushed = req->bytes_pushed;
  ws->bytes_pulled = req->bytes_pulled;
  ws->blocked_sec = req->blocked_sec;
  if (s->pool && req->epoch == c->epoch) {
    c->settled[src] += req->nbatches;
    c->push_msgs++;
  }
}

/* ---- batches and epochs (pool schedules) ----------------------------------------- */

static int has_batch(const ps_server_t *s) {
  const ps_coord_t *c = s->coord;
  return !c->closed && c->next < s->batches_per_epoch &&
         (int64_t)c->epoch * s->batches_per_epoch + c->next < c->cap;
}

int ps_coord_ready(const ps_server_t *s, int src, const ps_req_t *req) {
  const ps_coord_t *c = s->coord;
  if (req->op != PS_OP_NEXT) return 1;
  return c->done || has_batch(s) || !(req->flags & PS_NEXT_WAIT) || (src == 0 && c->closed);
}

int ps_coord_answer(ps_server_t *s, int src, const ps_req_t *req) {
  ps_coord_t *c = s->coord;
  ps_reply_t rep = {.version = s->version, .opt_steps = s->opt->steps, .epoch = c->epoch};
  if (c->done) {
    rep.batch = PS_BATCH_DONE;
  } else if (has_batch(s)) {
    rep.batch = (int64_t)c->epoch * s->batches_per_epoch + c->next++;
    c->drawn[src]++;
  } else if (!(req->flags & PS_NEXT_WAIT)) {
    rep.batch = PS_BATCH_NONE;
  } else {
    rep.batch = PS_BATCH_END; /* worker 0, the epoch closed */
  }
  return ps_server_reply(s, src, req, &rep, NULL, 0, 0);
}

static int all_settled(const ps_server_t *s) {
  const ps_coord_t *c = s->coord;
  for (int w = 0; w < s->N; w++)
    if (!s->dead[w] && c->settled[w] < c->drawn[w]) return 0;
  return 1;
}

static void close_epoch(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  c->closed = 1;
  send_to_servers(s, PS_OP_FLUSH, c->epoch, c->push_msgs);
  ps_sched_flush(s, c->epoch, c->push_msgs);
}

static void open_next_epoch(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  c->epoch++;
  c->next = 0;
  c->closed = 0;
  c->push_msgs = 0;
  memset(c->drawn, 0, (size_t)s->N * sizeof *c->drawn);
  memset(c->settled, 0, (size_t)s->N * sizeof *c->settled);
  if (c->epoch >= s->cfg->epochs || (int64_t)c->epoch * s->batches_per_epoch >= c->cap)
    c->done = 1;
}

static int answer_stats(ps_server_t *s, int src, const ps_req_t *req) {
  ps_coord_t *c = s->coord;
  ps_epoch_stats_t st = *stats_of(c, req->epoch);
  st.rejected = s->rejected;
  for (int w = 0; w < s->N; w++) c->ws[w].dead = s->dead[w];
  memcpy(c->stats_buf, &st, sizeof st);
  memcpy(c->stats_buf + sizeof st, c->ws, (size_t)s->N * sizeof *c->ws);
  ps_reply_t rep = {.version = s->version, .opt_steps = s->opt->steps, .epoch = req->epoch};
  return ps_server_reply(s, src, req, &rep, c->stats_buf,
                         sizeof st + (size_t)s->N * sizeof *c->ws, 0);
}

int ps_coord_request(ps_server_t *s, int src, const ps_req_t *req) {
  ps_coord_t *c = s->coord;
  if (req->op == PS_OP_STATS) return answer_stats(s, src, req);
  if (req->op == PS_OP_BYE) {
    if (!c->bye[src]) c->bye[src] = 1, c->nbye++;
    ps_reply_t rep = {.version = s->version, .opt_steps = s->opt->steps};
    return ps_server_reply(s, src, req, &rep, NULL, 0, 0);
  }
  if (!s->pool)
    return ps_server_reject(s, src, req, "next: under --schedule %s every worker takes its own "
                            "slice of each step", schedule_name(s->cfg->schedule));
  if (req->flags & PS_NEXT_REPORTED) {
    if (src != 0 || !c->closed || req->epoch != c->epoch)
      return ps_server_reject(s, src, req, "epoch %lld reported out of turn (epoch %d is %s)",
                              (long long)req->epoch, c->epoch, c->closed ? "closed" : "open");
    open_next_epoch(s);
  }
  return ps_coord_ready(s, src, req) ? ps_coord_answer(s, src, req) : ps_server_defer(s, src, req);
}

/* ---- liveness ------------------------------------------------------------------------ */

static int waiting_here(const ps_server_t *s, int w) {
  for (int i = 0; i < s->ndeferred; i++)
    if (s->deferred[i].src == w) return 1;
  return 0;
}

static int give_up_on(ps_server_t *s, int w, double silent) {
  ps_coord_t *c = s->coord;
  const char *sched = schedule_name(s->cfg->schedule);
  if (!s->pool)
    return dt_error("worker %d has stopped (nothing heard from it for %.1f s); --schedule %s "
                    "needs every worker: use --schedule async or backup:B to go on without it",
                    w, silent, sched);
  if (s->cfg->schedule == SCHEDULE_BACKUP && c->ndead + 1 > s->backup && !c->done)
    return dt_error("worker %d has stopped (nothing heard from it for %.1f s) and %d had "
                    "before; backup:%d goes on without at most %d", w, silent, c->ndead,
                    s->backup, s->backup);
  dt_log(DT_LOG_WARN, "worker %d has stopped (nothing heard from it for %.1f s, after %.0f "
         "batches); training goes on with %d workers", w, silent, c->ws[w].batches,
         s->N - c->ndead - 1);
  s->dead[w] = 1;
  c->ws[w].dead = 1;
  c->ndead++;
  c->settled[w] = c->drawn[w]; /* its batches of this epoch are lost */
  send_to_servers(s, PS_OP_DEAD, 0, w);
  return 0;
}

static int check_liveness(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  double now = dt_now();
  for (int w = 1; w < s->N; w++) {
    if (c->bye[w] || s->dead[w] || waiting_here(s, w)) continue;
    double lease = LEASE_INTERVALS * c->interval[w], floor = c->done ? LEASE_MIN_DONE : LEASE_MIN;
    if (lease < floor) lease = floor; /* once done, every live worker is about to say bye */
    if (now - c->last_heard[w] > lease) DT_TRY(give_up_on(s, w, now - c->last_heard[w]));
  }
  return 0;
}

int ps_coord_watching(const ps_server_t *s) { return s->coord != NULL; }

/* After every request and while idle: close the epoch when it is done,
 * notice stopped workers, stop the servers when every worker is done. */
int ps_coord_check(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  DT_TRY(check_liveness(s));
  if (s->pool && !c->closed && !c->done && !has_batch(s) && all_settled(s)) close_epoch(s);
  if (c->nbye + c->ndead >= s->N && !s->stop) {
    send_to_servers(s, PS_OP_STOP, 0, 0);
    s->stop = 1;
  }
  return 0;
}
