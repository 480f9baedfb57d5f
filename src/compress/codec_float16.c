/* 16-bit floats: IEEE half (fp16: Horovod's --fp16-allreduce) and bfloat16
 * (bf16: fp32's exponent, 8 bits of mantissa). 2 bytes a value, exactly
 * half of fp32. Rounding is to nearest even, or with ":sr" stochastic: a
 * value between the two nearest representable ones a and b rounds to b
 * with probability (x - a) / (b - a), so its mean is x (unbiased; Gupta et
 * al. 2015). fp16 saturates to +-inf past 65504, as a cast does. */
#include "compress/codec_internal.h"

static uint32_t bits_of(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static float float_of(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }

/* fp32 -> fp16, round to nearest even (NaN kept NaN). */
static uint16_t half_from_float(float x) {
  uint32_t b = bits_of(x), sign = (b >> 16) & 0x8000u, mag = b & 0x7fffffffu;
  if (mag > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
  if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* rounds past 65504: inf */
  if (mag < 0x38800000u) {                                           /* fp16 subnormal or 0 */
    if (mag < 0x33000000u) return (uint16_t)sign;                   /* below half the least: 0 */
    uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;                                        /* 14 .. 24 */
    uint32_t h = m >> shift, rest = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((mag - 0x38000000u) >> 13), rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static float float_from_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
  if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13));
  if (e == 0) return (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f; /* m x 2^-24 */
  return float_of(sign | ((e + 112) << 23) | (m << 13));
}

static uint16_t bf16_from_float(float x) {
  uint32_t b = bits_of(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u); /* NaN */
  return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

static float float_from_bf16(uint16_t h) { return float_of((uint32_t)h << 16); }

typedef uint16_t (*to16_fn)(float);
typedef float (*from16_fn)(uint16_t);

/* Stochastic rounding between the two neighbours of x in the 16-bit format. */
static uint16_t round_stochastic(float x, float u, to16_fn to, from16_fn from) {
  uint16_t r = to(x);
  float rx = from(r);
  if (rx == x || !isfinite(rx) || !isfinite(x)) return r;
  /* the other neighbour: one step of the magnitude towards x */
  int up = fabsf(x) > fabsf(rx);
  uint16_t o = (uint16_t)(up ? r + 1u : (r & 0x7fffu) ? r - 1u : (r ^ 0x8000u));
  float ox = from(o);
  if (!isfinite(ox)) return r;
  float lo = rx < ox ? rx : ox, hi = rx < ox ? ox : rx;
  float p_hi = (x - lo) / (hi - lo);
  uint16_t rlo = rx < ox ? r : o, rhi = rx < ox ? o : r;
  return u < p_hi ? rhi : rlo;
}

static size_t bytes16(const codec_spec_t *s, size_t n) { (void)s; return 2 * n; }

/* The hot paths, round to nearest: F16C converts 8 values an instruction
 * where the CPU has it (the same IEEE rounding as half_from_float, which
 * the tests check); bf16 is a loop the compiler vectorizes. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <stdatomic.h>
#include <immintrin.h>
__attribute__((target("avx,f16c"))) static void fp16_encode_f16c(const float *x, size_t n,
                                                                  uint8_t *out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(out + 2 * i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) {
    uint16_t h = half_from_float(x[i]);
    memcpy(out + 2 * i, &h, 2);
  }
}
__attribute__((target("avx,f16c"))) static void fp16_decode_f16c(const uint8_t *in, size_t n,
                                                                  float *acc) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 2 * i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
  }
  for (; i < n; i++) {
    uint16_t h;
    memcpy(&h, in + 2 * i, 2);
    acc[i] += float_from_half(h);
  }
}
/* CPUID leaf 1: ECX bit 29 F16C, 28 AVX, 27 OSXSAVE; and the OS saves the
 * AVX registers (XCR0 bits 1 and 2). By hand: clang's
 * __builtin_cpu_supports knows no "f16c". */
static int has_f16c(void) {
  static atomic_int known = -1; /* ranks' threads ask at once: the same answer */
  int k = atomic_load_explicit(&known, memory_order_relaxed);
  if (k >= 0) return k;
  unsigned a, b, c, d;
  k = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 7) == 7) {
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    k = (lo & 6) == 6;
  }
  atomic_store_explicit(&known, k, memory_order_relaxed);
  return k;
}
#else
static int has_f16c(void) { return 0; }
static void fp16_encode_f16c(const float *x, size_t n, uint8_t *out) { (void)x, (void)n, (void)out; }
static void fp16_decode_f16c(const uint8_t *in, size_t n, float *acc) { (void)in, (void)n, (void)acc; }
#endif

static void bf16_encode_nearest(const float *x, size_t n, uint8_t *out) {
  for (size_t i = 0; i < n; i++) {
    uint16_t h = bf16_from_float(x[i]);
    memcpy(out + 2 * i, &h, 2);
  }
}

static size_t encode16(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                       uint8_t *out, to16_fn to, from16_fn from) {
  for (size_t i = 0; i < n; i++) {
    uint16_t h = s->stochastic ? round_stochastic(x[i], codec_uniform(seed, i), to, from) : to(x[i]);
    memcpy(out + 2 * i, &h, 2);
  }
  return 2 * n;
}

static int decode16(const char *name, const uint8_t *in, size_t bytes, size_t n, float *acc,
                    from16_fn from) {
  if (bytes != 2 * n) return codec_size_error(name, bytes, 2 * n);
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, in + 2 * i, 2);
    acc[i] += from(h);
  }
  return 0;
}

static size_t fp16_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                          uint8_t *out, float *scratch) {
  (void)scratch;
  if (!s->stochastic && has_f16c()) return fp16_encode_f16c(x, n, out), 2 * n;
  return encode16(s, x, n, seed, out, half_from_float, float_from_half);
}
static int fp16_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  (void)s;
  if (bytes == 2 * n && has_f16c()) return fp16_decode_f16c(in, n, acc), 0;
  return decode16("fp16", in, bytes, n, acc, float_from_half);
}
static size_t bf16_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                          uint8_t *out, float *scratch) {
  (void)scratch;
  if (!s->stochastic) return bf16_encode_nearest(x, n, out), 2 * n;
  return encode16(s, x, n, seed, out, bf16_from_float, float_from_bf16);
}
static int bf16_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  (void)s;
  return decode16("bf16", in, bytes, n, acc, float_from_bf16);
}

const codec_ops_t codec_fp16_ops = {"fp16", 1, 0, bytes16, bytes16, fp16_encode, fp16_decode, NULL};
const codec_ops_t codec_bf16_ops = {"bf16", 1, 0, bytes16, bytes16, bf16_encode, bf16_decode, NULL};
