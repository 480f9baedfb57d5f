/* The worker's side of the parameter servers, in the spirit of ps-lite's
 * KVWorker: Push and Pull of a key range are non-blocking and return a
 * timestamp; Wait(ts) blocks until every server holding part of the range
 * has answered. A request to one server (NEXT, STATS, SAVE, BYE) is a
 * timestamp too.
 *
 * One timestamp is one slot of PS_MAX_INFLIGHT (ts % PS_MAX_INFLIGHT); its
 * reply tags are the slot's, so answers that a server defers (a pull
 * waiting for a clock) can never be taken for another request's. */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

typedef struct {
  int server;                 /* world rank */
  int target;                 /* the rank it was last sent to (server is -1 once lost) */
  int coord;                  /* a call to the coordinator: it follows shard 0 (ps_replica.c) */
  int shard;                  /* index into the map, or -1 (ps_call) */
  size_t nbytes;              /* values sent (push) or expected (pull, stats) */
  ps_req_t req;
  ps_reply_t reply;
  comm_req_t *send_req, *send_data, *recv_reply, *recv_values;
  uint8_t *enc;               /* --compress: the push's encoding, or the encoded pull's
                               * reply, in flight until waited */
  size_t enc_cap;
  void *recv_into;            /* where the reply's values land */
  float *dest;                /* a pull of the held copy (PULL_*): the caller's values */
  int pull;                   /* PULL_PLAIN, PULL_DENSE, PULL_ENCODED */
  int64_t ts;                 /* its request's timestamp (a resend keeps it) */
  const void *push_vals;      /* a push's values, kept for a resend */
} ps_part_t;

/* --compress-pulls: how a part's pull of the parameters comes. DENSE: the
 * shard whole into the held copy (the first pull: the server's mirror is
 * set to it); ENCODED: the change since the last pull, added to it. */
enum { PULL_PLAIN, PULL_DENSE, PULL_ENCODED };

typedef struct {
  int used, nparts;
  ps_part_t *parts;           /* [nservers] */
  double started;             /* dt_now() when issued (the trace's push/pull slice) */
} ps_handle_t;

struct ps_client {
  comm_t *world;
  const ps_shard_map_t *map;
  int worker, first_server;
  int64_t next_ts;
  ps_handle_t slots[PS_MAX_INFLIGHT];
  int64_t *version;           /* per shard: the version of the last parameters pulled */
  int64_t *clock;             /* per shard: their clock (sync/ssp) */
  double pushed, pulled, blocked;
  codec_spec_t codec;         /* --compress: pushes encoded (CODEC_NONE: plain floats) */
  ef_memory_t mem;            /* its error feedback (residual NULL: none) */
  float *scratch, *decoded;   /* nparams floats each */
  uint64_t seed;
  /* --compress-pulls: the parameters as the servers' mirrors of this worker
   * hold them (pulls add the decoded changes here, then copy them out), and
   * per shard whether the copy has been pulled whole yet */
  float *held;
  uint8_t *has_held;
  /* --ps-replicas 2: servers found dead, the server that serves each
   * shard now (the coordinator says), its notice being received (the dead
   * server, then each shard's server), the wait's limit; counts */
  uint8_t *dead;
  int *owner;
  int32_t *notice;
  comm_req_t *notice_req;
  double timeout;
  int64_t acked, resent;
  int64_t nexts;              /* NEXTs asked (each carries its number: a resend is known) */
  /* ps_push_factors, while it starts its parts: per shard, the payload of
   * sufficient factors (ps_factors.c) and its bytes */
  const void *const *fac_data;
  const size_t *fac_bytes;
};

