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
 * Which peer receives when depends on timing: runs may differ.
 *
 * --compress CODEC: the model goes as the encoded change since that peer
 * last heard from this worker, a mirror a link as EASGD's (easgd.c), and a
 * model that comes is merged through this worker's copy of the sender's.
 * Both ends of a link hold the same copy; the weights go exact, so their
 * mass is conserved, and sum a_i w_i is, less what the codecs have not yet
 * sent (the copies' lag, carried by the mirrors to the next message on the
 * same link). Memory: 2 (p - 1) n floats a worker. fp32 goes the plain way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

#define HEADER_FLOATS 2   /* the sender's weight, a double, ahead of the model */

/* A message: the weight, then the model (mail_model_bytes). */
static size_t message_bytes(const codec_spec_t *codec, size_t nparams) {
  return HEADER_FLOATS * sizeof(float) + mail_model_bytes(codec, nparams);
}

/* --compress: per peer j, this model as j holds it, and j's as held here. */
typedef struct {
  codec_spec_t codec;     /* CODEC_NONE: models go whole */
  float **to, **from;     /* [p], NULL at this rank */
  int64_t *sent;          /* [p]: messages sent to each (the codec's seed) */
  float *scratch;         /* 2 n floats (mirror_encode's) */
  uint64_t seed;
} gossip_codec_t;

typedef struct {
  decentral_t *d;
  gossip_codec_t z;
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

/* The sender's model: the message's, or, compressed, this worker's copy
 * of it with the message's change added. */
static const float *peer_model(gossip_t *g, int src, const float *body) {
  gossip_codec_t *z = &g->z;
  if (z->codec.kind == CODEC_NONE) return body;
  size_t n = g->d->w->model->nparams;
  if (mirror_decode(&z->codec, body, g->mail.bytes - HEADER_FLOATS * sizeof(float), n,
                    z->from[src]) != 0) {
    dt_error_prefix("GoSGD: the model from rank %d: ", src);
    return NULL;
  }
  return z->from[src];
}

static int merge(void *ctx, int src, const void *in) {
  gossip_t *g = ctx;
  const float *msg = in;
  model_t *m = g->d->w->model;
  double a;
  memcpy(&a, msg, sizeof a);
  const float *x = peer_model(g, src, msg + HEADER_FLOATS);
  if (!x) return -1;
  double total = g->alpha + a;
  kern_scale(m->nparams, (float)(g->alpha / total), m->params);
  kern_axpy(m->nparams, (float)(a / total), x, m->params);
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
  gossip_codec_t *z = &g->z;
  size_t n = w->model->nparams;
  int peer = (int)rng_below(&g->rng, (uint32_t)d->nworkers - 1);
  if (peer >= w->rank) peer++;
  g->alpha /= 2;
  memcpy(buf, &g->alpha, sizeof g->alpha);
  if (z->codec.kind == CODEC_NONE) {
    kern_copy(n, w->model->params, buf + HEADER_FLOATS);
  } else {
    mirror_encode(&z->codec, w->model->params, z->to[peer], n,
                  mirror_seed(z->seed, w->rank, peer, z->sent[peer]++, 0), buf + HEADER_FLOATS,
                  z->scratch);
  }
  g->alpha_sent += g->alpha;
  g->sent++;
  return mail_send(&g->mail, peer, 0);
}

static int step(decentral_t *d, int64_t k) {
  gossip_t *g = d->method;
  worker_t *w = d->w;
  if (mail_poll_then_step(&g->mail, d, k) != 0) return -1;
  if (d->nworkers < 2 || rng_uniform(&g->rng) >= w->cfg->decentral.gossip_p) return 0;
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
           "\"alpha_in_flight\":%.15g,\"messages\":%lld,\"messages_in_flight\":%lld,"
           "\"rank0_messages_sent\":%lld,\"rank0_messages_received\":%lld",
           d->w->cfg->decentral.gossip_p, g->sum_alpha, g->sum_alpha_before, g->in_flight_alpha,
           (long long)g->messages, (long long)g->in_flight, (long long)g->sent,
           (long long)g->received);
  return 0;
}

