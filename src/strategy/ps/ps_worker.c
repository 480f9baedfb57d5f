/* Parameter-server training, the workers' side (and ps_run_rank, which
 * gives every rank of the world its role).
 *
 * sync / ssp:S: worker w at clock c pulls the model once the slowest
 * worker has pushed clock c - S - 1, computes the gradient of its slice of
 * synchronous step c (worker_step_slice, exactly as allreduce data
 * parallelism slices it, averaged over the global batch) and pushes it.
 * The pull of clock c + 1 is sent right behind the push, so a step costs
 * one round trip: every clock the cache is refreshed, ESSP's eager rule
 * (Dai et al. 2015). --ps-refresh lazy is Bosen's SSP cache (Ho et al.
 * 2013) instead: the worker computes on the parameters it holds while
 * they are fresh enough (ps_cache_fresh: their clock >= c - S) and pulls
 * only when they are not; its own update goes into them at once (SSP's
 * read-my-writes) as the plain step -lr g, the servers' optimizer state
 * (momentum) being theirs alone.
 *
 * async, value, backup (the pool schedules): the worker draws the next
 * batch of the epoch's shared order from the coordinator, pulls when due
 * (--fetch-every), computes, and pushes when due (--push-every); an epoch
 * ends when the batches are used up (ps_coord.c). The gradient is
 * averaged over N x batch (N - B for backup:B): N asynchronous updates move
 * the model as far as one synchronous step.
 *
 * --comm-order priority / tictac (ps_prio.c): the pushes go layer by
 * layer from backprop's ready hook and the next model comes back layer by
 * layer, the forward pass waiting per layer; what is pushed and pulled,
 * and so a sync run's weights, are fifo's.
 *
 * Worker 0 reports each epoch: it pulls the whole model at the epoch's
 * boundary, asks the coordinator for the epoch's statistics, gathers the
 * optimizer state for --checkpoint or has the servers save for
 * --checkpoint-dir, and evaluates on the whole test set.
 *
 * Under --tp T a worker is a tensor-parallel group (Project Adam's
 * replica, ps_group.c): every rank of it computes the same batches and
 * pushes and pulls its own keys at its own slice of the servers; tp rank 0
 * alone talks to the coordinator and passes its answers on to the group,
 * and after a pull gives the group the replicated tensors. The worker
 * index is the group's (the slice rank), so clocks, the pool's batches and
 * the gradient's scale count replicas. */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"
#include "strategy/tensor/tensor.h"

/* --tp: a rank's keys and its bytes pushed and pulled so far */
enum { TP_KEYS, TP_PUSHED, TP_PULLED, TP_FIGURES };
typedef struct { double v[TP_FIGURES]; } tp_totals_t;

typedef struct {
  worker_t *w;
  ps_client_t *client;
  ps_shard_map_t map;
  ps_keys_t keys;             /* this rank's keys (the whole arena without --tp) */
  /* --ps-push factors: the dense layers pushed as factors, and per shard
   * the payload being pushed (cap: the batch's rows) and its bytes */
  ps_factor_plan_t fplan;
  void **fac_buf;
  size_t *fac_bytes;
  size_t rows;                /* rows of the batch last computed */
  float *packed_grads, *packed_pull; /* --tp, rank t > 0: its keys packed */
  comm_t *group;              /* --tp: the replica's ranks (NULL: a worker is one rank) */
  int leader;                 /* talks to the coordinator: tp rank 0 */
  tp_totals_t *tp_totals;     /* --tp, replica 0's leader: per tp rank */
  int N, K, S, B_backup;
  int pool;
  int64_t batches_per_epoch;
  int64_t local_steps;        /* batches this worker has computed (--kill counts these) */
  double batch_sum, batch_sq; /* pool: the batch numbers computed, summed and squared (the
                               * replicas' check that each batch was handed out once) */
  int push_ts;                /* push in flight, or -1 */
  ps_prio_t *prio;            /* --comm-order priority / tictac: layer by layer (NULL: fifo) */
  ps_wthreads_t *wt;          /* --worker-threads T > 1: the batch over T threads (NULL: this one) */
  /* the batch being computed: its push's template and, until backprop
   * first readies a layer, the worker's sums before it (priority order
   * pushes the batch's statistics with its first part) */
  ps_req_t *tmpl;
  double loss0;
  int64_t n0;
  double c0;
  int figures_in;
  int cached;                 /* --ps-refresh lazy: the parameters held come from a pull */
  /* --push-every > 1: gradients summed since the last push */
  float *acc;
  ps_req_t acc_req;
  /* the pool: the coordinator's last answer not yet acted on (a batch,
   * PS_BATCH_END or _DONE; PS_BATCH_NONE: none), the epoch of the batches
   * computed, and worker 0's epochs to report and to acknowledge */
  int64_t next, epoch, closed_epoch, report_epoch, reported_epoch;
  /* worker 0's report */
  ps_epoch_stats_t ep;
  int64_t report_step;
  unsigned char *stats_buf;
  ps_worker_stats_t *prev;
  float *mean_square;         /* --checkpoint under --dc-asgd a:LAMBDA0: the servers' MeanSquare */
  char *extra;
  size_t extra_cap;
} psw_t;

static int wait_ok(psw_t *p, int ts, ps_reply_t *rep) {
  if (ts < 0) return -1;
  double t0 = dt_now();
  int rc = ps_wait(p->client, ts, rep);
  worker_comm_since(p->w, t0);
  return rc;
}

/* ---- a replica of T ranks (--tp) ------------------------------------------- */

