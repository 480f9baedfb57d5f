/* Which layers tensor parallelism splits (tensor.h): Megatron's pairing.
 * Walking the model, a dense layer followed, through element-wise layers
 * only (relu, tanh, sigmoid, dropout: they run on a shard as on the
 * whole), by another dense layer makes a pair: the first split by columns
 * (its outputs), the second by rows (its inputs), so that the shard flows
 * from one to the other with no communication and the pair costs one sum
 * forward and one backward. Two convolutions pair the same way, by output
 * channels then input channels, with pooling allowed between them too (it
 * works channel by channel). Anything else between two layers (batch norm,
 * a flatten, a layer of the other kind) ends the chain; a layer left
 * without a partner stays whole on every rank (replicated). */
#include "strategy/tensor/tensor.h"

static int elementwise(layer_kind_t k, layer_kind_t pair) {
  return k == LAYER_RELU || k == LAYER_TANH || k == LAYER_SIGMOID || k == LAYER_DROPOUT ||
         (pair == LAYER_CONV2D && (k == LAYER_MAXPOOL || k == LAYER_AVGPOOL));
}

static int width(const layer_spec_t *l) { return l->kind == LAYER_DENSE ? l->units : l->filters; }

static int plan(model_spec_t *spec, int tp, int dense_only, int *pairs) {
  int col = -1, n = 0;
  for (int i = 0; i < spec->nlayers; i++) {
    layer_spec_t *l = &spec->layers[i];
    l->split = SPLIT_NONE;
    int chained = l->input == i - 1;
    if (l->kind == LAYER_DENSE || (l->kind == LAYER_CONV2D && !dense_only)) {
      if (col >= 0 && chained && spec->layers[col].kind == l->kind) {
        const layer_spec_t *c = &spec->layers[col];
        if (width(c) < tp)
          return dt_error("option --tp %d: the %s layer on line %d of %s has %d %s, too few to "
                          "split over %d ranks (use --tp %d or fewer)", tp,
                          layer_kind_name(c->kind), c->line, spec->source, width(c),
                          c->kind == LAYER_DENSE ? "output features" : "filters", tp, width(c));
        spec->layers[col].split = SPLIT_COLUMN;
        l->split = SPLIT_ROW;
        n++, col = -1;
      } else {
        col = i;
      }
    } else if (col < 0 || !chained || !elementwise(l->kind, spec->layers[col].kind)) {
      col = -1;
    }
  }
  if (pairs) *pairs = n;
  if (n == 0 && tp > 1)
    return dt_error("option --tp %d: %s has no pair of layers to split (tensor parallelism "
                    "splits a dense layer followed, through relu, tanh, sigmoid or dropout only, "
                    "by another, and likewise two conv2d layers, pooling allowed between; "
                    "batchnorm and flatten layers are not split): use --tp 1", tp, spec->source);
  return 0;
}

int tensor_plan(model_spec_t *spec, int tp, int *pairs) { return plan(spec, tp, 0, pairs); }
int tensor_plan_dense(model_spec_t *spec, int tp, int *pairs) { return plan(spec, tp, 1, pairs); }
