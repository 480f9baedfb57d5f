/* MPCA-SGD (Langer, Hall, He & Rahayu 2018, IEEE TPDS 29(11)), as the
 * taxonomy (Mayer & Jacobsen 2020, sec. 4.1 and Table 1) describes it:
 * decentralized, data parallel, a dedicated master node that holds the
 * centre, binomial-tree communication, soft-bounded asynchronous; "model
 * updating and sharing updates are decoupled", "penalization occurs as a
 * part of the model's cost function", "staleness effects are dampened
 * using an extrapolation mechanism". The paper itself could not be read
 * here (only its abstract was reachable), so what the taxonomy leaves open
 * is chosen as follows, and said again in docs/DECENTRALIZED.md.
 *
 * Ranks: p workers and the master (rank p). A worker minimises its loss
 * plus the elastic penalty rho/2 ||w - c^||^2, so every step's gradient,
 * through the worker's own optimizer (momentum included), is
 *
 *   g <- grad f(w) + rho (w - c^),   c^ = c + gamma (c - c_prev)
 *
 * c^ extrapolates the centre along its last move: the centre a worker
 * holds is one round old, and gamma = 1 carries it one round forward.
 *
 * Rounds: every tau steps a worker snapshots (beta/p) w and starts a round
 * on the progress thread (coll_async): a binomial reduce_tree to the
 * master, which adds (1 - beta) c, giving
 *
 *   c' = (1 - beta) c + beta mean_i(w_i)
 *
 * then a broadcast_tree of c' back. The worker keeps training meanwhile
 * (updating and sharing decoupled) and waits for round r only when round
 * r+1 is due: at most one round in flight, the seed's soft bound taken as
 * one round. The centre a worker's penalty uses is thus tau to 2 tau steps
 * old. What a worker sees is fixed by its step count, not by timing, so
 * runs are repeatable and the same on both transports. At an epoch's end
 * the round in flight is waited for, and the consensus evaluated is the
 * master's centre.
 *
 *   bytes per round: every rank but the master sends S = 4 x params once
 *   up the tree and receives S once down it: 2 p S in all (reduce_tree.c,
 *   broadcast_tree.c give each rank's share).
 *
 * --compress CODEC: the same trees with every link sent as the change
 * since its other end last heard it (compress.h's mirror tree): a
 * subtree's partial sum of (beta/p) w moves by what the workers learnt in
 * tau steps, the centre by its round's move, and what the codec drops
 * waits in the next change. S becomes the codec's bytes. The master's
 * centre is the exact sum of what it holds of its children's parts; a
 * worker's centre is its copy. fp32 goes the plain way (the same bits). */
#include <stdio.h>
#include <stdlib.h>

#include "dtrain/coll_async.h"
#include "strategy/decentral/decentral.h"

#define MPCA_BETA 0.9      /* the centre's moving rate when --beta is not given (EASGD's) */
#define MPCA_RHO 1.0       /* the penalty when --rho is not given */
#define MPCA_GAMMA 1.0     /* the extrapolation when --extrapolation is not given */

typedef struct {
  decentral_t *d;
  double rho, beta, gamma;
  int master;                /* rank of the master: nworkers */
  float *round_buf;          /* the round in flight: (beta/p) w up, the new centre down */
  float *centre, *previous;  /* workers: the last two centres received */
  float *target;             /* workers: c^, the extrapolated centre */
  coll_async_t *async;       /* workers: the rounds run beside the steps */
  size_t ticket;
  int in_flight;
  int64_t rounds;
  mirror_tree_t *tree;       /* --compress: the links' mirrors (NULL: plain trees) */
  int64_t round_no;          /* the round running: seeds its encodings */
} mpca_t;

int mpca_coefficients(const train_config_t *c, double *rho, double *beta, double *gamma) {
  *rho = c->decentral.rho > 0 ? c->decentral.rho : MPCA_RHO;
  *beta = c->decentral.beta > 0 ? c->decentral.beta : MPCA_BETA;
  *gamma = c->decentral.extrapolation >= 0 ? c->decentral.extrapolation : MPCA_GAMMA;
  if (c->lr * *rho >= 1)
    return dt_error("option --rho: lr x rho = %g (expected below 1: the penalty's own step, "
                    "lr rho (w - c), would overshoot the centre)", c->lr * *rho);
  if (!(*beta > 0 && *beta <= 1))
    return dt_error("option --beta: %g (MPCA-SGD: the centre moves to (1 - beta) c + beta x the "
                    "workers' mean; expected 0 < beta <= 1)", *beta);
  return 0;
}

