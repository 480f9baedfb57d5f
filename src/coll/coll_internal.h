/* Shared by the collectives: the context, reserved tags, and the
 * segmented point-to-point helpers every algorithm is written with. */
#ifndef DTRAIN_COLL_INTERNAL_H
#define DTRAIN_COLL_INTERNAL_H

#include "dtrain/coll.h"

/* One tag per algorithm, all at or above COLL_TAG_BASE. */
enum {
  TAG_BCAST = COLL_TAG_BASE,
  TAG_REDUCE,
  TAG_RING,
  TAG_ALLGATHER,
  TAG_REDUCE_SCATTER,
  TAG_RHD,
  TAG_NAIVE,
  TAG_GATHER,
  TAG_SHM,
  TAG_HIER,
};

#define COLL_WINDOW 2 /* receives posted ahead: one in flight while one is reduced */
#define COLL_MAX_SHM_RANKS 256 /* allreduce_shm: block pointers on the stack */

struct coll_ctx {
  comm_t *comm;
  size_t seg;                 /* floats per segment */
  float *seg_scratch;         /* COLL_WINDOW segments, for transports that need scratch */
  size_t seg_scratch_cap;     /* floats */
  float *work[2];             /* whole-block buffers (reduce_scatter_ring) */
  size_t work_cap;
  comm_req_t **sends;         /* sends in flight, waited by coll_wait_sends */
  size_t nsends, sends_cap;
  int group_size;             /* ALLREDUCE_HIER; 0 = default */
  int hosts_worth_it;         /* auto picks hier: > 1 host, >= 2 ranks on each */
  struct coll_hier *hier;     /* ALLREDUCE_HIER's layout and communicators, made on first use */
  double latency, bandwidth;  /* for ALLREDUCE_AUTO */
  struct shm_slot *shm;       /* ALLREDUCE_SHM: one slot per rank, in shared memory */
};

/* Segments: n floats are sent as nsegs pieces of at most ctx->seg. Both
 * sides compute the same pieces from n, so the lengths always agree. */
size_t coll_nsegs(const coll_ctx_t *ctx, size_t n);
void coll_seg(const coll_ctx_t *ctx, size_t n, size_t k, size_t *off, size_t *len);
/* Scratch for window slot i (NULL when the transport reduces in place). */
float *coll_slot(coll_ctx_t *ctx, size_t i);
/* A whole-block work buffer (which = 0 or 1) of at least n floats. */
float *coll_work(coll_ctx_t *ctx, int which, size_t n);

/* Posts the sends of n floats to dst, in segments; coll_wait_sends waits
 * for all of them (and cancels the rest after a failure). */
int coll_send(coll_ctx_t *ctx, int dst, int tag, const float *buf, size_t n);
int coll_track_send(coll_ctx_t *ctx, comm_req_t *req);
int coll_wait_sends(coll_ctx_t *ctx);
void coll_cancel_sends(coll_ctx_t *ctx);
/* Receives n floats from src, in segments with COLL_WINDOW receives in
 * flight; adds them into buf when reduce, else copies. Blocking. */
int coll_recv(coll_ctx_t *ctx, int src, int tag, float *buf, size_t n, int reduce);
/* Posts the receive of one segment (reduce or copy). */
int coll_post_recv(coll_ctx_t *ctx, int src, int tag, float *buf, size_t n, int reduce,
                   size_t slot, comm_req_t **req);

/* Ring steps [first, last) of the unified ring (allreduce_ring.c): at
 * step s rank r sends block r-s-1 to the right and receives block r-s-2
 * from the left, adding for s < P-1 and copying after. */
int coll_ring_steps(coll_ctx_t *ctx, float *buf, size_t count, int first, int last, int tag);

/* The flat algorithms auto chooses from (never hier, naive or shm). */
allreduce_algo_t coll_choose_flat(coll_ctx_t *ctx, size_t count);

/* Returns on every rank once all have called it: a dissemination barrier
 * of zero-byte messages on `tag`, so that it never consumes the messages
 * of comm_barrier or of a strategy running on the same communicator. */
int coll_barrier(coll_ctx_t *ctx, int tag);

/* Frees allreduce_shm's shared slots (collective; allreduce_shm.c). */
void coll_free_shm(coll_ctx_t *ctx);

/* Frees allreduce_hier's cached communicators (allreduce_hier.c). */
void coll_free_hier(coll_ctx_t *ctx);

/* Adds the prefix to the error line and returns -1. */
int coll_fail(coll_ctx_t *ctx, const char *what);

#endif
