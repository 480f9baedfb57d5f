/* The communicator of compressed gradients: a buffer's compressed
 * contributions summed over the P ranks, in place, with the same bits on
 * every rank (each rank decodes the same bytes in the same rank order).
 *
 * A bucket is first laid out (plan_layout): its tensors in order, those
 * the codec compresses packed first, the small ones that some codecs
 * leave dense after them, summed by the configured allreduce.
 *
 * Dense encodings (fp16, bf16, int8, onebit, qsgd, terngrad-chunked): scatter-
 * reduce then allgather, as 1-bit SGD's implementation in CNTK does. The
 * packed values are cut into P blocks (coll_block, moved back to the
 * start of a 1-bit column); rank r encodes block j of its contribution
 * and sends it to rank j (P - 1 messages), decodes the P encodings of its
 * own block and sums them in fp32 in rank order, encodes the sum once
 * more and sends it to every rank (P - 1 messages). Steps: 2, each of
 * P - 1 concurrent messages. A block goes as the encodings of its pieces
 * (cut where a tensor starts). Bytes sent by rank r, with E(b_j) the
 * encoding of block j's pieces:
 *     sum_{j != r} E(b_j) + (P - 1) E(b_r)      ~ 2 (P - 1)/P E(n),
 * the ring allreduce's 2 (P - 1)/P 4n with 4n replaced by E(n): fp16 and
 * bf16 move half the ring's bytes, int8 a quarter plus a scale a piece,
 * onebit 1/32 plus two means a column; plus, for onebit, the allreduce's
 * bytes for the small tensors.
 * (A ring that decodes, sums and re-encodes at each of its P - 1 hops
 * moves the same bytes in 2 (P - 1) steps but quantizes a partial sum
 * P - 1 times; this quantizes twice.)
 *
 * Sparse encodings (topk, randomk, threshold, strom, dgc) cannot be
 * summed as they are. By default (--sparse-collective allgather) each
 * rank sends its encoding to every other, and every rank decodes all P in
 * rank order: an allgather, every rank receiving (P - 1) k pairs; the
 * merging collectives (SparCML's, Kylix's: sparse_coll.h, at the end of
 * this file) send unions instead.
 * A rank's message is one encoding a tensor (selection per tensor, as DGC
 * and, without layer normalization, Aji & Heafield select). Bytes sent by
 * rank r: (P - 1) E_r, where E = sum over tensors of 4 + 8k, + the
 * allreduce's; received: sum_{i != r} E_i + the allreduce's. A variable
 * size (threshold) is sent first, 8 bytes to each rank. When what the
 * rank receiving most would receive passes the dense ring's
 * 2 (P - 1)/P 4n (the break-even density), every rank decodes its own and
 * the buffer goes by dense allreduce instead; all ranks know every size,
 * so all switch together. (That switch is decided once, before sending;
 * SparCML's own switches in the middle of its reduction: sparse_coll.h.)
 * Under --sparse-collective sparcml|sparcml:rd|sparcml:split|kylix|auto
 * each rank's pairs (its encodings' indices, by packed position, and
 * their decoded values) go to that collective instead, which sums them
 * into the packed buffer; the small tensors still go by the allreduce.
 *
 * TernGrad with its scalers shared (terngrad, the paper's form) has an
 * exchange of its own, terngrad_shared.c.
 *
 * compress_exchange_bytes (at the end) follows the same branches with the
 * same helpers (the layout, the blocks, codec_bytes, the break-even
 * switch, powersgd_counts): the bytes a step's description gives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"
#include "dtrain/comm.h"

/* The encodings' buffers: `need` bytes each. */
static int grow(compressor_t *c, size_t need) {
  if (need <= c->cap) return 0;
  dt_free(c->send), dt_free(c->recv), dt_free(c->out), dt_free(c->gather);
  c->send = dt_alloc(need), c->recv = dt_alloc(need), c->out = dt_alloc(need);
  c->gather = dt_alloc(need);
  if (!c->send || !c->recv || !c->out || !c->gather) return -1;
  c->cap = need;
  return 0;
}

int compressor_grow_buffers(compressor_t *c, size_t need) { return grow(c, need); }