void mpca_extrapolate(size_t n, const float *centre, const float *previous, float gamma,
                      float *target) {
  for (size_t i = 0; i < n; i++) target[i] = centre[i] + gamma * (centre[i] - previous[i]);
}

void mpca_penalize(size_t n, const float *w, const float *target, float rho, float *grad) {
  for (size_t i = 0; i < n; i++) grad[i] += rho * (w[i] - target[i]);
}

/* The round on the tree, on the progress thread (workers) or in line (master). */
static int run_round(coll_ctx_t *ctx, void *arg) {
  mpca_t *m = arg;
  size_t n = m->d->w->model->nparams;
  if (m->tree) {
    comm_t *c = coll_ctx_comm(ctx);
    if (mirror_tree_reduce(m->tree, c, m->round_buf, m->round_no) != 0) return -1;
    return mirror_tree_broadcast(m->tree, c, m->round_buf, m->round_no);
  }
  if (reduce_tree(ctx, m->master, m->round_buf, n) != 0) return -1;
  return broadcast_tree(ctx, m->master, m->round_buf, n);
}

/* The master: (1 - beta) c joins the workers' (beta/p) w_i; the sum is the new centre. */
static int master_round(mpca_t *m) {
  worker_t *w = m->d->w;
  size_t n = w->model->nparams;
  double t0 = dt_now();
  kern_copy(n, w->model->params, m->round_buf);
  kern_scale(n, (float)(1 - m->beta), m->round_buf);
  m->round_no = m->rounds;
  if (run_round(w->coll, m) != 0) return -1;
  kern_copy(n, m->round_buf, w->model->params);
  m->rounds++;
  worker_comm_since(w, t0);
  return 0;
}

/* A worker takes the centre of the round in flight, and extrapolates. */
static int take_centre(mpca_t *m) {
  if (!m->in_flight) return 0;
  worker_t *w = m->d->w;
  size_t n = w->model->nparams;
  double t0 = dt_now();
  int rc = coll_async_wait_one(m->async, m->ticket);
  double t1 = dt_now();
  if (dt_trace) trace_slice(dt_trace, TRACE_WAIT, "wait for the centre", 0, t0, t1);
  w->timers.comm_exposed += t1 - t0;
  w->timers.comm += coll_async_take_busy(m->async);
  if (rc != 0) return dt_error_prefix("MPCA-SGD round %lld: ", (long long)m->rounds + 1);
  m->in_flight = 0;
  m->rounds++;
  float *older = m->previous;
  m->previous = m->centre;
  m->centre = older;
  kern_copy(n, m->round_buf, m->centre);
  mpca_extrapolate(n, m->centre, m->previous, (float)m->gamma, m->target);
  return 0;
}

static void start_round(mpca_t *m) {
  worker_t *w = m->d->w;
  size_t n = w->model->nparams;
  kern_copy(n, w->model->params, m->round_buf);
  kern_scale(n, (float)(m->beta / m->d->nworkers), m->round_buf);
  m->round_no = m->rounds;
  m->ticket = coll_async_call(m->async, run_round, m, 0);
  m->in_flight = 1;
}

static int step(decentral_t *d, int64_t k) {
  mpca_t *m = d->method;
  worker_t *w = d->w;
  if (!d->is_worker) {
    w->step++; /* the master keeps the workers' clock */
    return w->step % w->cfg->decentral.tau == 0 ? master_round(m) : 0;
  }
  size_t count;
  if (decentral_gradient(d, k, &count, NULL) != 0) return -1;
  mpca_penalize(w->model->nparams, w->model->params, m->target, (float)m->rho, w->model->grads);
  worker_apply_update(w);
  if (w->step % w->cfg->decentral.tau != 0) return 0;
  if (take_centre(m) != 0) return -1; /* the round before: at most one in flight */
  start_round(m);
  return 0;
}

static int drain(decentral_t *d) {
  mpca_t *m = d->method;
  return d->is_worker ? take_centre(m) : 0;
}

static int centre_params(decentral_t *d, float *out) {
  mpca_t *m = d->method;
  return decentral_broadcast_params(d, m->master, out);
}

static int extra_json(decentral_t *d, char *buf, size_t cap) {
  mpca_t *m = d->method;
  snprintf(buf, cap, ",\"rho\":%.6g,\"beta\":%.6g,\"extrapolation\":%.6g,\"tau\":%d,"
           "\"rounds\":%lld,\"master_rank\":%d", m->rho, m->beta, m->gamma, d->w->cfg->decentral.tau,
           (long long)m->rounds, m->master);
  return 0;
}

/* --compress: the trees' links start from the first centre c0, which
 * every rank holds the same bits of: each worker's part as (beta/p) c0,
 * the centre as c0. */
