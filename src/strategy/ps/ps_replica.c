/* Chain replication of the servers' shards (--ps-replicas 2; van Renesse
 * and Schneider 2004), with the coordinator as the chain's master.
 *
 * The chain. Shard k's primary is server k and its backup server k + 1
 * (mod K), so every server rank runs two instances of the server core
 * (ps_server.c): its own shard, and the backup copy of the shard before
 * it (`hosted`), built the same way, from the same initial parameters or
 * checkpoint, with the same rule.
 *
 * A push. The primary takes a worker's push through its rule as before;
 * where the rule would acknowledge it, the push (its request and the
 * values received) is forwarded to the backup instead (PS_OP_REPL), and
 * the worker's acknowledgement waits. The backup's copy takes the same
 * push through the same rule, in the primary's order (one sender, one
 * tag: the transport keeps the order), so it makes the same decisions and
 * the same optimizer steps: its parameters and state stay the primary's
 * bit for bit. Once it holds the push it says so (PS_OP_REPL_ACK) and the
 * primary acknowledges the worker: an acknowledged push is on both
 * copies. What is replayed is the rule's input, not its output, so sync's
 * and ssp's pushes held for their clock are on both copies too, and the
 * backup knows each worker's clock.
 *
 * A death. The coordinator (server 0) pings the other servers every
 * PING_EVERY; a server whose rank the transport knows has ended (local:
 * its thread; mpi: its process, on this node), that cannot be sent to,
 * or that has not answered for SERVER_LEASE (mpi: a killed process on
 * another node) is dead. The coordinator keeps
 * each shard's primary and backup (owner, backup). Each shard the dead
 * server served goes to its backup (PS_OP_TAKEOVER); each shard it backed
 * up goes on with its primary (PS_OP_LOST_BACKUP). Every worker is told
 * (PS_TAG_FAILOVER: the dead server and each shard's server now) and
 * sends again to the shard's new server what the dead one had not
 * answered: pulls, and pushes with their clocks. A push at or below the
 * last clock a copy has taken from that worker is a duplicate:
 * acknowledged, not applied (ps_server.c's is_duplicate), so no push is
 * lost or applied twice.
 *
 * A new backup (chain replication's new tail). Each of those shards is
 * given a new backup in the same order, the next live server after its
 * primary in the ring, if one is left (K >= 3): the primary withdraws the
 * forwards in flight to the dead backup and keeps their acks waiting,
 * copies its whole state to the new backup (PS_OP_COPY: parameters,
 * optimizer state, version, each worker's clock, held push and last
 * clock taken, the epoch counts; the rules that run with replicas keep
 * nothing else), and forwards what it takes next after the copy (one
 * sender, one tag: in order). The new backup builds an instance of the
 * shard as at the start, puts the copy over it, and says so to the
 * primary and the coordinator (PS_OP_COPY_ACK): the acks kept waiting go
 * then, later ones wait for their own REPL_ACK as before, and from then
 * on the coordinator counts on that copy, so a second death, of either,
 * loses nothing. A rank therefore hosts any number of instances (its own
 * shard first, then `hosted`), and a worker's parts for several shards
 * may go to one rank: each shard's part has its own reply tags (ps.h's
 * PS_TAG_REPLY_SHARD), or their replies would cross. With K = 2 no server is left: the shard
 * goes on with one copy, and the coordinator says so in one line. The
 * copy's bytes are counted apart from the forwards' (ps_chain_report's
 * "state copies"); describe_step leaves them out, as a copy is made only
 * on a death.
 *
 * The coordinator's standby. The server holding shard 0's backup (server
 * 1 at the start) polls as the coordinator does and watches it: server
 * 0's rank ended, or no ping for SERVER_LEASE, and it takes over shard 0
 * and the coordinator's role with it (the coordinator is the shard-0
 * instance's: it hears the workers through shard 0's pushes), tells the
 * other servers (PS_OP_COORD: orders, FLUSH, DEAD, STOP and pings are
 * taken from it now), then deals with server 0's death as with any
 * server's (server_died: new backups, the workers' notice, sent from
 * here). The workers' calls to the coordinator (STATS, BYE) follow shard
 * 0's server and are sent again like pushes.
 *
 * The coordinator's state (the pool schedules' batches handed out and
 * epochs, the statistics, the byes) is copied to the standby after each
 * change and NEXT is answered once the standby holds it
 * (ps_coord_repl.c); the heir goes on from the last copy, under sync,
 * ssp:S, async and ssp:inf alike. Its leases start over.
 *
 * A sync heir may hold a worker's push of clock c and get its push of
 * c + 1 (the worker saw the dead primary apply c, whose other pushes the
 * heir lacked): rule_ssp.c keeps the second apart until c is applied
 * (written over c's, it replaced c's gradient in the sum, and the weights
 * differed from an undisturbed run's in about half the runs).
 *
 * Decided, and left: the coordinator dies alone
 * (index=0 with index2 is refused), and its standby is the start's. A
 * death during a copy (of the primary) ends the run with the reason; a
 * death of a shard's last copy too. Without replicas a dead server stops
 * the run with the reason, as it did. */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps_server.h"

#define PING_EVERY 0.25   /* seconds between the coordinator's pings */
#define SERVER_LEASE 2.0  /* seconds without an answer: the server is dead */
#define REPL_DATA_WAIT 1.0 /* seconds a forward's values may take after its request: less than
                            * SERVER_LEASE, or a server waiting on a dead primary's values would
                            * miss its pings and be taken for dead (mpi, K >= 3) */

int ps_chain_ninstances(const ps_server_t *s) { return 1 + s->repl.nhosted; }

ps_server_t *ps_chain_instance(ps_server_t *s, int i) { return i == 0 ? s : s->repl.hosted[i - 1]; }

