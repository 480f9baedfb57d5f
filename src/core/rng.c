/* xoshiro256** seeded through splitmix64: fast, small state, good enough
 * for initialisation, shuffling and dropout. */
#include "dtrain/core.h"

#include <math.h>
#include <pthread.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void rng_seed(rng_t *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(rng_t *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

/* Lemire's multiply-shift; the tiny bias is irrelevant for shuffling. */
uint32_t rng_below(rng_t *r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

float rng_uniform(rng_t *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

float rng_normal(rng_t *r) {
  /* Box-Muller; u1 in (0,1] so the log is finite. */
  double u1 = ((double)(rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- Marsaglia & Tsang's ziggurat (2000), 256 layers of equal area V
 * under exp(-x^2/2): layer i >= 1 is the box of width zig_x[i] between
 * heights f(zig_x[i]) and f(zig_x[i+1]); layer 0 is the base box of width R
 * plus the tail past R, drawn as one box of width V / f(R). One 64-bit
 * draw gives the layer (8 bits), the sign (1) and the abscissa (53); about
 * 99% of draws end in the box's inside, with no log or cos -- about 10x
 * Box-Muller, which matters for 55 million values of synthetic data. */
#define ZIG_LAYERS 256
#define ZIG_R 3.6541528853610088
#define ZIG_V 0.00492867323399

static double zig_x[ZIG_LAYERS + 1], zig_f[ZIG_LAYERS + 1];
static pthread_once_t zig_once = PTHREAD_ONCE_INIT;

static double zig_density(double x) { return exp(-0.5 * x * x); }

static void zig_tables(void) {
  zig_x[0] = ZIG_V / zig_density(ZIG_R);
  zig_x[1] = ZIG_R;
  for (int i = 1; i < ZIG_LAYERS - 1; i++)
    zig_x[i + 1] = sqrt(-2.0 * log(ZIG_V / zig_x[i] + zig_density(zig_x[i])));
  zig_x[ZIG_LAYERS] = 0.0;
  for (int i = 0; i <= ZIG_LAYERS; i++) zig_f[i] = zig_density(zig_x[i]);
}

static double unit_open(rng_t *r) { /* in (0, 1]: its log is finite */
  return ((double)(rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

/* Past R: Marsaglia's (1964) tail method. */
static double zig_tail(rng_t *r) {
  for (;;) {
    double a = -log(unit_open(r)) / ZIG_R, b = -log(unit_open(r));
    if (2.0 * b > a * a) return ZIG_R + a;
  }
}

static float zig_normal(rng_t *r) {
  for (;;) {
    uint64_t u = rng_next(r);
    int i = (int)(u & 0xff);
    double sign = (u & 0x100) ? -1.0 : 1.0;
    double x = (double)(u >> 11) * (1.0 / 9007199254740992.0) * zig_x[i];
    if (x < zig_x[i + 1]) return (float)(sign * x); /* inside the box */
    if (i == 0) return (float)(sign * zig_tail(r));
    double y = zig_f[i] + (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0) *
                              (zig_f[i + 1] - zig_f[i]);
    if (y < zig_density(x)) return (float)(sign * x); /* in the wedge, under the curve */
  }
}

void rng_fill_normal(rng_t *r, size_t n, float *out) {
  pthread_once(&zig_once, zig_tables);
  for (size_t i = 0; i < n; i++) out[i] = zig_normal(r);
}

void rng_shuffle_u32(rng_t *r, uint32_t *a, size_t n) {
  for (size_t i = n; i > 1; i--) {
    size_t j = rng_below(r, (uint32_t)i);
    uint32_t t = a[i - 1];
    a[i - 1] = a[j];
    a[j] = t;
  }
}

uint64_t rng_derive(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);
  uint64_t a = splitmix64(&x);
  x = a ^ (index * 0x9e3779b97f4a7c15ull);
  return splitmix64(&x);
}
