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
 * bias on one shard.
 *
 * --comm-order priority or tictac (ps_prio.c): a layer's keys go in parts
 * of --partition-kb, each part split at the shards' edges into one
 * message a shard: a push's as backprop readies the layer, a pull's at
 * the step's start, the forward waiting before a layer for its parts.
 *
 * --compress: a push's part carries its codec's encoding, codec_bytes of
 * its keys (threshold's depends on the values: bounded by its head and
 * codec_max_bytes); under --compress-pulls a pull's reply is the encoded
 * change since the last, its first (step 0) the shard whole.
 *
 * --tp T (Project Adam, ps_group.c): tp rank t of every replica pulls and
 * pushes its own keys on slice t of the servers, after each pull gives
 * the group the tensors it holds whole (a tree broadcast a tensor from
 * tp rank 0), and under the pool tp rank 0 makes the NEXT call and sends
 * each other rank a status and the reply. */
#include <stdlib.h>

#include "strategy/ps/ps.h"
#include "strategy/tensor/tensor.h"

/* What tensor-parallel rank t of every replica holds (ps_group.c): its
 * model (its blocks of the split layers), its keys cut into its slice's
 * shards, their factors. Without --tp one slice: the whole model. */
typedef struct {
  const model_t *m;
  ps_shard_map_t map;
  ps_factor_plan_t fplan;     /* --ps-push factors (else empty) */
} ps_slice_t;

/* Worker rank w is tp rank w % T of replica w / T (a replica's ranks
 * adjacent); the servers follow the R T worker ranks, slice t's K from
 * first + t K on, server 0 (slice 0's first) the coordinator. */
typedef struct {
  const train_config_t *c;
  step_desc_t *out;
  tensor_desc_t *td;          /* the tp ranks' models */
  ps_slice_t *slice;          /* [T] */
  int R, T, K;                /* replicas (the servers' workers), tp ranks each, servers a slice */
  int first;                  /* world rank of server 0 */
  int wa, wb;                 /* the worker ranks being described: [wa, wb) */
  int lockstep;               /* sync (ssp:0): a step's pulls wait for every push before */
} ps_desc_t;

static int server_rank(const ps_desc_t *d, int w, int k) { return d->first + (w % d->T) * d->K + k; }

/* The shard worker rank w's j-th part of a transfer goes to: in lockstep
 * replica r's from shard r on (add_transfers), else in shard order. */
static int shard_for(const ps_desc_t *d, int w, int j) {
  return d->lockstep ? (w / d->T + j) % d->K : j;
}
static const ps_slice_t *slice_of(const ps_desc_t *d, int w) { return &d->slice[w % d->T]; }

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
  int server = server_rank(d, w, k);
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

/* Shard k's part of a push or a pull of the whole model by worker w. */
static part_values_t shard_values(const ps_desc_t *d, int op, int w, int k) {
  const ps_slice_t *s = slice_of(d, w);
  ps_range_t r = s->map.shards[k];
  if (op != PS_OP_PUSH) return exact_values(ps_values_bytes(r.end - r.begin));
  if (d->c->ps.push_factors)
    return exact_values(ps_factor_bytes(&s->fplan, r.begin, r.end, (size_t)d->c->batch));
  return push_values(d, r.end - r.begin);
}

/* Shard k's part of a whole-model pull or push by worker w. Under
 * --compress-pulls a pull's reply is the change since the last pull,
 * encoded, and the first one (step 0) the shard whole. */
static int add_shard_part(ps_desc_t *d, int op, int w, int k, step_task_t how) {
  if (op != PS_OP_PULL || !d->c->compression.pulls) return add_part(d, op, w, k, shard_values(d, op, w, k), how);
  ps_range_t r = slice_of(d, w)->map.shards[k];
  step_task_t first = how, later = how;
  first.until = 1, later.from = 1;
  part_values_t change = exact_values(codec_bytes(&d->c->compression.codec, r.end - r.begin));
  int dense = add_part(d, op, w, k, shard_values(d, op, w, k), first);
  return dense == STEP_FAILED ? STEP_FAILED : add_part(d, op, w, k, change, later);
}

