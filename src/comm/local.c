/* local: N ranks as threads of one process.
 *
 * Rendezvous, zero-copy. isend queues a descriptor (pointer, length,
 * header) at the destination rank without copying. The receiving rank
 * copies straight from the sender's buffer into its own (or adds, for
 * irecv_reduce): one pass over the data per message. Then it completes
 * the send, so a wait on an isend returns once the data has been taken.
 *
 * Matching follows MPI: by (communicator, source or ANY_SOURCE, tag), in
 * posting order. Whichever side comes second makes the match, under the
 * receiver's mailbox lock; the copy itself is always done by the receiver,
 * in its next wait or test (a wait copies the rank's matched receives,
 * oldest first, until its own request is done, so "irecv; send; wait" on
 * two ranks cannot deadlock).
 *
 * States of a request, all changed under the receiver's mailbox lock:
 * POSTED (queued, unmatched) -> MATCHED (paired, in the receiver's
 * matched queue) -> CLAIMED (the receiver is copying) -> done (atomic flag,
 * set under the owner's lock so that a sleeping owner is woken).
 *
 * A blocking wait spins (or yields its core) for a while, then sleeps on
 * the rank's condition variable (budgets in world_new). It fails after net->timeout, when another rank has failed
 * (the world's abort flag), or when the peer has finished without the
 * message, so that a broken run stops instead of hanging. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/comm.h"

#define TAG_SPLIT (-1)      /* internal tags: user tags are >= 0 */
#define TAG_BARRIER (-2)
#define SLAB_REQS 64
#define MAX_RANKS 4096

enum { K_FREE, K_SEND, K_RECV };
enum { S_POSTED, S_MATCHED, S_CLAIMED };
enum { E_NONE, E_LEN, E_HEADER, E_SENDER_CANCELLED, E_RECEIVER_CANCELLED };
enum { WAIT_OK, WAIT_TIMEOUT, WAIT_ABORTED, WAIT_PEER_GONE };

typedef struct lreq lreq_t;
struct lreq {
  lreq_t *next;             /* link in one queue, or in the free list */
  lreq_t *peer;             /* a receive's matched send */
  int kind, state, status;
  int owner;                /* world rank that posted it */
  int comm_id;
  int peer_rank;            /* comm rank: destination of a send, source of a receive or ANY */
  int peer_world;           /* world rank of a send's destination */
  int tag, reduce;
  int got_src;              /* receive: comm rank the message came from */
  void *rbuf;
  const void *sbuf;
  size_t len, other_len;    /* other_len: the other side's length (for errors) */
  comm_header_t hdr;        /* a send's header, checked by the receiver */
  double ready_at;          /* emulated: send = link free again, receive = arrival */
  double arrival;           /* send: when its last byte reaches the receiver */
  atomic_int done;
};

typedef struct { lreq_t *head, *tail; } queue_t;
typedef struct slab { struct slab *next; lreq_t reqs[SLAB_REQS]; } slab_t;

/* The stall inspector's record of a world rank: the last collective it
 * started (comm_stall_enter), on which communicator, and its number there. */
typedef struct {
  _Alignas(64) atomic_int comm_id;
  atomic_ullong seq;        /* 0: none yet */
  _Atomic(const char *) op;
  atomic_size_t bytes;
} stall_slot_t;

/* One per world rank; aligned so that ranks do not share cache lines. */
typedef struct {
  _Alignas(64) pthread_mutex_t mu;
  pthread_cond_t cv;
  queue_t unexpected;       /* sends to this rank that no receive has matched */
  queue_t posted;           /* this rank's receives that no send has matched */
  queue_t matched;          /* this rank's matched receives, waiting for the copy */
  atomic_int nmatched;
  int waiters;
  lreq_t *free_reqs;
  slab_t *slabs;
  double link_free_at[2];   /* emulated: when the outgoing links are idle (LINK_*) */
  atomic_int exited;
} mailbox_t;

typedef struct {
  int size;
  double timeout;           /* seconds */
  double stall_warning;     /* seconds before a stall line, and its period */
  stall_slot_t *stall;      /* [size] */
  double spin;              /* seconds a wait spins before sleeping, unless the thread set its own */
  int yield;                /* spin with sched_yield: ranks outnumber cores */
  int *cpu, ncpu;           /* --bind core: the CPUs this process may use (NULL: no binding) */
  int emulated;
  double latency, bandwidth, *rank_latency, *rank_bandwidth, *rank_slowdown;
  double intra_latency, intra_bandwidth; /* between two ranks of one host (multihost) */
  int multihost;            /* the ranks are on more than one (emulated) host */
  int *host;                /* world rank -> host (comm_net_hosts) */
  /* link=shared: each host's one link to the others, out and in: when
   * each is idle (under host_mu; [host]) */
  int shared_link;
  double *host_out_free, *host_in_free;
  pthread_mutex_t host_mu;
  mailbox_t *mb;
  atomic_int aborted;
  atomic_int failed_rank;   /* first rank whose fn failed, -1 = none */
  char failmsg[1100];
  atomic_int next_comm_id;
  pthread_condattr_t cvattr;
} world_t;

typedef struct {
  world_t *w;
  int id;                   /* messages on different communicators never match */
  int is_world;
  int *world_of;            /* comm rank -> world rank */
  atomic_ullong coll_seq;   /* collectives this rank started on this communicator */
} lcomm_t;

static const comm_ops_t local_ops;
static void record_failure(world_t *w, int rank);

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static world_t *world_of(const comm_t *c) { return ((lcomm_t *)c->impl)->w; }
static int my_world(const comm_t *c) { return ((lcomm_t *)c->impl)->world_of[c->rank]; }

/* ---- queues ------------------------------------------------------------ */

static void q_push(queue_t *q, lreq_t *r) {
  r->next = NULL;
  if (q->tail) q->tail->next = r;
  else q->head = r;
  q->tail = r;
}

static void q_unlink(queue_t *q, lreq_t *prev, lreq_t *r) {
  if (prev) prev->next = r->next;
  else q->head = r->next;
  if (q->tail == r) q->tail = prev;
  r->next = NULL;
}

static int q_remove(queue_t *q, lreq_t *r) {
  lreq_t *prev = NULL;
  for (lreq_t *p = q->head; p; prev = p, p = p->next)
    if (p == r) {
      q_unlink(q, prev, r);
      return 1;
    }
  return 0;
}

