/* TernGrad as its paper runs it (Wen et al. 2017, sec. 3): a scaler per
 * layer's tensor, shared by the workers. Each rank's scaler of a tensor
 * is s_r = max |g_r| over it (with terngrad:C, at most C standard
 * deviations of its values, the paper's gradient clipping); the workers
 * share s = max_r s_r (the paper's eq. 4), so that every rank ternarizes
 * with the same s:
 *     g~_r,i = s sign(g_r,i) b_r,i,   b_r,i ~ Bernoulli(min(|g_r,i| / s, 1)),
 * and the sum of the P contributions is s times an integer in [-P, P]:
 * sent back exact, on 2P + 1 levels, where a ternary sum would be
 * quantized a second time (terngrad-chunked, codec_terngrad.c, with its
 * own scale a 512 values and no sharing, re-encodes the sum).
 *
 * The exchange, P ranks, a bucket of n values in T tensors (a piece of
 * values of no tensor counts as one), its n values cut in P blocks n_j
 * (coll_block):
 *   1. scalers: each rank sends its T scalers (fp32) to every other (one
 *      step, P - 1 messages of 4T bytes); s = the max, in rank order;
 *   2. scatter: block j's ternary codes (2 bits a value, no scale: s is
 *      known) to rank j, which sums the P codes of its block as integers;
 *   3. allgather: rank j's sums, b = ceil(log2(2P + 1)) bits a value
 *      (P = 2: 3 bits; 4: 4; 8: 5), to every rank; each decodes
 *      sum * s.
 * Bytes sent by rank r:
 *     (P - 1) 4T + sum_{j != r} ceil(n_j / 4) + (P - 1) ceil(n_r b / 8)
 * received: (P - 1) 4T + (P - 1) ceil(n_r / 4) + sum_{j != r} ceil(n_j b / 8).
 * (terngrad_shared_bytes, below, counts the same for describe_step.)
 * Every rank holds the same integers and the same s, so the same bits. */
#include <math.h>
#include <string.h>

#include "compress/codec_internal.h"
#include "compress/compressor.h"

/* The bucket's tensors (and pieces of no tensor) in order: each is a
 * scaler's range. out: room for 2 nmats + 1. */
static int tensor_pieces(const compress_matrix_t *mats, int nmats, size_t off, size_t len,
                         range_t *out) {
  int n = 0;
  size_t at = 0;
  for (int i = 0; i < nmats; i++) {
    size_t rows = mats[i].rows ? mats[i].rows : 1, size = rows * mats[i].cols;
    if (mats[i].off < off + at || mats[i].off >= off + len || size == 0) continue;
    size_t start = mats[i].off - off;
    if (start > at) out[n++] = (range_t){at, start};
    if (size > len - start) size = len - start;
    out[n++] = (range_t){start, start + size};
    at = start + size;
  }
  if (at < len || n == 0) out[n++] = (range_t){at, len};
  return n;
}

/* The bits of one level of a sum of P ternary values: 2P + 1 levels. */
static int level_bits(int P) {
  int b = 1;
  while ((1 << b) < 2 * P + 1) b++;
  return b;
}

static size_t ternary_bytes(size_t n) { return (n + 3) / 4; }
static size_t level_bytes(size_t n, int P) { return (n * (size_t)level_bits(P) + 7) / 8; }

/* A tensor's scaler on this rank: its largest magnitude, capped at C
 * standard deviations (terngrad:C). */
static float piece_scaler(const float *x, size_t n, double clip) {
  float amax = 0;
  double sum = 0, sq = 0;
  for (size_t i = 0; i < n; i++) {
    amax = codec_max(amax, fabsf(x[i]));
    sum += x[i], sq += (double)x[i] * x[i];
  }
  if (clip > 0 && n > 0) {
    double mean = sum / (double)n, var = sq / (double)n - mean * mean;
    double cap = clip * sqrt(var > 0 ? var : 0);
    if (cap < amax) amax = (float)cap;
  }
  return amax;
}

/* x[lo, hi) ternarized with the shared scalers into out (2 bits a value:
 * 01 +1, 10 -1); sent[i - lo] = what the code means (s, -s or 0), for the
 * memory. Position i draws codec_uniform(seed, i) whatever the block. */
