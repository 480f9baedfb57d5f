/* One configuration predicted: the model built as a worker builds it, the
 * strategy's step described (describe_step), each layer timed here at the
 * sample counts the step runs, the step simulated on the run's network,
 * and the figures a run's metrics carry, for the same command line. */
#include <stdlib.h>
#include <string.h>

#include "perf/partition.h"
#include "perf/perf.h"
#include "strategy/pipe/schedule.h"
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

/* The data set's shapes: the cache's, or read (and kept in the cache). */
static int data_shapes(const train_config_t *cfg, perf_cache_t *cache, perf_cache_t *out) {
  if (cache && cache->have_data && !strcmp(cache->data, cfg->data) && cache->seq_len == cfg->seq_len) {
    *out = *cache;
    return 0;
  }
  dataset_t data, test;
  DT_TRY(dataset_load_seq(cfg->data, 1, cfg->seed, cfg->seq_len, &data));
  if (dataset_load_seq(cfg->data, 0, cfg->seed, cfg->seq_len, &test) != 0) {
    dataset_free(&data);
    return -1;
  }
  out->nclasses = test.nclasses > data.nclasses ? test.nclasses : data.nclasses; /* as train_run */
  out->c = data.c, out->h = data.h, out->w = data.w, out->ntrain = data.n;
  out->have_data = 1, out->seq_len = cfg->seq_len;
  snprintf(out->data, sizeof out->data, "%s", cfg->data);
  dataset_free(&test);
  dataset_free(&data);
  if (cache) { /* the shapes; what it measured and the cluster it was given stay */
    perf_compute_t keep = cache->compute;
    const struct perf_cluster_file *cluster = cache->cluster;
    *cache = *out;
    cache->compute = keep, cache->cluster = cluster;
  }
  return 0;
}

static int build_model(const train_config_t *cfg, perf_cache_t *cache, size_t *ntrain,
                       model_t **m) {
  perf_cache_t shapes = {0};
  *m = NULL;
  DT_TRY(data_shapes(cfg, cache, &shapes));
  *ntrain = shapes.ntrain;
  model_spec_t spec;
  int rc = model_spec_load(cfg->model, &spec);
  if (rc == 0) {
    shape_t in = {shapes.c, shapes.h, shapes.w};
    spec.recompute = cfg->recompute; /* its segments: what the activation arena holds */
    rc = model_build(&spec, in, shapes.nclasses, cfg->batch, m);
    model_spec_free(&spec);
  }
  if (rc == 0) model_init_params(*m, cfg->seed);
  return rc;
}

void perf_cache_free(perf_cache_t *c) {
  perf_compute_free(&c->compute);
  *c = (perf_cache_t){0};
}

/* The data-parallel replicas: what a step's samples are counted over. */
static int replicas(const train_config_t *cfg) {
  int pp = cfg->pipe.stages > 1 ? cfg->pipe.stages : 1;
  int tp = cfg->tensor.ranks > 1 ? cfg->tensor.ranks : 1;
  int dp = cfg->workers / (pp * tp);
  return dp > 0 ? dp : 1;
}

/* The step beyond compute: a pipeline's bubble (Megatron's (P - 1)/(V M)
 * of the compute: Narayanan et al. 2021), the communication not hidden,
 * and waiting for other ranks, in that order from what is left. */
static void split_step(const train_config_t *cfg, perf_plan_t *p) {
  double rest = p->step_sec - p->compute_sec;
  if (rest < 0) rest = 0;
  int P = cfg->pipe.stages > 1 ? cfg->pipe.stages : 1, V = cfg->pipe.chunks > 1 ? cfg->pipe.chunks : 1;
  int M = cfg->pipe.micro_batches > 1 ? cfg->pipe.micro_batches : 1;
  p->bubble_sec = train_pipelined(cfg) ? p->compute_sec * (P - 1) / ((double)V * M) : 0;
  if (p->bubble_sec > rest) p->bubble_sec = rest;
  rest -= p->bubble_sec;
  p->exposed_sec = p->comm_sec < rest ? p->comm_sec : rest;
  p->waiting_sec = rest - p->exposed_sec;
}

