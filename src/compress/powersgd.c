/* PowerSGD (Vogels et al. 2019): each weight matrix M (rows x cols; a
 * convolution's [out, kh kw in]) of the worker's contribution is replaced
 * by a rank-R approximation found by one step of power iteration, warm-
 * started from the previous step's Q:
 *   M += e                      (error feedback, the memory)
 *   P = M Q;        allreduce P (sum: linear, so sum_w M_w Q = M_sum Q)
 *   P = orthonormal columns of P (Gram-Schmidt)
 *   Q = M^T P;      allreduce Q
 *   M_sum ~= P Q^T; e = M - P Q^T / N (N ranks: as the paper's e = M - the
 *   mean's approximation, in the units of one rank's share of the sum);
 *   Q kept for the next step.
 * A matrix gains only when (rows + cols) R < rows cols; the others, and
 * biases, go dense with the P factors in the first allreduce (PyTorch's
 * hook does the same with the tensors too small to gain). Bytes: two
 * allreduces, of sum (rows R) + dense and of sum (cols R) floats
 * (powersgd_counts, which a step's description reads), with the
 * configured algorithm (ring: 2 (P - 1)/P 4 x floats each). Q starts as the
 * same normal random matrix on every rank (seeded by the matrix's offset),
 * so the first P sum is meaningful; from then on Q is the summed one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

int powersgd_init(compressor_t *c) {
  if (!(c->q = dt_alloc_floats(c->n + 1)) || !(c->q_ready = dt_alloc_floats(c->n + 1))) return -1;
  return 0;
}

int powersgd_rank(const codec_spec_t *s, const compress_matrix_t *m) {
  int r = (int)s->param;
  if (m->rows < 2 || m->cols < 2 || (m->rows + m->cols) * (size_t)r >= m->rows * m->cols) return 0;
  return r;
}

/* Gram-Schmidt on the r columns of p (rows x r, row-major), each
 * projection done twice ("twice is enough", Giraud et al. 2005): when P is
 * rank-deficient (a low-rank gradient) a column is rounding noise after the
 * first pass, and only the second makes it orthogonal to the others. */
void powersgd_orthonormalize(float *p, size_t rows, int r) {
  for (int j = 0; j < r; j++) {
    for (int pass = 0; pass < 2; pass++)
      for (int k = 0; k < j; k++) {
        double d = 0;
        for (size_t i = 0; i < rows; i++) d += (double)p[i * r + k] * p[i * r + j];
        for (size_t i = 0; i < rows; i++) p[i * r + j] -= (float)d * p[i * r + k];
      }
    double sq = 0;
    for (size_t i = 0; i < rows; i++) sq += (double)p[i * r + j] * p[i * r + j];
    float inv = (float)(1.0 / (sqrt(sq) + 1e-8));
    for (size_t i = 0; i < rows; i++) p[i * r + j] *= inv;
  }
}

/* The ranges of buf [off, off + len) of the arena that go dense (not in a
 * compressed matrix), relative to buf, in order; mats are in arena order.
 * At most nmats + 1 ranges. */

static int dense_ranges(const codec_spec_t *s, const compress_matrix_t *mats, int nmats,
                        size_t off, size_t len, range_t *out) {
  int n = 0;
  size_t at = off;
  for (int i = 0; i < nmats; i++) {
    if (!powersgd_rank(s, &mats[i])) continue;
    size_t lo = mats[i].off, hi = lo + mats[i].rows * mats[i].cols;
    if (lo > at) out[n++] = (range_t){at - off, lo - off};
    at = hi;
  }
  if (off + len > at) out[n++] = (range_t){at - off, len};
  return n;
}

void powersgd_counts(const codec_spec_t *s, const compress_matrix_t *mats, int nmats, size_t off,
                     size_t len, size_t *first, size_t *second) {
  range_t dense[nmats + 1];
  int ndense = dense_ranges(s, mats, nmats, off, len, dense);
  *first = *second = 0;
  for (int i = 0; i < nmats; i++) {
    size_t r = (size_t)powersgd_rank(s, &mats[i]);
    *first += mats[i].rows * r;
    *second += mats[i].cols * r;
  }
  for (int i = 0; i < ndense; i++) *first += dense[i].hi - dense[i].lo;
}

