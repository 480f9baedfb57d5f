/* A parameter server's core: one shard of the parameter arena, its
 * optimizer state, what it knows of each worker, and a single-threaded
 * event loop over requests received from any rank (ps-lite's request
 * handler). Every request is checked before it touches anything: a bad
 * magic, a rank that is not a worker, a key range outside the shard, a
 * push whose length is not its range's are rejected with a logged error
 * and an error reply, and the server goes on serving the others. What a
 * push does and when a pull may be answered is the rule's business
 * (rule_*.c, through the s->rule table); server 0 also coordinates
 * (ps_coord.c). ps_server.h says who owns what.
 *
 * Replies are sent without waiting. A pull of parameters is sent from a
 * copy (the worker's snapshot); the values of other pulls (optimizer
 * state) point into the shard, so an update first waits for those still
 * in flight. */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps_server.h"

#define MAX_RECV_FAILURES 8 /* in a row: the transport itself is failing */
#define KILLED 2            /* serve's return: --kill-server stopped this server */
#define SIGNALLED 3         /* serve's return: the lost-rank signal, with replicas */

struct ps_deferred {
  int src;
  ps_req_t req;
  double since, report_at;   /* when it was held; its next stall line */
};

struct ps_out {
  int used, into_state;      /* values point into params / optimizer state */
  int snap_of;               /* values are worker w's snapshot (-1: not) */
  size_t snap_lo, snap_hi;   /* ... its offsets [snap_lo, snap_hi) */
  ps_reply_t hdr;
  comm_req_t *hdr_req, *val_req;
};

int ps_nservers(const train_config_t *cfg, int nworkers) {
  return cfg->ps.servers > 0 ? cfg->ps.servers : nworkers;
}

/* Who a request came from, as the rules and the coordinator count: worker
 * w (0..N-1) for a worker rank of this server's slice, N + k for server k
 * (N: the coordinator), and below 0 for any other rank (not a worker of
 * this server; rank_of gives it back). */
static int source_id(const ps_server_t *s, int rank) {
  if (rank >= s->nranks) return s->N + (rank - s->nranks);
  return rank % s->T == s->slice ? rank / s->T : -1 - rank;
}

static int rank_of(const ps_server_t *s, int id) {
  if (id < 0) return -1 - id;
  return id < s->N ? id * s->T + s->slice : s->nranks + (id - s->N);
}

int ps_server_rank_of(const ps_server_t *s, int id) { return rank_of(s, id); }

/* ---- replies ------------------------------------------------------------------ */

static int out_done(ps_server_t *s, ps_out_t *o, int block) {
  comm_req_t **reqs[2] = {&o->hdr_req, &o->val_req};
  for (int i = 0; i < 2; i++) {
    if (!*reqs[i]) continue;
    int done = 1;
    if (!block && comm_test(s->world, *reqs[i], &done) != 0) done = 1;
    if (!done) return 0;
    if (comm_wait(s->world, *reqs[i]) != 0) /* the worker has gone: nothing to do about it */
      dt_log(DT_LOG_DEBUG, "server %d: reply not delivered: %s", s->index, dt_errmsg());
    *reqs[i] = NULL;
  }
  o->used = 0;
  return 1;
}

static void sweep_outbox(ps_server_t *s) {
  for (int i = 0; i < s->cap_out; i++)
    if (s->out[i].used) out_done(s, &s->out[i], 0);
}

static void wait_state_sends(ps_server_t *s) {
  for (int i = 0; i < s->cap_out; i++)
    if (s->out[i].used && s->out[i].into_state) out_done(s, &s->out[i], 1);
}

/* Worker w's replies still sent from offsets [lo, hi) of its snapshot. */
static void wait_snapshot_sends(ps_server_t *s, int w, size_t lo, size_t hi) {
  for (int i = 0; i < s->cap_out; i++) {
    const ps_out_t *o = &s->out[i];
    if (o->used && o->snap_of == w && o->snap_lo < hi && lo < o->snap_hi) out_done(s, &s->out[i], 1);
  }
}

static ps_out_t *free_out(ps_server_t *s) {
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < s->cap_out; i++)
      if (!s->out[i].used) return &s->out[i];
    for (int i = 0; i < s->cap_out; i++) out_done(s, &s->out[i], 1); /* full: wait them all */
  }
  return NULL;
}

static int reply_tag_ok(int tag) {
  return (tag >= PS_TAG_REPLY && tag < PS_TAG_END && (tag - PS_TAG_REPLY) % 2 == 0) ||
         (tag >= PS_TAG_REPLY_SHARD && tag < PS_TAG_REPLY_SHARD_END && (tag - PS_TAG_REPLY_SHARD) % 2 == 0);
}

/* Sends the answer (and values) without waiting; the slot it went out
 * in, or NULL when it could not be sent (logged: the worker may be gone). */
static ps_out_t *send_reply(ps_server_t *s, int src, const ps_req_t *req, const ps_reply_t *rep,
                            const void *vals, size_t nbytes) {
  if (s->repl.replaying) return NULL; /* a forwarded push: the primary answers the worker */
  if (!reply_tag_ok(req->reply_tag)) {
    dt_log(DT_LOG_ERROR, "server %d: cannot answer rank %d: reply tag %d is not a "
           "parameter-server reply tag", s->index, src, req->reply_tag);
    return NULL;
  }
  ps_out_t *o = free_out(s);
  if (!o) return NULL;
  o->hdr = *rep;
  o->hdr.magic = PS_MAGIC;
  o->into_state = 0;
  o->snap_of = -1;
  o->used = 1;
  int to = rank_of(s, src);
  if (comm_isend(s->world, to, req->reply_tag, &o->hdr, PS_REPLY_BYTES, &o->hdr_req) != 0 ||
      (nbytes && comm_isend(s->world, to, req->reply_tag + 1, vals, nbytes, &o->val_req) != 0)) {
    dt_log(DT_LOG_ERROR, "server %d: reply to rank %d failed: %s", s->index, to, dt_errmsg());
    if (o->hdr_req) comm_cancel(s->world, o->hdr_req);
    o->hdr_req = NULL;
    o->used = 0;
    return NULL;
  }
  return o;
}

int64_t ps_server_slowest_clock(const ps_server_t *s) {
  int64_t m = s->workers[0].push.clock;
  for (int w = 1; w < s->N; w++)
    if (s->workers[w].push.clock < m) m = s->workers[w].push.clock;
  return m;
}

