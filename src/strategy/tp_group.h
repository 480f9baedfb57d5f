/* The groups a worker's model sums over, beside its data-parallel ranks:
 * the tensor-parallel group, whose split layers (nn: tp_link_t) sum their
 * partial products over it, and synchronized batch norm's ranks. The
 * worker composes them (worker.c); the tensor family plans which layers
 * split and checks the options (tensor/). */
#ifndef DTRAIN_STRATEGY_TP_GROUP_H
#define DTRAIN_STRATEGY_TP_GROUP_H

#include "strategy/worker.h"

typedef struct tensor_par tensor_par_t;

/* Ranks in a tensor-parallel group of a run of nranks: --tp, or every rank
 * under --tp-conv data (one weird trick). 1: no tensor parallelism. */
int tensor_group_size(const train_config_t *c, int nranks);
/* Collective over world: splits it into this rank's slice and group. */
int tensor_new(comm_t *world, const train_config_t *cfg, tensor_par_t **out);
void tensor_free(tensor_par_t *t);
comm_t *tensor_slice(tensor_par_t *t);
int tensor_rank(const tensor_par_t *t);
int tensor_size(const tensor_par_t *t);
coll_ctx_t *tensor_coll(tensor_par_t *t);
tp_link_t *tensor_link(tensor_par_t *t);
/* A link's sum: the allreduce over coll's communicator (one of its own),
 * its seconds and bytes added to the link's counters. */
int tensor_link_sum(tp_link_t *l, coll_ctx_t *coll, allreduce_algo_t algo, float *buf, size_t count);
/* Seconds spent in the group's sums so far (the caller takes differences). */
double tensor_comm_sec(const tensor_par_t *t);
/* -1 (with the collective's error) once a sum over the group has failed. */
int tensor_failed(const tensor_par_t *t, const char *where);
/* Parameters of the whole (one-worker) model. */
size_t tensor_full_params(const model_t *m);
/* Collective over the group: rank 0 gets the whole model (*full, built
 * from the unsplit spec) and its optimizer state (*state[nstate], each the
 * full model's nparams floats); the others send their blocks and get NULL.
 * The caller frees them with tensor_gather_free. */
int tensor_gather(tensor_par_t *t, worker_t *w, model_t **full, float ***state);
void tensor_gather_free(model_t *full, float **state, int nstate);

/* ---- synchronized batch norm (sync_bn.c): --sync-bn on ---------------------- */
typedef struct sync_bn sync_bn_t;
/* Collective over dp (the data-parallel ranks): a communicator of its own
 * for batch norm's sums. */
int sync_bn_new(comm_t *dp, allreduce_algo_t algo, sync_bn_t **out);
void sync_bn_free(sync_bn_t *s);
tp_link_t *sync_bn_link(sync_bn_t *s);
double sync_bn_comm_sec(const sync_bn_t *s);
int sync_bn_failed(const sync_bn_t *s, const char *where);
/* Refuses a model with no batchnorm layer, naming --sync-bn. */
int sync_bn_check_model(const model_spec_t *spec);

#endif