/* The steps of an epoch, as a run counts them. */
static int64_t epoch_steps(const train_config_t *cfg, size_t ntrain) {
  int64_t steps = train_steps_per_epoch(cfg, ntrain, replicas(cfg));
  return cfg->max_steps > 0 && cfg->max_steps < steps ? cfg->max_steps : steps;
}

/* The parameter servers' async and SSP schedules: no worker waits for the
 * others' step (ssp:S with S >= 1 and no straggler runs as async does). */
static int ps_asynchronous(const train_config_t *cfg) {
  return cfg->exchange == EXCHANGE_PS &&
         (cfg->schedule == SCHEDULE_ASYNC || (cfg->schedule == SCHEDULE_SSP && cfg->schedule_param >= 1));
}

/* An asynchronous pipeline (PipeDream, 2BW, DDG): a stream whose units
 * cross steps, its step the steady one. */
static int pipe_stream(const train_config_t *cfg) {
  return cfg->pipe.stages > 1 && pipe_kind_async((pipe_kind_t)cfg->pipe.schedule);
}

/* The figures of a step simulated: what a run's metrics carry. */
static void fill_plan(const train_config_t *cfg, const strategy_t *s, const step_desc_t *d,
                      const perf_sim_t *sim, size_t ntrain, perf_plan_t *p) {
  int dp = replicas(cfg);
  int64_t steps = epoch_steps(cfg, ntrain);
  step_bytes_t b;
  step_rank_bytes(d, 0, &b);
  p->strategy = s->name;
  p->ranks = d->nranks;
  p->step_sec = sim->step_sec;
  p->samples_per_sec = sim->step_sec > 0 ? (double)cfg->batch * dp / sim->step_sec : 0;
  p->steps_per_epoch = steps;
  p->epoch_sec = sim->step_sec * (double)steps;
  p->bytes_sent = b.sent, p->bytes_received = b.received;
  p->exact = step_exact(d) && !b.expected;
  p->compute_sec = sim->compute_sec, p->comm_sec = sim->comm_sec;
  split_step(cfg, p);
  p->emulated = cfg->comm == COMM_LOCAL && comm_net_emulated(&cfg->net, d->nranks);
}

/* async and ssp:S on parameter servers: Yan et al.'s bounds, and the
 * expected staleness. N workers pulling every F batches and pushing every
 * P: a unit of time is a batch, the server takes N / P pushes a unit, and
 * a push at t units after its pull finds N t / P - 1 others applied since;
 * pushes fall at t = P, 2P, .. F, a mean of (F + P) / 2: N (F + P) / (2P)
 * - 1, N - 1 when F = P = 1 (measured here: 0.99 at N = 2, 2.96 at N = 4,
 * 4.93 at N = 4, F = 2). ssp:S with S >= 1 and no straggler runs as async
 * does (rule_ssp.c): the same expectation (measured: 2.23, 1.98, 2.94 at
 * N = 4 and S = 1, 2, 4; ssp:0 is sync, 0). */
static void asynchronous_bounds(const train_config_t *cfg, perf_plan_t *p) {
  if (!ps_asynchronous(cfg)) return;
  double N = cfg->workers, F = cfg->ps.fetch_every > 0 ? cfg->ps.fetch_every : 1;
  double P = cfg->ps.push_every > 0 ? cfg->ps.push_every : 1;
  p->asynchronous = 1;
  p->step_best_sec = p->compute_sec > p->comm_sec ? p->compute_sec : p->comm_sec;
  p->step_worst_sec = p->compute_sec + p->comm_sec;
  p->staleness_expected = N * (F + P) / (2 * P) - 1;
  if (p->staleness_expected < 0) p->staleness_expected = 0;
}

