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
 * gradient has read it. Every product is an sgemm with strides into qkv,
 * no copies. The causal mask is kept in the products too: positions go in
 * blocks of ATT_BLOCK, and the scores of row block i are one product over
 * key blocks 0..i only (S, P·V, dP, dQ by row blocks; dV, dK by column
 * blocks, rows from the block down), so of T = 128 a 5/8 of the full
 * products is made; scores above the diagonal within a diagonal block are
 * made, then written 0 (nothing reads P or dS right of a row's block).
 * Under --precision bf16 the 1/√hs scale is a pass of its own over the
 * scores (and their gradient), since the bf16 products take alpha 1: every
 * product is then bf16.
 *
 * Split by tensor parallelism (split COLUMN, Megatron's attention): tp rank
 * r holds the heads [h0, h0 + H/tp): their columns of q, k and v in the
 * fused projection (rows of qkv.weight and qkv.bias taken from each of the
 * three parts), and those input columns of proj.weight (its rows split);
 * proj.bias stays whole. The forward sums the projection's partial output
 * over the group before adding the bias (g), the backward sums the partial
 * input gradient (f): one sum each way. */
#include <math.h>

#include "seq.h"
#include "vec_math.h"

/* Positions a block of the causal products. gpt's (T 128, head size 64)
 * six products of a sample and head, forward and backward, on one AMD EPYC
 * core under shared load (oneDNN): 131 µs whole, 107 in blocks of 64, 105
 * of 32, 120 of 16 (smaller products lose more to the calls than the mask
 * saves). */
enum { ATT_BLOCK = 32 };

typedef struct {
  int rows, T, C, H, hs, Cl, Hl; /* Cl, Hl: this rank's width and heads (C, H unsplit) */
  float *qkv, *att, *y, *dqkv, *dp, *dx;
} att_views_t;

/* This rank's heads [*h0, *h0 + *nh) (all of them unsplit). */
static void my_heads(const layer_t *l, int *h0, int *nh) {
  *h0 = 0, *nh = l->spec.heads;
  if (l->spec.split == SPLIT_COLUMN) tp_block(l->spec.heads, l->tp->size, l->tp->rank, h0, nh);
}

/* Scratch floats a sample: qkv, y, dqkv (7 Cl a position), P, and under
 * a split the partial input gradient (C a position). */
static size_t per_sample(int T, int C, int Cl, int Hl) {
  return (size_t)T * 7 * Cl + (size_t)Hl * T * T + (Cl != C ? (size_t)T * C : 0);
}

/* The scratch's parts; the batch they are laid out for is the one setup
 * sized it for (a stage's micro-batch copies keep the model's size). */
static att_views_t views(const layer_t *l, int n) {
  att_views_t v;
  int h0;
  v.T = l->in_shape.w, v.C = l->in_shape.c, v.H = l->spec.heads, v.hs = v.C / v.H;
  my_heads(l, &h0, &v.Hl);
  v.Cl = v.Hl * v.hs;
  v.rows = n * v.T;
  size_t max_batch = (l->scratch_len - (size_t)v.T * v.T) / per_sample(v.T, v.C, v.Cl, v.Hl);
  size_t R = (size_t)max_batch * v.T, C = (size_t)v.Cl;
  v.qkv = l->scratch;
  v.y = v.qkv + R * 3 * C;
  v.dqkv = v.y + R * C;
  v.att = v.dqkv + R * 3 * C;
  v.dx = v.att + (size_t)max_batch * v.Hl * v.T * v.T;
  v.dp = v.dx + (v.Cl != v.C ? R * (size_t)v.C : 0);
  return v;
}

static int attention_setup(layer_t *l, int max_batch) {
  DT_TRY(seq_check_input(l));
  int C = l->in_shape.c, H = l->spec.heads, T = l->in_shape.w;
  if (H <= 0 || C % H != 0)
    return dt_error("attention: heads=%d does not divide the width %d: use a divisor of %d", H, C, C);
  if (l->spec.split != SPLIT_NONE && (!l->tp || l->spec.split != SPLIT_COLUMN))
    return dt_error("attention: splits by heads only, over a tensor-parallel group");
  if (l->spec.split == SPLIT_COLUMN && H % l->tp->size != 0)
    return dt_error("attention: heads=%d cannot be split over %d tensor-parallel ranks", H, l->tp->size);
  int h0, Hl;
  my_heads(l, &h0, &Hl);
  size_t Cl = (size_t)Hl * (C / H);
  l->out_shape = l->in_shape;
  l->nweight = 3 * Cl * C;
  l->param_len = l->nweight + 3 * Cl + (size_t)C * Cl + (size_t)C;
  l->buf_len = 0;
  l->scratch_len = (size_t)max_batch * per_sample(T, C, (int)Cl, Hl) + (size_t)T * T;
  return 0;
}

/* One worker's values drawn in its order, this rank's heads kept: of
 * qkv.weight's three parts [c, c] rows c0.. c0 + Cl of each, of
 * proj.weight [c, c] those columns. */
static void attention_init(layer_t *l, rng_t *rng) {
  int h0, Hl;
  my_heads(l, &h0, &Hl);
  size_t C = (size_t)l->in_shape.c, hs = C / (size_t)l->spec.heads, Cl = (size_t)Hl * hs;
  size_t c0 = (size_t)h0 * hs;
  float *w = l->w, *bq = w + 3 * Cl * C, *wp = bq + 3 * Cl, *bp = wp + C * Cl;
  for (int part = 0; part < 3; part++)
    seq_init_normal_block(rng, C, C, c0, Cl, 0, C, w + (size_t)part * Cl * C);
  kern_zero(3 * Cl, bq);
  seq_init_normal_block(rng, C, C, 0, C, c0, Cl, wp);
  kern_zero(C, bp);
}

/* Megatron's g (the projection's partial output, forward) and f (the
 * partial input gradient, backward), each [n·T, c]. */
static int attention_sums(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out) {
  if (l->spec.split != SPLIT_COLUMN || (backward && !has_dx)) return 0;
  out[0] = (layer_sum_t){.count = (size_t)seq_rows(l->in_shape, n) * (size_t)l->in_shape.c};
  return 1;
}

/* Rows t0 .. t0 + rows of scores s (row stride T), each a softmax over
 * j ≤ t, zeros after it up to w (the block's end: what the products read). */
static void causal_softmax(float *s, int t0, int rows, int w, int T) {
  for (int t = t0; t < t0 + rows; t++) {
    float *r = s + (size_t)(t - t0) * T;
    float inv = 1.0f / vec_exp_sum(r, vec_max(r, t + 1), t + 1);
    for (int j = 0; j <= t; j++) r[j] *= inv;
    for (int j = t + 1; j < w; j++) r[j] = 0.0f;
  }
}

/* Columns [0, w) of rows of a matrix with row stride ld, times a. */
static void scale_rows(float *x, int rows, int w, int ld, float a) {
  for (int r = 0; r < rows; r++) kern_scale((size_t)w, a, x + (size_t)r * ld);
}

/* One sample's head h: P = softmax(scale·q kᵀ) masked, y = P v, by row
 * blocks. */
static void head_forward(const att_views_t *v, const float *q, float *p, float *y, float scale,
                         int bf16) {
  int T = v->T, hs = v->hs, C3 = 3 * v->Cl;
  const float *k = q + v->Cl, *val = q + 2 * v->Cl;
  for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
    int rows = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK, w = t0 + rows;
    float *pt = p + (size_t)t0 * T;
    if (bf16) { /* bf16 products take alpha 1: the scale after */
      kern_gemm(0, 1, rows, w, hs, 1.0f, q + (size_t)t0 * C3, C3, k, C3, 0.0f, pt, T);
      scale_rows(pt, rows, w, T, scale);
    } else {
      kern_gemm(0, 1, rows, w, hs, scale, q + (size_t)t0 * C3, C3, k, C3, 0.0f, pt, T);
    }
    causal_softmax(pt, t0, rows, w, T);
    kern_gemm(0, 0, rows, hs, w, 1.0f, pt, T, val, C3, 0.0f, y + (size_t)t0 * v->Cl, v->Cl);
  }
}

static void attention_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  (void)train, (void)rng;
  att_views_t v = views(l, n);
  int C = v.C, Cl = v.Cl, T = v.T, hs = v.hs, C3 = 3 * Cl;
  const float *wq = l->w, *bq = wq + (size_t)C3 * C, *wp = bq + C3, *bp = wp + (size_t)C * Cl;
  float scale = 1.0f / sqrtf((float)hs);
  int bf16 = kern_bf16_active();
  kern_gemm(0, 1, v.rows, C3, C, 1.0f, x, C, wq, C, 0.0f, v.qkv, C3);
  seq_add_bias(v.qkv, bq, v.rows, C3);
  for (int b = 0; b < n; b++)
    for (int h = 0; h < v.Hl; h++) {
      const float *q = v.qkv + (size_t)b * T * C3 + h * hs;
      head_forward(&v, q, v.att + ((size_t)b * v.Hl + h) * T * T, v.y + (size_t)b * T * Cl + h * hs,
                   scale, bf16);
    }
  kern_gemm(0, 1, v.rows, C, Cl, 1.0f, v.y, Cl, wp, Cl, 0.0f, l->out, C);
  layer_sum_t g;
  if (attention_sums(l, n, 0, 0, &g)) tp_allreduce(l->tp, l->out, g.count);
  seq_add_bias(l->out, bp, v.rows, C);
}

