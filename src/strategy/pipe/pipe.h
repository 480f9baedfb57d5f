/* Pipeline parallelism (internal to src/strategy/): the model's layers
 * split into --pp stages, one rank each, a step's batch into
 * --micro-batches micro-batches run through the stages by a schedule
 * (schedule.h); workers = dp x pp, the dp replicas of each stage summing
 * their gradients by allreduce. */
#ifndef DTRAIN_STRATEGY_PIPE_H
#define DTRAIN_STRATEGY_PIPE_H

#include "strategy/pipe/schedule.h"
#include "strategy/strategy.h"

/* 1 when the configuration asks for a pipeline (--pp > 1 or
 * --micro-batches > 1). */
/* Values and combinations of --pp, --micro-batches, --pipe-schedule,
 * --partition, and --workers = dp x pp. */
int pipe_check(const train_config_t *cfg);
/* The checks that need the model: --pp x V chunks at most the layers that
 * can start one, a --partition list within its layers. Run before the
 * ranks start (train_check_model) and again by each rank's setup. */
int pipe_check_model(const train_config_t *cfg, const model_t *m);
/* Under mpi, once -np has fixed the workers: dp x pp = workers. */
int pipe_check_world(const train_config_t *cfg);
/* "0,3,5": the first layer of each stage, strictly increasing from 0.
 * Returns how many (writing at most cap into first when first != NULL),
 * or -1 with one line naming the option. */
int pipe_partition_parse(const char *text, int *first, int cap);
/* Each layer's forward + backward seconds on one micro-batch of `micro`
 * samples (profile.c); the model's buffers are left as they were. */
int pipe_profile_layers(model_t *m, int micro, uint64_t seed, double *sec);
/* The strategy: this rank's stage of its replica. */
int strategy_pipeline(worker_t *w);
/* The step as data (describe.c): the schedule's instructions as tasks. */
int pipe_describe_step(const train_config_t *cfg, const model_t *m, step_desc_t *out);
#endif
