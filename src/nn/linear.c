/* Position-wise dense layer: each of the n·T rows of c features goes
 * through the same weight, out[n·T, units] = x[n·T, c] · wᵀ + b (PyTorch's
 * nn.Linear applied to [n, T, c]); weight [units, c], bias [units]. One GEMM
 * for the whole batch, as the dense layer's. Initialised as GPT-2's
 * matrices, N(0, 0.02), bias 0.
 *
 * Split by tensor parallelism (Megatron's MLP, nn.h split_t): a COLUMN
 * layer holds rows [out_off, out_off + out_shape.c) of the weight and the
 * bias, and sums its input gradient over the group (f); a ROW layer reads
 * a shard of the features, holds those columns of the weight and the whole
 * bias, and sums its output over the group before adding the bias once
 * (g). Each rank draws one worker's initial values and keeps its block. */
#include "seq.h"

static int linear_setup(layer_t *l, int max_batch) {
  DT_TRY(seq_check_input(l));
  int units = l->spec.units, off = 0, len = units;
  if (units <= 0) return dt_error("linear: units must be > 0 (got %d)", units);
  if (l->in_full == 0) l->in_full = l->in_shape.c, l->in_off = 0; /* set up on its own: whole */
  if (l->spec.split != SPLIT_NONE && !l->tp)
    return dt_error("linear: split by tensor parallelism but given no group");
  if (l->spec.split == SPLIT_COLUMN) {
    if (units < l->tp->size)
      return dt_error("linear: %d output features cannot be split over %d tensor-parallel ranks",
                      units, l->tp->size);
    tp_block(units, l->tp->size, l->tp->rank, &off, &len);
  }
  if (l->spec.split != SPLIT_ROW && l->in_full != l->in_shape.c)
    return dt_error("linear: reads a tensor-parallel shard but is not split by rows");
  l->out_shape = (shape_t){len, l->in_shape.h, l->in_shape.w};
  l->out_full = units, l->out_off = off;
  l->nweight = (size_t)len * (size_t)l->in_shape.c;
  l->param_len = l->nweight + (size_t)len;
  l->buf_len = 0;
  /* a COLUMN layer's partial input gradient, summed before it is added */
  l->scratch_len = l->spec.split == SPLIT_COLUMN ? (size_t)max_batch * seq_rows(l->in_shape, 1) *
                                                       (size_t)l->in_shape.c : 0;
  return 0;
}

static void linear_init(layer_t *l, rng_t *rng) {
  seq_init_normal_block(rng, (size_t)l->out_full, (size_t)l->in_full, (size_t)l->out_off,
                        (size_t)l->out_shape.c, (size_t)l->in_off, (size_t)l->in_shape.c, l->w);
  kern_zero((size_t)l->out_shape.c, l->b);
}

/* Megatron's g (a ROW layer's output, forward) and f (a COLUMN layer's
 * input gradient, backward). */
static int linear_sums(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out) {
  size_t rows = (size_t)seq_rows(l->in_shape, n);
  if (!backward && l->spec.split == SPLIT_ROW) {
    out[0] = (layer_sum_t){.count = rows * (size_t)l->out_shape.c};
    return 1;
  }
  if (backward && has_dx && l->spec.split == SPLIT_COLUMN) {
    out[0] = (layer_sum_t){.count = rows * (size_t)l->in_shape.c};
    return 1;
  }
  return 0;
}

static void linear_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  int rows = seq_rows(l->in_shape, n), in = l->in_shape.c, units = l->out_shape.c;
  kern_gemm(0, 1, rows, units, in, 1.0f, x, in, l->w, in, 0.0f, l->out, units);
  layer_sum_t g;
  if (linear_sums(l, n, 0, 0, &g)) tp_allreduce(l->tp, l->out, g.count);
  seq_add_bias(l->out, l->b, rows, units);
}

static void linear_backward(layer_t *l, const float *x, float *dx, int n) {
  int rows = seq_rows(l->in_shape, n), in = l->in_shape.c, units = l->out_shape.c;
  seq_bias_grad(l->dout, rows, units, l->db, l->grad_beta != 0.0f);
  kern_gemm(1, 0, units, in, rows, 1.0f, l->dout, units, x, in, l->grad_beta, l->dw, in);
  if (!dx) return;
  layer_sum_t f;
  if (!linear_sums(l, n, 1, 1, &f)) {
    kern_gemm(0, 0, rows, in, units, 1.0f, l->dout, units, l->w, in, l->dx_add ? 1.0f : 0.0f, dx, in);
    return;
  }
  /* each rank's part of the gradient, summed over the group, then given */
  kern_gemm(0, 0, rows, in, units, 1.0f, l->dout, units, l->w, in, 0.0f, l->scratch, in);
  tp_allreduce(l->tp, l->scratch, f.count);
  seq_pass_grad(dx, l->scratch, f.count, l->dx_add);
}

const layer_ops_t layer_linear_ops = {"linear", linear_setup, linear_init, linear_forward,
                                      linear_backward, NULL, linear_sums};
