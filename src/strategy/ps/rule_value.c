/* value:V, the value bound (the taxonomy's section 3.3.4, after Dai et al.
 * 2015's VAP): async, but an update that would leave a change of V or more
 * not yet seen by some worker is delayed until it no longer would.
 *
 * The models in use are the workers' snapshots (what each pulled last).
 * The invariant, per server on its shard (so also for the whole model's
 * infinity norm):
 *
 *   every update applied during an epoch leaves |w - s_u|_inf < V for the
 *   snapshot s_u of every live worker u, counting as w itself the snapshot
 *   of a worker whose whole-shard pull is answered with w: one that waits
 *   on this very update, or on nothing any more.
 *
 * Such a pull is answered in the same pass of the server's loop, before
 * any other request is read, so no worker ever sees a model further than V
 * from one another worker still computes on. A push whose update would
 * break it is held (its worker's next pull waits for it, PS_PULL_OWN).
 *
 * Whether it would is known only by trying: the update (optimizer step,
 * DC-ASGD correction) is applied, the bound checked, and the shard, the
 * optimizer state and DC-ASGD-a's MeanSquare put back if it does not hold.
 * The check is cheap when the bound is far: the rule keeps the sum of the
 * updates' infinity norms by version, an upper bound of the drift since
 * any recent version (triangle inequality, with a margin for rounding),
 * and compares a worker's snapshot element by element only when that sum
 * comes within V.
 * Held pushes are tried one by one in arrival order, or under --ps-queue
 * staleness the least stale first (computed on the newest version; ties
 * in arrival order): the taxonomy's "priority queue based on their
 * staleness" (sec. 3.3.4) in front of the bound. When none fits alone,
 * the pushes of every worker waiting on its own are tried together (their
 * pulls all answered with the result): once every live worker waits so, the
 * change left is 0 and the group goes, so the rule cannot deadlock. A
 * refused trial is not repeated until the versions, the pulls, the held
 * pushes or the live workers change.
 *
 * Two places where the bound is not enforced: the end of an epoch applies
 * what is still held whatever the change (every batch is in, no worker is
 * computing, and each pulls the flushed model before it computes again),
 * and a worker taken back after being written off returns with the
 * snapshot it had. The run goes on without a stopped worker. */
#include <math.h>
#include <stdlib.h>

#include "strategy/ps/ps_server.h"

#define HIST 1024          /* versions whose drift is remembered */
#define ROUNDING 1.000001  /* margin on a sum of rounded norms */

typedef struct {
  int64_t arrivals;      /* held pushes so far: the next one's arrival number */
  ps_shard_copy_t kept;  /* a trial: the shard before it, to be put back */
  float *scratch;        /* the corrected gradient (the held pushes stay as they came) */
  int *order, *group;    /* [N] */
  int64_t *stale;        /* [N] staleness of each member at its step */
  /* the drift: cum is the sum of the updates' norms up to s->version;
   * hist[v % HIST] = (v, cum at v) for the versions since floor */
  double cum;
  int64_t floor;
  struct { int64_t version; double cum; } hist[HIST];
  /* what the last refused trial saw (tried: there is one) */
  int tried;
  int64_t tried_version;
  int64_t *tried_pulled, *tried_queued; /* [N] */
  unsigned char *tried_flags;           /* [N] dead | pull deferred << 1 */
} value_t;