static float *copy_of(const model_t *m) { return dt_dup_floats(m->params, m->nparams); }

/* --compress: every copy starts as the model, which all ranks hold alike
 * at the start (seeded, or the checkpoint resumed). */
static int setup_codec(gossip_t *g) {
  gossip_codec_t *z = &g->z;
  worker_t *w = g->d->w;
  int P = g->d->nworkers;
  z->codec = w->cfg->compression.codec;
  z->seed = w->cfg->seed ^ 0x676f737369707a21ull;
  z->to = calloc((size_t)P, sizeof *z->to);
  z->from = calloc((size_t)P, sizeof *z->from);
  z->sent = calloc((size_t)P, sizeof *z->sent);
  if (!z->to || !z->from || !z->sent) return dt_error("out of memory (GoSGD)");
  if (!(z->scratch = dt_alloc_floats(2 * w->model->nparams))) return -1;
  for (int r = 0; r < P; r++)
    if (r != w->rank && (!(z->to[r] = copy_of(w->model)) || !(z->from[r] = copy_of(w->model))))
      return -1;
  return 0;
}

static void free_codec(gossip_codec_t *z, int P) {
  for (int r = 0; z->to && r < P; r++) dt_free(z->to[r]);
  for (int r = 0; z->from && r < P; r++) dt_free(z->from[r]);
  free(z->to), free(z->from), free(z->sent);
  dt_free(z->scratch);
}

static int setup(decentral_t *d) {
  gossip_t *g = d->method;
  worker_t *w = d->w;
  g->d = d;
  g->alpha = 1.0 / d->nworkers;
  rng_seed(&g->rng, rng_derive(w->cfg->seed, 0x6055, (uint64_t)w->rank));
  const codec_spec_t *k = &w->cfg->compression.codec;
  if (k->kind != CODEC_NONE && !codec_lossless(k) && setup_codec(g) != 0) return -1;
  return mail_open(&g->mail, w->comm, TAG_GOSSIP_MODEL, TAG_GOSSIP_END,
                   message_bytes(k, w->model->nparams), 1, w->cfg->net.timeout, merge, g);
}

static void teardown(decentral_t *d) {
  gossip_t *g = d->method;
  mail_close(&g->mail);
  free_codec(&g->z, d->nworkers);
}

static const decentral_ops_t GOSSIP = {
    .consensus = "weighted-average", .setup = setup, .teardown = teardown, .step = step,
    .before_eval = drain, .consensus_params = weighted_mean, .extra_json = extra_json};

int strategy_gossip(worker_t *w) {
  gossip_t g = {0};
  return decentral_strategy(w, &GOSSIP, 0, &g);
}

/* Per worker: its local step; then, with probability p, its message to
 * one of the others drawn at random; in expectation it receives as many
 * (each of the others sends it one with probability p / (workers - 1)).
 * The coin makes the counts random: the bytes are per message, expected
 * p of them each way a step (the metrics count rank 0's). The drain
 * leaves nothing in flight; its own counts once an epoch. */
static int gossip_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int p = c->workers;
  double M = (double)message_bytes(&c->compression.codec, m->nparams);
  for (int r = 0; r < p; r++) {
    int step = step_add_local_step(out, m, r, c->batch), prev = step;
    for (int to = 1; to >= 0 && p > 1 && prev != STEP_FAILED; to--)
      prev = step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = to ? "send" : "recv",
                                         .peer = -1, .group = 2, .sent = to ? M : 0,
                                         .received = to ? 0 : M, .after = step, .expected = 1,
                                         .chance = c->decentral.gossip_p});
    if (prev == STEP_FAILED || mail_describe_drain(out, r, p) == STEP_FAILED) return -1;
  }
  return 0;
}

static int gossip_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_GOSSIP, SCHEDULE_ASYNC);
}

const strategy_t STRATEGY_GOSSIP = {
    .name = "GoSGD (gossip)",
    .paper = "Blot et al. 2016, Gossip training for deep learning",
    .axes = "gossip:p + async",
    .short_name = "GoSGD",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_MIRRORS,
    .matches = gossip_matches,
    .run = strategy_gossip,
    .describe_step = gossip_describe_step,
};