/* This rank's instance of shard k (NULL: none). */
static ps_server_t *instance_of(ps_server_t *s, int64_t k) {
  for (int i = 0; i < ps_chain_ninstances(s); i++)
    if (ps_chain_instance(s, i)->index == k) return ps_chain_instance(s, i);
  return NULL;
}

/* ... the one whose range holds key `key` (a forward's, an ack's). */
static ps_server_t *instance_at(ps_server_t *s, uint64_t key) {
  for (int i = 0; i < ps_chain_ninstances(s); i++) {
    ps_server_t *b = ps_chain_instance(s, i);
    if (key >= b->r.begin && key < b->r.end) return b;
  }
  return NULL;
}

static int add_hosted(ps_server_t *s, ps_server_t *b) {
  if (s->repl.nhosted == s->repl.cap_hosted) {
    int cap = s->repl.cap_hosted ? 2 * s->repl.cap_hosted : 2;
    ps_server_t **h = realloc(s->repl.hosted, (size_t)cap * sizeof *h);
    if (!h) return dt_error("out of memory");
    s->repl.hosted = h, s->repl.cap_hosted = cap;
  }
  s->repl.hosted[s->repl.nhosted++] = b;
  b->repl.home = s;
  return 0;
}

/* The coordinator's view of the servers: alive, heard, each shard's
 * primary and backup as at the start. */
static int coord_tables(ps_server_t *s) {
  int K = s->K;
  {
    s->repl.server_dead = calloc((size_t)K, 1);
    s->repl.server_heard = malloc((size_t)K * sizeof(double));
    s->repl.ping_req = calloc((size_t)K, sizeof *s->repl.ping_req);
    s->repl.owner = malloc((size_t)K * sizeof(int));
    s->repl.backup = malloc((size_t)K * sizeof(int));
    s->repl.ready = malloc((size_t)K);
    if (!s->repl.server_dead || !s->repl.server_heard || !s->repl.ping_req || !s->repl.owner ||
        !s->repl.backup || !s->repl.ready)
      return dt_error("out of memory");
    for (int k = 0; k < K; k++) {
      s->repl.server_heard[k] = dt_now();
      s->repl.owner[k] = k;
      s->repl.backup[k] = s->cfg->ps.replicas > 1 ? (k + 1) % K : -1;
      s->repl.ready[k] = 1; /* built from the same start */
    }
    s->repl.next_ping = dt_now();
  }
  return 0;
}

int ps_chain_setup(ps_server_t *s, ps_server_t *b, const dataset_t *train) {
  int K = s->K, first = s->nranks; /* world rank of server 0 */
  s->repl.train = train;
  s->repl.home = s;
  s->repl.coord_rank = first;
  s->repl.coord_heard = dt_now();
  if (b) {
    DT_TRY(add_hosted(s, b));
    b->repl.is_backup = 1;
    b->repl.primary_rank = first + b->index;
    s->repl.backup_rank = first + (s->index + 1) % K;
  }
  if (s->coord && K > 1 && (s->cfg->ps.replicas > 1 || s->cfg->ps.kill_server >= 0)) DT_TRY(coord_tables(s));
  return 0;
}

/* Withdraws worker w's forward still in flight (its backup is gone). */
static void forget_forward(ps_server_t *s, int w) {
  ps_worker_state_t *ws = &s->workers[w];
  if (ws->chain.req_send) comm_cancel(s->world, ws->chain.req_send);
  if (ws->chain.data_send) comm_cancel(s->world, ws->chain.data_send);
  ws->chain.req_send = ws->chain.data_send = NULL;
}

/* Worker w's forward has been taken by the backup (it acknowledged it):
 * its sends are complete. */
static void finish_forward(ps_server_t *s, int w) {
  ps_worker_state_t *ws = &s->workers[w];
  comm_req_t *r[2] = {ws->chain.req_send, ws->chain.data_send};
  ws->chain.req_send = ws->chain.data_send = NULL;
  for (int i = 0; i < 2; i++)
    if (r[i] && comm_wait(s->world, r[i]) != 0)
      dt_log(DT_LOG_DEBUG, "server %d: a forward to the backup: %s", s->index, dt_errmsg());
}

void ps_chain_teardown(ps_server_t *s) {
  for (int w = 0; s->workers && w < s->N; w++) forget_forward(s, w);
  for (int i = 0; i < 2; i++)
    if (s->repl.copy_req[i]) comm_cancel(s->world, s->repl.copy_req[i]), s->repl.copy_req[i] = NULL;
  free(s->repl.copy_buf);
  free(s->repl.owner);
  free(s->repl.backup);
  free(s->repl.ready);
  s->repl.ready = NULL;
  s->repl.copy_buf = NULL;
  s->repl.owner = s->repl.backup = NULL;
  for (int k = 0; s->repl.ping_req && k < s->K; k++)
    if (s->repl.ping_req[k]) comm_cancel(s->world, s->repl.ping_req[k]);
  if (s->repl.pong_req) comm_cancel(s->world, s->repl.pong_req);
  s->repl.pong_req = NULL;
  free(s->repl.ping_req);
  s->repl.ping_req = NULL;
  free(s->repl.server_dead);
  free(s->repl.server_heard);
  s->repl.server_dead = NULL;
  s->repl.server_heard = NULL;
}

/* Worker w's acknowledgement, which waited for the backup, goes now. */
static void ack_worker(ps_server_t *s, int w) {
  ps_worker_state_t *ws = &s->workers[w];
  ws->chain.waiting = 0;
  ps_reply_t rep = ps_server_header(s, ws->chain.req.epoch);
  ps_server_send_reply(s, w, &ws->chain.req, &rep);
}

