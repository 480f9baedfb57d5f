/* The tensor-parallel group (tp_group.h): the comm split, the sum the
 * split layers call, and the gather of the blocks into one model for a
 * checkpoint. */
#include <stdlib.h>
#include <string.h>

#include "strategy/grid.h"
#include "strategy/tp_group.h"

enum { TAG_TP_GATHER = 5601, TAG_TP_HALO = 5602 };

struct tensor_par {
  tp_link_t link;
  comm_t *group, *slice;
  coll_ctx_t *coll;
  allreduce_algo_t algo;
};

int tensor_group_size(const train_config_t *c, int nranks) { return c->tensor.conv_data ? nranks : c->tensor.ranks; }

/* ---- the group ---------------------------------------------------------------- */

/* A link's counters around one collective on coll's communicator. */
typedef struct {
  double t0;
  comm_bytes_t b0;
} link_clock_t;

static link_clock_t link_clock(coll_ctx_t *coll) { return (link_clock_t){dt_now(), comm_bytes_own(coll_ctx_comm(coll))}; }

static void link_charge(tp_link_t *l, coll_ctx_t *coll, link_clock_t c) {
  comm_bytes_t b1 = comm_bytes_own(coll_ctx_comm(coll));
  l->sec += dt_now() - c.t0;
  l->sent += b1.sent - c.b0.sent;
  l->received += b1.received - c.b0.received;
}

int tensor_link_sum(tp_link_t *l, coll_ctx_t *coll, allreduce_algo_t algo, float *buf, size_t count) {
  link_clock_t c = link_clock(coll);
  double t0 = dt_trace ? dt_now() : 0;
  int rc = allreduce(coll, algo, buf, count);
  if (dt_trace) trace_async(dt_trace, TRACE_COMM, "tensor-parallel sum", (long long)(count * sizeof *buf),
                            t0, dt_now());
  link_charge(l, coll, c);
  return rc;
}

static int link_allreduce(tp_link_t *l, float *buf, size_t count) {
  tensor_par_t *t = l->ctx;
  return tensor_link_sum(l, t->coll, t->algo, buf, count);
}

static int link_allgather(tp_link_t *l, float *buf, size_t count) {
  tensor_par_t *t = l->ctx;
  link_clock_t c = link_clock(t->coll);
  double t0 = dt_trace ? dt_now() : 0;
  int rc = allgather_ring(t->coll, buf, count);
  if (dt_trace) trace_async(dt_trace, TRACE_COMM, "tensor-parallel allgather",
                            (long long)(count * sizeof *buf), t0, dt_now());
  link_charge(l, t->coll, c);
  return rc;
}

/* A halo exchange (split=rows local2d layers): every message posted, then
 * all waited for, so neighbours that send to each other cannot deadlock. */
static int link_exchange(tp_link_t *l, const tp_msg_t *msgs, int n) {
  tensor_par_t *t = l->ctx;
  comm_req_t *req[8];
  if (n > 8) return dt_error("halo exchange: %d messages (at most 8)", n);
  link_clock_t c = link_clock(t->coll);
  int rc = 0, posted = 0;
  for (int i = 0; i < n && rc == 0; i++, posted++) {
    size_t len = msgs[i].count * sizeof(float);
    rc = msgs[i].send ? comm_isend(t->group, msgs[i].peer, TAG_TP_HALO, msgs[i].buf, len, &req[i])
                      : comm_irecv(t->group, msgs[i].peer, TAG_TP_HALO, msgs[i].buf, len, &req[i]);
  }
  if (rc != 0) posted--;
  if (posted > 0 && comm_waitall(t->group, posted, req) != 0) rc = -1;
  link_charge(l, t->coll, c);
  if (dt_trace) { /* a communication slice as the collectives' (its bytes sent) */
    long long bytes = 0;
    for (int i = 0; i < n; i++) bytes += msgs[i].send ? (long long)(msgs[i].count * sizeof(float)) : 0;
    trace_async(dt_trace, TRACE_COMM, "halo", bytes, c.t0, dt_now());
  }
  return rc;
}

int tensor_new(comm_t *world, const train_config_t *cfg, tensor_par_t **out) {
  tensor_par_t *t = calloc(1, sizeof *t);
  if (!t) return dt_error("out of memory");
  *out = t;
  int T = tensor_group_size(cfg, comm_size(world));
  if (cfg->tensor.conv_data && cfg->tensor.ranks > 1 && cfg->tensor.ranks != T && cfg->tensor.data_line)
    return dt_error("option --tp %d: %s:%d says split=data, the one weird trick, which splits the "
                    "other layers over every worker (give --tp %d, the -np of mpirun)", cfg->tensor.ranks,
                    cfg->model, cfg->tensor.data_line, T);
  if (cfg->tensor.conv_data && cfg->tensor.ranks > 1 && cfg->tensor.ranks != T)
    return dt_error("options --tp-conv data and --tp %d: the one weird trick splits the dense "
                    "layers over every worker (leave --tp out, or give --tp %d)", cfg->tensor.ranks, T);
  DT_TRY(rank_grid_split_tp(world, T, &t->group, &t->slice));
  DT_TRY(coll_ctx_new(t->group, &t->coll));
  t->algo = cfg->algo;
  t->link = (tp_link_t){.rank = comm_rank(t->group), .size = comm_size(t->group),
                        .allreduce = link_allreduce, .allgather = link_allgather,
                        .exchange = link_exchange, .ctx = t};
  return 0;
}

void tensor_free(tensor_par_t *t) {
  if (!t) return;
  if (t->coll) coll_ctx_free(t->coll);
  if (t->group) comm_free(t->group);
  if (t->slice) comm_free(t->slice);
  free(t);
}