/* Q of a matrix on its first step: N(0, 1), the same on every rank. */
static float *q_of(compressor_t *c, const compress_matrix_t *m, int r) {
  float *q = c->q + m->off;
  if (c->q_ready[m->off] != 0) return q;
  c->q_ready[m->off] = 1;
  rng_t g;
  rng_seed(&g, rng_derive(c->cfg.seed ^ 0x706f776572736764ull, m->off, 0));
  for (size_t i = 0; i < m->cols * (size_t)r; i++) q[i] = rng_normal(&g);
  return q;
}

int powersgd_allreduce(compressor_t *c, coll_ctx_t *ctx, float *buf, size_t off, size_t len,
                       const compress_matrix_t *mats, int nmats) {
  if (c->nranks == 1) return 0;
  DT_TRY(compressor_grow_factors(c, 2 * len));
  float *v = buf;
  if (c->mem.residual) ef_compensate(&c->mem, buf, off, len), v = c->mem.residual + off;
  float *f = c->factors;
  size_t np = 0;
  double t0 = dt_now();
  for (int i = 0; i < nmats; i++) {
    int r = powersgd_rank(&c->cfg.codec, &mats[i]);
    if (!r) continue;
    const float *m = v + (mats[i].off - off);
    float *q = q_of(c, &mats[i], r);
    kern_gemm(0, 0, (int)mats[i].rows, r, (int)mats[i].cols, 1, m, (int)mats[i].cols, q, r, 0,
              f + np, r);
    np += mats[i].rows * (size_t)r;
  }
  range_t dense[nmats + 1];
  int ndense = dense_ranges(&c->cfg.codec, mats, nmats, off, len, dense);
  size_t nd = 0;
  for (int i = 0; i < ndense; i++) {
    memcpy(f + np + nd, v + dense[i].lo, (dense[i].hi - dense[i].lo) * sizeof(float));
    nd += dense[i].hi - dense[i].lo;
  }
  c->stats.encode_sec += dt_now() - t0;
  DT_TRY(allreduce(ctx, c->cfg.algo, f, np + nd));
  t0 = dt_now();
  float *fq = f + np + nd;
  size_t pp = 0, nq = 0;
  for (int i = 0; i < nmats; i++) {
    int r = powersgd_rank(&c->cfg.codec, &mats[i]);
    if (!r) continue;
    powersgd_orthonormalize(f + pp, mats[i].rows, r);
    kern_gemm(1, 0, (int)mats[i].cols, r, (int)mats[i].rows, 1, v + (mats[i].off - off),
              (int)mats[i].cols, f + pp, r, 0, fq + nq, r);
    pp += mats[i].rows * (size_t)r, nq += mats[i].cols * (size_t)r;
  }
  c->stats.encode_sec += dt_now() - t0;
  DT_TRY(allreduce(ctx, c->cfg.algo, fq, nq));
  t0 = dt_now();
  pp = 0, nq = 0;
  for (int i = 0; i < nmats; i++) {
    int r = powersgd_rank(&c->cfg.codec, &mats[i]);
    if (!r) continue;
    float *out = buf + (mats[i].off - off);
    kern_gemm(0, 1, (int)mats[i].rows, (int)mats[i].cols, r, 1, f + pp, r, fq + nq, r, 0, out,
              (int)mats[i].cols);
    memcpy(c->q + mats[i].off, fq + nq, mats[i].cols * (size_t)r * sizeof(float));
    pp += mats[i].rows * (size_t)r, nq += mats[i].cols * (size_t)r;
  }
  /* e = M - P Q^T in the units of one rank's share: a rank contributes
   * its gradient over the global batch, the approximation is of the sum */
  float share = 1.0f / (float)c->nranks;
  if (c->mem.residual) /* the dense values are overwritten below: their memory is 0 */
    for (size_t k = 0; k < len; k++) v[k] -= share * buf[k];
  nd = 0;
  for (int i = 0; i < ndense; i++) {
    size_t m = dense[i].hi - dense[i].lo;
    memcpy(buf + dense[i].lo, f + np + nd, m * sizeof(float));
    if (c->mem.residual) memset(v + dense[i].lo, 0, m * sizeof(float));
    nd += m;
  }
  c->stats.decode_sec += dt_now() - t0;
  return 0;
}