int compressor_new(const compress_config_t *cfg, size_t n, int rank, int nranks,
                   compressor_t **out) {
  compressor_t *c = calloc(1, sizeof *c);
  *out = c;
  if (!c) return dt_error("out of memory");
  c->cfg = *cfg, c->rank = rank, c->nranks = nranks, c->n = n;
  int dgc = cfg->codec.kind == CODEC_DGC;
  /* factor masking for DGC: a sparse codec's sent values restart their
   * momentum; a dense codec sends every value, so nothing is masked */
  if (cfg->error_feedback &&
      ef_init(&c->mem, n, cfg->shared_momentum ? 0 : cfg->momentum, dgc) != 0) return -1;
  if (cfg->shared_momentum && (!(c->shared_m = dt_alloc_floats(n + 1)) ||
                               (cfg->error_feedback && !(c->server_e = dt_alloc_floats(n + 1)))))
    return -1;
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
  dt_free(c->q), dt_free(c->q_ready), dt_free(c->factors), dt_free(c->shared_m), dt_free(c->server_e);
  sparse_ws_free(&c->sw);
  dt_free(c->pair_idx);
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

int compress_tensors_in(const model_t *m, size_t off, size_t len, int *first) {
  int n = 0;
  *first = m->ntensors;
  for (int i = 0; i < m->ntensors; i++) {
    if (m->tensors[i].off < off || m->tensors[i].off >= off + len) continue;
    if (i < *first) *first = i;
    n++;
  }
  return n;
}

int compressor_grow_factors(compressor_t *c, size_t n) {
  if (c->factors_cap >= n + 1) return 0;
  dt_free(c->factors);
  if (!(c->factors = dt_alloc_floats(n + 1))) return -1;
  c->factors_cap = n + 1;
  return 0;
}

int compressor_has_memory(const compressor_t *c) { return c->mem.residual != NULL; }

int compressor_takes_warmup(const compressor_t *c) {
  return c->cfg.codec.kind == CODEC_DGC || c->shared_m != NULL;
}

int compressor_state(compressor_t *c, compress_state_t out[COMPRESS_MAX_STATE]) {
  int n = 0;
  if (c->mem.residual) out[n++] = (compress_state_t){"residual", c->mem.residual, 1};
  if (c->mem.velocity) out[n++] = (compress_state_t){"velocity", c->mem.velocity, 1};
  if (c->q) out[n++] = (compress_state_t){"powersgd_q", c->q, 0};
  if (c->q_ready) out[n++] = (compress_state_t){"powersgd_q_ready", c->q_ready, 0};
  if (c->shared_m) out[n++] = (compress_state_t){"momentum", c->shared_m, 0};
  if (c->server_e) out[n++] = (compress_state_t){"server_residual", c->server_e, 1};
  return n;
}

/* The seed of message `msg` of a buffer (stream) at a step, on this rank. */
static uint64_t message_seed(const compressor_t *c, int stream, int64_t step, int msg) {
  uint64_t base = rng_derive(c->cfg.seed ^ 0x636f6d7072657373ull, (uint64_t)stream, (uint64_t)step);
  return rng_derive(base, (uint64_t)c->rank, (uint64_t)msg);
}

/* ---- a bucket's layout ------------------------------------------------------
 * Its tensors (slots) in order, the compressed ones packed first, then
 * the small ones. Codecs that leave small tensors dense (codec_small_dense:
 * the sparse ones and 1-bit) leave vectors (biases) and tensors of at most
 * SMALL_TENSOR values: CNTK's 1-bit SGD lets such "small objects" bypass
 * quantization (rank 1 or at most 1024 values), the DGC reference
 * compresses only tensors of two dimensions or more, and at R = 0.001 such
 * a tensor has at most one value to send. A buffer given no matrices is
 * compressed whole. 1-bit SGD packs each weight matrix transposed
 * (codec_by_column), so that the values of a column, which share a pair
 * of means, are consecutive. */
#define SMALL_TENSOR 1024

typedef struct {
  size_t at, len;     /* the tensor's range in the bucket */
  size_t rows, cols;  /* its shape (a vector, or values of no tensor: one row) */
  size_t packed;      /* where it starts in the packed buffer */
  size_t group;       /* 1-bit: the values that share a pair of means (0: the codec's) */
  int small, transpose;
} slot_t;

typedef struct {
  slot_t *slot;       /* room for 2 nmats + 1 */
  int n;
  size_t nq;          /* the compressed values: packed[0..nq) */
  int identity;       /* the packed buffer is the bucket as it is */
} layout_t;

static void add_slot(layout_t *L, size_t at, size_t len, size_t rows) {
  L->slot[L->n++] = (slot_t){.at = at, .len = len, .rows = rows, .cols = len / rows};
}

static void plan_layout(const codec_spec_t *s, const compress_matrix_t *mats, int nmats,
                        size_t off, size_t len, layout_t *L) {
  int leave_small = nmats > 0 && codec_small_dense(s), by_column = codec_by_column(s);
  size_t at = 0;
  L->n = 0;
  for (int i = 0; i < nmats; i++) {
    size_t rows = mats[i].rows ? mats[i].rows : 1, size = rows * mats[i].cols;
    if (mats[i].off < off + at || mats[i].off >= off + len || size == 0) continue;
    size_t start = mats[i].off - off;
    if (start > at) add_slot(L, at, start - at, 1);
    if (size > len - start) size = len - start, rows = 1;
    add_slot(L, start, size, rows);
    at = start + size;
  }
  if (at < len || L->n == 0) add_slot(L, at, len - at, 1);
  size_t nq = 0, small = 0;
  L->identity = 1;
  for (int i = 0; i < L->n; i++) {
    slot_t *t = &L->slot[i];
    t->small = leave_small && (t->rows < 2 || t->len <= SMALL_TENSOR);
    t->transpose = by_column && !t->small && t->rows >= 2;
    t->group = t->transpose ? t->rows : 0;
    if (t->small || t->transpose) L->identity = 0;
    if (!t->small) t->packed = nq, nq += t->len;
  }
  for (int i = 0; i < L->n; i++)
    if (L->slot[i].small) L->slot[i].packed = nq + small, small += L->slot[i].len;
  L->nq = nq;
}

/* Between the bucket b and the packed buffer p, in the direction `to_packed`. */
static void pack(const layout_t *L, float *b, float *p, int to_packed) {
  for (int i = 0; i < L->n; i++) {
    const slot_t *t = &L->slot[i];
    float *bt = b + t->at, *pt = p + t->packed;
    if (!t->transpose) {
      memcpy(to_packed ? pt : bt, to_packed ? bt : pt, t->len * sizeof *bt);
      continue;
    }
    for (size_t r = 0; r < t->rows; r++)
      for (size_t k = 0; k < t->cols; k++) {
        if (to_packed) pt[k * t->rows + r] = bt[r * t->cols + k];
        else bt[r * t->cols + k] = pt[k * t->rows + r];
      }
  }
}

/* The compressed slot holding packed position `at` (< nq). */
static const slot_t *slot_at(const layout_t *L, size_t at) {
  for (int i = 0; i < L->n; i++) {
    const slot_t *t = &L->slot[i];
    if (!t->small && at >= t->packed && at < t->packed + t->len) return t;
  }
  return &L->slot[0];
}

static size_t encode_timed(compressor_t *c, const codec_spec_t *s, const float *x, size_t n,
                           uint64_t seed, uint8_t *out) {
  double t0 = dt_now();
  size_t b = codec_encode(s, x, n, seed, out, c->scratch);
  c->stats.encode_sec += dt_now() - t0;
  return b;
}

/* acc[0..n) += decode(in); names the peer it came from. */
static int decode_timed(compressor_t *c, const codec_spec_t *s, const uint8_t *in, size_t bytes,
                        size_t n, float *acc, int from) {
  double t0 = dt_now();
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

/* What this rank contributes: the buffer itself, or with memory the
 * buffer added into it (the memory is then what is encoded). */
static float *contribution(compressor_t *c, float *buf, size_t off, size_t len) {
  if (!c->mem.residual) return buf;
  ef_compensate(&c->mem, buf, off, len);
  return c->mem.residual + off;
}

/* The memory after this rank's encodings, c->tmp[0..nq) (packed) being
 * them decoded: it keeps what they did not send, and nothing of the small
 * tensors, which went whole. */
static void remember(compressor_t *c, const layout_t *L, size_t off, size_t len) {
  if (!c->mem.residual) return;
  float *sent = c->tmp;
  if (!L->identity) {
    memset(c->tmp + L->nq, 0, (len - L->nq) * sizeof *c->tmp);
    pack(L, c->scratch, c->tmp, 0);
    sent = c->scratch;
  }
  ef_update(&c->mem, sent, off, len);
  for (int i = 0; i < L->n; i++)
    if (L->slot[i].small) ef_forget(&c->mem, off + L->slot[i].at, L->slot[i].len);
}

/* ---- dense encodings: scatter-reduce, allgather ------------------------------ */

/* Where block j of the packed values starts: coll_block's cut, moved back
 * to the start of its 1-bit column, so that no column has two owners. */
static size_t block_start(const layout_t *L, int P, int j) {
  size_t lo = L->nq, n;
  if (j < P) coll_block(L->nq, P, j, &lo, &n);
  if (lo >= L->nq) return L->nq;
  const slot_t *t = slot_at(L, lo);
  return t->group ? t->packed + (lo - t->packed) / t->group * t->group : lo;
}

/* The end of the piece of [at, hi) that starts at `at` (where a slot
 * ends), and the codec for it (a 1-bit column's length). */
static size_t piece_end(const layout_t *L, const codec_spec_t *s, size_t at, size_t hi,
                        codec_spec_t *ps) {
  *ps = *s;
  if (at >= hi) return hi;
  const slot_t *t = slot_at(L, at);
  ps->group = t->group;
  return t->packed + t->len < hi ? t->packed + t->len : hi;
}

/* The seed of the piece at `at` of a block at `lo`: element i of the piece
 * draws what element at - lo + i of the block would (codec_uniform). */
static uint64_t piece_seed(uint64_t seed, size_t lo, size_t at) {
  return seed + (uint64_t)(at - lo) * 0x9e3779b97f4a7c15ull;
}

static size_t block_bytes(const layout_t *L, const codec_spec_t *s, size_t lo, size_t hi) {
  size_t b = 0, at = lo, e;
  codec_spec_t ps;
  do { /* a block of no values is one empty piece */
    e = piece_end(L, s, at, hi, &ps);
    b += codec_bytes(&ps, e - at);
  } while ((at = e) < hi);
  return b;
}

/* The block [lo, hi) of x encoded piece by piece into out; its bytes. */
static size_t encode_block(compressor_t *c, const codec_spec_t *s, const layout_t *L,
                           const float *x, size_t lo, size_t hi, uint64_t seed, uint8_t *out) {
  size_t b = 0, at = lo, e;
  codec_spec_t ps;
  do {
    e = piece_end(L, s, at, hi, &ps);
    b += encode_timed(c, &ps, x + at, e - at, piece_seed(seed, lo, at), out + b);
  } while ((at = e) < hi);
  return b;
}

/* acc[0..hi - lo) (the block's values) = 0 + decode(in), or += when `add`. */
static int decode_block(compressor_t *c, const codec_spec_t *s, const layout_t *L,
                        const uint8_t *in, size_t lo, size_t hi, float *acc, int add, int from) {
  size_t b = 0, at = lo, e;
  codec_spec_t ps;
  if (!add) memset(acc, 0, (hi - lo) * sizeof *acc);
  do {
    e = piece_end(L, s, at, hi, &ps);
    size_t m = codec_bytes(&ps, e - at);
    DT_TRY(decode_timed(c, &ps, in + b, m, e - at, acc + (at - lo), from));
    b += m;
  } while ((at = e) < hi);
  return 0;
}

/* The P blocks of the packed values: where each starts (bound[P] = nq)
 * and its encoded bytes. */
static void plan_blocks(const layout_t *L, const codec_spec_t *s, int P, size_t *bound,
                        size_t *bytes) {
  for (int j = 0; j <= P; j++) bound[j] = block_start(L, P, j);
  for (int j = 0; j < P; j++) bytes[j] = block_bytes(L, s, bound[j], bound[j + 1]);
}

static int dense_exchange(compressor_t *c, comm_t *comm, coll_ctx_t *ctx, float *buf, size_t off,
                          size_t len, int64_t step, int stream, const compress_matrix_t *mats,
                          int nmats) {
  const codec_spec_t *s = &c->cfg.codec;
  slot_t slots[2 * nmats + 1];
  layout_t L = {.slot = slots};
  plan_layout(s, mats, nmats, off, len, &L);
  int P = c->nranks, r = c->rank;
  size_t bound[P + 1], bytes[P], soff[P], total = 0, most = 0;
  plan_blocks(&L, s, P, bound, bytes);
  for (int j = 0; j < P; j++) {
    total += bytes[j];
    most = bytes[j] > most ? bytes[j] : most;
  }
  DT_TRY(grow(c, total > P * most ? total : P * most));
  float *v = contribution(c, buf, off, len), *x = v, *out = buf;
  if (!L.identity) {
    DT_TRY(compressor_grow_factors(c, len));
    x = out = c->factors;
    pack(&L, v, x, 1);
  }
  size_t at = 0;
  for (int j = 0; j < P; j++) {
    soff[j] = at;
    at += encode_block(c, s, &L, x, bound[j], bound[j + 1], message_seed(c, stream, step, j),
                       c->send + at);
  }
  for (int j = 0; c->mem.residual && j < P; j++)
    DT_TRY(decode_block(c, s, &L, c->send + soff[j], bound[j], bound[j + 1], c->tmp + bound[j], 0, r));
  remember(c, &L, off, len);
  size_t mine = bytes[r];
  posted_t p = {comm, c->reqs, 0};
  for (int i = 0; i < P; i++)
    if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_SCATTER, c->recv + (size_t)i * mine, mine));
  for (int j = 0; j < P; j++)
    if (j != r) DT_TRY(post_send(&p, j, TAG_COMPRESS_SCATTER, c->send + soff[j], bytes[j]));
  DT_TRY(wait_posted(&p));
  /* my block: the P contributions decoded and summed in rank order */
  float *acc = out + bound[r];
  memset(acc, 0, (bound[r + 1] - bound[r]) * sizeof *acc);
  for (int i = 0; i < P; i++)
    DT_TRY(decode_block(c, s, &L, i == r ? c->send + soff[r] : c->recv + (size_t)i * mine, bound[r],
                        bound[r + 1], acc, 1, i));
  /* re-encoded once. Its error is fed back only under the shared
   * momentum, as 1-bit Adam's "server error": there the decoded sum becomes
   * the momentum, which would carry an error 1/(1 - m) times; for 1-bit
   * SGD on the gradient a memory at the owner (CNTK's residual of each
   * aggregated stripe) made it worse each time it was measured
   * (docs/COMPRESSION.md) */
  float *owed = c->server_e ? c->server_e + off + bound[r] : NULL;
  for (size_t i = 0; owed && i < bound[r + 1] - bound[r]; i++) acc[i] += owed[i];
  encode_block(c, s, &L, out, bound[r], bound[r + 1], message_seed(c, stream, step, P + r), c->out);
  if (owed) {
    float *sent = c->scratch;
    DT_TRY(decode_block(c, s, &L, c->out, bound[r], bound[r + 1], sent, 0, r));
    for (size_t i = 0; i < bound[r + 1] - bound[r]; i++) owed[i] = acc[i] - sent[i];
  }
  at = 0;
  for (int i = 0; i < P; i++) {
    if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_GATHER, c->gather + at, bytes[i]));
    soff[i] = at;
    at += bytes[i];
  }
  for (int j = 0; j < P; j++)
    if (j != r) DT_TRY(post_send(&p, j, TAG_COMPRESS_GATHER, c->out, mine));
  DT_TRY(wait_posted(&p));
  for (int i = 0; i < P; i++)
    DT_TRY(decode_block(c, s, &L, i == r ? c->out : c->gather + soff[i], bound[i], bound[i + 1],
                        out + bound[i], 0, i));
  if (L.nq < len) DT_TRY(allreduce(ctx, c->cfg.algo, out + L.nq, len - L.nq));
  if (!L.identity) pack(&L, buf, out, 0);
  return 0;
}

