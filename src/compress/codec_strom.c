/* Strom's threshold quantization (Strom 2015, "Scalable distributed DNN
 * training using commodity GPU cloud computing"): every value whose
 * magnitude reaches the threshold t is sent as +t or -t, one 32-bit word
 * per value holding its index and its sign; the rest stays behind in the
 * residual (error feedback, on by default: the codec is biased), which
 * also keeps what a sent value exceeded t by.
 *   u32 count | count x u32 (index | sign << 31), indices strictly increasing
 * so 4 + 4k bytes for k values: half of threshold:T's pairs, which send the
 * exact fp32 value (codec_sparse.c). strom:T and threshold:T pick the same
 * values. */
#include "compress/codec_internal.h"

#define SIGN_BIT 0x80000000u

static size_t strom_max_bytes(const codec_spec_t *s, size_t n) { (void)s; return 4 + 4 * n; }
static size_t strom_bytes(const codec_spec_t *s, size_t n) { (void)s, (void)n; return 0; }

static size_t strom_message_bytes(const uint8_t *in, size_t avail) {
  return avail < 4 ? avail + 1 : 4 + 4 * (size_t)get_u32(in);
}

static size_t strom_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                           uint8_t *out, float *scratch) {
  (void)seed, (void)scratch;
  float t = (float)s->param;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (fabsf(x[i]) >= t) put_u32(out + 4 + 4 * k++, (uint32_t)i | (x[i] < 0 ? SIGN_BIT : 0));
  put_u32(out, (uint32_t)k);
  return 4 + 4 * k;
}

/* Checks the count, the size and every index before it adds anything. */
static int strom_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  if (bytes < 4) return codec_size_error("strom", bytes, 4);
  size_t k = get_u32(in);
  if (k > n) return dt_error("malformed strom message: %zu values for a buffer of %zu", k, n);
  if (bytes != 4 + 4 * k) return codec_size_error("strom", bytes, 4 + 4 * k);
  for (size_t j = 0; j < k; j++) {
    uint32_t i = get_u32(in + 4 + 4 * j) & ~SIGN_BIT;
    if (i >= n || (j && i <= (get_u32(in + 4 * j) & ~SIGN_BIT)))
      return dt_error("malformed strom message: index %u at position %zu (expected increasing "
                      "indices below %zu)", i, j, n);
  }
  float t = (float)s->param;
  for (size_t j = 0; j < k; j++) {
    uint32_t w = get_u32(in + 4 + 4 * j);
    acc[w & ~SIGN_BIT] += w & SIGN_BIT ? -t : t;
  }
  return 0;
}

const codec_ops_t codec_strom_ops = {"strom", 1, 1, strom_bytes, strom_max_bytes, strom_encode,
                                     strom_decode, strom_message_bytes};