void ps_chain_lost_backup(ps_server_t *s) {
  if (s->repl.backup_rank < 0) return;
  dt_log(DT_LOG_WARN, "server rank %d: shard %d's backup (rank %d) is gone; the shard goes on with "
         "one copy", s->rank, s->index, s->repl.backup_rank);
  s->repl.backup_rank = -1;
  s->repl.copying = 0;
  for (int w = 0; w < s->N; w++) {
    forget_forward(s, w);
    if (s->workers[w].chain.waiting) ack_worker(s, w);
  }
  if (s->coord) ps_coord_repl_lost(s); /* its held answers go too */
}

/* --kill-server index=K,at-push=P,lose-forwards=N: the push this rank
 * is taking is one of server K's N before its P-th, whose forwards are
 * lost on the way (the backup lags the primary when it dies). */
static int forward_lost(const ps_server_t *s) {
  const ps_config_t *p = &s->cfg->ps;
  const ps_server_t *home = s->repl.home ? s->repl.home : s;
  return p->kill_server_lose > 0 && home->index == p->kill_server &&
         home->repl.kill_count >= p->kill_server_at - p->kill_server_lose;
}

/* The push the rule has taken from worker w goes to the backup, its
 * values copied first: the rule may sum into them (sync) before the
 * backup has taken them. */
static int forward(ps_server_t *s, int w, const ps_req_t *req) {
  ps_worker_state_t *ws = &s->workers[w];
  finish_forward(s, w); /* the last one was acknowledged, so it has gone */
  if (forward_lost(s)) { /* its ack waits for a REPL_ACK that never comes */
    ws->chain.req = *req;
    ws->chain.waiting = 1;
    return 0;
  }
  if (!ws->chain.buf && !(ws->chain.buf = dt_alloc_floats(s->len))) return -1;
  memcpy(ws->chain.buf, ws->push.grad, s->len * sizeof(float));
  ws->chain.req = *req;
  ws->chain.fwd = *req;
  ws->chain.fwd.op = PS_OP_REPL;
  ws->chain.fwd.flags &= ~PS_PUSH_GATHERED;
  ws->chain.waiting = 1;
  comm_bytes_t before = comm_bytes(s->world); /* the transport's count of the forward */
  if (comm_isend(s->world, s->repl.backup_rank, PS_TAG_REQ, &ws->chain.fwd, PS_REQ_BYTES,
                 &ws->chain.req_send) != 0 ||
      comm_isend(s->world, s->repl.backup_rank, PS_TAG_DATA, ws->chain.buf,
                 ps_values_bytes(s->len), &ws->chain.data_send) != 0) {
    dt_log(DT_LOG_WARN, "server %d: forwarding a push to its backup: %s", s->index, dt_errmsg());
    ps_chain_lost_backup(s); /* acknowledges it */
  }
  s->repl.bytes_sent += comm_bytes(s->world).sent - before.sent;
  return 0;
}

/* Sends a small request without waiting for it to be taken: two
 * servers sending to each other at once must not wait on each other.
 * The slot's last send is complete first (it was taken: what it answered
 * has come back, or it is the coordinator's, which is always receiving). */
static int send_small(ps_server_t *s, int rank, ps_req_t *buf, comm_req_t **slot) {
  if (*slot) {
    comm_req_t *r = *slot;
    *slot = NULL;
    if (comm_wait(s->world, r) != 0) return -1;
  }
  return comm_isend(s->world, rank, PS_TAG_REQ, buf, PS_REQ_BYTES, slot);
}

/* The backup copy holds worker w's push: the primary is told (its
 * forward slot for w, unused on a backup copy, carries the message). */
static void ack_primary(ps_server_t *b, int w, const ps_req_t *req) {
  ps_worker_state_t *ws = &b->workers[w];
  ws->chain.fwd = (ps_req_t){.magic = PS_MAGIC, .op = PS_OP_REPL_ACK, .worker = w,
                             .clock = req->clock, .epoch = req->epoch, .begin = b->r.begin};
  comm_bytes_t before = comm_bytes(b->world);
  int rc = send_small(b, b->repl.primary_rank, &ws->chain.fwd, &ws->chain.req_send);
  b->repl.bytes_sent += comm_bytes(b->world).sent - before.sent;
  if (rc != 0)
    dt_log(DT_LOG_DEBUG, "backup of shard %d: acknowledging to rank %d: %s", b->index,
           b->repl.primary_rank, dt_errmsg());
}

int ps_chain_ack(ps_server_t *s, int src, const ps_req_t *req) {
  if (req->op != PS_OP_PUSH) return 0;
  if (s->repl.replaying) {
    ack_primary(s, src, req);
    return 1;
  }
  if (s->repl.backup_rank < 0 || !s->repl.stored) return 0;
  s->repl.stored = 0;
  if (forward(s, src, req) != 0) return 0;
  return s->workers[src].chain.waiting; /* 0: the backup is lost, acknowledge now */
}

void ps_chain_take_over(ps_server_t *b, const char *why) {
  if (!b || !b->repl.is_backup) return;
  b->repl.is_backup = 0, b->repl.took_over = 1;
  for (int w = 0; w < b->N; w++) forget_forward(b, w); /* acks to the dead primary still in flight */
  dt_log(DT_LOG_WARN, "server rank %d takes over shard %d from its dead primary (rank %d; %s) at "
         "version %lld", b->rank, b->index, b->repl.primary_rank, why, (long long)b->version);
}

/* Values from server rank `from`, waited for at most REPL_DATA_WAIT (it
 * may die sending them). */
static int recv_bounded(ps_server_t *b, int from, void *dst, size_t bytes) {
  comm_req_t *r;
  DT_TRY(comm_irecv(b->world, from, PS_TAG_DATA, dst, bytes, &r));
  double deadline = dt_now() + REPL_DATA_WAIT, pause = 0;
  for (int done = 0;;) {
    if (comm_test(b->world, r, &done) != 0 || done) return comm_wait(b->world, r);
    if (dt_now() > deadline) {
      comm_cancel(b->world, r);
      return dt_error("the forward's values did not come within %g s (its primary has died?)",
                      REPL_DATA_WAIT);
    }
    pause = pause < 200e-6 ? pause * 2 + 5e-6 : 200e-6;
    dt_sleep_until(dt_now() + pause);
  }
}

