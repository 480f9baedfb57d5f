/* The one weird trick (Krizhevsky 2014, "One weird trick for parallelizing
 * convolutional neural networks", sec. 4): the convolutional layers hold
 * few parameters and most of the compute, so they run data-parallel; the
 * fully connected layers hold most of the parameters and little compute,
 * so they run model-parallel (tensor.h: Megatron's column/row pairs over
 * all K workers). Each worker runs the layers before the first split one
 * on its b samples; their features cross to every worker, which runs its
 * split of the rest on them; the gradients of the features go back to the
 * worker that owns each sample; the convolutions' gradients are summed by
 * allreduce and stepped once. The paper gives three ways through the
 * split layers, --owt-scheme:
 *
 *   (a) every worker's features at once (an allgather of K blocks), one
 *       pass on all K·b samples, the gradients back by reduce-scatter, one
 *       step of the split layers: the step of one worker on K·b samples.
 *   (b) one worker's batch at a time: worker j broadcasts its b features,
 *       every worker runs its split forward and backward on them, the
 *       features' gradient is reduced to j, and the split layers step; the
 *       next worker's broadcast runs beside this batch's compute. The
 *       paper's rule: the convolutions see batch K·b (one step on the
 *       gradient averaged over all of it), the fully connected layers
 *       batch b (K steps, each on the mean over one worker's batch, at the
 *       step's learning rate, each after the previous one's update).
 *   (c) a K-th of every worker's batch at a time: the slices j of all the
 *       blocks are allgathered, and on as in (b) (reduce-scatter back).
 *
 * (b) is the paper's experiments' scheme and the default. The convolutions'
 * gradient is the mean over the K·b samples in every scheme: a pass's
 * feature gradients, of a loss averaged over its n samples, are scaled by
 * n / (K·b) before the convolutions' backward.
 *
 * The model is cut with the stage seam (nn/stage.c) at the first
 * column-split layer: stage `conv` before it (absent when the model starts
 * with a dense pair: the exchange is then of the input), stage `fc` from it
 * on. A short last step shards its samples as evenly as data_shard does;
 * an exchange pads each part to the largest. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll_async.h"
#include "strategy/dp/dp.h"
#include "strategy/tensor/tensor.h"

/* One pass of the split layers: whose samples, and how they travel. */
typedef struct {
  size_t n;          /* samples in the pass */
  size_t part;       /* samples a worker sends (the largest part; the others padded) */
  size_t count;      /* floats exchanged: part x feat x (K, or 1 for a broadcast) */
} owt_pass_t;

typedef struct {
  worker_t *w;
  coll_ctx_t *group;          /* every worker: the split layers' sums, the front's allreduce */
  comm_t *xcomm;              /* (b), (c): the exchanges' own communicator, */
  coll_ctx_t *xctx;           /* its context, */
  coll_async_t *async;        /* and its progress thread, beside the compute */
  owt_scheme_t scheme;
  int K, me, cut, S;          /* workers, this worker, first split layer, passes a step */
  stage_t *conv, *fc;         /* layers [0, cut) (NULL when cut = 0) and [cut, nlayers) */
  size_t feat, conv_params;   /* floats a sample crossing the cut; parameters [0, conv_params) */
  size_t stride;              /* floats of one pass's exchange buffer */
  float *all;                 /* [S x stride]: each pass's features, as exchanged */
  float *grad;                /* [S x stride]: each pass's feature gradients, as exchanged */
  float *dfc;                 /* [K x batch, feat]: the split stage's input gradient of a pass */
  float *dmine;               /* [batch x feat]: this worker's feature gradients */
  int32_t *labels;            /* [K x batch]: the step's labels, in step order */
  int32_t *pass_labels;       /* [K x batch]: one pass's labels */
  size_t *off, *cnt;          /* each worker's samples of the step */
  owt_pass_t *pass;           /* [S] */
  size_t *xt, *gt;            /* [S]: each pass's exchange tickets (features, gradients) */
  int nfront;                 /* w->segs [0, nfront): the front's tensors; the rest: split */
  int64_t step;               /* the step's number (w->step before its update) */
} owt_t;

