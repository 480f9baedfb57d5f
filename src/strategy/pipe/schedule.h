/* Pipeline schedules as data (DeepSpeed's design): for each stage, the
 * list of instructions of one training step over M micro-batches. One
 * engine (pipeline.c) executes them on the stage seam (nn/stage.c); GPipe
 * and 1F1B differ only in the list their generator writes.
 *
 * Deadlock freedom: sends never block (isend; the engine waits for them
 * at the end of the step), and every receive is matched: stage s sends the
 * activations of micro-batches in increasing order and stage s + 1
 * receives them in that order; gradients likewise between s + 1 and s.
 * A receive can then only wait for an instruction that comes earlier in
 * the global order F(s, m) -> F(s+1, m), B(s+1, m) -> B(s, m), F(P-1, m) ->
 * B(P-1, m), which has no cycle since every generator keeps, on each
 * stage, each micro-batch's forward before its backward, and forwards
 * (and backwards) in micro-batch order. pipe_schedule_check verifies
 * these properties for a schedule. */
#ifndef DTRAIN_STRATEGY_PIPE_SCHEDULE_H
#define DTRAIN_STRATEGY_PIPE_SCHEDULE_H

#include <stdio.h>

typedef enum {
  PIPE_LOAD,        /* stage 0: gather micro-batch mb's samples */
  PIPE_RECV_ACT,    /* receive mb's input activation from stage s - 1 */
  PIPE_FORWARD,     /* forward mb through the stage (the last: and its loss) */
  PIPE_SEND_ACT,    /* send mb's output activation to stage s + 1 */
  PIPE_RECV_GRAD,   /* receive the gradient of mb's output from stage s + 1 */
  PIPE_BACKWARD,    /* backward mb, summing the stage's parameter gradients */
  PIPE_SEND_GRAD,   /* send the gradient of mb's input to stage s - 1 */
  PIPE_REDUCE,      /* sum the stage's gradients over the data-parallel replicas */
  PIPE_STEP,        /* the optimizer step on the stage's parameters */
  PIPE_OP_COUNT
} pipe_op_t;

typedef struct {
  pipe_op_t op;
  int mb;           /* micro-batch, or -1 (REDUCE, STEP) */
} pipe_instr_t;

typedef enum { PIPE_GPIPE, PIPE_1F1B, PIPE_KIND_COUNT } pipe_kind_t;

typedef struct {
  pipe_kind_t kind;
  int P, M;
  int *len;               /* instructions of each stage */
  pipe_instr_t **prog;    /* prog[s][i] */
} pipe_schedule_t;

const char *pipe_kind_name(pipe_kind_t k);
int pipe_kind_parse(const char *name, pipe_kind_t *out);
/* The instructions of one step of P stages over M micro-batches. */
int pipe_schedule_build(pipe_kind_t kind, int P, int M, pipe_schedule_t *out);
void pipe_schedule_free(pipe_schedule_t *s);
/* 0 when the schedule is well formed (each micro-batch loaded, received,
 * forwarded, sent, backwarded once, in that order on its stage; sends
 * matched by receives in the same order; one REDUCE and STEP at the end;
 * micro-batch ids in range); -1 with the first fault named. */
int pipe_schedule_check(const pipe_schedule_t *s);
/* The most micro-batches whose activations stage s holds at once. */
int pipe_schedule_peak_live(const pipe_schedule_t *s, int stage);
/* One line per stage ("F0 F1 B0 ..."), for tests and --help. */
void pipe_schedule_print(const pipe_schedule_t *s, FILE *f);
#endif
