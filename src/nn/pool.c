/* Max and average pooling over k×k windows with stride s, no padding.
 * NHWC keeps the channels of one pixel contiguous, so every inner loop runs
 * over channels. Max pooling keeps the argmax of each output (as int32 in
 * the float scratch) for backward. */
#include "dtrain/nn.h"

#include <limits.h>

static int pool_setup(layer_t *l, int max_batch, const char *name, int keep_argmax) {
  const layer_spec_t *s = &l->spec;
  if (s->kernel <= 0) return dt_error("%s: kernel must be > 0 (got %d)", name, s->kernel);
  if (s->stride <= 0) return dt_error("%s: stride must be > 0 (got %d)", name, s->stride);
  if (s->pad != 0)
    return dt_error("%s: pad=%d is not supported (pools take no padding)", name, s->pad);
  if (l->in_shape.c <= 0 || l->in_shape.h <= 0 || l->in_shape.w <= 0)
    return dt_error("%s: empty input shape %dx%dx%d", name, l->in_shape.h, l->in_shape.w,
                    l->in_shape.c);
  if (s->kernel > l->in_shape.h || s->kernel > l->in_shape.w)
    return dt_error("%s: kernel %d larger than input %dx%d", name, s->kernel, l->in_shape.h,
                    l->in_shape.w);
  if (keep_argmax && shape_size(l->in_shape) > INT_MAX)
    return dt_error("%s: input of %zu floats is too large", name, shape_size(l->in_shape));
  l->out_shape = (shape_t){.c = l->in_shape.c,
                           .h = (l->in_shape.h - s->kernel) / s->stride + 1,
                           .w = (l->in_shape.w - s->kernel) / s->stride + 1};
  l->nweight = l->param_len = l->buf_len = 0;
  l->scratch_len = keep_argmax ? (size_t)max_batch * shape_size(l->out_shape) : 0;
  return 0;
}

static int maxpool_setup(layer_t *l, int max_batch) {
  return pool_setup(l, max_batch, "maxpool", 1);
}

static int avgpool_setup(layer_t *l, int max_batch) {
  return pool_setup(l, max_batch, "avgpool", 0);
}

static void pool_init(layer_t *l, rng_t *rng) {}

/* The argmax of an output is kept as the offset of its window element
 * relative to the window's first input, (ky·W + kx)·C: the same for all
 * channels of one window element, so tracking it is a blend with a
 * constant, and backward adds the window base and the channel. Ties go to
 * the first maximum, as in PyTorch. */
static void maxpool_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  int W = l->in_shape.w, C = l->in_shape.c, OH = l->out_shape.h, OW = l->out_shape.w;
  int k = l->spec.kernel, s = l->spec.stride;
  size_t in_len = shape_size(l->in_shape), out_len = shape_size(l->out_shape);
  /* Only ever accessed as int32: the scratch holds no floats. */
  int32_t *arg = (int32_t *)l->scratch;
  for (int b = 0; b < n; b++) {
    const float *xb = x + (size_t)b * in_len;
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        size_t o = (size_t)b * out_len + ((size_t)oy * OW + ox) * C;
        float *restrict best = l->out + o;
        int32_t *restrict at = arg + o;
        const float *win = xb + ((size_t)oy * s * W + (size_t)ox * s) * C;
        for (int c = 0; c < C; c++) {
          best[c] = win[c];
          at[c] = 0;
        }
        for (int ky = 0; ky < k; ky++)
          for (int kx = ky == 0; kx < k; kx++) {
            int32_t rel = (ky * W + kx) * C;
            const float *restrict v = win + rel;
            for (int c = 0; c < C; c++) {
              /* Select with a mask, not a conditional store: gcc would
               * turn the latter into slow masked stores. */
              float cur = best[c], in = v[c];
              int32_t m = -(int32_t)(in > cur);
              best[c] = in > cur ? in : cur;
              at[c] = (at[c] & ~m) | (rel & m);
            }
          }
      }
  }
}

/* Windows that tile the input (stride = kernel, no input left over): each
 * input is in one window, so one pass writes every dx, the gradient where
 * the argmax is and zero elsewhere, with no zeroing pass before it. */
static int windows_tile(const layer_t *l) {
  int k = l->spec.kernel;
  return l->spec.stride == k && l->out_shape.h * k == l->in_shape.h &&
         l->out_shape.w * k == l->in_shape.w;
}

