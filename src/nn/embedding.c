/* Token embedding: a sample is T token ids (floats holding whole numbers,
 * as text data gives them), its output row t the table's row for token t.
 * weight [vocab, units] (PyTorch's nn.Embedding.weight). Backward adds each
 * position's output gradient to its token's row; a tied lmhead has written
 * the table's gradient first (l->tied), so then it only adds. The token
 * ids have no gradient. */
#include "seq.h"

static int embedding_setup(layer_t *l, int max_batch) {
  (void)max_batch;
  if (l->spec.vocab <= 0 || l->spec.units <= 0)
    return dt_error("embedding: needs vocab=V and units=C (got %d, %d)", l->spec.vocab, l->spec.units);
  shape_t s = l->in_shape;
  if (s.c != 1)
    return dt_error("embedding: reads token ids, one a position (input %dx%dx%d has %d features "
                    "a position)", s.c, s.h, s.w, s.c);
  l->out_shape = (shape_t){l->spec.units, s.h, s.w};
  l->nweight = l->param_len = (size_t)l->spec.vocab * (size_t)l->spec.units;
  l->buf_len = l->scratch_len = 0;
  return 0;
}

static void embedding_init(layer_t *l, rng_t *rng) { seq_init_normal(rng, l->w, l->nweight); }

/* A token id outside the table reads row 0: checked data never has one. */
static int token_of(float v, int vocab) {
  int t = (int)v;
  return t >= 0 && t < vocab ? t : 0;
}

static void embedding_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  int rows = seq_rows(l->in_shape, n), C = l->out_shape.c, V = l->spec.vocab;
  for (int r = 0; r < rows; r++)
    memcpy(l->out + (size_t)r * C, l->w + (size_t)token_of(x[r], V) * C, (size_t)C * sizeof(float));
}

static void embedding_backward(layer_t *l, const float *x, float *dx, int n) {
  int rows = seq_rows(l->in_shape, n), C = l->out_shape.c, V = l->spec.vocab;
  if (!l->tied && l->grad_beta == 0.0f) kern_zero(l->nweight, l->dw);
  for (int r = 0; r < rows; r++) {
    float *g = l->dw + (size_t)token_of(x[r], V) * C;
    const float *d = l->dout + (size_t)r * C;
    for (int j = 0; j < C; j++) g[j] += d[j];
  }
  if (dx && !l->dx_add) kern_zero((size_t)rows, dx); /* ids: no gradient */
}

const layer_ops_t layer_embedding_ops = {"embedding", embedding_setup, embedding_init,
                                         embedding_forward, embedding_backward, NULL, NULL};
