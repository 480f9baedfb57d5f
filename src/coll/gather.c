/* gather_to_root: root collects count_per_rank floats from every rank,
 * rank i's at out + i x count_per_rank.
 *
 *   steps:  P-1 messages into root, received in rank order
 *   bytes:  root receives (P-1)/P x S, S = P x count_per_rank floats
 *
 * Bytes on the wire per rank, exactly: the root receives (P-1) x
 * count_per_rank floats and sends nothing; every other rank sends
 * count_per_rank floats and receives nothing.
 *
 * Linear, as Gloo's gather: the root's link is the bottleneck whatever
 * the shape of the tree, and receiving in place needs no scratch. */
#include <string.h>

#include "coll_internal.h"

int gather_to_root(coll_ctx_t *ctx, int root, const float *in, float *out, size_t count_per_rank) {
  comm_t *c = ctx->comm;
  int P = c->size;
  if (root < 0 || root >= P)
    return dt_error("gather: root %d is not a rank (communicator has %d)", root, P);
  size_t n = count_per_rank;
  if (c->rank != root) {
    if (coll_send(ctx, root, TAG_GATHER, in, n) != 0 || coll_wait_sends(ctx) != 0)
      return coll_fail(ctx, "gather");
    return 0;
  }
  if (n) memmove(out + (size_t)root * n, in, n * sizeof(float));
  for (int i = 0; i < P; i++)
    if (i != root && coll_recv(ctx, i, TAG_GATHER, out + (size_t)i * n, n, 0) != 0)
      return coll_fail(ctx, "gather");
  return 0;
}