static int setup_tree(mpca_t *m, const float *c0) {
  worker_t *w = m->d->w;
  const codec_spec_t *k = &w->cfg->compression.codec;
  size_t n = w->model->nparams;
  if (k->kind == CODEC_NONE || codec_lossless(k)) return 0;
  float *part = dt_dup_floats(c0, n);
  if (!part) return -1;
  kern_scale(n, (float)(m->beta / m->d->nworkers), part);
  int rc = mirror_tree_new(k, n, comm_rank(w->comm), comm_size(w->comm), m->master,
                           w->cfg->seed ^ 0x6d7063612d736764ull, part, c0, &m->tree);
  dt_free(part);
  return rc;
}

static int setup(decentral_t *d) {
  mpca_t *m = d->method;
  worker_t *w = d->w;
  size_t n = w->model->nparams;
  m->d = d;
  m->master = d->nworkers;
  if (mpca_coefficients(w->cfg, &m->rho, &m->beta, &m->gamma) != 0) return -1;
  if (!(m->round_buf = dt_alloc_floats(n))) return -1;
  if (!d->is_worker)
    return decentral_broadcast_params(d, m->master, m->round_buf) == 0 ? setup_tree(m, m->round_buf) : -1;
  if (!(m->centre = dt_alloc_floats(n)) || !(m->previous = dt_alloc_floats(n)) ||
      !(m->target = dt_alloc_floats(n)))
    return -1;
  /* the master's model is the first centre, with no move to extrapolate */
  if (decentral_broadcast_params(d, m->master, m->centre) != 0) return -1;
  kern_copy(n, m->centre, m->previous);
  kern_copy(n, m->centre, m->target);
  if (setup_tree(m, m->centre) != 0) return -1;
  return coll_async_new(w->coll, COLL_ORDER_FIFO, &m->async);
}

static void teardown(decentral_t *d) {
  mpca_t *m = d->method;
  coll_async_free(m->async); /* first: a round still running writes round_buf */
  mirror_tree_free(m->tree);
  dt_free(m->round_buf);
  dt_free(m->centre);
  dt_free(m->previous);
  dt_free(m->target);
}

static const decentral_ops_t MPCA = {
    .consensus = "centre", .setup = setup, .teardown = teardown, .step = step,
    .before_eval = drain, .consensus_params = centre_params, .extra_json = extra_json};

int strategy_mpca(worker_t *w) {
  mpca_t m = {0};
  return decentral_strategy(w, &MPCA, 1, &m);
}

/* Per worker: its local step (the penalty is part of its gradient); every
 * tau steps a round, on the progress thread beside the next steps: the
 * reduce of (beta/p) w up the binomial tree to the master (rank p) and the
 * broadcast of the new centre down it. The master runs the same round in
 * line at the same step counts. Which steps run a round is fixed by the
 * step count, and the round in flight is waited for at an epoch's end, so
 * the counts are exact. */
static int mpca_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  if (c->compression.codec.kind != CODEC_NONE)
    return dt_error("MPCA-SGD: describe_step covers the plain rounds so far, not --compress");
  int p = c->workers, P = p + 1;
  for (int r = 0; r < P; r++) {
    int prev = r < p ? step_add_local_step(out, m, r, c->batch) : -1;
    step_thread_t thread = r < p ? THREAD_COMM : THREAD_COMPUTE;
    for (int reduce = 1; reduce >= 0 && prev != STEP_FAILED; reduce--)
      prev = step_add_tree(out, r, reduce, P, p, m->nparams, prev, thread, c->decentral.tau);
    if (prev == STEP_FAILED) return -1;
  }
  return 0;
}

static int mpca_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_MASTER, SCHEDULE_SOFT);
}

/* Soft-bounded rounds are a decentralized method's. */
static int mpca_refuse(const train_config_t *c) {
  if (c->optimization != OPTIMIZATION_CENTRAL || c->schedule != SCHEDULE_SOFT) return 0;
  return dt_error("option --schedule soft: MPCA-SGD's rounds of a decentralized method (use "
                  "--optimization decentral --exchange master, or --preset mpca-sgd)");
}

const strategy_t STRATEGY_MPCA = {
    .name = "MPCA-SGD",
    .paper = "Langer, Hall, He & Rahayu 2018 (MPCA-SGD), soft-bounded rounds",
    .axes = "master + soft",
    .short_name = "MPCA-SGD",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_MIRRORS,
    .matches = mpca_matches,
    .ranks = decentral_with_master,
    .refuse = mpca_refuse,
    .run = strategy_mpca,
    .describe_step = mpca_describe_step,
};
