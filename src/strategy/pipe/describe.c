/* The pipeline's step as data: the instruction lists the engine runs
 * (schedule.c), each turned into tasks -- a chunk's forward and backward
 * per layer on its micro-batch, with the sums of its tensor-parallel
 * layers, each activation and gradient message with its bytes
 * (micro-batch samples x the chunk's input or output size) and its peer,
 * and the replicas' allreduce of each chunk's gradients at REDUCE (under
 * --compress the compressor's exchange, a chunk a bucket, each phase of
 * its warm-up at its steps, as data parallelism's are described). The
 * asynchronous schedules (PipeDream, 2BW, DDG) are their stream's steady
 * step, whose first gradient each stage receives was sent in the step
 * before (a receive's lag: the simulator runs steady steps). Ranks
 * follow the grid (grid.h: stages outermost, tensor-parallel ranks
 * adjacent); each tp rank's stages are its blocks of the model
 * (tensor/describe.c), cut as it cuts them. */
#include <stdlib.h>

#include "strategy/grid.h"
#include "strategy/pipe/engine.h"
#include "strategy/pipe/pipe.h"
#include "strategy/tensor/tensor.h"

typedef struct {
  const train_config_t *c;
  const model_t *m;           /* tp rank t's model */
  tensor_desc_t *td;          /* the tp ranks' models */
  int P, V, dp, T, t;
  int async;                  /* a stream without flush: REDUCE mid-step, the sends waited at the end */
  int *first;                 /* [G + 1]: chunk g's first layer; first[G] = nlayers */
  double *sec;                /* --partition balanced: tp rank 0's layer times, every tp
                               * rank's cut (the engine's world rank 0 times for all) */
  allreduce_algo_t algo;      /* the replicas' sum */
  compress_config_t cc;       /* --compress: the compressor's configuration (algo: the sum's) */
  compress_matrix_t *mats;    /* --compress: tp rank t's model's tensors as matrices */
  int last_send;              /* the stage's latest message out (a task on its comm thread), or -1 */
  step_groups_t groups;       /* the split layers' sums over the tp group (algo: tp's) */
  step_desc_t *out;
} pipe_desc_t;

static int compressing(const pipe_desc_t *d) { return d->c->compression.codec.kind != CODEC_NONE; }

static size_t floats_of(shape_t s) { return (size_t)s.c * s.h * s.w; }
static size_t chunk_in(const pipe_desc_t *d, int g) { return floats_of(d->m->layers[d->first[g]].in_shape); }
static size_t chunk_out(const pipe_desc_t *d, int g) { return floats_of(d->m->layers[d->first[g + 1] - 1].out_shape); }

static size_t chunk_params(const pipe_desc_t *d, int g) {
  size_t n = 0;
  for (int i = d->first[g]; i < d->first[g + 1]; i++) n += d->m->layers[i].param_len;
  return n;
}

static int rank_of(const pipe_desc_t *d, int replica, int stage) {
  int coord[GRID_AXES] = {replica, stage, d->t};
  return rank_grid_rank(d->dp, d->P, d->T, coord);
}

/* The partition the engine would use. --partition balanced cuts by times
 * the engine measures at run time: measured here the same way
 * (pipe_profile_layers on a micro-batch), so a run on this machine cuts
 * alike unless the timings differ by the margin between two cuts. */
static int plan_chunks(pipe_desc_t *d) {
  int G = d->P * d->V;
  if (G > 1024) return dt_error("pipeline: %d chunks (at most 1024)", G);
  DT_TRY(pipe_check_model(d->c, d->m));
  free(d->first); /* each tp rank's model is cut on its own */
  if (!(d->first = calloc((size_t)G + 1, sizeof *d->first))) return dt_error("out of memory");
  if (d->c->pipe.partition[0]) return pipe_partition(d->c, d->m, NULL, d->first);
  if (!d->sec) {
    int micro = d->c->batch / (d->c->pipe.micro_batches > 0 ? d->c->pipe.micro_batches : 1);
    if (!(d->sec = calloc((size_t)d->m->nlayers + 1, sizeof *d->sec))) return dt_error("out of memory");
    /* timing writes the layers' gradients and scratch (restoring the
     * buffers), which no description reads: the const is cast away. The
     * tp sums are left out of the times (the run's include them, summed
     * among the tp ranks timing together) */
    tensor_desc_time_alone(d->td, 1);
    int rc = pipe_profile_layers((model_t *)d->m, micro > 0 ? micro : 1, d->c->seed, d->sec);
    tensor_desc_time_alone(d->td, 0);
    DT_TRY(rc);
  }
  return pipe_partition(d->c, d->m, d->sec, d->first);
}

/* A head tied to an embedding on another stage (tied.c): the table's
 * gradient from the head's stage to the table's before the replicas' sum
 * (grads 1), the stepped table back after STEP (grads 0). */
