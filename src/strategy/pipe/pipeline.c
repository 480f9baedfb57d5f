/* Pipeline parallelism, the strategy (pipe.h): its options checked up
 * front (--pp, --micro-batches, --pipe-schedule, --partition and workers =
 * dp x pp), then against the model; the partition of the model into
 * chunks; and the engine that runs a configuration: the flush schedules
 * on sync.c's, the stream of PipeDream, 2BW and DDG on async.c's, both
 * over the shared core (engine.h). */
#include <stdlib.h>
#include <string.h>

#include "perf/partition.h"
#include "strategy/pipe/engine.h"

int pipe_partition_parse(const char *text, int *first, int cap) {
  int n = 0;
  long prev = -1;
  const char *p = text;
  for (;;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > 1000000 || (*end && *end != ','))
      return dt_error("option --partition: '%s' (expected balanced, or the first layer of each "
                      "stage, increasing from 0: e.g. 0,3,5)", text);
    if ((n == 0 && v != 0) || v <= prev)
      return dt_error("option --partition: '%s': stages start at layers increasing from 0 "
                      "(e.g. 0,3,5)", text);
    if (first && n < cap) first[n] = (int)v;
    n++, prev = v;
    if (!*end) return n;
    p = end + 1;
  }
}

int pipe_check_world(const train_config_t *c) {
  /* With --tp the grid is dp x pp x tp: the tensor family's check names
   * the whole product. A multiple of pp alone (--workers 2 for --pp 2
   * --tp 2) would be refused next. */
  if (!train_pipelined(c) || c->tensor.ranks > 1 || c->workers % c->pipe.stages == 0) return 0;
  if (c->comm == COMM_MPI)
    return dt_error("mpirun -np %d and --pp %d: workers = dp x pp, so -np must be a multiple of "
                    "--pp (e.g. mpirun -np %d for dp = 1)", c->workers, c->pipe.stages, c->pipe.stages);
  return dt_error("options --workers %d and --pp %d: workers = dp x pp, so --workers must be a "
                  "multiple of --pp (e.g. --workers %d for dp = 1)", c->workers, c->pipe.stages, c->pipe.stages);
}

int pipe_check(const train_config_t *c) {
  if (!train_pipelined(c)) return 0;
  if (c->optimization != OPTIMIZATION_CENTRAL || c->exchange != EXCHANGE_ALLREDUCE ||
      c->schedule != SCHEDULE_SYNC)
    return dt_error("option --pp %d / --micro-batches %d: pipelines run with --optimization "
                    "central --schedule sync --exchange allreduce:ALGO (the replicas of a stage "
                    "sum gradients by allreduce)", c->pipe.stages, c->pipe.micro_batches);
  if (c->comm != COMM_MPI && pipe_check_world(c) != 0) return -1;
  if (c->batch % c->pipe.micro_batches != 0)
    return dt_error("options --batch %d and --micro-batches %d: a micro-batch is batch / M "
                    "samples; give a batch that M divides (e.g. --batch %d)", c->batch,
                    c->pipe.micro_batches, (c->batch / c->pipe.micro_batches + 1) * c->pipe.micro_batches);
  if (c->shard_optimizer || c->balance || c->comm_order == COLL_ORDER_PRIORITY)
    return dt_error("option --pp / --micro-batches does not combine with %s (a stage steps its "
                    "own layers, whole)", c->shard_optimizer ? "--shard-optimizer on"
                    : c->balance ? "--balance on" : "--comm-order priority");
  pipe_kind_t kind = (pipe_kind_t)c->pipe.schedule;
  if (kind == PIPE_INTERLEAVED && c->pipe.stages < 2 && c->pipe.chunks > 1)
    return dt_error("option --pipe-schedule interleaved:%d: the chunks go round the ranks, so it "
                    "needs --pp 2 or more", c->pipe.chunks);
  if (pipe_kind_check_m(kind, c->pipe.stages, c->pipe.micro_batches) != 0) return -1;
  int chunks = c->pipe.stages * c->pipe.chunks;
  int n = pipe_partition_listed(c) ? pipe_partition_parse(c->pipe.partition, NULL, 0) : chunks;
  if (n < 0) return -1;
  if (n != chunks)
    return dt_error("options --partition %s and --pp %d%s: the partition names %d stage%s (give %d)",
                    c->pipe.partition, c->pipe.stages, c->pipe.chunks > 1 ? " with interleaved chunks" : "", n,
                    n == 1 ? "" : "s", chunks);
  return 0;
}

/* A head tied to the embedding on another stage shares the table between
 * two stages (tied.c), which only the flush schedules can: with P > 1 the
 * embedding starts the first stage and the head ends the last. */
static int check_tied_head(const train_config_t *c, const model_t *m) {
  if (c->pipe.stages <= 1 || !pipe_kind_async((pipe_kind_t)c->pipe.schedule)) return 0;
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i].spec.kind == LAYER_LMHEAD && m->layers[i].spec.tie)
      return dt_error("option --pipe-schedule: the head (layer %d) is tied to the embedding (layer "
                      "%d) on another stage, and only gpipe, 1f1b and interleaved:V share the table "
                      "between stages (use one of them, or untie the head)", i, m->layers[i].spec.tie - 1);
  return 0;
}

