/* Synchronous data parallelism (Horovod, PyTorch DDP, FireCaffe, a single
 * parameter server as gather+broadcast): every rank computes the gradient
 * of its slice of the global batch, the gradients are summed by allreduce
 * over buckets of the gradient arena, and every rank applies the same
 * update. With overlap, a bucket's allreduce starts as soon as backprop has
 * produced all of its gradients (the arena is in layer order and backprop
 * runs last layer first, so buckets are cut from the end). One rank is the
 * plain single-worker trainer.
 *
 * The summing is the gradient reducer's (reducer.c: buckets, overlap,
 * priority order, ZeRO-1 sharding); this file is the step and the
 * strategy, and --balance's exchange of step times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/balance.h"
#include "strategy/dp/dp.h"
#include "strategy/dp/reducer.h"

typedef struct {
  worker_t *w;
  reducer_t *reducer;
  float *sec;               /* --balance: every rank's compute seconds this step */
  char split[512];          /* --balance: the epoch's samples per rank, for the metrics */
  char extra[1024];         /* the metrics' strategy fields: split and compression */
} dp_state_t;

/* --balance: every rank's compute seconds, in one small allreduce of a
 * vector that is zero but for this rank's entry (so the sum is exact). */
static int share_step_times(dp_state_t *s) {
  worker_t *w = s->w;
  memset(s->sec, 0, (size_t)w->nranks * sizeof *s->sec);
  s->sec[w->rank] = (float)w->step_compute;
  double t0 = dt_now();
  DT_TRY(allreduce(w->coll, ALLREDUCE_TREE, s->sec, (size_t)w->nranks));
  worker_comm_since(w, t0);
  balance_observe(w->balance, s->sec);
  return 0;
}

static int plan_balance(dp_state_t *s) {
  worker_t *w = s->w;
  if (!w->balance) return 0;
  if (!(s->sec = calloc((size_t)w->nranks, sizeof *s->sec))) return dt_error("out of memory");
  return 0;
}

static int train_step(void *state, int epoch, int64_t k) {
  dp_state_t *s = state;
  worker_t *w = s->w;
  size_t begin, count, global;
  worker_step_slice(w, k, &begin, &count, &global);
  step_hooks_t hooks = reducer_begin_step(s->reducer, (int)count);
  if (worker_compute_gradient(w, begin, count, (int)global,
                              reducer_overlaps(s->reducer) ? &hooks : NULL) != 0)
    return -1;
  if (reducer_wait(s->reducer) != 0) return -1;
  if (s->sec && !reducer_defers(s->reducer) && share_step_times(s) != 0) return -1;
  return reducer_apply(s->reducer, k);
}

int dp_evaluate(worker_t *w, epoch_report_t *r, char *split, size_t cap) {
  if (w->balance) {
    balance_json(w->balance, r->steps, split, cap);
    r->extra_json = split;
  }
  return worker_epoch_figures(w, r, NULL, 0);
}

static int evaluate(void *state, epoch_report_t *r) {
  dp_state_t *s = state;
  char cx[512];
  reducer_compress_json(s->reducer, r, cx, sizeof cx);
  int rc = dp_evaluate(s->w, r, s->split, sizeof s->split);
  if (cx[0]) {
    snprintf(s->extra, sizeof s->extra, "%s%s%s", r->extra_json ? r->extra_json : "",
             r->extra_json ? "," : "", cx);
    r->extra_json = s->extra;
  }
  return rc;
}

int strategy_data_parallel(worker_t *w) {
  dp_state_t s = {.w = w};
  int rc = reducer_new(w, &s.reducer);
  if (rc == 0) rc = plan_balance(&s);
  driver_ops_t ops = {.step = train_step, .evaluate = evaluate};
  if (rc == 0) rc = driver_run(w, &ops, &s);
  reducer_free(s.reducer);
  free(s.sec);
  return rc;
}

/* The step as data: every rank runs the forward and backward of each layer
 * on its batch; each bucket's exchange may start once its first layer's
 * backward has run (on the communication thread under --overlap), and
 * the update waits for all of them. A bucket goes by the plain allreduce
 * (coll_allreduce_bytes, per bucket: a ring's blocks round per bucket);
 * under --compress by the compressor (compress_exchange_bytes: the codec's
 * encoded sizes, its collective); under --sufficient-factors, a dense layer
 * that gains as every rank's factors to every other. The step described is
 * the steady state; a warm-up (--compress-warmup-steps) adds, for each of
 * its phases (compress_phase_end: the dense steps, DGC's ramp), the
 * buckets' tasks at those steps only ([from, until)). */
typedef struct {
  const train_config_t *c;
  const model_t *m;
  int P, algo;
  const reducer_bucket_t *b;
  int nb;
  int *bwd;                    /* each layer's backward task on the rank described */
  compress_config_t cc;        /* --compress: the compressor's configuration */
  compress_matrix_t *mats;     /* --compress: the model's tensors as matrices */
} dp_desc_t;

