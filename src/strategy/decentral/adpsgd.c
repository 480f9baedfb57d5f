/* AD-PSGD (Lian, Zhang, Zhang & Liu 2018, "Asynchronous Decentralized
 * Parallel Stochastic Gradient Descent", Algorithm 1 and its bipartite
 * implementation). Every iteration a worker averages its model atomically
 * with one neighbour drawn at random and applies a gradient computed on a
 * model that may be stale; no rank ever waits for a barrier.
 *
 * Deadlock is avoided as the paper does: the ranks are split in two sets,
 * active (odd ranks) and passive (even ranks), and the graph keeps only the
 * ring's edges between the two (with an odd number of workers the edge
 * p-1 -- 0 joins two passive ranks and is left out). Only an active worker
 * starts an exchange, and only with a passive neighbour:
 *
 *   active i, each step: if the reply to its last request has come,
 *     x_i <- x_i + (x_j - s_i) / 2              (s_i: the model it sent)
 *   then, with no request in flight, it sends s_i = x_i to a random passive
 *   neighbour j; then x_i <- x_i - lr g_i(x_i).
 *   passive j, between its steps, for each request s_i that has arrived:
 *     reply with x_j, then x_j <- (x_j + s_i) / 2.
 *
 * Both sides move by (x_j - s_i)/2 in opposite directions: the pair's sum
 * is unchanged, so the averaging matrix W_k is doubly stochastic, and in
 * the paper's logical order the average of s_i and x_j happens at the
 * moment j serves it, the gradient steps i took since s_i coming after it
 * (gradients of a stale model, as Algorithm 1 allows). A request is in
 * flight during one active step: its computation hides the round trip.
 * Requests go through the peer mailbox (peer_mail.c), whose drain at an
 * epoch's end leaves nothing in flight; replies on a tag of their own, one
 * buffer per neighbour on the passive side (an active has at most one
 * request in flight). The paper gives each worker a communication thread;
 * here the step's layers test the messages in flight between them
 * (progress), which is what moves a large message under mpi. The
 * consensus is the mean of the replicas, which the averages keep; runs
 * may differ (message timing). */
#include <stdio.h>

#include "strategy/decentral/decentral.h"

typedef struct {
  decentral_t *d;
  peer_mail_t mail;            /* requests: an active worker's model, to a passive one */
  int active;
  int nb[2], nnb;              /* neighbours in the other set */
  rng_t rng;
  /* active: the request in flight */
  comm_req_t *reply_req;
  int peer;
  float *reply;
  /* passive: a reply buffer and its send per neighbour */
  float *out[2];
  comm_req_t *out_req[2];
  int failed;                  /* a reply could not be sent (inside the mail merge) */
  int64_t exchanges;           /* averages completed on this rank */
  int64_t total;               /* the last evaluation: all ranks' averages / 2 */
} adpsgd_t;

/* A request and a reply alike: the whole model. */
static size_t model_bytes(const model_t *m) { return m->nparams * sizeof(float); }

void adpsgd_passive_average(size_t n, float *x, const float *request, float *reply) {
  for (size_t i = 0; i < n; i++) {
    reply[i] = x[i];
    x[i] = 0.5f * (x[i] + request[i]);
  }
}

void adpsgd_active_average(size_t n, float *x, const float *sent, const float *reply) {
  for (size_t i = 0; i < n; i++) x[i] += 0.5f * (reply[i] - sent[i]);
}

int adpsgd_neighbours(int rank, int p, int nb[2]) {
  int n = 0;
  int ring[2] = {(rank + p - 1) % p, (rank + 1) % p};
  for (int k = 0; k < 2; k++) {
    int r = ring[k];
    if (r == rank || r % 2 == rank % 2 || (n == 1 && nb[0] == r)) continue;
    nb[n++] = r;
  }
  return n;
}

/* A request from an active neighbour: reply with this replica, then
 * average. The previous reply to that neighbour was taken before it sent
 * this request, so the wait is only the send's completion. */
static int serve(void *ctx, int src, const void *msg) {
  adpsgd_t *s = ctx;
  worker_t *w = s->d->w;
  size_t n = w->model->nparams;
  int slot = src == s->nb[0] ? 0 : 1;
  if (s->failed) return 0; /* failures: s->failed, checked by the caller */
  if (s->out_req[slot]) {
    comm_req_t *r = s->out_req[slot];
    s->out_req[slot] = NULL;
    if (comm_wait(w->comm, r) != 0) {
      s->failed = dt_error_prefix("AD-PSGD: reply to rank %d: ", src);
      return 0;
    }
  }
  adpsgd_passive_average(n, w->model->params, msg, s->out[slot]);
  s->exchanges++;
  if (comm_isend(w->comm, src, TAG_ADPSGD_REPLY, s->out[slot], model_bytes(w->model), &s->out_req[slot]) != 0)
    s->failed = dt_error_prefix("AD-PSGD: reply to rank %d: ", src);
  return 0;
}