int pipe_check_model(const train_config_t *c, const model_t *m) {
  if (!train_pipelined(c)) return 0;
  DT_TRY(check_tied_head(c, m));
  int P = c->pipe.stages, V = c->pipe.chunks, G = P * V, most = 1024;
  if (m->nlayers > most)
    return dt_error("pipeline: %d layers (at most %d)", m->nlayers, most);
  if (pipe_partition_listed(c)) {
    int *first = malloc((size_t)G * sizeof *first);
    if (!first) return dt_error("out of memory");
    int rc = 0;
    if (pipe_partition_parse(c->pipe.partition, first, G) == G && first[G - 1] >= m->nlayers) /* else pipe_check's */
      rc = dt_error("option --partition %s: the model has %d layer%s (0..%d)", c->pipe.partition,
                    m->nlayers, m->nlayers == 1 ? "" : "s", m->nlayers - 1);
    free(first);
    return rc;
  }
  int *cuts = malloc((size_t)m->nlayers * sizeof *cuts + 1);
  if (!cuts) return dt_error("out of memory");
  int n = model_stage_cuts(m, cuts) + 1;
  free(cuts);
  if (G <= n) return 0;
  if (V > 1)
    return dt_error("options --pp %d and --pipe-schedule interleaved:%d: %d chunks, but the model "
                    "has %d layer%s that can start one (at most --pp x V = %d)", P, V, G, n,
                    n == 1 ? "" : "s", n);
  return dt_error("option --pp %d: the model has %d layer%s that can start a stage (at most "
                  "--pp %d)", P, n, n == 1 ? "" : "s", n);
}

int pipe_partition_listed(const train_config_t *c) {
  return c->pipe.partition[0] && strcmp(c->pipe.partition, "macs") != 0;
}

/* --partition balanced: PipeDream's dynamic program (perf/partition.c)
 * over the measured times, one machine a stage (the grid replicates whole
 * pipelines), with its transfer term 2 a / B on --net's bandwidth: a cut
 * where a large activation crosses a slow link costs what it sends. */
static int partition_balanced(const train_config_t *c, const model_t *m, const double *sec,
                              int G, int *first) {
  int n = m->nlayers, micro = c->batch / (c->pipe.micro_batches > 0 ? c->pipe.micro_batches : 1);
  double *act = malloc((size_t)n * sizeof *act);
  int *can = calloc((size_t)n + 1, sizeof *can), *cuts = malloc((size_t)n * sizeof *cuts);
  int rc = act && can && cuts ? 0 : dt_error("out of memory");
  for (int i = 0; rc == 0 && i < n; i++)
    act[i] = (double)shape_size(m->layers[i].out_shape) * (micro > 0 ? micro : 1) * sizeof(float);
  for (int k = 0, nc = rc == 0 ? model_stage_cuts(m, cuts) : 0; k < nc; k++) can[cuts[k]] = 1;
  partition_problem_t p = {n, sec, act, NULL, can, c->comm == COMM_LOCAL ? c->net.bandwidth : 0};
  partition_t part;
  if (rc == 0 && G > PARTITION_MAX_STAGES) rc = model_split_costs(m, G, sec, first); /* past the DP's table */
  else if (rc == 0 && (rc = partition_stages(&p, G, &part)) == 0)
    for (int k = 0; k < G; k++) first[k] = part.first[k];
  free(act), free(can), free(cuts);
  return rc;
}

int pipe_partition(const train_config_t *c, const model_t *m, const double *layer_sec, int *first) {
  int G = c->pipe.stages * c->pipe.chunks;
  if (pipe_partition_listed(c)) pipe_partition_parse(c->pipe.partition, first, G);
  else if (layer_sec) DT_TRY(partition_balanced(c, m, layer_sec, G, first));
  else DT_TRY(model_split_costs(m, G, NULL, first));
  first[G] = m->nlayers;
  return 0;
}

int strategy_pipeline(worker_t *w) {
  return pipe_kind_async((pipe_kind_t)w->cfg->pipe.schedule) ? pipe_async_run(w) : pipe_sync_run(w);
}

static int pipeline_matches(const train_config_t *c) {
  return train_axes(c, OPTIMIZATION_CENTRAL, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC) &&
         train_pipelined(c) && !c->tensor.conv_data;
}

const strategy_t STRATEGY_PIPELINE = {
    .name = "pipeline parallelism",
    .paper = "Huang et al. 2019 (GPipe); Narayanan et al. 2019, 2021 (PipeDream, 2BW)",
    .axes = "--schedule sync --exchange allreduce:ALGO --pp P",
    .optimization = OPTIMIZATION_CENTRAL,
    .compress = COMPRESS_GRADIENTS,
    .matches = pipeline_matches,
    .run = strategy_pipeline,
    .describe_step = pipe_describe_step,
};