/* One block (the server free()s it): the struct, then its arrays. */
static int value_init(ps_server_t *s) {
  size_t N = (size_t)s->N, len = s->len, nstate = (size_t)s->opt->nstate;
  int ms = s->cfg->ps.dc_asgd > 0 && s->cfg->ps.dc_asgd_adaptive;
  size_t nfloats = len * (2 + nstate + (ms ? 1 : 0));
  size_t bytes = sizeof(value_t) + 3 * N * sizeof(int64_t) + 2 * N * sizeof(int) + N +
                 nfloats * sizeof(float) + 64;
  char *block = calloc(1, bytes);
  if (!block) return dt_error("out of memory");
  value_t *v = (value_t *)block;
  char *p = block + sizeof(value_t);
  v->stale = (int64_t *)p, p += N * sizeof(int64_t);
  v->tried_pulled = (int64_t *)p, p += N * sizeof(int64_t);
  v->tried_queued = (int64_t *)p, p += N * sizeof(int64_t);
  v->order = (int *)p, p += N * sizeof(int);
  v->group = (int *)p, p += N * sizeof(int);
  v->tried_flags = (unsigned char *)p, p += N;
  p += (size_t)(-(uintptr_t)p & 15); /* floats aligned */
  float *f = (float *)p;
  v->kept.params = f, f += len;
  v->scratch = f, f += len;
  for (size_t i = 0; i < nstate; i++) v->kept.state[i] = f, f += len;
  if (ms) v->kept.mean_square = f;
  s->rule_state = v;
  for (int w = 0; w < s->N; w++) s->workers[w].push.queued = -1;
  v->floor = s->version; /* the snapshots of setup count as older */
  v->hist[s->version % HIST].version = s->version;
  return ps_rule_async_init(s);
}

static int value_push(ps_server_t *s, int src, const ps_req_t *req) {
  value_t *v = s->rule_state;
  ps_worker_state_t *ws = &s->workers[src];
  if (ws->push.held)
    return ps_server_reject(s, src, req, "worker %d has a push held back already (pull first)",
                            src);
  if (!ps_server_store_push(s, src, req)) return 0;
  ws->push.held = 1;
  ws->push.queued = v->arrivals++;
  return ps_server_ack(s, src, req);
}

/* PS_PULL_OWN: the worker's next pull waits for its own held push. */
static int value_pull_ready(const ps_server_t *s, int src, const ps_req_t *req) {
  return !(req->flags & PS_PULL_OWN) || !s->workers[src].push.held;
}

/* Whether worker a's held push goes before worker b's. */
static int goes_before(const ps_server_t *s, int a, int b) {
  const ps_worker_state_t *pa = &s->workers[a], *pb = &s->workers[b];
  if (s->cfg->ps.queue_staleness && pa->push.version != pb->push.version)
    return pa->push.version > pb->push.version; /* computed on a newer model: less stale */
  return pa->push.queued < pb->push.queued;
}

int ps_rule_value_queue(const ps_server_t *s, int *order) {
  int n = 0;
  for (int w = 0; w < s->N; w++)
    if (s->workers[w].push.queued >= 0) order[n++] = w;
  for (int i = 1; i < n; i++) /* insertion sort: N is small */
    for (int j = i; j > 0 && goes_before(s, order[j], order[j - 1]); j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  return n;
}

static int is_member(int w, const int *members, int k) {
  for (int j = 0; j < k; j++)
    if (members[j] == w) return 1;
  return 0;
}

/* |a - b|_inf, or INFINITY if an element is not a number. */
static double max_abs_diff(const float *a, const float *b, size_t n) {
  float m = 0;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float d = fabsf(a[i] - b[i]);
    m = d > m ? d : m;
    bad |= !(d <= INFINITY);
  }
  return bad ? INFINITY : (double)m;
}

/* Every element of a within `bound` of b's (the invariant as stated). */
static int within(const float *a, const float *b, size_t n, float bound) {
  int out = 0;
  for (size_t i = 0; i < n; i++) out |= !(fabsf(a[i] - b[i]) < bound);
  return !out;
}

/* An upper bound of the drift since version `since` (INFINITY: not known). */
static double drift_since(const value_t *v, int64_t since, double cum) {
  if (since < v->floor || v->hist[since % HIST].version != since) return INFINITY;
  return (cum - v->hist[since % HIST].cum) * ROUNDING;
}

/* The invariant, on the shard as the trial left it; `cum`: the drift sum
 * with the trial's update in it. */
