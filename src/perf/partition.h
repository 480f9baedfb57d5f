/* PipeDream's partition (Narayanan et al. 2019, sec. 3.1): a model's
 * layers cut into pipeline stages by dynamic programming, each stage
 * possibly replicated over several machines. Pure arithmetic over a
 * profile (each layer's time, output activation and parameters), so the
 * search (perf/search.c) and the pipeline engine's `--partition balanced`
 * (strategy/pipe/pipeline.c) cut by the same rule. */
#ifndef DTRAIN_PERF_PARTITION_H
#define DTRAIN_PERF_PARTITION_H

#define PARTITION_MAX_STAGES 64

typedef struct {
  int nlayers;
  const double *sec;          /* [nlayers] forward + backward seconds of a layer, one machine */
  const double *out_bytes;    /* [nlayers] or NULL: layer i's output activation bytes (a cut
                               * after i sends it forward and its gradient back: 2 a / B) */
  const double *param_bytes;  /* [nlayers] or NULL: layer i's parameter bytes (a replicated
                               * stage synchronises them) */
  const int *can_start;       /* [nlayers] or NULL: nonzero where a stage may start (layer 0
                               * always can) */
  double bandwidth;           /* bytes a second between machines; 0: unlimited */
} partition_problem_t;

typedef struct partition_s {
  int stages;
  int first[PARTITION_MAX_STAGES + 1]; /* stage k holds layers [first[k], first[k + 1]) */
  int replicas[PARTITION_MAX_STAGES];  /* machines running stage k */
  double slowest;             /* the pipeline's time a step: its slowest stage or transfer */
} partition_t;

/* T(i -> j, m): layers [i, j) as one stage on m machines, PipeDream's
 * (1/m) max(compute, weight synchronisation); the synchronisation is a
 * ring allreduce's 2 (m - 1)/m |w| / B (dtrain's replicas allreduce;
 * PipeDream's parameter server has 4 (m - 1)/m). */
double partition_stage_sec(const partition_problem_t *p, int i, int j, int m);
/* The transfer at a cut before layer i: 2 a_{i-1} / B. */
double partition_transfer_sec(const partition_problem_t *p, int i);
/* A partition's time: the largest of its stages' and cuts' times. */
double partition_cost(const partition_problem_t *p, const partition_t *part);
/* PipeDream's A(j, m) over `machines` machines: any number of stages,
 * each replicated any number of times, the slowest stage or transfer
 * least (ties: the first found -- one stage, then the earliest cut). */
int partition_pipedream(const partition_problem_t *p, int machines, partition_t *out);
/* Exactly `stages` stages, one machine each (the engine's dp x pp grid
 * replicates the whole pipeline instead): the same recurrence with m' = 1. */
int partition_stages(const partition_problem_t *p, int stages, partition_t *out);

#endif
