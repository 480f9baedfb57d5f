/* PipeDream's partitioning dynamic program (Narayanan et al. 2019,
 * sec. 3.1):
 *   A(j, m) = min over i < j, 1 <= m' < m of
 *             max(A(i, m - m'), 2 a_i / B, T(i -> j, m'))
 *   A(j, m) starts as T(0 -> j, m) (one stage replicated m times),
 * A(N, M) the pipeline's time a step. Tables are flat [(n + 1) x (M + 1)],
 * allocated once. */
#include <stdlib.h>

#include "dtrain/core.h"
#include "perf/partition.h"

static double sum(const double *v, int i, int j) {
  double s = 0;
  for (int l = i; v && l < j; l++) s += v[l];
  return s;
}

double partition_stage_sec(const partition_problem_t *p, int i, int j, int m) {
  double compute = sum(p->sec, i, j), sync = 0;
  if (m > 1 && p->bandwidth > 0) sync = 2.0 * (m - 1) / m * sum(p->param_bytes, i, j) / p->bandwidth;
  return (compute > sync ? compute : sync) / m;
}

double partition_transfer_sec(const partition_problem_t *p, int i) {
  if (i <= 0 || i >= p->nlayers || !p->out_bytes || p->bandwidth <= 0) return 0;
  return 2.0 * p->out_bytes[i - 1] / p->bandwidth;
}

double partition_cost(const partition_problem_t *p, const partition_t *part) {
  double worst = 0;
  for (int k = 0; k < part->stages; k++) {
    double t = partition_stage_sec(p, part->first[k], part->first[k + 1], part->replicas[k]);
    if (k > 0 && partition_transfer_sec(p, part->first[k]) > t) t = partition_transfer_sec(p, part->first[k]);
    if (t > worst) worst = t;
  }
  return worst;
}

static int startable(const partition_problem_t *p, int i) {
  return i == 0 || !p->can_start || p->can_start[i];
}

/* The DP; one_each: every stage on one machine, exactly `machines` stages. */
static int solve(const partition_problem_t *p, int machines, int one_each, partition_t *out) {
  int n = p->nlayers, M = machines, W = M + 1;
  if (n < 1 || M < 1 || M > PARTITION_MAX_STAGES)
    return dt_error("partition: %d layers on %d machines (1 to %d machines)", n, M, PARTITION_MAX_STAGES);
  double *A = malloc((size_t)(n + 1) * W * sizeof *A);
  int *from = malloc((size_t)(n + 1) * W * sizeof *from), *mlast = malloc((size_t)(n + 1) * W * sizeof *mlast);
  if (!A || !from || !mlast) return free(A), free(from), free(mlast), dt_error("out of memory");
  for (int j = 0; j <= n; j++)
    for (int m = 0; m <= M; m++) {
      int k = j * W + m;
      A[k] = -1, from[k] = -1, mlast[k] = m;
      if (j == 0 || m == 0) continue;
      if (!one_each || m == 1) A[k] = partition_stage_sec(p, 0, j, one_each ? 1 : m), from[k] = 0;
      for (int i = 1; i < j; i++) {
        if (!startable(p, i)) continue;
        for (int mm = 1; mm < m; mm++) {
          if (one_each && mm != 1) continue;
          double prev = A[i * W + m - mm];
          if (prev < 0) continue;
          double v = prev, x = partition_transfer_sec(p, i), t = partition_stage_sec(p, i, j, mm);
          if (x > v) v = x;
          if (t > v) v = t;
          if (A[k] < 0 || v < A[k] * (1 - 1e-12)) A[k] = v, from[k] = i, mlast[k] = mm;
        }
      }
    }
  int rc = 0;
  if (A[n * W + M] < 0) {
    rc = dt_error("partition: %d layers cannot be cut into %d stages at the layers that can start one",
                  n, M);
  } else { /* walk back: the last stage first */
    int stack_first[PARTITION_MAX_STAGES], stack_rep[PARTITION_MAX_STAGES], s = 0;
    for (int j = n, m = M; j > 0;) {
      int k = j * W + m;
      stack_first[s] = from[k], stack_rep[s] = mlast[k], s++;
      m -= mlast[k], j = from[k];
    }
    out->stages = s, out->slowest = A[n * W + M];
    for (int q = 0; q < s; q++)
      out->first[q] = stack_first[s - 1 - q], out->replicas[q] = stack_rep[s - 1 - q];
    out->first[s] = n;
  }
  free(A), free(from), free(mlast);
  return rc;
}

int partition_pipedream(const partition_problem_t *p, int machines, partition_t *out) {
  return solve(p, machines, 0, out);
}

int partition_stages(const partition_problem_t *p, int stages, partition_t *out) {
  return solve(p, stages, 1, out);
}
