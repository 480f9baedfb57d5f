/* The pipeline engine: one rank runs one stage of one replica, executing
 * its schedule's instructions (schedule.h) on the stage seam (nn/stage.c).
 *
 * Ranks form a dp x pp grid (grid.h): the stages of a replica talk over
 * the pipeline axis (activations forward, gradients back, non-blocking
 * sends waited at the step's REDUCE), the replicas of a stage sum their
 * gradients over the data-parallel axis, and every stage steps its own
 * range of the parameter arena. A step takes replica r's slice of the
 * global batch (batch x dp samples), cut into M micro-batches; the loss
 * of each is averaged over the global batch, so the summed gradient is the
 * one of plain training on that batch, up to the order of float sums
 * (micro-batch by micro-batch instead of one GEMM over the batch).
 *
 * At an epoch's end the stages of replica 0 send their parameters, buffers
 * (and, for a checkpoint, optimizer state) to rank 0, which then holds the
 * whole trained model: it evaluates it on the test set, reports and
 * checkpoints, as a one-worker run would. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/grid.h"
#include "strategy/pipe/pipe.h"

enum { TAG_PIPE_ACT = 5401, TAG_PIPE_GRAD, TAG_PIPE_GATHER };

typedef struct {
  worker_t *w;
  rank_grid_t grid;
  comm_t *pipe;               /* the stages of this replica, ranked by stage */
  coll_ctx_t *dp;             /* the replicas of this stage (NULL: dp = 1) */
  int P, M, s, ndp, r;        /* stages, micro-batches, this stage, replicas, this replica */
  int first[1025];            /* first layer of each stage; first[P] = nlayers */
  double layer_sec[1025];     /* --partition balanced: each layer's measured seconds */
  stage_t *stage;
  pipe_schedule_t *sched;     /* sched[m - 1]: the step's program with m micro-batches */
  optim_segment_t *segs;      /* the stage's tensors, for its optimizer step */
  int nsegs;
  float *dx;                  /* [M][micro_batch x in_size]: input gradients in flight */
  int32_t *labels;            /* [batch]: the step's labels (the last stage) */
  comm_req_t **sends;         /* non-blocking sends of the step */
  int nsends, nback;
  size_t begin, *mb_off, *mb_len;  /* the step's micro-batches: [M] each */
  int global;                 /* samples in the step, over all replicas */
  double compute, idle;       /* this epoch: seconds computing, waiting on the pipeline */
  char extra[4096];
} pipe_t;

int pipe_requested(const train_config_t *c) { return c->pp > 1 || c->micro_batches > 1; }

int pipe_partition_parse(const char *text, int *first, int cap) {
  int n = 0;
  long prev = -1;
  const char *p = text;
  for (;;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > 1000000 || (*end && *end != ','))
      return dt_error("option --partition: '%s' (expected balanced, or the first layer of each "
                      "stage, increasing from 0: e.g. 0,3,5)", text);
    if ((n == 0 && v != 0) || v <= prev)
      return dt_error("option --partition: '%s': stages start at layers increasing from 0 "
                      "(e.g. 0,3,5)", text);
    if (first && n < cap) first[n] = (int)v;
    n++, prev = v;
    if (!*end) return n;
    p = end + 1;
  }
}

int pipe_check_world(const train_config_t *c) {
  if (!pipe_requested(c) || c->workers % c->pp == 0) return 0;
  if (c->comm == COMM_MPI)
    return dt_error("mpirun -np %d and --pp %d: workers = dp x pp, so -np must be a multiple of "
                    "--pp (e.g. mpirun -np %d for dp = 1)", c->workers, c->pp, c->pp);
  return dt_error("options --workers %d and --pp %d: workers = dp x pp, so --workers must be a "
                  "multiple of --pp (e.g. --workers %d for dp = 1)", c->workers, c->pp, c->pp);
}

