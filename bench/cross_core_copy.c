/* What a 2-rank allreduce on local can reach: memcpy of data this core has
 * just written, against memcpy of data the other core has just written
 * (what every step of an allreduce copies or adds: the peer's half).
 * A 2-rank allreduce of S bytes moves S/2 across in each direction twice
 * (reduce-scatter, allgather), so its bus bandwidth (S / time for P = 2)
 * is at most the cross-core copy bandwidth: the last column is that bound
 * as a fraction of memcpy, the yardstick of `dtrain bench allreduce`.
 * usage: cross_core_copy [max MiB, 64] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/comm.h"

#define REPS 41

typedef struct {
  size_t max_bytes;
} opts_t;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median seconds of copying `bytes` from src to dst on rank 0, after
 * `writer` has rewritten src (so its lines are dirty in the writer's cache). */
static int time_copy(comm_t *c, int writer, char *src, char *dst, size_t bytes, double *median) {
  double t[REPS];
  for (int i = 0; i < REPS; i++) {
    if (comm_rank(c) == writer) memset(src, i + 1, bytes);
    DT_TRY(comm_barrier(c));
    if (comm_rank(c) == 0) {
      double t0 = dt_now();
      memcpy(dst, src, bytes);
      t[i] = dt_now() - t0;
    }
    DT_TRY(comm_barrier(c));
  }
  qsort(t, REPS, sizeof t[0], cmp_double);
  *median = t[REPS / 2];
  return 0;
}

static int run(comm_t *c, void *arg) {
  const opts_t *o = arg;
  char *src, *dst = dt_alloc(o->max_bytes);
  DT_TRY(comm_shared_alloc(c, o->max_bytes, (void **)&src));
  if (!dst) return -1;
  memset(dst, 0, o->max_bytes);
  if (comm_rank(c) == 0)
    printf("%12s %16s %18s %8s\n", "bytes", "same_core_GB/s", "cross_core_GB/s", "ratio");
  for (size_t bytes = 256 << 10; bytes <= o->max_bytes; bytes *= 4) {
    double same, cross;
    DT_TRY(time_copy(c, 0, src, dst, bytes, &same));
    DT_TRY(time_copy(c, 1, src, dst, bytes, &cross));
    if (comm_rank(c) == 0) {
      printf("%12zu %16.1f %18.1f %8.2f\n", bytes, bytes / same / 1e9, bytes / cross / 1e9, same / cross);
      printf("{\"bench\":\"cross_core_copy\",\"bytes\":%zu,\"same_core_gbs\":%.2f,\"cross_core_gbs\":%.2f,"
             "\"ratio\":%.3f}\n", bytes, bytes / same / 1e9, bytes / cross / 1e9, same / cross);
    }
  }
  dt_free(dst);
  return comm_shared_free(c, src);
}

int main(int argc, char **argv) {
  opts_t o = {(size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20};
  if (o.max_bytes < (256 << 10)) o.max_bytes = 256 << 10;
  if (comm_local_run(2, NULL, run, &o) != 0) {
    fprintf(stderr, "cross_core_copy: %s\n", dt_errmsg());
    return 1;
  }
  return 0;
}
