/* comm: the transport. One interface, two backends:
 *   local - N ranks as threads of one process (default, no launcher);
 *   mpi   - one rank per MPI process (mpirun / srun).
 * strategy/ and coll/ speak only this interface, so every strategy runs
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

/* The receiver's check of a message header (wire.c), shared by both
 * transports. What is wrong with it, if anything: */
typedef enum {
  WIRE_OK = 0,
  WIRE_SIZE,      /* not sizeof(comm_header_t) bytes */
  WIRE_FOREIGN,   /* magic or version: not a dtrain message of this version */
  WIRE_TAG,       /* another tag than the receive's */
  WIRE_SRC,       /* the sender named in it is not the rank it came from (or no rank) */
  WIRE_LEN        /* another payload length than the receive expects */
} wire_status_t;
/* Checks `nbytes` bytes received as a header (any alignment) against the
 * receive: its tag (WIRE_ANY_TAG: any; the transports' own tags are
 * negative), the rank it came from
 * (COMM_ANY_SOURCE: any rank below nranks; nranks <= 0: not checked) and
 * the payload length it expects. *out gets the header when the bytes are
 * one (WIRE_SIZE leaves it zeroed). Pure: no state, no error message. */
#define WIRE_ANY_TAG INT32_MIN
wire_status_t wire_check_header(const void *raw, size_t nbytes, int tag, int src, int nranks,
                                size_t len, comm_header_t *out);
/* One line into the error buffer for status (not WIRE_OK), about a message
 * from `from` (a rank, "rank 3") for a receive of `tag` expecting `len`
 * bytes; h as wire_check_header left it. Returns -1. */
int wire_error(wire_status_t status, const comm_header_t *h, size_t nbytes, const char *from,
               int tag, size_t len);

/* Emulated network (local only): a message from rank s occupies s's
 * outgoing link for bytes/bandwidth and arrives latency later; a link
 * carries one message at a time. Per-rank overrides; 0 = not emulated. */
/* What the command line accepts for an emulated link (dtrain train --net,
 * dtrain bench allreduce --latency/--bandwidth): so that a typo cannot make
 * every message wait for ages. */
#define COMM_NET_LATENCY_MAX 10.0          /* seconds */
#define COMM_NET_BANDWIDTH_MIN (1e3 / 8)   /* bytes per second: 1 kbit/s */
#define COMM_NET_BANDWIDTH_MAX (10e12 / 8) /* 10 Tbit/s */

#define COMM_NET_MAX_HOST_LIST 64

#define COMM_STALL_WARNING 60.0     /* --stall-warning's default, seconds */   /* hosts=A+B+...: at most this many sizes */

typedef struct {
  double latency;            /* seconds; with hosts > 1: the links between hosts */
  double bandwidth;          /* bytes per second, 0 = infinite; with hosts > 1: between hosts */
  double *rank_latency;      /* optional per-rank override, NULL = none */
  double *rank_bandwidth;
  double *rank_slowdown;     /* compute slow-down factor per rank (stragglers) */
  int rank_table_len;        /* entries in the rank_* tables (0 = one per rank); mpi ranks
                              * past the end take the global value */
  double timeout;            /* seconds a blocking call waits before failing; 0 = COMM_TIMEOUT */
  double stall_warning;      /* seconds a blocking call waits before a stall line, repeated at
                              * that period (the stall inspector); 0 = COMM_STALL_WARNING */
  int bind_cores;            /* local (--bind core): rank r's thread pinned to the r-th CPU
                              * this process may run on, modulo their count (mpi: mpirun's
                              * --bind-to) */
  /* Hosts: consecutive ranks on `hosts` machines (0 or 1 = one host), as
   * even as possible (the first P mod hosts hosts one rank more) unless
   * host_ranks lists the ranks of each (hosts entries, summing to P).
   * local: the emulated topology, whose links between two ranks of one
   * host are intra_latency/intra_bandwidth (0 = not delayed) and between
   * hosts latency/bandwidth (and the per-rank tables: the rank's link to
   * the other hosts). mpi: replaces the hosts MPI finds (tests only; the
   * links are real there). */
  int hosts;
  int host_ranks[COMM_NET_MAX_HOST_LIST];
  double intra_latency, intra_bandwidth;
  /* local, hosts > 1 (link=shared, the default): a host's ranks share one
   * link to the other hosts each way, as the ranks of a real machine share
   * its NIC; link=own: each rank has a link of its own (every rank its own
   * machine's worth of bandwidth). */
  int shared_link;
} comm_net_t;

