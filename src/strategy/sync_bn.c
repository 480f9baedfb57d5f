/* Synchronized batch normalization (--sync-bn on; PyTorch's SyncBatchNorm):
 * the batch-norm layers of a data-parallel run take their batch statistics
 * over the whole group (src/nn/batchnorm.c, l->bn_sync), so N ranks of b
 * samples train as one worker of N·b. The sums go over a communicator of
 * their own, split from the data-parallel one, because data parallelism's
 * overlapped allreduces may run on its progress thread during backward. */
#include <stdlib.h>

#include "strategy/tp_group.h"

struct sync_bn {
  tp_link_t link;
  comm_t *comm;
  coll_ctx_t *coll;
  allreduce_algo_t algo;
};

static int link_allreduce(tp_link_t *l, float *buf, size_t count) {
  sync_bn_t *s = l->ctx;
  return tensor_link_sum(l, s->coll, s->algo, buf, count);
}

int sync_bn_new(comm_t *dp, allreduce_algo_t algo, sync_bn_t **out) {
  sync_bn_t *s = calloc(1, sizeof *s);
  if (!s) return dt_error("out of memory");
  *out = s;
  if (comm_split(dp, 0, comm_rank(dp), &s->comm) != 0) return dt_error_prefix("--sync-bn: ");
  DT_TRY(coll_ctx_new(s->comm, &s->coll));
  s->algo = algo;
  s->link = (tp_link_t){.rank = comm_rank(dp), .size = comm_size(dp), .allreduce = link_allreduce, .ctx = s};
  return 0;
}

void sync_bn_free(sync_bn_t *s) {
  if (!s) return;
  if (s->coll) coll_ctx_free(s->coll);
  if (s->comm) comm_free(s->comm);
  free(s);
}

tp_link_t *sync_bn_link(sync_bn_t *s) { return &s->link; }
double sync_bn_comm_sec(const sync_bn_t *s) { return s ? s->link.sec : 0; }

int sync_bn_failed(const sync_bn_t *s, const char *where) {
  if (!s || !s->link.failed) return 0;
  return dt_error_prefix("synchronized batch norm in %s (rank %d): ", where, s->link.rank);
}

int sync_bn_check_model(const model_spec_t *spec) {
  for (int i = 0; i < spec->nlayers; i++)
    if (spec->layers[i].kind == LAYER_BATCHNORM) return 0;
  return dt_error("option --sync-bn on: %s has no batchnorm layer to synchronize (use --sync-bn off)",
                  spec->source);
}
