/* The sparse butterfly that SparCML's split allgather and Kylix run
 * (sparse_sparcml_split.c, sparse_kylix.c): a sparse reduce-scatter by
 * index range, layer by layer, then the allgather back up.
 *
 * Layers l = 0 .. L-1 of degrees d_l (their product P). Rank r's digit at
 * layer l is (r / s_l) % d_l, s_l the product of the degrees below l; its
 * group there is the d_l ranks that differ from it in that digit alone,
 * and they hold the same range. Down: the range is cut into d_l parts
 * (coll_block), part j to member j; each member sums the d_l vectors of
 * its part in member order (rank order within the group) and keeps that
 * part as its range. After the last layer rank r holds the total of its
 * 1/P of the indices. Up, from the last layer to the first: each member
 * sends its range's total to the others of its group, and each joins the
 * d_l parts into the range it had before the layer.
 *
 * Messages are sparse_coll.h's: a count, then pairs (split 0) or an index
 * message then a value message (split 1), dense past the break-even; a
 * vector that went dense stays dense (a part of it is sent dense, a join
 * with a dense part is dense).
 * Steps: 2 L exchanges, each with d_l - 1 peers.
 * Bytes: sparse_butterfly_bytes (sparse_cost.c) gives them exactly; in
 * closed form, with sets of k pairs spread evenly and no part dense, rank
 * r sends sum_l (d_l - 1) 8 u_l / (d_0 ... d_l) + (P - 1) 8 U / P
 * (+ 8 a message), u_l the union of the s_l ranks below layer l and U
 * all ranks'; for one layer (d_0 = P) that is (P - 1)/P 8 (k + U).
 * Sum order: member order at each layer, the same on every rank; with one
 * layer that is rank order, the allgather's own: the same bits. */
#include <string.h>

#include "compress/sparse_coll.h"

/* A buffer of the three that holds neither a nor b (-1: none). */
static int free_buf(int a, int b) {
  for (int i = 0; i < 3; i++)
    if (i != a && i != b) return i;
  return 0;
}

/* The d parts of [lo, hi): part j is [lo + o, lo + o + len). */
static void part(size_t lo, size_t hi, int d, int j, size_t *plo, size_t *phi) {
  size_t o, len;
  coll_block(hi - lo, d, j, &o, &len);
  *plo = lo + o, *phi = lo + o + len;
}

/* Down one layer: my part's d vectors summed in member order into a
 * buffer; *cur becomes it, *cur_buf its buffer. */
static int down(sparse_ws_t *w, comm_t *c, int split, int d, int digit, int base, int stride,
                svec_t *cur, int *cur_buf) {
  int peers[SPARSE_MAX_RANKS] = {0}, np = 0;
  svec_t outv[SPARSE_MAX_RANKS] = {{0}}, rng[SPARSE_MAX_RANKS] = {{0}}, in[SPARSE_MAX_RANKS];
  size_t mlo, mhi;
  part(cur->lo, cur->hi, d, digit, &mlo, &mhi);
  for (int j = 0; j < d; j++) {
    if (j == digit) continue;
    size_t plo, phi;
    part(cur->lo, cur->hi, d, j, &plo, &phi);
    peers[np] = base + j * stride;
    outv[np] = sv_slice(cur, plo, phi);
    rng[np++] = (svec_t){.lo = mlo, .hi = mhi};
  }
  DT_TRY(sv_exchange(w, c, split, np, peers, outv, np, peers, rng, in));
  svec_t mine = sv_slice(cur, mlo, mhi), acc = digit == 0 ? mine : in[0];
  int acc_buf = -1;
  for (int j = 1, at = digit == 0 ? 0 : 1; j < d; j++) {
    const svec_t *next = j == digit ? &mine : &in[at++];
    int b = free_buf(*cur_buf, acc_buf);
    svec_t sum = {.idx = w->idx[b], .val = w->val[b]};
    sv_add(&acc, next, &sum);
    acc = sum, acc_buf = b;
  }
  if (!acc.dense && 2 * acc.k > mhi - mlo) { /* past the break-even: dense from here on */
    int b = free_buf(*cur_buf, acc_buf);
    sv_densify(&acc, w->val[b], &acc);
    acc_buf = b;
  }
  *cur = acc, *cur_buf = acc_buf;
  return 0;
}

