/* The shared-memory exchange's cost a value, measured across cores: what
 * shared sync (strategy/dp/shared_sync.c) does between its two barriers,
 * without the optimizer's step (compute.c times that per parameter). P
 * threads, a core each, each with its own gradient and parameter arena of
 * n floats: every rank writes its gradients (as its backward pass does, so
 * that they sit in its own cache), then, after a barrier, sums its block of
 * every rank's gradients into its own and pushes the block into every
 * other rank's parameters, 8 KiB at a time (shared sync's chunks). The
 * slowest rank's seconds over n is the cost a value of the arena: a
 * rank's traffic is about 2n floats whatever P, all of it between cores,
 * which one core's sum and copy (what the simulator charged before) do
 * not see. */
#include <stdlib.h>

#include "perf/perf.h"

#define REPS 5
enum { CHUNK = 2048 }; /* floats: shared_sync.c's */

typedef struct {
  size_t n;
  double sec[REPS];  /* rank 0: each repetition's slowest rank */
  double *slowest;   /* shared: each rank's seconds of the last repetition */
} shm_calib_t;

/* One rank's sum of its block from every arena and push to every other. */
static void sum_and_push(int P, int r, size_t n, float *const *grads, float *const *params,
                         const float **part) {
  size_t off, len;
  coll_block(n, P, r, &off, &len);
  for (size_t at = off; at < off + len; at += CHUNK) {
    size_t k = off + len - at < CHUNK ? off + len - at : CHUNK;
    for (int q = 0; q < P; q++) part[q] = grads[q] + at;
    kern_sum(k, P, part, grads[r] + at);
    for (int q = 0; q < P; q++)
      if (q != r) kern_copy(k, grads[r] + at, params[q] + at);
  }
}

static int shm_rank(comm_t *c, void *arg) {
  shm_calib_t *k = arg;
  int P = comm_size(c), r = comm_rank(c);
  float **tables = NULL;
  int rc = comm_shared_alloc(c, 2 * (size_t)P * sizeof(float *) + (size_t)P * sizeof(double),
                             (void **)&tables);
  float *g = dt_alloc_floats(k->n), *p = dt_alloc_floats(k->n);
  const float **part = calloc((size_t)P, sizeof *part);
  if (rc == 0 && (!g || !p || !part)) rc = dt_error("out of memory");
  if (rc == 0) {
    kern_zero(k->n, p);
    tables[r] = g, tables[P + r] = p;
    k->slowest = (double *)(tables + 2 * P);
    rc = comm_barrier(c);
  }
  for (int rep = 0; rc == 0 && rep <= REPS; rep++) {
    for (size_t i = 0; i < k->n; i++) g[i] = (float)(i & 1023) * 1e-3f; /* the backward's writes */
    rc = comm_barrier(c);
    double t0 = dt_now();
    if (rc == 0) sum_and_push(P, r, k->n, tables, tables + P, part);
    k->slowest[r] = dt_now() - t0;
    if (rc == 0) rc = comm_barrier(c);
    if (rc == 0 && r == 0 && rep > 0) {
      double worst = 0;
      for (int q = 0; q < P; q++) worst = k->slowest[q] > worst ? k->slowest[q] : worst;
      k->sec[rep - 1] = worst;
    }
    if (rc == 0) rc = comm_barrier(c); /* the times read before the next repetition's */
  }
  if (rc != 0) comm_fail(c);
  comm_shared_free(c, tables);
  dt_free(g), dt_free(p);
  free(part);
  return rc;
}

int perf_calibrate_shm(int ranks, int quick, double *sec_per_value) {
  /* 16 MiB arenas (4 with quick): past the caches, as a model's are */
  shm_calib_t k = {.n = (quick ? (size_t)1 << 20 : (size_t)4 << 20)};
  comm_net_t net = {0};
  DT_TRY(comm_local_run(ranks, &net, shm_rank, &k));
  *sec_per_value = perf_median(k.sec, REPS) / (double)k.n;
  return 0;
}