static int send_matches(const lreq_t *s, const lreq_t *r) {
  return s->comm_id == r->comm_id && s->tag == r->tag &&
         (r->peer_rank == COMM_ANY_SOURCE || r->peer_rank == s->hdr.src);
}

/* ---- requests: a free list per rank, refilled a slab at a time ---------- */

static lreq_t *req_get(world_t *w, int me) {
  mailbox_t *mb = &w->mb[me];
  pthread_mutex_lock(&mb->mu);
  if (!mb->free_reqs) {
    slab_t *s = calloc(1, sizeof *s);
    if (!s) {
      pthread_mutex_unlock(&mb->mu);
      dt_error("out of memory allocating communication requests");
      return NULL;
    }
    s->next = mb->slabs;
    mb->slabs = s;
    for (int i = 0; i < SLAB_REQS; i++) {
      s->reqs[i].next = mb->free_reqs;
      mb->free_reqs = &s->reqs[i];
    }
  }
  lreq_t *r = mb->free_reqs;
  mb->free_reqs = r->next;
  pthread_mutex_unlock(&mb->mu);
  memset(r, 0, sizeof *r);
  r->owner = me;
  return r;
}

static void req_put(world_t *w, lreq_t *r) {
  mailbox_t *mb = &w->mb[r->owner];
  pthread_mutex_lock(&mb->mu);
  r->kind = K_FREE;
  r->next = mb->free_reqs;
  mb->free_reqs = r;
  pthread_mutex_unlock(&mb->mu);
}

/* Marks q done under its owner's lock, waking the owner if it sleeps. */
static void complete(world_t *w, lreq_t *q) {
  mailbox_t *mb = &w->mb[q->owner];
  pthread_mutex_lock(&mb->mu);
  atomic_store_explicit(&q->done, 1, memory_order_release);
  if (mb->waiters) pthread_cond_broadcast(&mb->cv);
  pthread_mutex_unlock(&mb->mu);
}

static void wake_all(world_t *w) {
  for (int i = 0; i < w->size; i++) {
    pthread_mutex_lock(&w->mb[i].mu);
    pthread_cond_broadcast(&w->mb[i].cv);
    pthread_mutex_unlock(&w->mb[i].mu);
  }
}

/* ---- emulated network --------------------------------------------------- */

static double rank_value(const double *per_rank, double global, int r) {
  return per_rank ? per_rank[r] : global;
}

/* A rank has two outgoing links: one to the ranks of its own host, one to
 * the other hosts (with one host, every message takes the second, which
 * is then "the" link of --net latency/bandwidth). */
enum { LINK_INTRA, LINK_INTER };

/* link=shared, between hosts: the message holds its host's link out and
 * the destination host's link in for len / bandwidth, from when both are
 * free (one message at a time on each, as one NIC a host). */
static double host_link_finish(world_t *w, int me, int dst, double len_sec) {
  int hs = w->host[me], hd = w->host[dst];
  pthread_mutex_lock(&w->host_mu);
  double start = dt_now();
  if (w->host_out_free[hs] > start) start = w->host_out_free[hs];
  if (w->host_in_free[hd] > start) start = w->host_in_free[hd];
  double finish = start + len_sec;
  w->host_out_free[hs] = w->host_in_free[hd] = finish;
  pthread_mutex_unlock(&w->host_mu);
  return finish;
}

/* The sender's link to the destination carries one message at a time:
 * this one starts when the link is free, takes len / bandwidth, and
 * arrives latency later. */
static void link_schedule(world_t *w, int me, lreq_t *s) {
  int link = w->multihost && w->host[me] == w->host[s->peer_world] ? LINK_INTRA : LINK_INTER;
  double bw = link == LINK_INTRA ? w->intra_bandwidth : rank_value(w->rank_bandwidth, w->bandwidth, me);
  double lat = link == LINK_INTRA ? w->intra_latency : rank_value(w->rank_latency, w->latency, me);
  if (link == LINK_INTER && w->shared_link) {
    s->ready_at = host_link_finish(w, me, s->peer_world, comm_link_time(0, bw, 0, (double)s->len));
    s->arrival = s->ready_at + lat;
    return;
  }
  mailbox_t *mb = &w->mb[me];
  pthread_mutex_lock(&mb->mu);
  double now = dt_now();
  double start = mb->link_free_at[link] > now ? mb->link_free_at[link] : now;
  double finish = start + comm_link_time(0, bw, 0, (double)s->len);
  mb->link_free_at[link] = finish;
  pthread_mutex_unlock(&mb->mu);
  s->ready_at = finish;
  s->arrival = finish + lat;
}

/* Waits until time t on the emulated clock. nanosleep overshoots by tens
 * of microseconds on a VM, as much as a whole emulated hop; so sleep to
 * just before t and spin (or yield, when ranks outnumber cores) the rest. */
static void wait_until(const world_t *w, double t) {
  if (t - dt_now() > 200e-6) dt_sleep_until(t - 150e-6);
  while (dt_now() < t) {
    if (w->yield) sched_yield();
    else cpu_relax();
  }
}

/* ---- posting and matching ----------------------------------------------- */

/* A receive and the send it matched, under the receiver's mailbox lock:
 * the receiver's progress (or a waiter on it) copies the data. */
static void pair_up(mailbox_t *mb, lreq_t *r, lreq_t *s) {
  r->peer = s;
  r->state = s->state = S_MATCHED;
  q_push(&mb->matched, r);
  atomic_fetch_add(&mb->nmatched, 1);
  if (mb->waiters) pthread_cond_broadcast(&mb->cv);
}

static void post_send(world_t *w, int dst_world, lreq_t *s) {
  mailbox_t *mb = &w->mb[dst_world];
  pthread_mutex_lock(&mb->mu);
  lreq_t *prev = NULL, *r = mb->posted.head;
  while (r && !send_matches(s, r)) prev = r, r = r->next;
  if (r) {
    q_unlink(&mb->posted, prev, r);
    pair_up(mb, r, s);
  } else {
    s->state = S_POSTED;
    q_push(&mb->unexpected, s);
  }
  pthread_mutex_unlock(&mb->mu);
}

