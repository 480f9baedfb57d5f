/* The sparse collectives' bytes and costs (sparse_coll.h), for the tests,
 * a step's description (exchange.c's compress_exchange_bytes) and the
 * choice `sparcml` and `auto` make (sparse_pick.c).
 *
 * Bytes follow each algorithm's rules message by message, given the union
 * counts of rank sets over index ranges: exact for given index sets, and
 * bounds when the counts are bounds (they are monotone in them).
 * Time is the alpha-beta model with the expected union of g ranks' sets
 * of K pairs among n indices, n (1 - (1 - K/n)^g): the sets independent
 * and uniformly placed, SparCML's and Kylix's analysis of random sparse
 * data (gradients' top-k overlap more, which favours the merging ones
 * further). A rank's time is alpha a message it sends (count messages
 * too) + its bytes / beta. */
#include <math.h>

#include "compress/sparse_coll.h"

static uint64_t bit(int r) { return (uint64_t)1 << r; }
static uint64_t all_ranks(int P) { return P >= 64 ? ~(uint64_t)0 : bit(P) - 1; }

/* ---- recursive doubling ---------------------------------------------------- */

/* The real ranks of virtual rank v's block of width w (its extras too). */
static uint64_t rd_block(int v, int w, int pof2, int rem) {
  uint64_t m = 0;
  for (int x = v - v % w; x < v - v % w + w; x++) m |= bit(x) | (x < rem ? bit(x + pof2) : 0);
  return m;
}

void sparse_rd_bytes(int P, int rank, size_t n, sparse_union_fn u, void *arg, size_t *sent,
                     size_t *received) {
  *sent = *received = 0;
  if (P <= 1) return;
  int pof2 = 1;
  while (2 * pof2 <= P) pof2 *= 2;
  int rem = P - pof2;
  size_t total = sv_msg_bytes(u(arg, all_ranks(P), 0, n), n, 0);
  if (rank >= pof2) {
    *sent = sv_msg_bytes(u(arg, bit(rank), 0, n), n, 0);
    *received = total;
    return;
  }
  if (rank < rem) *received += sv_msg_bytes(u(arg, bit(rank + pof2), 0, n), n, 0), *sent += total;
  for (int s = 1; s < pof2; s *= 2) {
    *sent += sv_msg_bytes(u(arg, rd_block(rank, s, pof2, rem), 0, n), n, 0);
    *received += sv_msg_bytes(u(arg, rd_block(rank ^ s, s, pof2, rem), 0, n), n, 0);
  }
}

/* ---- the butterfly ------------------------------------------------------- */

static void part(size_t lo, size_t hi, int d, int j, size_t *plo, size_t *phi) {
  size_t o, len;
  coll_block(hi - lo, d, j, &o, &len);
  *plo = lo + o, *phi = lo + o + len;
}

/* A message's bytes, the sender's vector dense or not. */
static size_t msg(size_t u, size_t len, int dense) { return sv_msg_bytes(u, len, dense); }
static int wire_dense(size_t u, size_t len, int dense) { return dense || 2 * u > len; }

void sparse_butterfly_bytes(const int *degrees, int ndeg, int P, int rank, size_t n,
                            sparse_union_fn u, void *arg, size_t *sent, size_t *received) {
  *sent = *received = 0;
  if (P <= 1 || P > SPARSE_MAX_RANKS || ndeg > SPARSE_MAX_LAYERS) return;
  size_t lo[SPARSE_MAX_LAYERS + 1][SPARSE_MAX_RANKS], hi[SPARSE_MAX_LAYERS + 1][SPARSE_MAX_RANKS];
  int df[SPARSE_MAX_RANKS], nf[SPARSE_MAX_RANKS], stride[SPARSE_MAX_LAYERS + 1];
  uint64_t D[SPARSE_MAX_RANKS], ND[SPARSE_MAX_RANKS], all = all_ranks(P);
  for (int m = 0; m < P; m++) lo[0][m] = 0, hi[0][m] = n, df[m] = 0, D[m] = bit(m);
  stride[0] = 1;
  for (int l = 0; l < ndeg; l++) { /* down: what each rank holds after layer l */
    int d = degrees[l], s = stride[l];
    for (int m = 0; m < P; m++) {
      int digit = m / s % d, base = m - digit * s;
      part(lo[l][m], hi[l][m], d, digit, &lo[l + 1][m], &hi[l + 1][m]);
      size_t a = lo[l + 1][m], b = hi[l + 1][m];
      ND[m] = 0, nf[m] = 0;
      for (int j = 0; j < d; j++) {
        int p = base + j * s;
        ND[m] |= D[p];
        nf[m] |= wire_dense(u(arg, D[p], a, b), b - a, df[p]);
        if (m != rank || p == rank) continue;
        size_t plo, phi;
        part(lo[l][m], hi[l][m], d, j, &plo, &phi);
        *sent += msg(u(arg, D[m], plo, phi), phi - plo, df[m]);
        *received += msg(u(arg, D[p], a, b), b - a, df[p]);
      }
      nf[m] |= 2 * u(arg, ND[m], a, b) > b - a;
    }
    for (int m = 0; m < P; m++) D[m] = ND[m], df[m] = nf[m];
    stride[l + 1] = s * d;
  }
  for (int l = ndeg - 1; l >= 0; l--) { /* up: each rank's range of layer l to its group */
    int d = degrees[l], s = stride[l];
    for (int m = 0; m < P; m++) {
      int digit = m / s % d, base = m - digit * s;
      nf[m] = 0;
      for (int j = 0; j < d; j++) {
        int p = base + j * s;
        size_t a = lo[l + 1][p], b = hi[l + 1][p], up = u(arg, all, a, b);
        nf[m] |= wire_dense(up, b - a, df[p]);
        if (m != rank || p == rank) continue;
        *received += msg(up, b - a, df[p]);
        *sent += msg(u(arg, all, lo[l + 1][m], hi[l + 1][m]), hi[l + 1][m] - lo[l + 1][m], df[m]);
      }
      nf[m] |= 2 * u(arg, all, lo[l][m], hi[l][m]) > hi[l][m] - lo[l][m];
    }
    for (int m = 0; m < P; m++) df[m] = nf[m];
  }
}

