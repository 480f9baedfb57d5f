/* The run's timeline (--trace FILE.json): each rank records into its own
 * trace (src/core/trace.c); at the end rank 0 gathers every rank's events
 * over the world communicator and writes one file, atomically.
 *
 * One clock: the ranks pass a barrier together at the start, and each
 * takes the moment it leaves as its time 0. Under local every rank reads
 * the same monotonic clock anyway; under mpi each process reads its own,
 * and the barrier aligns them to within the barrier's last message (tens
 * of microseconds on one machine). Events keep each rank's order. */
#include <stdlib.h>
#include <string.h>

#include "strategy/worker.h"

#define TRACE_TAG 0x7ace0           /* below the collectives' tags, above the others' */
#define TRACE_EVENTS (1 << 18)      /* per rank (12 MiB); more are counted as dropped */

int run_trace_start(comm_t *world, const train_config_t *cfg, dt_trace_t **out) {
  *out = NULL;
  if (!cfg->trace[0]) return 0;
  if (comm_barrier(world) != 0) return dt_error_prefix("--trace: the starting barrier: ");
  *out = trace_new(comm_rank(world), dt_now(), cfg->trace_from, cfg->trace_to, TRACE_EVENTS);
  if (!*out) return -1;
  dt_trace = *out;
  return 0;
}

/* Rank 0: its own events, then each other rank's in rank order. */
static int gather_write(comm_t *world, const char *path, char *mine, size_t len) {
  int P = comm_size(world);
  size_t cap = len + 64, n = 0;
  char *all = malloc(cap);
  if (!all) return dt_error("--trace: out of memory");
  n += (size_t)snprintf(all, cap, "{\"traceEvents\":[\n");
  memcpy(all + n, mine, len);
  n += len;
  int rc = 0;
  for (int r = 1; r < P && rc == 0; r++) {
    uint64_t rlen;
    rc = comm_recv(world, r, TRACE_TAG, &rlen, sizeof rlen);
    char *grown = rc == 0 ? realloc(all, n + rlen + 64) : NULL;
    if (rc == 0 && !grown) rc = dt_error("--trace: out of memory (%llu bytes from rank %d)", (unsigned long long)rlen, r);
    if (rc != 0) break;
    all = grown;
    all[n++] = ',';
    all[n++] = '\n';
    rc = comm_recv(world, r, TRACE_TAG + 1, all + n, rlen);
    n += rlen;
  }
  if (rc == 0) {
    n += (size_t)snprintf(all + n, 64, "\n],\"displayTimeUnit\":\"ms\"}\n");
    rc = file_write_atomic(path, all, n);
  }
  free(all);
  return rc ? dt_error_prefix("--trace %s: ", path) : 0;
}

int run_trace_finish(comm_t *world, const train_config_t *cfg, dt_trace_t *t) {
  if (!t) return 0;
  dt_trace = NULL;
  char *mine;
  size_t len;
  int rc = trace_json(t, &mine, &len);
  trace_free(t);
  if (rc != 0) return -1;
  if (comm_rank(world) == 0) {
    rc = gather_write(world, cfg->trace, mine, len);
  } else {
    uint64_t n = len;
    rc = comm_send(world, 0, TRACE_TAG, &n, sizeof n);
    if (rc == 0) rc = comm_send(world, 0, TRACE_TAG + 1, mine, len);
  }
  free(mine);
  return rc;
}
