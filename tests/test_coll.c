/* coll: every collective on 1..9 ranks, for counts that do not divide
 * evenly (0, 1, ..., primes, a few large ones), with whole-block and with
 * small segments. Results are compared with a double-precision reference
 * sum, must be bitwise equal on every rank, and bitwise equal between a
 * plain run and a run under an emulated network with uneven latencies
 * (different timing, same order of additions). Bytes on the wire: each
 * rank's comm_bytes after each collective equal its algorithm's formula.
 * Hierarchical allreduce also on emulated hosts (even and uneven layouts),
 * where auto picks it.
 *
 * The checks (coll_check_rank) run on any comm_t: tests/mpi_coll_check.c
 * includes this file with COLL_CHECKS_ONLY and runs them on mpi. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "dtrain/coll_async.h"
#include "test.h"

/* Inputs with magnitudes over 20 binades, so that a different order of
 * additions would change the rounded result. */
static float input(int rank, size_t i) {
  uint64_t x = (uint64_t)rank * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 12345;
  x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
  static const float scale[20] = {0x1p-10f, 0x1p-9f, 0x1p-8f, 0x1p-7f, 0x1p-6f, 0x1p-5f, 0x1p-4f,
                                  0x1p-3f,  0x1p-2f, 0x1p-1f, 1.0f,    0x1p1f,  0x1p2f,  0x1p3f,
                                  0x1p4f,   0x1p5f,  0x1p6f,  0x1p7f,  0x1p8f,  0x1p9f};
  float u = (float)(x >> 40) * 0x1p-23f - 1.0f;
  return u * scale[(i * 7 + (size_t)rank * 3) % 20];
}

static uint64_t hash_floats(const float *x, size_t n, uint64_t h) {
  const unsigned char *b = (const unsigned char *)x;
  for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 0x100000001B3ull;
  return h;
}

enum { OP_ALLREDUCE, OP_BCAST, OP_REDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_GATHER };

typedef struct {
  int op, algo, group, small_seg;
} op_t;

static const op_t ops[] = {
    {OP_ALLREDUCE, ALLREDUCE_AUTO, 0, 0},  {OP_ALLREDUCE, ALLREDUCE_RING, 0, 0},
    {OP_ALLREDUCE, ALLREDUCE_RING, 0, 1},  {OP_ALLREDUCE, ALLREDUCE_RHD, 0, 0},
    {OP_ALLREDUCE, ALLREDUCE_RHD, 0, 1},   {OP_ALLREDUCE, ALLREDUCE_TREE, 0, 0},
    {OP_ALLREDUCE, ALLREDUCE_TREE, 0, 1},  {OP_ALLREDUCE, ALLREDUCE_NAIVE, 0, 0},
    {OP_ALLREDUCE, ALLREDUCE_HIER, 0, 0},  {OP_ALLREDUCE, ALLREDUCE_HIER, 2, 1},
    {OP_ALLREDUCE, ALLREDUCE_HIER, 3, 0},  {OP_ALLREDUCE, ALLREDUCE_SHM, 0, 0},
    {OP_BCAST, 0, 0, 0},
    {OP_REDUCE, 0, 0, 1},                  {OP_REDUCE_SCATTER, 0, 0, 0},
    {OP_REDUCE_SCATTER, 0, 0, 1},          {OP_ALLGATHER, 0, 0, 0},
    {OP_ALLGATHER, 0, 0, 1},               {OP_GATHER, 0, 0, 0},
};
#define NOPS (sizeof ops / sizeof ops[0])
#define NCOUNTS 10
#define SMALL_SEG_BYTES 4096 /* 1024 floats: several segments per block from 4099 floats up */

static void counts_for(int P, size_t out[NCOUNTS]) {
  size_t c[NCOUNTS] = {0, 1, 2, (size_t)P + 1, 7 * (size_t)P + 3, 1000, 4099, 65537, 100003, 262147};
  memcpy(out, c, sizeof c);
}

/* Sanitizer builds run 5-20x slower: they stop at 65537 floats, which
 * still spans several segments on every transport. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define MAX_COUNT 65537
#else
#define MAX_COUNT 262147
#endif

typedef struct {
  uint64_t *hashes;   /* [rank][count][op], filled by coll_check_rank when not NULL */
  size_t max_count;   /* counts above it are skipped */
  int hier_only;      /* only the allreduces that can run hier (hier, auto) */
} check_cfg_t;

typedef struct {
  float *buf, *aux;
  double *ref, *absum;
  size_t cap;
} bufs_t;

static int check_near(const bufs_t *b, const float *x, size_t off, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    double want = b->ref[off + i], tol = 1e-6 * b->absum[off + i] + 1e-30;
    if (!(fabs((double)x[i] - want) <= tol))
      return dt_error("%s: element %zu is %.9g, reference %.9g", what, off + i, (double)x[i], want);
  }
  return 0;
}

static void fill_inputs(float *x, int rank, size_t off, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = input(rank, off + i);
}

/* Runs one op on `count` floats; returns the hash of what this rank holds
 * afterwards. */