int pipe_check(const train_config_t *c) {
  if (!pipe_requested(c)) return 0;
  if (c->optimization != OPTIMIZATION_CENTRAL || c->exchange != EXCHANGE_ALLREDUCE ||
      c->schedule != SCHEDULE_SYNC)
    return dt_error("option --pp %d / --micro-batches %d: pipelines run with --optimization "
                    "central --schedule sync --exchange allreduce:ALGO (the replicas of a stage "
                    "sum gradients by allreduce)", c->pp, c->micro_batches);
  if (c->comm != COMM_MPI && pipe_check_world(c) != 0) return -1;
  if (c->batch % c->micro_batches != 0)
    return dt_error("options --batch %d and --micro-batches %d: a micro-batch is batch / M "
                    "samples; give a batch that M divides (e.g. --batch %d)", c->batch,
                    c->micro_batches, (c->batch / c->micro_batches + 1) * c->micro_batches);
  if (c->shard_optimizer || c->balance || c->comm_order == COLL_ORDER_PRIORITY)
    return dt_error("option --pp / --micro-batches does not combine with %s (a stage steps its "
                    "own layers, whole)", c->shard_optimizer ? "--shard-optimizer on"
                    : c->balance ? "--balance on" : "--comm-order priority");
  int n = c->partition[0] && strcmp(c->partition, "macs") ? pipe_partition_parse(c->partition, NULL, 0)
                                                          : c->pp;
  if (n < 0) return -1;
  if (n != c->pp)
    return dt_error("options --partition %s and --pp %d: the partition names %d stages", c->partition,
                    c->pp, n);
  return 0;
}

/* ---- setup ------------------------------------------------------------------- */

/* --partition balanced: rank 0 times every layer (forward + backward of a
 * micro-batch) and every rank splits by its times, so all agree. The
 * split changes no result: a stage boundary passes activations exactly. */
static int measure_layers(pipe_t *p) {
  worker_t *w = p->w;
  model_t *m = w->model;
  int n = m->nlayers;
  float *t = calloc((size_t)n, sizeof *t);
  int rc = t ? 0 : dt_error("out of memory");
  if (rc == 0 && w->rank == 0 && !w->cfg->partition[0])
    rc = pipe_profile_layers(m, w->cfg->batch / p->M, w->cfg->seed, p->layer_sec);
  for (int i = 0; rc == 0 && w->rank == 0 && i < n; i++) t[i] = (float)p->layer_sec[i];
  if (rc == 0 && comm_size(w->comm) > 1) rc = broadcast_tree(w->coll, 0, t, (size_t)n);
  for (int i = 0; rc == 0 && i < n; i++) p->layer_sec[i] = t[i];
  free(t);
  return rc;
}

static int plan_partition(pipe_t *p) {
  const model_t *m = p->w->model;
  const train_config_t *cfg = p->w->cfg;
  if (m->nlayers >= (int)(sizeof p->first / sizeof *p->first))
    return dt_error("pipeline: %d layers (at most %zu)", m->nlayers, sizeof p->first / sizeof *p->first - 1);
  if (cfg->partition[0] && strcmp(cfg->partition, "macs")) {
    pipe_partition_parse(cfg->partition, p->first, p->P);
  } else {
    int cuts = model_stage_cuts(m, p->first); /* p->first as scratch: room for nlayers */
    if (p->P > cuts + 1)
      return dt_error("option --pp %d: the model has %d layers that can start a stage (at most "
                      "--pp %d)", p->P, cuts + 1, cuts + 1);
    DT_TRY(measure_layers(p));
    DT_TRY(model_split_costs(m, p->P, cfg->partition[0] ? NULL : p->layer_sec, p->first));
  }
  if (p->first[p->P - 1] >= m->nlayers)
    return dt_error("option --partition %s: the model has %d layers (0..%d)", cfg->partition,
                    m->nlayers, m->nlayers - 1);
  p->first[p->P] = m->nlayers;
  return 0;
}

static int plan_segments(pipe_t *p) {
  const worker_t *w = p->w;
  size_t lo = p->stage->param_off, hi = lo + p->stage->param_len;
  p->segs = calloc((size_t)w->nsegs + 1, sizeof *p->segs);
  if (!p->segs) return dt_error("out of memory");
  for (int i = 0; i < w->nsegs; i++)
    if (w->segs[i].off >= lo && w->segs[i].off < hi) p->segs[p->nsegs++] = w->segs[i];
  return 0;
}

