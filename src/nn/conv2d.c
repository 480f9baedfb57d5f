/* 2-D convolution as im2col + one GEMM for the whole batch.
 *
 * In NHWC a row of the column matrix (one output pixel) is kh runs of
 * kw·in_c floats, each contiguous in the input, so im2col is a few memcpy
 * per row. Columns [n·oh·ow, K] with K = kh·kw·in_c, weight [out_c, K]:
 *   forward   out[n·oh·ow, out_c] = cols · wᵀ     (this is NHWC output)
 *   backward  dw = doutᵀ · cols, db = column sums of dout,
 *             dcols = dout · w (into the same column buffer), col2im into dx.
 * The column buffer is the layer's scratch, sized for max_batch; backward
 * overwrites it with dcols, so each backward needs its own forward. A 1x1
 * kernel with stride 1 and no padding needs no columns: cols is x itself.
 *
 * Under --precision bf16 the columns are made in bf16: the input rounded
 * once (k·k times smaller than the columns it becomes) and im2col copying
 * 16-bit runs, read by both products that need them, the forward and the
 * weight gradient, where kern_gemm would round the fp32 columns twice. The
 * scratch holds them in its first half and the rounded input after them.
 * Backward likewise rounds the masked dout once, in the pass that masks it,
 * for the weight gradient and the input gradient; it lies past the fp32
 * columns' span. The input gradient then goes by oneDNN's backward-data
 * convolution (kern_conv_dx_bf16), which writes dx with no columns: on
 * lenet's second layer the dcols product and col2im moved 8 MB a step and
 * took 1.2 ms, where it takes 0.7 (measured on a Xeon with AMX). Where that
 * fails, the dcols product overwrites the columns' span while reading it.
 *
 * Split by tensor parallelism (nn.h, split_t) as a dense layer is: COLUMN
 * holds a block of the filters (output channels; the input whole) and sums
 * its input gradient over the group; ROW reads a shard of the input
 * channels, holds those channels of every filter, and sums its output over
 * the group before the bias and the activation. Pooling and activations
 * between the two run on the channel shard. */
#include "dtrain/nn.h"

#include <limits.h>
#include <math.h>
#include <string.h>

typedef struct {
  int h, w, c;        /* input */
  int oh, ow, oc;     /* output */
  int k, s, p;
  int kdim;           /* k·k·c: one column row */
} geom_t;

static geom_t geom(const layer_t *l) {
  geom_t g = {l->in_shape.h,   l->in_shape.w,  l->in_shape.c,  l->out_shape.h, l->out_shape.w,
              l->out_shape.c, l->spec.kernel, l->spec.stride, l->spec.pad,    0};
  g.kdim = g.k * g.k * g.c;
  return g;
}

static int is_pointwise(const geom_t *g) { return g->k == 1 && g->s == 1 && g->p == 0; }

