/* A pipeline's epoch end (engine.h, pipe_evaluate): the train figures
 * summed over the replicas' last stages, and each rank's of replica 0
 * (compute, idle, activation sets and weight versions held); the stages
 * of replica 0 send their parameters, buffers (and, for a checkpoint,
 * optimizer state) to rank 0, which then holds the whole trained model:
 * it evaluates it on the test set, reports and checkpoints, as a
 * one-worker run would. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "strategy/pipe/engine.h"

/* ---- the whole model on rank 0 ----------------------------------------------- */

static int send_range(pipe_engine_t *e, const stage_t *st, int nstate) {
  worker_t *w = e->w;
  model_t *m = w->model;
  uint64_t head[4] = {st->param_off, st->param_len, st->buf_off, st->buf_len};
  DT_TRY(comm_send(e->pipe, 0, TAG_PIPE_GATHER, head, sizeof head));
  DT_TRY(comm_send(e->pipe, 0, TAG_PIPE_GATHER, m->params + st->param_off, st->param_len * sizeof(float)));
  DT_TRY(comm_send(e->pipe, 0, TAG_PIPE_GATHER, m->buffers + st->buf_off, st->buf_len * sizeof(float)));
  for (int i = 0; i < nstate; i++)
    DT_TRY(comm_send(e->pipe, 0, TAG_PIPE_GATHER, w->opt->state[i] + st->param_off, st->param_len * sizeof(float)));
  return 0;
}

static int recv_range(pipe_engine_t *e, int s, int nstate) {
  worker_t *w = e->w;
  model_t *m = w->model;
  uint64_t h[4];
  DT_TRY(comm_recv(e->pipe, s, TAG_PIPE_GATHER, h, sizeof h));
  if (h[0] + h[1] > m->nparams || h[2] + h[3] > m->nbuffers)
    return dt_error("pipeline: stage %d sent the range [%llu, +%llu) of a %zu-parameter model", s,
                    (unsigned long long)h[0], (unsigned long long)h[1], m->nparams);
  DT_TRY(comm_recv(e->pipe, s, TAG_PIPE_GATHER, m->params + h[0], h[1] * sizeof(float)));
  DT_TRY(comm_recv(e->pipe, s, TAG_PIPE_GATHER, m->buffers + h[2], h[3] * sizeof(float)));
  for (int i = 0; i < nstate; i++)
    DT_TRY(comm_recv(e->pipe, s, TAG_PIPE_GATHER, w->opt->state[i] + h[0], h[1] * sizeof(float)));
  return 0;
}

/* Replica 0's ranks send their chunks' ranges to rank 0 (params, buffers
 * and, for a checkpoint, the optimizer state). */
static int gather_model(pipe_engine_t *e) {
  int nstate = e->w->cfg->checkpoint[0] ? e->w->opt->nstate : 0;
  if (e->r != 0) return 0;
  for (int v = 0; e->s > 0 && v < e->V; v++) DT_TRY(send_range(e, e->chunk[v].st, nstate));
  for (int s = 1; e->s == 0 && s < e->P; s++)
    for (int v = 0; v < e->V; v++) DT_TRY(recv_range(e, s, nstate));
  return 0;
}

/* ---- the report's fields ----------------------------------------------------- */

/* Appends to e->extra at *n, cut short at its end. */
__attribute__((format(printf, 3, 4)))
static void put(pipe_engine_t *e, size_t *n, const char *fmt, ...) {
  if (*n >= e->extra_cap) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(e->extra + *n, e->extra_cap - *n, fmt, ap);
  va_end(ap);
  if (k > 0) *n += (size_t)k;
}

static void put_array(pipe_engine_t *e, size_t *n, const char *key, const double *v, int precision) {
  put(e, n, ",\"%s\":[", key);
  for (int s = 0; s < e->P; s++) put(e, n, "%s%.*f", s ? "," : "", precision, v[s]);
  put(e, n, "]");
}

