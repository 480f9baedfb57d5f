/* The run's timeline (--trace FILE.json): each rank records into its own
 * trace (src/core/trace.c); at the end rank 0 gathers every rank's events
 * over the world communicator and writes one file, atomically. Under
 * local the ranks are threads of one process: their traces are written
 * after the last has ended, with no messages, so a run that fails
 * (SIGINT, divergence) still leaves its trace; under mpi a failed run's
 * ranks cannot gather, and its error says the trace is not written.
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
#define TRACE_HEAD "{\"traceEvents\":[\n"
#define TRACE_TAIL "\n],\"displayTimeUnit\":\"ms\"}\n"

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
  n += (size_t)snprintf(all, cap, TRACE_HEAD);
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
    n += (size_t)snprintf(all + n, 64, TRACE_TAIL);
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

int run_trace_dropped(const train_config_t *cfg, dt_trace_t *t) {
  if (!t) return -1;
  trace_free(t);
  char err[1024];
  snprintf(err, sizeof err, "%s", dt_errmsg());
  return dt_error("%s; --trace %s is not written (under mpi a failed run's ranks cannot gather "
                  "their events)", err, cfg->trace);
}

/* Every rank's events as they stood, in rank order: the file a gather
 * writes, ending where the run stopped if it failed. */
static int write_kept(const char *path, dt_trace_t **kept, int n) {
  size_t cap = sizeof TRACE_HEAD + sizeof TRACE_TAIL, len = 0;
  char **parts = calloc((size_t)n, sizeof *parts);
  size_t *lens = calloc((size_t)n, sizeof *lens);
  int rc = parts && lens ? 0 : dt_error("out of memory");
  for (int r = 0; rc == 0 && r < n; r++)
    if (kept[r] && (rc = trace_json(kept[r], &parts[r], &lens[r])) == 0) cap += lens[r] + 2;
  char *all = rc == 0 ? malloc(cap) : NULL;
  if (rc == 0 && !all) rc = dt_error("out of memory");
  if (rc == 0) {
    len += (size_t)snprintf(all, cap, TRACE_HEAD);
    const char *sep = "";
    for (int r = 0; r < n; r++) {
      if (!parts[r]) continue;
      len += (size_t)snprintf(all + len, cap - len, "%s", sep);
      memcpy(all + len, parts[r], lens[r]);
      len += lens[r];
      sep = ",\n";
    }
    len += (size_t)snprintf(all + len, cap - len, TRACE_TAIL);
    rc = file_write_atomic(path, all, len);
  }
  for (int r = 0; parts && r < n; r++) free(parts[r]);
  free(parts);
  free(lens);
  free(all);
  return rc;
}

int run_trace_write_kept(const train_config_t *cfg, dt_trace_t **kept, int n, int failed) {
  int any = 0;
  for (int r = 0; r < n; r++) any |= kept[r] != NULL;
  if (!any) return failed ? -1 : 0; /* no rank started its trace */
  char err[1024];
  snprintf(err, sizeof err, "%s", failed ? dt_errmsg() : "");
  int rc = write_kept(cfg->trace, kept, n);
  for (int r = 0; r < n; r++) trace_free(kept[r]), kept[r] = NULL;
  if (!failed) return rc ? dt_error_prefix("--trace %s: ", cfg->trace) : 0;
  if (rc == 0) return dt_error("%s; --trace %s holds the run until it stopped", err, cfg->trace);
  char why[512];
  snprintf(why, sizeof why, "%s", dt_errmsg());
  return dt_error("%s; --trace %s is not written: %s", err, cfg->trace, why);
}