static int setup(pipe_t *p, worker_t *w) {
  const train_config_t *cfg = w->cfg;
  memset(p, 0, sizeof *p);
  p->w = w;
  p->P = cfg->pp, p->M = cfg->micro_batches;
  p->ndp = comm_size(w->comm) / p->P;
  DT_TRY(rank_grid_new(w->comm, p->ndp, p->P, 1, &p->grid));
  p->s = p->grid.coord[GRID_PP];
  p->r = p->grid.coord[GRID_DP];
  p->pipe = p->grid.axis[GRID_PP];
  if (p->ndp > 1) DT_TRY(coll_ctx_new(p->grid.axis[GRID_DP], &p->dp));
  worker_plan_steps(w, p->ndp); /* a step: batch samples per replica */
  DT_TRY(plan_partition(p));
  int last = p->first[p->s + 1] - 1, micro = cfg->batch / p->M;
  DT_TRY(stage_new(w->model, p->first[p->s], last, p->M, micro, &p->stage));
  DT_TRY(plan_segments(p));
  p->sched = calloc((size_t)p->M, sizeof *p->sched);
  p->sends = calloc((size_t)p->M * 2 + 2, sizeof *p->sends);
  p->dx = dt_alloc_floats((size_t)p->M * micro * p->stage->in_size + 1);
  p->labels = calloc((size_t)cfg->batch + 1, sizeof *p->labels);
  p->mb_off = calloc((size_t)p->M, sizeof *p->mb_off);
  p->mb_len = calloc((size_t)p->M, sizeof *p->mb_len);
  if (!p->sched || !p->sends || !p->dx || !p->labels || !p->mb_off || !p->mb_len)
    return dt_error("out of memory");
  for (int m = 1; m <= p->M; m++) {
    DT_TRY(pipe_schedule_build((pipe_kind_t)cfg->pipe_schedule, p->P, m, &p->sched[m - 1]));
    DT_TRY(pipe_schedule_check(&p->sched[m - 1]));
  }
  return 0;
}

static void teardown(pipe_t *p) {
  for (int m = 0; p->sched && m < p->M; m++) pipe_schedule_free(&p->sched[m]);
  free(p->sched);
  for (int i = 0; i < p->nsends; i++) comm_cancel(p->pipe, p->sends[i]);
  free(p->sends);
  dt_free(p->dx);
  free(p->labels);
  free(p->mb_off);
  free(p->mb_len);
  free(p->segs);
  if (p->stage) stage_free(p->stage);
  if (p->dp) coll_ctx_free(p->dp);
  rank_grid_free(&p->grid);
}

/* ---- one step ---------------------------------------------------------------- */

/* Replica r's slice of global step k, cut into micro-batches; returns how
 * many (0 when the replica has no sample in a short last step). */
static int slice_step(pipe_t *p, int64_t k) {
  const worker_t *w = p->w;
  size_t gb = (size_t)w->cfg->batch * p->ndp, start = (size_t)k * gb;
  size_t in_step = w->train->n - start < gb ? w->train->n - start : gb, off, len;
  data_shard(in_step, p->r, p->ndp, &off, &len);
  p->begin = start + off;
  p->global = (int)in_step;
  int m = len < (size_t)p->M ? (int)len : p->M;
  for (int j = 0; j < m; j++) data_shard(len, j, m, &p->mb_off[j], &p->mb_len[j]);
  return m;
}

static int recv_timed(pipe_t *p, int src, int tag, void *buf, size_t bytes) {
  double t0 = dt_now();
  int rc = comm_recv(p->pipe, src, tag, buf, bytes);
  double dt = dt_now() - t0;
  p->idle += dt;
  p->w->timers.comm += dt;
  p->w->timers.comm_exposed += dt;
  return rc;
}

