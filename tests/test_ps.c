/* Parameter servers: the key-range split; push and pull through the
 * client against real servers on the local transport (values, the update
 * rule, ranges split over two servers); and bad input sent straight to a
 * server (keys outside the model or the shard, a push of the wrong length,
 * a bad magic, a rank that is not a worker, a request of the wrong size):
 * each is rejected with an error reply, and the server goes on serving. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "strategy/ps/ps_server.h"
#include "strategy/tensor/tensor.h"
#include "test.h"

/* w - lr g, to the rounding of a fused multiply-add */
static int sgd_step_is(const float *got, const float *w0, float lr, const float *g, float gscale,
                       size_t n) {
  for (size_t i = 0; i < n; i++) {
    float want = w0[i] - lr * (g ? g[i] : 1.0f) * gscale;
    if (fabsf(got[i] - want) > 1e-6f * (1 + fabsf(want))) return 0;
  }
  return 1;
}

/* ---- the split ------------------------------------------------------------ */

static model_t *build_mlp(int h, int w) {
  model_spec_t spec;
  model_t *m = NULL;
  if (model_spec_builtin("mlp", &spec) != 0) return NULL;
  if (model_build(&spec, (shape_t){1, h, w}, 10, 1, &m) != 0) m = NULL;
  model_spec_free(&spec);
  if (m) model_init_params(m, 5);
  return m;
}

static int is_tensor_boundary(const model_t *m, size_t off) {
  for (int i = 0; i < m->ntensors; i++)
    if (m->tensors[i].off == off) return 1;
  return off == m->nparams;
}

static void test_shard_plan_balanced_and_contiguous(void) {
  model_t *m = build_mlp(28, 28); /* 535818 parameters, the first tensor 401408 */
  CHECK(m != NULL);
  if (!m) return;
  for (int k = 1; k <= 8; k++) {
    ps_shard_map_t map;
    CHECK_OK(ps_shard_plan(m, k, 0, &map));
    size_t ideal = m->nparams / (size_t)k, largest = 0;
    CHECK(map.shards[0].begin == 0 && map.shards[k - 1].end == m->nparams);
    for (int i = 0; i < k; i++) {
      CHECK(map.shards[i].end > map.shards[i].begin);
      if (i) CHECK(map.shards[i].begin == map.shards[i - 1].end);
      size_t len = map.shards[i].end - map.shards[i].begin;
      if (len > largest) largest = len;
    }
    CHECK(largest <= ideal + ideal / 10 + 16); /* balanced to the tolerance of a snapped cut */
    ps_shard_free(&map);
  }
  /* with 2 servers the ideal cut lies inside layers.0.weight, far from a
   * boundary: cut inside it; with 4 the cut near 401408+512 snaps to it */
  ps_shard_map_t map;
  CHECK_OK(ps_shard_plan(m, 2, 0, &map));
  CHECK(!is_tensor_boundary(m, map.shards[0].end) && map.shards[0].end % 16 == 0);
  ps_shard_free(&map);
  CHECK_OK(ps_shard_plan(m, 4, 0, &map));
  CHECK(map.shards[2].end == 401408 + 512); /* layers.2.weight starts there */
  ps_shard_free(&map);
  model_free(m);
}

static void test_shard_plan_whole_tensors_for_lars(void) {
  model_t *m = build_mlp(28, 28);
  if (!m) return;
  ps_shard_map_t map;
  CHECK_OK(ps_shard_plan(m, 3, 1, &map));
  for (int i = 0; i < 3; i++) CHECK(is_tensor_boundary(m, map.shards[i].end));
  optim_segment_t *segs;
  int n;
  CHECK_OK(ps_shard_segments(m, map.shards[1], &segs, &n));
  size_t sum = 0;
  for (int i = 0; i < n; i++) sum += segs[i].len;
  CHECK(sum == map.shards[1].end - map.shards[1].begin && segs[0].off == 0);
  free(segs);
  ps_shard_free(&map);
  CHECK_FAILS_WITH(ps_shard_plan(m, 7, 1, &map), "LARS keeps tensors whole");
  CHECK_FAILS_WITH(ps_shard_plan(m, 0, 0, &map), "ps:0");
  model_free(m);
}

/* ---- servers on the local transport ------------------------------------------ */

/* A world on the local transport: ranks 0..workers-1 are workers, the
 * servers follow, and any rank after them is a stranger (neither). The
 * servers serve; every other rank runs `fn` on a ps_rank_t. */
typedef struct ps_rank ps_rank_t;

typedef struct {
  int workers, servers, strangers;
  schedule_t schedule;
  double schedule_param; /* backup:B */
  double dc_asgd;        /* --dc-asgd LAMBDA (or a:LAMBDA0 with dc_adaptive) */
  int dc_adaptive;
  int64_t drop_stale;    /* --drop-stale S given as S + 1 (0, the default here: off) */
  float momentum;        /* sgd momentum [0] */
  int implicit_momentum; /* --implicit-momentum on */
  int replicas;          /* --ps-replicas [1] */
  int push_factors;      /* --ps-push factors */
  int (*fn)(comm_t *c, ps_rank_t *w);
} world_spec_t;

typedef struct {
  world_spec_t spec;
  train_config_t cfg;
  dataset_t data;
} world_t;

/* What a worker (or stranger) starts with: the servers' model (the same
 * seed, so m->params are the initial parameters), P = m->nparams, the map
 * of the world's servers, a client (a stranger has none) and two buffers
 * of P floats. After fn, a worker says bye to the servers. */
struct ps_rank {
  int me;
  model_t *m;
  size_t P;
  ps_shard_map_t map;
  ps_client_t *cl;
  float *buf, *g;
};

static int bye(ps_client_t *cl) {
  ps_req_t req = {.op = PS_OP_BYE};
  return ps_wait(cl, ps_call(cl, 0, &req, NULL, 0), NULL);
}

static int worker_open(comm_t *c, const world_t *t, ps_rank_t *w) {
  w->m = build_mlp(8, 8);
  RCHECK(w->m != NULL);
  w->P = w->m->nparams;
  w->buf = dt_alloc_floats(w->P), w->g = dt_alloc_floats(w->P);
  RCHECK(w->buf && w->g);
  RCHECK_OK(ps_shard_plan(w->m, t->spec.servers, 0, &w->map));
  w->map.nworkers = w->map.first_server = t->spec.workers;
  if (w->me < t->spec.workers) RCHECK_OK(ps_client_new(c, w->me, &w->map, &w->cl));
  return 0;
}

static int worker_run(comm_t *c, const world_t *t, ps_rank_t *w) {
  DT_TRY(worker_open(c, t, w));
  DT_TRY(t->spec.fn(c, w));
  if (w->cl) RCHECK_OK(bye(w->cl));
  return 0;
}

static int world_rank(comm_t *c, void *arg) {
  world_t *t = arg;
  ps_rank_t w = {.me = comm_rank(c)};
  if (w.me >= t->spec.workers && w.me < t->spec.workers + t->spec.servers)
    return ps_server_run(c, &t->cfg, t->spec.workers, &t->data);
  int rc = worker_run(c, t, &w);
  ps_client_free(w.cl);
  ps_shard_free(&w.map);
  dt_free(w.buf), dt_free(w.g);
  model_free(w.m);
  return rc;
}

/* Runs the world: plain SGD at lr 0.1, batch 8, seed 5, on 64 synthetic
 * 8x8 samples. */
static int run_world(world_spec_t spec) {
  world_t t = {.spec = spec};
  train_config_default(&t.cfg);
  t.cfg.lr = 0.1;
  t.cfg.schedule = spec.schedule;
  t.cfg.schedule_param = spec.schedule_param;
  t.cfg.exchange = EXCHANGE_PS;
  t.cfg.ps.servers = spec.servers;
  t.cfg.batch = 8;
  t.cfg.seed = 5;
  t.cfg.workers = spec.workers;
  t.cfg.ps.dc_asgd = spec.dc_asgd;
  t.cfg.ps.dc_asgd_adaptive = spec.dc_adaptive;
  t.cfg.optim.momentum = spec.momentum;
  t.cfg.ps.drop_stale = spec.drop_stale - 1;
  t.cfg.ps.implicit_momentum = spec.implicit_momentum;
  t.cfg.ps.replicas = spec.replicas ? spec.replicas : 1;
  t.cfg.ps.push_factors = spec.push_factors;
  int rc = dataset_synthetic(64, 1, 8, 8, 10, 3, &t.data);
  if (rc == 0) rc = comm_local_run(spec.workers + spec.servers + spec.strangers, NULL, world_rank, &t);
  dataset_free(&t.data);
  return rc;
}

/* A raw request: its reply (and values), then the push values; a rejected
 * request's values are withdrawn. Returns the reply's status. */
static int raw_call(comm_t *c, int server, ps_req_t *req, const void *payload, size_t payload_len,
                    ps_reply_t *rep, void *vals, size_t vals_len) {
  comm_req_t *r_rep, *r_vals = NULL, *s_req, *s_data = NULL;
  req->reply_tag = PS_TAG_REPLY + 2 * 7;
  DT_TRY(comm_irecv(c, server, req->reply_tag, rep, sizeof *rep, &r_rep));
  if (vals) DT_TRY(comm_irecv(c, server, req->reply_tag + 1, vals, vals_len, &r_vals));
  DT_TRY(comm_isend(c, server, PS_TAG_REQ, req, sizeof *req, &s_req));
  if (payload) DT_TRY(comm_isend(c, server, PS_TAG_DATA, payload, payload_len, &s_data));
  DT_TRY(comm_wait(c, s_req));
  DT_TRY(comm_wait(c, r_rep));
  if (rep->status != 0) {
    if (r_vals) comm_cancel(c, r_vals);
    if (s_data) comm_cancel(c, s_data);
    return rep->status;
  }
  if (s_data) DT_TRY(comm_wait(c, s_data));
  if (r_vals) DT_TRY(comm_wait(c, r_vals));
  return 0;
}