/* figs: per rank of replica 0, [compute, idle, peak activation sets, peak
 * weight versions] x P; v: scratch of P. */
static void extra_json(pipe_engine_t *e, const float *figs, double *v) {
  int P = e->P;
  size_t n = 0;
  put(e, &n, "\"pp\":%d,\"dp\":%d,\"micro_batches\":%d,\"pipe_schedule\":\"%s\",\"pipe_chunks\":%d,"
      "\"stage_first_layer\":[", P, e->ndp, e->M, pipe_kind_name(e->kind), e->V);
  for (int g = 0; g < e->G; g++) put(e, &n, "%s%d", g ? "," : "", e->first[g]);
  put(e, &n, "]");
  const char *keys[4] = {"stage_compute_sec", "stage_idle_sec", "stage_peak_activations", "stage_weight_versions"};
  int nkeys = e->ops->peak_versions ? 4 : 3; /* one weight version: no figure */
  for (int a = 0; a < nkeys; a++) {
    for (int s = 0; s < P; s++) v[s] = figs[a * P + s];
    put_array(e, &n, keys[a], v, a < 2 ? 4 : 0);
  }
  double busy = 0, idle = 0;
  for (int s = 0; s < P; s++) busy += figs[s], idle += figs[P + s];
  const model_t *m = e->w->model;
  for (int a = 0; a < 2; a++) { /* the partitioner's view per rank (its chunks summed): seconds, parameters */
    for (int s = 0; s < P; s++) {
      v[s] = 0;
      for (int c = 0; c < e->V; c++)
        for (int i = e->first[c * P + s]; i < e->first[c * P + s + 1]; i++)
          v[s] += a ? (double)m->layers[i].param_len : e->layer_sec[i];
    }
    put_array(e, &n, a ? "stage_params" : "stage_profiled_sec", v, a ? 0 : 6);
  }
  put(e, &n, ",\"bubble_fraction\":%.4f", busy + idle > 0 ? idle / (busy + idle) : 0);
  if (!e->w->cfg->pipe.partition[0]) { /* --partition balanced: each layer's measured seconds */
    put(e, &n, ",\"layer_profiled_sec\":[");
    for (int i = 0; i < m->nlayers; i++) put(e, &n, "%s%.9g", i ? "," : "", e->layer_sec[i]);
    put(e, &n, "]");
  }
}

int pipe_evaluate(void *engine, epoch_report_t *r) {
  pipe_engine_t *e = engine;
  worker_t *w = e->w;
  int P = e->P;
  float *v = calloc((size_t)(3 + 4 * P), sizeof *v);
  double *scratch = calloc((size_t)P, sizeof *scratch);
  if (!v || !scratch) return free(v), free(scratch), dt_error("out of memory");
  if (e->chunk[e->V - 1].st->ends_model)
    v[0] = (float)w->epoch_loss_sum, v[1] = (float)w->epoch_samples, v[2] = (float)w->epoch_correct;
  if (e->r == 0) {
    v[3 + e->s] = (float)e->compute, v[3 + P + e->s] = (float)e->idle;
    v[3 + 2 * P + e->s] = (float)e->peak_live;
    v[3 + 3 * P + e->s] = e->ops->peak_versions ? (float)e->ops->peak_versions(e) : 0;
  }
  int rc = allreduce(w->coll, ALLREDUCE_TREE, v, (size_t)(3 + 4 * P));
  if (rc == 0) rc = gather_model(e);
  if (rc == 0 && comm_rank(w->comm) == 0) {
    r->train_loss = v[1] > 0 ? v[0] / v[1] : 0;
    r->train_acc = v[1] > 0 ? v[2] / v[1] : 0;
    double loss;
    double correct;
    worker_evaluate(w, 0, w->test->n, &loss, &correct);
    r->test_loss = loss / (double)w->test->n;
    r->test_acc = correct / (double)w->test->n;
    extra_json(e, v + 3, scratch);
    r->extra_json = e->extra;
  }
  free(v);
  free(scratch);
  return rc;
}