ps_reply_t ps_server_header(const ps_server_t *s, int64_t epoch) {
  return (ps_reply_t){.version = s->version, .opt_steps = s->opt->steps, .epoch = epoch,
                      .clock = ps_server_slowest_clock(s)};
}

int ps_server_reply(ps_server_t *s, int src, const ps_req_t *req, const ps_reply_t *rep,
                    const void *vals, size_t nbytes, int into_state) {
  ps_out_t *o = send_reply(s, src, req, rep, vals, nbytes);
  if (o) o->into_state = into_state && nbytes > 0;
  return 0;
}

int ps_server_send_reply(ps_server_t *s, int src, const ps_req_t *req, const ps_reply_t *rep) {
  return send_reply(s, src, req, rep, NULL, 0) ? 0 : -1;
}

int ps_server_ack(ps_server_t *s, int src, const ps_req_t *req) {
  if (ps_chain_ack(s, src, req)) return 0;
  ps_reply_t rep = ps_server_header(s, req->epoch);
  return ps_server_reply(s, src, req, &rep, NULL, 0, 0);
}

/* A pull of the whole shard's parameters is what the worker computes on
 * next: it is copied into the worker's snapshot and sent from there, so
 * the next update need not wait until the worker has taken it (on an
 * oversubscribed machine it may not run for a while). A pull of part of
 * them (--comm-order priority, tictac: a layer's part) goes the same way,
 * through its offsets of the snapshot; the version pulled is a whole
 * pull's (the value bound and DC-ASGD, which take no pull in parts,
 * compare against the snapshot). */
static int reply_snapshot(ps_server_t *s, int src, const ps_req_t *req, const ps_reply_t *rep) {
  ps_worker_state_t *ws = &s->workers[src];
  size_t lo = req->begin - s->r.begin, n = req->count;
  wait_snapshot_sends(s, src, lo, lo + n); /* its previous reply, if a client pulls twice at once */
  if (n == s->len) {
    ws->pulled_version = s->version;
    ws->own_steps_at_pull = ws->own_steps;
  }
  const void *vals = ws->snapshot + lo;
  size_t bytes = ps_values_bytes(n);
  if (ws->pull_enc && !(req->flags & PS_PULL_DENSE)) {
    /* the change since its last pull: whole shards only (--compress-pulls
     * is refused with the priority orders, which pull in parts) */
    uint64_t seed = mirror_seed(s->cfg->seed ^ 0x70756c6c636f6d70ull, s->index, src, ws->pulls++, 0);
    bytes = mirror_encode(&s->cfg->compression.codec, s->params, ws->snapshot, s->len, seed, ws->pull_enc,
                          s->mirror_scratch);
    vals = ws->pull_enc;
  } else {
    memcpy(ws->snapshot + lo, s->params + lo, bytes);
  }
  ps_out_t *o = send_reply(s, src, req, rep, vals, bytes);
  if (o) o->snap_of = src, o->snap_lo = lo, o->snap_hi = lo + n;
  return 0;
}

/* Drains the values of a rejected push when they fit, so that the sender
 * is not left waiting; larger ones are left to the sender to cancel. */
static void drain_push(ps_server_t *s, int src, const ps_req_t *req) {
  if (req->op != PS_OP_PUSH || (req->flags & PS_PUSH_GATHERED) || src < 0 || src >= s->N || req->nvalues == 0 || req->nvalues > s->len)
    return;
  if (req->encoded > s->encoded_cap) return;
  int from = s->repl.data_from >= 0 ? s->repl.data_from : rank_of(s, src);
  int rc = req->encoded ? comm_recv(s->world, from, PS_TAG_DATA, s->encoded, req->encoded)
                        : comm_recv(s->world, from, PS_TAG_DATA, s->drain, ps_values_bytes(req->nvalues));
  if (rc != 0)
    dt_log(DT_LOG_ERROR, "server %d: values of a rejected push from rank %d: %s", s->index, from,
           dt_errmsg());
}

int ps_server_reject(ps_server_t *s, int src, const ps_req_t *req, const char *fmt, ...) {
  ps_reply_t rep = {.status = -1};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rep.error, sizeof rep.error, fmt, ap);
  va_end(ap);
  dt_log(DT_LOG_ERROR, "server %d (rank %d): rejected a request from rank %d: %s", s->index,
         s->rank, rank_of(s, src), rep.error);
  s->rejected++;
  if (req->magic == PS_MAGIC) drain_push(s, src, req);
  return ps_server_reply(s, src, req, &rep, NULL, 0, 0);
}

/* --stall-warning: a held pull's first stall line, and their period. */
static double stall_period(const ps_server_t *s) {
  return s->cfg->net.stall_warning > 0 ? s->cfg->net.stall_warning : COMM_STALL_WARNING;
}

int ps_server_defer(ps_server_t *s, int src, const ps_req_t *req) {
  if (s->ndeferred == s->cap_deferred) {
    int cap = s->cap_deferred ? 2 * s->cap_deferred : 16;
    ps_deferred_t *d = realloc(s->deferred, (size_t)cap * sizeof *d);
    if (!d) return dt_error("out of memory");
    s->deferred = d;
    s->cap_deferred = cap;
  }
  double now = dt_now();
  s->deferred[s->ndeferred++] = (ps_deferred_t){src, *req, now, now + stall_period(s)};
  return 0;
}

/* One line a period for every pull held past it: their workers, and what
 * the oldest waits for. */
void ps_server_report_held(ps_server_t *s) {
  double now = dt_now(), period = stall_period(s);
  char who[256] = "", why[512] = "", sched[48];
  size_t n = 0;
  const ps_deferred_t *oldest = NULL;
  for (int i = 0; i < s->ndeferred; i++) {
    ps_deferred_t *d = &s->deferred[i];
    if (d->req.op != PS_OP_PULL || now < d->report_at) continue;
    if (!oldest || d->since < oldest->since) oldest = d;
    if (n < sizeof who) n += (size_t)snprintf(who + n, sizeof who - n, "%s%d", n ? ", " : "", d->src);
    while (d->report_at <= now) d->report_at += period;
  }
  if (!oldest) return;
  if (s->rule->held_for) s->rule->held_for(s, &oldest->req, why, sizeof why);
  schedule_format(s->cfg, sched, sizeof sched);
  dt_log(DT_LOG_WARN, "stall: server %d (rank %d) has held the pull of worker%s %s for %.1f s%s%s "
         "(--schedule %s; --stall-warning %g)", s->index, s->rank, strchr(who, ',') ? "s" : "", who,
         now - oldest->since, why[0] ? " " : "", why, sched, period);
}

