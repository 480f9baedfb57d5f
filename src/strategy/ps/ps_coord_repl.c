/* The coordinator's state on its standby (--ps-replicas 2), so that the
 * heir of server 0 goes on where it stopped, under every schedule: the
 * pool rules' batches handed out and epochs, every schedule's statistics
 * and the workers who have said bye.
 *
 * The standby is shard 0's backup (server 1 at the start; ps_replica.c).
 * After each change of its state the coordinator sends it a copy
 * (PS_OP_COORD_STATE, numbered; ps_coord_pack: all but the leases) when
 * it differs from the last one sent; the standby keeps the last copy and
 * acknowledges its number (PS_OP_COORD_ACK). The copies travel on the
 * channel of shard 0's forwards (one sender, one tag: in order), so:
 *
 * - a push: the coordinator counts it (ps_coord_heard) before the rule
 *   takes it, so the copy that counts it goes before its forward, and the
 *   worker's ack, which waits for the forward's REPL_ACK, comes only once
 *   the standby holds the count too;
 * - an answer to NEXT or BYE is held here until the standby acknowledges
 *   a copy at least as new as the state it comes from (the answer itself
 *   is in it: the worker's NEXT number and the batch it was given).
 *
 * When server 0 dies, its heir builds a coordinator and puts the last copy
 * over it (ps_coord_repl_adopt): a batch whose answer went out is in it; a
 * NEXT whose answer had not gone out is sent again by its worker and
 * answered alike (same number) or afresh (the copy had not come: the
 * batch is handed out then, once); a push counted by the dead coordinator
 * and sent again is not counted twice (ps_coord_heard's clock). So the
 * epoch's batches are handed out once and every acknowledged update is
 * kept. Without a standby (replicas 1, or its server dead with none left)
 * answers go at once. The copies' and acks' bytes are counted apart from
 * the shard forwards' (the end-of-run line), and are in describe_step
 * (ps_describe.c: how many a step, the formula). */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps_server.h"

#define SLOTS 8 /* copies or acks in flight, to start with (more when all are) */

/* A copy (or an ack: no buf) in flight: its request and state stay put until sent. */
typedef struct {
  ps_req_t req;
  uint8_t *buf;
  comm_req_t *r[2];
} slot_t;

struct ps_coord_repl {
  /* the coordinator */
  size_t bytes;              /* one copy */
  uint8_t *last, *scratch;   /* the last copy sent; the state now */
  int64_t seq, acked;        /* copies sent; the newest the standby holds */
  int force;                 /* the next copy goes even if unchanged (a new standby) */
  slot_t **slot;             /* [nslots] copies in flight, or done */
  int nslots;
  uint64_t sent;             /* bytes, as the transport counted them */
  /* a standby (the rank's own instance) */
  uint8_t *copy;
  size_t copy_bytes;
  int64_t copy_seq, acked_sent; /* the copy held; the newest acknowledged */
  slot_t **ack;              /* [nacks] acks in flight, or done */
  int nacks;
  uint64_t ack_sent;         /* bytes, as the transport counted them */
};

static ps_coord_repl_t *repl_of(ps_server_t *s) {
  if (s->crepl) return s->crepl;
  ps_coord_repl_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->bytes = ps_coord_state_bytes(s);
  r->last = malloc(r->bytes);
  r->scratch = malloc(r->bytes);
  s->crepl = r; /* freed whole by ps_coord_repl_free, complete or not */
  if (!r->last || !r->scratch) {
    dt_error("out of memory");
    return NULL;
  }
  return r;
}

/* A send done, or withdrawn when its peer has gone. */
static void end_send(ps_server_t *s, comm_req_t **slot) {
  comm_req_t *q = *slot;
  int done = 0;
  *slot = NULL;
  if (!q) return;
  if (comm_test(s->world, q, &done) == 0 && done) comm_wait(s->world, q);
  else comm_cancel(s->world, q);
}

static void send_held(ps_server_t *s, int w) {
  ps_worker_state_t *ws = &s->workers[w];
  ws->coord.held = 0;
  ps_server_reply(s, w, &ws->coord.held_req, &ws->coord.held_rep, NULL, 0, 0);
}

/* The held answers whose state the standby holds go; all of them if `all`. */
static void release(ps_server_t *s, int all) {
  int64_t acked = s->crepl ? s->crepl->acked : 0;
  for (int w = 0; w < s->N; w++) {
    ps_worker_state_t *ws = &s->workers[w];
    if (ws->coord.held && (all || (ws->coord.held_seq >= 0 && ws->coord.held_seq <= acked)))
      send_held(s, w);
  }
}

