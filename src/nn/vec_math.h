/* Internal to src/nn: e^x and row reductions written so that gcc -O3
 * vectorises them without -ffast-math. Without it gcc keeps a float sum
 * in source order (one add after another, or an in-order "vectorised"
 * loop that is no faster), so the reductions here keep 16 partial sums,
 * one per lane of a 512-bit register, and add them at the end: another
 * rounding order than the plain loop's, as accurate (shorter chains).
 * Static inline, so that e^x is inlined into the caller's loop. */
#ifndef DTRAIN_NN_VEC_MATH_H
#define DTRAIN_NN_VEC_MATH_H

#include <stdint.h>
#include <string.h>

enum { VEC_LANES = 16 };

/* e^x as a branch-free sequence gcc vectorises (libm's expf is a call
 * per element: GELU with it took a fifth of a gpt step): x = n·ln2 + r,
 * |r| ≤ ln2/2, e^r by Cephes' degree-6 polynomial (about 1 ulp), 2^n made
 * in the exponent bits. x is clamped to [−87, 88] so that 2^n stays a
 * normal float (no floorf, fminf: gcc leaves loops with them scalar), so
 * e^x for x < −87 is e^−87 ≈ 1.6e-38, not 0: far below any sum it joins. */
static inline float vec_expf(float x) {
  x = x < -87.0f ? -87.0f : x; /* two selects, not one nested: gcc vectorises these */
  x = x > 88.0f ? 88.0f : x;
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round: + 1.5·2^23 */
  float r = x - n * 0.693359375f + n * 2.12194440e-4f; /* ln2 in two parts */
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float two;
  memcpy(&two, &bits, sizeof two);
  return p * two;
}

/* Σ x[j], j < n. */
static inline float vec_sum(const float *restrict x, int n) {
  float acc[VEC_LANES] = {0};
  int j = 0;
  for (; j + VEC_LANES <= n; j += VEC_LANES)
    for (int k = 0; k < VEC_LANES; k++) acc[k] += x[j + k];
  for (; j < n; j++) acc[0] += x[j];
  float s = 0.0f;
  for (int k = 0; k < VEC_LANES; k++) s += acc[k];
  return s;
}

/* Σ x[j]·y[j], j < n. */
static inline float vec_dot(const float *restrict x, const float *restrict y, int n) {
  float acc[VEC_LANES] = {0};
  int j = 0;
  for (; j + VEC_LANES <= n; j += VEC_LANES)
    for (int k = 0; k < VEC_LANES; k++) acc[k] += x[j + k] * y[j + k];
  for (; j < n; j++) acc[0] += x[j] * y[j];
  float s = 0.0f;
  for (int k = 0; k < VEC_LANES; k++) s += acc[k];
  return s;
}

/* Σ (x[j] − m)², j < n. */
static inline float vec_sumsq_dev(const float *restrict x, float m, int n) {
  float acc[VEC_LANES] = {0};
  int j = 0;
  for (; j + VEC_LANES <= n; j += VEC_LANES)
    for (int k = 0; k < VEC_LANES; k++) acc[k] += (x[j + k] - m) * (x[j + k] - m);
  for (; j < n; j++) acc[0] += (x[j] - m) * (x[j] - m);
  float s = 0.0f;
  for (int k = 0; k < VEC_LANES; k++) s += acc[k];
  return s;
}

/* max x[j], j < n (n ≥ 1): exact in any order. */
static inline float vec_max(const float *restrict x, int n) {
  float acc[VEC_LANES];
  for (int k = 0; k < VEC_LANES; k++) acc[k] = x[0];
  int j = 0;
  for (; j + VEC_LANES <= n; j += VEC_LANES)
    for (int k = 0; k < VEC_LANES; k++) acc[k] = x[j + k] > acc[k] ? x[j + k] : acc[k];
  for (; j < n; j++) acc[0] = x[j] > acc[0] ? x[j] : acc[0];
  float m = acc[0];
  for (int k = 1; k < VEC_LANES; k++) m = acc[k] > m ? acc[k] : m;
  return m;
}

/* x[j] = e^(x[j] − m) for j < n; returns their sum. */
static inline float vec_exp_sum(float *restrict x, float m, int n) {
  for (int j = 0; j < n; j++) x[j] = vec_expf(x[j] - m);
  return vec_sum(x, n);
}
#endif
