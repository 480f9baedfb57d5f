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
 * the worker's exchange count, keeping beta = p alpha where it held.
 *
 * --compress CODEC: each end sends its model as the encoded change since
 * the other last heard it (a mirror per link, compress.h's mirror_encode),
 * and computes the elastic difference against its copy of the other's:
 *
 *   worker:  sends C(w_i - m_i), m_i += decode;   w_i <- w_i - alpha (w_i - c_i)
 *   master:  sends C(c - c_i),   c_i += decode;   c   <- c + (beta/p) (m_i - c)
 *
 * m_i (the worker's model as the master holds it) and c_i (the centre as
 * worker i holds it) are the same bits at both ends, and what the codec
 * drops stays in the next change: error feedback per link, with the
 * mirrors as its memory (the difference itself is not fed back: it is a
 * state, not an increment, and its residual would be counted twice). Sync:
 * one c_i for all workers (the master sends them one encoding). Memory:
 * a worker 2 n floats; the master p n (sync) or 2 p n (async). fp32 goes
 * the plain way (lossless: the same bits). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

/* --compress: the mirrors of the links (see the header). */
typedef struct {
  codec_spec_t codec;    /* CODEC_NONE: the plain exchange */
  float *model;          /* worker: its model as the master holds it */
  float *centre;         /* worker: the centre as it holds it */
  float **models;        /* master: each worker's model as it holds it */
  float **centres;       /* master: the centre as each worker holds it (sync: [0] for all) */
  uint8_t *msg;          /* one encoding; the sync master: p of them */
  size_t msg_bytes;      /* codec_bytes(n) */
  float *scratch;        /* 2 n floats (mirror_encode's) */
  uint64_t seed;
} elastic_codec_t;

typedef struct {
  decentral_t *d;
  elastic_codec_t z;
  double alpha, beta;
  int master;            /* rank of the master: nworkers */
  float *buf;            /* workers: the centre / the move; master: the request */
  float *reply;          /* master: the centre a request was answered with */
  int64_t pending;       /* async master: requests due in this epoch */
  int64_t exchanges;     /* elastic exchanges of this rank */
  int64_t *served;       /* async master: exchanges of each worker */
} easgd_t;

int decentral_extra_ranks(const train_config_t *c) {
  if (c->optimization != OPTIMIZATION_DECENTRAL || c->exchange != EXCHANGE_MASTER) return 0;
  return c->schedule == SCHEDULE_ASYNC || c->schedule == SCHEDULE_SOFT ||
         (c->schedule == SCHEDULE_SYNC && elastic_given(c));
}

/* Defaults and the stable range. Elastic symmetry (the paper's choice)
 * is beta = p alpha; without either, beta = 0.9 as in the paper's
 * experiments (alpha = 0.9/p), alpha at most 1/2. */
int elastic_coefficients(const train_config_t *c, int p, double *alpha, double *beta) {
  if (c->decentral.rho > 0 && (c->decentral.alpha > 0 || c->decentral.beta > 0))
    return dt_error("options --rho and --alpha/--beta: give one of them (--rho sets alpha = "
                    "lr x rho and beta = p x alpha)");
  const char *opt = c->decentral.rho > 0 ? "--rho" : "--alpha";
  double a = c->decentral.rho > 0 ? c->lr * c->decentral.rho : c->decentral.alpha, b = c->decentral.beta;
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
                    c->decentral.beta > 0 ? "--beta" : opt, b, p, 1.0 / p);
  *alpha = a;
  *beta = b;
  return 0;
}

double elastic_decay(const train_config_t *c, int64_t k) {
  if (c->decentral.alpha_decay_every < 1) return 1;
  int64_t n = k / c->decentral.alpha_decay_every;
  if (c->decentral.alpha_decay_limit > 0 && n > c->decentral.alpha_decay_limit) n = c->decentral.alpha_decay_limit;
  return pow(c->decentral.alpha_decay, (double)n);
}

static int exchange_due(const easgd_t *e) { return e->d->w->step % e->d->w->cfg->decentral.tau == 0; }

/* ---- synchronous ------------------------------------------------------------ */