int ps_client_new(comm_t *world, int worker, const ps_shard_map_t *map, ps_client_t **out) {
  ps_client_t *c = calloc(1, sizeof *c);
  if (!c) return dt_error("out of memory");
  c->world = world;
  c->map = map;
  c->worker = worker;
  c->first_server = map->first_server;
  c->version = calloc((size_t)map->nservers, sizeof *c->version);
  c->clock = calloc((size_t)map->nservers, sizeof *c->clock);
  int ok = c->version != NULL && c->clock != NULL;
  for (int i = 0; ok && i < PS_MAX_INFLIGHT; i++)
    ok = (c->slots[i].parts = calloc((size_t)map->nservers, sizeof(ps_part_t))) != NULL;
  if (!ok) {
    ps_client_free(c);
    return dt_error("out of memory");
  }
  *out = c;
  return 0;
}

/* Withdraws whatever a part still has in flight. */
static void part_cancel(ps_client_t *c, ps_part_t *p) {
  comm_req_t **reqs[] = {&p->send_req, &p->send_data, &p->recv_reply, &p->recv_values};
  for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++)
    if (*reqs[i]) {
      comm_cancel(c->world, *reqs[i]);
      *reqs[i] = NULL;
    }
}

void ps_client_free(ps_client_t *c) {
  if (!c) return;
  for (int i = 0; i < PS_MAX_INFLIGHT; i++) {
    ps_handle_t *h = &c->slots[i];
    for (int j = 0; h->used && j < h->nparts; j++) part_cancel(c, &h->parts[j]);
    for (int j = 0; h->parts && j < c->map->nservers; j++) dt_free(h->parts[j].enc);
    free(h->parts);
  }
  if (c->notice_req) comm_cancel(c->world, c->notice_req);
  free(c->dead);
  free(c->owner);
  free(c->notice);
  ef_free(&c->mem);
  dt_free(c->scratch), dt_free(c->decoded), dt_free(c->held);
  free(c->has_held);
  free(c->version);
  free(c->clock);
  free(c);
}

int ps_client_set_codec(ps_client_t *c, const compress_config_t *cc, int pulls) {
  size_t n = c->map->nparams;
  c->codec = cc->codec;
  c->seed = cc->seed;
  if (cc->error_feedback && ef_init(&c->mem, n, 0, 0) != 0) return -1;
  if (!(c->scratch = dt_alloc_floats(n)) || !(c->decoded = dt_alloc_floats(n))) return -1;
  if (!pulls) return 0;
  if (!(c->held = dt_alloc_floats(n))) return -1;
  if (!(c->has_held = calloc((size_t)c->map->nservers, 1))) return dt_error("out of memory");
  return 0;
}

/* A part made ready for its next request; its encoding buffer is kept. */
static void part_reset(ps_part_t *p) {
  uint8_t *enc = p->enc;
  size_t enc_cap = p->enc_cap;
  memset(p, 0, sizeof *p);
  p->enc = enc, p->enc_cap = enc_cap;
}

/* An encoding's room in the part's own buffer. */
static int part_room(ps_part_t *p, size_t cap) {
  if (cap <= p->enc_cap) return 0;
  dt_free(p->enc);
  p->enc_cap = 0;
  if (!(p->enc = dt_alloc(cap))) return -1;
  p->enc_cap = cap;
  return 0;
}

/* A pull of shard k's parameters, whole, under --compress-pulls: the
 * first comes dense into the held copy (and asks the server to set its
 * mirror to it), the later ones as the encoded change. */
static int plan_held_pull(ps_client_t *c, ps_part_t *p, int k, float *dest) {
  size_t lo = p->req.begin, n = p->req.count;
  p->dest = dest;
  if (!c->has_held[k]) {
    p->pull = PULL_DENSE;
    p->req.flags |= PS_PULL_DENSE;
    p->recv_into = c->held + lo;
    return 0;
  }
  p->pull = PULL_ENCODED;
  p->nbytes = codec_bytes(&c->codec, n);
  if (part_room(p, p->nbytes) != 0) return -1;
  p->recv_into = p->enc;
  return 0;
}

