/* LSTM with torch.nn.LSTM's semantics and weight layout (batch_first),
 * `layers` stacked, over n samples of T positions:
 *   gates = x_t · W_ihᵀ + b_ih + h_{t-1} · W_hhᵀ + b_hh     [4H], i|f|g|o
 *   i, f, o = σ(·), g = tanh(·);  c_t = f·c_{t-1} + i·g;  h_t = o·tanh(c_t)
 * h_0 = c_0 = 0; the output is every h_t of the last layer, [n, T, H].
 * Parameters of layer k, in order (PyTorch's names): weight_ih_lk [4H, in],
 * weight_hh_lk [4H, H], bias_ih_lk [4H], bias_hh_lk [4H]; in = C for layer
 * 0, H above; U(±1/√H) as PyTorch initialises them.
 *
 * Forward: the input products of all n·T rows are one GEMM, then each step
 * adds h_{t-1} · W_hhᵀ for the n samples (one GEMM, strided rows) and
 * applies the gates in place (the activated gates and c_t are kept for the
 * backward). Backward is full backpropagation through time: from t = T-1
 * down, the pre-activation gradients dG_t and the carried dh, dc; then
 * W_ih's gradient and the input gradient are one GEMM each over all rows,
 * W_hh's one GEMM a sample (rows t ≥ 1 against h_{t-1}). */
#include <math.h>

#include "seq.h"

typedef struct {
  int n, T, H, in, L;
  size_t R;        /* rows the scratch is laid out for: max_batch · T */
} lstm_dims_t;

/* Scratch a sample: per layer gates (4H), c (H), h (H) for T positions;
 * then dG (4H·T), two inter-layer gradients (H·T each), dh and dc (H). */
static size_t per_sample(int T, int H, int L) {
  return (size_t)L * 6 * H * T + (size_t)4 * H * T + (size_t)2 * H * T + (size_t)2 * H;
}

static lstm_dims_t dims_of(const layer_t *l, int n) {
  lstm_dims_t d = {n, l->in_shape.w, l->spec.units, l->in_shape.c, l->spec.num_layers, 0};
  d.R = (size_t)(l->scratch_len / per_sample(d.T, d.H, d.L)) * d.T;
  return d;
}

/* Layer k's parameters and gradients. */
typedef struct { float *w_ih, *w_hh, *b_ih, *b_hh; } lstm_params_t;

static lstm_params_t params_of(float *base, lstm_dims_t d, int k) {
  size_t H4 = 4 * (size_t)d.H, first = H4 * d.in + H4 * d.H + 2 * H4, other = H4 * d.H * 2 + 2 * H4;
  float *p = base + (k == 0 ? 0 : first + (size_t)(k - 1) * other);
  int in = k == 0 ? d.in : d.H;
  lstm_params_t r = {p, p + H4 * in, 0, 0};
  r.b_ih = r.w_hh + H4 * d.H;
  r.b_hh = r.b_ih + H4;
  return r;
}

/* Layer k's gates [R, 4H], cells [R, H] and outputs [R, H] (the last
 * layer's outputs are l->out). */
static float *gates_of(const layer_t *l, lstm_dims_t d, int k) { return l->scratch + (size_t)k * 6 * d.H * d.R; }
static float *cells_of(const layer_t *l, lstm_dims_t d, int k) { return gates_of(l, d, k) + 4 * (size_t)d.H * d.R; }
static float *hidden_of(const layer_t *l, lstm_dims_t d, int k) {
  return k == d.L - 1 ? l->out : cells_of(l, d, k) + (size_t)d.H * d.R;
}

static int lstm_setup(layer_t *l, int max_batch) {
  DT_TRY(seq_check_input(l));
  int H = l->spec.units, L = l->spec.num_layers, C = l->in_shape.c, T = l->in_shape.w;
  if (H <= 0 || L <= 0) return dt_error("lstm: needs units=H and layers=N (got %d, %d)", H, L);
  l->out_shape = (shape_t){H, 1, T};
  size_t H4 = 4 * (size_t)H;
  l->param_len = H4 * C + H4 * H + 2 * H4 + (size_t)(L - 1) * (2 * H4 * H + 2 * H4);
  l->nweight = l->param_len;
  l->buf_len = 0;
  l->scratch_len = (size_t)max_batch * per_sample(T, H, L);
  return 0;
}

static void lstm_init(layer_t *l, rng_t *rng) {
  float bound = 1.0f / sqrtf((float)l->spec.units);
  for (size_t i = 0; i < l->param_len; i++) l->w[i] = (2.0f * rng_uniform(rng) - 1.0f) * bound;
}

static float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

