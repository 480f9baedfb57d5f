/* The gradient reducer of synchronous data parallelism: plan buckets ->
 * start -> wait -> apply. It sums every rank's gradients over buckets of
 * the gradient arena and applies the step's update; data_parallel.c
 * drives it once per step.
 *
 * Buckets (PyTorch DDP's plan): whole layers, cut from the last layer
 * down, the first capped at 1 MB so communication starts early, the others
 * at --bucket-mb. With overlap, a bucket's allreduce starts as soon as
 * backprop has produced all of its gradients (the grad_ready hook);
 * without, every bucket is summed after backprop.
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
 * waits, layer by layer (the param_wait hook), for the bucket that holds
 * the layer's gradients and applies that bucket's update just before the
 * layer runs, so the communication of the last buckets hides behind the
 * first layers of the next forward pass. Those are the buckets backprop
 * readies last, so the allreduces run first-layer-first, and buckets go
 * out in parts (--partition-kb) that a more urgent one can overtake. Each
 * element gets the same update as under FIFO order, only later; cutting a
 * bucket into parts moves elements between ring blocks, which over 3+
 * ranks changes the order of their sums (equal to rounding; whole buckets
 * give FIFO's bits). The last step of an epoch waits, so evaluation and
 * checkpoints see the updated model.
 *
 * --compress CODEC (src/compress/) is a stage of it: a bucket's gradients
 * go through the compressor (codec, error-feedback memory, the collective
 * the codec needs) instead of the plain allreduce, overlapped the same way
 * (a coll_async_call in the bucket's turn). The first
 * --compress-warmup-steps steps go dense (DGC: its sparsity ramps up over
 * them instead). DGC's memory carries the
 * momentum (momentum correction), so the optimizer steps without it. */
#include <stdio.h>
#include <stdlib.h>

#include "dtrain/coll_async.h"
#include "strategy/dp/reducer.h"

typedef struct {
  size_t off, len;      /* range of the gradient arena */
  int first_layer;      /* the bucket is complete once this layer's grads are */
  int seg, nseg;        /* its tensors: w->segs[seg .. seg + nseg) */
  size_t last_ticket;   /* priority: the request of its last part */
  int pending;          /* priority: summed or being summed, not yet applied */
  int mat, nmat;        /* compression: its weight matrices, r->mats[mat .. mat + nmat) */
  int sfb;              /* --sufficient-factors: the layer's factors go, not its gradient */
  struct reducer *owner;
} bucket_t;

struct reducer {
  worker_t *w;
  bucket_t *buckets;
  int nbuckets, next;   /* next bucket to start */
  coll_async_t *async;  /* overlap: the collectives run beside backprop */
  optim_segment_t *shard;   /* --shard-optimizer: this rank's block of each bucket */
  int nshard;
  int *bucket_of;           /* priority: each layer's bucket (-1: no parameters) */
  float lr;                 /* priority: the learning rate of the pending update */
  int failed;               /* priority: a wait in the forward pass failed */
  compressor_t *cx;         /* --compress: NULL for none */
  compress_matrix_t *mats;  /* compression: every parameter tensor as a matrix */
  int64_t step;             /* compression: the step being exchanged */
  int count;                /* sufficient factors: this rank's rows this step */
  sfb_t *sfb;               /* --sufficient-factors, else NULL */
  compress_stats_t stats;   /* compression: this epoch's figures */
};

/* PyTorch DDP's rule: the first bucket (the last layers, ready first) is
 * capped at 1 MB so that communication starts early; the others at
 * cfg->bucket_bytes (0 = one bucket per layer). Buckets hold whole layers,
 * cut from the last layer down. */
#define FIRST_BUCKET_BYTES (1u << 20)

int reducer_plan_buckets(const model_t *m, const train_config_t *cfg, reducer_bucket_t *out) {
  size_t cap = cfg->compression.sufficient_factors ? 0 : cfg->bucket_bytes / sizeof(float);
  size_t first_cap = cap && cap > FIRST_BUCKET_BYTES / sizeof(float) ? FIRST_BUCKET_BYTES / sizeof(float) : cap;
  reducer_bucket_t *cur = NULL;
  int n = 0;
  for (int i = m->nlayers - 1; i >= 0; i--) {
    const layer_t *l = &m->layers[i];
    if (!l->param_len) continue;
    size_t limit = n <= 1 ? first_cap : cap;
    if (!cur || limit == 0 || cur->len + l->param_len > limit) {
      cur = &out[n++];
      *cur = (reducer_bucket_t){.off = l->param_off + l->param_len};
    }
    cur->off = l->param_off;
    cur->len += l->param_len;
    cur->first_layer = i;
  }
  return n;
}

