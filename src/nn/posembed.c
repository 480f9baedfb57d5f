/* Learned position embedding: out[n, t, :] = x[n, t, :] + P[t, :], the table
 * P [positions, c] (GPT-2's wpe). A sequence longer than the table is
 * refused at setup, naming both lengths. */
#include "seq.h"

static int posembed_setup(layer_t *l, int max_batch) {
  (void)max_batch;
  DT_TRY(seq_check_input(l));
  if (l->spec.positions <= 0) return dt_error("posembed: needs positions=P (the longest sequence)");
  if (l->in_shape.w > l->spec.positions)
    return dt_error("posembed: sequences of %d tokens are longer than the position table "
                    "(positions=%d): use --seq-len %d or less, or a larger positions=",
                    l->in_shape.w, l->spec.positions, l->spec.positions);
  l->out_shape = l->in_shape;
  l->nweight = l->param_len = (size_t)l->spec.positions * (size_t)l->in_shape.c;
  l->buf_len = l->scratch_len = 0;
  return 0;
}

static void posembed_init(layer_t *l, rng_t *rng) { seq_init_normal(rng, l->w, l->nweight); }

static void posembed_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  size_t TC = shape_size(l->in_shape);
  for (int s = 0; s < n; s++) {
    const float *xs = x + s * TC;
    float *o = l->out + s * TC;
    for (size_t i = 0; i < TC; i++) o[i] = xs[i] + l->w[i];
  }
}

/* dP[t] = Σ_n dout[n, t]; rows past T stay zero (written, not added,
 * unless accumulating micro-batches). */
static void posembed_backward(layer_t *l, const float *x, float *dx, int n) {
  (void)x;
  size_t TC = shape_size(l->in_shape);
  if (l->grad_beta == 0.0f) kern_zero(l->nweight, l->dw);
  for (int s = 0; s < n; s++) {
    const float *d = l->dout + s * TC;
    for (size_t i = 0; i < TC; i++) l->dw[i] += d[i];
  }
  if (dx) seq_pass_grad(dx, l->dout, (size_t)n * TC, l->dx_add);
}

const layer_ops_t layer_posembed_ops = {"posembed", posembed_setup, posembed_init, posembed_forward,
                                        posembed_backward, NULL, NULL};
