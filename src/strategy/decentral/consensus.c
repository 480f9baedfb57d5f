/* The driver of the decentralized methods (decentral.h): epochs of
 * per-replica steps, and at every evaluation the consensus model the
 * method defines, evaluated, reported and checkpointed in place of the
 * replica, with the spread of the replicas around it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

/* Under mpi the number of workers comes from -np; it must agree with
 * --workers when that was given. */
static int count_workers(decentral_t *d, int masters) {
  const train_config_t *cfg = d->w->cfg;
  int size = comm_size(d->w->comm);
  d->nworkers = size - masters;
  if (d->nworkers < 1)
    return dt_error("this method needs %d master rank(s) plus at least one worker: run "
                    "mpirun -np %d or more", masters, masters + 1);
  if (cfg->comm == COMM_MPI && cfg->workers > 1 && cfg->workers != d->nworkers)
    return dt_error("option --workers %d: mpirun started %d ranks but this method needs %d "
                    "(%d workers + %d master); run mpirun -np %d, or drop --workers",
                    cfg->workers, size, cfg->workers + masters, cfg->workers, masters,
                    cfg->workers + masters);
  return 0;
}

static int decentral_init(decentral_t *d, worker_t *w, const decentral_ops_t *ops, int masters,
                   void *method) {
  memset(d, 0, sizeof *d);
  d->w = w;
  d->ops = ops;
  d->method = method;
  /* The consensus is the evaluation's sum, not training traffic: a fixed
   * algorithm, so its bits are the same on local and mpi. auto picks by the
   * transport's link estimate, which differ (D-PSGD on 7 ranks: local's
   * mean 7e-9 off mpi's). Local SGD's averages set their own (setup). */
  d->algo = ALLREDUCE_RING;
  if (count_workers(d, masters) != 0) return -1;
  d->is_worker = comm_rank(w->comm) < d->nworkers;
  worker_plan_steps(w, d->nworkers);
  size_t nb = w->model->nbuffers;
  d->consensus = dt_alloc_floats(w->model->nparams + nb);
  d->replica = dt_alloc_floats(w->model->nparams + nb);
  return d->consensus && d->replica ? 0 : -1;
}

static void decentral_free(decentral_t *d) {
  dt_free(d->consensus);
  dt_free(d->replica);
  d->consensus = d->replica = NULL;
}

int decentral_gradient(decentral_t *d, int64_t k, size_t *count, size_t *global) {
  size_t begin, all;
  worker_step_slice(d->w, k, &begin, count, &all);
  if (global) *global = all;
  return worker_compute_gradient(d->w, begin, *count, *count ? (int)*count : 1, NULL);
}

int decentral_local_step(decentral_t *d, int64_t k, size_t *count, size_t *global) {
  if (decentral_gradient(d, k, count, global) != 0) return -1;
  worker_apply_update(d->w);
  return 0;
}

int decentral_weighted_sum(decentral_t *d, float scale, float *out) {
  model_t *m = d->w->model;
  if (d->is_worker) {
    kern_copy(m->nparams, m->params, out);
    kern_scale(m->nparams, scale, out);
  } else {
    kern_zero(m->nparams, out);
  }
  if (comm_size(d->w->comm) == 1) return 0;
  return allreduce(d->w->coll, d->algo, out, m->nparams);
}

int decentral_sum_doubles(decentral_t *d, const double *mine, int n, double *sums) {
  int P = comm_size(d->w->comm), me = comm_rank(d->w->comm);
  size_t per = 2 * (size_t)n; /* floats that hold n doubles */
  float *all = calloc((size_t)P * per, sizeof *all);
  if (!all) return dt_error("out of memory");
  memcpy(all + (size_t)me * per, mine, (size_t)n * sizeof(double));
  int rc = P > 1 ? allgather_ring(d->w->coll, all, (size_t)P * per) : 0;
  for (int j = 0; j < n; j++) sums[j] = 0;
  for (int r = 0; r < P && rc == 0; r++) {
    double v[8];
    memcpy(v, all + (size_t)r * per, (size_t)n * sizeof(double));
    for (int j = 0; j < n; j++) sums[j] += v[j];
  }
  free(all);
  return rc;
}

int decentral_broadcast_params(decentral_t *d, int root, float *out) {
  model_t *m = d->w->model;
  if (comm_rank(d->w->comm) == root) kern_copy(m->nparams, m->params, out);
  return broadcast_tree(d->w->coll, root, out, m->nparams);
}

/* Buffers (batch-norm statistics) of the consensus: the workers' mean. */
static int average_buffers(decentral_t *d, float *out) {
  model_t *m = d->w->model;
  if (!m->nbuffers) return 0;
  if (d->is_worker) kern_copy(m->nbuffers, m->buffers, out);
  else kern_zero(m->nbuffers, out);
  if (comm_size(d->w->comm) > 1 && allreduce(d->w->coll, d->algo, out, m->nbuffers) != 0)
    return -1;
  kern_scale(m->nbuffers, 1.0f / (float)d->nworkers, out);
  return 0;
}

static double distance(size_t n, const float *a, const float *b) {
  double s = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)a[i] - (double)b[i];
    s += e * e;
  }
  return sqrt(s);
}

/* Puts the consensus (params, then buffers) in place of the replica, or
 * the replica back. */
