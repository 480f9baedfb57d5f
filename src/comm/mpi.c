/* mpi: one rank per MPI process.
 *
 * Each dtrain communicator holds two duplicates of the MPI communicator:
 * one for headers, one for payloads. A message is a comm_header_t on the
 * first followed by the payload on the second, both with MPI tag = user
 * tag; the payload goes from the sender's buffer to the receiver's with
 * no staging copy. A receive from a known rank posts both receives at
 * once; from ANY_SOURCE it takes the header first, then posts the payload
 * receive for the rank the header came from. (The two streams pair up in
 * order; do not mix an ANY_SOURCE receive and a receive from a specific
 * rank with the same tag at the same time.)
 *
 * Waits poll MPI_Test (yielding the core between polls, since ranks
 * often outnumber cores) so that they can give up after net->timeout
 * instead of hanging on a dead rank. */
#include "dtrain/comm.h"

#ifndef DTRAIN_HAVE_MPI

int comm_mpi_available(void) { return 0; }

int comm_mpi_run(int *argc, char ***argv, const comm_net_t *net, comm_rank_fn fn, void *arg) {
  return dt_error("dtrain was built without MPI; install libopenmpi-dev and rebuild");
}

int comm_mpi_allreduce_sum_float(comm_t *c, float *buf, size_t count) {
  return dt_error("dtrain was built without MPI; install libopenmpi-dev and rebuild");
}

#else

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CANCEL_GRACE 0.1 /* seconds a cancelled request may take to settle */

typedef struct {
  MPI_Comm hc, pc;          /* headers, payloads */
  double timeout;
  /* the stall inspector: this rank's last collective on this communicator
   * (under mpi a rank knows no other's: a stall line names the rank awaited) */
  _Atomic(const char *) op;
  atomic_ullong seq;
  atomic_size_t bytes;
} mcomm_t;

static double stall_warning = COMM_STALL_WARNING;  /* one run per process */

typedef struct mreq mreq_t;
struct mreq {
  mreq_t *next;             /* free list */
  int is_send, src, tag, reduce, payload_posted, mpi_err;
  MPI_Request r[2];         /* header, payload */
  comm_header_t hdr;        /* outgoing, or the one received */
  void *buf;                /* the caller's buffer */
  float *scratch;           /* reduce: the payload lands here, then buf += scratch */
  size_t len;
  int got_src;
  int hdr_count;            /* bytes of the header received */
  int payload_count;
};

static const comm_ops_t mpi_ops;

/* Requests are recycled through one free list per process. */
static pthread_mutex_t free_mu = PTHREAD_MUTEX_INITIALIZER;
static mreq_t *free_reqs;

static mreq_t *req_get(void) {
  pthread_mutex_lock(&free_mu);
  mreq_t *q = free_reqs;
  if (q) free_reqs = q->next;
  pthread_mutex_unlock(&free_mu);
  if (!q && !(q = malloc(sizeof *q))) {
    dt_error("out of memory allocating an MPI request");
    return NULL;
  }
  memset(q, 0, sizeof *q);
  q->r[0] = q->r[1] = MPI_REQUEST_NULL;
  return q;
}

static void req_put(mreq_t *q) {
  pthread_mutex_lock(&free_mu);
  q->next = free_reqs;
  free_reqs = q;
  pthread_mutex_unlock(&free_mu);
}

static void free_all_reqs(void) {
  pthread_mutex_lock(&free_mu);
  for (mreq_t *q = free_reqs, *n; q; q = n) n = q->next, free(q);
  free_reqs = NULL;
  pthread_mutex_unlock(&free_mu);
}

static int mpi_fail(int err, const char *what) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(err, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", err);
  return dt_error("%s: %s", what, s);
}

static int check_len(size_t len, const char *what, int peer, int tag) {
  if (len > INT_MAX)
    return dt_error("%s rank %d tag %d: %zu bytes exceed MPI's limit of %d bytes per message",
                    what, peer, tag, len, INT_MAX);
  return 0;
}

/* ---- posting ------------------------------------------------------------ */