static int send_async(pipe_t *p, int dst, int tag, const void *buf, size_t bytes) {
  return comm_isend(p->pipe, dst, tag, buf, bytes, &p->sends[p->nsends++]);
}

static void count_compute(pipe_t *p, double t0) {
  double dt = dt_now() - t0;
  comm_compute_delay(p->w->comm, dt); /* an emulated straggler */
  dt = dt_now() - t0;
  p->compute += dt;
  p->w->timers.compute += dt;
}

/* Forward of micro-batch mb; the last stage adds its loss to the epoch's. */
static int forward(pipe_t *p, int mb) {
  worker_t *w = p->w;
  stage_t *st = p->stage;
  int n = (int)p->mb_len[mb];
  double t0 = dt_now();
  rng_t rng; /* dropout masks: a pure function of (seed, step, stage, micro-batch) */
  rng_seed(&rng, rng_derive(w->cfg->seed, 0x919e, (uint64_t)((w->step * p->P + p->s) * p->M + mb)));
  DT_TRY(stage_forward(st, mb, stage_input(st, mb), n, 1, &rng, NULL));
  if (st->ends_model) {
    if (p->s > 0) /* stage 0 (P = 1) has the labels from its LOAD */
      data_gather(w->train, w->order + p->begin + p->mb_off[mb], (size_t)n, NULL, p->labels + p->mb_off[mb]);
    double loss;
    int correct;
    DT_TRY(stage_loss(st, mb, p->labels + p->mb_off[mb], p->global, &loss, &correct));
    if (!isfinite(loss))
      return dt_error("step %lld: the training loss is %s; stopping (lower --lr, or add "
                      "--warmup-epochs)", (long long)w->step, isnan(loss) ? "NaN" : "infinite");
    w->epoch_loss_sum += loss;
    w->epoch_samples += n;
    w->epoch_correct += correct;
  }
  count_compute(p, t0);
  return 0;
}

static float *dx_of(pipe_t *p, int mb) {
  return p->dx + (size_t)mb * p->stage->micro_batch * p->stage->in_size;
}

static int backward(pipe_t *p, int mb) {
  double t0 = dt_now();
  DT_TRY(stage_backward(p->stage, mb, NULL, p->s > 0 ? dx_of(p, mb) : NULL, p->nback++ > 0, NULL, NULL));
  count_compute(p, t0);
  return 0;
}

/* The step's sends delivered, then the stage's gradients summed over the
 * replicas. */
static int reduce(pipe_t *p) {
  worker_t *w = p->w;
  double t0 = dt_now();
  int rc = comm_waitall(p->pipe, p->nsends, p->sends);
  p->nsends = 0;
  p->idle += dt_now() - t0;
  if (rc != 0) return rc;
  if (p->dp && p->stage->param_len)
    rc = allreduce(p->dp, w->cfg->algo, w->model->grads + p->stage->param_off, p->stage->param_len);
  worker_comm_since(w, t0);
  return rc;
}

static int execute(pipe_t *p, pipe_instr_t in) {
  worker_t *w = p->w;
  stage_t *st = p->stage;
  int mb = in.mb;
  size_t n = mb >= 0 ? p->mb_len[mb] : 0;
  switch (in.op) {
  case PIPE_LOAD:
    data_gather(w->train, w->order + p->begin + p->mb_off[mb], n, stage_input(st, mb),
                p->labels + p->mb_off[mb]);
    return 0;
  case PIPE_RECV_ACT:
    return recv_timed(p, p->s - 1, TAG_PIPE_ACT, stage_input(st, mb), n * st->in_size * sizeof(float));
  case PIPE_FORWARD: return forward(p, mb);
  case PIPE_SEND_ACT:
    return send_async(p, p->s + 1, TAG_PIPE_ACT, stage_output(st, mb), n * st->out_size * sizeof(float));
  case PIPE_RECV_GRAD:
    return recv_timed(p, p->s + 1, TAG_PIPE_GRAD, stage_output_grad(st, mb), n * st->out_size * sizeof(float));
  case PIPE_BACKWARD: return backward(p, mb);
  case PIPE_SEND_GRAD:
    return send_async(p, p->s - 1, TAG_PIPE_GRAD, dx_of(p, mb), n * st->in_size * sizeof(float));
  case PIPE_REDUCE: return reduce(p);
  case PIPE_STEP: {
    double t0 = dt_now();
    worker_apply_update_segs(w, p->segs, p->nsegs);
    p->compute += dt_now() - t0;
    return 0;
  }
  default: return dt_error("pipeline: unknown instruction %d", in.op);
  }
}

