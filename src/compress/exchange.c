/* The communicator of compressed gradients: a buffer's compressed
 * contributions summed over the P ranks, in place, with the same bits on
 * every rank (each rank decodes the same bytes in the same rank order).
 *
 * Dense encodings (fp16, bf16, int8, onebit, qsgd, terngrad): scatter-
 * reduce then allgather, as 1-bit SGD's implementation in CNTK does. The
 * buffer is cut into P blocks (coll_block); rank r encodes block j of its
 * contribution and sends it to rank j (P - 1 messages), decodes the P
 * encodings of its own block and sums them in fp32 in rank order, encodes
 * the sum once more and sends it to every rank (P - 1 messages). Steps: 2, each of P - 1
 * concurrent messages. A block goes as the encodings of its pieces (cut
 * where a tensor starts). Bytes sent by rank r, with E(b_j) the encoding
 * of block j's pieces:
 *     sum_{j != r} E(b_j) + (P - 1) E(b_r)      ~ 2 (P - 1)/P E(n),
 * the ring allreduce's 2 (P - 1)/P 4n with 4n replaced by E(n): fp16 and
 * bf16 move half the ring's bytes, int8 a quarter plus a scale a piece,
 * onebit 1/32 plus two means a chunk of 512.
 * (A ring that decodes, sums and re-encodes at each of its P - 1 hops
 * moves the same bytes in 2 (P - 1) steps but quantizes a partial sum
 * P - 1 times; this quantizes twice.)
 *
 * Sparse encodings (topk, randomk, threshold, dgc) cannot be summed as
 * they are: each rank sends its encoding to every other (allgather,
 * SparCML's sparse allreduce), and every rank decodes all P in rank order.
 * A bucket's small tensors go dense, by the allreduce (sparse_exchange).
 * Bytes sent by rank r: (P - 1) E_r, where E = 4 + 8k, + the allreduce's;
 * received: sum_{i != r} E_i + the allreduce's. A variable size (threshold)
 * is sent first, 8 bytes to each rank. When what the rank receiving most
 * would receive passes the dense ring's 2 (P - 1)/P 4n (the break-even
 * density), every rank decodes its own and the buffer goes by dense
 * allreduce instead; all ranks know every size, so all switch together. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"
#include "dtrain/comm.h"

/* The encodings' buffers, for a buffer of len floats encoded by s (the
 * codec at this step: DGC's density changes during its warm-up) in
 * blocks cut at up to `ntensors` tensor starts (each piece of a block
 * rounds its size up and may add a chunk's scale: 64 bytes are ample). */
static int grow(compressor_t *c, const codec_spec_t *s, size_t len, int ntensors) {
  size_t need = codec_max_bytes(s, len) + 64 * (size_t)c->nranks * (size_t)(ntensors + 2);
  if (codec_sparse(s)) need = (size_t)c->nranks * codec_max_bytes(s, len);
  if (need <= c->cap) return 0;
  dt_free(c->send), dt_free(c->recv), dt_free(c->out), dt_free(c->gather);
  c->send = dt_alloc(need), c->recv = dt_alloc(need), c->out = dt_alloc(need);
  c->gather = dt_alloc(need);
  if (!c->send || !c->recv || !c->out || !c->gather) return -1;
  c->cap = need;
  return 0;
}

int compressor_new(const compress_config_t *cfg, size_t n, int rank, int nranks,
                   compressor_t **out) {
  compressor_t *c = calloc(1, sizeof *c);
  *out = c;
  if (!c) return dt_error("out of memory");
  c->cfg = *cfg, c->rank = rank, c->nranks = nranks, c->n = n;
  int dgc = cfg->codec.kind == CODEC_DGC;
  if (cfg->error_feedback && ef_init(&c->mem, n, dgc ? cfg->momentum : 0) != 0) return -1;
  if (!(c->tmp = dt_alloc_floats(n + 1)) || !(c->scratch = dt_alloc_floats(n + 1))) return -1;
  c->sizes = calloc((size_t)nranks, sizeof *c->sizes);
  c->reqs = calloc(2 * (size_t)nranks, sizeof(comm_req_t *));
  if (!c->sizes || !c->reqs) return dt_error("out of memory");
  if (cfg->codec.kind == CODEC_POWERSGD) return powersgd_init(c);
  return 0;
}