/* An encoding of the link to or from worker `peer`, its `count`-th. */
static size_t encode_on_link(easgd_t *e, const float *x, float *mirror, int peer, int64_t count,
                             uint8_t *out) {
  elastic_codec_t *z = &e->z;
  uint64_t seed = mirror_seed(z->seed, comm_rank(e->d->w->comm), peer, count, 0);
  return mirror_encode(&z->codec, x, mirror, e->d->w->model->nparams, seed, out, z->scratch);
}

static int decode_on_link(easgd_t *e, const uint8_t *msg, float *copy, int from) {
  if (mirror_decode(&e->z.codec, msg, e->z.msg_bytes, e->d->w->model->nparams, copy) != 0)
    return dt_error_prefix("elastic exchange: the message from rank %d: ", from);
  return 0;
}

/* The synchronous round, compressed: the centre's change to every worker
 * (one encoding), each worker's change to the master; the master sums the
 * elastic differences in rank order. */
static int sync_round_compressed(easgd_t *e) {
  decentral_t *d = e->d;
  worker_t *w = d->w;
  elastic_codec_t *z = &e->z;
  size_t n = w->model->nparams, E = z->msg_bytes;
  float *params = w->model->params;
  double f = elastic_decay(w->cfg, e->exchanges);
  if (d->is_worker) {
    DT_TRY(comm_recv(w->comm, e->master, TAG_EASGD_CENTRE, z->msg, E));
    DT_TRY(decode_on_link(e, z->msg, z->centre, e->master));
    encode_on_link(e, params, z->model, e->master, e->exchanges, z->msg);
    DT_TRY(comm_send(w->comm, e->master, TAG_EASGD_MODEL, z->msg, E));
    for (size_t i = 0; i < n; i++) e->buf[i] = params[i] - z->centre[i];  /* w_i - c_i */
    kern_axpy(n, (float)(-e->alpha * f), e->buf, params);
    return 0;
  }
  encode_on_link(e, params, z->centres[0], -1, e->exchanges, z->msg);
  for (int r = 0; r < d->nworkers; r++)
    DT_TRY(comm_send(w->comm, r, TAG_EASGD_CENTRE, z->msg, E));
  for (int r = 0; r < d->nworkers; r++) {
    DT_TRY(comm_recv(w->comm, r, TAG_EASGD_MODEL, z->msg, E));
    DT_TRY(decode_on_link(e, z->msg, z->models[r], r));
  }
  float s = (float)(e->beta * f / d->nworkers);
  kern_copy(n, params, e->buf);
  for (int r = 0; r < d->nworkers; r++)
    for (size_t i = 0; i < n; i++) e->buf[i] += s * (z->models[r][i] - params[i]);
  kern_copy(n, e->buf, params);
  return 0;
}