/* ---- sparse encodings: allgather ------------------------------------------- */

/* The warm-up (--compress-warmup-steps W): DGC's density falls from 25%
 * by a factor 4 at each quarter of the W steps (75%, 93.75%, 98.4%, 99.6%
 * sparsity), then R; any other codec sends its W first steps dense. */
codec_spec_t compress_codec_at(const compress_config_t *c, int64_t step) {
  codec_spec_t s = c->codec;
  int64_t w = c->warmup_steps;
  if (w <= 0 || step >= w) return s;
  if (s.kind != CODEC_DGC) return (codec_spec_t){.kind = CODEC_NONE};
  double d = pow(0.25, 1.0 + (double)(4 * step / w));
  if (d > s.param) s.param = d;
  return s;
}

static int same_codec(const codec_spec_t *a, const codec_spec_t *b) {
  return a->kind == b->kind && a->param == b->param && a->stochastic == b->stochastic &&
         a->group == b->group;
}

/* The warm-up's codec changes monotonically (dense, or DGC's density
 * falling), so the steps alike with `from` are one run: found by
 * bisection, whatever W. */
int64_t compress_phase_end(const compress_config_t *c, int64_t from) {
  if (from >= c->warmup_steps) return 0;
  codec_spec_t s = compress_codec_at(c, from);
  int64_t lo = from, hi = c->warmup_steps; /* lo alike; hi the warm-up's end or not alike */
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    codec_spec_t m = compress_codec_at(c, mid);
    if (same_codec(&m, &s)) lo = mid;
    else hi = mid;
  }
  return hi;
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