/* The pull has come: the held copy brought up to date, then copied out. */
static int finish_held_pull(ps_client_t *c, ps_part_t *p) {
  size_t lo = p->req.begin, n = p->req.count;
  if (p->pull == PULL_ENCODED && mirror_decode(&c->codec, p->enc, p->nbytes, n, c->held + lo) != 0)
    return dt_error_prefix("the pull's reply from server rank %d: ", p->server);
  if (p->pull == PULL_DENSE) c->has_held[p->shard] = 1;
  memcpy(p->dest, c->held + lo, n * sizeof(float));
  return 0;
}

/* A push's part under --compress: vals[0..n) of keys [lo, lo + n) encoded
 * into the part's own buffer (kept until the send completes); with the
 * memory, what the encoding drops waits for the next push. */
static const void *encode_part(ps_client_t *c, ps_part_t *p, const float *vals, size_t lo,
                               size_t n, int64_t ts) {
  if (part_room(p, codec_max_bytes(&c->codec, n)) != 0) return NULL;
  if (c->mem.residual) {
    ef_compensate(&c->mem, vals, lo, n);
    vals = c->mem.residual + lo;
  }
  uint64_t seed = rng_derive(c->seed ^ 0x7073636f6d707265ull, (uint64_t)c->worker, (uint64_t)ts);
  size_t bytes = codec_encode(&c->codec, vals, n, rng_derive(seed, (uint64_t)p->shard, 0), p->enc,
                              c->scratch + lo);
  if (c->mem.residual) {
    memset(c->decoded + lo, 0, n * sizeof(float));
    codec_decode_add(&c->codec, p->enc, bytes, n, c->decoded + lo);
    ef_update(&c->mem, c->decoded + lo, lo, n);
  }
  p->nbytes = bytes;
  p->req.encoded = bytes;
  return p->enc;
}

/* The next free slot from next_ts on, its timestamp the next number that
 * falls on it: a request one slow server holds does not block the others'
 * (priority order issues hundreds of parts a step). */
static ps_handle_t *new_handle(ps_client_t *c, int64_t *ts) {
  ps_handle_t *h = NULL;
  for (int i = 0; i < PS_MAX_INFLIGHT && !h; i++)
    if (!c->slots[(c->next_ts + i) % PS_MAX_INFLIGHT].used) {
      *ts = c->next_ts + i;
      h = &c->slots[*ts % PS_MAX_INFLIGHT];
    }
  if (!h) {
    dt_error("parameter-server client: more than %d requests in flight (wait on some)",
             PS_MAX_INFLIGHT);
    return NULL;
  }
  c->next_ts = *ts + 1;
  h->used = 1;
  h->nparts = 0;
  h->started = dt_trace ? dt_now() : 0;
  return h;
}

static int reply_tag(const ps_client_t *c, const ps_part_t *p, int64_t ts) {
  int slot = (int)(ts % PS_MAX_INFLIGHT);
  if (c->dead && p->shard >= 0) /* --ps-replicas 2: a shard's own tags (ps.h) */
    return PS_TAG_REPLY_SHARD + 2 * (slot * PS_REPLY_SHARDS + p->shard % PS_REPLY_SHARDS);
  return PS_TAG_REPLY + 2 * slot;
}

/* Posts the receives for the answer first, then the request (and the
 * values of a push): the answer can never arrive before its receive. */
static int part_start(ps_client_t *c, ps_part_t *p, int64_t ts, const void *push_vals) {
  comm_t *w = c->world;
  int tag = reply_tag(c, p, ts);
  p->req.magic = PS_MAGIC;
  p->req.worker = c->worker;
  p->req.reply_tag = tag;
  p->ts = ts;
  p->push_vals = push_vals;
  DT_TRY(comm_irecv(w, p->server, tag, &p->reply, PS_REPLY_BYTES, &p->recv_reply));
  if (p->recv_into)
    DT_TRY(comm_irecv(w, p->server, tag + 1, p->recv_into, p->nbytes, &p->recv_values));
  DT_TRY(comm_isend(w, p->server, PS_TAG_REQ, &p->req, PS_REQ_BYTES, &p->send_req));
  if (push_vals) DT_TRY(comm_isend(w, p->server, PS_TAG_DATA, push_vals, p->nbytes, &p->send_data));
  return 0;
}

