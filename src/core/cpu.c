/* What this CPU can execute, from cpuid and the OS's saved register state
 * (xgetbv): a feature counts only when both the CPU has it and the kernel
 * saves its registers. DTRAIN_CPU_DISABLE=avx512_bf16,amx (a comma list of
 * the names below) makes dtrain treat those features as absent: tests use
 * it to take the paths of a CPU without them. */
#include "dtrain/core.h"

#include <stdlib.h>
#include <string.h>
#ifdef __x86_64__
#include <cpuid.h>
#endif

static const char *const FEATURE_NAMES[] = {"avx", "avx2", "fma", "avx512f", "avx512_bf16",
                                            "amx_bf16"};

#ifdef __x86_64__
static uint64_t xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static void detect(int *f) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  int osxsave = (c >> 27) & 1;
  uint64_t xcr = osxsave ? xcr0() : 0;
  int ymm = (xcr & 6) == 6, zmm = ymm && (xcr & 0xe0) == 0xe0, tiles = (xcr & 0x60000) == 0x60000;
  f[CPU_AVX] = ((c >> 28) & 1) && ymm;
  f[CPU_FMA] = ((c >> 12) & 1) && ymm;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  f[CPU_AVX2] = ((b >> 5) & 1) && ymm;
  f[CPU_AVX512F] = ((b >> 16) & 1) && zmm;
  f[CPU_AMX_BF16] = ((d >> 22) & 1) && tiles;
  unsigned a1, b1, c1, d1;
  if (a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1))
    f[CPU_AVX512_BF16] = ((a1 >> 5) & 1) && zmm;
}
#else
static void detect(int *f) { (void)f; }
#endif

/* The names of DTRAIN_CPU_DISABLE, switched off. */
static void apply_disable(int *f) {
  const char *env = getenv("DTRAIN_CPU_DISABLE");
  if (!env) return;
  for (int i = 0; i < CPU_NFEATURES; i++) {
    size_t n = strlen(FEATURE_NAMES[i]);
    for (const char *p = env; (p = strstr(p, FEATURE_NAMES[i])); p += n)
      if ((p == env || p[-1] == ',') && (p[n] == ',' || !p[n])) f[i] = 0;
  }
}

int cpu_has(cpu_feature_t feature) {
  static int known, f[CPU_NFEATURES]; /* the first call is at start-up, before any thread */
  if (!known) {
    detect(f);
    apply_disable(f);
    known = 1;
  }
  return feature >= 0 && feature < CPU_NFEATURES && f[feature];
}

const char *cpu_feature_name(cpu_feature_t feature) {
  return name_of(feature, FEATURE_NAMES, CPU_NFEATURES);
}

void cpu_describe(char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < CPU_NFEATURES && used < cap; i++)
    if (cpu_has(i)) used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? " " : "", FEATURE_NAMES[i]);
  if (!buf[0]) snprintf(buf, cap, "none of avx, avx2, avx512f");
}