/* The most bytes a rank's message can take, and its size when fixed (0:
 * it depends on the values). */
static size_t message_max(const layout_t *L, const codec_spec_t *s) {
  size_t b = 0;
  for (int i = 0; i < L->n; i++)
    if (!L->slot[i].small) b += codec_max_bytes(s, L->slot[i].len);
  return b;
}
static size_t message_fixed(const layout_t *L, const codec_spec_t *s) {
  size_t b = 0;
  for (int i = 0; i < L->n; i++) {
    if (L->slot[i].small) continue;
    size_t m = codec_bytes(s, L->slot[i].len);
    if (!m) return 0;
    b += m;
  }
  return b;
}

/* The least bytes a rank's message takes: each tensor's encoding of no
 * value (threshold's, when nothing reaches T). */
static size_t message_least(const layout_t *L, const codec_spec_t *s) {
  size_t b = 0;
  for (int i = 0; i < L->n; i++)
    if (!L->slot[i].small) b += codec_max_bytes(s, 0);
  return b;
}

/* SparCML's switch: the bytes past which the sparse messages of nq values
 * cost more than the dense ring's 2 (P - 1)/P 4 nq. */
static double break_even_bytes(int P, size_t nq) { return 2.0 * (P - 1) / P * 4.0 * (double)nq; }

/* Past break-even when what the rank receiving most would receive (all
 * sizes less the smallest) passes it: the same on every rank, so all
 * switch together when sizes differ. */
static int past_break_even(const uint64_t *sizes, int P, size_t nq) {
  double total = 0, least = INFINITY;
  for (int i = 0; i < P; i++) {
    total += (double)sizes[i];
    if ((double)sizes[i] < least) least = (double)sizes[i];
  }
  return total - least > break_even_bytes(P, nq);
}

/* This rank's message: x's compressed tensors encoded one by one. */
static size_t encode_tensors(compressor_t *c, const codec_spec_t *s, const layout_t *L,
                             const float *x, uint64_t seed, uint8_t *out) {
  size_t b = 0;
  for (int i = 0; i < L->n; i++) {
    const slot_t *t = &L->slot[i];
    if (!t->small) b += encode_timed(c, s, x + t->packed, t->len, piece_seed(seed, 0, t->packed), out + b);
  }
  return b;
}

