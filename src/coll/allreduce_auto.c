/* allreduce_auto: the decision rule, kept apart from the algorithms (as
 * Open MPI's coll/tuned decision file).
 *
 * Cost of an allreduce of S bytes on P ranks, with link latency a and
 * bandwidth b (alpha-beta model, P' = 2^floor(lg P), L = ceil(lg P)):
 *
 *   algorithm  messages in sequence         bytes in sequence
 *   tree       2 L                          2 L S
 *   rhd        2 lg P' (+2 if P != P')      2 (P'-1)/P' S (+2 S if P != P')
 *   ring       2 (P-1) (x segments)         2 (P-1)/P S
 *
 * and auto takes the cheapest: small messages are latency-bound and go to
 * tree or rhd, large ones are bandwidth-bound and go to ring or rhd. When
 * ranks outnumber cores (c->oversubscribed) a message costs a context
 * switch on a shared core, so the latency term counts the messages of all
 * ranks (tree 2(P-1), rhd 2 P lg P', ring 2 P (P-1)): measured on 4 ranks
 * and 2 cores, tree beats rhd up to ~1 MiB there. Ties
 * go to the earlier row. a and b come from the communicator's link
 * estimate (the emulated network's slowest link, on local) or from
 * coll_ctx_set_link; they are the same on every rank, so every rank picks
 * the same algorithm.
 *
 * The decision, first matching row:
 *
 *   ranks on more than one host, at least 2 on each (comm_host)   hier
 *   P <= 2                                                         rhd
 *   otherwise                                      cheapest of tree, rhd, ring
 *
 * hier first because the cost above prices every message at the slowest
 * link: with hosts, a flat algorithm's rounds cross the slow links
 * between hosts, while hier sends only S/m per rank across them (m ranks
 * a host) and the rest over the fast links inside (allreduce_hier.c).
 * Its latency term (2(m-1) messages inside a host + the inter-host
 * algorithm's) can exceed a flat rhd's 2 lg P for tiny messages and many
 * ranks per host; auto does not weigh that, since on mpi the links
 * between hosts are not measured. naive (a baseline) and shm (local only,
 * no messages) are never chosen. Bytes on the wire: those of the
 * algorithm it picks (allreduce_choose says which). */
#include <math.h>

#include "coll_internal.h"

typedef struct {
  allreduce_algo_t algo;
  double messages, bytes; /* coefficients of a and of S / b */
} cost_t;

static int ceil_lg(int p) {
  int l = 0;
  while ((1 << l) < p) l++;
  return l;
}

static int floor_lg(int p) { return ceil_lg(p + 1) - 1; }

static void costs(int P, size_t segments, int oversubscribed, cost_t out[3]) {
  int L = ceil_lg(P), lp = floor_lg(P), pof2 = 1 << lp, odd = P != pof2;
  double segs = (double)segments;
  if (oversubscribed) { /* every message of every rank takes a turn on a core */
    out[0] = (cost_t){ALLREDUCE_TREE, 2.0 * (P - 1) * segs, 2.0 * L};
    out[1] = (cost_t){ALLREDUCE_RHD, (2.0 * lp * pof2 + 4 * (P - pof2)) * segs,
                      2.0 * (pof2 - 1) / pof2 + 2 * odd};
    out[2] = (cost_t){ALLREDUCE_RING, 2.0 * P * (P - 1) * segs, 2.0 * (P - 1) / P};
    return;
  }
  out[0] = (cost_t){ALLREDUCE_TREE, 2.0 * L, 2.0 * L};
  out[1] = (cost_t){ALLREDUCE_RHD, 2.0 * lp + 2 * odd, 2.0 * (pof2 - 1) / pof2 + 2 * odd};
  out[2] = (cost_t){ALLREDUCE_RING, 2.0 * (P - 1) * segs, 2.0 * (P - 1) / P};
}

allreduce_algo_t coll_choose_flat(coll_ctx_t *ctx, size_t count) {
  int P = ctx->comm->size;
  if (P <= 2) return ALLREDUCE_RHD; /* one exchange of halves each way: nothing beats it */
  double S = (double)count * sizeof(float);
  size_t segs = coll_nsegs(ctx, count / (size_t)P + 1);
  cost_t c[3];
  costs(P, segs ? segs : 1, ctx->comm->oversubscribed, c);
  int best = 0;
  double best_t = INFINITY;
  for (int i = 0; i < 3; i++) {
    double t = c[i].messages * ctx->latency + c[i].bytes * S / ctx->bandwidth;
    if (t < best_t) best_t = t, best = i;
  }
  return c[best].algo;
}

allreduce_algo_t allreduce_choose(coll_ctx_t *ctx, size_t count) {
  if (ctx->hosts_worth_it) return ALLREDUCE_HIER;
  return coll_choose_flat(ctx, count);
}