/* What part_start puts on the wire: a push's values go out with the
 * request, a pull's (a call's) come back with the reply. */
void ps_part_bytes(int op, size_t values, size_t *sent, size_t *received) {
  *sent = PS_REQ_BYTES + (op == PS_OP_PUSH ? values : 0);
  *received = PS_REPLY_BYTES + (op == PS_OP_PUSH ? 0 : values);
}

/* Splits [begin, begin+count) over the shards and starts one part each:
 * all parts planned (and a push's encoded) first, so that every part's
 * request carries the push's total bytes, then started. */
static int start_ranged(ps_client_t *c, int op, size_t begin, size_t count, int which,
                        const float *push_vals, float *pull_vals, const ps_req_t *tmpl) {
  const ps_shard_map_t *m = c->map;
  if (count == 0 || begin >= m->nparams || count > m->nparams - begin)
    return dt_error("parameter-server client: key range [%zu, %zu) is outside the model "
                    "(%zu keys)", begin, begin + count, m->nparams);
  int64_t ts;
  ps_handle_t *h = new_handle(c, &ts);
  if (!h) return -1;
  size_t end = begin + count;
  const void *data[m->nservers];
  double bytes = 0;
  int rc = 0;
  for (int k = 0; k < m->nservers && rc == 0; k++) {
    ps_range_t r = m->shards[k];
    if (r.end <= begin || r.begin >= end) continue;
    size_t lo = r.begin > begin ? r.begin : begin, hi = r.end < end ? r.end : end;
    ps_part_t *p = &h->parts[h->nparts];
    part_reset(p);
    if (tmpl) p->req = *tmpl;
    p->server = p->target = c->first_server + (c->owner ? c->owner[k] : k);
    p->shard = k;
    p->nbytes = ps_values_bytes(hi - lo);
    p->req.op = op;
    p->req.which = which;
    p->req.begin = lo;
    p->req.count = hi - lo;
    p->req.nvalues = op == PS_OP_PUSH ? hi - lo : 0;
    p->req.version = c->version[k];
    data[h->nparts] = push_vals ? push_vals + (lo - begin) : NULL;
    if (push_vals && c->fac_data) { /* --ps-push factors: the shard's payload instead */
      data[h->nparts] = c->fac_data[k];
      p->nbytes = c->fac_bytes[k];
      p->req.encoded = p->nbytes;
      p->req.flags |= PS_PUSH_FACTORS;
    } else if (push_vals && c->codec.kind != CODEC_NONE) {
      data[h->nparts] = encode_part(c, p, push_vals + (lo - begin), lo, hi - lo, ts);
      if (!data[h->nparts]) rc = -1;
    }
    p->recv_into = pull_vals ? pull_vals + (lo - begin) : NULL;
    if (pull_vals && which == 0 && c->held && lo == r.begin && hi == r.end)
      rc = plan_held_pull(c, p, k, pull_vals + (lo - begin));
    bytes += (double)p->nbytes;
    h->nparts++;
  }
  for (int j = 0; j < h->nparts && rc == 0; j++) {
    ps_part_t *p = &h->parts[j];
    if (op == PS_OP_PUSH && !(p->req.flags & PS_PUSH_PART))
      p->req.bytes_pushed = c->pushed + bytes; /* this push included (a part: its caller's count) */
    rc = part_start(c, p, ts, data[j]);
  }
  if (rc != 0) {
    for (int j = 0; j < h->nparts; j++) part_cancel(c, &h->parts[j]);
    h->used = 0;
    return -1;
  }
  if (op == PS_OP_PUSH) c->pushed += bytes;
  return (int)(ts % ((int64_t)1 << 30));
}

int ps_push(ps_client_t *c, size_t begin, size_t count, const float *vals, const ps_req_t *tmpl) {
  return start_ranged(c, PS_OP_PUSH, begin, count, 0, vals, NULL, tmpl);
}