static int step(void *st, int epoch, int64_t k) {
  pipe_t *p = st;
  worker_t *w = p->w;
  if (dt_interrupted()) return worker_interrupted(w);
  int m = slice_step(p, k);
  p->nback = 0;
  if (m == 0) { /* a replica with no sample: zero gradients, still in the sum */
    kern_zero(p->stage->param_len, w->model->grads + p->stage->param_off);
    DT_TRY(execute(p, (pipe_instr_t){PIPE_REDUCE, -1}));
    return execute(p, (pipe_instr_t){PIPE_STEP, -1});
  }
  const pipe_schedule_t *sc = &p->sched[m - 1];
  for (int i = 0; i < sc->len[p->s]; i++)
    if (execute(p, sc->prog[p->s][i]) != 0) return dt_error_prefix("stage %d: ", p->s);
  return 0;
}

/* ---- evaluation and report --------------------------------------------------- */

static int begin_epoch(void *st, int epoch) {
  pipe_t *p = st;
  p->compute = p->idle = 0;
  return 0;
}

/* Replica 0's stages send their ranges to rank 0 (params, buffers and, for
 * a checkpoint, the optimizer state), which then holds the whole model. */
static int gather_model(pipe_t *p) {
  worker_t *w = p->w;
  model_t *m = w->model;
  int nstate = w->cfg->checkpoint[0] ? w->opt->nstate : 0;
  if (p->r != 0) return 0;
  if (p->s > 0) {
    const stage_t *st = p->stage;
    uint64_t head[4] = {st->param_off, st->param_len, st->buf_off, st->buf_len};
    DT_TRY(comm_send(p->pipe, 0, TAG_PIPE_GATHER, head, sizeof head));
    DT_TRY(comm_send(p->pipe, 0, TAG_PIPE_GATHER, m->params + st->param_off, st->param_len * sizeof(float)));
    DT_TRY(comm_send(p->pipe, 0, TAG_PIPE_GATHER, m->buffers + st->buf_off, st->buf_len * sizeof(float)));
    for (int i = 0; i < nstate; i++)
      DT_TRY(comm_send(p->pipe, 0, TAG_PIPE_GATHER, w->opt->state[i] + st->param_off,
                       st->param_len * sizeof(float)));
    return 0;
  }
  for (int s = 1; s < p->P; s++) {
    uint64_t h[4];
    DT_TRY(comm_recv(p->pipe, s, TAG_PIPE_GATHER, h, sizeof h));
    if (h[0] + h[1] > m->nparams || h[2] + h[3] > m->nbuffers)
      return dt_error("pipeline: stage %d sent the range [%llu, +%llu) of a %zu-parameter model", s,
                      (unsigned long long)h[0], (unsigned long long)h[1], m->nparams);
    DT_TRY(comm_recv(p->pipe, s, TAG_PIPE_GATHER, m->params + h[0], h[1] * sizeof(float)));
    DT_TRY(comm_recv(p->pipe, s, TAG_PIPE_GATHER, m->buffers + h[2], h[3] * sizeof(float)));
    for (int i = 0; i < nstate; i++)
      DT_TRY(comm_recv(p->pipe, s, TAG_PIPE_GATHER, w->opt->state[i] + h[0], h[1] * sizeof(float)));
  }
  return 0;
}

