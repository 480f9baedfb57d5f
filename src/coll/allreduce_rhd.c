/* allreduce_rhd: recursive halving-doubling (Rabenseifner).
 *
 *   steps:  2 lg P' exchanges (+2 when P is not a power of two), P' = 2^floor(lg P)
 *   bytes:  each rank sends 2(P'-1)/P' x S (+S on the ranks that fold)
 *
 * Bytes on the wire per rank, exactly (blocks b_i: count cut into P' by
 * coll_block): a rank with new rank nr sends and receives, at each level
 * of width w = P', P'/2, ..., 2 blocks, the aligned range of w blocks
 * holding b_nr, blocks [nr - nr mod w, nr - nr mod w + w) (half of it in
 * the halving, the other half in the doubling): sent = received = the sum
 * of those ranges' sizes over the levels (= 2(P'-1)/P' x S when P'
 * divides the count). Of the first 2(P-P')
 * ranks, each even one sends S and receives S and nothing else; each odd
 * one adds S each way to its halving-doubling share.
 *
 * Non-power-of-two P (as MPICH): of the first 2(P-P') ranks, each even
 * one sends its whole vector to the odd one after it and sits out; the
 * remaining P' ranks take new ranks 0..P'-1. Reduce-scatter by recursive
 * halving: at distance d = P'/2, P'/4, ..., 1 partners exchange half of
 * their current range, each keeping the half that contains its own block
 * and adding the partner's copy of it; afterwards new rank i holds the sum
 * of block i (count cut into P' blocks). Allgather by recursive doubling
 * reverses the steps, copying. The folded ranks get the result from their
 * partner at the end. The order of every addition is fixed by the ranks,
 * not by timing. */
#include "coll_internal.h"

static int largest_pow2(int p) {
  int q = 1;
  while (2 * q <= p) q *= 2;
  return q;
}

typedef struct {
  coll_ctx_t *ctx;
  float *buf;
  size_t count;
  int pof2, rem;
} rhd_t;

/* New rank -> old rank. */
static int old_rank(const rhd_t *h, int nr) { return nr < h->rem ? 2 * nr + 1 : nr + h->rem; }

static size_t block_start(const rhd_t *h, int b) {
  size_t off, len;
  coll_block(h->count, h->pof2, b, &off, &len);
  return b == h->pof2 ? h->count : off;
}

/* Sends blocks [slo, shi) to the partner and receives [rlo, rhi) from it. */
static int exchange(const rhd_t *h, int partner, int slo, int shi, int rlo, int rhi, int reduce) {
  size_t so = block_start(h, slo), sn = block_start(h, shi) - so;
  size_t ro = block_start(h, rlo), rn = block_start(h, rhi) - ro;
  DT_TRY(coll_send(h->ctx, partner, TAG_RHD, h->buf + so, sn));
  if (coll_recv(h->ctx, partner, TAG_RHD, h->buf + ro, rn, reduce) != 0) {
    coll_cancel_sends(h->ctx);
    return -1;
  }
  return coll_wait_sends(h->ctx);
}

static int halving_doubling(const rhd_t *h, int nr) {
  int lo = 0, hi = h->pof2;
  for (int d = h->pof2 / 2; d >= 1; d /= 2) {
    int mid = (lo + hi) / 2, partner = old_rank(h, nr ^ d);
    if (nr & d) {
      DT_TRY(exchange(h, partner, lo, mid, mid, hi, 1));
      lo = mid;
    } else {
      DT_TRY(exchange(h, partner, mid, hi, lo, mid, 1));
      hi = mid;
    }
  }
  for (int d = 1; d < h->pof2; d *= 2) {
    int partner = old_rank(h, nr ^ d), size = hi - lo;
    if (nr & d) {
      DT_TRY(exchange(h, partner, lo, hi, lo - size, lo, 0));
      lo -= size;
    } else {
      DT_TRY(exchange(h, partner, lo, hi, hi, hi + size, 0));
      hi += size;
    }
  }
  return 0;
}

static int send_all(coll_ctx_t *ctx, int dst, float *buf, size_t count) {
  DT_TRY(coll_send(ctx, dst, TAG_RHD, buf, count));
  return coll_wait_sends(ctx);
}

int allreduce_rhd(coll_ctx_t *ctx, float *buf, size_t count) {
  comm_t *c = ctx->comm;
  int P = c->size, r = c->rank;
  if (P == 1 || count == 0) return 0;
  rhd_t h = {ctx, buf, count, largest_pow2(P), 0};
  h.rem = P - h.pof2;
  int folded = r < 2 * h.rem, rc = 0;
  if (folded && r % 2 == 0) {
    rc = send_all(ctx, r + 1, buf, count);
    if (rc == 0) rc = coll_recv(ctx, r + 1, TAG_RHD, buf, count, 0);
  } else {
    if (folded) rc = coll_recv(ctx, r - 1, TAG_RHD, buf, count, 1);
    if (rc == 0) rc = halving_doubling(&h, folded ? r / 2 : r - h.rem);
    if (rc == 0 && folded) rc = send_all(ctx, r - 1, buf, count);
  }
  return rc == 0 ? 0 : coll_fail(ctx, "allreduce rhd");
}