int ps_chain_recv_from(ps_server_t *s, int from, void *dst, size_t bytes) {
  return recv_bounded(s, from, dst, bytes);
}

int ps_chain_recv_values(ps_server_t *b, void *dst, size_t bytes) {
  int rc = recv_bounded(b, b->repl.data_from, dst, bytes);
  if (rc != 0) b->repl.primary_failed = 1; /* its next forwards would wait as long: dead */
  return rc;
}

/* A forwarded push, replayed on the hosted backup copy through its rule
 * as the primary did; the values come from the primary. */
static int replay(ps_server_t *s, int src, const ps_req_t *req) {
  ps_server_t *b = instance_at(s, req->begin);
  int w = req->worker, from = ps_server_rank_of(s, src);
  if (b && !b->repl.is_backup && from == b->repl.primary_rank) {
    dt_log(DT_LOG_INFO, "server %d: a forward from its dead primary (rank %d) after the takeover: "
           "ignored (the worker sends it again)", s->index, from);
    return 0;
  }
  if (b && b->repl.is_backup && b->repl.primary_failed) {
    dt_log(DT_LOG_INFO, "server %d: a forward from rank %d, whose values stopped coming: ignored",
           s->index, from);
    return 0;
  }
  if (!b || !b->repl.is_backup || from != b->repl.primary_rank || w < 0 || w >= b->N) {
    dt_log(DT_LOG_ERROR, "server %d: a forwarded push from rank %d it does not back up; ignored",
           s->index, from);
    return 0;
  }
  ps_req_t push = *req;
  push.op = PS_OP_PUSH;
  b->repl.replaying = 1;
  b->repl.data_from = from;
  int rc = b->rule->push(b, w, &push);
  b->repl.replaying = 0;
  b->repl.data_from = -1;
  return rc;
}

static void release_ack(ps_server_t *rank, const ps_req_t *req) {
  ps_server_t *s = instance_at(rank, req->begin);
  int w = req->worker;
  if (!s || s->repl.is_backup || w < 0 || w >= s->N) return;
  ps_worker_state_t *ws = &s->workers[w];
  if (!ws->chain.waiting || ws->chain.req.clock != req->clock) return; /* stale */
  finish_forward(s, w);
  ack_worker(s, w);
}

/* ---- a new backup: the shard's whole state, copied --------------------------------- */

/* What a shard is besides its arrays: the copy's head, then one of these
 * per worker, then params, the optimizer's state arenas, the held pushes'
 * values in worker order, and those of the pushes held a clock ahead
 * (rule_ssp.c's swap_ahead, on a shard taken over) in worker order. (Replicas run sync, ssp:S and async
 * only, whose rules keep nothing else: rule_state is theirs to have.) */
typedef struct {
  int64_t version, steps, took_over, received, duplicates;
  int64_t pushes, flush, flush_pushes, flushed;
} copy_head_t;

typedef struct {
  int64_t version, batch, epoch, clock, queued, own_steps, own_steps_at_pull, pulled_version, seen;
  int64_t ahead_version, ahead_batch, ahead_epoch;
  int32_t held, dead, ahead_held, unused;
} copy_worker_t;

static size_t copy_bytes(const ps_server_t *s, int nheld) {
  return sizeof(copy_head_t) + (size_t)s->N * sizeof(copy_worker_t) +
         (size_t)(1 + s->opt->nstate + nheld) * s->len * sizeof(float);
}

static int held_pushes(const ps_server_t *s) {
  int n = 0;
  for (int w = 0; w < s->N; w++) n += (s->workers[w].push.held != 0) + (s->workers[w].push.ahead_held != 0);
  return n;
}

static size_t pack(const ps_server_t *s, uint8_t *out) {
  copy_head_t h = {s->version, s->opt->steps, s->repl.took_over, s->repl.received, s->repl.duplicates,
                   s->epoch.pushes, s->epoch.flush, s->epoch.flush_pushes, s->epoch.flushed};
  uint8_t *p = out;
  size_t vals = s->len * sizeof(float);
  memcpy(p, &h, sizeof h), p += sizeof h;
  for (int w = 0; w < s->N; w++) {
    const ps_worker_state_t *ws = &s->workers[w];
    copy_worker_t c = {ws->push.version, ws->push.batch, ws->push.epoch, ws->push.clock,
                       ws->push.queued, ws->own_steps, ws->own_steps_at_pull, ws->pulled_version,
                       ws->chain.seen, ws->push.ahead_version, ws->push.ahead_batch,
                       ws->push.ahead_epoch, ws->push.held, ws->dead, ws->push.ahead_held, 0};
    memcpy(p, &c, sizeof c), p += sizeof c;
  }
  memcpy(p, s->params, vals), p += vals;
  for (int i = 0; i < s->opt->nstate; i++) memcpy(p, s->opt->state[i], vals), p += vals;
  for (int w = 0; w < s->N; w++)
    if (s->workers[w].push.held) memcpy(p, s->workers[w].push.grad, vals), p += vals;
  for (int w = 0; w < s->N; w++)
    if (s->workers[w].push.ahead_held) memcpy(p, s->workers[w].push.ahead, vals), p += vals;
  return (size_t)(p - out);
}

