/* cost: what each allreduce algorithm costs, as functions anyone may call
 * (allreduce_auto's decision, a strategy's describe_step, the planner).
 *
 * Bytes: exactly what the transport counts on one rank (its payload sent
 * and received), from the per-rank formulas in each algorithm's header;
 * tests/e2e_bytes.sh compares them with the transport's count.
 *
 * Time: the alpha-beta model, t = messages x a + bytes x S / b, with the
 * coefficients of allreduce_auto.c's table (messages and bytes in
 * sequence on the critical path; oversubscribed: every message of every
 * rank takes a turn on a shared core). */
#include <math.h>

#include "coll_internal.h"

static int ceil_lg(int p) {
  int l = 0;
  while ((1 << l) < p) l++;
  return l;
}

static int floor_lg(int p) { return ceil_lg(p + 1) - 1; }

static size_t block_len(size_t count, int parts, int i) {
  size_t off, len;
  coll_block(count, parts, ((i % parts) + parts) % parts, &off, &len);
  return len;
}

/* The ring's halves, in floats: rank r's reduce-scatter sends every block
 * but b_r and receives every block but b_{r-1}; its allgather sends every
 * block but b_{r+1} and receives every block but b_r. */
static void scatter_floats(int P, int r, size_t n, size_t *sent, size_t *recv) {
  *sent = n - block_len(n, P, r);
  *recv = n - block_len(n, P, r - 1);
}

static void gather_floats(int P, int r, size_t n, size_t *sent, size_t *recv) {
  *sent = n - block_len(n, P, r + 1);
  *recv = n - block_len(n, P, r);
}

/* Ring: a reduce-scatter, then an allgather (2S - |b_r| - |b_{r+1}| sent,
 * 2S - |b_{r-1}| - |b_r| received). */
static void ring_bytes(int P, int r, size_t n, size_t *sent, size_t *recv) {
  size_t s1, r1, s2, r2;
  scatter_floats(P, r, n, &s1, &r1);
  gather_floats(P, r, n, &s2, &r2);
  *sent = s1 + s2;
  *recv = r1 + r2;
}

void coll_reduce_scatter_bytes(int P, int rank, size_t count, size_t *sent, size_t *received) {
  *sent = *received = 0;
  if (P <= 1 || count == 0) return;
  scatter_floats(P, rank, count, sent, received);
  *sent *= sizeof(float), *received *= sizeof(float);
}

void coll_allgather_bytes(int P, int rank, size_t count, size_t *sent, size_t *received) {
  *sent = *received = 0;
  if (P <= 1 || count == 0) return;
  gather_floats(P, rank, count, sent, received);
  *sent *= sizeof(float), *received *= sizeof(float);
}

/* Recursive halving-doubling: each level of width w exchanges the aligned
 * range of w blocks holding the rank's own, both ways; of the first 2(P -
 * P') ranks the even ones only fold (S each way) and the odd ones add S
 * each way. */
static void rhd_bytes(int P, int r, size_t n, size_t *sent, size_t *recv) {
  int pof2 = 1 << floor_lg(P), rem = P - pof2;
  int folded = r < 2 * rem;
  if (folded && r % 2 == 0) {
    *sent = *recv = n;
    return;
  }
  int nr = folded ? r / 2 : r - rem;
  size_t total = folded ? n : 0;
  for (int w = pof2; w >= 2; w /= 2) {
    int lo = nr - nr % w;
    for (int b = lo; b < lo + w; b++) total += block_len(n, pof2, b);
  }
  *sent = *recv = total;
}

/* Binomial tree rooted at 0: a rank with k children sends and receives
 * (k + 1) x S; the root k x S (k = ceil(lg P)). */
static int tree_children(int P, int root, int rank);
static void tree_bytes(int P, int r, size_t n, size_t *sent, size_t *recv) {
  *sent = *recv = (size_t)(tree_children(P, 0, r) + (r != 0)) * n;
}

/* Children of `rank` in the binomial tree rooted at `root` (broadcast_tree.c,
 * reduce_tree.c): vr = rank - root mod P; vr + m for each power of two m
 * below vr's lowest set bit (every m < P for the root), vr + m < P. */
