/* A worker's pushes and pulls layer by layer, most urgent first
 * (--comm-order priority: ByteScheduler, Peng et al. 2019, whose
 * scheduler covers parameter servers as well as allreduce; --comm-order
 * tictac: TicTac's timing-aware order, Hashemi et al. 2019).
 *
 * Pushes: backprop readies the last layer first; each layer's gradient
 * goes out as soon as it is final (model_backward's ready hook), cut into
 * parts of --partition-kb, overlapped with the rest of backprop. A part
 * waits in a queue while the credit is spent, and the queue is served
 * most urgent first, so a first layer's part overtakes the last layers'
 * still waiting (ByteScheduler's credit, --credit-kb: at most that many
 * bytes in flight each way, one part at least, so that the link never
 * holds more than that ahead of an urgent part; its default is
 * ByteScheduler's, 4 M parameters).
 *
 * Pulls: the next model is asked for layer by layer in the order
 * (ps_schedule.c), within the same credit, and the forward pass waits,
 * before each layer, only for that layer's parts (the param_wait hook
 * data parallelism's priority order uses too).
 *
 * There is no progress thread: answers are taken in, and the credit
 * spent again, at the hooks (each layer with parameters, forward and
 * backward) and after backprop. A credit far below what the link holds
 * in a layer's compute time leaves the link idle between the hooks.
 *
 * The server gathers a push's parts (PS_PUSH_PART) and applies them as
 * one push, and a pull of a range answers the same values as the whole:
 * the order changes when the bytes move, never what they are, so sync
 * gives fifo's bits, with the same keys and bytes on the wire. */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

/* Parts in flight each way at most, whatever the credit: the client has
 * PS_MAX_INFLIGHT slots, shared by both ways and the coordinator's calls. */
#define PRIO_MAX_PARTS (PS_MAX_INFLIGHT / 4)

enum { XFER_QUEUED = -1, XFER_DONE = -2 };

typedef struct {
  int layer, rank;     /* the layer its keys are of; its place in the order (lower first) */
  size_t begin, count; /* keys */
  int ts;              /* the client's timestamp in flight, or XFER_QUEUED / XFER_DONE */
} xfer_t;

typedef struct {
  xfer_t *x;
  int n, inflight;
  size_t inflight_bytes;
} queue_t;

struct ps_prio {
  ps_client_t *client;
  model_t *m;
  coll_order_t order;
  size_t part;            /* floats a part */
  size_t credit;          /* bytes in flight each way at most (one part at least) */
  int failed;             /* a hook's transfer failed (hooks return nothing) */
  /* the order: per layer its forward seconds, its bytes, its place */
  double *fwd, *start;
  size_t *bytes;
  int *ordered, *rank, nordered;
  queue_t push, pull;     /* each holds at most every part of the model */
  ps_req_t push_tmpl, pull_cond;
  double push_total;      /* bytes pushed once this step's parts have all gone */
};

static size_t parts_of(size_t len, size_t part) { return (len + part - 1) / part; }

int ps_prio_new(ps_client_t *client, model_t *m, const train_config_t *cfg, ps_prio_t **out) {
  ps_prio_t *p = calloc(1, sizeof *p);
  if (!p) return dt_error("out of memory");
  p->client = client;
  p->m = m;
  p->order = cfg->comm_order;
  p->part = cfg->partition_bytes / sizeof(float) ? cfg->partition_bytes / sizeof(float) : 1;
  p->credit = cfg->ps.credit_bytes;
  size_t nparts = 0, n = (size_t)m->nlayers;
  for (int i = 0; i < m->nlayers; i++) nparts += parts_of(m->layers[i].param_len, p->part);
  p->fwd = calloc(n, sizeof *p->fwd);
  p->start = calloc(n, sizeof *p->start);
  p->bytes = calloc(n, sizeof *p->bytes);
  p->ordered = calloc(n, sizeof *p->ordered);
  p->rank = calloc(n, sizeof *p->rank);
  p->push.x = calloc(nparts, sizeof(xfer_t));
  p->pull.x = calloc(nparts, sizeof(xfer_t));
  *out = p;
  if (!p->fwd || !p->start || !p->bytes || !p->ordered || !p->rank || !p->push.x || !p->pull.x)
    return dt_error("out of memory");
  for (int i = 0; i < m->nlayers; i++) p->bytes[i] = m->layers[i].param_len * sizeof(float);
  return 0;
}

void ps_prio_free(ps_prio_t *p) {
  if (!p) return;
  free(p->fwd), free(p->start), free(p->bytes), free(p->ordered), free(p->rank);
  free(p->push.x), free(p->pull.x);
  free(p);
}

/* The order of this step's transfers, from the forward times so far. */
static void plan_order(ps_prio_t *p) {
  for (int i = 0; i < p->m->nlayers; i++) p->fwd[i] = p->m->layers[i].forward_sec;
  p->nordered = ps_transfer_order(p->order, p->fwd, p->bytes, p->m->nlayers, p->start, p->ordered);
  for (int k = 0; k < p->nordered; k++) p->rank[p->ordered[k]] = k;
}