static int run_op(coll_ctx_t *ctx, const op_t *op, bufs_t *b, size_t count, uint64_t *hash) {
  comm_t *c = coll_ctx_comm(ctx);
  int P = comm_size(c), r = comm_rank(c);
  size_t off, len;
  char what[96];
  snprintf(what, sizeof what, "P=%d count=%zu op %d algo %s group %d seg %s", P, count, op->op,
           allreduce_algo_name((allreduce_algo_t)op->algo), op->group, op->small_seg ? "small" : "default");
  coll_ctx_set_segment(ctx, op->small_seg ? SMALL_SEG_BYTES : 0);
  coll_ctx_set_group_size(ctx, op->group);
  *hash = 1469598103934665603ull;
  switch (op->op) {
  case OP_ALLREDUCE:
    fill_inputs(b->buf, r, 0, count);
    RCHECK_OK(allreduce(ctx, (allreduce_algo_t)op->algo, b->buf, count));
    DT_TRY(check_near(b, b->buf, 0, count, what));
    *hash = hash_floats(b->buf, count, *hash);
    break;
  case OP_BCAST: {
    int root = P - 1;
    for (size_t i = 0; i < count; i++) b->buf[i] = r == root ? input(root, i) : NAN;
    RCHECK_OK(broadcast_tree(ctx, root, b->buf, count));
    for (size_t i = 0; i < count; i++) RCHECK(b->buf[i] == input(root, i));
    break;
  }
  case OP_REDUCE: {
    int root = 1 % P;
    fill_inputs(b->buf, r, 0, count);
    RCHECK_OK(reduce_tree(ctx, root, b->buf, count));
    if (r == root) DT_TRY(check_near(b, b->buf, 0, count, what));
    if (r == root) *hash = hash_floats(b->buf, count, *hash);
    break;
  }
  case OP_REDUCE_SCATTER: {
    fill_inputs(b->aux, r, 0, count);
    coll_block(count, P, r, &off, &len);
    RCHECK_OK(reduce_scatter_ring(ctx, b->aux, b->buf, count));
    DT_TRY(check_near(b, b->buf, off, len, what));
    for (size_t i = 0; i < count; i++) RCHECK(b->aux[i] == input(r, i)); /* input untouched */
    *hash = hash_floats(b->buf, len, *hash);
    /* the same additions in the same order as allreduce_ring */
    RCHECK_OK(allreduce_ring(ctx, b->aux, count));
    RCHECK(len == 0 || memcmp(b->aux + off, b->buf, len * sizeof(float)) == 0);
    /* in place: block r the same bits; allgather then completes the allreduce */
    fill_inputs(b->aux, r, 0, count);
    RCHECK_OK(reduce_scatter_ring_inplace(ctx, b->aux, count));
    RCHECK(len == 0 || memcmp(b->aux + off, b->buf, len * sizeof(float)) == 0);
    break;
  }
  case OP_ALLGATHER:
    coll_block(count, P, r, &off, &len);
    for (size_t i = 0; i < count; i++) b->buf[i] = NAN;
    fill_inputs(b->buf + off, r, off, len);
    RCHECK_OK(allgather_ring(ctx, b->buf, count));
    for (int q = 0; q < P; q++) {
      coll_block(count, P, q, &off, &len);
      for (size_t i = off; i < off + len; i++) RCHECK(b->buf[i] == input(q, i));
    }
    break;
  case OP_GATHER: {
    int root = P / 2;
    size_t n = count / (size_t)P + 1;
    fill_inputs(b->aux, r, 0, n);
    RCHECK_OK(gather_to_root(ctx, root, b->aux, b->buf, n));
    for (int q = 0; r == root && q < P; q++)
      for (size_t i = 0; i < n; i++) RCHECK(b->buf[(size_t)q * n + i] == input(q, i));
    break;
  }
  }
  return 0;
}

/* Every rank must hold the same bits after an allreduce: rank 0 collects
 * the hashes. */
static int check_same_on_all_ranks(comm_t *c, uint64_t hash, const char *what) {
  int P = comm_size(c);
  if (comm_rank(c) != 0) return comm_send(c, 0, 77, &hash, sizeof hash);
  for (int q = 1; q < P; q++) {
    uint64_t h;
    RCHECK_OK(comm_recv(c, q, 77, &h, sizeof h));
    if (h != hash) return dt_error("%s: rank %d's result differs from rank 0's in some bits", what, q);
  }
  return 0;
}

static void reference(bufs_t *b, int P, size_t count) {
  for (size_t i = 0; i < count; i++) {
    double s = 0, a = 0;
    for (int q = 0; q < P; q++) s += input(q, i), a += fabs((double)input(q, i));
    b->ref[i] = s, b->absum[i] = a;
  }
}

static int is_shm(const op_t *op) { return op->op == OP_ALLREDUCE && op->algo == ALLREDUCE_SHM; }

/* shm needs ranks that share memory and refuses an emulated network. */
static int op_runs_on(const comm_t *c, const op_t *op) {
  return !(is_shm(op) && (!comm_shares_memory(c) || c->emulated));
}

static int check_all(comm_t *c, coll_ctx_t *ctx, bufs_t *b, check_cfg_t *cfg) {
  int P = comm_size(c), r = comm_rank(c);
  size_t counts[NCOUNTS];
  counts_for(P, counts);
  for (int k = 0; k < NCOUNTS; k++) {
    if (counts[k] > cfg->max_count) continue;
    reference(b, P, counts[k]);
    for (size_t o = 0; o < NOPS; o++) {
      uint64_t h;
      if (!op_runs_on(c, &ops[o])) continue;
      if (cfg->hier_only && !(ops[o].op == OP_ALLREDUCE &&
                              (ops[o].algo == ALLREDUCE_HIER || ops[o].algo == ALLREDUCE_AUTO)))
        continue;
      if (run_op(ctx, &ops[o], b, counts[k], &h) != 0) return -1;
      if (ops[o].op == OP_ALLREDUCE && check_same_on_all_ranks(c, h, "allreduce") != 0)
        return dt_error_prefix("P=%d count=%zu algo %s: ", P, counts[k],
                               allreduce_algo_name((allreduce_algo_t)ops[o].algo));
      if (cfg->hashes) cfg->hashes[((size_t)r * NCOUNTS + k) * NOPS + o] = h;
    }
  }
  return 0;
}

static int coll_check_rank(comm_t *c, void *arg) {
  check_cfg_t *cfg = arg;
  bufs_t b = {0};
  b.cap = 262147 + 64;
  b.buf = dt_alloc_floats(b.cap), b.aux = dt_alloc_floats(b.cap);
  b.ref = dt_alloc(b.cap * sizeof(double)), b.absum = dt_alloc(b.cap * sizeof(double));
  coll_ctx_t *ctx = NULL;
  int rc = b.buf && b.aux && b.ref && b.absum ? coll_ctx_new(c, &ctx) : -1;
  /* a fixed link, so that auto picks the same algorithm in every run */
  if (rc == 0) coll_ctx_set_link(ctx, 5e-6, 5e9);
  if (rc == 0) rc = check_all(c, ctx, &b, cfg);
  coll_ctx_free(ctx);
  dt_free(b.buf), dt_free(b.aux), dt_free(b.ref), dt_free(b.absum);
  return rc;
}

/* ---- bytes on the wire ------------------------------------------------------
 * Each collective's payload bytes sent and received by each rank
 * (comm_bytes) must equal, exactly, the formula of its algorithm, written
 * here from the algorithm's definition (the head of each src/coll/ file,
 * docs/COLLECTIVES.md), in floats of 4 bytes. Blocks are coll_block's:
 * count cut into P parts, the first count % P one float longer. Bytes do
 * not depend on segmentation, so every op runs with whole blocks and with
 * small segments. Across ranks, bytes sent sum to bytes received. */

static int pmod(int a, int p) { return ((a % p) + p) % p; }

/* Floats in block b of count cut into parts. */
static uint64_t blk(size_t count, int parts, int b) {
  return count / (size_t)parts + ((size_t)pmod(b, parts) < count % (size_t)parts ? 1 : 0);
}

typedef struct {
  uint64_t sent, received; /* floats */
} wire_t;

static wire_t wire_add(wire_t a, wire_t b) { return (wire_t){a.sent + b.sent, a.received + b.received}; }

/* Ring, P ranks, rank r. Reduce-scatter (steps s = 0..P-2): rank r sends
 * block r-s-1 and receives block r-s-2, i.e. sends every block but r and
 * receives every block but r-1. Allgather (steps P-1..2P-3): sends every
 * block but r+1, receives every block but r. Allreduce is both:
 * 2(P-1)/P x S per rank when P divides the count. */