int ps_server_waiting(const ps_server_t *s, int w) {
  for (int i = 0; i < s->ndeferred; i++)
    if (s->deferred[i].src == w) return 1;
  return 0;
}

int ps_server_pull_deferred(const ps_server_t *s, int w) {
  for (int i = 0; i < s->ndeferred; i++) {
    const ps_req_t *q = &s->deferred[i].req;
    if (s->deferred[i].src == w && q->op == PS_OP_PULL && q->which == 0 &&
        q->begin == s->r.begin && q->count == s->len &&
        (q->flags & ~(PS_PULL_OWN | PS_PULL_DENSE)) == 0)
      return 1;
  }
  return 0;
}

void ps_server_tell_servers(ps_server_t *s, int op, int64_t epoch, int64_t clock) {
  ps_req_t req = {.magic = PS_MAGIC, .op = op, .worker = -1, .epoch = epoch, .clock = clock};
  for (int k = 0; k < s->K; k++)
    if (s->nranks + k != s->rank && !(s->repl.server_dead && s->repl.server_dead[k]) &&
        comm_send(s->world, s->nranks + k, PS_TAG_REQ, &req, PS_REQ_BYTES) != 0)
      dt_log(DT_LOG_ERROR, "coordinator: telling server %d: %s", k, dt_errmsg());
}

void ps_server_stop_all(ps_server_t *s) {
  if (s->stop) return;
  ps_server_tell_servers(s, PS_OP_STOP, 0, 0);
  s->stop = 1;
}

void ps_server_set_dead(ps_server_t *s, int w, int dead) {
  ps_server_t *h = s->repl.home ? s->repl.home : s; /* every instance of the rank */
  for (int i = 0; i < ps_chain_ninstances(h); i++) ps_chain_instance(h, i)->workers[w].dead = dead;
}

/* ---- pushes and the shard ------------------------------------------------------- */

/* A push whose values were received and found malformed: rejected
 * (nothing left to drain), and lost. */
static int reject_received(ps_server_t *s, int src, const ps_req_t *req) {
  ps_reply_t rep = {.status = -1};
  snprintf(rep.error, sizeof rep.error, "%s", dt_errmsg());
  dt_log(DT_LOG_ERROR, "server %d (rank %d): rejected a push from rank %d: %s", s->index, s->rank,
         rank_of(s, src), rep.error);
  s->rejected++;
  ps_server_reply(s, src, req, &rep, NULL, 0, 0);
  return 0;
}

/* Receives a push's values into dst. 1: stored; 0: lost (logged). */
static int receive(ps_server_t *s, int src, const ps_req_t *req, float *dst) {
  if (!dst) return 0;
  int rc, from = s->repl.data_from >= 0 ? s->repl.data_from : rank_of(s, src);
  if (req->flags & PS_PUSH_FACTORS) { /* --ps-push factors: the gradient computed here */
    rc = comm_recv(s->world, from, PS_TAG_DATA, s->encoded, req->encoded);
    if (rc == 0 && ps_factor_expand(&s->fplan, s->r.begin, s->r.end, (size_t)s->cfg->batch,
                                    s->encoded, req->encoded, dst) != 0)
      return reject_received(s, src, req);
  } else if (req->flags & PS_PUSH_GATHERED) { /* its parts came one by one (gather_part) */
    memcpy(dst, s->workers[src].part.buf, s->len * sizeof(float));
    rc = 0;
  } else if (req->encoded) { /* --compress: decoded here, checked first (compress.h) */
    rc = comm_recv(s->world, from, PS_TAG_DATA, s->encoded, req->encoded);
    if (rc == 0) memset(dst, 0, req->nvalues * sizeof(float));
    if (rc == 0) rc = codec_decode_add(&s->cfg->compression.codec, s->encoded, req->encoded, req->nvalues, dst);
  } else if (s->repl.data_from >= 0) { /* a forward: its primary may die sending it */
    rc = ps_chain_recv_values(s, dst, ps_values_bytes(req->nvalues));
  } else {
    rc = comm_recv(s->world, from, PS_TAG_DATA, dst, ps_values_bytes(req->nvalues));
  }
  if (rc != 0) {
    dt_log(DT_LOG_ERROR, "server %d (rank %d): push from rank %d: %s", s->index, s->rank, from,
           dt_errmsg());
    return 0;
  }
  ps_worker_state_t *ws = &s->workers[src];
  ws->chain.seen = req->clock; /* a resent copy of it is a duplicate from now on */
  s->repl.stored = 1;
  s->repl.received++;
  ws->push.version = req->version;
  ws->push.batch = req->clock;
  ws->push.epoch = req->epoch;
  s->epoch.pushes++;
  return 1;
}

int ps_server_store_push(ps_server_t *s, int src, const ps_req_t *req) {
  ps_worker_state_t *ws = &s->workers[src];
  if (!ws->push.grad) ws->push.grad = dt_alloc_floats(s->len);
  return receive(s, src, req, ws->push.grad);
}

int ps_server_drop_push(ps_server_t *s, int src, const ps_req_t *req) {
  return receive(s, src, req, s->drain);
}

void ps_server_step(ps_server_t *s, const float *g, double lr) {
  wait_state_sends(s);
  double t0 = 0;
  if (dt_trace) trace_set_step(dt_trace, s->version), t0 = dt_now(); /* a server's step: its updates */
  if (s->apply) ps_apply_step(s->apply, s->opt, s->params, g, (float)lr);
  else optim_step(s->opt, s->params, g, s->segs, s->nsegs, (float)lr);
  if (dt_trace) trace_slice(dt_trace, TRACE_OPTIM, "server update", (long long)s->version, t0, dt_now());
  s->version++;
}

void ps_server_keep(const ps_server_t *s, ps_shard_copy_t *c) {
  size_t bytes = s->len * sizeof(float);
  memcpy(c->params, s->params, bytes);
  for (int i = 0; i < s->opt->nstate; i++) memcpy(c->state[i], s->opt->state[i], bytes);
  if (s->dc_mean_square) memcpy(c->mean_square, s->dc_mean_square, bytes);
  c->version = s->version;
  c->steps = s->opt->steps;
}

