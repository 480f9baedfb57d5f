/* Softmax cross-entropy over logits [n, k]. Per sample, with m = max logit:
 *   p_j = e^(z_j − m) / Σ e^(z_i − m),  loss = m + log Σ e^(z_i − m) − z_y
 * (subtracting m keeps every exponent ≤ 0, so nothing overflows).
 * Returns the loss summed over the samples, in double. dlogits (if given)
 * = (p − onehot(y)) / denom. A label outside [0, k) cannot happen for
 * checked data; such a sample is ignored (no loss, zero gradient, never
 * counted correct) rather than read out of bounds. probs, dlogits and
 * correct may each be NULL. */
#include "dtrain/nn.h"

#include <math.h>

double softmax_xent(const float *logits, const int32_t *labels, int n, int k, int denom,
                    float *probs, float *dlogits, int *correct) {
  double total = 0.0;
  int hits = 0;
  float inv_denom = denom > 0 ? 1.0f / (float)denom : 0.0f;
  for (int i = 0; i < n; i++) {
    const float *z = logits + (size_t)i * k;
    float *p = probs ? probs + (size_t)i * k : NULL;
    float *g = dlogits ? dlogits + (size_t)i * k : NULL;
    float *e = p ? p : g;   /* where the exponentials are kept, if anywhere */
    int y = labels[i], valid = y >= 0 && y < k, arg = 0;
    float m = z[0];
    for (int j = 1; j < k; j++)
      if (z[j] > m) {
        m = z[j];
        arg = j;
      }
    double sum = 0.0;
    if (e) {
      for (int j = 0; j < k; j++) e[j] = expf(z[j] - m);
      for (int j = 0; j < k; j++) sum += e[j];
    } else {
      for (int j = 0; j < k; j++) sum += expf(z[j] - m);
    }
    float inv_sum = (float)(1.0 / sum);
    if (e)
      for (int j = 0; j < k; j++) e[j] *= inv_sum;
    if (p && g)
      for (int j = 0; j < k; j++) g[j] = p[j];
    if (!valid) {
      if (g)
        for (int j = 0; j < k; j++) g[j] = 0.0f;
      continue;
    }
    total += (double)m + log(sum) - (double)z[y];
    hits += arg == y;
    if (g) {
      g[y] -= 1.0f;
      for (int j = 0; j < k; j++) g[j] *= inv_denom;
    }
  }
  if (correct) *correct = hits;
  return total;
}

double softmax_xent_seq(const float *logits, const int32_t *labels, int n, int positions, int k,
                        int denom, float *probs, float *dlogits, double *correct) {
  int hits = 0;
  if (positions <= 1) {
    double loss = softmax_xent(logits, labels, n, k, denom, probs, dlogits, &hits);
    if (correct) *correct = hits;
    return loss;
  }
  double total = softmax_xent(logits, labels, n * positions, k, denom * positions, probs, dlogits,
                              &hits);
  /* a sample's share: the fraction of its positions right (no rounding,
   * so that the sum does not depend on how the samples are batched) */
  if (correct) *correct = (double)hits / positions;
  return total / positions;
}
