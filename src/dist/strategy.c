/* Which strategy the taxonomy axes select. Each family adds its rows here;
 * a combination that no row accepts is refused with the options named and
 * what does exist. */
#include <string.h>

#include "dtrain/dist.h"

static int select_central(const train_config_t *c, strategy_fn *fn, const char **name) {
  if (c->exchange == EXCHANGE_ALLREDUCE) {
    if (c->schedule != SCHEDULE_SYNC)
      return dt_error("options --schedule %s and --exchange allreduce do not combine: allreduce "
                      "is synchronous (use --schedule sync, or --exchange ps:K for %s)",
                      schedule_name(c->schedule), schedule_name(c->schedule));
    *fn = strategy_data_parallel;
    *name = "data-parallel allreduce";
    return 0;
  }
  return dt_error("option --exchange %s with --optimization central: not available (what "
                  "exists: --exchange allreduce:ring|rhd|tree|naive|hier|auto)",
                  exchange_name(c->exchange));
}

static int select_decentral(const train_config_t *c, strategy_fn *fn, const char **name) {
  (void)fn, (void)name;
  return dt_error("option --optimization decentral with --exchange %s: not available (what "
                  "exists: --optimization central --exchange allreduce:*)",
                  exchange_name(c->exchange));
}

int strategy_select(const train_config_t *c, strategy_fn *fn, const char **name) {
  return c->optimization == OPTIMIZATION_CENTRAL ? select_central(c, fn, name)
                                                 : select_decentral(c, fn, name);
}

int strategy_total_ranks(const train_config_t *c) {
  return c->workers + (c->exchange == EXCHANGE_PS ? c->ps_servers : 0);
}