void compressor_free(compressor_t *c) {
  if (!c) return;
  ef_free(&c->mem);
  dt_free(c->tmp), dt_free(c->scratch);
  dt_free(c->send), dt_free(c->recv), dt_free(c->out), dt_free(c->gather);
  dt_free(c->q), dt_free(c->q_ready), dt_free(c->factors);
  free(c->sizes), free(c->reqs), free(c);
}

void compressor_take_stats(compressor_t *c, compress_stats_t *out) {
  *out = c->stats;
  out->residual_norm = ef_norm(&c->mem);
  c->stats = (compress_stats_t){0};
}

void compress_model_matrices(const model_t *m, compress_matrix_t *out) {
  for (int i = 0; i < m->ntensors; i++) {
    const tensor_info_t *t = &m->tensors[i];
    size_t rows = t->ndim >= 2 ? (size_t)t->dims[0] : 1;
    out[i] = (compress_matrix_t){t->off, rows, t->len / rows};
  }
}

int compressor_grow_factors(compressor_t *c, size_t n) {
  if (c->factors_cap >= n + 1) return 0;
  dt_free(c->factors);
  if (!(c->factors = dt_alloc_floats(n + 1))) return -1;
  c->factors_cap = n + 1;
  return 0;
}

int compressor_has_memory(const compressor_t *c) { return c->mem.residual != NULL; }

/* The seed of message `msg` of a buffer (stream) at a step, on this rank. */
static uint64_t message_seed(const compressor_t *c, int stream, int64_t step, int msg) {
  uint64_t base = rng_derive(c->cfg.seed ^ 0x636f6d7072657373ull, (uint64_t)stream, (uint64_t)step);
  return rng_derive(base, (uint64_t)c->rank, (uint64_t)msg);
}

/* A block [lo, lo + n) of a bucket goes as the encodings of its pieces,
 * the block cut where a tensor starts, so that a scale or a pair of means
 * never spans two tensors (TernGrad scales per layer, 1-bit SGD per column
 * of a matrix: a bias's values are far larger than its weights'). `t` is
 * the bucket's tensors (none: one piece). */
typedef struct {
  const compress_matrix_t *mats;
  int nmats;
  size_t off;   /* the bucket's offset in the arena */
} tensors_t;

/* The end of the piece of [at, hi) that starts at `at`. */
static size_t piece_end(const tensors_t *t, size_t at, size_t hi) {
  for (int i = 0; i < t->nmats; i++)
    if (t->mats[i].off > t->off + at && t->mats[i].off < t->off + hi) return t->mats[i].off - t->off;
  return hi;
}

/* The seed of the piece at `at` of a block at `lo`: element i of the piece
 * draws what element at - lo + i of the block would (codec_uniform). */
static uint64_t piece_seed(uint64_t seed, size_t lo, size_t at) {
  return seed + (uint64_t)(at - lo) * 0x9e3779b97f4a7c15ull;
}

static size_t block_bytes(const tensors_t *t, const codec_spec_t *s, size_t lo, size_t n) {
  size_t b = 0, at = lo, e;
  do { /* a block of no values is one empty piece */
    e = piece_end(t, at, lo + n);
    b += codec_bytes(s, e - at);
  } while ((at = e) < lo + n);
  return b;
}

static size_t encode_timed(compressor_t *c, const codec_spec_t *s, const float *x, size_t n,
                           uint64_t seed, uint8_t *out) {
  double t0 = dt_now();
  size_t b = codec_encode(s, x, n, seed, out, c->scratch);
  c->stats.encode_sec += dt_now() - t0;
  return b;
}

/* acc[0..n) = 0 + decode(in), or += when `add`; names the peer it came from. */
static int decode_timed(compressor_t *c, const codec_spec_t *s, const uint8_t *in, size_t bytes,
                        size_t n, float *acc, int add, int from) {
  double t0 = dt_now();
  if (!add) memset(acc, 0, n * sizeof *acc);
  int rc = codec_decode_add(s, in, bytes, n, acc);
  c->stats.decode_sec += dt_now() - t0;
  if (rc != 0) {
    char name[32];
    codec_format(s, name, sizeof name);
    return dt_error_prefix("rank %d: compressed allreduce (%s): message from rank %d: ", c->rank,
                           name, from);
  }
  return 0;
}