void ps_server_put_back(ps_server_t *s, const ps_shard_copy_t *c) {
  size_t bytes = s->len * sizeof(float);
  wait_state_sends(s);
  memcpy(s->params, c->params, bytes);
  for (int i = 0; i < s->opt->nstate; i++) memcpy(s->opt->state[i], c->state[i], bytes);
  if (s->dc_mean_square) memcpy(s->dc_mean_square, c->mean_square, bytes);
  s->version = c->version;
  s->opt->steps = c->steps;
}

double ps_server_lr_of_step(const ps_server_t *s, int64_t step) { return lr_at(&s->lr, step); }

/* lr of batch j of the shared order: the synchronous step that covers the
 * same fraction of the same epoch, so every schedule follows one curve. */
double ps_server_lr_of_batch(const ps_server_t *s, int64_t batch) {
  int64_t B = s->batches_per_epoch, e = batch / B, q = batch % B;
  return lr_at(&s->lr, e * s->steps_per_epoch + q * s->steps_per_epoch / B);
}

/* Staleness of a push: the steps this shard took between the pull its
 * gradient was computed on and the push's own step. */
void ps_server_staleness(ps_server_t *s, int64_t epoch, int64_t computed_on) {
  if (s->coord) ps_coord_staleness(s->coord, epoch, (double)(s->version - computed_on));
}

void ps_server_staleness_was(ps_server_t *s, int64_t epoch, int64_t staleness) {
  if (s->coord) ps_coord_staleness(s->coord, epoch, (double)staleness);
}

void ps_server_dropped(ps_server_t *s, int64_t epoch) {
  if (s->coord) ps_coord_dropped(s->coord, epoch);
}

/* ---- epochs of the pool rules ------------------------------------------------------ */

void ps_server_flush(ps_server_t *s, int64_t epoch, int64_t pushes) {
  if (!s->rule->pool) return;
  s->epoch.flush = epoch;
  s->epoch.flush_pushes = pushes;
  for (int i = 0; i < s->repl.nhosted; i++) /* every shard's pushes are the epoch's */
    ps_server_flush(s->repl.hosted[i], epoch, pushes);
}

/* An epoch closes here once this server has every push of it: the rule
 * then applies what it still holds (a partial backup step, held-back
 * value-bound pushes). */
static void close_epoch(ps_server_t *s) {
  if (s->epoch.flush <= s->epoch.flushed || s->epoch.pushes < s->epoch.flush_pushes) return;
  if (s->rule->epoch_end) s->rule->epoch_end(s);
  s->epoch.flushed = s->epoch.flush;
  s->epoch.pushes = 0;
}

static void progress(ps_server_t *s) {
  if (s->rule->progress) s->rule->progress(s);
  close_epoch(s);
}

/* ---- requests --------------------------------------------------------------- */

static const char *op_name(int op) {
  static const char *names[] = {"?", "push", "pull", "next", "stats", "save", "bye", "flush",
                                "dead", "stop", "repl", "repl-ack", "ping", "pong",
                                "takeover", "lost-backup", "server-gone", "copy", "copy-ack", "coord",
                                "coord-state", "coord-ack"};
  return op > 0 && op < PS_OP_COUNT ? names[op] : "?";
}

/* The keys must lie in this shard; a push carries the whole shard, or
 * is one part of it. */
static int check_range(ps_server_t *s, int src, const ps_req_t *req) {
  uint64_t b = req->begin, n = req->count;
  if (n == 0 || b >= s->map.nparams || n > s->map.nparams - b)
    return ps_server_reject(s, src, req, "key range [%llu, %llu) is outside the model (%zu keys)",
                            (unsigned long long)b, (unsigned long long)(b + n), s->map.nparams), -1;
  if (b < s->r.begin || b + n > s->r.end)
    return ps_server_reject(s, src, req, "key range [%llu, %llu) is not in this server's range "
                            "[%zu, %zu)", (unsigned long long)b, (unsigned long long)(b + n),
                            s->r.begin, s->r.end), -1;
  if (req->op == PS_OP_PUSH && req->nvalues != n)
    return ps_server_reject(s, src, req, "push of %llu values for %llu keys",
                            (unsigned long long)req->nvalues, (unsigned long long)n), -1;
  if (req->op == PS_OP_PUSH && (req->flags & PS_PUSH_FACTORS) &&
      (!s->cfg->ps.push_factors || req->encoded > s->encoded_cap || (req->flags & PS_PUSH_PART)))
    return ps_server_reject(s, src, req, "a push of sufficient factors of %llu bytes (%s)",
                            (unsigned long long)req->encoded, !s->cfg->ps.push_factors
                            ? "this server runs without --ps-push factors" : "more than a batch's"), -1;
  if (req->op == PS_OP_PUSH && req->encoded && !(req->flags & PS_PUSH_FACTORS) &&
      (s->cfg->compression.codec.kind == CODEC_NONE || req->encoded > s->encoded_cap))
    return ps_server_reject(s, src, req, "an encoded push of %llu bytes (%s)",
                            (unsigned long long)req->encoded, s->cfg->compression.codec.kind == CODEC_NONE
                            ? "this server runs without --compress" : "more than its codec takes"), -1;
  if (req->op == PS_OP_PUSH && (req->flags & PS_PUSH_GATHERED))
    return ps_server_reject(s, src, req, "push flags 0x%x: not a flag a worker sends", req->flags), -1;
  if (req->op == PS_OP_PUSH && (req->flags & PS_PUSH_PART) && req->encoded)
    return ps_server_reject(s, src, req, "an encoded push in parts: a push in parts is plain floats"), -1;
  if (req->op == PS_OP_PUSH && !(req->flags & PS_PUSH_PART) && (b != s->r.begin || n != s->len))
    return ps_server_reject(s, src, req, "push of keys [%llu, %llu): a push carries this "
                            "server's whole range [%zu, %zu)", (unsigned long long)b,
                            (unsigned long long)(b + n), s->r.begin, s->r.end), -1;
  return 0;
}

/* The waits a pull asks for itself; the rule may add its own. */
static int pull_ready(const ps_server_t *s, int src, const ps_req_t *req) {
  if ((req->flags & PS_PULL_NEWER) && s->version <= s->workers[src].pulled_version) return 0;
  if ((req->flags & PS_PULL_FLUSHED) && s->epoch.flushed < req->epoch) return 0;
  return !s->rule->pull_ready || s->rule->pull_ready(s, src, req);
}