static int unpack(ps_server_t *b, const uint8_t *in, size_t bytes) {
  copy_head_t h;
  const uint8_t *p = in;
  size_t vals = b->len * sizeof(float);
  memcpy(&h, p, sizeof h), p += sizeof h;
  int nheld = 0;
  for (int w = 0; w < b->N; w++) {
    copy_worker_t c;
    memcpy(&c, p + (size_t)w * sizeof c, sizeof c);
    nheld += (c.held != 0) + (c.ahead_held != 0);
  }
  if (bytes != copy_bytes(b, nheld))
    return dt_error("a state copy of %zu bytes; shard %d's with %d held pushes is %zu", bytes,
                    b->index, nheld, copy_bytes(b, nheld));
  b->version = h.version, b->opt->steps = h.steps, b->repl.took_over = (int)h.took_over;
  b->repl.received = h.received, b->repl.duplicates = h.duplicates;
  b->epoch.pushes = h.pushes, b->epoch.flush = h.flush;
  b->epoch.flush_pushes = h.flush_pushes, b->epoch.flushed = h.flushed;
  for (int w = 0; w < b->N; w++) {
    ps_worker_state_t *ws = &b->workers[w];
    copy_worker_t c;
    memcpy(&c, p, sizeof c), p += sizeof c;
    ws->push.version = c.version, ws->push.batch = c.batch, ws->push.epoch = c.epoch;
    ws->push.clock = c.clock, ws->push.queued = c.queued, ws->push.held = c.held;
    ws->own_steps = c.own_steps, ws->own_steps_at_pull = c.own_steps_at_pull;
    ws->pulled_version = c.pulled_version, ws->chain.seen = c.seen, ws->dead = c.dead;
    ws->push.ahead_version = c.ahead_version, ws->push.ahead_batch = c.ahead_batch;
    ws->push.ahead_epoch = c.ahead_epoch, ws->push.ahead_held = c.ahead_held;
  }
  memcpy(b->params, p, vals), p += vals;
  for (int i = 0; i < b->opt->nstate; i++) memcpy(b->opt->state[i], p, vals), p += vals;
  for (int w = 0; w < b->N; w++) {
    ps_worker_state_t *ws = &b->workers[w];
    if (!ws->push.held) continue;
    if (!ws->push.grad && !(ws->push.grad = dt_alloc_floats(b->len))) return -1;
    memcpy(ws->push.grad, p, vals), p += vals;
  }
  for (int w = 0; w < b->N; w++) {
    ps_worker_state_t *ws = &b->workers[w];
    if (!ws->push.ahead_held) continue;
    if (!ws->push.ahead && !(ws->push.ahead = dt_alloc_floats(b->len))) return -1;
    memcpy(ws->push.ahead, p, vals), p += vals;
  }
  return 0;
}

/* The previous copy's sends: through, or withdrawn (its target died). */
static void end_copy_sends(ps_server_t *s) {
  for (int i = 0; i < 2; i++) {
    comm_req_t *r = s->repl.copy_req[i];
    int done = 0;
    s->repl.copy_req[i] = NULL;
    if (!r) continue;
    if (comm_test(s->world, r, &done) == 0 && done) comm_wait(s->world, r);
    else comm_cancel(s->world, r);
  }
}

/* Primary p's shard gets a new backup, server nb (-1: none is left):
 * chain replication's new tail. The forwards in flight to the dead
 * backup are withdrawn, their pushes' acks kept waiting; the whole state
 * goes to the new backup, and what p takes next is forwarded after it
 * (one sender, one tag: in order). The acks kept waiting go when the
 * copy is in place (COPY_ACK); later ones wait for their own REPL_ACK. */
static int new_backup(ps_server_t *p, int nb) {
  if (nb < 0) {
    ps_chain_lost_backup(p); /* says so in one line, and acks */
    return 0;
  }
  for (int w = 0; w < p->N; w++) forget_forward(p, w);
  end_copy_sends(p);
  size_t bytes = copy_bytes(p, held_pushes(p));
  uint8_t *buf = realloc(p->repl.copy_buf, bytes);
  if (!buf) return dt_error("out of memory");
  p->repl.copy_buf = buf;
  pack(p, buf);
  p->repl.backup_rank = p->nranks + nb;
  p->repl.copying = 1;
  p->repl.copy_msg = (ps_req_t){.magic = PS_MAGIC, .op = PS_OP_COPY, .worker = -1,
                                .epoch = p->index, .encoded = bytes, .begin = p->r.begin};
  comm_bytes_t before = comm_bytes(p->world);
  if (comm_isend(p->world, p->repl.backup_rank, PS_TAG_REQ, &p->repl.copy_msg, PS_REQ_BYTES,
                 &p->repl.copy_req[0]) != 0 ||
      comm_isend(p->world, p->repl.backup_rank, PS_TAG_DATA, buf, bytes, &p->repl.copy_req[1]) != 0) {
    dt_log(DT_LOG_WARN, "server %d: copying shard %d to server %d: %s", p->index, p->index, nb,
           dt_errmsg());
    p->repl.copying = 0;
    ps_chain_lost_backup(p);
    return 0;
  }
  p->repl.copy_bytes += comm_bytes(p->world).sent - before.sent;
  dt_log(DT_LOG_WARN, "server rank %d: shard %d's state (%zu bytes, version %lld) goes to server "
         "%d, its new backup", p->rank, p->index, bytes, (long long)p->version, nb);
  if (!p->coord) return 0;
  ps_coord_repl_force(p); /* the coordinator's state follows the copy: the new backup stands by */
  return ps_coord_repl_sync(p);
}

/* The copy is in place on the new backup (server `clock`): the
 * coordinator counts on it from now on; the primary's acks it held go. A
 * push whose forward went out after the copy (its send still unfinished)
 * waits for its own REPL_ACK. */