/* Active: the reply has come; average with it. */
static int take_reply(adpsgd_t *s) {
  worker_t *w = s->d->w;
  comm_req_t *r = s->reply_req;
  s->reply_req = NULL;
  if (comm_wait(w->comm, r) != 0) return dt_error_prefix("AD-PSGD: reply from rank %d: ", s->peer);
  adpsgd_active_average(w->model->nparams, w->model->params, s->mail.sbuf[0], s->reply);
  s->exchanges++;
  return 0;
}

/* Active: this replica to a random passive neighbour, the reply's receive
 * posted first. */
static int request(adpsgd_t *s) {
  worker_t *w = s->d->w;
  size_t n = w->model->nparams;
  if (mail_snapshot(&s->mail) != 0) return -1;
  kern_copy(n, w->model->params, s->mail.sbuf[0]);
  s->peer = s->nb[s->nnb > 1 ? rng_below(&s->rng, (uint32_t)s->nnb) : 0];
  if (comm_irecv(w->comm, s->peer, TAG_ADPSGD_REPLY, s->reply, model_bytes(w->model), &s->reply_req) != 0)
    return dt_error_prefix("AD-PSGD: reply from rank %d: ", s->peer);
  return mail_send(&s->mail, s->peer, 0);
}

static int active_exchange(adpsgd_t *s) {
  if (s->reply_req) {
    int done;
    if (comm_test(s->d->w->comm, s->reply_req, &done) != 0) return -1;
    if (!done) return 0;
    if (take_reply(s) != 0) return -1;
  }
  return request(s);
}

/* Between layers: the messages in flight are tested, nothing is merged
 * (the replica must not change inside its own step). Errors show at the
 * next poll. */
static void progress(adpsgd_t *s) {
  int done;
  mail_progress(&s->mail);
  if (s->reply_req) comm_test(s->d->w->comm, s->reply_req, &done);
  for (int j = 0; j < 2; j++)
    if (s->out_req[j]) comm_test(s->d->w->comm, s->out_req[j], &done);
}
static void progress_at_layer(void *ctx, int layer) { progress(ctx); }

/* Gradient and optimizer step, the messages progressing in between. */
static int local_step(adpsgd_t *s, int64_t k) {
  worker_t *w = s->d->w;
  size_t begin, count, all;
  step_hooks_t hooks = {.wait = progress_at_layer, .ready = progress_at_layer, .ctx = s};
  worker_step_slice(w, k, &begin, &count, &all);
  if (worker_compute_gradient(w, begin, count, count ? (int)count : 1, &hooks) != 0) return -1;
  worker_apply_update(w);
  return 0;
}

static int step(decentral_t *d, int64_t k) {
  adpsgd_t *s = d->method;
  worker_t *w = d->w;
  double t0 = dt_now();
  if (s->nnb > 0 && !s->active && mail_poll(&s->mail, NULL) != 0) return -1;
  if (s->nnb > 0 && s->active && active_exchange(s) != 0) return -1;
  if (s->failed) return -1;
  w->timers.comm += dt_now() - t0; /* merges; the round trips are hidden by the steps */
  return local_step(s, k);
}

/* Active: the request in flight is answered before the drain (its passive
 * peer serves requests in its steps and in its drain alike). */
static int await_reply(adpsgd_t *s) {
  double last = dt_now();
  while (s->reply_req) {
    int done;
    if (comm_test(s->d->w->comm, s->reply_req, &done) != 0) return -1;
    if (done) return take_reply(s);
    if (dt_now() - last >= s->mail.timeout)
      return dt_error("AD-PSGD: no reply for %g s (rank %d has not served this rank's request)",
                      s->mail.timeout, s->peer);
    dt_sleep_until(dt_now() + 50e-6);
  }
  return 0;
}

/* Passive: the replies sent have all been taken once every active
 * neighbour has drained (it drains only after its reply came). */
static int finish_replies(adpsgd_t *s) {
  for (int j = 0; j < 2; j++)
    if (s->out_req[j]) {
      comm_req_t *r = s->out_req[j];
      s->out_req[j] = NULL;
      if (comm_wait(s->d->w->comm, r) != 0) return dt_error_prefix("AD-PSGD: reply to rank %d: ", s->nb[j]);
    }
  return 0;
}

static int drain(decentral_t *d) {
  adpsgd_t *s = d->method;
  double t0 = dt_now();
  int rc = s->active ? await_reply(s) : 0;
  if (rc == 0) rc = mail_drain(&s->mail);
  if (rc == 0) rc = s->failed;
  if (rc == 0 && !s->active) rc = finish_replies(s);
  worker_comm_since(d->w, t0);
  return rc;
}