int ps_push_factors(ps_client_t *c, const void *const *payload, const size_t *bytes,
                    const float *grads, const ps_req_t *tmpl) {
  c->fac_data = payload, c->fac_bytes = bytes;
  int ts = start_ranged(c, PS_OP_PUSH, 0, c->map->nparams, 0, grads, NULL, tmpl);
  c->fac_data = NULL, c->fac_bytes = NULL;
  return ts;
}

int ps_pull(ps_client_t *c, size_t begin, size_t count, int which, float *vals,
            const ps_req_t *tmpl) {
  return start_ranged(c, PS_OP_PULL, begin, count, which, NULL, vals, tmpl);
}

int ps_call(ps_client_t *c, int server, const ps_req_t *req, void *extra, size_t extra_len) {
  if (server < 0 || server >= c->map->nservers)
    return dt_error("parameter-server client: no server %d (there are %d)", server,
                    c->map->nservers);
  int64_t ts;
  ps_handle_t *h = new_handle(c, &ts);
  if (!h) return -1;
  ps_part_t *p = &h->parts[h->nparts++];
  part_reset(p);
  p->req = *req;
  if (req->op == PS_OP_NEXT) p->req.clock = ++c->nexts; /* the coordinator answers a resend alike */
  p->server = p->target = c->first_server + server;
  p->shard = -1;
  /* the coordinator's calls go where shard 0 is served: its standby took both */
  p->coord = c->owner && server == 0 &&
             (req->op == PS_OP_NEXT || req->op == PS_OP_STATS || req->op == PS_OP_BYE);
  if (p->coord) p->server = p->target = c->first_server + c->owner[0];
  p->nbytes = extra_len;
  p->recv_into = extra;
  if (part_start(c, p, ts, NULL) != 0) {
    part_cancel(c, p);
    h->used = 0;
    return -1;
  }
  return (int)(ts % ((int64_t)1 << 30));
}

static const char *op_name(int op) {
  static const char *names[] = {"?", "push", "pull", "next", "stats", "save", "bye", "flush",
                                "dead", "stop", "repl", "repl-ack", "ping", "pong",
                                "takeover", "lost-backup", "server-gone", "copy", "copy-ack", "coord",
                                "coord-state", "coord-ack"};
  return op > 0 && op < PS_OP_COUNT ? names[op] : "?";
}

/* The request, the answer, then the values; a rejection cancels the rest. */
static int part_wait(ps_client_t *c, ps_part_t *p) {
  comm_t *w = c->world;
  comm_req_t *r = p->send_req;
  p->send_req = NULL;
  if (comm_wait(w, r) != 0) return -1;
  r = p->recv_reply, p->recv_reply = NULL;
  if (comm_wait(w, r) != 0) return -1;
  if (p->reply.magic != PS_MAGIC)
    return dt_error("server rank %d answered %s with a bad reply (magic 0x%08x)", p->server,
                    op_name(p->req.op), p->reply.magic);
  if (p->reply.status != 0) {
    p->reply.error[sizeof p->reply.error - 1] = 0;
    return dt_error("server rank %d rejected %s: %s", p->server, op_name(p->req.op),
                    p->reply.error);
  }
  if (p->send_data) {
    r = p->send_data, p->send_data = NULL;
    if (comm_wait(w, r) != 0) return -1;
  }
  if (p->recv_values) {
    r = p->recv_values, p->recv_values = NULL;
    if (comm_wait(w, r) != 0) return -1;
  }
  return 0;
}

/* ---- failover (--ps-replicas 2) ---------------------------------------------- */

static int poll_notice(ps_client_t *c);

int ps_client_set_failover(ps_client_t *c, double timeout) {
  int K = c->map->nservers;
  c->timeout = timeout;
  c->dead = calloc((size_t)K, 1);
  c->owner = malloc((size_t)K * sizeof *c->owner);
  c->notice = malloc((size_t)(1 + K) * sizeof *c->notice);
  if (!c->dead || !c->owner || !c->notice) return dt_error("out of memory");
  for (int k = 0; k < K; k++) c->owner[k] = k;
  return comm_irecv(c->world, COMM_ANY_SOURCE, PS_TAG_FAILOVER, c->notice,
                    (size_t)(1 + K) * sizeof *c->notice, &c->notice_req);
}

