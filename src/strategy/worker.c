/* The worker: one rank's model, optimizer, data slice and bookkeeping.
 * Strategies compose these helpers; none of them communicates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strategy/worker.h"
#include "strategy/balance.h"
#include "strategy/strategy.h"
#include "strategy/tp_group.h"

/* A balanced rank computes up to twice its batch in a step (balance.c). */
int worker_max_batch(const train_config_t *cfg) {
  return cfg->balance ? 2 * cfg->batch : cfg->batch;
}

int worker_build_model(const train_config_t *cfg, shape_t in, int nclasses, tp_link_t *tp,
                       tp_link_t *bn, model_t **out) {
  model_spec_t spec;
  *out = NULL;
  if (model_spec_load(cfg->model, &spec) != 0) return -1;
  int rc = strategy_plan_model(cfg, &spec, tp ? tp->size : 0);
  spec.tp = tp;
  if (rc == 0 && cfg->sync_bn) rc = sync_bn_check_model(&spec);
  spec.bn_sync = bn;
  spec.recompute = cfg->recompute;
  if (rc == 0) rc = model_build(&spec, in, nclasses, worker_max_batch(cfg), out);
  model_spec_free(&spec);
  return rc;
}

static int build_model(worker_t *w) {
  shape_t in = {w->train->c, w->train->h, w->train->w};
  if (worker_build_model(w->cfg, in, w->train->nclasses, w->tp ? tensor_link(w->tp) : NULL,
                         w->bn_sync ? sync_bn_link(w->bn_sync) : NULL, &w->model) != 0)
    return -1;
  model_init_params(w->model, w->cfg->seed);
  return 0;
}

static int build_optimizer(worker_t *w) {
  model_t *m = w->model;
  if (optim_new(&w->cfg->optim, m->nparams, &w->opt) != 0) return -1;
  w->segs = calloc((size_t)m->ntensors + 1, sizeof *w->segs);
  if (!w->segs) return dt_error("out of memory");
  for (int i = 0; i < m->ntensors; i++) w->segs[i] = (optim_segment_t){m->tensors[i].off, m->tensors[i].len};
  w->nsegs = m->ntensors;
  /* AdamW decays matrices and tables, not norms and biases (1-D tensors) */
  optim_segment_t *keep = calloc((size_t)m->ntensors + 1, sizeof *keep);
  if (!keep) return dt_error("out of memory");
  int nkeep = 0;
  for (int i = 0; i < m->ntensors; i++)
    if (m->tensors[i].ndim < 2) keep[nkeep++] = w->segs[i];
  int rc = optim_set_no_decay(w->opt, keep, nkeep);
  free(keep);
  return rc;
}

/* Steps per epoch under synchronous data parallelism: the global batch is
 * nworkers * batch; the last step of an epoch takes what is left. */
int64_t train_steps_per_epoch(const train_config_t *cfg, size_t nsamples, int nworkers) {
  int64_t global = (int64_t)cfg->batch * nworkers;
  return ((int64_t)nsamples + global - 1) / global;
}

lr_schedule_t train_lr_schedule(const train_config_t *cfg, int64_t steps_per_epoch) {
  lr_schedule_t s = {
      .kind = cfg->lr_schedule,
      .base = cfg->lr,
      .total_steps = steps_per_epoch * cfg->epochs,
      .warmup_steps = (int64_t)llround(cfg->warmup_epochs * (double)steps_per_epoch),
      .step_size = (int64_t)llround(cfg->lr_step_epochs * (double)steps_per_epoch),
      .gamma = cfg->lr_gamma,
  };
  if (s.step_size < 1) s.step_size = 1;
  return s;
}

void worker_plan_steps(worker_t *w, int nworkers) {
  w->nranks = nworkers;
  w->steps_per_epoch = train_steps_per_epoch(w->cfg, w->train->n, nworkers);
  w->sched = train_lr_schedule(w->cfg, w->steps_per_epoch);
}

