/* Residual add: out = x + x2, x2 the node named by with= (the residual
 * stream), of the same shape. Backward passes dout to both inputs, written
 * or added (dx_add, dx2_add) as the model planned. */
#include "seq.h"

static int add_setup(layer_t *l, int max_batch) {
  (void)max_batch;
  shape_t a = l->in_shape, b = l->in2_shape;
  if (a.c != b.c || a.h != b.h || a.w != b.w)
    return dt_error("add: its inputs differ in shape (%dx%dx%d and, from with=, %dx%dx%d): name a "
                    "node of the input's shape", a.c, a.h, a.w, b.c, b.h, b.w);
  l->out_shape = a;
  l->nweight = l->param_len = l->buf_len = l->scratch_len = 0;
  return 0;
}

static void add_init(layer_t *l, rng_t *rng) { (void)l, (void)rng; }

static void add_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  size_t len = (size_t)n * shape_size(l->in_shape);
  const float *restrict a = x, *restrict b = l->x2;
  float *restrict o = l->out;
  for (size_t i = 0; i < len; i++) o[i] = a[i] + b[i];
}

static void add_backward(layer_t *l, const float *x, float *dx, int n) {
  (void)x;
  size_t len = (size_t)n * shape_size(l->in_shape);
  if (dx) seq_pass_grad(dx, l->dout, len, l->dx_add);
  if (l->dx2) seq_pass_grad(l->dx2, l->dout, len, l->dx2_add);
}

const layer_ops_t layer_add_ops = {"add", add_setup, add_init, add_forward, add_backward, NULL, NULL};
