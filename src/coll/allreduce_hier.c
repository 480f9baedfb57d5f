/* allreduce_hier: two levels, as on a cluster of multi-core hosts.
 *
 *   steps:  2 ceil(lg G) (tree within groups) + the leaders' allreduce
 *   bytes:  within a group as reduce_tree + broadcast_tree; across groups
 *           as the flat algorithm auto picks for P/G leaders
 *
 * Bytes on the wire per rank, exactly: allreduce_tree's within the group
 * (a group of g ranks, the rank's place in it), plus, on a group's first
 * rank, the bytes of the algorithm auto picks for ceil(P/G) leaders at
 * the leader's place among them. Making the two communicators (comm_split)
 * sends no payload.
 *
 * Groups are G consecutive ranks (coll_ctx_set_group_size; default
 * ceil(sqrt(P))). Each group reduces to its first rank (binomial tree),
 * the first ranks allreduce among themselves, and each broadcasts the sum
 * back into its group. The two communicators (group, leaders) are made
 * with comm_split on first use and cached in the context. */
#include <math.h>

#include "coll_internal.h"

static int default_group(int P) {
  int g = (int)ceil(sqrt((double)P));
  return g < 1 ? 1 : g;
}

static int ensure_groups(coll_ctx_t *ctx, int g) {
  if (ctx->hier_group == g) return 0;
  comm_t *c = ctx->comm;
  coll_free_groups(ctx);
  int leader = c->rank % g == 0;
  if (comm_split(c, c->rank / g, c->rank, &ctx->intra) != 0 ||
      comm_split(c, leader ? 0 : 1, c->rank, &ctx->leaders) != 0 ||
      coll_ctx_new(ctx->intra, &ctx->intra_ctx) != 0 ||
      coll_ctx_new(ctx->leaders, &ctx->leaders_ctx) != 0) {
    coll_free_groups(ctx);
    return -1;
  }
  /* the sub-contexts inherit the segment size and link of the parent */
  ctx->intra_ctx->seg = ctx->leaders_ctx->seg = ctx->seg;
  coll_ctx_set_link(ctx->intra_ctx, ctx->latency, ctx->bandwidth);
  coll_ctx_set_link(ctx->leaders_ctx, ctx->latency, ctx->bandwidth);
  ctx->hier_group = g;
  return 0;
}

int allreduce_hier(coll_ctx_t *ctx, float *buf, size_t count) {
  comm_t *c = ctx->comm;
  int g = ctx->group_size > 0 ? ctx->group_size : default_group(c->size);
  if (g > c->size) g = c->size;
  if (c->size == 1 || count == 0) return 0;
  if (ensure_groups(ctx, g) != 0) return dt_error_prefix("allreduce hier: ");
  int rc = reduce_tree(ctx->intra_ctx, 0, buf, count);
  if (rc == 0 && c->rank % g == 0) {
    coll_ctx_t *lc = ctx->leaders_ctx;
    rc = allreduce(lc, coll_choose_flat(lc, count), buf, count);
  }
  if (rc == 0) rc = broadcast_tree(ctx->intra_ctx, 0, buf, count);
  return rc == 0 ? 0 : dt_error_prefix("allreduce hier: ");
}
