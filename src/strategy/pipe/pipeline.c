/* The pipeline engine: one rank runs one stage of one replica (V chunks
 * of the model under interleaved 1F1B), executing its schedule's
 * instructions (schedule.h) on the stage seam (nn/stage.c).
 *
 * The asynchronous schedules (PipeDream, 2BW, DDG) stream units across
 * steps; a unit's activations stay in a slot (M + P of them) until its
 * backward, perhaps steps later, with the weight version its forward used:
 * the newest lives in the model, the older ones a rank still needs in a
 * ring (a copy of the stage's range taken before each update: P of them
 * for PipeDream, one for 2BW, none for DDG, whose backward runs on the
 * weights as they are). The pipeline drains at each epoch's end.
 *
 * Ranks form a dp x pp grid (grid.h): the stages of a replica talk over
 * the pipeline axis (activations forward, gradients back, non-blocking
 * sends waited at the step's REDUCE), the replicas of a stage sum their
 * gradients over the data-parallel axis, and every stage steps its own
 * range of the parameter arena. A step takes replica r's slice of the
 * global batch (batch x dp samples), cut into M micro-batches; the loss
 * of each is averaged over the global batch, so the summed gradient is the
 * one of plain training on that batch, up to the order of float sums
 * (micro-batch by micro-batch instead of one GEMM over the batch). Under
 * --compress the replicas' sums go through the compressor (compress/), a
 * chunk a bucket, as data parallelism's reducer sends its buckets.
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

/* Activations leaving chunk g carry tag TAG_PIPE_ACT0 + g, gradients
 * coming back to it TAG_PIPE_GRAD0 + g: a channel per pair of chunks. */
enum { TAG_PIPE_GATHER = 5403, TAG_PIPE_ACT0 = 6000, TAG_PIPE_GRAD0 = 8100 };

typedef struct {
  worker_t *w;
  rank_grid_t grid;
  comm_t *pipe;               /* the stages of this replica, ranked by stage */
  coll_ctx_t *dp;             /* the replicas of this stage (NULL: dp = 1) */
  int P, V, G, M, s, ndp, r;  /* ranks, chunks per rank, chunks, micro-batches, this rank, replicas, this replica */
  pipe_kind_t kind;
  int async;                  /* pipedream, 2bw, ddg: a stream of units across steps */
  int first[1025];            /* first layer of each chunk (global stage); first[G] = nlayers */
  double layer_sec[1025];     /* --partition balanced: each layer's measured seconds */
  stage_t *st[64];            /* this rank's chunks: st[v] is global stage v P + s */
  float *dx[64];              /* [slots][micro_batch x in_size] of each chunk: input gradients in flight */
  int nback[64];              /* backwards into each chunk's gradients since its last step */
  int slots;                  /* activation sets per chunk: M, or M + P for a stream */
  pipe_schedule_t sched;      /* synchronous: the step's program with M micro-batches */
  pipe_schedule_t short_sched; /* and with the m < M of a short last step, built when first met */
  pipe_instr_t *prog;         /* asynchronous: this step's (or the drain's) instructions */
  optim_segment_t *segs;      /* the rank's tensors, for its optimizer step */
  int nsegs;
  int32_t *labels;            /* [slots][micro_batch]: each unit's labels (the last chunk) */
  int *slot_n;                /* each slot's samples */
  int64_t *slot_ver;          /* the weight version of its forward (-1: none in flight) */
  comm_req_t **sends;         /* non-blocking sends of the step */
  int nsends, max_sends;
  size_t begin, *mb_off, *mb_len;  /* the step's micro-batches: [M] each */
  int global;                 /* samples in the step, over all replicas */
  /* weight versions (asynchronous): the newest in the model, older ones in a ring */
  int64_t version, epoch_version, epoch_step;  /* updates done; at the epoch's start; w->step then */
  int ring_len;               /* versions kept besides the newest: P (pipedream), 1 (2bw), 0 */
  float *ring;                /* [ring_len][param_len] (V = 1: the one chunk's range) */
  unsigned char *lag_seen;    /* [ring_len + 1]: scratch of count_versions */
  int64_t steps_taken;        /* steps of this epoch, for the drain */
  int live, peak_live, peak_versions;
  double compute, idle;       /* this epoch: seconds computing, waiting on the pipeline */
  char extra[4096];
  /* --compress: the replicas' sums through the compressor (dp > 1) */
  compressor_t *cx;
  compress_matrix_t *mats;    /* every parameter tensor as a matrix */
  int mat[64], nmat[64];      /* chunk v's tensors: mats[mat[v] .. mat[v] + nmat[v]) */
  int64_t reduces;            /* REDUCEs run: seeds the codecs, counts the dense warm-up */
} pipe_t;


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
  if (!train_pipelined(c) || c->workers % c->pipe.stages == 0) return 0;
  if (c->comm == COMM_MPI)
    return dt_error("mpirun -np %d and --pp %d: workers = dp x pp, so -np must be a multiple of "
                    "--pp (e.g. mpirun -np %d for dp = 1)", c->workers, c->pipe.stages, c->pipe.stages);
  return dt_error("options --workers %d and --pp %d: workers = dp x pp, so --workers must be a "
                  "multiple of --pp (e.g. --workers %d for dp = 1)", c->workers, c->pipe.stages, c->pipe.stages);
}

