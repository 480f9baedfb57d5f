/* reduce_scatter_ring: rank r ends with the sum of block r (coll_block)
 * in out; in is left untouched.
 *
 *   steps:  P-1 ring steps
 *   bytes:  each rank sends (P-1)/P x S
 *
 * Bytes on the wire per rank, exactly (blocks b_i of coll_block, indices
 * mod P): rank r sends every block but b_r, S - |b_r|, and receives every
 * block but b_{r-1}, S - |b_{r-1}|; both versions.
 *
 * The first P-1 steps of allreduce_ring.c's ring, out of place: at step s
 * rank r sends its partial sum of block r-s-1 to the right, receives the
 * left's partial of block r-s-2 and adds its own input to it. Partials
 * alternate between two work buffers (the one being sent and the one being
 * received); the last step lands in out. Same order of additions as
 * allreduce_ring, so the blocks are bitwise equal to its result.
 * reduce_scatter_ring_inplace is those steps in place, pipelined as in the
 * allreduce (sharded optimizer steps use it with allgather_ring). */
#include "coll_internal.h"

static int mod(int a, int p) { return ((a % p) + p) % p; }

int reduce_scatter_ring(coll_ctx_t *ctx, const float *in, float *out, size_t count) {
  comm_t *c = ctx->comm;
  int P = c->size, r = c->rank, right = mod(r + 1, P), left = mod(r - 1, P);
  size_t off, len;
  if (P == 1) {
    if (count) kern_copy(count, in, out);
    return 0;
  }
  if (count == 0) return 0;
  size_t maxlen = count / (size_t)P + 1;
  if (!coll_work(ctx, 0, maxlen)) return dt_error_prefix("reduce-scatter ring: ");
  const float *send = NULL;
  for (int s = 0; s < P - 1; s++) {
    coll_block(count, P, mod(r - s - 1, P), &off, &len);
    if (s == 0) send = in + off;
    if (coll_send(ctx, right, TAG_REDUCE_SCATTER, send, len) != 0)
      return coll_fail(ctx, "reduce-scatter ring");
    coll_block(count, P, mod(r - s - 2, P), &off, &len);
    float *dst = s == P - 2 ? out : coll_work(ctx, s % 2, maxlen);
    if (coll_recv(ctx, left, TAG_REDUCE_SCATTER, dst, len, 0) != 0)
      return coll_fail(ctx, "reduce-scatter ring");
    kern_add(len, in + off, dst);
    if (coll_wait_sends(ctx) != 0) return dt_error_prefix("reduce-scatter ring: ");
    send = dst;
  }
  return 0;
}

int reduce_scatter_ring_inplace(coll_ctx_t *ctx, float *buf, size_t count) {
  int P = ctx->comm->size;
  double t0 = dt_trace ? dt_now() : 0;
  if (dt_trace) trace_in_flight(dt_trace, (long long)(count * sizeof *buf), t0);
  comm_stall_enter(ctx->comm, "reduce-scatter", count * sizeof *buf);
  if (coll_ring_steps(ctx, buf, count, 0, P - 1, TAG_REDUCE_SCATTER) != 0)
    return dt_error_prefix("reduce-scatter ring: ");
  if (dt_trace) {
    double t1 = dt_now();
    trace_async(dt_trace, TRACE_COMM, "reduce-scatter", (long long)(count * sizeof *buf), t0, t1);
    trace_in_flight(dt_trace, -(long long)(count * sizeof *buf), t1);
  }
  return 0;
}
