/* BLAS-backed GEMM and simple element-wise kernels. The loops are plain so
 * that gcc -O3 vectorises them; reductions accumulate in double where the
 * result is compared (norms, dots). */
#include "dtrain/core.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void openblas_set_num_threads(int);

static int blas_threads = 1;

void kern_set_threads(int n) {
  blas_threads = n < 1 ? 1 : n;
  openblas_set_num_threads(blas_threads);
}

int kern_get_threads(void) { return blas_threads; }

void kern_gemm(int ta, int tb, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb,
               float beta, float *c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void kern_axpy(size_t n, float a, const float *restrict x, float *restrict y) {
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

void kern_scale(size_t n, float a, float *x) {
  for (size_t i = 0; i < n; i++) x[i] *= a;
}

void kern_add(size_t n, const float *restrict x, float *restrict y) {
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* Through a buffer on the stack, chunk by chunk: for a y that is one of
 * the later inputs, which summing in place would overwrite before its turn. */
static void sum_via_stack(size_t n, int k, const float *const *x, float *y) {
  enum { CHUNK = 512 };
  float acc[CHUNK];
  for (size_t i = 0; i < n; i += CHUNK) {
    size_t m = n - i < CHUNK ? n - i : CHUNK;
    memcpy(acc, x[0] + i, m * sizeof(float));
    for (int q = 1; q < k; q++) {
      const float *restrict xq = x[q] + i;
      for (size_t j = 0; j < m; j++) acc[j] += xq[j];
    }
    memcpy(y + i, acc, m * sizeof(float));
  }
}

/* In chunks that stay in L1, summed in y itself: the first two terms go
 * straight into it (a + b is b + a, bit for bit, so y may be either), the
 * rest are added in order. y may be one of the inputs (the same pointer,
 * not a partial overlap). In place, not through a stack buffer, where it
 * can be: with one, a sum of 512 KiB halves ran at half the speed here
 * (the buffer's stores and the inputs' loads collide in the low 12
 * address bits). */
void kern_sum(size_t n, int k, const float *const *x, float *y) {
  enum { CHUNK = 512 };
  int late = 0;
  for (int q = 2; q < k; q++) late |= x[q] == y;
  if (k < 2 || late) {
    sum_via_stack(n, k, x, y);
    return;
  }
  for (size_t i = 0; i < n; i += CHUNK) {
    size_t m = n - i < CHUNK ? n - i : CHUNK;
    float *restrict yc = y + i;
    if (x[0] == y || x[1] == y) {
      const float *restrict other = (x[0] == y ? x[1] : x[0]) + i;
      for (size_t j = 0; j < m; j++) yc[j] += other[j];
    } else {
      const float *restrict a = x[0] + i, *restrict b = x[1] + i;
      for (size_t j = 0; j < m; j++) yc[j] = a[j] + b[j];
    }
    for (int q = 2; q < k; q++) {
      const float *restrict xq = x[q] + i;
      for (size_t j = 0; j < m; j++) yc[j] += xq[j];
    }
  }
}

/* In chunks that stay in L1, summed into x[0] (its first term already)
 * and then written to the others: one pass over the data, where a sum and
 * then k-1 copies would read the sum back k-1 times. x[0] as the
 * accumulator, not a buffer on the stack: with one, this ran at half the
 * speed here (the stack buffer's stores and the inputs' loads collide in
 * the low 12 address bits). */
void kern_allsum(size_t n, int k, float *const *x) {
  enum { CHUNK = 512 };
  for (size_t i = 0; i < n; i += CHUNK) {
    size_t m = n - i < CHUNK ? n - i : CHUNK;
    float *restrict acc = x[0] + i;
    for (int q = 1; q < k; q++) {
      const float *restrict xq = x[q] + i;
      for (size_t j = 0; j < m; j++) acc[j] += xq[j];
    }
    for (int q = 1; q < k; q++) {
      float *restrict xq = x[q] + i;
      for (size_t j = 0; j < m; j++) xq[j] = acc[j];
    }
  }
}

void kern_copy(size_t n, const float *x, float *y) {
  if (n && x != y) memmove(y, x, n * sizeof(float));
}

void kern_zero(size_t n, float *x) { memset(x, 0, n * sizeof(float)); }

double kern_dot(size_t n, const float *x, const float *y) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)x[i] * y[i];
  return s;
}

double kern_sumsq(size_t n, const float *x) { return kern_dot(n, x, x); }

float kern_maxabs(size_t n, const float *x) {
  float m = 0;
  for (size_t i = 0; i < n; i++) {
    float a = fabsf(x[i]);
    m = a > m ? a : m;
  }
  return m;
}

int kern_all_finite(size_t n, const float *x) {
  /* x*0 is 0 for finite x and NaN for inf/NaN: one branch-free pass. */
  float acc = 0;
  for (size_t i = 0; i < n; i++) acc += x[i] * 0.0f;
  return acc == 0.0f;
}