int pipe_check(const train_config_t *c) {
  if (!train_pipelined(c)) return 0;
  if (c->optimization != OPTIMIZATION_CENTRAL || c->exchange != EXCHANGE_ALLREDUCE ||
      c->schedule != SCHEDULE_SYNC)
    return dt_error("option --pp %d / --micro-batches %d: pipelines run with --optimization "
                    "central --schedule sync --exchange allreduce:ALGO (the replicas of a stage "
                    "sum gradients by allreduce)", c->pipe.stages, c->pipe.micro_batches);
  if (c->comm != COMM_MPI && pipe_check_world(c) != 0) return -1;
  if (c->batch % c->pipe.micro_batches != 0)
    return dt_error("options --batch %d and --micro-batches %d: a micro-batch is batch / M "
                    "samples; give a batch that M divides (e.g. --batch %d)", c->batch,
                    c->pipe.micro_batches, (c->batch / c->pipe.micro_batches + 1) * c->pipe.micro_batches);
  if (c->shard_optimizer || c->balance || c->comm_order == COLL_ORDER_PRIORITY)
    return dt_error("option --pp / --micro-batches does not combine with %s (a stage steps its "
                    "own layers, whole)", c->shard_optimizer ? "--shard-optimizer on"
                    : c->balance ? "--balance on" : "--comm-order priority");
  pipe_kind_t kind = (pipe_kind_t)c->pipe.schedule;
  if (kind == PIPE_INTERLEAVED && c->pipe.stages < 2 && c->pipe.chunks > 1)
    return dt_error("option --pipe-schedule interleaved:%d: the chunks go round the ranks, so it "
                    "needs --pp 2 or more", c->pipe.chunks);
  if (pipe_kind_check_m(kind, c->pipe.stages, c->pipe.micro_batches) != 0) return -1;
  int chunks = c->pipe.stages * c->pipe.chunks;
  int n = c->pipe.partition[0] && strcmp(c->pipe.partition, "macs") ? pipe_partition_parse(c->pipe.partition, NULL, 0)
                                                          : chunks;
  if (n < 0) return -1;
  if (n != chunks)
    return dt_error("options --partition %s and --pp %d%s: the partition names %d stage%s (give %d)",
                    c->pipe.partition, c->pipe.stages, c->pipe.chunks > 1 ? " with interleaved chunks" : "", n,
                    n == 1 ? "" : "s", chunks);
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
  if (rc == 0 && w->rank == 0 && !w->cfg->pipe.partition[0])
    rc = pipe_profile_layers(m, w->cfg->batch / p->M, w->cfg->seed, p->layer_sec);
  for (int i = 0; rc == 0 && w->rank == 0 && i < n; i++) t[i] = (float)p->layer_sec[i];
  if (rc == 0 && comm_size(w->comm) > 1) rc = broadcast_tree(w->coll, 0, t, (size_t)n);
  for (int i = 0; rc == 0 && i < n; i++) p->layer_sec[i] = t[i];
  free(t);
  return rc;
}

int pipe_check_model(const train_config_t *c, const model_t *m) {
  if (!train_pipelined(c)) return 0;
  int P = c->pipe.stages, V = c->pipe.chunks, G = P * V, cap = 1024;
  if (m->nlayers >= cap + 1)
    return dt_error("pipeline: %d layers (at most %d)", m->nlayers, cap);
  if (c->pipe.partition[0] && strcmp(c->pipe.partition, "macs")) {
    int first[1025];
    if (pipe_partition_parse(c->pipe.partition, first, cap) != G) return 0; /* pipe_check's */
    if (first[G - 1] >= m->nlayers)
      return dt_error("option --partition %s: the model has %d layer%s (0..%d)", c->pipe.partition,
                      m->nlayers, m->nlayers == 1 ? "" : "s", m->nlayers - 1);
    return 0;
  }
  int *cuts = malloc((size_t)m->nlayers * sizeof *cuts + 1);
  if (!cuts) return dt_error("out of memory");
  int n = model_stage_cuts(m, cuts) + 1;
  free(cuts);
  if (G <= n) return 0;
  if (V > 1)
    return dt_error("options --pp %d and --pipe-schedule interleaved:%d: %d chunks, but the model "
                    "has %d layer%s that can start one (at most --pp x V = %d)", P, V, G, n,
                    n == 1 ? "" : "s", n);
  return dt_error("option --pp %d: the model has %d layer%s that can start a stage (at most "
                  "--pp %d)", P, n, n == 1 ? "" : "s", n);
}