/* The cut: the first column-split layer, whose input gradient is left
 * partial (the exchange back sums it, before the copies). -1 (error set)
 * when there is none. */
static int plan_cut(model_t *m) {
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i].spec.split == SPLIT_COLUMN) {
      m->layers[i].tp_partial_dx = 1;
      return i;
    }
  return dt_error("option --tp-conv data: the model has no dense pair to split");
}

/* The data-parallel layers' parameters, [0, front_params) of the arena
 * (layer order): what the workers allreduce. */
static size_t front_params(const model_t *m, int cut) {
  size_t n = 0;
  for (int i = 0; i < cut; i++) n += m->layers[i].param_len;
  return n;
}

static int passes(owt_scheme_t scheme, int K) { return scheme == OWT_SCHEME_A ? 1 : K; }

/* Pass j of a step whose workers hold cnt[0..K) samples (cnt[0] the
 * largest, as data_shard gives). */
static owt_pass_t pass_of(owt_scheme_t scheme, int K, const size_t *cnt, int j, size_t feat) {
  owt_pass_t p = {0};
  size_t o, len;
  switch (scheme) {
  case OWT_SCHEME_UNSET: /* resolved to b before a run */
  case OWT_SCHEME_A:
    for (int i = 0; i < K; i++) p.n += cnt[i];
    p.part = cnt[0], p.count = (size_t)K * p.part * feat;
    break;
  case OWT_SCHEME_B: /* worker j's block, broadcast */
    p.n = p.part = cnt[j], p.count = p.part * feat;
    break;
  case OWT_SCHEME_C: /* slice j of every block, allgathered */
    for (int i = 0; i < K; i++) data_shard(cnt[i], j, K, &o, &len), p.n += len;
    data_shard(cnt[0], 0, K, &o, &p.part);
    p.count = (size_t)K * p.part * feat;
    break;
  }
  return p;
}

/* Where worker i's samples of pass j lie in its block: [*o, *o + *len). */
static void pass_share(const owt_t *o, int j, int i, size_t *off, size_t *len) {
  switch (o->scheme) {
  case OWT_SCHEME_UNSET:
  case OWT_SCHEME_A: *off = 0, *len = o->cnt[i]; break;
  case OWT_SCHEME_B: *off = 0, *len = i == j ? o->cnt[i] : 0; break;
  case OWT_SCHEME_C: data_shard(o->cnt[i], j, o->K, off, len); break;
  }
}

static int setup(owt_t *o, worker_t *w) {
  model_t *m = w->model;
  memset(o, 0, sizeof *o);
  o->w = w;
  o->K = tensor_size(w->tp), o->me = tensor_rank(w->tp);
  o->group = tensor_coll(w->tp);
  o->scheme = w->cfg->tensor.owt_scheme;
  o->S = passes(o->scheme, o->K);
  worker_plan_steps(w, o->K); /* a step: batch samples per worker */
  if ((o->cut = plan_cut(m)) < 0) return -1;
  int b = w->cfg->batch, K = o->K;
  if (o->cut > 0) {
    DT_TRY(stage_new(m, 0, o->cut - 1, 1, b, &o->conv));
    o->conv_params = front_params(m, o->cut);
  }
  DT_TRY(stage_new(m, o->cut, m->nlayers - 1, 1, K * b, &o->fc));
  o->feat = o->fc->in_size;
  o->dmine = dt_alloc_floats((size_t)b * o->feat);
  o->dfc = dt_alloc_floats((size_t)K * b * o->feat);
  o->labels = calloc((size_t)K * b, sizeof *o->labels);
  o->pass_labels = calloc((size_t)K * b, sizeof *o->pass_labels);
  o->off = calloc((size_t)K, sizeof *o->off);
  o->cnt = calloc((size_t)K, sizeof *o->cnt);
  o->pass = calloc((size_t)o->S, sizeof *o->pass);
  o->xt = calloc((size_t)o->S, sizeof *o->xt);
  o->gt = calloc((size_t)o->S, sizeof *o->gt);
  if (!o->dmine || !o->dfc || !o->labels || !o->pass_labels || !o->off || !o->cnt ||
      !o->pass || !o->xt || !o->gt)
    return dt_error("out of memory");
  for (int i = 0; i < K; i++) o->cnt[i] = (size_t)b; /* a full step: the largest pass, the first */
  o->stride = pass_of(o->scheme, K, o->cnt, 0, o->feat).count; /* a pass's exchange, not K·b each */
  o->all = dt_alloc_floats((size_t)o->S * o->stride);
  o->grad = dt_alloc_floats((size_t)o->S * o->stride);
  if (!o->all || !o->grad) return dt_error("out of memory");
  while (o->nfront < w->nsegs && w->segs[o->nfront].off < o->conv_params) o->nfront++;
  if (o->S > 1) { /* the exchanges run beside the split layers' own sums */
    DT_TRY(comm_split(coll_ctx_comm(o->group), 0, o->me, &o->xcomm));
    DT_TRY(coll_ctx_new(o->xcomm, &o->xctx));
    DT_TRY(coll_async_new(o->xctx, COLL_ORDER_FIFO, &o->async));
  }
  return 0;
}