static void post_recv(world_t *w, lreq_t *r) {
  mailbox_t *mb = &w->mb[r->owner];
  pthread_mutex_lock(&mb->mu);
  lreq_t *prev = NULL, *s = mb->unexpected.head;
  while (s && !send_matches(s, r)) prev = s, s = s->next;
  if (s) {
    q_unlink(&mb->unexpected, prev, s);
    pair_up(mb, r, s);
  } else {
    r->state = S_POSTED;
    q_push(&mb->posted, r);
  }
  pthread_mutex_unlock(&mb->mu);
}

static int l_isend(comm_t *c, int dst, int tag, const void *buf, size_t len, comm_req_t **out) {
  world_t *w = world_of(c);
  lcomm_t *lc = c->impl;
  lreq_t *s = req_get(w, my_world(c));
  if (!s) return -1;
  s->kind = K_SEND;
  s->comm_id = lc->id;
  s->peer_rank = dst;
  s->peer_world = lc->world_of[dst];
  s->tag = tag;
  s->sbuf = buf;
  s->len = len;
  s->hdr = (comm_header_t){COMM_MAGIC, COMM_VERSION, c->rank, tag, len};
  if (w->emulated) link_schedule(w, s->owner, s);
  post_send(w, s->peer_world, s);
  *out = (comm_req_t *)s;
  return 0;
}

static int post_receive(comm_t *c, int src, int tag, void *buf, size_t len, int reduce,
                        comm_req_t **out) {
  world_t *w = world_of(c);
  lreq_t *r = req_get(w, my_world(c));
  if (!r) return -1;
  r->kind = K_RECV;
  r->comm_id = ((lcomm_t *)c->impl)->id;
  r->peer_rank = src;
  r->tag = tag;
  r->rbuf = buf;
  r->len = len;
  r->reduce = reduce;
  post_recv(w, r);
  *out = (comm_req_t *)r;
  return 0;
}

static int l_irecv(comm_t *c, int src, int tag, void *buf, size_t len, comm_req_t **out) {
  return post_receive(c, src, tag, buf, len, 0, out);
}

static int l_irecv_reduce(comm_t *c, int src, int tag, float *buf, size_t count, float *scratch,
                          comm_req_t **out) {
  (void)scratch; /* the sum is taken straight from the sender's buffer */
  return post_receive(c, src, tag, buf, count * sizeof(float), 1, out);
}

/* ---- the copy, done by the receiving rank ------------------------------- */

static void deliver(world_t *w, lreq_t *r) {
  lreq_t *s = r->peer;
  r->got_src = s->hdr.src;
  r->other_len = (size_t)s->hdr.len;
  s->other_len = r->len;
  r->ready_at = s->arrival;
  comm_header_t h;
  wire_status_t ws = wire_check_header(&s->hdr, sizeof s->hdr, r->tag,
                                       r->peer_rank, 0, r->len, &h);
  if (ws == WIRE_LEN) r->status = s->status = E_LEN;
  else if (ws != WIRE_OK) r->status = s->status = E_HEADER;
  else if (r->reduce) kern_add(r->len / sizeof(float), s->sbuf, r->rbuf);
  else if (r->len) memcpy(r->rbuf, s->sbuf, r->len);
  complete(w, r);
  complete(w, s); /* the last touch of s: its owner may reuse it at once */
}

/* Copies the matched receives of rank `me`, oldest first, until `until`
 * (the request being waited for, or NULL) is done: stopping there lets the
 * caller act on it (a ring forwards the block it just reduced) before
 * doing copies that nobody waits for yet. */
static void progress(world_t *w, int me, const lreq_t *until) {
  mailbox_t *mb = &w->mb[me];
  while (atomic_load_explicit(&mb->nmatched, memory_order_acquire) > 0) {
    if (until && atomic_load_explicit(&until->done, memory_order_acquire)) return;
    pthread_mutex_lock(&mb->mu);
    lreq_t *r = mb->matched.head;
    if (r) {
      q_unlink(&mb->matched, NULL, r);
      atomic_fetch_sub(&mb->nmatched, 1);
      r->state = r->peer->state = S_CLAIMED;
    }
    pthread_mutex_unlock(&mb->mu);
    if (!r) return;
    deliver(w, r);
  }
}

/* ---- waiting ------------------------------------------------------------ */

static int is_done(const lreq_t *q) {
  return atomic_load_explicit(&q->done, memory_order_acquire);
}

static int peer_exited(const world_t *w, const lcomm_t *lc, int comm_rank) {
  return atomic_load(&w->mb[lc->world_of[comm_rank]].exited);
}

/* Called with the owner's lock held, so q's state cannot change under us
 * and a peer that has exited has already withdrawn everything it posted. */
static int peer_gone(const world_t *w, const comm_t *c, const lreq_t *q) {
  const lcomm_t *lc = c->impl;
  if (q->kind == K_SEND) return atomic_load(&w->mb[q->peer_world].exited);
  if (q->state != S_POSTED) return 0;
  if (q->peer_rank != COMM_ANY_SOURCE) return peer_exited(w, lc, q->peer_rank);
  for (int i = 0; i < c->size; i++)
    if (i != c->rank && !peer_exited(w, lc, i)) return 0;
  return c->size > 1;
}

