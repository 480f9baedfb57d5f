/* Element-wise activations: relu, tanh, sigmoid. Backward reads only the
 * output (never x), and every loop is element-wise, so the model may run
 * them in place: out == x, and dx == dout. */
#include "dtrain/nn.h"

#include <math.h>

static int act_setup(layer_t *l, int max_batch) {
  if (l->in_shape.c <= 0 || l->in_shape.h <= 0 || l->in_shape.w <= 0)
    return dt_error("%s: empty input shape %dx%dx%d", layer_kind_name(l->spec.kind), l->in_shape.h,
                    l->in_shape.w, l->in_shape.c);
  l->out_shape = l->in_shape;
  l->nweight = l->param_len = l->buf_len = l->scratch_len = 0;
  return 0;
}

static void act_init(layer_t *l, rng_t *rng) {}

static void relu_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  size_t len = (size_t)n * shape_size(l->in_shape);
  float *out = l->out;
  for (size_t i = 0; i < len; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  size_t len = (size_t)n * shape_size(l->in_shape);
  const float *out = l->out, *dout = l->dout;
  for (size_t i = 0; i < len; i++) dx[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

static void tanh_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  size_t len = (size_t)n * shape_size(l->in_shape);
  float *out = l->out;
  for (size_t i = 0; i < len; i++) out[i] = tanhf(x[i]);
}

static void tanh_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  size_t len = (size_t)n * shape_size(l->in_shape);
  const float *out = l->out, *dout = l->dout;
  for (size_t i = 0; i < len; i++) dx[i] = dout[i] * (1.0f - out[i] * out[i]);
}

/* 1/(1+e^-x): for very negative x, e^-x overflows to inf and the result
 * is 0, never NaN. */
static void sigmoid_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  size_t len = (size_t)n * shape_size(l->in_shape);
  float *out = l->out;
  for (size_t i = 0; i < len; i++) out[i] = 1.0f / (1.0f + expf(-x[i]));
}

static void sigmoid_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  size_t len = (size_t)n * shape_size(l->in_shape);
  const float *out = l->out, *dout = l->dout;
  for (size_t i = 0; i < len; i++) dx[i] = dout[i] * out[i] * (1.0f - out[i]);
}

const layer_ops_t layer_relu_ops = {"relu", act_setup, act_init, relu_forward, relu_backward,
                                    NULL, NULL};
const layer_ops_t layer_tanh_ops = {"tanh", act_setup, act_init, tanh_forward, tanh_backward,
                                    NULL, NULL};
const layer_ops_t layer_sigmoid_ops = {"sigmoid", act_setup, act_init, sigmoid_forward,
                                       sigmoid_backward, NULL, NULL};
