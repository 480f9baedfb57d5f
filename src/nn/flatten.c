/* Flatten: in NHWC the memory of a [h, w, c] sample already is its flat
 * vector, so the output shape is {c = h·w·c, h = w = 1} and the data is
 * unchanged. forward and backward are copies that do nothing when the
 * model aliases the buffers (out == x, dx == dout), which it may. */
#include "dtrain/nn.h"

static int flatten_setup(layer_t *l, int max_batch) {
  size_t len = shape_size(l->in_shape);
  if (len == 0)
    return dt_error("flatten: empty input shape %dx%dx%d", l->in_shape.h, l->in_shape.w,
                    l->in_shape.c);
  if (len > (size_t)INT32_MAX) return dt_error("flatten: input of %zu floats is too large", len);
  l->out_shape = (shape_t){.c = (int)len, .h = 1, .w = 1};
  l->nweight = l->param_len = l->buf_len = l->scratch_len = 0;
  return 0;
}

static void flatten_init(layer_t *l, rng_t *rng) {}

static void flatten_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  kern_copy((size_t)n * shape_size(l->in_shape), x, l->out);
}

static void flatten_backward(layer_t *l, const float *x, float *dx, int n) {
  if (dx) kern_copy((size_t)n * shape_size(l->in_shape), l->dout, dx);
}

const layer_ops_t layer_flatten_ops = {"flatten", flatten_setup, flatten_init, flatten_forward,
                                       flatten_backward, NULL, NULL};
