/* Synchronous data parallelism (Horovod, PyTorch DDP, FireCaffe, a single
 * parameter server as gather+broadcast): every rank computes the gradient
 * of its slice of the global batch, the gradients are summed by allreduce
 * over buckets of the gradient arena, and every rank applies the same
 * update. With overlap, a bucket's allreduce starts as soon as backprop has
 * produced all of its gradients (the arena is in layer order and backprop
 * runs last layer first, so buckets are cut from the end). One rank is the
 * plain single-worker trainer.
 *
 * --shard-optimizer (ZeRO stage 1, Rajbhandari et al. 2020): each bucket is
 * reduce-scattered instead (the ring's first half), rank r steps only block
 * r of every bucket, and the new parameters are allgathered (the ring's
 * second half): the same bytes on the wire, 1/N of the optimizer's work,
 * and the same bits as the unsharded ring. Optimizer state outside a
 * rank's blocks goes stale; it is gathered before a checkpoint.
 *
 * --comm-order priority (ByteScheduler, Peng et al. 2019; P3, Jayarajan et
 * al. 2019): the step does not wait for its buckets. The next forward pass
 * waits, layer by layer, for the bucket that holds the layer's gradients
 * and applies that bucket's update just before the layer runs, so the
 * communication of the last buckets hides behind the first layers of the
 * next forward pass. Those are the buckets backprop readies last, so the
 * allreduces run first-layer-first, and buckets go out in parts
 * (--partition-kb) that a more urgent one can overtake. Each element gets
 * the same update as under FIFO order, only later; cutting a bucket into
 * parts moves elements between ring blocks, which over 3+ ranks changes
 * the order of their sums (equal to rounding; whole buckets give FIFO's
 * bits). The last step of an epoch waits, so evaluation and checkpoints
 * see the updated model. */
#include <stdlib.h>
#include <string.h>

#include "strategy/dp/dp.h"
#include "dtrain/coll_async.h"
#include "strategy/dp/balance.h"

typedef struct {
  size_t off, len;      /* range of the gradient arena */
  int first_layer;      /* the bucket is complete once this layer's grads are */
  int seg, nseg;        /* its tensors: w->segs[seg .. seg + nseg) */
  size_t last_ticket;   /* priority: the request of its last part */
  int pending;          /* priority: summed or being summed, not yet applied */
} bucket_t;

typedef struct {
  worker_t *w;
  bucket_t *buckets;
  int nbuckets, next;   /* next bucket to start */
  coll_async_t *async;
  optim_segment_t *shard;   /* --shard-optimizer: this rank's block of each bucket */
  int nshard;
  float *sec;               /* --balance: every rank's compute seconds this step */
  int *bucket_of;           /* priority: each layer's bucket (-1: no parameters) */
  float lr;                 /* priority: the learning rate of the pending update */
  int failed;               /* priority: a wait in the forward pass failed */
  char split[512];          /* --balance: the epoch's samples per rank, for the metrics */
} dp_state_t;

/* PyTorch DDP's rule: the first bucket (the last layers, ready first) is
 * capped at 1 MB so that communication starts early; the others at
 * cfg->bucket_bytes (0 = one bucket per layer). Buckets hold whole layers,
 * cut from the last layer down. */
#define FIRST_BUCKET_BYTES (1u << 20)

static int plan_buckets(dp_state_t *s) {
  const model_t *m = s->w->model;
  size_t cap = s->w->cfg->bucket_bytes / sizeof(float);
  size_t first_cap = cap && cap > FIRST_BUCKET_BYTES / sizeof(float) ? FIRST_BUCKET_BYTES / sizeof(float) : cap;
  s->buckets = calloc((size_t)m->nlayers + 1, sizeof *s->buckets);
  if (!s->buckets) return dt_error("out of memory");
  bucket_t *cur = NULL;
  for (int i = m->nlayers - 1; i >= 0; i--) {
    const layer_t *l = &m->layers[i];
    if (!l->param_len) continue;
    size_t limit = s->nbuckets <= 1 ? first_cap : cap;
    if (!cur || limit == 0 || cur->len + l->param_len > limit) {
      cur = &s->buckets[s->nbuckets++];
      cur->off = l->param_off + l->param_len;
    }
    cur->off = l->param_off;
    cur->len += l->param_len;
    cur->first_layer = i;
  }
  return 0;
}

