/* Data parallelism (internal to src/strategy/): every rank holds the whole
 * model and trains on its slice of each step's batch; the gradients (or the
 * model) are combined by allreduce or through one shared arena. */
#ifndef DTRAIN_STRATEGY_DP_H
#define DTRAIN_STRATEGY_DP_H

#include "strategy/strategy.h"

/* Synchronous data parallelism by allreduce of gradient buckets, with
 * overlap, priority order and ZeRO-1 sharding (data_parallel.c). */
int strategy_data_parallel(worker_t *w);
/* The evaluation of synchronous data parallelism (the driver's evaluate
 * hook): test metrics on a shard of the test set per rank, train figures
 * summed over ranks, and under --balance the epoch's split (written to
 * split, cap bytes) as the report's extra fields. */
int dp_evaluate(worker_t *w, epoch_report_t *r, char *split, size_t cap);
/* Synchronous data parallelism through shared memory (local): one
 * parameter arena, each rank reduces and steps its block (shared_sync.c). */
int strategy_shared_sync(worker_t *w);
/* Hogwild: lock-free updates of one shared arena by worker threads (local). */
int strategy_hogwild(worker_t *w);
#endif