enum { TAG_PS_GROUP = 5603 };

/* Tensor-parallel rank 0's status and `bytes` of buf to the rest of the
 * group; returns that status (the rank's own without --tp). */
static int group_share(psw_t *p, int rc, void *buf, size_t bytes) {
  if (!p->group) return rc;
  int n = comm_size(p->group);
  int32_t st = rc;
  for (int r = 1; p->leader && r < n; r++) {
    DT_TRY(comm_send(p->group, r, TAG_PS_GROUP, &st, sizeof st));
    if (bytes) DT_TRY(comm_send(p->group, r, TAG_PS_GROUP, buf, bytes));
  }
  if (!p->leader) {
    DT_TRY(comm_recv(p->group, 0, TAG_PS_GROUP, &st, sizeof st));
    if (st != 0) return dt_error("tensor-parallel rank 0 of this replica failed");
    if (bytes) DT_TRY(comm_recv(p->group, 0, TAG_PS_GROUP, buf, bytes));
  }
  return st;
}

/* A call to the coordinator, made by tp rank 0 for the group. */
static int group_call(psw_t *p, const ps_req_t *req, void *extra, size_t len, ps_reply_t *rep) {
  int rc = 0;
  if (p->leader) rc = wait_ok(p, ps_call(p->client, 0, req, extra, len), rep);
  if (group_share(p, rc, rep, rep ? sizeof *rep : 0) != 0) return -1;
  return len ? group_share(p, 0, extra, len) : 0;
}

/* The tensors every rank of the group holds whole: rank 0's, pulled. */
static int share_replicated(psw_t *p, float *arena) {
  const model_t *m = p->w->model;
  coll_ctx_t *coll = tensor_coll(p->w->tp);
  for (int i = 0; i < m->ntensors; i++) {
    const tensor_info_t *ti = &m->tensors[i];
    if (ti->len == tensor_full_len(ti)) DT_TRY(broadcast_tree(coll, 0, arena + ti->off, ti->len));
  }
  return 0;
}

/* The gradient as this rank's keys. */
static const float *own_grads(psw_t *p) {
  if (!p->keys.packed) return p->w->model->grads;
  ps_keys_pack(&p->keys, p->w->model, p->w->model->grads, p->packed_grads);
  return p->packed_grads;
}

/* Pulls this rank's keys of `which` (0: the parameters, 1 + s: optimizer
 * state s) into arena, once the wait is done (finish_pull). */
static int pull_keys(psw_t *p, int which, float *arena, const ps_req_t *cond) {
  return ps_pull(p->client, 0, p->map.nparams, which, p->keys.packed ? p->packed_pull : arena, cond);
}

static int finish_pull(psw_t *p, int ts, float *arena, int share) {
  if (wait_ok(p, ts, NULL) != 0) return -1;
  if (p->keys.packed) ps_keys_unpack(&p->keys, p->w->model, p->packed_pull, arena);
  return p->group && share ? share_replicated(p, arena) : 0;
}

static int pull_model(psw_t *p, int flags, int64_t min_version, int64_t epoch) {
  ps_req_t cond = {.flags = flags, .clock = min_version, .epoch = epoch};
  if (p->prio && ps_prio_finish(p->prio) != 0) return -1; /* no layer's pull lands after it */
  return pull_keys(p, 0, p->w->model->params, &cond);
}

/* The next model: whole (fifo), or layer by layer in priority order,
 * the forward pass waiting for each layer (-2: nothing to wait for here). */
static int pull_next_model(psw_t *p, int flags, int64_t min_version, int64_t epoch) {
  if (!p->prio) return pull_model(p, flags, min_version, epoch);
  ps_req_t cond = {.flags = flags, .clock = min_version, .epoch = epoch};
  double t0 = dt_now();
  int rc = ps_prio_pull(p->prio, &cond);
  worker_comm_since(p->w, t0);
  return rc == 0 ? -2 : -1;
}

static int finish_model_pull(psw_t *p, int ts) {
  return ts == -2 && p->prio ? 0 : finish_pull(p, ts, p->w->model->params, 1);
}

static int finish_push(psw_t *p) {
  if (p->prio) {
    double t0 = dt_now();
    int rc = ps_prio_finish_pushes(p->prio);
    worker_comm_since(p->w, t0);
    return rc;
  }
  if (p->push_ts < 0) return 0;
  int ts = p->push_ts;
  p->push_ts = -1;
  return wait_ok(p, ts, NULL);
}

/* Starts a push of `grads` described by tmpl, with the running totals. */
static int start_push(psw_t *p, const float *grads, ps_req_t *tmpl) {
  ps_client_totals(p->client, &tmpl->bytes_pushed, &tmpl->bytes_pulled, &tmpl->blocked_sec);
  if (p->fac_buf) { /* --ps-push factors: each shard's payload, from this batch's layers */
    for (int k = 0; k < p->map.nservers; k++)
      p->fac_bytes[k] = p->wt ? ps_wthreads_factor_pack(p->wt, &p->fplan, grads, p->map.shards[k].begin,
                                                        p->map.shards[k].end, p->fac_buf[k])
                              : ps_factor_pack(&p->fplan, p->w->model, p->w->x, p->rows, grads,
                                               p->map.shards[k].begin, p->map.shards[k].end, p->fac_buf[k]);
    p->push_ts = ps_push_factors(p->client, (const void *const *)p->fac_buf, p->fac_bytes, grads, tmpl);
    return p->push_ts < 0 ? -1 : 0;
  }
  p->push_ts = ps_push(p->client, 0, p->map.nparams, grads, tmpl); /* adds its own bytes */
  return p->push_ts < 0 ? -1 : 0;
}

