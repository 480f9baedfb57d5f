/* 1-bit SGD (Seide et al. 2014): one bit a value, its sign, and two fp32
 * reconstruction values per message: the mean of the values >= 0 and the
 * mean of those < 0 (the paper's per-column means; here a message is one
 * block of a bucket). ceil(n/8) + 8 bytes: 1/32 of fp32 plus the means.
 * Biased: error feedback carries the quantization error to the next step,
 * which the paper shows is what makes it converge. */
#include "compress/codec_internal.h"

static size_t onebit_bytes(const codec_spec_t *s, size_t n) { (void)s; return 8 + (n + 7) / 8; }

static size_t onebit_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                            uint8_t *out, float *scratch) {
  (void)s, (void)seed, (void)scratch;
  /* branch-free: the signs of a gradient are a coin toss to a predictor */
  double pos = 0, all = 0;
  size_t npos = 0;
  uint8_t *bits = out + 8;
  memset(bits, 0, (n + 7) / 8);
  for (size_t i = 0; i < n; i++) {
    unsigned p = x[i] >= 0;
    all += x[i];
    pos += p ? x[i] : 0.0f;
    npos += p;
    bits[i >> 3] |= (uint8_t)(p << (i & 7));
  }
  double neg = all - pos;
  put_f32(out, npos ? (float)(pos / (double)npos) : 0.0f);
  put_f32(out + 4, n - npos ? (float)(neg / (double)(n - npos)) : 0.0f);
  return 8 + (n + 7) / 8;
}

static int onebit_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n,
                         float *acc) {
  (void)s;
  size_t want = 8 + (n + 7) / 8;
  if (bytes != want) return codec_size_error("onebit", bytes, want);
  float pos = get_f32(in), neg = get_f32(in + 4);
  if (!isfinite(pos) || !isfinite(neg) || pos < 0 || neg > 0)
    return dt_error("malformed onebit message: means %g and %g (expected >= 0 and <= 0)", pos, neg);
  const uint8_t *bits = in + 8;
  const float value[2] = {neg, pos};
  for (size_t i = 0; i < n; i++) acc[i] += value[(bits[i >> 3] >> (i & 7)) & 1];
  return 0;
}

const codec_ops_t codec_onebit_ops = {"onebit", 1, 0, onebit_bytes, onebit_bytes, onebit_encode,
                                      onebit_decode};
