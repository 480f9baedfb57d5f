/* The pipeline engine's shared core (engine.h): the rank's place in the
 * dp x pp grid, the model cut into chunks and this rank's chunks as
 * stages, their buffers sized from the schedule's units in flight, and
 * the execution of one instruction list -- each instruction a small
 * function, dispatched by a table (DeepSpeed's engine). The driver's hooks
 * cut each step's micro-batches and hand the step to the engine's ops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/pipe/engine.h"
#include "strategy/tp_group.h"

/* ---- setup ------------------------------------------------------------------- */

/* --partition balanced: rank 0 times every layer (forward + backward of a
 * micro-batch) and every rank splits by its times, so all agree. The
 * split changes no result: a stage boundary passes activations exactly.
 * Under --tp each tp slice's rank 0 times its own blocks; the slices must
 * cut alike (a split layer's ranks sum together), so tp rank 0's times
 * then go to its whole group: every rank splits by world rank 0's. */
static int measure_layers(pipe_engine_t *e) {
  worker_t *w = e->w;
  model_t *m = w->model;
  int n = m->nlayers;
  float *t = calloc((size_t)n, sizeof *t);
  int rc = t ? 0 : dt_error("out of memory");
  if (rc == 0 && w->rank == 0 && !w->cfg->pipe.partition[0])
    rc = pipe_profile_layers(m, w->cfg->batch / e->M, w->cfg->seed, e->layer_sec);
  for (int i = 0; rc == 0 && w->rank == 0 && i < n; i++) t[i] = (float)e->layer_sec[i];
  if (rc == 0 && comm_size(w->comm) > 1) rc = broadcast_tree(w->coll, 0, t, (size_t)n);
  if (rc == 0 && w->tp && tensor_size(w->tp) > 1) rc = broadcast_tree(tensor_coll(w->tp), 0, t, (size_t)n);
  for (int i = 0; rc == 0 && i < n; i++) e->layer_sec[i] = t[i];
  free(t);
  return rc;
}

/* The model cut into G = P V chunks (global stages); pipe_check_model
 * refuses the cuts that do not fit it. */
static int plan_partition(pipe_engine_t *e) {
  const model_t *m = e->w->model;
  const train_config_t *cfg = e->w->cfg;
  e->first = calloc((size_t)e->G + 1, sizeof *e->first);
  e->layer_sec = calloc((size_t)m->nlayers + 1, sizeof *e->layer_sec);
  if (!e->first || !e->layer_sec) return dt_error("out of memory");
  DT_TRY(pipe_check_model(cfg, m));
  if (!pipe_partition_listed(cfg)) DT_TRY(measure_layers(e));
  return pipe_partition(cfg, m, cfg->pipe.partition[0] ? NULL : e->layer_sec, e->first);
}

/* This rank's chunks: chunk v is global stage v P + s, with `slots`
 * activation sets of `micro` samples. */
static int plan_chunks(pipe_engine_t *e, int micro) {
  e->chunk = calloc((size_t)e->V, sizeof *e->chunk);
  if (!e->chunk) return dt_error("out of memory");
  for (int v = 0; v < e->V; v++) {
    pipe_chunk_t *c = &e->chunk[v];
    int g = v * e->P + e->s;
    DT_TRY(stage_new(e->w->model, e->first[g], e->first[g + 1] - 1, e->slots, micro, &c->st));
    c->dx = dt_alloc_floats((size_t)e->slots * micro * c->st->in_size + 1);
    if (!c->dx) return -1;
  }
  return 0;
}

static int in_chunks(const pipe_engine_t *e, size_t off) {
  for (int v = 0; v < e->V; v++) {
    const stage_t *st = e->chunk[v].st;
    if (off >= st->param_off && off < st->param_off + st->param_len) return 1;
  }
  return 0;
}

