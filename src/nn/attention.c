/* Causal multi-head self-attention (GPT-2's block attention), on n samples
 * of T positions and c = heads·hs features:
 *   qkv = x · Wqkvᵀ + bqkv            [n·T, 3c]  (q | k | v, head h at h·hs)
 *   P_h = softmax(q_h k_hᵀ / √hs), masked to j ≤ t   [T, T] per sample, head
 *   y_h = P_h v_h                     [n·T, c]
 *   out = y · Wprojᵀ + bproj          [n·T, c]
 * Parameters in order: qkv.weight [3c, c], qkv.bias [3c], proj.weight
 * [c, c], proj.bias [c] (nanoGPT's c_attn and c_proj). Scratch: qkv, P, y
 * (the forward's, for the backward), dqkv and one [T, T] of score
 * gradients; the backward overwrites y with its gradient once proj.weight's
 * gradient has read it. Every product is one sgemm with strides into qkv,
 * no copies; the masked scores above the diagonal are computed and
 * dropped (the products stay whole GEMMs). Under --precision bf16 the
 * 1/√hs scale is a pass of its own over the scores (and their gradient),
 * since the bf16 products take alpha 1: every product is then bf16. */
#include <math.h>

#include "seq.h"

typedef struct {
  int rows, T, C, H, hs;
  float *qkv, *att, *y, *dqkv, *dp;
} att_views_t;

/* Scratch floats a sample: qkv, y, dqkv (7c a position) and P. */
static size_t per_sample(int T, int C, int H) { return (size_t)T * 7 * C + (size_t)H * T * T; }

/* The scratch's parts; the batch they are laid out for is the one setup
 * sized it for (a stage's micro-batch copies keep the model's size). */
static att_views_t views(const layer_t *l, int n) {
  att_views_t v;
  v.T = l->in_shape.w, v.C = l->in_shape.c, v.H = l->spec.heads, v.hs = v.C / v.H;
  v.rows = n * v.T;
  size_t max_batch = (l->scratch_len - (size_t)v.T * v.T) / per_sample(v.T, v.C, v.H);
  size_t R = (size_t)max_batch * v.T, C = (size_t)v.C;
  v.qkv = l->scratch;
  v.y = v.qkv + R * 3 * C;
  v.dqkv = v.y + R * C;
  v.att = v.dqkv + R * 3 * C;
  v.dp = v.att + (size_t)max_batch * v.H * v.T * v.T;
  return v;
}

static int attention_setup(layer_t *l, int max_batch) {
  DT_TRY(seq_check_input(l));
  int C = l->in_shape.c, H = l->spec.heads, T = l->in_shape.w;
  if (H <= 0 || C % H != 0)
    return dt_error("attention: heads=%d does not divide the width %d: use a divisor of %d", H, C, C);
  l->out_shape = l->in_shape;
  l->nweight = (size_t)3 * C * C;
  l->param_len = l->nweight + 3 * (size_t)C + (size_t)C * C + (size_t)C;
  l->buf_len = 0;
  l->scratch_len = (size_t)max_batch * per_sample(T, C, H) + (size_t)T * T;
  return 0;
}

static void attention_init(layer_t *l, rng_t *rng) {
  size_t C = (size_t)l->in_shape.c;
  float *w = l->w;
  seq_init_normal(rng, w, 3 * C * C);
  kern_zero(3 * C, w + 3 * C * C);
  seq_init_normal(rng, w + 3 * C * C + 3 * C, C * C);
  kern_zero(C, w + 4 * C * C + 3 * C);
}

/* Row t of scores s [T, T]: softmax over j ≤ t, zeros after. */
static void causal_softmax(float *s, int T) {
  for (int t = 0; t < T; t++) {
    float *r = s + (size_t)t * T, m = r[0], sum = 0.0f;
    for (int j = 1; j <= t; j++) m = r[j] > m ? r[j] : m;
    for (int j = 0; j <= t; j++) sum += r[j] = expf(r[j] - m);
    float inv = 1.0f / sum;
    for (int j = 0; j <= t; j++) r[j] *= inv;
    for (int j = t + 1; j < T; j++) r[j] = 0.0f;
  }
}

