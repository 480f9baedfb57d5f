/* The asynchronous pipeline engine: PipeDream (weight stashing, optional
 * vertical sync), PipeDream-2BW (double-buffered weights) and DDG on the
 * shared core (engine.h). Units (micro-batches) stream through the stages
 * across steps without a flush (schedule.h: pipe_async_step); a unit's
 * activations stay in a slot (M + P of them) until its backward, perhaps
 * steps later, and so does the weight version its forward used: the
 * newest lives in the model, the older ones a rank still needs in a ring
 * (a copy of the stage's range taken before each update: P of them for
 * PipeDream, one for 2BW, none for DDG, whose backward runs on the weights
 * as they are). The pipeline drains at each epoch's end. V = 1. */
#include <stdlib.h>
#include <string.h>

#include "strategy/pipe/engine.h"

typedef struct {
  pipe_engine_t e;            /* the shared core (first: the hooks are given &e) */
  pipe_instr_t *prog;         /* this step's (or the drain's) instructions */
  int64_t *slot_ver;          /* [slots]: the weight version of its unit's forward (-1: none in flight) */
  /* weight versions: the newest in the model, older ones in a ring */
  int64_t version, epoch_version, epoch_step;  /* updates done; at the epoch's start; w->step then */
  int ring_len;               /* versions kept besides the newest: P (pipedream), 1 (2bw), 0 */
  float *ring;                /* [ring_len][param_len] of the one chunk's range */
  unsigned char *lag_seen;    /* [ring_len + 1]: scratch of count_versions */
  int64_t steps_taken;        /* steps of this epoch, for the drain */
  int peak_versions;
} async_engine_t;

/* ---- weight versions --------------------------------------------------------- */

/* The weights of version v: the model's for the newest, else the ring's. */
static const float *weights_of(const async_engine_t *a, int64_t v) {
  if (v == a->version) return NULL;
  return a->ring + (size_t)(v % a->ring_len) * a->e.chunk[0].st->param_len;
}

/* The version a unit's forward uses: PipeDream the newest (with vertical
 * sync, the one stage 0 used: stage 0 has done one update per unit after
 * its first P - 1), 2BW the version before the newest that the step's
 * units all share (one step of delay), DDG the newest. Counted from the
 * epoch's start (the pipeline drains at an epoch's end). */
static int64_t forward_version(const async_engine_t *a, int unit) {
  const pipe_engine_t *e = &a->e;
  int64_t base = a->epoch_version;
  if (e->kind == PIPE_PIPEDREAM && e->w->cfg->pipe.vertical_sync)
    return base + (unit - (e->P - 1) > 0 ? unit - (e->P - 1) : 0);
  if (e->kind == PIPE_2BW) return base + (unit / e->M - 1 > 0 ? unit / e->M - 1 : 0);
  return a->version;
}

/* Weight versions the rank holds: the newest, and those of in-flight
 * units' forwards kept for their backwards (DDG keeps none); each is
 * 0 .. ring_len updates behind the newest. */
static int count_versions(async_engine_t *a) {
  if (!a->ring_len) return 1;
  memset(a->lag_seen, 0, (size_t)a->ring_len + 1);
  a->lag_seen[0] = 1;
  for (int i = 0; i < a->e.slots; i++)
    if (a->slot_ver[i] >= 0) a->lag_seen[a->version - a->slot_ver[i]] = 1;
  int n = 0;
  for (int k = 0; k <= a->ring_len; k++) n += a->lag_seen[k];
  return n;
}

/* Before a unit's forward: choose and pin its weights. */
static int async_forward_weights(pipe_engine_t *e, int unit, int slot) {
  async_engine_t *a = (async_engine_t *)e;
  int64_t v = forward_version(a, unit);
  if (v > a->version || v < a->version - a->ring_len)
    return dt_error("pipeline %s: unit %d wants weight version %lld, the stage holds %lld..%lld",
                    pipe_kind_name(e->kind), unit, (long long)v, (long long)(a->version - a->ring_len),
                    (long long)a->version);
  a->slot_ver[slot] = v;
  DT_TRY(stage_use_weights(e->chunk[0].st, slot, weights_of(a, v)));
  int nv = count_versions(a);
  if (nv > a->peak_versions) a->peak_versions = nv;
  return 0;
}

/* Before a unit's backward: PipeDream and 2BW on the weights its forward
 * used, DDG on the newest (the stored activations, the weights as they
 * are now). The slot's version is then free. */
static int async_backward_weights(pipe_engine_t *e, int chunk, int slot) {
  async_engine_t *a = (async_engine_t *)e;
  const float *w = e->kind == PIPE_DDG ? NULL : weights_of(a, a->slot_ver[slot]);
  a->slot_ver[slot] = -1;
  return stage_use_weights(e->chunk[chunk].st, slot, w);
}