static ps_req_t base_req(int op, int worker, size_t begin, size_t count) {
  return (ps_req_t){.magic = PS_MAGIC, .op = op, .worker = worker, .begin = begin, .count = count};
}

/* Rank 0 of a world of 2 workers, 1 server (rank 2) and a stranger (rank 3). */
static int bad_requests(comm_t *c, const model_t *m, float *buf) {
  size_t P = m->nparams;
  ps_reply_t rep;
  ps_req_t q;
  /* keys outside the model */
  q = base_req(PS_OP_PULL, 0, P - 10, 20);
  RCHECK(raw_call(c, 2, &q, NULL, 0, &rep, buf, 20 * sizeof(float)) != 0);
  RCHECK(strstr(rep.error, "outside the model"));
  /* a push of the wrong length: 100 values for the whole range; they are drained */
  q = base_req(PS_OP_PUSH, 0, 0, P);
  q.nvalues = 100;
  RCHECK(raw_call(c, 2, &q, buf, 100 * sizeof(float), &rep, NULL, 0) != 0);
  RCHECK(strstr(rep.error, "push of 100 values"));
  /* a push of part of the range */
  q = base_req(PS_OP_PUSH, 0, 0, 64);
  q.nvalues = 64;
  RCHECK(raw_call(c, 2, &q, buf, 64 * sizeof(float), &rep, NULL, 0) != 0);
  RCHECK(strstr(rep.error, "whole range"));
  /* not a parameter-server request */
  q = base_req(PS_OP_PULL, 0, 0, 8);
  q.magic = 0x12345678;
  RCHECK(raw_call(c, 2, &q, NULL, 0, &rep, buf, 8 * sizeof(float)) != 0);
  RCHECK(strstr(rep.error, "bad magic"));
  /* a worker pretending to be another, an unknown operation, a state that does not exist */
  q = base_req(PS_OP_PULL, 1, 0, 8);
  RCHECK(raw_call(c, 2, &q, NULL, 0, &rep, buf, 8 * sizeof(float)) != 0);
  RCHECK(strstr(rep.error, "says it is worker 1"));
  q = base_req(77, 0, 0, 8);
  RCHECK(raw_call(c, 2, &q, NULL, 0, &rep, NULL, 0) != 0);
  RCHECK(strstr(rep.error, "unknown operation 77"));
  q = base_req(PS_OP_PULL, 0, 0, 8);
  q.which = 3;
  RCHECK(raw_call(c, 2, &q, NULL, 0, &rep, buf, 8 * sizeof(float)) != 0);
  RCHECK(strstr(rep.error, "optimizer keeps 0 state"));
  /* sufficient factors to a server that runs without --ps-push factors */
  q = base_req(PS_OP_PUSH, 0, 0, P);
  q.nvalues = P, q.encoded = 64, q.flags = PS_PUSH_FACTORS;
  RCHECK(raw_call(c, 2, &q, buf, 64, &rep, NULL, 0) != 0);
  RCHECK(strstr(rep.error, "without --ps-push factors"));
  /* a request of the wrong size: the transport refuses it, the server logs it */
  char junk[10] = {0};
  dt_error_clear();
  RCHECK(comm_send(c, 2, PS_TAG_REQ, junk, sizeof junk) != 0);
  RCHECK(strstr(dt_errmsg(), "receiver expects"));
  return 0;
}

/* Worker 0 sends bad requests, the stranger (rank 3) one; after them the
 * server still serves: the initial parameters, or after worker 1's push ... */
static int worker_bad_input(comm_t *c, ps_rank_t *w) {
  size_t P = w->P;
  if (w->me == 3) { /* a stranger: rank 3 is neither worker nor server */
    ps_req_t q = base_req(PS_OP_PULL, 3, 0, 8);
    ps_reply_t rep;
    RCHECK(raw_call(c, 2, &q, NULL, 0, &rep, w->buf, 8 * sizeof(float)) != 0);
    RCHECK(strstr(rep.error, "rank 3 is not a worker"));
    return 0;
  }
  if (w->me == 0) RCHECK_OK(bad_requests(c, w->m, w->buf));
  for (size_t i = 0; i < P; i++) w->g[i] = (float)(i % 7) - 3;
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, NULL), NULL));
  RCHECK(!memcmp(w->buf, w->m->params, P * sizeof(float)) ||
         sgd_step_is(w->buf, w->m->params, 0.1f, w->g, 1, P));
  if (w->me == 1) { /* ... which is w - lr g (async, plain SGD, lr 0.1) */
    ps_req_t tmpl = {.nbatches = 1};
    RCHECK_OK(ps_wait(w->cl, ps_push(w->cl, 0, P, w->g, &tmpl), NULL));
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, NULL), NULL));
    RCHECK(sgd_step_is(w->buf, w->m->params, 0.1f, w->g, 1, P));
    RCHECK(ps_client_version(w->cl, 0) == 1);
  }
  return 0;
}

static void test_server_rejects_bad_input_and_keeps_serving(void) {
  CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = 1, .strangers = 1,
                                    .schedule = SCHEDULE_ASYNC, .fn = worker_bad_input}));
}

/* Two servers: a pull of a range across the cut comes back whole; pushes
 * of both workers under sync make one step of their sum. */
static int worker_two_servers(comm_t *c, ps_rank_t *w) {
  size_t P = w->P, cut = w->map.shards[0].end, lo = cut - 5;
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, lo, 10, 0, w->buf, NULL), NULL));
  RCHECK(!memcmp(w->buf, w->m->params + lo, 10 * sizeof(float)));
  for (size_t i = 0; i < P; i++) w->g[i] = w->me ? 1.0f : 2.0f;
  ps_req_t tmpl = {.clock = 0, .nbatches = 1};
  RCHECK_OK(ps_wait(w->cl, ps_push(w->cl, 0, P, w->g, &tmpl), NULL));
  ps_req_t cond = {.clock = 1}; /* sync: wait for clock 0 to be applied */
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, &cond), NULL));
  RCHECK(sgd_step_is(w->buf, w->m->params, 0.1f, NULL, 3, P));
  RCHECK(ps_client_version(w->cl, 0) == 1 && ps_client_version(w->cl, 1) == 1);
  /* ps_pull returns a timestamp >= 0, or -1 */
  RCHECK_FAILS_WITH(ps_pull(w->cl, P - 1, 2, 0, w->buf, NULL) >= 0 ? 0 : -1, "outside the model");
  return 0;
}

static void test_push_pull_across_two_servers(void) {
  CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = 2, .schedule = SCHEDULE_SYNC,
                                    .fn = worker_two_servers}));
}

/* --comm-order priority / tictac: a push in parts, sent out of key order
 * and across the servers' cut, is gathered by each server and applied as
 * one push: under sync the step equals the whole pushes' (the test above),
 * bit for bit, and the bytes counted are the whole push's. */
static int worker_push_in_parts(comm_t *c, ps_rank_t *w) {
  size_t P = w->P, cut = w->map.shards[0].end;
  for (size_t i = 0; i < P; i++) w->g[i] = w->me ? 1.0f : 2.0f;
  ps_req_t tmpl = {.clock = 0, .nbatches = 1, .flags = PS_PUSH_PART};
  /* the last keys first, as backprop readies them; one part straddles the cut */
  size_t cuts[] = {P, cut + 3, cut - 4, 7, 0};
  for (int k = 0; k < 4; k++) {
    size_t lo = cuts[k + 1], n = cuts[k] - lo;
    RCHECK_OK(ps_wait(w->cl, ps_push(w->cl, lo, n, w->g + lo, &tmpl), NULL));
  }
  double pushed, pulled, blocked;
  ps_client_totals(w->cl, &pushed, &pulled, &blocked);
  RCHECK(pushed == (double)(P * sizeof(float)));
  ps_req_t cond = {.clock = 1};
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, &cond), NULL));
  RCHECK(sgd_step_is(w->buf, w->m->params, 0.1f, NULL, 3, P));
  RCHECK(ps_client_version(w->cl, 0) == 1 && ps_client_version(w->cl, 1) == 1);
  /* parts that cover more than a server's keys are refused */
  if (w->me == 0) {
    ps_req_t t2 = {.clock = 1, .nbatches = 1, .flags = PS_PUSH_PART};
    RCHECK_OK(ps_wait(w->cl, ps_push(w->cl, 0, 8, w->g, &t2), NULL));
    RCHECK_FAILS_WITH(ps_wait(w->cl, ps_push(w->cl, 0, cut, w->g, &t2), NULL), "cover more than");
  }
  return 0;
}

static void test_push_in_parts_is_one_push(void) {
  CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = 2, .schedule = SCHEDULE_SYNC,
                                    .fn = worker_push_in_parts}));
}

/* A request a server holds (a sync pull waiting for the clock) does not
 * block the client: 300 more requests (more than its 256 slots) come and
 * go while it waits. */