/* The model cut into G = P V chunks (global stages); pipe_check_model has
 * refused the cuts that do not fit it. */
static int plan_partition(pipe_t *p) {
  const model_t *m = p->w->model;
  const train_config_t *cfg = p->w->cfg;
  int G = p->G;
  DT_TRY(pipe_check_model(cfg, m));
  if (cfg->pipe.partition[0] && strcmp(cfg->pipe.partition, "macs")) {
    pipe_partition_parse(cfg->pipe.partition, p->first, G);
  } else {
    DT_TRY(measure_layers(p));
    DT_TRY(model_split_costs(m, G, cfg->pipe.partition[0] ? NULL : p->layer_sec, p->first));
  }
  p->first[G] = m->nlayers;
  return 0;
}

static int in_chunks(const pipe_t *p, size_t off) {
  for (int v = 0; v < p->V; v++)
    if (off >= p->st[v]->param_off && off < p->st[v]->param_off + p->st[v]->param_len) return 1;
  return 0;
}

static int plan_segments(pipe_t *p) {
  const worker_t *w = p->w;
  p->segs = calloc((size_t)w->nsegs + 1, sizeof *p->segs);
  if (!p->segs) return dt_error("out of memory");
  for (int i = 0; i < w->nsegs; i++)
    if (in_chunks(p, w->segs[i].off)) p->segs[p->nsegs++] = w->segs[i];
  return 0;
}

static int plan_chunks(pipe_t *p, int micro) {
  for (int v = 0; v < p->V; v++) {
    int g = v * p->P + p->s;
    DT_TRY(stage_new(p->w->model, p->first[g], p->first[g + 1] - 1, p->slots, micro, &p->st[v]));
    p->dx[v] = dt_alloc_floats((size_t)p->slots * micro * p->st[v]->in_size + 1);
    if (!p->dx[v]) return -1;
  }
  return 0;
}

/* --compress: the replicas of each stage sum their gradients through the
 * compressor, as data parallelism's reducer does (each chunk a bucket,
 * with its tensors as matrices for PowerSGD). */
static int plan_compression(pipe_t *p) {
  worker_t *w = p->w;
  const model_t *m = w->model;
  if (w->cfg->compression.codec.kind == CODEC_NONE) return 0;
  if (p->ndp == 1) {
    char name[48];
    codec_format(&w->cfg->compression.codec, name, sizeof name);
    return dt_error("option --compress %s: this pipeline has one replica of each stage, so no "
                    "gradients are summed (activations go stage to stage as they are): use "
                    "%s %d for two replicas", name, w->cfg->comm == COMM_MPI ? "mpirun -np"
                    : "--workers", 2 * p->P * (w->cfg->tensor.ranks > 1 ? w->cfg->tensor.ranks : 1));
  }
  if (!(p->mats = calloc((size_t)m->ntensors + 1, sizeof *p->mats))) return dt_error("out of memory");
  compress_model_matrices(m, p->mats);
  for (int v = 0; v < p->V; v++)
    p->nmat[v] = compress_tensors_in(m, p->st[v]->param_off, p->st[v]->param_len, &p->mat[v]);
  DT_TRY(worker_compressor_new(w, p->r, p->ndp, &p->cx));
  p->reduces = w->step; /* a resumed run's codecs go on from its step */
  return worker_keep_compressor(w, p->cx);
}

/* A synchronous step's program with m micro-batches, checked. */
static int build_schedule(pipe_t *p, int m, pipe_schedule_t *sc) {
  pipe_schedule_free(sc);
  DT_TRY(pipe_schedule_build(p->kind, p->P, p->V, m, 0, sc));
  return pipe_schedule_check(sc);
}

/* The program of a step with m micro-batches: M's, or the short last
 * step's, built the first time that m is met (one schedule for each m up
 * to M would take memory and time as M squared). */
static int step_schedule(pipe_t *p, int m, const pipe_schedule_t **out) {
  if (m != p->M && p->short_sched.M != m) DT_TRY(build_schedule(p, m, &p->short_sched));
  *out = m == p->M ? &p->sched : &p->short_sched;
  return 0;
}