static wire_t ring_reduce_scatter(int P, int r, size_t C) {
  return (wire_t){C - blk(C, P, r), C - blk(C, P, r - 1)};
}
static wire_t ring_allgather(int P, int r, size_t C) {
  return (wire_t){C - blk(C, P, r + 1), C - blk(C, P, r)};
}

/* Binomial tree rooted at 0 (ranks renumbered vr = r - root): the children
 * of vr are vr + m for every power of two m below vr's lowest set bit (any
 * m < P for the root) with vr + m < P; the parent of vr != 0 is vr minus
 * its lowest set bit. */
static uint64_t tree_children(int vr, int P) {
  uint64_t k = 0;
  for (int m = 1; m < P && !(vr & m); m <<= 1)
    if (vr + m < P) k++;
  return k;
}
/* reduce: S to the parent, S from each child; broadcast the reverse. */
static wire_t tree_reduce(int P, int vr, size_t C) {
  return (wire_t){vr ? C : 0, tree_children(vr, P) * C};
}
static wire_t tree_broadcast(int P, int vr, size_t C) {
  return (wire_t){tree_children(vr, P) * C, vr ? C : 0};
}

/* Recursive halving-doubling, P' = 2^floor(lg P), rem = P - P'. Of the
 * first 2 rem ranks each even one sends all S to the odd one after it and
 * gets the result back (S each way); the P' others (new rank nr) halve: at
 * each level of width w = P', P'/2, ..., 2 blocks (count cut into P'),
 * they send the half of their aligned w-block range that does not hold
 * block nr and receive the half that does; doubling reverses it. So at
 * each level a rank sends and receives the whole range between them: S x
 * (1 + 1/2 + ... + 2/P') = 2(P'-1)/P' x S each way when P' divides the
 * count; the odd folded ranks add S each way. */
static wire_t rhd(int P, int r, size_t C) {
  if (P == 1 || C == 0) return (wire_t){0, 0};
  int pof2 = 1;
  while (2 * pof2 <= P) pof2 *= 2;
  int rem = P - pof2;
  if (r < 2 * rem && r % 2 == 0) return (wire_t){C, C};
  int nr = r < 2 * rem ? r / 2 : r - rem;
  uint64_t x = r < 2 * rem ? C : 0;
  for (int w = pof2; w >= 2; w /= 2)
    for (int b = nr / w * w; b < nr / w * w + w; b++) x += blk(C, pof2, b);
  return (wire_t){x, x};
}

/* Naive: every rank sends S to rank 0 and gets S back; rank 0 receives
 * and sends (P-1) x S. */
static wire_t naive(int P, int r, size_t C) {
  if (P == 1 || C == 0) return (wire_t){0, 0};
  return r == 0 ? (wire_t){(uint64_t)(P - 1) * C, (uint64_t)(P - 1) * C} : (wire_t){C, C};
}

static wire_t flat_allreduce(allreduce_algo_t a, int P, int r, size_t C) {
  switch (a) {
  case ALLREDUCE_RING: return wire_add(ring_reduce_scatter(P, r, C), ring_allgather(P, r, C));
  case ALLREDUCE_RHD: return rhd(P, r, C);
  case ALLREDUCE_TREE: return wire_add(tree_reduce(P, r, C), tree_broadcast(P, r, C));
  case ALLREDUCE_NAIVE: return naive(P, r, C);
  default: return (wire_t){0, 0}; /* shm: memory, no messages */
  }
}

enum { B_ALLREDUCE, B_BCAST, B_REDUCE, B_RS, B_RS_INPLACE, B_AG, B_GATHER, B_ASYNC };

typedef struct {
  int op, algo, root, group; /* root: 0 = rank 0, 1 = rank P-1, 2 = rank P/2; B_ASYNC: algo = order */
} bytes_op_t;

static const bytes_op_t bytes_ops[] = {
    {B_ALLREDUCE, ALLREDUCE_AUTO, 0, 0},  {B_ALLREDUCE, ALLREDUCE_RING, 0, 0},
    {B_ALLREDUCE, ALLREDUCE_RHD, 0, 0},   {B_ALLREDUCE, ALLREDUCE_TREE, 0, 0},
    {B_ALLREDUCE, ALLREDUCE_NAIVE, 0, 0}, {B_ALLREDUCE, ALLREDUCE_HIER, 0, 0},
    {B_ALLREDUCE, ALLREDUCE_HIER, 0, 2},  {B_ALLREDUCE, ALLREDUCE_HIER, 0, 3},
    {B_ALLREDUCE, ALLREDUCE_SHM, 0, 0},   {B_BCAST, 0, 0, 0},
    {B_BCAST, 0, 1, 0},                   {B_REDUCE, 0, 0, 0},
    {B_REDUCE, 0, 2, 0},                  {B_RS, 0, 0, 0},
    {B_RS_INPLACE, 0, 0, 0},              {B_AG, 0, 0, 0},
    {B_GATHER, 0, 0, 0},                  {B_GATHER, 0, 1, 0},
    {B_ASYNC, COLL_ORDER_FIFO, 0, 0},     {B_ASYNC, COLL_ORDER_PRIORITY, 0, 0},
};
#define BYTES_NOPS (sizeof bytes_ops / sizeof bytes_ops[0])
#define BYTES_LINK_LATENCY 5e-6
#define BYTES_LINK_BANDWIDTH 5e9

/* The hosts hier groups by: groups of `given` consecutive ranks, else the
 * communicator's hosts, else (one host) groups of ceil(sqrt(P)). */
static void hier_hosts_of(const comm_t *c, int given, int *host) {
  int P = comm_size(c), g = given;
  if (g <= 0 && comm_nhosts(c) > 1) {
    for (int r = 0; r < P; r++) host[r] = comm_host(c, r);
    return;
  }
  if (g <= 0)
    for (g = 1; g * g < P; g++) {}
  if (g > P) g = P;
  for (int r = 0; r < P; r++) host[r] = r / g;
}

/* Hierarchical allreduce on rank r (allreduce_hier.c): H hosts, m = the
 * smallest host's ranks. A rank with local index j >= m folds: S each way.
 * Otherwise the ring's row for m ranks (reduce-scatter + allgather inside
 * the host, blocks of count cut into m), plus the inter-host algorithm's
 * row for H ranks at place h (its host) on block j, plus S each way per
 * rank that folds into it. The inter-host algorithm is auto's pick for H
 * ranks and |b_j| (allreduce_hier_plan says which; the layout the plan
 * reports must be the one computed here). */
