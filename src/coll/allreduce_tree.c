/* allreduce_tree: binomial reduce to rank 0, then binomial broadcast.
 *
 *   steps:  2 ceil(lg P) rounds
 *   bytes:  each non-root rank sends S and receives S (total 2(P-1) x S);
 *           the busiest rank (0) receives and sends ceil(lg P) x S each
 *
 * Latency-bound: few rounds, but whole vectors each round, so it suits
 * small messages (see allreduce_auto.c). */
#include "coll_internal.h"

int allreduce_tree(coll_ctx_t *ctx, float *buf, size_t count) {
  if (reduce_tree(ctx, 0, buf, count) != 0 || broadcast_tree(ctx, 0, buf, count) != 0)
    return dt_error_prefix("allreduce tree: ");
  return 0;
}