static void copy_done(ps_server_t *rank, const ps_req_t *req) {
  int k = (int)req->epoch;
  ps_server_t *c = ps_chain_coordinator(rank);
  if (c && c->repl.ready && k >= 0 && k < c->K && c->repl.backup[k] == req->clock)
    c->repl.ready[k] = 1;
  ps_server_t *p = instance_of(rank, req->epoch);
  if (!p || p->repl.is_backup || !p->repl.copying) return;
  p->repl.copying = 0;
  for (int w = 0; w < p->N; w++) {
    ps_worker_state_t *ws = &p->workers[w];
    if (ws->chain.waiting && !ws->chain.req_send) ack_worker(p, w);
  }
}

/* A primary's copy of shard `epoch`: this rank is its new backup. */
static int take_copy(ps_server_t *s, int src, const ps_req_t *req) {
  int from = ps_server_rank_of(s, src), k = (int)req->epoch;
  ps_server_t *b = instance_of(s, k);
  if (k < 0 || k >= s->K || (b && !b->repl.is_backup) || req->encoded > ((uint64_t)1 << 40)) {
    dt_log(DT_LOG_ERROR, "server %d: a copy of shard %d from rank %d: %s", s->index, k, from,
           b ? "this rank serves that shard" : "no such shard");
    return 0;
  }
  int fresh = !b;
  if (fresh) {
    if (ps_server_new_instance(s, k, &b) != 0 || add_hosted(s, b) != 0) {
      ps_server_free_instance(b);
      return -1;
    }
    for (int w = 0; w < s->N; w++) b->workers[w].dead = s->workers[w].dead;
  }
  uint8_t *buf = malloc(req->encoded ? req->encoded : 1);
  int rc = buf ? recv_bounded(s, from, buf, req->encoded) : dt_error("out of memory");
  if (rc == 0 && unpack(b, buf, req->encoded) != 0) { /* both ends build the same shard: a bug */
    free(buf);
    return -1;
  }
  free(buf);
  if (rc != 0) { /* its primary died sending it, or it does not fit: no copy here */
    dt_log(DT_LOG_ERROR, "server %d: the copy of shard %d from rank %d: %s", s->index, k, from,
           dt_errmsg());
    b->repl.is_backup = 1;
    b->repl.primary_rank = -1; /* a broken copy: never takes over */
    return 0;
  }
  b->repl.is_backup = 1;
  b->repl.primary_rank = from;
  b->repl.primary_failed = 0;
  dt_log(DT_LOG_WARN, "server %d: holds a backup copy of shard %d now (version %lld, from rank %d)",
         s->index, k, (long long)b->version, from);
  /* the primary and the coordinator are told (the coordinator's word goes
   * in the instance's ping buffer, unused on a backup copy) */
  b->repl.copy_msg = (ps_req_t){.magic = PS_MAGIC, .op = PS_OP_COPY_ACK, .worker = -1, .epoch = k,
                                .clock = s->index};
  b->repl.ping = b->repl.copy_msg;
  int here = ps_chain_coordinator(s) != NULL;
  if (here) copy_done(s, &b->repl.copy_msg); /* this rank is the coordinator */
  if (send_small(s, from, &b->repl.copy_msg, &b->repl.copy_req[0]) != 0 ||
      (from != s->repl.coord_rank && !here &&
       send_small(s, s->repl.coord_rank, &b->repl.ping, &b->repl.copy_req[1]) != 0))
    dt_log(DT_LOG_DEBUG, "server %d: acknowledging the copy of shard %d: %s", s->index, k, dt_errmsg());
  return 0;
}

/* ---- the coordinator's orders -------------------------------------------------------- */

/* Shard k: taken over here (TAKEOVER) or its backup lost (LOST_BACKUP);
 * its new backup is server nb (-1: none). */
static int order(ps_server_t *s, int op, int k, int nb, const char *why) {
  ps_server_t *p = instance_of(s, k);
  if (!p) return dt_error("server %d: told about shard %d, which it does not hold", s->index, k);
  if (op == PS_OP_TAKEOVER) {
    if (p->repl.is_backup && p->repl.primary_rank < 0)
      return dt_error("server %d: shard %d's copy here is incomplete (its copy failed)", s->index, k);
    ps_chain_take_over(p, why);
  }
  if (p->repl.is_backup) return dt_error("server %d: shard %d is a backup here", s->index, k);
  return new_backup(p, nb);
}

static void tell(ps_server_t *s, int j, int op, int64_t dead, int64_t shard, int64_t nb) {
  ps_req_t req = {.magic = PS_MAGIC, .op = op, .worker = -1, .clock = dead, .epoch = shard, .version = nb};
  if (comm_send(s->world, s->nranks + j, PS_TAG_REQ, &req, PS_REQ_BYTES) != 0)
    dt_log(DT_LOG_ERROR, "coordinator: telling server %d: %s", j, dt_errmsg());
}