static int add_tied(pipe_desc_t *d, int r, int s, int grads, int prev) {
  int table, head;
  size_t len, off;
  if (!pipe_tied_stages(d->m, d->first, d->P * d->V, d->P, &table, &head, &len, &off) ||
      (s != table && s != head))
    return prev;
  int sends = (s == head) == grads, peer = rank_of(d, r, s == head ? table : head);
  double bytes = (double)len * sizeof(float);
  step_task_t t = {TASK_COMM, rank_of(d, r, s), -1, .pattern = sends ? "send" : "recv", .group = 2,
                   .peer = peer, .after = prev};
  if (sends) t.sent = bytes;
  else t.received = bytes;
  return step_add(d->out, t);
}

/* Chunk g's gradients summed over its replicas at steps [from, until):
 * the allreduce, or the compressor's exchange of the chunk as a bucket. */
static int add_sum(pipe_desc_t *d, int r, int g, int64_t from, int64_t until, int prev) {
  size_t len = chunk_params(d, g), off = d->m->layers[d->first[g]].param_off;
  int me = rank_of(d, r, g % d->P);
  if (!len) return prev;
  if (!compressing(d))
    return step_add_allreduce(d->out, me, r, d->dp, d->T, d->algo, len, prev, THREAD_COMPUTE, 1);
  int mat, nmats = compress_tensors_in(d->m, off, len, &mat);
  step_buffer_t buf = {&d->cc, off, len, d->mats + mat, nmats};
  return step_add_compressed(d->out, me, r, d->dp, &buf, from, until, prev, THREAD_COMPUTE, 1);
}

/* REDUCE's sums of stage s's chunks over the replicas (this stage's and tp
 * rank's: their own color); compressed, each phase of the warm-up's at
 * its steps, every phase after the same task (one runs a step). */
static int add_sums(pipe_desc_t *d, int r, int s, int prev) {
  int64_t from = 0, until = 0;
  int start = prev, first = d->out->ntasks;
  do {
    until = compressing(d) ? compress_phase_end(&d->cc, from) : 0;
    prev = start;
    for (int v = 0; v < d->V && prev != STEP_FAILED; v++) prev = add_sum(d, r, v * d->P + s, from, until, prev);
    from = until;
  } while (until && prev != STEP_FAILED);
  if (prev != STEP_FAILED) step_color_since(d->out, first, STEP_REPLICA_COLOR(rank_of(d, 0, s)));
  return prev;
}

/* One instruction of stage s (replica r) on micro-batch samples n. */
static int add_instr(pipe_desc_t *d, int r, int s, pipe_instr_t in, int n, int prev) {
  int g = in.chunk * d->P + s, me = rank_of(d, r, s);
  int next = rank_of(d, r, (s + 1) % d->P), back = rank_of(d, r, (s + d->P - 1) % d->P);
  double act = (double)n * sizeof(float);
  step_task_t t = {TASK_COMM, me, -1, .pattern = "send", .group = 2, .after = prev};
  switch (in.op) {
  case PIPE_FORWARD:
  case PIPE_BACKWARD: { /* chunk 0 computes no input gradient (the engine passes it none) */
    int tp0[GRID_AXES] = {r, s, 0}; /* this stage's tp group: its own sums */
    d->groups.tp.color = STEP_TP_COLOR(rank_grid_rank(d->dp, d->P, d->T, tp0));
    for (int k = 0; k < d->first[g + 1] - d->first[g] && prev != STEP_FAILED; k++) {
      int bw = in.op == PIPE_BACKWARD, i = bw ? d->first[g + 1] - 1 - k : d->first[g] + k;
      prev = step_add_layer(d->out, d->m, me, i, n, bw, d->first[g], g > 0, &d->groups, prev, NULL);
    }
    return prev;
  }
  case PIPE_SEND_ACT:
  case PIPE_SEND_GRAD: { /* isend: the link takes it while the stage computes on */
    t.peer = in.op == PIPE_SEND_ACT ? next : back;
    t.sent = act * (in.op == PIPE_SEND_ACT ? chunk_out(d, g) : chunk_in(d, g));
    t.thread = THREAD_COMM;
    int sent = step_add(d->out, t);
    if (sent == STEP_FAILED) return sent;
    d->last_send = sent;
    return prev;
  }
  case PIPE_RECV_ACT: t.pattern = "recv", t.peer = back, t.received = act * chunk_in(d, g); break;
  case PIPE_RECV_GRAD:
    t.pattern = "recv", t.peer = next, t.received = act * chunk_out(d, g), t.lag = d->async;
    break;
  case PIPE_REDUCE: /* the step's sends delivered first (sync_reduce's wait), then the sums */
    if (!d->async && d->last_send >= 0) prev = d->last_send;
    prev = add_tied(d, r, s, 1, prev);
    if (d->dp > 1 && prev != STEP_FAILED) prev = add_sums(d, r, s, prev);
    return prev;
  case PIPE_STEP: { /* the stage's own parameters: its chunks' (the engine's segments) */
    size_t mine = 0;
    for (int v = 0; v < d->V; v++) mine += chunk_params(d, v * d->P + s);
    if (d->c->clip_grad_norm > 0) prev = step_add_clip_sums(d->out, me, d->t, d->T, s, d->P, prev);
    prev = step_add(d->out, (step_task_t){TASK_UPDATE, me, -1, mine, d->c->batch, .peer = -1,
                                          .after = prev});
    return prev == STEP_FAILED ? prev : add_tied(d, r, s, 0, prev);
  }
  default: return prev; /* LOAD: the samples are this rank's own */
  }
  return step_add(d->out, t);
}

