/* allreduce_tree: binomial reduce to rank 0, then binomial broadcast.
 *
 *   steps:  2 ceil(lg P) rounds
 *   bytes:  a rank with k children sends and receives (k+1) x S, the root
 *           ceil(lg P) x S each way, the leaves S (total 2(P-1) x S)
 *
 * Bytes on the wire per rank, exactly: with k its children in the
 * binomial tree (broadcast_tree.c), a non-root rank sends S up and k x S
 * down and receives k x S up and S down: (k+1) x S each way; the root,
 * with ceil(lg P) children, k x S each way.
 *
 * Latency-bound: few rounds, but whole vectors each round, so it suits
 * small messages (see allreduce_auto.c). */
#include "coll_internal.h"

int allreduce_tree(coll_ctx_t *ctx, float *buf, size_t count) {
  if (reduce_tree(ctx, 0, buf, count) != 0 || broadcast_tree(ctx, 0, buf, count) != 0)
    return dt_error_prefix("allreduce tree: ");
  return 0;
}