static void teardown(owt_t *o) {
  if (o->async) coll_async_free(o->async);
  if (o->xctx) coll_ctx_free(o->xctx);
  if (o->xcomm) comm_free(o->xcomm);
  if (o->conv) stage_free(o->conv);
  if (o->fc) stage_free(o->fc);
  dt_free(o->all);
  dt_free(o->grad);
  dt_free(o->dmine);
  dt_free(o->dfc);
  free(o->labels);
  free(o->pass_labels);
  free(o->off);
  free(o->cnt);
  free(o->pass);
  free(o->xt);
  free(o->gt);
}

static double since(double t0) { return dt_now() - t0; }

/* This worker's features of the step: its parts of each pass's buffer. */
static int forward_conv(owt_t *o, size_t start) {
  worker_t *w = o->w;
  size_t n = o->cnt[o->me];
  const float *y = NULL;
  const uint32_t *idx = w->order + start + o->off[o->me];
  if (n > 0 && !o->conv) {
    data_gather(w->train, idx, n, o->dmine, o->pass_labels); /* the input is the feature */
    y = o->dmine;
  } else if (n > 0) {
    rng_t rng; /* dropout in the data-parallel layers: a function of (seed, step, worker) */
    rng_seed(&rng, rng_derive(w->cfg->seed, 0xd80, (uint64_t)(w->step * o->K + o->me)));
    data_gather(w->train, idx, n, stage_input(o->conv, 0), o->pass_labels);
    DT_TRY(stage_forward(o->conv, 0, stage_input(o->conv, 0), (int)n, 1, &rng, &y));
  }
  for (int j = 0; j < o->S; j++) {
    size_t so, len, slot = o->scheme == OWT_SCHEME_B ? 0 : (size_t)o->me;
    pass_share(o, j, o->me, &so, &len);
    if (o->scheme == OWT_SCHEME_B && j != o->me) continue;
    float *mine = o->all + j * o->stride + slot * o->pass[j].part * o->feat;
    memset(mine, 0, o->pass[j].part * o->feat * sizeof(float));
    if (len) memcpy(mine, y + so * o->feat, len * o->feat * sizeof(float));
  }
  return 0;
}

/* The exchanges of pass j, on the exchange thread ((b), (c)) or here (a). */
typedef struct { owt_t *o; int j, back; } xarg_t;

static int exchange(coll_ctx_t *ctx, void *arg) {
  xarg_t *x = arg;
  owt_t *o = x->o;
  float *buf = (x->back ? o->grad : o->all) + (size_t)x->j * o->stride;
  size_t count = o->pass[x->j].count;
  if (o->scheme == OWT_SCHEME_B)
    return x->back ? reduce_tree(ctx, x->j, buf, count) : broadcast_tree(ctx, x->j, buf, count);
  return x->back ? reduce_scatter_ring_inplace(ctx, buf, count) : allgather_ring(ctx, buf, count);
}

/* Pass j's features (as exchanged) into the split stage's input, in the
 * order of the pass's samples; their labels beside. */
