/* Calibration: the transports' own alpha and beta, measured here. The
 * quantity the simulator charges is a collective's time beyond its
 * emulated link (simulate.c: messages x alpha + bytes in sequence / beta),
 * so that is what is measured: the ring allreduce over 2 ranks (2
 * messages, S bytes in sequence: the copies and the sums), and over twice
 * as many ranks as cores (every message of every rank a turn on a shared
 * core), at sizes from 4 KiB to 64 MiB (to 1 MiB with quick), each the
 * median of a few runs; alpha and beta are the least-squares fit of
 * t = m x alpha + b x S / beta, weighted by 1/t^2 so that every size
 * counts by its relative error. Under mpirun (`--comm mpi`) the same over
 * the world's ranks gives mpi's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/coll.h"
#include "perf/perf.h"

#define MAX_POINTS 16
#define REPS 5

typedef struct {
  int quick;
  int P, oversubscribed;            /* the ranks measured, and whether they outnumber cores */
  int n;                            /* points measured (rank 0) */
  double bytes[MAX_POINTS], sec[MAX_POINTS];
} calib_t;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Every rank: the ring allreduce at each size, the median of REPS after a
 * warm-up; rank 0 keeps the times. */
static int measure_rank(comm_t *c, void *arg) {
  calib_t *k = arg;
  size_t max_bytes = k->quick ? (size_t)1 << 20 : (size_t)64 << 20;
  coll_ctx_t *ctx;
  DT_TRY(coll_ctx_new(c, &ctx));
  float *buf = dt_alloc_floats(max_bytes / sizeof(float));
  int rc = buf ? 0 : dt_error("out of memory");
  if (rc == 0) kern_zero(max_bytes / sizeof(float), buf);
  int n = 0;
  for (size_t bytes = 4096; rc == 0 && bytes <= max_bytes && n < MAX_POINTS; bytes *= 4, n++) {
    double t[REPS];
    for (int rep = 0; rc == 0 && rep <= REPS; rep++) {
      rc = comm_barrier(c);
      double t0 = dt_now();
      if (rc == 0) rc = allreduce(ctx, ALLREDUCE_RING, buf, bytes / sizeof(float));
      if (rep > 0) t[rep - 1] = dt_now() - t0;
    }
    qsort(t, REPS, sizeof *t, cmp_double);
    if (comm_rank(c) == 0) k->bytes[n] = (double)bytes, k->sec[n] = t[REPS / 2];
  }
  if (comm_rank(c) == 0) k->n = n, k->P = comm_size(c);
  dt_free(buf);
  coll_ctx_free(ctx);
  return rc;
}

/* t = m alpha + b S / beta over the points, weighted by 1/t^2. */
static void fit(const calib_t *k, perf_link_t *out) {
  double m, b, a11 = 0, a12 = 0, a22 = 0, r1 = 0, r2 = 0;
  coll_allreduce_cost(ALLREDUCE_RING, k->P, 1, k->oversubscribed, &m, &b);
  for (int i = 0; i < k->n; i++) {
    double w = 1.0 / (k->sec[i] * k->sec[i]), x = m, y = b * k->bytes[i];
    a11 += w * x * x, a12 += w * x * y, a22 += w * y * y;
    r1 += w * x * k->sec[i], r2 += w * y * k->sec[i];
  }
  double det = a11 * a22 - a12 * a12, alpha = 0, inv = 0;
  if (det > 0) alpha = (r1 * a22 - r2 * a12) / det, inv = (a11 * r2 - a12 * r1) / det;
  if (alpha < 0 || inv <= 0) { /* one term alone fits better: keep it, the other at its floor */
    alpha = alpha < 0 ? 0 : alpha;
    inv = inv > 0 ? inv : 1e-12;
    if (alpha == 0 && a22 > 0) inv = r2 / a22;
  }
  out->alpha = alpha;
  out->beta = 1.0 / inv;
}

/* The fit's largest relative error over the points, for the report. */
static double fit_error(const calib_t *k, const perf_link_t *l) {
  double m, b, worst = 0;
  coll_allreduce_cost(ALLREDUCE_RING, k->P, 1, k->oversubscribed, &m, &b);
  for (int i = 0; i < k->n; i++) {
    double e = fabs(m * l->alpha + b * k->bytes[i] / l->beta - k->sec[i]) / k->sec[i];
    if (e > worst) worst = e;
  }
  return worst;
}

static void log_fit(FILE *log, const char *transport, const calib_t *k, const perf_link_t *l) {
  if (log)
    fprintf(log, "{\"event\":\"calibrate\",\"transport\":\"%s\",\"ranks\":%d,\"alpha\":%.6g,"
            "\"beta\":%.6g,\"points\":%d,\"fit_max_error\":%.3f}\n", transport, k->P, l->alpha,
            l->beta, k->n, fit_error(k, l));
}

static int calibrate_local(int P, int oversubscribed, int quick, perf_link_t *out, FILE *log) {
  calib_t k = {.quick = quick, .oversubscribed = oversubscribed};
  comm_net_t net = {0};
  DT_TRY(comm_local_run(P, &net, measure_rank, &k));
  fit(&k, out);
  log_fit(log, "local", &k, out);
  return 0;
}

int perf_calibrate(int quick, perf_profile_t *out, FILE *log) {
  perf_profile_default(out);
  perf_machine(out->cpu, sizeof out->cpu, out->gemm, sizeof out->gemm);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  DT_TRY(calibrate_local(2, 2 > cores, quick, &out->local, log));
  DT_TRY(calibrate_local(2 * (int)cores, 1, quick, &out->local_oversubscribed, log));
  DT_TRY(perf_gemm_fit_measure(quick, &out->gemm_fit));
  const perf_gemm_fit_t *g = &out->gemm_fit;
  if (log)
    fprintf(log, "{\"event\":\"calibrate\",\"gemm_fit\":[%.4g,%.4g,%.4g,%.4g],\"points\":%d,"
            "\"fit_max_error\":%.3f}\n", g->c[0], g->c[1], g->c[2], g->c[3], g->points, g->max_error);
  out->calibrated = 1;
  return 0;
}

int perf_calibrate_mpi(int *argc, char ***argv, int quick, perf_link_t *out, int *is_root,
                       FILE *log) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  calib_t k = {.quick = quick};
  comm_net_t net = {0};
  DT_TRY(comm_mpi_run(argc, argv, &net, measure_rank, &k));
  *is_root = k.n > 0;
  if (!*is_root) return 0;
  k.oversubscribed = k.P > cores;
  fit(&k, out);
  log_fit(log, "mpi", &k, out);
  return 0;
}
