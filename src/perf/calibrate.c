/* Calibration: the transports' own alpha and beta, measured here. The
 * quantity the simulator charges is an operation's time beyond its
 * emulated link (simulate.c: messages x alpha + bytes in sequence / beta),
 * so that is what is measured, one operation at a time:
 *
 * - the ring allreduce over 2 ranks and over twice as many ranks as cores
 *   (every message of every rank a turn on a shared core): the profile's
 *   "local" and "local_oversubscribed", any operation's cost;
 * - each operation on its own over a rank a core (2 to 8 ranks): the
 *   allreduces ring, rhd and tree, the ring's reduce-scatter and
 *   allgather, the binomial broadcast, and a ping-pong between two ranks
 *   (half the round trip: one message), each fitted to its own formula
 *   (op_cost): "local_ops", and "mpi_ops" under mpirun;
 * - the shared-memory exchange's cost a value (calibrate_shm.c) and one
 *   traced slice's (trace_slice, after dt_now for its end).
 *
 * Sizes run from 4 KiB to 64 MiB (to 1 MiB with quick), each the median of
 * a few runs; alpha and beta are the least-squares fit of
 * t = m x alpha + b x S / beta, weighted by 1/t^2 so that every size
 * counts by its relative error. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/coll.h"
#include "perf/perf.h"

#define MAX_POINTS 16
#define REPS 5
#define OP_ANY (-1) /* calib_t.op: the ring allreduce as the transport's one fit */

typedef struct {
  int quick, op;                    /* op: a perf_op_t, or OP_ANY */
  int P, oversubscribed;            /* the ranks measured, and whether they outnumber cores */
  int n;                            /* points measured (rank 0) */
  double bytes[MAX_POINTS], sec[MAX_POINTS];
} calib_t;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double perf_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* Messages and bytes (per byte of the buffer) in sequence of an operation
 * over P ranks: its formula, as the simulator charges it. */
static void op_cost(int op, int P, int oversubscribed, double *m, double *b) {
  double lg = ceil(log2((double)P));
  switch (op) {
  case PERF_OP_RHD: coll_allreduce_cost(ALLREDUCE_RHD, P, 1, oversubscribed, m, b); return;
  case PERF_OP_TREE: coll_allreduce_cost(ALLREDUCE_TREE, P, 1, oversubscribed, m, b); return;
  case PERF_OP_ALLGATHER:
  case PERF_OP_REDUCE_SCATTER: *m = P - 1, *b = (double)(P - 1) / P; return;
  case PERF_OP_BROADCAST: *m = lg, *b = lg; return;
  case PERF_OP_P2P: *m = 1, *b = 1; return;
  default: coll_allreduce_cost(ALLREDUCE_RING, P, 1, oversubscribed, m, b); return;
  }
}

/* Half of a round trip of `bytes` between ranks 0 and 1 (the others wait). */
static int ping_pong(comm_t *c, float *buf, size_t bytes) {
  enum { TAG = 771 };
  if (comm_rank(c) == 0) {
    DT_TRY(comm_send(c, 1, TAG, buf, bytes));
    return comm_recv(c, 1, TAG, buf, bytes);
  }
  if (comm_rank(c) == 1) {
    DT_TRY(comm_recv(c, 0, TAG, buf, bytes));
    return comm_send(c, 0, TAG, buf, bytes);
  }
  return 0;
}

static int run_op(coll_ctx_t *ctx, comm_t *c, int op, float *buf, size_t bytes) {
  size_t n = bytes / sizeof(float);
  switch (op) {
  case PERF_OP_RHD: return allreduce(ctx, ALLREDUCE_RHD, buf, n);
  case PERF_OP_TREE: return allreduce(ctx, ALLREDUCE_TREE, buf, n);
  case PERF_OP_ALLGATHER: return allgather_ring(ctx, buf, n);
  case PERF_OP_REDUCE_SCATTER: return reduce_scatter_ring_inplace(ctx, buf, n);
  case PERF_OP_BROADCAST: return broadcast_tree(ctx, 0, buf, n);
  case PERF_OP_P2P: return ping_pong(c, buf, bytes);
  default: return allreduce(ctx, ALLREDUCE_RING, buf, n);
  }
}

/* Every rank: the operation at each size, the median of REPS after a
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
      if (rc == 0) rc = run_op(ctx, c, k->op, buf, bytes);
      double sec = dt_now() - t0;
      if (rep > 0) t[rep - 1] = k->op == PERF_OP_P2P ? sec / 2 : sec;
    }
    double med = rc == 0 ? perf_median(t, REPS) : 0;
    if (comm_rank(c) == 0) k->bytes[n] = (double)bytes, k->sec[n] = med;
  }
  if (comm_rank(c) == 0) k->n = n, k->P = comm_size(c);
  dt_free(buf);
  coll_ctx_free(ctx);
  return rc;
}

/* t = m alpha + b S / beta over the points, weighted by 1/t^2. */
static void fit(const calib_t *k, perf_link_t *out) {
  double m, b, a11 = 0, a12 = 0, a22 = 0, r1 = 0, r2 = 0;
  op_cost(k->op, k->P, k->oversubscribed, &m, &b);
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
  op_cost(k->op, k->P, k->oversubscribed, &m, &b);
  for (int i = 0; i < k->n; i++) {
    double e = fabs(m * l->alpha + b * k->bytes[i] / l->beta - k->sec[i]) / k->sec[i];
    if (e > worst) worst = e;
  }
  return worst;
}

