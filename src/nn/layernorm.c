/* Layer norm over the c features of each position (PyTorch's
 * nn.LayerNorm(c), eps 1e-5 unless eps= says): y = (x - mean) · rstd · w + b,
 * rstd = 1/sqrt(var + eps) with the biased variance. weight [c] (ones),
 * bias [c] (zeros). The forward keeps each row's mean and rstd in scratch
 * for the backward:
 *   dnorm = dy·w;  dx = rstd·(dnorm − mean(dnorm) − norm·mean(dnorm·norm)). */
#include <math.h>

#include "seq.h"
#include "vec_math.h"

static int layernorm_setup(layer_t *l, int max_batch) {
  if (l->in_shape.c <= 0 || l->in_shape.h <= 0 || l->in_shape.w <= 0)
    return dt_error("layernorm: empty input shape");
  int C = l->in_shape.c;
  l->out_shape = l->in_shape;
  l->nweight = (size_t)C;
  l->param_len = 2 * (size_t)C;
  l->buf_len = 0;
  l->scratch_len = 2 * (size_t)seq_rows(l->in_shape, max_batch); /* mean, rstd a row */
  return 0;
}

static void layernorm_init(layer_t *l, rng_t *rng) {
  (void)rng;
  for (size_t i = 0; i < l->nweight; i++) l->w[i] = 1.0f, l->b[i] = 0.0f;
}

static void layernorm_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  int rows = seq_rows(l->in_shape, n), C = l->in_shape.c;
  float *mean = l->scratch, *rstd = l->scratch + rows;
  const float *restrict w = l->w, *restrict b = l->b;
  for (int r = 0; r < rows; r++) {
    const float *restrict xr = x + (size_t)r * C;
    float *restrict o = l->out + (size_t)r * C;
    float m = vec_sum(xr, C) / (float)C;
    float s = 1.0f / sqrtf(vec_sumsq_dev(xr, m, C) / (float)C + l->spec.eps);
    for (int j = 0; j < C; j++) o[j] = (xr[j] - m) * s * w[j] + b[j];
    mean[r] = m, rstd[r] = s;
  }
}

/* Per row, one pass for the weights' gradients and the two means (in
 * VEC_LANES partial sums: vec_math.h), one for dx. */
static void layernorm_backward(layer_t *l, const float *x, float *dx, int n) {
  int rows = seq_rows(l->in_shape, n), C = l->in_shape.c, add = l->dx_add;
  const float *mean = l->scratch, *rstd = l->scratch + rows;
  if (l->grad_beta == 0.0f) kern_zero(l->param_len, l->dw);
  const float *restrict w = l->w;
  float *restrict dw = l->dw, *restrict db = l->db;
  for (int r = 0; r < rows; r++) {
    const float *restrict xr = x + (size_t)r * C, *restrict dy = l->dout + (size_t)r * C;
    float m = mean[r], s = rstd[r], am[VEC_LANES] = {0}, ann[VEC_LANES] = {0};
    int j = 0;
    for (; j + VEC_LANES <= C; j += VEC_LANES)
      for (int k = 0; k < VEC_LANES; k++) {
        float norm = (xr[j + k] - m) * s, dn = dy[j + k] * w[j + k];
        dw[j + k] += dy[j + k] * norm;
        db[j + k] += dy[j + k];
        am[k] += dn;
        ann[k] += dn * norm;
      }
    for (; j < C; j++) {
      float norm = (xr[j] - m) * s, dn = dy[j] * w[j];
      dw[j] += dy[j] * norm;
      db[j] += dy[j];
      am[0] += dn;
      ann[0] += dn * norm;
    }
    if (!dx) continue;
    float dmean = vec_sum(am, VEC_LANES) / (float)C, dnn = vec_sum(ann, VEC_LANES) / (float)C;
    float *restrict d = dx + (size_t)r * C;
    for (j = 0; j < C; j++) {
      float norm = (xr[j] - m) * s, g = s * (dy[j] * w[j] - dmean - norm * dnn);
      d[j] = add ? d[j] + g : g;
    }
  }
}

const layer_ops_t layer_layernorm_ops = {"layernorm", layernorm_setup, layernorm_init,
                                         layernorm_forward, layernorm_backward, NULL, NULL};
