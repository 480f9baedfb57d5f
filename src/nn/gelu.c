/* GELU in its tanh form (GPT-2's; PyTorch's nn.GELU(approximate='tanh')):
 *   y = ½x(1 + tanh(u)),  u = √(2/π)(x + 0.044715x³)
 *   dy/dx = ½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²).
 * Backward reads x (the input), not the output. */
#include "seq.h"
#include "vec_math.h"

#define GELU_K 0.7978845608028654f /* √(2/π) */
#define GELU_A 0.044715f

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
  int add = l->dx_add; /* read once: dx's stores could alias l */
  for (size_t i = 0; i < len; i++) {
    float v = x[i], u = GELU_K * (v + GELU_A * v * v * v), t = fast_tanh(u);
    float g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
    dx[i] = add ? dx[i] + g * d[i] : g * d[i];
  }
}

const layer_ops_t layer_gelu_ops = {"gelu", gelu_setup, gelu_init, gelu_forward, gelu_backward,
                                    NULL, NULL};
