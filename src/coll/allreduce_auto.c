/* allreduce_auto: the decision rule, kept apart from the algorithms (as
 * Open MPI's coll/tuned decision file).
 *
 * Cost of an allreduce of S bytes on P ranks (coll_allreduce_cost in
 * cost.c, public), with link latency a and
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
#include "coll_internal.h"

allreduce_algo_t coll_choose_flat(coll_ctx_t *ctx, size_t count) {
  return coll_allreduce_pick(ctx->comm->size, count, ctx->seg, ctx->comm->oversubscribed,
                             ctx->latency, ctx->bandwidth);
}

allreduce_algo_t allreduce_choose(coll_ctx_t *ctx, size_t count) {
  if (ctx->hosts_worth_it) return ALLREDUCE_HIER;
  return coll_choose_flat(ctx, count);
}