comm_t *tensor_slice(tensor_par_t *t) { return t->slice; }
int tensor_rank(const tensor_par_t *t) { return t ? t->link.rank : 0; }
int tensor_size(const tensor_par_t *t) { return t ? t->link.size : 1; }
coll_ctx_t *tensor_coll(tensor_par_t *t) { return t->coll; }
tp_link_t *tensor_link(tensor_par_t *t) { return &t->link; }
double tensor_comm_sec(const tensor_par_t *t) { return t ? t->link.sec : 0; }

int tensor_failed(const tensor_par_t *t, const char *where) {
  if (!t || !t->link.failed) return 0;
  return dt_error_prefix("tensor-parallel sum in %s (tp rank %d): ", where, t->link.rank);
}

size_t tensor_full_params(const model_t *m) {
  size_t n = 0;
  for (int i = 0; i < m->ntensors; i++) n += tensor_full_len(&m->tensors[i]);
  return n;
}

/* ---- the gather for a checkpoint ---------------------------------------------- */

static int split_tensor(const tensor_info_t *ti) { return ti->len != tensor_full_len(ti); }

/* Ranks > 0: each split tensor's block (its place, then its values) of the
 * parameters and of every optimizer state, in tensor order. */
static int send_blocks(tensor_par_t *t, const worker_t *w) {
  const model_t *m = w->model;
  for (int i = 0; i < m->ntensors; i++) {
    const tensor_info_t *ti = &m->tensors[i];
    if (!split_tensor(ti)) continue;
    uint64_t head[4] = {ti->row0, ti->rows, ti->col0, ti->cols};
    DT_TRY(comm_send(t->group, 0, TAG_TP_GATHER, head, sizeof head));
    DT_TRY(comm_send(t->group, 0, TAG_TP_GATHER, m->params + ti->off, ti->len * sizeof(float)));
    for (int s = 0; s < w->opt->nstate; s++)
      DT_TRY(comm_send(t->group, 0, TAG_TP_GATHER, w->opt->state[s] + ti->off, ti->len * sizeof(float)));
  }
  return 0;
}

/* Rank 0: its own blocks, then every other rank's, into the whole model. */
static int receive_blocks(tensor_par_t *t, const worker_t *w, model_t *full, float **state) {
  const model_t *m = w->model;
  int nstate = w->opt->nstate;
  if (full->ntensors != m->ntensors || full->nbuffers != m->nbuffers)
    return dt_error("tensor parallelism: the split model has %d tensors, the whole one %d",
                    m->ntensors, full->ntensors);
  size_t most = 0;
  for (int i = 0; i < m->ntensors; i++)
    if (tensor_full_len(&m->tensors[i]) > most) most = tensor_full_len(&m->tensors[i]);
  float *buf = dt_alloc_floats(most + 1);
  if (!buf) return -1;
  int rc = 0;
  for (int i = 0; rc == 0 && i < m->ntensors; i++) {
    const tensor_info_t *ti = &m->tensors[i], *fi = &full->tensors[i];
    tensor_block_copy(ti, full->params + fi->off, m->params + ti->off, 1);
    for (int s = 0; s < nstate; s++)
      tensor_block_copy(ti, state[s] + fi->off, w->opt->state[s] + ti->off, 1);
    for (int r = 1; rc == 0 && split_tensor(ti) && r < t->link.size; r++) {
      uint64_t h[4];
      rc = comm_recv(t->group, r, TAG_TP_GATHER, h, sizeof h);
      tensor_info_t b = *ti;
      b.row0 = h[0], b.rows = h[1], b.col0 = h[2], b.cols = h[3], b.len = h[1] * b.mid * h[3];
      size_t view_rows = tensor_full_len(fi) / (ti->mid * ti->full_cols); /* the block's view */
      if (rc == 0 && (b.row0 + b.rows > view_rows || b.col0 + b.cols > ti->full_cols))
        rc = dt_error("tensor parallelism: tp rank %d sent a block outside '%s'", r, fi->name);
      for (int s = -1; rc == 0 && s < nstate; s++) {
        rc = comm_recv(t->group, r, TAG_TP_GATHER, buf, b.len * sizeof(float));
        if (rc == 0) tensor_block_copy(&b, (s < 0 ? full->params : state[s]) + fi->off, buf, 1);
      }
    }
  }
  memcpy(full->buffers, m->buffers, m->nbuffers * sizeof(float)); /* batch norm: never split */
  dt_free(buf);
  return rc;
}

void tensor_gather_free(model_t *full, float **state, int nstate) {
  for (int s = 0; state && s < nstate; s++) dt_free(state[s]);
  free(state);
  model_free(full);
}

int tensor_gather(tensor_par_t *t, worker_t *w, model_t **full, float ***state) {
  *full = NULL;
  *state = NULL;
  if (t->link.rank != 0) return send_blocks(t, w);
  const train_config_t *cfg = w->cfg;
  model_spec_t spec;
  DT_TRY(model_spec_load(cfg->model, &spec));
  shape_t in = {w->train->c, w->train->h, w->train->w};
  int rc = model_build(&spec, in, w->train->nclasses, 1, full);
  model_spec_free(&spec);
  int nstate = w->opt->nstate;
  if (rc == 0 && !(*state = calloc((size_t)nstate + 1, sizeof **state))) rc = dt_error("out of memory");
  for (int s = 0; rc == 0 && s < nstate; s++)
    if (!((*state)[s] = dt_alloc_floats((*full)->nparams))) rc = -1;
  if (rc == 0) rc = receive_blocks(t, w, *full, *state);
  if (rc != 0) {
    tensor_gather_free(*full, *state, nstate);
    *full = NULL, *state = NULL;
  }
  return rc;
}