int perf_plan_json(const perf_plan_t *p, FILE *out) {
  fprintf(out,
          "{\"event\":\"plan\",\"strategy\":\"%s\",\"ranks\":%d,\"step_sec\":%.6g,"
          "\"samples_per_sec\":%.6g,\"epoch_sec\":%.6g,\"steps_per_epoch\":%lld,"
          "\"bytes_sent_per_step\":%.17g,\"bytes_received_per_step\":%.17g,\"exact\":%s,"
          "\"memory_bytes\":%.17g,\"compute_sec\":%.6g,\"comm_sec\":%.6g,\"emulated\":%s,"
          "\"profile\":\"%s\",\"background_load\":%.3g",
          p->strategy, p->ranks, p->step_sec, p->samples_per_sec, p->epoch_sec,
          (long long)p->steps_per_epoch, p->bytes_sent, p->bytes_received,
          p->exact ? "true" : "false", p->memory_bytes, p->compute_sec, p->comm_sec,
          p->emulated ? "true" : "false", p->calibrated ? "calibrated" : "estimated",
          p->background);
  if (p->asynchronous)
    fprintf(out, ",\"expected\":true,\"step_best_sec\":%.6g,\"step_worst_sec\":%.6g,"
                 "\"staleness_expected\":%.4g", p->step_best_sec, p->step_worst_sec, p->staleness_expected);
  if (p->stale_weights) fputs(",\"stale_weights\":true", out);
  fputc('}', out);
  return ferror(out) ? dt_error("writing the plan: write error") : 0;
}

/* Whether c holds a measurement of every size of sizes[0..n) for m. */
static int covers(const perf_compute_t *c, const model_t *m, const int *sizes, int n) {
  if (!c || c->nlayers != m->nlayers || !c->fwd) return 0;
  for (int k = 0; k < n; k++) {
    int found = 0;
    for (int q = 0; q < c->nsizes; q++) found |= c->size[q] == sizes[k];
    if (!found) return 0;
  }
  return 1;
}

/* The layers' times: the cache's where it has them all, else measured
 * (with the cache's sizes too, so that it keeps growing) into the cache. */
static int layer_times(model_t *m, const optim_config_t *oc, const int *sizes, int n,
                       perf_compute_t *cache, perf_compute_t *out) {
  if (covers(cache, m, sizes, n)) {
    *out = *cache;
    return 0;
  }
  int all[2 * PERF_MAX_SIZES], na = 0;
  for (int k = 0; k < n; k++) all[na++] = sizes[k];
  for (int q = 0; cache && cache->nlayers == m->nlayers && q < cache->nsizes && na < PERF_MAX_SIZES; q++)
    all[na++] = cache->size[q];
  DT_TRY(perf_compute_measure(m, oc, all, na, out));
  if (cache) {
    perf_compute_free(cache);
    *cache = *out;
  }
  return 0;
}

/* A pipeline's rank 0 (d: the step it runs): its chunks' layers (the
 * layers it runs forward), their largest micro-batch, as
 * perf_pipeline_memory_bytes takes them. */
static double pipeline_memory(const train_config_t *cfg, const model_t *m, const step_desc_t *d,
                              size_t ntrain) {
  unsigned char *own = calloc((size_t)m->nlayers + 1, 1);
  if (!own) return 0;
  int micro = 0;
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    if (t->rank != 0 || t->kind != TASK_FORWARD || t->layer < 0 || t->layer >= m->nlayers) continue;
    own[t->layer] = 1;
    if (t->samples > micro) micro = t->samples;
  }
  double bytes = perf_pipeline_memory_bytes(cfg, m, own, micro, ntrain);
  free(own);
  return bytes;
}

/* Rank 0's memory, of the model it builds: under --tp its blocks (only
 * the shapes are read: the link has no transport); in a pipeline, its
 * chunks'. */
static double rank_memory(const train_config_t *cfg, const model_t *m, const step_desc_t *d,
                          size_t ntrain) {
  if (train_pipelined(cfg) && cfg->pipe.stages > 1 && cfg->tensor.ranks <= 1)
    return pipeline_memory(cfg, m, d, ntrain);
  if (cfg->tensor.ranks <= 1) return perf_memory_bytes(cfg, m, ntrain);
  tp_link_t link = {.rank = 0, .size = cfg->tensor.ranks};
  model_t *tm;
  if (worker_build_model(cfg, m->input, m->nclasses, &link, NULL, &tm) != 0) {
    dt_error_clear();
    return perf_memory_bytes(cfg, m, ntrain);
  }
  double bytes = perf_memory_bytes(cfg, tm, ntrain);
  model_free(tm);
  return bytes;
}