/* The worker's optimizer segments that lie in this rank's chunks. */
static int plan_segments(pipe_engine_t *e) {
  const worker_t *w = e->w;
  e->segs = calloc((size_t)w->nsegs + 1, sizeof *e->segs);
  if (!e->segs) return dt_error("out of memory");
  for (int i = 0; i < w->nsegs; i++)
    if (in_chunks(e, w->segs[i].off)) e->segs[e->nsegs++] = w->segs[i];
  return 0;
}

/* --compress: the replicas of each stage sum their gradients through the
 * compressor, as data parallelism's reducer does (each chunk a bucket,
 * with its tensors as matrices for PowerSGD). */
static int plan_compression(pipe_engine_t *e) {
  worker_t *w = e->w;
  const model_t *m = w->model;
  if (w->cfg->compression.codec.kind == CODEC_NONE) return 0;
  if (e->ndp == 1) {
    char name[48];
    codec_format(&w->cfg->compression.codec, name, sizeof name);
    return dt_error("option --compress %s: this pipeline has one replica of each stage, so no "
                    "gradients are summed (activations go stage to stage as they are): use "
                    "%s %d for two replicas", name, w->cfg->comm == COMM_MPI ? "mpirun -np"
                    : "--workers", 2 * e->P * (w->cfg->tensor.ranks > 1 ? w->cfg->tensor.ranks : 1));
  }
  if (!(e->mats = calloc((size_t)m->ntensors + 1, sizeof *e->mats))) return dt_error("out of memory");
  compress_model_matrices(m, e->mats);
  for (int v = 0; v < e->V; v++) {
    const stage_t *st = e->chunk[v].st;
    e->chunk[v].nmat = compress_tensors_in(m, st->param_off, st->param_len, &e->chunk[v].mat);
  }
  DT_TRY(worker_compressor_new(w, e->r, e->ndp, &e->cx));
  e->reduces = w->step; /* a resumed run's codecs go on from its step */
  return worker_keep_compressor(w, e->cx);
}

/* Per-unit buffers, and the sends a list may leave in flight: each
 * carries one slot's activation or gradient of a chunk, each at most once
 * before the engine waits, so 2 V slots at most. */
static int plan_buffers(pipe_engine_t *e, int micro) {
  e->max_sends = 2 * e->V * e->slots;
  e->sends = calloc((size_t)e->max_sends, sizeof *e->sends);
  e->labels = calloc((size_t)e->slots * micro * dataset_ylen(e->w->train), sizeof *e->labels);
  e->slot_n = calloc((size_t)e->slots, sizeof *e->slot_n);
  e->mb_off = calloc((size_t)e->M, sizeof *e->mb_off);
  e->mb_len = calloc((size_t)e->M, sizeof *e->mb_len);
  /* the report's fields: a few names, then a number for each chunk, six for each rank
   * and, measured, one for each layer */
  e->extra_cap = 512 + 24 * ((size_t)e->G + 6 * (size_t)e->P) + 20 * (size_t)e->w->model->nlayers;
  e->extra = calloc(e->extra_cap, 1);
  if (!e->sends || !e->labels || !e->slot_n || !e->mb_off || !e->mb_len || !e->extra)
    return dt_error("out of memory");
  return 0;
}

static int setup(pipe_engine_t *e, worker_t *w, int slots) {
  const train_config_t *cfg = w->cfg;
  e->w = w;
  e->P = cfg->pipe.stages, e->M = cfg->pipe.micro_batches, e->V = cfg->pipe.chunks, e->G = e->P * e->V;
  e->kind = (pipe_kind_t)cfg->pipe.schedule;
  e->slots = slots;
  e->ndp = comm_size(w->comm) / e->P;
  DT_TRY(rank_grid_new(w->comm, e->ndp, e->P, 1, &e->grid));
  e->s = e->grid.coord[GRID_PP];
  e->r = e->grid.coord[GRID_DP];
  e->pipe = e->grid.axis[GRID_PP];
  if (e->ndp > 1) DT_TRY(coll_ctx_new(e->grid.axis[GRID_DP], &e->dp));
  /* --clip-grad-norm: the global norm sums the stages' squared norms */
  if (cfg->clip_grad_norm > 0 && e->P > 1) DT_TRY(coll_ctx_new(e->pipe, &w->clip_stages));
  worker_plan_steps(w, e->ndp); /* a step: batch samples per replica */
  int last[GRID_AXES] = {0};      /* the progress line comes from where the loss is */
  last[GRID_PP] = e->P - 1;
  w->progress_rank = rank_grid_rank(e->ndp, e->P, 1, last);
  DT_TRY(plan_partition(e));
  DT_TRY(pipe_tied_plan(e));
  int micro = cfg->batch / e->M;
  DT_TRY(plan_chunks(e, micro));
  DT_TRY(plan_segments(e));
  DT_TRY(plan_compression(e));
  return plan_buffers(e, micro);
}

