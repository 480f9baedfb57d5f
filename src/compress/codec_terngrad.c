/* TernGrad (Wen et al. 2017): x_i = s sign(x_i) b_i with s = max|x| and
 * b_i ~ Bernoulli(|x_i| / s): unbiased. 2 bits a value (00: 0, 01: +1,
 * 10: -1; 11 is not an encoding) plus the fp32 scale. The paper's
 * layer-wise scaling: a message is one block of one bucket of layers. */
#include "compress/codec_internal.h"

static size_t tern_bytes(const codec_spec_t *s, size_t n) { (void)s; return 4 + (n + 3) / 4; }

static size_t tern_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                          uint8_t *out, float *scratch) {
  (void)s, (void)scratch;
  float amax = 0;
  for (size_t i = 0; i < n; i++) amax = codec_max(amax, fabsf(x[i]));
  put_f32(out, amax);
  uint8_t *t = out + 4;
  memset(t, 0, (n + 3) / 4);
  float inv = amax > 0 ? 1.0f / amax : 0;
  for (size_t i = 0; amax > 0 && i < n; i++) {
    unsigned keep = codec_uniform(seed, i) < fabsf(x[i]) * inv;
    t[i >> 2] |= (uint8_t)((keep << (x[i] < 0)) << (2 * (i & 3)));
  }
  return 4 + (n + 3) / 4;
}

static int tern_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  (void)s;
  if (bytes != 4 + (n + 3) / 4) return codec_size_error("terngrad", bytes, 4 + (n + 3) / 4);
  float scale = get_f32(in);
  if (!(scale >= 0) || isinf(scale)) return dt_error("malformed terngrad message: scale %g", scale);
  const uint8_t *t = in + 4;
  for (size_t i = 0; i < n; i++) /* checked whole before anything is added */
    if (((t[i >> 2] >> (2 * (i & 3))) & 3) == 3)
      return dt_error("malformed terngrad message: code 11 at %zu", i);
  const float value[4] = {0, scale, -scale, 0};
  for (size_t i = 0; i < n; i++) acc[i] += value[(t[i >> 2] >> (2 * (i & 3))) & 3];
  return 0;
}

const codec_ops_t codec_terngrad_ops = {"terngrad", 0, 0, tern_bytes, tern_bytes, tern_encode,
                                        tern_decode};
