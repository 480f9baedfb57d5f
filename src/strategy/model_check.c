/* train_check_model: the refusals that need the model (its layers, its
 * file's split= keys) and the machine's memory, made once before any rank
 * starts, so that they are usage errors (exit 2) and not a failure of a
 * rank after the others have allocated and started. Each rank's setup
 * checks the same again (a library caller may skip this). */
#include "strategy/model_check.h"
#include "strategy/pipe/pipe.h"
#include "strategy/tensor/tensor.h"

/* The file's split= keys and the planner, as one rank of the group would
 * apply them (build_model in worker.c). */
static int check_spec(const train_config_t *c, model_spec_t *spec) {
  int file_split = tensor_file_split_line(spec, FILE_SPLIT_UNSET) != 0;
  int tp = c->tp_conv_data ? c->workers : c->tp; /* tensor_group_size */
  /* under mpi the one weird trick's group is -np, known once the ranks start */
  int known = !(c->tp_conv_data && c->comm == COMM_MPI);
  if (known && (tp > 1 || file_split)) DT_TRY(tensor_plan_for(c, spec, tp > 1 ? tp : 1));
  if (c->sync_bn) DT_TRY(sync_bn_check_model(spec));
  return 0;
}

int train_check_model(const train_config_t *c, const dataset_t *train) {
  model_spec_t spec;
  DT_TRY(model_spec_load(c->model, &spec));
  int rc = check_spec(c, &spec); /* the planned spec needs a group to build: not kept */
  model_spec_free(&spec);
  if (rc != 0) return -1;
  DT_TRY(model_spec_load(c->model, &spec));
  model_t *m = NULL;
  shape_t in = {train->c, train->h, train->w};
  /* one sample: the shapes and sizes, without the batch's activations */
  rc = model_build(&spec, in, train->nclasses, 1, &m);
  model_spec_free(&spec);
  if (rc == 0) rc = pipe_check_model(c, m);
  if (rc == 0) rc = train_check_memory(c, m);
  if (m) model_free(m);
  return rc;
}
