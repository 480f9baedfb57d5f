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
#include "strategy/dp/balance.h"
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
    if (prev != STEP_FAILED) prev = step_add_allreduce(out, r, me, P, algo, n, prev, THREAD_COMM, 1);
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
  return step_add_allreduce(out, r, me, P, ALLREDUCE_TREE, (size_t)P, prev, THREAD_COMPUTE, 1);
}

/* The groups rank r's layers sum over: its tensor-parallel group (tp
 * adjacent ranks) and, under --sync-bn, its block's P replicas. */
static int describe_groups(const train_config_t *c, const int *coord, int P, int T,
                           step_groups_t *g) {
  *g = (step_groups_t){{T, coord[GRID_TP], ALLREDUCE_RING},
                       {c->sync_bn ? P : 1, coord[GRID_DP], ALLREDUCE_RING}};
  if (T > 1) DT_TRY(step_allreduce_algo(c->algo, T, &g->tp.algo));
  if (g->bn.size > 1) DT_TRY(step_allreduce_algo(c->algo, P, &g->bn.algo));
  return 0;
}

/* The step as data: every rank runs the forward and backward of each layer
 * on its batch, with the sums its layers call themselves (tensor
 * parallelism's over its group, --sync-bn's over the replicas); each
 * bucket's allreduce over the rank's P replicas (the ranks holding its
 * block: tensor.h) may start once its first layer's backward has run (on
 * the communication thread under --overlap), and the update waits for all
 * of them. Bytes from coll_allreduce_bytes, per bucket (a ring's blocks
 * round per bucket) of that rank's model. */
static int dp_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  if (c->compress.kind != CODEC_NONE || c->sufficient_factors)
    return dt_error("data-parallel allreduce: describe_step covers the plain reducer so far, not "
                    "--compress or --sufficient-factors");
  int T = c->tp > 1 ? c->tp : 1, P = c->workers / T;
  int algo;
  DT_TRY(step_allreduce_algo(c->algo, P, &algo));
  tensor_desc_t *td;
  if (tensor_desc_new(c, m, T, c->sync_bn ? P : 1, &td) != 0) {
    tensor_desc_free(td);
    return -1;
  }
  int L = tensor_desc_model(td, 0)->nlayers;
  reducer_bucket_t *b = calloc((size_t)L + 1, sizeof *b);
  int *bwd = calloc((size_t)L, sizeof *bwd), *last = calloc((size_t)L + 1, sizeof *last), rc = 0;
  if (!b || !bwd || !last) rc = dt_error("out of memory");
  for (int r = 0; r < c->workers && rc == 0; r++) {
    int coord[GRID_AXES];
    rank_grid_coords(r, P, 1, T, coord);
    const model_t *mr = tensor_desc_model(td, coord[GRID_TP]);
    step_groups_t g;
    if (describe_groups(c, coord, P, T, &g) != 0) {
      rc = -1;
      break;
    }
    int nb = reducer_plan_buckets(mr, c, b), me = coord[GRID_DP];
    int prev = step_add_passes_summed(out, mr, r, c->batch, &g, bwd);
    for (int k = 0; k < nb && P > 1 && prev != STEP_FAILED; k++) { /* one replica sums nothing */
      int after = c->overlap ? bwd[b[k].first_layer] : prev;
      prev = defers_updates(c, P) ? describe_bucket_in_parts(out, c, r, me, P, algo, b[k].len, after)
                                  : step_add_allreduce(out, r, me, P, algo, b[k].len, after,
                                                       c->overlap ? THREAD_COMM : THREAD_COMPUTE, 1);
      last[k] = prev;
    }
    if (prev != STEP_FAILED) prev = describe_step_times(out, c, r, me, P, prev);
    if (prev == STEP_FAILED || describe_updates(out, c, r, P, mr, b, last, nb, prev) == STEP_FAILED)
      rc = -1;
  }
  free(b), free(bwd), free(last);
  tensor_desc_free(td);
  return rc;
}

static int dp_matches(const train_config_t *c) {
  return train_axes(c, OPTIMIZATION_CENTRAL, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC) &&
         !c->tp_conv_data && !train_pipelined(c);
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
