/* Data parallelism (internal to src/strategy/): every rank holds the whole
 * model and trains on its slice of each step's batch; the gradients (or the
 * model) are combined by allreduce or through one shared arena. */
#ifndef DTRAIN_STRATEGY_DP_H
#define DTRAIN_STRATEGY_DP_H

#include "strategy/worker.h"

/* Synchronous data parallelism by allreduce of gradient buckets, with
 * overlap, priority order and ZeRO-1 sharding (data_parallel.c). */
int strategy_data_parallel(worker_t *w);
/* The synchronous epoch loop of data parallelism (data_parallel.c):
 * step(state, k) runs global step k of the epoch on this rank; test metrics
 * sharded over ranks, progress, reports. */
typedef int (*sync_step_fn)(void *state, int64_t k);
int sync_run_epochs(worker_t *w, sync_step_fn step, void *state);
/* Synchronous data parallelism through shared memory (local): one
 * parameter arena, each rank reduces and steps its block (shared_sync.c). */
int strategy_shared_sync(worker_t *w);
/* Hogwild: lock-free updates of one shared arena by worker threads (local). */
int strategy_hogwild(worker_t *w);
#endif