/* The value of --net (dtrain train, dtrain bench allreduce), key=value items:
 * latency=TIME, bandwidth=RATE (with hosts: between hosts), hosts=N or
 * hosts=A+B+..., intra-latency=TIME, intra-bandwidth=RATE (within a host;
 * need hosts). Sets those fields of net, leaves the others; a bad value is
 * one line naming the key and what it expects ("option --net: ..."). */
int comm_net_parse(const char *text, comm_net_t *net);
/* The host (0 .. hosts-1) of each of `size` ranks under net (all 0 without
 * hosts). Fails when the hosts do not fit: more hosts than ranks, or
 * host_ranks summing to another count. */
int comm_net_hosts(const comm_net_t *net, int size, int *host);
/* The link a local world of `size` ranks under net gives its collectives
 * to decide by (allreduce:auto): net's slowest link, or this machine's
 * estimate without an emulated network (oversubscribed: more ranks than
 * cores). */
void comm_net_link_estimate(const comm_net_t *net, int size, int oversubscribed, double *latency,
                            double *bandwidth);
/* Whether net delays messages on local (any latency or bandwidth set). */
int comm_net_emulated(const comm_net_t *net, int size);
/* The seconds a blocking call waits before failing: net's timeout, or
 * COMM_TIMEOUT (net NULL too). */
#define COMM_TIMEOUT 300.0
double comm_net_timeout(const comm_net_t *net);
/* The alpha-beta link model, the one both the emulator (local.c: a
 * message holds its sender's link for bytes / bandwidth and arrives
 * latency later) and the cost formulas (coll_allreduce_time) use:
 * `messages` in sequence and `bytes` in sequence over one link.
 * bandwidth <= 0: unlimited. */
static inline double comm_link_time(double latency, double bandwidth, double messages,
                                    double bytes) {
  return messages * latency + (bandwidth > 0 ? bytes / bandwidth : 0);
}

typedef struct comm comm_t;
typedef struct comm_req comm_req_t;
typedef struct comm_counters comm_counters_t; /* a rank's bytes on the wire (comm.c) */

/* A backend's operations. Both backends fill one of these. */
typedef struct {
  const char *name;
  int (*isend)(comm_t *c, int dst, int tag, const void *buf, size_t len, comm_req_t **req);
  int (*irecv)(comm_t *c, int src, int tag, void *buf, size_t len, comm_req_t **req);
  /* wait, wait_src: *received (when not NULL) gets the payload bytes the
   * request received: its length for a completed receive, 0 for a send or
   * a failed wait (comm.c counts it, see comm_bytes). */
  int (*wait)(comm_t *c, comm_req_t *req, size_t *received);   /* frees req */
  int (*test)(comm_t *c, comm_req_t *req, int *done);
  int (*barrier)(comm_t *c);
  int (*split)(comm_t *c, int color, int key, comm_t **out);
  void (*free)(comm_t *c);
  /* Additions (see comm_irecv_reduce, comm_wait_src, comm_cancel). */
  int (*irecv_reduce)(comm_t *c, int src, int tag, float *buf, size_t count, float *scratch,
                      comm_req_t **req);
  int (*wait_src)(comm_t *c, comm_req_t *req, int *src, size_t *received); /* frees req */
  int (*cancel)(comm_t *c, comm_req_t *req);                                /* frees req */
  void (*set_spin)(comm_t *c, double seconds);                              /* may be NULL */
  int (*gone)(comm_t *c, int rank); /* rank has ended its run (local; mpi: a process on this node) */
  int (*aborted)(comm_t *c);        /* another rank has failed (local; NULL elsewhere) */
  void (*stall_enter)(comm_t *c, const char *op, size_t bytes);     /* may be NULL */
  void (*fail)(comm_t *c);          /* this rank has failed (local; NULL elsewhere) */
  void (*forget)(comm_t *c, int rank); /* rank is dead, the run goes on (mpi; NULL elsewhere) */
  int reduce_zero_copy;      /* irecv_reduce adds straight from the sender's buffer */
} comm_ops_t;

struct comm {
  const comm_ops_t *ops;
  int rank, size;
  int emulated;              /* nonzero when the network is emulated */
  double slowdown;           /* this rank's compute slow-down (1 = none) */
  void *impl;                /* backend state */
  /* Link estimate for choosing algorithms (ALLREDUCE_AUTO). The same on
   * every rank of a communicator, so that every rank picks the same. */
  double link_latency;       /* seconds per message */
  double link_bandwidth;     /* bytes per second */
  int thread_multiple;       /* several threads of one rank may call comm_* at once */
  int oversubscribed;        /* more ranks than cores on this host: every message costs CPU time */
  comm_counters_t *counters; /* this rank's bytes on the wire: one per rank, shared by every
                              * communicator split from its world communicator (comm_bytes) */
  comm_counters_t *own;      /* this communicator's share of them (comm_split's; NULL on a
                              * world communicator): comm_bytes_own */
  int nhosts;                /* machines the ranks are on (comm_host); 0 = 1 */
  int *host;                 /* host of each rank (size entries), NULL = all on host 0 */
  /* Messages name world ranks: a communicator made by comm_split maps
   * its ranks to the world's (size entries, set by the backend; NULL on a
   * world communicator) and may say what group it is ("tp group"). */
  const int *world_of;
  const char *label;         /* NULL: "a sub-communicator" */
};