static void to_timespec(double t, struct timespec *ts) {
  ts->tv_sec = (time_t)t;
  ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
  if (ts->tv_nsec >= 1000000000L) ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

/* Sleeps until q may be done, a receive needs copying, or the wait must
 * fail; returns WAIT_OK or the reason. */
static int block(world_t *w, const comm_t *c, lreq_t *q, double deadline) {
  mailbox_t *mb = &w->mb[q->owner];
  int rc = WAIT_OK;
  pthread_mutex_lock(&mb->mu);
  mb->waiters++;
  for (;;) {
    if (is_done(q) || atomic_load(&mb->nmatched) > 0) break;
    if (atomic_load(&w->aborted)) { rc = WAIT_ABORTED; break; }
    if (peer_gone(w, c, q)) { rc = WAIT_PEER_GONE; break; }
    if (dt_now() >= deadline) { rc = WAIT_TIMEOUT; break; }
    struct timespec ts;
    to_timespec(deadline, &ts);
    pthread_cond_timedwait(&mb->cv, &mb->mu, &ts);
  }
  mb->waiters--;
  pthread_mutex_unlock(&mb->mu);
  return rc;
}

/* A short spin catches the reply of a peer without the cost of sleeping
 * (see world_new for the budgets). Returns 1 when there is something to do; 0 sends the caller to block(),
 * which also notices an abort. */
/* Past the first PURE_SPIN seconds the spin yields its core at every turn:
 * a rank's other threads (the compute thread, while a progress thread waits
 * on a bucket's allreduce) may need it, and a yield costs ~1 us when no one
 * does. */
#define PURE_SPIN 20e-6

/* The calling thread's spin budget (comm_set_wait_spin); < 0 = the world's. */
static _Thread_local double thread_spin = -1;

static int spin_briefly(world_t *w, lreq_t *q) {
  double spin = thread_spin >= 0 ? thread_spin : w->spin;
  if (spin <= 0) return 0;
  mailbox_t *mb = &w->mb[q->owner];
  double start = dt_now(), until = start + spin, pure_until = start + PURE_SPIN;
  do {
    int yield = w->yield || dt_now() > pure_until;
    for (int i = 0; i < 64; i++) {
      if (atomic_load_explicit(&w->aborted, memory_order_relaxed)) return 0;
      if (is_done(q) || atomic_load_explicit(&mb->nmatched, memory_order_relaxed) > 0) return 1;
      if (yield) sched_yield();
      else cpu_relax();
    }
  } while (dt_now() < until);
  return 0;
}

static void stall_warn(world_t *w, const comm_t *c, const lreq_t *q, double waited);

static int wait_done(world_t *w, const comm_t *c, lreq_t *q) {
  double start = dt_now(), deadline = start + w->timeout, warn_at = start + w->stall_warning;
  for (;;) {
    progress(w, q->owner, q);
    if (is_done(q)) return WAIT_OK;
    if (spin_briefly(w, q)) continue;
    int rc = block(w, c, q, warn_at < deadline ? warn_at : deadline);
    if (rc == WAIT_TIMEOUT && dt_now() < deadline) { /* a period of the stall inspector */
      stall_warn(w, c, q, dt_now() - start);
      warn_at += w->stall_warning;
      continue;
    }
    if (rc != WAIT_OK) {
      progress(w, q->owner, q);
      return is_done(q) ? WAIT_OK : rc;
    }
  }
}

/* ---- cancel ------------------------------------------------------------- */

static void wait_claimed(world_t *w, lreq_t *q) {
  mailbox_t *mb = &w->mb[q->owner];
  pthread_mutex_lock(&mb->mu);
  mb->waiters++;
  while (!is_done(q)) pthread_cond_wait(&mb->cv, &mb->mu);
  mb->waiters--;
  pthread_mutex_unlock(&mb->mu);
}

/* Withdraws a send: unmatched, it leaves the queue; matched, its receiver
 * fails; being copied, we wait for the copy (which never blocks). */
static void cancel_send(world_t *w, lreq_t *s) {
  mailbox_t *mb = &w->mb[s->peer_world];
  lreq_t *orphan = NULL;
  pthread_mutex_lock(&mb->mu);
  int claimed = s->state == S_CLAIMED;
  if (!is_done(s) && s->state == S_POSTED) {
    q_remove(&mb->unexpected, s);
  } else if (!is_done(s) && s->state == S_MATCHED) {
    for (lreq_t *r = mb->matched.head; r; r = r->next)
      if (r->peer == s) orphan = r;
    if (orphan) {
      q_remove(&mb->matched, orphan);
      atomic_fetch_sub(&mb->nmatched, 1);
      orphan->status = E_SENDER_CANCELLED;
      orphan->got_src = s->hdr.src;
      orphan->state = S_CLAIMED;
      atomic_store_explicit(&orphan->done, 1, memory_order_release);
      pthread_cond_broadcast(&mb->cv);
    }
  }
  pthread_mutex_unlock(&mb->mu);
  if (claimed) wait_claimed(w, s);
}

static void cancel_recv(world_t *w, lreq_t *r) {
  mailbox_t *mb = &w->mb[r->owner];
  lreq_t *s = NULL;
  pthread_mutex_lock(&mb->mu);
  int claimed = r->state == S_CLAIMED;
  if (!is_done(r) && r->state == S_POSTED) {
    q_remove(&mb->posted, r);
  } else if (!is_done(r) && r->state == S_MATCHED) {
    q_remove(&mb->matched, r);
    atomic_fetch_sub(&mb->nmatched, 1);
    s = r->peer;
    r->state = s->state = S_CLAIMED;
    s->status = E_RECEIVER_CANCELLED;
    s->other_len = r->len;
  }
  pthread_mutex_unlock(&mb->mu);
  if (s) complete(w, s);
  if (claimed) wait_claimed(w, r);
}

static void cancel_req(world_t *w, lreq_t *q) {
  if (q->kind == K_SEND) cancel_send(w, q);
  else cancel_recv(w, q);
}

static int l_cancel(comm_t *c, comm_req_t *req) {
  world_t *w = world_of(c);
  cancel_req(w, (lreq_t *)req);
  req_put(w, (lreq_t *)req);
  return 0;
}

/* ---- error messages ----------------------------------------------------- */

/* "rank 3" or, on a sub-communicator, "rank 3 (rank 1 of the tp group)". */
static const char *rank_name(const comm_t *c, int r, char *buf, size_t n) {
  return comm_rank_name(c, r, buf, n);
}

/* ---- the stall inspector ------------------------------------------------ */

static void l_stall_enter(comm_t *c, const char *op, size_t bytes) {
  lcomm_t *lc = c->impl;
  stall_slot_t *s = &lc->w->stall[my_world(c)];
  unsigned long long seq = atomic_fetch_add(&lc->coll_seq, 1) + 1;
  atomic_store(&s->op, op);
  atomic_store(&s->bytes, bytes);
  atomic_store(&s->comm_id, lc->id);
  atomic_store(&s->seq, seq);
}

static void add_rank(char *buf, size_t cap, int *count, int r) {
  size_t n = strlen(buf);
  if (n < cap) snprintf(buf + n, cap - n, "%s%d", (*count)++ ? ", " : "", r);
}

/* The collective this rank waits in on c, the ranks (of c) that have
 * started it and those that have not, into buf; *lowest_joined gets the
 * lowest rank that has. 0 when this rank's last collective is not on c
 * (a point-to-point wait). */
static int stall_describe(const comm_t *c, char *buf, size_t cap, int *lowest_joined) {
  const lcomm_t *lc = c->impl;
  world_t *w = lc->w;
  stall_slot_t *me = &w->stall[my_world(c)];
  unsigned long long seq = atomic_load(&me->seq);
  if (seq == 0 || atomic_load(&me->comm_id) != lc->id) return 0;
  char joined[400] = "", missing[400] = "";
  int nj = 0, nm = 0;
  *lowest_joined = -1;
  for (int r = 0; r < c->size; r++) {
    stall_slot_t *s = &w->stall[lc->world_of[r]];
    int in = atomic_load(&s->comm_id) == lc->id && atomic_load(&s->seq) >= seq;
    if (in && *lowest_joined < 0) *lowest_joined = r;
    add_rank(in ? joined : missing, in ? sizeof joined : sizeof missing, in ? &nj : &nm,
             lc->world_of[r]); /* world ranks, on a sub-communicator too */
  }
  snprintf(buf, cap, "%s #%llu (%zu bytes) on %s%s: joined rank%s %s; not joined: rank%s %s",
           atomic_load(&me->op), seq, atomic_load(&me->bytes),
           lc->is_world ? "the world" : c->label ? "the " : "a sub-communicator",
           lc->is_world ? "" : c->label ? c->label : "", nj == 1 ? "" : "s", joined,
           nm == 1 ? "" : "s", nm ? missing : "none (a message is late)");
  return 1;
}

static const char *rank_name(const comm_t *c, int r, char *buf, size_t n);

/* One line per period, from the lowest rank that has joined (so one line
 * for the whole communicator); a point-to-point wait reports its own. */
static void stall_warn(world_t *w, const comm_t *c, const lreq_t *q, double waited) {
  char what[1024], who[64];
  int lowest;
  if (stall_describe(c, what, sizeof what, &lowest)) {
    if (lowest == c->rank)
      dt_log(DT_LOG_WARN, "stall: %s; waited %.1f s (--stall-warning %g, --comm-timeout %g)", what,
             waited, w->stall_warning, w->timeout);
    return;
  }
  rank_name(c, q->peer_rank, who, sizeof who);
  dt_log(DT_LOG_WARN, "stall: rank %d has waited %.1f s to %s %s (tag %d) (--stall-warning %g)",
         my_world(c), waited, q->kind == K_SEND ? "send to" : "receive from", who, q->tag,
         w->stall_warning);
}

static int wait_error(const comm_t *c, const lreq_t *q, int why) {
  world_t *w = ((lcomm_t *)c->impl)->w;
  char who[64];
  const char *dir = q->kind == K_SEND ? "send to" : "recv from";
  rank_name(c, q->peer_rank, who, sizeof who);
  switch (why) {
  case WAIT_TIMEOUT: {
    char what[1024] = "";
    int lowest;
    if (stall_describe(c, what + 4, sizeof what - 4, &lowest)) memcpy(what, " in ", 4);
    return dt_error("%s %s tag %d (%zu bytes): timed out after %g s (%s)%s", dir, who, q->tag,
                    q->len, w->timeout,
                    q->kind == K_SEND ? "the receiver never took the message"
                                      : "no matching message arrived", what);
  }
  case WAIT_ABORTED:
    return dt_error("%s %s tag %d: stopped because peer rank %d failed", dir, who, q->tag,
                    atomic_load(&w->failed_rank));
  default:
    return dt_error("%s %s tag %d: %s finished without %s it", dir, who, q->tag,
                    q->peer_rank == COMM_ANY_SOURCE ? "every other rank" : who,
                    q->kind == K_SEND ? "receiving" : "sending");
  }
}

static int status_error(const comm_t *c, const lreq_t *q) {
  char who[64];
  if (q->kind == K_RECV) {
    rank_name(c, q->got_src, who, sizeof who);
    switch (q->status) {
    case E_LEN:
      return dt_error("message from %s tag %d: length %zu bytes but receive expects %zu", who,
                      q->tag, q->other_len, q->len);
    case E_HEADER:
      return dt_error("message from %s tag %d: bad header (not a dtrain message of version %u)",
                      who, q->tag, COMM_VERSION);
    default:
      return dt_error("recv from %s tag %d: the sender cancelled the message", who, q->tag);
    }
  }
  rank_name(c, q->peer_rank, who, sizeof who);
  if (q->status == E_RECEIVER_CANCELLED)
    return dt_error("send to %s tag %d: the receiver cancelled the receive", who, q->tag);
  return dt_error("send to %s tag %d: receiver expects %zu bytes but the message has %zu", who,
                  q->tag, q->other_len, q->len);
}

/* ---- wait and test ------------------------------------------------------ */

/* A receive whose wait timed out may have matched a send since the wait
 * last looked: then the message is taken (a matched receive is never
 * withdrawn, so the sender does not fail) and 1 is returned. Otherwise the
 * receive is withdrawn here, under the lock no sender can match it
 * without, and marked done so that the cancel after the error does nothing. */
static int recv_arrived_after_timeout(world_t *w, lreq_t *q) {
  mailbox_t *mb = &w->mb[q->owner];
  pthread_mutex_lock(&mb->mu);
  int arrived = is_done(q) || q->state != S_POSTED;
  if (!arrived) {
    q_remove(&mb->posted, q);
    atomic_store_explicit(&q->done, 1, memory_order_release);
  }
  pthread_mutex_unlock(&mb->mu);
  if (!arrived) return 0;
  progress(w, q->owner, q); /* only the owner copies its receives */
  wait_claimed(w, q);
  return 1;
}

/* The emulated link's delay is a wait like any other: one that would end
 * past the timeout fails now instead of sleeping (latency=1e30s hung).
 * A failed run stops it too. */
static int emulated_wait(comm_t *c, lreq_t *q) {
  world_t *w = world_of(c);
  double left = q->ready_at - dt_now();
  if (left > w->timeout) {
    dt_error("%s rank %d tag %d (%zu bytes): the emulated link delivers it in %.3g s, past "
                    "the %g s timeout (check --net, or raise --comm-timeout)",
                    q->kind == K_SEND ? "send to" : "recv from", q->peer_rank, q->tag, q->len, left,
                    w->timeout);
    record_failure(w, my_world(c)); /* now, so the peers report this, not its fallout */
    return -1;
  }
  while (q->ready_at - dt_now() > 0.05) {
    if (atomic_load(&w->aborted))
      return dt_error("%s: stopped because peer rank %d failed", q->kind == K_SEND ? "send" : "recv",
                      atomic_load(&w->failed_rank));
    dt_sleep_until(dt_now() + 0.02);
  }
  wait_until(w, q->ready_at);
  return 0;
}

static int l_wait_src(comm_t *c, comm_req_t *req, int *src, size_t *received) {
  world_t *w = world_of(c);
  lreq_t *q = (lreq_t *)req;
  int why = wait_done(w, c, q);
  if (why == WAIT_TIMEOUT && q->kind == K_RECV && recv_arrived_after_timeout(w, q)) why = WAIT_OK;
  if (why != WAIT_OK) {
    wait_error(c, q, why);
    cancel_req(w, q);
    req_put(w, q);
    return -1;
  }
  if (q->status == E_SENDER_CANCELLED && atomic_load(&w->aborted)) {
    /* the sender's rank is being torn down because the run failed: report
     * that failure, with no source, not a bad message from the sender */
    req_put(w, q);
    return dt_error("recv: stopped because peer rank %d failed", atomic_load(&w->failed_rank));
  }
  if (q->ready_at > 0 && emulated_wait(c, q) != 0) { /* emulated link */
    req_put(w, q);
    return -1;
  }
  int rc = q->status == E_NONE ? 0 : status_error(c, q);
  if (src) *src = q->kind == K_RECV ? q->got_src : c->rank;
  if (received) *received = rc == 0 && q->kind == K_RECV ? q->len : 0;
  req_put(w, q);
  return rc;
}

static int l_wait(comm_t *c, comm_req_t *req, size_t *received) {
  return l_wait_src(c, req, NULL, received);
}

static int l_test(comm_t *c, comm_req_t *req, int *done) {
  world_t *w = world_of(c);
  lreq_t *q = (lreq_t *)req;
  progress(w, q->owner, q);
  *done = is_done(q) && dt_now() >= q->ready_at;
  if (!*done && q->ready_at - dt_now() > w->timeout) return emulated_wait(c, q);
  if (!*done && atomic_load(&w->aborted))
    return dt_error("test on a request: stopped because peer rank %d failed",
                    atomic_load(&w->failed_rank));
  return 0;
}

/* ---- barrier and split (collective, over the parent's messages) --------- */

static int exchange_internal(comm_t *c, int dst, const void *sbuf, size_t slen, int src,
                             void *rbuf, size_t rlen, int tag) {
  comm_req_t *r[2];
  DT_TRY(post_receive(c, src, tag, rbuf, rlen, 0, &r[0]));
  if (l_isend(c, dst, tag, sbuf, slen, &r[1]) != 0) {
    l_cancel(c, r[0]);
    return -1;
  }
  return comm_waitall(c, 2, r);
}

/* Dissemination barrier: lg P rounds of zero-byte messages. */
static int l_barrier(comm_t *c) {
  for (int k = 1; k < c->size; k <<= 1) {
    int dst = (c->rank + k) % c->size, src = (c->rank - k + c->size) % c->size;
    if (exchange_internal(c, dst, NULL, 0, src, NULL, 0, TAG_BARRIER) != 0)
      return dt_error_prefix("barrier: ");
  }
  return 0;
}

static int make_comm(world_t *w, int id, int is_world, int rank, int size, const int *world_ranks,
                     comm_t **out);
static void l_free(comm_t *c);

/* Rank 0 gathers every (color, key), reserves a block of communicator ids
 * and sends the table back; each rank then forms its own group. */
static int split_table(comm_t *c, int color, int key, int *table) {
  world_t *w = world_of(c);
  int mine[2] = {color, key};
  if (c->rank != 0) {
    comm_req_t *r;
    DT_TRY(l_isend(c, 0, TAG_SPLIT, mine, sizeof mine, &r));
    DT_TRY(l_wait(c, r, NULL));
    comm_req_t *q;
    DT_TRY(post_receive(c, 0, TAG_SPLIT, table, (2 * (size_t)c->size + 1) * sizeof(int), 0, &q));
    return l_wait(c, q, NULL);
  }
  table[0] = color, table[1] = key;
  for (int i = 1; i < c->size; i++) {
    comm_req_t *q;
    DT_TRY(post_receive(c, i, TAG_SPLIT, table + 2 * i, 2 * sizeof(int), 0, &q));
    DT_TRY(l_wait(c, q, NULL));
  }
  table[2 * c->size] = atomic_fetch_add(&w->next_comm_id, c->size);
  for (int i = 1; i < c->size; i++) {
    comm_req_t *r;
    DT_TRY(l_isend(c, i, TAG_SPLIT, table, (2 * (size_t)c->size + 1) * sizeof(int), &r));
    DT_TRY(l_wait(c, r, NULL));
  }
  return 0;
}

static int l_split(comm_t *c, int color, int key, comm_t **out) {
  lcomm_t *lc = c->impl;
  int P = c->size;
  int *table = malloc((2 * (size_t)P + 1) * sizeof(int));
  int *members = malloc((size_t)P * sizeof(int));
  int *world_ranks = malloc((size_t)P * sizeof(int));
  int rc = -1;
  if (!table || !members || !world_ranks) {
    dt_error("split: out of memory");
    goto done;
  }
  if (split_table(c, color, key, table) != 0) {
    dt_error_prefix("split: ");
    goto done;
  }
  /* members of my color, in (key, old rank) order: insertion sort */
  int n = 0, myrank = 0;
  for (int i = 0; i < P; i++) {
    if (table[2 * i] != color) continue;
    int j = n++;
    while (j > 0 && table[2 * members[j - 1] + 1] > table[2 * i + 1]) members[j] = members[j - 1], j--;
    members[j] = i;
  }
  for (int j = 0; j < n; j++) {
    world_ranks[j] = lc->world_of[members[j]];
    if (members[j] == c->rank) myrank = j;
  }
  /* the group's id: the reserved block plus its first old rank, unique */
  int first = members[0];
  for (int j = 1; j < n; j++) if (members[j] < first) first = members[j];
  rc = make_comm(lc->w, table[2 * P] + first, 0, myrank, n, world_ranks, out);
  if (rc == 0) { /* each member's host, as the world has it */
    for (int j = 0; j < n; j++) members[j] = lc->w->host[world_ranks[j]];
    if ((rc = comm_hosts_set(*out, members)) != 0) l_free(*out);
  }
  if (rc == 0) {
    (*out)->slowdown = c->slowdown;
    (*out)->emulated = c->emulated;
    (*out)->link_latency = c->link_latency;
    (*out)->link_bandwidth = c->link_bandwidth;
    (*out)->oversubscribed = c->oversubscribed; /* the world's threads still share the cores */
  }
done:
  free(table);
  free(members);
  free(world_ranks);
  return rc;
}

/* The world communicator belongs to comm_local_run; freeing it is a no-op. */
static void l_free(comm_t *c) {
  lcomm_t *lc = c->impl;
  if (lc->is_world) return;
  comm_hosts_free(c);
  free(lc->world_of);
  free(lc);
  free(c);
}

/* Per thread: a rank's progress thread wants a short spin while its
 * compute thread, waiting with nothing else to do, keeps the long one. */
static void l_set_spin(comm_t *c, double seconds) {
  (void)c;
  thread_spin = seconds;
}

static int l_gone(comm_t *c, int rank) { return peer_exited(world_of(c), c->impl, rank); }
static int l_aborted(comm_t *c) { return atomic_load(&world_of(c)->aborted); }
static void record_failure(world_t *w, int rank);
static void l_fail(comm_t *c) {
  world_t *w = world_of(c);
  record_failure(w, my_world(c));
  wake_all(w);
}

static const comm_ops_t local_ops = {
    .name = "local",
    .gone = l_gone,
    .aborted = l_aborted,
    .stall_enter = l_stall_enter,
    .fail = l_fail,
    .set_spin = l_set_spin,
    .isend = l_isend,
    .irecv = l_irecv,
    .wait = l_wait,
    .test = l_test,
    .barrier = l_barrier,
    .split = l_split,
    .free = l_free,
    .irecv_reduce = l_irecv_reduce,
    .wait_src = l_wait_src,
    .cancel = l_cancel,
    .reduce_zero_copy = 1,
};

static int make_comm(world_t *w, int id, int is_world, int rank, int size, const int *world_ranks,
                     comm_t **out) {
  comm_t *c = calloc(1, sizeof *c);
  lcomm_t *lc = calloc(1, sizeof *lc);
  int *map = malloc((size_t)size * sizeof(int));
  if (!c || !lc || !map) {
    free(c), free(lc), free(map);
    return dt_error("out of memory creating a communicator");
  }
  memcpy(map, world_ranks, (size_t)size * sizeof(int));
  *lc = (lcomm_t){.w = w, .id = id, .is_world = is_world, .world_of = map};
  *c = (comm_t){.ops = &local_ops, .rank = rank, .size = size, .slowdown = 1, .impl = lc,
                .thread_multiple = 1, .world_of = is_world ? NULL : map};
  *out = c;
  return 0;
}

/* ---- the world and comm_local_run --------------------------------------- */

static double *copy_array(const double *a, int n) {
  if (!a) return NULL;
  double *b = malloc((size_t)n * sizeof(double));
  if (b) memcpy(b, a, (size_t)n * sizeof(double));
  return b;
}

static void world_free(world_t *w) {
  if (!w) return;
  for (int i = 0; w->mb && i < w->size; i++) {
    for (slab_t *s = w->mb[i].slabs, *next; s; s = next) next = s->next, free(s);
    pthread_mutex_destroy(&w->mb[i].mu);
    pthread_cond_destroy(&w->mb[i].cv);
  }
  pthread_condattr_destroy(&w->cvattr);
  dt_free(w->mb);
  dt_free(w->stall);
  free(w->rank_latency), free(w->rank_bandwidth), free(w->rank_slowdown);
  free(w->host);
  free(w->cpu);
  free(w->host_out_free), free(w->host_in_free);
  if (w->shared_link) pthread_mutex_destroy(&w->host_mu);
  free(w);
}

/* --bind core: the CPUs this process may run on (its affinity: taskset,
 * a cgroup's cpuset), in order; rank r takes the (r mod n)-th. */
static int allowed_cpus(world_t *w) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return dt_error("option --bind core: cannot read this process's CPUs (%s)", strerror(errno));
  w->ncpu = CPU_COUNT(&set);
  if (!(w->cpu = malloc((size_t)w->ncpu * sizeof *w->cpu))) return dt_error("out of memory");
  for (int c = 0, n = 0; c < CPU_SETSIZE && n < w->ncpu; c++)
    if (CPU_ISSET(c, &set)) w->cpu[n++] = c;
  return 0;
}

