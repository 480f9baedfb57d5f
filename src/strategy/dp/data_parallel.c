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

#include "dtrain/coll_async.h"
#include "strategy/balance.h"
#include "strategy/dp/dp.h"
#include "strategy/dp/reducer.h"
#include "strategy/grid.h"
#include "strategy/tensor/tensor.h"

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

/* ---- the step as data ---------------------------------------------------------- */

/* World ranks between two replicas of a block: its tp group's size. */
static int replica_stride(const train_config_t *c) { return c->tensor.ranks > 1 ? c->tensor.ranks : 1; }

/* --comm-order priority: a bucket goes out in parts (reducer_part_len),
 * each after the ranks' agreement on which request runs next
 * (coll_async_agree_bytes); the progress thread runs the most urgent
 * first, in an order timing decides, with the same bytes. */
static int describe_bucket_in_parts(step_desc_t *out, const train_config_t *c, int r, int me,
                                    int P, int algo, size_t len, int after) {
  int prev = after;
  for (size_t done = 0, n; prev != STEP_FAILED && (n = reducer_part_len(c, len, done)) > 0; done += n) {
    size_t sent, received;
    coll_async_agree_bytes(COLL_ORDER_PRIORITY, P, me, &sent, &received);
    prev = step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = "allgather", .algo = "ring",
                                       .peer = -1, .group = P, .sent = (double)sent,
                                       .received = (double)received, .thread = THREAD_COMM,
                                       .after = prev});
    if (prev != STEP_FAILED)
      prev = step_add_allreduce(out, r, me, P, replica_stride(c), algo, n, prev, THREAD_COMM, 1);
  }
  return prev;
}

/* Whether the reducer of a P-rank run leaves each bucket's update to the
 * next forward pass (reducer_new: priority order on the overlap thread). */
static int defers_updates(const train_config_t *c, int P) {
  return c->comm_order == COLL_ORDER_PRIORITY && c->overlap && P > 1;
}

/* The updates after the buckets: one, or under priority order one a
 * bucket, first layers first, each once its last part is summed (the
 * next forward pass applies it just before the bucket's first layer). */
static int describe_updates(step_desc_t *out, const train_config_t *c, int r, int P,
                            const model_t *m, const reducer_bucket_t *b, const int *last, int nb,
                            int prev) {
  if (!defers_updates(c, P))
    return step_add(out, (step_task_t){TASK_UPDATE, r, -1, m->nparams, c->batch, .peer = -1,
                                       .after = prev});
  for (int k = nb - 1; k >= 0 && prev != STEP_FAILED; k--)
    prev = step_add(out, (step_task_t){TASK_UPDATE, r, -1, b[k].len, c->batch, .peer = -1,
                                       .after = last[k]});
  return prev;
}

/* --balance: every rank's compute seconds in one tree allreduce of P
 * floats (share_step_times), after the buckets, before the update. */
static int describe_step_times(step_desc_t *out, const train_config_t *c, int r, int me, int P,
                               int prev) {
  if (!c->balance || P == 1 || defers_updates(c, P)) return prev;
  return step_add_allreduce(out, r, me, P, replica_stride(c), ALLREDUCE_TREE, (size_t)P, prev,
                            THREAD_COMPUTE, 1);
}

/* The groups rank r's layers sum over: its tensor-parallel group (tp
 * adjacent ranks) and, under --sync-bn, its block's P replicas. */
static int describe_groups(const train_config_t *c, const int *coord, int P, int T,
                           step_groups_t *g) {
  int tp0[GRID_AXES] = {coord[GRID_DP], 0, 0}, dp0[GRID_AXES] = {0, 0, coord[GRID_TP]};
  *g = (step_groups_t){{T, coord[GRID_TP], ALLREDUCE_RING, STEP_TP_COLOR(rank_grid_rank(P, 1, T, tp0)), 1},
                       {c->sync_bn ? P : 1, coord[GRID_DP], ALLREDUCE_RING,
                        STEP_REPLICA_COLOR(rank_grid_rank(P, 1, T, dp0)), T}};
  if (T > 1) DT_TRY(step_allreduce_algo(c->algo, T, &g->tp.algo));
  if (g->bn.size > 1) DT_TRY(step_allreduce_algo(c->algo, P, &g->bn.algo));
  return 0;
}

/* The step as data: every rank runs the forward and backward of each layer
 * on its batch, with the sums its layers call themselves (tensor
 * parallelism's over its group, --sync-bn's over the replicas); each
 * bucket's exchange over the rank's P replicas (the ranks holding its
 * block: tensor.h) may start once its first layer's backward has run (on
 * the communication thread under --overlap), and the update waits for all
 * of them. A bucket goes by the plain allreduce (coll_allreduce_bytes, per
 * bucket: a ring's blocks round per bucket), in parts under --comm-order
 * priority; under --compress by the compressor (compress_exchange_bytes:
 * the codec's encoded sizes, its collective); under --sufficient-factors,
 * a dense layer that gains as every rank's factors to every other. The
 * step described is the steady state; a warm-up (--compress-warmup-steps)
 * adds, for each of its phases (compress_phase_end: the dense steps, DGC's
 * ramp), the buckets' tasks at those steps only ([from, until)). */