/* A whole-model pull or push by worker ranks [wa, wb): a part per shard
 * (ps_client.c start_ranged). A client starts its parts at once, so each
 * waits only for the transfer's start. A server serves its tasks in order:
 * in lockstep the parts are added in rounds (round j: every worker's j-th,
 * replica r's to shard r + j), which gives server k the replicas from
 * replica k on rather than every server replica 0 first. last[w]: in,
 * what worker rank w's transfer waits for; out, its last part. */
static int add_transfers(ps_desc_t *d, int op, step_task_t how, int *last) {
  int *start = malloc((size_t)(d->wb - d->wa) * sizeof *start);
  if (!start) return dt_error("out of memory");
  for (int w = d->wa; w < d->wb; w++) start[w - d->wa] = last[w];
  for (int j = 0; j < d->K; j++)
    for (int w = d->wa; w < d->wb && last[w] != STEP_FAILED; w++) {
      how.after = start[w - d->wa]; /* the parts go out at once: each from the start */
      last[w] = add_shard_part(d, op, w, shard_for(d, w, j), how);
    }
  free(start);
  for (int w = d->wa; w < d->wb; w++)
    if (last[w] == STEP_FAILED) return -1;
  return 0;
}

/* The parts of keys [begin, begin + n) by worker w that go to shard
 * `only` (ps_client.c start_ranged: one a shard the range touches), each
 * after the one before; returns the last, or how.after if none. */
static int add_range(ps_desc_t *d, int op, int w, size_t begin, size_t n, int only, step_task_t how) {
  ps_range_t r = slice_of(d, w)->map.shards[only];
  if (r.end <= begin || r.begin >= begin + n) return how.after;
  size_t lo = r.begin > begin ? r.begin : begin, hi = r.end < begin + n ? r.end : begin + n;
  return add_part(d, op, w, only, op == PS_OP_PUSH ? push_values(d, hi - lo)
                                                   : exact_values(ps_values_bytes(hi - lo)), how);
}

/* Layer i's keys in --partition-kb parts (ps_prio.c enqueue), each a
 * range, its messages to shard `only`; returns the last one's task, or
 * how.after if none. */