/* Every replica's stages on tp rank d->t's model. */
static int describe_tp_rank(pipe_desc_t *d, const pipe_schedule_t *sched) {
  const train_config_t *c = d->c;
  DT_TRY(plan_chunks(d));
  free(d->mats);
  d->mats = NULL;
  if (compressing(d)) {
    if (!(d->mats = calloc((size_t)d->m->ntensors + 1, sizeof *d->mats))) return dt_error("out of memory");
    compress_model_matrices(d->m, d->mats);
  }
  int M = c->pipe.micro_batches; /* a stream's unit k is micro-batch k % M of its step */
  for (int r = 0; r < d->dp; r++)
    for (int s = 0; s < d->P; s++) {
      int prev = -1;
      d->last_send = -1;
      for (int i = 0; i < sched->len[s] && prev != STEP_FAILED; i++) {
        pipe_instr_t in = sched->prog[s][i];
        size_t off, n = 0;
        if (in.mb >= 0) data_shard((size_t)c->batch, in.mb % M, M, &off, &n);
        prev = add_instr(d, r, s, in, (int)n, prev);
      }
      if (prev != STEP_FAILED && d->async && d->last_send >= 0) /* async_step's wait for its sends */
        prev = step_add(d->out, (step_task_t){TASK_COMM, rank_of(d, r, s), -1, .pattern = "wait",
                                               .peer = -1, .group = 1, .after = d->last_send});
      if (prev == STEP_FAILED) return -1;
    }
  return 0;
}

/* An asynchronous schedule's steady step: step P of its stream on every
 * stage (each one's backwards of earlier units under way by then). */
static int steady_stream(pipe_kind_t kind, int P, int M, pipe_schedule_t *out) {
  *out = (pipe_schedule_t){.kind = kind, .P = P, .V = 1, .M = M, .steps = 1, .units = M};
  out->len = calloc((size_t)P, sizeof *out->len);
  out->prog = calloc((size_t)P, sizeof *out->prog);
  for (int s = 0; out->len && out->prog && s < P; s++) {
    if (!(out->prog[s] = calloc((size_t)pipe_async_max_len(P, M), sizeof *out->prog[s]))) break;
    out->len[s] = pipe_async_step(kind, P, M, s, P, out->prog[s]);
  }
  if (!out->len || !out->prog || !out->prog[P - 1]) {
    pipe_schedule_free(out);
    return dt_error("out of memory");
  }
  return 0;
}

int pipe_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int T = c->tensor.ranks > 1 ? c->tensor.ranks : 1, algo = ALLREDUCE_RING, tp_algo = ALLREDUCE_RING;
  pipe_desc_t *d = calloc(1, sizeof *d);
  if (!d) return dt_error("out of memory");
  *d = (pipe_desc_t){.c = c, .P = c->pipe.stages, .V = c->pipe.chunks, .dp = c->workers / (c->pipe.stages * T),
                     .T = T, .async = pipe_kind_async((pipe_kind_t)c->pipe.schedule), .out = out};
  tensor_desc_t *td = NULL;
  int rc = step_allreduce_algo(c->algo, d->dp, &algo);
  if (rc == 0 && T > 1) rc = step_allreduce_algo(c->algo, T, &tp_algo);
  if (rc == 0) rc = tensor_desc_new(c, m, T, 1, &td);
  d->td = td;
  d->algo = (allreduce_algo_t)algo;
  d->cc = worker_compress_config(c);
  d->cc.algo = d->algo;
  pipe_schedule_t sched;
  pipe_kind_t kind = (pipe_kind_t)c->pipe.schedule;
  int built = rc == 0 && (d->async ? steady_stream(kind, d->P, c->pipe.micro_batches, &sched)
                                   : pipe_schedule_build(kind, d->P, d->V, c->pipe.micro_batches, 1, &sched)) == 0;
  if (rc == 0 && !built) rc = -1;
  for (int t = 0; t < T && rc == 0; t++) {
    d->t = t, d->m = tensor_desc_model(td, t);
    d->groups = (step_groups_t){{T, t, tp_algo, 0, 1}, {1, 0, tp_algo, 0, 1}};
    rc = describe_tp_rank(d, &sched);
  }
  if (built) pipe_schedule_free(&sched);
  tensor_desc_free(td);
  free(d->first);
  free(d->sec);
  free(d->mats);
  free(d);
  return rc;
}