static int conv_setup(layer_t *l, int max_batch) {
  const layer_spec_t *s = &l->spec;
  if (s->filters <= 0) return dt_error("conv2d: filters must be > 0 (got %d)", s->filters);
  if (s->kernel <= 0) return dt_error("conv2d: kernel must be > 0 (got %d)", s->kernel);
  if (s->stride <= 0) return dt_error("conv2d: stride must be > 0 (got %d)", s->stride);
  if (s->pad < 0) return dt_error("conv2d: pad must be >= 0 (got %d)", s->pad);
  if (l->in_shape.c <= 0 || l->in_shape.h <= 0 || l->in_shape.w <= 0)
    return dt_error("conv2d: empty input shape %dx%dx%d", l->in_shape.h, l->in_shape.w,
                    l->in_shape.c);
  int filters = s->filters, off = 0;
  if (l->in_full == 0) l->in_full = l->in_shape.c; /* a layer set up on its own: whole */
  if (s->split != SPLIT_NONE && !l->tp)
    return dt_error("conv2d: split by tensor parallelism but given no group");
  if (s->split == SPLIT_COLUMN) {
    if (filters < l->tp->size)
      return dt_error("conv2d: %d filter%s cannot be split over %d tensor-parallel ranks", filters,
                      filters == 1 ? "" : "s", l->tp->size);
    tp_block(s->filters, l->tp->size, l->tp->rank, &off, &filters);
  }
  if (s->split != SPLIT_ROW && l->in_full != l->in_shape.c)
    return dt_error("conv2d: reads a tensor-parallel shard but is not split by input channels");
  l->out_full = s->filters, l->out_off = off;
  int ph = l->in_shape.h + 2 * s->pad, pw = l->in_shape.w + 2 * s->pad;
  if (s->kernel > ph || s->kernel > pw)
    return dt_error("conv2d: kernel %d larger than padded input %dx%d", s->kernel, ph, pw);
  l->out_shape = (shape_t){.c = filters,
                           .h = (ph - s->kernel) / s->stride + 1,
                           .w = (pw - s->kernel) / s->stride + 1};
  geom_t g = geom(l);
  size_t rows = (size_t)max_batch * g.oh * g.ow;
  if (rows > INT_MAX || (size_t)g.kdim * g.oc > INT_MAX)
    return dt_error("conv2d: batch %d of %dx%d outputs is too large for one GEMM", max_batch,
                    g.oh, g.ow);
  l->nweight = (size_t)g.oc * g.kdim;
  l->param_len = l->nweight + (size_t)g.oc;
  l->buf_len = 0;
  /* fp32 columns, or bf16 columns and the bf16 input after them; under
   * bf16 also the bf16 dout past the fp32 columns */
  size_t cols = rows * g.kdim, in = (size_t)max_batch * g.h * g.w * g.c;
  l->scratch_len = is_pointwise(&g) ? 0 : cols > (cols + in + 1) / 2 ? cols : (cols + in + 1) / 2;
  size_t with_dout = cols + (rows * g.oc + 1) / 2;
  if (!is_pointwise(&g) && kern_bf16_active() && with_dout > l->scratch_len)
    l->scratch_len = with_dout;
  return 0;
}

/* PyTorch's nn.Conv2d: U(±1/√fan_in) with fan_in = in_c·kh·kw, bias likewise. */
static void conv_init(layer_t *l, rng_t *rng) {
  size_t kk = (size_t)l->spec.kernel * (size_t)l->spec.kernel, oc = (size_t)l->out_shape.c;
  float bound = 1.0f / sqrtf((float)(kk * (size_t)l->in_full));
  layer_uniform_block(rng, bound, (size_t)l->out_full, kk, (size_t)l->in_full, (size_t)l->out_off,
                      oc, (size_t)l->in_off, (size_t)l->in_shape.c, l->w);
  layer_uniform_block(rng, bound, (size_t)l->out_full, 1, 1, (size_t)l->out_off, oc, 0, 1, l->b);
}

/* The valid kernel columns [kx0, kx1) of output column ox: those whose
 * input column lies inside the image. */
static void valid_kx(const geom_t *g, int ox, int *kx0, int *kx1) {
  int ix0 = ox * g->s - g->p;
  *kx0 = ix0 < 0 ? -ix0 : 0;
  *kx1 = g->w - ix0 < g->k ? g->w - ix0 : g->k;
}

/* memcpy of a run of n bytes, inlined when short: the runs of a small
 * kernel over few channels (5 floats for a 5x5 kernel on one channel) are
 * too short for a library call to pay off, and so are lenet's 200- and
 * 400-byte runs (the call was 3% of a bf16 step). Fixed-size chunks, the
 * last overlapping. */
static inline void copy_run(char *restrict d, const char *restrict s, size_t n) {
  if (n > 512) {
    memcpy(d, s, n);
  } else if (n >= 64) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) memcpy(d + i, s + i, 64);
    if (i < n) memcpy(d + n - 64, s + n - 64, 64);
  } else if (n >= 32) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) memcpy(d + i, s + i, 32);
    if (i < n) memcpy(d + n - 32, s + n - 32, 32);
  } else if (n >= 16) {
    memcpy(d, s, 16);
    memcpy(d + n - 16, s + n - 16, 16);
  } else if (n >= 8) {
    memcpy(d, s, 8);
    memcpy(d + n - 8, s + n - 8, 8);
  } else {
    for (size_t i = 0; i < n; i++) d[i] = s[i];
  }
}