static int reply_pull(ps_server_t *s, int src, const ps_req_t *req) {
  ps_reply_t rep = ps_server_header(s, req->epoch);
  if (req->which == 0) return reply_snapshot(s, src, req, &rep);
  const float *base = req->which == 0                      ? s->params
                      : req->which == PS_WHICH_MEAN_SQUARE ? s->dc_mean_square
                                                           : s->opt->state[req->which - 1];
  return ps_server_reply(s, src, req, &rep, base + (req->begin - s->r.begin),
                         ps_values_bytes(req->count), 1);
}

static int handle_pull(ps_server_t *s, int src, const ps_req_t *req) {
  if (check_range(s, src, req) != 0) return 0;
  if (req->which == PS_WHICH_MEAN_SQUARE && !s->dc_mean_square)
    return ps_server_reject(s, src, req, "pull of the MeanSquare: this run has no --dc-asgd a:LAMBDA0");
  if (req->which != PS_WHICH_MEAN_SQUARE && (req->which < 0 || req->which > s->opt->nstate))
    return ps_server_reject(s, src, req, "pull of state %d: the optimizer keeps %d state "
                            "arenas", req->which, s->opt->nstate);
  return pull_ready(s, src, req) ? reply_pull(s, src, req) : ps_server_defer(s, src, req);
}

static int handle_save(ps_server_t *s, int src, const ps_req_t *req) {
  if (!s->cfg->checkpoint_dir[0])
    return ps_server_reject(s, src, req, "save: this run has no --checkpoint-dir");
  if (ps_ckpt_save_shard(s->cfg, s->index, s->K, s->r, s->params, s->opt, s->dc_mean_square,
                         (int)req->epoch, req->clock) != 0)
    return ps_server_reject(s, src, req, "%s", dt_errmsg());
  return ps_server_ack(s, src, req);
}

/* A push of an epoch that has closed here, or whose pushes are all here
 * (the coordinator counted them at the close): a straggler's batch that
 * --epoch-fraction cut off, or one of a worker written off as stopped. */
static int push_is_late(const ps_server_t *s, const ps_req_t *req) {
  return req->epoch <= s->epoch.flushed ||
         (req->epoch == s->epoch.flush && s->epoch.pushes >= s->epoch.flush_pushes);
}

/* The late push is drained and acknowledged; nothing of it is applied. */
static int drop_late_push(ps_server_t *s, int src, const ps_req_t *req) {
  drain_push(s, src, req);
  return ps_server_ack(s, src, req);
}

/* A part of a push (--comm-order priority, tictac): received into the
 * worker's part buffer; the part that completes the shard hands the whole
 * to the rule as one push (its clock, epoch, version and statistics are
 * the last part's), so the rule, its sums and the bytes are a whole
 * push's. A part of another clock or epoch starts the gathering over: the
 * rest of a push that --epoch-fraction cut never comes. */
static int gather_part(ps_server_t *s, int src, const ps_req_t *req) {
  ps_worker_state_t *ws = &s->workers[src];
  if (!ws->part.buf && !(ws->part.buf = dt_alloc_floats(s->len))) return -1;
  if (ws->part.got && (req->clock != ws->part.clock || req->epoch != ws->part.epoch)) ws->part.got = 0;
  if (ws->part.got + req->nvalues > s->len) {
    ws->part.got = 0;
    return ps_server_reject(s, src, req, "push parts of clock %lld cover more than this server's "
                            "%zu keys", (long long)req->clock, s->len);
  }
  ws->part.clock = req->clock;
  ws->part.epoch = req->epoch;
  float *dst = ws->part.buf + (req->begin - s->r.begin);
  if (comm_recv(s->world, rank_of(s, src), PS_TAG_DATA, dst, ps_values_bytes(req->nvalues)) != 0) {
    dt_log(DT_LOG_ERROR, "server %d (rank %d): push part from rank %d: %s", s->index, s->rank,
           rank_of(s, src), dt_errmsg());
    return 0;
  }
  ws->part.got += req->nvalues;
  if (ws->part.got < s->len) return ps_server_ack(s, src, req);
  ws->part.got = 0;
  ps_req_t whole = *req;
  whole.flags = (req->flags & ~PS_PUSH_PART) | PS_PUSH_GATHERED;
  whole.begin = s->r.begin;
  whole.count = whole.nvalues = s->len;
  if (s->coord) ps_coord_heard(s, src, &whole); /* the push's statistics, once */
  return s->rule->push(s, src, &whole);
}

/* FLUSH, DEAD and STOP come from the coordinator only. */
static int handle_control(ps_server_t *s, int src, const ps_req_t *req) {
  if (rank_of(s, src) != s->repl.coord_rank || ps_chain_coordinator(s))
    return ps_server_reject(s, src, req, "%s is the coordinator's (rank %d) to send",
                            op_name(req->op), s->repl.coord_rank);
  if (req->op == PS_OP_STOP) {
    s->stop = 1;
    return 0;
  }
  if (req->op == PS_OP_DEAD) {
    if (req->clock < 0 || req->clock >= s->N) return 0;
    ps_server_set_dead(s, (int)req->clock, req->epoch ? 0 : 1); /* epoch 1: the worker is back */
    return 0;
  }
  ps_server_flush(s, req->epoch, req->clock);
  return 0;
}

/* The instance of this rank a worker's request is for: its own shard, or
 * the hosted backup copy's (a worker sends there only once the shard's
 * primary is dead, so such a request makes the backup take over, should
 * the coordinator's word not have come yet). */
static ps_server_t *instance_for(ps_server_t *s, const ps_req_t *req) {
  if (req->op == PS_OP_NEXT || req->op == PS_OP_STATS || req->op == PS_OP_BYE) {
    ps_server_t *c = ps_chain_coordinator(s); /* server 0's own, or its standby's once it died */
    return c ? c : s;
  }
  if (req->op != PS_OP_PUSH && req->op != PS_OP_PULL) return s;
  for (int i = 0; i < s->repl.nhosted; i++) {
    ps_server_t *b = s->repl.hosted[i];
    if (req->begin < b->r.begin || req->begin >= b->r.end) continue;
    if (b->repl.is_backup) ps_chain_take_over(b, "a worker sends its requests here");
    return b;
  }
  return s;
}

/* A push whose clock this server has already taken (a worker sending
 * again what a dead server did not answer): drained and acknowledged,
 * not applied twice. */
