/* allreduce: names, parsing and dispatch to one algorithm per file. */
#include <string.h>

#include "coll_internal.h"

static const char *const names[ALLREDUCE_COUNT] = {"auto", "ring", "rhd", "tree", "naive", "hier", "shm"};

const char *allreduce_algo_name(allreduce_algo_t a) {
  return (unsigned)a < ALLREDUCE_COUNT ? names[a] : "unknown";
}

int allreduce_algo_parse(const char *name, allreduce_algo_t *out) {
  for (int i = 0; i < ALLREDUCE_COUNT; i++)
    if (name && !strcmp(name, names[i])) {
      *out = (allreduce_algo_t)i;
      return 0;
    }
  return dt_error("unknown allreduce algorithm '%s' (choices: auto, ring, rhd, tree, naive, hier, shm)",
                  name ? name : "");
}

static int run_algo(coll_ctx_t *ctx, allreduce_algo_t algo, float *buf, size_t count);

/* Traced as one asynchronous slice on the communication track: it may run
 * on the progress thread beside the rank's compute. */
int allreduce(coll_ctx_t *ctx, allreduce_algo_t algo, float *buf, size_t count) {
  long long bytes = (long long)(count * sizeof *buf);
  double t0 = dt_trace ? dt_now() : 0;
  if (dt_trace) trace_in_flight(dt_trace, bytes, t0);
  comm_stall_enter(coll_ctx_comm(ctx), "allreduce", count * sizeof *buf);
  int rc = run_algo(ctx, algo, buf, count);
  if (dt_trace) {
    double t1 = dt_now();
    trace_async(dt_trace, TRACE_COMM, "allreduce", bytes, t0, t1);
    trace_in_flight(dt_trace, -bytes, t1);
  }
  return rc;
}

static int run_algo(coll_ctx_t *ctx, allreduce_algo_t algo, float *buf, size_t count) {
  if (algo == ALLREDUCE_AUTO) algo = allreduce_choose(ctx, count);
  switch (algo) {
  case ALLREDUCE_RING: return allreduce_ring(ctx, buf, count);
  case ALLREDUCE_RHD: return allreduce_rhd(ctx, buf, count);
  case ALLREDUCE_TREE: return allreduce_tree(ctx, buf, count);
  case ALLREDUCE_NAIVE: return allreduce_naive(ctx, buf, count);
  case ALLREDUCE_HIER: return allreduce_hier(ctx, buf, count);
  case ALLREDUCE_SHM: return allreduce_shm(ctx, buf, count);
  default: return dt_error("allreduce: algorithm %d does not exist", (int)algo);
  }
}
