/* allreduce_hier: two levels, by host (the hierarchical allreduce of
 * Horovod and NCCL). Inside a host the links are fast and every rank has
 * one; between hosts they are slow, so only a 1/m share of the vector
 * crosses them from each rank, and all m ranks of a host use their links
 * to the other hosts at once.
 *
 * H hosts, host h with L_h ranks, m = min L_h, S bytes cut into m blocks
 * b_0 .. b_{m-1} (coll_block). A rank's local index j is its place among
 * the ranks of its host (by rank).
 *
 *   0. fold (only when hosts differ in size): a rank with j >= m sends
 *      its whole vector to the rank of its host with index j mod m, which
 *      adds it (in increasing j) and sits in for it;
 *   1. reduce-scatter inside each host: a ring over its m ranks
 *      (reduce_scatter_ring_inplace); rank j then holds the host's sum
 *      of block b_j;
 *   2. allreduce of b_j between hosts, among the H ranks with index j
 *      (one per host, in host order): the flat algorithm auto picks for
 *      H ranks and |b_j| (ring, rhd or tree);
 *   3. allgather inside each host: the ring again (allgather_ring);
 *   4. unfold: each folded rank gets the whole result from its partner.
 *
 *   steps:  2(m-1) ring steps inside a host + the inter-host allreduce's
 *           (ring 2(H-1), rhd 2 lg H) (+2 whole-vector messages when folding)
 *   bytes:  inside a host 2(m-1)/m x S per rank; between hosts the
 *           inter-host algorithm's bytes on S/m (ring and rhd with H a
 *           power of two: 2(H-1)/H x S/m); folding adds S each way
 *
 * Bytes on the wire per rank, exactly (blocks: count cut into m by
 * coll_block; indices mod m): an active rank with index j on host h sends
 * allreduce_ring's row for m ranks, 2S - |b_j| - |b_{j+1}|, plus the
 * inter-host algorithm's row for H ranks, rank h, |b_j| floats, plus S
 * to each rank that folds into it; it receives 2S - |b_{j-1}| - |b_j|,
 * the inter-host row, and S from each rank that folds into it. A folded
 * rank sends S and receives S. Making the communicators sends no payload.
 *
 * Time in the alpha-beta model, links alpha_i, beta_i inside a host and
 * alpha_e, beta_e between hosts (no folding; the slower step of a ring
 * sets its pace):
 *   T = 2(m-1) (alpha_i + S/(m beta_i)) + T_e(H, S/m), with
 *   T_e ring = 2(H-1) (alpha_e + S/(m H beta_e)),
 *   T_e rhd  = 2 lg H alpha_e + 2 (H-1)/H S/(m beta_e)   (H a power of two).
 * The flat ring over all P = m H ranks, whose ring crosses a host
 * boundary, runs at the pace of the slow link:
 *   T_ring = 2(P-1) (alpha_e + S/(P beta_e)).
 * 2 hosts x 2 ranks, 10 Gbit/s and 5 us inside, 1 Gbit/s and 50 us
 * between, S = 1 MiB: T = 2 (5 us + 419 us) + 2 (50 us + 2.10 ms) = 5.14 ms
 * against T_ring = 6 (50 us + 2.10 ms) = 12.9 ms.
 *
 * Hosts: the communicator's (comm_host), or, when the communicator is on
 * one host or a group size is set (coll_ctx_set_group_size), groups of G
 * consecutive ranks taken as hosts (G = the size set, default ceil(sqrt
 * P)). The two communicators (inside a host; same index across hosts) are
 * made with comm_split on first use and cached in the context. Every
 * addition is in an order fixed by the ranks, never by timing: the same
 * bits on every rank, run to run. */
#include <math.h>
#include <stdlib.h>

#include "coll_internal.h"

struct coll_hier {
  int key;               /* the group size it was made for (0 = the default) */
  int hosts, per_host;   /* H, m */
  int host, local;       /* this rank's host and index within it */
  int partner;           /* a folded rank: the rank it folds into; -1 otherwise */
  int *folded, nfolded;  /* an active rank: the ranks that fold into it, by index */
  comm_t *intra, *inter;
  coll_ctx_t *intra_ctx, *inter_ctx;
};

void coll_free_hier(coll_ctx_t *ctx) {
  struct coll_hier *h = ctx->hier;
  if (!h) return;
  coll_ctx_free(h->intra_ctx);
  coll_ctx_free(h->inter_ctx);
  comm_free(h->intra);
  comm_free(h->inter);
  free(h->folded);
  free(h);
  ctx->hier = NULL;
}

void coll_hier_hosts(int P, const int *comm_hosts, int nhosts, int group_size, int *host) {
  int g = group_size;
  if (g <= 0 && nhosts > 1 && comm_hosts) {
    for (int r = 0; r < P; r++) host[r] = comm_hosts[r];
    return;
  }
  if (g <= 0) g = (int)ceil(sqrt((double)P));
  if (g < 1) g = 1;
  if (g > P) g = P;
  for (int r = 0; r < P; r++) host[r] = r / g;
}

/* The host hier puts each rank on (ids 0.. in order of first rank). */
static void hier_hosts(const coll_ctx_t *ctx, int *host) {
  const comm_t *c = ctx->comm;
  coll_hier_hosts(c->size, c->host, comm_nhosts(c), ctx->group_size, host);
}

