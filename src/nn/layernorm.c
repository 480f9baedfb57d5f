/* Layer norm over the c features of each position (PyTorch's
 * nn.LayerNorm(c), eps 1e-5 unless eps= says): y = (x - mean) · rstd · w + b,
 * rstd = 1/sqrt(var + eps) with the biased variance. weight [c] (ones),
 * bias [c] (zeros). The forward keeps each row's mean and rstd in scratch
 * for the backward:
 *   dnorm = dy·w;  dx = rstd·(dnorm − mean(dnorm) − norm·mean(dnorm·norm)). */
#include <math.h>

#include "seq.h"

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
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C;
    float *o = l->out + (size_t)r * C;
    float m = 0.0f, v = 0.0f;
    for (int j = 0; j < C; j++) m += xr[j];
    m /= (float)C;
    for (int j = 0; j < C; j++) v += (xr[j] - m) * (xr[j] - m);
    float s = 1.0f / sqrtf(v / (float)C + l->spec.eps);
    for (int j = 0; j < C; j++) o[j] = (xr[j] - m) * s * l->w[j] + l->b[j];
    mean[r] = m, rstd[r] = s;
  }
}

static void layernorm_backward(layer_t *l, const float *x, float *dx, int n) {
  int rows = seq_rows(l->in_shape, n), C = l->in_shape.c;
  const float *mean = l->scratch, *rstd = l->scratch + rows;
  if (l->grad_beta == 0.0f) kern_zero(l->param_len, l->dw);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C, *dy = l->dout + (size_t)r * C;
    float m = mean[r], s = rstd[r], dmean = 0.0f, dnn = 0.0f;
    for (int j = 0; j < C; j++) {
      float norm = (xr[j] - m) * s, dn = dy[j] * l->w[j];
      l->dw[j] += dy[j] * norm;
      l->db[j] += dy[j];
      dmean += dn;
      dnn += dn * norm;
    }
    if (!dx) continue;
    dmean /= (float)C, dnn /= (float)C;
    float *d = dx + (size_t)r * C;
    for (int j = 0; j < C; j++) {
      float norm = (xr[j] - m) * s, g = s * (dy[j] * l->w[j] - dmean - norm * dnn);
      d[j] = l->dx_add ? d[j] + g : g;
    }
  }
}

const layer_ops_t layer_layernorm_ops = {"layernorm", layernorm_setup, layernorm_init,
                                         layernorm_forward, layernorm_backward, NULL, NULL};