static void teardown(pipe_engine_t *e) {
  for (int i = 0; i < e->nsends; i++) comm_cancel(e->pipe, e->sends[i]);
  free(e->sends);
  for (int v = 0; e->chunk && v < e->V; v++) {
    dt_free(e->chunk[v].dx);
    if (e->chunk[v].st) stage_free(e->chunk[v].st);
  }
  free(e->chunk);
  free(e->first);
  free(e->layer_sec);
  free(e->labels);
  free(e->slot_n);
  free(e->mb_off);
  free(e->mb_len);
  free(e->extra);
  free(e->segs);
  pipe_tied_free(e);
  if (e->w && e->w->clip_stages) coll_ctx_free(e->w->clip_stages), e->w->clip_stages = NULL;
  if (e->w && e->w->ckpt_cx == e->cx) e->w->ckpt_cx = NULL;
  compressor_free(e->cx);
  free(e->mats);
  if (e->dp) coll_ctx_free(e->dp);
  rank_grid_free(&e->grid);
}

/* ---- one step ---------------------------------------------------------------- */

/* Replica r's slice of global step k, cut into micro-batches; returns how
 * many (0 when the replica has no sample in a short last step). */
static int slice_step(pipe_engine_t *e, int64_t k) {
  const worker_t *w = e->w;
  size_t gb = (size_t)w->cfg->batch * e->ndp, start = (size_t)k * gb;
  size_t in_step = w->train->n - start < gb ? w->train->n - start : gb, off, len;
  data_shard(in_step, e->r, e->ndp, &off, &len);
  e->begin = start + off;
  e->global = (int)in_step;
  int m = len < (size_t)e->M ? (int)len : e->M;
  for (int j = 0; j < m; j++) data_shard(len, j, m, &e->mb_off[j], &e->mb_len[j]);
  for (int j = m; j < e->M; j++) e->mb_off[j] = e->mb_len[j] = 0; /* a stream's empty units */
  return m;
}

/* A unit's slot, and the micro-batch of its step it is (a flush's
 * micro-batch mb is unit mb, in slot mb). */
static int slot_of(const pipe_engine_t *e, int unit) { return unit % e->slots; }
static int micro_of(const pipe_engine_t *e, int unit) { return unit % e->M; }

/* A blocking receive of a unit's activation or gradient. Its wait is
 * exposed communication, and of it the bubble is what the link's time for
 * the bytes (the alpha-beta model of the pipe's link, comm_link_time) does
 * not explain: the stage idle until its neighbour had the unit. The trace
 * shows the bubble on its own track, then the receive with its bytes. */
static int recv_timed(pipe_engine_t *e, int src, int tag, void *buf, size_t bytes, const char *what) {
  double t0 = dt_now();
  int rc = comm_recv(e->pipe, src, tag, buf, bytes);
  double t1 = dt_now(), dt = t1 - t0;
  double link = comm_link_time(e->pipe->link_latency, e->pipe->link_bandwidth, 1, (double)bytes);
  double bubble = dt > link ? dt - link : 0;
  e->idle += dt;
  e->w->timers.comm += dt;
  e->w->timers.comm_exposed += dt;
  e->w->timers.bubble += bubble;
  if (dt_trace) {
    if (bubble > 0) trace_slice(dt_trace, TRACE_BUBBLE, "bubble", tag, t0, t0 + bubble);
    trace_async(dt_trace, TRACE_COMM, what, (long long)bytes, t0 + bubble, t1);
  }
  return rc;
}