/* The batch's loss, samples and correct count into its push's template,
 * once: known after the forward pass. */
static void batch_figures(psw_t *p) {
  worker_t *w = p->w;
  if (p->figures_in) return;
  p->figures_in = 1;
  p->tmpl->loss_sum += w->epoch_loss_sum - p->loss0;
  p->tmpl->samples += (double)(w->epoch_samples - p->n0);
  p->tmpl->correct += (double)(w->epoch_correct - p->c0);
  p->tmpl->nbatches++;
}

/* Priority order, the forward pass's param_wait hook: the layer's pull in. */
static void pull_wait_layer(void *ctx, int layer) {
  psw_t *p = ctx;
  ps_prio_wait_layer(p->prio, layer);
}

/* Priority order, backprop's ready hook: the layer's gradient goes. */
static void push_ready_layer(void *ctx, int layer) {
  psw_t *p = ctx;
  batch_figures(p);
  ps_prio_push_layer(p->prio, layer, p->tmpl);
}

/* Gradient of `count` samples at `begin` of the epoch order; tmpl gets the
 * batch's figures. Priority order: its layers pushed as backprop readies
 * them, the forward pass waiting for each layer's pull. */
static int compute(psw_t *p, size_t begin, size_t count, int denom, ps_req_t *tmpl) {
  worker_t *w = p->w;
  p->tmpl = tmpl;
  p->loss0 = w->epoch_loss_sum;
  p->n0 = w->epoch_samples, p->c0 = w->epoch_correct;
  p->figures_in = 0;
  p->rows = count;
  step_hooks_t hooks = {pull_wait_layer, push_ready_layer, p};
  if (p->wt) { /* each thread has also stepped the weights held, at the step's rate */
    DT_TRY(ps_wthreads_gradient(p->wt, begin, count, denom, (float)lr_at(&w->sched, w->step)));
  } else if (!p->prio) {
    DT_TRY(worker_compute_gradient(w, begin, count, denom, NULL));
  } else {
    DT_TRY(worker_compute_gradient(w, begin, count, denom, &hooks));
    DT_TRY(ps_prio_failed(p->prio));
  }
  batch_figures(p);
  p->local_steps++;
  return 0;
}

static int killed_now(const psw_t *p) { /* --kill is refused under --tp (ps_config.c) */
  const train_config_t *cfg = p->w->cfg;
  if (cfg->kill_rank != p->w->rank || p->local_steps != cfg->kill_step) return 0;
  dt_log(DT_LOG_WARN, "worker %d: stopping at its step %lld (--kill)", p->w->rank,
         (long long)p->local_steps);
  return 1;
}

/* ---- worker 0's report ----------------------------------------------------- */

static void json_array(psw_t *p, size_t *n, const char *key, const ps_worker_stats_t *cur,
                       size_t field, int delta) {
  *n += (size_t)snprintf(p->extra + *n, p->extra_cap - *n, ",\"%s\":[", key);
  for (int w = 0; w < p->N && *n < p->extra_cap; w++) {
    double v = *(const double *)((const char *)&cur[w] + field);
    if (delta) v -= *(const double *)((const char *)&p->prev[w] + field);
    *n += (size_t)snprintf(p->extra + *n, p->extra_cap - *n, "%s%.6g", w ? "," : "", v);
  }
  if (*n < p->extra_cap) *n += (size_t)snprintf(p->extra + *n, p->extra_cap - *n, "]");
}

/* --tp: replica 0's keys and bytes per tp rank, gathered at its rank 0
 * (the coordinator's statistics are of the ranks that talk to it). */
static int gather_tp_totals(psw_t *p) {
  if (!p->group) return 0;
  tp_totals_t mine = {{[TP_KEYS] = (double)p->keys.nkeys}};
  double blocked;
  ps_client_totals(p->client, &mine.v[TP_PUSHED], &mine.v[TP_PULLED], &blocked);
  if (!p->leader) return comm_send(p->group, 0, TAG_PS_GROUP, &mine, sizeof mine);
  p->tp_totals[0] = mine;
  for (int r = 1; r < comm_size(p->group); r++)
    DT_TRY(comm_recv(p->group, r, TAG_PS_GROUP, &p->tp_totals[r], sizeof mine));
  return 0;
}

static size_t tp_json(const psw_t *p, char *buf, size_t cap) {
  static const char *names[TP_FIGURES] = {"tp_keys", "tp_bytes_pushed", "tp_bytes_pulled"};
  size_t n = 0;
  for (int f = 0; f < TP_FIGURES && n < cap; f++) {
    n += (size_t)snprintf(buf + n, cap - n, ",\"%s\":[", names[f]);
    for (int r = 0; r < comm_size(p->group) && n < cap; r++)
      n += (size_t)snprintf(buf + n, cap - n, "%s%.0f", r ? "," : "", p->tp_totals[r].v[f]);
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "]");
  }
  return n < cap ? n : cap - 1;
}

