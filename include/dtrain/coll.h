/* coll: collectives written on comm_t point-to-point (not MPI's own).
 * One algorithm per file (src/coll/allreduce_ring.c, ...), each headed by
 * its communication steps and bytes on the wire. All reduce in a fixed
 * order so results are bitwise identical run to run.
 * Buffers are float32; counts are element counts and may be 0. Reductions
 * are sums (callers scale to average). */
#ifndef DTRAIN_COLL_H
#define DTRAIN_COLL_H

#include "dtrain/comm.h"

typedef enum {
  ALLREDUCE_AUTO = 0,
  ALLREDUCE_RING,      /* reduce-scatter + allgather, chunked */
  ALLREDUCE_RHD,       /* recursive halving-doubling (Rabenseifner) */
  ALLREDUCE_TREE,      /* binomial reduce + broadcast */
  ALLREDUCE_NAIVE,     /* gather to rank 0 + broadcast (single PS baseline) */
  ALLREDUCE_HIER,      /* two-level by host: reduce-scatter inside, allreduce across, allgather */
  ALLREDUCE_SHM,       /* one pass over shared memory (local only) */
  ALLREDUCE_COUNT
} allreduce_algo_t;

const char *allreduce_algo_name(allreduce_algo_t a);
int allreduce_algo_parse(const char *name, allreduce_algo_t *out); /* error names the choices */

/* Tags from COLL_TAG_BASE up are reserved for the collectives; strategies
 * use tags below it (comm.h allows 0 .. COMM_TAG_MAX). Every rank must call
 * the collectives of a communicator in the same order; two collectives run
 * at the same time (e.g. from a progress thread) need two communicators
 * (comm_split) or must be serialized, as one coll_ctx is not thread-safe. */
#define COLL_TAG_BASE (1 << 20)

/* Per-communicator scratch: allocated once, grown when needed, reused.
 * Collectives take it so that the training loop never allocates. */
typedef struct coll_ctx coll_ctx_t;
int coll_ctx_new(comm_t *c, coll_ctx_t **out);
void coll_ctx_free(coll_ctx_t *ctx);
comm_t *coll_ctx_comm(coll_ctx_t *ctx);
/* For ALLREDUCE_HIER: take groups of this many consecutive ranks as its
 * hosts (0, the default: the communicator's hosts, comm_host; on one host,
 * groups of ceil(sqrt(P))). Same on every rank. */
void coll_ctx_set_group_size(coll_ctx_t *ctx, int ranks_per_group);
/* For ALLREDUCE_AUTO: measured link parameters (seconds, bytes/s). Must be
 * the same on every rank, or ranks would pick different algorithms. The
 * default is the communicator's estimate (c->link_latency, c->link_bandwidth). */
void coll_ctx_set_link(coll_ctx_t *ctx, double latency, double bandwidth);
/* The link those decisions read (the sparse collectives' auto too). */
void coll_ctx_link(const coll_ctx_t *ctx, double *latency, double *bandwidth);
/* Pipelining: messages are cut into segments of this many bytes (rounded
 * to floats; 0 = the transport's default: whole blocks on local, where the
 * receiver reads the sender's buffer, 1 MiB on mpi). Same on every rank. */
void coll_ctx_set_segment(coll_ctx_t *ctx, size_t bytes);

int allreduce(coll_ctx_t *ctx, allreduce_algo_t algo, float *buf, size_t count);
int allreduce_ring(coll_ctx_t *ctx, float *buf, size_t count);
int allreduce_rhd(coll_ctx_t *ctx, float *buf, size_t count);
int allreduce_tree(coll_ctx_t *ctx, float *buf, size_t count);
int allreduce_naive(coll_ctx_t *ctx, float *buf, size_t count);
int allreduce_hier(coll_ctx_t *ctx, float *buf, size_t count);
int allreduce_shm(coll_ctx_t *ctx, float *buf, size_t count);
/* What allreduce_hier does here (allreduce_hier.c): its hosts, the ranks
 * of a host that take part (the smallest host's count; the others fold
 * into them), this rank's host and index within it, the rank it folds
 * into (-1: none), and the block of `count` floats it allreduces across
 * hosts with the algorithm `inter`. Collective on first use, as
 * allreduce_hier is (it makes the communicators). */
