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
 * of the replicas. */
#include <stdio.h>

#include "strategy/decentral/decentral.h"

typedef struct {
  decentral_t *d;
  float *from_left, *from_right;
} dpsgd_t;

static int mix_with_neighbours(dpsgd_t *s, comm_req_t **req) {
  decentral_t *d = s->d;
  worker_t *w = d->w;
  size_t n = w->model->nparams;
  float *params = w->model->params;
  double t0 = dt_now();
  if (comm_waitall(w->comm, 4, req) != 0) return dt_error_prefix("ring neighbours: ");
  float self = (float)(1 - 2 * w->cfg->neighbor_weight), nb = (float)w->cfg->neighbor_weight;
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

static int step(decentral_t *d, int64_t k) {
  dpsgd_t *s = d->method;
  size_t count;
  if (d->nworkers == 1) return decentral_local_step(d, k, &count, NULL);
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
  snprintf(buf, cap, ",\"neighbor_weight\":%.6g", d->w->cfg->neighbor_weight);
  return 0;
}

static int setup(decentral_t *d) {
  dpsgd_t *s = d->method;
  s->d = d;
  s->from_left = dt_alloc_floats(d->w->model->nparams);
  s->from_right = dt_alloc_floats(d->w->model->nparams);
  return s->from_left && s->from_right ? 0 : -1;
}

static void teardown(decentral_t *d) {
  dpsgd_t *s = d->method;
  dt_free(s->from_left);
  dt_free(s->from_right);
}

static const decentral_ops_t DPSGD = {
    .consensus = "average", .setup = setup, .teardown = teardown, .step = step,
    .consensus_params = mean_params, .extra_json = extra_json};

int strategy_dpsgd(worker_t *w) {
  dpsgd_t s = {0};
  return decentral_strategy(w, &DPSGD, 0, &s);
}