static void unpack_pass(owt_t *o, int j, float *x) {
  size_t at = 0, part = o->pass[j].part;
  for (int i = 0; i < o->K; i++) {
    size_t so, len, slot = o->scheme == OWT_SCHEME_B ? 0 : (size_t)i;
    pass_share(o, j, i, &so, &len);
    if (!len) continue;
    memcpy(x + at * o->feat, o->all + j * o->stride + slot * part * o->feat, len * o->feat * sizeof(float));
    memcpy(o->pass_labels + at, o->labels + o->off[i] + so, len * sizeof *o->labels);
    at += len;
  }
}

/* The split stage's input gradient of pass j into its exchange buffer,
 * scaled to the step's mean (the pass's loss was averaged over its own). */
static void pack_grad(owt_t *o, int j, const float *dx, size_t in_step) {
  size_t at = 0, part = o->pass[j].part;
  float *buf = o->grad + j * o->stride;
  float scale = (float)((double)o->pass[j].n / (double)in_step);
  memset(buf, 0, o->pass[j].count * sizeof(float));
  for (int i = 0; i < o->K; i++) {
    size_t so, len, slot = o->scheme == OWT_SCHEME_B ? 0 : (size_t)i;
    pass_share(o, j, i, &so, &len);
    if (!len) continue;
    float *dst = buf + slot * part * o->feat;
    const float *src = dx + at * o->feat;
    if (scale == 1.0f) memcpy(dst, src, len * o->feat * sizeof(float));
    else for (size_t k = 0; k < len * o->feat; k++) dst[k] = src[k] * scale;
    at += len;
  }
}

/* This worker's share of pass j's summed gradients into dmine. */
static void take_grad(owt_t *o, int j) {
  size_t so, len, slot = o->scheme == OWT_SCHEME_B ? 0 : (size_t)o->me;
  pass_share(o, j, o->me, &so, &len);
  if (len)
    memcpy(o->dmine + so * o->feat, o->grad + j * o->stride + slot * o->pass[j].part * o->feat,
           len * o->feat * sizeof(float));
}

/* Starts (b, c) or runs (a) one exchange; *comm gets the time it took here. */
static int start_exchange(owt_t *o, xarg_t *arg, size_t *ticket, double *comm) {
  *ticket = 0;
  if (o->pass[arg->j].n == 0) return 0; /* a short last step's empty pass: nothing to send */
  if (!o->async) {
    double c0 = dt_now();
    int rc = exchange(o->group, arg);
    *comm += since(c0);
    return rc;
  }
  *ticket = coll_async_call(o->async, exchange, arg, 0);
  return 0;
}

static int finish_exchange(owt_t *o, int j, size_t ticket, double *exposed) {
  if (!o->async || o->pass[j].n == 0) return 0;
  double c0 = dt_now();
  int rc = coll_async_wait_one(o->async, ticket);
  *exposed += since(c0);
  return rc;
}

/* One pass of the split layers: forward, loss, backward, the gradients'
 * exchange started; in (b) and (c) their step. */
static int run_pass(owt_t *o, int j, size_t in_step, xarg_t *back, double *comm, double *exposed) {
  worker_t *w = o->w;
  float *x = stage_input(o->fc, 0);
  int n = (int)o->pass[j].n;
  DT_TRY(finish_exchange(o, j, o->xt[j], exposed));
  unpack_pass(o, j, x);
  rng_t rng; /* dropout in the split layers: the same masks on every worker */
  rng_seed(&rng, rng_derive(w->cfg->seed, 0xd81, (uint64_t)(o->step * o->S + j)));
  DT_TRY(stage_forward(o->fc, 0, x, n, 1, &rng, NULL));
  double loss;
  double correct;
  DT_TRY(stage_loss(o->fc, 0, o->pass_labels, n, &loss, &correct));
  if (!isfinite(loss)) return worker_step_diverged(w, loss);
  w->epoch_loss_sum += loss, w->epoch_samples += n, w->epoch_correct += correct;
  DT_TRY(stage_backward(o->fc, 0, NULL, o->conv ? o->dfc : NULL, 0, NULL, NULL));
  if (o->conv) {
    pack_grad(o, j, o->dfc, in_step);
    DT_TRY(start_exchange(o, back, &o->gt[j], comm));
  }
  return 0;
}