static void attention_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  att_views_t v = views(l, n);
  int C = v.C, T = v.T, hs = v.hs, C3 = 3 * C;
  const float *wq = l->w, *bq = wq + (size_t)C3 * C, *wp = bq + C3, *bp = wp + (size_t)C * C;
  float scale = 1.0f / sqrtf((float)hs);
  int bf16 = kern_bf16_active();
  kern_gemm(0, 1, v.rows, C3, C, 1.0f, x, C, wq, C, 0.0f, v.qkv, C3);
  seq_add_bias(v.qkv, bq, v.rows, C3);
  for (int b = 0; b < n; b++)
    for (int h = 0; h < v.H; h++) {
      const float *q = v.qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *val = q + 2 * C;
      float *p = v.att + ((size_t)b * v.H + h) * T * T;
      if (bf16) { /* bf16 products take alpha 1: the scale after */
        kern_gemm(0, 1, T, T, hs, 1.0f, q, C3, k, C3, 0.0f, p, T);
        kern_scale((size_t)T * T, scale, p);
      } else {
        kern_gemm(0, 1, T, T, hs, scale, q, C3, k, C3, 0.0f, p, T);
      }
      causal_softmax(p, T);
      kern_gemm(0, 0, T, hs, T, 1.0f, p, T, val, C3, 0.0f, v.y + (size_t)b * T * C + h * hs, C);
    }
  kern_gemm(0, 1, v.rows, C, C, 1.0f, v.y, C, wp, C, 0.0f, l->out, C);
  seq_add_bias(l->out, bp, v.rows, C);
}

/* dS = P ⊙ (dP − Σ_j P·dP) row by row, over j ≤ t (P is 0 beyond). */
static void softmax_backward(const float *p, float *dp, int T) {
  for (int t = 0; t < T; t++) {
    const float *pr = p + (size_t)t * T;
    float *d = dp + (size_t)t * T, dot = 0.0f;
    for (int j = 0; j <= t; j++) dot += pr[j] * d[j];
    for (int j = 0; j <= t; j++) d[j] = pr[j] * (d[j] - dot);
    for (int j = t + 1; j < T; j++) d[j] = 0.0f;
  }
}

static void attention_backward(layer_t *l, const float *x, float *dx, int n) {
  att_views_t v = views(l, n);
  int C = v.C, T = v.T, hs = v.hs, C3 = 3 * C;
  const float *wq = l->w, *wp = wq + (size_t)C3 * C + C3;
  float *dwq = l->dw, *dbq = dwq + (size_t)C3 * C, *dwp = dbq + C3, *dbp = dwp + (size_t)C * C;
  float beta = l->grad_beta, scale = 1.0f / sqrtf((float)hs);
  float sa = kern_bf16_active() ? 1.0f : scale; /* dQ, dK's alpha: scale, or 1 on a scaled dS */
  int bf16 = sa != scale;
  seq_bias_grad(l->dout, v.rows, C, dbp, beta != 0.0f);
  kern_gemm(1, 0, C, C, v.rows, 1.0f, l->dout, C, v.y, C, beta, dwp, C);
  float *dy = v.y; /* y is read: its room takes its gradient */
  kern_gemm(0, 0, v.rows, C, C, 1.0f, l->dout, C, wp, C, 0.0f, dy, C);
  for (int b = 0; b < n; b++)
    for (int h = 0; h < v.H; h++) {
      size_t o = (size_t)b * T * C3 + h * hs;
      const float *q = v.qkv + o, *k = q + C, *val = q + 2 * C;
      float *dq = v.dqkv + o, *dk = dq + C, *dv = dq + 2 * C;
      const float *p = v.att + ((size_t)b * v.H + h) * T * T, *dyh = dy + (size_t)b * T * C + h * hs;
      kern_gemm(0, 1, T, T, hs, 1.0f, dyh, C, val, C3, 0.0f, v.dp, T);  /* dP = dY Vᵀ */
      kern_gemm(1, 0, T, hs, T, 1.0f, p, T, dyh, C, 0.0f, dv, C3);      /* dV = Pᵀ dY */
      softmax_backward(p, v.dp, T);
      if (bf16) kern_scale((size_t)T * T, scale, v.dp); /* bf16 products take alpha 1 */
      kern_gemm(0, 0, T, hs, T, sa, v.dp, T, k, C3, 0.0f, dq, C3);   /* dQ = dS K */
      kern_gemm(1, 0, T, hs, T, sa, v.dp, T, q, C3, 0.0f, dk, C3);   /* dK = dSᵀ Q */
    }
  seq_bias_grad(v.dqkv, v.rows, C3, dbq, beta != 0.0f);
  kern_gemm(1, 0, C3, C, v.rows, 1.0f, v.dqkv, C3, x, C, beta, dwq, C);
  if (dx) kern_gemm(0, 0, v.rows, C, C3, 1.0f, v.dqkv, C3, wq, C, l->dx_add ? 1.0f : 0.0f, dx, C);
}

const layer_ops_t layer_attention_ops = {"attention", attention_setup, attention_init,
                                         attention_forward, attention_backward, NULL, NULL};
