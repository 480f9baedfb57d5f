/* EASGD (Zhang, Choromanska & LeCun 2015): every worker trains its own
 * replica w_i; a master rank of its own (rank p, after the p workers)
 * holds the centre variable c. Every tau steps a worker and the centre
 * pull toward each other like the two ends of a spring:
 *
 *   worker:  w_i <- w_i - alpha (w_i - c)
 *   centre:  c   <- c + (beta/p) (w_i - c)       per worker exchange
 *
 * Synchronous (the paper's eq. 3-4): all workers at once, from the same
 * c, so the centre moves to (1 - beta) c + beta mean(w_i); a broadcast of
 * c and a reduction of (beta/p)(w_i - c) to the master, in fixed order,
 * so runs are bitwise repeatable. Asynchronous (the paper's Algorithm 1,
 * the taxonomy's Fig. 10): a worker sends w_i when its own clock says
 * so; the master applies the centre's move at once and replies with the
 * c it used, from which the worker makes its own move; requests are served
 * in arrival order, so runs may differ. The consensus model is the centre.
 *
 * --alpha-decay G,S,L: DeepSpark's adaptive moving rate (Kim et al. 2016;
 * its released solver and server): alpha and beta are multiplied by G
 * every S exchanges of a worker, at most L times, so the elastic force
 * weakens as training settles. Both ends of an exchange use the factor of
 * the worker's exchange count, keeping beta = p alpha where it held. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

typedef struct {
  decentral_t *d;
  double alpha, beta;
  int master;            /* rank of the master: nworkers */
  float *buf;            /* workers: the centre / the move; master: the request */
  float *reply;          /* master: the centre a request was answered with */
  int64_t pending;       /* async master: requests due in this epoch */
  int64_t exchanges;     /* elastic exchanges of this rank */
  int64_t *served;       /* async master: exchanges of each worker */
} easgd_t;

static int elastic_given(const train_config_t *c) {
  return c->alpha > 0 || c->beta > 0 || c->rho > 0;
}

int decentral_extra_ranks(const train_config_t *c) {
  if (c->optimization != OPTIMIZATION_DECENTRAL || c->exchange != EXCHANGE_MASTER) return 0;
  return c->schedule == SCHEDULE_ASYNC || c->schedule == SCHEDULE_SOFT ||
         (c->schedule == SCHEDULE_SYNC && elastic_given(c));
}

/* Defaults and the stable range. Elastic symmetry (the paper's choice)
 * is beta = p alpha; without either, beta = 0.9 as in the paper's
 * experiments (alpha = 0.9/p), alpha at most 1/2. */
int elastic_coefficients(const train_config_t *c, int p, double *alpha, double *beta) {
  if (c->rho > 0 && (c->alpha > 0 || c->beta > 0))
    return dt_error("options --rho and --alpha/--beta: give one of them (--rho sets alpha = "
                    "lr x rho and beta = p x alpha)");
  const char *opt = c->rho > 0 ? "--rho" : "--alpha";
  double a = c->rho > 0 ? c->lr * c->rho : c->alpha, b = c->beta;
  if (a <= 0 && b <= 0) a = fmin(0.9 / p, 0.5), b = p * a;
  else if (b <= 0) b = p * a;
  else if (a <= 0) a = fmin(b / p, 0.5);
  if (!(a > 0 && a <= 0.5))
    return dt_error("option %s: alpha = %g is outside the stable range of elastic averaging: "
                    "0 < alpha <= 1/2 (taxonomy Eq. 1) and beta = p x alpha < 1 (Zhang et al. "
                    "2015), i.e. alpha < 1/p = %.4g with p = %d", opt, a, 1.0 / p, p);
  if (!(b > 0 && b < 1))
    return dt_error("option %s: beta = %g is outside the stable range 0 < beta < 1 (Zhang et "
                    "al. 2015: the centre moves to (1 - beta) x centre + beta x the mean of its "
                    "p = %d workers; with beta = p x alpha that is alpha < 1/p = %.4g)",
                    c->beta > 0 ? "--beta" : opt, b, p, 1.0 / p);
  *alpha = a;
  *beta = b;
  return 0;
}

double elastic_decay(const train_config_t *c, int64_t k) {
  if (c->alpha_decay_every < 1) return 1;
  int64_t n = k / c->alpha_decay_every;
  if (c->alpha_decay_limit > 0 && n > c->alpha_decay_limit) n = c->alpha_decay_limit;
  return pow(c->alpha_decay, (double)n);
}

static int exchange_due(const easgd_t *e) { return e->d->w->step % e->d->w->cfg->tau == 0; }

/* ---- synchronous ------------------------------------------------------------ */

static int sync_round(easgd_t *e) {
  decentral_t *d = e->d;
  worker_t *w = d->w;
  size_t n = w->model->nparams;
  float *params = w->model->params;
  double t0 = dt_now();
  float *centre = d->is_worker ? e->buf : params;
  double f = elastic_decay(w->cfg, e->exchanges);
  if (broadcast_tree(w->coll, e->master, centre, n) != 0) return -1;
  if (d->is_worker) {
    for (size_t i = 0; i < n; i++) e->buf[i] = params[i] - e->buf[i];  /* w_i - c */
    kern_axpy(n, (float)(-e->alpha * f), e->buf, params);
    kern_scale(n, (float)(e->beta * f / d->nworkers), e->buf);
  } else {
    kern_copy(n, params, e->buf);
  }
  if (reduce_tree(w->coll, e->master, e->buf, n) != 0) return -1;  /* c + sum (beta/p)(w_i - c) */
  if (!d->is_worker) kern_copy(n, e->buf, params);
  e->exchanges++;
  worker_comm_since(w, t0);
  return 0;
}