static int sync_round(easgd_t *e) {
  decentral_t *d = e->d;
  worker_t *w = d->w;
  size_t n = w->model->nparams;
  float *params = w->model->params;
  double t0 = dt_now();
  if (e->z.codec.kind != CODEC_NONE) {
    if (sync_round_compressed(e) != 0) return dt_error_prefix("compressed elastic round: ");
    e->exchanges++;
    worker_comm_since(w, t0);
    return 0;
  }
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

/* Compressed: the worker's change goes, the centre's change comes back
 * into the worker's copy of it, which is then what it is pulled toward. */
static const float *async_worker_compressed(easgd_t *e) {
  worker_t *w = e->d->w;
  elastic_codec_t *z = &e->z;
  encode_on_link(e, w->model->params, z->model, e->master, e->exchanges, z->msg);
  uint8_t *reply = z->msg + z->msg_bytes;
  if (comm_sendrecv(w->comm, e->master, TAG_EASGD_REQUEST, z->msg, z->msg_bytes, e->master,
                    TAG_EASGD_REPLY, reply, z->msg_bytes) != 0 ||
      decode_on_link(e, reply, z->centre, e->master) != 0)
    return NULL;
  return z->centre;
}

static int async_worker_exchange(easgd_t *e) {
  worker_t *w = e->d->w;
  size_t n = w->model->nparams;
  float *params = w->model->params;
  double t0 = dt_now();
  const float *centre = e->buf;
  if (e->z.codec.kind != CODEC_NONE) centre = async_worker_compressed(e);
  else if (comm_sendrecv(w->comm, e->master, TAG_EASGD_REQUEST, params, n * sizeof(float), e->master,
                         TAG_EASGD_REPLY, e->buf, n * sizeof(float)) != 0)
    centre = NULL;
  if (!centre) return dt_error_prefix("elastic exchange with the master (rank %d): ", e->master);
  float alpha = (float)(e->alpha * elastic_decay(w->cfg, e->exchanges));
  for (size_t i = 0; i < n; i++) params[i] -= alpha * (params[i] - centre[i]);
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
  elastic_codec_t *z = &e->z;
  int compressed = z->codec.kind != CODEC_NONE;
  void *in = compressed ? (void *)z->msg : e->buf;
  size_t in_bytes = compressed ? z->msg_bytes : n * sizeof(float);
  for (; e->pending > 0; e->pending--) {
    comm_req_t *req;
    int src;
    if (comm_irecv(w->comm, COMM_ANY_SOURCE, TAG_EASGD_REQUEST, in, in_bytes, &req) != 0 ||
        comm_wait_src(w->comm, req, &src, NULL) != 0)
      return dt_error_prefix("master: waiting for %lld more elastic requests: ",
                             (long long)e->pending);
    const float *model = e->buf; /* compressed: the worker's model as the master holds it */
    if (compressed && decode_on_link(e, z->msg, z->models[src], src) != 0) return -1;
    if (compressed) model = z->models[src];
    int64_t k = e->served[src]++;
    kern_copy(n, centre, e->reply);
    float step = (float)(e->beta * elastic_decay(w->cfg, k) / d->nworkers);
    for (size_t i = 0; i < n; i++) centre[i] += step * (model[i] - e->reply[i]);
    const void *out = e->reply;
    size_t out_bytes = n * sizeof(float);
    if (compressed) { /* the centre it used, as the change since the worker last heard it */
      out_bytes = encode_on_link(e, e->reply, z->centres[src], src, k, z->msg);
      out = z->msg;
    }
    if (comm_send(w->comm, src, TAG_EASGD_REPLY, out, out_bytes) != 0)
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
                   e->alpha, e->beta, c->decentral.tau, e->master);
  if (c->decentral.alpha_decay_every > 0 && n > 0 && (size_t)n < cap) /* rank 0's factor now */
    snprintf(buf + n, cap - (size_t)n, ",\"alpha_decay\":%.6g,\"alpha_now\":%.6g",
             c->decentral.alpha_decay, e->alpha * elastic_decay(c, e->exchanges));
  return 0;
}

/* A copy of the model as every rank holds it at the start (the same on
 * all: seeded, or the checkpoint resumed). */
static float *mirror_of(const model_t *m) { return dt_dup_floats(m->params, m->nparams); }

/* --compress: the links' mirrors, each starting as the model. */
static int setup_codec(easgd_t *e) {
  decentral_t *d = e->d;
  const train_config_t *cfg = d->w->cfg;
  elastic_codec_t *z = &e->z;
  const model_t *m = d->w->model;
  z->codec = cfg->compression.codec;
  z->seed = cfg->seed ^ 0x656c617374696321ull;
  z->msg_bytes = codec_bytes(&z->codec, m->nparams);
  if (!(z->scratch = dt_alloc_floats(2 * m->nparams)) || !(z->msg = dt_alloc(2 * z->msg_bytes)))
    return -1;
  if (d->is_worker) return (z->model = mirror_of(m)) && (z->centre = mirror_of(m)) ? 0 : -1;
  int P = d->nworkers, async = cfg->schedule == SCHEDULE_ASYNC;
  z->models = calloc((size_t)P, sizeof *z->models);
  z->centres = calloc((size_t)P, sizeof *z->centres);
  if (!z->models || !z->centres) return dt_error("out of memory (EASGD master)");
  for (int r = 0; r < P; r++) {
    if (!(z->models[r] = mirror_of(m))) return -1;
    if ((async || r == 0) && !(z->centres[r] = mirror_of(m))) return -1;
  }
  return 0;
}

static void free_codec(elastic_codec_t *z, int P) {
  for (int r = 0; z->models && r < P; r++) dt_free(z->models[r]);
  for (int r = 0; z->centres && r < P; r++) dt_free(z->centres[r]);
  free(z->models), free(z->centres);
  dt_free(z->model), dt_free(z->centre), dt_free(z->msg), dt_free(z->scratch);
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
  if (!e->buf) return -1;
  const codec_spec_t *k = &d->w->cfg->compression.codec;
  return k->kind == CODEC_NONE || codec_lossless(k) ? 0 : setup_codec(e);
}

static void teardown(decentral_t *d) {
  easgd_t *e = d->method;
  free_codec(&e->z, d->nworkers);
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

/* Every tau steps: synchronous, the centre broadcast from the master and
 * the elastic differences reduced to it (binomial trees rooted at the
 * master, rank p); asynchronous, each worker's model to the master and the
 * centre back. --compress (but fp32, which goes the plain way): each link's
 * encoded change instead, codec_bytes(n) a message; synchronous, the
 * centre's to each worker and each worker's back. */
static int add_tree_round(const train_config_t *c, const model_t *m, step_desc_t *out, int r,
                          int prev) {
  int p = c->workers, P = p + 1;
  for (int op = 0; op < 2 && prev != STEP_FAILED; op++) {
    size_t sent, received;
    coll_tree_bytes(op, P, p, r, m->nparams, &sent, &received);
    prev = step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = op ? "reduce" : "broadcast",
                                       .algo = "tree", .peer = -1, .group = P,
                                       .sent = (double)sent, .received = (double)received,
                                       .count = m->nparams, /* the simulator's tree */
                                       .every = c->decentral.tau, .after = prev});
  }
  return prev;
}

