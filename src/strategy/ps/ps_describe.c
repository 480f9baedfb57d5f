/* The parameter servers' step as data (describe_step, step.h). Every
 * transfer is a part per server holding keys of it: the request and a
 * push's values out, the reply and a pull's values back (ps_part_bytes,
 * what the client sends); a server sees the mirror image of each worker's
 * parts with it.
 *
 * sync and ssp:S: every clock a worker pulls the model (the clock's
 * parameters) and pushes its gradient: exact bytes. Under --ps-refresh
 * lazy it pulls only once its cached parameters are more than S clocks
 * old, their clock being the slowest worker's when the pull was answered:
 * every S + 1 clocks at the least, when the workers keep pace, and
 * sooner when one lags (expected, at the least rate).
 *
 * The pool (async, ssp:inf, value:V, backup:B): a worker draws each batch
 * from the coordinator (a NEXT call to server 0), pulls every
 * --fetch-every of its batches and pushes every --push-every. A step is N
 * batches of the shared order, which the workers draw as fast as they
 * compute, so each draws one a step in expectation (the metrics' "batches"
 * count a worker's): expected bytes, per batch drawn. The calls around an
 * epoch's close (a NEXT that waits, worker 0's acknowledgement, a pull
 * after the wait, a last push of a partial --push-every sum) are not
 * described.
 *
 * --ps-replicas 2 (ps_replica.c): every push a primary takes goes on to
 * its shard's backup, the next server, as the push's request and values
 * (PS_OP_REPL), and the backup answers with a request (PS_OP_REPL_ACK):
 * per push, server k sends REQ + its shard's values and receives REQ.
 * The coordinator's state goes to its standby, shard 0's backup
 * (server 1), after every change of it (ps_coord_repl.c): a copy is REQ +
 * C bytes, C = ps_coord_state_size(N) (its head, then a record a worker),
 * and the standby acknowledges each with a REQ. Per step, server 0 sends
 * and server 1 receives
 *   sync              N + 1 copies: a push counted (per worker), and the
 *                     step's update (its staleness, in the statistics)
 *   ssp:S             N + N: a push counted, and its update, expected (a
 *                     push within the bound is applied as it comes; pushes
 *                     applied in one pass share a copy)
 *   pool rules        expected, per batch drawn: 1 copy (the NEXT's
 *                     answer) + 2 per push (its count, its update), a push
 *                     every --push-every batches
 * and server 1 sends as many REQs back: (N + 1)(REQ + C) bytes out of
 * server 0 a sync step, (N + 1) REQ out of server 1. Once a run, not in a
 * step: the first copy and one per BYE (1 + N); the pool's epoch close
 * and its waiting NEXTs add a few. The
 * coordinator's pings are by the clock, not by the step, and a failover's
 * resends happen once: neither is in a step.
 *
 * --ps-push factors (ps_factors.c): a push's part for shard k carries,
 * instead of its gradient, a row count and, per dense layer there, the
 * batch's factors: 8 + 4 (g_k + sum over its dense layers of batch (in +
 * out)) bytes, g_k the shard's other keys; each dense layer's weight and
 * bias on one shard. */
#include <stdlib.h>

#include "strategy/ps/ps.h"

typedef struct {
  const train_config_t *c;
  const model_t *m;
  step_desc_t *out;
  ps_shard_map_t map;
  ps_factor_plan_t fplan;     /* --ps-push factors (else empty) */
  int N, K;
} ps_desc_t;

/* A part's values on the wire: `most` bytes, and `least` where a codec's
 * size depends on the values (threshold: its head alone; else least =
 * most). */
typedef struct {
  size_t most, least;
} part_values_t;

static part_values_t exact_values(size_t bytes) { return (part_values_t){bytes, bytes}; }

/* One part of op between worker w and server k, on both: the worker
 * sends what the server receives and the other way round. Returns the
 * worker's task or STEP_FAILED. */
static int add_part(ps_desc_t *d, int op, int w, int k, part_values_t values, step_task_t how) {
  size_t sent, received, sent_min, received_min;
  ps_part_bytes(op, values.most, &sent, &received);
  ps_part_bytes(op, values.least, &sent_min, &received_min);
  int server = d->N + k;
  static const char *names[] = {[PS_OP_PUSH] = "push", [PS_OP_PULL] = "pull",
                                [PS_OP_NEXT] = "call"};
  step_task_t t = how;
  t.kind = TASK_COMM, t.layer = -1, t.pattern = names[op], t.group = 2;
  t.rank = w, t.peer = server, t.sent = (double)sent, t.received = (double)received;
  t.bounded = values.least != values.most;
  t.sent_min = (double)sent_min, t.received_min = (double)received_min;
  int mine = step_add(d->out, t);
  t.rank = server, t.peer = w, t.sent = (double)received, t.received = (double)sent, t.after = -1;
  t.sent_min = (double)received_min, t.received_min = (double)sent_min;
  t.thread = THREAD_COMM;
  return mine == STEP_FAILED || step_add(d->out, t) == STEP_FAILED ? STEP_FAILED : mine;
}