static void encode_ternary(const float *x, size_t lo, size_t hi, const range_t *pc, int T,
                           const float *s, uint64_t seed, uint8_t *out, float *sent) {
  memset(out, 0, ternary_bytes(hi - lo));
  for (int t = 0; t < T; t++) {
    size_t a = pc[t].lo > lo ? pc[t].lo : lo, b = pc[t].hi < hi ? pc[t].hi : hi;
    float inv = s[t] > 0 ? 1.0f / s[t] : 0;
    for (size_t i = a; i < b; i++) {
      unsigned keep = codec_uniform(seed, i) < fabsf(x[i]) * inv, neg = x[i] < 0;
      size_t k = i - lo;
      out[k >> 2] |= (uint8_t)((keep << neg) << (2 * (k & 3)));
      if (sent) sent[k] = keep ? (neg ? -s[t] : s[t]) : 0;
    }
  }
}

/* acc[0..n) += the codes of `in` as -1, 0, +1; a code 11 is refused. */
static int add_ternary(const uint8_t *in, size_t n, float *acc, int rank, int from) {
  static const float value[4] = {0, 1, -1, 0};
  for (size_t k = 0; k < n; k++) {
    unsigned code = (in[k >> 2] >> (2 * (k & 3))) & 3;
    if (code == 3)
      return dt_error("rank %d: compressed allreduce (terngrad): message from rank %d: code 11 "
                      "at %zu", rank, from, k);
    acc[k] += value[code];
  }
  return 0;
}

/* The sums sum[0..n) (integers in [-P, P]) as sum + P on b bits each,
 * little-endian bit order. */
static void encode_levels(const float *sum, size_t n, int P, uint8_t *out) {
  int b = level_bits(P);
  memset(out, 0, level_bytes(n, P));
  for (size_t k = 0; k < n; k++) {
    unsigned v = (unsigned)((int)sum[k] + P);
    size_t bit = k * (size_t)b;
    for (int j = 0; j < b; j++, bit++)
      if (v >> j & 1) out[bit >> 3] |= (uint8_t)(1u << (bit & 7));
  }
}

/* x[lo, hi) = the levels of `in` times the shared scalers; a level past
 * 2P is refused. */
static int decode_levels(const uint8_t *in, size_t lo, size_t hi, int P, const range_t *pc, int T,
                         const float *s, float *x, int rank, int from) {
  int b = level_bits(P);
  int t = 0;
  for (size_t i = lo; i < hi; i++) {
    size_t bit = (i - lo) * (size_t)b;
    unsigned v = 0;
    for (int j = 0; j < b; j++, bit++) v |= (unsigned)(in[bit >> 3] >> (bit & 7) & 1) << j;
    if (v > 2u * (unsigned)P)
      return dt_error("rank %d: compressed allreduce (terngrad): message from rank %d: level %u "
                      "at %zu, past 2P = %d", rank, from, v, i - lo, 2 * P);
    while (i >= pc[t].hi) t++;
    x[i] = (float)((int)v - P) * s[t];
  }
  return 0;
}

/* Step 1: every rank's scalers to every other; s[t] = their max. */
static int share_scalers(compressor_t *c, comm_t *comm, float *mine, float *all, float *s, int T) {
  int P = c->nranks, r = c->rank;
  posted_t p = {comm, c->reqs, 0};
  for (int i = 0; i < P; i++)
    if (i != r) DT_TRY(post_recv(&p, i, TAG_TERN_SCALERS, all + (size_t)i * T, 4 * (size_t)T));
  for (int j = 0; j < P; j++)
    if (j != r) DT_TRY(post_send(&p, j, TAG_TERN_SCALERS, mine, 4 * (size_t)T));
  DT_TRY(wait_posted(&p));
  memcpy(all + (size_t)r * T, mine, 4 * (size_t)T);
  for (int t = 0; t < T; t++) {
    s[t] = 0;
    for (int i = 0; i < P; i++) {
      float v = all[(size_t)i * T + t];
      if (!(v >= 0) || isinf(v))
        return dt_error("rank %d: compressed allreduce (terngrad): rank %d's scaler of tensor %d "
                        "is %g", r, i, t, v);
      s[t] = codec_max(s[t], v);
    }
  }
  return 0;
}