static int m_isend(comm_t *c, int dst, int tag, const void *buf, size_t len, comm_req_t **out) {
  mcomm_t *m = c->impl;
  DT_TRY(check_len(len, "send to", dst, tag));
  mreq_t *q = req_get();
  if (!q) return -1;
  q->is_send = 1, q->src = dst, q->tag = tag, q->len = len, q->buf = (void *)buf;
  q->hdr = (comm_header_t){COMM_MAGIC, COMM_VERSION, c->rank, tag, len};
  int err = MPI_Isend(&q->hdr, sizeof q->hdr, MPI_BYTE, dst, tag, m->hc, &q->r[0]);
  if (err == MPI_SUCCESS) err = MPI_Isend(buf, (int)len, MPI_BYTE, dst, tag, m->pc, &q->r[1]);
  if (err != MPI_SUCCESS) {
    req_put(q); /* an MPI error here is fatal for the run anyway */
    char what[160], who[96];
    snprintf(what, sizeof what, "send to %s tag %d", comm_rank_name(c, dst, who, sizeof who), tag);
    return mpi_fail(err, what);
  }
  q->payload_posted = 1;
  *out = (comm_req_t *)q;
  return 0;
}

static int post_payload(mcomm_t *m, mreq_t *q, int src) {
  void *target = q->reduce ? (void *)q->scratch : q->buf;
  q->payload_posted = 1;
  return MPI_Irecv(target, (int)q->len, MPI_BYTE, src, q->tag, m->pc, &q->r[1]);
}

static int post_receive(comm_t *c, int src, int tag, void *buf, size_t len, int reduce,
                        float *scratch, comm_req_t **out) {
  mcomm_t *m = c->impl;
  DT_TRY(check_len(len, "recv from", src, tag));
  if (reduce && len && !scratch)
    return dt_error("recv from rank %d tag %d: reduce on mpi needs a scratch buffer", src, tag);
  mreq_t *q = req_get();
  if (!q) return -1;
  q->src = src, q->tag = tag, q->buf = buf, q->len = len, q->reduce = reduce, q->scratch = scratch;
  int err = MPI_Irecv(&q->hdr, sizeof q->hdr, MPI_BYTE, src == COMM_ANY_SOURCE ? MPI_ANY_SOURCE : src,
                      tag, m->hc, &q->r[0]);
  if (err == MPI_SUCCESS && src != COMM_ANY_SOURCE) err = post_payload(m, q, src);
  if (err != MPI_SUCCESS) {
    req_put(q);
    char what[160], who[96];
    snprintf(what, sizeof what, "recv from %s tag %d", comm_rank_name(c, src, who, sizeof who), tag);
    return mpi_fail(err, what);
  }
  *out = (comm_req_t *)q;
  return 0;
}

static int m_irecv(comm_t *c, int src, int tag, void *buf, size_t len, comm_req_t **out) {
  return post_receive(c, src, tag, buf, len, 0, NULL, out);
}

static int m_irecv_reduce(comm_t *c, int src, int tag, float *buf, size_t count, float *scratch,
                          comm_req_t **out) {
  return post_receive(c, src, tag, buf, count * sizeof(float), 1, scratch, out);
}

/* ---- progress and completion ------------------------------------------- */

/* One non-blocking step; *done when both parts have completed. */
static int poll_once(mcomm_t *m, mreq_t *q, int *done) {
  MPI_Status st;
  int flag = 0, err;
  if (q->r[0] != MPI_REQUEST_NULL) {
    err = MPI_Test(&q->r[0], &flag, &st);
    if (err != MPI_SUCCESS) return q->mpi_err = err, -1;
    if (flag && !q->is_send) {
      q->got_src = st.MPI_SOURCE;
      if (MPI_Get_count(&st, MPI_BYTE, &q->hdr_count) != MPI_SUCCESS) q->hdr_count = -1;
      if (!q->payload_posted && (err = post_payload(m, q, st.MPI_SOURCE)) != MPI_SUCCESS)
        return q->mpi_err = err, -1;
    }
  }
  if (q->r[0] == MPI_REQUEST_NULL && q->r[1] != MPI_REQUEST_NULL) {
    err = MPI_Test(&q->r[1], &flag, &st);
    int cls = MPI_SUCCESS;
    if (err != MPI_SUCCESS) MPI_Error_class(err, &cls);
    if (cls == MPI_ERR_TRUNCATE) { /* the sender sent more than we expect */
      q->r[1] = MPI_REQUEST_NULL;
      q->payload_count = -1;
    } else if (err != MPI_SUCCESS) {
      return q->mpi_err = err, -1;
    } else if (flag && !q->is_send) {
      MPI_Get_count(&st, MPI_BYTE, &q->payload_count);
    }
  }
  *done = q->r[0] == MPI_REQUEST_NULL && q->r[1] == MPI_REQUEST_NULL;
  return 0;
}