int worker_init(worker_t *w, const train_config_t *cfg, comm_t *comm, const dataset_t *train,
                const dataset_t *test) {
  memset(w, 0, sizeof *w);
  w->cfg = cfg;
  w->comm = comm;
  w->world = comm;
  w->rank = comm ? comm_rank(comm) : 0;
  w->nranks = comm ? comm_size(comm) : 1;
  w->train = train;
  w->test = test;
  w->run_start = dt_now();
  if (comm && tensor_group_size(cfg, comm_size(comm)) > 1) { /* the strategy runs on its slice */
    if (tensor_new(comm, cfg, &w->tp) != 0) return -1;
    w->comm = tensor_slice(w->tp);
    w->rank = comm_rank(w->comm);
    w->nranks = comm_size(w->comm);
    w->tp_rank = tensor_rank(w->tp);
  }
  if (comm && coll_ctx_new(w->comm, &w->coll) != 0) return -1;
  if (comm && cfg->sync_bn && comm_size(w->comm) > 1 && sync_bn_new(w->comm, cfg->algo, &w->bn_sync) != 0)
    return -1;
  if (build_model(w) != 0 || build_optimizer(w) != 0) return -1;
  worker_plan_steps(w, w->nranks);
  w->x = dt_alloc_floats((size_t)worker_max_batch(cfg) * train->dim);
  w->y = dt_alloc((size_t)worker_max_batch(cfg) * dataset_ylen(train) * sizeof(int32_t));
  w->order = dt_alloc(train->n * sizeof(uint32_t));
  w->eval_idx = dt_alloc((size_t)cfg->batch * sizeof(uint32_t));
  w->rank_compute = calloc((size_t)(comm ? comm_size(comm) : 1), sizeof(float));
  if (!w->x || !w->y || !w->order || !w->eval_idx) return -1;
  /* before a resume, which restores its speeds; shares bounded by what the buffers hold */
  if (cfg->balance && w->nranks > 1 &&
      balance_new(w->nranks, cfg->batch, w->model->max_batch, &w->balance) != 0)
    return -1;
  if (cfg->resume[0] && worker_load_checkpoint(w, cfg->resume) != 0) return -1;
  if (worker_reports(w) && cfg->metrics[0]) {
    w->metrics = file_open_output(cfg->metrics, cfg->resume[0] != 0 || cfg->metrics_append);
    if (!w->metrics) return dt_error_prefix("--metrics: ");
  }
  return 0;
}

int worker_resume_at(worker_t *w, const char *from, long long epoch, int64_t step) {
  if (epoch >= w->cfg->epochs)
    return dt_error("--resume %s: the checkpoint is at epoch %lld already; ask for more with "
                    "--epochs", from, epoch);
  w->first_epoch = (int)epoch;
  w->step = w->first_step = step;
  w->opt->steps = step;
  return 0;
}

void worker_free(worker_t *w) {
  /* first: allreduce:shm waits there until no peer reads this rank's arenas */
  if (w->coll) coll_ctx_free(w->coll);
  sync_bn_free(w->bn_sync);
  tensor_free(w->tp); /* after the colls on its slice */
  balance_free(w->balance);
  if (w->metrics) fclose(w->metrics);
  model_free(w->model);
  optim_free(w->opt);
  free(w->segs);
  dt_free(w->ckpt_cx_all);
  free(w->ckpt_cx_lens);
  dt_free(w->x);
  dt_free(w->y);
  dt_free(w->order);
  dt_free(w->eval_idx);
  free(w->rank_compute);
  memset(w, 0, sizeof *w);
}

/* A resumed mid-epoch checkpoint: its epoch starts where the checkpoint
 * stands, its steps the rest of the order in this run's global batch; the
 * epochs after it are whole again. */
static void plan_epoch_offset(worker_t *w, int epoch) {
  if (!w->resume_samples) return;
  w->epoch_offset = epoch == w->first_epoch ? w->resume_samples : 0;
  w->steps_per_epoch = train_steps_per_epoch(w->cfg, w->train->n - w->epoch_offset, w->nranks);
}

