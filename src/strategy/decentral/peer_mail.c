/* Asynchronous model messages between peers, for GoSGD and TreeEASGD
 * (decentral.h). No rank ever blocks on one peer without serving its own
 * receive meanwhile, so two ranks sending to each other cannot deadlock:
 * a snapshot waits for the previous one to be taken while polling; the
 * drain at an epoch's end is non-blocking too (end counts on a tag of
 * their own, received from each rank, while models keep being taken). */
#include <stdlib.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

#define MAIL_TIMEOUT 300.0   /* seconds without progress before giving up, unless --comm-timeout */
#define MAIL_IDLE 50e-6      /* sleep between polls that found nothing */
#define MAIL_COUNT_BYTES sizeof(double) /* the drain's count of models sent, to each peer */

static void idle(void) { dt_sleep_until(dt_now() + MAIL_IDLE); }

static int post_receive(peer_mail_t *m) {
  return comm_irecv(m->comm, COMM_ANY_SOURCE, m->tag, m->rbuf, m->bytes, &m->rreq);
}

int mail_open(peer_mail_t *m, comm_t *c, int tag, int end_tag, size_t bytes, int nbufs,
              double timeout, mail_merge_fn merge, void *ctx) {
  memset(m, 0, sizeof *m);
  m->timeout = timeout > 0 ? timeout : MAIL_TIMEOUT;
  int P = comm_size(c);
  m->comm = c;
  m->tag = tag;
  m->end_tag = end_tag;
  m->bytes = bytes;
  m->nbufs = nbufs;
  m->merge = merge;
  m->ctx = ctx;
  int ok = (m->rbuf = dt_alloc(bytes)) != NULL;
  for (int i = 0; i < nbufs; i++) ok = ok && (m->sbuf[i] = dt_alloc(bytes)) != NULL;
  m->sreq = calloc((size_t)P, sizeof *m->sreq);
  m->sdst = calloc((size_t)P, sizeof *m->sdst);
  m->sent_to = calloc((size_t)P, sizeof *m->sent_to);
  m->end_counts = calloc((size_t)P, sizeof *m->end_counts);
  if (!ok || !m->sreq || !m->sdst || !m->sent_to || !m->end_counts)
    return dt_error("out of memory (peer messages of %zu bytes)", bytes);
  return P > 1 ? post_receive(m) : 0;
}

void mail_close(peer_mail_t *m) {
  if (m->rreq) comm_cancel(m->comm, m->rreq);
  for (int i = 0; i < m->nsreq; i++)
    if (m->sreq[i]) comm_cancel(m->comm, m->sreq[i]);
  dt_free(m->rbuf);
  for (int i = 0; i < m->nbufs; i++) dt_free(m->sbuf[i]);
  free(m->sreq);
  free(m->sdst);
  free(m->sent_to);
  free(m->end_counts);
  memset(m, 0, sizeof *m);
}

/* The posted receive has completed: merge it and post the next. */
static int take(peer_mail_t *m) {
  comm_req_t *r = m->rreq;
  int src;
  m->rreq = NULL;
  if (comm_wait_src(m->comm, r, &src, NULL) != 0) return dt_error_prefix("model from a peer: ");
  if (m->merge(m->ctx, src, m->rbuf) != 0) return -1;
  m->received++;
  return post_receive(m);
}

int mail_poll(peer_mail_t *m, int *n) {
  int got = 0;
  while (m->rreq) {
    int done;
    if (comm_test(m->comm, m->rreq, &done) != 0) return -1;
    if (!done) break;
    if (take(m) != 0) return -1;
    got++;
  }
  if (n) *n = got;
  return 0;
}

void mail_progress(peer_mail_t *m) {
  int done;
  if (m->rreq) comm_test(m->comm, m->rreq, &done);
  for (int i = 0; i < m->nsreq; i++)
    if (m->sreq[i]) comm_test(m->comm, m->sreq[i], &done);
}

/* Completes the snapshot's sends that are done; *pending counts the rest
 * and *peer names the destination of one of them. */
static int reap_sends(peer_mail_t *m, int *pending, int *peer) {
  *pending = 0;
  for (int i = 0; i < m->nsreq; i++) {
    int done;
    if (!m->sreq[i]) continue;
    if (comm_test(m->comm, m->sreq[i], &done) != 0) return -1;
    if (done) {
      comm_req_t *r = m->sreq[i];
      m->sreq[i] = NULL;
      if (comm_wait(m->comm, r) != 0) return -1;
    } else {
      (*pending)++;
      *peer = m->sdst[i];
    }
  }
  if (!*pending) m->nsreq = 0;
  return 0;
}

/* No message taken or delivered for the timeout: a peer is dead or stopped. */
static int stalled(const peer_mail_t *m, double since, const char *what, int peer) {
  if (dt_now() - since < m->timeout) return 0;
  if (peer < 0) return dt_error("%s: no progress for %g s (a peer is dead or stopped?)", what, m->timeout);
  return dt_error("%s: no progress for %g s (rank %d has not taken this rank's model)", what,
                  m->timeout, peer);
}

