/* allreduce_ring: reduce-scatter then allgather around a ring, pipelined.
 *
 *   steps:  2(P-1) ring steps; each block travels in ceil(S/P/seg) segments
 *   bytes:  each rank sends 2(P-1)/P x S (total on the wire 2(P-1) x S)
 *
 * Bytes on the wire per rank, exactly (b_i = block i of coll_block, the
 * first S mod P blocks one float longer; indices mod P): rank r sends
 * every block but b_r in the reduce-scatter and every block but b_{r+1}
 * in the allgather, 2S - |b_r| - |b_{r+1}|, and receives
 * 2S - |b_{r-1}| - |b_r|. Segments change the messages, not the bytes.
 *
 * The buffer is cut into P blocks. At unified step s (0 .. 2P-3) rank r
 * sends block r-s-1 to its right and receives block r-s-2 from its left;
 * during the first P-1 steps it adds what it receives (after them rank r
 * holds the full sum of block r), during the last P-1 it copies. The block
 * received at step s is exactly the one sent at step s+1, so each segment
 * is forwarded as soon as it has arrived: data flows around the ring
 * segment by segment instead of step by step (Gloo's ring_chunked).
 * Block b is summed in the fixed order b+1, b+2, ..., b (mod P), so the
 * result does not depend on timing. */
#include "coll_internal.h"

static int mod(int a, int p) { return ((a % p) + p) % p; }

typedef struct {
  coll_ctx_t *ctx;
  float *buf;
  size_t count;
  int P, r, last, tag;
} ring_t;

/* The block received at step s, and its segment count. */
static void recv_block(const ring_t *g, int s, size_t *off, size_t *len) {
  coll_block(g->count, g->P, mod(g->r - s - 2, g->P), off, len);
}

/* Item = (step, segment), in the order both neighbours use. Moves *s,*k
 * to the next item; returns 0 past the last step. */
static int next_item(const ring_t *g, int *s, size_t *k) {
  size_t off, len;
  (*k)++;
  for (;;) {
    if (*s >= g->last) return 0;
    recv_block(g, *s, &off, &len);
    if (*k < coll_nsegs(g->ctx, len)) return 1;
    (*s)++, *k = 0;
  }
}

static int post(const ring_t *g, int s, size_t k, size_t slot, comm_req_t **req) {
  size_t off, len, soff, slen;
  recv_block(g, s, &off, &len);
  coll_seg(g->ctx, len, k, &soff, &slen);
  int left = mod(g->r - 1, g->P);
  return coll_post_recv(g->ctx, left, g->tag, g->buf + off + soff, slen, s < g->P - 1, slot, req);
}

/* Sends segment k of the block received at step s on to the right. */
static int forward(const ring_t *g, int s, size_t k) {
  size_t off, len, soff, slen;
  comm_req_t *req;
  recv_block(g, s, &off, &len);
  coll_seg(g->ctx, len, k, &soff, &slen);
  DT_TRY(comm_isend(g->ctx->comm, mod(g->r + 1, g->P), g->tag, g->buf + off + soff,
                    slen * sizeof(float), &req));
  return coll_track_send(g->ctx, req);
}

int coll_ring_steps(coll_ctx_t *ctx, float *buf, size_t count, int first, int last, int tag) {
  comm_t *c = ctx->comm;
  ring_t g = {ctx, buf, count, c->size, c->rank, last, tag};
  if (g.P == 1 || count == 0 || first >= last) return 0;
  /* the first step sends a block this rank already has */
  size_t off, len;
  coll_block(count, g.P, mod(g.r - first - 1, g.P), &off, &len);
  DT_TRY(coll_send(ctx, mod(g.r + 1, g.P), tag, buf + off, len));
  comm_req_t *win[COLL_WINDOW];
  int ps = first, ds = first, rc = 0;   /* next item to post, next to complete */
  size_t pk = (size_t)-1, dk = (size_t)-1, posted = 0, done = 0;
  int more_post = next_item(&g, &ps, &pk), more_done = next_item(&g, &ds, &dk);
  while (more_done && rc == 0) {
    while (rc == 0 && more_post && posted < done + COLL_WINDOW) {
      rc = post(&g, ps, pk, posted, &win[posted % COLL_WINDOW]);
      if (rc == 0) posted++, more_post = next_item(&g, &ps, &pk);
    }
    if (rc == 0) rc = comm_wait(c, win[done++ % COLL_WINDOW]);
    if (rc == 0 && ds + 1 < last) rc = forward(&g, ds, dk);
    more_done = next_item(&g, &ds, &dk);
  }
  for (; done < posted; done++) comm_cancel(c, win[done % COLL_WINDOW]);
  if (rc == 0) return coll_wait_sends(ctx);
  coll_cancel_sends(ctx);
  return -1;
}

int allreduce_ring(coll_ctx_t *ctx, float *buf, size_t count) {
  int P = ctx->comm->size;
  if (coll_ring_steps(ctx, buf, count, 0, 2 * P - 2, TAG_RING) != 0)
    return dt_error_prefix("allreduce ring: ");
  return 0;
}