static void lstm_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  lstm_dims_t d = dims_of(l, n);
  int H = d.H, H4 = 4 * H, T = d.T, rows = n * T;
  for (int k = 0; k < d.L; k++) {
    lstm_params_t p = params_of(l->w, d, k);
    int in = k == 0 ? d.in : H;
    const float *xk = k == 0 ? x : hidden_of(l, d, k - 1);
    float *G = gates_of(l, d, k), *Cc = cells_of(l, d, k), *Hh = hidden_of(l, d, k);
    kern_gemm(0, 1, rows, H4, in, 1.0f, xk, in, p.w_ih, in, 0.0f, G, H4);
    for (int r = 0; r < rows; r++)
      for (int j = 0; j < H4; j++) G[(size_t)r * H4 + j] += p.b_ih[j] + p.b_hh[j];
    for (int t = 0; t < T; t++) {
      if (t > 0) /* rows (b, t) of G += h(b, t-1) · W_hhᵀ */
        kern_gemm(0, 1, n, H4, H, 1.0f, Hh + (size_t)(t - 1) * H, T * H, p.w_hh, H, 1.0f,
                  G + (size_t)t * H4, T * H4);
      for (int b = 0; b < n; b++) {
        size_t r = (size_t)b * T + t;
        float *g = G + r * H4, *c = Cc + r * H, *h = Hh + r * H;
        const float *cp = t > 0 ? Cc + (r - 1) * H : NULL;
        for (int j = 0; j < H; j++) {
          float gi = sigm(g[j]), gf = sigm(g[H + j]), gg = tanhf(g[2 * H + j]), go = sigm(g[3 * H + j]);
          g[j] = gi, g[H + j] = gf, g[2 * H + j] = gg, g[3 * H + j] = go;
          c[j] = (cp ? gf * cp[j] : 0.0f) + gi * gg;
          h[j] = go * tanhf(c[j]);
        }
      }
    }
  }
}

/* One layer's backpropagation through time: dY [rows, H] the gradient of
 * its outputs; writes its parameter gradients and, if dx, its input's. */
static void layer_backward(layer_t *l, lstm_dims_t d, int k, const float *xk, const float *dY,
                           float *dx, int dx_add) {
  int n = d.n, H = d.H, H4 = 4 * H, T = d.T, rows = n * T, in = k == 0 ? d.in : H;
  lstm_params_t p = params_of(l->w, d, k), g = params_of(l->dw, d, k);
  const float *G = gates_of(l, d, k), *Cc = cells_of(l, d, k), *Hh = hidden_of(l, d, k);
  float *dG = l->scratch + (size_t)d.L * 6 * H * d.R;
  float *dh = dG + (size_t)H4 * d.R + 2 * (size_t)H * d.R, *dc = dh + (size_t)H * (d.R / T);
  kern_zero((size_t)n * H, dh);
  kern_zero((size_t)n * H, dc);
  for (int t = T - 1; t >= 0; t--) {
    for (int b = 0; b < n; b++) {
      size_t r = (size_t)b * T + t;
      const float *a = G + r * H4, *c = Cc + r * H, *cp = t > 0 ? Cc + (r - 1) * H : NULL;
      const float *dy = dY + r * H;
      float *dg = dG + r * H4, *dhb = dh + (size_t)b * H, *dcb = dc + (size_t)b * H;
      for (int j = 0; j < H; j++) {
        float gi = a[j], gf = a[H + j], gg = a[2 * H + j], go = a[3 * H + j];
        float tc = tanhf(c[j]), dhj = dy[j] + dhb[j];
        float dcj = dhj * go * (1.0f - tc * tc) + dcb[j];
        dg[j] = dcj * gg * gi * (1.0f - gi);
        dg[H + j] = cp ? dcj * cp[j] * gf * (1.0f - gf) : 0.0f;
        dg[2 * H + j] = dcj * gi * (1.0f - gg * gg);
        dg[3 * H + j] = dhj * tc * go * (1.0f - go);
        dcb[j] = dcj * gf;
      }
    }
    if (t > 0) /* dh for step t-1 = dG_t · W_hh */
      kern_gemm(0, 0, n, H, H4, 1.0f, dG + (size_t)t * H4, T * H4, p.w_hh, H, 0.0f, dh, H);
  }
  seq_bias_grad(dG, rows, H4, g.b_ih, 0);
  memcpy(g.b_hh, g.b_ih, (size_t)H4 * sizeof(float));
  kern_gemm(1, 0, H4, in, rows, 1.0f, dG, H4, xk, in, 0.0f, g.w_ih, in);
  kern_zero((size_t)H4 * H, g.w_hh);
  for (int b = 0; b < n && T > 1; b++) /* rows t >= 1 against h_{t-1}, sample by sample */
    kern_gemm(1, 0, H4, H, T - 1, 1.0f, dG + ((size_t)b * T + 1) * H4, H4, Hh + (size_t)b * T * H, H,
              1.0f, g.w_hh, H);
  if (dx) kern_gemm(0, 0, rows, in, H4, 1.0f, dG, H4, p.w_ih, in, dx_add ? 1.0f : 0.0f, dx, in);
}

static void lstm_backward(layer_t *l, const float *x, float *dx, int n) {
  lstm_dims_t d = dims_of(l, n);
  size_t HR = (size_t)d.H * d.R;
  float *dG = l->scratch + (size_t)d.L * 6 * HR, *dyA = dG + 4 * HR, *dyB = dyA + HR;
  const float *dY = l->dout;
  for (int k = d.L - 1; k >= 0; k--) {
    float *below = k > 0 ? ((d.L - 1 - k) % 2 ? dyB : dyA) : dx;
    layer_backward(l, d, k, k == 0 ? x : hidden_of(l, d, k - 1), dY, below, k == 0 && l->dx_add);
    dY = below;
  }
}

const layer_ops_t layer_lstm_ops = {"lstm", lstm_setup, lstm_init, lstm_forward, lstm_backward, NULL, NULL};