static int is_duplicate(ps_server_t *s, int src, const ps_req_t *req) {
  if (s->cfg->ps.replicas < 2 || req->op != PS_OP_PUSH || req->clock > s->workers[src].chain.seen) return 0;
  dt_log(DT_LOG_INFO, "server %d: worker %d's push of clock %lld again: held already, not applied "
         "twice", s->index, src, (long long)req->clock);
  s->repl.duplicates++;
  drain_push(s, src, req);
  ps_reply_t rep = ps_server_header(s, req->epoch);
  ps_server_reply(s, src, req, &rep, NULL, 0, 0);
  return 1;
}

/* --kill-server: this server has taken its P-th push. */
static int kill_due(ps_server_t *s, const ps_req_t *req) {
  const ps_config_t *p = &s->cfg->ps;
  if (req->op != PS_OP_PUSH || (p->kill_server != s->index && p->kill_server2 != s->index)) return 0;
  int64_t at = p->kill_server == s->index ? p->kill_server_at : p->kill_server2_at;
  return ++s->repl.kill_count == at;
}

/* Checks who is asking and what, then hands it on. Returns -1 only when
 * the server cannot go on, KILLED when --kill-server says it dies now. */
static int handle(ps_server_t *s, int src, const ps_req_t *req) {
  if (req->magic != PS_MAGIC)
    return ps_server_reject(s, src, req, "bad magic 0x%08x (not a parameter-server request)",
                            req->magic);
  if (req->op <= 0 || req->op >= PS_OP_COUNT)
    return ps_server_reject(s, src, req, "unknown operation %d", req->op);
  if (req->op == PS_OP_FLUSH || req->op == PS_OP_DEAD || req->op == PS_OP_STOP)
    return handle_control(s, src, req);
  if (req->op >= PS_OP_REPL) return ps_chain_handle(s, src, req);
  if (kill_due(s, req)) return KILLED;
  if (src >= 0 && src < s->N && req->worker == src) s = instance_for(s, req);
  if (src < 0 || src >= s->N)
    return ps_server_reject(s, src, req, "rank %d is not a worker of this server (workers are "
                            "ranks 0..%d%s)", rank_of(s, src), s->nranks - 1,
                            s->T > 1 ? " with this server's tensor-parallel rank" : "");
  if (req->worker != src)
    return ps_server_reject(s, src, req, "rank %d says it is worker %d", rank_of(s, src), req->worker);
  if (s->coord) ps_coord_heard(s, src, req);
  switch (req->op) {
  case PS_OP_PUSH:
    if (check_range(s, src, req) != 0) return 0;
    if (is_duplicate(s, src, req)) return 0;
    s->repl.stored = 0;
    if (s->rule->pool && push_is_late(s, req)) return drop_late_push(s, src, req);
    if (req->flags & PS_PUSH_PART) return gather_part(s, src, req);
    return s->rule->push(s, src, req);
  case PS_OP_PULL: return handle_pull(s, src, req);
  case PS_OP_SAVE: return handle_save(s, src, req);
  default:
    if (!s->coord)
      return ps_server_reject(s, src, req, "%s goes to the coordinator (rank %d), not server %d",
                              op_name(req->op), s->nranks, s->index);
    return ps_coord_request(s, src, req);
  }
}

/* Answers the deferred requests that have become ready, oldest first. */
static int answer_deferred(ps_server_t *s) {
  for (int again = 1; again;) {
    again = 0;
    for (int i = 0; i < s->ndeferred; i++) {
      ps_deferred_t d = s->deferred[i];
      int ready = d.req.op == PS_OP_PULL ? pull_ready(s, d.src, &d.req)
                                         : ps_coord_ready(s, d.src, &d.req);
      if (!ready) continue;
      memmove(&s->deferred[i], &s->deferred[i + 1],
              (size_t)(s->ndeferred - i - 1) * sizeof *s->deferred);
      s->ndeferred--;
      DT_TRY(d.req.op == PS_OP_PULL ? reply_pull(s, d.src, &d.req)
                                    : ps_coord_answer(s, d.src, &d.req));
      again = 1; /* an answer may change what is ready (value bound, epochs) */
      break;
    }
  }
  return 0;
}

/* ---- the loop ------------------------------------------------------------------ */

typedef struct { int64_t version, flush, flushed; int ndeferred, stop; } progress_mark_t;

static progress_mark_t mark(const ps_server_t *s) {
  return (progress_mark_t){s->version, s->epoch.flush, s->epoch.flushed, s->ndeferred, s->stop};
}

/* The hosted backup copy: what its rule holds is applied as the
 * primary's was; once it has taken over, its deferred pulls answered. */
static int advance_hosted(ps_server_t *s) {
  for (int i = 0; i < s->repl.nhosted; i++)
    for (ps_server_t *b = s->repl.hosted[i];;) {
      progress_mark_t before = mark(b);
      progress(b);
      if (answer_deferred(b) != 0) return -1;
      progress_mark_t after = mark(b);
      if (!memcmp(&before, &after, sizeof before)) break;
    }
  return 0;
}

/* Applies what is ready, closes epochs, answers what has become
 * answerable, until nothing moves (one answer can enable another update:
 * a pull moves the value bound's slowest snapshot). */
static int advance(ps_server_t *s) {
  for (;;) {
    progress_mark_t before = mark(s);
    progress(s);
    ps_server_t *c = ps_chain_coordinator(s);
    if ((c && ps_coord_check(c) != 0) || ps_chain_watch_coordinator(s) != 0) return -1;
    if (c && c->stop) s->stop = 1;
    progress(s);
    if (answer_deferred(s) != 0 || advance_hosted(s) != 0) return -1;
    progress_mark_t after = mark(s);
    if (!memcmp(&before, &after, sizeof before)) return 0;
  }
}

/* The coordinator polls, so that it notices a worker that has gone
 * silent; the other servers sleep in the transport until a request comes.
 * Its longest pause is what a request may wait: at 250 us, ps:1 sync's
 * two requests a step on mlp ran 7-13% fewer samples/s than at 50 us
 * (medians; none on 2 local workers; bench/ps_coord_poll.sh); leases are
 * seconds long. */
