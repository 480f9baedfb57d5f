/* Aligned zeroed allocations and monotonic time. */
#define _POSIX_C_SOURCE 200809L
#include "dtrain/core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

void *dt_alloc(size_t bytes) {
  void *p = NULL;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded == 0) rounded = 64;
  if (posix_memalign(&p, 64, rounded) != 0) {
    dt_error("out of memory allocating %zu bytes", bytes);
    return NULL;
  }
  memset(p, 0, rounded);
  return p;
}

void dt_free(void *p) { free(p); }

float *dt_alloc_floats(size_t n) { return dt_alloc(n * sizeof(float)); }

float *dt_map_floats(size_t n) {
  size_t bytes = (n ? n : 1) * sizeof(float);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    dt_error("out of memory mapping %zu bytes", bytes);
    return NULL;
  }
  return p;
}

void dt_unmap_floats(float *p, size_t n) {
  if (p) munmap(p, (n ? n : 1) * sizeof(float));
}

float *dt_dup_floats(const float *x, size_t n) {
  float *y = dt_alloc_floats(n);
  if (y) memcpy(y, x, n * sizeof(float));
  return y;
}

double dt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dt_sleep_until(double t) {
  for (;;) {
    double left = t - dt_now();
    if (left <= 0) return;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    if (nanosleep(&ts, NULL) == 0 || errno != EINTR) return;
  }
}