static void maxpool_backward_tiled(layer_t *l, float *dx, int n) {
  int W = l->in_shape.w, C = l->in_shape.c, OH = l->out_shape.h, OW = l->out_shape.w;
  int k = l->spec.kernel;
  size_t in_len = shape_size(l->in_shape), out_len = shape_size(l->out_shape);
  const int32_t *arg = (const int32_t *)l->scratch;
  for (int b = 0; b < n; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        size_t o = (size_t)b * out_len + ((size_t)oy * OW + ox) * C;
        const float *restrict d = l->dout + o;
        const int32_t *restrict at = arg + o;
        float *win = dx + (size_t)b * in_len + ((size_t)oy * k * W + (size_t)ox * k) * C;
        for (int ky = 0; ky < k; ky++)
          for (int kx = 0; kx < k; kx++) {
            int32_t rel = (ky * W + kx) * C;
            float *restrict v = win + rel;
            for (int c = 0; c < C; c++) v[c] = at[c] == rel ? d[c] : 0.0f;
          }
      }
}

static void maxpool_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  if (windows_tile(l)) {
    maxpool_backward_tiled(l, dx, n);
    return;
  }
  int W = l->in_shape.w, C = l->in_shape.c, OH = l->out_shape.h, OW = l->out_shape.w;
  int s = l->spec.stride;
  size_t in_len = shape_size(l->in_shape), out_len = shape_size(l->out_shape);
  const int32_t *arg = (const int32_t *)l->scratch;
  kern_zero((size_t)n * in_len, dx);
  for (int b = 0; b < n; b++) {
    float *dxb = dx + (size_t)b * in_len;
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        size_t o = (size_t)b * out_len + ((size_t)oy * OW + ox) * C;
        const float *d = l->dout + o;
        const int32_t *at = arg + o;
        float *win = dxb + ((size_t)oy * s * W + (size_t)ox * s) * C;
        for (int c = 0; c < C; c++) win[at[c] + c] += d[c];
      }
  }
}

static void avgpool_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  int W = l->in_shape.w, C = l->in_shape.c, OH = l->out_shape.h, OW = l->out_shape.w;
  int k = l->spec.kernel, s = l->spec.stride;
  size_t in_len = shape_size(l->in_shape), out_len = shape_size(l->out_shape);
  float scale = 1.0f / (float)(k * k);
  for (int b = 0; b < n; b++) {
    const float *xb = x + (size_t)b * in_len;
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        float *o = l->out + (size_t)b * out_len + ((size_t)oy * OW + ox) * C;
        for (int c = 0; c < C; c++) o[c] = 0.0f;
        for (int ky = 0; ky < k; ky++)
          for (int kx = 0; kx < k; kx++) {
            const float *v = xb + (((size_t)oy * s + ky) * W + (size_t)ox * s + kx) * C;
            for (int c = 0; c < C; c++) o[c] += v[c];
          }
        for (int c = 0; c < C; c++) o[c] *= scale;
      }
  }
}

static void avgpool_backward(layer_t *l, const float *x, float *dx, int n) {
  if (!dx) return;
  int W = l->in_shape.w, C = l->in_shape.c, OH = l->out_shape.h, OW = l->out_shape.w;
  int k = l->spec.kernel, s = l->spec.stride;
  size_t in_len = shape_size(l->in_shape), out_len = shape_size(l->out_shape);
  float scale = 1.0f / (float)(k * k);
  kern_zero((size_t)n * in_len, dx);
  for (int b = 0; b < n; b++) {
    float *dxb = dx + (size_t)b * in_len;
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++) {
        const float *d = l->dout + (size_t)b * out_len + ((size_t)oy * OW + ox) * C;
        for (int ky = 0; ky < k; ky++)
          for (int kx = 0; kx < k; kx++) {
            float *g = dxb + (((size_t)oy * s + ky) * W + (size_t)ox * s + kx) * C;
            for (int c = 0; c < C; c++) g[c] += scale * d[c];
          }
      }
  }
}

const layer_ops_t layer_maxpool_ops = {"maxpool", maxpool_setup, pool_init, maxpool_forward,
                                       maxpool_backward, NULL, NULL};
const layer_ops_t layer_avgpool_ops = {"avgpool", avgpool_setup, pool_init, avgpool_forward,
                                       avgpool_backward, NULL, NULL};