/* The block [lo, lo + n) of x encoded piece by piece into out; its bytes. */
static size_t encode_block(compressor_t *c, const codec_spec_t *s, const tensors_t *t,
                           const float *x, size_t lo, size_t n, uint64_t seed, uint8_t *out) {
  size_t b = 0, at = lo, e;
  do {
    e = piece_end(t, at, lo + n);
    b += encode_timed(c, s, x + at, e - at, piece_seed(seed, lo, at), out + b);
  } while ((at = e) < lo + n);
  return b;
}

/* acc[0..n) (the block's values) = 0 + decode(in), or += when `add`. */
static int decode_block(compressor_t *c, const codec_spec_t *s, const tensors_t *t,
                        const uint8_t *in, size_t lo, size_t n, float *acc, int add, int from) {
  size_t b = 0, at = lo, e;
  do {
    e = piece_end(t, at, lo + n);
    size_t m = codec_bytes(s, e - at);
    DT_TRY(decode_timed(c, s, in + b, m, e - at, acc + (at - lo), add, from));
    b += m;
  } while ((at = e) < lo + n);
  return 0;
}

/* What this rank contributes: the buffer itself, or with memory the
 * buffer added into it (the memory is then what is encoded). */
static float *contribution(compressor_t *c, float *buf, size_t off, size_t len) {
  if (!c->mem.residual) return buf;
  ef_compensate(&c->mem, buf, off, len);
  return c->mem.residual + off;
}

static int dense_exchange(compressor_t *c, comm_t *comm, float *buf, size_t off, size_t len,
                          int64_t step, int stream, const compress_matrix_t *mats, int nmats) {
  const codec_spec_t *s = &c->cfg.codec;
  const tensors_t t = {mats, nmats, off};
  int P = c->nranks, r = c->rank;
  DT_TRY(grow(c, s, len, nmats));
  size_t boff[P], blen[P], soff[P], mine;
  float *v = contribution(c, buf, off, len);
  size_t at = 0;
  for (int j = 0; j < P; j++) {
    coll_block(len, P, j, &boff[j], &blen[j]);
    soff[j] = at;
    at += encode_block(c, s, &t, v, boff[j], blen[j], message_seed(c, stream, step, j), c->send + at);
    if (c->mem.residual) { /* what the encoding drops stays in the memory */
      decode_block(c, s, &t, c->send + soff[j], boff[j], blen[j], c->tmp, 0, r);
      ef_update(&c->mem, c->tmp, off + boff[j], blen[j]);
    }
  }
  mine = block_bytes(&t, s, boff[r], blen[r]);
  posted_t p = {comm, c->reqs, 0};
  for (int i = 0; i < P; i++)
    if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_SCATTER, c->recv + (size_t)i * mine, mine));
  for (int j = 0; j < P; j++)
    if (j != r)
      DT_TRY(post_send(&p, j, TAG_COMPRESS_SCATTER, c->send + soff[j], block_bytes(&t, s, boff[j], blen[j])));
  DT_TRY(wait_posted(&p));
  /* my block: the P contributions decoded and summed in rank order */
  float *acc = buf + boff[r];
  memset(acc, 0, blen[r] * sizeof *acc);
  for (int i = 0; i < P; i++)
    DT_TRY(decode_block(c, s, &t, i == r ? c->send + soff[r] : c->recv + (size_t)i * mine, boff[r],
                        blen[r], acc, 1, i));
  /* re-encoded once; its error is not fed back. A second memory at the
   * owner (CNTK's residual of each aggregated stripe, DeepSpeed's "server
   * error", DoubleSqueeze) made 1-bit SGD worse here: with blocks cut at
   * tensors, mlp 87.14% against 87.52% in 5 epochs, and lenet diverged
   * (10% against 85.18% in 3; momentum 0.9; docs/COMPRESSION.md) */
  encode_block(c, s, &t, buf, boff[r], blen[r], message_seed(c, stream, step, P + r), c->out);
  at = 0;
  for (int i = 0; i < P; i++) {
    size_t b = block_bytes(&t, s, boff[i], blen[i]);
    if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_GATHER, c->gather + at, b));
    soff[i] = at;
    at += b;
  }
  for (int j = 0; j < P; j++)
    if (j != r) DT_TRY(post_send(&p, j, TAG_COMPRESS_GATHER, c->out, mine));
  DT_TRY(wait_posted(&p));
  for (int i = 0; i < P; i++)
    DT_TRY(decode_block(c, s, &t, i == r ? c->out : c->gather + soff[i], boff[i], blen[i],
                        buf + boff[i], 0, i));
  return 0;
}

