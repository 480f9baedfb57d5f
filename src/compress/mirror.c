/* The mirror: a model sent as its changes, compressed (the server's error
 * compensation of DoubleSqueeze, Tang et al. 2019, and of 1-bit Adam; the
 * public copies of CHOCO-SGD). The sender keeps the copy its receiver
 * holds and sends encode(x - mirror); both ends add the decoding to their
 * copy, so the two hold the same bits, and what the codec dropped is still
 * in x - mirror at the next message: nothing is lost over time. The mirror
 * is the memory of this error feedback, so there is no other.
 *
 * A lossless codec (fp32) sends x itself: x - m + m is not x in floats,
 * and there is no error to carry. The receiver's copy is set to -0.0
 * before the values are added, since -0.0 + v is v bit for bit (also
 * for v = -0.0, which +0.0 + v is not). */
#include <string.h>

#include "dtrain/compress.h"

static void fill_negative_zero(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = -0.0f;
}

size_t mirror_encode(const codec_spec_t *s, const float *x, float *mirror, size_t n,
                     uint64_t seed, void *out, float *scratch) {
  if (codec_lossless(s)) {
    memcpy(mirror, x, n * sizeof(float));
    return codec_encode(s, x, n, seed, out, scratch);
  }
  float *delta = scratch + n; /* scratch[0..n): the codec's own */
  for (size_t i = 0; i < n; i++) delta[i] = x[i] - mirror[i];
  size_t bytes = codec_encode(s, delta, n, seed, out, scratch);
  codec_decode_add(s, out, bytes, n, mirror); /* our own encoding: valid */
  return bytes;
}

uint64_t mirror_seed(uint64_t seed, int from, int to, int64_t count, int tag) {
  return rng_derive(rng_derive(seed, (uint64_t)from, (uint64_t)to), (uint64_t)count, (uint64_t)tag);
}

int mirror_decode(const codec_spec_t *s, const void *in, size_t bytes, size_t n, float *copy) {
  if (!codec_lossless(s)) return codec_decode_add(s, in, bytes, n, copy);
  if (bytes != codec_bytes(s, n))
    return dt_error("malformed fp32 message: %zu bytes where the model's %zu values take %zu",
                    bytes, n, codec_bytes(s, n));
  fill_negative_zero(copy, n);
  return codec_decode_add(s, in, bytes, n, copy);
}
