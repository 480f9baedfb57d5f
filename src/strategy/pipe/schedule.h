/* Pipeline schedules as data (DeepSpeed's design): for each rank, the
 * list of instructions of one training step over M micro-batches. The
 * engine (engine.h: its core, with sync.c or async.c) executes them on the
 * stage seam (nn/stage.c); the schedules differ only in the list their
 * generator writes.
 *
 * Chunks: a rank holds V model chunks (virtual stages); chunk v of rank s
 * is the model's stage v P + s of P V, so activations go round the ranks
 * V times (interleaved 1F1B); V = 1 for every other schedule.
 *
 * Synchronous schedules (gpipe, 1f1b, interleaved) are one step each,
 * ending with REDUCE, STEP (a flush). Asynchronous ones (pipedream, 2bw,
 * ddg) stream units (micro-batches) through the stages across steps:
 * step j forwards units j M .. j M + M - 1 and, on stage s, backwards the
 * units d = P - 1 - s behind them (1F1B without a flush), with REDUCE,
 * STEP after the backwards that complete an update; pipe_async_drain
 * ends an epoch with the backwards still in flight.
 *
 * Deadlock freedom: sends never block (isend; the engine waits for them
 * when the step ends), and each receive is matched: on the channel from
 * chunk g to chunk g + 1 (one tag each), activations are received in the
 * order they are sent, gradients likewise back. A receive can then only
 * wait for a send earlier in the dependency order F(g, m) -> F(g+1, m),
 * B(g+1, m) -> B(g, m), F(last, m) -> B(last, m). pipe_schedule_check
 * verifies the orders and then runs every rank's list on a simulated
 * network (a receive proceeds once its send has run) to the end: a
 * schedule that could hang fails the check. */
#ifndef DTRAIN_STRATEGY_PIPE_SCHEDULE_H
#define DTRAIN_STRATEGY_PIPE_SCHEDULE_H

#include <stdio.h>

typedef enum {
  PIPE_LOAD,        /* the first chunk: gather micro-batch mb's samples */
  PIPE_RECV_ACT,    /* receive mb's input activation from the chunk before */
  PIPE_FORWARD,     /* forward mb through the chunk (the last: and its loss) */
  PIPE_SEND_ACT,    /* send mb's output activation to the next chunk */
  PIPE_RECV_GRAD,   /* receive the gradient of mb's output from the next chunk */
  PIPE_BACKWARD,    /* backward mb, summing the chunk's parameter gradients */
  PIPE_SEND_GRAD,   /* send the gradient of mb's input to the chunk before */
  PIPE_REDUCE,      /* sum the rank's gradients over the data-parallel replicas */
  PIPE_STEP,        /* the optimizer step on the rank's parameters */
  PIPE_OP_COUNT
} pipe_op_t;

typedef struct {
  pipe_op_t op;
  int mb;           /* micro-batch (a unit of the stream, asynchronous), or -1 */
  int chunk;        /* the rank's chunk, 0 .. V - 1 */
} pipe_instr_t;

typedef enum {
  PIPE_GPIPE, PIPE_1F1B, PIPE_INTERLEAVED, PIPE_PIPEDREAM, PIPE_2BW, PIPE_DDG, PIPE_KIND_COUNT
} pipe_kind_t;

typedef struct {
  pipe_kind_t kind;
  int P, V, M;            /* ranks, chunks per rank, micro-batches per step */
  int steps, units;       /* asynchronous: steps generated, units streamed (steps x M) */
  int *len;               /* instructions of each rank */
  pipe_instr_t **prog;    /* prog[s][i] */
} pipe_schedule_t;

const char *pipe_kind_name(pipe_kind_t k);
/* "gpipe", "1f1b", "interleaved:V", "pipedream", "2bw", "ddg"; *V = 1
 * except interleaved's. */
int pipe_kind_parse(const char *name, pipe_kind_t *out, int *V);
/* 1 for the schedules that update without a flush. */
int pipe_kind_async(pipe_kind_t k);
/* The micro-batch counts a schedule runs with P stages, or -1 with one
 * line naming --micro-batches and what works. */
int pipe_kind_check_m(pipe_kind_t k, int P, int M);
/* A synchronous schedule: the instructions of one step of P ranks with V
 * chunks each over M micro-batches. An asynchronous one: `steps` steps
 * and the drain, as one list per rank (for the checker and tests). */
int pipe_schedule_build(pipe_kind_t kind, int P, int V, int M, int steps, pipe_schedule_t *out);
void pipe_schedule_free(pipe_schedule_t *s);
/* Asynchronous schedules, one rank's instructions: step j (units j M ..),
 * and the drain after `steps` steps. `out` has room for
 * pipe_async_max_len(M) instructions; returns how many were written. */
int pipe_async_step(pipe_kind_t kind, int P, int M, int s, int j, pipe_instr_t *out);
int pipe_async_drain(pipe_kind_t kind, int P, int M, int s, int steps, pipe_instr_t *out);
int pipe_async_max_len(int P, int M);
/* 0 when the schedule is well formed (each micro-batch loaded or
 * received, forwarded, sent, backwarded once per chunk, in that order;
 * sends matched by receives in the same order on each channel; REDUCE
 * then STEP, at the end for a synchronous schedule; ids in range) and
 * runs to its end on a simulated network; -1 with the first fault named. */
int pipe_schedule_check(const pipe_schedule_t *s);
/* The most (chunk, micro-batch) activation sets rank s holds at once. */
int pipe_schedule_peak_live(const pipe_schedule_t *s, int stage);
/* Time steps of the simulated run with a forward or backward of a chunk
 * taking one unit and messages free, and of them the ones rank s idles
 * (the bubble of equal chunks). */
int pipe_schedule_simulate(const pipe_schedule_t *s, int *total, int *idle_rank0);
/* One line per rank ("F0 F1 B0 ...", chunk v > 0 as F0.1), for tests. */
void pipe_schedule_print(const pipe_schedule_t *s, FILE *f);
#endif