static int step(void *st, int epoch, int64_t k) {
  owt_t *o = st;
  worker_t *w = o->w;
  DT_TRY(worker_stopped(w));
  size_t gb = (size_t)w->cfg->batch * o->K, start = (size_t)k * gb;
  size_t in_step = w->train->n - start < gb ? w->train->n - start : gb;
  for (int i = 0; i < o->K; i++) data_shard(in_step, i, o->K, &o->off[i], &o->cnt[i]);
  for (int j = 0; j < o->S; j++) o->pass[j] = pass_of(o->scheme, o->K, o->cnt, j, o->feat);
  /* comm: time this thread spent in exchanges it ran itself; exposed: in
   * waiting for the exchange thread's */
  double t0 = dt_now(), comm = 0, exposed = 0, tp0 = tensor_comm_sec(w->tp);
  o->step = w->step;
  data_gather(w->train, w->order + start, in_step, NULL, o->labels);
  DT_TRY(forward_conv(o, start));
  xarg_t fwd[o->S], back[o->S];
  for (int j = 0; j < o->S; j++) { /* every pass's features on their way */
    fwd[j] = (xarg_t){o, j, 0}, back[j] = (xarg_t){o, j, 1};
    DT_TRY(start_exchange(o, &fwd[j], &o->xt[j], &comm));
  }
  float lr = worker_begin_update(w);
  for (int j = 0; j < o->S; j++) {
    if (o->pass[j].n == 0) continue; /* a short last step leaves some workers nothing */
    DT_TRY(run_pass(o, j, in_step, &back[j], &comm, &exposed));
    if (o->S > 1) /* (b), (c): the split layers step after each pass */
      worker_update_part(w, w->segs + o->nfront, w->nsegs - o->nfront, lr);
  }
  if (o->conv) {
    for (int j = 0; j < o->S; j++) {
      DT_TRY(finish_exchange(o, j, o->gt[j], &exposed));
      if (o->pass[j].n) take_grad(o, j);
    }
    if (o->cnt[o->me] > 0)
      DT_TRY(stage_backward(o->conv, 0, o->dmine, NULL, 0, NULL, NULL));
    else
      kern_zero(o->conv_params, w->model->grads);
    double c0 = dt_now(); /* the data-parallel layers' gradients */
    DT_TRY(allreduce(o->group, w->cfg->algo, w->model->grads, o->conv_params));
    comm += since(c0);
  }
  comm += tensor_comm_sec(w->tp) - tp0;
  w->timers.comm += comm + (o->async ? coll_async_take_busy(o->async) : 0);
  w->timers.comm_exposed += comm + exposed;
  w->timers.compute += since(t0) - comm - exposed;
  if (o->S > 1) worker_update_part(w, w->segs, o->nfront, lr);
  else worker_update_part(w, w->segs, w->nsegs, lr);
  return 0;
}

static int evaluate(void *st, epoch_report_t *r) {
  owt_t *o = st;
  return worker_epoch_figures(o->w, r, NULL, 0); /* every worker runs the split model on all of it */
}

int strategy_one_weird_trick(worker_t *w) {
  if (!w->tp) return strategy_data_parallel(w); /* one worker: nothing to split */
  owt_t o;
  int rc = setup(&o, w);
  driver_ops_t ops = {.step = step, .evaluate = evaluate};
  if (rc == 0) rc = driver_run(w, &ops, &o);
  teardown(&o);
  return rc;
}

/* One worker's step as data: its data-parallel layers on its batch, each
 * pass's exchange of features, the split layers (with their sums over all
 * the workers) on the pass's samples, the exchange of the features'
 * gradients back to their owners, in (b) and (c) the split layers' step;
 * then the data-parallel layers' backward and the allreduce of their
 * gradients, their update. */