static int worker_held_request(comm_t *c, ps_rank_t *w) {
  size_t P = w->P;
  ps_req_t cond = {.clock = 1};
  int held = ps_pull(w->cl, 0, P, 0, w->buf, &cond);
  RCHECK(held >= 0);
  for (int i = 0; i < 300; i++)
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, (size_t)i, 1, 0, w->g, NULL), NULL));
  RCHECK(ps_test(w->cl, held) == 0);
  for (size_t i = 0; i < P; i++) w->g[i] = 1.0f;
  ps_req_t tmpl = {.clock = 0, .nbatches = 1};
  RCHECK_OK(ps_wait(w->cl, ps_push(w->cl, 0, P, w->g, &tmpl), NULL));
  RCHECK_OK(ps_wait(w->cl, held, NULL));
  RCHECK(sgd_step_is(w->buf, w->m->params, 0.1f, NULL, 2, P));
  return 0;
}

static void test_held_request_does_not_block_the_client(void) {
  CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = 1, .schedule = SCHEDULE_SYNC,
                                    .fn = worker_held_request}));
}

/* The transfers' order (ps_schedule.c), by hand. Layers 1 and 3 hold no
 * parameters. */
static void test_transfer_order_by_hand(void) {
  size_t bytes[5] = {400, 0, 40, 0, 4000};
  double start[5];
  int out[5];
  /* priority: layer order, whatever the times */
  double timed[5] = {1, 2, 0.5, 1, 3};
  CHECK(ps_transfer_order(COLL_ORDER_PRIORITY, timed, bytes, 5, start, out) == 3);
  CHECK(out[0] == 0 && out[1] == 2 && out[2] == 4);
  /* tictac on a timed chain: starts 0, 1, 3, 3.5, 4.5 -> layer order */
  CHECK(ps_transfer_order(COLL_ORDER_TICTAC, timed, bytes, 5, start, out) == 3);
  CHECK(out[0] == 0 && out[1] == 2 && out[2] == 4);
  CHECK(start[0] == 0 && start[2] == 3 && start[4] == 4.5);
  /* before any forward is timed every start is 0: the smallest transfer first */
  double untimed[5] = {0};
  CHECK(ps_transfer_order(COLL_ORDER_TICTAC, untimed, bytes, 5, start, out) == 3);
  CHECK(out[0] == 2 && out[1] == 0 && out[2] == 4);
  /* layers 0 and 1 cost nothing: layers 0 and 2 both start at 0 (40 bytes
   * go before 400), layer 4 at 2 */
  double free_front[5] = {0, 0, 2, 0, 1};
  CHECK(ps_transfer_order(COLL_ORDER_TICTAC, free_front, bytes, 5, start, out) == 3);
  CHECK(out[0] == 2 && out[1] == 0 && out[2] == 4);
  /* a late layer that is cheap to send does not jump an earlier one */
  size_t big_front[5] = {4000, 0, 400, 0, 40};
  CHECK(ps_transfer_order(COLL_ORDER_TICTAC, timed, big_front, 5, start, out) == 3);
  CHECK(out[0] == 0 && out[1] == 2 && out[2] == 4);
  /* equal sizes and starts: layer order */
  size_t same[5] = {8, 0, 8, 0, 8};
  CHECK(ps_transfer_order(COLL_ORDER_TICTAC, untimed, same, 5, start, out) == 3);
  CHECK(out[0] == 0 && out[1] == 2 && out[2] == 4);
}

/* backup:1 with 3 workers: the step is taken with the first two pushes;
 * the third, computed on the old version, is dropped. */
static int worker_backup(comm_t *c, ps_rank_t *w) {
  size_t P = w->P;
  enum { TAG_PULLED = 77 }; /* worker 2 has version 0: the others may step */
  int token = 0;
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, NULL), NULL));
  if (w->me == 2) {
    RCHECK_OK(comm_send(c, 0, TAG_PULLED, &token, sizeof token));
    RCHECK_OK(comm_send(c, 1, TAG_PULLED, &token, sizeof token));
  } else { /* else a late first pull of worker 2 sees version 1 and waits for a 2nd step */
    RCHECK_OK(comm_recv(c, 2, TAG_PULLED, &token, sizeof token));
  }
  for (size_t i = 0; i < P; i++) w->g[i] = (float)(w->me + 1);
  if (w->me == 2) { /* the slow one: it pushes, on version 0, after the step */
    ps_req_t newer = {.flags = PS_PULL_NEWER};
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, &newer), NULL)); /* answered after the step */
    ps_req_t q = base_req(PS_OP_PUSH, 2, 0, P);
    q.nvalues = P, q.version = 0, q.nbatches = 1;
    ps_reply_t rep;
    RCHECK_OK(raw_call(c, 3, &q, w->g, P * sizeof(float), &rep, NULL, 0)); /* taken, and dropped */
  } else {
    ps_req_t tmpl = {.nbatches = 1};
    RCHECK_OK(ps_wait(w->cl, ps_push(w->cl, 0, P, w->g, &tmpl), NULL));
  }
  ps_req_t cond = {.flags = PS_PULL_NEWER};
  if (w->me == 2) cond.flags = 0;
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, &cond), NULL));
  RCHECK(sgd_step_is(w->buf, w->m->params, 0.1f, NULL, 3, P)); /* 1 + 2: worker 2's push dropped */
  return 0;
}

static void test_backup_drops_the_late_gradient(void) {
  CHECK_OK(run_world((world_spec_t){.workers = 3, .servers = 1, .schedule = SCHEDULE_BACKUP,
                                    .schedule_param = 1, .fn = worker_backup}));
}

/* ---- DC-ASGD: the paper's update on the worker's mini-batch gradient -------------- */

/* A message between worker ranks, to order their requests. */
#define TEST_TAG 7
static int signal_rank(comm_t *c, int to) {
  char b = 1;
  return comm_send(c, to, TEST_TAG, &b, 1);
}
static int wait_signal(comm_t *c, int from) {
  char b;
  return comm_recv(c, from, TEST_TAG, &b, 1);
}

/* Async, plain SGD at lr 0.1, N workers. Worker 0 pulls w0; worker 1
 * pushes p1 = 1 (computed on w0: nothing to compensate), so w1 = w0 - 0.1;
 * then worker 0 pushes p0 = 2, computed on w0, d = w1 - w0 = -0.1. Pushes
 * are mini-batch gradients divided by N (ps_worker.c), so the paper's
 * gradients are g1 = N p1, g0 = N p0 and its update, with eta = lr / N,
 *
 *   w2 = w1 - (lr / N) (g0 + lambda g0 g0 d) = w1 - lr (p0 + lambda N p0 p0 d).
 *
 * N = 2, lambda = 1: w2 = w0 - 0.1 - 0.1 (2 + 2 * 4 * -0.1) = w0 - 0.22
 * (the old update, lambda on p0, gave w0 - 0.26). DC-ASGD-a, lambda0 = 1:
 * MeanSquare = 0.95 (0.05 g1^2) + 0.05 g0^2 and lambda_t = 1 / sqrt(MS +
 * 1e-7): N = 3: MS = 0.95 * 0.45 + 0.05 * 36 = 2.2275, lambda_t = 0.670025,
 * w2 = w0 - 0.1 - 0.1 (2 - 0.670025 * 3 * 4 * 0.1) = w0 - 0.1 - 0.119596. */
static double dc_expected_shift(int N, double lambda, int adaptive) {
  double p1 = 1, p0 = 2, lr = 0.1, d = -lr * p1;
  if (adaptive) {
    double ms = 0.95 * (0.05 * (N * p1) * (N * p1)) + 0.05 * (N * p0) * (N * p0);
    lambda = lambda / sqrt(ms + 1e-7);
  }
  return -lr * p1 - lr * (p0 + lambda * N * p0 * p0 * d);
}

static double dc_lambda;
static int dc_adaptive;

static int worker_dc_asgd(comm_t *c, ps_rank_t *w) {
  size_t P = w->P;
  int N = (int)w->map.nworkers;
  ps_req_t tmpl = {.nbatches = 1};
  if (w->me == 0) {
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, NULL), NULL));
    RCHECK(!memcmp(w->buf, w->m->params, P * sizeof(float)));
    RCHECK_OK(signal_rank(c, 1));
    RCHECK_OK(wait_signal(c, 1)); /* worker 1's push is applied */
    for (size_t i = 0; i < P; i++) w->g[i] = 2;
    RCHECK_OK(ps_wait(w->cl, ps_push(w->cl, 0, P, w->g, &tmpl), NULL));
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, NULL), NULL));
    double shift = dc_expected_shift(N, dc_lambda, dc_adaptive);
    for (size_t i = 0; i < P; i++)
      if (fabs(w->buf[i] - (w->m->params[i] + shift)) > 1e-5) {
        fprintf(stderr, "  key %zu: %.7f, expected %.7f (w0 %.7f %+.6f)\n", i, w->buf[i],
                w->m->params[i] + shift, w->m->params[i], shift);
        RCHECK(0);
      }
  } else if (w->me == 1) {
    RCHECK_OK(wait_signal(c, 0));
    for (size_t i = 0; i < P; i++) w->g[i] = 1;
    RCHECK_OK(ps_wait(w->cl, ps_push(w->cl, 0, P, w->g, &tmpl), NULL)); /* applied on arrival */
    RCHECK_OK(signal_rank(c, 0));
  }
  return 0;
}

