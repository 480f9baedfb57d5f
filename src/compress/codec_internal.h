/* The codecs' table (codec.c) and the helpers their files share.
 * Encodings are little-endian byte strings (this code runs on little-endian
 * hosts; the transport moves bytes between ranks of one architecture). */
#ifndef DTRAIN_COMPRESS_CODEC_INTERNAL_H
#define DTRAIN_COMPRESS_CODEC_INTERNAL_H

#include <math.h>
#include <string.h>

#include "dtrain/compress.h"

typedef struct {
  const char *name;
  int biased, sparse;
  size_t (*bytes)(const codec_spec_t *s, size_t n);      /* 0: depends on the values */
  size_t (*max_bytes)(const codec_spec_t *s, size_t n);
  size_t (*encode)(const codec_spec_t *s, const float *x, size_t n, uint64_t seed, uint8_t *out,
                   float *scratch);
  int (*decode_add)(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc);
  /* bytes == 0 (the size depends on the values): the size of the encoding
   * that starts at `in`, read from its head; more than avail when the head
   * is not all there. NULL for the codecs of a fixed size. */
  size_t (*message_bytes)(const uint8_t *in, size_t avail);
} codec_ops_t;

static inline void put_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }
static inline float get_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static inline void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* A uniform float in [0, 1) from a counter: element i of an encoding with
 * `seed`, so that encodings are reproducible whatever the thread. */
static inline float codec_uniform(uint64_t seed, size_t i) {
  uint64_t z = seed + (uint64_t)i * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (float)(z >> 40) * (1.0f / 16777216.0f);
}

/* max and clamp as comparisons: fmaxf/fminf are library calls here (their
 * NaN rules), ten times slower in the codecs' loops. A NaN gradient is
 * stopped before it is sent (the training loss check). */
static inline float codec_max(float a, float b) { return a > b ? a : b; }
static inline float codec_clamp(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

/* The scaled quantizers (1-bit, TernGrad, QSGD) give each run of `chunk`
 * values a scale of its own: how many runs n values make, and where run k
 * ends. */
static inline size_t codec_nchunks(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }
static inline size_t codec_chunk_end(size_t k, size_t chunk, size_t n) {
  return (k + 1) * chunk < n ? (k + 1) * chunk : n;
}

/* Whether a message's size is what an encoding of n values takes. */
int codec_size_error(const char *codec, size_t bytes, size_t want);
#endif
