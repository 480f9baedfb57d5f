/* GELU in its tanh form (GPT-2's; PyTorch's nn.GELU(approximate='tanh')):
 *   y = ½x(1 + tanh(u)),  u = √(2/π)(x + 0.044715x³)
 *   dy/dx = ½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²).
 * Backward reads x (the input), not the output. */
#include <math.h>
#include <stdint.h>

#include "seq.h"

#define GELU_K 0.7978845608028654f /* √(2/π) */
#define GELU_A 0.044715f

/* e^x as a branch-free sequence gcc vectorises (libm's expf is a call
 * per element: GELU with it took a fifth of a gpt step): x = n·ln2 + r,
 * |r| ≤ ln2/2, e^r by Cephes' degree-6 polynomial (about 1 ulp), 2^n made
 * in the exponent bits. x is clamped to [−87, 88] so that 2^n stays a
 * normal float (no floorf, fminf: gcc leaves loops with them scalar);
 * tanh below reaches ±1 well inside that range. */
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

/* tanh(u) = 1 − 2/(e^{2u} + 1): e^{2u} going to 0 or its clamp gives −1
 * and 1 exactly, and the absolute error near 0 is an ulp of 1, far below
 * what GELU's output keeps. */
static inline float fast_tanh(float u) { return 1.0f - 2.0f / (vec_expf(2.0f * u) + 1.0f); }

static int gelu_setup(layer_t *l, int max_batch) {
  (void)max_batch;
  if (shape_size(l->in_shape) == 0) return dt_error("gelu: empty input shape");
  l->out_shape = l->in_shape;
  l->nweight = l->param_len = l->buf_len = l->scratch_len = 0;
  return 0;
}

static void gelu_init(layer_t *l, rng_t *rng) { (void)l, (void)rng; }

static void gelu_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  size_t len = (size_t)n * shape_size(l->in_shape);
  float *restrict o = l->out;
  for (size_t i = 0; i < len; i++) {
    float v = x[i], u = GELU_K * (v + GELU_A * v * v * v);
    o[i] = 0.5f * v * (1.0f + fast_tanh(u));
  }
}

static void gelu_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  size_t len = (size_t)n * shape_size(l->in_shape);
  const float *restrict d = l->dout;
  for (size_t i = 0; i < len; i++) {
    float v = x[i], u = GELU_K * (v + GELU_A * v * v * v), t = fast_tanh(u);
    float g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
    dx[i] = l->dx_add ? dx[i] + g * d[i] : g * d[i];
  }
}

const layer_ops_t layer_gelu_ops = {"gelu", gelu_setup, gelu_init, gelu_forward, gelu_backward,
                                    NULL, NULL};