static int describe_worker(step_desc_t *out, const train_config_t *c, model_t *m, int me, int K,
                           int algo) {
  int cut = plan_cut(m), b = c->batch, prev = -1, S = passes(c->tensor.owt_scheme, K);
  if (cut < 0) return -1;
  owt_scheme_t scheme = c->tensor.owt_scheme;
  step_groups_t g = {{K, me, algo, 0, 1}, {1, 0, algo, 0, 1}};
  size_t feat = shape_size(m->layers[cut].in_shape), cnt[K], front = front_params(m, cut);
  for (int i = 0; i < K; i++) cnt[i] = (size_t)b;
  for (int i = 0; i < cut && prev != STEP_FAILED; i++)
    prev = step_add_layer(out, m, me, i, b, 0, 0, 0, &g, prev, NULL);
  int ready = prev, back = prev;
  for (int j = 0; j < S && prev != STEP_FAILED; j++) {
    owt_pass_t p = pass_of(scheme, K, cnt, j, feat);
    step_thread_t th = S > 1 ? THREAD_COMM : THREAD_COMPUTE;
    int x = scheme == OWT_SCHEME_B ? step_add_tree(out, me, 0, K, j, p.count, ready, th, 1)
                                   : step_add_ring_half(out, me, me, K, 1, p.count, ready, th);
    if (x == STEP_FAILED) return -1;
    prev = x > prev ? x : prev;
    for (int i = cut; i < m->nlayers && prev != STEP_FAILED; i++)
      prev = step_add_layer(out, m, me, i, (int)p.n, 0, cut, cut > 0, &g, i == cut ? x : prev, NULL);
    for (int i = m->nlayers - 1; i >= cut && prev != STEP_FAILED; i--)
      prev = step_add_layer(out, m, me, i, (int)p.n, 1, cut, cut > 0, &g, prev, NULL);
    if (cut > 0 && prev != STEP_FAILED)
      back = scheme == OWT_SCHEME_B ? step_add_tree(out, me, 1, K, j, p.count, prev, th, 1)
                                    : step_add_ring_half(out, me, me, K, 0, p.count, prev, th);
    if (S > 1 && prev != STEP_FAILED)
      prev = step_add(out, (step_task_t){TASK_UPDATE, me, -1, m->nparams - front, (int)p.n,
                                         .peer = -1, .after = prev});
  }
  if (back == STEP_FAILED) return -1;
  if (cut > 0 && prev != STEP_FAILED) prev = back > prev ? back : prev;
  for (int i = cut - 1; i >= 0 && prev != STEP_FAILED; i--)
    prev = step_add_layer(out, m, me, i, b, 1, 0, 0, &g, prev, NULL);
  if (cut > 0 && prev != STEP_FAILED)
    prev = step_add_allreduce(out, me, me, K, 1, algo, front, prev, THREAD_COMPUTE, 1);
  if (prev != STEP_FAILED)
    prev = step_add(out, (step_task_t){TASK_UPDATE, me, -1, S > 1 ? front : m->nparams, K * b,
                                       .peer = -1, .after = prev});
  return prev == STEP_FAILED ? -1 : 0;
}

static int owt_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int K = tensor_group_size(c, c->workers), algo;
  if (K == 1) /* one worker: nothing to split (strategy_one_weird_trick) */
    return step_add_local_step(out, m, 0, c->batch) == STEP_FAILED ? -1 : 0;
  DT_TRY(step_allreduce_algo(c->algo, K, &algo));
  tensor_desc_t *td;
  int rc = tensor_desc_new(c, m, K, 1, &td);
  for (int me = 0; me < K && rc == 0; me++)
    rc = describe_worker(out, c, tensor_desc_model(td, me), me, K, algo);
  tensor_desc_free(td);
  return rc;
}

static int owt_matches(const train_config_t *c) {
  return train_axes(c, OPTIMIZATION_CENTRAL, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC) && c->tensor.conv_data;
}

const strategy_t STRATEGY_ONE_WEIRD_TRICK = {
    .name = "one weird trick (data-parallel convolutions, split dense layers)",
    .paper = "Krizhevsky 2014, One weird trick for parallelizing convolutional neural networks",
    .axes = "--schedule sync --exchange allreduce:ALGO --tp-conv data [--owt-scheme a|b|c]",
    .optimization = OPTIMIZATION_CENTRAL,
    .compress = COMPRESS_REFUSED,
    .no_compress = "not with the one weird trick (--tp-conv data): its dense layers' "
                   "activations, not gradients, go on the wire",
    .matches = owt_matches,
    .run = strategy_one_weird_trick,
    .describe_step = owt_describe_step,
};