/* Pins the calling rank's thread to its CPU (--bind core); the threads it
 * starts later (a progress thread) inherit it. */
static int bind_rank(const world_t *w, int me) {
  if (!w->cpu) return 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(w->cpu[me % w->ncpu], &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  return rc ? dt_error("option --bind core: rank %d cannot be pinned to CPU %d (%s)", me,
                       w->cpu[me % w->ncpu], strerror(rc))
            : 0;
}

static int world_new(int size, const comm_net_t *net, world_t **out) {
  world_t *w = calloc(1, sizeof *w);
  if (!w) return dt_error("out of memory creating %d local ranks", size);
  w->size = size;
  w->timeout = comm_net_timeout(net);
  w->stall_warning = net && net->stall_warning > 0 ? net->stall_warning : COMM_STALL_WARNING;
  w->stall = dt_alloc((size_t)size * sizeof *w->stall);
  if (!w->stall) {
    free(w);
    return -1;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  /* Waking a sleeping rank costs 50-400 us on a VM, more than a 1 MiB
   * step, and once one rank oversleeps the ranks can keep falling asleep in
   * turn. With a core per rank, spin up to 5 ms (measured exchange p99:
   * 417 us with 200 us of spin, 2.7 us with 5 ms); with more ranks than
   * cores, yield the core for up to 1 ms (the rank we wait for may need it,
   * and the core never idles; 1 MiB on 4 ranks, 2 cores: 260 -> 165 us),
   * then sleep. */
  w->spin = size <= cores ? 5e-3 : 1e-3;
  w->yield = size > cores;
  if (net && net->bind_cores && allowed_cpus(w) != 0) {
    world_free(w);
    return -1;
  }
  atomic_init(&w->failed_rank, -1);
  atomic_init(&w->next_comm_id, 1); /* 0 is the world */
  pthread_condattr_init(&w->cvattr);
  pthread_condattr_setclock(&w->cvattr, CLOCK_MONOTONIC);
  w->host = malloc((size_t)size * sizeof(int));
  if (w->host && comm_net_hosts(net, size, w->host) != 0) {
    world_free(w);
    return -1;
  }
  if (net) {
    w->latency = net->latency, w->bandwidth = net->bandwidth;
    w->rank_latency = copy_array(net->rank_latency, size);
    w->rank_bandwidth = copy_array(net->rank_bandwidth, size);
    w->rank_slowdown = copy_array(net->rank_slowdown, size);
    w->emulated = comm_net_emulated(net, size);
    w->multihost = net->hosts > 1;
    if (w->multihost) w->intra_latency = net->intra_latency, w->intra_bandwidth = net->intra_bandwidth;
    if (w->multihost && net->shared_link) {
      w->host_out_free = calloc((size_t)size, sizeof(double));
      w->host_in_free = calloc((size_t)size, sizeof(double));
      if (!w->host_out_free || !w->host_in_free) {
        world_free(w);
        return dt_error("out of memory creating %d local ranks", size);
      }
      pthread_mutex_init(&w->host_mu, NULL);
      w->shared_link = 1;
    }
  }
  w->mb = dt_alloc((size_t)size * sizeof(mailbox_t));
  if (!w->mb || !w->host || (net && ((net->rank_latency && !w->rank_latency) ||
                         (net->rank_bandwidth && !w->rank_bandwidth) ||
                         (net->rank_slowdown && !w->rank_slowdown)))) {
    world_free(w);
    return dt_error("out of memory creating %d local ranks", size);
  }
  for (int i = 0; i < size; i++) {
    pthread_mutex_init(&w->mb[i].mu, NULL);
    pthread_cond_init(&w->mb[i].cv, &w->cvattr);
  }
  *out = w;
  return 0;
}

/* Algorithm choice needs one link estimate that every rank agrees on:
 * the slowest link when links differ (within or between hosts); memory
 * speed when not emulated. */
typedef struct {
  world_t *w;
  comm_t *comm;
  comm_rank_fn fn;
  void *arg;
  pthread_t thread;
  int started;
} rank_run_t;

/* Withdraws whatever the rank left in flight, so no peer touches its
 * buffers after its fn has returned. */
static void rank_cleanup(world_t *w, int me) {
  mailbox_t *mb = &w->mb[me];
  for (slab_t *s = mb->slabs; s; s = s->next)
    for (int i = 0; i < SLAB_REQS; i++) {
      lreq_t *q = &s->reqs[i];
      pthread_mutex_lock(&mb->mu);
      int live = q->kind != K_FREE;
      pthread_mutex_unlock(&mb->mu);
      if (live) {
        cancel_req(w, q);
        req_put(w, q);
      }
    }
}

static void record_failure(world_t *w, int rank) {
  int none = -1;
  if (atomic_compare_exchange_strong(&w->failed_rank, &none, rank))
    snprintf(w->failmsg, sizeof w->failmsg, "rank %d: %s", rank, dt_errmsg());
  atomic_store(&w->aborted, 1);
}

static void *rank_main(void *p) {
  rank_run_t *rr = p;
  world_t *w = rr->w;
  int me = rr->comm->rank;
  char name[16]; /* the thread's name: what finds a rank's thread in /proc (dtrain launch's tests) */
  snprintf(name, sizeof name, "dtrain-rank%d", me);
  pthread_setname_np(pthread_self(), name);
  dt_error_clear();
  if (bind_rank(w, me) != 0 || rr->fn(rr->comm, rr->arg) != 0) record_failure(w, me);
  rank_cleanup(w, me);
  atomic_store(&w->mb[me].exited, 1);
  wake_all(w);
  return NULL;
}

int comm_local_run(int size, const comm_net_t *net, comm_rank_fn fn, void *arg) {
  if (size < 1 || size > MAX_RANKS)
    return dt_error("local run: %d ranks requested (expected 1..%d)", size, MAX_RANKS);
  world_t *w = NULL;
  DT_TRY(world_new(size, net, &w));
  rank_run_t *runs = calloc((size_t)size, sizeof *runs);
  int *identity = malloc((size_t)size * sizeof(int));
  int rc = runs && identity ? 0 : dt_error("out of memory starting %d local ranks", size);
  double lat = 0, bw = 0;
  comm_net_link_estimate(net, size, w->yield, &lat, &bw);
  for (int i = 0; rc == 0 && i < size; i++) identity[i] = i;
  for (int i = 0; rc == 0 && i < size; i++) {
    rc = make_comm(w, 0, 1, i, size, identity, &runs[i].comm);
    if (rc == 0) rc = comm_counters_new(runs[i].comm);
    if (rc == 0) rc = comm_hosts_set(runs[i].comm, w->host);
    if (rc) break;
    runs[i].comm->emulated = w->emulated;
    runs[i].comm->slowdown = w->rank_slowdown && w->rank_slowdown[i] > 1 ? w->rank_slowdown[i] : 1;
    runs[i].comm->oversubscribed = w->yield;
    runs[i].comm->link_latency = lat;
    runs[i].comm->link_bandwidth = bw;
    runs[i].w = w, runs[i].fn = fn, runs[i].arg = arg;
  }
  for (int i = 0; rc == 0 && i < size; i++) {
    if (pthread_create(&runs[i].thread, NULL, rank_main, &runs[i]) != 0) {
      rc = dt_error("local run: cannot start the thread of rank %d", i);
      atomic_store(&w->aborted, 1);
      wake_all(w);
      break;
    }
    runs[i].started = 1;
  }
  for (int i = 0; runs && i < size; i++)
    if (runs[i].started) pthread_join(runs[i].thread, NULL);
  if (rc == 0 && atomic_load(&w->failed_rank) >= 0) rc = dt_error("%s", w->failmsg);
  for (int i = 0; runs && i < size; i++)
    if (runs[i].comm) {
      comm_counters_free(runs[i].comm);
      comm_hosts_free(runs[i].comm);
      free(((lcomm_t *)runs[i].comm->impl)->world_of);
      free(runs[i].comm->impl);
      free(runs[i].comm);
    }
  free(runs);
  free(identity);
  world_free(w);
  return rc;
}