static void log_fit(FILE *log, const char *transport, const calib_t *k, const perf_link_t *l) {
  if (!log) return;
  fprintf(log, "{\"event\":\"calibrate\",\"transport\":\"%s\",", transport);
  if (k->op != OP_ANY) fprintf(log, "\"op\":\"%s\",", perf_op_name[k->op]);
  fprintf(log, "\"ranks\":%d,\"alpha\":%.6g,\"beta\":%.6g,\"points\":%d,\"fit_max_error\":%.3f}\n",
          k->P, l->alpha, l->beta, k->n, fit_error(k, l));
}

static int calibrate_local(int P, int op, int oversubscribed, int quick, perf_link_t *out, FILE *log) {
  calib_t k = {.quick = quick, .op = op, .oversubscribed = oversubscribed};
  comm_net_t net = {0};
  DT_TRY(comm_local_run(P, &net, measure_rank, &k));
  fit(&k, out);
  log_fit(log, "local", &k, out);
  return 0;
}

/* Ranks for the operations one by one: a core each, 2 to 8. */
static int op_ranks(long cores) {
  return cores < 2 ? 2 : cores > 8 ? 8 : (int)cores;
}

/* One traced slice: dt_now for its end and trace_slice (bench/trace_event.c
 * measures the same against the clock read alone). */
static int trace_slice_cost(double *out) {
  enum { N = 200000 };
  double best = 1e9;
  for (int round = 0; round < 3; round++) {
    dt_trace_t *t = trace_new(0, dt_now(), 0, 1LL << 62, N);
    if (!t) return -1;
    double t0 = dt_now();
    for (long i = 0; i < N; i++) {
      double a = dt_now();
      trace_slice(t, TRACE_COMPUTE, "calibrate", i, a, a);
    }
    double sec = (dt_now() - t0) / N;
    trace_free(t);
    if (sec < best) best = sec;
  }
  *out = best;
  return 0;
}

int perf_calibrate(int quick, perf_profile_t *out, FILE *log) {
  perf_profile_default(out);
  perf_machine(out->cpu, sizeof out->cpu, out->gemm, sizeof out->gemm);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  DT_TRY(calibrate_local(2, OP_ANY, 2 > cores, quick, &out->local, log));
  DT_TRY(calibrate_local(2 * (int)cores, OP_ANY, 1, quick, &out->local_oversubscribed, log));
  int P = op_ranks(cores);
  for (int op = 0; op < PERF_NOPS; op++) {
    DT_TRY(calibrate_local(op == PERF_OP_P2P ? 2 : P, op, P > cores, quick, &out->local_op[op], log));
    out->local_ops |= 1u << op;
  }
  out->local_op_ranks = P;
  DT_TRY(perf_calibrate_shm(P, quick, &out->shm_sec));
  out->shm_ranks = P;
  DT_TRY(trace_slice_cost(&out->trace_slice_sec));
  if (log)
    fprintf(log, "{\"event\":\"calibrate\",\"message_sec\":%.6g,\"shm_sec\":%.6g,\"shm_ranks\":%d,"
            "\"shm_bytes_per_sec\":%.6g,\"trace_slice_sec\":%.6g}\n", out->local_op[PERF_OP_P2P].alpha,
            out->shm_sec, P, out->shm_sec > 0 ? 2.0 * sizeof(float) / out->shm_sec : 0,
            out->trace_slice_sec);
  DT_TRY(perf_gemm_fit_measure(quick, &out->gemm_fit));
  const perf_gemm_fit_t *g = &out->gemm_fit;
  if (log)
    fprintf(log, "{\"event\":\"calibrate\",\"gemm_fit\":[%.4g,%.4g,%.4g,%.4g],\"points\":%d,"
            "\"fit_max_error\":%.3f}\n", g->c[0], g->c[1], g->c[2], g->c[3], g->points, g->max_error);
  out->calibrated = 1;
  return 0;
}

/* Under mpirun (one run a process): the ring over the world's ranks, then
 * each operation in the same run; the ping-pong between ranks 0 and 1
 * while the others wait. */
static int measure_all(comm_t *c, void *arg) {
  calib_t *k = arg;
  for (int i = 0; i <= PERF_NOPS; i++) DT_TRY(measure_rank(c, &k[i]));
  return 0;
}

int perf_calibrate_mpi(int *argc, char ***argv, int quick, perf_profile_t *out, int *is_root,
                       FILE *log) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  comm_net_t net = {0};
  calib_t k[PERF_NOPS + 1];
  for (int i = 0; i <= PERF_NOPS; i++) k[i] = (calib_t){.quick = quick, .op = i == 0 ? OP_ANY : i - 1};
  DT_TRY(comm_mpi_run(argc, argv, &net, measure_all, k));
  *is_root = k[0].n > 0;
  for (int i = 0; *is_root && i <= PERF_NOPS; i++) {
    k[i].oversubscribed = k[i].P > cores;
    perf_link_t *l = i == 0 ? &out->mpi : &out->mpi_op[i - 1];
    fit(&k[i], l);
    log_fit(log, "mpi", &k[i], l);
    if (i > 0) out->mpi_ops |= 1u << (i - 1), out->mpi_op_ranks = k[i].P;
  }
  return 0;
}