static void test_dc_asgd_update_is_the_papers(void) {
  for (int servers = 1; servers <= 2; servers++) {
    dc_lambda = 1, dc_adaptive = 0;
    CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = servers, .schedule = SCHEDULE_ASYNC,
                                      .dc_asgd = dc_lambda, .fn = worker_dc_asgd}));
    CHECK_OK(run_world((world_spec_t){.workers = 4, .servers = servers, .schedule = SCHEDULE_ASYNC,
                                      .dc_asgd = dc_lambda, .fn = worker_dc_asgd}));
  }
}

static void test_dc_asgd_adaptive_update_is_the_papers(void) {
  for (int servers = 1; servers <= 2; servers++) {
    dc_adaptive = 1;
    dc_lambda = 1;
    CHECK_OK(run_world((world_spec_t){.workers = 3, .servers = servers, .schedule = SCHEDULE_ASYNC,
                                      .dc_asgd = dc_lambda, .dc_adaptive = 1,
                                      .fn = worker_dc_asgd}));
    dc_lambda = 2; /* the paper's lambda0 */
    CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = servers, .schedule = SCHEDULE_ASYNC,
                                      .dc_asgd = dc_lambda, .dc_adaptive = 1,
                                      .fn = worker_dc_asgd}));
  }
}

/* Pushes a gradient of `value` everywhere and waits for the ack; pulls the
 * whole model as a value-bound worker does (waiting for its own push). */
static int push_all(ps_rank_t *w, float value) {
  ps_req_t tmpl = {.nbatches = 1};
  for (size_t i = 0; i < w->P; i++) w->g[i] = value;
  return ps_wait(w->cl, ps_push(w->cl, 0, w->P, w->g, &tmpl), NULL);
}
static int pull_own(ps_rank_t *w) {
  ps_req_t cond = {.flags = PS_PULL_OWN};
  return ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, &cond), NULL);
}
/* Every key of buf is w0 + shift (lr 0.1, plain SGD: to float rounding). */
static int all_shifted(const ps_rank_t *w, const float *buf, size_t n, double shift) {
  for (size_t i = 0; i < n; i++)
    if (fabs(buf[i] - (w->m->params[i] + shift)) > 1e-5) {
      fprintf(stderr, "  worker %d key %zu: %.6f, expected w0 %+.3f = %.6f\n", w->me, i, buf[i],
              shift, w->m->params[i] + shift);
      return 0;
    }
  return 1;
}

/* ---- --ps-replicas 2: duplicates taken once, the backup the primary's copy --------- */

/* async, 1 worker, 2 servers, each shard's backup on the other server,
 * lr 0.1: the push of clock 5 (all 1) is applied; the same push again
 * (a resend) and an older clock are acknowledged and not applied; clock 6
 * is: the worker pulls w0 - 0.2. Then shard 0's keys asked of server 1,
 * its backup (which a worker does only once shard 0's primary is dead:
 * the backup takes over), are w0 - 0.2 too: the backup replayed both
 * pushes the primary applied, and neither duplicate. */
static int push_at_clock(ps_rank_t *w, int64_t clock, float value) {
  ps_req_t tmpl = {.nbatches = 1, .clock = clock};
  for (size_t i = 0; i < w->P; i++) w->g[i] = value;
  return ps_wait(w->cl, ps_push(w->cl, 0, w->P, w->g, &tmpl), NULL);
}

static int worker_replicated(comm_t *c, ps_rank_t *w) {
  ps_req_t none = {0};
  RCHECK_OK(push_at_clock(w, 5, 1));
  RCHECK_OK(push_at_clock(w, 5, 1));
  RCHECK_OK(push_at_clock(w, 3, 1));
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, &none), NULL));
  RCHECK(all_shifted(w, w->buf, w->P, -0.1));
  RCHECK_OK(push_at_clock(w, 6, 1));
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, &none), NULL));
  RCHECK(all_shifted(w, w->buf, w->P, -0.2));
  ps_range_t r0 = w->map.shards[0];
  ps_req_t pull = base_req(PS_OP_PULL, 0, r0.begin, r0.end - r0.begin);
  ps_reply_t rep;
  memset(w->buf, 0, w->P * sizeof(float));
  RCHECK_OK(raw_call(c, 2, &pull, NULL, 0, &rep, w->buf + r0.begin, (r0.end - r0.begin) * sizeof(float)));
  RCHECK(rep.version == 2);
  RCHECK(all_shifted(w, w->buf + r0.begin, r0.end - r0.begin, -0.2));
  return 0;
}

static void test_replicas_take_a_resent_push_once(void) {
  CHECK_OK(run_world((world_spec_t){.workers = 1, .servers = 2, .schedule = SCHEDULE_ASYNC,
                                    .replicas = 2, .fn = worker_replicated}));
}

/* ---- negative momentum: asynchrony's implicit momentum taken out ------------------ */

/* async, sgd, lr 0.1: worker 1 pushes 1, then worker 0 pushes 1. The
 * server's momentum buffer is 1, then mu + 1 (PyTorch's: the first step
 * copies g), so w2 = w0 - 0.1 - 0.1 (mu + 1). --implicit-momentum on with
 * --momentum M: mu = M - (1 - 1/N): N = 2, M = 0.9: mu = 0.4, w2 = w0 -
 * 0.24; N = 4, M = 0.5: mu = -0.25 (negative), w2 = w0 - 0.175; off, M =
 * 0.9: w2 = w0 - 0.29. */
static double momentum_shift;

static int worker_two_steps(comm_t *c, ps_rank_t *w) {
  if (w->me == 0) {
    RCHECK_OK(wait_signal(c, 1));
    RCHECK_OK(push_all(w, 1));
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, NULL), NULL));
    RCHECK(all_shifted(w, w->buf, w->P, momentum_shift));
  } else if (w->me == 1) {
    RCHECK_OK(push_all(w, 1));
    RCHECK_OK(signal_rank(c, 0));
  }
  return 0;
}

static void test_implicit_momentum_lowers_the_servers_momentum(void) {
  struct { int N; float M; int on; double shift; } cases[] = {
      {2, 0.9f, 1, -0.24}, {4, 0.5f, 1, -0.175}, {4, 0.9f, 0, -0.29}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    momentum_shift = cases[i].shift;
    for (int servers = 1; servers <= 2; servers++)
      CHECK_OK(run_world((world_spec_t){.workers = cases[i].N, .servers = servers,
                                        .schedule = SCHEDULE_ASYNC, .momentum = cases[i].M,
                                        .implicit_momentum = cases[i].on,
                                        .fn = worker_two_steps}));
  }
  train_config_t cfg;
  train_config_default(&cfg);
  cfg.optim.momentum = 0.9f;
  cfg.ps.implicit_momentum = 1;
  CHECK(ps_server_optim(&cfg, 1).momentum == 0.9f); /* one worker: nothing to take out */
  CHECK(fabsf(ps_server_optim(&cfg, 16).momentum - (0.9f - 0.9375f)) < 1e-7f);
  cfg.ps.implicit_momentum = 0;
  CHECK(ps_server_optim(&cfg, 16).momentum == 0.9f);
}

/* ---- --drop-stale S: a too-stale push dropped instead of waited for ----------------- */

/* async, --drop-stale 1, 3 workers, lr 0.1, all on w0 (version 0): worker
 * 1 pushes 1 (staleness 0: applied, version 1), worker 2 pushes 2
 * (staleness 1: applied, version 2), worker 0 pushes 4 (staleness 2 > 1:
 * dropped). Worker 0 then pulls w0 - 0.1 (1 + 2) = w0 - 0.3, and the
 * coordinator counts one drop. */
static int epoch_stats(ps_rank_t *w, ps_epoch_stats_t *st) {
  int N = (int)w->map.nworkers;
  size_t len = sizeof(ps_epoch_stats_t) + (size_t)N * sizeof(ps_worker_stats_t);
  unsigned char *buf = malloc(len);
  if (!buf) return -1;
  ps_req_t req = {.op = PS_OP_STATS, .epoch = 0};
  int rc = ps_wait(w->cl, ps_call(w->cl, 0, &req, buf, len), NULL);
  memcpy(st, buf, sizeof *st);
  free(buf);
  return rc;
}

static int worker_drop_stale(comm_t *c, ps_rank_t *w) {
  ps_req_t none = {0};
  /* the order: 0 pulls, 2 pulls, 1 pulls and pushes, 2 pushes, 0 pushes */
  if (w->me == 0) {
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, &none), NULL));
    RCHECK_OK(signal_rank(c, 2));
    RCHECK_OK(wait_signal(c, 2));
    RCHECK_OK(push_all(w, 4));
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, &none), NULL));
    RCHECK(all_shifted(w, w->buf, w->P, -0.3));
    ps_epoch_stats_t st;
    RCHECK_OK(epoch_stats(w, &st));
    RCHECK(st.dropped == 1 && st.staleness_n == 2 && st.staleness_sum == 1);
  } else if (w->me == 2) {
    RCHECK_OK(wait_signal(c, 0));
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, &none), NULL));
    RCHECK_OK(signal_rank(c, 1));
    RCHECK_OK(wait_signal(c, 1));
    RCHECK_OK(push_all(w, 2));
    RCHECK_OK(signal_rank(c, 0));
  } else {
    RCHECK_OK(wait_signal(c, 2));
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, &none), NULL));
    RCHECK_OK(push_all(w, 1));
    RCHECK_OK(signal_rank(c, 2));
  }
  return 0;
}

