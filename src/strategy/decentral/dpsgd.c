/* D-PSGD (Lian et al. 2017; the taxonomy's Fig. 15): the workers form a
 * ring; at every step worker i sends w_i to both neighbours, computes its
 * gradient g_i at w_i meanwhile, receives w_{i-1} and w_{i+1}, and steps
 * from the mix of the three:
 *
 *   w_i <- (1 - 2W) w_i + W w_{i-1} + W w_{i+1}  - lr g_i(w_i)
 *
 * (W = --neighbor-weight, 1/3 by default: the plain mean; the optimizer's
 * own rule replaces "- lr g" when it has momentum etc.). Each step is a
 * rendezvous with the two neighbours only, and sums are taken in a fixed
 * order, so runs are bitwise repeatable. The consensus model is the mean
 * of the replicas.
 *
 * --compress CODEC: CHOCO-SGD (Koloskova et al. 2019), the gossip that
 * converges with compressed messages. Each worker keeps public copies x^
 * of its own model and its two neighbours', the same bits on both sides of
 * a link, and sends only the compressed change of its own:
 *   x_i <- x_i - lr g_i(x_i)                  (the optimizer's step)
 *   q_i = C(x_i - x^_i);  send q_i to both neighbours, receive theirs
 *   x^_j += decode(q_j)  for j = i and the two neighbours
 *   x_i <- x_i + gamma W ((x^_left - x^_i) + (x^_right - x^_i))
 * gamma = --consensus-step (1 with a lossless codec gives D-PSGD's mix
 * after the step). The copies' own tracking is the memory: no error
 * feedback on top. A message's size is fixed by the codec (threshold:T,
 * whose size varies, and PowerSGD and DGC are refused). */
#include <stdio.h>
#include <string.h>

#include "strategy/decentral/decentral.h"

typedef struct {
  decentral_t *d;
  float *from_left, *from_right;
  /* --compress: CHOCO-SGD's public copies (self, left, right), the
   * difference being encoded, and the three messages */
  float *copy[3], *diff, *scratch;
  uint8_t *enc[3];
  size_t enc_bytes;
} dpsgd_t;

static int mix_with_neighbours(dpsgd_t *s, comm_req_t **req) {
  decentral_t *d = s->d;
  worker_t *w = d->w;
  size_t n = w->model->nparams;
  float *params = w->model->params;
  double t0 = dt_now();
  if (comm_waitall(w->comm, 4, req) != 0) return dt_error_prefix("ring neighbours: ");
  float self = (float)(1 - 2 * w->cfg->decentral.neighbor_weight), nb = (float)w->cfg->decentral.neighbor_weight;
  for (size_t i = 0; i < n; i++)
    params[i] = self * params[i] + nb * s->from_left[i] + nb * s->from_right[i];
  w->timers.comm_exposed += dt_now() - t0;
  return 0;
}

/* Posts the exchange with the neighbours; params must not change until
 * the waits (the sends read them). Tags say the direction, so that with
 * two workers (left = right) the two messages are told apart. */
static int post_exchange(dpsgd_t *s, comm_req_t **req) {
  worker_t *w = s->d->w;
  int p = s->d->nworkers, me = w->rank;
  int left = (me + p - 1) % p, right = (me + 1) % p;
  size_t bytes = w->model->nparams * sizeof(float);
  const float *params = w->model->params;
  if (comm_irecv(w->comm, left, TAG_DPSGD_RIGHT, s->from_left, bytes, &req[0]) != 0 ||
      comm_irecv(w->comm, right, TAG_DPSGD_LEFT, s->from_right, bytes, &req[1]) != 0 ||
      comm_isend(w->comm, right, TAG_DPSGD_RIGHT, params, bytes, &req[2]) != 0 ||
      comm_isend(w->comm, left, TAG_DPSGD_LEFT, params, bytes, &req[3]) != 0)
    return dt_error_prefix("ring neighbours %d and %d: ", left, right);
  return 0;
}

/* CHOCO-SGD's exchange after the local step: my change against my public
 * copy, compressed, to both neighbours; every copy moves by what was sent;
 * then the gossip step towards the neighbours' copies. */
static int choco_exchange(dpsgd_t *s) {
  worker_t *w = s->d->w;
  const train_config_t *cfg = w->cfg;
  const codec_spec_t *codec = &cfg->compression.codec;
  int p = s->d->nworkers, me = w->rank;
  int left = (me + p - 1) % p, right = (me + 1) % p;
  size_t n = w->model->nparams, bytes = s->enc_bytes;
  float *x = w->model->params, *self = s->copy[0];
  for (size_t i = 0; i < n; i++) s->diff[i] = x[i] - self[i];
  uint64_t seed = rng_derive(cfg->seed ^ 0x63686f636fULL, (uint64_t)me, (uint64_t)w->step);
  codec_encode(codec, s->diff, n, seed, s->enc[0], s->scratch);
  comm_req_t *req[4];
  double t0 = dt_now();
  if (comm_irecv(w->comm, left, TAG_DPSGD_RIGHT, s->enc[1], bytes, &req[0]) != 0 ||
      comm_irecv(w->comm, right, TAG_DPSGD_LEFT, s->enc[2], bytes, &req[1]) != 0 ||
      comm_isend(w->comm, right, TAG_DPSGD_RIGHT, s->enc[0], bytes, &req[2]) != 0 ||
      comm_isend(w->comm, left, TAG_DPSGD_LEFT, s->enc[0], bytes, &req[3]) != 0)
    return dt_error_prefix("ring neighbours %d and %d: ", left, right);
  if (comm_waitall(w->comm, 4, req) != 0) return dt_error_prefix("ring neighbours: ");
  worker_comm_since(w, t0);
  const int from[3] = {me, left, right};
  for (int j = 0; j < 3; j++)
    if (codec_decode_add(codec, s->enc[j], bytes, n, s->copy[j]) != 0)
      return dt_error_prefix("rank %d: CHOCO-SGD: message from rank %d: ", me, from[j]);
  float g = (float)(cfg->decentral.consensus_step * cfg->decentral.neighbor_weight);
  for (size_t i = 0; i < n; i++)
    x[i] += g * ((s->copy[1][i] - self[i]) + (s->copy[2][i] - self[i]));
  return 0;
}

