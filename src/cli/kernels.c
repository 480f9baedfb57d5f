/* The kernels dtrain runs on, settled before a command does any work:
 *
 * - The fp32 products go through oneDNN's sgemm where dtrain was built
 *   with it (src/core/gemm_onednn.c): it picks its kernels by the CPU's
 *   instruction sets, so none of what follows about OpenBLAS applies.
 *   DTRAIN_GEMM=openblas chooses OpenBLAS; a oneDNN that disagrees with
 *   the reference GEMM is given up for OpenBLAS, with one line.
 * - OpenBLAS reads OPENBLAS_CORETYPE once, when the library is loaded, so
 *   a better core type cannot be chosen from inside the running process.
 *   When nobody set it and OpenBLAS's own choice is below what the CPU
 *   can do (a CPU newer than the library), dtrain starts itself again with
 *   OPENBLAS_CORETYPE set to the best core for the CPU's features
 *   (execv of /proc/self/exe, before anything else has run).
 * - A core type the user set is kept. When it is far below the CPU (two
 *   tiers: SSE kernels on an AVX2 CPU, or AVX on AVX-512) one line says so,
 *   with the setting that would be faster. One tier below (Haswell's AVX2
 *   kernels on an AVX-512 CPU, as this project's machine is set up on
 *   purpose) ran sgemm within 4% of SkylakeX or faster here: not worth a line on every
 *   run: `dtrain train --help` shows it.
 * - No kernel is trusted before it agrees with the reference GEMM
 *   (kern_gemm_check). A core type dtrain chose that disagrees is given up
 *   (started again with OpenBLAS's own choice); one the user or OpenBLAS
 *   chose that disagrees sends every product through the reference GEMM,
 *   with one line that says so.
 *
 * Lines go to stderr, once: under mpirun only rank 0's process speaks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dtrain/core.h"

/* Open MPI's, MPICH's and Slurm's rank variables: absent outside a launcher. */
static int first_process(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v && strcmp(v, "0") != 0) return 0;
  }
  return 1;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  if (!first_process()) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("dtrain: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* Start again with OPENBLAS_CORETYPE=core (NULL: unset) and DTRAIN_CORETYPE
 * saying who set it; returns only when execv fails. */
static void restart(char **argv, const char *core, const char *mark) {
  if (core) setenv("OPENBLAS_CORETYPE", core, 1);
  else unsetenv("OPENBLAS_CORETYPE");
  setenv("DTRAIN_CORETYPE", mark, 1);
  fflush(NULL);
  execv("/proc/self/exe", argv);
}

/* oneDNN's sgemm for the fp32 products, unless DTRAIN_GEMM=openblas or
 * dtrain was built without it, and once it agrees with the reference:
 * 1 when it runs. OpenBLAS's core type does not matter then. */
static int settle_onednn(void) {
  const char *want = getenv("DTRAIN_GEMM");
  if (want && *want && strcmp(want, "onednn") && strcmp(want, "openblas"))
    say("DTRAIN_GEMM=%s is not a GEMM library (expected onednn or openblas): the default runs", want);
  else if (want && !strcmp(want, "openblas"))
    return 0;
  if (!kern_onednn_available()) {
    if (want && !strcmp(want, "onednn"))
      say("DTRAIN_GEMM=onednn: this dtrain was built without oneDNN (install libdnnl-dev and "
          "run make): OpenBLAS runs");
    return 0;
  }
  kern_set_gemm_lib(GEMM_ONEDNN);
  if (kern_gemm_check() == 0) return 1;
  say("%s: OpenBLAS runs instead", dt_errmsg());
  kern_set_gemm_lib(GEMM_OPENBLAS);
  return 0;
}

void cli_settle_kernels(char **argv) {
  kern_set_threads(1); /* before any BLAS call: idle pool threads must not spin */
  if (settle_onednn()) return;
  blas_info_t b;
  kern_blas_info(&b);
  const char *mine = getenv("DTRAIN_CORETYPE");
  char cpu[128];
  cpu_describe(cpu, sizeof cpu);
  int below = b.best && b.core_tier < b.cpu_tier;
  if (below && !strcmp(b.set_by, "openblas") && b.dynamic && !(mine && *mine))
    restart(argv, b.best, b.best); /* returns only if execv failed: go on as we are */
  if (kern_gemm_check() != 0) {
    if (!strcmp(b.set_by, "dtrain")) restart(argv, NULL, "openblas");
    kern_use_reference(1);
    say("%s: every product runs through dtrain's reference GEMM instead (slow; try another "
        "OPENBLAS_CORETYPE%s%s)", dt_errmsg(), b.best ? ", e.g. " : "", b.best ? b.best : "");
    return;
  }
  if (mine && !strcmp(mine, "openblas"))
    say("OpenBLAS's %s kernels run: the faster %s gave wrong results on this CPU", b.core,
        b.best ? b.best : "core");
  else if (below && !strcmp(b.set_by, "user") && b.cpu_tier - b.core_tier >= 2)
    say("OPENBLAS_CORETYPE=%s (your setting, kept): OpenBLAS's %s kernels are far below this "
        "CPU (%s); OPENBLAS_CORETYPE=%s would be faster", b.core, b.core, cpu, b.best);
  else if (below && !b.dynamic)
    say("OpenBLAS was built for %s only, far below this CPU (%s): a DYNAMIC_ARCH build (Debian's "
        "libopenblas0-pthread) would run its %s kernels", b.core, cpu, b.best);
}

void cli_describe_kernels(FILE *f) {
  blas_info_t b;
  kern_blas_info(&b);
  char cpu[128], what[96];
  cpu_describe(cpu, sizeof cpu);
  kern_gemm_describe(what, sizeof what);
  fprintf(f, "kernels here: %s; CPU: %s", what, cpu);
  if (kern_gemm_lib() == GEMM_ONEDNN)
    fprintf(f, "; DTRAIN_GEMM=openblas runs OpenBLAS %s instead", b.core);
  else if (b.best && b.core_tier < b.cpu_tier)
    fprintf(f, "; OPENBLAS_CORETYPE=%s would use all of it", b.best);
  fprintf(f, "; --precision bf16: %s\n", kern_bf16_available() ? "available" : "not available");
}