/* ---- degrees ------------------------------------------------------------- */

static void factor(int P, int *cur, int depth, int out[][SPARSE_MAX_LAYERS], int *len, int cap,
                   int *count) {
  if (P == 1) {
    if (*count < cap && depth > 0) {
      for (int i = 0; i < depth; i++) out[*count][i] = cur[i];
      len[(*count)++] = depth;
    }
    return;
  }
  if (depth == SPARSE_MAX_LAYERS) return;
  for (int d = 2; d <= P; d++)
    if (P % d == 0) cur[depth] = d, factor(P / d, cur, depth + 1, out, len, cap, count);
}

int sparse_degree_lists(int P, int out[][SPARSE_MAX_LAYERS], int *len, int cap) {
  int cur[SPARSE_MAX_LAYERS], count = 0;
  factor(P, cur, 0, out, len, cap, &count);
  return count;
}

/* ---- costs --------------------------------------------------------------- */

static double expected_union(size_t n, double K, double g) {
  if (n == 0) return 0;
  double d = K / (double)n;
  return d >= 1 ? (double)n : (double)n * (1 - pow(1 - d, g));
}

/* A message of u expected pairs of a range of len values: 8 + the lesser. */
static double msg_cost(double u, double len) { return 8 + fmin(8 * u, 4 * len); }

double sparse_cost_allgather(int P, size_t enc, int fixed, double alpha, double beta) {
  double peers = P - 1, per = (double)enc + (fixed ? 0 : 8);
  return alpha * peers * (fixed ? 1 : 2) + peers * per / beta;
}

double sparse_cost_rd(int P, size_t n, double K, double alpha, double beta) {
  int pof2 = 1, stages = 0;
  while (2 * pof2 <= P) pof2 *= 2, stages++;
  double per = (double)P / pof2, bytes = 0, msgs = 2.0 * stages;
  for (int s = 1; s < pof2; s *= 2) bytes += msg_cost(expected_union(n, K, s * per), (double)n);
  if (P != pof2) { /* the fold and the result's return, on the critical path */
    msgs += 4;
    bytes += msg_cost(K, (double)n) + msg_cost(expected_union(n, K, P), (double)n);
  }
  return alpha * msgs + bytes / beta;
}

double sparse_cost_butterfly(const int *degrees, int ndeg, int split, size_t n, double K,
                             double alpha, double beta) {
  double below = 1, frac = 1, bytes = 0, msgs = 0, P = 1;
  for (int l = 0; l < ndeg; l++) P *= degrees[l];
  for (int l = 0; l < ndeg; l++) {
    double d = degrees[l];
    frac /= d;
    double len = (double)n * frac;
    msgs += 2 * (d - 1) * (split ? 3 : 2);
    bytes += (d - 1) * msg_cost(expected_union(n, K, below) * frac, len);   /* down */
    bytes += (d - 1) * msg_cost(expected_union(n, K, P) * frac, len);       /* up */
    below *= d;
  }
  return alpha * msgs + bytes / beta;
}

int sparse_kylix_degrees(int P, size_t n, double K, double alpha, double beta, int *degrees) {
  int lists[64][SPARSE_MAX_LAYERS], len[64];
  int count = sparse_degree_lists(P, lists, len, 64), best = 0;
  double best_t = INFINITY;
  for (int i = 0; i < count; i++) { /* ties to the earlier: fewer, smaller-first layers */
    double t = sparse_cost_butterfly(lists[i], len[i], 1, n, K, alpha, beta);
    if (t < best_t) best_t = t, best = i;
  }
  if (count == 0) {
    degrees[0] = P;
    return 1;
  }
  for (int l = 0; l < len[best]; l++) degrees[l] = lists[best][l];
  return len[best];
}
