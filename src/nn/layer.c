/* The layer kinds: one table maps a kind to its name and its operations.
 * Each kind's operations live in a file of its own (dense.c, conv2d.c,
 * pool.c, activation.c, flatten.c, dropout.c, batchnorm.c, allgather.c,
 * local2d.c, rowgather.c).
 *
 * State kept between forward and backward: backward uses what the most
 * recent forward of the same layer left in l->scratch (im2col columns,
 * pooling argmax, dropout mask, batch statistics) and l->out, so a caller
 * that runs several forwards before their backwards (pipelines) needs one
 * layer_t (and scratch) per forward in flight. conv2d's backward also
 * reuses its column buffer, so a second backward needs a new forward. */
#include "dtrain/nn.h"

#include <string.h>

/* Defined in the per-kind files; no header of their own because nothing
 * but this table should reach them. */
extern const layer_ops_t layer_dense_ops, layer_conv2d_ops, layer_maxpool_ops,
    layer_avgpool_ops, layer_flatten_ops, layer_relu_ops, layer_tanh_ops,
    layer_sigmoid_ops, layer_dropout_ops, layer_batchnorm_ops, layer_allgather_ops,
    layer_embedding_ops, layer_posembed_ops, layer_layernorm_ops, layer_gelu_ops,
    layer_attention_ops, layer_add_ops, layer_linear_ops, layer_lmhead_ops, layer_lstm_ops,
    layer_local2d_ops, layer_rowgather_ops;

static const layer_ops_t *const kinds[LAYER_KIND_COUNT] = {
    [LAYER_DENSE] = &layer_dense_ops,         [LAYER_CONV2D] = &layer_conv2d_ops,
    [LAYER_MAXPOOL] = &layer_maxpool_ops,     [LAYER_AVGPOOL] = &layer_avgpool_ops,
    [LAYER_FLATTEN] = &layer_flatten_ops,     [LAYER_RELU] = &layer_relu_ops,
    [LAYER_TANH] = &layer_tanh_ops,           [LAYER_SIGMOID] = &layer_sigmoid_ops,
    [LAYER_DROPOUT] = &layer_dropout_ops,     [LAYER_BATCHNORM] = &layer_batchnorm_ops,
    [LAYER_ALLGATHER] = &layer_allgather_ops,
    [LAYER_EMBEDDING] = &layer_embedding_ops, [LAYER_POSEMBED] = &layer_posembed_ops,
    [LAYER_LAYERNORM] = &layer_layernorm_ops, [LAYER_GELU] = &layer_gelu_ops,
    [LAYER_ATTENTION] = &layer_attention_ops, [LAYER_ADD] = &layer_add_ops,
    [LAYER_LINEAR] = &layer_linear_ops,       [LAYER_LMHEAD] = &layer_lmhead_ops,
    [LAYER_LSTM] = &layer_lstm_ops,
    [LAYER_LOCAL2D] = &layer_local2d_ops,
    [LAYER_ROWGATHER] = &layer_rowgather_ops,
};

/* Inserted by tensor parallelism's planner, never written in a model file. */
static int writable(int k) { return k != LAYER_ALLGATHER && k != LAYER_ROWGATHER; }

const layer_ops_t *layer_ops_for(layer_kind_t kind) {
  return (unsigned)kind < LAYER_KIND_COUNT ? kinds[kind] : NULL;
}

const char *layer_kind_name(layer_kind_t kind) {
  return (unsigned)kind < LAYER_KIND_COUNT ? kinds[kind]->name : "unknown";
}

int layer_kind_adds_dx(layer_kind_t kind) { return kind >= LAYER_EMBEDDING && kind < LAYER_KIND_COUNT; }

int layer_kind_parse(const char *name, layer_kind_t *out) {
  for (int k = 0; k < LAYER_KIND_COUNT; k++)
    if (writable(k) && strcmp(name, kinds[k]->name) == 0) {
      *out = (layer_kind_t)k;
      return 0;
    }
  char list[512] = "";
  for (int k = 0; k < LAYER_KIND_COUNT; k++) {
    if (!writable(k)) continue;
    strcat(list, k ? ", " : "");
    strcat(list, kinds[k]->name);
  }
  return dt_error("unknown layer kind '%s' (expected one of: %s)", name, list);
}

void tp_allreduce(tp_link_t *t, float *buf, size_t count) {
  if (!t || t->failed) return;
  if (t->allreduce(t, buf, count) != 0) t->failed = 1;
}

void tp_allgather(tp_link_t *t, float *buf, size_t count) {
  if (!t || t->failed) return;
  if (t->allgather(t, buf, count) != 0) t->failed = 1;
}

void tp_exchange(tp_link_t *t, const tp_msg_t *msgs, int n) {
  if (!t || t->failed || n == 0) return;
  if (t->exchange(t, msgs, n) != 0) t->failed = 1;
}

void layer_uniform_block(rng_t *rng, float bound, size_t rows, size_t mid, size_t cols, size_t r0,
                         size_t nr, size_t c0, size_t nc, float *out) {
  for (size_t r = 0; r < rows; r++)
    for (size_t m = 0; m < mid; m++)
      for (size_t c = 0; c < cols; c++) {
        float v = (2.0f * rng_uniform(rng) - 1.0f) * bound;
        if (r >= r0 && r < r0 + nr && c >= c0 && c < c0 + nc)
          out[((r - r0) * mid + m) * nc + (c - c0)] = v;
      }
}

void tp_block(int count, int parts, int i, int *off, int *len) {
  int base = count / parts, extra = count % parts;
  *len = base + (i < extra);
  *off = i * base + (i < extra ? i : extra);
}