static int hier_bytes(coll_ctx_t *ctx, int given, size_t C, wire_t *w) {
  comm_t *c = coll_ctx_comm(ctx);
  int P = comm_size(c), r = comm_rank(c);
  int *host = calloc((size_t)P, sizeof(int)), *size = calloc((size_t)P, sizeof(int));
  int *local = calloc((size_t)P, sizeof(int));
  RCHECK(host && size && local);
  hier_hosts_of(c, given, host);
  int H = 0, m = P;
  for (int q = 0; q < P; q++) {
    local[q] = size[host[q]]++;
    H = host[q] + 1 > H ? host[q] + 1 : H;
  }
  for (int h = 0; h < H; h++) m = size[h] < m ? size[h] : m;
  int h = host[r], j = local[r], folding_in = 0;
  for (int q = 0; q < P; q++) folding_in += host[q] == h && local[q] >= m && local[q] % m == j;
  free(host), free(size), free(local);
  hier_plan_t plan;
  RCHECK_OK(allreduce_hier_plan(ctx, C, &plan));
  if (plan.hosts != H || plan.per_host != m || plan.host != h || plan.local != j ||
      (plan.partner >= 0) != (j >= m) || plan.block != (j < m ? blk(C, m, j) : plan.block))
    return dt_error("allreduce_hier_plan on rank %d: %d hosts, %d a host, host %d, index %d, "
                    "partner %d, block %zu; expected %d, %d, %d, %d, %s, %llu",
                    r, plan.hosts, plan.per_host, plan.host, plan.local, plan.partner, plan.block,
                    H, m, h, j, j >= m ? "a partner" : "none", (unsigned long long)blk(C, m, j));
  *w = (wire_t){0, 0};
  if (P == 1 || C == 0) return 0;
  if (j >= m) {
    *w = (wire_t){C, C};
    return 0;
  }
  *w = flat_allreduce(ALLREDUCE_RING, m, j, C);
  *w = wire_add(*w, flat_allreduce(plan.inter, H, h, blk(C, m, j)));
  *w = wire_add(*w, (wire_t){(uint64_t)folding_in * C, (uint64_t)folding_in * C});
  return 0;
}

/* The formula for op on this rank, in floats. */
static int bytes_expected(coll_ctx_t *ctx, const bytes_op_t *op, size_t C, wire_t *w) {
  comm_t *c = coll_ctx_comm(ctx);
  int P = comm_size(c), r = comm_rank(c);
  int root = op->root == 0 ? 0 : op->root == 1 ? P - 1 : P / 2, vr = pmod(r - root, P);
  *w = (wire_t){0, 0};
  switch (op->op) {
  case B_ALLREDUCE: {
    allreduce_algo_t a = (allreduce_algo_t)op->algo;
    if (a == ALLREDUCE_AUTO) a = allreduce_choose(ctx, C);
    if (a != ALLREDUCE_HIER) {
      *w = flat_allreduce(a, P, r, C);
      break;
    }
    return hier_bytes(ctx, op->group, C, w);
  }
  case B_BCAST: *w = P > 1 ? tree_broadcast(P, vr, C) : *w; break;
  case B_REDUCE: *w = P > 1 ? tree_reduce(P, vr, C) : *w; break;
  case B_RS:
  case B_RS_INPLACE: *w = ring_reduce_scatter(P, r, C); break;
  case B_AG: *w = ring_allgather(P, r, C); break;
  case B_GATHER: /* count per rank C: every rank sends C to root, which receives (P-1) x C */
    *w = r == root ? (wire_t){0, (uint64_t)(P - 1) * C} : (wire_t){C, 0};
    break;
  case B_ASYNC: /* the sequence of bytes_run submits, plus in priority order, before
                 * each of its 4 requests, an allgather of one float per rank */
    *w = wire_add(flat_allreduce(ALLREDUCE_RING, P, r, C), ring_reduce_scatter(P, r, C));
    *w = wire_add(*w, ring_allgather(P, r, C));
    *w = wire_add(*w, flat_allreduce(ALLREDUCE_TREE, P, r, C));
    if (op->algo == COLL_ORDER_PRIORITY)
      for (int k = 0; k < 4; k++) *w = wire_add(*w, ring_allgather(P, r, (size_t)P));
    break;
  }
  return 0;
}

static int bytes_run(coll_ctx_t *ctx, const bytes_op_t *op, float *buf, float *aux, size_t C) {
  comm_t *c = coll_ctx_comm(ctx);
  int P = comm_size(c);
  int root = op->root == 0 ? 0 : op->root == 1 ? P - 1 : P / 2;
  switch (op->op) {
  case B_ALLREDUCE: return allreduce(ctx, (allreduce_algo_t)op->algo, buf, C);
  case B_BCAST: return broadcast_tree(ctx, root, buf, C);
  case B_REDUCE: return reduce_tree(ctx, root, buf, C);
  case B_RS: return reduce_scatter_ring(ctx, aux, buf, C);
  case B_RS_INPLACE: return reduce_scatter_ring_inplace(ctx, buf, C);
  case B_AG: return allgather_ring(ctx, buf, C);
  case B_GATHER: return gather_to_root(ctx, root, aux, buf, C);
  default: {
    coll_async_t *a;
    RCHECK_OK(coll_async_new(ctx, (coll_order_t)op->algo, &a));
    coll_async_allreduce(a, ALLREDUCE_RING, buf, C, 3);
    coll_async_reduce_scatter(a, buf + C, C, 2);
    coll_async_allgather(a, buf + 2 * C, C, 1);
    coll_async_allreduce(a, ALLREDUCE_TREE, buf + 3 * C, C, 0);
    int rc = coll_async_wait(a, NULL);
    coll_async_free(a);
    return rc;
  }
  }
}

/* Rank 0 checks that the bytes all ranks sent add up to those they
 * received (fails only on rank 0, after it has heard from every rank). */
static int bytes_sum_check(comm_t *c, comm_bytes_t d, const char *what) {
  int P = comm_size(c);
  uint64_t mine[2] = {d.sent, d.received}, sum[2] = {d.sent, d.received};
  if (comm_rank(c) != 0) return comm_send(c, 0, 78, mine, sizeof mine);
  for (int q = 1; q < P; q++) {
    uint64_t v[2];
    RCHECK_OK(comm_recv(c, q, 78, v, sizeof v));
    sum[0] += v[0], sum[1] += v[1];
  }
  if (sum[0] != sum[1])
    return dt_error("%s: the ranks sent %llu bytes in all but received %llu", what,
                    (unsigned long long)sum[0], (unsigned long long)sum[1]);
  return 0;
}

static const char *bytes_op_name(const bytes_op_t *op) {
  static const char *const names[] = {"allreduce", "broadcast_tree", "reduce_tree",
                                      "reduce_scatter_ring", "reduce_scatter_ring_inplace",
                                      "allgather_ring", "gather_to_root", "coll_async"};
  return names[op->op];
}

/* Every op of bytes_ops (those the transport runs) on each count, with
 * whole blocks and with small segments: each rank's bytes sent and
 * received equal the formula, and the ranks' sums agree. */
