/* Tensor parallelism's options (tensor.h): what combines with --tp, what a
 * model file's split= keys set, and the world the grid needs. The group
 * itself, which the worker composes, is in ../tp_group.c. */
#include <stdlib.h>
#include <string.h>

#include "strategy/grid.h"
#include "strategy/tensor/tensor.h"
#include "strategy/ps/ps.h"

/* ---- options ------------------------------------------------------------------ */

int tensor_check(const train_config_t *c) {
  if (c->tensor.conv_data && c->tensor.ranks > 1 && c->comm != COMM_MPI && c->tensor.ranks != c->workers)
    return dt_error("options --tp-conv data and --tp %d: the one weird trick splits the dense "
                    "layers over every worker (leave --tp out, or give --tp %d)", c->tensor.ranks, c->workers);
  if (c->tensor.conv_data && (c->pipe.stages > 1 || c->pipe.micro_batches > 1))
    return dt_error("options --tp-conv data and --%s %d do not combine (the one weird trick "
                    "exchanges the batch between its data-parallel and its split layers)",
                    c->pipe.stages > 1 ? "pp" : "micro-batches",
                    c->pipe.stages > 1 ? c->pipe.stages : c->pipe.micro_batches);
  if (c->tensor.ranks <= 1 && !c->tensor.conv_data) return 0;
  char opt[40];
  if (c->tensor.conv_data) snprintf(opt, sizeof opt, "--tp-conv data");
  else snprintf(opt, sizeof opt, "--tp %d", c->tensor.ranks);
  if (c->exchange == EXCHANGE_PS && c->optimization == OPTIMIZATION_CENTRAL) {
    DT_TRY(ps_check_tp(c)); /* Project Adam's replicas (ps_group.c) */
  } else if (c->optimization != OPTIMIZATION_CENTRAL || c->exchange != EXCHANGE_ALLREDUCE ||
      c->schedule != SCHEDULE_SYNC)
    return dt_error("option %s: tensor parallelism runs with --optimization central "
                    "--schedule sync --exchange allreduce:ALGO (the replicas of a block sum "
                    "their gradients by allreduce), or with --exchange ps:K --schedule "
                    "sync, ssp:S or async (a group is one worker of the servers)", opt);
  if (c->balance || c->shard_optimizer || c->comm_order == COLL_ORDER_PRIORITY || (c->sync_bn && c->tensor.conv_data))
    return dt_error("option %s does not combine with %s (the ranks of a tensor-parallel "
                    "group must take the same samples and the same whole-tensor steps)", opt,
                    c->balance ? "--balance on" : c->shard_optimizer ? "--shard-optimizer on"
                    : c->sync_bn && c->tensor.conv_data ? "--sync-bn on" : "--comm-order priority");
  if (c->optim.kind == OPTIM_LARS)
    return dt_error("options %s and --optimizer lars do not combine: LARS scales by the "
                    "norm of a whole tensor, a rank holds a block (use sgd, adam or rmsprop)", opt);
  return c->comm == COMM_MPI ? 0 : tensor_check_world(c);
}

/* --owt-scheme once the model file has said whether the run is the one
 * weird trick: b (the paper's runs) unless given; refused otherwise. */
static int owt_scheme_resolve(train_config_t *c) {
  if (c->tensor.conv_data && c->tensor.owt_scheme == OWT_SCHEME_UNSET) c->tensor.owt_scheme = OWT_SCHEME_B;
  if (c->tensor.conv_data || c->tensor.owt_scheme == OWT_SCHEME_UNSET) return 0;
  return dt_error("option --owt-scheme %c: applies to the one weird trick (--tp-conv data, or "
                  "split=data in the model file); drop it", 'a' + (int)c->tensor.owt_scheme);
}

/* The distbelief-mp preset is DistBelief's model parallelism: on a model
 * file whose local2d layers say split=rows (DistBelief's locally connected
 * layers, cut into bands of rows), its pp ranks split those layers by rows
 * instead (--tp = the preset's --pp, one stage), so that only the halos
 * cross machines; on any other model it stays the layer split (pp stages). */