int ps_chain_handle(ps_server_t *s, int src, const ps_req_t *req) {
  int done = 0;
  if (src < s->N)
    return ps_server_reject(s, src, req, "operation %d comes from servers only", req->op);
  switch (req->op) {
  case PS_OP_REPL: return replay(s, src, req);
  case PS_OP_REPL_ACK: release_ack(s, req); return 0;
  case PS_OP_COPY: return take_copy(s, src, req);
  case PS_OP_COPY_ACK: copy_done(s, req); return 0;
  case PS_OP_COORD_STATE: return ps_coord_repl_take(s, src, req);
  case PS_OP_COORD_ACK: ps_coord_repl_acked(s, req); return 0;
  case PS_OP_PING: /* a pong still on its way answers this one too */
    if (ps_server_rank_of(s, src) != s->repl.coord_rank) return 0; /* the coordinator's before it died */
    s->repl.coord_heard = dt_now();
    if (!s->repl.pong_req || (comm_test(s->world, s->repl.pong_req, &done) == 0 && done)) {
      s->repl.pong = (ps_req_t){.magic = PS_MAGIC, .op = PS_OP_PONG, .worker = -1};
      if (send_small(s, s->repl.coord_rank, &s->repl.pong, &s->repl.pong_req) != 0)
        dt_log(DT_LOG_DEBUG, "server %d: answering a ping: %s", s->index, dt_errmsg());
    }
    return 0;
  case PS_OP_PONG: {
    ps_server_t *c = ps_chain_coordinator(s);
    if (c && c->repl.server_heard && src - s->N < s->K) c->repl.server_heard[src - s->N] = dt_now();
    return 0;
  }
  case PS_OP_COORD:
    if (req->clock < 0 || req->clock >= s->K) return 0;
    dt_log(DT_LOG_INFO, "server %d: server %lld coordinates now", s->index, (long long)req->clock);
    s->repl.coord_rank = s->nranks + (int)req->clock;
    s->repl.coord_heard = dt_now();
    return 0;
  case PS_OP_TAKEOVER:
  case PS_OP_LOST_BACKUP:
    if (ps_server_rank_of(s, src) != s->repl.coord_rank)
      return ps_server_reject(s, src, req, "only the coordinator gives orders");
    DT_TRY(order(s, req->op, (int)req->epoch, (int)req->version, "the coordinator says so"));
    break;
  case PS_OP_SERVER_GONE: break;
  default: return ps_server_reject(s, src, req, "unknown operation %d", req->op);
  }
  if (req->clock >= 0 && req->clock < s->K) comm_forget(s->world, s->nranks + (int)req->clock);
  return 0;
}

/* The next live server after server k in the ring (-1: none but k). */
static int next_live(const ps_server_t *s, int k) {
  for (int d = 1; d < s->K; d++)
    if (!s->repl.server_dead[(k + d) % s->K]) return (k + d) % s->K;
  return -1;
}

/* Server j is dead: each shard it served goes to its backup, each shard
 * it backed up goes on with its primary, and each of those shards is
 * given a new backup, the next live server after its primary, if one is
 * left; the workers are told where each shard is served now. */
static int server_died(ps_server_t *s, int j, const char *why) {
  int K = s->K, *owner = s->repl.owner, *backup = s->repl.backup, me = s->rank - s->nranks;
  s->repl.server_dead[j] = 1;
  if (s->cfg->ps.replicas < 2)
    return dt_error("server %d (rank %d) has stopped (%s); --ps-replicas 1 keeps one copy of each "
                    "shard: use --ps-replicas 2 to go on without it", j, s->nranks + j, why);
  for (int k = 0; k < K; k++)
    if (owner[k] == j && (backup[k] < 0 || s->repl.server_dead[backup[k]] || !s->repl.ready[k]))
      return dt_error("server %d (rank %d) has stopped (%s) and shard %d had no other copy left%s",
                      j, s->nranks + j, why, k, backup[k] < 0 ? " (no live server was left for a "
                      "backup)" : s->repl.server_dead[backup[k]] ? ": its backup had died too"
                      : ": the copy to its new backup was not in place yet");
  dt_log(DT_LOG_WARN, "server %d (rank %d) has stopped (%s)", j, s->nranks + j, why);
  size_t nk = (size_t)(K > 0 ? K : 1); /* K >= 2 with replicas */
  uint8_t *told = calloc(nk, 1);
  int32_t *notice = malloc((1 + nk) * sizeof *notice);
  if (!told || !notice) return free(told), free(notice), dt_error("out of memory");
  for (int k = 0; k < K; k++) {
    int op = owner[k] == j ? PS_OP_TAKEOVER : backup[k] == j ? PS_OP_LOST_BACKUP : 0;
    if (!op) continue;
    if (op == PS_OP_TAKEOVER) owner[k] = backup[k];
    backup[k] = next_live(s, owner[k]);
    s->repl.ready[k] = 0; /* until its COPY_ACK */
    if (op == PS_OP_TAKEOVER)
      dt_log(DT_LOG_WARN, "server %d takes over shard %d", owner[k], k);
    if (backup[k] < 0)
      dt_log(DT_LOG_WARN, "shard %d goes on with one copy: no live server is left for its backup", k);
    else dt_log(DT_LOG_WARN, "shard %d's new backup: server %d", k, backup[k]);
    if (owner[k] != me) tell(s, owner[k], op, j, k, backup[k]);
    else if (order(s->repl.home, op, k, backup[k], "the coordinator found its primary dead") != 0)
      return free(told), free(notice), -1;
    told[owner[k]] = 1;
  }
  for (int k = 0; k < K; k++) /* every rank left must know, for the run's end (comm_forget) */
    if (k != me && !told[k] && !s->repl.server_dead[k]) tell(s, k, PS_OP_SERVER_GONE, j, -1, -1);
  comm_forget(s->world, s->nranks + j);
  for (int w = 0; w < s->N; w++) /* they waited on the dead server: a fresh lease */
    s->workers[w].coord.last_heard = dt_now();
  notice[0] = j;
  for (int k = 0; k < K; k++) notice[1 + k] = owner[k];
  for (int w = 0; w < s->nranks; w++)
    if (comm_send(s->world, w, PS_TAG_FAILOVER, notice, (1 + nk) * sizeof *notice) != 0)
      dt_log(DT_LOG_DEBUG, "coordinator: telling worker rank %d: %s", w, dt_errmsg());
  free(told);
  free(notice);
  return 0;
}

