/* step: one training step as data (FlexFlow's task graph), what a
 * strategy's describe_step returns: per rank, the compute of each layer
 * (forward, backward) and of the optimizer, and the communication tasks
 * with the bytes this rank sends and receives, their pattern and peers,
 * when each may start (after which task) and on which thread. The
 * performance model runs this graph; the byte tests sum its bytes and
 * compare them with the transport's count (one source of truth).
 *
 * One step, and which: a task runs every `every` steps, and only in its
 * range of steps [from, until) (until 0: from `from` on). A warm-up
 * (--compress-warmup-steps: dense steps, DGC's ramp) is tasks that end at
 * its last step beside the steady state's tasks that start there; the
 * steady state is the step past every warm-up, what "bytes_per_step"
 * gives, and "warmup_bytes" the warm-up's totals. */
#ifndef DTRAIN_STRATEGY_STEP_H
#define DTRAIN_STRATEGY_STEP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/comm.h"
#include "dtrain/compress.h"
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
  size_t count;           /* comm: a collective's floats (its S / 4; 0: not a collective of
                           * step.c's), what the performance model times it by */
  size_t coded;           /* comm: the values a compressed exchange encodes (0: none), what
                           * the performance model charges the codec's time for */
  int every;              /* runs once every this many steps (1: every step) */
  step_thread_t thread;
  int after;              /* the task it waits for (-1: the step's start); with
                           * its thread's previous task, what it waits for */
  int64_t from, until;    /* the steps it runs in: [from, until); until 0: from on */
  int bounded;            /* comm: the bytes depend on the values (threshold:T): sent and
                           * received are the most, sent_min and received_min the least */
  double sent_min, received_min;
  /* A task whose runs are not fixed is `expected`: a coin decides them
   * (GoSGD), or message timing (AD-PSGD's replies), or a shared pool of
   * batches (the parameter servers' async schedules). Its sent and
   * received are one run's, `chance` its mean runs a step where due (a
   * probability, or a share among peers; step_add makes 0 into 1), and the
   * bytes per step built from it are a mean, which a byte test can check
   * only against the runs counted. */
  int expected;
  double chance;
  /* Runs once an epoch, after its last step (a drain's end counts), not
   * per step: in the epoch's bytes (step_rank_epoch_bytes), not the step's. */
  int per_epoch;
  /* comm: which of the collectives of its pattern and size this is (0: the
   * one every rank of the step joins; hier's phases: one per host inside,
   * one per index across), so that the simulator matches only its own */
  int color;
  /* comm, a receive: its message is its peer's `lag` messages before its
   * place in the order (a stream across steps: an asynchronous pipeline's
   * gradient, sent in the step before for the step's first unit) */
  int lag;
} step_task_t;

/* What allreduce:auto and :hier decide from, as the run's communicator
 * sees it (coll_ctx.c): each rank's host, the link auto reads, the
 * segment in floats, and whether ranks outnumber cores. Filled by
 * step_desc_set_topology; without it (host NULL) auto over more than 2
 * ranks and hier are not described. */
typedef struct {
  int *host, nhosts;
  double latency, bandwidth;
  size_t seg;
  int oversubscribed;
} step_topology_t;

typedef struct {
  int nranks;
  step_task_t *task;
  int ntasks, cap;
  step_topology_t topo;
} step_desc_t;

void step_desc_init(step_desc_t *d, int nranks);
/* d's topology for a run on this machine with transport `mpi` (0: local)
 * and the network net (its hosts and links; mpi: one host unless net
 * names hosts, as under mpirun here), `cores` the machine's. */
int step_desc_set_topology(step_desc_t *d, const comm_net_t *net, int mpi, int cores);
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
  int color;              /* its collectives' color (STEP_TP_COLOR, STEP_REPLICA_COLOR; 0: the
                           * only group) */
  int stride;             /* world ranks between two members (0 or 1: adjacent, as a tp
                           * group's; T: the replicas of a tp rank) */
} step_group_t;
/* A group's own color (step_task_t.color), from its kind and its lowest
 * world rank, where groups of one size are several (the tp groups of each
 * stage and replica, the replicas' sums of each stage or tp rank): the
 * simulator then matches a group's collectives with its own members' only.
 * The kind keeps apart two groups with one lowest rank (rank 0's tp group
 * {0, 1} and its replicas' {0, 2} under dp 2 x tp 2). Apart from hier's
 * colors (1 + a host, an index). */
#define STEP_TP_COLOR(lowest) ((1 << 16) + (lowest))      /* a tensor-parallel group */
#define STEP_REPLICA_COLOR(lowest) ((2 << 16) + (lowest)) /* the replicas of a block or stage */
/* The collectives added since task `from` that have no color get `color`. */
void step_color_since(step_desc_t *d, int from, int color);
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
 * allreduce:ALGO: auto on 2 ranks is rhd (allreduce_auto.c); auto on more
 * stays auto, decided per allreduce by step_add_allreduce from its size
 * and the topology, as the run decides it. */
