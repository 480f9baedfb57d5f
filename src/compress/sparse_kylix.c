/* Kylix's sparse allreduce (Zhao & Canny, ICPP 2014): a nested butterfly
 * of heterogeneous degrees d_0 x d_1 x ... = P, each layer a sparse
 * reduce-scatter by index range within groups of d_l ranks, then the
 * allgather back up through the same layers (sparse_butterfly.c). Each
 * message goes index then value: the indices first, then the values,
 * as Kylix's configuration pass (which indices a node sends and wants)
 * precedes its reduction pass. Kylix reuses a configuration over many
 * reductions of the same index sets (PageRank's iterations); a gradient's
 * indices change every step, so here both passes run every step and the
 * bytes are the pairs' own (dense past SparCML's break-even, which Kylix
 * has not: its data are power-law sparse to the end).
 * The degrees are Kylix's trade: fewer peers per layer (sum (d_l - 1)
 * messages instead of P - 1) against more layers, whose ranges carry the
 * union of more ranks; sparse_kylix_degrees (sparse_cost.c) picks them by
 * the alpha-beta cost with the expected union, as the paper sizes its
 * layers by the packet sizes the network needs.
 * Steps: 2 L exchanges, each of 3 messages to d_l - 1 peers (count,
 * indices, values).
 * Bytes: sparse_butterfly.c's, exactly sparse_butterfly_bytes; one layer
 * (d_0 = P) moves the split allgather's bytes in more messages.
 * Sum order: member order at each layer: ((v0 + v1) + (v2 + v3)) for 2 x 2,
 * the same on every rank; within rounding of the allgather's. */
#include "compress/sparse_coll.h"

int sparse_kylix(sparse_ws_t *w, comm_t *c, const int *degrees, int ndeg, const uint32_t *idx,
                 const float *val, size_t k, size_t n, float *out) {
  return sparse_butterfly(w, c, degrees, ndeg, 1, idx, val, k, n, out);
}