static int setup(pipe_t *p, worker_t *w) {
  const train_config_t *cfg = w->cfg;
  memset(p, 0, sizeof *p);
  p->w = w;
  p->P = cfg->pipe.stages, p->M = cfg->pipe.micro_batches, p->V = cfg->pipe.chunks, p->G = p->P * p->V;
  p->kind = (pipe_kind_t)cfg->pipe.schedule;
  p->async = pipe_kind_async(p->kind);
  if (p->V > (int)(sizeof p->st / sizeof *p->st))
    return dt_error("option --pipe-schedule interleaved:%d: at most %zu chunks per rank", p->V,
                    sizeof p->st / sizeof *p->st);
  p->ndp = comm_size(w->comm) / p->P;
  DT_TRY(rank_grid_new(w->comm, p->ndp, p->P, 1, &p->grid));
  p->s = p->grid.coord[GRID_PP];
  p->r = p->grid.coord[GRID_DP];
  p->pipe = p->grid.axis[GRID_PP];
  if (p->ndp > 1) DT_TRY(coll_ctx_new(p->grid.axis[GRID_DP], &p->dp));
  worker_plan_steps(w, p->ndp); /* a step: batch samples per replica */
  int last[GRID_AXES] = {0};      /* the progress line comes from where the loss is */
  last[GRID_PP] = p->P - 1;
  w->progress_rank = rank_grid_rank(p->ndp, p->P, 1, last);
  DT_TRY(plan_partition(p));
  int micro = cfg->batch / p->M;
  p->slots = p->async ? p->M + p->P : p->M;
  DT_TRY(plan_chunks(p, micro));
  DT_TRY(plan_segments(p));
  DT_TRY(plan_compression(p));
  p->max_sends = p->async ? 2 * p->M + 2 * p->P + 2 : 2 * p->M * p->V + 2;
  p->sends = calloc((size_t)p->max_sends, sizeof *p->sends);
  p->labels = calloc((size_t)p->slots * micro, sizeof *p->labels);
  p->slot_n = calloc((size_t)p->slots, sizeof *p->slot_n);
  p->slot_ver = calloc((size_t)p->slots, sizeof *p->slot_ver);
  p->mb_off = calloc((size_t)p->M, sizeof *p->mb_off);
  p->mb_len = calloc((size_t)p->M, sizeof *p->mb_len);
  if (!p->sends || !p->labels || !p->slot_n || !p->slot_ver || !p->mb_off || !p->mb_len)
    return dt_error("out of memory");
  for (int i = 0; i < p->slots; i++) p->slot_ver[i] = -1;
  if (p->async) {
    p->ring_len = p->kind == PIPE_PIPEDREAM ? p->P : p->kind == PIPE_2BW ? 1 : 0;
    int n = pipe_async_max_len(p->P, p->M);
    p->prog = calloc((size_t)n, sizeof *p->prog);
    p->ring = dt_alloc_floats((size_t)p->ring_len * p->st[0]->param_len + 1);
    p->lag_seen = calloc((size_t)p->ring_len + 1, 1);
    if (!p->prog || !p->ring || !p->lag_seen) return dt_error("out of memory");
    pipe_schedule_t sc; /* the stream over a few steps, checked once */
    DT_TRY(pipe_schedule_build(p->kind, p->P, 1, p->M, p->P + 2, &sc));
    int rc = pipe_schedule_check(&sc);
    pipe_schedule_free(&sc);
    return rc;
  }
  return build_schedule(p, p->M, &p->sched);
}

static void teardown(pipe_t *p) {
  pipe_schedule_free(&p->sched);
  pipe_schedule_free(&p->short_sched);
  free(p->prog);
  for (int i = 0; i < p->nsends; i++) comm_cancel(p->pipe, p->sends[i]);
  free(p->sends);
  for (int v = 0; v < p->V; v++) {
    dt_free(p->dx[v]);
    if (p->st[v]) stage_free(p->st[v]);
  }
  dt_free(p->ring);
  free(p->lag_seen);
  free(p->labels);
  free(p->slot_n);
  free(p->slot_ver);
  free(p->mb_off);
  free(p->mb_len);
  free(p->segs);
  if (p->w->ckpt_cx == p->cx) p->w->ckpt_cx = NULL;
  compressor_free(p->cx);
  free(p->mats);
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
  for (int j = m; j < p->M; j++) p->mb_off[j] = p->mb_len[j] = 0; /* a stream's empty units */
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
  if (p->nsends >= p->max_sends) return dt_error("pipeline: more than %d sends in a step", p->max_sends);
  return comm_isend(p->pipe, dst, tag, buf, bytes, &p->sends[p->nsends++]);
}

static void count_compute(pipe_t *p, double t0) {
  double dt = dt_now() - t0;
  comm_compute_delay(p->w->comm, dt); /* an emulated straggler */
  dt = dt_now() - t0;
  p->compute += dt;
  p->w->timers.compute += dt;
}

/* A unit's slot: the micro-batch itself in a step, its place in the ring of
 * slots in a stream. */
static int slot_of(const pipe_t *p, int mb) { return p->async ? mb % p->slots : mb; }
/* The micro-batch of the current step a unit is. */
static int micro_of(const pipe_t *p, int mb) { return p->async ? mb % p->M : mb; }

/* The weights of version v: the model's for the newest, else the ring's. */
static const float *weights_of(pipe_t *p, int64_t v) {
  if (v == p->version) return NULL;
  return p->ring + (size_t)(v % p->ring_len) * p->st[0]->param_len;
}

/* The version a unit's forward uses (asynchronous schedules):
 * PipeDream the newest (with vertical sync, the one stage 0 used: stage 0
 * has done one update per unit after its first P - 1), 2BW the version
 * before the newest that the step's units all share (one step of delay),
 * DDG the newest. Counted from the epoch's start (the pipeline drains at
 * an epoch's end). */