static int bytes_check_rank(comm_t *c, const size_t *counts, int ncounts) {
  int P = comm_size(c), r = comm_rank(c);
  size_t maxc = 0;
  for (int k = 0; k < ncounts; k++) maxc = counts[k] > maxc ? counts[k] : maxc;
  size_t cap = 4 * (size_t)P * (maxc + 1);
  char wrong[400] = "";
  float *buf = dt_alloc_floats(cap), *aux = dt_alloc_floats(cap);
  coll_ctx_t *ctx = NULL;
  int rc = buf && aux ? coll_ctx_new(c, &ctx) : dt_error("out of memory");
  if (rc == 0) coll_ctx_set_link(ctx, BYTES_LINK_LATENCY, BYTES_LINK_BANDWIDTH);
  for (int seg = 0; seg < 2 && rc == 0; seg++) {
    size_t seg_bytes = seg ? SMALL_SEG_BYTES : 0;
    coll_ctx_set_segment(ctx, seg_bytes);
    for (int k = 0; k < ncounts && rc == 0; k++)
      for (size_t o = 0; o < BYTES_NOPS && rc == 0; o++) {
        const bytes_op_t *op = &bytes_ops[o];
        op_t as_op = {op->op == B_ALLREDUCE ? OP_ALLREDUCE : -1, op->algo, 0, 0};
        if (!op_runs_on(c, &as_op)) continue;
        char what[160];
        snprintf(what, sizeof what, "bytes: P=%d count=%zu %s%s%s root %d group %d seg %s", P,
                 counts[k], bytes_op_name(op), op->op == B_ALLREDUCE ? " " : "",
                 op->op == B_ALLREDUCE ? allreduce_algo_name((allreduce_algo_t)op->algo) : "",
                 op->root, op->group, seg ? "small" : "default");
        wire_t w;
        memset(buf, 0, cap * sizeof(float)), memset(aux, 0, cap * sizeof(float));
        coll_ctx_set_group_size(ctx, op->group);
        rc = bytes_expected(ctx, op, counts[k], &w);
        comm_bytes_t b0 = comm_bytes(c);
        if (rc == 0) rc = bytes_run(ctx, op, buf, aux, counts[k]);
        comm_bytes_t b1 = comm_bytes(c), d = {b1.sent - b0.sent, b1.received - b0.received};
        if (rc != 0) {
          rc = dt_error_prefix("%s: ", what);
          break;
        }
        /* a wrong count is reported at the end: the ranks go on in step,
         * so that none waits for one that stopped */
        if (!*wrong && (d.sent != w.sent * sizeof(float) || d.received != w.received * sizeof(float)))
          snprintf(wrong, sizeof wrong, "%s: rank %d sent %llu bytes and received %llu; the formula says %llu and %llu",
                   what, r, (unsigned long long)d.sent, (unsigned long long)d.received,
                   (unsigned long long)(w.sent * sizeof(float)),
                   (unsigned long long)(w.received * sizeof(float)));
        if (bytes_sum_check(c, d, what) != 0 && !*wrong) snprintf(wrong, sizeof wrong, "%s", dt_errmsg());
      }
  }
  coll_ctx_free(ctx);
  dt_free(buf), dt_free(aux);
  if (rc == 0 && *wrong) rc = dt_error("%s", wrong);
  return rc;
}

#ifndef COLL_CHECKS_ONLY

/* All collectives on P = 1..9 ranks: correct, equal on all ranks, and the
 * same bits with and without an uneven emulated network. */
static void test_collectives_1_to_9_ranks(void) {
  for (int P = 1; P <= 9; P++) {
    size_t n = (size_t)P * NCOUNTS * NOPS;
    uint64_t *plain = calloc(n, sizeof(uint64_t)), *emulated = calloc(n, sizeof(uint64_t));
    double lat[9];
    for (int q = 0; q < P; q++) lat[q] = 5e-6 * (double)((q * 5) % P + 1);
    comm_net_t net = {.rank_latency = lat, .timeout = 60};
    check_cfg_t a = {plain, MAX_COUNT, 0}, b = {emulated, MAX_COUNT < 100003 ? MAX_COUNT : 100003, 0};
    int ok1 = comm_local_run(P, NULL, coll_check_rank, &a);
    if (ok1 != 0) fprintf(stderr, "  P=%d: %s\n", P, dt_errmsg());
    CHECK(ok1 == 0);
    int ok2 = comm_local_run(P, &net, coll_check_rank, &b);
    if (ok2 != 0) fprintf(stderr, "  P=%d emulated: %s\n", P, dt_errmsg());
    CHECK(ok2 == 0);
    size_t counts[NCOUNTS];
    counts_for(P, counts);
    for (size_t i = 0; ok1 == 0 && ok2 == 0 && i < n; i++) {
      if (counts[i / NOPS % NCOUNTS] > b.max_count) continue; /* skipped in the emulated run */
      if (is_shm(&ops[i % NOPS])) continue; /* likewise */
      if (plain[i] != emulated[i]) {
        fprintf(stderr, "  P=%d rank %zu count %zu op %zu: bits differ between runs\n", P,
                i / (NCOUNTS * NOPS), counts[i / NOPS % NCOUNTS], i % NOPS);
        CHECK(plain[i] == emulated[i]);
        break;
      }
    }
    free(plain), free(emulated);
  }
}

static void test_algo_names(void) {
  allreduce_algo_t a;
  for (int i = 0; i < ALLREDUCE_COUNT; i++) {
    CHECK_OK(allreduce_algo_parse(allreduce_algo_name((allreduce_algo_t)i), &a));
    CHECK(a == (allreduce_algo_t)i);
  }
  CHECK_FAILS_WITH(allreduce_algo_parse("butterfly", &a),
                   "unknown allreduce algorithm 'butterfly' (choices: auto, ring, rhd, tree, naive, hier, shm)");
}

static void test_block_partition(void) {
  size_t counts[] = {0, 1, 5, 7, 100, 1001};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
    for (int parts = 1; parts <= 9; parts++) {
      size_t next = 0, off, len;
      for (int i = 0; i < parts; i++) {
        coll_block(counts[k], parts, i, &off, &len);
        CHECK(off == next);
        CHECK(len == counts[k] / (size_t)parts || len == counts[k] / (size_t)parts + 1);
        next = off + len;
      }
      CHECK(next == counts[k]);
    }
}

/* The public byte functions (cost.c, coll_async_agree_bytes), which a
 * step's description sums, against the formulas above. */