/* Up one layer: my range's total to the group, the d ranges joined. */
static int up(sparse_ws_t *w, comm_t *c, int split, int d, int digit, int base, int stride,
              size_t plo, size_t phi, svec_t *cur, int *cur_buf) {
  int peers[SPARSE_MAX_RANKS] = {0}, np = 0;
  svec_t outv[SPARSE_MAX_RANKS] = {{0}}, rng[SPARSE_MAX_RANKS] = {{0}}, in[SPARSE_MAX_RANKS], *parts[SPARSE_MAX_RANKS];
  for (int j = 0; j < d; j++) {
    if (j == digit) continue;
    size_t lo, hi;
    part(plo, phi, d, j, &lo, &hi);
    peers[np] = base + j * stride;
    outv[np] = *cur;
    rng[np++] = (svec_t){.lo = lo, .hi = hi};
  }
  DT_TRY(sv_exchange(w, c, split, np, peers, outv, np, peers, rng, in));
  size_t total = 0;
  int dense = 0;
  for (int j = 0, at = 0; j < d; j++) {
    parts[j] = j == digit ? cur : &in[at++];
    dense |= sv_wire_dense(parts[j]), total += parts[j]->k;
  }
  int b = free_buf(*cur_buf, -1);
  svec_t joined = {.idx = w->idx[b], .val = w->val[b], .lo = plo, .hi = phi};
  if (dense || 2 * total > phi - plo) {
    memset(joined.val, 0, (phi - plo) * sizeof *joined.val);
    for (int j = 0; j < d; j++) {
      svec_t dv;
      sv_densify(parts[j], joined.val + (parts[j]->lo - plo), &dv);
    }
    joined.dense = 1;
  } else {
    for (int j = 0; j < d; j++) {
      memcpy(joined.idx + joined.k, parts[j]->idx, parts[j]->k * sizeof *joined.idx);
      memcpy(joined.val + joined.k, parts[j]->val, parts[j]->k * sizeof *joined.val);
      joined.k += parts[j]->k;
    }
  }
  *cur = joined, *cur_buf = b;
  return 0;
}

int sparse_butterfly(sparse_ws_t *w, comm_t *c, const int *degrees, int ndeg, int split,
                     const uint32_t *idx, const float *val, size_t k, size_t n, float *out) {
  int P = comm_size(c), r = comm_rank(c), prod = 1;
  for (int l = 0; l < ndeg; l++) prod *= degrees[l];
  if (prod != P || ndeg > SPARSE_MAX_LAYERS || P > SPARSE_MAX_RANKS)
    return dt_error("sparse butterfly: degrees whose product is %d on %d ranks (a bug)", prod, P);
  DT_TRY(sparse_ws_grow(w, n));
  svec_t cur = {.idx = (uint32_t *)idx, .val = (float *)val, .k = k, .lo = 0, .hi = n};
  int cur_buf = -1, stride[SPARSE_MAX_LAYERS + 1];
  size_t lo[SPARSE_MAX_LAYERS + 1], hi[SPARSE_MAX_LAYERS + 1];
  stride[0] = 1;
  for (int l = 0; l < ndeg; l++) {
    int d = degrees[l], digit = r / stride[l] % d;
    lo[l] = cur.lo, hi[l] = cur.hi;
    DT_TRY(down(w, c, split, d, digit, r - digit * stride[l], stride[l], &cur, &cur_buf));
    stride[l + 1] = stride[l] * d;
  }
  for (int l = ndeg - 1; l >= 0; l--) {
    int d = degrees[l], digit = r / stride[l] % d;
    DT_TRY(up(w, c, split, d, digit, r - digit * stride[l], stride[l], lo[l], hi[l], &cur, &cur_buf));
  }
  sv_write(&cur, out);
  return 0;
}