static void swap_in(decentral_t *d, int consensus) {
  model_t *m = d->w->model;
  size_t np = m->nparams, nb = m->nbuffers;
  if (consensus) {
    kern_copy(np, m->params, d->replica);
    kern_copy(nb, m->buffers, d->replica + np);
    kern_copy(np, d->consensus, m->params);
    kern_copy(nb, d->consensus + np, m->buffers);
  } else {
    kern_copy(np, d->replica, m->params);
    kern_copy(nb, d->replica + np, m->buffers);
  }
}

/* The consensus on a shard of the test set per rank; the epoch's train
 * sums and the replicas' distances to the consensus in one allreduce. The
 * consensus stays in place for the report (after_report puts the replica
 * back). */
static int evaluate_consensus(void *st, epoch_report_t *r) {
  decentral_t *d = st;
  worker_t *w = d->w;
  model_t *m = w->model;
  char *extra = d->extra;
  size_t cap = sizeof d->extra;
  if (d->ops->consensus_params(d, d->consensus) != 0) return -1;
  if (average_buffers(d, d->consensus + m->nparams) != 0) return -1;
  float dist = d->is_worker ? (float)distance(m->nparams, m->params, d->consensus) : 0;
  int n = snprintf(extra, cap, "\"consensus\":\"%s\"", d->ops->consensus);
  if (d->ops->extra_json && d->ops->extra_json(d, extra + n, cap - (size_t)n) != 0) return -1;
  swap_in(d, 1);
  d->swapped = 1;
  if (worker_epoch_figures(w, r, &dist, 1) != 0) return -1;
  n = (int)strlen(extra);
  snprintf(extra + n, cap - (size_t)n, ",\"replica_spread\":%.6g", dist / d->nworkers);
  r->extra_json = extra;
  return 0;
}

static void replica_back(void *st) {
  decentral_t *d = st;
  if (d->swapped) swap_in(d, 0);
  d->swapped = 0;
}

static int method_step(void *st, int epoch, int64_t k) {
  decentral_t *d = st;
  DT_TRY(worker_stopped(d->w)); /* a master computes no gradient: it checks here */
  return d->ops->step(d, k);
}

static int before_eval(void *st, int epoch) {
  decentral_t *d = st;
  return d->ops->before_eval ? d->ops->before_eval(d) : 0;
}

int decentral_strategy(worker_t *w, const decentral_ops_t *ops, int masters, void *method) {
  decentral_t d;
  int rc = decentral_init(&d, w, ops, masters, method);
  if (rc == 0 && ops->setup) rc = ops->setup(&d);
  driver_ops_t run = {.step = method_step, .end_epoch = before_eval,
                      .evaluate = evaluate_consensus, .after_report = replica_back};
  if (rc == 0) rc = driver_run(w, &run, &d);
  replica_back(&d); /* an evaluation that failed half-way */
  if (ops->teardown) ops->teardown(&d);
  decentral_free(&d);
  return rc;
}

/* Values of the decentralized options that no method accepts. The
 * elastic coefficients are checked once more by EASGD and TreeEASGD with
 * the real number of workers (under mpi it comes from -np). */
int decentral_check(const train_config_t *c) {
  double alpha, beta, gamma;
  int p = 1;
  int mpca = c->optimization == OPTIMIZATION_DECENTRAL && c->schedule == SCHEDULE_SOFT;
  if (mpca && c->decentral.alpha > 0)
    return dt_error("option --alpha: MPCA-SGD's pull is its penalty --rho (and the centre's "
                    "rate --beta)");
  if (mpca && mpca_coefficients(c, &alpha, &beta, &gamma) != 0) return -1;
  if (c->optimization == OPTIMIZATION_DECENTRAL && c->exchange == EXCHANGE_TREE) p = c->decentral.tree_fanout;
  else if (decentral_extra_ranks(c)) p = c->workers;
  if (!mpca && (c->decentral.alpha > 0 || c->decentral.beta > 0 || c->decentral.rho > 0) &&
      elastic_coefficients(c, p, &alpha, &beta) != 0)
    return -1;
  const int *periods[2] = {c->decentral.tau_up, c->decentral.tau_down};
  int nperiods[2] = {c->decentral.tau_up_levels, c->decentral.tau_down_levels};
  for (int i = 0; i < 2; i++) { /* the parser gives these; a library caller may not */
    if (nperiods[i] < 1 || nperiods[i] > TREE_LEVELS_MAX)
      return dt_error("option --%s: %d periods (expected 1 to %d, one a level of the tree)",
                      i ? "tau-down" : "tau-up", nperiods[i], TREE_LEVELS_MAX);
    for (int l = 0; l < nperiods[i]; l++)
      if (periods[i][l] < 1)
        return dt_error("option --%s: period %d of level %d (expected at least 1 step)",
                        i ? "tau-down" : "tau-up", periods[i][l], l + 1);
  }
  if (c->optimization == OPTIMIZATION_DECENTRAL && c->exchange == EXCHANGE_TREE && c->decentral.tree_fanout < 1)
    return dt_error("option --exchange tree:F: fan-out %d (expected at least 1)", c->decentral.tree_fanout);
  if (!(c->decentral.neighbor_weight >= 0 && c->decentral.neighbor_weight <= 0.5))
    return dt_error("option --neighbor-weight: %g (expected 0 <= W <= 1/2, the self weight "
                    "being 1 - 2W)", c->decentral.neighbor_weight);
  return 0;
}
