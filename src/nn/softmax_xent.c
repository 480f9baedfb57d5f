/* Softmax cross-entropy over logits [n, k]. Per sample, with m = max logit:
 *   p_j = e^(z_j − m) / Σ e^(z_i − m),  loss = m + log Σ e^(z_i − m) − z_y
 * (subtracting m keeps every exponent ≤ 0, so nothing overflows).
 * Returns the loss summed over the samples, in double. dlogits (if given)
 * = (p − onehot(y)) / denom. A label outside [0, k) cannot happen for
 * checked data; such a sample is ignored (no loss, zero gradient, never
 * counted correct) rather than read out of bounds. probs, dlogits and
 * correct may each be NULL. e^x is vec_math.h's polynomial, not libm's
 * expf call per logit. */
#include "dtrain/nn.h"

#include <math.h>

#include "vec_math.h"

enum { EXP_CHUNK = 256 };

/* Σ e^(z_j − m) over j < k, the terms kept in e if given: chunk by chunk
 * through e or a stack buffer, so that the sum is the same bits either way
 * (the evaluation's loss equals the training pass's). */
static double exp_sum(const float *z, float m, int k, float *e) {
  float buf[EXP_CHUNK];
  double sum = 0.0;
  for (int j0 = 0; j0 < k; j0 += EXP_CHUNK) {
    int len = k - j0 < EXP_CHUNK ? k - j0 : EXP_CHUNK;
    float *restrict t = e ? e + j0 : buf;
    for (int j = 0; j < len; j++) t[j] = vec_expf(z[j0 + j] - m);
    sum += vec_sum(t, len);
  }
  return sum;
}

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
    double sum = exp_sum(z, m, k, e);
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