int ps_client_notices(ps_client_t *c) { return c->notice_req ? poll_notice(c) : 0; }

void ps_client_chain_counts(const ps_client_t *c, int64_t *acked, int64_t *resent) {
  *acked = c->acked;
  *resent = c->resent;
}

/* The coordinator's word that a server is dead, if it has come. */
static int poll_notice(ps_client_t *c) {
  int done = 0;
  if (comm_test(c->world, c->notice_req, &done) != 0 || !done) return 0;
  comm_req_t *r = c->notice_req;
  c->notice_req = NULL;
  DT_TRY(comm_wait(c->world, r));
  int K = c->map->nservers, j = c->notice[0] - (c->first_server - c->map->first_server);
  if (j >= 0 && j < K && !c->dead[j]) {
    c->dead[j] = 1;
    comm_forget(c->world, c->first_server + j);
    for (int k = 0; k < K; k++) {
      int o = c->notice[1 + k];
      if (o < 0 || o >= K || o == c->owner[k]) continue;
      c->owner[k] = o;
      dt_log(DT_LOG_WARN, "worker %d: server %d is dead; shard %d is served by server %d now",
             c->worker, j, k, o);
    }
  }
  return comm_irecv(c->world, COMM_ANY_SOURCE, PS_TAG_FAILOVER, c->notice, /* from the coordinator, */
                    (size_t)(1 + K) * sizeof *c->notice, &c->notice_req); /* whichever it is */
}

/* Whether every message of the part is through: 1 yes, 0 not yet. A
 * message that fails (its server is gone: a send withdrawn, a peer that
 * has ended) loses the part: it then waits for the notice and its resend. */
static int part_through(ps_client_t *c, ps_part_t *p) {
  comm_req_t **reqs[] = {&p->send_req, &p->send_data, &p->recv_reply, &p->recv_values};
  for (size_t i = 0; i < sizeof reqs / sizeof reqs[0] && p->server >= 0; i++) {
    int done = 1;
    if (*reqs[i] && comm_test(c->world, *reqs[i], &done) == 0 && !done) return 0;
    comm_req_t *r = *reqs[i];
    *reqs[i] = NULL;
    if (r && comm_wait(c->world, r) != 0) {
      dt_log(DT_LOG_DEBUG, "worker %d: %s of shard %d: %s", c->worker, op_name(p->req.op), p->shard,
             dt_errmsg());
      p->server = -1; /* lost: only a resend completes it */
    }
  }
  if (p->server < 0) part_cancel(c, p);
  return p->server >= 0;
}

/* The part's answer, once through: a rejection fails the wait. */
static int part_answer(const ps_part_t *p) {
  if (p->reply.magic != PS_MAGIC)
    return dt_error("server rank %d answered %s with a bad reply (magic 0x%08x)", p->server,
                    op_name(p->req.op), p->reply.magic);
  if (p->reply.status != 0)
    return dt_error("server rank %d rejected %s: %.*s", p->server, op_name(p->req.op),
                    (int)sizeof p->reply.error - 1, p->reply.error);
  return 0;
}

/* The same request to the shard's server now: the backup of a dead one. */
static int part_resend(ps_client_t *c, ps_part_t *p) {
  int k = p->coord ? 0 : p->shard;
  part_cancel(c, p);
  p->server = p->target = c->first_server + c->owner[k];
  c->resent++;
  dt_log(DT_LOG_INFO, "worker %d: %s of shard %d sent again, to server rank %d", c->worker,
         op_name(p->req.op), k, p->server);
  return part_start(c, p, p->ts, p->push_vals);
}

/* A shard's part, waited for while watching for the coordinator's notice
 * that its server is dead (then it goes again, to the backup). */