int ps_chain_watch(ps_server_t *s) {
  if (!s->repl.server_dead) return 0;
  double now = dt_now();
  if (now < s->repl.next_ping) return 0;
  s->repl.next_ping = now + PING_EVERY;
  for (int k = 0; k < s->K; k++) {
    if (s->repl.server_dead[k] || s->nranks + k == s->rank) continue;
    char why[160];
    comm_req_t **slot = &s->repl.ping_req[k];
    int done = 1;
    if (*slot && comm_test(s->world, *slot, &done) != 0) done = 0;
    s->repl.ping = (ps_req_t){.magic = PS_MAGIC, .op = PS_OP_PING, .worker = -1};
    if (comm_gone(s->world, s->nranks + k)) {
      DT_TRY(server_died(s, k, "its rank has ended"));
    } else if (done && send_small(s, s->nranks + k, &s->repl.ping, slot) != 0) {
      snprintf(why, sizeof why, "a ping could not be sent: %s", dt_errmsg());
      DT_TRY(server_died(s, k, why));
    } else if (now - s->repl.server_heard[k] > SERVER_LEASE) {
      snprintf(why, sizeof why, "no answer to pings for %.1f s", now - s->repl.server_heard[k]);
      DT_TRY(server_died(s, k, why));
    }
  }
  return 0;
}

/* ---- the coordinator's standby ---------------------------------------------------- */

ps_server_t *ps_chain_coordinator(ps_server_t *s) {
  for (int i = 0; i < ps_chain_ninstances(s); i++) {
    ps_server_t *b = ps_chain_instance(s, i);
    if (b->coord && !b->repl.is_backup) return b;
  }
  return NULL;
}

/* The rank's backup copy of shard 0 while server 0 coordinates: the
 * coordinator's heir (NULL: not this rank). */
static ps_server_t *standby_of(ps_server_t *s) {
  if (s->cfg->ps.replicas < 2 || s->repl.coord_rank != s->nranks || s->rank == s->nranks) return NULL;
  for (int i = 0; i < s->repl.nhosted; i++) {
    ps_server_t *b = s->repl.hosted[i];
    if (b->index == 0 && b->repl.is_backup && b->repl.primary_rank == s->nranks) return b;
  }
  return NULL;
}

int ps_chain_polls(ps_server_t *s) { return ps_chain_coordinator(s) || standby_of(s); }

/* Server 0 is dead: its shard's backup here takes the shard over and the
 * coordinator's role with it, a coordinator built afresh with the last
 * copy of the dead one's state put over it (ps_coord_repl.c; the leases
 * start over), tells the servers, then deals with server 0's death as the
 * coordinator deals with any server's (server_died: shard 0 gets a new
 * backup, the shard server 0 backed up too, the workers are told), and
 * tells the servers again an epoch the dead one had closed. */
static int become_coordinator(ps_server_t *s, ps_server_t *b, const char *why) {
  int me = s->rank - s->nranks;
  dt_log(DT_LOG_WARN, "server %d (rank %d) takes over as the coordinator: server 0 (rank %d) has "
         "stopped (%s)", me, s->rank, s->nranks, why);
  s->repl.coord_rank = s->rank;
  ps_chain_take_over(b, "the coordinator has died");
  DT_TRY(ps_coord_init(b, &b->coord));
  int64_t seq = 0;
  if (ps_coord_repl_adopt(s, b, &seq))
    dt_log(DT_LOG_WARN, "server %d: the coordinator's state goes on from its copy %lld", me,
           (long long)seq);
  else dt_log(DT_LOG_WARN, "server %d: no copy of the coordinator's state came: it starts afresh", me);
  DT_TRY(coord_tables(b));
  for (int k = 0; k < s->K; k++)
    if (k != me && k != 0) tell(s, k, PS_OP_COORD, me, -1, -1); /* `clock`: the new coordinator */
  DT_TRY(server_died(b, 0, why));
  ps_coord_resume(b);
  return 0;
}

int ps_chain_watch_coordinator(ps_server_t *s) {
  ps_coord_repl_poll(s);
  ps_server_t *b = standby_of(s);
  if (!b) return 0;
  double silent = dt_now() - s->repl.coord_heard;
  char why[96];
  if (comm_gone(s->world, s->nranks)) return become_coordinator(s, b, "its rank has ended");
  if (silent <= SERVER_LEASE) return 0;
  snprintf(why, sizeof why, "no ping from it for %.1f s", silent);
  return become_coordinator(s, b, why);
}

void ps_chain_report(const ps_server_t *s) {
  if (s->cfg->ps.replicas < 2) return;
  char line[2048];
  uint64_t bytes = s->repl.bytes_sent, copied = s->repl.copy_bytes;
  for (int i = 0; i < s->repl.nhosted; i++)
    bytes += s->repl.hosted[i]->repl.bytes_sent, copied += s->repl.hosted[i]->repl.copy_bytes;
  uint64_t coord = ps_coord_repl_bytes(s), acks = ps_coord_repl_ack_bytes(s);
  for (int i = 0; i < s->repl.nhosted; i++)
    coord += ps_coord_repl_bytes(s->repl.hosted[i]), acks += ps_coord_repl_ack_bytes(s->repl.hosted[i]);
  int n = snprintf(line, sizeof line, "ps: server %d: replication sent %llu bytes (state copies "
                   "%llu); the coordinator's state %llu bytes (acks of it %llu)", s->index,
                   (unsigned long long)bytes, (unsigned long long)copied, (unsigned long long)coord,
                   (unsigned long long)acks);
  for (int i = 0; i <= s->repl.nhosted && n > 0 && (size_t)n < sizeof line; i++) {
    const ps_server_t *b = i == 0 ? s : s->repl.hosted[i - 1];
    const char *role = i == 0 ? "" : b->repl.is_backup ? " (backup)" : " (taken over)";
    n += snprintf(line + n, sizeof line - (size_t)n, "; shard %d%s applied %lld updates (%lld "
                  "pushes, %lld duplicates)", b->index, role, (long long)b->version,
                  (long long)b->repl.received, (long long)b->repl.duplicates);
  }
  dt_log(DT_LOG_INFO, "%s", line);
}
