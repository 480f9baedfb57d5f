/* broadcast_tree: binomial tree broadcast from root.
 *
 *   steps:  ceil(lg P) rounds
 *   bytes:  every non-root rank receives S once (total (P-1) x S); a rank
 *           sends S to each of its children (root: ceil(lg P) x S)
 *
 * Bytes on the wire per rank, exactly: with vr = rank - root (mod P), the
 * children of vr are vr + m for each power of two m below vr's lowest set
 * bit (every m < P for the root) with vr + m < P; a rank with k children
 * sends k x S and receives S (the root: nothing).
 *
 * With ranks renumbered so that root is 0, a rank receives from the rank
 * that differs in its lowest set bit, then sends to rank + m for each
 * smaller power of two m, largest first, all sends in flight at once (on
 * local the children copy from the parent's buffer in parallel). */
#include "coll_internal.h"

int broadcast_tree(coll_ctx_t *ctx, int root, float *buf, size_t count) {
  comm_t *c = ctx->comm;
  int P = c->size;
  if (root < 0 || root >= P)
    return dt_error("broadcast tree: root %d is not a rank (communicator has %d)", root, P);
  if (P == 1 || count == 0) return 0;
  int vr = (c->rank - root + P) % P, mask = 1;
  while (mask < P && !(vr & mask)) mask <<= 1;
  if (mask < P && coll_recv(ctx, (vr - mask + root) % P, TAG_BCAST, buf, count, 0) != 0)
    return coll_fail(ctx, "broadcast tree");
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < P && coll_send(ctx, (vr + mask + root) % P, TAG_BCAST, buf, count) != 0)
      return coll_fail(ctx, "broadcast tree");
  if (coll_wait_sends(ctx) != 0) return dt_error_prefix("broadcast tree: ");
  return 0;
}