static int send_async(pipe_engine_t *e, int dst, int tag, const void *buf, size_t bytes,
                      const char *what) {
  if (e->nsends >= e->max_sends) return dt_error("pipeline: more than %d sends in a step", e->max_sends);
  double t0 = dt_trace ? dt_now() : 0;
  int rc = comm_isend(e->pipe, dst, tag, buf, bytes, &e->sends[e->nsends++]);
  if (dt_trace) trace_async(dt_trace, TRACE_COMM, what, (long long)bytes, t0, dt_now());
  return rc;
}

int pipe_wait_sends(pipe_engine_t *e) {
  double t0 = dt_now();
  int rc = comm_waitall(e->pipe, e->nsends, e->sends);
  e->nsends = 0;
  e->idle += dt_now() - t0;
  if (dt_trace) trace_slice(dt_trace, TRACE_WAIT, "wait for sends", 0, t0, dt_now());
  return rc;
}

static void count_compute(pipe_engine_t *e, double t0) {
  double dt = dt_now() - t0;
  comm_compute_delay(e->w->comm, dt); /* an emulated straggler */
  dt = dt_now() - t0;
  e->compute += dt;
  e->w->timers.compute += dt;
}

/* Dropout masks as one worker draws them (data parallelism's rank r, for
 * replica r): one stream a step, each dropout layer drawing its in_full
 * channels of every position for the batch's samples in order, after the
 * layers before it. A micro-batch of chunk st seeds that stream and has
 * each of its dropout layers skip to where its samples' draws are
 * (samples [a, a + n) of the replica's B). Skipping costs a draw a draw. */
static void place_dropout(pipe_engine_t *e, const stage_t *st, int micro, int n, rng_t *rng) {
  worker_t *w = e->w;
  model_t *m = w->model;
  uint64_t B = e->mb_off[e->M - 1] + e->mb_len[e->M - 1], a = e->mb_off[micro];
  uint64_t base = 0, at = 0; /* the layer's first draw for the batch; where the stream is */
  rng_seed(rng, rng_derive(w->cfg->seed, 0xd80, (uint64_t)(w->step * e->ndp + e->r)));
  for (int i = 0; i < m->nlayers && i <= st->last; i++) {
    layer_t *l = &m->layers[i];
    if (l->spec.kind != LAYER_DROPOUT || !(l->spec.rate > 0.0f)) continue;
    uint64_t per = (uint64_t)l->in_shape.h * (uint64_t)l->in_shape.w * (uint64_t)l->in_full;
    if (i >= st->first) {
      l->rng_skip = base + a * per - at;
      at = base + (a + (uint64_t)n) * per;
    }
    base += B * per;
  }
}

/* The instructions (schedule.h), one function each: chunk v, unit mb. */

static int neighbour(const pipe_engine_t *e, int d) { return (e->s + e->P + d) % e->P; }
static size_t unit_samples(const pipe_engine_t *e, int mb) { return (size_t)e->slot_n[slot_of(e, mb)]; }
static float *dx_of(pipe_engine_t *e, int v, int mb) {
  const stage_t *st = e->chunk[v].st;
  return e->chunk[v].dx + (size_t)slot_of(e, mb) * st->micro_batch * st->in_size;
}

static int exec_load(pipe_engine_t *e, int v, int mb) {
  stage_t *st = e->chunk[v].st;
  int slot = slot_of(e, mb);
  size_t n = unit_samples(e, mb);
  if (n) data_gather(e->w->train, e->w->order + e->begin + e->mb_off[micro_of(e, mb)], n,
                     stage_input(st, slot), e->labels + (size_t)slot * st->micro_batch * dataset_ylen(e->w->train));
  return 0;
}

