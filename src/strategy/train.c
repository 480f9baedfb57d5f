/* train_run: load the data, start the ranks on the chosen transport, run
 * the strategy on each. */
#include <stdlib.h>
#include <string.h>

#include "strategy/strategy.h"
#include "strategy/model_check.h"

typedef struct {
  train_config_t *cfg;          /* under mpi, run_rank sets the workers from the world size */
  dataset_t train, test;
  int loaded;
  dt_trace_t **kept_traces;     /* local, --trace: a failed run's traces by rank */
} run_t;

static int load_data(run_t *r) {
  if (r->loaded) return 0;
  if (dataset_load_seq(r->cfg->data, 1, r->cfg->seed, r->cfg->seq_len, &r->train) != 0) return -1;
  if (dataset_load_seq(r->cfg->data, 0, r->cfg->seed, r->cfg->seq_len, &r->test) != 0) return -1;
  if (r->train.c != r->test.c || r->train.h != r->test.h || r->train.w != r->test.w)
    return dt_error("--data %s: train and test images differ in shape", r->cfg->data);
  if (r->test.nclasses > r->train.nclasses) r->train.nclasses = r->test.nclasses;
  r->test.nclasses = r->train.nclasses;
  r->loaded = 1;
  return 0;
}

int train_config_fit_world(train_config_t *cfg, int size) {
  int given = cfg->workers, found = 0;
  for (int n = 1; n <= size && !found; n++) {
    cfg->workers = n;
    if (strategy_total_ranks(cfg) == size) found = n;
  }
  cfg->workers = given;
  int need = strategy_total_ranks(cfg);
  if (!found || (given > 1 && given != found))
    return dt_error("mpirun -np %d does not fit: with --workers %d, --exchange %s needs %d ranks "
                    "(%d workers + %d server or master ranks): run mpirun -np %d", size, given,
                    exchange_name(cfg->exchange), need, given, need - given, need);
  cfg->workers = found;
  return train_config_check_ranks(cfg); /* and the values that depend on the workers */
}

static int run_rank(comm_t *comm, void *arg) {
  run_t *r = arg;
  if (load_data(r) != 0) return -1; /* under mpi every process loads its own copy */
  if (r->cfg->comm == COMM_MPI && train_config_fit_world(r->cfg, comm_size(comm)) != 0) return -1;
  const strategy_t *strategy = strategy_select(r->cfg);
  if (!strategy) return -1;
  dt_trace_t *trace;
  if (run_trace_start(comm, r->cfg, &trace) != 0) return -1;
  int rc;
  if (strategy->run_rank) { /* workers and servers */
    rc = strategy->run_rank(comm, r->cfg, &r->train, &r->test);
  } else {
    worker_t w;
    rc = worker_init(&w, r->cfg, comm, &r->train, &r->test);
    if (rc == 0) rc = strategy->run(&w);
    worker_free(&w);
  }
  if (r->kept_traces) { /* local: written once every rank has ended */
    dt_trace = NULL;
    r->kept_traces[comm_rank(comm)] = trace;
    return rc;
  }
  if (rc == 0) return run_trace_finish(comm, r->cfg, trace);
  dt_trace = NULL; /* a failed run cannot gather: its peers may be gone */
  return trace ? run_trace_dropped(r->cfg, trace) : rc;
}

/* The emulated network and stragglers as the transport's per-rank tables. */
static int build_net(const train_config_t *cfg, comm_net_t *net, double **slowdown) {
  *net = cfg->net;
  net->latency = cfg->net_latency;
  net->bandwidth = cfg->net_bandwidth;
  *slowdown = NULL;
  if (cfg->straggler_rank >= 0) {
    /* every rank, servers too; under mpi the world size is known only after
     * MPI_Init, so the table ends at the straggler (the rest run at speed) */
    int n = cfg->comm == COMM_MPI ? cfg->straggler_rank + 1 : strategy_total_ranks(cfg);
    *slowdown = calloc((size_t)n, sizeof **slowdown);
    if (!*slowdown) return dt_error("out of memory");
    for (int i = 0; i < n; i++) (*slowdown)[i] = 1;
    (*slowdown)[cfg->straggler_rank] = cfg->straggler_slowdown;
    net->rank_slowdown = *slowdown;
    net->rank_table_len = n;
  }
  return 0;
}

/* The checks before any rank starts: the options against each other, then
 * (with the data loaded: its shape sizes the model) against the model and
 * the machine's memory. A refusal here is a usage error. */
static int check_before_ranks(train_config_t *cfg, run_t *r) {
  if (strategy_prepare(cfg) != 0 || train_config_check(cfg) != 0) return TRAIN_REFUSED;
  /* under mpi: this process's copy, before MPI starts; a text file that
   * is missing or too short to cut is the user's to fix (exit 2) */
  if (load_data(r) != 0) return data_is_text(cfg->data) ? TRAIN_REFUSED : -1;
  return train_check_model(cfg, &r->train) != 0 ? TRAIN_REFUSED : 0;
}

int train_run(train_config_t *cfg, int *argc, char ***argv) {
  run_t r = {.cfg = cfg};
  int rc = check_before_ranks(cfg, &r);
  if (rc != 0) {
    dataset_free(&r.train);
    dataset_free(&r.test);
    return rc;
  }
  kern_set_threads(cfg->threads); /* process-wide: once, before any rank starts */
  kern_set_bf16(cfg->bf16);
  comm_net_t net;
  double *slowdown = NULL;
  rc = build_net(cfg, &net, &slowdown);
  if (rc == 0 && cfg->comm == COMM_MPI) {
    rc = comm_mpi_run(argc, argv, &net, run_rank, &r);
  } else if (rc == 0) {
    int n = strategy_total_ranks(cfg);
    if (cfg->trace[0] && !(r.kept_traces = calloc((size_t)n, sizeof *r.kept_traces)))
      rc = dt_error("out of memory");
    if (rc == 0) rc = comm_local_run(n, &net, run_rank, &r);
    if (r.kept_traces && run_trace_write_kept(cfg, r.kept_traces, n, rc != 0) != 0) rc = -1;
    free(r.kept_traces);
  }
  free(slowdown);
  dataset_free(&r.train);
  dataset_free(&r.test);
  return rc;
}
