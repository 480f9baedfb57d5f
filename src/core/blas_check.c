/* Which OpenBLAS kernels run, against what the CPU can do, and whether
 * their results are to be trusted.
 *
 * OpenBLAS picks its kernels by the CPU's model (a DYNAMIC_ARCH build, as
 * Debian's, at library load), so a CPU newer than the library falls back
 * to an old kernel: OpenBLAS 0.3.21 on a Sapphire Rapids Xeon ran sgemm at
 * 30 GFLOP/s with its fallback, 150 with OPENBLAS_CORETYPE=Cooperlake.
 * kern_blas_info names the kernels in use and the best ones for this CPU's
 * features; the CLI decides what to do (src/cli/kernels.c). Whatever runs,
 * kern_gemm_check compares it with the reference GEMM first: some OpenBLAS
 * builds compute wrong results with newer kernels on some CPUs. */
#include "dtrain/core.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

char *openblas_get_corename(void);
char *openblas_get_config(void);

/* OpenBLAS's x86-64 core types by the widest vectors their kernels use. */
static int core_tier(const char *core) {
  static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
  static const char *const avx2[] = {"haswell", "zen", "skylake"};
  static const char *const avx[] = {"sandybridge", "bulldozer", "piledriver", "steamroller",
                                    "excavator"};
  char low[32];
  size_t i = 0;
  for (; core[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)core[i]);
  low[i] = 0;
  for (i = 0; i < sizeof avx512 / sizeof *avx512; i++) if (!strcmp(low, avx512[i])) return 3;
  for (i = 0; i < sizeof avx2 / sizeof *avx2; i++) if (!strcmp(low, avx2[i])) return 2;
  for (i = 0; i < sizeof avx / sizeof *avx; i++) if (!strcmp(low, avx[i])) return 1;
  return 0; /* Prescott, Core2, Nehalem, Barcelona, ...: SSE */
}

static int cpu_tier(void) {
  if (cpu_has(CPU_AVX512F)) return 3;
  if (cpu_has(CPU_AVX2) && cpu_has(CPU_FMA)) return 2;
  return cpu_has(CPU_AVX) ? 1 : 0;
}

/* The core type that runs this CPU's widest kernels. Cooperlake is
 * SkylakeX's sgemm plus bf16 kernels. */
static const char *best_core(void) {
  static const char *const best[] = {NULL, "Sandybridge", "Haswell", "SkylakeX"};
  if (cpu_tier() == 3 && cpu_has(CPU_AVX512_BF16)) return "Cooperlake";
  return best[cpu_tier()];
}

/* DTRAIN_CORETYPE is the core type dtrain itself put into
 * OPENBLAS_CORETYPE before it started again (src/cli/kernels.c): a value
 * equal to OPENBLAS_CORETYPE's is dtrain's choice, not the user's.
 * DTRAIN_TEST_BLAS_CORE=NAME makes OpenBLAS's own choice read as NAME, so
 * that a test can take the path of a CPU that OpenBLAS does not know;
 * DTRAIN_TEST_BLAS_WRONG=1 makes kern_gemm_check see a wrong result. */
void kern_blas_info(blas_info_t *info) {
  const char *env = getenv("OPENBLAS_CORETYPE"), *mine = getenv("DTRAIN_CORETYPE");
  const char *fake = getenv("DTRAIN_TEST_BLAS_CORE");
  memset(info, 0, sizeof *info);
  snprintf(info->core, sizeof info->core, "%s", openblas_get_corename());
  if (env && *env && mine && !strcmp(env, mine)) info->set_by = "dtrain";
  else if (env && *env) info->set_by = "user";
  else info->set_by = "openblas";
  if (fake && *fake && !strcmp(info->set_by, "openblas") && !(mine && *mine))
    snprintf(info->core, sizeof info->core, "%s", fake);
  info->core_tier = core_tier(info->core);
  info->cpu_tier = cpu_tier();
  info->best = best_core();
  info->dynamic = strstr(openblas_get_config(), "DYNAMIC_ARCH") != NULL;
}

void kern_gemm_describe(char *buf, size_t cap) {
  if (kern_using_reference()) {
    snprintf(buf, cap, "reference");
    return;
  }
  if (kern_using_bf16()) {
    long fb = kern_bf16_fallbacks();
    if (fb) snprintf(buf, cap, "bf16 onednn (%ld products fell back to fp32)", fb);
    else snprintf(buf, cap, "bf16 onednn");
    return;
  }
  if (kern_gemm_lib() == GEMM_ONEDNN) {
    kern_onednn_describe(buf, cap);
    return;
  }
  blas_info_t b;
  kern_blas_info(&b);
  snprintf(buf, cap, "openblas %s (set by %s)", b.core, b.set_by);
}

/* DTRAIN_TEST_BLAS_WRONG=1 makes every library's products read as wrong,
 * =onednn or =openblas that library's alone. */
static int test_wrong(void) {
  const char *w = getenv("DTRAIN_TEST_BLAS_WRONG");
  if (!w || !*w) return 0;
  if (!strcmp(w, "onednn")) return kern_gemm_lib() == GEMM_ONEDNN;
  if (!strcmp(w, "openblas")) return kern_gemm_lib() == GEMM_OPENBLAS;
  return 1;
}

/* Largest |blas - ref| / (|beta c| + sum_p |a_ip b_pj|) over one product. */
static double product_error(int ta, int tb, int m, int n, int k, float beta, const float *a,
                            const float *b, float *c, float *r) {
  int lda = ta ? m : k, ldb = tb ? k : n;
  for (int i = 0; i < m * n; i++) c[i] = r[i] = (float)(i % 7) - 3;
  kern_gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, n); /* the library's, before any
                                                                * --precision or reference */
  kern_gemm_ref(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, r, n);
  if (test_wrong()) c[n + 1] += 1; /* tests: a kernel that computes wrong */
  double worst = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = fabs(beta) * 3;
      for (int p = 0; p < k; p++) {
        float x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        float y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        s += fabsf(x * y);
      }
      double e = fabs((double)c[i * n + j] - r[i * n + j]) / (s + 1e-30);
      if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
  return worst;
}

int kern_gemm_check(void) {
  enum { M = 37, N = 70, K = 150 }; /* odd sizes: the kernels' edge cases too */
  float *a = dt_alloc_floats(M * K), *b = dt_alloc_floats(K * N), *c = dt_alloc_floats(M * N),
        *r = dt_alloc_floats(M * N);
  if (!a || !b || !c || !r) {
    dt_free(a), dt_free(b), dt_free(c), dt_free(r);
    return -1;
  }
  rng_t g;
  rng_seed(&g, 12345);
  for (int i = 0; i < M * K; i++) a[i] = rng_uniform(&g) * 2 - 1;
  for (int i = 0; i < K * N; i++) b[i] = rng_uniform(&g) * 2 - 1;
  double worst = 0;
  int wta = 0, wtb = 0;
  for (int t = 0; t < 4; t++) {
    double e = product_error(t & 1, t >> 1, M, N, K, t == 3 ? 1.0f : 0.0f, a, b, c, r);
    if (!(e <= worst)) worst = e, wta = t & 1, wtb = t >> 1;
  }
  dt_free(a), dt_free(b), dt_free(c), dt_free(r);
  if (worst <= 1e-4) return 0;
  char what[64];
  kern_gemm_describe(what, sizeof what);
  return dt_error("sgemm of %s disagrees with the reference GEMM (%s%s, %dx%dx%d): relative "
                  "error %.2g", what, wta ? "A^T" : "A", wtb ? " B^T" : " B", M, N, K, worst);
}