/* Each bucket's tensors (whole layers, so whole tensors) and, for priority
 * order, each layer's bucket. */
static int plan_bucket_updates(dp_state_t *s) {
  const worker_t *w = s->w;
  const model_t *m = w->model;
  for (int b = 0; b < s->nbuckets; b++) {
    bucket_t *k = &s->buckets[b];
    k->seg = w->nsegs;
    for (int i = 0; i < w->nsegs; i++) {
      if (w->segs[i].off < k->off || w->segs[i].off >= k->off + k->len) continue;
      if (i < k->seg) k->seg = i;
      k->nseg++;
    }
  }
  if (w->cfg->comm_order != COLL_ORDER_PRIORITY) return 0;
  if (!(s->bucket_of = malloc((size_t)m->nlayers * sizeof *s->bucket_of))) return dt_error("out of memory");
  for (int i = 0; i < m->nlayers; i++) s->bucket_of[i] = -1;
  for (int b = 0; b < s->nbuckets; b++)
    for (int i = s->buckets[b].first_layer; i < m->nlayers; i++) {
      const layer_t *l = &m->layers[i];
      if (l->param_len && l->param_off >= s->buckets[b].off + s->buckets[b].len) break;
      if (l->param_len) s->bucket_of[i] = b;
    }
  return 0;
}

static int plan_shard(dp_state_t *s) {
  worker_t *w = s->w;
  if (!w->cfg->shard_optimizer || w->nranks == 1) return 0;
  s->shard = calloc((size_t)s->nbuckets, sizeof *s->shard);
  if (!s->shard) return dt_error("out of memory");
  for (int i = 0; i < s->nbuckets; i++) {
    size_t off, len;
    coll_block(s->buckets[i].len, w->nranks, w->rank, &off, &len);
    if (len) s->shard[s->nshard++] = (optim_segment_t){s->buckets[i].off + off, len};
  }
  return 0;
}

/* Priority order: the bucket in parts, the first layers' most urgent. */
static void start_bucket_in_parts(dp_state_t *s, bucket_t *b) {
  const train_config_t *cfg = s->w->cfg;
  size_t part = cfg->partition_bytes / sizeof(float);
  float *g = s->w->model->grads + b->off;
  for (size_t done = 0; done < b->len || done == 0; done += part) {
    size_t n = b->len - done < part ? b->len - done : part;
    b->last_ticket = coll_async_allreduce(s->async, cfg->algo, g + done, n, b->first_layer);
    if (n == 0) break;
  }
  b->pending = 1;
}

static void start_ready_buckets(void *ctx, int layer) {
  dp_state_t *s = ctx;
  while (s->next < s->nbuckets && s->buckets[s->next].first_layer >= layer) {
    bucket_t *b = &s->buckets[s->next++];
    float *g = s->w->model->grads + b->off;
    if (s->bucket_of) start_bucket_in_parts(s, b);
    else if (s->shard) coll_async_reduce_scatter(s->async, g, b->len, 0);
    else coll_async_allreduce(s->async, s->w->cfg->algo, g, b->len, 0);
  }
}

/* Priority order, before layer `layer` runs forward: its bucket summed and
 * its part of the previous step's update applied. */
static void apply_bucket_update(void *ctx, int layer) {
  dp_state_t *s = ctx;
  bucket_t *b = &s->buckets[s->bucket_of[layer]];
  if (!b->pending) return;
  b->pending = 0;
  if (coll_async_wait_one(s->async, b->last_ticket) != 0) {
    s->failed = 1;
    return;
  }
  worker_update_part(s->w, s->w->segs + b->seg, b->nseg, s->lr);
}

/* Sums the gradients over ranks: during backprop (overlap) or after it. */
static int exchange_gradients(dp_state_t *s, double backward_end) {
  worker_t *w = s->w;
  if (w->nranks == 1) return 0;
  double t0 = dt_now(), busy = 0;
  if (s->async) {
    int rc = coll_async_wait(s->async, &busy);
    w->timers.comm += busy;
    w->timers.comm_exposed += dt_now() - backward_end;
    return rc;
  }
  for (int i = 0; i < s->nbuckets; i++) {
    float *g = w->model->grads + s->buckets[i].off;
    size_t n = s->buckets[i].len;
    if ((s->shard ? reduce_scatter_ring_inplace(w->coll, g, n) : allreduce(w->coll, w->cfg->algo, g, n)) != 0)
      return -1;
  }
  worker_comm_since(w, t0);
  return 0;
}

