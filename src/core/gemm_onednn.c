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
 * --threads changed since.
 *
 * Signals wait for the product. oneDNN's generated f32 GEMM kernels
 * (jit_avx_gemm_f32, jit_avx512_common_gemm_f32; up to oneDNN 3.11,
 * uxlfoundation/oneDNN#4845, fixed upstream by #4855) point rsp at their
 * workspace on the heap while they run, so the kernel writes the frame of
 * a signal taken there (registers and FPU/AVX state, 1-3 KiB) below that
 * rsp: over the heap chunks before the workspace. dtrain launch's lost-rank
 * SIGUSR1, sent to a rank's thread of --comm local, landed there and the
 * whole run died later in free() ("invalid next size"); so would a
 * SIGINT or SIGTERM that the kernel gives to a rank's thread. The
 * asynchronous signals are blocked on the calling thread for the product
 * and taken as it returns (pthread_sigmask runs a pending one's handler
 * before it returns); the faults a product itself raises stay unblocked.
 * OpenMP threads that a product starts inherit the blocked mask, so the
 * kernel never picks them for a signal sent to the whole process. Two
 * system calls a product: 0.7-0.8 us the pair on this 2-core VM. */
#include "dtrain/core.h"

#ifdef DTRAIN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>

void omp_set_num_threads(int);

int kern_onednn_available(void) { return 1; }

/* Blocks every signal but those a fault raises; *old gets the mask to restore. */
static void hold_signals(sigset_t *old) {
  static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
  sigset_t set;
  sigfillset(&set);
  for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) sigdelset(&set, faults[i]);
  pthread_sigmask(SIG_BLOCK, &set, old);
}

int kern_sgemm_onednn(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc) {
  static _Thread_local int omp_threads;
  if (omp_threads != kern_get_threads()) {
    omp_threads = kern_get_threads();
    omp_set_num_threads(omp_threads);
  }
  sigset_t old;
  hold_signals(&old);
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                beta, c, ldc);
  pthread_sigmask(SIG_SETMASK, &old, NULL); /* a signal held meanwhile is taken here */
  return st == dnnl_success ? 0 : -1;
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
