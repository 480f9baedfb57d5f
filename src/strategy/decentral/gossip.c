/* GoSGD (Blot et al. 2016; the taxonomy's Fig. 17): sum-weighted gossip.
 * Worker i holds a weight a_i, 1/p at the start. Before each step it
 * merges every model that has arrived,
 *
 *   w_i <- (a_i w_i + a_j w_j) / (a_i + a_j),   a_i <- a_i + a_j,
 *
 * then takes its step, then with probability p (--exchange gossip:p)
 * halves a_i and sends <w_i, a_i> to a peer drawn uniformly from the
 * others. No barrier: receives are polled between steps (peer_mail.c).
 * Mass is conserved: sum a_i plus the weights in flight is 1, and sum
 * a_i w_i plus the weighted models in flight does not change by gossip,
 * so with lr = 0 every replica tends to the mean of the starting points.
 * At each evaluation the messages in flight are drained (then sum a_i =
 * 1) and the consensus is the weighted mean sum a_i w_i / sum a_i.
 * Which peer receives when depends on timing: runs may differ. */
#include <stdio.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

#define HEADER_FLOATS 2   /* the sender's weight, a double, ahead of the model */

typedef struct {
  decentral_t *d;
  peer_mail_t mail;
  double alpha;                    /* this worker's weight */
  double alpha_sent, alpha_received;
  rng_t rng;
  int64_t sent, received;
  double before[4];                /* at the epoch's end, before the drain */
  /* the last evaluation, summed over workers */
  double sum_alpha, sum_alpha_before, in_flight_alpha;
  int64_t messages, in_flight;
} gossip_t;

static int merge(void *ctx, int src, const void *in) {
  gossip_t *g = ctx;
  const float *msg = in;
  model_t *m = g->d->w->model;
  double a;
  memcpy(&a, msg, sizeof a);
  double total = g->alpha + a;
  kern_scale(m->nparams, (float)(g->alpha / total), m->params);
  kern_axpy(m->nparams, (float)(a / total), msg + HEADER_FLOATS, m->params);
  g->alpha = total;
  g->alpha_received += a;
  g->received++;
  return 0;
}

static int send_to_random_peer(gossip_t *g) {
  decentral_t *d = g->d;
  worker_t *w = d->w;
  if (mail_snapshot(&g->mail) != 0) return -1;
  float *buf = g->mail.sbuf[0];
  g->alpha /= 2;
  memcpy(buf, &g->alpha, sizeof g->alpha);
  kern_copy(w->model->nparams, w->model->params, buf + HEADER_FLOATS);
  int peer = (int)rng_below(&g->rng, (uint32_t)d->nworkers - 1);
  if (peer >= w->rank) peer++;
  g->alpha_sent += g->alpha;
  g->sent++;
  return mail_send(&g->mail, peer, 0);
}

static int step(decentral_t *d, int64_t k) {
  gossip_t *g = d->method;
  worker_t *w = d->w;
  if (mail_poll_then_step(&g->mail, d, k) != 0) return -1;
  if (d->nworkers < 2 || rng_uniform(&g->rng) >= w->cfg->gossip_p) return 0;
  double t0 = dt_now();
  int rc = send_to_random_peer(g);
  worker_comm_since(w, t0);
  return rc;
}

/* No collective may come before the drain: a peer blocked in one would
 * stop taking models. So the mass before it (weights held + in flight) is
 * recorded here and summed with the consensus, after it. */
static int drain(decentral_t *d) {
  gossip_t *g = d->method;
  double t0 = dt_now();
  g->before[0] = g->alpha;
  g->before[1] = g->alpha_sent - g->alpha_received;
  g->before[2] = (double)g->sent;
  g->before[3] = (double)g->received;
  int rc = mail_drain(&g->mail);
  worker_comm_since(d->w, t0);
  return rc;
}

/* sum a_i w_i / sum a_i, and the sums of the weights for the metrics. */
static int weighted_mean(decentral_t *d, float *out) {
  gossip_t *g = d->method;
  double mine[5] = {g->alpha, g->before[0], g->before[1], g->before[2], g->before[3]}, sums[5];
  if (decentral_sum_doubles(d, mine, 5, sums) != 0) return -1;
  g->sum_alpha = sums[0];
  g->sum_alpha_before = sums[1];
  g->in_flight_alpha = sums[2];
  g->messages = (int64_t)sums[3];
  g->in_flight = (int64_t)sums[3] - (int64_t)sums[4];
  if (decentral_weighted_sum(d, (float)g->alpha, out) != 0) return -1;
  kern_scale(d->w->model->nparams, (float)(1 / g->sum_alpha), out);
  return 0;
}

static int extra_json(decentral_t *d, char *buf, size_t cap) {
  gossip_t *g = d->method;
  snprintf(buf, cap,
           ",\"gossip_p\":%.6g,\"alpha_sum\":%.15g,\"alpha_sum_before_drain\":%.15g,"
           "\"alpha_in_flight\":%.15g,\"messages\":%lld,\"messages_in_flight\":%lld",
           d->w->cfg->gossip_p, g->sum_alpha, g->sum_alpha_before, g->in_flight_alpha,
           (long long)g->messages, (long long)g->in_flight);
  return 0;
}

static int setup(decentral_t *d) {
  gossip_t *g = d->method;
  worker_t *w = d->w;
  g->d = d;
  g->alpha = 1.0 / d->nworkers;
  rng_seed(&g->rng, rng_derive(w->cfg->seed, 0x6055, (uint64_t)w->rank));
  return mail_open(&g->mail, w->comm, TAG_GOSSIP_MODEL, TAG_GOSSIP_END,
                   (w->model->nparams + HEADER_FLOATS) * sizeof(float), 1, w->cfg->net.timeout,
                   merge, g);
}

static void teardown(decentral_t *d) {
  gossip_t *g = d->method;
  mail_close(&g->mail);
}

static const decentral_ops_t GOSSIP = {
    .consensus = "weighted-average", .setup = setup, .teardown = teardown, .step = step,
    .before_eval = drain, .consensus_params = weighted_mean, .extra_json = extra_json};

int strategy_gossip(worker_t *w) {
  gossip_t g = {0};
  return decentral_strategy(w, &GOSSIP, 0, &g);
}
