/* train_check_model: the refusals that need the model (its layers, its
 * file's split= keys) and the machine's memory, made once before any rank
 * starts, so that they are usage errors (exit 2) and not a failure of a
 * rank after the others have allocated and started. Each rank's setup
 * checks the same again (a library caller may skip this). */
#include "strategy/model_check.h"
#include "strategy/strategy.h"

int train_check_model(const train_config_t *c, const dataset_t *train) {
  model_spec_t spec;
  DT_TRY(model_spec_load(c->model, &spec));
  int rc = strategy_check_spec(c, &spec); /* the planned spec needs a group to build: not kept */
  model_spec_free(&spec);
  if (rc != 0) return -1;
  DT_TRY(model_spec_load(c->model, &spec));
  model_t *m = NULL;
  shape_t in = {train->c, train->h, train->w};
  /* one sample: the shapes and sizes, without the batch's activations;
   * --recompute's segments too (refused where it finds none) */
  spec.recompute = c->recompute;
  rc = model_build(&spec, in, train->nclasses, 1, &m);
  model_spec_free(&spec);
  if (rc == 0) rc = strategy_check_model(c, m);
  if (rc == 0) rc = train_check_memory(c, m);
  if (m) model_free(m);
  return rc;
}