/* DGC's warm-up: the density falls from 25% by a factor 4 at each quarter
 * of the warm-up steps (75%, 93.75%, 98.4%, 99.6% sparsity), then R. */
static codec_spec_t sparse_spec_at(const compressor_t *c, int64_t step) {
  codec_spec_t s = c->cfg.codec;
  int64_t w = c->cfg.warmup_steps;
  if (s.kind != CODEC_DGC || w <= 0 || step >= w) return s;
  double d = pow(0.25, 1.0 + (double)(4 * step / w));
  if (d > s.param) s.param = d;
  return s;
}

/* DGC's local gradient clipping: the contribution's norm capped at
 * clip / sqrt(P) (each of P workers adds its own; the paper's scaling). */
static void clip_local(compressor_t *c, float *buf, size_t len) {
  if (c->cfg.codec.kind != CODEC_DGC || !(c->cfg.clip > 0)) return;
  double sq = 0;
  for (size_t i = 0; i < len; i++) sq += (double)buf[i] * buf[i];
  double cap = c->cfg.clip / sqrt((double)c->nranks), norm = sqrt(sq);
  if (norm <= cap) return;
  float f = (float)(cap / norm);
  for (size_t i = 0; i < len; i++) buf[i] *= f;
}

/* Sparse codecs send some tensors of a bucket dense, by the allreduce:
 * vectors (biases: the DGC reference compresses only tensors of two
 * dimensions or more) and tensors of fewer than SPARSE_DENSE_BELOW values
 * (lenet's first convolution, 500: under R = 0.001 less than one value of
 * its own). At R = 0.001 a bias of 10 values would otherwise rarely be
 * sent. A buffer given no matrices is sparse whole. */
#define SPARSE_DENSE_BELOW 1024

static int dense_tensors(const compress_matrix_t *mats, int nmats, size_t off, size_t len,
                         range_t *out) {
  int n = 0;
  for (int i = 0; i < nmats; i++) {
    size_t size = mats[i].rows * mats[i].cols;
    if (mats[i].off < off || mats[i].off + size > off + len) continue;
    if (mats[i].rows < 2 || size < SPARSE_DENSE_BELOW)
      out[n++] = (range_t){mats[i].off - off, mats[i].off - off + size};
  }
  return n;
}

/* Between the arena's order (buf[0..len)) and the packed one (the values
 * outside the dense ranges first, then those inside, each in order), in
 * the direction `to_packed`. Returns how many values are outside. */
static size_t repack(float *buf, float *packed, const range_t *d, int nr, size_t len, int to_packed) {
  size_t ns = len, at = 0, s = 0;
  for (int i = 0; i < nr; i++) ns -= d[i].hi - d[i].lo;
  size_t k = ns;
  for (int i = 0; i <= nr; i++) {
    size_t lo = i < nr ? d[i].lo : len, hi = i < nr ? d[i].hi : len;
    float *a = buf + at, *b = packed + s, *da = buf + lo, *db = packed + k;
    if (to_packed) memcpy(b, a, (lo - at) * sizeof *a), memcpy(db, da, (hi - lo) * sizeof *a);
    else memcpy(a, b, (lo - at) * sizeof *a), memcpy(da, db, (hi - lo) * sizeof *a);
    s += lo - at, k += hi - lo, at = hi;
  }
  return ns;
}

/* The allgather of the encodings of x[0..ns) (this rank's: c->send, `mine`
 * bytes), decoded and summed into x in rank order. Returns 1 when past
 * the break-even density instead (x is then this rank's decoded encoding,
 * for the caller's dense allreduce), 0 when summed, -1 on error. */
