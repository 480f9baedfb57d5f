/* async: Downpour (Dean et al. 2012). Every push is applied on arrival
 * with the lr of its batch, divided by its staleness under --staleness-lr,
 * its gradient corrected by DC-ASGD under --dc-asgd. ssp:inf is async.
 * Nothing waits, so the run goes on without a stopped worker.
 *
 * --drop-stale S: a push computed on a version more than S updates older
 * than this server's is dropped (counted in `dropped`) instead of applied:
 * the delay bound kept by rejecting the late update rather than by making
 * the fast workers wait (the taxonomy's alternative to SSP's blocking,
 * sec. 3.3.4). Each server decides on its own shard's versions. */
#include <math.h>
#include <stdlib.h>

#include "strategy/ps/ps_server.h"

/* DC-ASGD (Zheng et al. 2017, Algorithm 3): the server applies worker m's
 * mini-batch gradient g_m as
 *
 *   g_m + lambda g_m (.) g_m (.) (w_now - w_bak(m)),
 *
 * w_bak(m) being the model m last pulled (its snapshot here). A worker
 * pushes p = g_m / N (averaged over N x batch, ps_worker.c) and the step
 * is lr p = (lr / N) g_m: the paper's update with eta = lr / N. So the
 * corrected push is (g_m + lambda g_m g_m d) / N = p + lambda N p p d, the
 * paper's lambda acting on the paper's gradient whatever N is.
 *
 * DC-ASGD-a (--dc-asgd a:LAMBDA0): lambda_t = LAMBDA0 / sqrt(MeanSquare_t
 * + eps) per element, MeanSquare_t = m MeanSquare_{t-1} + (1 - m) g_m (.)
 * g_m over the pushes this server has received (its shard), m = 0.95,
 * eps = 1e-7, MeanSquare_0 = 0 (also after a resume).
 *
 * g is read from `in` and the corrected gradient written to `out` (the
 * same array, or a scratch one). */
#define DC_MEAN_SQUARE_DECAY 0.95f
#define DC_EPS 1e-7f

static void compensate_delay(ps_server_t *s, int w, const float *in, float *out) {
  const float *now = s->params, *then = s->workers[w].snapshot;
  float n = (float)s->N, lambda_n = (float)s->cfg->ps.dc_asgd * n;
  if (!s->cfg->ps.dc_asgd_adaptive) {
    for (size_t i = 0; i < s->len; i++) out[i] = in[i] + lambda_n * in[i] * in[i] * (now[i] - then[i]);
    return;
  }
  float *ms = s->dc_mean_square, m = DC_MEAN_SQUARE_DECAY;
  for (size_t i = 0; i < s->len; i++) {
    float g = in[i], gm = n * g;
    ms[i] = m * ms[i] + (1 - m) * gm * gm;
    out[i] = g + lambda_n / sqrtf(ms[i] + DC_EPS) * g * g * (now[i] - then[i]);
  }
}

int ps_rule_async_init(ps_server_t *s) {
  if (s->cfg->ps.dc_asgd > 0 && s->cfg->ps.dc_asgd_adaptive && !s->dc_mean_square &&
      !(s->dc_mean_square = dt_alloc_floats(s->len)))
    return -1;
  return 0;
}

void ps_rule_step_async(ps_server_t *s, int w, float *out) {
  ps_worker_state_t *ws = &s->workers[w];
  float *g = ws->push.grad;
  int64_t staleness = s->version - ws->push.version;
  double lr = ps_server_lr_of_batch(s, ws->push.batch);
  if (s->cfg->ps.staleness_lr && staleness > 1) lr /= (double)staleness;
  if (s->cfg->ps.dc_asgd > 0) {
    compensate_delay(s, w, g, out);
    g = out;
  }
  ps_server_step(s, g, lr);
}

void ps_rule_apply_async(ps_server_t *s, int w) {
  ps_worker_state_t *ws = &s->workers[w];
  ps_server_staleness(s, ws->push.epoch, ws->push.version);
  ws->push.held = 0;
  ps_rule_step_async(s, w, ws->push.grad);
}

static int async_push(ps_server_t *s, int src, const ps_req_t *req) {
  if (s->cfg->ps.drop_stale >= 0 && s->version - req->version > s->cfg->ps.drop_stale) {
    if (!ps_server_drop_push(s, src, req)) return 0;
    ps_server_dropped(s, req->epoch);
    return ps_server_ack(s, src, req);
  }
  if (!ps_server_store_push(s, src, req)) return 0;
  ps_rule_apply_async(s, src);
  return ps_server_ack(s, src, req);
}

const ps_rule_ops_t ps_rule_async = {
    .pool = 1, .init = ps_rule_async_init, .push = async_push};
