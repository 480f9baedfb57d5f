/* allreduce_shm: one pass over shared memory, for ranks that share an
 * address space (the local transport), as MPI libraries use shared memory
 * between the ranks of one host.
 *
 *   steps:  2 barriers (2 ceil(lg P) zero-byte messages each)
 *   bytes:  each rank reads S/P of every rank's buffer (S in all) and
 *           writes its sum back into every buffer (S in all)
 *
 * Bytes on the wire: none (comm_bytes counts 0 sent, 0 received): the
 * barriers' messages are empty, and handing out the table's address
 * (comm_shared_alloc) is the transport's bookkeeping.
 *
 * Each rank publishes its buffer's address and count in a slot of a table
 * every rank sees; after a barrier rank r sums block r (coll_block) of all
 * P buffers, in rank order, and writes the sum into block r of every
 * buffer, chunk by chunk while it is in L1 (kern_allsum); a second barrier
 * ends the call, after which nobody touches another rank's buffer. Between
 * the barriers rank r alone reads or writes block r anywhere, so there is
 * no race, and every element is summed once, in the order 0..P-1: the
 * result is bitwise the same on every rank and in every run.
 *
 * Why not the ring through the transport: there a rank copies the block
 * the other core has just reduced into lines that core has just read;
 * measured here on 512 KiB halves, that pass costs 2-6x the fused
 * sum-and-write-back of this file (docs/COLLECTIVES.md).
 *
 * It moves no messages, so an emulated network has nothing to delay: with
 * --net it is refused rather than reported as free. */
#include <stdlib.h>

#include "coll_internal.h"

struct shm_slot {
  float *buf;
  size_t count;
};

/* The table, made on first use (collectively: every rank calls allreduce). */
static int shm_table(coll_ctx_t *ctx) {
  if (ctx->shm) return 0;
  comm_t *c = ctx->comm;
  void *p;
  int rc = comm_shared_alloc(c, (size_t)c->size * sizeof(struct shm_slot), &p);
  ctx->shm = p; /* set on failure too: coll_free_shm must release it */
  return rc;
}

void coll_free_shm(coll_ctx_t *ctx) {
  if (!ctx->shm) return;
  comm_shared_free(ctx->comm, ctx->shm); /* every rank done reading the others' buffers */
  ctx->shm = NULL;
}

/* Every rank sees the same slots, so all agree on whether counts match. */
static int counts_agree(const coll_ctx_t *ctx, size_t count) {
  for (int q = 0; q < ctx->comm->size; q++)
    if (ctx->shm[q].count != count)
      return dt_error("ranks disagree on the count: rank %d has %zu floats, rank %d has %zu",
                      ctx->comm->rank, count, q, ctx->shm[q].count);
  return 0;
}

static int shm_pass(coll_ctx_t *ctx, float *buf, size_t count) {
  comm_t *c = ctx->comm;
  int P = c->size, r = c->rank;
  DT_TRY(shm_table(ctx));
  ctx->shm[r] = (struct shm_slot){buf, count};
  DT_TRY(coll_barrier(ctx, TAG_SHM)); /* every slot is filled, every input complete */
  int rc = counts_agree(ctx, count);
  if (rc == 0) {
    size_t off, len;
    coll_block(count, P, r, &off, &len);
    float *blocks[COLL_MAX_SHM_RANKS];
    for (int q = 0; q < P; q++) blocks[q] = ctx->shm[q].buf + off;
    if (len) kern_allsum(len, P, blocks);
  }
  /* even after a mismatch: nobody may refill its slot before all have read them */
  if (coll_barrier(ctx, TAG_SHM) != 0) return -1;
  return rc;
}

int allreduce_shm(coll_ctx_t *ctx, float *buf, size_t count) {
  comm_t *c = ctx->comm;
  if (!comm_shares_memory(c))
    return dt_error("allreduce shm: the ranks must share memory (--comm local); across "
                    "processes use ring, rhd or auto");
  if (c->emulated)
    return dt_error("allreduce shm: sends no messages, so an emulated network (--net) would "
                    "not apply; use ring, rhd or auto");
  if (c->size > COLL_MAX_SHM_RANKS)
    return dt_error("allreduce shm: at most %d ranks (got %d); use ring or rhd",
                    COLL_MAX_SHM_RANKS, c->size);
  if (c->size == 1) return 0;
  if (shm_pass(ctx, buf, count) != 0) return dt_error_prefix("allreduce shm: ");
  return 0;
}