static int64_t forward_version(const pipe_t *p, int unit) {
  int64_t base = p->epoch_version;
  if (p->kind == PIPE_PIPEDREAM && p->w->cfg->pipe.vertical_sync)
    return base + (unit - (p->P - 1) > 0 ? unit - (p->P - 1) : 0);
  if (p->kind == PIPE_2BW) return base + (unit / p->M - 1 > 0 ? unit / p->M - 1 : 0);
  return p->version;
}

/* Weight versions the rank holds: the newest, and those of in-flight
 * units' forwards kept for their backwards (DDG keeps none); each is
 * 0 .. ring_len updates behind the newest. */
static int count_versions(pipe_t *p) {
  if (!p->ring_len) return 1;
  memset(p->lag_seen, 0, (size_t)p->ring_len + 1);
  p->lag_seen[0] = 1;
  for (int i = 0; i < p->slots; i++)
    if (p->slot_ver[i] >= 0) p->lag_seen[p->version - p->slot_ver[i]] = 1;
  int n = 0;
  for (int k = 0; k <= p->ring_len; k++) n += p->lag_seen[k];
  return n;
}

/* Before a unit's forward: choose and pin its weights. */
static int pin_weights(pipe_t *p, int unit, int slot) {
  int64_t v = forward_version(p, unit);
  if (v > p->version || v < p->version - p->ring_len)
    return dt_error("pipeline %s: unit %d wants weight version %lld, the stage holds %lld..%lld",
                    pipe_kind_name(p->kind), unit, (long long)v, (long long)(p->version - p->ring_len),
                    (long long)p->version);
  p->slot_ver[slot] = v;
  return stage_use_weights(p->st[0], slot, weights_of(p, v));
}

/* Dropout masks as one worker draws them (data parallelism's rank r, for
 * replica r): one stream a step, each dropout layer drawing its in_full
 * channels of every position for the batch's samples in order, after the
 * layers before it. A micro-batch of chunk st seeds that stream and has
 * each of its dropout layers skip to where its samples' draws are
 * (samples [a, a + n) of the replica's B). Skipping costs a draw a draw. */
