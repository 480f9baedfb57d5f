/* SparCML's sparse allreduce by recursive doubling (Renggli, Ashkboos,
 * Aghagolzadeh, Alistarh, Hoefler, SC 2019: SSAR_Recursive_double).
 *
 * P' is the largest power of two <= P. The P - P' extra ranks r >= P'
 * first fold into rank r - P' (their vector sent, merged there) and get
 * the result back at the end. Then lg P' stages: at stage s, rank r and
 * r ^ 2^s exchange what each holds -- the union of the index sets of its
 * block of 2^s ranks (and their folded extras), values summed -- and
 * merge. So a message carries the union seen so far, not every rank's
 * pairs: with overlapping sets it stays near k, where the allgather moves
 * (P - 1) k pairs. When a merged vector passes the break-even (2u > n:
 * its pairs would be more bytes than its dense values) it goes dense, in
 * the middle of the reduction, and stays dense (sparse_coll.h).
 *
 * Steps: lg P' exchanges of two messages each (count, payload); + 2 when
 * P is not a power of two.
 * Bytes sent by rank r < P' (B_s(r): the ranks of its block before stage
 * s, folded extras included; U(B): the union of their index sets;
 * msg(u, n) = 8 + (2u > n ? 4n : 8u)):
 *     sum_{s < lg P'} msg(|U(B_s(r))|, n)  [+ msg(|U(all)|, n) to its extra]
 * received: the same over its partners' blocks [+ msg(k_extra, n)]; an
 * extra rank sends msg(k, n) and receives msg(|U(all)|, n). Identical
 * sets: lg P' msg(k, n); disjoint: 8 k (P' - 1) at most, the allgather's
 * 8 k (P - 1) when P = P'.
 * Sum order: a fixed tree, v_r + v_{r+P'} first, then blocks of 2, 4, ...:
 * the same bits on every rank and run, and within rounding (P - 1 sums in
 * another order) of the allgather's rank-order sum. */
#include "compress/sparse_coll.h"

int sparse_sparcml_rd(sparse_ws_t *w, comm_t *c, const uint32_t *idx, const float *val, size_t k,
                      size_t n, float *out) {
  int P = comm_size(c), r = comm_rank(c), pof2 = 1;
  while (2 * pof2 <= P) pof2 *= 2;
  int rem = P - pof2, b = 0;
  DT_TRY(sparse_ws_grow(w, n));
  svec_t cur = {.idx = (uint32_t *)idx, .val = (float *)val, .k = k, .lo = 0, .hi = n};
  svec_t whole = {.lo = 0, .hi = n}, in;
  if (r >= pof2) { /* an extra rank: fold in, get the sum back */
    int to = r - pof2;
    DT_TRY(sv_exchange(w, c, 0, 1, &to, &cur, 0, NULL, NULL, NULL));
    DT_TRY(sv_exchange(w, c, 0, 0, NULL, NULL, 1, &to, &whole, &in));
    sv_write(&in, out);
    return 0;
  }
  if (r < rem) { /* its extra's vector first */
    int from = r + pof2;
    DT_TRY(sv_exchange(w, c, 0, 0, NULL, NULL, 1, &from, &whole, &in));
    svec_t sum = {.idx = w->idx[b], .val = w->val[b]};
    sv_add(&cur, &in, &sum);
    cur = sum, b ^= 1;
  }
  for (int s = 1; s < pof2; s *= 2) {
    int peer = r ^ s;
    if (!cur.dense && 2 * cur.k > n) { /* past the break-even: dense from here on */
      sv_densify(&cur, w->val[b], &cur);
      b ^= 1;
    }
    DT_TRY(sv_exchange(w, c, 0, 1, &peer, &cur, 1, &peer, &whole, &in));
    svec_t sum = {.idx = w->idx[b], .val = w->val[b]};
    sv_add(&cur, &in, &sum);
    cur = sum, b ^= 1;
  }
  if (r < rem) DT_TRY(sv_exchange(w, c, 0, 1, (int[]){r + pof2}, &cur, 0, NULL, NULL, NULL));
  sv_write(&cur, out);
  return 0;
}