static int bound_holds(const ps_server_t *s, const int *members, int k, double cum) {
  const value_t *v = s->rule_state;
  float bound = (float)s->cfg->schedule_param;
  for (int u = 0; u < s->N; u++) {
    const ps_worker_state_t *ws = &s->workers[u];
    if (ws->dead) continue;
    if (ps_server_pull_deferred(s, u) && (!ws->push.held || is_member(u, members, k)))
      continue; /* it will be answered with this shard */
    if (drift_since(v, ws->pulled_version, cum) < bound) continue;
    if (!within(s->params, ws->snapshot, s->len, bound)) return 0;
  }
  return 1;
}

static void record_drift(value_t *v, int64_t version, double cum) {
  v->cum = cum;
  v->hist[version % HIST].version = version;
  v->hist[version % HIST].cum = cum;
}

/* Applies the held pushes of members[0..k) in that order if the result
 * keeps the bound; else leaves everything as it was. 1: applied. */
static int try_apply(ps_server_t *s, const int *members, int k) {
  value_t *v = s->rule_state;
  ps_server_keep(s, &v->kept);
  for (int j = 0; j < k; j++) {
    v->stale[j] = s->version - s->workers[members[j]].push.version;
    ps_rule_step_async(s, members[j], v->scratch);
  }
  double cum = (v->cum + max_abs_diff(s->params, v->kept.params, s->len)) * ROUNDING;
  if (bound_holds(s, members, k, cum)) {
    record_drift(v, s->version, cum);
    for (int j = 0; j < k; j++) {
      ps_worker_state_t *ws = &s->workers[members[j]];
      ps_server_staleness_was(s, ws->push.epoch, v->stale[j]);
      ws->push.held = 0;
      ws->push.queued = -1;
    }
    return 1;
  }
  ps_server_put_back(s, &v->kept);
  return 0;
}

/* Whether the last refused trial saw what the server sees now; if not,
 * what it sees now is remembered (the trial about to be made). */
static int seen_before(ps_server_t *s) {
  value_t *v = s->rule_state;
  int same = v->tried && v->tried_version == s->version;
  for (int w = 0; w < s->N; w++) {
    const ps_worker_state_t *ws = &s->workers[w];
    unsigned char flags = (unsigned char)((ws->dead ? 1 : 0) | (ps_server_pull_deferred(s, w) << 1));
    if (v->tried_pulled[w] != ws->pulled_version || v->tried_queued[w] != ws->push.queued ||
        v->tried_flags[w] != flags)
      same = 0;
    v->tried_pulled[w] = ws->pulled_version;
    v->tried_queued[w] = ws->push.queued;
    v->tried_flags[w] = flags;
  }
  v->tried_version = s->version;
  v->tried = 1;
  return same;
}

/* Applies what the bound allows: a held push alone, first come first, or
 * the pushes of every worker waiting on its own together. */
static void value_progress(ps_server_t *s) {
  value_t *v = s->rule_state;
  for (;;) {
    int n = ps_rule_value_queue(s, v->order);
    if (n == 0 || seen_before(s)) return;
    int applied = 0;
    for (int i = 0; i < n && !applied; i++) applied = try_apply(s, &v->order[i], 1);
    if (!applied) {
      int k = 0;
      for (int i = 0; i < n; i++)
        if (ps_server_pull_deferred(s, v->order[i])) v->group[k++] = v->order[i];
      if (k >= 2) applied = try_apply(s, v->group, k);
    }
    if (!applied) return;
  }
}

/* Every push of the epoch is here: what is held goes, in queue order
 * (the drift since the snapshots taken before is not followed). */
static void value_epoch_end(ps_server_t *s) {
  value_t *v = s->rule_state;
  int n = ps_rule_value_queue(s, v->order);
  for (int i = 0; i < n; i++) {
    s->workers[v->order[i]].push.queued = -1;
    ps_rule_apply_async(s, v->order[i]);
  }
  if (n > 0) {
    v->floor = s->version;
    record_drift(v, s->version, v->cum);
  }
}

const ps_rule_ops_t ps_rule_value = {
    .pool = 1, .init = value_init, .push = value_push, .pull_ready = value_pull_ready,
    .progress = value_progress, .epoch_end = value_epoch_end};