static void build_extra(psw_t *p, const ps_epoch_stats_t *ep, const ps_worker_stats_t *cur) {
  const train_config_t *cfg = p->w->cfg;
  char sched[32];
  schedule_format(cfg, sched, sizeof sched);
  size_t n = (size_t)snprintf(p->extra, p->extra_cap,
                              "\"exchange\":\"ps\",\"schedule\":\"%s\",%s\"servers\":%d,"
                              "\"staleness_mean\":%.4g,\"staleness_max\":%.0f,\"dropped\":%.0f,"
                              "\"rejected\":%.0f",
                              sched, p->pool || cfg->schedule != SCHEDULE_SSP ? "" : cfg->ps.refresh_lazy
                                  ? "\"ps_refresh\":\"lazy\"," : "\"ps_refresh\":\"eager\",",
                              p->K, ep->staleness_n > 0 ? ep->staleness_sum / ep->staleness_n : 0,
                              ep->staleness_max, ep->dropped, ep->rejected);
  json_array(p, &n, "blocked_sec", cur, offsetof(ps_worker_stats_t, blocked_sec), 1);
  json_array(p, &n, "bytes_pushed", cur, offsetof(ps_worker_stats_t, bytes_pushed), 1);
  json_array(p, &n, "bytes_pulled", cur, offsetof(ps_worker_stats_t, bytes_pulled), 1);
  json_array(p, &n, "batches", cur, offsetof(ps_worker_stats_t, batches), 1);
  if (p->group && n < p->extra_cap) n += tp_json(p, p->extra + n, p->extra_cap - n);
  n += (size_t)snprintf(p->extra + n, p->extra_cap - n, ",\"stopped_workers\":[");
  for (int w = 0, first = 1; w < p->N && n < p->extra_cap; w++)
    if (cur[w].dead) n += (size_t)snprintf(p->extra + n, p->extra_cap - n, "%s%d", first ? "" : ",", w), first = 0;
  if (n < p->extra_cap) snprintf(p->extra + n, p->extra_cap - n, "]");
}

static void print_summary(const psw_t *p, const ps_epoch_stats_t *ep, const ps_worker_stats_t *cur) {
  double blocked = 0, pushed = 0;
  int stopped = 0;
  for (int w = 0; w < p->N; w++) {
    double b = cur[w].blocked_sec - p->prev[w].blocked_sec;
    if (b > blocked) blocked = b;
    pushed += cur[w].bytes_pushed - p->prev[w].bytes_pushed;
    stopped += cur[w].dead > 0;
  }
  printf("  ps: staleness mean %.2f max %.0f, blocked up to %.2f s per worker, %.1f MB pushed "
         "per worker%s%s%s\n",
         ep->staleness_n > 0 ? ep->staleness_sum / ep->staleness_n : 0, ep->staleness_max,
         blocked, pushed / p->N / 1e6, p->group ? " by its tp rank 0" : "",
         ep->dropped > 0 ? ", gradients dropped" : "",
         stopped ? ", some workers stopped (see stopped_workers)" : "");
}

/* Optimizer state for --checkpoint; shard files and manifest for --checkpoint-dir. */
static int save_state(psw_t *p, int epoch, int64_t step) {
  worker_t *w = p->w;
  const train_config_t *cfg = w->cfg;
  for (int s = 0; cfg->checkpoint[0] && s < w->opt->nstate; s++) /* a replicated tensor's: rank 0's */
    DT_TRY(finish_pull(p, pull_keys(p, s + 1, w->opt->state[s], NULL), w->opt->state[s], 0));
  if (p->mean_square)
    DT_TRY(wait_ok(p, ps_pull(p->client, 0, p->map.nparams, PS_WHICH_MEAN_SQUARE, p->mean_square,
                              NULL), NULL));
  if (!cfg->checkpoint_dir[0]) return 0;
  int ts[1024];
  for (int k = 0; k < p->K && k < 1024; k++) {
    ps_req_t req = {.op = PS_OP_SAVE, .epoch = epoch, .clock = step};
    ts[k] = ps_call(p->client, k, &req, NULL, 0);
  }
  for (int k = 0; k < p->K && k < 1024; k++) DT_TRY(wait_ok(p, ts[k], NULL));
  return ps_ckpt_write_manifest(cfg, w->model, &p->map, epoch, step);
}

/* Worker 0, once the model it holds is the epoch's final one: the epoch's
 * statistics from the coordinator, the checkpoint's state, and the model
 * evaluated on the whole test set. */
static int evaluate_model(psw_t *p, epoch_report_t *r) {
  worker_t *w = p->w;
  ps_req_t req = {.op = PS_OP_STATS, .epoch = r->epoch};
  size_t len = sizeof(ps_epoch_stats_t) + (size_t)p->N * sizeof(ps_worker_stats_t);
  ps_reply_t rep;
  DT_TRY(group_call(p, &req, p->stats_buf, len, &rep));
  DT_TRY(gather_tp_totals(p));
  memcpy(&p->ep, p->stats_buf, sizeof p->ep);
  p->report_step = p->pool ? rep.opt_steps : w->step; /* the servers' updates under the pool */
  DT_TRY(save_state(p, r->epoch, p->report_step));
  double eval_t0 = dt_now(), test_loss;
  double test_correct;
  worker_evaluate(w, 0, w->test->n, &test_loss, &test_correct);
  const ps_epoch_stats_t *ep = &p->ep;
  r->eval_sec = dt_now() - eval_t0;
  r->test_loss = test_loss / (double)w->test->n;
  r->test_acc = test_correct / (double)w->test->n;
  r->train_loss = ep->samples > 0 ? ep->loss_sum / ep->samples : 0;
  r->train_acc = ep->samples > 0 ? ep->correct / ep->samples : 0;
  r->samples = ep->samples;
  r->samples_per_sec = r->epoch_sec > 0 ? ep->samples / r->epoch_sec : 0;
  if (p->pool) r->lr = lr_at(&w->sched, (int64_t)(r->epoch + 1) * w->steps_per_epoch - 1);
  build_extra(p, ep, (ps_worker_stats_t *)(p->stats_buf + sizeof *ep));
  r->extra_json = p->extra;
  return 0;
}

