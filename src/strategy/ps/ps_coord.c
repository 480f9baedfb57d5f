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
 * Project Adam's epoch cut (--epoch-fraction F, Chilimbi et al. 2014: an
 * epoch ends once 75% of its samples are processed). Once F of the
 * epoch's batches have been pushed, no batch is handed out any more and
 * the batches still being computed are written off (counted in
 * `dropped`): the epoch closes without waiting for the stragglers, whose
 * late pushes every server then drops (ps_server.c). The next epoch's
 * order is a new permutation, so the batches left out differ each epoch.
 *
 * Statistics. Pushes carry their batches' loss and the worker's running
 * totals (bytes, time blocked); staleness is measured here, on shard 0.
 * Worker 0 asks for an epoch's (STATS) when it reports.
 *
 * Liveness. A worker that owes something and has been silent for
 * max(3 s, 20 x its usual interval) has stopped. Under async its batches
 * are written off and training goes on; under backup:B it goes on while
 * at most B have stopped; sync and ssp need every worker, so the run
 * fails with the reason (the rule's may_lose decides). A worker heard from
 * again is taken back. Worker 0 is never given up on: it reports the run.
 *
 * Per worker, the coordinator keeps its lease, its batches of the epoch
 * and its statistics in s->workers[w].coord; the rest is struct ps_coord.
 *
 * A standby (--ps-replicas 2, ps_coord_repl.c). All of it but the leases
 * is copied to the standby after every change, and an answer to NEXT or
 * BYE goes only once the standby holds the state it comes from, as a
 * push's ack waits for its backup. A push is counted once by its clock
 * (its first batch under the pool rules): sent again after a death, it is
 * not counted twice. A NEXT carries the worker's count of its NEXTs; one
 * sent again (its answer lost with the dead coordinator) is answered with
 * the batch it was given, so a batch is handed out once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps_server.h"

#define LEASE_MIN 3.0      /* seconds */
#define LEASE_INTERVALS 20 /* times a worker's usual interval between requests */
#define STATS_RING 4

/* What the coordinator keeps besides its group of s->workers[w].coord. */
struct ps_coord {
  int epoch;                 /* pool: the epoch being handed out */
  int64_t next, cap;         /* next batch within the epoch; global batch limit (--max-steps) */
  int64_t pushed, cut;       /* batches of the epoch pushed; the epoch ends at cut (--epoch-fraction) */
  int closed, done;
  int64_t push_msgs;         /* push messages of this epoch */
  int nbye, ndead;
  ps_epoch_stats_t stats[STATS_RING];
  int64_t stats_epoch[STATS_RING];
  unsigned char *stats_buf;  /* the STATS answer in flight */
};

int ps_coord_init(ps_server_t *s, ps_coord_t **out) {
  ps_coord_t *c = calloc(1, sizeof *c);
  if (!c) return dt_error("out of memory");
  *out = c;
  c->stats_buf = malloc(sizeof(ps_epoch_stats_t) + (size_t)s->N * sizeof(ps_worker_stats_t));
  if (!c->stats_buf) return dt_error("out of memory");
  double now = dt_now();
  for (int w = 0; w < s->N; w++) s->workers[w].coord.last_heard = now, s->workers[w].coord.counted = -1;
  for (int i = 0; i < STATS_RING; i++) c->stats_epoch[i] = -1;
  c->epoch = s->first_epoch;
  c->cap = s->cfg->max_steps ? s->cfg->max_steps * s->N : INT64_MAX;
  c->cut = s->cfg->ps.epoch_fraction < 1 ? (int64_t)ceil(s->cfg->ps.epoch_fraction * (double)s->batches_per_epoch)
                                       : INT64_MAX; /* whole epochs: closed when all is pushed */
  c->done = c->epoch >= s->cfg->epochs;
  return 0;
}

void ps_coord_free(ps_coord_t *c) {
  if (!c) return;
  free(c->stats_buf);
  free(c);
}

static ps_epoch_stats_t *stats_of(ps_coord_t *c, int64_t epoch) {
  int i = (int)(epoch % STATS_RING);
  if (c->stats_epoch[i] != epoch) {
    memset(&c->stats[i], 0, sizeof c->stats[i]);
    c->stats_epoch[i] = epoch;
  }
  return &c->stats[i];
}

void ps_coord_staleness(ps_coord_t *c, int64_t epoch, double staleness) {
  ps_epoch_stats_t *st = stats_of(c, epoch);
  st->staleness_sum += staleness;
  st->staleness_n += 1;
  if (staleness > st->staleness_max) st->staleness_max = staleness;
}

void ps_coord_dropped(ps_coord_t *c, int64_t epoch) { stats_of(c, epoch)->dropped += 1; }

/* ---- what workers tell us ---------------------------------------------------- */

static void take_back(ps_server_t *s, int w) {
  dt_log(DT_LOG_WARN, "worker %d is back after being given up on; taking it back", w);
  ps_server_set_dead(s, w, 0);
  s->coord->ndead--;
  ps_server_tell_servers(s, PS_OP_DEAD, 1, w);
}

void ps_coord_heard(ps_server_t *s, int src, const ps_req_t *req) {
  ps_coord_t *c = s->coord;
  ps_worker_state_t *ws = &s->workers[src];
  double now = dt_now(), gap = now - ws->coord.last_heard;
  ws->coord.interval = ws->coord.interval > 0 ? 0.8 * ws->coord.interval + 0.2 * gap : gap;
  ws->coord.last_heard = now;
  if (ws->dead) take_back(s, src);
  if (req->op != PS_OP_PUSH) return;
  ws->coord.pushed = 1;
  ps_worker_stats_t *wst = &ws->coord.stats;
  wst->bytes_pushed = req->bytes_pushed;
  wst->bytes_pulled = req->bytes_pulled;
  wst->blocked_sec = req->blocked_sec;
  if (req->flags & PS_PUSH_PART) return; /* the rest counts the push once, whole */
  if (req->clock <= ws->coord.counted) return; /* sent again after a death: counted already */
  if (s->rule->pool && (req->epoch != c->epoch || c->closed)) return; /* late: dropped */
  ws->coord.counted = req->clock;
  ps_epoch_stats_t *st = stats_of(c, req->epoch);
  st->loss_sum += req->loss_sum;
  st->samples += req->samples;
  st->correct += req->correct;
  wst->batches += (double)req->nbatches;
  if (s->rule->pool) {
    ws->coord.settled += req->nbatches;
    c->pushed += req->nbatches;
    c->push_msgs++;
  }
  ps_coord_repl_sync(s); /* the standby has it before the push's forward (one channel: in order) */
}

/* ---- batches and epochs (pool rules) ------------------------------------------- */

static int has_batch(const ps_server_t *s) {
  const ps_coord_t *c = s->coord;
  return !c->closed && c->next < s->batches_per_epoch && c->pushed < c->cut &&
         (int64_t)c->epoch * s->batches_per_epoch + c->next < c->cap;
}

int ps_coord_ready(const ps_server_t *s, int src, const ps_req_t *req) {
  const ps_coord_t *c = s->coord;
  if (req->op != PS_OP_NEXT) return 1;
  return c->done || has_batch(s) || !(req->flags & PS_NEXT_WAIT) || (src == 0 && c->closed);
}

int ps_coord_answer(ps_server_t *s, int src, const ps_req_t *req) {
  ps_coord_t *c = s->coord;
  ps_reply_t rep = ps_server_header(s, c->epoch);
  if (c->done) {
    rep.batch = PS_BATCH_DONE;
  } else if (has_batch(s)) {
    rep.batch = (int64_t)c->epoch * s->batches_per_epoch + c->next++;
    s->workers[src].coord.drawn++;
  } else if (!(req->flags & PS_NEXT_WAIT)) {
    rep.batch = PS_BATCH_NONE;
  } else {
    rep.batch = PS_BATCH_END; /* worker 0, the epoch closed */
  }
  ps_worker_state_t *ws = &s->workers[src];
  ws->coord.asked = req->clock, ws->coord.answer_batch = rep.batch, ws->coord.answer_epoch = rep.epoch;
  DT_TRY(ps_coord_repl_reply(s, src, req, &rep));
  return ps_coord_repl_sync(s);
}

/* A NEXT sent again after the coordinator's death whose answer the dead
 * one had given (and its standby holds): the same answer. */
static int answer_again(ps_server_t *s, int src, const ps_req_t *req) {
  ps_worker_state_t *ws = &s->workers[src];
  ps_reply_t rep = ps_server_header(s, ws->coord.answer_epoch);
  rep.batch = ws->coord.answer_batch;
  dt_log(DT_LOG_INFO, "coordinator: worker %d's NEXT %lld again: answered as before (batch %lld)",
         src, (long long)req->clock, (long long)rep.batch);
  return ps_coord_repl_reply(s, src, req, &rep);
}

static int all_settled(const ps_server_t *s) {
  for (int w = 0; w < s->N; w++) {
    const ps_worker_state_t *ws = &s->workers[w];
    if (!ws->dead && ws->coord.settled < ws->coord.drawn) return 0;
  }
  return 1;
}

static void close_epoch(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  c->closed = 1;
  ps_server_tell_servers(s, PS_OP_FLUSH, c->epoch, c->push_msgs);
  /* every instance of this rank: the heir coordinates from a hosted one */
  ps_server_flush(s->repl.home ? s->repl.home : s, c->epoch, c->push_msgs);
}

static void open_next_epoch(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  c->epoch++;
  c->next = 0;
  c->closed = 0;
  c->push_msgs = c->pushed = 0;
  for (int w = 0; w < s->N; w++) s->workers[w].coord.drawn = s->workers[w].coord.settled = 0;
  if (c->epoch >= s->cfg->epochs || (int64_t)c->epoch * s->batches_per_epoch >= c->cap)
    c->done = 1;
}

/* One ps_epoch_stats_t, then a ps_worker_stats_t per worker. */
static int answer_stats(ps_server_t *s, int src, const ps_req_t *req) {
  ps_coord_t *c = s->coord;
  ps_epoch_stats_t st = *stats_of(c, req->epoch);
  st.rejected = s->rejected;
  memcpy(c->stats_buf, &st, sizeof st);
  for (int w = 0; w < s->N; w++) {
    ps_worker_stats_t ws = s->workers[w].coord.stats;
    ws.dead = s->workers[w].dead;
    memcpy(c->stats_buf + sizeof st + (size_t)w * sizeof ws, &ws, sizeof ws);
  }
  ps_reply_t rep = ps_server_header(s, req->epoch);
  return ps_server_reply(s, src, req, &rep, c->stats_buf,
                         sizeof st + (size_t)s->N * sizeof(ps_worker_stats_t), 0);
}

static int coord_request(ps_server_t *s, int src, const ps_req_t *req) {
  ps_coord_t *c = s->coord;
  if (req->op == PS_OP_STATS) return answer_stats(s, src, req);
  if (req->op == PS_OP_BYE) {
    ps_worker_state_t *ws = &s->workers[src];
    if (!ws->coord.bye) ws->coord.bye = 1, c->nbye++;
    ps_reply_t rep = ps_server_header(s, 0);
    return ps_coord_repl_reply(s, src, req, &rep);
  }
  if (req->op == PS_OP_NEXT && req->clock > 0 && req->clock == s->workers[src].coord.asked)
    return answer_again(s, src, req);
  if (!s->rule->pool)
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

int ps_coord_request(ps_server_t *s, int src, const ps_req_t *req) {
  DT_TRY(coord_request(s, src, req));
  return ps_coord_repl_sync(s);
}

/* ---- liveness ------------------------------------------------------------------------ */

/* The rule says whether the run can go on without worker w. */
static int give_up_on(ps_server_t *s, int w, double silent) {
  ps_coord_t *c = s->coord;
  ps_worker_state_t *ws = &s->workers[w];
  if (s->rule->may_lose && s->rule->may_lose(s, w, silent, c->ndead, c->done) != 0) return -1;
  dt_log(DT_LOG_WARN, "worker %d has stopped (nothing heard from it for %.1f s, after %.0f "
         "batches); training goes on with %d workers", w, silent, ws->coord.stats.batches,
         s->N - c->ndead - 1);
  ps_server_set_dead(s, w, 1);
  c->ndead++;
  ws->coord.settled = ws->coord.drawn; /* its batches of this epoch are lost */
  ps_server_tell_servers(s, PS_OP_DEAD, 0, w);
  return 0;
}

/* Whether the transport knows one of worker w's ranks has ended (its
 * thread returned on local, its process on this node under mpi). */
static int worker_gone(ps_server_t *s, int w) {
  for (int t = 0; t < s->T; t++)
    if (comm_gone(s->world, w * s->T + t)) return 1;
  return 0;
}

/* How long worker w may be silent before it is given up on: 20 of its
 * intervals, at least LEASE_MIN. Before its first push the interval has
 * not seen a step (a GPT's first takes seconds on two cores), and once
 * training is over a worker written off by mistake finds the servers
 * gone and waits for them to its timeout (a worker slowed by a loaded
 * host took 2.8 s over its last batch): then only the transport's timeout,
 * unless the transport knows the worker has ended. */
static double lease_of(ps_server_t *s, int w) {
  const ps_worker_state_t *ws = &s->workers[w];
  if (!ws->coord.pushed || s->coord->done) return worker_gone(s, w) ? 0 : comm_net_timeout(&s->cfg->net);
  double lease = LEASE_INTERVALS * ws->coord.interval;
  return lease < LEASE_MIN ? LEASE_MIN : lease;
}

static int check_liveness(ps_server_t *s) {
  double now = dt_now();
  for (int w = 1; w < s->N; w++) {
    const ps_worker_state_t *ws = &s->workers[w];
    if (ws->coord.bye || ws->dead || ps_server_waiting(s, w)) continue;
    double lease = lease_of(s, w);
    double silent = now - ws->coord.last_heard;
    if (silent > lease) DT_TRY(give_up_on(s, w, silent));
  }
  return 0;
}

/* --epoch-fraction: the epoch has its share of batches; those still being
 * computed are dropped, so that it closes now. */
static void cut_epoch(ps_server_t *s) {
  for (int w = 0; w < s->N; w++) {
    ps_worker_state_t *ws = &s->workers[w];
    for (; ws->coord.settled < ws->coord.drawn; ws->coord.settled++)
      if (!ws->dead) ps_coord_dropped(s->coord, s->coord->epoch);
  }
}

/* After every request and while idle: close the epoch when it is done,
 * notice stopped workers, stop the servers when every worker is done. */
int ps_coord_check(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  DT_TRY(ps_chain_watch(s)); /* the servers' liveness (ps_replica.c) */
  DT_TRY(check_liveness(s));
  ps_server_report_held(s);
  if (s->rule->pool && !c->closed && !c->done && c->pushed >= c->cut) cut_epoch(s);
  if (s->rule->pool && !c->closed && !c->done && !has_batch(s) && all_settled(s)) close_epoch(s);
  DT_TRY(ps_coord_repl_sync(s));
  /* the last BYEs' answers wait for the standby, which must not stop first */
  if (c->nbye + c->ndead >= s->N && !ps_coord_repl_holds(s)) ps_server_stop_all(s);
  return 0;
}

/* ---- its state, as the standby keeps it -------------------------------------------- */

typedef struct {
  int64_t epoch, next, pushed, closed, done, push_msgs, nbye, ndead;
  ps_epoch_stats_t stats[STATS_RING];
  int64_t stats_epoch[STATS_RING];
} coord_head_t;

typedef struct {
  int64_t bye, drawn, settled, counted, asked, answer_batch, answer_epoch, dead;
  ps_worker_stats_t stats;
} coord_worker_t;

size_t ps_coord_state_size(int nworkers) {
  return sizeof(coord_head_t) + (size_t)nworkers * sizeof(coord_worker_t);
}

size_t ps_coord_state_bytes(const ps_server_t *s) { return ps_coord_state_size(s->N); }

void ps_coord_pack(const ps_server_t *s, uint8_t *out) {
  const ps_coord_t *c = s->coord;
  coord_head_t h;
  memset(&h, 0, sizeof h);
  h.epoch = c->epoch, h.next = c->next, h.pushed = c->pushed, h.closed = c->closed;
  h.done = c->done, h.push_msgs = c->push_msgs, h.nbye = c->nbye, h.ndead = c->ndead;
  memcpy(h.stats, c->stats, sizeof h.stats);
  memcpy(h.stats_epoch, c->stats_epoch, sizeof h.stats_epoch);
  memcpy(out, &h, sizeof h);
  for (int w = 0; w < s->N; w++) {
    const ps_worker_state_t *ws = &s->workers[w];
    coord_worker_t cw = {ws->coord.bye, ws->coord.drawn, ws->coord.settled, ws->coord.counted,
                         ws->coord.asked, ws->coord.answer_batch, ws->coord.answer_epoch, ws->dead,
                         ws->coord.stats};
    memcpy(out + sizeof h + (size_t)w * sizeof cw, &cw, sizeof cw);
  }
}

void ps_coord_unpack(ps_server_t *s, const uint8_t *in) {
  ps_coord_t *c = s->coord;
  coord_head_t h;
  memcpy(&h, in, sizeof h);
  c->epoch = (int)h.epoch, c->next = h.next, c->pushed = h.pushed, c->closed = (int)h.closed;
  c->done = (int)h.done, c->push_msgs = h.push_msgs, c->nbye = (int)h.nbye, c->ndead = (int)h.ndead;
  memcpy(c->stats, h.stats, sizeof h.stats);
  memcpy(c->stats_epoch, h.stats_epoch, sizeof h.stats_epoch);
  for (int w = 0; w < s->N; w++) {
    ps_worker_state_t *ws = &s->workers[w];
    coord_worker_t cw;
    memcpy(&cw, in + sizeof h + (size_t)w * sizeof cw, sizeof cw);
    ws->coord.bye = (int)cw.bye, ws->coord.drawn = cw.drawn, ws->coord.settled = cw.settled;
    ws->coord.counted = cw.counted, ws->coord.asked = cw.asked;
    ws->coord.answer_batch = cw.answer_batch, ws->coord.answer_epoch = cw.answer_epoch;
    ws->coord.stats = cw.stats;
    if (ws->dead != (int)cw.dead) ps_server_set_dead(s, w, (int)cw.dead);
  }
}

void ps_coord_resume(ps_server_t *s) {
  ps_coord_t *c = s->coord;
  if (s->rule->pool && c->closed) {
    ps_server_tell_servers(s, PS_OP_FLUSH, c->epoch, c->push_msgs);
    ps_server_flush(s->repl.home ? s->repl.home : s, c->epoch, c->push_msgs);
  }
}
