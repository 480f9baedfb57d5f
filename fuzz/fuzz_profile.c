/* Fuzz target: the reader of a calibration profile (perf_profile_parse,
 * src/perf/profile.c), from a buffer: no file is read. What it accepts
 * must be usable as the simulator uses it: every beta above 0, every
 * alpha a finite number >= 0 (each operation's measured too), the
 * shared-memory and trace costs finite and >= 0, the strings ended within
 * their fields; and written back (perf_profile_write) it must read the
 * same again (strings, which operations were measured). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/perf.h"

static int usable(const perf_link_t *l) {
  return isfinite(l->alpha) && l->alpha >= 0 && isfinite(l->beta) && l->beta > 0;
}

static int ops_usable(const perf_link_t *op, unsigned measured) {
  for (int i = 0; i < PERF_NOPS; i++)
    if (measured & 1u << i && !usable(&op[i])) return 0;
  return measured >> PERF_NOPS == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size ? size : 1); /* exactly size bytes: ASan sees any read past them */
  if (!text) return 0;
  memcpy(text, data, size);
  perf_profile_t p, q;
  if (perf_profile_parse(text, size, "profile", &p) == 0) {
    if (!usable(&p.local) || !usable(&p.local_oversubscribed) || !usable(&p.mpi) || !p.calibrated ||
        memchr(p.cpu, 0, sizeof p.cpu) == NULL || memchr(p.gemm, 0, sizeof p.gemm) == NULL ||
        !ops_usable(p.local_op, p.local_ops) || !ops_usable(p.mpi_op, p.mpi_ops) ||
        !(isfinite(p.shm_sec) && p.shm_sec >= 0) || !(isfinite(p.trace_slice_sec) && p.trace_slice_sec >= 0))
      abort();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
      perf_profile_write(&p, f);
      fclose(f);
      if (perf_profile_parse(buf, len, "profile", &q) != 0 || strcmp(p.cpu, q.cpu) ||
          strcmp(p.gemm, q.gemm) || q.mpi_measured != p.mpi_measured || q.local_ops != p.local_ops ||
          q.mpi_ops != p.mpi_ops || (q.shm_sec > 0) != (p.shm_sec > 0))
        abort();
      free(buf);
    }
  } else if (!dt_errmsg()[0] || strchr(dt_errmsg(), '\n')) {
    abort(); /* a refusal is one line */
  }
  free(text);
  return 0;
}
