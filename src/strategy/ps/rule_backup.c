/* backup:B, synchronous with backup workers (Chen et al. 2016). A step
 * takes the first N - B pushes computed on the current version, summed in
 * worker order, with the lr of the earliest batch among them; a push that
 * comes later was computed on an older version and is dropped (counted).
 * Each server decides on its own which pushes a step takes, as
 * TensorFlow's per-variable accumulators do. The end of an epoch applies
 * a partial step. The run goes on without at most B stopped workers. */
#include <stdlib.h>

#include "strategy/ps/ps_server.h"

typedef struct {
  int accepted; /* gradients of the coming step */
} backup_t;

static int backups(const ps_server_t *s) { return (int)s->cfg->schedule_param; }

static int backup_init(ps_server_t *s) {
  if (!(s->rule_state = calloc(1, sizeof(backup_t)))) return dt_error("out of memory");
  return 0;
}

static int backup_push(ps_server_t *s, int src, const ps_req_t *req) {
  backup_t *b = s->rule_state;
  ps_worker_state_t *ws = &s->workers[src];
  if (req->version > s->version)
    return ps_server_reject(s, src, req, "gradient computed on version %lld, which this server "
                            "has not made yet (%lld)", (long long)req->version,
                            (long long)s->version);
  if (req->version < s->version) { /* too late: the step was taken without it */
    if (!ps_server_drop_push(s, src, req)) return 0;
    ps_server_dropped(s, req->epoch);
    return ps_server_ack(s, src, req);
  }
  if (ws->push.held)
    return ps_server_reject(s, src, req, "worker %d pushed twice for version %lld", src,
                            (long long)req->version);
  if (!ps_server_store_push(s, src, req)) return 0;
  ws->push.held = 1;
  b->accepted++;
  return ps_server_ack(s, src, req);
}

/* PS_PULL_OWN: the worker's next pull waits for the step its push is in. */
static int backup_pull_ready(const ps_server_t *s, int src, const ps_req_t *req) {
  return !(req->flags & PS_PULL_OWN) || !s->workers[src].push.held;
}

/* Sums the accepted gradients in worker order; lr of the earliest batch. */
static void apply_step(ps_server_t *s) {
  backup_t *b = s->rule_state;
  float *g = NULL;
  int64_t first = -1;
  for (int w = 0; w < s->N; w++) {
    ps_worker_state_t *ws = &s->workers[w];
    if (!ws->push.held) continue;
    if (!g) g = ws->push.grad;
    else kern_add(s->len, ws->push.grad, g);
    if (first < 0 || ws->push.batch < first) first = ws->push.batch;
    ps_server_staleness(s, ws->push.epoch, ws->push.version);
    ws->push.held = 0;
  }
  b->accepted = 0;
  if (g) ps_server_step(s, g, ps_server_lr_of_batch(s, first));
}

static void backup_progress(ps_server_t *s) {
  const backup_t *b = s->rule_state;
  if (b->accepted >= s->N - backups(s)) apply_step(s);
}

static void backup_epoch_end(ps_server_t *s) {
  const backup_t *b = s->rule_state;
  if (b->accepted > 0) apply_step(s);
}

static int backup_may_lose(const ps_server_t *s, int w, double silent, int lost, int over) {
  int B = backups(s);
  if (lost + 1 > B && !over)
    return dt_error("worker %d has stopped (nothing heard from it for %.1f s) and %d had "
                    "before; backup:%d goes on without at most %d", w, silent, lost, B, B);
  return 0;
}

/* A pull waits for the step its worker's push is in: N - B pushes (the
 * held ones are the step's so far), named by who has not pushed yet. */
static void backup_held_for(const ps_server_t *s, const ps_req_t *req, char *buf, size_t cap) {
  int need = s->N - backups(s), have = 0;
  for (int w = 0; w < s->N; w++) have += s->workers[w].push.held != 0;
  size_t n = (size_t)snprintf(buf, cap, "for %d more push%s of this step (%d of the %d it takes), "
                              "from workers", need - have, need - have == 1 ? "" : "es", have, need);
  for (int w = 0, k = 0; w < s->N && n < cap; w++)
    if (!s->workers[w].push.held && !s->workers[w].dead)
      n += (size_t)snprintf(buf + n, cap - n, "%s %d", k++ ? "," : "", w);
}

const ps_rule_ops_t ps_rule_backup = {
    .pool = 1, .init = backup_init, .push = backup_push, .pull_ready = backup_pull_ready,
    .progress = backup_progress, .epoch_end = backup_epoch_end, .may_lose = backup_may_lose,
    .held_for = backup_held_for};