/* A message of E bytes each way between rank r and `peer`, every tau. */
static int add_exchange(const train_config_t *c, step_desc_t *out, int r, int peer, double E,
                        int prev) {
  return step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = "sendrecv", .peer = peer,
                                     .group = 2, .sent = E, .received = E, .every = c->decentral.tau,
                                     .after = prev});
}

static int easgd_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int p = c->workers, P = p + 1, sync = c->schedule == SCHEDULE_SYNC;
  int mirrored = c->compression.codec.kind != CODEC_NONE && !codec_lossless(&c->compression.codec);
  double E = mirrored ? (double)codec_bytes(&c->compression.codec, m->nparams)
                      : (double)m->nparams * sizeof(float);
  for (int r = 0; r < P; r++) {
    int prev = -1;
    if (r < p) prev = step_add_local_step(out, m, r, c->batch);
    if (sync && !mirrored) prev = add_tree_round(c, m, out, r, prev);
    else if (r < p) prev = add_exchange(c, out, r, p, E, prev);
    else if (sync) /* the master: the centre's change to each worker, theirs back */
      for (int k = 0; k < p && prev != STEP_FAILED; k++) prev = add_exchange(c, out, r, k, E, prev);
    else /* the master answers each worker's request in turn */
      prev = step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = "sendrecv", .peer = -1,
                                         .group = 2, .sent = p * E, .received = p * E,
                                         .every = c->decentral.tau, .after = prev});
    if (prev == STEP_FAILED) return -1;
  }
  return 0;
}

static int easgd_sync_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_MASTER, SCHEDULE_SYNC) && elastic_given(c);
}

static int easgd_async_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_MASTER, SCHEDULE_ASYNC);
}

const strategy_t STRATEGY_EASGD_SYNC = {
    .name = "synchronous EASGD",
    .paper = "Zhang, Choromanska & LeCun 2015, Deep learning with elastic averaging SGD",
    .axes = "master + sync + --alpha/--beta/--rho",
    .short_name = "EASGD",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_MIRRORS,
    .matches = easgd_sync_matches,
    .ranks = decentral_with_master,
    .run = strategy_easgd,
    .describe_step = easgd_describe_step,
};

const strategy_t STRATEGY_EASGD_ASYNC = {
    .name = "asynchronous EASGD",
    .paper = "Zhang, Choromanska & LeCun 2015; Kim et al. 2016 (DeepSpark's decaying rate)",
    .axes = "master + async",
    .short_name = "EASGD",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_MIRRORS,
    .matches = easgd_async_matches,
    .ranks = decentral_with_master,
    .run = strategy_easgd,
    .describe_step = easgd_describe_step,
};
