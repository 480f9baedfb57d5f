/* Internal to src/nn: what the sequence layers share. A sample is T
 * positions of c features ({c, h = 1, w = T}, NHWC: [T, c] contiguous), so
 * n samples are n·T rows of c features and a position-wise product is one
 * GEMM over all of them. */
#ifndef DTRAIN_NN_SEQ_H
#define DTRAIN_NN_SEQ_H

#include <string.h>

#include "dtrain/nn.h"

/* Rows (positions) in n samples of shape s. */
static inline int seq_rows(shape_t s, int n) { return n * s.h * s.w; }

/* GPT-2's initialisation of its matrices and tables: N(0, 0.02). */
static inline void seq_init_normal(rng_t *rng, float *w, size_t len) {
  for (size_t i = 0; i < len; i++) w[i] = 0.02f * rng_normal(rng);
}

/* The [r0, r0 + nr) x [c0, c0 + nc) block of a [rows, cols] matrix drawn
 * as seq_init_normal draws the whole, in row-major order, into out [nr,
 * nc]: a tensor-parallel shard starts as its block of one worker's. */
static inline void seq_init_normal_block(rng_t *rng, size_t rows, size_t cols, size_t r0, size_t nr,
                                         size_t c0, size_t nc, float *out) {
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      float v = 0.02f * rng_normal(rng);
      if (r >= r0 && r < r0 + nr && c >= c0 && c < c0 + nc) out[(r - r0) * nc + (c - c0)] = v;
    }
}

/* db (= or += when add) the column sums of dout [rows, cols]. */
static inline void seq_bias_grad(const float *restrict dout, int rows, int cols, float *restrict db,
                                 int add) {
  if (!add)
    for (int j = 0; j < cols; j++) db[j] = 0.0f;
  for (int r = 0; r < rows; r++) {
    const float *d = dout + (size_t)r * cols;
    for (int j = 0; j < cols; j++) db[j] += d[j];
  }
}

/* out[r, :] += b for every row. */
static inline void seq_add_bias(float *restrict out, const float *restrict b, int rows, int cols) {
  for (int r = 0; r < rows; r++) {
    float *o = out + (size_t)r * cols;
    for (int j = 0; j < cols; j++) o[j] += b[j];
  }
}

/* dx = g, or dx += g where the layer adds its input gradient (dx_add). */
static inline void seq_pass_grad(float *restrict dx, const float *restrict g, size_t len, int add) {
  if (add)
    for (size_t i = 0; i < len; i++) dx[i] += g[i];
  else
    for (size_t i = 0; i < len; i++) dx[i] = g[i];
}

/* A sequence layer's input: {c, 1, T} with c > 0. */
static inline int seq_check_input(const layer_t *l) {
  shape_t s = l->in_shape;
  if (s.c <= 0 || s.h != 1 || s.w <= 0)
    return dt_error("%s: expects a sequence, shape {c, 1, T} (got %dx%dx%d): put it after an "
                    "embedding", layer_kind_name(l->spec.kind), s.c, s.h, s.w);
  return 0;
}
#endif
