/* Batch normalisation per channel over N·H·W (BatchNorm2d on conv output,
 * BatchNorm1d on dense output where h = w = 1), with PyTorch's meaning:
 *   train: y = γ·(x − μ_B)/√(σ²_B + ε) + β, σ²_B biased;
 *          running = (1 − m)·running + m·batch, with the unbiased variance;
 *   eval:  the running statistics instead of the batch ones.
 * gamma is l->w, beta l->b; running mean/var live in the buffer arena.
 * Scratch (independent of the batch size): mean[c], invstd[c] used by the
 * last forward, three per-channel temporaries, and a train flag. x̂ is not
 * stored: backward recomputes it from x, which costs less than the memory
 * traffic of keeping it.
 *
 * Synchronized (l->bn_sync, --sync-bn; PyTorch's SyncBatchNorm): the batch
 * statistics are the group's - the sums of x and of the squared deviations
 * and the pixel count are summed over it before they are used, and in
 * backward the sums that dx needs (Σ dy, Σ dy·(x − μ)) too - so N ranks of
 * b samples compute one worker's batch norm of N·b. γ and β's own
 * gradients stay local sums: data parallelism adds them up. */
#include "dtrain/nn.h"

#include <math.h>

#include "model_internal.h"

static int bn_setup(layer_t *l, int max_batch) {
  const layer_spec_t *s = &l->spec;
  if (l->in_shape.c <= 0 || l->in_shape.h <= 0 || l->in_shape.w <= 0)
    return dt_error("batchnorm: empty input shape %dx%dx%d", l->in_shape.h, l->in_shape.w,
                    l->in_shape.c);
  if (!(s->eps > 0.0f)) return dt_error("batchnorm: eps must be > 0 (got %g)", s->eps);
  if (!(s->momentum >= 0.0f && s->momentum <= 1.0f))
    return dt_error("batchnorm: momentum must be in [0, 1] (got %g)", s->momentum);
  size_t c = (size_t)l->in_shape.c;
  l->out_shape = l->in_shape;
  l->nweight = c;
  l->param_len = 2 * c;
  l->buf_len = 2 * c;
  l->scratch_len = 5 * c + 2;
  return 0;
}

static void bn_init(layer_t *l, rng_t *rng) {
  for (int c = 0; c < l->in_shape.c; c++) {
    l->w[c] = 1.0f;
    l->b[c] = 0.0f;
    l->running_mean[c] = 0.0f;
    l->running_var[c] = 1.0f;
  }
}

typedef struct {
  float *mean, *invstd, *t0, *t1, *t2, *train, *pixels;  /* t0, t1 contiguous */
} bn_scratch_t;

static bn_scratch_t scratch_of(layer_t *l) {
  size_t c = (size_t)l->in_shape.c;
  float *s = l->scratch;
  return (bn_scratch_t){s, s + c, s + 2 * c, s + 3 * c, s + 4 * c, s + 5 * c, s + 5 * c + 1};
}

/* Synchronized, a training pass's sums over the group: forward Σx per
 * channel with the pixel count (C + 1), then Σ(x − μ)² (C); backward,
 * where the input gradient is computed, Σdy and Σdy·x̂ (2C). */
static int bn_sums(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out) {
  size_t C = (size_t)l->in_shape.c;
  if (!l->bn_sync || (backward && !has_dx)) return 0;
  if (backward) {
    out[0] = (layer_sum_t){.bn = 1, .count = 2 * C};
    return 1;
  }
  out[0] = (layer_sum_t){.bn = 1, .count = C + 1};
  out[1] = (layer_sum_t){.bn = 1, .count = C};
  return 2;
}

/* Synchronized: sum[c] (and *count, if given) summed over the group, with
 * tmp (C + 1 floats) as the message. */
static void sync_sums(layer_t *l, float *sum, float *count, float *tmp) {
  int C = l->in_shape.c;
  if (!l->bn_sync) return;
  for (int c = 0; c < C; c++) tmp[c] = sum[c];
  tmp[C] = count ? *count : 0.0f;
  tp_allreduce(l->bn_sync, tmp, (size_t)C + (count != NULL));
  for (int c = 0; c < C; c++) sum[c] = tmp[c];
  if (count) *count = tmp[C];
}

