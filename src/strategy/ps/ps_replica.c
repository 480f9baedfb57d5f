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
 * its thread), that cannot be sent to, or that has not answered for
 * SERVER_LEASE (mpi: a killed process) is dead. Its shard's backup
 * takes over (PS_OP_TAKEOVER) and the shard whose backup it was goes on
 * with its primary alone (PS_OP_LOST_BACKUP: the acks waiting for that
 * backup go at once). Every worker is told (PS_TAG_FAILOVER) and sends
 * again to the backup what the dead server had not answered: pulls, and
 * pushes with their clocks. A push at or below the last clock a copy has
 * taken from that worker is a duplicate: acknowledged, not applied
 * (ps_server.c's is_duplicate), so no push is lost or applied twice.
 *
 * Decided, and left: no new backup is made after a death (with K = 2 no
 * server is left to hold one; with K >= 3 the shard goes on with one copy
 * until the run ends), so a second death of a shard's last copy ends the
 * run with the reason. The coordinator is not replicated: server 0 may
 * not be killed (--kill-server refuses it). Without replicas a dead
 * server stops the run with the reason, as it did. */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps_server.h"

#define PING_EVERY 0.25   /* seconds between the coordinator's pings */
#define SERVER_LEASE 2.0  /* seconds without an answer: the server is dead */
#define REPL_DATA_WAIT 3.0 /* seconds a forward's values may take after its request */

int ps_chain_setup(ps_server_t *s, ps_server_t *b) {
  int K = s->K, first = s->nranks; /* world rank of server 0 */
  s->repl.hosted = b;
  if (b) {
    b->repl.is_backup = 1;
    b->repl.primary_rank = first + b->index;
    s->repl.backup_rank = first + (s->index + 1) % K;
  }
  if (s->coord && K > 1 && (s->cfg->ps.replicas > 1 || s->cfg->ps.kill_server >= 0)) {
    s->repl.server_dead = calloc((size_t)K, 1);
    s->repl.server_heard = malloc((size_t)K * sizeof(double));
    s->repl.ping_req = calloc((size_t)K, sizeof *s->repl.ping_req);
    if (!s->repl.server_dead || !s->repl.server_heard || !s->repl.ping_req) return dt_error("out of memory");
    for (int k = 0; k < K; k++) s->repl.server_heard[k] = dt_now();
    s->repl.next_ping = dt_now();
  }
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
  dt_log(DT_LOG_WARN, "server %d: its backup (rank %d) is dead; shard %d goes on with one copy",
         s->index, s->repl.backup_rank, s->index);
  s->repl.backup_rank = -1;
  for (int w = 0; w < s->N; w++) {
    forget_forward(s, w);
    if (s->workers[w].chain.waiting) ack_worker(s, w);
  }
}

/* The push the rule has taken from worker w goes to the backup, its
 * values copied first: the rule may sum into them (sync) before the
 * backup has taken them. */
static int forward(ps_server_t *s, int w, const ps_req_t *req) {
  ps_worker_state_t *ws = &s->workers[w];
  finish_forward(s, w); /* the last one was acknowledged, so it has gone */
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
                             .clock = req->clock, .epoch = req->epoch};
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
  dt_log(DT_LOG_WARN, "server rank %d takes over shard %d from its dead primary (rank %d; %s) at "
         "version %lld", b->rank, b->index, b->repl.primary_rank, why, (long long)b->version);
}

