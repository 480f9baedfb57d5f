/* The one weird trick (Krizhevsky 2014, "One weird trick for parallelizing
 * convolutional neural networks", scheme (b)): the convolutional layers
 * hold few parameters and most of the compute, so they run data-parallel;
 * the fully connected layers hold most of the parameters and little
 * compute, so they run model-parallel. Each of the K workers runs the
 * layers before the first dense pair on its b samples; the features of all
 * K·b samples are exchanged (an allgather: the "batch exchanged at the
 * boundary"); every worker runs its split of the dense layers (tensor.h:
 * Megatron's column/row pairs over all K workers) on all K·b samples; the
 * gradient of the features goes back to the worker that owns each sample
 * (a reduce-scatter, which also sums the column layer's partial input
 * gradients); the convolutional gradients are summed over the workers by
 * allreduce, the dense layers' are already whole (each worker saw every
 * sample). The result is one worker's step on the K·b samples.
 *
 * The model is cut with the stage seam (nn/stage.c) at the first
 * column-split layer: stage `conv` before it (absent when the model starts
 * with a dense pair: the exchange is then of the input), stage `fc` from it
 * on. A short last step pads each worker's block to the largest share. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/dp/dp.h"
#include "strategy/tensor/tensor.h"

typedef struct {
  worker_t *w;
  coll_ctx_t *group;          /* every worker */
  int K, me, cut;             /* workers, this worker, first layer of the split part */
  stage_t *conv, *fc;         /* layers [0, cut) (NULL when cut = 0) and [cut, nlayers) */
  size_t feat, conv_params;   /* floats a sample crossing the cut; parameters [0, conv_params) */
  float *all;                 /* [K x batch, feat]: the step's features or their gradients, padded */
  float *dfc;                 /* [K x batch, feat]: the gradient of the fc stage's input */
  int32_t *labels;            /* [K x batch]: the step's labels */
  size_t *off, *cnt;          /* each worker's samples of the step */
} owt_t;

/* The cut: the first column-split layer, whose input gradient is left
 * partial (the reduce-scatter sums it, before the copies). -1 (error set)
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

/* The batch exchanged at the cut: every worker's block of `block` samples
 * (the largest share, the others padded to it) of feat floats each. */
static size_t exchange_floats(int K, size_t block, size_t feat) { return (size_t)K * block * feat; }

static int setup(owt_t *o, worker_t *w) {
  model_t *m = w->model;
  memset(o, 0, sizeof *o);
  o->w = w;
  o->K = tensor_size(w->tp), o->me = tensor_rank(w->tp);
  o->group = tensor_coll(w->tp);
  worker_plan_steps(w, o->K); /* a step: batch samples per worker */
  if ((o->cut = plan_cut(m)) < 0) return -1;
  int b = w->cfg->batch, K = o->K;
  if (o->cut > 0) {
    DT_TRY(stage_new(m, 0, o->cut - 1, 1, b, &o->conv));
    o->conv_params = front_params(m, o->cut);
  }
  DT_TRY(stage_new(m, o->cut, m->nlayers - 1, 1, K * b, &o->fc));
  o->feat = o->fc->in_size;
  o->all = dt_alloc_floats((size_t)K * b * o->feat);
  o->dfc = dt_alloc_floats((size_t)K * b * o->feat);
  o->labels = calloc((size_t)K * b, sizeof *o->labels);
  o->off = calloc((size_t)K, sizeof *o->off);
  o->cnt = calloc((size_t)K, sizeof *o->cnt);
  if (!o->all || !o->dfc || !o->labels || !o->off || !o->cnt) return dt_error("out of memory");
  return 0;
}

static void teardown(owt_t *o) {
  if (o->conv) stage_free(o->conv);
  if (o->fc) stage_free(o->fc);
  dt_free(o->all);
  dt_free(o->dfc);
  free(o->labels);
  free(o->off);
  free(o->cnt);
}

static double since(double t0) { return dt_now() - t0; }

/* This worker's features of the step into its (padded) block of o->all. */
static int forward_conv(owt_t *o, size_t start, size_t block) {
  worker_t *w = o->w;
  size_t n = o->cnt[o->me];
  float *mine = o->all + (size_t)o->me * block * o->feat;
  memset(mine, 0, block * o->feat * sizeof(float));
  if (n == 0) return 0;
  const uint32_t *idx = w->order + start + o->off[o->me];
  if (!o->conv) {
    data_gather(w->train, idx, n, mine, o->labels + o->off[o->me]);
    return 0;
  }
  rng_t rng; /* dropout in the data-parallel layers: a function of (seed, step, worker) */
  rng_seed(&rng, rng_derive(w->cfg->seed, 0xd80, (uint64_t)(w->step * o->K + o->me)));
  const float *y;
  data_gather(w->train, idx, n, stage_input(o->conv, 0), o->labels + o->off[o->me]);
  DT_TRY(stage_forward(o->conv, 0, stage_input(o->conv, 0), (int)n, 1, &rng, &y));
  memcpy(mine, y, n * o->feat * sizeof(float));
  return 0;
}