static int gather_sparse(compressor_t *c, comm_t *comm, const codec_spec_t *s, size_t mine,
                         float *x, size_t ns) {
  int P = c->nranks, r = c->rank;
  size_t cap = codec_max_bytes(s, ns);
  posted_t p = {comm, c->reqs, 0};
  size_t fixed = codec_bytes(s, ns);
  for (int i = 0; i < P; i++) c->sizes[i] = fixed ? fixed : mine;
  if (!fixed) { /* threshold: the sizes first */
    uint64_t m = mine;
    for (int i = 0; i < P; i++)
      if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_SIZE, &c->sizes[i], sizeof c->sizes[i]));
    for (int j = 0; j < P; j++)
      if (j != r) DT_TRY(post_send(&p, j, TAG_COMPRESS_SIZE, &m, sizeof m));
    DT_TRY(wait_posted(&p));
  }
  /* the most any rank receives (all sizes less the smallest): the same
   * on every rank, so all switch together when sizes differ */
  double total = 0, least = (double)cap;
  for (int i = 0; i < P; i++) {
    if (c->sizes[i] > cap)
      return dt_error("rank %d: compressed allreduce: rank %d announces a %llu-byte message, "
                      "more than a sparse encoding of %zu values takes", r, i,
                      (unsigned long long)c->sizes[i], ns);
    total += (double)c->sizes[i];
    if ((double)c->sizes[i] < least) least = (double)c->sizes[i];
  }
  if (total - least > 2.0 * (P - 1) / P * 4.0 * (double)ns) { /* past break-even: dense */
    c->stats.dense_fallbacks++;
    DT_TRY(decode_timed(c, s, c->send, mine, ns, x, 0, r));
    return 1;
  }
  size_t at[P], pos = 0;
  for (int i = 0; i < P; i++) {
    at[i] = pos;
    if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_GATHER, c->recv + pos, c->sizes[i]));
    pos += i == r ? 0 : c->sizes[i];
  }
  for (int j = 0; j < P; j++)
    if (j != r) DT_TRY(post_send(&p, j, TAG_COMPRESS_GATHER, c->send, mine));
  DT_TRY(wait_posted(&p));
  memset(x, 0, ns * sizeof *x);
  for (int i = 0; i < P; i++)
    DT_TRY(decode_timed(c, s, i == r ? c->send : c->recv + at[i], c->sizes[i], ns, x, 1, i));
  return 0;
}

/* The bucket packed (c->factors: its sparse tensors' values, then its
 * dense ones); the sparse part encoded, its error remembered, allgathered;
 * the dense part (and the sparse past break-even) by the allreduce. */
static int sparse_exchange(compressor_t *c, comm_t *comm, coll_ctx_t *ctx, float *buf,
                           size_t off, size_t len, int64_t step, int stream,
                           const compress_matrix_t *mats, int nmats) {
  codec_spec_t s = sparse_spec_at(c, step);
  range_t dense[nmats + 1];
  int nr = dense_tensors(mats, nmats, off, len, dense);
  DT_TRY(compressor_grow_factors(c, len));
  clip_local(c, buf, len);
  float *v = contribution(c, buf, off, len), *x = c->factors;
  size_t ns = repack(v, x, dense, nr, len, 1), mine = 0;
  if (ns) {
    DT_TRY(grow(c, &s, ns, 0));
    mine = encode_timed(c, &s, x, ns, message_seed(c, stream, step, 0), c->send);
  }
  if (c->mem.residual) { /* the sparse part keeps what it did not send; the dense part nothing */
    memset(c->tmp, 0, len * sizeof *c->tmp);
    if (ns) codec_decode_add(&s, c->send, mine, ns, c->tmp);
    repack(c->scratch, c->tmp, dense, nr, len, 0);
    ef_update(&c->mem, c->scratch, off, len);
    for (int i = 0; i < nr; i++) ef_forget(&c->mem, off + dense[i].lo, dense[i].hi - dense[i].lo);
  }
  int past = ns ? gather_sparse(c, comm, &s, mine, x, ns) : 0;
  if (past < 0) return -1;
  size_t from = past ? 0 : ns;
  if (len > from) DT_TRY(allreduce(ctx, c->cfg.algo, x + from, len - from));
  repack(buf, x, dense, nr, len, 0);
  return 0;
}

int compressor_allreduce(compressor_t *c, coll_ctx_t *ctx, float *buf, size_t off, size_t len,
                         int64_t step, int stream, const compress_matrix_t *mats, int nmats) {
  if (off + len > c->n) return dt_error("compressed allreduce: range past the arena (a bug)");
  if (c->cfg.codec.kind == CODEC_POWERSGD) return powersgd_allreduce(c, ctx, buf, off, len, mats, nmats);
  if (c->cfg.codec.kind == CODEC_NONE || c->cfg.codec.kind == CODEC_FP32)
    return allreduce(ctx, c->cfg.algo, buf, len); /* summable as it is */
  if (c->nranks == 1) return 0; /* nothing to exchange, nothing to compress */
  comm_t *comm = coll_ctx_comm(ctx);
  if (codec_sparse(&c->cfg.codec))
    return sparse_exchange(c, comm, ctx, buf, off, len, step, stream, mats, nmats);
  return dense_exchange(c, comm, buf, off, len, step, stream, mats, nmats);
}
