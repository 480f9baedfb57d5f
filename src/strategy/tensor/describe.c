/* Tensor parallelism in a step's description (tensor.h): the model each
 * rank of a tensor-parallel group builds, its blocks of the split layers
 * cut as a running rank's are, so that the sums its layers call
 * (model_layer_sums) and the gradients it exchanges have the sizes they
 * have on that rank. Nothing runs: the links carry a group's size and a
 * rank's place in it, and refuse to sum. */
#include <stdlib.h>

#include "strategy/tensor/tensor.h"

struct tensor_desc {
  int T;
  tp_link_t *tp;      /* T links: tp rank t's */
  tp_link_t bn;       /* --sync-bn: batch norm's group */
  model_t **model;    /* T models; model[0] is the caller's m when nothing is split or synchronized */
  int owned;
};

static int no_sum(tp_link_t *l, float *buf, size_t count) {
  return dt_error("a step's description runs no sum (%zu floats asked of rank %d of %d)", count,
                  l->rank, l->size);
}

int tensor_desc_new(const train_config_t *c, const model_t *m, int T, int bn, tensor_desc_t **out) {
  tensor_desc_t *d = calloc(1, sizeof *d);
  *out = d;
  if (!d || !(d->tp = calloc((size_t)T, sizeof *d->tp)) ||
      !(d->model = calloc((size_t)T, sizeof *d->model)))
    return dt_error("out of memory");
  d->T = T;
  d->owned = T > 1 || bn > 1;
  if (!d->owned) {
    d->model[0] = (model_t *)m;
    return 0;
  }
  d->bn = (tp_link_t){.size = bn, .allreduce = no_sum};
  for (int t = 0; t < T; t++) {
    d->tp[t] = (tp_link_t){.rank = t, .size = T, .allreduce = no_sum, .allgather = no_sum};
    DT_TRY(worker_build_model(c, m->input, m->nclasses, T > 1 ? &d->tp[t] : NULL,
                              bn > 1 ? &d->bn : NULL, &d->model[t]));
  }
  return 0;
}

model_t *tensor_desc_model(const tensor_desc_t *d, int t) { return d->model[t]; }

/* A sum left out: the layer runs on its own block alone (timing only). */
static int skip_sum(tp_link_t *l, float *buf, size_t count) { return 0; }
static int skip_exchange(tp_link_t *l, const tp_msg_t *msgs, int n) { return 0; }

void tensor_desc_time_alone(tensor_desc_t *d, int on) {
  for (int t = 0; t < d->T && d->owned; t++) {
    tp_link_t *l = &d->tp[t];
    l->allreduce = l->allgather = on ? skip_sum : no_sum;
    l->exchange = on ? skip_exchange : NULL;
    l->failed = 0;
  }
}

void tensor_desc_free(tensor_desc_t *d) {
  if (!d) return;
  for (int t = 0; d->owned && d->model && t < d->T; t++) model_free(d->model[t]);
  free(d->model);
  free(d->tp);
  free(d);
}