/* One column row per output pixel: k runs of k·c elements of esz bytes
 * (fp32 or bf16). Windows inside the image (all of them without padding)
 * take the fast path. */
static void im2col(const geom_t *g, const void *xv, size_t esz, int n, void *colsv) {
  const char *x = xv;
  char *cols = colsv;
  size_t run = (size_t)g->k * g->c * esz, line = (size_t)g->w * g->c * esz, px = g->c * esz;
  size_t rowb = (size_t)g->kdim * esz;
  for (int b = 0; b < n; b++) {
    const char *xb = x + (size_t)b * g->h * line;
    for (int oy = 0; oy < g->oh; oy++) {
      int iy0 = oy * g->s - g->p, rows_inside = iy0 >= 0 && iy0 + g->k <= g->h;
      char *row = cols + ((size_t)b * g->oh + oy) * g->ow * rowb;
      for (int ox = 0; ox < g->ow; ox++, row += rowb) {
        int kx0, kx1, ix0 = ox * g->s - g->p;
        valid_kx(g, ox, &kx0, &kx1);
        if (rows_inside && kx0 == 0 && kx1 == g->k) {
          const char *src = xb + (size_t)iy0 * line + (size_t)ix0 * px;
          for (int ky = 0; ky < g->k; ky++) copy_run(row + ky * run, src + ky * line, run);
          continue;
        }
        for (int ky = 0; ky < g->k; ky++) { /* zeros are all-zero bits in fp32 and bf16 */
          char *dst = row + ky * run;
          int iy = iy0 + ky;
          if (iy < 0 || iy >= g->h || kx0 >= kx1) {
            memset(dst, 0, run);
            continue;
          }
          memset(dst, 0, (size_t)kx0 * px);
          copy_run(dst + (size_t)kx0 * px, xb + (size_t)iy * line + (size_t)(ix0 + kx0) * px,
                   (size_t)(kx1 - kx0) * px);
          memset(dst + (size_t)kx1 * px, 0, (size_t)(g->k - kx1) * px);
        }
      }
    }
  }
}

static inline void add_run(float *restrict d, const float *restrict s, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] += s[i];
}

/* dx += scatter of dcols (dx zeroed by the caller): im2col's adjoint. */
static void col2im(const geom_t *g, const float *cols, int n, float *dx) {
  size_t run = (size_t)g->k * g->c, line = (size_t)g->w * g->c;
  for (int b = 0; b < n; b++) {
    float *xb = dx + (size_t)b * g->h * line;
    for (int oy = 0; oy < g->oh; oy++) {
      int iy0 = oy * g->s - g->p, rows_inside = iy0 >= 0 && iy0 + g->k <= g->h;
      const float *row = cols + ((size_t)b * g->oh + oy) * g->ow * g->kdim;
      for (int ox = 0; ox < g->ow; ox++, row += g->kdim) {
        int kx0, kx1, ix0 = ox * g->s - g->p;
        valid_kx(g, ox, &kx0, &kx1);
        if (rows_inside && kx0 == 0 && kx1 == g->k) {
          float *dst = xb + (size_t)iy0 * line + (size_t)ix0 * g->c;
          for (int ky = 0; ky < g->k; ky++) add_run(dst + ky * line, row + ky * run, run);
          continue;
        }
        for (int ky = 0; ky < g->k; ky++) {
          int iy = iy0 + ky;
          if (iy < 0 || iy >= g->h || kx0 >= kx1) continue;
          add_run(xb + (size_t)iy * line + (size_t)(ix0 + kx0) * g->c,
                  row + ky * run + (size_t)kx0 * g->c, (size_t)(kx1 - kx0) * g->c);
        }
      }
    }
  }
}

/* The bias/ReLU pass and the bias-gradient sums run over [rows, cols] with
 * few columns (one per filter), so a loop per row would be mostly loop
 * overhead. They work on blocks of R rows as one flat vector of up to
 * TILE floats instead, against the bias repeated R times (forward) or
 * into R partial sums (backward). */
enum { TILE = 256 };

static size_t rows_per_block(int cols) { return cols < TILE ? (size_t)(TILE / cols) : 1; }