static void test_drop_stale_drops_the_too_stale_push(void) {
  for (int servers = 1; servers <= 2; servers++)
    CHECK_OK(run_world((world_spec_t){.workers = 3, .servers = servers,
                                      .schedule = SCHEDULE_ASYNC, .drop_stale = 2 /* S = 1 */,
                                      .fn = worker_drop_stale}));
}

/* ---- staleness: what the metrics count ---------------------------------------------- */

/* async, N = 3 workers taking turns: each pulls, pushes, pulls again and
 * hands on. In the first round every push is computed on the model it is
 * applied to (staleness 0); from the second on, the N - 1 = 2 other
 * workers' updates come between a worker's pull and its push: staleness
 * 2, where Gupta et al. (2016), counting the update's own step too, say
 * N = 3. STATS of epoch 0: sum 2 N (R - 1), over N R pushes, max N - 1. */
#define TURN_ROUNDS 4
static int worker_takes_turns(comm_t *c, ps_rank_t *w) {
  int N = (int)w->map.nworkers;
  for (int r = 0; r < TURN_ROUNDS; r++) {
    if (r > 0 || w->me > 0) RCHECK_OK(wait_signal(c, (w->me + N - 1) % N));
    if (r == 0) RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, NULL), NULL));
    RCHECK_OK(push_all(w, 0));
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, NULL), NULL));
    if (r < TURN_ROUNDS - 1 || w->me < N - 1) RCHECK_OK(signal_rank(c, (w->me + 1) % N));
  }
  if (w->me != N - 1) return 0;
  size_t len = sizeof(ps_epoch_stats_t) + (size_t)N * sizeof(ps_worker_stats_t);
  unsigned char *buf = malloc(len);
  ps_req_t req = {.op = PS_OP_STATS, .epoch = 0};
  int rc = ps_wait(w->cl, ps_call(w->cl, 0, &req, buf, len), NULL);
  ps_epoch_stats_t st;
  memcpy(&st, buf, sizeof st);
  free(buf);
  RCHECK_OK(rc);
  RCHECK(st.staleness_n == N * TURN_ROUNDS);
  RCHECK(st.staleness_sum == (N - 1) * N * (TURN_ROUNDS - 1));
  RCHECK(st.staleness_max == N - 1);
  return 0;
}

static void test_staleness_counts_the_updates_between_pull_and_push(void) {
  CHECK_OK(run_world((world_spec_t){.workers = 3, .servers = 1, .schedule = SCHEDULE_ASYNC,
                                    .fn = worker_takes_turns}));
}

/* ---- ssp:S, the SSP cache's refresh rule (--ps-refresh lazy) ------------------------ */

/* By hand: parameters of clock 5 serve clocks 5..8 under ssp:3, not 9;
 * under sync (ssp:0) only their own clock. */
static void test_cache_fresh_rule(void) {
  CHECK(ps_cache_fresh(5, 5, 3) && ps_cache_fresh(5, 8, 3) && !ps_cache_fresh(5, 9, 3));
  CHECK(ps_cache_fresh(8, 8, 0) && !ps_cache_fresh(7, 8, 0));
  CHECK(ps_cache_fresh(0, 0, 2) && !ps_cache_fresh(0, 3, 2));
}

static int push_clock(ps_rank_t *w, int64_t clock) {
  ps_req_t tmpl = {.nbatches = 1, .clock = clock};
  for (size_t i = 0; i < w->P; i++) w->g[i] = 0;
  return ps_wait(w->cl, ps_push(w->cl, 0, w->P, w->g, &tmpl), NULL);
}

/* ssp:1, 2 workers, 2 servers: a pull's parameters carry the slowest
 * worker's clock, the least over the shards. Worker 0 pushes clocks 0
 * and 1 (1 is within the bound of the slowest, 0) and pulls: clock 0,
 * fresh for its clock 1, not for 2. Worker 1 then pushes clock 0, and
 * worker 0's next pull has clock 1, fresh for clock 2. */
static int worker_cache_clock(comm_t *c, ps_rank_t *w) {
  if (w->me == 1) {
    RCHECK_OK(wait_signal(c, 0));
    RCHECK_OK(push_clock(w, 0));
    return signal_rank(c, 0);
  }
  RCHECK(ps_client_clock(w->cl) == 0);
  RCHECK_OK(push_clock(w, 0));
  RCHECK_OK(push_clock(w, 1));
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, NULL), NULL));
  RCHECK(ps_client_clock(w->cl) == 0);
  RCHECK(ps_cache_fresh(ps_client_clock(w->cl), 1, 1) && !ps_cache_fresh(ps_client_clock(w->cl), 2, 1));
  RCHECK_OK(signal_rank(c, 1));
  RCHECK_OK(wait_signal(c, 1));
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, w->P, 0, w->buf, NULL), NULL));
  RCHECK(ps_client_clock(w->cl) == 1);
  RCHECK(ps_cache_fresh(ps_client_clock(w->cl), 2, 1));
  return 0;
}

static void test_pull_carries_the_slowest_clock(void) {
  CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = 2, .schedule = SCHEDULE_SSP,
                                    .schedule_param = 1, .fn = worker_cache_clock}));
}

/* ---- value:V: the bound holds after every update ------------------------------------ */

/* value:1, 2 workers, lr 0.1. Worker 0 pulls w0 and waits. Worker 1 pushes
 * 6 (a change of 0.6: applied), pulls w0 - 0.6, pushes 6 again: w0 - 1.2
 * would be 1.2 >= 1 from worker 0's w0, so it is held, however small the
 * change before it was (the old rule checked that, 0.6, and applied it).
 * Worker 0, told so, looks at the model without pulling it whole (a pull
 * of 8 keys leaves its snapshot alone): w0 - 0.6. It pushes 3 (w0 - 0.9:
 * 0.9 from its own w0, 0.3 from worker 1's), which goes, and pulls w0 -
 * 0.9; then worker 1's held push fits (0.6 from worker 0's new model) and
 * worker 1's pull gets w0 - 1.5. */
static int worker_value_bound(comm_t *c, ps_rank_t *w) {
  if (w->me == 0) {
    RCHECK_OK(pull_own(w));
    RCHECK(all_shifted(w, w->buf, w->P, 0));
    RCHECK_OK(signal_rank(c, 1));
    RCHECK_OK(wait_signal(c, 1));
    float peek[8];
    RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, 8, 0, peek, NULL), NULL));
    RCHECK(all_shifted(w, peek, 8, -0.6)); /* not -1.2: that is 1.2 from our w0 */
    RCHECK_OK(push_all(w, 3));
    RCHECK_OK(pull_own(w));
    RCHECK(all_shifted(w, w->buf, w->P, -0.9));
  } else if (w->me == 1) {
    RCHECK_OK(wait_signal(c, 0));
    RCHECK_OK(pull_own(w));
    RCHECK_OK(push_all(w, 6));
    RCHECK_OK(pull_own(w));
    RCHECK(all_shifted(w, w->buf, w->P, -0.6));
    RCHECK_OK(push_all(w, 6));
    RCHECK_OK(signal_rank(c, 0));
    RCHECK_OK(pull_own(w)); /* waits until worker 0 has moved on */
    RCHECK(all_shifted(w, w->buf, w->P, -1.5));
  }
  return 0;
}

static void test_value_bound_holds_after_every_update(void) {
  for (int servers = 1; servers <= 2; servers++)
    CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = servers,
                                      .schedule = SCHEDULE_VALUE, .schedule_param = 1,
                                      .fn = worker_value_bound}));
}

/* value:1 again: worker 1's second push (w0 - 1.2 from worker 0's w0) and
 * worker 0's push of 11 (a change of 1.1 alone) can each go only once the
 * other's worker has seen it; when both workers wait on their own, the two
 * go together and both pulls get w0 - 0.6 - 0.6 - 1.1 = w0 - 2.3. The rule
 * does not deadlock on updates it cannot apply one at a time. */
static int worker_value_together(comm_t *c, ps_rank_t *w) {
  if (w->me == 0) {
    RCHECK_OK(pull_own(w));
    RCHECK_OK(signal_rank(c, 1));
    RCHECK_OK(wait_signal(c, 1));
    RCHECK_OK(push_all(w, 11));
    RCHECK_OK(pull_own(w));
    RCHECK(all_shifted(w, w->buf, w->P, -2.3));
  } else if (w->me == 1) {
    RCHECK_OK(wait_signal(c, 0));
    RCHECK_OK(pull_own(w));
    RCHECK_OK(push_all(w, 6));
    RCHECK_OK(pull_own(w));
    RCHECK_OK(push_all(w, 6));
    RCHECK_OK(signal_rank(c, 0));
    RCHECK_OK(pull_own(w));
    RCHECK(all_shifted(w, w->buf, w->P, -2.3));
  }
  return 0;
}

static void test_value_bound_releases_waiting_workers_together(void) {
  for (int servers = 1; servers <= 2; servers++)
    CHECK_OK(run_world((world_spec_t){.workers = 2, .servers = servers,
                                      .schedule = SCHEDULE_VALUE, .schedule_param = 1,
                                      .fn = worker_value_together}));
}