/* What a push's part of n keys carries: their gradient, or under
 * --compress its encoding (codec_bytes; a threshold codec's is bounded by
 * its head and codec_max_bytes). */
static part_values_t push_values(const ps_desc_t *d, size_t n) {
  const codec_spec_t *k = &d->c->compression.codec;
  if (k->kind == CODEC_NONE) return exact_values(ps_values_bytes(n));
  size_t fixed = codec_bytes(k, n);
  return fixed ? exact_values(fixed) : (part_values_t){codec_max_bytes(k, n), codec_max_bytes(k, 0)};
}

/* Shard k's part of a push or a pull of the whole model. */
static part_values_t shard_values(const ps_desc_t *d, int op, int k) {
  ps_range_t r = d->map.shards[k];
  if (op != PS_OP_PUSH) return exact_values(ps_values_bytes(r.end - r.begin));
  if (d->c->ps.push_factors)
    return exact_values(ps_factor_bytes(&d->fplan, r.begin, r.end, (size_t)d->c->batch));
  return push_values(d, r.end - r.begin);
}

/* Shard k's part of a whole-model pull or push by worker w. Under
 * --compress-pulls a pull's reply is the change since the last pull,
 * encoded, and the first one (step 0) the shard whole. */
static int add_shard_part(ps_desc_t *d, int op, int w, int k, step_task_t how) {
  if (op != PS_OP_PULL || !d->c->compression.pulls) return add_part(d, op, w, k, shard_values(d, op, k), how);
  ps_range_t r = d->map.shards[k];
  step_task_t first = how, later = how;
  first.until = 1, later.from = 1;
  part_values_t change = exact_values(codec_bytes(&d->c->compression.codec, r.end - r.begin));
  int dense = add_part(d, op, w, k, shard_values(d, op, k), first);
  return dense == STEP_FAILED ? STEP_FAILED : add_part(d, op, w, k, change, later);
}

/* A whole-model pull or push by every worker: a part per shard
 * (ps_client.c start_ranged). A client starts its parts at once and a
 * server answers them as they come, but the step's graph gives a rank's
 * messages one thread: so worker w takes the shards from shard w on, and
 * the parts are added in rounds (round j: every worker's j-th), which
 * gives server k the workers from worker k on, and the servers answer in
 * parallel rather than each serving worker 0 first. last[w]: in, what
 * worker w's first part waits for; out, its last part. */
static int add_transfers(ps_desc_t *d, int op, step_task_t how, int *last) {
  for (int j = 0; j < d->K; j++)
    for (int w = 0; w < d->N; w++) {
      if (last[w] == STEP_FAILED) return -1;
      how.after = last[w];
      last[w] = add_shard_part(d, op, w, (w + j) % d->K, how);
    }
  for (int w = 0; w < d->N; w++)
    if (last[w] == STEP_FAILED) return -1;
  return 0;
}

/* The parts of keys [begin, begin + n) by worker w, one per shard they
 * touch (ps_client.c start_ranged), each after the one before. */
static int add_range(ps_desc_t *d, int op, int w, size_t begin, size_t n, step_task_t how) {
  int last = how.after;
  for (int k = 0; k < d->K && last != STEP_FAILED; k++) {
    ps_range_t r = d->map.shards[k];
    if (r.end <= begin || r.begin >= begin + n) continue;
    size_t lo = r.begin > begin ? r.begin : begin, hi = r.end < begin + n ? r.end : begin + n;
    how.after = last;
    last = add_part(d, op, w, k, op == PS_OP_PUSH ? push_values(d, hi - lo)
                                                   : exact_values(ps_values_bytes(hi - lo)), how);
  }
  return last;
}

/* Layer i's keys in --partition-kb parts (ps_prio.c enqueue), each a
 * range; returns the last part's task, or `how.after` for a layer with no
 * parameters. */
static int add_layer_parts(ps_desc_t *d, int op, int w, int i, step_task_t how) {
  const layer_t *l = &d->m->layers[i];
  size_t part = d->c->partition_bytes / sizeof(float) ? d->c->partition_bytes / sizeof(float) : 1;
  int last = how.after;
  for (size_t done = 0; done < l->param_len && last != STEP_FAILED; done += part) {
    size_t n = l->param_len - done < part ? l->param_len - done : part;
    how.after = last;
    last = add_range(d, op, w, l->param_off + done, n, how);
  }
  return last;
}