int terngrad_allreduce(compressor_t *c, comm_t *comm, float *buf, size_t off, size_t len,
                       int64_t step, int stream, const compress_matrix_t *mats, int nmats) {
  int P = c->nranks, r = c->rank;
  range_t pc[2 * nmats + 1];
  int T = tensor_pieces(mats, nmats, off, len, pc);
  float mine[T], all[(size_t)P * T], s[T];
  size_t lo[P + 1], n[P], soff[P + 1], goff[P + 1];
  for (int j = 0; j < P; j++) coll_block(len, P, j, &lo[j], &n[j]);
  lo[P] = len, soff[0] = goff[0] = 0;
  for (int j = 0; j < P; j++) {
    soff[j + 1] = soff[j] + ternary_bytes(n[j]);
    goff[j + 1] = goff[j] + level_bytes(n[j], P);
  }
  size_t mine_in = ternary_bytes(n[r]) * (size_t)P, need = soff[P] > goff[P] ? soff[P] : goff[P];
  DT_TRY(compressor_grow_buffers(c, need > mine_in ? need : mine_in));
  /* the contribution: the buffer, or with memory (terngrad:C asked for
   * one) the buffer added into it */
  float *x = buf;
  if (c->mem.residual) {
    ef_compensate(&c->mem, buf, off, len);
    x = c->mem.residual + off;
  }
  for (int t = 0; t < T; t++) mine[t] = piece_scaler(x + pc[t].lo, pc[t].hi - pc[t].lo, c->cfg.codec.param);
  DT_TRY(share_scalers(c, comm, mine, all, s, T));
  uint64_t seed = rng_derive(rng_derive(c->cfg.seed ^ 0x7465726e67726164ull, (uint64_t)stream,
                                        (uint64_t)step), (uint64_t)r, 0);
  double t0 = dt_now();
  for (int j = 0; j < P; j++)
    encode_ternary(x, lo[j], lo[j] + n[j], pc, T, s, seed, c->send + soff[j],
                   c->mem.residual ? c->tmp + lo[j] : NULL);
  c->stats.encode_sec += dt_now() - t0;
  if (c->mem.residual) ef_update(&c->mem, c->tmp, off, len);
  /* 2. block j to rank j; mine summed as integers, in rank order */
  posted_t p = {comm, c->reqs, 0};
  size_t m = ternary_bytes(n[r]);
  for (int i = 0; i < P; i++)
    if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_SCATTER, c->recv + (size_t)i * m, m));
  for (int j = 0; j < P; j++)
    if (j != r) DT_TRY(post_send(&p, j, TAG_COMPRESS_SCATTER, c->send + soff[j], soff[j + 1] - soff[j]));
  DT_TRY(wait_posted(&p));
  t0 = dt_now();
  float *sum = c->scratch;
  memset(sum, 0, n[r] * sizeof *sum);
  for (int i = 0; i < P; i++)
    DT_TRY(add_ternary(i == r ? c->send + soff[r] : c->recv + (size_t)i * m, n[r], sum, r, i));
  encode_levels(sum, n[r], P, c->out);
  c->stats.decode_sec += dt_now() - t0;
  /* 3. every block's sums to every rank */
  for (int i = 0; i < P; i++)
    if (i != r) DT_TRY(post_recv(&p, i, TAG_COMPRESS_GATHER, c->gather + goff[i], goff[i + 1] - goff[i]));
  for (int j = 0; j < P; j++)
    if (j != r) DT_TRY(post_send(&p, j, TAG_COMPRESS_GATHER, c->out, goff[r + 1] - goff[r]));
  DT_TRY(wait_posted(&p));
  t0 = dt_now();
  for (int i = 0; i < P; i++)
    DT_TRY(decode_levels(i == r ? c->out : c->gather + goff[i], lo[i], lo[i] + n[i], P, pc, T, s,
                         buf, r, i));
  c->stats.decode_sec += dt_now() - t0;
  return 0;
}

void terngrad_shared_bytes(int rank, int P, size_t off, size_t len, const compress_matrix_t *mats,
                           int nmats, size_t *sent, size_t *received) {
  range_t pc[2 * nmats + 1];
  size_t T = (size_t)tensor_pieces(mats, nmats, off, len, pc), peers = (size_t)(P - 1);
  *sent = *received = peers * 4 * T;
  for (int j = 0; j < P; j++) {
    size_t lo, n;
    coll_block(len, P, j, &lo, &n);
    if (j == rank) {
      *sent += peers * level_bytes(n, P);
      *received += peers * ternary_bytes(n);
    } else {
      *sent += ternary_bytes(n);
      *received += level_bytes(n, P);
    }
  }
}
