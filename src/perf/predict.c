/* One configuration predicted: the model built as a worker builds it, the
 * strategy's step described (describe_step), each layer timed here at the
 * sample counts the step runs, the step simulated on the run's network,
 * and the figures a run's metrics carry, for the same command line. */
#include <stdlib.h>

#include "perf/perf.h"
#include "strategy/strategy.h"
#include "strategy/worker.h"

/* The distinct sample counts of the step's compute tasks (micro-batches). */
static int step_sizes(const step_desc_t *d, int *sizes) {
  int n = 0;
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    if ((t->kind != TASK_FORWARD && t->kind != TASK_BACKWARD) || t->samples < 1) continue;
    int seen = 0;
    for (int k = 0; k < n; k++) seen |= sizes[k] == t->samples;
    if (!seen && n < PERF_MAX_SIZES) sizes[n++] = t->samples;
  }
  return n;
}

static int build_model(const train_config_t *cfg, size_t *ntrain, model_t **m) {
  dataset_t data, test;
  *m = NULL;
  DT_TRY(dataset_load(cfg->data, 1, cfg->seed, &data));
  if (dataset_load(cfg->data, 0, cfg->seed, &test) != 0) {
    dataset_free(&data);
    return -1;
  }
  int nclasses = test.nclasses > data.nclasses ? test.nclasses : data.nclasses; /* as train_run */
  dataset_free(&test);
  *ntrain = data.n;
  model_spec_t spec;
  int rc = model_spec_load(cfg->model, &spec);
  if (rc == 0) {
    shape_t in = {data.c, data.h, data.w};
    rc = model_build(&spec, in, nclasses, cfg->batch, m);
    model_spec_free(&spec);
  }
  dataset_free(&data);
  if (rc == 0) model_init_params(*m, cfg->seed);
  return rc;
}

/* The data-parallel replicas: what a step's samples are counted over. */
static int replicas(const train_config_t *cfg) {
  int pp = cfg->pipe.stages > 1 ? cfg->pipe.stages : 1;
  int tp = cfg->tensor.ranks > 1 ? cfg->tensor.ranks : 1;
  int dp = cfg->workers / (pp * tp);
  return dp > 0 ? dp : 1;
}

static int emit(const train_config_t *cfg, const strategy_t *s, const step_desc_t *d,
                const perf_sim_t *sim, const perf_profile_t *prof, size_t ntrain, double memory,
                double background, FILE *out) {
  int dp = replicas(cfg);
  int64_t steps = train_steps_per_epoch(cfg, ntrain, dp);
  if (cfg->max_steps > 0 && cfg->max_steps < steps) steps = cfg->max_steps;
  step_bytes_t b;
  step_rank_bytes(d, 0, &b);
  double global = (double)cfg->batch * dp;
  fprintf(out,
          "{\"event\":\"plan\",\"strategy\":\"%s\",\"ranks\":%d,\"step_sec\":%.6g,"
          "\"samples_per_sec\":%.6g,\"epoch_sec\":%.6g,\"steps_per_epoch\":%lld,"
          "\"bytes_sent_per_step\":%.17g,\"bytes_received_per_step\":%.17g,\"exact\":%s,"
          "\"memory_bytes\":%.17g,\"compute_sec\":%.6g,\"comm_sec\":%.6g,\"emulated\":%s,"
          "\"profile\":\"%s\",\"background_load\":%.3g}\n",
          s->name, d->nranks, sim->step_sec, sim->step_sec > 0 ? global / sim->step_sec : 0,
          sim->step_sec * (double)steps, (long long)steps, b.sent, b.received,
          step_exact(d) && !b.expected ? "true" : "false", memory, sim->compute_sec, sim->comm_sec,
          cfg->comm == COMM_LOCAL && comm_net_emulated(&cfg->net, d->nranks) ? "true" : "false",
          prof->calibrated ? "calibrated" : "estimated", background);
  return ferror(out) ? dt_error("writing the plan: write error") : 0;
}

int perf_predict(train_config_t *cfg, const perf_profile_t *prof, FILE *out) {
  if (strategy_prepare(cfg) != 0 || train_config_check(cfg) != 0) return -1;
  const strategy_t *s = strategy_select(cfg);
  if (!s) return -1;
  size_t ntrain = 0;
  model_t *m;
  DT_TRY(build_model(cfg, &ntrain, &m));
  step_desc_t d;
  int rc = strategy_describe(cfg, m, &d), sizes[PERF_MAX_SIZES];
  if (rc != 0) {
    model_free(m);
    return -1;
  }
  perf_compute_t pc = {0};
  perf_cluster_t cl = {0};
  perf_sim_t sim;
  kern_set_threads(cfg->threads);
  rc = perf_compute_measure(m, &cfg->optim, sizes, step_sizes(&d, sizes), &pc);
  if (rc == 0 && cfg->compression.codec.kind != CODEC_NONE)
    rc = perf_codec_measure(&cfg->compression.codec, train_error_feedback(cfg), m->nparams, &pc);
  if (rc == 0) rc = perf_cluster_from_config(cfg, d.nranks, prof, &cl);
  int shared = cfg->exchange == EXCHANGE_SHARED && cfg->schedule == SCHEDULE_SYNC;
  if (rc == 0) rc = perf_simulate(&d, &pc, &cl, shared, &sim);
  if (rc == 0) rc = emit(cfg, s, &d, &sim, prof, ntrain, perf_memory_bytes(cfg, m, ntrain),
                       cl.background, out);
  perf_cluster_free(&cl);
  perf_compute_free(&pc);
  step_desc_free(&d);
  model_free(m);
  return rc;
}