static void bias_act(float *out, const float *b, size_t rows, int cols, int relu) {
  float tile[TILE];
  size_t per = rows_per_block(cols);
  const float *bias = b;
  if (per > 1) {
    for (size_t r = 0; r < per; r++) memcpy(tile + r * cols, b, (size_t)cols * sizeof(float));
    bias = tile;
  }
  for (size_t r0 = 0; r0 < rows; r0 += per) {
    size_t len = (rows - r0 < per ? rows - r0 : per) * (size_t)cols;
    float *o = out + r0 * cols;
    if (relu)
      for (size_t i = 0; i < len; i++) {
        float v = o[i] + bias[i];
        o[i] = v > 0.0f ? v : 0.0f;
      }
    else
      for (size_t i = 0; i < len; i++) o[i] += bias[i];
  }
}

/* db = column sums of dout (added to db when add), after masking dout
 * by out > 0 for a fused ReLU: one pass over dout, which also rounds the
 * masked dout into d16 when given (each block while it is in cache). */
static void mask_and_sum(float *dout, const float *out, int relu, size_t rows, int cols,
                         float *db, int add, uint16_t *d16) {
  float tile[TILE];
  size_t per = rows_per_block(cols);
  float *acc = per > 1 ? tile : db;
  size_t span = per * (size_t)cols;
  if (per > 1 || !add)
    for (size_t i = 0; i < span; i++) acc[i] = 0.0f;
  for (size_t r0 = 0; r0 < rows; r0 += per) {
    size_t len = (rows - r0 < per ? rows - r0 : per) * (size_t)cols;
    float *restrict d = dout + r0 * cols;
    if (relu) {
      const float *restrict o = out + r0 * cols;
      for (size_t i = 0; i < len; i++) {
        d[i] = o[i] > 0.0f ? d[i] : 0.0f;
        acc[i] += d[i];
      }
    } else {
      for (size_t i = 0; i < len; i++) acc[i] += d[i];
    }
    if (d16) kern_to_bf16(len, d, d16 + r0 * cols);
  }
  if (per > 1) {
    if (!add)
      for (int j = 0; j < cols; j++) db[j] = 0.0f;
    for (size_t r = 0; r < per; r++)
      for (int j = 0; j < cols; j++) db[j] += acc[r * cols + j];
  }
}

/* The forward product on bf16 columns (the header's bf16 paragraph). */
static int forward_bf16(layer_t *l, const geom_t *g, const float *x, int n, int rows) {
  uint16_t *cols = (uint16_t *)l->scratch, *x16 = cols + (size_t)rows * g->kdim;
  kern_to_bf16((size_t)n * g->h * g->w * g->c, x, x16);
  im2col(g, x16, sizeof *x16, n, cols);
  return kern_gemm_bf16_made(KERN_A_BF16, 0, 1, rows, g->oc, g->kdim, cols, g->kdim, l->w, g->kdim,
                             0.0f, l->out, g->oc);
}

/* Megatron's g, a ROW layer's output summed in forward, and f, a COLUMN
 * layer's input gradient summed in backward. */
static int conv_sums(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out) {
  if (!backward && l->spec.split == SPLIT_ROW) {
    out[0] = (layer_sum_t){.count = (size_t)n * shape_size(l->out_shape)};
    return 1;
  }
  if (backward && has_dx && l->spec.split == SPLIT_COLUMN) {
    out[0] = (layer_sum_t){.count = (size_t)n * shape_size(l->in_shape)};
    return 1;
  }
  return 0;
}

static void conv_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  geom_t g = geom(l);
  int rows = n * g.oh * g.ow;
  const float *cols = x;
  l->cols_bf16 = !is_pointwise(&g) && kern_bf16_active() && forward_bf16(l, &g, x, n, rows) == 0;
  if (!l->cols_bf16) {
    if (!is_pointwise(&g)) {
      if (kern_bf16_active()) kern_bf16_note_fallback();
      im2col(&g, x, sizeof *x, n, l->scratch);
      cols = l->scratch;
    }
    kern_gemm(0, 1, rows, g.oc, g.kdim, 1.0f, cols, g.kdim, l->w, g.kdim, 0.0f, l->out, g.oc);
  }
  layer_sum_t sum;
  if (conv_sums(l, n, 0, 0, &sum)) tp_allreduce(l->tp, l->out, sum.count); /* Megatron's g */
  bias_act(l->out, l->b, (size_t)rows, g.oc, l->spec.act == ACT_RELU);
}