static int has_standby(const ps_server_t *s) {
  return s->cfg->ps.replicas > 1 && s->coord && !s->repl.is_backup && s->repl.backup_rank >= 0;
}

/* A slot of (*slots)[*n] whose sends have gone, or a new one (with a
 * buffer of `buf` bytes, if any): never a wait, as a standby killed under
 * mpi takes nothing (the next ping finds its process ended, on this node,
 * or 2 s of silence, on another; then its slots are withdrawn and the
 * answers held for it go). The coordinator's copies
 * and the standby's acks both take one each, so every copy goes and is
 * acknowledged once (the counts describe_step gives, ps_describe.c). */
static slot_t *grab_slot(ps_server_t *s, slot_t ***slots, int *n, size_t buf) {
  for (int i = 0; i < *n; i++) {
    slot_t *t = (*slots)[i];
    int busy = 0;
    for (int j = 0; j < 2; j++) {
      int done = 0;
      if (t->r[j] && comm_test(s->world, t->r[j], &done) == 0 && !done) busy = 1;
    }
    if (busy) continue;
    for (int j = 0; j < 2; j++)
      if (t->r[j]) {
        comm_req_t *q = t->r[j];
        t->r[j] = NULL;
        comm_wait(s->world, q);
      }
    return t;
  }
  int more = *n ? *n : SLOTS;
  slot_t **grown = realloc(*slots, (size_t)(*n + more) * sizeof *grown);
  if (!grown) return NULL;
  *slots = grown;
  for (int i = *n; i < *n + more; i++) {
    if (!(grown[i] = calloc(1, sizeof(slot_t))) || (buf && !(grown[i]->buf = malloc(buf)))) {
      free(grown[i]);
      *n = i;
      return NULL;
    }
  }
  *n += more;
  return grown[*n - more];
}

static void free_slots(ps_server_t *s, slot_t **slots, int n) {
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < 2; j++) end_send(s, &slots[i]->r[j]);
    free(slots[i]->buf);
    free(slots[i]);
  }
  free(slots);
}

/* Withdraws the copies still in flight (their standby is gone). */
static void withdraw_slots(ps_server_t *s, ps_coord_repl_t *r) {
  for (int i = 0; r && i < r->nslots; i++)
    for (int j = 0; j < 2; j++) end_send(s, &r->slot[i]->r[j]);
}

/* Copy number seq of the state to the standby; -1: it could not go (the
 * chain finds the standby dead and goes on without it). */
static int send_copy(ps_server_t *s, ps_coord_repl_t *r) {
  slot_t *t = grab_slot(s, &r->slot, &r->nslots, r->bytes);
  if (!t) return dt_error("out of memory");
  memcpy(t->buf, r->scratch, r->bytes);
  t->req = (ps_req_t){.magic = PS_MAGIC, .op = PS_OP_COORD_STATE, .worker = -1,
                      .clock = r->seq + 1, .encoded = r->bytes};
  comm_bytes_t before = comm_bytes(s->world);
  int rc = comm_isend(s->world, s->repl.backup_rank, PS_TAG_REQ, &t->req, PS_REQ_BYTES, &t->r[0]);
  if (rc == 0) rc = comm_isend(s->world, s->repl.backup_rank, PS_TAG_DATA, t->buf, r->bytes, &t->r[1]);
  r->sent += comm_bytes(s->world).sent - before.sent;
  if (rc != 0) {
    dt_log(DT_LOG_WARN, "coordinator: its state to the standby (rank %d): %s", s->repl.backup_rank,
           dt_errmsg());
    for (int j = 0; j < 2; j++) end_send(s, &t->r[j]);
    return -1;
  }
  r->seq++;
  memcpy(r->last, r->scratch, r->bytes);
  r->force = 0;
  return 0;
}

int ps_coord_repl_sync(ps_server_t *s) {
  if (s->cfg->ps.replicas < 2 || !s->coord) return 0;
  if (!has_standby(s)) {
    release(s, 1);
    return 0;
  }
  ps_coord_repl_t *r = repl_of(s);
  if (!r || !r->last) return -1;
  ps_coord_pack(s, r->scratch);
  if ((r->force || r->seq == 0 || memcmp(r->scratch, r->last, r->bytes) != 0) && send_copy(s, r) != 0) {
    release(s, 1);
    return 0;
  }
  for (int w = 0; w < s->N; w++) /* an answer waits for the copy that holds it */
    if (s->workers[w].coord.held && s->workers[w].coord.held_seq < 0) s->workers[w].coord.held_seq = r->seq;
  release(s, 0);
  return 0;
}