/* The report at the servers' step count, and the summary line. */
static int report(void *st, const epoch_report_t *r) {
  psw_t *p = st;
  worker_t *w = p->w;
  ps_worker_stats_t *cur = (ps_worker_stats_t *)(p->stats_buf + sizeof p->ep);
  int64_t keep = w->step;
  w->step = p->report_step;
  int rc = worker_report_epoch(w, r);
  w->step = keep;
  if (rc == 0 && worker_reports(w)) print_summary(p, &p->ep, cur);
  memcpy(p->prev, cur, (size_t)p->N * sizeof *cur);
  return rc;
}

/* ---- sync and ssp:S ---------------------------------------------------------- */

/* Eager: every clock. Lazy: once the parameters held are too old. */
static int refresh_due(const psw_t *p, int64_t c) {
  if (!p->w->cfg->ps.refresh_lazy || !p->cached) return 1;
  return !ps_cache_fresh(ps_client_clock(p->client), c, p->S);
}

static int clock_step(psw_t *p, int epoch, int64_t k) {
  worker_t *w = p->w;
  model_t *m = w->model;
  int64_t c = w->step, min = c - p->S > 0 ? c - p->S : 0;
  if (refresh_due(p, c)) {
    int pull = pull_next_model(p, 0, min, epoch);
    if (finish_push(p) != 0 || finish_model_pull(p, pull) != 0) return -1;
    p->cached = 1;
  } else if (finish_push(p) != 0) {
    return -1;
  }
  size_t begin, count, global;
  worker_step_slice(w, k, &begin, &count, &global);
  ps_req_t tmpl = {.clock = c, .epoch = epoch};
  DT_TRY(compute(p, begin, count, (int)global, &tmpl));
  DT_TRY(p->prio ? ps_prio_flush_pushes(p->prio) : start_push(p, own_grads(p), &tmpl));
  if (w->cfg->ps.refresh_lazy && !p->wt) /* read-my-writes (--worker-threads: the threads did) */
    kern_axpy(m->nparams, -(float)lr_at(&w->sched, c), m->grads, m->params);
  w->step++;
  return 0;
}

static int clock_drive_step(void *st, int epoch, int64_t k) {
  psw_t *p = st;
  DT_TRY(clock_step(p, epoch, k));
  if (killed_now(p)) return finish_push(p) == 0 ? DRIVE_STOPPED : -1;
  return DRIVE_NEXT;
}

static int clock_end_epoch(void *st, int epoch) {
  return finish_push(st);
}

/* Worker 0 reports, once every clock of the epoch is applied. */
static int clock_evaluate(void *st, epoch_report_t *r) {
  psw_t *p = st;
  if (p->w->rank != 0) return DRIVE_SKIP;
  DT_TRY(finish_model_pull(p, pull_model(p, 0, p->w->step, r->epoch)));
  return evaluate_model(p, r);
}

static const driver_ops_t clock_ops = {
    .step = clock_drive_step, .end_epoch = clock_end_epoch, .evaluate = clock_evaluate,
    .report = report};

/* ---- the pool schedules: async, value, backup ------------------------------------- */

static int pull_flags(const psw_t *p) {
  switch (p->w->cfg->schedule) {
  case SCHEDULE_VALUE: return PS_PULL_OWN;
  case SCHEDULE_BACKUP: return PS_PULL_NEWER;
  default: return 0;
  }
}

static int ask_next(psw_t *p, int flags, int64_t epoch, ps_reply_t *rep) {
  ps_req_t req = {.op = PS_OP_NEXT, .flags = flags, .epoch = epoch};
  return group_call(p, &req, NULL, 0, rep);
}

/* Pushes the gradients summed so far (--push-every). */
static int push_pending(psw_t *p) {
  if (p->acc_req.nbatches == 0) return 0;
  DT_TRY(finish_push(p));
  DT_TRY(start_push(p, p->acc ? p->acc : own_grads(p), &p->acc_req));
  memset(&p->acc_req, 0, sizeof p->acc_req);
  return finish_push(p);
}

static int compute_batch(psw_t *p, int64_t batch) {
  worker_t *w = p->w;
  const train_config_t *cfg = w->cfg;
  int64_t q = batch % p->batches_per_epoch;
  size_t begin = (size_t)q * (size_t)cfg->batch;
  size_t count = w->train->n - begin < (size_t)cfg->batch ? w->train->n - begin : (size_t)cfg->batch;
  int denom = cfg->batch * (p->N - p->B_backup);
  if (p->acc_req.nbatches == 0) { /* a new sum: the last one must have left */
    p->acc_req.clock = batch;
    p->acc_req.epoch = batch / p->batches_per_epoch;
    DT_TRY(finish_push(p));
    if (p->acc) kern_zero(p->map.nparams, p->acc);
  }
  w->step = batch; /* dropout masks: a function of the batch */
  DT_TRY(compute(p, begin, count, denom, &p->acc_req));
  const float *g = own_grads(p);
  if (p->acc) kern_add(p->map.nparams, g, p->acc);
  if (p->acc_req.nbatches < cfg->ps.push_every) return 0;
  if (p->prio) { /* its layers went during backprop (--push-every 1) */
    memset(&p->acc_req, 0, sizeof p->acc_req);
    return ps_prio_flush_pushes(p->prio);
  }
  DT_TRY(finish_push(p));
  DT_TRY(start_push(p, p->acc ? p->acc : g, &p->acc_req));
  memset(&p->acc_req, 0, sizeof p->acc_req);
  return 0;
}