static int start(ps_prio_t *p, queue_t *q, xfer_t *x) {
  const model_t *m = p->m;
  if (q == &p->push) {
    ps_req_t t = p->push_tmpl;
    ps_client_totals(p->client, &t.bytes_pushed, &t.bytes_pulled, &t.blocked_sec);
    t.bytes_pushed = p->push_total; /* every part: the step's, as a whole push's request says */
    t.flags = PS_PUSH_PART;
    x->ts = ps_push(p->client, x->begin, x->count, m->grads + x->begin, &t);
  } else {
    x->ts = ps_pull(p->client, x->begin, x->count, 0, m->params + x->begin, &p->pull_cond);
  }
  if (x->ts < 0) return -1;
  q->inflight++;
  q->inflight_bytes += x->count * sizeof(float);
  return 0;
}

static int finish(ps_prio_t *p, queue_t *q, xfer_t *x) {
  int ts = x->ts;
  x->ts = XFER_DONE;
  q->inflight--;
  q->inflight_bytes -= x->count * sizeof(float);
  return ps_wait(p->client, ts, NULL);
}

/* The queued transfer to start next: the most urgent, then the lowest keys. */
static xfer_t *next_queued(queue_t *q) {
  xfer_t *best = NULL;
  for (int i = 0; i < q->n; i++) {
    xfer_t *x = &q->x[i];
    if (x->ts == XFER_QUEUED &&
        (!best || x->rank < best->rank || (x->rank == best->rank && x->begin < best->begin)))
      best = x;
  }
  return best;
}

/* The most urgent transfer in flight. */
static xfer_t *first_inflight(queue_t *q) {
  xfer_t *best = NULL;
  for (int i = 0; i < q->n; i++)
    if (q->x[i].ts >= 0 && (!best || q->x[i].rank < best->rank)) best = &q->x[i];
  return best;
}

static int has_credit(const ps_prio_t *p, const queue_t *q, const xfer_t *x) {
  if (q->inflight == 0) return 1;
  return q->inflight < PRIO_MAX_PARTS && q->inflight_bytes + x->count * sizeof(float) <= p->credit;
}

/* Takes in what has arrived, without blocking, then spends the credit. */
static int pump(ps_prio_t *p, queue_t *q) {
  for (int i = 0; i < q->n; i++) {
    xfer_t *x = &q->x[i];
    if (x->ts < 0) continue;
    int done = ps_test(p->client, x->ts);
    if (done < 0 || (done && finish(p, q, x) != 0)) return -1;
  }
  for (xfer_t *x; (x = next_queued(q)) && has_credit(p, q, x);) DT_TRY(start(p, q, x));
  return 0;
}

/* Blocks until none of q's transfers that match `layer` (-1: any) is left. */
static int drain(ps_prio_t *p, queue_t *q, int layer) {
  for (;;) {
    DT_TRY(pump(p, q));
    int left = 0;
    for (int i = 0; i < q->n && !left; i++)
      left = q->x[i].ts != XFER_DONE && (layer < 0 || q->x[i].layer == layer);
    if (!left) return 0;
    xfer_t *x = first_inflight(q);
    if (!x) return dt_error("parameter-server priority order: layer %d's transfers were never "
                            "started", layer);
    DT_TRY(finish(p, q, x));
  }
}

static void enqueue(ps_prio_t *p, queue_t *q, int layer) {
  const layer_t *l = &p->m->layers[layer];
  for (size_t done = 0; done < l->param_len; done += p->part) {
    size_t n = l->param_len - done < p->part ? l->param_len - done : p->part;
    q->x[q->n++] = (xfer_t){layer, p->rank[layer], l->param_off + done, n, XFER_QUEUED};
  }
}

int ps_prio_pull(ps_prio_t *p, const ps_req_t *cond) {
  DT_TRY(drain(p, &p->pull, -1));
  plan_order(p);
  p->pull_cond = cond ? *cond : (ps_req_t){0};
  p->pull.n = 0;
  for (int k = 0; k < p->nordered; k++) enqueue(p, &p->pull, p->ordered[k]);
  return pump(p, &p->pull);
}

void ps_prio_wait_layer(ps_prio_t *p, int layer) {
  if (!p->failed && drain(p, &p->pull, layer) != 0) p->failed = 1;
}

void ps_prio_push_layer(ps_prio_t *p, int layer, const ps_req_t *tmpl) {
  if (p->failed) return;
  if (p->push.n == 0) { /* the step's first layer: pulls may not have planned the order */
    double pulled, blocked;
    plan_order(p);
    ps_client_totals(p->client, &p->push_total, &pulled, &blocked);
    p->push_total += (double)(p->m->nparams * sizeof(float));
  }
  p->push_tmpl = *tmpl;
  enqueue(p, &p->push, layer);
  if (pump(p, &p->push) != 0) p->failed = 1;
}

int ps_prio_flush_pushes(ps_prio_t *p) {
  DT_TRY(ps_prio_failed(p));
  for (xfer_t *x; (x = next_queued(&p->push));) {
    if (!has_credit(p, &p->push, x)) DT_TRY(finish(p, &p->push, first_inflight(&p->push)));
    DT_TRY(pump(p, &p->push));
  }
  return 0;
}

int ps_prio_failed(const ps_prio_t *p) {
  return p->failed ? dt_error("parameter-server priority order: a transfer failed: %s", dt_errmsg()) : 0;
}

int ps_prio_finish_pushes(ps_prio_t *p) {
  DT_TRY(ps_prio_failed(p));
  DT_TRY(drain(p, &p->push, -1));
  p->push.n = 0;
  return 0;
}

int ps_prio_finish(ps_prio_t *p) {
  DT_TRY(ps_prio_finish_pushes(p));
  return drain(p, &p->pull, -1);
}