static int part_wait_failover(ps_client_t *c, ps_part_t *p) {
  double deadline = dt_now() + c->timeout, pause = 0;
  int k = p->coord ? 0 : p->shard;
  for (;;) {
    DT_TRY(poll_notice(c));
    if (p->target != c->first_server + c->owner[k]) DT_TRY(part_resend(c, p)); /* it has moved */
    if (part_through(c, p)) return part_answer(p);
    if (dt_now() > deadline)
      return dt_error("server rank %d: no answer to %s of shard %d within %g s (--comm-timeout)",
                      c->first_server + k, op_name(p->req.op), k, c->timeout);
    pause = pause < 200e-6 ? pause * 2 + 5e-6 : 200e-6;
    dt_sleep_until(dt_now() + pause);
  }
}

int ps_wait(ps_client_t *c, int ts, ps_reply_t *reply) {
  ps_handle_t *h = &c->slots[ts % PS_MAX_INFLIGHT];
  if (ts < 0 || !h->used) return dt_error("parameter-server client: no request %d in flight", ts);
  double t0 = dt_now();
  int rc = 0;
  for (int i = 0; i < h->nparts; i++) {
    ps_part_t *p = &h->parts[i];
    int failover = c->dead && (p->shard >= 0 || p->coord);
    if (rc == 0 && (failover ? part_wait_failover(c, p) : part_wait(c, p)) != 0) {
      rc = -1;
      if (!failover && p->shard >= 0) /* the one copy of the shard is out of reach */
        dt_error_prefix("server %d (rank %d), the shard's only copy (--ps-replicas 1): ",
                        p->server - c->first_server, p->server);
    }
    part_cancel(c, p); /* after a failure: withdraw what is left */
    if (rc == 0 && p->pull != PULL_PLAIN && finish_held_pull(c, p) != 0) rc = -1;
    if (rc == 0 && p->req.op == PS_OP_PULL) {
      c->pulled += (double)p->nbytes;
      if (p->req.which == 0) c->version[p->shard] = p->reply.version, c->clock[p->shard] = p->reply.clock;
    }
  }
  if (rc == 0 && reply && h->nparts) *reply = h->parts[0].reply;
  if (rc == 0 && h->nparts && h->parts[0].req.op == PS_OP_PUSH) c->acked++;
  if (dt_trace && h->nparts) {
    size_t bytes = 0;
    for (int i = 0; i < h->nparts; i++) bytes += h->parts[i].nbytes;
    int op = h->parts[0].req.op;
    trace_async(dt_trace, TRACE_PS, op == PS_OP_PUSH ? "push" : op == PS_OP_PULL ? "pull" : "call",
                (long long)bytes, h->started, dt_now());
  }
  h->used = 0;
  c->blocked += dt_now() - t0;
  return rc;
}

int ps_test(ps_client_t *c, int ts) {
  ps_handle_t *h = &c->slots[ts % PS_MAX_INFLIGHT];
  if (ts < 0 || !h->used) return dt_error("parameter-server client: no request %d in flight", ts);
  for (int i = 0; i < h->nparts; i++) {
    ps_part_t *p = &h->parts[i];
    comm_req_t *reqs[] = {p->send_req, p->send_data, p->recv_reply, p->recv_values};
    for (size_t j = 0; j < sizeof reqs / sizeof reqs[0]; j++) {
      int done = 1;
      if (reqs[j] && comm_test(c->world, reqs[j], &done) != 0) return -1;
      if (!done) return 0;
    }
  }
  return 1;
}

int64_t ps_client_version(const ps_client_t *c, int server) { return c->version[server]; }

int64_t ps_client_clock(const ps_client_t *c) {
  int64_t m = c->clock[0];
  for (int k = 1; k < c->map->nservers; k++) m = c->clock[k] < m ? c->clock[k] : m;
  return m;
}

int ps_cache_fresh(int64_t cached, int64_t clock, int staleness) { return cached >= clock - staleness; }

void ps_client_totals(const ps_client_t *c, double *pushed, double *pulled, double *blocked) {
  *pushed = c->pushed;
  *pulled = c->pulled;
  *blocked = c->blocked;
}