void worker_begin_epoch(worker_t *w, int epoch) {
  plan_epoch_offset(w, epoch);
  memset(&w->timers, 0, sizeof w->timers);
  memset(w->model->cost, 0, sizeof w->model->cost);
  w->epoch_loss_sum = 0;
  w->epoch_samples = w->epoch_correct = 0;
  data_epoch_order(w->cfg->seed, epoch, w->order, w->train->n);
  if (w->balance) balance_begin_epoch(w->balance);
}

void worker_step_slice(worker_t *w, int64_t k, size_t *begin, size_t *count, size_t *global) {
  size_t gb = (size_t)w->cfg->batch * (size_t)w->nranks, start = w->epoch_offset + (size_t)k * gb;
  size_t in_step = w->train->n - start < gb ? w->train->n - start : gb;
  size_t off, len;
  if (w->balance) balance_split(w->balance, in_step, w->rank, &off, &len);
  else data_shard(in_step, w->rank, w->nranks, &off, &len);
  *begin = start + off;
  *count = len;
  *global = in_step;
}

size_t worker_epoch_samples_done(const worker_t *w, int64_t k) {
  size_t done = w->epoch_offset + (size_t)(k + 1) * (size_t)w->cfg->batch * (size_t)w->nranks;
  return done < w->train->n ? done : w->train->n;
}

int worker_step_checkpoint_due(const worker_t *w, int64_t k, int64_t steps) {
  const train_config_t *cfg = w->cfg;
  return cfg->checkpoint_every && steps % cfg->checkpoint_every == 0 &&
         k + 1 < w->steps_per_epoch && !(cfg->max_steps && steps >= cfg->max_steps);
}

/* hooks->wait, timed: the seconds inside it, and of those the seconds it
 * waited (the rest is compute it did, an update it applied, which
 * worker_update_part has counted). */
typedef struct {
  worker_t *w;
  const step_hooks_t *hooks;
  double inside, waited;
} timed_wait_t;

static void timed_wait(void *ctx, int layer) {
  timed_wait_t *t = ctx;
  double t0 = dt_now(), compute0 = t->w->timers.compute;
  t->hooks->wait(t->hooks->ctx, layer);
  double dt = dt_now() - t0;
  t->inside += dt;
  t->waited += dt - (t->w->timers.compute - compute0);
}

/* A rank with no samples in a short last step: zero gradients, and the
 * hooks called as a forward and backward pass would call them. */
static void empty_step(worker_t *w, const step_hooks_t *hooks) {
  model_t *m = w->model;
  kern_zero(m->nparams, m->grads);
  model_bn_sync_idle(m); /* --sync-bn: the others' sums wait for this rank's zeros */
  if (!hooks) return;
  for (int i = 0; hooks->wait && i < m->nlayers; i++)
    if (m->layers[i].param_len) hooks->wait(hooks->ctx, i);
  for (int i = m->nlayers - 1; hooks->ready && i >= 0; i--)
    if (m->layers[i].param_len) hooks->ready(hooks->ctx, i);
}

/* The run was asked to stop (SIGINT, SIGTERM): say what it keeps. */
int worker_interrupted(const worker_t *w) {
  const train_config_t *cfg = w->cfg;
  const char *kept = !cfg->checkpoint[0] ? "; nothing saved (no --checkpoint)"
                     : access(cfg->checkpoint, F_OK) != 0 ? "; no epoch had finished: no checkpoint written"
                     : cfg->checkpoint_every ? "; the checkpoint holds the last --checkpoint-every step"
                                             : "; the checkpoint holds the last finished epoch";
  return dt_error("interrupted by %s at step %lld%s%s", dt_signal_name(dt_interrupted()),
                  (long long)w->step, kept,
                  cfg->metrics[0] ? "; the metrics file ends with the last finished epoch" : "");
}

