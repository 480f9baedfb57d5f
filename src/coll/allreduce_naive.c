/* allreduce_naive: every rank sends its vector to rank 0, which adds them
 * in rank order and sends the sum back to each: a single parameter server.
 *
 *   steps:  2(P-1) messages through rank 0, one after another
 *   bytes:  rank 0 receives (P-1) x S and sends (P-1) x S (total 2(P-1) x S);
 *           every other rank sends S and receives S
 *
 * The baseline the other algorithms are measured against: rank 0's link
 * carries everything. */
#include "coll_internal.h"

int allreduce_naive(coll_ctx_t *ctx, float *buf, size_t count) {
  comm_t *c = ctx->comm;
  int P = c->size;
  if (P == 1 || count == 0) return 0;
  int rc = 0;
  if (c->rank == 0) {
    for (int i = 1; i < P && rc == 0; i++) rc = coll_recv(ctx, i, TAG_NAIVE, buf, count, 1);
    for (int i = 1; i < P && rc == 0; i++) rc = coll_send(ctx, i, TAG_NAIVE, buf, count);
  } else {
    rc = coll_send(ctx, 0, TAG_NAIVE, buf, count);
    if (rc == 0) rc = coll_wait_sends(ctx);
    if (rc == 0) rc = coll_recv(ctx, 0, TAG_NAIVE, buf, count, 0);
  }
  if (rc == 0) rc = coll_wait_sends(ctx);
  return rc == 0 ? 0 : coll_fail(ctx, "allreduce naive");
}
