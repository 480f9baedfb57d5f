/* Language-model head: logits[n·T, vocab] = x[n·T, c] · Wᵀ, no bias
 * (GPT-2's lm_head). W [vocab, c] is its own, or with tie=NAME the
 * embedding's table (weight tying, Press & Wolf 2017): then the head holds
 * no parameters, reads the table and writes its gradient, which the
 * embedding's backward adds to (the head runs first in backward). The
 * model's loss is softmax cross-entropy at every position. */
#include "seq.h"

static int lmhead_setup(layer_t *l, int max_batch) {
  (void)max_batch;
  DT_TRY(seq_check_input(l));
  if (l->spec.vocab <= 0) return dt_error("lmhead: needs vocab=V (got %d)", l->spec.vocab);
  l->out_shape = (shape_t){l->spec.vocab, l->in_shape.h, l->in_shape.w};
  l->nweight = l->param_len = (size_t)l->spec.vocab * (size_t)l->in_shape.c; /* 0 once tied */
  l->buf_len = l->scratch_len = 0;
  return 0;
}

static void lmhead_init(layer_t *l, rng_t *rng) {
  if (l->param_len) seq_init_normal(rng, l->w, l->nweight);
}

static void lmhead_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  int rows = seq_rows(l->in_shape, n), C = l->in_shape.c, V = l->out_shape.c;
  kern_gemm(0, 1, rows, V, C, 1.0f, x, C, l->w, C, 0.0f, l->out, V);
}

static void lmhead_backward(layer_t *l, const float *x, float *dx, int n) {
  int rows = seq_rows(l->in_shape, n), C = l->in_shape.c, V = l->out_shape.c;
  kern_gemm(1, 0, V, C, rows, 1.0f, l->dout, V, x, C, l->grad_beta, l->dw, C);
  if (dx) kern_gemm(0, 0, rows, C, V, 1.0f, l->dout, V, l->w, C, l->dx_add ? 1.0f : 0.0f, dx, C);
}

const layer_ops_t layer_lmhead_ops = {"lmhead", lmhead_setup, lmhead_init, lmhead_forward,
                                      lmhead_backward, NULL, NULL};
