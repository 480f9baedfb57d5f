/* The gradient reducer seam (reducer.c): how a step's gradients are summed
 * over the ranks of synchronous data parallelism and the update applied.
 * One step: hooks = reducer_begin_step; backprop with the hooks (they start
 * buckets as they become ready, and under priority order apply the last
 * step's buckets in the forward pass); reducer_wait; reducer_apply.
 * Overlap, priority order and ZeRO-1 sharding are modes of it;
 * compression (codec, error-feedback memory, collective) is a stage of it. */
#ifndef DTRAIN_STRATEGY_DP_REDUCER_H
#define DTRAIN_STRATEGY_DP_REDUCER_H

#include "strategy/worker.h"

typedef struct reducer reducer_t;

/* A bucket: whole layers' gradients, [off, off + len) of the arena,
 * complete once first_layer's backward has run. */
typedef struct {
  size_t off, len;
  int first_layer;
} reducer_bucket_t;
/* PyTorch DDP's rule (reducer.c) into out (room for m->nlayers + 1):
 * returns the number of buckets, in the order backprop readies them. */
int reducer_plan_buckets(const model_t *m, const train_config_t *cfg, reducer_bucket_t *out);
/* --sufficient-factors (a bucket a layer): whether the layer of `first_layer`
 * goes as its factors over `nranks` ranks, a dense layer where they are
 * fewer bytes than its gradient (sfb_gains at the configured batch); its
 * inputs and outputs in *in, *out. */
int reducer_sends_factors(const model_t *m, const train_config_t *cfg, int nranks, int first_layer,
                          size_t *in, size_t *out);
/* --comm-order priority's cut of a bucket of len floats into parts of at
 * most --partition-kb: the length of the part that starts at `done`, 0
 * past the end. */
size_t reducer_part_len(const train_config_t *cfg, size_t len, size_t done);

/* Plans the buckets (and the shard, the priority order) for w's model. */
int reducer_new(worker_t *w, reducer_t **out);
void reducer_free(reducer_t *r);
/* A new step of `count` samples on this rank: the hooks for worker_compute_gradient (ready starts buckets;
 * wait, under priority order, applies the last step's). Pass them only
 * when reducer_overlaps. */
step_hooks_t reducer_begin_step(reducer_t *r, int count);
int reducer_overlaps(const reducer_t *r);
/* Priority order: the update is left to the next forward pass. */
int reducer_defers(const reducer_t *r);
/* The step's gradients summed over ranks (what is left of them after
 * overlap; nothing under priority order, whose waits are in the forward
 * pass). Fails if a wait in the forward pass failed. */
int reducer_wait(reducer_t *r);
/* The update of step k (of its epoch) applied: whole, sharded then
 * gathered, or under priority order begun (and finished at an epoch's or
 * the run's last step). */
int reducer_apply(reducer_t *r, int64_t k);
/* --compress: the epoch's compression figures as JSON fields (without
 * braces) for the metrics line; empty without compression. */
void reducer_compress_json(reducer_t *r, const epoch_report_t *rep, char *buf, size_t cap);
#endif