/* How worker w's pull and push run, by schedule: every step (sync, ssp
 * eager); by chance (lazy: once the cached model is S clocks old); per
 * batch drawn, every --fetch-every and --push-every (the pool). */
static void worker_templates(const ps_desc_t *d, step_task_t *pull, step_task_t *push) {
  const train_config_t *c = d->c;
  *pull = (step_task_t){.after = -1}, *push = (step_task_t){0};
  if (ps_pool_schedule(c)) {
    *pull = (step_task_t){.expected = 1, .every = c->ps.fetch_every};
    *push = (step_task_t){.expected = 1, .every = c->ps.push_every};
  } else if (c->ps.refresh_lazy) {
    *pull = (step_task_t){.after = -1, .expected = 1, .chance = 1.0 / (c->schedule_param + 1)};
  }
  if (c->comm_order != COLL_ORDER_FIFO) pull->thread = push->thread = THREAD_COMM;
}

/* Worker w's pulls layer by layer under --comm-order priority or tictac
 * (ps_prio.c): they go out at the step's start, on the worker's
 * communication side (tictac's order is the layers' on a chain once their
 * forwards are timed: ps_schedule.c); pulled[i] gets layer i's last part,
 * what its forward waits for. Returns the last part. */
static int describe_prio_pulls(ps_desc_t *d, int w, step_task_t pull, int *pulled) {
  int prev = pull.after;
  for (int i = 0; i < d->m->nlayers && prev != STEP_FAILED; i++) {
    pull.after = prev;
    pulled[i] = prev = add_layer_parts(d, PS_OP_PULL, w, i, pull);
  }
  return prev;
}

/* Worker w's passes under priority order, each forward after its layer's
 * parts, and each layer's push as its backward ends. */
static int describe_prio_compute(ps_desc_t *d, int w, step_task_t push, const int *pulled) {
  const model_t *m = d->m;
  int fwd = -1;
  for (int i = 0; i < m->nlayers && fwd != STEP_FAILED; i++)
    fwd = step_add_layer(d->out, m, w, i, d->c->batch, 0, 0, 0, NULL,
                         m->layers[i].param_len ? pulled[i] : fwd, NULL);
  int last = fwd;
  for (int i = m->nlayers - 1; i >= 0 && last != STEP_FAILED; i--) {
    int bwd = step_add_layer(d->out, m, w, i, d->c->batch, 1, 0, 0, NULL, -1, NULL);
    push.after = bwd;
    last = bwd == STEP_FAILED ? STEP_FAILED : add_layer_parts(d, PS_OP_PUSH, w, i, push);
  }
  return last;
}

/* The workers' steps: (pool: each one's NEXT call,) every pull, each
 * worker's passes, then the pushes, so that a server answers a step's
 * pulls before its pushes come (a server serves its messages in the order
 * of its tasks). Fifo pulls the model whole and pushes the gradient after
 * backprop, on the compute thread (the passes follow the pull there). */
static int describe_workers(ps_desc_t *d) {
  int N = d->N, L = d->m->nlayers, prio = d->c->comm_order != COLL_ORDER_FIFO;
  int *last = malloc((size_t)N * sizeof *last), *pulled = malloc((size_t)N * L * sizeof *pulled);
  int rc = last && pulled ? 0 : dt_error("out of memory");
  step_task_t pull, push;
  worker_templates(d, &pull, &push);
  for (int w = 0; w < N && rc == 0; w++) {
    last[w] = -1;
    if (ps_pool_schedule(d->c))
      last[w] = add_part(d, PS_OP_NEXT, w, 0, exact_values(0), (step_task_t){.after = -1, .expected = 1});
    if (last[w] == STEP_FAILED) rc = -1;
  }
  if (rc == 0 && !prio) rc = add_transfers(d, PS_OP_PULL, pull, last);
  for (int w = 0; w < N && rc == 0 && prio; w++) {
    pull.after = last[w];
    if (describe_prio_pulls(d, w, pull, pulled + (size_t)w * L) == STEP_FAILED) rc = -1;
  }
  for (int w = 0; w < N && rc == 0; w++) {
    last[w] = prio ? describe_prio_compute(d, w, push, pulled + (size_t)w * L)
                   : step_add_passes(d->out, d->m, w, d->c->batch, NULL);
    if (last[w] == STEP_FAILED) rc = -1;
  }
  if (rc == 0 && !prio) rc = add_transfers(d, PS_OP_PUSH, push, last);
  free(last);
  free(pulled);
  return rc;
}

/* A worker's push, on from server k (its shard's primary) to the backup,
 * and the backup's acknowledgement back. */
