/* The machine's cblas_sgemm roof: GFLOP/s of a large square product with
 * the given thread count. The training benchmark compares both trainers'
 * GFLOP/s against it. usage: sgemm_roof [threads] [n] */
#include <stdio.h>
#include <stdlib.h>

#include "dtrain/core.h"

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1, n = argc > 2 ? atoi(argv[2]) : 1024;
  kern_set_threads(threads);
  float *a = dt_alloc_floats((size_t)n * n), *b = dt_alloc_floats((size_t)n * n),
        *c = dt_alloc_floats((size_t)n * n);
  if (!a || !b || !c) return 1;
  rng_t r;
  rng_seed(&r, 1);
  for (size_t i = 0; i < (size_t)n * n; i++) a[i] = rng_uniform(&r), b[i] = rng_uniform(&r);
  kern_gemm(0, 0, n, n, n, 1, a, n, b, n, 0, c, n); /* warm-up */
  double best = 0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = dt_now();
    kern_gemm(0, 0, n, n, n, 1, a, n, b, n, 0, c, n);
    double gf = 2.0 * n * n * (double)n / (dt_now() - t0) / 1e9;
    if (gf > best) best = gf;
  }
  printf("{\"bench\":\"sgemm_roof\",\"threads\":%d,\"n\":%d,\"gflops\":%.1f}\n", threads, n, best);
  dt_free(a), dt_free(b), dt_free(c);
  return 0;
}
