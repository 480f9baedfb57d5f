/* Position-wise dense layer: each of the n·T rows of c features goes
 * through the same weight, out[n·T, units] = x[n·T, c] · wᵀ + b (PyTorch's
 * nn.Linear applied to [n, T, c]); weight [units, c], bias [units]. One GEMM
 * for the whole batch, as the dense layer's. Initialised as GPT-2's
 * matrices, N(0, 0.02), bias 0. */
#include "seq.h"

static int linear_setup(layer_t *l, int max_batch) {
  (void)max_batch;
  DT_TRY(seq_check_input(l));
  if (l->spec.units <= 0) return dt_error("linear: units must be > 0 (got %d)", l->spec.units);
  l->out_shape = (shape_t){l->spec.units, l->in_shape.h, l->in_shape.w};
  l->nweight = (size_t)l->spec.units * (size_t)l->in_shape.c;
  l->param_len = l->nweight + (size_t)l->spec.units;
  l->buf_len = l->scratch_len = 0;
  return 0;
}

static void linear_init(layer_t *l, rng_t *rng) {
  seq_init_normal(rng, l->w, l->nweight);
  kern_zero((size_t)l->spec.units, l->b);
}

static void linear_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  int rows = seq_rows(l->in_shape, n), in = l->in_shape.c, units = l->out_shape.c;
  kern_gemm(0, 1, rows, units, in, 1.0f, x, in, l->w, in, 0.0f, l->out, units);
  seq_add_bias(l->out, l->b, rows, units);
}

static void linear_backward(layer_t *l, const float *x, float *dx, int n) {
  int rows = seq_rows(l->in_shape, n), in = l->in_shape.c, units = l->out_shape.c;
  seq_bias_grad(l->dout, rows, units, l->db, l->grad_beta != 0.0f);
  kern_gemm(1, 0, units, in, rows, 1.0f, l->dout, units, x, in, l->grad_beta, l->dw, in);
  if (dx) kern_gemm(0, 0, rows, in, units, 1.0f, l->dout, units, l->w, in, l->dx_add ? 1.0f : 0.0f, dx, in);
}

const layer_ops_t layer_linear_ops = {"linear", linear_setup, linear_init, linear_forward,
                                      linear_backward, NULL, NULL};
