/* train_describe_step: the selected strategy's step as data (its
 * describe_step), for `dtrain describe`, the byte tests and the
 * performance model: the model built as a worker builds it, on the data
 * set's shapes, without starting any rank. */
#include "strategy/strategy.h"

int train_describe_step(train_config_t *cfg, FILE *out) {
  if (strategy_prepare(cfg) != 0 || train_config_check(cfg) != 0) return -1;
  const strategy_t *s = strategy_select(cfg);
  if (!s) return -1;
  dataset_t data, test;
  if (dataset_load_seq(cfg->data, 1, cfg->seed, cfg->seq_len, &data) != 0) return -1;
  if (dataset_load_seq(cfg->data, 0, cfg->seed, cfg->seq_len, &test) != 0) {
    dataset_free(&data);
    return -1;
  }
  int nclasses = test.nclasses > data.nclasses ? test.nclasses : data.nclasses; /* as train_run */
  dataset_free(&test);
  model_spec_t spec;
  model_t *m = NULL;
  int rc = model_spec_load(cfg->model, &spec);
  if (rc == 0) {
    shape_t in = {data.c, data.h, data.w};
    rc = model_build(&spec, in, nclasses, cfg->batch, &m);
    model_spec_free(&spec);
  }
  dataset_free(&data);
  step_desc_t d;
  if (rc == 0) rc = strategy_describe(cfg, m, &d);
  if (rc == 0) {
    rc = step_desc_json(&d, s->name, out);
    step_desc_free(&d);
  }
  if (m) model_free(m);
  return rc;
}
