/* The transport-independent half of comm.h: argument checks, then the
 * backend's operation. Blocking calls are the non-blocking ones plus a
 * wait, so a backend implements each thing once. */
#include "dtrain/comm.h"

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
  return c->ops->isend(c, dst, tag, buf, len, req);
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

int comm_wait(comm_t *c, comm_req_t *req) { return c->ops->wait(c, req, NULL); }

int comm_wait_src(comm_t *c, comm_req_t *req, int *src, size_t *received) {
  return c->ops->wait_src(c, req, src, received);
}

int comm_test(comm_t *c, comm_req_t *req, int *done) { return c->ops->test(c, req, done); }

int comm_cancel(comm_t *c, comm_req_t *req) { return c->ops->cancel(c, req); }

/* Waits for every request; after the first failure the rest are
 * cancelled, so no request is left pointing at the caller's buffers. */
int comm_waitall(comm_t *c, int n, comm_req_t **reqs) {
  int i = 0;
  for (; i < n; i++)
    if (c->ops->wait(c, reqs[i], NULL) != 0) break;
  if (i == n) return 0;
  for (int j = i + 1; j < n; j++) c->ops->cancel(c, reqs[j]);
  return -1;
}

int comm_send(comm_t *c, int dst, int tag, const void *buf, size_t len) {
  comm_req_t *r;
  DT_TRY(comm_isend(c, dst, tag, buf, len, &r));
  return c->ops->wait(c, r, NULL);
}

int comm_recv(comm_t *c, int src, int tag, void *buf, size_t len) {
  comm_req_t *r;
  DT_TRY(comm_irecv(c, src, tag, buf, len, &r));
  return c->ops->wait(c, r, NULL);
}

int comm_recv_reduce(comm_t *c, int src, int tag, float *buf, size_t count, float *scratch) {
  comm_req_t *r;
  DT_TRY(comm_irecv_reduce(c, src, tag, buf, count, scratch, &r));
  return c->ops->wait(c, r, NULL);
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

void comm_set_wait_spin(comm_t *c, double seconds) {
  if (c->ops->set_spin) c->ops->set_spin(c, seconds);
}

int comm_split(comm_t *c, int color, int key, comm_t **out) {
  return c->ops->split(c, color, key, out);
}

void comm_free(comm_t *c) {
  if (c) c->ops->free(c);
}

void comm_compute_delay(comm_t *c, double seconds) {
  if (c->slowdown <= 1 || seconds <= 0) return;
  double end = dt_now() + (c->slowdown - 1) * seconds;
  while (end - dt_now() > 0.05) {
    if (c->ops->aborted && c->ops->aborted(c)) return;
    dt_sleep_until(dt_now() + 0.02);
  }
  dt_sleep_until(end);
}