/* dS = P ⊙ (dP − Σ_j P·dP) for rows t0 .. t0 + rows (row stride T), over
 * j ≤ t (P is 0 beyond), zeros after it up to w. */
static void softmax_backward(const float *p, float *dp, int t0, int rows, int w, int T) {
  for (int t = t0; t < t0 + rows; t++) {
    const float *pr = p + (size_t)(t - t0) * T;
    float *d = dp + (size_t)(t - t0) * T, dot = vec_dot(pr, d, t + 1);
    for (int j = 0; j <= t; j++) d[j] = pr[j] * (d[j] - dot);
    for (int j = t + 1; j < w; j++) d[j] = 0.0f;
  }
}

/* One sample's head: dq, dk, dv from dy and the forward's P, through dS
 * (the [T, T] scratch ds): dP, dS and dQ by row blocks, then dV and dK by
 * column blocks, each over the rows from its block down. sa: dQ and dK's
 * alpha (the scale, or 1 where dS is scaled in a pass: bf16). */
static void head_backward(const att_views_t *v, const float *q, const float *p, const float *dy,
                          float *dq, float *ds, float scale, float sa) {
  int T = v->T, hs = v->hs, C3 = 3 * v->Cl, Cl = v->Cl;
  const float *k = q + Cl, *val = q + 2 * Cl;
  float *dk = dq + Cl, *dv = dq + 2 * Cl;
  for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
    int rows = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK, w = t0 + rows;
    size_t o = (size_t)t0 * T;
    kern_gemm(0, 1, rows, w, hs, 1.0f, dy + (size_t)t0 * Cl, Cl, val, C3, 0.0f, ds + o, T); /* dP = dY Vᵀ */
    softmax_backward(p + o, ds + o, t0, rows, w, T);
    if (sa != scale) scale_rows(ds + o, rows, w, T, scale); /* bf16 products take alpha 1 */
    kern_gemm(0, 0, rows, hs, w, sa, ds + o, T, k, C3, 0.0f, dq + (size_t)t0 * C3, C3); /* dQ = dS K */
  }
  for (int j0 = 0; j0 < T; j0 += ATT_BLOCK) {
    int cols = T - j0 < ATT_BLOCK ? T - j0 : ATT_BLOCK;
    size_t o = (size_t)j0 * T + j0;
    kern_gemm(1, 0, cols, hs, T - j0, 1.0f, p + o, T, dy + (size_t)j0 * Cl, Cl, 0.0f,
              dv + (size_t)j0 * C3, C3); /* dV = Pᵀ dY */
    kern_gemm(1, 0, cols, hs, T - j0, sa, ds + o, T, q + (size_t)j0 * C3, C3, 0.0f,
              dk + (size_t)j0 * C3, C3); /* dK = dSᵀ Q */
  }
}