/* acc[0..nq) += the message `in` of `bytes`, tensor by tensor: each
 * encoding's size read from it (codec_message_bytes) and checked against
 * what is left before it is decoded. */
static int decode_tensors(compressor_t *c, const codec_spec_t *s, const layout_t *L,
                          const uint8_t *in, size_t bytes, float *acc, int from) {
  size_t b = 0;
  for (int i = 0; i < L->n; i++) {
    const slot_t *t = &L->slot[i];
    if (t->small) continue;
    size_t m = codec_message_bytes(s, in + b, bytes - b, t->len);
    if (m > bytes - b)
      return dt_error("rank %d: compressed allreduce: message from rank %d: malformed: %zu bytes "
                      "left for an encoding of %zu", c->rank, from, bytes - b, m);
    DT_TRY(decode_timed(c, s, in + b, m, t->len, acc + t->packed, from));
    b += m;
  }
  if (b != bytes)
    return dt_error("rank %d: compressed allreduce: message from rank %d: %zu bytes past its "
                    "encodings", c->rank, from, bytes - b);
  return 0;
}

/* Every rank's message size into c->sizes: the codec's when fixed, else
 * (threshold, strom) sent first, 8 bytes to every peer, and checked. */
static int exchange_sizes(compressor_t *c, comm_t *comm, const codec_spec_t *s, const layout_t *L,
                          size_t mine) {
  int P = c->nranks, r = c->rank;
  size_t cap = message_max(L, s), fixed = message_fixed(L, s);
  posted_t p = {comm, c->reqs, 0};
  for (int i = 0; i < P; i++) c->sizes[i] = fixed ? fixed : mine;
  if (fixed) return 0;
  uint64_t m = mine;
  for (int i = 0; i < P; i++)
    if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_SIZE, &c->sizes[i], sizeof c->sizes[i]));
  for (int j = 0; j < P; j++)
    if (j != r) DT_TRY(post_send(&p, j, TAG_COMPRESS_SIZE, &m, sizeof m));
  DT_TRY(wait_posted(&p));
  for (int i = 0; i < P; i++)
    if (c->sizes[i] > cap)
      return dt_error("rank %d: compressed allreduce: rank %d announces a %llu-byte message, "
                      "more than a sparse encoding of %zu values takes", r, i,
                      (unsigned long long)c->sizes[i], L->nq);
  return 0;
}

/* The allgather of this rank's message (c->send, `mine` bytes) of the
 * packed x[0..nq), decoded and summed into x in rank order. Returns 1 when
 * past the break-even density instead (x is then this rank's decoded
 * encoding, for the caller's dense allreduce), 0 when summed, -1 on error. */
