/* Inverted dropout: in training each element is kept with probability
 * 1 − p and scaled by 1/(1 − p), so evaluation is the identity. The mask
 * (0 or 1/(1 − p) per element) is kept in scratch for backward; the last
 * scratch float records whether the last forward was a training one, so
 * a backward after an evaluation forward passes dout through unchanged.
 * Element-wise throughout: out == x and dx == dout are allowed.
 *
 * On a tensor-parallel shard (in_full > the input's channels) the layer
 * draws the one-worker layer's whole mask, in its order, and keeps its
 * channels, so the split model drops what one worker drops. A pipeline
 * stage's micro-batch first passes l->rng_skip draws, to where one
 * worker's stream holds its samples' masks (strategy/pipe/engine.c). */
#include "dtrain/nn.h"

static int dropout_setup(layer_t *l, int max_batch) {
  float p = l->spec.rate;
  if (!(p >= 0.0f && p < 1.0f)) return dt_error("dropout: rate must be in [0, 1) (got %g)", p);
  if (shape_size(l->in_shape) == 0)
    return dt_error("dropout: empty input shape %dx%dx%d", l->in_shape.h, l->in_shape.w,
                    l->in_shape.c);
  l->out_shape = l->in_shape;
  if (l->in_full == 0) l->in_full = l->in_shape.c; /* a layer set up on its own: whole */
  l->nweight = l->param_len = l->buf_len = 0;
  l->scratch_len = (size_t)max_batch * shape_size(l->in_shape) + 1;
  return 0;
}

static void dropout_init(layer_t *l, rng_t *rng) {}

static float *train_flag(layer_t *l) { return &l->scratch[l->scratch_len - 1]; }

static void dropout_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  size_t len = (size_t)n * shape_size(l->in_shape);
  float p = l->spec.rate, *out = l->out, *mask = l->scratch;
  int drop = train && p > 0.0f && rng;
  *train_flag(l) = drop ? 1.0f : 0.0f;
  if (!drop) {
    kern_copy(len, x, out);
    return;
  }
  for (uint64_t k = 0; k < l->rng_skip; k++) rng_next(rng);
  float scale = 1.0f / (1.0f - p);
  size_t c = (size_t)l->in_shape.c, full = (size_t)l->in_full, off = (size_t)l->in_off;
  for (size_t g = 0; g < len / c; g++) /* positions; unsplit: full == c, off == 0 */
    for (size_t j = 0; j < full; j++) {
      float m = rng_uniform(rng) >= p ? scale : 0.0f;
      if (j >= off && j < off + c) mask[g * c + j - off] = m;
    }
  for (size_t i = 0; i < len; i++) out[i] = x[i] * mask[i];
}

static void dropout_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  size_t len = (size_t)n * shape_size(l->in_shape);
  const float *mask = l->scratch, *dout = l->dout;
  if (*train_flag(l) == 0.0f) {
    kern_copy(len, dout, dx);
    return;
  }
  for (size_t i = 0; i < len; i++) dx[i] = dout[i] * mask[i];
}

const layer_ops_t layer_dropout_ops = {"dropout", dropout_setup, dropout_init, dropout_forward,
                                       dropout_backward, NULL, NULL};
