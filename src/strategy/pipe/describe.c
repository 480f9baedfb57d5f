/* The pipeline's step as data: the instruction lists the engine runs
 * (schedule.c), each turned into tasks -- a chunk's forward and backward
 * per layer on its micro-batch, each activation and gradient message with
 * its bytes (micro-batch samples x the chunk's input or output size) and
 * its peer, and the replicas' allreduce of each chunk's gradients at
 * REDUCE. Ranks follow the grid (grid.h: stages outermost). */
#include <stdlib.h>

#include "strategy/grid.h"
#include "strategy/pipe/pipe.h"

typedef struct {
  const train_config_t *c;
  const model_t *m;
  int P, V, dp;
  int *first;                 /* [G + 1]: chunk g's first layer; first[G] = nlayers */
  allreduce_algo_t algo;      /* the replicas' sum */
  step_desc_t *out;
} pipe_desc_t;

static size_t floats_of(shape_t s) { return (size_t)s.c * s.h * s.w; }
static size_t chunk_in(const pipe_desc_t *d, int g) { return floats_of(d->m->layers[d->first[g]].in_shape); }
static size_t chunk_out(const pipe_desc_t *d, int g) { return floats_of(d->m->layers[d->first[g + 1] - 1].out_shape); }

static size_t chunk_params(const pipe_desc_t *d, int g) {
  size_t n = 0;
  for (int i = d->first[g]; i < d->first[g + 1]; i++) n += d->m->layers[i].param_len;
  return n;
}

static int rank_of(const pipe_desc_t *d, int replica, int stage) {
  int coord[GRID_AXES] = {replica, stage, 0};
  return rank_grid_rank(d->dp, d->P, 1, coord);
}

/* The partition the engine would use, where it does not depend on
 * measured times. */
static int plan_chunks(pipe_desc_t *d) {
  int G = d->P * d->V;
  if (G > 1024) return dt_error("pipeline: %d chunks (at most 1024)", G);
  DT_TRY(pipe_check_model(d->c, d->m));
  if (!d->c->pipe.partition[0])
    return dt_error("--partition balanced: the stages are cut by times measured at run time; "
                    "describe_step needs --partition macs or the first layers (e.g. 0,3)");
  if (!(d->first = calloc((size_t)G + 1, sizeof *d->first))) return dt_error("out of memory");
  return pipe_partition(d->c, d->m, NULL, d->first);
}

/* One instruction of stage s (replica r) on micro-batch samples n. */
static int add_instr(pipe_desc_t *d, int r, int s, pipe_instr_t in, int n, int prev) {
  int g = in.chunk * d->P + s, me = rank_of(d, r, s);
  int next = rank_of(d, r, (s + 1) % d->P), back = rank_of(d, r, (s + d->P - 1) % d->P);
  double act = (double)n * sizeof(float);
  step_task_t t = {TASK_COMM, me, -1, .pattern = "send", .group = 2, .after = prev};
  switch (in.op) {
  case PIPE_FORWARD:
  case PIPE_BACKWARD:
    for (int k = 0; k < d->first[g + 1] - d->first[g] && prev != STEP_FAILED; k++) {
      int i = in.op == PIPE_FORWARD ? d->first[g] + k : d->first[g + 1] - 1 - k;
      prev = step_add(d->out, (step_task_t){in.op == PIPE_FORWARD ? TASK_FORWARD : TASK_BACKWARD,
                                            me, i, d->m->layers[i].param_len, n, .peer = -1,
                                            .after = prev});
    }
    return prev;
  case PIPE_SEND_ACT: t.peer = next, t.sent = act * chunk_out(d, g); break;
  case PIPE_RECV_ACT: t.pattern = "recv", t.peer = back, t.received = act * chunk_in(d, g); break;
  case PIPE_RECV_GRAD: t.pattern = "recv", t.peer = next, t.received = act * chunk_out(d, g); break;
  case PIPE_SEND_GRAD: t.peer = back, t.sent = act * chunk_in(d, g); break;
  case PIPE_REDUCE:
    for (int v = 0; v < d->V && d->dp > 1 && prev != STEP_FAILED; v++) {
      size_t len = chunk_params(d, v * d->P + s);
      if (len) prev = step_add_allreduce(d->out, me, r, d->dp, d->algo, len, prev, THREAD_COMPUTE, 1);
    }
    return prev;
  case PIPE_STEP:
    return step_add(d->out, (step_task_t){TASK_UPDATE, me, -1, d->m->nparams, d->c->batch,
                                          .peer = -1, .after = prev});
  default: return prev; /* LOAD: the samples are this rank's own */
  }
  return step_add(d->out, t);
}

int pipe_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  if (c->compression.codec.kind != CODEC_NONE || c->tensor.ranks > 1 || pipe_kind_async((pipe_kind_t)c->pipe.schedule))
    return dt_error("pipeline: describe_step covers the synchronous schedules (gpipe, 1f1b, "
                    "interleaved) without --compress or --tp so far");
  pipe_desc_t *d = calloc(1, sizeof *d);
  if (!d) return dt_error("out of memory");
  *d = (pipe_desc_t){.c = c, .m = m, .P = c->pipe.stages, .V = c->pipe.chunks, .dp = c->workers / c->pipe.stages,
                     .out = out};
  int algo = ALLREDUCE_RING, rc = plan_chunks(d);
  if (rc == 0) rc = step_allreduce_algo(c->algo, d->dp, &algo);
  d->algo = (allreduce_algo_t)algo;
  pipe_schedule_t sched;
  if (rc == 0) rc = pipe_schedule_build((pipe_kind_t)c->pipe.schedule, d->P, d->V,
                                        c->pipe.micro_batches, 1, &sched);
  if (rc != 0) {
    free(d->first);
    free(d);
    return -1;
  }
  for (int r = 0; r < d->dp && rc == 0; r++)
    for (int s = 0; s < d->P && rc == 0; s++) {
      int prev = -1;
      for (int i = 0; i < sched.len[s] && prev != STEP_FAILED; i++) {
        pipe_instr_t in = sched.prog[s][i];
        size_t off, n = 0;
        if (in.mb >= 0) data_shard((size_t)c->batch, in.mb, c->pipe.micro_batches, &off, &n);
        prev = add_instr(d, r, s, in, (int)n, prev);
      }
      if (prev == STEP_FAILED) rc = -1;
    }
  pipe_schedule_free(&sched);
  free(d->first);
  free(d);
  return rc;
}