static int step(void *st, int epoch, int64_t k) {
  owt_t *o = st;
  worker_t *w = o->w;
  if (dt_interrupted()) return worker_interrupted(w);
  size_t gb = (size_t)w->cfg->batch * o->K, start = (size_t)k * gb;
  size_t in_step = w->train->n - start < gb ? w->train->n - start : gb;
  for (int i = 0; i < o->K; i++) data_shard(in_step, i, o->K, &o->off[i], &o->cnt[i]);
  size_t block = o->cnt[0]; /* the first share is the largest */
  size_t total = exchange_floats(o->K, block, o->feat);
  double t0 = dt_now(), comm = 0, tp0 = tensor_comm_sec(w->tp);
  data_gather(w->train, w->order + start, in_step, NULL, o->labels);
  DT_TRY(forward_conv(o, start, block));
  double c0 = dt_now(); /* the batch exchange */
  DT_TRY(allgather_ring(o->group, o->all, total));
  comm += since(c0);
  float *x = stage_input(o->fc, 0);
  for (int i = 0; i < o->K; i++)
    memcpy(x + o->off[i] * o->feat, o->all + (size_t)i * block * o->feat, o->cnt[i] * o->feat * sizeof(float));
  rng_t rng; /* dropout in the split layers: the same masks on every worker */
  rng_seed(&rng, rng_derive(w->cfg->seed, 0xd81, (uint64_t)w->step));
  DT_TRY(stage_forward(o->fc, 0, x, (int)in_step, 1, &rng, NULL));
  double loss;
  int correct;
  DT_TRY(stage_loss(o->fc, 0, o->labels, (int)in_step, &loss, &correct));
  if (!isfinite(loss))
    return worker_step_diverged(w, loss);
  w->epoch_loss_sum += loss, w->epoch_samples += (int64_t)in_step, w->epoch_correct += correct;
  DT_TRY(stage_backward(o->fc, 0, NULL, o->conv ? o->dfc : NULL, 0, NULL, NULL));
  if (o->conv) { /* each sample's feature gradient, summed over the workers, back to its owner */
    memset(o->all, 0, total * sizeof(float));
    for (int i = 0; i < o->K; i++)
      memcpy(o->all + (size_t)i * block * o->feat, o->dfc + o->off[i] * o->feat, o->cnt[i] * o->feat * sizeof(float));
    c0 = dt_now();
    DT_TRY(reduce_scatter_ring_inplace(o->group, o->all, total));
    comm += since(c0);
    if (o->cnt[o->me] > 0)
      DT_TRY(stage_backward(o->conv, 0, o->all + (size_t)o->me * block * o->feat, NULL, 0, NULL, NULL));
    else
      kern_zero(o->conv_params, w->model->grads);
    c0 = dt_now(); /* the data-parallel layers' gradients */
    DT_TRY(allreduce(o->group, w->cfg->algo, w->model->grads, o->conv_params));
    comm += since(c0);
  }
  comm += tensor_comm_sec(w->tp) - tp0;
  w->timers.comm += comm, w->timers.comm_exposed += comm;
  w->timers.compute += since(t0) - comm;
  worker_apply_update(w);
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

/* One worker's step as data: its data-parallel layers on its batch, the
 * allgather of every worker's features, the split layers (with their
 * sums over all the workers) on all K x batch samples, the reduce-scatter
 * of the features' gradients back to their owners, the data-parallel
 * layers' backward and the allreduce of their gradients, the update. */
static int describe_worker(step_desc_t *out, const train_config_t *c, model_t *m, int me, int K,
                           int algo) {
  int cut = plan_cut(m), b = c->batch, prev = -1;
  if (cut < 0) return -1;
  step_groups_t g = {{K, me, algo}, {1, 0, algo}};
  size_t total = exchange_floats(K, (size_t)b, shape_size(m->layers[cut].in_shape));
  for (int i = 0; i < cut && prev != STEP_FAILED; i++)
    prev = step_add_layer(out, m, me, i, b, 0, 0, 0, &g, prev, NULL);
  if (prev != STEP_FAILED) prev = step_add_ring_half(out, me, me, K, 1, total, prev, THREAD_COMPUTE);
  for (int i = cut; i < m->nlayers && prev != STEP_FAILED; i++)
    prev = step_add_layer(out, m, me, i, K * b, 0, cut, cut > 0, &g, prev, NULL);
  for (int i = m->nlayers - 1; i >= cut && prev != STEP_FAILED; i--)
    prev = step_add_layer(out, m, me, i, K * b, 1, cut, cut > 0, &g, prev, NULL);
  if (cut > 0 && prev != STEP_FAILED)
    prev = step_add_ring_half(out, me, me, K, 0, total, prev, THREAD_COMPUTE);
  for (int i = cut - 1; i >= 0 && prev != STEP_FAILED; i--)
    prev = step_add_layer(out, m, me, i, b, 1, 0, 0, &g, prev, NULL);
  if (cut > 0 && prev != STEP_FAILED)
    prev = step_add_allreduce(out, me, me, K, algo, front_params(m, cut), prev, THREAD_COMPUTE, 1);
  if (prev != STEP_FAILED)
    prev = step_add(out, (step_task_t){TASK_UPDATE, me, -1, m->nparams, K * b, .peer = -1,
                                       .after = prev});
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
    .axes = "--schedule sync --exchange allreduce:ALGO --tp-conv data",
    .optimization = OPTIMIZATION_CENTRAL,
    .compress = COMPRESS_REFUSED,
    .no_compress = "not with the one weird trick (--tp-conv data): its dense layers' "
                   "activations, not gradients, go on the wire",
    .matches = owt_matches,
    .run = strategy_one_weird_trick,
    .describe_step = owt_describe_step,
};