/* The world rank of rank r of c, and "rank W" for errors and warnings
 * ("rank W (rank r of the tp group)" on a sub-communicator). */
static inline int comm_world_rank(const comm_t *c, int r) { return c->world_of ? c->world_of[r] : r; }
const char *comm_rank_name(const comm_t *c, int r, char *buf, size_t cap);
static inline int comm_rank(const comm_t *c) { return c->rank; }
static inline int comm_size(const comm_t *c) { return c->size; }

/* Hosts: which ranks of c share a machine, so that a collective can keep
 * the traffic between machines small (allreduce_hier). Host ids run from
 * 0 to comm_nhosts(c) - 1, numbered in the order of each host's lowest
 * rank (rank 0 is on host 0). local: the hosts of comm_net_t (emulated;
 * one host without them); mpi: the ranks MPI_COMM_TYPE_SHARED puts
 * together (one node), unless comm_net_t's hosts replace them. comm_split
 * keeps every rank's machine (renumbered within the new communicator). */
static inline int comm_host(const comm_t *c, int rank) { return c->host ? c->host[rank] : 0; }
static inline int comm_nhosts(const comm_t *c) { return c->nhosts > 1 ? c->nhosts : 1; }
/* For the backends: c's host table from a label per rank (ranks with equal
 * labels share a host), renumbered as comm_host says; comm_hosts_free
 * releases it (the backend's free and its world's end call it). */
int comm_hosts_set(comm_t *c, const int *label);
void comm_hosts_free(comm_t *c);

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
/* The stall inspector: a collective named `op` (a string literal) moving
 * `bytes` starts on c. A wait inside it that passes --stall-warning prints
 * one line naming the operation, the ranks that have started it and those
 * that have not (local: every rank's record is in the world; mpi: the
 * rank awaited), again at every period; a wait that times out names the
 * same in its error. */
void comm_stall_enter(comm_t *c, const char *op, size_t bytes);
/* Receive `count` floats from src and add them into buf (buf[i] += msg[i]),
 * one pass: local adds straight from the sender's buffer (scratch unused,
 * may be NULL); mpi receives into `scratch` (count floats, untouched by the
 * caller until the wait) and adds when the request completes. */
int comm_irecv_reduce(comm_t *c, int src, int tag, float *buf, size_t count, float *scratch,
                      comm_req_t **req);
int comm_recv_reduce(comm_t *c, int src, int tag, float *buf, size_t count, float *scratch);
/* Abandon a request (frees it). A receive that has not matched is
 * withdrawn; a send that has not been received is withdrawn and its
 * matched receiver, if any, fails with "sender cancelled". Every request
 * must end in exactly one wait or cancel. */
int comm_cancel(comm_t *c, comm_req_t *req);
/* Tags: user tags are 0 .. COMM_TAG_MAX. Tags from 1 << 20 up are
 * reserved for the collectives (coll.h, COLL_TAG_BASE). */
#define COMM_TAG_MAX ((1 << 24) - 1)
/* Ranks with the same color form a new communicator, ordered by key
 * (ties by old rank). Collective over c. */
int comm_split(comm_t *c, int color, int key, comm_t **out);
void comm_free(comm_t *c);

/* Bytes on the wire: the payload bytes this rank has sent and received so
 * far, on c and on every communicator of the same rank (its world
 * communicator and all those comm_split made from it share one counter).
 *   sent:     the length of every send this rank posted (comm_isend, and
 *             so comm_send, comm_sendrecv), counted when it is posted;
 *   received: the length of every receive of this rank that completed (a
 *             wait that succeeded; irecv_reduce: its count x 4 bytes);
 *             a receive cancelled, or whose wait failed, counts nothing.
 * Payload only: not the transport's own traffic (mpi's message headers,
 * barriers, comm_split's tables, comm_shared_alloc's handing out of the
 * address), so on both transports the counts are the collective's formula
 * (docs/COLLECTIVES.md). Totals since the rank started; a caller wanting
 * one phase's traffic takes the difference of two readings. Cheap (one
 * relaxed atomic add per message) and safe from any thread of the rank. */
