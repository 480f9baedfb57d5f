/* registry: every strategy's descriptor, one line each, and the families'
 * checks of their options. The one place above the families that names
 * them; the descriptors live beside the code they run. Order matters only
 * for messages (matches are exclusive). */
#include "strategy/strategy.h"

extern const strategy_t STRATEGY_DATA_PARALLEL, STRATEGY_SHARED_SYNC, STRATEGY_HOGWILD,
    STRATEGY_ONE_WEIRD_TRICK, STRATEGY_PIPELINE, STRATEGY_PARAMETER_SERVERS, STRATEGY_LOCAL_SGD,
    STRATEGY_SPARKNET, STRATEGY_EASGD_SYNC, STRATEGY_EASGD_ASYNC, STRATEGY_DPSGD, STRATEGY_ADPSGD,
    STRATEGY_GOSSIP, STRATEGY_TREE_EASGD, STRATEGY_MPCA;

const strategy_t *const STRATEGIES[] = {
    &STRATEGY_MPCA, /* first: its refusal of central soft comes before the others' */
    &STRATEGY_ONE_WEIRD_TRICK,
    &STRATEGY_PIPELINE,
    &STRATEGY_DATA_PARALLEL,
    &STRATEGY_PARAMETER_SERVERS,
    &STRATEGY_SHARED_SYNC,
    &STRATEGY_HOGWILD,
    &STRATEGY_LOCAL_SGD,
    &STRATEGY_SPARKNET,
    &STRATEGY_EASGD_SYNC,
    &STRATEGY_EASGD_ASYNC,
    &STRATEGY_DPSGD,
    &STRATEGY_ADPSGD,
    &STRATEGY_GOSSIP,
    &STRATEGY_TREE_EASGD,
};
const int NSTRATEGIES = (int)(sizeof STRATEGIES / sizeof STRATEGIES[0]);

int decentral_check(const train_config_t *cfg);
int ps_check(const train_config_t *cfg);
int pipe_check(const train_config_t *cfg);
int tensor_check(const train_config_t *cfg);

const family_check_fn FAMILY_CHECKS[] = {decentral_check, ps_check, pipe_check, tensor_check};
const int NFAMILY_CHECKS = (int)(sizeof FAMILY_CHECKS / sizeof FAMILY_CHECKS[0]);

int decentral_check_world(const train_config_t *cfg);
int pipe_check_world(const train_config_t *cfg);
int tensor_check_world(const train_config_t *cfg);
int ps_check_world(const train_config_t *cfg);

const family_check_fn FAMILY_WORLD_CHECKS[] = {decentral_check_world, pipe_check_world,
                                               tensor_check_world, ps_check_world};
const int NFAMILY_WORLD_CHECKS = (int)(sizeof FAMILY_WORLD_CHECKS / sizeof FAMILY_WORLD_CHECKS[0]);

/* Before the checks: options a model file sets (its split= keys set the
 * tensor-parallel grid). Before any rank starts: the model's spec, and the
 * model built for one sample. */
int tensor_model_options(train_config_t *cfg);
int tensor_check_spec(const train_config_t *cfg, model_spec_t *spec);
int tensor_plan_for(const train_config_t *cfg, model_spec_t *spec, int tp);
int tensor_file_split_line(const model_spec_t *spec, file_split_t which);
int pipe_check_model(const train_config_t *cfg, const model_t *m);
int tensor_check_model(const train_config_t *cfg, const model_t *m);

int strategy_prepare(train_config_t *cfg) { return tensor_model_options(cfg); }

int strategy_check_spec(const train_config_t *cfg, model_spec_t *spec) {
  return tensor_check_spec(cfg, spec);
}

int strategy_plan_model(const train_config_t *cfg, model_spec_t *spec, int tp) {
  if (tp > 0 || tensor_file_split_line(spec, FILE_SPLIT_UNSET))
    return tensor_plan_for(cfg, spec, tp > 0 ? tp : 1);
  return 0;
}

int strategy_check_model(const train_config_t *cfg, const model_t *m) {
  DT_TRY(pipe_check_model(cfg, m));
  return tensor_check_model(cfg, m);
}