static void extra_json(pipe_t *p, const float *times) {
  size_t n = (size_t)snprintf(p->extra, sizeof p->extra,
                              "\"pp\":%d,\"dp\":%d,\"micro_batches\":%d,\"pipe_schedule\":\"%s\","
                              "\"stage_first_layer\":[", p->P, p->ndp, p->M,
                              pipe_kind_name((pipe_kind_t)p->w->cfg->pipe_schedule));
  double busy = 0, idle = 0;
  for (int s = 0; s < p->P; s++) busy += times[s], idle += times[p->P + s];
  for (int s = 0; s < p->P && n < sizeof p->extra; s++)
    n += (size_t)snprintf(p->extra + n, sizeof p->extra - n, "%s%d", s ? "," : "", p->first[s]);
  const char *keys[3] = {"stage_compute_sec", "stage_idle_sec", "stage_peak_activations"};
  for (int a = 0; a < 3; a++) {
    if (n < sizeof p->extra) n += (size_t)snprintf(p->extra + n, sizeof p->extra - n, "],\"%s\":[", keys[a]);
    for (int s = 0; s < p->P && n < sizeof p->extra; s++) {
      double v = a < 2 ? times[a * p->P + s] : pipe_schedule_peak_live(&p->sched[p->M - 1], s);
      n += (size_t)snprintf(p->extra + n, sizeof p->extra - n, a < 2 ? "%s%.4f" : "%s%.0f", s ? "," : "", v);
    }
  }
  const model_t *m = p->w->model;
  for (int a = 0; a < 2; a++) { /* the partitioner's view: measured seconds, parameters */
    if (n < sizeof p->extra)
      n += (size_t)snprintf(p->extra + n, sizeof p->extra - n, "],\"%s\":[",
                            a ? "stage_params" : "stage_profiled_sec");
    for (int s = 0; s < p->P && n < sizeof p->extra; s++) {
      double v = 0;
      for (int i = p->first[s]; i < p->first[s + 1]; i++)
        v += a ? (double)m->layers[i].param_len : p->layer_sec[i];
      n += (size_t)snprintf(p->extra + n, sizeof p->extra - n, a ? "%s%.0f" : "%s%.6f", s ? "," : "", v);
    }
  }
  if (n < sizeof p->extra)
    snprintf(p->extra + n, sizeof p->extra - n, "],\"bubble_fraction\":%.4f",
             busy + idle > 0 ? idle / (busy + idle) : 0);
}

/* Train figures summed over the replicas' last stages, replica 0's stage
 * times, the whole model on rank 0, evaluated there. */
static int evaluate(void *st, epoch_report_t *r) {
  pipe_t *p = st;
  worker_t *w = p->w;
  int P = p->P;
  float *v = calloc((size_t)(3 + 2 * P), sizeof *v);
  if (!v) return dt_error("out of memory");
  if (p->stage->ends_model)
    v[0] = (float)w->epoch_loss_sum, v[1] = (float)w->epoch_samples, v[2] = (float)w->epoch_correct;
  if (p->r == 0) v[3 + p->s] = (float)p->compute, v[3 + P + p->s] = (float)p->idle;
  int rc = allreduce(w->coll, ALLREDUCE_TREE, v, (size_t)(3 + 2 * P));
  if (rc == 0) rc = gather_model(p);
  if (rc == 0 && comm_rank(w->comm) == 0) {
    r->train_loss = v[1] > 0 ? v[0] / v[1] : 0;
    r->train_acc = v[1] > 0 ? v[2] / v[1] : 0;
    double loss;
    int64_t correct;
    worker_evaluate(w, 0, w->test->n, &loss, &correct);
    r->test_loss = loss / (double)w->test->n;
    r->test_acc = (double)correct / (double)w->test->n;
    extra_json(p, v + 3);
    r->extra_json = p->extra;
  }
  free(v);
  return rc;
}

int strategy_pipeline(worker_t *w) {
  pipe_t *p = calloc(1, sizeof *p);
  if (!p) return dt_error("out of memory");
  int rc = setup(p, w);
  driver_ops_t ops = {.begin_epoch = begin_epoch, .step = step, .evaluate = evaluate};
  if (rc == 0) rc = driver_run(w, &ops, p);
  teardown(p);
  free(p);
  return rc;
}
