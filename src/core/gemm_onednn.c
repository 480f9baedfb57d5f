/* fp32 products through oneDNN's sgemm, the library kern_gemm uses by
 * default where dtrain was built with it (libdnnl-dev).
 *
 * Why not OpenBLAS alone: OpenBLAS picks its kernels by the CPU's model,
 * so a CPU newer than the library (Sapphire Rapids under Debian's 0.3.21)
 * runs an old kernel unless OPENBLAS_CORETYPE is set by hand; oneDNN picks
 * its JIT kernels by the CPU's instruction sets. It was also faster here
 * (AMD EPYC, AVX-512, one core): lenet 12-14% and mlp 0-11% more
 * samples/s than OpenBLAS's Haswell kernels, most on the products of 64
 * rows that a batch makes (docs/BENCHMARKS.md). DTRAIN_GEMM=openblas
 * keeps OpenBLAS; the start-up check against the reference GEMM covers
 * whichever runs (src/cli/kernels.c).
 *
 * oneDNN threads with OpenMP: each calling thread (a rank of --comm local
 * is one) gets --threads of them, set on its first product and whenever
 * --threads changed since. */
#include "dtrain/core.h"

#ifdef DTRAIN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>

void omp_set_num_threads(int);

int kern_onednn_available(void) { return 1; }

int kern_sgemm_onednn(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc) {
  static _Thread_local int omp_threads;
  if (omp_threads != kern_get_threads()) {
    omp_threads = kern_get_threads();
    omp_set_num_threads(omp_threads);
  }
  return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) ==
                 dnnl_success ? 0 : -1;
}

/* The widest instruction set oneDNN's kernels use here. */
void kern_onednn_describe(char *buf, size_t cap) {
  static const struct {
    dnnl_cpu_isa_t isa;
    const char *name;
  } names[] = {{dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
               {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
               {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
               {dnnl_cpu_isa_avx512_core, "avx512_core"},
               {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
               {dnnl_cpu_isa_avx2, "avx2"},
               {dnnl_cpu_isa_avx, "avx"},
               {dnnl_cpu_isa_sse41, "sse41"}};
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const char *name = "any";
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (isa == names[i].isa) {
      name = names[i].name;
      break;
    }
  snprintf(buf, cap, "onednn %s", name);
}
#else
int kern_onednn_available(void) { return 0; }
int kern_sgemm_onednn(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc) {
  return -1;
}
void kern_onednn_describe(char *buf, size_t cap) {
  if (cap) buf[0] = 0;
}
#endif
