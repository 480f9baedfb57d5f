/* Pipeline parallelism (internal to src/strategy/): the model's layers
 * split into --pp stages, one rank each, a step's batch into
 * --micro-batches micro-batches run through the stages by a schedule
 * (schedule.h); workers = dp x pp, the dp replicas of each stage summing
 * their gradients by allreduce. */
#ifndef DTRAIN_STRATEGY_PIPE_H
#define DTRAIN_STRATEGY_PIPE_H

#include "strategy/pipe/schedule.h"
#include "strategy/strategy.h"

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
/* 1 when --partition lists the first layers (not balanced, not macs). */
int pipe_partition_listed(const train_config_t *c);
/* first[0 .. G]: the model cut into G = pp x V chunks by --partition's
 * list, or by layer_sec (each layer's seconds; NULL: multiply-adds);
 * first[G] = nlayers. pipe_check_model has refused what does not fit. */
int pipe_partition(const train_config_t *c, const model_t *m, const double *layer_sec, int *first);
/* Each layer's forward + backward seconds on one micro-batch of `micro`
 * samples (profile.c); the model's buffers are left as they were. */
int pipe_profile_layers(model_t *m, int micro, uint64_t seed, double *sec);
/* The strategy: this rank's stage of its replica, on the engine of its
 * schedule (engine.h). */
int strategy_pipeline(worker_t *w);
/* The step as data (describe.c): the schedule's instructions as tasks. */
int pipe_describe_step(const train_config_t *cfg, const model_t *m, step_desc_t *out);
#endif
