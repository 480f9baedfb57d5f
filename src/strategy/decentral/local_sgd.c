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
 * evaluated is the plain mean of the replicas.
 *
 * --compress CODEC: what goes on the wire is each replica's change since
 * the last average (the anchor), compressed (src/compress/: the codec, its
 * error-feedback memory, its exchange), as in Qsparse-local-SGD (Basu et
 * al. 2019):  w <- anchor + sum_i (n_i / N) C(w_i - anchor);  anchor <- w. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

typedef struct {
  decentral_t *d;
  size_t samples, global;   /* since the last average: this worker's, all workers' */
  int64_t averages;
  compressor_t *cx;         /* --compress, else NULL */
  float *anchor, *delta;    /* --compress: the last average; this replica's change */
  compress_matrix_t *mats;
} local_sgd_t;

/* --compress: the replicas' changes since the anchor, compressed and
 * summed, make the new average. */
static int average_compressed(local_sgd_t *s, float share) {
  worker_t *w = s->d->w;
  model_t *m = w->model;
  for (size_t i = 0; i < m->nparams; i++) s->delta[i] = share * (m->params[i] - s->anchor[i]);
  if (compressor_allreduce(s->cx, w->coll, s->delta, 0, m->nparams, w->step, 0, s->mats,
                           m->ntensors) != 0)
    return -1;
  for (size_t i = 0; i < m->nparams; i++) m->params[i] = s->anchor[i] += s->delta[i];
  return 0;
}

static int average_replicas(local_sgd_t *s) {
  decentral_t *d = s->d;
  worker_t *w = d->w;
  model_t *m = w->model;
  double t0 = dt_now();
  float share = s->global ? (float)((double)s->samples / (double)s->global)
                          : 1.0f / (float)d->nworkers;
  if (s->cx) {
    if (average_compressed(s, share) != 0) return -1;
  } else {
    kern_scale(m->nparams, share, m->params);
    if (d->nworkers > 1 && allreduce(w->coll, d->algo, m->params, m->nparams) != 0) return -1;
  }
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
  return d->w->step % d->w->cfg->decentral.tau == 0 ? average_replicas(s) : 0;
}

static int mean_params(decentral_t *d, float *out) {
  if (decentral_weighted_sum(d, 1.0f / (float)d->nworkers, out) != 0) return -1;
  return 0;
}

static int extra_json(decentral_t *d, char *buf, size_t cap) {
  local_sgd_t *s = d->method;
  snprintf(buf, cap, ",\"tau\":%d,\"averages\":%lld", d->w->cfg->decentral.tau, (long long)s->averages);
  return 0;
}

/* The average's allreduce: through the master (SparkNet) its rank 0. */
static allreduce_algo_t average_algo(const train_config_t *cfg) {
  return cfg->exchange == EXCHANGE_MASTER ? ALLREDUCE_NAIVE : cfg->algo;
}

/* --compress: the compressor of the averages (no warm-up: every average
 * goes compressed). */
static compress_config_t average_compress(const train_config_t *cfg, allreduce_algo_t algo) {
  return (compress_config_t){.codec = cfg->compression.codec, .seed = cfg->seed, .algo = algo,
                             .error_feedback = train_error_feedback(cfg)};
}

static int setup(decentral_t *d) {
  local_sgd_t *s = d->method;
  const train_config_t *cfg = d->w->cfg;
  const model_t *m = d->w->model;
  s->d = d;
  d->algo = average_algo(cfg);
  if (cfg->compression.codec.kind == CODEC_NONE || d->nworkers == 1) return 0;
  compress_config_t cc = average_compress(cfg, d->algo);
  if (!(s->anchor = dt_alloc_floats(m->nparams)) || !(s->delta = dt_alloc_floats(m->nparams)))
    return -1;
  if (!(s->mats = calloc((size_t)m->ntensors + 1, sizeof *s->mats))) return dt_error("out of memory");
  compress_model_matrices(m, s->mats);
  memcpy(s->anchor, m->params, m->nparams * sizeof *s->anchor); /* the replicas start equal */
  return compressor_new(&cc, m->nparams, d->w->rank, d->nworkers, &s->cx);
}

static const decentral_ops_t LOCAL_SGD = {
    .consensus = "average", .setup = setup, .step = step, .consensus_params = mean_params,
    .extra_json = extra_json};

int strategy_local_sgd(worker_t *w) {
  local_sgd_t s = {0};
  int rc = decentral_strategy(w, &LOCAL_SGD, 0, &s);
  compressor_free(s.cx);
  dt_free(s.anchor), dt_free(s.delta);
  free(s.mats);
  return rc;
}

/* tau local steps, then the replicas averaged: an allreduce of the model
 * (and of the batch-norm statistics) every tau steps -- through the
 * master, SparkNet, as the naive algorithm's rank 0. Under --compress the
 * model's change goes through the compressor (compress_exchange_bytes). */
static int local_sgd_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int P = c->workers, algo;
  DT_TRY(step_allreduce_algo(average_algo(c), P, &algo));
  compress_config_t cc = average_compress(c, (allreduce_algo_t)algo);
  compress_matrix_t *mats = calloc((size_t)m->ntensors + 1, sizeof *mats);
  if (!mats) return dt_error("out of memory");
  compress_model_matrices(m, mats);
  step_buffer_t model = {&cc, 0, m->nparams, mats, m->ntensors};
  int rc = 0;
  for (int r = 0; r < P && rc == 0; r++) {
    int prev = step_add_local_step(out, m, r, c->batch);
    if (prev != STEP_FAILED && P > 1)
      prev = c->compression.codec.kind != CODEC_NONE
                 ? step_add_compressed(out, r, r, P, &model, 0, 0, prev, THREAD_COMPUTE, c->decentral.tau)
                 : step_add_allreduce(out, r, r, P, 1, algo, m->nparams, prev, THREAD_COMPUTE, c->decentral.tau);
    if (prev != STEP_FAILED && P > 1 && m->nbuffers)
      prev = step_add_allreduce(out, r, r, P, 1, algo, m->nbuffers, prev, THREAD_COMPUTE, c->decentral.tau);
    if (prev == STEP_FAILED) rc = -1;
  }
  free(mats);
  return rc;
}

static int averaging_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC);
}

static int sparknet_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_MASTER, SCHEDULE_SYNC) && !elastic_given(c);
}

const strategy_t STRATEGY_LOCAL_SGD = {
    .name = "model averaging (local SGD)",
    .paper = "Zinkevich et al. 2010; Stich 2019, Local SGD converges fast and communicates little",
    .axes = "allreduce:* + sync",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_AVERAGES,
    .matches = averaging_matches,
    .run = strategy_local_sgd,
    .describe_step = local_sgd_describe_step,
};

const strategy_t STRATEGY_SPARKNET = {
    .name = "model averaging through a master (SparkNet)",
    .paper = "Moritz et al. 2016, SparkNet",
    .axes = "master + sync",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_AVERAGES,
    .matches = sparknet_matches,
    .run = strategy_local_sgd,
    .describe_step = local_sgd_describe_step,
};
