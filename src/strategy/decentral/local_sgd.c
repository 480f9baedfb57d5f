/* Model averaging (SparkNet, Moritz et al. 2016; local SGD, Stich 2019):
 * every worker takes tau optimizer steps on its own replica, then the
 * replicas are replaced by their average,
 *
 *   w <- sum_i (n_i / N) w_i
 *
 * n_i being the samples worker i trained on since the last average and N
 * their sum (n_i / N = 1/p except in an epoch's short last step). With
 * --exchange master the average goes through rank 0 (gather, broadcast:
 * SparkNet's driver); with --exchange allreduce:ALGO, through that
 * allreduce. With tau = 1 and plain SGD on mean gradients this is
 * synchronous data parallelism: sum_i (n_i/N)(w - lr g_i) = w - lr sum_i
 * (n_i/N) g_i, the gradient of the global batch (equal up to float
 * rounding, as the sums are taken in another order). Optimizer state
 * (momentum) stays per replica. Between averages, the consensus
 * evaluated is the plain mean of the replicas. */
#include <stdio.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

typedef struct {
  decentral_t *d;
  size_t samples, global;   /* since the last average: this worker's, all workers' */
  int64_t averages;
} local_sgd_t;

static int average_replicas(local_sgd_t *s) {
  decentral_t *d = s->d;
  worker_t *w = d->w;
  model_t *m = w->model;
  double t0 = dt_now();
  float share = s->global ? (float)((double)s->samples / (double)s->global)
                          : 1.0f / (float)d->nworkers;
  kern_scale(m->nparams, share, m->params);
  if (d->nworkers > 1 && allreduce(w->coll, d->algo, m->params, m->nparams) != 0) return -1;
  if (m->nbuffers) { /* batch-norm statistics: plain mean */
    kern_scale(m->nbuffers, 1.0f / (float)d->nworkers, m->buffers);
    if (d->nworkers > 1 && allreduce(w->coll, d->algo, m->buffers, m->nbuffers) != 0) return -1;
  }
  s->samples = s->global = 0;
  s->averages++;
  worker_comm_since(w, t0);
  return 0;
}

static int step(decentral_t *d, int64_t k) {
  local_sgd_t *s = d->method;
  size_t count, global;
  if (decentral_local_step(d, k, &count, &global) != 0) return -1;
  s->samples += count;
  s->global += global;
  return d->w->step % d->w->cfg->tau == 0 ? average_replicas(s) : 0;
}

static int mean_params(decentral_t *d, float *out) {
  if (decentral_weighted_sum(d, 1.0f / (float)d->nworkers, out) != 0) return -1;
  return 0;
}

static int extra_json(decentral_t *d, char *buf, size_t cap) {
  local_sgd_t *s = d->method;
  snprintf(buf, cap, ",\"tau\":%d,\"averages\":%lld", d->w->cfg->tau, (long long)s->averages);
  return 0;
}

static int setup(decentral_t *d) {
  local_sgd_t *s = d->method;
  s->d = d;
  d->algo = d->w->cfg->exchange == EXCHANGE_MASTER ? ALLREDUCE_NAIVE : d->w->cfg->algo;
  return 0;
}

static const decentral_ops_t LOCAL_SGD = {
    .consensus = "average", .setup = setup, .step = step, .consensus_params = mean_params,
    .extra_json = extra_json};

int strategy_local_sgd(worker_t *w) {
  local_sgd_t s = {0};
  return decentral_strategy(w, &LOCAL_SGD, 0, &s);
}
