/* xoshiro256** seeded through splitmix64: fast, small state, good enough
 * for initialisation, shuffling and dropout. */
#include "dtrain/core.h"

#include <math.h>

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