/* Resolves a coordinator's answer into a batch, or PS_BATCH_DONE, or
 * PS_BATCH_END (worker 0: epoch rep->epoch is closed, to be reported).
 * NONE: pushes what is pending and waits for the next epoch. After a wait
 * the worker starts from the current model; `current`: the model it holds
 * is as --fetch-every wants it (pulled if due). */
static int64_t resolve_batch(psw_t *p, ps_reply_t *rep, int current) {
  while (rep->batch == PS_BATCH_NONE) {
    if (push_pending(p) != 0 || finish_push(p) != 0) return -100;
    if (ask_next(p, PS_NEXT_WAIT, rep->epoch, rep) != 0) return -100;
    current = 0;
  }
  if (rep->batch >= 0 && !current && finish_model_pull(p, pull_model(p, 0, 0, 0)) != 0) return -100;
  p->closed_epoch = rep->epoch; /* what an END closes */
  return rep->batch;
}

/* The coordinator's next answer: after a reported epoch, the report's
 * acknowledgement; else a request for the next batch with the pull that
 * --fetch-every makes due. */
static int64_t fetch_batch(psw_t *p) {
  const train_config_t *cfg = p->w->cfg;
  ps_reply_t rep;
  if (p->reported_epoch >= 0) {
    int64_t e = p->reported_epoch;
    p->reported_epoch = -1;
    if (ask_next(p, PS_NEXT_REPORTED, e, &rep) != 0) return -100;
    return resolve_batch(p, &rep, 0);
  }
  ps_req_t req = {.op = PS_OP_NEXT, .epoch = p->epoch};
  int ts_next = p->leader ? ps_call(p->client, 0, &req, NULL, 0) : -2;
  int ts_pull = p->local_steps % cfg->ps.fetch_every == 0 ? pull_next_model(p, pull_flags(p), 0, 0) : -2;
  int rc = finish_push(p);
  if (p->leader && rc == 0) rc = wait_ok(p, ts_next, &rep);
  if (group_share(p, rc, &rep, sizeof rep) != 0 || rc != 0) return -100;
  if (ts_pull != -2 && finish_model_pull(p, ts_pull) != 0) return -100;
  return resolve_batch(p, &rep, 1); /* a worker that did not pull goes on with its model */
}

/* One batch handed out by the coordinator. A batch of a later epoch, or
 * the close of this one (worker 0), ends the driver's epoch and waits. */
static int pool_step(void *st, int epoch, int64_t k) {
  psw_t *p = st;
  worker_t *w = p->w;
  if (p->next == PS_BATCH_NONE) {
    p->next = fetch_batch(p);
    if (p->next == -100) return -1;
  }
  if (p->next == PS_BATCH_DONE) return push_pending(p) == 0 ? DRIVE_RUN_END : -1;
  if (p->next == PS_BATCH_END) {
    if (p->closed_epoch > epoch) return DRIVE_EPOCH_END;
    p->next = PS_BATCH_NONE;
    p->report_epoch = p->closed_epoch;
    return DRIVE_EPOCH_END;
  }
  int64_t e = p->next / p->batches_per_epoch;
  if (e > epoch) return DRIVE_EPOCH_END;
  int64_t batch = p->next;
  p->next = PS_BATCH_NONE;
  p->epoch = e;
  p->batch_sum += (double)batch, p->batch_sq += (double)batch * (double)batch;
  if (compute_batch(p, batch) != 0) return -1;
  if (killed_now(p)) return finish_push(p) == 0 ? DRIVE_STOPPED : -1;
  worker_progress(w, (int)e, (batch % p->batches_per_epoch) / p->N, w->steps_per_epoch);
  return DRIVE_NEXT;
}

/* Worker 0 reports an epoch the coordinator has closed. */
static int pool_evaluate(void *st, epoch_report_t *r) {
  psw_t *p = st;
  if (p->report_epoch != r->epoch) return DRIVE_SKIP;
  p->report_epoch = -1;
  p->reported_epoch = r->epoch; /* acknowledged with the next request */
  DT_TRY(finish_model_pull(p, pull_model(p, PS_PULL_FLUSHED, 0, r->epoch)));
  return evaluate_model(p, r);
}

/* After the last epoch: the last report acknowledged, and the
 * coordinator's answers followed until it says the run is done. */
static int pool_end_run(void *st) {
  psw_t *p = st;
  while (p->next != PS_BATCH_DONE) {
    if (p->next != PS_BATCH_NONE && p->next != PS_BATCH_END)
      return dt_error("parameter server: batch %lld handed out after the last epoch",
                      (long long)p->next);
    p->next = fetch_batch(p);
    if (p->next == -100) return -1;
  }
  p->w->step = p->report_step; /* the done line's steps: the servers' updates, as the epochs' */
  return push_pending(p);
}

static const driver_ops_t pool_ops = {
    .step = pool_step, .evaluate = pool_evaluate, .report = report, .end_run = pool_end_run,
    .open_ended = 1};

/* ---- the strategy ------------------------------------------------------------------ */