/* value:V's queue, by hand. Version 8; held pushes of workers 0, 1, 3
 * (worker 2 has none) arrived in the order 1, 3, 0, computed on versions
 * 5, 3, 7 (stale 3, 5, 1) and worker 4's, arrived last, on 7 too (stale 1).
 * fifo: 1, 3, 0, 4. staleness: the least stale first, a tie in arrival
 * order: 3, 4 (both 1), 0 (3), 1 (5). */
static void test_value_queue_orders_by_staleness(void) {
  static const int64_t queued[5] = {2, 0, -1, 1, 3}, version[5] = {5, 3, 0, 7, 7};
  ps_worker_state_t ws[5];
  memset(ws, 0, sizeof ws);
  for (int w = 0; w < 5; w++) ws[w].push.queued = queued[w], ws[w].push.version = version[w];
  train_config_t cfg;
  train_config_default(&cfg);
  ps_server_t s;
  memset(&s, 0, sizeof s);
  s.cfg = &cfg;
  s.N = 5;
  s.version = 8;
  s.workers = ws;
  int order[5], n = ps_rule_value_queue(&s, order);
  CHECK(n == 4 && order[0] == 1 && order[1] == 3 && order[2] == 0 && order[3] == 4);
  cfg.ps.queue_staleness = 1;
  n = ps_rule_value_queue(&s, order);
  CHECK(n == 4 && order[0] == 3 && order[1] == 4 && order[2] == 0 && order[3] == 1);
}

/* The stall line's reason for a held pull: under ssp the workers behind
 * the pull's clock with their counts; under backup:B the pushes the step
 * still lacks and the workers that have not pushed. */
static void test_held_pull_names_what_it_waits_for(void) {
  ps_worker_state_t ws[4];
  memset(ws, 0, sizeof ws);
  static const int64_t clocks[4] = {5, 3, 5, 1};
  for (int w = 0; w < 4; w++) ws[w].push.clock = clocks[w];
  train_config_t cfg;
  train_config_default(&cfg);
  cfg.schedule = SCHEDULE_SSP, cfg.schedule_param = 1;
  ps_server_t s;
  memset(&s, 0, sizeof s);
  s.cfg = &cfg, s.N = 4, s.workers = ws;
  ps_req_t req = {.op = PS_OP_PULL, .clock = 5};
  char buf[256];
  ps_rule_ssp.held_for(&s, &req, buf, sizeof buf);
  CHECK(!strcmp(buf, "for worker 1 (3 clocks pushed), worker 3 (1 clock pushed) to push clock 5"));
  cfg.schedule = SCHEDULE_BACKUP, cfg.schedule_param = 1;
  ws[2].push.held = 1, ws[3].dead = 1;
  ps_rule_backup.held_for(&s, &req, buf, sizeof buf);
  CHECK(!strcmp(buf, "for 2 more pushes of this step (1 of the 3 it takes), from workers 0, 1"));
}

/* The shard-folder manifest as ps_ckpt_write_manifest writes it, and
 * broken ones: each refused with a line naming what is wrong. */
#define MF_HEAD "{\"format\":\"dtrain-ps-manifest-1\",\"epoch\":2,\"step\":64,\"seed\":1,"
#define MF_TAIL "\"optimizer\":\"sgd\",\"nparams\":10,\"servers\":2,\"buffers\":null,\n \"shards\":["
#define MF_SHARDS "\n  {\"file\":\"a\",\"begin\":0,\"end\":4},\n  {\"file\":\"b\",\"begin\":4,\"end\":10}]}\n"
static int parse_mf(const char *text, ps_manifest_t *m) {
  return ps_manifest_parse(text, strlen(text), "m.json", m);
}
static void test_manifest_parse(void) {
  ps_manifest_t *m = malloc(sizeof *m);
  CHECK_OK(parse_mf(MF_HEAD "\"model\":\"my \\\"net\\\\x\"," MF_TAIL MF_SHARDS, m));
  CHECK(m->epoch == 2 && m->step == 64 && m->nparams == 10 && m->nshards == 2);
  CHECK(!strcmp(m->model, "my \"net\\x") && !strcmp(m->optimizer, "sgd") && !m->buffers[0]);
  CHECK(m->shards[1].begin == 4 && m->shards[1].end == 10 && !strcmp(m->shards[1].file, "b"));
#define M(x) MF_HEAD "\"model\":\"mlp\"," x
  CHECK_FAILS_WITH(parse_mf(M(MF_TAIL "{\"file\":\"a\",\"begin\":0,\"end\":4},{\"file\":\"b\",\"begin\":5,\"end\":10}]}"), m),
                   "shard 1 (b) covers keys [5, 10): expected one starting at 4");
  CHECK_FAILS_WITH(parse_mf(M(MF_TAIL "{\"file\":\"a\",\"begin\":0,\"end\":10},{\"file\":\"b\",\"begin\":0,\"end\":10}]}"), m),
                   "expected one starting at 10");
  CHECK_FAILS_WITH(parse_mf(M(MF_TAIL "{\"file\":\"a\",\"begin\":0,\"end\":4}]}"), m),
                   "the shards cover keys [0, 4) of 10");
  CHECK_FAILS_WITH(parse_mf(M(MF_TAIL "{\"file\":\"../a\",\"begin\":0,\"end\":10}]}"), m),
                   "shard 0: \"../a\" is not a file name of the folder");
  CHECK_FAILS_WITH(parse_mf(M(MF_TAIL "{\"file\":\"..\",\"begin\":0,\"end\":10}]}"), m),
                   "is not a file name of the folder");
  CHECK_FAILS_WITH(parse_mf(MF_HEAD "\"model\":\"mlp\",\"optimizer\":\"sgd\",\"nparams\":10,\"buffers\":\"../../etc/passwd\",\"shards\":[{\"file\":\"a\",\"begin\":0,\"end\":10}]}", m),
                   "\"buffers\" '../../etc/passwd' is not a file name");
  CHECK_FAILS_WITH(parse_mf("{\"format\":\"dtrain-ps-manifest-1\",\"epoch\":99999999999,\"step\":1}", m),
                   "\"epoch\" is more than 2147483647");
  CHECK_FAILS_WITH(parse_mf("{\"format\":\"dtrain-ps-manifest-1\",\"epoch\":-1}", m), "\"epoch\" is not a count");
  CHECK_FAILS_WITH(parse_mf("{\"epoch\":1,\"epoch\":2}", m), "\"epoch\" given twice");
  CHECK_FAILS_WITH(parse_mf(M(MF_TAIL "{\"file\":\"a\",\"begin\":0,\"end\":1"), m), "expected '}'");
  CHECK_FAILS_WITH(parse_mf(M(MF_TAIL MF_SHARDS "x"), m), "text after the object");
  CHECK_FAILS_WITH(parse_mf("{\"format\":\"other\",\"epoch\":1,\"step\":1,\"nparams\":1,\"optimizer\":null,\"model\":null,\"buffers\":null,\"shards\":[{\"file\":\"a\",\"begin\":0,\"end\":1}]}", m),
                   "format 'other', expected 'dtrain-ps-manifest-1'");
  CHECK_FAILS_WITH(parse_mf("{\"format\":\"dtrain-ps-manifest-1\"}", m), "no \"epoch\"");
  CHECK_FAILS_WITH(ps_manifest_parse("{\"a\0", 4, "m.json", m), "control character");
#undef M
  free(m);
}

/* --tp T under parameter servers (ps_group.c): rank t's keys are its
 * blocks (and, for t = 0, the replicated tensors); over the group every
 * parameter of the one-worker model has one key; packing and unpacking
 * move exactly the owned tensors; a server's key table starts as the
 * rank's own initial values, packed. */
static model_t *build_mlp_rank(int t, int T) {
  model_spec_t spec;
  model_t *m = NULL;
  tp_link_t link = {.rank = t, .size = T};
  if (model_spec_builtin("mlp", &spec) != 0) return NULL;
  if (tensor_plan_dense(&spec, T, NULL) == 0) {
    spec.tp = &link;
    if (model_build(&spec, (shape_t){1, 28, 28}, 10, 1, &m) != 0) m = NULL;
  }
  model_spec_free(&spec);
  if (m) model_init_params(m, 9), m->tp = NULL;
  return m;
}

static void test_tp_keys_cover_the_model_once(void) {
  model_t *whole = build_mlp(28, 28);
  CHECK(whole != NULL);
  train_config_t cfg;
  train_config_default(&cfg);
  cfg.exchange = EXCHANGE_PS;
  cfg.seed = 9;
  dataset_t shape = {.c = 1, .h = 28, .w = 28, .nclasses = 10};
  for (int T = 2; whole && T <= 3; T++) {
    cfg.tensor.ranks = T;
    CHECK(ps_group_size(&cfg) == T);
    size_t total = 0;
    for (int t = 0; t < T; t++) {
      model_t *m = build_mlp_rank(t, T), *tab = NULL;
      CHECK(m != NULL);
      if (!m) continue;
      ps_keys_t k;
      CHECK_OK(ps_keys_plan(m, t, T, &k));
      CHECK(k.packed == (t > 0));
      size_t split = 0;
      for (int i = 0; i < m->ntensors; i++)
        if (m->tensors[i].len != tensor_full_len(&m->tensors[i])) split += m->tensors[i].len;
      CHECK(k.nkeys == (t == 0 ? m->nparams : split));
      total += k.nkeys;
      float *keys = dt_alloc_floats(k.nkeys), *back = dt_alloc_floats(m->nparams);
      for (size_t j = 0; j < m->nparams; j++) back[j] = -1.0f;
      ps_keys_pack(&k, m, m->params, keys);
      ps_keys_unpack(&k, m, keys, back);
      int same = 1;
      for (int i = 0; i < m->ntensors; i++) {
        const tensor_info_t *ti = &m->tensors[i];
        for (size_t j = ti->off; j < ti->off + ti->len; j++)
          same &= k.key[i] == PS_NO_KEY ? back[j] == -1.0f : back[j] == m->params[j];
      }
      CHECK(same);
      CHECK_OK(ps_keys_table(&cfg, &shape, t, T, &tab));
      CHECK(tab && tab->nparams == k.nkeys && !memcmp(tab->params, keys, k.nkeys * sizeof(float)));
      model_free(tab);
      dt_free(keys), dt_free(back);
      ps_keys_free(&k);
      model_free(m);
    }
    CHECK(total == whole->nparams);
    CHECK(ps_server_slice(0, 2 * T, T) == 0 && ps_server_slice(2 * T - 1, 2 * T, T) == T - 1);
  }
  model_free(whole);
}