int mail_snapshot(peer_mail_t *m) {
  double t0 = dt_now(), last = t0;
  for (;;) {
    int pending, which = -1, got;
    if (reap_sends(m, &pending, &which) != 0) return -1;
    if (!pending) break;
    if (mail_poll(m, &got) != 0) return -1;
    if (got) last = dt_now();
    else if (stalled(m, last, "waiting for peers to take this rank's model", which)) return -1;
    else idle();
  }
  m->wait_sec += dt_now() - t0;
  return 0;
}

int mail_send(peer_mail_t *m, int dst, int which) {
  m->sent_to[dst] += 1;
  m->sdst[m->nsreq] = dst;
  return comm_isend(m->comm, dst, m->tag, m->sbuf[which], m->bytes, &m->sreq[m->nsreq++]);
}

/* The drain has made no progress for the timeout: it names a rank whose
 * count has not come (that rank has not reached its drain), else one that
 * has not taken this rank's model. */
static int drain_stalled(const peer_mail_t *m, double since, comm_req_t **ends, int which) {
  if (dt_now() - since < m->timeout) return 0;
  int P = comm_size(m->comm), me = comm_rank(m->comm);
  for (int r = 0; r < P; r++)
    if (r != me && ends[2 * r])
      return dt_error("end-of-epoch drain of peer models: no progress for %g s (rank %d has "
                      "not reached the end of the epoch: dead, stopped or slower)", m->timeout, r);
  return stalled(m, since, "end-of-epoch drain of peer models", which);
}

/* Every rank sends every other the number of models it sent it (since the
 * start), then takes models until it holds as many as it was told of. */
int mail_drain(peer_mail_t *m) {
  int P = comm_size(m->comm), me = comm_rank(m->comm);
  if (P == 1) return 0;
  comm_req_t **ends = calloc(2 * (size_t)P, sizeof *ends);
  if (!ends) return dt_error("out of memory");
  int rc = 0, open = 0;
  for (int r = 0; r < P && rc == 0; r++) {
    if (r == me) continue;
    rc = comm_irecv(m->comm, r, m->end_tag, &m->end_counts[r], MAIL_COUNT_BYTES, &ends[2 * r]);
    if (rc == 0) rc = comm_isend(m->comm, r, m->end_tag, &m->sent_to[r], MAIL_COUNT_BYTES, &ends[2 * r + 1]);
    open += 2;
  }
  double last = dt_now();
  while (rc == 0) {
    int progress = 0, got, pending, which = -1;
    for (int i = 0; i < 2 * P && rc == 0; i++) {
      int done;
      if (!ends[i] || (rc = comm_test(m->comm, ends[i], &done)) != 0 || !done) continue;
      comm_req_t *r = ends[i];
      ends[i] = NULL;
      rc = comm_wait(m->comm, r);
      open--, progress++;
    }
    if (rc == 0) rc = mail_poll(m, &got);
    if (rc == 0) rc = reap_sends(m, &pending, &which);
    if (rc != 0) break;
    double expected = 0;
    for (int r = 0; r < P; r++) expected += m->end_counts[r];
    if (open == 0 && m->received >= expected && !pending) break;
    if (progress || got) last = dt_now();
    else if ((rc = drain_stalled(m, last, ends, which)) != 0) break;
    else idle();
  }
  for (int i = 0; i < 2 * P; i++)
    if (ends[i]) comm_cancel(m->comm, ends[i]);
  free(ends);
  return rc == 0 ? 0 : dt_error_prefix("drain: ");
}

/* Merging what has arrived is communication the step's compute hides
 * (it costs only the merges), so it counts as comm time but not exposed. */
int mail_poll_then_step(peer_mail_t *m, decentral_t *d, int64_t k) {
  double t0 = dt_now();
  if (mail_poll(m, NULL) != 0) return -1;
  d->w->timers.comm += dt_now() - t0;
  size_t count;
  return decentral_local_step(d, k, &count, NULL);
}

size_t mail_drain_bytes(int nranks) { return (size_t)(nranks - 1) * MAIL_COUNT_BYTES; }

int mail_describe_drain(step_desc_t *d, int rank, int nranks) {
  if (nranks < 2) return 0;
  double bytes = (double)mail_drain_bytes(nranks);
  return step_add(d, (step_task_t){TASK_COMM, rank, -1, .pattern = "alltoall",
                                   .peer = -1, .group = nranks, .sent = bytes, .received = bytes,
                                   .after = -1, .per_epoch = 1});
}

size_t mail_model_bytes(const codec_spec_t *codec, size_t nparams) {
  if (codec->kind != CODEC_NONE && !codec_lossless(codec)) return codec_bytes(codec, nparams);
  return nparams * sizeof(float);
}
