/* QSGD (Alistarh et al. 2017) with S levels and buckets of d = 512 values
 * (the paper's bucketing, which bounds the variance by min(d/S^2, sqrt(d)/S)
 * instead of the same with d = the whole message): in each bucket,
 *   x_i = ||x||_2 sign(x_i) l_i / S,  l_i = floor(|x_i| S / ||x||_2 + u),
 * u uniform in [0, 1): unbiased, E[l_i] = |x_i| S / ||x||_2. Plain bit
 * packing, not the paper's Elias coding: each value takes 1 sign bit and
 * ceil(log2(S + 1)) bits of level, so the size does not depend on the
 * values: 4 bytes of norm a bucket + the bits. Elias coding gains where
 * most levels are 0 (S small against sqrt(d)); a fixed size lets the
 * dense exchange post its receives up front. */
#include "compress/codec_internal.h"

#define QSGD_BUCKET 512

static unsigned level_bits(const codec_spec_t *s) {
  unsigned b = 0;
  while ((1u << b) < (unsigned)s->param + 1) b++;
  return b;
}

static size_t qsgd_bytes(const codec_spec_t *s, size_t n) {
  return 4 * codec_nchunks(n, QSGD_BUCKET) + (n * (1 + level_bits(s)) + 7) / 8;
}

/* Bits written least significant first through a 64-bit accumulator. */
typedef struct { uint8_t *p; uint64_t acc; unsigned nacc; } bit_writer_t;
static void put_bits(bit_writer_t *w, unsigned nbits, uint32_t v) {
  w->acc |= (uint64_t)v << w->nacc;
  w->nacc += nbits;
  while (w->nacc >= 8) *w->p++ = (uint8_t)w->acc, w->acc >>= 8, w->nacc -= 8;
}
static void flush_bits(bit_writer_t *w) {
  if (w->nacc) *w->p++ = (uint8_t)w->acc;
}

typedef struct { const uint8_t *p; uint64_t acc; unsigned nacc; } bit_reader_t;
static uint32_t get_bits(bit_reader_t *r, unsigned nbits) {
  while (r->nacc < nbits) r->acc |= (uint64_t)*r->p++ << r->nacc, r->nacc += 8;
  uint32_t v = (uint32_t)(r->acc & ((1u << nbits) - 1));
  r->acc >>= nbits, r->nacc -= nbits;
  return v;
}

static size_t qsgd_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                          uint8_t *out, float *scratch) {
  (void)scratch;
  unsigned b = level_bits(s) + 1;
  size_t bytes = qsgd_bytes(s, n), nb = codec_nchunks(n, QSGD_BUCKET);
  float levels = (float)s->param;
  memset(out, 0, bytes);
  bit_writer_t w = {out + 4 * nb, 0, 0};
  for (size_t k = 0; k < nb; k++) {
    size_t lo = k * QSGD_BUCKET, hi = codec_chunk_end(k, QSGD_BUCKET, n);
    double sq = 0;
    for (size_t i = lo; i < hi; i++) sq += (double)x[i] * x[i];
    float norm = (float)sqrt(sq), scale = norm > 0 ? levels / norm : 0;
    put_f32(out + 4 * k, norm);
    for (size_t i = lo; i < hi; i++) {
      float l = codec_clamp(floorf(fabsf(x[i]) * scale + codec_uniform(seed, i)), 0, levels);
      put_bits(&w, b, (uint32_t)l << 1 | (x[i] < 0));
    }
  }
  flush_bits(&w);
  return bytes;
}

static int qsgd_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  unsigned b = level_bits(s) + 1;
  size_t want = qsgd_bytes(s, n), nb = codec_nchunks(n, QSGD_BUCKET);
  if (bytes != want) return codec_size_error("qsgd", bytes, want);
  for (size_t k = 0; k < nb; k++) {
    float norm = get_f32(in + 4 * k);
    if (!(norm >= 0) || isinf(norm))
      return dt_error("malformed qsgd message: norm %g in bucket %zu", norm, k);
  }
  bit_reader_t r = {in + 4 * nb, 0, 0};
  for (size_t i = 0; i < n; i++) { /* checked whole before anything is added */
    uint32_t l = get_bits(&r, b) >> 1;
    if (l > (uint32_t)s->param)
      return dt_error("malformed qsgd message: level %u at %zu (S = %g)", l, i, s->param);
  }
  r = (bit_reader_t){in + 4 * nb, 0, 0};
  for (size_t i = 0; i < n; i++) {
    float unit = get_f32(in + 4 * (i / QSGD_BUCKET)) / (float)s->param;
    uint32_t v = get_bits(&r, b);
    acc[i] += (float)(v >> 1) * (v & 1 ? -unit : unit);
  }
  return 0;
}

const codec_ops_t codec_qsgd_ops = {"qsgd", 0, 0, qsgd_bytes, qsgd_bytes, qsgd_encode, qsgd_decode, NULL};