/* ---- whole runs against describe_step ------------------------------------------ */

#define RUN_RANKS 8
typedef struct {
  train_config_t cfg;
  dataset_t train, test;
  uint64_t sent[RUN_RANKS], received[RUN_RANKS]; /* each rank's, the whole run */
} ps_run_t;

static int whole_rank(comm_t *c, void *arg) {
  ps_run_t *r = arg;
  int rc = ps_run_rank(c, &r->cfg, &r->train, &r->test);
  comm_bytes_t b = comm_bytes(c);
  r->sent[comm_rank(c)] = b.sent;
  r->received[comm_rank(c)] = b.received;
  return rc;
}

/* A run of `steps` steps (one epoch), its epoch lines kept off stdout. */
static int run_whole(ps_run_t *r, int64_t steps) {
  r->cfg.max_steps = steps;
  fflush(stdout);
  int saved = dup(1), null = open("/dev/null", O_WRONLY);
  if (null >= 0) dup2(null, 1);
  int rc = comm_local_run(strategy_total_ranks(&r->cfg), NULL, whole_rank, r);
  fflush(stdout);
  if (saved >= 0) dup2(saved, 1), close(saved);
  if (null >= 0) close(null);
  return rc;
}

/* Synchronous servers, 3 workers and ps:2: two runs, of 2 and of 5 steps,
 * differ on every rank, servers included, by 3 steps of describe_step's
 * bytes, exactly (the rest of a run, worker 0's evaluation and the
 * goodbyes, is the same in both). With --ps-replicas 2 too: the forwards,
 * the coordinator's state copies and their acks (ps_describe.c); the
 * coordinator's pings go by the clock, a request out and one back per
 * server each 0.25 s, so there the two may differ by whole requests
 * (the copies, of REQ + 664 bytes, are no multiple of a request). */
static void bytes_every_rank_as_described(int replicas) {
  ps_run_t r = {0};
  train_config_default(&r.cfg);
  r.cfg.exchange = EXCHANGE_PS;
  r.cfg.ps.servers = 2;
  r.cfg.ps.replicas = replicas;
  r.cfg.workers = 3;
  r.cfg.batch = 8;
  r.cfg.epochs = 1;
  r.cfg.progress = 0;
  CHECK_OK(dataset_synthetic_split(256, 1, 8, 8, 10, 3, 1, &r.train));
  CHECK_OK(dataset_synthetic_split(64, 1, 8, 8, 10, 3, 0, &r.test));
  CHECK_OK(train_config_check(&r.cfg));
  CHECK(strategy_total_ranks(&r.cfg) == 5);
  uint64_t sent[RUN_RANKS], received[RUN_RANKS];
  CHECK_OK(run_whole(&r, 2));
  memcpy(sent, r.sent, sizeof sent), memcpy(received, r.received, sizeof received);
  CHECK_OK(run_whole(&r, 5));
  model_spec_t spec;
  model_t *m = NULL;
  step_desc_t d;
  CHECK_OK(model_spec_load(r.cfg.model, &spec));
  CHECK_OK(model_build(&spec, (shape_t){1, 8, 8}, 10, r.cfg.batch, &m));
  model_spec_free(&spec);
  CHECK_OK(strategy_describe(&r.cfg, m, &d));
  for (int k = 0; k < d.nranks; k++) {
    step_bytes_t b;
    step_rank_bytes(&d, k, &b);
    CHECK(!b.expected);
    double s = b.sent, v = b.received;
    double ds = (double)(r.sent[k] - sent[k]) - round(3 * s);
    double dr = (double)(r.received[k] - received[k]) - round(3 * v);
    double ping = replicas > 1 && k >= r.cfg.workers ? (double)PS_REQ_BYTES : 0;
    int ok = ping ? fmod(ds, ping) == 0 && fmod(dr, ping) == 0 && fabs(ds) <= 16 * ping &&
                        fabs(dr) <= 16 * ping
                  : ds == 0 && dr == 0;
    if (!ok) {
      printf("  replicas %d, rank %d: 3 steps sent %llu received %llu, described %.0f and %.0f\n",
             replicas, k, (unsigned long long)(r.sent[k] - sent[k]),
             (unsigned long long)(r.received[k] - received[k]), 3 * s, 3 * v);
      CHECK(0);
    }
  }
  step_desc_free(&d);
  model_free(m);
  dataset_free(&r.train), dataset_free(&r.test);
}

static void test_sync_bytes_every_rank_as_described(void) { bytes_every_rank_as_described(1); }

static void test_replicas_bytes_every_rank_as_described(void) { bytes_every_rank_as_described(2); }

/* ---- --ps-push factors and --ps-server-threads ---------------------------------- */

static model_t *build_mlp_batch(int max_batch) {
  model_spec_t spec;
  model_t *m = NULL;
  if (model_spec_builtin("mlp", &spec) != 0) return NULL;
  if (model_build(&spec, (shape_t){1, 28, 28}, 10, max_batch, &m) != 0) m = NULL;
  model_spec_free(&spec);
  if (m) model_init_params(m, 5);
  return m;
}

/* A batch's factors, packed as a worker packs them and expanded as a
 * server does, are the layers' gradients of backprop bit for bit; the
 * payload is 8 + 4 n (in + out) per dense layer; a payload of the wrong
 * size or too many rows is refused. */
/* One training pass of m on N random images (x, N x 784, filled from
 * seed) labelled (i * label_step) mod 10: its gradients and the layers'
 * inputs and error terms in place. */
static void batch_grads(model_t *m, int N, float *x, uint64_t seed, int label_step) {
  int32_t y[N];
  rng_t rng;
  rng_seed(&rng, seed);
  for (size_t i = 0; i < (size_t)N * 784; i++) x[i] = (float)(rng_next(&rng) % 1000) / 1000.0f;
  for (int i = 0; i < N; i++) y[i] = (i * label_step) % 10;
  model_forward(m, x, N, 1, &rng);
  double correct;
  model_loss(m, y, N, N, &correct);
  model_backward(m, x, N, NULL, NULL);
}

static void test_factors_expand_to_the_gradient(void) {
  enum { N = 5 };
  kern_set_threads(1); /* OpenBLAS threads are not instrumented: ThreadSanitizer would flag their writes */
  model_t *m = build_mlp_batch(N);
  CHECK(m != NULL);
  if (!m) return;
  float *x = dt_alloc_floats((size_t)N * 784), *dst = dt_alloc_floats(m->nparams);
  batch_grads(m, N, x, 11, 1);
  ps_keys_t k;
  ps_factor_plan_t fp;
  CHECK_OK(ps_keys_plan(m, 0, 1, &k));
  CHECK_OK(ps_factor_plan(m, &k, &fp));
  CHECK(fp.n == 3 && fp.f[0].in == 784 && fp.f[0].out == 512 && fp.f[2].out == 10);
  size_t want = 8 + 4 * N * ((784 + 512) + (512 + 256) + (256 + 10));
  CHECK(ps_factor_bytes(&fp, 0, m->nparams, N) == want);
  void *buf = dt_alloc(want);
  CHECK(ps_factor_pack(&fp, m, x, N, m->grads, 0, m->nparams, buf) == want);
  CHECK_OK(ps_factor_expand(&fp, 0, m->nparams, N, buf, want, dst));
  CHECK(memcmp(dst, m->grads, m->nparams * sizeof(float)) == 0);
  /* a range holding the last two layers only: their factors, at offsets */
  size_t lo = fp.f[1].wkey;
  CHECK(ps_factor_pack(&fp, m, x, N, m->grads, lo, m->nparams, buf) ==
        8 + 4 * N * ((512 + 256) + (256 + 10)));
  CHECK_OK(ps_factor_expand(&fp, lo, m->nparams, N, buf, 8 + 4 * N * (768 + 266), dst));
  CHECK(memcmp(dst, m->grads + lo, (m->nparams - lo) * sizeof(float)) == 0);
  CHECK_FAILS_WITH(ps_factor_expand(&fp, 0, m->nparams, N, buf, want - 4, dst), "expected");
  CHECK_FAILS_WITH(ps_factor_expand(&fp, 0, m->nparams, N - 1, buf, want, dst), "at most");
  /* the shard plan keeps each layer whole: 2 servers cut at layer 1, not
   * inside layer 0; 4 servers cannot be given a layer each */
  ps_range_t keep[3];
  ps_factor_spans(&fp, keep);
  ps_shard_map_t map;
  CHECK_OK(ps_shard_plan_factors(m, 2, 0, &fp, &map));
  CHECK(map.shards[0].end == fp.f[0].end);
  ps_shard_free(&map);
  CHECK_OK(ps_shard_plan_factors(m, 3, 0, &fp, &map));
  for (int i = 0; i < 3; i++) CHECK(map.shards[i].begin == keep[i].begin && map.shards[i].end == keep[i].end);
  ps_shard_free(&map);
  CHECK_FAILS_WITH(ps_shard_plan_factors(m, 4, 0, &fp, &map), "each dense layer on one server");
  dt_free(buf);
  ps_factor_plan_free(&fp);
  ps_keys_free(&k);
  dt_free(x), dt_free(dst);
  model_free(m);
}