typedef struct {
  int hosts, per_host, host, local, partner;
  size_t block;
  allreduce_algo_t inter;
} hier_plan_t;
int allreduce_hier_plan(coll_ctx_t *ctx, size_t count, hier_plan_t *out);
/* hier's layout, as a pure function (the description of a step uses it
 * too): the host hier puts each of P ranks on (the communicator's hosts
 * when it has more than one, comm_hosts[r]; otherwise groups of
 * group_size consecutive ranks, default ceil(sqrt P)); then, from those,
 * rank me's place: the hosts H, the ranks taking part on each (m, the
 * smallest host's count), me's host and index in it, the rank it folds
 * into (-1: none) and the ranks folding into it (folded, P entries or
 * NULL; nfolded of them). */
typedef struct {
  int hosts, per_host, host, local, partner, nfolded;
} hier_place_t;
void coll_hier_hosts(int P, const int *comm_hosts, int nhosts, int group_size, int *host);
int coll_hier_place(int P, const int *host, int me, int *folded, hier_place_t *out);
/* Costs (cost.c), for anyone to call: this rank's exact bytes on the
 * wire for one allreduce of `count` floats over P ranks (ring, rhd, tree,
 * naive, shm; -1 for hier and auto, whose bytes depend on the hosts and
 * the choice); an algorithm's alpha-beta coefficients (messages and
 * multiples of S in sequence) and time; and the algorithm auto picks from
 * them for a flat communicator (seg: floats per segment). */
int coll_allreduce_bytes(allreduce_algo_t algo, int P, int rank, size_t count, size_t *sent,
                         size_t *received);
/* A binomial broadcast (reduce = 0) or reduce (1) from/to root: this
 * rank's bytes (broadcast_tree.c, reduce_tree.c). */
void coll_tree_bytes(int reduce, int P, int root, int rank, size_t count, size_t *sent,
                     size_t *received);
/* The ring's two halves (reduce_scatter_ring.c, allgather_ring.c, either
 * version) of `count` floats over P ranks: this rank's bytes. */
void coll_reduce_scatter_bytes(int P, int rank, size_t count, size_t *sent, size_t *received);
void coll_allgather_bytes(int P, int rank, size_t count, size_t *sent, size_t *received);
void coll_allreduce_cost(allreduce_algo_t algo, int P, size_t segments, int oversubscribed,
                         double *messages, double *bytes);
double coll_allreduce_time(allreduce_algo_t algo, int P, size_t bytes, size_t segments,
                           int oversubscribed, double latency, double bandwidth);
allreduce_algo_t coll_allreduce_pick(int P, size_t count, size_t seg, int oversubscribed,
                                     double latency, double bandwidth);
/* The algorithm `auto` would pick for this size on this communicator. */
allreduce_algo_t allreduce_choose(coll_ctx_t *ctx, size_t count);

int broadcast_tree(coll_ctx_t *ctx, int root, float *buf, size_t count);
/* The sum ends in root's buf; other ranks' buf is used as scratch and
 * holds a partial sum afterwards. */
int reduce_tree(coll_ctx_t *ctx, int root, float *buf, size_t count);
/* Rank r ends with the sum of block r in out (block sizes from
 * coll_block(): count split into size nearly equal contiguous parts). */
int reduce_scatter_ring(coll_ctx_t *ctx, const float *in, float *out, size_t count);
/* The same, in place: rank r's block r of buf ends as the sum (the other
 * blocks hold partial sums). With allgather_ring after it, this is
 * allreduce_ring, bit for bit. */
int reduce_scatter_ring_inplace(coll_ctx_t *ctx, float *buf, size_t count);
/* Each rank contributes block r (in place in buf); all end with all. */
int allgather_ring(coll_ctx_t *ctx, float *buf, size_t count);
/* root's out (size x count_per_rank floats) gets rank i's in at i x count. */
int gather_to_root(coll_ctx_t *ctx, int root, const float *in, float *out, size_t count_per_rank);
void coll_block(size_t count, int parts, int i, size_t *off, size_t *len);
/* The order in which overlapped requests run (coll_async.h): submission
 * order, or the lowest priority first. TICTAC: the parameter servers'
 * timing-aware order (src/strategy/ps/ps_schedule.c); not a collective's. */
typedef enum { COLL_ORDER_FIFO = 0, COLL_ORDER_PRIORITY, COLL_ORDER_TICTAC } coll_order_t;
#endif
