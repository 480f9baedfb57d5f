/* Row gather: the bands of rows that split=rows local2d layers leave on the
 * ranks of a tensor-parallel group (src/strategy/tensor/plan.c inserts this
 * layer after the last of them), gathered whole on every rank for the
 * layers that need every row (dense, softmax). Forward: each rank packs its
 * band [n, h_t, w, c] into its block of the scratch, blocks padded to the
 * widest band so that the ring's equal blocks are the ranks' (one
 * allgather_ring of T x n x h_max x w x c floats), then every rank unpacks
 * all of them into NHWC. Backward: the layers after it are whole and the
 * same on every rank, so each takes its own rows of their gradient; no
 * communication. */
#include <string.h>

#include "dtrain/nn.h"

static int widest_band(const layer_t *l) {
  int off, len;
  tp_block(l->in_hfull, l->tp->size, 0, &off, &len); /* the first blocks are the widest */
  return len;
}

static size_t row_floats(const layer_t *l) { return (size_t)l->in_shape.w * l->in_shape.c; }

static int rowgather_setup(layer_t *l, int max_batch) {
  if (!l->tp || !l->tp->allgather)
    return dt_error("rowgather: inserted by tensor parallelism but given no group");
  l->out_shape = (shape_t){.c = l->in_shape.c, .h = l->in_hfull, .w = l->in_shape.w};
  l->out_hfull = l->in_hfull, l->out_hoff = 0;
  l->nweight = l->param_len = l->buf_len = 0;
  l->scratch_len = (size_t)l->tp->size * max_batch * widest_band(l) * row_floats(l);
  return 0;
}

static void rowgather_init(layer_t *l, rng_t *rng) {}

/* Forward: every rank's block of n x the widest band; backward none. */
static int rowgather_sums(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out) {
  if (backward) return 0;
  out[0] = (layer_sum_t){.gather = 1,
                         .count = (size_t)l->tp->size * n * widest_band(l) * row_floats(l)};
  return 1;
}

static void rowgather_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  size_t rf = row_floats(l), hmax = (size_t)widest_band(l), blk = (size_t)n * hmax * rf;
  size_t h = (size_t)l->in_shape.h, H = (size_t)l->in_hfull;
  float *mine = l->scratch + (size_t)l->tp->rank * blk;
  for (int b = 0; b < n; b++) {
    memcpy(mine + b * hmax * rf, x + b * h * rf, h * rf * sizeof(float));
    if (h < hmax) memset(mine + (b * hmax + h) * rf, 0, (hmax - h) * rf * sizeof(float));
  }
  layer_sum_t all;
  rowgather_sums(l, n, 0, 0, &all);
  tp_allgather(l->tp, l->scratch, all.count);
  for (int q = 0; q < l->tp->size; q++) {
    int off, len;
    tp_block(l->in_hfull, l->tp->size, q, &off, &len);
    const float *from = l->scratch + (size_t)q * blk;
    for (int b = 0; b < n; b++)
      memcpy(l->out + (b * H + (size_t)off) * rf, from + b * hmax * rf, (size_t)len * rf * sizeof(float));
  }
}

static void rowgather_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  size_t rf = row_floats(l), h = (size_t)l->in_shape.h, H = (size_t)l->in_hfull;
  for (int b = 0; b < n; b++)
    memcpy(dx + b * h * rf, l->dout + (b * H + (size_t)l->in_hoff) * rf, h * rf * sizeof(float));
}

const layer_ops_t layer_rowgather_ops = {"rowgather", rowgather_setup, rowgather_init,
                                         rowgather_forward, rowgather_backward, NULL,
                                         rowgather_sums};