static int plan_buckets(reducer_t *s) {
  const model_t *m = s->w->model;
  reducer_bucket_t *plan = calloc((size_t)m->nlayers + 1, sizeof *plan);
  s->buckets = calloc((size_t)m->nlayers + 1, sizeof *s->buckets);
  if (!plan || !s->buckets) {
    free(plan);
    return dt_error("out of memory");
  }
  s->nbuckets = reducer_plan_buckets(m, s->w->cfg, plan);
  for (int b = 0; b < s->nbuckets; b++)
    s->buckets[b] = (bucket_t){.off = plan[b].off, .len = plan[b].len, .first_layer = plan[b].first_layer};
  free(plan);
  return 0;
}

/* Each bucket's tensors (whole layers, so whole tensors) and, for priority
 * order, each layer's bucket. */
static int plan_bucket_updates(reducer_t *s) {
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

static int plan_shard(reducer_t *s) {
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

size_t reducer_part_len(const train_config_t *cfg, size_t len, size_t done) {
  size_t part = cfg->partition_bytes / sizeof(float);
  return done >= len ? 0 : len - done < part ? len - done : part;
}

/* Priority order: the bucket in parts, the first layers' most urgent. */
static void start_bucket_in_parts(reducer_t *s, bucket_t *b) {
  const train_config_t *cfg = s->w->cfg;
  float *g = s->w->model->grads + b->off;
  for (size_t done = 0, n; (n = reducer_part_len(cfg, b->len, done)) > 0; done += n)
    b->last_ticket = coll_async_allreduce(s->async, cfg->algo, g + done, n, b->first_layer);
  b->pending = 1;
}

/* Whether this step's buckets go through the compressor: not during the
 * dense warm-up (--compress-warmup-steps), but for DGC, whose warm-up is
 * its sparsity ramp, and the shared momentum, which must see every step
 * (compress/exchange.c). */
static int compressing(const reducer_t *s) {
  return s->cx && (s->w->step >= s->w->cfg->compression.warmup_steps || compressor_takes_warmup(s->cx));
}

/* One bucket through the compressor, on the context it is given (the
 * caller's, or the overlap's progress thread's). */
static int compressed_bucket(coll_ctx_t *ctx, void *arg) {
  bucket_t *b = arg;
  reducer_t *s = b->owner;
  return compressor_allreduce(s->cx, ctx, s->w->model->grads + b->off, b->off, b->len, s->step,
                              (int)(b - s->buckets), s->mats + b->mat, b->nmat);
}

/* Sufficient factors: a dense layer's gradient rebuilt from every rank's
 * rows of output gradients and inputs (compress/sufficient_factors.c). */
static int sfb_bucket(coll_ctx_t *ctx, void *arg) {
  bucket_t *b = arg;
  reducer_t *s = b->owner;
  model_t *m = s->w->model;
  layer_t *l = &m->layers[b->first_layer];
  size_t in = shape_size(l->in_shape), out = (size_t)l->spec.units;
  return sfb_allreduce(s->sfb, ctx, model_layer_input(m, b->first_layer, s->w->x), l->dout,
                       (size_t)s->count, in, out, l->dw, l->db);
}

static void start_ready_buckets(void *ctx, int layer) {
  reducer_t *s = ctx;
  while (s->next < s->nbuckets && s->buckets[s->next].first_layer >= layer) {
    bucket_t *b = &s->buckets[s->next++];
    float *g = s->w->model->grads + b->off;
    if (s->bucket_of) start_bucket_in_parts(s, b);
    else if (b->sfb) coll_async_call(s->async, sfb_bucket, b, 0);
    else if (compressing(s)) coll_async_call(s->async, compressed_bucket, b, 0);
    else if (s->shard) coll_async_reduce_scatter(s->async, g, b->len, 0);
    else coll_async_allreduce(s->async, s->w->cfg->algo, g, b->len, 0);
  }
}

/* Priority order, before layer `layer` runs forward: its bucket summed and
 * its part of the previous step's update applied. */
static void apply_bucket_update(void *ctx, int layer) {
  reducer_t *s = ctx;
  bucket_t *b = &s->buckets[s->bucket_of[layer]];
  if (!b->pending) return;
  b->pending = 0;
  double t0 = dt_trace ? dt_now() : 0;
  if (coll_async_wait_one(s->async, b->last_ticket) != 0) {
    s->failed = 1;
    return;
  }
  if (dt_trace) trace_slice(dt_trace, TRACE_WAIT, "wait for bucket", layer, t0, dt_now());
  worker_update_part(s->w, s->w->segs + b->seg, b->nseg, s->lr);
}

/* Sums the gradients over ranks: during backprop (overlap) or after it. */
static int exchange_gradients(reducer_t *s, double backward_end) {
  worker_t *w = s->w;
  if (w->nranks == 1) return 0;
  double t0 = dt_now(), busy = 0;
  if (s->async) {
    int rc = coll_async_wait(s->async, &busy);
    if (dt_trace) trace_slice(dt_trace, TRACE_WAIT, "wait for buckets", 0, backward_end, dt_now());
    w->timers.comm += busy;
    w->timers.comm_exposed += dt_now() - backward_end;
    return rc;
  }
  for (int i = 0; i < s->nbuckets; i++) {
    float *g = w->model->grads + s->buckets[i].off;
    size_t n = s->buckets[i].len;
    int rc = s->buckets[i].sfb ? sfb_bucket(w->coll, &s->buckets[i])
             : compressing(s) ? compressed_bucket(w->coll, &s->buckets[i])
             : s->shard ? reduce_scatter_ring_inplace(w->coll, g, n)
                        : allreduce(w->coll, w->cfg->algo, g, n);
    if (rc != 0) return -1;
  }
  worker_comm_since(w, t0);
  return 0;
}

/* Whether step k is the last of its epoch or of the run, where `steps`
 * counts the steps taken once its update is applied: evaluation and a
 * checkpoint follow it (or a --checkpoint-every checkpoint alone). */
static int ends_epoch(const worker_t *w, int64_t k, int64_t steps) {
  const train_config_t *cfg = w->cfg;
  return k == w->steps_per_epoch - 1 || (cfg->max_steps && steps >= cfg->max_steps) ||
         worker_step_checkpoint_due(w, k, steps);
}

/* Every bucket of `arena` (parameters or optimizer state) from the ranks
 * that stepped its blocks. */
static int gather_blocks(reducer_t *s, float *arena) {
  worker_t *w = s->w;
  double t0 = dt_now();
  for (int i = 0; i < s->nbuckets; i++)
    if (allgather_ring(w->coll, arena + s->buckets[i].off, s->buckets[i].len) != 0) return -1;
  worker_comm_since(w, t0);
  return 0;
}

/* Sharded: this rank's blocks stepped, then everyone's new parameters;
 * before a checkpoint is written, everyone's optimizer state too. */
static int apply_sharded_update(reducer_t *s, int64_t k) {
  worker_t *w = s->w;
  const train_config_t *cfg = w->cfg;
  worker_apply_update_segs(w, s->shard, s->nshard);
  DT_TRY(gather_blocks(s, w->model->params));
  int epoch_end = ends_epoch(w, k, w->step);
  for (int i = 0; cfg->checkpoint[0] && epoch_end && i < w->opt->nstate; i++)
    DT_TRY(gather_blocks(s, w->opt->state[i]));
  return 0;
}

/* Priority order: the update is left to the next forward pass, but for
 * the last step of an epoch or of the run. */
static int finish_step_deferred(reducer_t *s, int64_t k) {
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


/* --compress: the compressor, and each bucket's tensors as matrices
 * (rows = the first dimension: a layer's outputs) for PowerSGD. */
static int plan_compression(reducer_t *s) {
  worker_t *w = s->w;
  const train_config_t *cfg = w->cfg;
  const model_t *m = w->model;
  if (cfg->compression.codec.kind == CODEC_NONE || w->nranks == 1) return 0;
  if (!(s->mats = calloc((size_t)m->ntensors + 1, sizeof *s->mats))) return dt_error("out of memory");
  compress_model_matrices(m, s->mats);
  for (int b = 0; b < s->nbuckets; b++) {
    bucket_t *k = &s->buckets[b];
    k->owner = s;
    k->nmat = compress_tensors_in(m, k->off, k->len, &k->mat);
  }
  DT_TRY(worker_compressor_new(w, w->rank, w->nranks, &s->cx));
  return worker_keep_compressor(w, s->cx);
}

int reducer_sends_factors(const model_t *m, const train_config_t *cfg, int nranks, int first_layer,
                          size_t *in, size_t *out) {
  const layer_t *l = &m->layers[first_layer];
  *in = shape_size(l->in_shape), *out = (size_t)l->spec.units;
  return cfg->compression.sufficient_factors && l->spec.kind == LAYER_DENSE &&
         sfb_gains(nranks, cfg->batch, *in, *out);
}

/* --sufficient-factors: which layers gain (a bucket a layer), and the
 * buffers for every rank's rows of the widest of them. */
static int plan_sufficient_factors(reducer_t *s) {
  worker_t *w = s->w;
  const model_t *m = w->model;
  if (!w->cfg->compression.sufficient_factors || w->nranks == 1) return 0;
  size_t max_in = 0, max_out = 0;
  for (int b = 0; b < s->nbuckets; b++) {
    bucket_t *k = &s->buckets[b];
    size_t in, out;
    k->owner = s;
    k->sfb = reducer_sends_factors(m, w->cfg, w->nranks, k->first_layer, &in, &out);
    if (k->sfb && in > max_in) max_in = in;
    if (k->sfb && out > max_out) max_out = out;
  }
  if (!max_in) return 0;
  return sfb_new(w->rank, w->nranks, (size_t)m->max_batch, max_in, max_out, &s->sfb);
}

int reducer_new(worker_t *w, reducer_t **out) {
  reducer_t *s = calloc(1, sizeof *s);
  if (!s) return dt_error("out of memory");
  s->w = w;
  int rc = plan_buckets(s);
  if (rc == 0) rc = plan_bucket_updates(s);
  if (rc == 0) rc = plan_shard(s);
  if (rc == 0) rc = plan_compression(s);
  if (rc == 0) rc = plan_sufficient_factors(s);
  if (rc == 0 && w->nranks > 1 && w->cfg->overlap)
    rc = coll_async_new(w->coll, w->cfg->comm_order, &s->async);
  if (!s->async) free(s->bucket_of), s->bucket_of = NULL; /* one rank: nothing to order */
  *out = s;
  return rc;
}

void reducer_free(reducer_t *s) {
  if (!s) return;
  coll_async_free(s->async);
  if (s->w->ckpt_cx == s->cx) s->w->ckpt_cx = NULL;
  compressor_free(s->cx);
  sfb_free(s->sfb);
  free(s->mats);
  free(s->shard);
  free(s->bucket_of);
  free(s->buckets);
  free(s);
}

step_hooks_t reducer_begin_step(reducer_t *s, int count) {
  s->next = 0;
  s->step = s->w->step;
  s->count = count;
  return (step_hooks_t){.wait = s->bucket_of ? apply_bucket_update : NULL,
                        .ready = start_ready_buckets, .ctx = s};
}

int reducer_overlaps(const reducer_t *s) { return s->async != NULL; }

int reducer_defers(const reducer_t *s) { return s->bucket_of != NULL; }

int reducer_wait(reducer_t *s) {
  if (s->failed) return -1;
  if (s->bucket_of) return 0; /* the next forward pass waits, or finish_step_deferred */
  return exchange_gradients(s, dt_now());
}

int reducer_apply(reducer_t *s, int64_t k) {
  if (s->bucket_of) return finish_step_deferred(s, k);
  if (s->shard) return apply_sharded_update(s, k);
  worker_apply_update(s->w);
  return 0;
}

/* --compress: the epoch's figures as metrics fields (none without it):
 * the codec, the ratio of the dense ring's bytes per step (2 (P - 1)/P 4n,
 * n the gradient's floats) to the bytes this rank sent per step (counted
 * by the transport), encode and decode seconds, the memory's norm. */
void reducer_compress_json(reducer_t *s, const epoch_report_t *r, char *buf, size_t cap) {
  buf[0] = 0;
  if (!s->cx) return;
  worker_t *w = s->w;
  compress_stats_t st;
  compressor_take_stats(s->cx, &st);
  char name[48];
  codec_format(&w->cfg->compression.codec, name, sizeof name);
  double dense = 2.0 * (w->nranks - 1) / w->nranks * 4.0 * (double)w->model->nparams;
  double sent = r->steps ? (double)r->timers.bytes_sent / (double)r->steps : 0;
  snprintf(buf, cap, "\"compress\":\"%s\",\"error_feedback\":%s,\"compress_ratio\":%.6g,"
           "\"encode_sec\":%.6g,\"decode_sec\":%.6g,\"ef_residual_norm\":%.6g,"
           "\"dense_fallbacks\":%llu", name, compressor_has_memory(s->cx) ? "true" : "false",
           sent > 0 ? dense / sent : 0.0, st.encode_sec, st.decode_sec, st.residual_norm,
           (unsigned long long)st.dense_fallbacks);
}