int coll_hier_place(int P, const int *host, int me, int *folded, hier_place_t *out) {
  int *local = calloc((size_t)P, sizeof(int)), *size = calloc((size_t)P, sizeof(int));
  if (!local || !size) {
    free(local), free(size);
    return dt_error("out of memory");
  }
  hier_place_t h = {0};
  for (int r = 0; r < P; r++) {
    local[r] = size[host[r]]++;
    if (host[r] + 1 > h.hosts) h.hosts = host[r] + 1;
  }
  h.per_host = P;
  for (int i = 0; i < h.hosts; i++)
    if (size[i] < h.per_host) h.per_host = size[i];
  int m = h.per_host;
  h.host = host[me], h.local = local[me], h.partner = -1;
  for (int r = 0; r < P; r++) {
    if (host[r] != h.host || r == me) continue;
    if (h.local >= m && local[r] == h.local % m) h.partner = r;
    if (h.local < m && local[r] >= m && local[r] % m == h.local) {
      if (folded) folded[h.nfolded] = r;
      h.nfolded++;
    }
  }
  free(local), free(size);
  *out = h;
  return 0;
}

/* Hosts, indices, partners (coll_hier_place); then the two communicators. */
static int hier_layout(coll_ctx_t *ctx, struct coll_hier *h) {
  comm_t *c = ctx->comm;
  int P = c->size, me = c->rank;
  int *host = calloc((size_t)P, sizeof(int));
  h->folded = malloc((size_t)P * sizeof(int));
  if (!host || !h->folded) {
    free(host);
    return dt_error("out of memory");
  }
  hier_hosts(ctx, host);
  hier_place_t pl;
  int rc = coll_hier_place(P, host, me, h->folded, &pl);
  free(host);
  if (rc != 0) return -1;
  h->hosts = pl.hosts, h->per_host = pl.per_host, h->host = pl.host, h->local = pl.local;
  h->partner = pl.partner, h->nfolded = pl.nfolded;
  int m = h->per_host, active = h->local < m;
  /* the folded ranks get communicators of their own, never used */
  if (comm_split(c, active ? h->host : h->hosts + h->host, me, &h->intra) != 0 ||
      comm_split(c, active ? h->local : m, h->host, &h->inter) != 0 ||
      coll_ctx_new(h->intra, &h->intra_ctx) != 0 || coll_ctx_new(h->inter, &h->inter_ctx) != 0)
    return -1;
  return 0;
}

static int hier_setup(coll_ctx_t *ctx) {
  struct coll_hier *h = ctx->hier;
  if (!h || h->key != ctx->group_size) {
    coll_free_hier(ctx);
    h = calloc(1, sizeof *h);
    if (!h) return dt_error("out of memory");
    h->key = ctx->group_size;
    ctx->hier = h;
    if (hier_layout(ctx, h) != 0) {
      coll_free_hier(ctx);
      return -1;
    }
  }
  /* the sub-contexts follow the parent's segment size and link */
  h->intra_ctx->seg = h->inter_ctx->seg = ctx->seg;
  coll_ctx_set_link(h->intra_ctx, ctx->latency, ctx->bandwidth);
  coll_ctx_set_link(h->inter_ctx, ctx->latency, ctx->bandwidth);
  return 0;
}

int allreduce_hier_plan(coll_ctx_t *ctx, size_t count, hier_plan_t *out) {
  if (hier_setup(ctx) != 0) return dt_error_prefix("allreduce hier: ");
  const struct coll_hier *h = ctx->hier;
  size_t off, len;
  coll_block(count, h->per_host, h->local % h->per_host, &off, &len);
  *out = (hier_plan_t){h->hosts, h->per_host, h->host, h->local, h->partner, len,
                       coll_choose_flat(h->inter_ctx, len)};
  return 0;
}

static int folded_rank(coll_ctx_t *ctx, int partner, float *buf, size_t count) {
  if (coll_send(ctx, partner, TAG_HIER, buf, count) != 0) return coll_fail(ctx, "allreduce hier");
  DT_TRY(coll_wait_sends(ctx));
  return coll_recv(ctx, partner, TAG_HIER, buf, count, 0);
}

int allreduce_hier(coll_ctx_t *ctx, float *buf, size_t count) {
  comm_t *c = ctx->comm;
  if (c->size == 1 || count == 0) return 0;
  if (hier_setup(ctx) != 0) return dt_error_prefix("allreduce hier: ");
  const struct coll_hier *h = ctx->hier;
  if (h->partner >= 0)
    return folded_rank(ctx, h->partner, buf, count) == 0 ? 0 : dt_error_prefix("allreduce hier: ");
  int rc = 0;
  for (int k = 0; rc == 0 && k < h->nfolded; k++)
    rc = coll_recv(ctx, h->folded[k], TAG_HIER, buf, count, 1);
  if (rc == 0) rc = reduce_scatter_ring_inplace(h->intra_ctx, buf, count);
  if (rc == 0) {
    size_t off, len;
    coll_block(count, h->per_host, h->local, &off, &len);
    rc = allreduce(h->inter_ctx, coll_choose_flat(h->inter_ctx, len), buf + off, len);
  }
  if (rc == 0) rc = allgather_ring(h->intra_ctx, buf, count);
  for (int k = 0; rc == 0 && k < h->nfolded; k++)
    if (coll_send(ctx, h->folded[k], TAG_HIER, buf, count) != 0) {
      coll_cancel_sends(ctx);
      rc = -1;
    }
  if (rc == 0) rc = coll_wait_sends(ctx);
  return rc == 0 ? 0 : dt_error_prefix("allreduce hier: ");
}