static int exec_recv_act(pipe_engine_t *e, int v, int mb) {
  stage_t *st = e->chunk[v].st;
  int g = v * e->P + e->s;
  return recv_timed(e, neighbour(e, -1), TAG_PIPE_ACT0 + g - 1, stage_input(st, slot_of(e, mb)),
                    unit_samples(e, mb) * st->in_size * sizeof(float), "recv activation");
}

/* Forward of unit mb through chunk v; the last chunk adds its loss to the epoch's. */
static int exec_forward(pipe_engine_t *e, int v, int mb) {
  worker_t *w = e->w;
  stage_t *st = e->chunk[v].st;
  int slot = slot_of(e, mb), n = e->slot_n[slot], g = v * e->P + e->s;
  if (e->ops->forward_weights) DT_TRY(e->ops->forward_weights(e, mb, slot));
  if (++e->live > e->peak_live) e->peak_live = e->live;
  if (n == 0) return 0; /* an empty unit of a stream: nothing to compute */
  double t0 = dt_now();
  rng_t rng;
  place_dropout(e, st, micro_of(e, mb), n, &rng);
  DT_TRY(stage_forward(st, slot, stage_input(st, slot), n, 1, &rng, NULL));
  if (st->ends_model) {
    int32_t *labels = e->labels + (size_t)slot * st->micro_batch * dataset_ylen(w->train);
    if (g > 0) /* the first chunk (P = 1) has the labels from its LOAD */
      data_gather(w->train, w->order + e->begin + e->mb_off[micro_of(e, mb)], (size_t)n, NULL, labels);
    double loss;
    double correct;
    DT_TRY(stage_loss(st, slot, labels, e->global, &loss, &correct));
    if (!isfinite(loss))
      return worker_step_diverged(w, loss);
    w->epoch_loss_sum += loss;
    w->epoch_samples += n;
    w->epoch_correct += correct;
  }
  count_compute(e, t0);
  return 0;
}

static int exec_send_act(pipe_engine_t *e, int v, int mb) {
  stage_t *st = e->chunk[v].st;
  int g = v * e->P + e->s;
  return send_async(e, neighbour(e, 1), TAG_PIPE_ACT0 + g, stage_output(st, slot_of(e, mb)),
                    unit_samples(e, mb) * st->out_size * sizeof(float), "send activation");
}

static int exec_recv_grad(pipe_engine_t *e, int v, int mb) {
  stage_t *st = e->chunk[v].st;
  int g = v * e->P + e->s;
  return recv_timed(e, neighbour(e, 1), TAG_PIPE_GRAD0 + g, stage_output_grad(st, slot_of(e, mb)),
                    unit_samples(e, mb) * st->out_size * sizeof(float), "recv gradient");
}

/* Backward of unit mb through chunk v, summing into its gradients after
 * the first since the last STEP. */
static int exec_backward(pipe_engine_t *e, int v, int mb) {
  pipe_chunk_t *c = &e->chunk[v];
  stage_t *st = c->st;
  int slot = slot_of(e, mb), g = v * e->P + e->s, acc = c->nback > 0;
  e->live--;
  if (e->ops->backward_weights) DT_TRY(e->ops->backward_weights(e, v, slot));
  double t0 = dt_now();
  if (e->slot_n[slot] == 0) { /* an empty unit: no gradient (zeros when it is the first) */
    if (!acc) kern_zero(st->param_len, e->w->model->grads + st->param_off);
  } else {
    DT_TRY(stage_backward(st, slot, NULL, g > 0 ? dx_of(e, v, mb) : NULL, acc, NULL, NULL));
  }
  c->nback++;
  count_compute(e, t0);
  return 0;
}

static int exec_send_grad(pipe_engine_t *e, int v, int mb) {
  int g = v * e->P + e->s;
  return send_async(e, neighbour(e, -1), TAG_PIPE_GRAD0 + g - 1, dx_of(e, v, mb),
                    unit_samples(e, mb) * e->chunk[v].st->in_size * sizeof(float), "send gradient");
}

static int exec_reduce(pipe_engine_t *e, int v, int mb) { return e->ops->reduce(e); }

