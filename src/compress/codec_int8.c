/* int8: each value as round(x / s) in [-127, 127] with one fp32 scale
 * s = max|x| / 127 per message (a message is one block of one bucket), so
 * 1 byte a value plus 4: a quarter of fp32 plus the scale. Rounding is to
 * nearest, or with ":sr" stochastic (floor(x/s + u): unbiased). */
#include "compress/codec_internal.h"

static size_t int8_bytes(const codec_spec_t *s, size_t n) { (void)s; return 4 + n; }

static size_t int8_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                          uint8_t *out, float *scratch) {
  (void)scratch;
  float amax = 0;
  for (size_t i = 0; i < n; i++) amax = codec_max(amax, fabsf(x[i]));
  float scale = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0;
  put_f32(out, scale);
  for (size_t i = 0; i < n; i++) {
    float q = x[i] * inv;
    q = s->stochastic ? floorf(q + codec_uniform(seed, i)) : rintf(q);
    q = codec_clamp(q, -127.0f, 127.0f);
    out[4 + i] = (uint8_t)(int8_t)q;
  }
  return 4 + n;
}

static int int8_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  (void)s;
  if (bytes != 4 + n) return codec_size_error("int8", bytes, 4 + n);
  float scale = get_f32(in);
  if (!(scale >= 0) || isinf(scale)) return dt_error("malformed int8 message: scale %g", scale);
  for (size_t i = 0; i < n; i++) /* checked whole before anything is added */
    if (in[4 + i] == 0x80) return dt_error("malformed int8 message: value -128 at %zu (range -127..127)", i);
  for (size_t i = 0; i < n; i++) acc[i] += (float)(int8_t)in[4 + i] * scale;
  return 0;
}

const codec_ops_t codec_int8_ops = {"int8", 1, 0, int8_bytes, int8_bytes, int8_encode, int8_decode, NULL};
