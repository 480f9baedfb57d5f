/* async: Downpour (Dean et al. 2012). Every push is applied on arrival
 * with the lr of its batch, divided by its staleness under --staleness-lr,
 * its gradient corrected by DC-ASGD under --dc-asgd. ssp:inf is async.
 * Nothing waits, so the run goes on without a stopped worker. */
#include "strategy/ps/ps_server.h"

/* DC-ASGD (Zheng et al. 2017): g + lambda g*g*(w_now - w_then), w_then
 * being what the worker pulled last. */
static void compensate_delay(ps_server_t *s, int w, float *g) {
  float lambda = (float)s->cfg->dc_asgd;
  const float *now = s->params, *then = s->workers[w].snapshot;
  for (size_t i = 0; i < s->len; i++) g[i] += lambda * g[i] * g[i] * (now[i] - then[i]);
}

void ps_rule_apply_async(ps_server_t *s, int w) {
  ps_worker_state_t *ws = &s->workers[w];
  float *g = ws->push.grad;
  int64_t staleness = s->version - ws->push.version;
  double lr = ps_server_lr_of_batch(s, ws->push.batch);
  if (s->cfg->staleness_lr && staleness > 1) lr /= (double)staleness;
  if (s->cfg->dc_asgd > 0) compensate_delay(s, w, g);
  ps_server_staleness(s, ws->push.epoch, ws->push.version);
  ws->push.held = 0;
  ps_server_step(s, g, lr);
}

static int async_push(ps_server_t *s, int src, const ps_req_t *req) {
  if (!ps_server_store_push(s, src, req)) return 0;
  ps_rule_apply_async(s, src);
  return ps_server_ack(s, src, req);
}

const ps_rule_ops_t ps_rule_async = {
    .pool = 1, .push = async_push};