/* A lost rank is the world's failure from the moment it stops, recorded
 * (comm_fail; on local) before its strategy's teardown withdraws the
 * messages it had posted: a peer that matched one of them then fails as
 * "stopped because peer rank R failed", not as a cancelled message of its
 * own that could be recorded first, its line then the run's and launch
 * seeing no lost rank (AD-PSGD's passive ranks, 3 runs in 100). */
int worker_stopped(const worker_t *w) {
  if (dt_interrupted()) return worker_interrupted(w);
  if (dt_rank_signalled()) {
    worker_rank_lost(w->step);
    if (w->comm) comm_fail(w->comm);
    return -1;
  }
  return 0;
}

int worker_rank_lost(int64_t step) {
  return dt_error("stopped by %s at step %lld: this rank is lost", dt_signal_name(dt_rank_signalled()),
                  (long long)step);
}

int worker_compute_gradient(worker_t *w, size_t begin, size_t count, int denom,
                            const step_hooks_t *hooks) {
  DT_TRY(worker_stopped(w));
  double t0 = dt_now();
  model_t *m = w->model;
  w->step_compute = 0;
  if (count == 0) {
    empty_step(w, hooks);
    return 0;
  }
  data_gather(w->train, w->order + begin, count, w->x, w->y);
  rng_t rng; /* dropout masks: a pure function of (seed, step, rank) */
  rng_seed(&rng, rng_derive(w->cfg->seed, 0xd80, (uint64_t)(w->step * w->nranks + w->rank)));
  timed_wait_t tw = {w, hooks, 0, 0};
  /* the split layers' and batch norm's sums: communication, not compute */
  double tp0 = tensor_comm_sec(w->tp) + sync_bn_comm_sec(w->bn_sync);
  if (hooks && hooks->wait) model_forward_waiting(m, w->x, (int)count, 1, &rng, timed_wait, &tw);
  else model_forward(m, w->x, (int)count, 1, &rng);
  DT_TRY(tensor_failed(w->tp, "forward"));
  DT_TRY(sync_bn_failed(w->bn_sync, "forward"));
  double correct = 0;
  double loss = model_loss(m, w->y, (int)count, denom, &correct);
  if (!isfinite(loss))
    return worker_step_diverged(w, loss);
  w->epoch_loss_sum += loss;
  w->epoch_samples += (int64_t)count;
  w->epoch_correct += correct;
  model_backward(m, w->x, (int)count, hooks ? hooks->ready : NULL, hooks ? hooks->ctx : NULL);
  DT_TRY(tensor_failed(w->tp, "backward"));
  DT_TRY(sync_bn_failed(w->bn_sync, "backward"));
  double tp_sec = tensor_comm_sec(w->tp) + sync_bn_comm_sec(w->bn_sync) - tp0;
  double dt = dt_now() - t0 - tw.inside - tp_sec;
  if (w->comm) comm_compute_delay(w->comm, dt);
  w->step_compute = dt_now() - t0 - tw.inside - tp_sec;
  w->timers.compute += w->step_compute;
  w->timers.comm += tp_sec;
  w->timers.comm_exposed += tw.waited + tp_sec;
  return 0;
}

compress_config_t worker_compress_config(const train_config_t *cfg) {
  int mc = train_momentum_correction(cfg);
  return (compress_config_t){.codec = cfg->compression.codec, .error_feedback = train_error_feedback(cfg),
                             .momentum = mc ? cfg->optim.momentum : 0,
                             .shared_momentum = mc == MC_SHARED, .clip = cfg->compression.dgc_clip,
                             .warmup_steps = cfg->compression.warmup_steps, .seed = cfg->seed,
                             .algo = cfg->algo,
                             .sparse = (sparse_coll_t)cfg->compression.sparse_collective};
}

int worker_compressor_new(worker_t *w, int rank, int nranks, compressor_t **out) {
  compress_config_t cc = worker_compress_config(w->cfg);
  if (train_momentum_correction(w->cfg)) w->opt->cfg.momentum = 0; /* the memory carries it */
  return compressor_new(&cc, w->model->nparams, rank, nranks, out);
}

