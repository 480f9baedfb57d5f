/* Which dense layers tensor parallelism splits (tensor.h): Megatron's
 * pairing. Walking the model, a dense layer followed, through element-wise
 * layers only (relu, tanh, sigmoid, dropout: they run on a shard as on the
 * whole), by another dense layer makes a pair: the first split by columns
 * (its outputs), the second by rows (its inputs), so that the shard flows
 * from one to the other with no communication and the pair costs one sum
 * forward and one backward. Anything else between them (a convolution,
 * pooling, batch norm, a flatten of an image) ends the chain; a dense layer
 * left without a partner stays whole on every rank (replicated). */
#include "strategy/tensor/tensor.h"

static int elementwise(layer_kind_t k) {
  return k == LAYER_RELU || k == LAYER_TANH || k == LAYER_SIGMOID || k == LAYER_DROPOUT;
}

int tensor_plan(model_spec_t *spec, int tp, int *pairs) {
  int col = -1, n = 0;
  for (int i = 0; i < spec->nlayers; i++) {
    layer_spec_t *l = &spec->layers[i];
    l->split = SPLIT_NONE;
    int chained = l->input == i - 1;
    if (l->kind == LAYER_DENSE) {
      if (col >= 0 && chained) {
        const layer_spec_t *c = &spec->layers[col];
        if (c->units < tp)
          return dt_error("option --tp %d: the dense layer on line %d of %s has %d output "
                          "features, too few to split over %d ranks (use --tp %d or fewer)",
                          tp, c->line, spec->source, c->units, tp, c->units);
        spec->layers[col].split = SPLIT_COLUMN;
        l->split = SPLIT_ROW;
        n++, col = -1;
      } else {
        col = i;
      }
    } else if (!(elementwise(l->kind) && chained)) {
      col = -1;
    }
  }
  if (pairs) *pairs = n;
  if (n == 0 && tp > 1)
    return dt_error("option --tp %d: %s has no pair of dense layers to split (tensor "
                    "parallelism splits a dense layer followed, through relu, tanh, sigmoid or "
                    "dropout only, by another; conv2d, pooling, batchnorm and flatten layers are "
                    "not split): use --tp 1", tp, spec->source);
  return 0;
}
