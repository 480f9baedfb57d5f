/* Allgather (Megatron's gather_from_tensor_model_parallel_region): the
 * channel shards of a convolution split by output channels
 * (split=channels, src/strategy/tensor/plan.c inserts this layer where the
 * next layer needs every channel) gathered whole on every rank of the
 * tensor-parallel group. Forward: each rank packs its shard [pixels, c_r]
 * into its block of the scratch, blocks padded to the largest shard so that
 * the ring's equal blocks are the ranks' (one allgather_ring of P x pixels x
 * c_max floats), then every rank unpacks all of them into NHWC. Backward:
 * the layers after it are whole, so their gradient is the same on every
 * rank, and each takes its own channels of it; no communication. */
#include <string.h>

#include "dtrain/nn.h"

static int widest_shard(const layer_t *l) {
  int off, len;
  tp_block(l->in_full, l->tp->size, 0, &off, &len); /* the first blocks are the widest */
  return len;
}

static int allgather_setup(layer_t *l, int max_batch) {
  if (!l->tp || !l->tp->allgather)
    return dt_error("allgather: inserted by tensor parallelism but given no group");
  l->out_shape = (shape_t){.c = l->in_full, .h = l->in_shape.h, .w = l->in_shape.w};
  l->out_full = l->in_full, l->out_off = 0;
  l->nweight = l->param_len = l->buf_len = 0;
  l->scratch_len = (size_t)l->tp->size * max_batch * l->in_shape.h * l->in_shape.w * widest_shard(l);
  return 0;
}

static void allgather_init(layer_t *l, rng_t *rng) {}

/* Forward: every rank's block of pixels x the widest shard; backward
 * none. */
static int allgather_sums(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out) {
  if (backward) return 0;
  size_t pix = (size_t)n * l->in_shape.h * l->in_shape.w;
  out[0] = (layer_sum_t){.gather = 1, .count = (size_t)l->tp->size * pix * widest_shard(l)};
  return 1;
}

static void allgather_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  size_t pix = (size_t)n * l->in_shape.h * l->in_shape.w, cmax = (size_t)widest_shard(l);
  size_t c = (size_t)l->in_shape.c, C = (size_t)l->in_full, blk = pix * cmax;
  float *mine = l->scratch + (size_t)l->tp->rank * blk;
  for (size_t p = 0; p < pix; p++) {
    memcpy(mine + p * cmax, x + p * c, c * sizeof(float));
    if (c < cmax) memset(mine + p * cmax + c, 0, (cmax - c) * sizeof(float));
  }
  layer_sum_t all;
  allgather_sums(l, n, 0, 0, &all);
  tp_allgather(l->tp, l->scratch, all.count);
  for (int q = 0; q < l->tp->size; q++) {
    int off, len;
    tp_block(l->in_full, l->tp->size, q, &off, &len);
    const float *from = l->scratch + (size_t)q * blk;
    for (size_t p = 0; p < pix; p++) memcpy(l->out + p * C + off, from + p * cmax, (size_t)len * sizeof(float));
  }
}

static void allgather_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  size_t pix = (size_t)n * l->in_shape.h * l->in_shape.w, c = (size_t)l->in_shape.c, C = (size_t)l->in_full;
  for (size_t p = 0; p < pix; p++) memcpy(dx + p * c, l->dout + p * C + l->in_off, c * sizeof(float));
}

const layer_ops_t layer_allgather_ops = {"allgather", allgather_setup, allgather_init,
                                         allgather_forward, allgather_backward, NULL,
                                         allgather_sums};