/* The bf16 dout's place in the scratch (the header's bf16 paragraph), or
 * NULL where the forward made no bf16 columns or the scratch was sized
 * before bf16 was set. */
static uint16_t *dout_bf16(const layer_t *l, const geom_t *g, int rows) {
  size_t at = (size_t)rows * g->kdim;
  if (!l->cols_bf16 || at + ((size_t)rows * g->oc + 1) / 2 > l->scratch_len) return NULL;
  return (uint16_t *)(l->scratch + at);
}

/* dx from the masked dout that conv_backward left (and its bf16 rounding,
 * d16, when conv_backward made one). */
static void input_gradient(layer_t *l, float *dx, int n, const uint16_t *d16) {
  geom_t g = geom(l);
  int rows = n * g.oh * g.ow;
  kern_conv_t kc = {n, g.h, g.w, g.c, g.oh, g.ow, g.oc, g.k, g.s, g.p};
  if (is_pointwise(&g)) {
    kern_gemm(0, 0, rows, g.kdim, g.oc, 1.0f, l->dout, g.oc, l->w, g.kdim, 0.0f, dx, g.kdim);
  } else if (d16 && kern_conv_dx_bf16(&kc, d16, l->w, dx) == 0) {
    l->cols_bf16 = 0; /* the weight gradient has read them */
  } else { /* the columns are no longer needed: dcols overwrites them */
    if (!d16 || kern_gemm_bf16_made(KERN_A_BF16, 0, 0, rows, g.kdim, g.oc, d16, g.oc, l->w, g.kdim,
                                    0.0f, l->scratch, g.kdim) != 0) {
      if (d16) kern_bf16_note_fallback();
      kern_gemm(0, 0, rows, g.kdim, g.oc, 1.0f, l->dout, g.oc, l->w, g.kdim, 0.0f, l->scratch,
                g.kdim);
    }
    kern_zero((size_t)n * g.h * g.w * g.c, dx);
    col2im(&g, l->scratch, n, dx);
    l->cols_bf16 = 0; /* the scratch holds fp32 dcols now */
  }
  layer_sum_t sum;
  if (conv_sums(l, n, 1, 1, &sum)) tp_allreduce(l->tp, dx, sum.count); /* f */
}

static void conv_backward_input(layer_t *l, float *dx, int n) { input_gradient(l, dx, n, NULL); }

/* dw from the masked dout and the columns: bf16 where the forward left
 * them so (and dout too when d16), else fp32 (made again from x if a bf16
 * product failed). */
static void weight_gradient(layer_t *l, const geom_t *g, const float *x, int n, int rows,
                            const uint16_t *d16) {
  if (l->cols_bf16) {
    int made = KERN_B_BF16 | (d16 ? KERN_A_BF16 : 0);
    if (kern_gemm_bf16_made(made, 1, 0, g->oc, g->kdim, rows, d16 ? (const void *)d16 : l->dout,
                            g->oc, l->scratch, g->kdim, l->grad_beta, l->dw, g->kdim) == 0)
      return;
    kern_bf16_note_fallback();
    im2col(g, x, sizeof *x, n, l->scratch);
  }
  const float *cols = is_pointwise(g) ? x : l->scratch;
  kern_gemm(1, 0, g->oc, g->kdim, rows, 1.0f, l->dout, g->oc, cols, g->kdim, l->grad_beta, l->dw,
            g->kdim);
}

static void conv_backward(layer_t *l, const float *x, float *dx, int n) {
  geom_t g = geom(l);
  int rows = n * g.oh * g.ow;
  uint16_t *d16 = dout_bf16(l, &g, rows);
  mask_and_sum(l->dout, l->out, l->spec.act == ACT_RELU, (size_t)rows, g.oc, l->db,
               l->grad_beta != 0.0f, d16);
  weight_gradient(l, &g, x, n, rows, d16);
  if (dx) input_gradient(l, dx, n, d16);
}

const layer_ops_t layer_conv2d_ops = {"conv2d", conv_setup, conv_init, conv_forward,
                                      conv_backward, conv_backward_input, conv_sums};
