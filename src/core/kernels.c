/* BLAS-backed GEMM and simple element-wise kernels. The loops are plain so
 * that gcc -O3 vectorises them; reductions accumulate in double where the
 * result is compared (norms, dots). */
#include "dtrain/core.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

void openblas_set_num_threads(int);

static int blas_threads = 1;

void kern_set_threads(int n) {
  blas_threads = n < 1 ? 1 : n;
  openblas_set_num_threads(blas_threads);
}

int kern_get_threads(void) { return blas_threads; }

static int use_reference, use_bf16;
static gemm_lib_t gemm_lib = GEMM_OPENBLAS;
static atomic_long bf16_fallbacks;
/* kern_gemm's products under bf16: made in bf16, and left to fp32 (alpha
 * or beta outside what the bf16 path takes, or a fallback) */
static atomic_long bf16_made, bf16_fp32;

void kern_use_reference(int on) { use_reference = on; }
void kern_set_gemm_lib(gemm_lib_t lib) { gemm_lib = lib; }
gemm_lib_t kern_gemm_lib(void) { return gemm_lib; }
int kern_using_reference(void) { return use_reference; }
/* One product made here, on the thread that sets it (before any rank's
 * thread starts), and its state dropped: oneDNN builds its process-wide
 * state (the primitive cache) on first use, which threads racing to do it
 * first would leave to chance (ThreadSanitizer reports it). */
void kern_set_bf16(int on) {
  use_bf16 = on;
  if (!on || !kern_bf16_available()) return;
  float a[4] = {1, 2, 3, 4}, c[4];
  if (kern_gemm_bf16(0, 0, 2, 2, 2, a, 2, a, 2, 0.0f, c, 2) != 0) kern_bf16_note_fallback();
  kern_bf16_release();
}
int kern_using_bf16(void) { return use_bf16; }
int kern_bf16_active(void) { return use_bf16 && !use_reference; }
long kern_bf16_fallbacks(void) { return atomic_load(&bf16_fallbacks); }
void kern_bf16_note_fallback(void) { atomic_fetch_add(&bf16_fallbacks, 1); }
void kern_bf16_products(long *bf16, long *fp32) {
  *bf16 = atomic_load(&bf16_made), *fp32 = atomic_load(&bf16_fp32);
}

void kern_gemm(int ta, int tb, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb,
               float beta, float *c, int ldc) {
  if (m == 0 || n == 0) return;
  if (use_reference) {
    kern_gemm_ref(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (use_bf16 && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && k > 0) {
    if (kern_gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc) == 0) {
      atomic_fetch_add(&bf16_made, 1);
      return;
    }
    kern_bf16_note_fallback();
  }
  if (use_bf16) atomic_fetch_add(&bf16_fp32, 1);
  if (gemm_lib == GEMM_ONEDNN &&
      kern_sgemm_onednn(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0)
    return;
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

/* The sums below go chunk by chunk, each chunk small enough to stay in L1
 * between the passes over it. */
enum { SUM_CHUNK = 512 };

/* Through a buffer on the stack: for a y that is one of the later inputs,
 * which summing in place would overwrite before its turn. */
static void sum_via_stack(size_t n, int k, const float *const *x, float *y) {
  float acc[SUM_CHUNK];
  for (size_t i = 0; i < n; i += SUM_CHUNK) {
    size_t m = n - i < SUM_CHUNK ? n - i : SUM_CHUNK;
    memcpy(acc, x[0] + i, m * sizeof(float));
    for (int q = 1; q < k; q++) {
      const float *restrict xq = x[q] + i;
      for (size_t j = 0; j < m; j++) acc[j] += xq[j];
    }
    memcpy(y + i, acc, m * sizeof(float));
  }
}

/* Elements [i, i+m) of x[0] + ... + x[k-1] (k >= 2) into y: the first two
 * terms straight into it (a + b is b + a, bit for bit, so y may be
 * either), the rest added in order. */
static void sum_chunk_in_place(size_t i, size_t m, int k, const float *const *x, float *y) {
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

/* Summed in y itself where it can be: y may be one of the inputs (the same
 * pointer, not a partial overlap). In place, not through a stack buffer:
 * with one, a sum of 512 KiB halves ran at half the speed here (the
 * buffer's stores and the inputs' loads collide in the low 12 address
 * bits). */
void kern_sum(size_t n, int k, const float *const *x, float *y) {
  int late = 0;
  for (int q = 2; q < k; q++) late |= x[q] == y;
  if (k < 2 || late) {
    sum_via_stack(n, k, x, y);
    return;
  }
  for (size_t i = 0; i < n; i += SUM_CHUNK)
    sum_chunk_in_place(i, n - i < SUM_CHUNK ? n - i : SUM_CHUNK, k, x, y);
}

/* Each chunk summed into x[0] and then written to the others while it is
 * in L1: one pass over the data, where a sum and then k-1 copies would
 * read the sum back k-1 times. */
void kern_allsum(size_t n, int k, float *const *x) {
  if (k < 2) return;
  for (size_t i = 0; i < n; i += SUM_CHUNK) {
    size_t m = n - i < SUM_CHUNK ? n - i : SUM_CHUNK;
    sum_chunk_in_place(i, m, k, (const float *const *)x, x[0]);
    const float *restrict sum = x[0] + i;
    for (int q = 1; q < k; q++) { /* a loop, not memcpy: glibc's rep movsb for 2 KiB into the
                                   * other core's lines ran ~1.5x slower here */
      float *restrict xq = x[q] + i;
      for (size_t j = 0; j < m; j++) xq[j] = sum[j];
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
