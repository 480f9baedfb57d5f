/* Fully connected layer: out[n, units] = x[n, in] · wᵀ + b, weight [units, in]
 * as PyTorch. An input of any shape is read as a flat vector of
 * c·h·w features (NHWC order). With spec.act == ACT_RELU the ReLU is fused:
 * bias and ReLU are one pass over the output, and backward masks dout by
 * out > 0 before the GEMMs.
 *
 * Split by tensor parallelism (nn.h, split_t): a COLUMN layer holds rows
 * [out_off, out_off + out_shape.c) of the weight and of the bias, and sums
 * its input gradient over the group; a ROW layer reads a shard of its
 * input, holds those columns of the weight and the whole bias, and sums
 * its output over the group before the bias and the activation, which are
 * then added once. Either way each rank draws the one-worker model's
 * initial values and keeps its block, so the split model starts as one
 * worker's. */
#include "dtrain/nn.h"

#include <math.h>

static int dense_setup(layer_t *l, int max_batch) {
  int units = l->spec.units, off = 0, len = units;
  if (units <= 0) return dt_error("dense: units must be > 0 (got %d)", units);
  size_t in = shape_size(l->in_shape);
  if (in == 0)
    return dt_error("dense: empty input shape %dx%dx%d", l->in_shape.h, l->in_shape.w,
                    l->in_shape.c);
  if (l->in_full == 0) l->in_full = l->in_shape.c; /* a layer set up on its own: whole */
  if (l->spec.split != SPLIT_NONE && !l->tp)
    return dt_error("dense: split by tensor parallelism but given no group");
  if (l->spec.split == SPLIT_COLUMN) {
    if (units < l->tp->size)
      return dt_error("dense: %d output features cannot be split over %d tensor-parallel ranks",
                      units, l->tp->size);
    tp_block(units, l->tp->size, l->tp->rank, &off, &len);
  }
  if (l->spec.split != SPLIT_ROW && l->in_full != l->in_shape.c)
    return dt_error("dense: reads a tensor-parallel shard but is not split by rows");
  l->out_shape = (shape_t){.c = len, .h = 1, .w = 1};
  l->out_full = units, l->out_off = off;
  l->nweight = (size_t)len * in;
  l->param_len = l->nweight + (size_t)len;
  l->buf_len = 0;
  l->scratch_len = 0;
  return 0;
}

/* PyTorch's nn.Linear: kaiming_uniform(a=√5) ⇒ U(±1/√fan_in), bias likewise. */
static void dense_init(layer_t *l, rng_t *rng) {
  size_t in = shape_size(l->in_shape), pos = in / (size_t)l->in_shape.c;
  size_t fan_in = pos * (size_t)l->in_full, rows = (size_t)l->out_shape.c;
  float bound = 1.0f / sqrtf((float)fan_in);
  layer_uniform_block(rng, bound, (size_t)l->out_full, 1, fan_in, (size_t)l->out_off, rows,
                      pos * (size_t)l->in_off, in, l->w);
  layer_uniform_block(rng, bound, (size_t)l->out_full, 1, 1, (size_t)l->out_off, rows, 0, 1, l->b);
}

/* Megatron's g, a ROW layer's output summed in forward, and f, a COLUMN
 * layer's input gradient summed in backward (unless the caller sums it:
 * tp_partial_dx). */
static int dense_sums(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out) {
  if (!backward && l->spec.split == SPLIT_ROW) {
    out[0] = (layer_sum_t){.count = (size_t)n * l->out_shape.c};
    return 1;
  }
  if (backward && has_dx && l->spec.split == SPLIT_COLUMN && !l->tp_partial_dx) {
    out[0] = (layer_sum_t){.count = (size_t)n * shape_size(l->in_shape)};
    return 1;
  }
  return 0;
}

static void dense_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  int in = (int)shape_size(l->in_shape), units = l->out_shape.c;
  float *out = l->out;
  const float *b = l->b;
  kern_gemm(0, 1, n, units, in, 1.0f, x, in, l->w, in, 0.0f, out, units);
  layer_sum_t g;
  if (dense_sums(l, n, 0, 0, &g)) tp_allreduce(l->tp, out, g.count);
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
  int in = (int)shape_size(l->in_shape), units = l->out_shape.c;
  kern_gemm(0, 0, n, in, units, 1.0f, l->dout, units, l->w, in, 0.0f, dx, in);
  layer_sum_t f;
  if (dense_sums(l, n, 1, 1, &f)) tp_allreduce(l->tp, dx, f.count);
}

static void dense_backward(layer_t *l, const float *x, float *dx, int n) {
  int in = (int)shape_size(l->in_shape), units = l->out_shape.c;
  mask_and_sum(l->dout, l->out, l->spec.act == ACT_RELU, n, units, l->db, l->grad_beta != 0.0f);
  kern_gemm(1, 0, units, in, n, 1.0f, l->dout, units, x, in, l->grad_beta, l->dw, in);
  if (dx) dense_backward_input(l, dx, n);
}

const layer_ops_t layer_dense_ops = {"dense", dense_setup, dense_init, dense_forward,
                                     dense_backward, dense_backward_input, dense_sums};