/* The header must be a dtrain header for this tag, from the rank it came
 * from, whose length is what the receive expects (wire_check_header), and
 * the payload must have that length too. */
static int check_received(const comm_t *c, mreq_t *q) {
  comm_header_t h;
  wire_status_t ws = wire_check_header(&q->hdr, (size_t)q->hdr_count, q->tag, q->got_src, 0,
                                       q->len, &h);
  char from[96];
  comm_rank_name(c, q->got_src, from, sizeof from);
  if (ws != WIRE_OK) return wire_error(ws, &h, (size_t)q->hdr_count, from, q->tag, q->len);
  if (q->payload_count != (int)q->len)
    return dt_error("message from %s tag %d: header says %zu bytes but %d arrived",
                    from, q->tag, q->len, q->payload_count);
  return 0;
}

/* Withdraws what can be withdrawn; what cannot is detached (MPI frees it
 * when it completes). Only reached when the run is failing. */
static void cancel_parts(mreq_t *q) {
  double until = dt_now() + CANCEL_GRACE;
  for (int i = 0; i < 2; i++) {
    if (q->r[i] == MPI_REQUEST_NULL) continue;
    if (!q->is_send) MPI_Cancel(&q->r[i]);
    int flag = 0;
    while (!flag && dt_now() < until) {
      MPI_Test(&q->r[i], &flag, MPI_STATUS_IGNORE);
      if (!flag) sched_yield();
    }
    if (!flag) MPI_Request_free(&q->r[i]);
  }
}

static int wait_fail(comm_t *c, mreq_t *q, const char *why) {
  const char *dir = q->is_send ? "send to" : "recv from";
  char who[96];
  dt_error("%s %s tag %d: %s", dir, comm_rank_name(c, q->src, who, sizeof who), q->tag, why);
  cancel_parts(q);
  req_put(q);
  return -1;
}

static void m_stall_enter(comm_t *c, const char *op, size_t bytes) {
  mcomm_t *m = c->impl;
  atomic_store(&m->op, op);
  atomic_store(&m->bytes, bytes);
  atomic_fetch_add(&m->seq, 1);
}

/* " in allreduce #N (B bytes)", or "" before any collective. */
static void stall_op(mcomm_t *m, char *buf, size_t cap) {
  const char *op = atomic_load(&m->op);
  if (op) snprintf(buf, cap, " in %s #%llu (%zu bytes)", op, atomic_load(&m->seq), atomic_load(&m->bytes));
  else buf[0] = 0;
}

static void stall_warn(const comm_t *c, mreq_t *q, double waited) {
  char op[160], who[96];
  stall_op(c->impl, op, sizeof op);
  dt_log(DT_LOG_WARN, "stall: rank %d has waited %.1f s%s to %s %s (tag %d) (--stall-warning "
         "%g; under mpi a rank knows only the rank it waits on)", comm_world_rank(c, c->rank),
         waited, op, q->is_send ? "send to" : "receive from",
         comm_rank_name(c, q->src, who, sizeof who), q->tag, stall_warning);
}

static int m_wait_src(comm_t *c, comm_req_t *req, int *src, size_t *received) {
  mcomm_t *m = c->impl;
  mreq_t *q = (mreq_t *)req;
  double start = dt_now(), deadline = start + m->timeout, warn_at = start + stall_warning;
  int done = 0;
  for (unsigned polls = 0;; polls++) {
    if (poll_once(m, q, &done) != 0) {
      char s[MPI_MAX_ERROR_STRING];
      int n = 0;
      MPI_Error_string(q->mpi_err, s, &n);
      return wait_fail(c, q, s);
    }
    if (done) break;
    if ((polls & 63) == 63 && dt_interrupted()) /* interrupted: ranks that wait, not compute (servers) */
      return wait_fail(c, q, dt_signal_name(dt_interrupted()));
    if ((polls & 63) == 63 && dt_now() >= warn_at && dt_now() < deadline) {
      stall_warn(c, q, dt_now() - start);
      warn_at += stall_warning;
    }
    if ((polls & 63) == 63 && dt_now() >= deadline) {
      char why[360], op[160];
      stall_op(m, op, sizeof op);
      snprintf(why, sizeof why, "timed out after %g s (%s)%s", m->timeout,
               q->is_send ? "the receiver never took the message"
               : q->r[0] != MPI_REQUEST_NULL ? "no matching message arrived"
                                             : "the header arrived but not the payload", op);
      return wait_fail(c, q, why);
    }
    sched_yield();
  }
  int rc = 0;
  if (!q->is_send) {
    rc = check_received(c, q);
    if (rc == 0 && q->reduce) kern_add(q->len / sizeof(float), q->scratch, q->buf);
  }
  if (src) *src = q->is_send ? c->rank : q->got_src;
  if (received) *received = rc == 0 && !q->is_send ? q->len : 0;
  req_put(q);
  return rc;
}

