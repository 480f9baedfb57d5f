/* 1-bit SGD (Seide et al. 2014): one bit a value, its sign, and two fp32
 * reconstruction values per group of s->group consecutive values: the mean
 * of the values >= 0 and the mean of those < 0. The paper and CNTK take a
 * column of a weight matrix as the group; the exchange sends each matrix
 * transposed and sets the group to a column's length (compress/exchange.c);
 * a buffer given no shape goes in groups of 512. ceil(n/8) + 8 ceil(n/G)
 * bytes. (One pair of means for a whole block of 10^5 values loses 2.8
 * points of mlp's accuracy in 5 epochs: docs/BENCHMARKS.md.)
 * Biased: error feedback carries the quantization error to the next step,
 * which the paper shows is what makes it converge. */
#include "compress/codec_internal.h"

#define ONEBIT_CHUNK 512

static size_t group_of(const codec_spec_t *s) { return s->group ? s->group : ONEBIT_CHUNK; }

static size_t onebit_bytes(const codec_spec_t *s, size_t n) {
  return 8 * codec_nchunks(n, group_of(s)) + (n + 7) / 8;
}

static size_t onebit_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                            uint8_t *out, float *scratch) {
  (void)seed, (void)scratch;
  size_t G = group_of(s), nc = codec_nchunks(n, G);
  uint8_t *bits = out + 8 * nc;
  memset(bits, 0, (n + 7) / 8);
  for (size_t k = 0; k < nc; k++) {
    size_t lo = k * G, hi = codec_chunk_end(k, G, n);
    /* branch-free: the signs of a gradient are a coin toss to a predictor */
    float pos = 0, all = 0;
    unsigned npos = 0;
    for (size_t i = lo; i < hi; i++) {
      unsigned p = x[i] >= 0;
      all += x[i];
      pos += p ? x[i] : 0.0f;
      npos += p;
      bits[i >> 3] |= (uint8_t)(p << (i & 7));
    }
    unsigned nneg = (unsigned)(hi - lo) - npos;
    put_f32(out + 8 * k, npos ? pos / (float)npos : 0.0f);
    put_f32(out + 8 * k + 4, nneg ? (all - pos) / (float)nneg : 0.0f);
  }
  return onebit_bytes(s, n);
}

static int onebit_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n,
                         float *acc) {
  size_t want = onebit_bytes(s, n), G = group_of(s), nc = codec_nchunks(n, G);
  if (bytes != want) return codec_size_error("onebit", bytes, want);
  for (size_t k = 0; k < nc; k++) {
    float pos = get_f32(in + 8 * k), neg = get_f32(in + 8 * k + 4);
    if (!isfinite(pos) || !isfinite(neg) || pos < 0 || neg > 0)
      return dt_error("malformed onebit message: means %g and %g in chunk %zu (expected >= 0 "
                      "and <= 0)", pos, neg, k);
  }
  const uint8_t *bits = in + 8 * nc;
  for (size_t k = 0; k < nc; k++) {
    const float value[2] = {get_f32(in + 8 * k + 4), get_f32(in + 8 * k)};
    size_t lo = k * G, hi = codec_chunk_end(k, G, n);
    for (size_t i = lo; i < hi; i++) acc[i] += value[(bits[i >> 3] >> (i & 7)) & 1];
  }
  return 0;
}

const codec_ops_t codec_onebit_ops = {"onebit", 1, 0, onebit_bytes, onebit_bytes, onebit_encode,
                                      onebit_decode, NULL};