static void bn_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  int C = l->in_shape.c;
  size_t pixels = (size_t)n * l->in_shape.h * l->in_shape.w;
  bn_scratch_t s = scratch_of(l);
  float *mean = s.mean, *invstd = s.invstd, *scale = s.t0, *shift = s.t1;
  float eps = l->spec.eps;
  *s.train = train ? 1.0f : 0.0f;
  if (train) {
    /* Two passes (mean, then squared deviations): stable for any offset. */
    float *var = s.invstd;
    for (int c = 0; c < C; c++) mean[c] = var[c] = 0.0f;
    for (size_t p = 0; p < pixels; p++) {
      const float *xp = x + p * C;
      for (int c = 0; c < C; c++) mean[c] += xp[c];
    }
    float total = (float)pixels; /* the group's, when synchronized */
    sync_sums(l, mean, &total, s.t0);
    *s.pixels = total;
    for (int c = 0; c < C; c++) mean[c] /= total;
    for (size_t p = 0; p < pixels; p++) {
      const float *xp = x + p * C;
      for (int c = 0; c < C; c++) {
        float d = xp[c] - mean[c];
        var[c] += d * d;
      }
    }
    sync_sums(l, var, NULL, s.t0);
    float m = l->spec.momentum;
    float unbias = total > 1 ? total / (total - 1) : 1.0f;
    for (int c = 0; c < C; c++) {
      float v = var[c] / total;
      l->running_mean[c] = (1.0f - m) * l->running_mean[c] + m * mean[c];
      l->running_var[c] = (1.0f - m) * l->running_var[c] + m * v * unbias;
      invstd[c] = 1.0f / sqrtf(v + eps);
    }
  } else {
    for (int c = 0; c < C; c++) {
      mean[c] = l->running_mean[c];
      invstd[c] = 1.0f / sqrtf(l->running_var[c] + eps);
    }
  }
  for (int c = 0; c < C; c++) {
    scale[c] = l->w[c] * invstd[c];
    shift[c] = l->b[c] - mean[c] * scale[c];
  }
  for (size_t p = 0; p < pixels; p++) {
    const float *xp = x + p * C;
    float *op = l->out + p * C;
    for (int c = 0; c < C; c++) op[c] = xp[c] * scale[c] + shift[c];
  }
}

/* With x̂ = (x − μ)·r (r = invstd), M = N·H·W:
 *   dβ = Σ dy,  dγ = Σ dy·x̂
 *   train: dx = γr·(dy − dβ/M − x̂·dγ/M) = a·(dy − e) + k·(x − μ)
 *          with a = γr, e = dβ/M, k = −γr²·dγ/M
 *   eval:  μ and r are constants: e = k = 0. */
static void bn_backward(layer_t *l, const float *x, float *dx, int n) {
  int C = l->in_shape.c;
  size_t pixels = (size_t)n * l->in_shape.h * l->in_shape.w;
  bn_scratch_t s = scratch_of(l);
  const float *mean = s.mean, *invstd = s.invstd, *dout = l->dout;
  float *dgamma = l->dw, *dbeta = l->db;
  for (int c = 0; c < C; c++) dgamma[c] = dbeta[c] = 0.0f;
  for (size_t p = 0; p < pixels; p++) {
    const float *xp = x + p * C, *dp = dout + p * C;
    for (int c = 0; c < C; c++) {
      dbeta[c] += dp[c];
      dgamma[c] += dp[c] * (xp[c] - mean[c]);
    }
  }
  for (int c = 0; c < C; c++) dgamma[c] *= invstd[c];
  if (!dx) return;
  float *a = s.t0, *e = s.t1, *k = s.t2;
  int train = *s.train != 0.0f;
  float inv_m = train ? 1.0f / *s.pixels : 0.0f;
  layer_sum_t sum;
  /* synchronized: the group's Σ dy and Σ dy·x̂ (γ, β's gradients stay local) */
  if (train && bn_sums(l, n, 1, 1, &sum)) {
    for (int c = 0; c < C; c++) s.t0[c] = dbeta[c], s.t1[c] = dgamma[c];
    tp_allreduce(l->bn_sync, s.t0, sum.count);
    for (int c = 0; c < C; c++) {
      float gb = s.t0[c], gg = s.t1[c];
      a[c] = l->w[c] * invstd[c];
      e[c] = gb * inv_m;
      k[c] = -a[c] * invstd[c] * gg * inv_m;
    }
  } else {
    for (int c = 0; c < C; c++) {
      a[c] = l->w[c] * invstd[c];
      e[c] = train ? dbeta[c] * inv_m : 0.0f;
      k[c] = train ? -a[c] * invstd[c] * dgamma[c] * inv_m : 0.0f;
    }
  }
  for (size_t p = 0; p < pixels; p++) {
    const float *xp = x + p * C, *dp = dout + p * C;
    float *gp = dx + p * C;
    for (int c = 0; c < C; c++) gp[c] = a[c] * (dp[c] - e[c]) + k[c] * (xp[c] - mean[c]);
  }
}

/* A rank with no sample: the sums a training forward or backward would
 * add to (bn_sums), with nothing in them. */
void bn_sync_idle(layer_t *l, int backward, int has_dx) {
  bn_scratch_t s = scratch_of(l);
  layer_sum_t sum[LAYER_MAX_SUMS];
  int k = bn_sums(l, 0, backward, has_dx, sum);
  for (int i = 0; i < k; i++) {
    for (size_t c = 0; c < sum[i].count; c++) s.t0[c] = 0.0f;
    tp_allreduce(l->bn_sync, s.t0, sum[i].count);
  }
}

const layer_ops_t layer_batchnorm_ops = {"batchnorm", bn_setup, bn_init, bn_forward,
                                         bn_backward, NULL, bn_sums};