static int tree_children(int P, int root, int rank) {
  int vr = ((rank - root) % P + P) % P, k = 0;
  int low = vr == 0 ? P : (vr & -vr);
  for (int m = 1; m < low && vr + m < P; m *= 2) k++;
  return k;
}

void coll_tree_bytes(int reduce, int P, int root, int rank, size_t count, size_t *sent,
                     size_t *received) {
  size_t S = count * sizeof(float), down = (size_t)tree_children(P, root, rank) * S;
  size_t up = P > 1 && rank != root ? S : 0;
  *sent = reduce ? up : down;
  *received = reduce ? down : up;
}

int coll_allreduce_bytes(allreduce_algo_t algo, int P, int rank, size_t count, size_t *sent,
                         size_t *received) {
  *sent = *received = 0;
  if (P <= 1 || count == 0) return 0;
  size_t s = 0, rv = 0;
  switch (algo) {
  case ALLREDUCE_RING: ring_bytes(P, rank, count, &s, &rv); break;
  case ALLREDUCE_RHD: rhd_bytes(P, rank, count, &s, &rv); break;
  case ALLREDUCE_TREE: tree_bytes(P, rank, count, &s, &rv); break;
  case ALLREDUCE_NAIVE: s = rv = rank == 0 ? (size_t)(P - 1) * count : count; break;
  case ALLREDUCE_SHM: break; /* shared memory: nothing on a wire */
  default:
    return dt_error("allreduce:%s: its bytes depend on the hosts (use coll_hier bytes) or on the "
                    "choice of auto (coll_allreduce_pick)", allreduce_algo_name(algo));
  }
  *sent = s * sizeof(float);
  *received = rv * sizeof(float);
  return 0;
}

void coll_allreduce_cost(allreduce_algo_t algo, int P, size_t segments, int oversubscribed,
                         double *messages, double *bytes) {
  int L = ceil_lg(P), lp = floor_lg(P), pof2 = 1 << lp, odd = P != pof2;
  double segs = (double)(segments ? segments : 1);
  *messages = *bytes = 0;
  if (P <= 1) return;
  switch (algo) {
  case ALLREDUCE_TREE:
    *messages = oversubscribed ? 2.0 * (P - 1) * segs : 2.0 * L;
    *bytes = 2.0 * L;
    break;
  case ALLREDUCE_RHD:
    *messages = oversubscribed ? (2.0 * lp * pof2 + 4 * (P - pof2)) * segs : 2.0 * lp + 2 * odd;
    *bytes = 2.0 * (pof2 - 1) / pof2 + 2 * odd;
    break;
  case ALLREDUCE_RING:
    *messages = (oversubscribed ? 2.0 * P * (P - 1) : 2.0 * (P - 1)) * segs;
    *bytes = 2.0 * (P - 1) / P;
    break;
  case ALLREDUCE_NAIVE: /* rank 0's link carries 2 (P - 1) whole vectors */
    *messages = 2.0 * (P - 1);
    *bytes = 2.0 * (P - 1);
    break;
  default: break;
  }
}

double coll_allreduce_time(allreduce_algo_t algo, int P, size_t bytes, size_t segments,
                           int oversubscribed, double latency, double bandwidth) {
  double m, b;
  coll_allreduce_cost(algo, P, segments, oversubscribed, &m, &b);
  return comm_link_time(latency, bandwidth, m, b * (double)bytes);
}

allreduce_algo_t coll_allreduce_pick(int P, size_t count, size_t seg, int oversubscribed,
                                     double latency, double bandwidth) {
  if (P <= 2) return ALLREDUCE_RHD; /* one exchange of halves each way: nothing beats it */
  size_t per = count / (size_t)P + 1;
  size_t segs = per == 0 ? 0 : per <= seg ? 1 : (per - 1) / seg + 1;
  static const allreduce_algo_t rows[] = {ALLREDUCE_TREE, ALLREDUCE_RHD, ALLREDUCE_RING};
  allreduce_algo_t best = rows[0];
  double best_t = INFINITY;
  for (int i = 0; i < 3; i++) { /* ties go to the earlier row */
    double t = coll_allreduce_time(rows[i], P, count * sizeof(float), segs, oversubscribed,
                                   latency, bandwidth);
    if (t < best_t) best_t = t, best = rows[i];
  }
  return best;
}