static int step(decentral_t *d, int64_t k) {
  dpsgd_t *s = d->method;
  size_t count;
  if (d->nworkers == 1) return decentral_local_step(d, k, &count, NULL);
  if (s->diff) {
    if (decentral_local_step(d, k, &count, NULL) != 0) return -1;
    return choco_exchange(s);
  }
  comm_req_t *req[4];
  double t0 = dt_now();
  if (post_exchange(s, req) != 0) return -1;
  if (decentral_gradient(d, k, &count, NULL) != 0) {
    comm_waitall(d->w->comm, 4, req);
    return -1;
  }
  if (mix_with_neighbours(s, req) != 0) return -1;
  d->w->timers.comm += dt_now() - t0; /* in flight during the gradient */
  worker_apply_update(d->w);
  return 0;
}

static int mean_params(decentral_t *d, float *out) {
  return decentral_weighted_sum(d, 1.0f / (float)d->nworkers, out);
}

static int extra_json(decentral_t *d, char *buf, size_t cap) {
  const train_config_t *cfg = d->w->cfg;
  char name[48] = "none";
  if (cfg->compression.codec.kind != CODEC_NONE) codec_format(&cfg->compression.codec, name, sizeof name);
  snprintf(buf, cap, ",\"neighbor_weight\":%.6g,\"compress\":\"%s\",\"consensus_step\":%.6g",
           cfg->decentral.neighbor_weight, name, cfg->decentral.consensus_step);
  return 0;
}

/* CHOCO-SGD: the public copies start as the model every replica starts
 * from, so they agree on both sides of each link from the first step. */
static int setup_choco(dpsgd_t *s) {
  const model_t *m = s->d->w->model;
  size_t n = m->nparams;
  s->enc_bytes = codec_bytes(&s->d->w->cfg->compression.codec, n);
  for (int j = 0; j < 3; j++) {
    if (!(s->copy[j] = dt_alloc_floats(n)) || !(s->enc[j] = dt_alloc(s->enc_bytes))) return -1;
    memcpy(s->copy[j], m->params, n * sizeof(float));
  }
  if (!(s->diff = dt_alloc_floats(n)) || !(s->scratch = dt_alloc_floats(n))) return -1;
  return 0;
}

static int setup(decentral_t *d) {
  dpsgd_t *s = d->method;
  s->d = d;
  if (d->w->cfg->compression.codec.kind != CODEC_NONE && d->nworkers > 1) return setup_choco(s);
  s->from_left = dt_alloc_floats(d->w->model->nparams);
  s->from_right = dt_alloc_floats(d->w->model->nparams);
  return s->from_left && s->from_right ? 0 : -1;
}

static void teardown(decentral_t *d) {
  dpsgd_t *s = d->method;
  dt_free(s->from_left);
  dt_free(s->from_right);
  for (int j = 0; j < 3; j++) dt_free(s->copy[j]), dt_free(s->enc[j]);
  dt_free(s->diff), dt_free(s->scratch);
}

static const decentral_ops_t DPSGD = {
    .consensus = "average", .setup = setup, .teardown = teardown, .step = step,
    .consensus_params = mean_params, .extra_json = extra_json};

int strategy_dpsgd(worker_t *w) {
  dpsgd_t s = {0};
  return decentral_strategy(w, &DPSGD, 0, &s);
}

/* Each step: the local gradient step, the model to both ring neighbours
 * and theirs back (S each way each), then the mix. CHOCO-SGD (--compress):
 * the encoded change instead, codec_bytes(n) each way to each neighbour. */
static int dpsgd_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int p = c->workers;
  double S = c->compression.codec.kind != CODEC_NONE ? (double)codec_bytes(&c->compression.codec, m->nparams)
                                            : (double)m->nparams * sizeof(float);
  for (int r = 0; r < p; r++) {
    int prev = step_add_local_step(out, m, r, c->batch);
    int nb[2] = {(r + p - 1) % p, (r + 1) % p}, mixed = prev;
    for (int k = 0; k < 2 && p > 1 && prev != STEP_FAILED; k++)
      mixed = step_add(out, (step_task_t){TASK_COMM, r, -1, .pattern = "sendrecv", .peer = nb[k],
                                          .group = 2, .sent = S, .received = S, .after = prev});
    if (mixed == STEP_FAILED ||
        step_add(out, (step_task_t){TASK_SYNC, r, -1, m->nparams, .peer = -1, .after = mixed}) ==
            STEP_FAILED)
      return -1;
  }
  return 0;
}

static int dpsgd_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_NEIGHBORS, SCHEDULE_SYNC);
}

const strategy_t STRATEGY_DPSGD = {
    .name = "D-PSGD",
    .paper = "Lian et al. 2017; with --compress, Koloskova et al. 2019 (CHOCO-SGD)",
    .axes = "neighbors + sync",
    .short_name = "D-PSGD's compressed gossip (CHOCO-SGD)",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_MIRRORS,
    .matches = dpsgd_matches,
    .run = strategy_dpsgd,
    .describe_step = dpsgd_describe_step,
};