static void attention_backward(layer_t *l, const float *x, float *dx, int n) {
  att_views_t v = views(l, n);
  int C = v.C, Cl = v.Cl, T = v.T, hs = v.hs, C3 = 3 * Cl;
  const float *wq = l->w, *wp = wq + (size_t)C3 * C + C3;
  float *dwq = l->dw, *dbq = dwq + (size_t)C3 * C, *dwp = dbq + C3, *dbp = dwp + (size_t)C * Cl;
  float beta = l->grad_beta, scale = 1.0f / sqrtf((float)hs);
  float sa = kern_bf16_active() ? 1.0f : scale; /* dQ, dK's alpha: scale, or 1 on a scaled dS */
  seq_bias_grad(l->dout, v.rows, C, dbp, beta != 0.0f);
  kern_gemm(1, 0, C, Cl, v.rows, 1.0f, l->dout, C, v.y, Cl, beta, dwp, Cl);
  float *dy = v.y; /* y is read: its room takes its gradient */
  kern_gemm(0, 0, v.rows, Cl, C, 1.0f, l->dout, C, wp, Cl, 0.0f, dy, Cl);
  for (int b = 0; b < n; b++)
    for (int h = 0; h < v.Hl; h++) {
      size_t o = (size_t)b * T * C3 + h * hs;
      head_backward(&v, v.qkv + o, v.att + ((size_t)b * v.Hl + h) * T * T,
                    dy + (size_t)b * T * Cl + h * hs, v.dqkv + o, v.dp, scale, sa);
    }
  seq_bias_grad(v.dqkv, v.rows, C3, dbq, beta != 0.0f);
  kern_gemm(1, 0, C3, C, v.rows, 1.0f, v.dqkv, C3, x, C, beta, dwq, C);
  if (!dx) return;
  layer_sum_t f;
  if (!attention_sums(l, n, 1, 1, &f)) {
    kern_gemm(0, 0, v.rows, C, C3, 1.0f, v.dqkv, C3, wq, C, l->dx_add ? 1.0f : 0.0f, dx, C);
    return;
  }
  /* this rank's heads' part of the input gradient, summed, then given */
  kern_gemm(0, 0, v.rows, C, C3, 1.0f, v.dqkv, C3, wq, C, 0.0f, v.dx, C);
  tp_allreduce(l->tp, v.dx, f.count);
  seq_pass_grad(dx, v.dx, f.count, l->dx_add);
}

const layer_ops_t layer_attention_ops = {"attention", attention_setup, attention_init,
                                         attention_forward, attention_backward, NULL,
                                         attention_sums};