static float begin_update(worker_t *w, const optim_segment_t *segs, int nsegs);

void worker_apply_update(worker_t *w) { worker_apply_update_segs(w, w->segs, w->nsegs); }

void worker_apply_update_segs(worker_t *w, const optim_segment_t *segs, int nsegs) {
  worker_update_part(w, segs, nsegs, begin_update(w, segs, nsegs));
}

/* Whether the tensor at arena offset off is whole on every rank of the
 * tensor-parallel group (replicated: its squared norm counted once). */
static int replicated_at(const model_t *m, size_t off) {
  for (int i = 0; i < m->ntensors; i++)
    if (m->tensors[i].off == off) return m->tensors[i].len == tensor_full_len(&m->tensors[i]);
  return 1;
}

/* The squared L2 norm of the whole model's summed gradient from the
 * rank's tensors segs: each tp rank adds its blocks of the split tensors
 * and tp rank 0 the replicated ones, summed over the tensor-parallel group
 * and over the stages of a pipeline (each holds its own layers), so every
 * rank gets one worker's global norm (in float: its sums are collectives). */
static double global_sumsq(worker_t *w, const optim_segment_t *segs, int nsegs) {
  const model_t *m = w->model;
  int tp_rank = w->tp ? tensor_rank(w->tp) : 0;
  double sq = 0;
  for (int i = 0; i < nsegs; i++)
    if (tp_rank == 0 || !replicated_at(m, segs[i].off)) sq += kern_sumsq(segs[i].len, m->grads + segs[i].off);
  float part = (float)sq;
  int rc = 0;
  if (w->tp && tensor_size(w->tp) > 1) rc = allreduce_ring(tensor_coll(w->tp), &part, 1);
  if (rc == 0 && w->clip_stages) rc = allreduce_ring(w->clip_stages, &part, 1);
  if (rc != 0) { /* a peer is gone: the run ends at its next sum, this step unclipped */
    dt_log(DT_LOG_ERROR, "--clip-grad-norm: the sum of the squared norm over the groups failed: %s", dt_errmsg());
    return 0;
  }
  return part;
}

/* --clip-grad-norm: the summed gradient (the same on every data-parallel
 * rank, so the same scale on each) scaled to a global L2 norm of at most
 * the bound, as torch.nn.utils.clip_grad_norm_ does (its 1e-6 included);
 * global across tensor-parallel ranks and pipeline stages too. */
static void clip_gradients(worker_t *w, const optim_segment_t *segs, int nsegs) {
  double bound = w->cfg->clip_grad_norm;
  if (bound <= 0) return;
  model_t *m = w->model;
  int alone = !w->tp && !w->clip_stages;
  double norm = sqrt(alone ? kern_sumsq(m->nparams, m->grads) : global_sumsq(w, segs, nsegs));
  double coef = bound / (norm + 1e-6);
  w->last_grad_norm = norm;
  if (coef >= 1.0) return;
  if (alone) kern_scale(m->nparams, (float)coef, m->grads);
  else
    for (int i = 0; i < nsegs; i++) kern_scale(segs[i].len, (float)coef, m->grads + segs[i].off);
}

static float begin_update(worker_t *w, const optim_segment_t *segs, int nsegs) {
  clip_gradients(w, segs, nsegs);
  float lr = (float)lr_at(&w->sched, w->step);
  optim_begin_step(w->opt);
  w->step++;
  return lr;
}

float worker_begin_update(worker_t *w) { return begin_update(w, w->segs, w->nsegs); }

void worker_update_part(worker_t *w, const optim_segment_t *segs, int nsegs, float lr) {
  double t0 = dt_now();
  optim_step_segments(w->opt, w->model->params, w->model->grads, segs, nsegs, lr);
  double t1 = dt_now();
  w->timers.compute += t1 - t0;
  if (dt_trace) trace_slice(dt_trace, TRACE_OPTIM, "optimizer step", nsegs, t0, t1);
}