int ps_chain_recv_values(ps_server_t *b, void *dst, size_t bytes) {
  comm_req_t *r;
  DT_TRY(comm_irecv(b->world, b->repl.data_from, PS_TAG_DATA, dst, bytes, &r));
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

/* A forwarded push, replayed on the hosted backup copy through its rule
 * as the primary did; the values come from the primary. */
static int replay(ps_server_t *s, int src, const ps_req_t *req) {
  ps_server_t *b = s->repl.hosted;
  int w = req->worker, from = ps_server_rank_of(s, src);
  if (b && !b->repl.is_backup && from == b->repl.primary_rank) {
    dt_log(DT_LOG_INFO, "server %d: a forward from its dead primary (rank %d) after the takeover: "
           "ignored (the worker sends it again)", s->index, from);
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

static void release_ack(ps_server_t *s, const ps_req_t *req) {
  int w = req->worker;
  if (w < 0 || w >= s->N) return;
  ps_worker_state_t *ws = &s->workers[w];
  if (!ws->chain.waiting || ws->chain.req.clock != req->clock) return; /* stale */
  finish_forward(s, w);
  ack_worker(s, w);
}

static void tell(ps_server_t *s, int k, int op, int64_t what) {
  ps_req_t req = {.magic = PS_MAGIC, .op = op, .worker = -1, .clock = what};
  if (comm_send(s->world, s->nranks + k, PS_TAG_REQ, &req, PS_REQ_BYTES) != 0)
    dt_log(DT_LOG_ERROR, "coordinator: telling server %d: %s", k, dt_errmsg());
}

int ps_chain_handle(ps_server_t *s, int src, const ps_req_t *req) {
  int done = 0;
  if (src < s->N)
    return ps_server_reject(s, src, req, "operation %d comes from servers only", req->op);
  switch (req->op) {
  case PS_OP_REPL: return replay(s, src, req);
  case PS_OP_REPL_ACK: release_ack(s, req); return 0;
  case PS_OP_PING: /* a pong still on its way answers this one too */
    if (!s->repl.pong_req || (comm_test(s->world, s->repl.pong_req, &done) == 0 && done)) {
      s->repl.pong = (ps_req_t){.magic = PS_MAGIC, .op = PS_OP_PONG, .worker = -1};
      if (send_small(s, s->nranks, &s->repl.pong, &s->repl.pong_req) != 0)
        dt_log(DT_LOG_DEBUG, "server %d: answering a ping: %s", s->index, dt_errmsg());
    }
    return 0;
  case PS_OP_PONG:
    if (s->repl.server_heard && src - s->N < s->K) s->repl.server_heard[src - s->N] = dt_now();
    return 0;
  case PS_OP_TAKEOVER: ps_chain_take_over(s->repl.hosted, "the coordinator says so"); break;
  case PS_OP_LOST_BACKUP: ps_chain_lost_backup(s); break;
  case PS_OP_SERVER_GONE: break;
  default: return ps_server_reject(s, src, req, "unknown operation %d", req->op);
  }
  if (req->clock >= 0 && req->clock < s->K) comm_forget(s->world, s->nranks + (int)req->clock);
  return 0;
}

/* Server j is dead: its backup takes its shard, the shard it backed up
 * goes on alone, and the workers are told where to send. */
static int server_died(ps_server_t *s, int j, const char *why) {
  int K = s->K, heir = (j + 1) % K, prev = (j + K - 1) % K;
  s->repl.server_dead[j] = 1;
  if (s->cfg->ps.replicas < 2)
    return dt_error("server %d (rank %d) has stopped (%s); --ps-replicas 1 keeps one copy of each "
                    "shard: use --ps-replicas 2 to go on without it", j, s->nranks + j, why);
  if (s->repl.server_dead[heir])
    return dt_error("server %d (rank %d) has stopped (%s) and so has server %d: shard %d had its "
                    "two copies on them", j, s->nranks + j, why, heir, j);
  dt_log(DT_LOG_WARN, "server %d (rank %d) has stopped (%s); server %d takes over its shard", j,
         s->nranks + j, why, heir);
  if (heir == 0) ps_chain_take_over(s->repl.hosted, "the coordinator found it dead");
  else tell(s, heir, PS_OP_TAKEOVER, j);
  if (prev == 0) ps_chain_lost_backup(s);
  else tell(s, prev, PS_OP_LOST_BACKUP, j);
  for (int k = 1; k < K; k++) /* every rank left must know, for the run's end (comm_forget) */
    if (k != heir && k != prev && !s->repl.server_dead[k]) tell(s, k, PS_OP_SERVER_GONE, j);
  comm_forget(s->world, s->nranks + j);
  for (int w = 0; w < s->N; w++) /* they waited on the dead server: a fresh lease */
    s->workers[w].coord.last_heard = dt_now();
  int32_t dead = j;
  for (int w = 0; w < s->nranks; w++)
    if (comm_send(s->world, w, PS_TAG_FAILOVER, &dead, sizeof dead) != 0)
      dt_log(DT_LOG_DEBUG, "coordinator: telling worker rank %d: %s", w, dt_errmsg());
  return 0;
}

int ps_chain_watch(ps_server_t *s) {
  if (!s->repl.server_dead) return 0;
  double now = dt_now();
  if (now < s->repl.next_ping) return 0;
  s->repl.next_ping = now + PING_EVERY;
  for (int k = 1; k < s->K; k++) {
    if (s->repl.server_dead[k]) continue;
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

void ps_chain_report(const ps_server_t *s) {
  if (s->cfg->ps.replicas < 2) return;
  const ps_server_t *b = s->repl.hosted;
  dt_log(DT_LOG_INFO, "ps: server %d: replication sent %llu bytes; shard %d applied %lld updates "
         "(%lld pushes, %lld duplicates); shard %d %s applied %lld updates (%lld pushes, %lld "
         "duplicates)", s->index, (unsigned long long)(s->repl.bytes_sent + b->repl.bytes_sent), s->index,
         (long long)s->version, (long long)s->repl.received, (long long)s->repl.duplicates,
         b->index, b->repl.is_backup ? "(backup)" : "(taken over)", (long long)b->version,
         (long long)b->repl.received, (long long)b->repl.duplicates);
}
