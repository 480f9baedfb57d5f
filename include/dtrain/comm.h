/* comm: the transport. One interface, two backends:
 *   local - N ranks as threads of one process (default, no launcher);
 *   mpi   - one rank per MPI process (mpirun / srun).
 * dist/ and coll/ speak only this interface, so every strategy runs
 * unchanged on both. Every message carries a header (magic, version, tag,
 * length) that the receiver checks; a mismatch is an error, not a crash. */
#ifndef DTRAIN_COMM_H
#define DTRAIN_COMM_H

#include "dtrain/core.h"

#define COMM_MAGIC 0x64747231u   /* "dtr1" */
#define COMM_VERSION 1u
#define COMM_ANY_SOURCE (-1)

typedef struct {
  uint32_t magic, version;
  int32_t src, tag;
  uint64_t len;
} comm_header_t;

/* Emulated network (local only): a message from rank s occupies s's
 * outgoing link for bytes/bandwidth and arrives latency later; a link
 * carries one message at a time. Per-rank overrides; 0 = not emulated. */
typedef struct {
  double latency;            /* seconds */
  double bandwidth;          /* bytes per second, 0 = infinite */
  double *rank_latency;      /* optional per-rank override, NULL = none */
  double *rank_bandwidth;
  double *rank_slowdown;     /* compute slow-down factor per rank (stragglers) */
  double timeout;            /* seconds a blocking call waits before failing; 0 = default 300 */
} comm_net_t;

typedef struct comm comm_t;
typedef struct comm_req comm_req_t;

/* A backend's operations. Both backends fill one of these. */
typedef struct {
  const char *name;
  int (*isend)(comm_t *c, int dst, int tag, const void *buf, size_t len, comm_req_t **req);
  int (*irecv)(comm_t *c, int src, int tag, void *buf, size_t len, comm_req_t **req);
  int (*wait)(comm_t *c, comm_req_t *req, size_t *received);   /* frees req */
  int (*test)(comm_t *c, comm_req_t *req, int *done);
  int (*barrier)(comm_t *c);
  int (*split)(comm_t *c, int color, int key, comm_t **out);
  void (*free)(comm_t *c);
} comm_ops_t;

struct comm {
  const comm_ops_t *ops;
  int rank, size;
  int emulated;              /* nonzero when the network is emulated */
  double slowdown;           /* this rank's compute slow-down (1 = none) */
  void *impl;                /* backend state */
};

static inline int comm_rank(const comm_t *c) { return c->rank; }
static inline int comm_size(const comm_t *c) { return c->size; }

/* Point to point. recv requires the incoming length to equal `len`
 * (collectives always know it); otherwise it fails naming both lengths.
 * irecv with src = COMM_ANY_SOURCE matches the first message with the tag;
 * comm_wait_src tells which rank it came from. */
int comm_send(comm_t *c, int dst, int tag, const void *buf, size_t len);
int comm_recv(comm_t *c, int src, int tag, void *buf, size_t len);
int comm_isend(comm_t *c, int dst, int tag, const void *buf, size_t len, comm_req_t **req);
int comm_irecv(comm_t *c, int src, int tag, void *buf, size_t len, comm_req_t **req);
int comm_wait(comm_t *c, comm_req_t *req);
int comm_wait_src(comm_t *c, comm_req_t *req, int *src, size_t *received);
int comm_test(comm_t *c, comm_req_t *req, int *done);
int comm_waitall(comm_t *c, int n, comm_req_t **reqs);
int comm_sendrecv(comm_t *c, int dst, int stag, const void *sbuf, size_t slen,
                  int src, int rtag, void *rbuf, size_t rlen);
int comm_barrier(comm_t *c);
/* Ranks with the same color form a new communicator, ordered by key
 * (ties by old rank). Collective over c. */
int comm_split(comm_t *c, int color, int key, comm_t **out);
void comm_free(comm_t *c);

/* Emulated compute: sleep (slowdown-1) x `seconds` so a straggler rank
 * is really slower. No-op when slowdown <= 1. */
void comm_compute_delay(comm_t *c, double seconds);

/* local: run fn(comm, arg) on `size` threads, one per rank, and join.
 * Returns 0 when every rank returned 0; otherwise -1 with the first
 * failing rank's message ("rank R: ..."). net may be NULL. */
typedef int (*comm_rank_fn)(comm_t *c, void *arg);
int comm_local_run(int size, const comm_net_t *net, comm_rank_fn fn, void *arg);

/* mpi: MPI_Init (thread level FUNNELED), then fn on this process's rank.
 * Fails with a clear message when dtrain was built without MPI. */
int comm_mpi_run(int *argc, char ***argv, const comm_net_t *net, comm_rank_fn fn, void *arg);
int comm_mpi_available(void);
#endif
