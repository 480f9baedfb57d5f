/* Fuzz target: the reader of a calibration profile (perf_profile_parse,
 * src/perf/profile.c), from a buffer: no file is read. What it accepts
 * must be usable as the simulator uses it: every beta above 0, every
 * alpha a finite number >= 0, the strings ended within their fields; and
 * written back (perf_profile_write) it must read the same again. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/perf.h"

static int usable(const perf_link_t *l) {
  return isfinite(l->alpha) && l->alpha >= 0 && isfinite(l->beta) && l->beta > 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size ? size : 1); /* exactly size bytes: ASan sees any read past them */
  if (!text) return 0;
  memcpy(text, data, size);
  perf_profile_t p, q;
  if (perf_profile_parse(text, size, "profile", &p) == 0) {
    if (!usable(&p.local) || !usable(&p.local_oversubscribed) || !usable(&p.mpi) || !p.calibrated ||
        memchr(p.cpu, 0, sizeof p.cpu) == NULL || memchr(p.gemm, 0, sizeof p.gemm) == NULL)
      abort();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
      perf_profile_write(&p, f);
      fclose(f);
      if (perf_profile_parse(buf, len, "profile", &q) != 0 || strcmp(p.cpu, q.cpu) ||
          strcmp(p.gemm, q.gemm) || q.mpi_measured != p.mpi_measured)
        abort();
      free(buf);
    }
  } else if (!dt_errmsg()[0] || strchr(dt_errmsg(), '\n')) {
    abort(); /* a refusal is one line */
  }
  free(text);
  return 0;
}