void worker_evaluate(worker_t *w, size_t begin, size_t end, double *loss_sum, double *correct) {
  model_t *m = w->model;
  size_t bs = (size_t)w->cfg->batch;
  const layer_t *last = &m->layers[m->nlayers - 1];
  *loss_sum = 0;
  *correct = 0;
  for (size_t i = begin; i < end; i += bs) {
    size_t cnt = end - i < bs ? end - i : bs;
    for (size_t j = 0; j < cnt; j++) w->eval_idx[j] = (uint32_t)(i + j);
    data_gather(w->test, w->eval_idx, cnt, w->x, w->y);
    model_forward(m, w->x, (int)cnt, 0, NULL);
    double c = 0;
    *loss_sum += softmax_xent_seq(last->out, w->y, (int)cnt, m->positions, m->nclasses, (int)cnt,
                                  m->probs, NULL, &c);
    *correct += c;
  }
}

/* A synchronous step ends when the slowest rank's does: over the epoch,
 * this rank waited for the others about the slowest rank's compute less
 * its own (exact when one rank is the slowest throughout, as a straggler
 * is; less than the truth when the slowest changes from step to step).
 * Counted inside exposed communication, so at most that. One allgather of
 * a float a rank, once an epoch. */
static int measure_wait(worker_t *w, epoch_report_t *r) {
  int me = comm_rank(w->comm), P = comm_size(w->comm);
  if (!w->rank_compute) return dt_error("out of memory");
  memset(w->rank_compute, 0, (size_t)P * sizeof *w->rank_compute);
  w->rank_compute[me] = (float)r->timers.compute;
  DT_TRY(allgather_ring(w->coll, w->rank_compute, (size_t)P));
  float slowest = 0;
  for (int i = 0; i < P; i++) slowest = w->rank_compute[i] > slowest ? w->rank_compute[i] : slowest;
  double wait = slowest - r->timers.compute;
  r->timers.wait = wait < 0 ? 0 : wait > r->timers.comm_exposed ? r->timers.comm_exposed : wait;
  return 0;
}

int worker_epoch_figures(worker_t *w, epoch_report_t *r, float *extra, int nextra) {
  int me = comm_rank(w->comm), P = comm_size(w->comm);
  size_t off, len;
  data_shard(w->test->n, me, P, &off, &len);
  double test_loss;
  double test_correct;
  worker_evaluate(w, off, off + len, &test_loss, &test_correct);
  DT_TRY(tensor_failed(w->tp, "evaluation"));
  float sums[5 + 8 + 1] = {(float)test_loss, (float)test_correct, (float)w->epoch_loss_sum,
                           (float)w->epoch_samples, (float)w->epoch_correct};
  if (nextra < 0 || nextra > 8) return dt_error("worker_epoch_figures: %d extra sums (at most 8)", nextra);
  for (int i = 0; i < nextra; i++) sums[5 + i] = extra[i];
  /* --time-budget: rank 0's clock decides, and the sum tells every rank */
  double budget = w->cfg->time_budget;
  sums[5 + nextra] = me == 0 && budget > 0 && dt_now() - w->run_start >= budget;
  if (P > 1 && allreduce(w->coll, ALLREDUCE_TREE, sums, (size_t)(6 + nextra)) != 0) return -1;
  r->budget_spent = sums[5 + nextra] > 0;
  r->test_loss = sums[0] / (double)w->test->n;
  r->test_acc = sums[1] / (double)w->test->n;
  r->train_loss = sums[3] > 0 ? sums[2] / sums[3] : 0;
  r->train_acc = sums[3] > 0 ? sums[4] / sums[3] : 0;
  for (int i = 0; i < nextra; i++) extra[i] = sums[5 + i];
  if (w->cfg->schedule == SCHEDULE_SYNC && P > 1) DT_TRY(measure_wait(w, r));
  return 0;
}
