/* The GEMM model (Yan et al. 2015, who fit cuBLAS this way): a GEMM's
 * seconds as a linear model in log space,
 *
 *   ln t = c0 + c1 ln m + c2 ln n + c3 ln k,
 *
 * fitted by least squares to kern_gemm (the library every dense, linear
 * and convolution layer calls) timed here over a grid of shapes. It is the
 * other way to cost a layer than timing it (compute.c): `dtrain plan
 * --compute-model gemm` takes dense, linear and convolution layers'
 * passes from their GEMMs' fitted times (the other layers still timed),
 * and bench/plan_compute_models.py says which of the two predicts a
 * step's time better, and by how much. A convolution's im2col and its
 * adjoint are not GEMMs: the model leaves them out, which is part of what
 * the comparison measures. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf/perf.h"

#define REPS 3
static const int GRID[] = {8, 32, 128, 512, 2048};
#define NGRID ((int)(sizeof GRID / sizeof GRID[0]))

/* Solves the 4 x 4 system a x = b in place (Gaussian elimination with
 * partial pivoting); -1 when it is singular. */
static int solve4(double a[4][4], double b[4], double x[4]) {
  for (int c = 0; c < 4; c++) {
    int p = c;
    for (int r = c + 1; r < 4; r++)
      if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
    if (fabs(a[p][c]) < 1e-12) return -1;
    for (int k = 0; k < 4; k++) {
      double t = a[c][k];
      a[c][k] = a[p][k], a[p][k] = t;
    }
    double t = b[c];
    b[c] = b[p], b[p] = t;
    for (int r = c + 1; r < 4; r++) {
      double f = a[r][c] / a[c][c];
      for (int k = c; k < 4; k++) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (int c = 3; c >= 0; c--) {
    double s = b[c];
    for (int k = c + 1; k < 4; k++) s -= a[c][k] * x[k];
    x[c] = s / a[c][c];
  }
  return 0;
}

int perf_gemm_fit(const double *m, const double *n, const double *k, const double *sec, int npoints,
                  perf_gemm_fit_t *out) {
  double a[4][4] = {{0}}, b[4] = {0};
  for (int i = 0; i < npoints; i++) {
    if (!(m[i] > 0 && n[i] > 0 && k[i] > 0 && sec[i] > 0))
      return dt_error("gemm fit: point %d (%g x %g x %g, %g s) is not positive", i, m[i], n[i], k[i],
                      sec[i]);
    double v[4] = {1, log(m[i]), log(n[i]), log(k[i])}, y = log(sec[i]);
    for (int r = 0; r < 4; r++) {
      for (int c = 0; c < 4; c++) a[r][c] += v[r] * v[c];
      b[r] += v[r] * y;
    }
  }
  perf_gemm_fit_t f = {.points = npoints};
  if (npoints < 4 || solve4(a, b, f.c) != 0)
    return dt_error("gemm fit: %d points do not determine the model's 4 coefficients", npoints);
  for (int i = 0; i < npoints; i++) {
    double e = fabs(perf_gemm_sec(&f, m[i], n[i], k[i]) - sec[i]) / sec[i];
    if (e > f.max_error) f.max_error = e;
  }
  f.fitted = 1;
  *out = f;
  return 0;
}

double perf_gemm_sec(const perf_gemm_fit_t *f, double m, double n, double k) {
  return exp(f->c[0] + f->c[1] * log(m) + f->c[2] * log(n) + f->c[3] * log(k));
}

/* kern_gemm's least time of REPS on [m x k] x [k x n] after a warm-up. */
static double time_gemm(int m, int n, int k, float *a, float *b, float *c) {
  double best = INFINITY;
  for (int rep = 0; rep <= REPS; rep++) {
    double t0 = dt_now();
    kern_gemm(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
    double t = dt_now() - t0;
    if (rep > 0 && t < best) best = t;
  }
  return best;
}

int perf_gemm_fit_measure(int quick, perf_gemm_fit_t *out) {
  int g = quick ? NGRID - 1 : NGRID, big = GRID[g - 1];
  size_t cap = (size_t)big * big;
  float *a = dt_alloc_floats(cap), *b = dt_alloc_floats(cap), *c = dt_alloc_floats(cap);
  double *m = malloc(sizeof(double) * NGRID * NGRID * NGRID * 4);
  int rc = a && b && c && m ? 0 : dt_error("out of memory");
  double *n = m + NGRID * NGRID * NGRID, *k = n + NGRID * NGRID * NGRID, *sec = k + NGRID * NGRID * NGRID;
  int np = 0;
  if (rc == 0) {
    for (size_t i = 0; i < cap; i++) a[i] = b[i] = (float)(i % 7) * 0.125f - 0.375f;
    for (int x = 0; x < g; x++)
      for (int y = 0; y < g; y++)
        for (int z = 0; z < g; z++, np++) {
          m[np] = GRID[x], n[np] = GRID[y], k[np] = GRID[z];
          sec[np] = time_gemm(GRID[x], GRID[y], GRID[z], a, b, c);
        }
    rc = perf_gemm_fit(m, n, k, sec, np, out);
  }
  dt_free(a), dt_free(b), dt_free(c);
  free(m);
  return rc;
}

/* The GEMMs of layer l's pass on `samples`: forward one, backward two
 * (weights, input; the first layer's input gradient is not computed);
 * each as (m, n, k). Returns how many, 0 for a layer that is not a GEMM. */
static int layer_gemms(const layer_t *l, int samples, int backward, int first, double out[2][3]) {
  double rows, in, units;
  switch (l->spec.kind) {
  case LAYER_DENSE:
    rows = samples, in = (double)shape_size(l->in_shape), units = (double)shape_size(l->out_shape);
    break;
  case LAYER_LINEAR:
    rows = (double)samples * l->in_shape.h * l->in_shape.w, in = l->in_shape.c, units = l->out_shape.c;
    break;
  case LAYER_CONV2D: /* im2col: one GEMM over the batch's output positions */
    rows = (double)samples * l->out_shape.h * l->out_shape.w;
    in = (double)l->in_shape.c * l->spec.kernel * l->spec.kernel, units = l->out_shape.c;
    break;
  default:
    return 0;
  }
  if (!backward) {
    out[0][0] = rows, out[0][1] = units, out[0][2] = in;
    return 1;
  }
  out[0][0] = units, out[0][1] = in, out[0][2] = rows; /* dW = dYᵀ X */
  if (first) return 1;
  out[1][0] = rows, out[1][1] = in, out[1][2] = units; /* dX = dY W */
  return 2;
}

double perf_gemm_layer_sec(const perf_gemm_fit_t *f, const model_t *m, int i, int samples,
                           int backward) {
  double g[2][3];
  int n = layer_gemms(&m->layers[i], samples, backward, i == 0, g);
  if (n == 0 || !f->fitted) return -1;
  double t = 0;
  for (int j = 0; j < n; j++) t += perf_gemm_sec(f, g[j][0], g[j][1], g[j][2]);
  return t;
}

void perf_gemm_apply(const perf_gemm_fit_t *f, const model_t *m, perf_compute_t *p) {
  for (int q = 0; q < p->nsizes; q++)
    for (int i = 0; i < p->nlayers && i < m->nlayers; i++)
      for (int bwd = 0; bwd < 2; bwd++) {
        double t = perf_gemm_layer_sec(f, m, i, p->size[q], bwd);
        if (t >= 0) (bwd ? p->bwd : p->fwd)[q * p->nlayers + i] = t;
      }
}