static int distbelief_rows(train_config_t *c) {
  if (strcmp(c->preset, "distbelief-mp") || c->tensor.ranks > 1 || c->pipe.stages <= 1) return 0;
  model_spec_t spec;
  DT_TRY(model_spec_load(c->model, &spec));
  int rows = tensor_file_split_line(&spec, FILE_SPLIT_ROWS);
  model_spec_free(&spec);
  if (rows) c->tensor.ranks = c->pipe.stages, c->pipe.stages = 1, c->pipe.micro_batches = 1;
  return 0;
}

static int model_file_options(train_config_t *c) {
  DT_TRY(distbelief_rows(c));
  if (c->tensor.ranks <= 1 && !c->tensor.conv_data) return 0; /* split= applies to tensor-parallel runs only */
  model_spec_t spec;
  DT_TRY(model_spec_load(c->model, &spec));
  int given = tensor_file_split_line(&spec, FILE_SPLIT_UNSET);
  int data = tensor_file_split_line(&spec, FILE_SPLIT_DATA);
  char src[sizeof spec.source];
  snprintf(src, sizeof src, "%s", spec.source);
  model_spec_free(&spec);
  if (!given) return 0;
  if (c->tensor.conv_data)
    return dt_error("option --tp-conv data: %s says how its layers split (split= on line %d): "
                    "leave --tp-conv out", src, given);
  if (!data) return 0;
  if (c->pipe.stages > 1)
    return dt_error("option --pp %d: %s:%d says split=data, the one weird trick, which exchanges "
                    "the batch between its data-parallel and its split layers (use --pp 1)",
                    c->pipe.stages, src, data);
  if (c->comm != COMM_MPI && c->tensor.ranks != c->workers)
    return dt_error("option --tp %d: %s:%d says split=data, the one weird trick, which splits the "
                    "other layers over every worker (give --tp %d, the workers)", c->tensor.ranks, src, data,
                    c->workers);
  c->tensor.conv_data = 1, c->tensor.data_line = data;
  return 0;
}

int tensor_model_options(train_config_t *c) {
  DT_TRY(model_file_options(c));
  return owt_scheme_resolve(c);
}

int tensor_check_world(const train_config_t *c) {
  int per = c->tensor.ranks * c->pipe.stages;
  if (c->tensor.ranks <= 1 || c->workers % per == 0) return 0;
  if (c->comm == COMM_MPI && c->exchange == EXCHANGE_PS) { /* -np counts the servers too */
    int K = ps_nservers(c, c->workers), fit = (c->workers / per + 1) * per;
    return dt_error("mpirun -np %d, --tp %d and --exchange ps: %d workers besides the %d servers, "
                    "and workers must be a multiple of %d (e.g. mpirun -np %d)", c->workers + K,
                    c->tensor.ranks, c->workers, K, per, fit + ps_nservers(c, fit));
  }
  if (c->comm == COMM_MPI)
    return dt_error("mpirun -np %d and --tp %d%s: workers = dp x pp x tp, so -np must be a "
                    "multiple of %d (e.g. mpirun -np %d)", c->workers, c->tensor.ranks,
                    c->pipe.stages > 1 ? " --pp" : "", per, per);
  return dt_error("options --workers %d and --tp %d%s: workers = dp x pp x tp, so --workers must "
                  "be a multiple of %d (e.g. --workers %d for dp = 1)", c->workers, c->tensor.ranks,
                  c->pipe.stages > 1 ? " and --pp" : "", per, per);
}


/* Before any rank starts: a model with local2d layers built as each tp
 * rank of the group builds it, so that a band the split cannot make (more
 * ranks than output rows, windows that reach past the neighbours' bands)
 * is a usage error naming the layer, not a failure inside the ranks. */
int tensor_check_model(const train_config_t *c, const model_t *m) {
  int T = c->tensor.conv_data ? 1 : c->tensor.ranks, local = 0;
  for (int i = 0; i < m->nlayers; i++) local |= m->layers[i].spec.kind == LAYER_LOCAL2D;
  if (T <= 1 || !local) return 0;
  tensor_desc_t *d = NULL;
  int rc = tensor_desc_new(c, m, T, 1, &d);
  tensor_desc_free(d);
  return rc;
}