/* --worker-threads' factor push: a batch's rows in parts (one empty)
 * packed one part after another are the payload of the whole batch, byte
 * for byte, over every key and over a range of the last two layers. */
typedef struct {
  const model_t *m;
  const float *x;
  int from[3], rows[3];
} parts_t;

static const float *part_rows(void *ctx, int k, int layer, int which, size_t *rows) {
  const parts_t *pt = ctx;
  *rows = (size_t)pt->rows[k];
  if (layer < 0) return NULL;
  const layer_t *l = &pt->m->layers[layer];
  size_t width = which ? shape_size(l->in_shape) : (size_t)l->out_shape.c;
  const float *base = which ? model_layer_input(pt->m, layer, pt->x) : l->dout;
  return base + (size_t)pt->from[k] * width;
}

static void test_factor_parts_are_the_batch(void) {
  enum { N = 5 };
  kern_set_threads(1);
  model_t *m = build_mlp_batch(N);
  CHECK(m != NULL);
  if (!m) return;
  float *x = dt_alloc_floats((size_t)N * 784);
  batch_grads(m, N, x, 13, 3);
  ps_keys_t k;
  ps_factor_plan_t fp;
  CHECK_OK(ps_keys_plan(m, 0, 1, &k));
  CHECK_OK(ps_factor_plan(m, &k, &fp));
  size_t bytes = ps_factor_bytes(&fp, 0, m->nparams, N);
  unsigned char *whole = dt_alloc(bytes), *parts = dt_alloc(bytes);
  parts_t pt = {m, x, {0, 2, 2}, {2, 0, 3}};
  size_t lo[2] = {0, fp.f[1].wkey};
  for (int r = 0; r < 2; r++) {
    memset(parts, 0xff, bytes);
    size_t a = ps_factor_pack(&fp, m, x, N, m->grads, lo[r], m->nparams, whole);
    size_t b = ps_factor_pack_parts(&fp, 3, part_rows, &pt, m->grads, lo[r], m->nparams, parts);
    CHECK(a == b && a == ps_factor_bytes(&fp, lo[r], m->nparams, N));
    CHECK(memcmp(whole, parts, a) == 0);
  }
  dt_free(whole), dt_free(parts);
  ps_factor_plan_free(&fp);
  ps_keys_free(&k);
  dt_free(x);
  model_free(m);
}

/* T threads, each writing its slice of the shard, give optim_step's bits:
 * adam (state, step count), and LARS cut at whole segments. */
static void test_server_threads_step_is_one_threads(void) {
  optim_kind_t kinds[] = {OPTIM_ADAM, OPTIM_LARS, OPTIM_SGD};
  optim_segment_t segs[] = {{0, 1000}, {1000, 37}, {1037, 3000}, {4037, 5}};
  size_t n = 4042;
  for (int ki = 0; ki < 3; ki++)
    for (int T = 2; T <= 4; T++) {
      optim_config_t oc;
      optim_config_default(kinds[ki], &oc);
      oc.momentum = 0.9f, oc.weight_decay = 1e-4f;
      optimizer_t *a, *b;
      CHECK_OK(optim_new(&oc, n, &a));
      CHECK_OK(optim_new(&oc, n, &b));
      float *pa = dt_alloc_floats(n), *pb = dt_alloc_floats(n), *g = dt_alloc_floats(n);
      for (size_t i = 0; i < n; i++) pa[i] = pb[i] = sinf((float)i), g[i] = cosf((float)i * 0.3f);
      ps_apply_t *ap;
      CHECK_OK(ps_apply_new(T, segs, 4, n, kinds[ki] == OPTIM_LARS, &ap));
      CHECK(ap != NULL);
      for (int step = 0; step < 3 && ap; step++) {
        optim_step(a, pa, g, segs, 4, 0.01f);
        ps_apply_step(ap, b, pb, g, 0.01f);
      }
      CHECK(memcmp(pa, pb, n * sizeof(float)) == 0 && a->steps == b->steps);
      for (int s = 0; s < a->nstate; s++) CHECK(memcmp(a->state[s], b->state[s], n * sizeof(float)) == 0);
      ps_apply_free(ap);
      optim_free(a), optim_free(b);
      dt_free(pa), dt_free(pb), dt_free(g);
    }
  ps_apply_t *none;
  CHECK_OK(ps_apply_new(1, segs, 4, n, 0, &none));
  CHECK(none == NULL);
}

/* --ps-push factors through a real server: a payload of the wrong size is
 * rejected once received (the server goes on); a batch's factors make the
 * step of its gradient (w - lr g, plain SGD). */
static int worker_factors(comm_t *c, ps_rank_t *w) {
  size_t P = w->P;
  model_t *m = w->m;
  float x[64];
  int32_t y = 3;
  rng_t rng;
  rng_seed(&rng, 2);
  for (int i = 0; i < 64; i++) x[i] = (float)i / 64.0f;
  model_forward(m, x, 1, 1, &rng);
  double correct;
  model_loss(m, &y, 1, 1, &correct);
  model_backward(m, x, 1, NULL, NULL);
  ps_keys_t k;
  ps_factor_plan_t fp;
  RCHECK_OK(ps_keys_plan(m, 0, 1, &k));
  RCHECK_OK(ps_factor_plan(m, &k, &fp));
  size_t bytes = ps_factor_bytes(&fp, 0, P, 1);
  void *pay = dt_alloc(bytes);
  RCHECK(ps_factor_pack(&fp, m, x, 1, m->grads, 0, P, pay) == bytes);
  ps_req_t q = base_req(PS_OP_PUSH, 0, 0, P);
  ps_reply_t rep;
  q.nvalues = P, q.encoded = bytes - 4, q.flags = PS_PUSH_FACTORS, q.nbatches = 1;
  RCHECK(raw_call(c, 1, &q, pay, bytes - 4, &rep, NULL, 0) != 0);
  RCHECK(strstr(rep.error, "expected"));
  const void *parts[1] = {pay};
  size_t sizes[1] = {bytes};
  ps_req_t tmpl = {.nbatches = 1};
  RCHECK_OK(ps_wait(w->cl, ps_push_factors(w->cl, parts, sizes, m->grads, &tmpl), NULL));
  RCHECK_OK(ps_wait(w->cl, ps_pull(w->cl, 0, P, 0, w->buf, NULL), NULL));
  model_init_params(m, 5); /* the initial parameters (backprop left them as they were) */
  RCHECK(sgd_step_is(w->buf, m->params, 0.1f, m->grads, 1, P));
  RCHECK(ps_client_version(w->cl, 0) == 1);
  dt_free(pay);
  ps_factor_plan_free(&fp);
  ps_keys_free(&k);
  return 0;
}

static void test_factored_push_through_a_server(void) {
  kern_set_threads(1);
  CHECK_OK(run_world((world_spec_t){.workers = 1, .servers = 1, .schedule = SCHEDULE_ASYNC,
                                    .push_factors = 1, .fn = worker_factors}));
}

int main(void) {
  dt_log_level = DT_LOG_WARN; /* the rejections are logged as errors: expected here */
  RUN(test_shard_plan_balanced_and_contiguous);
  RUN(test_shard_plan_whole_tensors_for_lars);
  RUN(test_server_rejects_bad_input_and_keeps_serving);
  RUN(test_push_pull_across_two_servers);
  RUN(test_push_in_parts_is_one_push);
  RUN(test_replicas_take_a_resent_push_once);
  RUN(test_transfer_order_by_hand);
  RUN(test_held_request_does_not_block_the_client);
  RUN(test_backup_drops_the_late_gradient);
  RUN(test_dc_asgd_update_is_the_papers);
  RUN(test_dc_asgd_adaptive_update_is_the_papers);
  RUN(test_implicit_momentum_lowers_the_servers_momentum);
  RUN(test_drop_stale_drops_the_too_stale_push);
  RUN(test_staleness_counts_the_updates_between_pull_and_push);
  RUN(test_value_bound_holds_after_every_update);
  RUN(test_value_bound_releases_waiting_workers_together);
  RUN(test_value_queue_orders_by_staleness);
  RUN(test_held_pull_names_what_it_waits_for);
  RUN(test_manifest_parse);
  RUN(test_cache_fresh_rule);
  RUN(test_pull_carries_the_slowest_clock);
  RUN(test_tp_keys_cover_the_model_once);
  RUN(test_sync_bytes_every_rank_as_described);
  RUN(test_replicas_bytes_every_rank_as_described);
  RUN(test_factors_expand_to_the_gradient);
  RUN(test_factor_parts_are_the_batch);
  RUN(test_server_threads_step_is_one_threads);
  RUN(test_factored_push_through_a_server);
  TEST_MAIN_END();
}