static void test_cost_bytes_match_formulas(void) {
  size_t counts[] = {0, 1, 5, 7, 100, 1001};
  allreduce_algo_t algos[] = {ALLREDUCE_RING, ALLREDUCE_RHD, ALLREDUCE_TREE, ALLREDUCE_NAIVE};
  for (int P = 1; P <= 9; P++)
    for (int r = 0; r < P; r++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t C = counts[k], s, v;
        for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
          wire_t w = flat_allreduce(algos[a], P, r, C);
          CHECK_OK(coll_allreduce_bytes(algos[a], P, r, C, &s, &v));
          CHECK(s == w.sent * sizeof(float) && v == w.received * sizeof(float));
        }
        wire_t rs = P > 1 ? ring_reduce_scatter(P, r, C) : (wire_t){0, 0};
        wire_t ag = P > 1 ? ring_allgather(P, r, C) : (wire_t){0, 0};
        coll_reduce_scatter_bytes(P, r, C, &s, &v);
        CHECK(s == rs.sent * sizeof(float) && v == rs.received * sizeof(float));
        coll_allgather_bytes(P, r, C, &s, &v);
        CHECK(s == ag.sent * sizeof(float) && v == ag.received * sizeof(float));
      }
  for (int P = 1; P <= 9; P++)
    for (int r = 0; r < P; r++) {
      size_t s, v;
      wire_t w = P > 1 ? ring_allgather(P, r, (size_t)P) : (wire_t){0, 0};
      coll_async_agree_bytes(COLL_ORDER_PRIORITY, P, r, &s, &v);
      CHECK(s == w.sent * sizeof(float) && v == w.received * sizeof(float));
      coll_async_agree_bytes(COLL_ORDER_FIFO, P, r, &s, &v);
      CHECK(s == 0 && v == 0);
    }
}

/* auto on a 1 Gbit/s, 50 us link: 1 KB is latency-bound (tree or rhd,
 * 2 lg P messages, not ring's 2(P-1)); 64 MB is bandwidth-bound: on 6 ranks ring (rhd would send
 * 2 S more to fold the 2 extra ranks), on 8 ranks rhd (same bytes as ring
 * in fewer messages); on 2 ranks always rhd. */
static int rank_choose(comm_t *c, void *arg) {
  coll_ctx_t *ctx;
  RCHECK_OK(coll_ctx_new(c, &ctx));
  coll_ctx_set_link(ctx, 50e-6, 125e6);
  allreduce_algo_t small = allreduce_choose(ctx, 256), large = allreduce_choose(ctx, 16 << 20);
  coll_ctx_free(ctx);
  int P = comm_size(c);
  RCHECK(small == ALLREDUCE_RHD || small == ALLREDUCE_TREE);
  RCHECK(large == (P == 6 ? ALLREDUCE_RING : ALLREDUCE_RHD));
  return 0;
}

static void test_auto_choice(void) {
  CHECK_OK(comm_local_run(2, NULL, rank_choose, NULL));
  CHECK_OK(comm_local_run(6, NULL, rank_choose, NULL));
  CHECK_OK(comm_local_run(8, NULL, rank_choose, NULL));
}

/* auto picks hier when the ranks are on more than one host with at least
 * two on each, at every size; otherwise a flat algorithm. */
static int rank_choose_hosts(comm_t *c, void *arg) {
  int want_hier = *(const int *)arg;
  coll_ctx_t *ctx;
  RCHECK_OK(coll_ctx_new(c, &ctx));
  coll_ctx_set_link(ctx, 50e-6, 125e6);
  allreduce_algo_t small = allreduce_choose(ctx, 256), large = allreduce_choose(ctx, 16 << 20);
  coll_ctx_free(ctx);
  RCHECK((small == ALLREDUCE_HIER) == want_hier && (large == ALLREDUCE_HIER) == want_hier);
  return 0;
}

static void test_auto_choice_hosts(void) {
  int yes = 1, no = 0;
  comm_net_t two = {.hosts = 2}, three = {.hosts = 3}, lone = {.hosts = 2, .host_ranks = {3, 1}};
  CHECK_OK(comm_local_run(4, &two, rank_choose_hosts, &yes));   /* 2+2 */
  CHECK_OK(comm_local_run(5, &two, rank_choose_hosts, &yes));   /* 3+2 */
  CHECK_OK(comm_local_run(6, &three, rank_choose_hosts, &yes)); /* 2+2+2 */
  CHECK_OK(comm_local_run(4, &lone, rank_choose_hosts, &no));   /* 3+1 */
  CHECK_OK(comm_local_run(3, &three, rank_choose_hosts, &no));  /* 1+1+1 */
  CHECK_OK(comm_local_run(4, NULL, rank_choose_hosts, &no));    /* one host */
}

/* Collectives never consume a strategy's messages: a tag-5 message sent
 * before an allreduce is still there after it. */
static int rank_tags_apart(comm_t *c, void *arg) {
  coll_ctx_t *ctx;
  float v[64];
  int msg = 99, got = 0;
  comm_req_t *r = NULL;
  RCHECK_OK(coll_ctx_new(c, &ctx));
  for (int i = 0; i < 64; i++) v[i] = 1;
  if (comm_rank(c) == 0) RCHECK_OK(comm_isend(c, 1, 5, &msg, sizeof msg, &r));
  for (int a = ALLREDUCE_RING; a < ALLREDUCE_COUNT; a++)
    RCHECK_OK(allreduce(ctx, (allreduce_algo_t)a, v, 64));
  if (comm_rank(c) == 1) RCHECK_OK(comm_recv(c, 0, 5, &got, sizeof got));
  if (comm_rank(c) == 0) RCHECK_OK(comm_wait(c, r));
  coll_ctx_free(ctx);
  RCHECK(comm_rank(c) != 1 || got == 99);
  RCHECK(v[0] == 729); /* 3^6 after six allreduces on 3 ranks */
  return 0;
}

static void test_collective_tags_apart(void) { CHECK_OK(comm_local_run(3, NULL, rank_tags_apart, NULL)); }

/* Ranks that disagree on the count fail with the algorithm and the
 * lengths in the message, instead of corrupting memory or hanging. */
static int rank_count_mismatch(comm_t *c, void *arg) {
  coll_ctx_t *ctx;
  float v[101] = {0};
  RCHECK_OK(coll_ctx_new(c, &ctx));
  int rc = allreduce_ring(ctx, v, comm_rank(c) == 0 ? 100 : 101);
  coll_ctx_free(ctx);
  return rc;
}

static void test_count_mismatch_fails(void) {
  double t0 = dt_now();
  CHECK_FAILS_WITH(comm_local_run(2, NULL, rank_count_mismatch, NULL), "allreduce ring: ");
  CHECK(strstr(dt_errmsg(), "bytes") != NULL);
  CHECK(dt_now() - t0 < 5);
}

/* shm: ranks that disagree on the count all fail, with both counts, and
 * write nothing; the next allreduce on the same context works. */
static int rank_shm_count_mismatch(comm_t *c, void *arg) {
  coll_ctx_t *ctx;
  float v[101];
  for (int i = 0; i < 101; i++) v[i] = 1;
  RCHECK_OK(coll_ctx_new(c, &ctx));
  int rc = allreduce_shm(ctx, v, comm_rank(c) == 0 ? 100 : 101);
  RCHECK(rc != 0);
  RCHECK(strstr(dt_errmsg(), "allreduce shm: ranks disagree on the count") != NULL);
  for (int i = 0; i < 101; i++) RCHECK(v[i] == 1);
  RCHECK_OK(allreduce_shm(ctx, v, 101));
  for (int i = 0; i < 101; i++) RCHECK(v[i] == (float)comm_size(c));
  coll_ctx_free(ctx);
  return 0;
}

