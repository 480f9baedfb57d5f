/* train_run: load the data, start the ranks on the chosen transport, run
 * the strategy on each. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/dist.h"

typedef struct {
  const train_config_t *cfg;
  dataset_t train, test;
  int loaded;
} run_t;

static int load_data(run_t *r) {
  if (r->loaded) return 0;
  if (dataset_load(r->cfg->data, 1, r->cfg->seed, &r->train) != 0) return -1;
  if (dataset_load(r->cfg->data, 0, r->cfg->seed, &r->test) != 0) return -1;
  if (r->train.c != r->test.c || r->train.h != r->test.h || r->train.w != r->test.w)
    return dt_error("--data %s: train and test images differ in shape", r->cfg->data);
  if (r->test.nclasses > r->train.nclasses) r->train.nclasses = r->test.nclasses;
  r->test.nclasses = r->train.nclasses;
  r->loaded = 1;
  return 0;
}

static int run_rank(comm_t *comm, void *arg) {
  run_t *r = arg;
  kern_set_threads(r->cfg->threads);
  if (load_data(r) != 0) return -1; /* under mpi every process loads its own copy */
  strategy_fn strategy;
  const char *name;
  if (strategy_select(r->cfg, &strategy, &name) != 0) return -1;
  worker_t w;
  int rc = worker_init(&w, r->cfg, comm, &r->train, &r->test);
  if (rc == 0) rc = strategy(&w);
  worker_free(&w);
  return rc;
}

/* The emulated network and stragglers as the transport's per-rank tables. */
static int build_net(const train_config_t *cfg, comm_net_t *net, double **slowdown) {
  *net = cfg->net;
  net->latency = cfg->net_latency;
  net->bandwidth = cfg->net_bandwidth;
  *slowdown = NULL;
  if (cfg->straggler_rank >= 0) {
    *slowdown = calloc((size_t)cfg->workers, sizeof **slowdown);
    if (!*slowdown) return dt_error("out of memory");
    for (int i = 0; i < cfg->workers; i++) (*slowdown)[i] = 1;
    (*slowdown)[cfg->straggler_rank] = cfg->straggler_slowdown;
    net->rank_slowdown = *slowdown;
  }
  return 0;
}

int train_run(train_config_t *cfg, int *argc, char ***argv) {
  if (train_config_check(cfg) != 0) return -1;
  run_t r = {.cfg = cfg};
  comm_net_t net;
  double *slowdown;
  if (build_net(cfg, &net, &slowdown) != 0) return -1;
  int rc;
  if (cfg->comm == COMM_MPI) {
    rc = comm_mpi_run(argc, argv, &net, run_rank, &r);
  } else {
    rc = load_data(&r);
    if (rc == 0) rc = comm_local_run(strategy_total_ranks(cfg), &net, run_rank, &r);
  }
  free(slowdown);
  dataset_free(&r.train);
  dataset_free(&r.test);
  return rc;
}
