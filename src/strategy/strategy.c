/* Which strategy the taxonomy axes select. Each family adds its rows here;
 * a combination that no row accepts is refused with the options named and
 * what does exist. */
#include <string.h>

#include "strategy/dp/dp.h"
#include "strategy/ps/ps.h"
#include "strategy/decentral/decentral.h"
#include "strategy/pipe/pipe.h"
#include "strategy/tensor/tensor.h"

static int select_central(const train_config_t *c, strategy_fn *fn, const char **name) {
  if (c->schedule == SCHEDULE_SOFT)
    return dt_error("option --schedule soft: MPCA-SGD's rounds of a decentralized method (use "
                    "--optimization decentral --exchange master, or --preset mpca-sgd)");
  if (c->tp_conv_data && c->exchange == EXCHANGE_ALLREDUCE && c->schedule == SCHEDULE_SYNC) {
    *fn = strategy_one_weird_trick;
    *name = "one weird trick (data-parallel convolutions, split dense layers)";
    return 0;
  }
  if (pipe_requested(c) && c->exchange == EXCHANGE_ALLREDUCE && c->schedule == SCHEDULE_SYNC) {
    *fn = strategy_pipeline;
    *name = "pipeline parallelism";
    return 0;
  }
  if (c->exchange == EXCHANGE_ALLREDUCE) {
    if (c->schedule != SCHEDULE_SYNC)
      return dt_error("options --schedule %s and --exchange allreduce do not combine: allreduce "
                      "is synchronous (use --schedule sync, or --exchange ps:K for %s)",
                      schedule_name(c->schedule), schedule_name(c->schedule));
    *fn = strategy_data_parallel;
    *name = "data-parallel allreduce";
    return 0;
  }
  if (c->exchange == EXCHANGE_PS) { /* every schedule: one server implementation */
    *fn = strategy_ps_worker;
    *name = "parameter servers";
    return 0;
  }
  if (c->exchange == EXCHANGE_SHARED) {
    if (c->schedule == SCHEDULE_SYNC) {
      *fn = strategy_shared_sync;
      *name = "synchronous data parallelism (shared memory)";
      return 0;
    }
    if (c->schedule != SCHEDULE_ASYNC)
      return dt_error("options --schedule %s and --exchange shared do not combine: shared "
                      "memory is --schedule sync (one arena, sharded steps) or async (Hogwild) "
                      "(use --exchange ps:K for %s)",
                      schedule_name(c->schedule), schedule_name(c->schedule));
    *fn = strategy_hogwild;
    *name = "Hogwild (shared memory)";
    return 0;
  }
  return dt_error("option --exchange %s with --optimization central: not available (what "
                  "exists: --exchange allreduce:ring|rhd|tree|naive|hier|shm|auto, ps:K, ps:n, shared)",
                  exchange_name(c->exchange));
}

/* Decentralized: (exchange, schedule) -> method. --exchange master with
 * --schedule sync is model averaging (SparkNet) unless --alpha, --beta or
 * --rho make it elastic (EASGD). */
static int select_decentral(const train_config_t *c, strategy_fn *fn, const char **name) {
  static const struct {
    exchange_t exchange;
    schedule_t schedule;
    int elastic;      /* -1: either */
    strategy_fn fn;
    const char *name;
  } rows[] = {
      {EXCHANGE_ALLREDUCE, SCHEDULE_SYNC, -1, strategy_local_sgd, "model averaging (local SGD)"},
      {EXCHANGE_MASTER, SCHEDULE_SYNC, 0, strategy_local_sgd, "model averaging through a master (SparkNet)"},
      {EXCHANGE_MASTER, SCHEDULE_SYNC, 1, strategy_easgd, "synchronous EASGD"},
      {EXCHANGE_MASTER, SCHEDULE_ASYNC, -1, strategy_easgd, "asynchronous EASGD"},
      {EXCHANGE_NEIGHBORS, SCHEDULE_SYNC, -1, strategy_dpsgd, "D-PSGD"},
      {EXCHANGE_NEIGHBORS, SCHEDULE_ASYNC, -1, strategy_adpsgd, "AD-PSGD (asynchronous D-PSGD)"},
      {EXCHANGE_GOSSIP, SCHEDULE_ASYNC, -1, strategy_gossip, "GoSGD (gossip)"},
      {EXCHANGE_TREE, SCHEDULE_ASYNC, -1, strategy_tree_easgd, "TreeEASGD"},
      {EXCHANGE_MASTER, SCHEDULE_SOFT, -1, strategy_mpca, "MPCA-SGD"},
  };
  int elastic = c->alpha > 0 || c->beta > 0 || c->rho > 0;
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i].exchange == c->exchange && rows[i].schedule == c->schedule &&
        (rows[i].elastic < 0 || rows[i].elastic == elastic)) {
      *fn = rows[i].fn;
      *name = rows[i].name;
      return 0;
    }
  return dt_error("options --optimization decentral --schedule %s --exchange %s do not combine "
                  "(what exists with decentral: allreduce:* or master + sync = model averaging, "
                  "master + sync + --alpha/--beta/--rho = EASGD, master + async = asynchronous "
                  "EASGD, neighbors + sync = D-PSGD, neighbors + async = AD-PSGD, gossip:p + "
                  "async = GoSGD, tree:F + async = TreeEASGD, master + soft = MPCA-SGD)",
                  schedule_name(c->schedule), exchange_name(c->exchange));
}

int strategy_select(const train_config_t *c, strategy_fn *fn, const char **name) {
  return c->optimization == OPTIMIZATION_CENTRAL ? select_central(c, fn, name)
                                                 : select_decentral(c, fn, name);
}

int strategy_total_ranks(const train_config_t *c) {
  int servers = c->ps_servers > 0 ? c->ps_servers : c->workers; /* ps:n: one per worker */
  return c->workers + (c->exchange == EXCHANGE_PS ? servers : 0) +
         decentral_extra_ranks(c); /* EASGD's master */
}
