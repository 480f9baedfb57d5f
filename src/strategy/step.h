/* step: one training step as data (FlexFlow's task graph), what a
 * strategy's describe_step returns: per rank, the compute of each layer
 * (forward, backward) and of the optimizer, and the communication tasks
 * with the bytes this rank sends and receives, their pattern and peers,
 * when each may start (after which task) and on which thread. The
 * performance model runs this graph; the byte tests sum its bytes and
 * compare them with the transport's count (one source of truth). */
#ifndef DTRAIN_STRATEGY_STEP_H
#define DTRAIN_STRATEGY_STEP_H

#include <stddef.h>
#include <stdio.h>

#include "dtrain/nn.h"

typedef enum { TASK_FORWARD, TASK_BACKWARD, TASK_UPDATE, TASK_COMM, TASK_SYNC } step_task_kind_t;
typedef enum { THREAD_COMPUTE, THREAD_COMM } step_thread_t;

typedef struct {
  step_task_kind_t kind;
  int rank;
  int layer;              /* compute: the layer (-1: the whole model); comm: -1 */
  size_t params;          /* compute: the layer's parameters; update: the parameters stepped */
  int samples;            /* compute: the samples it runs on */
  const char *pattern;    /* comm: "allreduce", "send", "recv", ... (static strings) */
  const char *algo;       /* comm: the collective's algorithm ("ring"), or NULL */
  int peer;               /* comm: the other rank of a message (-1: a collective) */
  int group;              /* comm: the ranks of the collective (2 for a message) */
  double sent, received;  /* comm: this rank's bytes on the wire */
  int every;              /* runs once every this many steps (1: every step) */
  step_thread_t thread;
  int after;              /* the task it waits for (-1: the step's start); with
                           * its thread's previous task, what it waits for */
} step_task_t;

typedef struct {
  int nranks;
  step_task_t *task;
  int ntasks, cap;
} step_desc_t;

void step_desc_init(step_desc_t *d, int nranks);
void step_desc_free(step_desc_t *d);
#define STEP_FAILED (-2)
/* Appends t; returns its index, or STEP_FAILED (out of memory, error set). */
int step_add(step_desc_t *d, step_task_t t);
/* One replica's forward and backward of every layer of m on `samples`,
 * for `rank`, in order; bwd (m->nlayers entries, or NULL) gets each
 * layer's backward task. Returns the last task, or STEP_FAILED. */
int step_add_passes(step_desc_t *d, const model_t *m, int rank, int samples, int *bwd);
/* The groups a rank's layers sum over themselves (layer_sum_t): tensor
 * parallelism's and synchronized batch norm's, each with its size, this
 * rank's place in it and its allreduce (step_allreduce_algo's). */
typedef struct {
  int size, rank, algo;
} step_group_t;
typedef struct {
  step_group_t tp, bn;
} step_groups_t;
/* Layer i's forward (backward 0) or backward on `samples` for `rank`,
 * after task `after`, then the collectives it calls itself
 * (model_layer_sums: first and range_dx as it takes them) over g's
 * groups, each after the one before. *compute (if given) gets the layer's
 * own task. Returns the last task added, or STEP_FAILED. */
int step_add_layer(step_desc_t *d, const model_t *m, int rank, int i, int samples, int backward,
                   int first, int range_dx, const step_groups_t *g, int after, int *compute);
/* step_add_passes of a model whose layers sum over g's groups (NULL:
 * none do): each layer by step_add_layer. */
int step_add_passes_summed(step_desc_t *d, const model_t *m, int rank, int samples,
                           const step_groups_t *g, int *bwd);
/* A replica's local step: its passes (step_add_passes, bwd NULL) and the
 * optimizer's update after them. Returns the update, or STEP_FAILED. */
int step_add_local_step(step_desc_t *d, const model_t *m, int rank, int samples);
/* The algorithm an allreduce over P ranks runs with --exchange
 * allreduce:ALGO: auto on 2 ranks is rhd (allreduce_auto.c); auto on more,
 * and hier, are picked at run time from the hosts and the link, which a
 * description does not know: -1 with one line. */
int step_allreduce_algo(int algo, int P, int *out);
/* One allreduce of `count` floats by `algo` over `group` ranks, on world
 * rank `rank` (`group_rank` within the group), after task `after`, every
 * `every` steps. Returns its index or STEP_FAILED. */
int step_add_allreduce(step_desc_t *d, int rank, int group_rank, int group, int algo, size_t count,
                       int after, step_thread_t thread, int every);
/* Half a ring allreduce of `count` floats over `group` ranks: the
 * reduce-scatter (gather 0) or the allgather (1), bytes from
 * coll_reduce_scatter_bytes or coll_allgather_bytes. Returns its index or
 * STEP_FAILED. */
int step_add_ring_half(step_desc_t *d, int rank, int group_rank, int group, int gather,
                       size_t count, int after, step_thread_t thread);
/* A rank's bytes per step, averaged over the tasks' periods. */
void step_rank_bytes(const step_desc_t *d, int rank, double *sent, double *received);
/* The description as one JSON object (bytes per rank, then the tasks). */
int step_desc_json(const step_desc_t *d, const char *strategy, FILE *out);
#endif