/* STEP at the lr of the unit's step, keeping the version it replaces in
 * the ring when older versions are still in use. */
static void async_update(pipe_engine_t *e, int unit) {
  async_engine_t *a = (async_engine_t *)e;
  worker_t *w = e->w;
  const stage_t *st = e->chunk[0].st;
  if (a->ring_len)
    memcpy(a->ring + (size_t)(a->version % a->ring_len) * st->param_len, w->model->params + st->param_off,
           st->param_len * sizeof(float));
  float lr = (float)lr_at(&w->sched, a->epoch_step + unit / e->M);
  optim_begin_step(w->opt);
  optim_step_segments(w->opt, w->model->params, w->model->grads, e->segs, e->nsegs, lr);
  a->version++;
}

/* REDUCE mid-step: the sends are waited for at the step's end. */
static int async_reduce(pipe_engine_t *e) { return pipe_reduce(e, dt_now()); }

static int async_peak_versions(const pipe_engine_t *e) {
  return ((const async_engine_t *)e)->peak_versions;
}

/* ---- the stream -------------------------------------------------------------- */

static int async_setup(pipe_engine_t *e) {
  async_engine_t *a = (async_engine_t *)e;
  a->ring_len = e->kind == PIPE_PIPEDREAM ? e->P : e->kind == PIPE_2BW ? 1 : 0;
  a->prog = calloc((size_t)pipe_async_max_len(e->P, e->M), sizeof *a->prog);
  a->slot_ver = calloc((size_t)e->slots, sizeof *a->slot_ver);
  a->ring = dt_alloc_floats((size_t)a->ring_len * e->chunk[0].st->param_len + 1);
  a->lag_seen = calloc((size_t)a->ring_len + 1, 1);
  if (!a->prog || !a->slot_ver || !a->ring || !a->lag_seen) return dt_error("out of memory");
  for (int i = 0; i < e->slots; i++) a->slot_ver[i] = -1;
  pipe_schedule_t sc; /* the stream over a few steps, checked once */
  DT_TRY(pipe_schedule_build(e->kind, e->P, 1, e->M, e->P + 2, &sc));
  int rc = pipe_schedule_check(&sc);
  pipe_schedule_free(&sc);
  return rc;
}

static void async_teardown(pipe_engine_t *e) {
  async_engine_t *a = (async_engine_t *)e;
  free(a->prog);
  free(a->slot_ver);
  dt_free(a->ring);
  free(a->lag_seen);
}

static void async_begin_epoch(pipe_engine_t *e) {
  async_engine_t *a = (async_engine_t *)e;
  a->epoch_version = a->version;
  a->epoch_step = e->w->step;
  a->steps_taken = 0;
}

/* Step k streams units k M .. k M + M - 1 in (their samples known now; a
 * unit's slot keeps them for its backward) and backwards the units P - 1
 * - s behind them. */
static int async_step(pipe_engine_t *e, int64_t k, int m) {
  async_engine_t *a = (async_engine_t *)e;
  for (int j = 0; j < e->M; j++) e->slot_n[((int)k * e->M + j) % e->slots] = (int)e->mb_len[j];
  int n = pipe_async_step(e->kind, e->P, e->M, e->s, (int)k, a->prog);
  DT_TRY(pipe_run_list(e, a->prog, n));
  DT_TRY(pipe_wait_sends(e));
  a->steps_taken = k + 1;
  e->w->step++;
  return 0;
}

/* A stream's epoch ends with the backwards (and updates) still in flight. */
static int async_end_epoch(pipe_engine_t *e) {
  async_engine_t *a = (async_engine_t *)e;
  if (!a->steps_taken) return 0;
  int n = pipe_async_drain(e->kind, e->P, e->M, e->s, (int)a->steps_taken, a->prog);
  DT_TRY(pipe_run_list(e, a->prog, n));
  return pipe_wait_sends(e);
}

static const pipe_ops_t ASYNC_OPS = {
    .setup = async_setup,
    .teardown = async_teardown,
    .begin_epoch = async_begin_epoch,
    .step = async_step,
    .end_epoch = async_end_epoch,
    .forward_weights = async_forward_weights,
    .backward_weights = async_backward_weights,
    .reduce = async_reduce,
    .update = async_update,
    .peak_versions = async_peak_versions,
};

int pipe_async_run(worker_t *w) {
  async_engine_t *a = calloc(1, sizeof *a);
  if (!a) return dt_error("out of memory");
  /* a unit waits in its slot for its backward, up to P - 1 units behind the M of a step */
  int rc = pipe_engine_run(&a->e, w, &ASYNC_OPS, w->cfg->pipe.micro_batches + w->cfg->pipe.stages);
  free(a);
  return rc;
}
