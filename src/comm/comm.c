/* The transport-independent half of comm.h: argument checks, then the
 * backend's operation. Blocking calls are the non-blocking ones plus a
 * wait, so a backend implements each thing once.
 *
 * Bytes on the wire are counted here, for both backends: a send when it is
 * posted (comm_isend), a receive when its wait succeeds (the backend's wait
 * reports the bytes received, 0 for a send). The transports' own messages
 * (barriers, split tables, the shared-memory rendezvous) call the backend
 * directly and are not counted; nor are mpi's headers. One relaxed atomic
 * add per message: a rank's progress thread and its compute thread may
 * send at the same time. */
#include <stdatomic.h>
#include <stdlib.h>

#include "dtrain/comm.h"

struct comm_counters {
  atomic_uint_least64_t sent, received;
};

static comm_counters_t *counters_new(void) {
  comm_counters_t *k = dt_alloc(sizeof *k); /* its own cache line */
  if (!k) return NULL;
  atomic_init(&k->sent, 0);
  atomic_init(&k->received, 0);
  return k;
}

int comm_counters_new(comm_t *c) {
  if (!(c->counters = counters_new())) return dt_error("out of memory creating a communicator");
  return 0;
}

void comm_counters_free(comm_t *c) {
  dt_free(c->counters);
  c->counters = NULL;
}

/* Labels (>= 0) to host ids 0, 1, ... in the order of each host's lowest
 * rank. */
int comm_hosts_set(comm_t *c, const int *label) {
  comm_hosts_free(c);
  int max = 0;
  for (int r = 0; r < c->size; r++) max = label[r] > max ? label[r] : max;
  int *host = malloc((size_t)c->size * sizeof(int));
  int *id = malloc(((size_t)max + 1) * sizeof(int));
  if (!host || !id) {
    free(host), free(id);
    return dt_error("out of memory creating a communicator");
  }
  for (int i = 0; i <= max; i++) id[i] = -1;
  int n = 0;
  for (int r = 0; r < c->size; r++) {
    int l = label[r] < 0 ? 0 : label[r];
    if (id[l] < 0) id[l] = n++;
    host[r] = id[l];
  }
  free(id);
  c->host = host;
  c->nhosts = n;
  return 0;
}

void comm_hosts_free(comm_t *c) {
  free(c->host);
  c->host = NULL;
  c->nhosts = 0;
}

static comm_bytes_t read_counters(const comm_counters_t *k) {
  comm_bytes_t b = {0, 0};
  if (k) {
    b.sent = atomic_load_explicit(&k->sent, memory_order_relaxed);
    b.received = atomic_load_explicit(&k->received, memory_order_relaxed);
  }
  return b;
}

comm_bytes_t comm_bytes(const comm_t *c) { return read_counters(c ? c->counters : NULL); }
comm_bytes_t comm_bytes_own(const comm_t *c) { return read_counters(c ? c->own : NULL); }

static inline void count_sent(comm_t *c, size_t bytes) {
  if (c->counters) atomic_fetch_add_explicit(&c->counters->sent, bytes, memory_order_relaxed);
  if (c->own) atomic_fetch_add_explicit(&c->own->sent, bytes, memory_order_relaxed);
}

static inline void count_received(comm_t *c, size_t bytes) {
  if (bytes && c->counters)
    atomic_fetch_add_explicit(&c->counters->received, bytes, memory_order_relaxed);
  if (bytes && c->own) atomic_fetch_add_explicit(&c->own->received, bytes, memory_order_relaxed);
}

/* Every wait of comm.h goes through here (frees req); src may be NULL. */
static int wait_counted(comm_t *c, comm_req_t *req, int *src, size_t *received) {
  size_t got = 0;
  int rc = c->ops->wait_src(c, req, src, &got);
  if (rc == 0) count_received(c, got);
  if (received) *received = rc == 0 ? got : 0;
  return rc;
}

static int check_peer(const comm_t *c, int peer, int any_ok, const char *what) {
  if (peer == COMM_ANY_SOURCE && any_ok) return 0;
  if (peer < 0 || peer >= c->size)
    return dt_error("%s rank %d: no such rank (communicator has %d)", what, peer, c->size);
  return 0;
}

static int check_tag(int tag, const char *what, int peer) {
  if (tag < 0 || tag > COMM_TAG_MAX)
    return dt_error("%s rank %d: tag %d is out of range (0..%d)", what, peer, tag, COMM_TAG_MAX);
  return 0;
}

int comm_isend(comm_t *c, int dst, int tag, const void *buf, size_t len, comm_req_t **req) {
  DT_TRY(check_peer(c, dst, 0, "send to"));
  DT_TRY(check_tag(tag, "send to", dst));
  DT_TRY(c->ops->isend(c, dst, tag, buf, len, req));
  count_sent(c, len);
  return 0;
}

int comm_irecv(comm_t *c, int src, int tag, void *buf, size_t len, comm_req_t **req) {
  DT_TRY(check_peer(c, src, 1, "recv from"));
  DT_TRY(check_tag(tag, "recv from", src));
  return c->ops->irecv(c, src, tag, buf, len, req);
}

