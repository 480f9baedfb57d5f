/* The reference GEMM: C = alpha op(A) op(B) + beta C, row-major, in plain
 * loops that say what the product is. It is the oracle that the library's
 * kernels are checked against at start-up (kern_gemm_check) and the path
 * every layer test also runs on (kern_use_reference). The loop orders keep
 * the innermost loop on contiguous memory, so that it is not needlessly
 * slow as a fallback; no blocking, no threads. */
#include "dtrain/core.h"

static inline float elem(const float *x, int ld, int trans, int r, int c) {
  return trans ? x[(size_t)c * ld + r] : x[(size_t)r * ld + c];
}

static void scale_c(int m, int n, float beta, float *c, int ldc) {
  for (int i = 0; i < m; i++) {
    float *ci = c + (size_t)i * ldc;
    for (int j = 0; j < n; j++) ci[j] = beta == 0 ? 0 : beta * ci[j]; /* beta 0: C is not read */
  }
}

void kern_gemm_ref(int ta, int tb, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc) {
  scale_c(m, n, beta, c, ldc);
  if (!tb) { /* rows of B are contiguous: c[i,:] += alpha a[i,p] b[p,:] */
    for (int i = 0; i < m; i++) {
      float *restrict ci = c + (size_t)i * ldc;
      for (int p = 0; p < k; p++) {
        float s = alpha * elem(a, lda, ta, i, p);
        const float *restrict bp = b + (size_t)p * ldb;
        for (int j = 0; j < n; j++) ci[j] += s * bp[j];
      }
    }
    return;
  }
  for (int i = 0; i < m; i++) /* columns of op(B) are rows of B: dot products */
    for (int j = 0; j < n; j++) {
      const float *bj = b + (size_t)j * ldb;
      float s = 0;
      for (int p = 0; p < k; p++) s += elem(a, lda, ta, i, p) * bj[p];
      c[(size_t)i * ldc + j] += alpha * s;
    }
}