#define COORD_POLL_MAX 50e-6
static int next_request(ps_server_t *s, int *src) {
  if (!s->in_req && comm_irecv(s->world, COMM_ANY_SOURCE, PS_TAG_REQ, &s->in, PS_REQ_BYTES,
                               &s->in_req) != 0)
    return -1;
  if (ps_chain_polls(s)) {
    double pause = 0;
    for (;;) {
      int done = 0;
      if (comm_test(s->world, s->in_req, &done) != 0) return -1;
      if (done) break;
      if (advance(s) != 0) return -1;
      if (s->stop) return 1;
      sweep_outbox(s);
      pause = pause < COORD_POLL_MAX ? pause * 2 + 10e-6 : COORD_POLL_MAX;
      dt_sleep_until(dt_now() + pause);
    }
  }
  comm_req_t *r = s->in_req;
  s->in_req = NULL;
  return comm_wait_src(s->world, r, src, NULL);
}

/* SIGUSR1 to this server's thread (on local the lost-rank fault that
 * dtrain launch restarts from; a worker's step checks it too): with
 * replicas the server vanishes as --kill-server's does and its shards go
 * on on their copies; without, the run fails naming the rank lost. */
static int rank_lost(const ps_server_t *s) {
  if (s->cfg->ps.replicas > 1) return SIGNALLED;
  return worker_rank_lost(s->version);
}

static int serve(ps_server_t *s) {
  int failures = 0;
  while (!s->stop) {
    if (dt_rank_signalled()) return rank_lost(s);
    int rank = -1;
    memset(&s->in, 0, sizeof s->in);
    int rc = next_request(s, &rank);
    int src = rank < 0 ? rank : source_id(s, rank);
    if (rc > 0) break;
    if (rc != 0) { /* from a rank: a bad message; from nobody: the run is failing */
      if (rank < 0 || ++failures >= MAX_RECV_FAILURES) return dt_error_prefix("server %d: ", s->index);
      /* a dead server's last message, withdrawn (its ping): nothing wrong here */
      dt_log(comm_gone(s->world, rank) ? DT_LOG_INFO : DT_LOG_ERROR, "server %d (rank %d): bad "
             "message: %s", s->index, s->rank, dt_errmsg());
      continue;
    }
    failures = 0;
    ps_req_t req = s->in;
    rc = handle(s, src, &req);
    if (rc == KILLED) return KILLED;
    if (rc == 0 && dt_rank_signalled()) return rank_lost(s);
    if (rc != 0 || advance(s) != 0) return dt_error_prefix("server %d: ", s->index);
    sweep_outbox(s);
    for (int i = 0; i < s->repl.nhosted; i++) sweep_outbox(s->repl.hosted[i]);
  }
  return 0;
}

/* ---- setup ---------------------------------------------------------------------- */

/* The rule of --schedule; ssp:inf is async. */
static const ps_rule_ops_t *rule_of(const train_config_t *cfg) {
  switch (cfg->schedule) {
  case SCHEDULE_VALUE: return &ps_rule_value;
  case SCHEDULE_BACKUP: return &ps_rule_backup;
  case SCHEDULE_ASYNC: return &ps_rule_async;
  case SCHEDULE_SSP: return isinf(cfg->schedule_param) ? &ps_rule_async : &ps_rule_ssp;
  default: return &ps_rule_ssp;
  }
}

/* The whole model; under --tp, the key table of this server's slice. */
static int build_model(ps_server_t *s, const dataset_t *train) {
  if (s->T > 1) return ps_keys_table_factors(s->cfg, train, s->slice, s->T, &s->model, &s->fplan);
  model_spec_t spec;
  DT_TRY(model_spec_load(s->cfg->model, &spec));
  shape_t in = {train->c, train->h, train->w};
  int rc = model_build(&spec, in, train->nclasses, 1, &s->model);
  model_spec_free(&spec);
  if (rc != 0) return -1;
  model_init_params(s->model, s->cfg->seed);
  if (!s->cfg->ps.push_factors) return 0;
  ps_keys_t k; /* the whole arena: keys are offsets */
  DT_TRY(ps_keys_plan(s->model, 0, 1, &k));
  rc = ps_factor_plan(s->model, &k, &s->fplan);
  ps_keys_free(&k);
  return rc;
}

static void build_schedule(ps_server_t *s, const dataset_t *train) {
  s->steps_per_epoch = train_steps_per_epoch(s->cfg, train->n, s->N);
  s->batches_per_epoch = ((int64_t)train->n + s->cfg->batch - 1) / s->cfg->batch;
  s->lr = train_lr_schedule(s->cfg, s->steps_per_epoch);
}

/* Every worker starts from the shard as it is now (resumed or not). */
static int setup_workers(ps_server_t *s) {
  s->workers = calloc((size_t)s->N, sizeof *s->workers);
  if (!s->workers) return dt_error("out of memory");
  for (int w = 0; w < s->N; w++) {
    ps_worker_state_t *ws = &s->workers[w];
    ws->pulled_version = s->version - 1;
    if (!(ws->snapshot = dt_alloc_floats(s->len))) return -1;
    memcpy(ws->snapshot, s->params, s->len * sizeof(float));
    if (s->cfg->compression.pulls &&
        !(ws->pull_enc = dt_alloc(codec_max_bytes(&s->cfg->compression.codec, s->len))))
      return -1;
  }
  if (s->cfg->compression.pulls && !(s->mirror_scratch = dt_alloc_floats(2 * s->len))) return -1;
  return 0;
}

/* Instance `index` (a shard) on this rank: the rank's own shard, or under
 * --ps-replicas 2 the backup copy of the shard before it. */