static int sync_step(decentral_t *d, int64_t k) {
  easgd_t *e = d->method;
  size_t count;
  if (d->is_worker) {
    if (decentral_local_step(d, k, &count, NULL) != 0) return -1;
  } else {
    d->w->step++; /* the master keeps the workers' clock */
  }
  return exchange_due(e) ? sync_round(e) : 0;
}

/* ---- asynchronous ----------------------------------------------------------- */

static int async_worker_exchange(easgd_t *e) {
  worker_t *w = e->d->w;
  size_t n = w->model->nparams;
  float *params = w->model->params;
  double t0 = dt_now();
  if (comm_sendrecv(w->comm, e->master, TAG_EASGD_REQUEST, params, n * sizeof(float), e->master,
                    TAG_EASGD_REPLY, e->buf, n * sizeof(float)) != 0)
    return dt_error_prefix("elastic exchange with the master (rank %d): ", e->master);
  float alpha = (float)(e->alpha * elastic_decay(w->cfg, e->exchanges));
  for (size_t i = 0; i < n; i++) params[i] -= alpha * (params[i] - e->buf[i]);
  e->exchanges++;
  worker_comm_since(w, t0);
  return 0;
}

static int async_step(decentral_t *d, int64_t k) {
  easgd_t *e = d->method;
  size_t count;
  if (!d->is_worker) { /* requests are served after the loop: see serve_requests */
    d->w->step++;
    if (exchange_due(e)) e->pending += d->nworkers;
    return 0;
  }
  if (decentral_local_step(d, k, &count, NULL) != 0) return -1;
  return exchange_due(e) ? async_worker_exchange(e) : 0;
}

/* The master answers the epoch's requests in arrival order: each worker
 * makes one per tau of its own steps, so the count is known. */
static int serve_requests(decentral_t *d) {
  easgd_t *e = d->method;
  worker_t *w = d->w;
  if (d->is_worker) return 0;
  size_t n = w->model->nparams;
  float *centre = w->model->params;
  for (; e->pending > 0; e->pending--) {
    comm_req_t *req;
    int src;
    if (comm_irecv(w->comm, COMM_ANY_SOURCE, TAG_EASGD_REQUEST, e->buf, n * sizeof(float), &req) != 0 ||
        comm_wait_src(w->comm, req, &src, NULL) != 0)
      return dt_error_prefix("master: waiting for %lld more elastic requests: ",
                             (long long)e->pending);
    kern_copy(n, centre, e->reply);
    float step = (float)(e->beta * elastic_decay(w->cfg, e->served[src]++) / d->nworkers);
    for (size_t i = 0; i < n; i++) centre[i] += step * (e->buf[i] - e->reply[i]);
    if (comm_send(w->comm, src, TAG_EASGD_REPLY, e->reply, n * sizeof(float)) != 0)
      return dt_error_prefix("master: reply to worker %d: ", src);
    e->exchanges++;
  }
  return 0;
}

/* ---- both -------------------------------------------------------------------- */

static int centre_params(decentral_t *d, float *out) {
  easgd_t *e = d->method;
  return decentral_broadcast_params(d, e->master, out);
}

static int extra_json(decentral_t *d, char *buf, size_t cap) {
  easgd_t *e = d->method;
  const train_config_t *c = d->w->cfg;
  int n = snprintf(buf, cap, ",\"alpha\":%.6g,\"beta\":%.6g,\"tau\":%d,\"master_rank\":%d",
                   e->alpha, e->beta, c->tau, e->master);
  if (c->alpha_decay_every > 0 && n > 0 && (size_t)n < cap) /* rank 0's factor now */
    snprintf(buf + n, cap - (size_t)n, ",\"alpha_decay\":%.6g,\"alpha_now\":%.6g",
             c->alpha_decay, e->alpha * elastic_decay(c, e->exchanges));
  return 0;
}

static int setup(decentral_t *d) {
  easgd_t *e = d->method;
  e->d = d;
  e->master = d->nworkers;
  if (elastic_coefficients(d->w->cfg, d->nworkers, &e->alpha, &e->beta) != 0) return -1;
  e->buf = dt_alloc_floats(d->w->model->nparams);
  if (!d->is_worker) {
    e->reply = dt_alloc_floats(d->w->model->nparams);
    e->served = calloc((size_t)d->nworkers, sizeof *e->served);
    if (!e->reply || !e->served) return dt_error("out of memory (EASGD master)");
  }
  return e->buf ? 0 : -1;
}

static void teardown(decentral_t *d) {
  easgd_t *e = d->method;
  dt_free(e->buf);
  dt_free(e->reply);
  free(e->served);
}

static const decentral_ops_t EASGD_SYNC = {
    .consensus = "centre", .setup = setup, .teardown = teardown, .step = sync_step,
    .consensus_params = centre_params, .extra_json = extra_json};
static const decentral_ops_t EASGD_ASYNC = {
    .consensus = "centre", .setup = setup, .teardown = teardown, .step = async_step,
    .before_eval = serve_requests, .consensus_params = centre_params, .extra_json = extra_json};

int strategy_easgd(worker_t *w) {
  easgd_t e = {0};
  return decentral_strategy(w, w->cfg->schedule == SCHEDULE_ASYNC ? &EASGD_ASYNC : &EASGD_SYNC, 1, &e);
}