int perf_predict(train_config_t *cfg, const perf_profile_t *prof, perf_cache_t *cache,
                 perf_plan_t *out) {
  *out = (perf_plan_t){.calibrated = prof->calibrated};
  if (strategy_prepare(cfg) != 0 || train_config_check(cfg) != 0) return -1;
  const strategy_t *s = strategy_select(cfg);
  if (!s) return -1;
  size_t ntrain = 0;
  model_t *m;
  DT_TRY(build_model(cfg, cache, &ntrain, &m));
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
  rc = layer_times(m, &cfg->optim, sizes, step_sizes(&d, sizes), cache ? &cache->compute : NULL, &pc);
  if (rc == 0 && prof->use_gemm_fit) perf_gemm_apply(&prof->gemm_fit, m, &pc); /* idempotent: the cache may share pc's times */
  if (rc == 0 && cfg->compression.codec.kind != CODEC_NONE) {
    compress_matrix_t *mats = calloc((size_t)m->ntensors + 1, sizeof *mats);
    if (mats) compress_model_matrices(m, mats);
    compress_config_t cc = worker_compress_config(cfg);
    rc = mats ? perf_codec_calibrate(&cc, m->nparams, mats, m->ntensors, &pc) : dt_error("out of memory");
    free(mats);
  }
  if (rc == 0)
    rc = cache && cache->cluster ? perf_cluster_from_file(cache->cluster, cfg, d.nranks, prof, &cl)
                                 : perf_cluster_from_config(cfg, d.nranks, prof, &cl);
  /* the epoch's own runs of what runs every E steps; async: steady steps */
  perf_sim_options_t so = {.shared_update = cfg->exchange == EXCHANGE_SHARED && cfg->schedule == SCHEDULE_SYNC,
                           .epoch_steps = epoch_steps(cfg, ntrain),
                           .steady_steps = ps_asynchronous(cfg) || pipe_stream(cfg) ? PERF_STEADY_STEPS : 0};
  if (rc == 0) rc = perf_simulate_with(&d, &pc, &cl, &so, &sim);
  if (rc == 0) {
    fill_plan(cfg, s, &d, &sim, ntrain, out);
    out->memory_bytes = rank_memory(cfg, m, &d, ntrain);
    out->background = cl.background;
    asynchronous_bounds(cfg, out);
    out->stale_weights = pipe_stream(cfg);
  }
  perf_cluster_free(&cl);
  if (!cache) perf_compute_free(&pc); /* else the cache holds it */
  step_desc_free(&d);
  model_free(m);
  return rc;
}

int perf_pipedream(train_config_t *cfg, perf_cache_t *cache, int machines, partition_t *out) {
  if (strategy_prepare(cfg) != 0 || train_config_check(cfg) != 0) return -1;
  size_t ntrain = 0;
  model_t *m;
  DT_TRY(build_model(cfg, cache, &ntrain, &m));
  int n = m->nlayers, size = cfg->batch;
  perf_compute_t pc = {0};
  double *sec = calloc((size_t)n, sizeof *sec), *act = calloc((size_t)n, sizeof *act);
  double *par = calloc((size_t)n, sizeof *par);
  int *can = calloc((size_t)n + 1, sizeof *can), *cuts = calloc((size_t)n + 1, sizeof *cuts);
  int rc = sec && act && par && can && cuts ? 0 : dt_error("out of memory");
  if (rc == 0) rc = layer_times(m, &cfg->optim, &size, 1, cache ? &cache->compute : NULL, &pc);
  for (int i = 0; rc == 0 && i < n; i++) {
    sec[i] = perf_layer_sec(&pc, i, size, 0) + perf_layer_sec(&pc, i, size, 1);
    act[i] = (double)shape_size(m->layers[i].out_shape) * size * sizeof(float);
    par[i] = (double)m->layers[i].param_len * sizeof(float);
  }
  for (int k = 0, nc = rc == 0 ? model_stage_cuts(m, cuts) : 0; k < nc; k++) can[cuts[k]] = 1;
  partition_problem_t p = {n, sec, act, par, can, cfg->net.bandwidth};
  if (rc == 0) rc = partition_pipedream(&p, machines, out);
  if (!cache) perf_compute_free(&pc);
  free(sec), free(act), free(par), free(can), free(cuts);
  model_free(m);
  return rc;
}