static int add_layer_parts(ps_desc_t *d, int op, int w, int i, int only, step_task_t how) {
  const layer_t *l = &slice_of(d, w)->m->layers[i];
  size_t part = d->c->partition_bytes / sizeof(float) ? d->c->partition_bytes / sizeof(float) : 1;
  for (size_t done = 0; done < l->param_len && how.after != STEP_FAILED; done += part) {
    size_t n = l->param_len - done < part ? l->param_len - done : part;
    how.after = add_range(d, op, w, l->param_off + done, n, only, how);
  }
  return how.after;
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

/* Priority order or TicTac (ps_prio.c): a worker's parts go out at
 * once, most urgent first (tictac's order is the layers' on a chain once
 * their forwards are timed: ps_schedule.c), and every server answers
 * its own as they come. The step's graph gives a rank's messages one
 * thread, so the parts are added as add_transfers adds a whole model's:
 * in rounds, replica r's to shard r + j in round j, each shard's in the
 * layers' order (pushes: the last layer first, as backprop readies
 * them). A layer's parts on two shards land by the later one. */

/* Every worker's pulls, on its communication side from its start (last[w]);
 * pulled[w L + i] gets the task layer i's forward waits for. */
static int describe_prio_pulls(ps_desc_t *d, step_task_t pull, int *last, int *pulled) {
  int L = d->slice[0].m->nlayers;
  for (int w = d->wa * L; w < d->wb * L; w++) pulled[w] = -1;
  for (int j = 0; j < d->K; j++)
    for (int w = d->wa; w < d->wb; w++)
      for (int i = 0; i < L; i++) {
        pull.after = last[w];
        int x = add_layer_parts(d, PS_OP_PULL, w, i, shard_for(d, w, j), pull);
        if (x == STEP_FAILED) return -1;
        if (x != last[w]) pulled[w * L + i] = last[w] = x;
      }
  return 0;
}

/* Worker rank w's passes, each forward after its layer's parts; bwd gets
 * each layer's backward task. */
static int describe_prio_passes(ps_desc_t *d, int w, const int *pulled, int *bwd) {
  const model_t *m = slice_of(d, w)->m;
  int prev = -1;
  for (int i = 0; i < m->nlayers && prev != STEP_FAILED; i++)
    prev = step_add_layer(d->out, m, w, i, d->c->batch, 0, 0, 0, NULL, pulled[i] >= 0 ? pulled[i] : prev, NULL);
  for (int i = m->nlayers - 1; i >= 0 && prev != STEP_FAILED; i--)
    prev = bwd[i] = step_add_layer(d->out, m, w, i, d->c->batch, 1, 0, 0, NULL, -1, NULL);
  return prev;
}

/* Every worker's pushes, each layer's parts after its backward. */
static int describe_prio_pushes(ps_desc_t *d, step_task_t push, const int *bwd) {
  int L = d->slice[0].m->nlayers;
  for (int j = 0; j < d->K; j++)
    for (int w = d->wa; w < d->wb; w++)
      for (int i = L - 1; i >= 0; i--) {
        push.after = bwd[w * L + i];
        if (add_layer_parts(d, PS_OP_PUSH, w, i, shard_for(d, w, j), push) == STEP_FAILED) return -1;
      }
  return 0;
}

/* Under --tp, a replica's tensors held whole (its tp rank 0's keys),
 * given by rank 0 to the others after each pull (ps_worker.c
 * share_replicated: a tree broadcast over the group a tensor), as the
 * pull runs (`how`). */
static int add_share_replicated(ps_desc_t *d, int w, step_task_t how) {
  const model_t *m = slice_of(d, w)->m;
  int t = w % d->T, last = how.after;
  for (int i = 0; i < m->ntensors && last != STEP_FAILED; i++) {
    const tensor_info_t *ti = &m->tensors[i];
    if (ti->len != tensor_full_len(ti)) continue;
    size_t sent, received;
    coll_tree_bytes(0, d->T, 0, t, ti->len, &sent, &received);
    step_task_t x = how;
    x.kind = TASK_COMM, x.rank = w, x.layer = -1, x.pattern = "broadcast", x.algo = "tree";
    x.peer = -1, x.group = d->T, x.sent = (double)sent, x.received = (double)received;
    x.count = ti->len, x.after = last, x.color = STEP_TP_COLOR(w - t);
    last = step_add(d->out, x);
  }
  return last;
}

/* Under --tp and the pool, tp rank 0's NEXT answer to the rest of its
 * group (ps_worker.c group_share: a status and the reply, to each). */
static int add_share_next(ps_desc_t *d, int w, int after) {
  int t = w % d->T, leader = w - t;
  double bytes = (double)(sizeof(int32_t) + PS_REPLY_BYTES);
  step_task_t x = {.kind = TASK_COMM, .layer = -1, .pattern = "share", .group = 2, .expected = 1,
                   .after = after};
  for (int j = 1; j < d->T && after != STEP_FAILED; j++) {
    if (t != 0 && t != j) continue;
    x.rank = w, x.peer = t ? leader : leader + j;
    x.sent = t ? 0 : bytes, x.received = t ? bytes : 0;
    x.after = after = step_add(d->out, x);
  }
  return after;
}

/* Worker rank w's (pool: NEXT call, by its replica's tp rank 0, and its
 * answer shared). */
static int describe_next(ps_desc_t *d, int w) {
  if (!ps_pool_schedule(d->c)) return -1;
  int last = -1;
  if (w % d->T == 0)
    last = add_part(d, PS_OP_NEXT, w, 0, exact_values(0), (step_task_t){.after = -1, .expected = 1});
  return d->T > 1 ? add_share_next(d, w, last) : last;
}

/* Worker rank w's passes, with its tensor-parallel group's sums (--tp). */
static int describe_passes(ps_desc_t *d, int w) {
  const model_t *m = slice_of(d, w)->m;
  if (d->T == 1) return step_add_passes(d->out, m, w, d->c->batch, NULL);
  int t = w % d->T, algo;
  DT_TRY(step_allreduce_algo(d->c->algo, d->T, &algo));
  step_groups_t g = {{d->T, t, algo, STEP_TP_COLOR(w - t), 1}, {1, 0, algo, 0, 1}};
  return step_add_passes_summed(d->out, m, w, d->c->batch, &g, NULL);
}

/* Worker ranks [wa, wb)'s steps: (pool: each one's NEXT call,) their
 * pulls, their passes, then their pushes. Fifo pulls the model whole and
 * pushes the gradient after backprop, on the compute thread (the passes
 * follow the pull there). */
static int describe_range(ps_desc_t *d, int *last, int *pulled, int *bwd) {
  int L = d->slice[0].m->nlayers, prio = d->c->comm_order != COLL_ORDER_FIFO, rc = 0;
  step_task_t pull, push;
  worker_templates(d, &pull, &push);
  for (int w = d->wa; w < d->wb && rc == 0; w++)
    if ((last[w] = describe_next(d, w)) == STEP_FAILED) rc = -1;
  if (rc == 0) rc = prio ? describe_prio_pulls(d, pull, last, pulled) : add_transfers(d, PS_OP_PULL, pull, last);
  for (int w = d->wa; w < d->wb && rc == 0 && d->T > 1; w++) {
    pull.after = last[w];
    if ((last[w] = add_share_replicated(d, w, pull)) == STEP_FAILED) rc = -1;
  }
  for (int w = d->wa; w < d->wb && rc == 0; w++) {
    last[w] = prio ? describe_prio_passes(d, w, pulled + (size_t)w * L, bwd + (size_t)w * L)
                   : describe_passes(d, w);
    if (last[w] == STEP_FAILED) rc = -1;
  }
  if (rc == 0) rc = prio ? describe_prio_pushes(d, push, bwd) : add_transfers(d, PS_OP_PUSH, push, last);
  return rc;
}

/* The workers' steps. A server serves its messages in the order of its
 * tasks. In lockstep (sync) a step's pulls are answered once every push
 * before them is in: every worker's pulls are added first, then the
 * passes, then the pushes. Otherwise (ssp:S, the pool) a server answers a
 * pull as it comes, and a worker's next pull overlaps its last push: each
 * worker's step is added whole, one worker after another. */
static int describe_workers(ps_desc_t *d) {
  int W = d->R * d->T, L = d->slice[0].m->nlayers;
  int *last = malloc((size_t)W * sizeof *last), *pulled = malloc((size_t)W * L * sizeof *pulled);
  int *bwd = malloc((size_t)W * L * sizeof *bwd);
  int rc = last && pulled && bwd ? 0 : dt_error("out of memory");
  d->lockstep = d->c->schedule == SCHEDULE_SYNC ||
                (d->c->schedule == SCHEDULE_SSP && d->c->schedule_param == 0 && !d->c->ps.refresh_lazy);
  for (int w = 0; w < W && rc == 0; w = d->wb) {
    d->wa = w, d->wb = d->lockstep ? W : w + 1;
    rc = describe_range(d, last, pulled, bwd);
  }
  free(last);
  free(pulled);
  free(bwd);
  return rc;
}

/* A worker's push, on from server k (its shard's primary) to the backup,
 * and the backup's acknowledgement back. */
static int add_replication(ps_desc_t *d, int k) {
  ps_range_t r = d->slice[0].map.shards[k];
  int primary = d->first + k, backup = d->first + (k + 1) % d->K;
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
  size_t req = PS_REQ_BYTES, state = ps_coord_state_size(d->R);
  step_task_t t = how;
  t.kind = TASK_COMM, t.layer = -1, t.pattern = "coordinator", t.group = 2, t.thread = THREAD_COMM;
  t.rank = d->first, t.peer = d->first + 1, t.sent = (double)(req + state), t.received = (double)req;
  int mine = step_add(d->out, t);
  t.rank = d->first + 1, t.peer = d->first, t.sent = (double)req, t.received = (double)(req + state);
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

/* The update of shard k of slice t by its server: once a clock (sync,
 * ssp; backup:B's first N - B pushes), or once a push (async, value:V). */
static int describe_update(ps_desc_t *d, int t, int k) {
  const train_config_t *c = d->c;
  ps_range_t r = d->slice[t].map.shards[k];
  step_task_t x = {TASK_UPDATE, d->first + t * d->K + k, -1, r.end - r.begin, c->batch, .peer = -1,
                   .after = -1, .expected = ps_pool_schedule(c)};
  if (x.expected && c->schedule != SCHEDULE_BACKUP) x.chance = d->R, x.every = c->ps.push_every;
  return step_add(d->out, x);
}

/* Slice t: tp rank t's model (tensor_desc: its blocks), its keys and
 * their shards on K servers (ps_worker.c plan_keys; one slice without
 * --tp: the arena itself). */
static int plan_slice(ps_desc_t *d, int t) {
  const train_config_t *c = d->c;
  ps_slice_t *s = &d->slice[t];
  s->m = tensor_desc_model(d->td, t);
  ps_keys_t keys;
  DT_TRY(ps_keys_plan(s->m, t, d->T, &keys));
  model_t *tab = NULL;
  int rc = c->ps.push_factors ? ps_factor_plan(s->m, &keys, &s->fplan) : 0;
  if (rc == 0 && d->T > 1) rc = ps_keys_table_of(s->m, &keys, &tab);
  ps_keys_free(&keys);
  if (rc == 0) rc = ps_shard_plan_factors(tab ? tab : s->m, d->K, c->optim.kind == OPTIM_LARS, &s->fplan, &s->map);
  model_free(tab);
  return rc;
}

int ps_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int T = ps_group_size(c);
  ps_desc_t d = {.c = c, .out = out, .R = c->workers / T, .T = T, .K = ps_nservers(c, c->workers) / T,
                 .first = c->workers};
  d.slice = calloc((size_t)T, sizeof *d.slice);
  int rc = d.slice ? tensor_desc_new(c, m, T, 1, &d.td) : dt_error("out of memory");
  for (int t = 0; t < T && rc == 0; t++) rc = plan_slice(&d, t);
  if (rc == 0) rc = describe_workers(&d);
  for (int w = 0; c->ps.replicas > 1 && w < d.R && rc == 0; w++)
    for (int k = 0; k < d.K && rc == 0; k++)
      if (add_replication(&d, k) == STEP_FAILED) rc = -1;
  for (int w = 0; c->ps.replicas > 1 && w < d.R && rc == 0; w++)
    if (describe_coord_copies(&d, w) == STEP_FAILED) rc = -1;
  if (c->ps.replicas > 1 && c->schedule == SCHEDULE_SYNC && rc == 0 && /* the step's update */
      add_coord_copy(&d, (step_task_t){.after = -1}) == STEP_FAILED)
    rc = -1;
  for (int t = 0; t < T && rc == 0; t++)
    for (int k = 0; k < d.K && rc == 0; k++)
      if (describe_update(&d, t, k) == STEP_FAILED) rc = -1;
  for (int t = 0; d.slice && t < T; t++) {
    ps_shard_free(&d.slice[t].map);
    ps_factor_plan_free(&d.slice[t].fplan);
  }
  free(d.slice);
  tensor_desc_free(d.td);
  return rc;
}