/* The optimizer step on the rank's segments (the engine's update); the
 * chunks' next backwards start their gradients anew. */
static int exec_step(pipe_engine_t *e, int v, int mb) {
  double t0 = dt_now();
  for (int c = 0; c < e->V; c++) e->chunk[c].nback = 0;
  e->ops->update(e, mb);
  double t1 = dt_now();
  e->compute += t1 - t0;
  if (!e->tie_len) return 0;
  DT_TRY(pipe_tied_params(e)); /* the stepped table to the head's copy */
  worker_comm_since(e->w, t1);
  return 0;
}

static int (*const EXECUTE[PIPE_OP_COUNT])(pipe_engine_t *e, int v, int mb) = {
    [PIPE_LOAD] = exec_load,           [PIPE_RECV_ACT] = exec_recv_act,
    [PIPE_FORWARD] = exec_forward,     [PIPE_SEND_ACT] = exec_send_act,
    [PIPE_RECV_GRAD] = exec_recv_grad, [PIPE_BACKWARD] = exec_backward,
    [PIPE_SEND_GRAD] = exec_send_grad, [PIPE_REDUCE] = exec_reduce,
    [PIPE_STEP] = exec_step,
};

int pipe_execute(pipe_engine_t *e, pipe_instr_t in) {
  if ((int)in.op < 0 || in.op >= PIPE_OP_COUNT) return dt_error("pipeline: unknown instruction %d", in.op);
  return EXECUTE[in.op](e, in.chunk, in.mb);
}

int pipe_run_list(pipe_engine_t *e, const pipe_instr_t *list, int n) {
  for (int i = 0; i < n; i++)
    if (pipe_execute(e, list[i]) != 0) return dt_error_prefix("stage %d: ", e->s);
  return 0;
}

int pipe_reduce(pipe_engine_t *e, double t0) {
  worker_t *w = e->w;
  /* the dense warm-up (--compress-warmup-steps) but where the compressor runs it */
  int compress = e->cx && (e->reduces >= w->cfg->compression.warmup_steps ||
                           compressor_takes_warmup(e->cx));
  DT_TRY(pipe_tied_grads(e)); /* the head's part of a tied table's gradient, first */
  for (int v = 0; e->dp && v < e->V; v++) {
    const pipe_chunk_t *c = &e->chunk[v];
    size_t off = c->st->param_off, len = c->st->param_len;
    if (!len) continue;
    if (compress)
      DT_TRY(compressor_allreduce(e->cx, e->dp, w->model->grads + off, off, len, e->reduces, v,
                                  e->mats + c->mat, c->nmat));
    else DT_TRY(allreduce(e->dp, w->cfg->algo, w->model->grads + off, len));
  }
  e->reduces++;
  worker_comm_since(w, t0);
  return 0;
}

/* ---- the driver's hooks ------------------------------------------------------ */

static int begin_epoch(void *engine, int epoch) {
  pipe_engine_t *e = engine;
  e->compute = e->idle = 0;
  if (e->ops->begin_epoch) e->ops->begin_epoch(e);
  return 0;
}

static int step(void *engine, int epoch, int64_t k) {
  pipe_engine_t *e = engine;
  DT_TRY(worker_stopped(e->w));
  int m = slice_step(e, k);
  return e->ops->step(e, k, m);
}

static int end_epoch(void *engine, int epoch) {
  pipe_engine_t *e = engine;
  return e->ops->end_epoch ? e->ops->end_epoch(e) : 0;
}

int pipe_engine_run(pipe_engine_t *e, worker_t *w, const pipe_ops_t *ops, int slots) {
  e->ops = ops;
  int rc = setup(e, w, slots);
  if (rc == 0) rc = ops->setup(e);
  driver_ops_t hooks = {.begin_epoch = begin_epoch, .step = step, .end_epoch = end_epoch,
                        .evaluate = pipe_evaluate};
  if (rc == 0) rc = driver_run(w, &hooks, e);
  ops->teardown(e);
  teardown(e);
  return rc;
}