/* Whether step k is the last of its epoch or of the run, where `steps`
 * counts the steps taken once its update is applied: evaluation and a
 * checkpoint follow it. */
static int ends_epoch(const worker_t *w, int64_t k, int64_t steps) {
  const train_config_t *cfg = w->cfg;
  return k == w->steps_per_epoch - 1 || (cfg->max_steps && steps >= cfg->max_steps);
}

/* Every bucket of `arena` (parameters or optimizer state) from the ranks
 * that stepped its blocks. */
static int gather_blocks(dp_state_t *s, float *arena) {
  worker_t *w = s->w;
  double t0 = dt_now();
  for (int i = 0; i < s->nbuckets; i++)
    if (allgather_ring(w->coll, arena + s->buckets[i].off, s->buckets[i].len) != 0) return -1;
  worker_comm_since(w, t0);
  return 0;
}

/* Sharded: this rank's blocks stepped, then everyone's new parameters;
 * before a checkpoint is written, everyone's optimizer state too. */
static int apply_sharded_update(dp_state_t *s, int64_t k) {
  worker_t *w = s->w;
  const train_config_t *cfg = w->cfg;
  worker_apply_update_segs(w, s->shard, s->nshard);
  DT_TRY(gather_blocks(s, w->model->params));
  int epoch_end = ends_epoch(w, k, w->step);
  for (int i = 0; cfg->checkpoint[0] && epoch_end && i < w->opt->nstate; i++)
    DT_TRY(gather_blocks(s, w->opt->state[i]));
  return 0;
}

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

/* Priority order: the update is left to the next forward pass, but for
 * the last step of an epoch or of the run. */
static int finish_step_deferred(dp_state_t *s, int64_t k) {
  worker_t *w = s->w;
  if (ends_epoch(w, k, w->step + 1)) {
    for (int i = 0; i < s->nbuckets; i++) s->buckets[i].pending = 0;
    if (exchange_gradients(s, dt_now()) != 0) return -1;
    worker_apply_update(w);
    return 0;
  }
  w->timers.comm += coll_async_take_busy(s->async);
  s->lr = worker_begin_update(w);
  return 0;
}

static int train_step(void *state, int epoch, int64_t k) {
  dp_state_t *s = state;
  worker_t *w = s->w;
  size_t begin, count, global;
  worker_step_slice(w, k, &begin, &count, &global);
  s->next = 0;
  step_hooks_t hooks = {.wait = s->bucket_of ? apply_bucket_update : NULL,
                        .ready = start_ready_buckets, .ctx = s};
  if (worker_compute_gradient(w, begin, count, (int)global, s->async ? &hooks : NULL) != 0)
    return -1;
  if (s->failed) return -1;
  if (s->bucket_of) return finish_step_deferred(s, k);
  if (exchange_gradients(s, dt_now()) != 0) return -1;
  if (s->sec && share_step_times(s) != 0) return -1;
  if (s->shard) return apply_sharded_update(s, k);
  worker_apply_update(w);
  return 0;
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
  return dp_evaluate(s->w, r, s->split, sizeof s->split);
}

int strategy_data_parallel(worker_t *w) {
  dp_state_t s = {.w = w};
  int rc = plan_buckets(&s);
  if (rc == 0) rc = plan_bucket_updates(&s);
  if (rc == 0) rc = plan_shard(&s);
  if (rc == 0) rc = plan_balance(&s);
  if (rc == 0 && w->nranks > 1 && w->cfg->overlap)
    rc = coll_async_new(w->coll, w->cfg->comm_order, &s.async);
  if (!s.async) free(s.bucket_of), s.bucket_of = NULL; /* one rank: nothing to order */
  driver_ops_t ops = {.step = train_step, .evaluate = evaluate};
  if (rc == 0) rc = driver_run(w, &ops, &s);
  coll_async_free(s.async);
  free(s.shard);
  free(s.sec);
  free(s.bucket_of);
  free(s.buckets);
  return rc;
}