static int rank_shm(comm_t *c, void *arg) {
  coll_ctx_t *ctx;
  float v[8] = {0};
  RCHECK_OK(coll_ctx_new(c, &ctx));
  int rc = allreduce_shm(ctx, v, 8);
  coll_ctx_free(ctx);
  return rc;
}

static void test_shm_errors(void) {
  CHECK_OK(comm_local_run(2, NULL, rank_shm_count_mismatch, NULL));
  CHECK_OK(comm_local_run(3, NULL, rank_shm_count_mismatch, NULL));
  comm_net_t net = {.latency = 50e-6, .timeout = 10};
  CHECK_FAILS_WITH(comm_local_run(2, &net, rank_shm, NULL),
                   "allreduce shm: sends no messages, so an emulated network (--net) would not apply");
}

/* coll_async: a queue of allreduces, reduce-scatters and allgathers,
 * some run by the progress thread and some by the waiting caller, gives
 * the bits the blocking calls give. */
#define ASYNC_N 5003
typedef struct {
  coll_ctx_t *ctx;
  coll_async_t *a;
  float *x, *y;     /* 4 * ASYNC_N each: through the queue, and blocking */
} async_fixture_t;

static int async_fixture_open(comm_t *c, coll_order_t order, async_fixture_t *f) {
  f->x = dt_alloc_floats(4 * ASYNC_N), f->y = dt_alloc_floats(4 * ASYNC_N);
  RCHECK(f->x && f->y);
  RCHECK_OK(coll_ctx_new(c, &f->ctx));
  RCHECK_OK(coll_async_new(f->ctx, order, &f->a));
  return 0;
}

static void async_fixture_close(async_fixture_t *f) {
  coll_async_free(f->a);
  coll_ctx_free(f->ctx);
  dt_free(f->x), dt_free(f->y);
}

/* A test of the queue: `rounds` rounds of `round`, which sends x through
 * the queue and y through the blocking calls, from the same inputs (new
 * ones each round): after each, x and y hold the same bits. Then `after`,
 * when given. */
typedef struct {
  coll_order_t order;
  int rounds;
  int (*round)(comm_t *c, async_fixture_t *f, int round);
  int (*after)(comm_t *c, async_fixture_t *f);
} async_case_t;

static int async_rounds(comm_t *c, async_fixture_t *f, const async_case_t *k) {
  for (int round = 0; round < k->rounds; round++) {
    for (size_t i = 0; i < 4 * ASYNC_N; i++) f->x[i] = f->y[i] = input(comm_rank(c) + round, i);
    DT_TRY(k->round(c, f, round));
    RCHECK(memcmp(f->x, f->y, 4 * ASYNC_N * sizeof(float)) == 0);
  }
  return k->after ? k->after(c, f) : 0;
}

static int rank_async(comm_t *c, void *arg) {
  const async_case_t *k = arg;
  async_fixture_t f;
  RCHECK_OK(async_fixture_open(c, k->order, &f));
  int rc = async_rounds(c, &f, k);
  async_fixture_close(&f);
  return rc;
}

/* The blocking side: y's block k (of ASYNC_N floats) through blocking[k],
 * over its first count[k] floats. */
typedef int (*blocking_fn)(coll_ctx_t *ctx, float *buf, size_t count);
static int blocking_side(async_fixture_t *f, const blocking_fn blocking[4], const size_t count[4]) {
  for (int k = 0; k < 4; k++)
    if (blocking[k](f->ctx, f->y + (size_t)k * ASYNC_N, count[k]) != 0)
      return dt_error_prefix("%s:%d: the blocking call on block %d: ", __FILE__, __LINE__, k);
  return 0;
}

static int fifo_round(comm_t *c, async_fixture_t *f, int round) {
  coll_async_t *a = f->a;
  float *x = f->x;
  double busy = -1;
  RCHECK_OK(coll_async_wait(a, &busy)); /* nothing queued: returns at once */
  coll_async_allreduce(a, ALLREDUCE_RING, x, ASYNC_N, 0);
  coll_async_reduce_scatter(a, x + ASYNC_N, ASYNC_N, 0);
  coll_async_allreduce(a, ALLREDUCE_RHD, x + 2 * ASYNC_N, ASYNC_N, 0);
  coll_async_allgather(a, x + ASYNC_N, ASYNC_N, 0);
  if (round == 1) dt_sleep_until(dt_now() + 0.002); /* let the progress thread take some */
  coll_async_allreduce(a, ALLREDUCE_TREE, x + 3 * ASYNC_N, ASYNC_N, 0);
  RCHECK_OK(coll_async_wait(a, &busy));
  RCHECK(busy >= 0);
  /* block 1's reduce-scatter and allgather make a ring allreduce */
  return blocking_side(f, (blocking_fn[4]){allreduce_ring, allreduce_ring, allreduce_rhd, allreduce_tree},
                       (size_t[4]){ASYNC_N, ASYNC_N, ASYNC_N, ASYNC_N});
}

/* A failed request is reported by the next wait, with its message. */
static int fifo_failed_request(comm_t *c, async_fixture_t *f) {
  coll_async_allreduce(f->a, ALLREDUCE_RING, f->x, comm_rank(c) == 0 ? 100 : 101, 0);
  int rc = coll_async_wait(f->a, NULL);
  RCHECK(rc != 0 && strstr(dt_errmsg(), "allreduce ring") != NULL);
  return 0;
}

static async_case_t fifo_case = {COLL_ORDER_FIFO, 3, fifo_round, fifo_failed_request};

static void test_async_matches_blocking(void) {
  CHECK_OK(comm_local_run(2, NULL, rank_async, &fifo_case));
  CHECK_OK(comm_local_run(3, NULL, rank_async, &fifo_case));
}

/* coll_async in priority order: requests of mixed priorities, which one
 * rank submits later than the others (so the ranks must agree on which to
 * run), waited for one at a time out of submission order, give the bits of
 * the blocking calls. */
static int priority_round(comm_t *c, async_fixture_t *f, int round) {
  coll_async_t *a = f->a;
  float *x = f->x;
  size_t last = 1 + (size_t)round;
  size_t t0 = coll_async_allreduce(a, ALLREDUCE_RING, x, ASYNC_N, 5);
  if (comm_rank(c) == round % comm_size(c)) dt_sleep_until(dt_now() + 0.002);
  size_t t1 = coll_async_allreduce(a, ALLREDUCE_RHD, x + ASYNC_N, ASYNC_N, 1);
  coll_async_allreduce(a, ALLREDUCE_TREE, x + 2 * ASYNC_N, ASYNC_N, 3);
  size_t t3 = coll_async_allreduce(a, ALLREDUCE_RING, x + 3 * ASYNC_N, last, 0);
  RCHECK_OK(coll_async_wait_one(a, t3));
  RCHECK_OK(coll_async_wait_one(a, t1));
  RCHECK_OK(coll_async_wait_one(a, t0));
  RCHECK_OK(coll_async_wait(a, NULL));
  return blocking_side(f, (blocking_fn[4]){allreduce_ring, allreduce_rhd, allreduce_tree, allreduce_ring},
                       (size_t[4]){ASYNC_N, ASYNC_N, ASYNC_N, last});
}