typedef struct {
  const train_config_t *c;
  int P, algo;                 /* the replicas a bucket is summed over, their algorithm */
  reducer_bucket_t *b;
  int nb;
  int *bwd;                    /* each layer's backward task on the rank described */
  int *last;                   /* each bucket's last task on it */
  compress_config_t cc;        /* --compress: the compressor's configuration */
  compress_matrix_t *mats;     /* --compress: the rank's model's tensors as matrices */
} dp_desc_t;

static int compressing(const dp_desc_t *d) { return d->c->compression.codec.kind != CODEC_NONE; }

/* Bucket k of model m on rank r (replica me of P) at the steps [from,
 * until), after task `after` (or, overlapped, its first layer's backward). */
static int add_bucket(const dp_desc_t *d, const model_t *m, step_desc_t *out, int r, int me, int k,
                      int64_t from, int64_t until, int after) {
  const reducer_bucket_t *b = &d->b[k];
  step_thread_t thread = d->c->overlap ? THREAD_COMM : THREAD_COMPUTE;
  if (d->c->overlap) after = d->bwd[b->first_layer];
  size_t in, units;
  if (reducer_sends_factors(m, d->c, d->P, b->first_layer, &in, &units)) {
    double x = (double)(d->P - 1) * (double)sfb_message_bytes((size_t)d->c->batch, in, units);
    return step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = "allgather of factors",
                                       .peer = -1, .group = d->P, .sent = x, .received = x,
                                       .thread = thread, .after = after});
  }
  if (defers_updates(d->c, d->P))
    return describe_bucket_in_parts(out, d->c, r, me, d->P, d->algo, b->len, after);
  if (!compressing(d))
    return step_add_allreduce(out, r, me, d->P, replica_stride(d->c), d->algo, b->len, after, thread, 1);
  int first, nmats = compress_tensors_in(m, b->off, b->len, &first);
  step_buffer_t buf = {&d->cc, b->off, b->len, d->mats + first, nmats};
  return step_add_compressed(out, r, me, d->P, &buf, from, until, after, thread, 1);
}

/* Rank r's step on its model m: its passes with their sums, each phase's
 * buckets (the steady state's last), the step times under --balance, the
 * update(s). */
static int add_rank(dp_desc_t *d, const model_t *m, const step_groups_t *g, step_desc_t *out, int r,
                    int me) {
  int prev = step_add_passes_summed(out, m, r, d->c->batch, g, d->bwd), last = prev;
  d->nb = reducer_plan_buckets(m, d->c, d->b);
  if (compressing(d)) compress_model_matrices(m, d->mats);
  int64_t from = 0, until = 0;
  do { /* one replica sums nothing */
    until = compressing(d) ? compress_phase_end(&d->cc, from) : 0;
    last = prev;
    for (int k = 0; k < d->nb && d->P > 1 && last != STEP_FAILED; k++) {
      int first = out->ntasks;
      d->last[k] = last = add_bucket(d, m, out, r, me, k, from, until, last);
      if (last != STEP_FAILED) step_color_since(out, first, g->bn.color); /* the replicas' group */
    }
    from = until;
  } while (until && last != STEP_FAILED);
  if (last != STEP_FAILED) last = describe_step_times(out, d->c, r, me, d->P, last);
  if (last != STEP_FAILED && d->c->clip_grad_norm > 0)
    last = step_add_clip_sums(out, r, g->tp.rank, g->tp.size, 0, 1, last);
  if (last == STEP_FAILED || describe_updates(out, d->c, r, d->P, m, d->b, d->last, d->nb, last) == STEP_FAILED)
    return -1;
  return 0;
}

static int dp_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int T = c->tensor.ranks > 1 ? c->tensor.ranks : 1, P = c->workers / T;
  dp_desc_t d = {.c = c, .P = P, .cc = worker_compress_config(c)};
  if (c->compression.codec.kind != CODEC_NONE && defers_updates(c, P))
    return dt_error("data-parallel allreduce: describe_step does not cover --compress with "
                    "--comm-order priority yet");
  DT_TRY(step_allreduce_algo(c->algo, P, &d.algo));
  d.cc.algo = (allreduce_algo_t)d.algo;
  tensor_desc_t *td;
  if (tensor_desc_new(c, m, T, c->sync_bn ? P : 1, &td) != 0) {
    tensor_desc_free(td);
    return -1;
  }
  int L = tensor_desc_model(td, 0)->nlayers;
  reducer_bucket_t *b = calloc((size_t)L + 1, sizeof *b);
  d.bwd = calloc((size_t)L, sizeof *d.bwd), d.last = calloc((size_t)L + 1, sizeof *d.last);
  d.mats = calloc((size_t)m->ntensors + 1, sizeof *d.mats);
  d.b = b;
  int rc = b && d.bwd && d.last && d.mats ? 0 : dt_error("out of memory");
  for (int r = 0; r < c->workers && rc == 0; r++) {
    int coord[GRID_AXES];
    rank_grid_coords(r, P, 1, T, coord);
    step_groups_t g;
    rc = describe_groups(c, coord, P, T, &g);
    if (rc == 0) rc = add_rank(&d, tensor_desc_model(td, coord[GRID_TP]), &g, out, r, coord[GRID_DP]);
  }
  free(b), free(d.bwd), free(d.last), free(d.mats);
  tensor_desc_free(td);
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