/* Bucket k on rank r at the steps [from, until), after task `after` (or,
 * overlapped, its first layer's backward). */
static int add_bucket(const dp_desc_t *d, step_desc_t *out, int r, int k, int64_t from,
                      int64_t until, int after) {
  const reducer_bucket_t *b = &d->b[k];
  step_thread_t thread = d->c->overlap ? THREAD_COMM : THREAD_COMPUTE;
  if (d->c->overlap) after = d->bwd[b->first_layer];
  size_t in, units;
  if (reducer_sends_factors(d->m, d->c, d->P, b->first_layer, &in, &units)) {
    double x = (double)(d->P - 1) * (double)sfb_message_bytes((size_t)d->c->batch, in, units);
    return step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = "allgather of factors",
                                       .peer = -1, .group = d->P, .sent = x, .received = x,
                                       .thread = thread, .after = after});
  }
  if (d->c->compression.codec.kind == CODEC_NONE)
    return step_add_allreduce(out, r, r, d->P, d->algo, b->len, after, thread, 1);
  int first, nmats = compress_tensors_in(d->m, b->off, b->len, &first);
  step_buffer_t buf = {&d->cc, b->off, b->len, d->mats + first, nmats};
  return step_add_compressed(out, r, r, d->P, &buf, from, until, after, thread, 1);
}

/* Rank r's step: its passes, each phase's buckets (the steady state's
 * last), the update after the steady state's. */
static int add_rank(const dp_desc_t *d, step_desc_t *out, int r) {
  int prev = step_add_passes(out, d->m, r, d->c->batch, d->bwd), last = prev;
  int64_t from = 0, until;
  do {
    until = d->c->compression.codec.kind == CODEC_NONE ? 0 : compress_phase_end(&d->cc, from);
    last = prev;
    for (int k = 0; k < d->nb && last != STEP_FAILED; k++)
      last = add_bucket(d, out, r, k, from, until, last);
    from = until;
  } while (until && last != STEP_FAILED);
  if (last == STEP_FAILED) return -1;
  return step_add(out, (step_task_t){TASK_UPDATE, r, -1, d->m->nparams, d->c->batch, .peer = -1,
                                     .after = last}) == STEP_FAILED ? -1 : 0;
}

static int dp_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  if (c->tensor.ranks > 1 || c->sync_bn || c->comm_order != COLL_ORDER_FIFO || c->balance)
    return dt_error("data-parallel allreduce: describe_step covers the reducer with or without "
                    "--compress and --sufficient-factors so far, not --tp, --sync-bn, "
                    "--comm-order or --balance");
  dp_desc_t d = {.c = c, .m = m, .P = c->workers, .cc = worker_compress_config(c)};
  DT_TRY(step_allreduce_algo(c->algo, d.P, &d.algo));
  d.cc.algo = (allreduce_algo_t)d.algo;
  reducer_bucket_t *b = calloc((size_t)m->nlayers + 1, sizeof *b);
  int *bwd = calloc((size_t)m->nlayers, sizeof *bwd);
  d.mats = calloc((size_t)m->ntensors + 1, sizeof *d.mats);
  int rc = b && bwd && d.mats ? 0 : dt_error("out of memory");
  if (rc == 0) {
    compress_model_matrices(m, d.mats);
    d.nb = reducer_plan_buckets(m, c, b);
    d.b = b, d.bwd = bwd;
  }
  for (int r = 0; r < d.P && rc == 0; r++) rc = add_rank(&d, out, r);
  free(b), free(bwd), free(d.mats);
  return rc;
}

static int dp_matches(const train_config_t *c) {
  return train_axes(c, OPTIMIZATION_CENTRAL, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC) &&
         !c->tensor.conv_data && !train_pipelined(c);
}

static int dp_refuse(const train_config_t *c) {
  if (c->optimization != OPTIMIZATION_CENTRAL || c->exchange != EXCHANGE_ALLREDUCE ||
      c->schedule == SCHEDULE_SYNC || c->schedule == SCHEDULE_SOFT)
    return 0;
  return dt_error("options --schedule %s and --exchange allreduce do not combine: allreduce "
                  "is synchronous (use --schedule sync, or --exchange ps:K for %s)",
                  schedule_name(c->schedule), schedule_name(c->schedule));
}

const strategy_t STRATEGY_DATA_PARALLEL = {
    .name = "data-parallel allreduce",
    .paper = "Sergeev & Del Balso 2018 (Horovod); Li et al. 2020 (PyTorch DDP)",
    .axes = "--schedule sync --exchange allreduce:ALGO",
    .optimization = OPTIMIZATION_CENTRAL,
    .compress = COMPRESS_GRADIENTS,
    .matches = dp_matches,
    .refuse = dp_refuse,
    .run = strategy_data_parallel,
    .describe_step = dp_describe_step,
};