static void place_dropout(pipe_t *p, const stage_t *st, int micro, int n, rng_t *rng) {
  worker_t *w = p->w;
  model_t *m = w->model;
  uint64_t B = p->mb_off[p->M - 1] + p->mb_len[p->M - 1], a = p->mb_off[micro];
  uint64_t base = 0, at = 0; /* the layer's first draw for the batch; where the stream is */
  rng_seed(rng, rng_derive(w->cfg->seed, 0xd80, (uint64_t)(w->step * p->ndp + p->r)));
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

/* Forward of micro-batch mb of chunk v; the last chunk adds its loss to the epoch's. */
static int forward(pipe_t *p, int v, int mb) {
  worker_t *w = p->w;
  stage_t *st = p->st[v];
  int slot = slot_of(p, mb), n = p->slot_n[slot], g = v * p->P + p->s;
  if (p->async) DT_TRY(pin_weights(p, mb, slot));
  if (++p->live > p->peak_live) p->peak_live = p->live;
  if (p->async) {
    int nv = count_versions(p);
    if (nv > p->peak_versions) p->peak_versions = nv;
  }
  if (n == 0) return 0; /* an empty unit of a stream: nothing to compute */
  double t0 = dt_now();
  rng_t rng;
  place_dropout(p, st, micro_of(p, mb), n, &rng);
  DT_TRY(stage_forward(st, slot, stage_input(st, slot), n, 1, &rng, NULL));
  if (st->ends_model) {
    int32_t *labels = p->labels + (size_t)slot * st->micro_batch;
    if (g > 0) /* the first chunk (P = 1) has the labels from its LOAD */
      data_gather(w->train, w->order + p->begin + p->mb_off[micro_of(p, mb)], (size_t)n, NULL, labels);
    double loss;
    int correct;
    DT_TRY(stage_loss(st, slot, labels, p->global, &loss, &correct));
    if (!isfinite(loss))
      return worker_step_diverged(w, loss);
    w->epoch_loss_sum += loss;
    w->epoch_samples += n;
    w->epoch_correct += correct;
  }
  count_compute(p, t0);
  return 0;
}

static float *dx_of(pipe_t *p, int v, int mb) {
  return p->dx[v] + (size_t)slot_of(p, mb) * p->st[v]->micro_batch * p->st[v]->in_size;
}

/* Backward of micro-batch mb of chunk v: pipedream and 2bw on the weights
 * its forward used, ddg on the newest (the stored activations, the
 * weights as they are now). */
static int backward(pipe_t *p, int v, int mb) {
  stage_t *st = p->st[v];
  int slot = slot_of(p, mb), g = v * p->P + p->s, acc = p->nback[v] > 0;
  p->live--;
  if (p->async)
    DT_TRY(stage_use_weights(st, slot, p->kind == PIPE_DDG ? NULL : weights_of(p, p->slot_ver[slot])));
  double t0 = dt_now();
  if (p->slot_n[slot] == 0) { /* an empty unit: no gradient (zeros when it is the first) */
    if (!acc) kern_zero(st->param_len, p->w->model->grads + st->param_off);
  } else {
    DT_TRY(stage_backward(st, slot, NULL, g > 0 ? dx_of(p, v, mb) : NULL, acc, NULL, NULL));
  }
  p->nback[v]++;
  if (p->async) p->slot_ver[slot] = -1;
  count_compute(p, t0);
  return 0;
}

static int wait_sends(pipe_t *p) {
  double t0 = dt_now();
  int rc = comm_waitall(p->pipe, p->nsends, p->sends);
  p->nsends = 0;
  p->idle += dt_now() - t0;
  return rc;
}

/* The step's sends delivered, then the rank's gradients summed over the
 * replicas. */
static int reduce(pipe_t *p) {
  worker_t *w = p->w;
  double t0 = dt_now();
  if (!p->async) DT_TRY(wait_sends(p));
  /* the dense warm-up (--compress-warmup-steps) but where the compressor runs it */
  int compress = p->cx && (p->reduces >= w->cfg->compression.warmup_steps ||
                           compressor_takes_warmup(p->cx));
  for (int v = 0; p->dp && v < p->V; v++) {
    size_t off = p->st[v]->param_off, len = p->st[v]->param_len;
    if (!len) continue;
    if (compress)
      DT_TRY(compressor_allreduce(p->cx, p->dp, w->model->grads + off, off, len, p->reduces, v,
                                  p->mats + p->mat[v], p->nmat[v]));
    else DT_TRY(allreduce(p->dp, w->cfg->algo, w->model->grads + off, len));
  }
  p->reduces++;
  worker_comm_since(w, t0);
  return 0;
}

/* The optimizer step: synchronous schedules as one worker's (it advances
 * w->step); a stream's at the lr of the unit's step, keeping the version
 * it replaces in the ring when older versions are still in use. */
static void update(pipe_t *p, int unit) {
  worker_t *w = p->w;
  double t0 = dt_now();
  for (int v = 0; v < p->V; v++) p->nback[v] = 0;
  if (!p->async) {
    worker_apply_update_segs(w, p->segs, p->nsegs);
  } else {
    const stage_t *st = p->st[0];
    if (p->ring_len)
      memcpy(p->ring + (size_t)(p->version % p->ring_len) * st->param_len, w->model->params + st->param_off,
             st->param_len * sizeof(float));
    float lr = (float)lr_at(&w->sched, p->epoch_step + unit / p->M);
    optim_begin_step(w->opt);
    optim_step_segments(w->opt, w->model->params, w->model->grads, p->segs, p->nsegs, lr);
    p->version++;
  }
  p->compute += dt_now() - t0;
}


static int execute(pipe_t *p, pipe_instr_t in) {
  worker_t *w = p->w;
  int v = in.chunk, mb = in.mb, g = v * p->P + p->s;
  int next = (p->s + 1) % p->P, prev = (p->s + p->P - 1) % p->P;
  stage_t *st = p->st[v];
  int slot = mb >= 0 ? slot_of(p, mb) : 0;
  size_t n = mb >= 0 ? (size_t)p->slot_n[slot] : 0;
  switch (in.op) {
  case PIPE_LOAD:
    if (n) data_gather(w->train, w->order + p->begin + p->mb_off[micro_of(p, mb)], n, stage_input(st, slot),
                       p->labels + (size_t)slot * st->micro_batch);
    return 0;
  case PIPE_RECV_ACT:
    return recv_timed(p, prev, TAG_PIPE_ACT0 + g - 1, stage_input(st, slot), n * st->in_size * sizeof(float));
  case PIPE_FORWARD: return forward(p, v, mb);
  case PIPE_SEND_ACT:
    return send_async(p, next, TAG_PIPE_ACT0 + g, stage_output(st, slot), n * st->out_size * sizeof(float));
  case PIPE_RECV_GRAD:
    return recv_timed(p, next, TAG_PIPE_GRAD0 + g, stage_output_grad(st, slot), n * st->out_size * sizeof(float));
  case PIPE_BACKWARD: return backward(p, v, mb);
  case PIPE_SEND_GRAD:
    return send_async(p, prev, TAG_PIPE_GRAD0 + g - 1, dx_of(p, v, mb), n * st->in_size * sizeof(float));
  case PIPE_REDUCE: return reduce(p);
  case PIPE_STEP: update(p, mb); return 0;
  default: return dt_error("pipeline: unknown instruction %d", in.op);
  }
}

static int run_list(pipe_t *p, const pipe_instr_t *list, int n) {
  for (int i = 0; i < n; i++)
    if (execute(p, list[i]) != 0) return dt_error_prefix("stage %d: ", p->s);
  return 0;
}

/* A unit's samples are known at its forward (the step it enters); its
 * slot keeps them for its backward, perhaps steps later. */
static void enter_units(pipe_t *p, int64_t k) {
  for (int m = 0; m < p->M; m++) p->slot_n[slot_of(p, (int)k * p->M + m)] = (int)p->mb_len[m];
}

static int step(void *st, int epoch, int64_t k) {
  pipe_t *p = st;
  worker_t *w = p->w;
  if (dt_interrupted()) return worker_interrupted(w);
  int m = slice_step(p, k);
  if (p->async) {
    enter_units(p, k);
    int n = pipe_async_step(p->kind, p->P, p->M, p->s, (int)k, p->prog);
    DT_TRY(run_list(p, p->prog, n));
    DT_TRY(wait_sends(p));
    p->steps_taken = k + 1;
    w->step++;
    return 0;
  }
  for (int v = 0; v < p->V; v++) p->nback[v] = 0;
  if (m == 0) { /* a replica with no sample: zero gradients, still in the sum */
    for (int v = 0; v < p->V; v++) kern_zero(p->st[v]->param_len, w->model->grads + p->st[v]->param_off);
    DT_TRY(execute(p, (pipe_instr_t){PIPE_REDUCE, -1, 0}));
    return execute(p, (pipe_instr_t){PIPE_STEP, -1, 0});
  }
  for (int i = 0; i < m; i++) p->slot_n[i] = (int)p->mb_len[i];
  const pipe_schedule_t *sc;
  DT_TRY(step_schedule(p, m, &sc));
  return run_list(p, sc->prog[p->s], sc->len[p->s]);
}

/* ---- evaluation and report --------------------------------------------------- */

static int begin_epoch(void *st, int epoch) {
  pipe_t *p = st;
  p->compute = p->idle = 0;
  p->epoch_version = p->version;
  p->epoch_step = p->w->step;
  p->steps_taken = 0;
  return 0;
}

/* A stream's epoch ends with the backwards (and updates) still in flight. */
static int end_epoch(void *st, int epoch) {
  pipe_t *p = st;
  if (!p->async || !p->steps_taken) return 0;
  int n = pipe_async_drain(p->kind, p->P, p->M, p->s, (int)p->steps_taken, p->prog);
  DT_TRY(run_list(p, p->prog, n));
  return wait_sends(p);
}

static int send_range(pipe_t *p, const stage_t *st, int nstate) {
  worker_t *w = p->w;
  model_t *m = w->model;
  uint64_t head[4] = {st->param_off, st->param_len, st->buf_off, st->buf_len};
  DT_TRY(comm_send(p->pipe, 0, TAG_PIPE_GATHER, head, sizeof head));
  DT_TRY(comm_send(p->pipe, 0, TAG_PIPE_GATHER, m->params + st->param_off, st->param_len * sizeof(float)));
  DT_TRY(comm_send(p->pipe, 0, TAG_PIPE_GATHER, m->buffers + st->buf_off, st->buf_len * sizeof(float)));
  for (int i = 0; i < nstate; i++)
    DT_TRY(comm_send(p->pipe, 0, TAG_PIPE_GATHER, w->opt->state[i] + st->param_off, st->param_len * sizeof(float)));
  return 0;
}

static int recv_range(pipe_t *p, int s, int nstate) {
  worker_t *w = p->w;
  model_t *m = w->model;
  uint64_t h[4];
  DT_TRY(comm_recv(p->pipe, s, TAG_PIPE_GATHER, h, sizeof h));
  if (h[0] + h[1] > m->nparams || h[2] + h[3] > m->nbuffers)
    return dt_error("pipeline: stage %d sent the range [%llu, +%llu) of a %zu-parameter model", s,
                    (unsigned long long)h[0], (unsigned long long)h[1], m->nparams);
  DT_TRY(comm_recv(p->pipe, s, TAG_PIPE_GATHER, m->params + h[0], h[1] * sizeof(float)));
  DT_TRY(comm_recv(p->pipe, s, TAG_PIPE_GATHER, m->buffers + h[2], h[3] * sizeof(float)));
  for (int i = 0; i < nstate; i++)
    DT_TRY(comm_recv(p->pipe, s, TAG_PIPE_GATHER, w->opt->state[i] + h[0], h[1] * sizeof(float)));
  return 0;
}

/* Replica 0's ranks send their chunks' ranges to rank 0 (params, buffers
 * and, for a checkpoint, the optimizer state), which then holds the whole
 * model. */
static int gather_model(pipe_t *p) {
  int nstate = p->w->cfg->checkpoint[0] ? p->w->opt->nstate : 0;
  if (p->r != 0) return 0;
  for (int v = 0; p->s > 0 && v < p->V; v++) DT_TRY(send_range(p, p->st[v], nstate));
  for (int s = 1; p->s == 0 && s < p->P; s++)
    for (int v = 0; v < p->V; v++) DT_TRY(recv_range(p, s, nstate));
  return 0;
}

static void json_array(pipe_t *p, size_t *n, const char *key, const double *v, const char *fmt) {
  if (*n < sizeof p->extra) *n += (size_t)snprintf(p->extra + *n, sizeof p->extra - *n, ",\"%s\":[", key);
  for (int s = 0; s < p->P && *n < sizeof p->extra; s++) {
    if (s) p->extra[(*n)++] = ',';
    *n += (size_t)snprintf(p->extra + *n, sizeof p->extra - *n, fmt, v[s]);
  }
  if (*n < sizeof p->extra) *n += (size_t)snprintf(p->extra + *n, sizeof p->extra - *n, "]");
}

/* figs: per rank of replica 0, [compute, idle, peak activation sets, peak
 * weight versions] x P. */
static void extra_json(pipe_t *p, const float *figs) {
  int P = p->P, G = p->G;
  size_t n = (size_t)snprintf(p->extra, sizeof p->extra,
                              "\"pp\":%d,\"dp\":%d,\"micro_batches\":%d,\"pipe_schedule\":\"%s\","
                              "\"pipe_chunks\":%d,\"stage_first_layer\":[", P, p->ndp, p->M,
                              pipe_kind_name(p->kind), p->V);
  for (int g = 0; g < G && n < sizeof p->extra; g++)
    n += (size_t)snprintf(p->extra + n, sizeof p->extra - n, "%s%d", g ? "," : "", p->first[g]);
  if (n < sizeof p->extra) n += (size_t)snprintf(p->extra + n, sizeof p->extra - n, "]");
  double v[1024], busy = 0, idle = 0;
  const char *keys[4] = {"stage_compute_sec", "stage_idle_sec", "stage_peak_activations", "stage_weight_versions"};
  for (int a = 0; a < 4; a++) {
    if (a == 3 && !p->async) break;
    for (int s = 0; s < P; s++) v[s] = figs[a * P + s];
    json_array(p, &n, keys[a], v, a < 2 ? "%.4f" : "%.0f");
  }
  for (int s = 0; s < P; s++) busy += figs[s], idle += figs[P + s];
  const model_t *m = p->w->model;
  for (int a = 0; a < 2; a++) { /* the partitioner's view per rank (its chunks summed): seconds, parameters */
    for (int s = 0; s < P; s++) {
      v[s] = 0;
      for (int c = 0; c < p->V; c++)
        for (int i = p->first[c * P + s]; i < p->first[c * P + s + 1]; i++)
          v[s] += a ? (double)m->layers[i].param_len : p->layer_sec[i];
    }
    json_array(p, &n, a ? "stage_params" : "stage_profiled_sec", v, a ? "%.0f" : "%.6f");
  }
  if (n < sizeof p->extra)
    snprintf(p->extra + n, sizeof p->extra - n, ",\"bubble_fraction\":%.4f",
             busy + idle > 0 ? idle / (busy + idle) : 0);
}

/* Train figures summed over the replicas' last stages, replica 0's stage
 * figures, the whole model on rank 0, evaluated there. */
static int evaluate(void *st, epoch_report_t *r) {
  pipe_t *p = st;
  worker_t *w = p->w;
  int P = p->P;
  float *v = calloc((size_t)(3 + 4 * P), sizeof *v);
  if (!v) return dt_error("out of memory");
  if (p->st[p->V - 1]->ends_model)
    v[0] = (float)w->epoch_loss_sum, v[1] = (float)w->epoch_samples, v[2] = (float)w->epoch_correct;
  if (p->r == 0) {
    v[3 + p->s] = (float)p->compute, v[3 + P + p->s] = (float)p->idle;
    v[3 + 2 * P + p->s] = (float)p->peak_live, v[3 + 3 * P + p->s] = (float)p->peak_versions;
  }
  int rc = allreduce(w->coll, ALLREDUCE_TREE, v, (size_t)(3 + 4 * P));
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
  driver_ops_t ops = {.begin_epoch = begin_epoch, .step = step, .end_epoch = end_epoch, .evaluate = evaluate};
  if (rc == 0) rc = driver_run(w, &ops, p);
  teardown(p);
  free(p);
  return rc;
}

static int pipeline_matches(const train_config_t *c) {
  return train_axes(c, OPTIMIZATION_CENTRAL, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC) &&
         train_pipelined(c) && !c->tensor.conv_data;
}

const strategy_t STRATEGY_PIPELINE = {
    .name = "pipeline parallelism",
    .paper = "Huang et al. 2019 (GPipe); Narayanan et al. 2019, 2021 (PipeDream, 2BW)",
    .axes = "--schedule sync --exchange allreduce:ALGO --pp P",
    .optimization = OPTIMIZATION_CENTRAL,
    .compress = COMPRESS_GRADIENTS,
    .matches = pipeline_matches,
    .run = strategy_pipeline,
    .describe_step = pipe_describe_step,
};
