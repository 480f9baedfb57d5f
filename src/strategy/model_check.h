/* Checks made before the ranks start (internal to src/strategy/):
 * model_check.c (what needs the model), memory_bound.c (what needs the
 * machine's memory). */
#ifndef DTRAIN_STRATEGY_MODEL_CHECK_H
#define DTRAIN_STRATEGY_MODEL_CHECK_H

#include "dtrain/data.h"
#include "dtrain/nn.h"
#include "dtrain/train.h"

/* The model built for one sample of `train`'s shape, checked against the
 * options: the file's split= keys, --sync-bn, the pipeline's cuts, the
 * memory. -1 with one line naming the option. */
int train_check_model(const train_config_t *cfg, const dataset_t *train);
/* -1 with one line naming the option (--batch, --workers or --model), the
 * memory the run would take and the limit, when it needs more than this
 * process may have: the machine's memory, its cgroup's, ulimit -v. m is
 * the model built for one sample. */
int train_check_memory(const train_config_t *cfg, const model_t *m);
#endif