int comm_irecv_reduce(comm_t *c, int src, int tag, float *buf, size_t count, float *scratch,
                      comm_req_t **req) {
  DT_TRY(check_peer(c, src, 1, "recv from"));
  DT_TRY(check_tag(tag, "recv from", src));
  return c->ops->irecv_reduce(c, src, tag, buf, count, scratch, req);
}

int comm_wait(comm_t *c, comm_req_t *req) { return wait_counted(c, req, NULL, NULL); }

int comm_wait_src(comm_t *c, comm_req_t *req, int *src, size_t *received) {
  return wait_counted(c, req, src, received);
}

int comm_test(comm_t *c, comm_req_t *req, int *done) { return c->ops->test(c, req, done); }

int comm_cancel(comm_t *c, comm_req_t *req) { return c->ops->cancel(c, req); }

/* Waits for every request; after the first failure the rest are
 * cancelled, so no request is left pointing at the caller's buffers. */
int comm_waitall(comm_t *c, int n, comm_req_t **reqs) {
  int i = 0;
  for (; i < n; i++)
    if (wait_counted(c, reqs[i], NULL, NULL) != 0) break;
  if (i == n) return 0;
  for (int j = i + 1; j < n; j++) c->ops->cancel(c, reqs[j]);
  return -1;
}

int comm_send(comm_t *c, int dst, int tag, const void *buf, size_t len) {
  comm_req_t *r;
  DT_TRY(comm_isend(c, dst, tag, buf, len, &r));
  return wait_counted(c, r, NULL, NULL);
}

int comm_recv(comm_t *c, int src, int tag, void *buf, size_t len) {
  comm_req_t *r;
  DT_TRY(comm_irecv(c, src, tag, buf, len, &r));
  return wait_counted(c, r, NULL, NULL);
}

int comm_recv_reduce(comm_t *c, int src, int tag, float *buf, size_t count, float *scratch) {
  comm_req_t *r;
  DT_TRY(comm_irecv_reduce(c, src, tag, buf, count, scratch, &r));
  return wait_counted(c, r, NULL, NULL);
}

/* The receive is posted first so that two ranks exchanging with each
 * other never wait on each other's send. */
int comm_sendrecv(comm_t *c, int dst, int stag, const void *sbuf, size_t slen,
                  int src, int rtag, void *rbuf, size_t rlen) {
  comm_req_t *r[2];
  DT_TRY(comm_irecv(c, src, rtag, rbuf, rlen, &r[0]));
  if (comm_isend(c, dst, stag, sbuf, slen, &r[1]) != 0) {
    c->ops->cancel(c, r[0]);
    return -1;
  }
  return comm_waitall(c, 2, r);
}

int comm_barrier(comm_t *c) { return c->ops->barrier(c); }

void comm_stall_enter(comm_t *c, const char *op, size_t bytes) {
  if (c->ops->stall_enter) c->ops->stall_enter(c, op, bytes);
}

void comm_set_wait_spin(comm_t *c, double seconds) {
  if (c->ops->set_spin) c->ops->set_spin(c, seconds);
}

const char *comm_rank_name(const comm_t *c, int r, char *buf, size_t cap) {
  if (r == COMM_ANY_SOURCE) snprintf(buf, cap, "any rank");
  else if (!c->world_of || r < 0 || r >= c->size || (c->world_of[r] == r && !c->label))
    snprintf(buf, cap, "rank %d", comm_world_rank(c, r));
  else snprintf(buf, cap, "rank %d (rank %d of %s%s)", c->world_of[r], r, c->label ? "the " : "",
                c->label ? c->label : "a sub-communicator");
  return buf;
}

int comm_split(comm_t *c, int color, int key, comm_t **out) {
  DT_TRY(c->ops->split(c, color, key, out));
  (*out)->counters = c->counters; /* the rank's one counter */
  if (!((*out)->own = counters_new())) { /* its own, never a copy of c's */
    comm_free(*out);
    return dt_error("out of memory creating a communicator");
  }
  return 0;
}

void comm_free(comm_t *c) {
  if (!c) return;
  comm_counters_t *own = c->own; /* the backend frees c */
  c->ops->free(c);
  dt_free(own);
}

void comm_fail(comm_t *c) {
  if (c->ops->fail) c->ops->fail(c);
}

int comm_gone(comm_t *c, int rank) {
  return c->ops->gone && rank >= 0 && rank < c->size ? c->ops->gone(c, rank) : 0;
}

void comm_forget(comm_t *c, int rank) {
  if (c->ops->forget && rank >= 0 && rank < c->size) c->ops->forget(c, rank);
}

/* Every other rank of c has ended (as the transport knows it): a rank
 * still sleeping as a straggler waits for nobody (an asynchronous run
 * that wrote it off and finished). */
static int peers_gone(comm_t *c) {
  for (int r = 0; r < c->size; r++)
    if (r != c->rank && !comm_gone(c, r)) return 0;
  return c->size > 1;
}

void comm_compute_delay(comm_t *c, double seconds) {
  if (c->slowdown <= 1 || seconds <= 0) return;
  double end = dt_now() + (c->slowdown - 1) * seconds;
  while (end - dt_now() > 0.05) {
    if ((c->ops->aborted && c->ops->aborted(c)) || peers_gone(c)) return;
    dt_sleep_until(dt_now() + 0.02);
  }
  dt_sleep_until(end);
}
