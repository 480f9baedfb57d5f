/* The cluster a step runs on: which host each rank is on, each rank's link
 * (latency, bandwidth) to the other hosts and the link within a host, each
 * rank's compute slow-down, the cores the ranks share, and what the
 * transport itself adds to every message. From a run's own options
 * (--net, --straggler, --comm), so that a plan and a run of one command
 * line see the same network: the emulator's model (comm/net.c, local.c). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "perf/perf.h"

static double rank_value(const double *per_rank, int len, double global, int r) {
  return per_rank && r < len ? per_rank[r] : global;
}

int perf_cluster_from_config(const train_config_t *cfg, int nranks, const perf_profile_t *prof,
                             perf_cluster_t *out) {
  *out = (perf_cluster_t){.nranks = nranks};
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  /* under mpi every rank is a process of its own; they still share the cores */
  out->cores = cores > 0 ? (int)cores : 1;
  out->host = calloc((size_t)nranks, sizeof *out->host);
  out->latency = calloc((size_t)nranks, sizeof *out->latency);
  out->bandwidth = calloc((size_t)nranks, sizeof *out->bandwidth);
  out->slowdown = calloc((size_t)nranks, sizeof *out->slowdown);
  if (!out->host || !out->latency || !out->bandwidth || !out->slowdown) {
    perf_cluster_free(out);
    return dt_error("out of memory");
  }
  const comm_net_t *net = &cfg->net;
  int emulated = cfg->comm == COMM_LOCAL;
  if (emulated && comm_net_hosts(net, nranks, out->host) != 0) {
    perf_cluster_free(out);
    return -1;
  }
  int len = net->rank_table_len > 0 ? net->rank_table_len : nranks;
  for (int r = 0; r < nranks; r++) {
    out->latency[r] = emulated ? rank_value(net->rank_latency, len, cfg->net_latency, r) : 0;
    out->bandwidth[r] = emulated ? rank_value(net->rank_bandwidth, len, cfg->net_bandwidth, r) : 0;
    out->slowdown[r] = r == cfg->straggler_rank ? cfg->straggler_slowdown : 1;
  }
  out->multihost = emulated && net->hosts > 1;
  out->shared_link = out->multihost && net->shared_link;
  out->intra_latency = out->multihost ? net->intra_latency : 0;
  out->intra_bandwidth = out->multihost ? net->intra_bandwidth : 0;
  out->background = prof->load_given ? prof->load : perf_background_load(out->cores);
  int over = nranks > out->cores;
  /* mpi's waits spin in its progress loop (yielding, oversubscribed), local's sleep */
  out->polling = cfg->comm == COMM_MPI;
  if (cfg->comm == COMM_MPI && over && !prof->mpi_measured)
    perf_cluster_own(out, &prof->mpi_oversubscribed, NULL, 0);
  else if (cfg->comm == COMM_MPI) perf_cluster_own(out, &prof->mpi, prof->mpi_op, prof->mpi_ops);
  else perf_cluster_own(out, &prof->local, prof->local_op, prof->local_ops);
  /* local's waits sleep: a collective crowds the cores only when the
   * threads at work then outnumber them (simulate.c decides, as it runs) */
  if (cfg->comm == COMM_LOCAL && over) out->crowd = prof->local_oversubscribed;
  /* shared sync's exchange across cores, as calibrated with a core a rank */
  out->shm_sec = cfg->comm == COMM_LOCAL && !over ? prof->shm_sec : 0;
  out->trace_sec = cfg->trace[0] ? prof->trace_slice_sec : 0;
  out->cache_ranks = nranks; /* emulated hosts or mpi's processes: all on this machine */
  return 0;
}

void perf_cluster_own(perf_cluster_t *c, const perf_link_t *any, const perf_link_t *op,
                      unsigned measured) {
  c->own = *any;
  for (int i = 0; i < PERF_NOPS; i++) c->op[i] = op && measured & 1u << i ? op[i] : *any;
}

void perf_cluster_free(perf_cluster_t *c) {
  free(c->host), free(c->latency), free(c->bandwidth), free(c->slowdown);
  *c = (perf_cluster_t){0};
}

double perf_background_load(int cores) {
  FILE *f = fopen("/proc/loadavg", "r");
  double load = 0;
  if (!f) return 0;
  if (fscanf(f, "%lf", &load) != 1) load = 0;
  fclose(f);
  load -= 1; /* this process, measuring its layers */
  if (load < 0) load = 0;
  return load > 64.0 * cores ? 64.0 * cores : load;
}