/* The mean of the replicas, and the averages done (each counted by both
 * of its ranks). */
static int mean_params(decentral_t *d, float *out) {
  adpsgd_t *s = d->method;
  double mine = (double)s->exchanges, sum;
  if (decentral_sum_doubles(d, &mine, 1, &sum) != 0) return -1;
  s->total = (int64_t)sum / 2;
  return decentral_weighted_sum(d, 1.0f / (float)d->nworkers, out);
}

static int extra_json(decentral_t *d, char *buf, size_t cap) {
  adpsgd_t *s = d->method;
  snprintf(buf, cap, ",\"active_workers\":%d,\"exchanges\":%lld,\"rank0_exchanges\":%lld",
           d->nworkers / 2, (long long)s->total, (long long)s->exchanges);
  return 0;
}

static int setup(decentral_t *d) {
  adpsgd_t *s = d->method;
  worker_t *w = d->w;
  size_t n = w->model->nparams;
  s->d = d;
  s->active = w->rank % 2 == 1;
  s->nnb = d->nworkers > 1 ? adpsgd_neighbours(w->rank, d->nworkers, s->nb) : 0;
  rng_seed(&s->rng, rng_derive(w->cfg->seed, 0xad95, (uint64_t)w->rank));
  if (s->active) {
    if (!(s->reply = dt_alloc_floats(n))) return -1;
  } else {
    for (int j = 0; j < s->nnb; j++)
      if (!(s->out[j] = dt_alloc_floats(n))) return -1;
  }
  return mail_open(&s->mail, w->comm, TAG_ADPSGD_REQUEST, TAG_ADPSGD_END, model_bytes(w->model), 1,
                   w->cfg->net.timeout, serve, s);
}

static void teardown(decentral_t *d) {
  adpsgd_t *s = d->method;
  comm_t *c = d->w->comm;
  if (s->reply_req) comm_cancel(c, s->reply_req);
  for (int j = 0; j < 2; j++)
    if (s->out_req[j]) comm_cancel(c, s->out_req[j]);
  mail_close(&s->mail);
  dt_free(s->reply);
  dt_free(s->out[0]);
  dt_free(s->out[1]);
}

static const decentral_ops_t ADPSGD = {
    .consensus = "average", .setup = setup, .teardown = teardown, .step = step,
    .before_eval = drain, .consensus_params = mean_params, .extra_json = extra_json};

int strategy_adpsgd(worker_t *w) {
  adpsgd_t s = {0};
  return decentral_strategy(w, &ADPSGD, 0, &s);
}

/* Per worker: its local step, and per neighbour in the other set one
 * exchange of models, a request (S) one way and its reply (S) back: an
 * active worker's to a neighbour drawn at random among its nnb, so each
 * with chance 1/nnb; a passive one's answer to each active neighbour,
 * with that neighbour's chance. One exchange per active step is the most
 * there can be (a request waits for the reply to the last), what runs
 * when the round trip hides behind a step: the bytes are per exchange,
 * expected at that rate (the metrics count rank 0's). The drain's counts
 * once an epoch. */
/* The chance that active worker `active` draws a given neighbour. */
static double pick_chance(int active, int p) {
  int nb[2];
  return 1.0 / adpsgd_neighbours(active, p, nb);
}

static int adpsgd_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int p = c->workers;
  double S = (double)model_bytes(m);
  for (int r = 0; r < p; r++) {
    int nb[2], nnb = p > 1 ? adpsgd_neighbours(r, p, nb) : 0;
    int step = step_add_local_step(out, m, r, c->batch), prev = step;
    for (int k = 0; k < nnb && prev != STEP_FAILED; k++)
      prev = step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = "sendrecv", .peer = nb[k],
                                         .group = 2, .sent = S, .received = S, .after = step,
                                         .expected = 1, .chance = pick_chance(r % 2 ? r : nb[k], p)});
    if (prev == STEP_FAILED || mail_describe_drain(out, r, p) == STEP_FAILED) return -1;
  }
  return 0;
}

static int adpsgd_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_NEIGHBORS, SCHEDULE_ASYNC);
}

const strategy_t STRATEGY_ADPSGD = {
    .name = "AD-PSGD (asynchronous D-PSGD)",
    .paper = "Lian et al. 2018, Asynchronous decentralized parallel SGD",
    .axes = "neighbors + async",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_REFUSED,
    .no_compress = "not with AD-PSGD (--schedule async --exchange neighbors), whose pairwise "
                   "averages keep the sum of the models only when exact; compressed gossip is "
                   "D-PSGD's (--schedule sync: CHOCO-SGD)",
    .matches = adpsgd_matches,
    .run = strategy_adpsgd,
    .describe_step = adpsgd_describe_step,
};