/* --ps-push factors: a payload buffer per shard, for the largest batch. */
static int plan_factor_buffers(psw_t *p) {
  if (!p->w->cfg->ps.push_factors) return 0;
  int K = p->map.nservers;
  p->fac_buf = calloc((size_t)K, sizeof *p->fac_buf);
  p->fac_bytes = calloc((size_t)K, sizeof *p->fac_bytes);
  if (!p->fac_buf || !p->fac_bytes) return dt_error("out of memory");
  for (int k = 0; k < K; k++) {
    size_t cap = ps_factor_bytes(&p->fplan, p->map.shards[k].begin, p->map.shards[k].end,
                                 (size_t)p->w->model->max_batch);
    if (!(p->fac_buf[k] = dt_alloc(cap))) return -1;
  }
  return 0;
}

/* This rank's keys and the servers that hold them: the whole model on
 * every server, or under --tp this rank's keys on its slice of them, cut
 * as the slice's servers cut them (the same key table). */
static int plan_keys(psw_t *p) {
  worker_t *w = p->w;
  const train_config_t *cfg = w->cfg;
  int T = ps_group_size(cfg), t = w->tp_rank, lars = cfg->optim.kind == OPTIM_LARS;
  DT_TRY(ps_keys_plan(w->model, t, T, &p->keys));
  if (cfg->ps.push_factors) DT_TRY(ps_factor_plan(w->model, &p->keys, &p->fplan));
  p->leader = t == 0;
  if (T == 1) {
    DT_TRY(ps_shard_plan_factors(w->model, p->K, lars, &p->fplan, &p->map));
  } else {
    model_t *tab;
    DT_TRY(ps_keys_table(cfg, w->train, t, T, &tab));
    int rc = ps_shard_plan_factors(tab, p->K / T, lars, &p->fplan, &p->map);
    model_free(tab);
    DT_TRY(rc);
    p->group = coll_ctx_comm(tensor_coll(w->tp));
    p->packed_grads = p->keys.packed ? dt_alloc_floats(p->keys.nkeys) : NULL;
    p->packed_pull = p->keys.packed ? dt_alloc_floats(p->keys.nkeys) : NULL;
    p->tp_totals = calloc((size_t)T, sizeof *p->tp_totals);
    if ((p->keys.packed && (!p->packed_grads || !p->packed_pull)) || !p->tp_totals)
      return dt_error("out of memory");
  }
  if (p->map.nparams != p->keys.nkeys)
    return dt_error("parameter server: %zu keys planned for tp rank %d, which holds %zu", p->map.nparams,
                    t, p->keys.nkeys);
  p->map.nworkers = p->N;
  p->map.first_server = cfg->workers + t * (p->K / T);
  return plan_factor_buffers(p);
}

static int psw_init(psw_t *p, worker_t *w) {
  const train_config_t *cfg = w->cfg;
  memset(p, 0, sizeof *p);
  p->w = w;
  p->push_ts = -1;
  p->next = PS_BATCH_NONE;
  p->epoch = p->report_epoch = p->reported_epoch = -1;
  p->N = w->nranks; /* the replicas under --tp: w->comm is this rank's slice */
  p->K = ps_nservers(cfg, cfg->workers);
  p->pool = ps_pool_schedule(cfg);
  p->S = cfg->schedule == SCHEDULE_SSP && !p->pool ? (int)cfg->schedule_param : 0;
  p->B_backup = cfg->schedule == SCHEDULE_BACKUP ? (int)cfg->schedule_param : 0;
  p->batches_per_epoch = ((int64_t)w->train->n + cfg->batch - 1) / cfg->batch;
  DT_TRY(plan_keys(p));
  DT_TRY(ps_client_new(w->world, w->rank, &p->map, &p->client));
  if (cfg->comm_order != COLL_ORDER_FIFO) DT_TRY(ps_prio_new(p->client, w->model, cfg, &p->prio));
  DT_TRY(ps_wthreads_new(w, cfg->ps.worker_threads, &p->wt));
  if (cfg->ps.replicas > 1) /* a dead server's shard goes on at its backup (ps_replica.c) */
    DT_TRY(ps_client_set_failover(p->client, cfg->net.timeout > 0 ? cfg->net.timeout : 300));
  if (cfg->compression.codec.kind != CODEC_NONE) {
    compress_config_t cc = {.codec = cfg->compression.codec, .seed = cfg->seed,
                            .error_feedback = train_error_feedback(cfg)};
    DT_TRY(ps_client_set_codec(p->client, &cc, cfg->compression.pulls));
  }
  if (cfg->ps.push_every > 1 && !(p->acc = dt_alloc_floats(p->map.nparams))) return -1;
  if (w->rank == 0 && cfg->checkpoint[0] && cfg->ps.dc_asgd > 0 && cfg->ps.dc_asgd_adaptive) {
    if (!(p->mean_square = dt_alloc_floats(p->map.nparams))) return -1;
    w->ckpt_state = p->mean_square;
    w->ckpt_state_prefix = PS_MEAN_SQUARE_PREFIX;
  }
  p->stats_buf = malloc(sizeof(ps_epoch_stats_t) + (size_t)p->N * sizeof(ps_worker_stats_t));
  p->prev = calloc((size_t)p->N, sizeof *p->prev);
  p->extra_cap = 512 + (size_t)(p->N + 3 * ps_group_size(cfg)) * 5 * 24;
  p->extra = malloc(p->extra_cap);
  if (!p->stats_buf || !p->prev || !p->extra) return dt_error("out of memory");
  return 0;
}