static int m_wait(comm_t *c, comm_req_t *req, size_t *received) {
  return m_wait_src(c, req, NULL, received);
}

/* A completed receive still needs its wait (checks, reduce, free). */
static int m_test(comm_t *c, comm_req_t *req, int *done) {
  mreq_t *q = (mreq_t *)req;
  if (poll_once(c->impl, q, done) != 0) return mpi_fail(q->mpi_err, "test on a request");
  return 0;
}

static int m_cancel(comm_t *c, comm_req_t *req) {
  cancel_parts((mreq_t *)req);
  req_put((mreq_t *)req);
  return 0;
}

/* ---- collective operations --------------------------------------------- */

static int m_barrier(comm_t *c) {
  mcomm_t *m = c->impl;
  MPI_Request r;
  int err = MPI_Ibarrier(m->hc, &r), flag = 0;
  if (err != MPI_SUCCESS) return mpi_fail(err, "barrier");
  double deadline = dt_now() + m->timeout;
  while (!flag) {
    if ((err = MPI_Test(&r, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return mpi_fail(err, "barrier");
    if (!flag && dt_now() >= deadline) {
      /* left pending: MPI forbids freeing or cancelling a nonblocking
       * collective (Open MPI aborted the job there), and the run is ending */
      return dt_error("barrier: timed out after %g s (some rank never reached it)", m->timeout);
    }
    if (!flag) sched_yield();
  }
  return 0;
}

static int make_comm(MPI_Comm hc, MPI_Comm pc, double timeout, const comm_t *like, comm_t **out);
static void m_free(comm_t *c);

/* Each member of a new communicator keeps its host: its rank in the parent
 * (a translation of groups, no message) indexes the parent's table. */
static int split_hosts(const comm_t *parent, comm_t *sub) {
  MPI_Group pg, sg;
  int n = sub->size, rc = 0;
  int *ranks = malloc((size_t)n * sizeof(int)), *in_parent = malloc((size_t)n * sizeof(int));
  if (!ranks || !in_parent) rc = dt_error("out of memory");
  if (rc == 0) {
    MPI_Comm_group(((mcomm_t *)parent->impl)->hc, &pg);
    MPI_Comm_group(((mcomm_t *)sub->impl)->hc, &sg);
    for (int i = 0; i < n; i++) ranks[i] = i;
    if (MPI_Group_translate_ranks(sg, n, ranks, pg, in_parent) != MPI_SUCCESS)
      rc = dt_error("cannot map the new communicator's ranks to the old one's");
    MPI_Group_free(&pg);
    MPI_Group_free(&sg);
  }
  for (int i = 0; rc == 0 && i < n; i++) ranks[i] = comm_host(parent, in_parent[i]);
  if (rc == 0) rc = comm_hosts_set(sub, ranks);
  free(ranks), free(in_parent);
  return rc;
}

/* The new communicator's ranks in MPI_COMM_WORLD's numbering (a
 * translation of groups, no message), so its messages name world ranks. */
static int split_world_ranks(comm_t *sub) {
  MPI_Group wg, sg;
  int n = sub->size, rc = 0;
  int *ranks = malloc((size_t)n * sizeof(int)), *in_world = malloc((size_t)n * sizeof(int));
  if (!ranks || !in_world) rc = dt_error("out of memory");
  if (rc == 0) {
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Comm_group(((mcomm_t *)sub->impl)->hc, &sg);
    for (int i = 0; i < n; i++) ranks[i] = i;
    if (MPI_Group_translate_ranks(sg, n, ranks, wg, in_world) != MPI_SUCCESS)
      rc = dt_error("cannot map the new communicator's ranks to the world's");
    MPI_Group_free(&wg);
    MPI_Group_free(&sg);
  }
  free(ranks);
  if (rc != 0) free(in_world);
  else sub->world_of = in_world;
  return rc;
}

static int m_split(comm_t *c, int color, int key, comm_t **out) {
  mcomm_t *m = c->impl;
  MPI_Comm hc = MPI_COMM_NULL, pc = MPI_COMM_NULL;
  /* MPI_Comm_split blocks with no timeout: a dead or stopped rank would
   * hang it. The barrier first fails after the timeout instead, and once
   * it passes every rank is alive and on its way into the split. */
  if (m_barrier(c) != 0) return dt_error_prefix("split: ");
  int err = MPI_Comm_split(m->hc, color < 0 ? 0 : color, key, &hc);
  if (err == MPI_SUCCESS) err = MPI_Comm_split(m->pc, color < 0 ? 0 : color, key, &pc);
  if (err != MPI_SUCCESS) return mpi_fail(err, "split");
  DT_TRY(make_comm(hc, pc, m->timeout, c, out));
  if (split_world_ranks(*out) != 0 || split_hosts(c, *out) != 0) {
    m_free(*out);
    return dt_error_prefix("split: ");
  }
  return 0;
}

static void m_free(comm_t *c) {
  mcomm_t *m = c->impl;
  comm_hosts_free(c);
  free((int *)c->world_of);
  MPI_Comm_free(&m->hc);
  MPI_Comm_free(&m->pc);
  free(m);
  free(c);
}

/* Ranks of MPI_COMM_WORLD found dead while the run went on (comm_forget;
 * one run per process). */
static unsigned char *forgotten;
static int nforgotten;

static void m_forget(comm_t *c, int rank) {
  int world = 0, n = 0, r = comm_world_rank(c, rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  if (!forgotten && !(forgotten = calloc((size_t)n, 1))) return;
  if (r < 0 || r >= n || r == world || forgotten[r]) return;
  forgotten[r] = 1;
  nforgotten++;
}

/* Each world rank's process id and node, from the start (one run per
 * process): a rank on this node whose process has ended is gone at once
 * (m_gone), where a parameter server otherwise learns it from the pings'
 * silence (SERVER_LEASE, 2 s); a rank on another node is not known (0).
 * A rank that has finished its run waits in comm_mpi_run's last barrier,
 * alive, so only a death ends its process early. */
static int *world_pid, *world_node, world_me;
/* /proc is read at most every GONE_EVERY a rank (a standby asks at every
 * turn of its loop); a death, once seen, stays. */
#define GONE_EVERY 0.05
static double *gone_next;
static unsigned char *gone_seen;
static pthread_mutex_t gone_mu = PTHREAD_MUTEX_INITIALIZER;

static int note_processes(const int *node, int size) {
  int pid = (int)getpid();
  MPI_Comm_rank(MPI_COMM_WORLD, &world_me);
  world_pid = malloc((size_t)size * sizeof(int));
  world_node = malloc((size_t)size * sizeof(int));
  gone_next = calloc((size_t)size, sizeof(double));
  gone_seen = calloc((size_t)size, 1);
  if (!world_pid || !world_node || !gone_next || !gone_seen) return dt_error("out of memory");
  MPI_Allgather(&pid, 1, MPI_INT, world_pid, 1, MPI_INT, MPI_COMM_WORLD);
  memcpy(world_node, node, (size_t)size * sizeof(int));
  return 0;
}

/* Process pid has ended, or is a zombie not yet reaped (/proc/PID/stat's
 * state after the name: Z or X). */
static int process_ended(int pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = 0;
  const char *end = strrchr(line, ')');
  return end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

static int m_gone(comm_t *c, int rank) {
  int r = comm_world_rank(c, rank);
  if (!gone_seen || r < 0 || r == world_me || world_node[r] != world_node[world_me]) return 0;
  double now = dt_now();
  pthread_mutex_lock(&gone_mu);
  if (!gone_seen[r] && now >= gone_next[r]) {
    gone_seen[r] = (unsigned char)process_ended(world_pid[r]);
    gone_next[r] = now + GONE_EVERY;
  }
  int gone = gone_seen[r];
  pthread_mutex_unlock(&gone_mu);
  return gone;
}

/* The end of a run some rank of which has died: each rank left sends
 * every other one a byte and waits for theirs, within the timeout. */
#define TAG_SURVIVORS ((1 << 20) - 2)
static int survivors_barrier(double timeout) {
  int n = 0, me = 0, k = 0, done = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Request *reqs = malloc(2 * (size_t)n * sizeof *reqs);
  char *in = calloc((size_t)n, 1), out = 1;
  if (!reqs || !in) return dt_error("out of memory");
  for (int r = 0; r < n; r++) {
    if (r == me || forgotten[r]) continue;
    MPI_Irecv(&in[r], 1, MPI_CHAR, r, TAG_SURVIVORS, MPI_COMM_WORLD, &reqs[k++]);
    MPI_Isend(&out, 1, MPI_CHAR, r, TAG_SURVIVORS, MPI_COMM_WORLD, &reqs[k++]);
  }
  double deadline = dt_now() + timeout;
  while (!done && dt_now() < deadline) {
    if (MPI_Testall(k, reqs, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
    if (!done) sched_yield();
  }
  /* left pending when it failed: the job is being torn down */
  if (done) free(reqs), free(in);
  return done ? 0 : dt_error("barrier of the ranks left (%d found dead): timed out after %g s",
                             nforgotten, timeout);
}

static const comm_ops_t mpi_ops = {
    .name = "mpi",
    .isend = m_isend,
    .irecv = m_irecv,
    .wait = m_wait,
    .test = m_test,
    .barrier = m_barrier,
    .stall_enter = m_stall_enter,
    .split = m_split,
    .free = m_free,
    .irecv_reduce = m_irecv_reduce,
    .wait_src = m_wait_src,
    .cancel = m_cancel,
    .forget = m_forget,
    .gone = m_gone,
    .reduce_zero_copy = 0,
};

static int make_comm(MPI_Comm hc, MPI_Comm pc, double timeout, const comm_t *like, comm_t **out) {
  comm_t *c = calloc(1, sizeof *c);
  mcomm_t *m = calloc(1, sizeof *m);
  if (!c || !m) {
    free(c), free(m);
    return dt_error("out of memory creating a communicator");
  }
  MPI_Comm_set_errhandler(hc, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(pc, MPI_ERRORS_RETURN);
  *m = (mcomm_t){.hc = hc, .pc = pc, .timeout = timeout};
  *c = *like;
  c->ops = &mpi_ops;
  c->impl = m;
  c->host = NULL, c->nhosts = 0; /* its own table: split_hosts or world_comm */
  c->world_of = NULL, c->label = NULL; /* split_world_ranks; its maker names it */
  MPI_Comm_rank(hc, &c->rank);
  MPI_Comm_size(hc, &c->size);
  *out = c;
  return 0;
}

/* ---- running ------------------------------------------------------------ */

int comm_mpi_available(void) { return 1; }

int comm_mpi_allreduce_sum_float(comm_t *c, float *buf, size_t count) {
  if (c->ops != &mpi_ops) return dt_error("MPI_Allreduce: the communicator is not an mpi one");
  if (count > INT_MAX) return dt_error("MPI_Allreduce: %zu floats exceed MPI's int count", count);
  int err = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, ((mcomm_t *)c->impl)->pc);
  return err == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Allreduce");
}

/* The ranks that share this node (MPI_COMM_TYPE_SHARED): each rank's
 * label is the lowest world rank of its node, gathered into label[] (one
 * per world rank). Returns whether any node has more ranks than cores: the
 * answer is made the same on every rank, since algorithm choice uses it. */
static int host_layout(int *label) {
  MPI_Comm host;
  int here = 1, over = 0, any = 0, rank = 0, first = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  first = rank;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
    MPI_Comm_size(host, &here);
    MPI_Allreduce(&rank, &first, 1, MPI_INT, MPI_MIN, host);
    MPI_Comm_free(&host);
  }
  MPI_Allgather(&first, 1, MPI_INT, label, 1, MPI_INT, MPI_COMM_WORLD);
  over = here > sysconf(_SC_NPROCESSORS_ONLN);
  MPI_Allreduce(&over, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}

static int world_comm(const comm_net_t *net, int provided, comm_t **out) {
  int rank, size, *tag_ub = NULL, flag = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  if (flag && *tag_ub < COMM_TAG_MAX)
    return dt_error("this MPI allows tags up to %d; dtrain needs %d", *tag_ub, COMM_TAG_MAX);
  if (net && (net->latency > 0 || net->bandwidth > 0 || net->rank_latency || net->rank_bandwidth ||
              net->intra_latency > 0 || net->intra_bandwidth > 0) &&
      rank == 0)
    dt_log(DT_LOG_WARN, "the emulated network (latency, bandwidth) is local only; "
                        "on mpi the real network is measured");
  int *label = malloc((size_t)size * sizeof(int));
  if (!label) return dt_error("out of memory");
  /* link estimate measured here (shared memory, CMA): ~3 us a message, ~10 us
   * when processes share cores, ~5 GB/s */
  int over = host_layout(label);
  if (!world_pid && note_processes(label, size) != 0) { /* the real nodes, before --net hosts */
    free(label);
    return -1;
  }
  /* hosts given (tests): they replace the nodes MPI found */
  if (net && net->hosts > 1 && comm_net_hosts(net, size, label) != 0) {
    free(label);
    return -1;
  }
  comm_t like = {.slowdown = 1, .link_latency = over ? 10e-6 : 3e-6, .link_bandwidth = 5e9,
                 .thread_multiple = provided >= MPI_THREAD_MULTIPLE, .oversubscribed = over};
  if (net && net->rank_slowdown && (net->rank_table_len == 0 || rank < net->rank_table_len) &&
      net->rank_slowdown[rank] > 1)
    like.slowdown = net->rank_slowdown[rank];
  MPI_Comm hc, pc;
  MPI_Comm_dup(MPI_COMM_WORLD, &hc);
  MPI_Comm_dup(MPI_COMM_WORLD, &pc);
  int rc = make_comm(hc, pc, comm_net_timeout(net), &like, out);
  if (rc == 0) rc = comm_hosts_set(*out, label);
  free(label);
  return rc == 0 ? comm_counters_new(*out) : -1;
}

/* One line naming this rank, then the job ends. The pause lets mpirun
 * forward the line before the abort: with a stopped rank in the job,
 * Open MPI's launcher could die on the abort's help text first and the
 * line was lost. */
static void fail_job(int rank, const char *when, const char *msg) {
  fprintf(stderr, "rank %d: %s%s\n", rank, when, msg);
  fflush(stderr);
  dt_sleep_until(dt_now() + 0.3);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

int comm_mpi_run(int *argc, char ***argv, const comm_net_t *net, comm_rank_fn fn, void *arg) {
  int inited = 0, finalized = 0, provided = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (finalized) return dt_error("comm_mpi_run: MPI was already finalized (one run per process)");
  if (net && net->stall_warning > 0) stall_warning = net->stall_warning;
  if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return dt_error("MPI_Init_thread failed");
  if (inited) MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    return dt_error("MPI provides thread level %d; dtrain needs at least MPI_THREAD_FUNNELED",
                    provided);
  }
  comm_t *c = NULL;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  dt_error_clear();
  if (world_comm(net, provided, &c) != 0 || fn(c, arg) != 0) {
    fail_job(rank, "", dt_errmsg());
  }
  /* MPI_Finalize waits for every rank with no timeout: a rank that is
   * stopped or dead would keep the job alive after training ended. A rank
   * the run went on without (comm_forget) is left out. */
  double timeout = ((mcomm_t *)c->impl)->timeout;
  if (nforgotten ? survivors_barrier(timeout) != 0 : m_barrier(c) != 0) {
    fail_job(rank, "at the end of the run: ", dt_errmsg());
  }
  comm_counters_free(c);
  m_free(c);
  free_all_reqs();
  /* After a rank's death Open MPI 4.1's MPI_Finalize now and then waits
   * for it for ever (about 1 run in 8 here, --enable-recovery or not):
   * bounded by the timeout, the process then ends by SIGALRM. */
  if (nforgotten) alarm((unsigned)timeout + 1);
  MPI_Finalize();
  free(forgotten);
  free(world_pid), free(world_node), free(gone_next), free(gone_seen);
  world_pid = world_node = NULL, gone_next = NULL, gone_seen = NULL;
  return 0;
}

#endif