typedef struct {
  uint64_t sent, received;
} comm_bytes_t;
comm_bytes_t comm_bytes(const comm_t *c);
/* The same, counting only the messages posted and received on c itself,
 * for a communicator made by comm_split ({0, 0} on a world communicator):
 * what one group's collectives cost while the rank's other threads use
 * other communicators (tensor parallelism's sums beside data
 * parallelism's overlapped buckets). */
comm_bytes_t comm_bytes_own(const comm_t *c);

/* For the backends: a world communicator gets its rank's counters (zero)
 * from comm_counters_new and releases them with comm_counters_free when the
 * rank's run ends, after every communicator split from it is done; comm_split
 * hands them on. */
int comm_counters_new(comm_t *c);
void comm_counters_free(comm_t *c);

/* How long the calling thread's blocking waits spin before they sleep
 * (local; mpi ignores it). The default suits one thread per rank; a
 * progress thread beside a rank's compute thread wants a short spin, or
 * it takes the core the computing one needs. */
void comm_set_wait_spin(comm_t *c, double seconds);

/* Emulated compute: sleep (slowdown-1) x `seconds` so a straggler rank
 * is really slower. No-op when slowdown <= 1. Cut short when another rank
 * has failed, so a failed run does not wait for the straggler's sleep. */
void comm_compute_delay(comm_t *c, double seconds);

/* Shared memory (src/comm/shared.c), collective: every rank gets the same
 * zeroed, 64-byte aligned block of `bytes`. local: one allocation seen by
 * all ranks (they share an address space); mpi: fails, naming --comm
 * local. On failure *ptr may still be set (some ranks hold the block):
 * comm_shared_free it then too. */
int comm_shared_alloc(comm_t *c, size_t bytes, void **ptr);
/* 1 when the ranks of c share one address space (local). */
int comm_shares_memory(const comm_t *c);
/* Every rank that got the block calls this once, whether its run failed or
 * not (NULL is a no-op). It returns once every rank of c has called it or
 * ended, so afterwards no rank touches the block or any memory the ranks
 * published through it (their arenas): only then may a rank free those.
 * The last rank to leave frees the block. */
int comm_shared_free(comm_t *c, void *ptr);
/* This rank's run has failed (dt_errmsg() says why): on local the peers'
 * waits stop now. A strategy calls it before a comm_shared_free that would
 * otherwise wait for peers that wait on this rank (until their timeout). */
void comm_fail(comm_t *c);
/* Rank `rank` of c has died and the run goes on without it (replicated
 * parameter servers): under mpi the end of the run then waits for the
 * ranks left only (a barrier of point-to-point messages among them, with
 * the timeout) instead of MPI's barrier of all. Every surviving rank must
 * have been told. On local a rank's end is seen by the transport itself. */
void comm_forget(comm_t *c, int rank);
/* Whether rank `rank` of c has ended its run, as the transport knows it:
 * on local, its thread has returned; under mpi, its process on this node
 * has ended (a rank that has finished waits alive in the last barrier,
 * so only a death); a rank on another node is never known (0). */
int comm_gone(comm_t *c, int rank);
#define COMM_TAG_SHARED ((1 << 20) - 1)  /* the tag comm_shared_alloc uses */

/* local: run fn(comm, arg) on `size` threads, one per rank, and join.
 * Returns 0 when every rank returned 0; otherwise -1 with the first
 * failing rank's message ("rank R: ..."). net may be NULL. */
typedef int (*comm_rank_fn)(comm_t *c, void *arg);
int comm_local_run(int size, const comm_net_t *net, comm_rank_fn fn, void *arg);

/* mpi: MPI_Init_thread (asks for MPI_THREAD_MULTIPLE and records what it
 * got in c->thread_multiple; at least FUNNELED), then fn on this process's
 * rank, then MPI_Finalize. Call it once per process. If fn fails, prints
 * "rank R: message" and calls MPI_Abort so the other ranks do not hang.
 * net: timeout, rank_slowdown and hosts apply (hosts replace what
 * MPI_COMM_TYPE_SHARED finds: for tests); latency/bandwidth are local only.
 * Fails with a clear message when dtrain was built without MPI. */
int comm_mpi_run(int *argc, char ***argv, const comm_net_t *net, comm_rank_fn fn, void *arg);
int comm_mpi_available(void);
/* MPI's own MPI_Allreduce (sum, in place) on an mpi communicator: the
 * yardstick that dtrain's collectives are measured against (its traffic is
 * MPI's own, not in comm_bytes). */
int comm_mpi_allreduce_sum_float(comm_t *c, float *buf, size_t count);
#endif