static int setup(ps_server_t *s, comm_t *world, const train_config_t *cfg, int nworkers,
                 const dataset_t *train, int index) {
  s->repl.data_from = -1;
  s->repl.backup_rank = -1;
  s->world = world;
  s->cfg = cfg;
  s->nranks = nworkers;
  s->T = ps_group_size(cfg);
  s->N = nworkers / s->T;
  s->K = ps_nservers(cfg, nworkers);
  s->rank = comm_rank(world);
  s->index = index;
  if (s->rank - nworkers < 0 || s->rank - nworkers >= s->K)
    return dt_error("rank %d is not a parameter server (servers are ranks %d..%d)", s->rank,
                    nworkers, nworkers + s->K - 1);
  int per_slice = s->K / s->T;
  s->slice = ps_server_slice(s->index, s->K, s->T);
  DT_TRY(build_model(s, train));
  DT_TRY(ps_shard_plan_factors(s->model, per_slice, cfg->optim.kind == OPTIM_LARS, &s->fplan, &s->map));
  s->map.nworkers = s->N;
  s->map.first_server = nworkers + s->slice * per_slice;
  s->r = s->map.shards[s->index % per_slice];
  s->len = s->r.end - s->r.begin;
  s->params = dt_alloc_floats(s->len);
  s->drain = dt_alloc_floats(s->len);
  if (cfg->compression.codec.kind != CODEC_NONE)
    s->encoded_cap = codec_max_bytes(&cfg->compression.codec, s->len);
  if (cfg->ps.push_factors) /* a batch's rows of the layers here */
    s->encoded_cap = ps_factor_bytes(&s->fplan, s->r.begin, s->r.end, (size_t)cfg->batch);
  if (s->encoded_cap && !(s->encoded = dt_alloc(s->encoded_cap))) return -1;
  s->cap_out = 4 * (s->N + s->K) + 16;
  s->out = calloc((size_t)s->cap_out, sizeof *s->out);
  if (!s->params || !s->drain || !s->out) return dt_error("out of memory");
  memcpy(s->params, s->model->params + s->r.begin, s->len * sizeof(float));
  optim_config_t ocfg = ps_server_optim(cfg, s->N);
  DT_TRY(optim_new(&ocfg, s->len, &s->opt));
  DT_TRY(ps_shard_no_decay(s->model, s->r, s->opt));
  DT_TRY(ps_shard_segments(s->model, s->r, &s->segs, &s->nsegs));
  DT_TRY(ps_apply_new(cfg->ps.server_threads, s->segs, s->nsegs, s->len, cfg->optim.kind == OPTIM_LARS,
                      &s->apply));
  build_schedule(s, train);
  DT_TRY(ps_rule_async_init(s)); /* DC-ASGD-a's MeanSquare resumes with the shard */
  if (cfg->resume[0]) {
    int64_t step = 0;
    if (ps_ckpt_load_shard(cfg->resume, s->model, s->opt, s->r, s->params, s->dc_mean_square,
                           &s->first_epoch, &step) != 0)
      return dt_error_prefix("--resume: ");
    s->version = step;
    s->opt->steps = step;
  }
  s->epoch.flushed = s->first_epoch - 1;
  s->epoch.flush = -1;
  DT_TRY(setup_workers(s));
  s->rule = rule_of(cfg);
  if (s->rule->init) DT_TRY(s->rule->init(s));
  for (int w = 0; w < s->N; w++) s->workers[w].chain.seen = -1;
  if (s->index == 0 && s->rank == nworkers) DT_TRY(ps_coord_init(s, &s->coord));
  return 0;
}

static void teardown(ps_server_t *s) {
  if (!s->world) return; /* never set up */
  if (s->in_req) comm_cancel(s->world, s->in_req);
  ps_chain_teardown(s);
  ps_coord_repl_free(s);
  for (int i = 0; s->out && i < s->cap_out; i++)
    if (s->out[i].used) out_done(s, &s->out[i], 1);
  ps_coord_free(s->coord);
  free(s->rule_state);
  dt_free(s->dc_mean_square);
  for (int w = 0; s->workers && w < s->N; w++) {
    dt_free(s->workers[w].push.grad);
    dt_free(s->workers[w].push.ahead);
    dt_free(s->workers[w].part.buf);
    dt_free(s->workers[w].snapshot);
    dt_free(s->workers[w].pull_enc);
    dt_free(s->workers[w].chain.buf);
  }
  dt_free(s->mirror_scratch);
  free(s->workers);
  free(s->deferred);
  free(s->out);
  ps_apply_free(s->apply);
  ps_factor_plan_free(&s->fplan);
  free(s->segs);
  optim_free(s->opt);
  dt_free(s->params);
  dt_free(s->drain);
  dt_free(s->encoded);
  ps_shard_free(&s->map);
  model_free(s->model);
}

static void withdraw_outbox(ps_server_t *s) {
  for (int i = 0; s->out && i < s->cap_out; i++) {
    ps_out_t *o = &s->out[i];
    if (o->hdr_req) comm_cancel(s->world, o->hdr_req);
    if (o->val_req) comm_cancel(s->world, o->val_req);
    o->hdr_req = o->val_req = NULL;
    o->used = 0;
  }
}

/* --kill-server: the server stops as a crash would stop it. Under mpi
 * the process is killed (SIGKILL: nothing runs after it); on local the
 * rank's thread ends at once: nothing is answered, said or waited for,
 * what it had posted is withdrawn (as the transport does for a rank that
 * ends), and its memory is freed only so that leak checkers stay quiet. */
static int die(ps_server_t *s, int why) {
  if (why == KILLED)
    dt_log(DT_LOG_WARN, "server %d (rank %d): stopping abruptly at its push %lld (--kill-server)",
           s->index, s->rank, (long long)s->repl.kill_count);
  else
    dt_log(DT_LOG_WARN, "server %d (rank %d): stopping abruptly (%s to its thread): its shards go on "
           "on their copies", s->index, s->rank, dt_signal_name(dt_rank_signalled()));
  if (s->cfg->comm == COMM_MPI) raise(SIGKILL);
  for (int i = 0; i < ps_chain_ninstances(s); i++) withdraw_outbox(ps_chain_instance(s, i));
  return 0;
}

int ps_server_new_instance(const ps_server_t *s, int index, ps_server_t **out) {
  ps_server_t *b = calloc(1, sizeof *b);
  if (!b) return dt_error("out of memory");
  *out = b;
  return setup(b, s->world, s->cfg, s->nranks, s->repl.train, index);
}

void ps_server_free_instance(ps_server_t *b) {
  if (!b) return;
  teardown(b);
  free(b);
}

int ps_server_run(comm_t *world, const train_config_t *cfg, int nworkers, const dataset_t *train) {
  ps_server_t s, *b = NULL;
  memset(&s, 0, sizeof s);
  int K = ps_nservers(cfg, nworkers), me = comm_rank(world) - nworkers;
  int rc = setup(&s, world, cfg, nworkers, train, me);
  s.repl.train = train;
  if (rc == 0 && cfg->ps.replicas > 1) rc = ps_server_new_instance(&s, (me + K - 1) % K, &b);
  if (rc == 0) rc = ps_chain_setup(&s, b, train);
  else ps_server_free_instance(b); /* not yet the rank's */
  if (rc == 0) rc = serve(&s);
  if (rc == KILLED || rc == SIGNALLED) rc = die(&s, rc);
  else if (rc == 0) ps_chain_report(&s);
  for (int i = 0; i < s.repl.nhosted; i++) ps_server_free_instance(s.repl.hosted[i]);
  free(s.repl.hosted);
  teardown(&s);
  return rc;
}