int step_allreduce_algo(int algo, int P, int *out);
/* One allreduce of `count` floats by `algo` over `group` ranks, on world
 * rank `rank` (`group_rank` within the group), after task `after`, every
 * `every` steps. The members are world ranks `stride` apart (1: adjacent;
 * rank - group_rank stride is the first). auto is decided as
 * allreduce_choose decides it (the members' hosts, the link and the
 * segment); hier is its phases (allreduce_hier.c: the folds, the ring
 * inside a host, the flat allreduce across, the ring again) over the
 * members' hosts, numbered as the run's communicator numbers them.
 * Returns its index (its last task's) or STEP_FAILED. */
int step_add_allreduce(step_desc_t *d, int rank, int group_rank, int group, int stride, int algo,
                       size_t count, int after, step_thread_t thread, int every);
/* --clip-grad-norm's sums of the squared norm (worker.c global_sumsq): a
 * ring allreduce of one float over the tensor-parallel group (T ranks,
 * rank tp_rank in it) and then over the pipeline's stages (P, this rank
 * stage), each where the group has more than one rank, after `after`.
 * Returns the last or `after`, or STEP_FAILED. */
int step_add_clip_sums(step_desc_t *d, int rank, int tp_rank, int T, int stage, int P, int after);
/* Half a ring allreduce of `count` floats over `group` ranks: the
 * reduce-scatter (gather 0) or the allgather (1), bytes from
 * coll_reduce_scatter_bytes or coll_allgather_bytes. Returns its index or
 * STEP_FAILED. */
int step_add_ring_half(step_desc_t *d, int rank, int group_rank, int group, int gather,
                       size_t count, int after, step_thread_t thread);
/* One binomial-tree broadcast (reduce 0) or reduce (1) of `count` floats
 * over `group` ranks from/to `root`, on rank `rank` (its rank in the group
 * too), after task `after`, every `every` steps. Returns its index or
 * STEP_FAILED. */
int step_add_tree(step_desc_t *d, int rank, int reduce, int group, int root, size_t count,
                  int after, step_thread_t thread, int every);
/* A buffer the compressor sums: [off, off + len) of the arena, the
 * matrices in it, the compressor's configuration. */
typedef struct {
  const compress_config_t *cc;
  size_t off, len;
  const compress_matrix_t *mats;
  int nmats;
} step_buffer_t;
/* One compressor_allreduce of b over `group` ranks, on world rank `rank`
 * (`group_rank` within the group), at the steps [from, until)
 * (compress_phase_end: the warm-up's phases) every `every` steps, after
 * task `after`: its bytes from compress_exchange_bytes at step `from`.
 * Returns its index or STEP_FAILED. */
int step_add_compressed(step_desc_t *d, int rank, int group_rank, int group, const step_buffer_t *b,
                        int64_t from, int64_t until, int after, step_thread_t thread, int every);
/* A rank's bytes: the most, and the least (the same where exact);
 * expected when some of them are a mean (expected tasks), not a count. */
typedef struct {
  double sent, received, sent_min, received_min;
  int expected;
} step_bytes_t;
/* Per step past every warm-up (the tasks without an end), averaged over
 * the tasks' periods and, for expected tasks, weighted by their chance;
 * the per_epoch tasks are not in it. */
void step_rank_bytes(const step_desc_t *d, int rank, step_bytes_t *out);
/* A rank's bytes once an epoch (the per_epoch tasks). */
void step_rank_epoch_bytes(const step_desc_t *d, int rank, double *sent, double *received);
/* In all over steps [0, steps): each task at the steps of its range where
 * it runs, (k + 1) % every == 0 (after every `every` local steps). */
void step_rank_bytes_over(const step_desc_t *d, int rank, int64_t steps, step_bytes_t *out);
/* The steps before the steady state: where the last warm-up task ends. */
int64_t step_warmup_steps(const step_desc_t *d);
/* Whether every task's bytes are exact (none bounded). */
int step_exact(const step_desc_t *d);
/* The description as one JSON object: "exact", the bytes per rank per
 * step ("bytes_per_step"; "sent_min", "received_min" where not exact;
 * "expected": true where they are a mean) and per epoch
 * ("bytes_per_epoch"), the warm-up's ("warmup_steps", "warmup_bytes":
 * totals over them) if any, then the tasks (an expected one with
 * "expected": true and its "chance"). */
int step_desc_json(const step_desc_t *d, const char *strategy, FILE *out);
#endif