static async_case_t priority_case = {COLL_ORDER_PRIORITY, 4, priority_round, NULL};

static void test_async_priority_matches_blocking(void) {
  for (int n = 2; n <= 4; n++) CHECK_OK(comm_local_run(n, NULL, rank_async, &priority_case));
}

/* Bytes on the wire, exactly each collective's formula, on 1, 2, 3, 4, 5
 * and 8 ranks, for counts that P divides and counts it does not. */
static int rank_bytes(comm_t *c, void *arg) {
  static const size_t counts[] = {0, 1, 7, 1000, 4099};
  (void)arg;
  return bytes_check_rank(c, counts, (int)(sizeof counts / sizeof counts[0]));
}

static void test_bytes_on_the_wire(void) {
  static const int sizes[] = {1, 2, 3, 4, 5, 8};
  comm_net_t net = {.timeout = 60};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int ok = comm_local_run(sizes[i], &net, rank_bytes, NULL);
    if (ok != 0) fprintf(stderr, "  P=%d: %s\n", sizes[i], dt_errmsg());
    CHECK(ok == 0);
  }
}

/* Host layouts for hier (and auto, which picks it where every host has at
 * least 2 ranks): even, uneven (folding), one rank alone on a host. */
typedef struct {
  int P, hosts, sizes[4]; /* sizes all 0: as even as possible */
} layout_t;

static const layout_t layouts[] = {
    {4, 2, {0}},          /* 2+2 */
    {5, 2, {0}},          /* 3+2: one rank folds */
    {6, 3, {0}},          /* 2+2+2 */
    {7, 3, {0}},          /* 3+2+2 */
    {8, 2, {0}},          /* 4+4 */
    {6, 3, {1, 3, 2}},    /* one rank alone: m = 1, two ranks fold into one */
    {9, 3, {2, 4, 3}},    /* 2+4+3: ranks fold into both of host 1's actives */
};
#define NLAYOUTS (sizeof layouts / sizeof layouts[0])

static comm_net_t layout_net(const layout_t *l) {
  comm_net_t net = {.timeout = 60, .hosts = l->hosts};
  for (int i = 0; i < 4 && l->sizes[i]; i++) net.host_ranks[i] = l->sizes[i];
  return net;
}

static void layout_name(const layout_t *l, char *buf, size_t cap) {
  int P = l->P, H = l->hosts;
  buf[0] = 0;
  for (int i = 0; i < H; i++) {
    int n = l->sizes[0] ? l->sizes[i] : P / H + (i < P % H);
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%d", i ? "+" : "", n);
  }
}

static void test_bytes_on_the_wire_hosts(void) {
  for (size_t i = 0; i < NLAYOUTS; i++) {
    comm_net_t net = layout_net(&layouts[i]);
    char name[32];
    layout_name(&layouts[i], name, sizeof name);
    int ok = comm_local_run(layouts[i].P, &net, rank_bytes, NULL);
    if (ok != 0) fprintf(stderr, "  hosts %s: %s\n", name, dt_errmsg());
    CHECK(ok == 0);
  }
}

/* hier on hosts: the sum for every count (not divisible by the ranks, the
 * hosts or the ranks a host), the same bits on every rank, and the same
 * bits again under an emulated network with uneven latencies and links
 * inside and between hosts (other timing, same additions). */
static void test_hier_host_layouts(void) {
  for (size_t i = 0; i < NLAYOUTS; i++) {
    const layout_t *l = &layouts[i];
    size_t n = (size_t)l->P * NCOUNTS * NOPS;
    uint64_t *plain = calloc(n, sizeof(uint64_t)), *emulated = calloc(n, sizeof(uint64_t));
    double lat[9];
    for (int q = 0; q < l->P; q++) lat[q] = 20e-6 * (double)((q * 5) % l->P + 1);
    comm_net_t net = layout_net(l), enet = layout_net(l);
    enet.rank_latency = lat;
    enet.intra_latency = 3e-6, enet.intra_bandwidth = 20e9;
    check_cfg_t a = {plain, MAX_COUNT, 1}, b = {emulated, MAX_COUNT < 100003 ? MAX_COUNT : 100003, 1};
    char name[32];
    layout_name(l, name, sizeof name);
    int ok1 = comm_local_run(l->P, &net, coll_check_rank, &a);
    if (ok1 != 0) fprintf(stderr, "  hosts %s: %s\n", name, dt_errmsg());
    CHECK(ok1 == 0);
    int ok2 = comm_local_run(l->P, &enet, coll_check_rank, &b);
    if (ok2 != 0) fprintf(stderr, "  hosts %s emulated: %s\n", name, dt_errmsg());
    CHECK(ok2 == 0);
    size_t counts[NCOUNTS];
    counts_for(l->P, counts);
    size_t compared = 0;
    for (size_t k = 0; ok1 == 0 && ok2 == 0 && k < n; k++) {
      const op_t *op = &ops[k % NOPS];
      if (counts[k / NOPS % NCOUNTS] > b.max_count || op->op != OP_ALLREDUCE ||
          (op->algo != ALLREDUCE_HIER && op->algo != ALLREDUCE_AUTO))
        continue;
      compared++;
      if (plain[k] != emulated[k]) {
        fprintf(stderr, "  hosts %s rank %zu count %zu op %zu: bits differ between runs\n", name,
                k / (NCOUNTS * NOPS), counts[k / NOPS % NCOUNTS], k % NOPS);
        CHECK(plain[k] == emulated[k]);
        break;
      }
    }
    CHECK(ok1 != 0 || ok2 != 0 || compared > 0);
    free(plain), free(emulated);
  }
}

int main(void) {
  RUN(test_algo_names);
  RUN(test_block_partition);
  RUN(test_cost_bytes_match_formulas);
  RUN(test_auto_choice);
  RUN(test_auto_choice_hosts);
  RUN(test_collective_tags_apart);
  RUN(test_count_mismatch_fails);
  RUN(test_shm_errors);
  RUN(test_async_matches_blocking);
  RUN(test_async_priority_matches_blocking);
  RUN(test_bytes_on_the_wire);
  RUN(test_bytes_on_the_wire_hosts);
  RUN(test_hier_host_layouts);
  RUN(test_collectives_1_to_9_ranks);
  TEST_MAIN_END();
}

#endif
