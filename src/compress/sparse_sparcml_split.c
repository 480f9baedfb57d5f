/* SparCML's split allgather (Renggli et al., SC 2019: SSAR_Split_allgather),
 * for many ranks or many pairs: a sparse reduce-scatter by index range,
 * then an allgather of the reduced ranges. The n indices are cut into P
 * ranges (coll_block); rank r sends its pairs of range j to rank j, sums
 * the P vectors of its own range in rank order, then sends that range's
 * total (its union of pairs, or dense past the break-even) to every rank.
 * It is sparse_butterfly.c with one layer of degree P, pairs in one
 * message.
 * Steps: 2 exchanges, each of a count then a payload to P - 1 peers.
 * Bytes sent by rank r (k_{r,j}: its pairs in range j; U_r: the union of
 * all ranks' sets in its range R_r; msg(u, len) = 8 + (2u > len ? 4 len :
 * 8u)):
 *     sum_{j != r} msg(k_{r,j}, |R_j|) + (P - 1) msg(|U_r|, |R_r|),
 * received: sum_{j != r} msg(k_{j,r}, |R_r|) + sum_{j != r} msg(|U_j|, |R_j|).
 * Evenly spread, sparse: (P - 1)/P 8 (k + U) + 16 (P - 1), against the
 * allgather's (P - 1) 8 k: fewer bytes once U < (P - 1) k, that is unless
 * the sets are nearly disjoint (U = P k), and then dense ranges cap it.
 * Sum order: rank order, as the allgather's: the same bits as it. */
#include "compress/sparse_coll.h"

int sparse_sparcml_split(sparse_ws_t *w, comm_t *c, const uint32_t *idx, const float *val,
                         size_t k, size_t n, float *out) {
  int P = comm_size(c);
  return sparse_butterfly(w, c, &P, 1, 0, idx, val, k, n, out);
}