static int gather_sparse(compressor_t *c, comm_t *comm, const codec_spec_t *s, const layout_t *L,
                         size_t mine, float *x, int sizes_known) {
  int P = c->nranks, r = c->rank;
  size_t ns = L->nq;
  posted_t p = {comm, c->reqs, 0};
  if (!sizes_known) DT_TRY(exchange_sizes(c, comm, s, L, mine));
  memset(x, 0, ns * sizeof *x);
  if (past_break_even(c->sizes, P, ns)) {
    c->stats.dense_fallbacks++;
    DT_TRY(decode_tensors(c, s, L, c->send, mine, x, r));
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
  for (int i = 0; i < P; i++)
    DT_TRY(decode_tensors(c, s, L, i == r ? c->send : c->recv + at[i], c->sizes[i], x, i));
  return 0;
}

/* ---- sparse encodings: SparCML, Kylix (sparse_coll.h) ---------------------- */

/* The pairs this rank's message holds, by packed index, into c->pair_idx
 * and c->scratch: each tensor's indices read from its encoding (the
 * sparse codecs' u32 count, then one u32 a value whose low 31 bits are
 * the index: codec_sparse.c's pairs, codec_strom.c's signed words), the
 * values from its decoding, c->tmp[0..nq). */
static size_t own_pairs(compressor_t *c, const codec_spec_t *s, const layout_t *L, size_t mine) {
  const uint8_t *in = c->send;
  size_t b = 0, k = 0;
  for (int i = 0; i < L->n; i++) {
    const slot_t *t = &L->slot[i];
    if (t->small) continue;
    size_t m = codec_message_bytes(s, in + b, mine - b, t->len);
    uint32_t count, w;
    memcpy(&count, in + b, 4);
    for (uint32_t j = 0; j < count; j++) {
      memcpy(&w, in + b + 4 + 4 * (size_t)j, 4);
      size_t g = t->packed + (w & 0x7fffffffu);
      c->pair_idx[k] = (uint32_t)g, c->scratch[k++] = c->tmp[g];
    }
    b += m;
  }
  return k;
}

/* The pairs a fixed-size message holds: its bytes less a count a tensor, 8 a pair. */
static double fixed_pairs(const layout_t *L, size_t fixed) {
  int tensors = 0;
  for (int i = 0; i < L->n; i++) tensors += !L->slot[i].small;
  return ((double)fixed - 4.0 * tensors) / 8.0;
}

/* The collective --sparse-collective names, or the one its costs pick
 * (sparcml, auto: for a size that depends on the values, after every
 * rank's size is known, so that all pick alike). */
static sparse_coll_t which_sparse(compressor_t *c, comm_t *comm, coll_ctx_t *ctx,
                                  const codec_spec_t *s, const layout_t *L, size_t mine,
                                  int *deg, int *nd, int *sizes_known) {
  int P = c->nranks;
  sparse_coll_t a = c->cfg.sparse;
  size_t fixed = message_fixed(L, s), enc = fixed;
  double K = fixed ? fixed_pairs(L, fixed) : 0, lat, bw;
  coll_ctx_link(ctx, &lat, &bw);
  if (!fixed && (a == SPARSE_COLL_SPARCML || a == SPARSE_COLL_AUTO || a == SPARSE_COLL_KYLIX)) {
    if (exchange_sizes(c, comm, s, L, mine) != 0) return SPARSE_COLL_COUNT;
    *sizes_known = 1;
    double total = 0;
    for (int i = 0; i < P; i++) total += (double)c->sizes[i];
    enc = (size_t)(total / P);
    K = fixed_pairs(L, enc);
  }
  *nd = sparse_kylix_degrees(P, L->nq, K, lat, bw, deg);
  return sparse_pick(a, P, L->nq, K, enc, fixed != 0, lat, bw);
}

/* x[0..nq) = the sum of every rank's pairs, by the collective chosen;
 * c->tmp[0..nq) holds this rank's message decoded. Returns 1 when it
 * was the allgather's to do, 0 when summed, -1 on error. */
static int reduce_sparse(compressor_t *c, comm_t *comm, coll_ctx_t *ctx, const codec_spec_t *s,
                         const layout_t *L, size_t mine, float *x, int *sizes_known) {
  int deg[SPARSE_MAX_LAYERS], nd = 1;
  if (c->nranks > SPARSE_MAX_RANKS) return 1;
  sparse_coll_t a = which_sparse(c, comm, ctx, s, L, mine, deg, &nd, sizes_known);
  if (a == SPARSE_COLL_COUNT) return -1;
  if (a == SPARSE_COLL_ALLGATHER) return 1;
  if (c->pair_cap < L->nq + 1) {
    dt_free(c->pair_idx);
    if (!(c->pair_idx = dt_alloc((L->nq + 1) * sizeof *c->pair_idx))) return -1;
    c->pair_cap = L->nq + 1;
  }
  size_t k = own_pairs(c, s, L, mine);
  uint32_t *i = c->pair_idx;
  float *v = c->scratch;
  if (a == SPARSE_COLL_SPARCML_RD) return sparse_sparcml_rd(&c->sw, comm, i, v, k, L->nq, x);
  if (a == SPARSE_COLL_SPARCML_SPLIT) return sparse_sparcml_split(&c->sw, comm, i, v, k, L->nq, x);
  return sparse_kylix(&c->sw, comm, deg, nd, i, v, k, L->nq, x);
}

/* The bucket packed (c->factors); its compressed tensors encoded, their
 * error remembered, allgathered; the small tensors (and the rest past
 * break-even) by the allreduce. */
static int sparse_exchange(compressor_t *c, comm_t *comm, coll_ctx_t *ctx, codec_spec_t s,
                           float *buf, size_t off, size_t len, int64_t step, int stream,
                           const compress_matrix_t *mats, int nmats) {
  slot_t slots[2 * nmats + 1];
  layout_t L = {.slot = slots};
  plan_layout(&s, mats, nmats, off, len, &L);
  DT_TRY(compressor_grow_factors(c, len));
  DT_TRY(grow(c, (size_t)c->nranks * message_max(&L, &s)));
  clip_local(c, buf, len);
  float *x = c->factors;
  pack(&L, contribution(c, buf, off, len), x, 1);
  size_t mine = L.nq ? encode_tensors(c, &s, &L, x, message_seed(c, stream, step, 0), c->send) : 0;
  int merging = c->cfg.sparse != SPARSE_COLL_ALLGATHER && L.nq;
  if (c->mem.residual || merging) {
    memset(c->tmp, 0, L.nq * sizeof *c->tmp);
    if (L.nq) DT_TRY(decode_tensors(c, &s, &L, c->send, mine, c->tmp, c->rank));
  }
  remember(c, &L, off, len);
  int known = 0, past = merging ? reduce_sparse(c, comm, ctx, &s, &L, mine, x, &known) : 1;
  if (past == 1) past = L.nq ? gather_sparse(c, comm, &s, &L, mine, x, known) : 0;
  if (past < 0) return -1;
  size_t from = past ? 0 : L.nq;
  if (len > from) DT_TRY(allreduce(ctx, c->cfg.algo, x + from, len - from));
  pack(&L, buf, x, 0);
  return 0;
}

/* compress_exchange_bytes below follows the same branches. */
static int codec_allreduce(compressor_t *c, coll_ctx_t *ctx, float *buf, size_t off, size_t len,
                           int64_t step, int stream, const compress_matrix_t *mats, int nmats) {
  codec_spec_t s = compress_codec_at(&c->cfg, step);
  if (s.kind == CODEC_POWERSGD) return powersgd_allreduce(c, ctx, buf, off, len, mats, nmats);
  if (s.kind == CODEC_NONE || s.kind == CODEC_FP32) /* summable as it is; the warm-up's steps */
    return allreduce(ctx, c->cfg.algo, buf, len);
  if (c->nranks == 1) return 0; /* nothing to exchange, nothing to compress */
  comm_t *comm = coll_ctx_comm(ctx);
  if (s.kind == CODEC_TERNGRAD) /* the paper's: scalers shared (terngrad_shared.c) */
    return terngrad_allreduce(c, comm, buf, off, len, step, stream, mats, nmats);
  if (codec_sparse(&s))
    return sparse_exchange(c, comm, ctx, s, buf, off, len, step, stream, mats, nmats);
  return dense_exchange(c, comm, ctx, buf, off, len, step, stream, mats, nmats);
}

/* --momentum-correction shared (1-bit Adam's compressed momentum, Tang et
 * al. 2021; Zheng et al. 2019's error-feedback momentum SGD): what a rank
 * sends, through the memory and the codec, is its share of the momentum
 * step, g_r + (m / P) M, where M is the last decoded sum (the same on every
 * rank); the new sum is the step the optimizer takes (without momentum)
 * and the next M. A sparse codec would zero M where it sent nothing, so
 * dense codecs only (config.c). The warm-up's dense steps send it exact:
 * plain momentum SGD. */
static int shared_momentum_allreduce(compressor_t *c, coll_ctx_t *ctx, float *buf, size_t off,
                                     size_t len, int64_t step, int stream,
                                     const compress_matrix_t *mats, int nmats) {
  float *M = c->shared_m + off, share = c->cfg.momentum / (float)c->nranks;
  for (size_t i = 0; i < len; i++) buf[i] += share * M[i];
  int rc = codec_allreduce(c, ctx, buf, off, len, step, stream, mats, nmats);
  if (rc == 0) memcpy(M, buf, len * sizeof *M);
  return rc;
}

int compressor_allreduce(compressor_t *c, coll_ctx_t *ctx, float *buf, size_t off, size_t len,
                         int64_t step, int stream, const compress_matrix_t *mats, int nmats) {
  if (off + len > c->n) return dt_error("compressed allreduce: range past the arena (a bug)");
  if (c->shared_m) return shared_momentum_allreduce(c, ctx, buf, off, len, step, stream, mats, nmats);
  return codec_allreduce(c, ctx, buf, off, len, step, stream, mats, nmats);
}

/* ---- bytes on the wire: the exchange's branches, counted ------------------- */

static void add_bytes(compress_bytes_t *b, size_t sent, size_t received) {
  b->sent += sent, b->received += received;
  b->sent_min += sent, b->received_min += received;
}

/* The plain allreduce of `count` floats by c->algo (a part of a bucket, or
 * all of it). */
static int allreduce_part(const compress_config_t *c, int rank, int P, size_t count,
                          compress_bytes_t *b) {
  size_t sent, received;
  DT_TRY(coll_allreduce_bytes(c->algo, P, rank, count, &sent, &received));
  add_bytes(b, sent, received);
  return 0;
}

/* Dense: block j to its owner j, then my re-encoded block to every rank;
 * the same bytes each way (see the file's header). */
static void dense_bytes(const layout_t *L, const codec_spec_t *s, int rank, int P,
                        compress_bytes_t *b) {
  size_t bound[P + 1], bytes[P], n = 0;
  plan_blocks(L, s, P, bound, bytes);
  for (int j = 0; j < P; j++) n += j == rank ? (size_t)(P - 1) * bytes[j] : bytes[j];
  add_bytes(b, n, n);
}

/* threshold: the sizes (8 bytes to and from each peer), then either the
 * messages with the small tensors' allreduce, or past break-even the
 * allreduce of the whole. A message of mine is at least `least` and,
 * short of break-even, at most the break-even bytes B (the total less the
 * least is at most B, and that is at least mine); what I receive is at
 * most B too. */
static int variable_bytes(const compress_config_t *c, const layout_t *L, const codec_spec_t *s,
                          int rank, int P, size_t len, compress_bytes_t *b) {
  size_t peers = (size_t)(P - 1), sizes = peers * sizeof(uint64_t);
  size_t small_s, small_r, all_s, all_r;
  DT_TRY(coll_allreduce_bytes(c->algo, P, rank, len - L->nq, &small_s, &small_r));
  DT_TRY(coll_allreduce_bytes(c->algo, P, rank, len, &all_s, &all_r));
  size_t B = (size_t)floor(break_even_bytes(P, L->nq)), most = message_max(L, s);
  size_t least = peers * message_least(L, s);
  size_t sent_most = peers * (most < B ? most : B) + small_s;
  size_t recv_most = (peers * most < B ? peers * most : B) + small_r;
  b->exact = 0;
  b->sent_min += sizes + (least + small_s < all_s ? least + small_s : all_s);
  b->received_min += sizes + (least + small_r < all_r ? least + small_r : all_r);
  b->sent += sizes + (sent_most > all_s ? sent_most : all_s);
  b->received += sizes + (recv_most > all_r ? recv_most : all_r);
  return 0;
}

/* Sparse: my message to every peer and theirs to me, and the small
 * tensors' allreduce; or past break-even the allreduce of the whole. */
static int sparse_bytes(const compress_config_t *c, const layout_t *L, const codec_spec_t *s,
                        int rank, int P, size_t len, compress_bytes_t *b) {
  if (L->nq == 0) return allreduce_part(c, rank, P, len, b);
  size_t fixed = message_fixed(L, s);
  if (!fixed) return variable_bytes(c, L, s, rank, P, len, b);
  uint64_t sizes[P];
  for (int i = 0; i < P; i++) sizes[i] = fixed;
  if (past_break_even(sizes, P, L->nq)) {
    b->pattern = "allreduce";
    return allreduce_part(c, rank, P, len, b);
  }
  add_bytes(b, (size_t)(P - 1) * fixed, (size_t)(P - 1) * fixed);
  return allreduce_part(c, rank, P, len - L->nq, b);
}

/* The merging collectives' bytes are the union's: bounded tensor by
 * tensor by the pairs a rank selects of each, [kmin, kmax] (sparse_cost.c's
 * formulas are monotone in the counts). In a range, a set of g ranks holds
 * of tensor t at least kmin_t less what of t lies outside the range, and
 * at most g kmax_t or what of t lies inside. */
typedef struct {
  const layout_t *L;
  const codec_spec_t *s;
  int fixed;
} pair_bounds_t;

static void tensor_pairs(const pair_bounds_t *a, const slot_t *t, size_t *kmin, size_t *kmax) {
  if (!a->fixed) {
    *kmin = 0, *kmax = t->len;
    return;
  }
  *kmin = *kmax = (codec_bytes(a->s, t->len) - 4) / 8;
}

static size_t union_bound(void *arg, uint64_t ranks, size_t lo, size_t hi, int most) {
  const pair_bounds_t *a = arg;
  size_t u = 0, g = (size_t)__builtin_popcountll(ranks);
  for (int i = 0; i < a->L->n; i++) {
    const slot_t *t = &a->L->slot[i];
    if (t->small) continue;
    size_t tlo = t->packed > lo ? t->packed : lo;
    size_t thi = t->packed + t->len < hi ? t->packed + t->len : hi;
    size_t in = thi > tlo ? thi - tlo : 0, kmin, kmax;
    tensor_pairs(a, t, &kmin, &kmax);
    if (most) u += g * kmax < in ? g * kmax : in;
    else u += kmin > t->len - in ? kmin - (t->len - in) : 0;
  }
  return u;
}

static size_t union_least(void *arg, uint64_t ranks, size_t lo, size_t hi) {
  return union_bound(arg, ranks, lo, hi, 0);
}
static size_t union_most(void *arg, uint64_t ranks, size_t lo, size_t hi) {
  return union_bound(arg, ranks, lo, hi, 1);
}

/* acc widened to take x in (first: acc is x). */
static void widen(compress_bytes_t *acc, const compress_bytes_t *x, int first) {
  if (first) {
    *acc = *x;
    return;
  }
  if (x->sent > acc->sent) acc->sent = x->sent;
  if (x->received > acc->received) acc->received = x->received;
  if (x->sent_min < acc->sent_min) acc->sent_min = x->sent_min;
  if (x->received_min < acc->received_min) acc->received_min = x->received_min;
}

/* One merging algorithm's bytes between the bounds (deg NULL: recursive
 * doubling). */
static compress_bytes_t merge_bytes(const int *deg, int nd, int rank, int P, pair_bounds_t *pb) {
  compress_bytes_t b = {0};
  size_t nq = pb->L->nq;
  if (deg) {
    sparse_butterfly_bytes(deg, nd, P, rank, nq, union_least, pb, &b.sent_min, &b.received_min);
    sparse_butterfly_bytes(deg, nd, P, rank, nq, union_most, pb, &b.sent, &b.received);
  } else {
    sparse_rd_bytes(P, rank, nq, union_least, pb, &b.sent_min, &b.received_min);
    sparse_rd_bytes(P, rank, nq, union_most, pb, &b.sent, &b.received);
  }
  return b;
}

/* --sparse-collective other than the allgather: each algorithm it may run
 * (sparcml: two; kylix: every factorization, its degrees being picked by
 * the link; auto: all and the allgather) between its bounds, the widest;
 * the sizes first where they decide (a variable size and a choice); the
 * small tensors' allreduce. */
static int merging_bytes(const compress_config_t *c, const layout_t *L, const codec_spec_t *s,
                         int rank, int P, size_t len, compress_bytes_t *b) {
  sparse_coll_t a = c->sparse;
  size_t fixed = message_fixed(L, s), sizes = 0;
  pair_bounds_t pb = {L, s, fixed != 0};
  compress_bytes_t acc = {0}, x;
  int first = 1;
  if (!fixed && a != SPARSE_COLL_SPARCML_RD && a != SPARSE_COLL_SPARCML_SPLIT)
    sizes = (size_t)(P - 1) * sizeof(uint64_t);
  if (a == SPARSE_COLL_AUTO) {
    x = (compress_bytes_t){.exact = 1};
    DT_TRY(sparse_bytes(c, L, s, rank, P, len, &x));
    size_t small_s, small_r;
    DT_TRY(coll_allreduce_bytes(c->algo, P, rank, len - L->nq, &small_s, &small_r));
    x.sent -= small_s + (fixed ? 0 : sizes), x.sent_min -= small_s + (fixed ? 0 : sizes);
    x.received -= small_r + (fixed ? 0 : sizes), x.received_min -= small_r + (fixed ? 0 : sizes);
    widen(&acc, &x, first), first = 0;
  }
  if (a == SPARSE_COLL_SPARCML_RD || a == SPARSE_COLL_SPARCML || a == SPARSE_COLL_AUTO)
    x = merge_bytes(NULL, 0, rank, P, &pb), widen(&acc, &x, first), first = 0;
  if (a == SPARSE_COLL_SPARCML_SPLIT || a == SPARSE_COLL_SPARCML || a == SPARSE_COLL_AUTO)
    x = merge_bytes(&P, 1, rank, P, &pb), widen(&acc, &x, first), first = 0;
  if (a == SPARSE_COLL_KYLIX || a == SPARSE_COLL_AUTO) {
    int lists[64][SPARSE_MAX_LAYERS], nlen[64], nl = sparse_degree_lists(P, lists, nlen, 64);
    for (int i = 0; i < nl; i++)
      x = merge_bytes(lists[i], nlen[i], rank, P, &pb), widen(&acc, &x, first), first = 0;
  }
  b->pattern = sparse_coll_name(a);
  b->sent += acc.sent + sizes, b->received += acc.received + sizes;
  b->sent_min += acc.sent_min + sizes, b->received_min += acc.received_min + sizes;
  b->exact = acc.sent == acc.sent_min && acc.received == acc.received_min;
  return allreduce_part(c, rank, P, len - L->nq, b);
}

int compress_exchange_bytes(const compress_config_t *c, int rank, int nranks, size_t off,
                            size_t len, int64_t step, const compress_matrix_t *mats, int nmats,
                            compress_bytes_t *out) {
  *out = (compress_bytes_t){.exact = 1, .pattern = "allreduce"};
  codec_spec_t s = compress_codec_at(c, step);
  if (s.kind == CODEC_NONE || s.kind == CODEC_FP32) return allreduce_part(c, rank, nranks, len, out);
  if (nranks == 1) return 0;
  if (s.kind == CODEC_POWERSGD) {
    size_t first, second;
    powersgd_counts(&s, mats, nmats, off, len, &first, &second);
    out->pattern = "allreduce of factors";
    DT_TRY(allreduce_part(c, rank, nranks, first, out));
    return allreduce_part(c, rank, nranks, second, out);
  }
  if (s.kind == CODEC_TERNGRAD) {
    out->pattern = "scalers, scatter-reduce+allgather";
    terngrad_shared_bytes(rank, nranks, off, len, mats, nmats, &out->sent, &out->received);
    out->sent_min = out->sent, out->received_min = out->received;
    return 0;
  }
  slot_t slots[2 * nmats + 1];
  layout_t L = {.slot = slots};
  plan_layout(&s, mats, nmats, off, len, &L);
  if (codec_sparse(&s)) {
    out->pattern = "allgather";
    if (c->sparse != SPARSE_COLL_ALLGATHER && L.nq && nranks <= SPARSE_MAX_RANKS)
      return merging_bytes(c, &L, &s, rank, nranks, len, out);
    return sparse_bytes(c, &L, &s, rank, nranks, len, out);
  }
  out->pattern = "scatter-reduce+allgather";
  dense_bytes(&L, &s, rank, nranks, out);
  return allreduce_part(c, rank, nranks, len - L.nq, out);
}
