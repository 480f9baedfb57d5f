/* Fully connected layer: out[n, units] = x[n, in] · wᵀ + b, weight [units, in]
 * as PyTorch. An input of any shape is read as a flat vector of
 * c·h·w features (NHWC order). With spec.act == ACT_RELU the ReLU is fused:
 * bias and ReLU are one pass over the output, and backward masks dout by
 * out > 0 before the GEMMs. */
#include "dtrain/nn.h"

#include <math.h>

static int dense_setup(layer_t *l, int max_batch) {
  if (l->spec.units <= 0) return dt_error("dense: units must be > 0 (got %d)", l->spec.units);
  size_t in = shape_size(l->in_shape);
  if (in == 0)
    return dt_error("dense: empty input shape %dx%dx%d", l->in_shape.h, l->in_shape.w,
                    l->in_shape.c);
  l->out_shape = (shape_t){.c = l->spec.units, .h = 1, .w = 1};
  l->nweight = (size_t)l->spec.units * in;
  l->param_len = l->nweight + (size_t)l->spec.units;
  l->buf_len = 0;
  l->scratch_len = 0;
  return 0;
}

/* PyTorch's nn.Linear: kaiming_uniform(a=√5) ⇒ U(±1/√fan_in), bias likewise. */
static void dense_init(layer_t *l, rng_t *rng) {
  float bound = 1.0f / sqrtf((float)shape_size(l->in_shape));
  for (size_t i = 0; i < l->nweight; i++) l->w[i] = (2.0f * rng_uniform(rng) - 1.0f) * bound;
  for (int j = 0; j < l->spec.units; j++) l->b[j] = (2.0f * rng_uniform(rng) - 1.0f) * bound;
}

static void dense_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  int in = (int)shape_size(l->in_shape), units = l->spec.units;
  float *out = l->out;
  const float *b = l->b;
  kern_gemm(0, 1, n, units, in, 1.0f, x, in, l->w, in, 0.0f, out, units);
  for (int r = 0; r < n; r++) {
    float *o = out + (size_t)r * units;
    if (l->spec.act == ACT_RELU)
      for (int j = 0; j < units; j++) {
        float v = o[j] + b[j];
        o[j] = v > 0.0f ? v : 0.0f;
      }
    else
      for (int j = 0; j < units; j++) o[j] += b[j];
  }
}

/* db = column sums of dout (added to db when add), after masking dout
 * by out > 0 for a fused ReLU: one pass over dout. */
static void mask_and_sum(float *restrict dout, const float *restrict out, int relu, int rows,
                         int cols, float *restrict db, int add) {
  if (!add) for (int j = 0; j < cols; j++) db[j] = 0.0f;
  for (int r = 0; r < rows; r++) {
    float *d = dout + (size_t)r * cols;
    if (relu) {
      const float *o = out + (size_t)r * cols;
      for (int j = 0; j < cols; j++) {
        d[j] = o[j] > 0.0f ? d[j] : 0.0f;
        db[j] += d[j];
      }
    } else {
      for (int j = 0; j < cols; j++) db[j] += d[j];
    }
  }
}

static void dense_backward_input(layer_t *l, float *dx, int n) {
  int in = (int)shape_size(l->in_shape), units = l->spec.units;
  kern_gemm(0, 0, n, in, units, 1.0f, l->dout, units, l->w, in, 0.0f, dx, in);
}

static void dense_backward(layer_t *l, const float *x, float *dx, int n) {
  int in = (int)shape_size(l->in_shape), units = l->spec.units;
  mask_and_sum(l->dout, l->out, l->spec.act == ACT_RELU, n, units, l->db, l->grad_beta != 0.0f);
  kern_gemm(1, 0, units, in, n, 1.0f, l->dout, units, x, in, l->grad_beta, l->dw, in);
  if (dx) dense_backward_input(l, dx, n);
}

const layer_ops_t layer_dense_ops = {"dense", dense_setup, dense_init, dense_forward,
                                     dense_backward, dense_backward_input};
