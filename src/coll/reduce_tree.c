/* reduce_tree: binomial tree reduction to root.
 *
 *   steps:  ceil(lg P) rounds
 *   bytes:  every non-root rank sends S once (total (P-1) x S); a rank
 *           receives S from each of its children (root: ceil(lg P) x S)
 *
 * Bytes on the wire per rank, exactly: the reverse of broadcast_tree.c
 * (same tree): a rank with k children receives k x S and sends S (the
 * root: nothing).
 *
 * With ranks renumbered so that root is 0, in round m (mask = 1, 2, 4 ...)
 * a rank with bit m set sends its partial sum to rank - m and is done;
 * the others add what rank + m sends. The children are added in a fixed
 * order, so the sum does not depend on timing. Non-root buffers end up
 * holding partial sums. */
#include "coll_internal.h"

int reduce_tree(coll_ctx_t *ctx, int root, float *buf, size_t count) {
  comm_t *c = ctx->comm;
  int P = c->size;
  if (root < 0 || root >= P)
    return dt_error("reduce tree: root %d is not a rank (communicator has %d)", root, P);
  if (P == 1 || count == 0) return 0;
  int vr = (c->rank - root + P) % P;
  for (int mask = 1; mask < P; mask <<= 1) {
    if (vr & mask) {
      int parent = (vr - mask + root) % P;
      if (coll_send(ctx, parent, TAG_REDUCE, buf, count) != 0 || coll_wait_sends(ctx) != 0)
        return coll_fail(ctx, "reduce tree");
      break;
    }
    if (vr + mask < P && coll_recv(ctx, (vr + mask + root) % P, TAG_REDUCE, buf, count, 1) != 0)
      return coll_fail(ctx, "reduce tree");
  }
  return 0;
}