int ps_coord_repl_reply(ps_server_t *s, int src, const ps_req_t *req, const ps_reply_t *rep) {
  if (!has_standby(s)) return ps_server_reply(s, src, req, rep, NULL, 0, 0);
  ps_worker_state_t *ws = &s->workers[src];
  if (ws->coord.held) send_held(s, src); /* one call at a time: its last is through */
  ws->coord.held = 1;
  ws->coord.held_seq = -1;
  ws->coord.held_req = *req;
  ws->coord.held_rep = *rep;
  return 0;
}

int ps_coord_repl_holds(const ps_server_t *s) {
  for (int w = 0; w < s->N; w++)
    if (s->workers[w].coord.held) return 1;
  return 0;
}

void ps_coord_repl_lost(ps_server_t *s) {
  release(s, 1);
  ps_coord_repl_force(s);
}

void ps_coord_repl_force(ps_server_t *s) {
  withdraw_slots(s, s->crepl); /* to the standby that died */
  if (s->crepl) s->crepl->force = 1;
}

void ps_coord_repl_acked(ps_server_t *rank, const ps_req_t *req) {
  ps_server_t *c = ps_chain_coordinator(rank);
  if (!c || !c->crepl) return;
  if (req->clock > c->crepl->acked) c->crepl->acked = req->clock;
  release(c, 0);
}

int ps_coord_repl_take(ps_server_t *rank, int src, const ps_req_t *req) {
  int from = ps_server_rank_of(rank, src);
  size_t want = ps_coord_state_bytes(rank);
  if (req->encoded != want) { /* both ends build the same state: a bug */
    dt_log(DT_LOG_ERROR, "server %d: a coordinator's state of %llu bytes from rank %d (expected %zu); "
           "ignored", rank->index, (unsigned long long)req->encoded, from, want);
    return 0;
  }
  ps_coord_repl_t *r = repl_of(rank);
  if (!r || (!r->copy && !(r->copy = malloc(want)))) return dt_error("out of memory");
  uint8_t *tmp = r->scratch; /* unused on a standby: the copy is put in place whole */
  if (ps_chain_recv_from(rank, from, tmp, want) != 0) {
    dt_log(DT_LOG_WARN, "server %d: the coordinator's state from rank %d: %s", rank->index, from,
           dt_errmsg());
    return 0;
  }
  if (from != rank->repl.coord_rank) return 0; /* a dead coordinator's, after the takeover */
  memcpy(r->copy, tmp, want);
  r->copy_bytes = want;
  r->copy_seq = req->clock;
  ps_coord_repl_poll(rank);
  return 0;
}

/* The standby acknowledges its newest copy without waiting for anything
 * (two servers must never wait on each other): a request, one a copy
 * (acks count up to a number, so a lost one costs nothing). */
void ps_coord_repl_poll(ps_server_t *rank) {
  ps_coord_repl_t *r = rank->crepl;
  if (!r || r->copy_seq <= r->acked_sent) return;
  slot_t *t = grab_slot(rank, &r->ack, &r->nacks, 0);
  if (!t) return; /* out of memory: the next copy's ack says as much */
  t->req = (ps_req_t){.magic = PS_MAGIC, .op = PS_OP_COORD_ACK, .worker = -1, .clock = r->copy_seq};
  comm_bytes_t before = comm_bytes(rank->world);
  if (comm_isend(rank->world, rank->repl.coord_rank, PS_TAG_REQ, &t->req, PS_REQ_BYTES, &t->r[0]) != 0)
    dt_log(DT_LOG_DEBUG, "server %d: acknowledging the coordinator's state: %s", rank->index, dt_errmsg());
  r->ack_sent += comm_bytes(rank->world).sent - before.sent;
  r->acked_sent = r->copy_seq;
}

int ps_coord_repl_adopt(ps_server_t *rank, ps_server_t *b, int64_t *seq) {
  ps_coord_repl_t *r = rank->crepl;
  if (!r || !r->copy_seq || r->copy_bytes != ps_coord_state_bytes(b)) return 0;
  ps_coord_unpack(b, r->copy);
  *seq = r->copy_seq;
  return 1;
}

uint64_t ps_coord_repl_bytes(const ps_server_t *s) { return s->crepl ? s->crepl->sent : 0; }

uint64_t ps_coord_repl_ack_bytes(const ps_server_t *s) { return s->crepl ? s->crepl->ack_sent : 0; }

void ps_coord_repl_free(ps_server_t *s) {
  ps_coord_repl_t *r = s->crepl;
  if (!r) return;
  free_slots(s, r->slot, r->nslots);
  free_slots(s, r->ack, r->nacks);
  free(r->last);
  free(r->scratch);
  free(r->copy);
  free(r);
  s->crepl = NULL;
}