static void psw_free(psw_t *p) {
  ps_wthreads_free(p->wt);
  ps_prio_free(p->prio);
  ps_client_free(p->client);
  for (int k = 0; p->fac_buf && k < p->map.nservers; k++) dt_free(p->fac_buf[k]);
  ps_shard_free(&p->map);
  ps_keys_free(&p->keys);
  free(p->fac_buf);
  free(p->fac_bytes);
  ps_factor_plan_free(&p->fplan);
  dt_free(p->packed_grads);
  dt_free(p->packed_pull);
  free(p->tp_totals);
  dt_free(p->acc);
  dt_free(p->mean_square);
  p->w->ckpt_state = NULL;
  free(p->stats_buf);
  free(p->prev);
  free(p->extra);
}

/* --tp: every rank of the replica has had its last push answered before
 * rank 0 says goodbye (after which the servers may stop). */
static int group_done(psw_t *p) {
  int32_t ok = 1;
  for (int r = 1; p->leader && r < comm_size(p->group); r++)
    DT_TRY(comm_recv(p->group, r, TAG_PS_GROUP, &ok, sizeof ok));
  return p->leader ? 0 : comm_send(p->group, 0, TAG_PS_GROUP, &ok, sizeof ok);
}

int strategy_ps_worker(worker_t *w) {
  if (!w->world || comm_size(w->world) <= w->nranks)
    return dt_error("parameter-server workers need the world communicator with the server "
                    "ranks (run through train_run)");
  psw_t p;
  int rc = psw_init(&p, w);
  if (rc == 0) rc = driver_run(w, p.pool ? &pool_ops : &clock_ops, &p);
  if (rc == 0 && p.prio) rc = ps_prio_finish(p.prio); /* a layer's pull may still be out */
  if (rc == 0 && p.group) rc = group_done(&p);
  if (rc == 0 && p.leader) { /* a stopped worker (rc 1) just vanishes, like a crashed one */
    ps_req_t bye = {.op = PS_OP_BYE};
    rc = wait_ok(&p, ps_call(p.client, 0, &bye, NULL, 0), NULL);
  }
  if (rc >= 0 && w->cfg->ps.replicas > 1) { /* what the servers applied is checked against this */
    int64_t acked, resent;
    if (ps_client_notices(p.client) != 0) rc = -1; /* a death it has not waited on: the end must know */
    ps_client_chain_counts(p.client, &acked, &resent);
    dt_log(DT_LOG_INFO, "ps: worker %d: %lld pushes acknowledged, %lld parts sent again; batches "
           "computed: sum %.0f, of squares %.0f", w->rank, (long long)acked, (long long)resent,
           p.batch_sum, p.batch_sq);
  }
  psw_free(&p);
  return rc < 0 ? -1 : 0;
}

/* ---- every rank's role ------------------------------------------------------------------ */

/* --resume DIR: the position and the buffers come from the manifest; the
 * servers read their shards themselves. */
static int resume_from_dir(worker_t *w, const char *dir) {
  int epoch;
  int64_t step;
  DT_TRY(ps_ckpt_position(dir, &epoch, &step));
  DT_TRY(ps_ckpt_load_buffers(dir, w->model));
  return worker_resume_at(w, dir, epoch, step);
}

int ps_run_rank(comm_t *world, const train_config_t *cfg, const dataset_t *train,
                const dataset_t *test) {
  int N = cfg->workers, rank = comm_rank(world);
  if (comm_size(world) != N + ps_nservers(cfg, N))
    return dt_error("--exchange ps: %d ranks, but %d workers and %d servers need %d", comm_size(world),
                    N, ps_nservers(cfg, N), N + ps_nservers(cfg, N));
  comm_t *workers;
  DT_TRY(comm_split(world, rank < N ? 0 : 1, rank, &workers));
  if (rank >= N) {
    comm_free(workers);
    return ps_server_run(world, cfg, N, train);
  }
  train_config_t wcfg = *cfg; /* a folder is not worker_init's to read */
  wcfg.optim = ps_server_optim(cfg, N / ps_group_size(cfg)); /* the servers' state (checkpoints) */
  int from_dir = cfg->resume[0] && ps_path_is_dir(cfg->resume);
  if (from_dir) wcfg.resume[0] = wcfg.metrics[0] = 0;
  worker_t w;
  int rc = worker_init(&w, &wcfg, workers, train, test);
  w.world = world;
  if (rc == 0 && from_dir && rank == 0 && cfg->metrics[0] && !(w.metrics = file_open_output(cfg->metrics, 1)))
    rc = dt_error_prefix("--metrics: ");
  if (rc == 0 && from_dir) rc = resume_from_dir(&w, cfg->resume);
  if (rc == 0) rc = strategy_ps_worker(&w);
  worker_free(&w);
  comm_free(workers);
  return rc;
}

static int ps_matches(const train_config_t *c) {
  return c->optimization == OPTIMIZATION_CENTRAL && c->exchange == EXCHANGE_PS &&
         c->schedule != SCHEDULE_SOFT; /* every other schedule: one server implementation */
}

static int ps_ranks(const train_config_t *c) {
  return c->workers + (c->ps.servers > 0 ? c->ps.servers : c->workers); /* ps:n: one per worker */
}

const strategy_t STRATEGY_PARAMETER_SERVERS = {
    .name = "parameter servers",
    .paper = "Dean et al. 2012 (DistBelief); Li et al. 2014 (ps-lite); Ho et al. 2013 (SSP)",
    .axes = "--schedule sync|async|ssp:S|value:V|backup:B --exchange ps:K",
    .optimization = OPTIMIZATION_CENTRAL,
    .compress = COMPRESS_PUSHES,
    .matches = ps_matches,
    .ranks = ps_ranks,
    .run = strategy_ps_worker,
    .run_rank = ps_run_rank,
    .describe_step = ps_describe_step,
};
