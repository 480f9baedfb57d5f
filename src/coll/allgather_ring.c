/* allgather_ring: every rank contributes block r (coll_block) of buf, in
 * place, and all end with all blocks.
 *
 *   steps:  P-1 ring steps, pipelined in segments
 *   bytes:  each rank sends (P-1)/P x S
 *
 * Bytes on the wire per rank, exactly (blocks b_i of coll_block, indices
 * mod P): rank r sends every block but b_{r+1}, S - |b_{r+1}|, and
 * receives every block but its own, S - |b_r|.
 *
 * These are the last P-1 steps of the unified ring of allreduce_ring.c:
 * at step t rank r sends block r-t to the right and receives block r-t-1
 * from the left, forwarding each segment as it arrives. */
#include "coll_internal.h"

int allgather_ring(coll_ctx_t *ctx, float *buf, size_t count) {
  int P = ctx->comm->size;
  double t0 = dt_trace ? dt_now() : 0;
  if (dt_trace) trace_in_flight(dt_trace, (long long)(count * sizeof *buf), t0);
  comm_stall_enter(ctx->comm, "allgather", count * sizeof *buf);
  if (coll_ring_steps(ctx, buf, count, P - 1, 2 * P - 2, TAG_ALLGATHER) != 0)
    return dt_error_prefix("allgather ring: ");
  if (dt_trace) {
    double t1 = dt_now();
    trace_async(dt_trace, TRACE_COMM, "allgather", (long long)(count * sizeof *buf), t0, t1);
    trace_in_flight(dt_trace, -(long long)(count * sizeof *buf), t1);
  }
  return 0;
}