static int add_replication(ps_desc_t *d, int k) {
  ps_range_t r = d->map.shards[k];
  int primary = d->N + k, backup = d->N + (k + 1) % d->K;
  step_task_t t = {.kind = TASK_COMM, .layer = -1, .pattern = "replicate", .group = 2,
                   .thread = THREAD_COMM, .after = -1};
  if (ps_pool_schedule(d->c)) t.expected = 1, t.every = d->c->ps.push_every;
  size_t req = PS_REQ_BYTES, vals = ps_values_bytes(r.end - r.begin);
  t.rank = primary, t.peer = backup, t.sent = (double)(req + vals), t.received = (double)req;
  if (step_add(d->out, t) == STEP_FAILED) return STEP_FAILED;
  t.rank = backup, t.peer = primary, t.sent = (double)req, t.received = (double)(req + vals);
  return step_add(d->out, t);
}

/* Copies of the coordinator's state (server 0) to its standby (server
 * 1), and the acks back: `how` says how many a step. */
static int add_coord_copy(ps_desc_t *d, step_task_t how) {
  size_t req = PS_REQ_BYTES, state = ps_coord_state_size(d->N);
  step_task_t t = how;
  t.kind = TASK_COMM, t.layer = -1, t.pattern = "coordinator", t.group = 2, t.thread = THREAD_COMM;
  t.rank = d->N, t.peer = d->N + 1, t.sent = (double)(req + state), t.received = (double)req;
  int mine = step_add(d->out, t);
  t.rank = d->N + 1, t.peer = d->N, t.sent = (double)req, t.received = (double)(req + state);
  t.after = -1;
  return mine == STEP_FAILED || step_add(d->out, t) == STEP_FAILED ? STEP_FAILED : mine;
}

/* Worker w's share of the copies: its push counted (ssp: and its update;
 * pool: and the batch it drew, and its push's update). */
static int describe_coord_copies(ps_desc_t *d, int w) {
  const train_config_t *c = d->c;
  if (!ps_pool_schedule(c)) {
    int counted = add_coord_copy(d, (step_task_t){.after = -1});
    if (counted == STEP_FAILED || c->schedule == SCHEDULE_SYNC) return counted;
    return add_coord_copy(d, (step_task_t){.after = -1, .expected = 1});
  }
  step_task_t next = {.after = -1, .expected = 1};
  step_task_t push = {.after = -1, .expected = 1, .chance = 2, .every = c->ps.push_every};
  return add_coord_copy(d, next) == STEP_FAILED ? STEP_FAILED : add_coord_copy(d, push);
}

/* Server k's update of its shard: once a clock (sync, ssp; backup:B's
 * first N - B pushes), or once a push (async, value:V). */
static int describe_update(ps_desc_t *d, int k) {
  const train_config_t *c = d->c;
  ps_range_t r = d->map.shards[k];
  step_task_t t = {TASK_UPDATE, d->N + k, -1, r.end - r.begin, c->batch, .peer = -1, .after = -1,
                   .expected = ps_pool_schedule(c)};
  if (t.expected && c->schedule != SCHEDULE_BACKUP) t.chance = d->N, t.every = c->ps.push_every;
  return step_add(d->out, t);
}

int ps_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  if (ps_group_size(c) > 1)
    return dt_error("parameter servers: describe_step covers a worker of one rank so far, not "
                    "--tp (Project Adam's replicas)");
  ps_desc_t d = {.c = c, .m = m, .out = out, .N = c->workers, .K = ps_nservers(c, c->workers)};
  if (c->ps.push_factors) {
    ps_keys_t keys; /* one worker: its keys are the arena */
    DT_TRY(ps_keys_plan(m, 0, 1, &keys));
    int frc = ps_factor_plan(m, &keys, &d.fplan);
    ps_keys_free(&keys);
    DT_TRY(frc);
  }
  int rc = ps_shard_plan_factors(m, d.K, c->optim.kind == OPTIM_LARS, &d.fplan, &d.map);
  if (rc == 0) rc = describe_workers(&d);
  for (int w = 0; c->ps.replicas > 1 && w < d.N && rc == 0; w++)
    for (int k = 0; k < d.K && rc == 0; k++)
      if (add_replication(&d, k) == STEP_FAILED) rc = -1;
  for (int w = 0; c->ps.replicas > 1 && w < d.N && rc == 0; w++)
    if (describe_coord_copies(&d, w) == STEP_FAILED) rc = -1;
  if (c->ps.replicas > 1 && c->schedule == SCHEDULE_SYNC && rc == 0 && /* the step's update */
      add_coord_copy(&d, (step_task_t){.after = -1}) == STEP_FAILED)
    rc = -1;
  for (int k = 0; k < d.K && rc == 0; k++)
    if (describe_update(&d, k) == STEP_FAILED) rc = -1;
  ps_shard_free(&d.map);
  ps_factor_plan_free(&d.fplan);
  return rc;
}
