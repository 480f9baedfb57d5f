/* Timeline traces in the Chrome trace-event format (Perfetto and
 * chrome://tracing open them). Each rank has one trace; every thread that
 * works for the rank (its compute thread, its communication progress
 * thread) points dt_trace at it, and any layer records into it: the cost
 * when tracing is off is one test of that thread-local pointer. Events go
 * into a fixed array claimed with an atomic counter (no allocation, no
 * lock while training); past its end they are counted as dropped.
 * --trace-steps A:B records steps A to B-1 only (trace_set_step). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/core.h"

_Thread_local dt_trace_t *dt_trace;

typedef struct {
  const char *name;             /* a string that outlives the trace */
  int track;                    /* TRACE_*: the thread id in the file */
  int async;                    /* 0: a slice, 1: an asynchronous slice (b/e pair),
                                   2: a counter sample (arg: its value at t0) */
  long long arg, step;
  double t0, t1;
} trace_event_t;

struct dt_trace {
  int rank;
  double origin;                /* dt_now() at the run's common start */
  long long from, to;           /* steps recorded: [from, to) */
  atomic_int active;
  atomic_llong step;
  trace_event_t *ev;
  size_t cap;
  atomic_size_t n, dropped;
  atomic_llong in_flight;       /* bytes in collectives started and not finished */
};

static const char *const TRACK_NAMES[] = {"", "compute", "communication", "waiting",
                                          "parameter server", "optimizer", "evaluation", "steps",
                                          "bubble"};

dt_trace_t *trace_new(int rank, double origin, long long from, long long to, size_t cap) {
  dt_trace_t *t = calloc(1, sizeof *t);
  if (t) t->ev = calloc(cap, sizeof *t->ev);
  if (!t || !t->ev) {
    if (t) free(t);
    dt_error("trace: out of memory (%zu events)", cap);
    return NULL;
  }
  t->rank = rank;
  t->origin = origin;
  t->from = from;
  t->to = to;
  t->cap = cap;
  atomic_init(&t->active, from <= 0 && 0 < to);
  return t;
}

void trace_free(dt_trace_t *t) {
  if (!t) return;
  free(t->ev);
  free(t);
}

void trace_set_step(dt_trace_t *t, long long step) {
  atomic_store(&t->step, step);
  atomic_store(&t->active, step >= t->from && step < t->to);
}

static void record(dt_trace_t *t, int track, int async, const char *name, long long arg,
                   double t0, double t1) {
  if (!atomic_load_explicit(&t->active, memory_order_relaxed)) return;
  size_t i = atomic_fetch_add(&t->n, 1);
  if (i >= t->cap) {
    atomic_fetch_add(&t->dropped, 1);
    return;
  }
  t->ev[i] = (trace_event_t){name, track, async, arg, atomic_load(&t->step), t0, t1};
}

void trace_slice(dt_trace_t *t, int track, const char *name, long long arg, double t0, double t1) {
  record(t, track, 0, name, arg, t0, t1);
}

void trace_async(dt_trace_t *t, int track, const char *name, long long arg, double t0, double t1) {
  record(t, track, 1, name, arg, t0, t1);
}

long long trace_in_flight(dt_trace_t *t, long long delta, double now) {
  long long v = atomic_fetch_add(&t->in_flight, delta) + delta;
  record(t, TRACE_COMM, 2, "bytes in flight", v, now, now);
  return v;
}

/* Microseconds since the common origin. */
static double us(const dt_trace_t *t, double sec) { return (sec - t->origin) * 1e6; }

/* This rank's events as a comma-separated list of JSON objects (no
 * brackets), for the file that holds every rank's; malloc'd. */
int trace_json(const dt_trace_t *t, char **out, size_t *len) {
  size_t n = atomic_load(&t->n);
  if (n > t->cap) n = t->cap;
  size_t cap = 512 + n * 2 * 200 + 8 * 120;
  char *buf = malloc(cap);
  if (!buf) return dt_error("trace: out of memory");
  size_t k = 0;
  k += (size_t)snprintf(buf + k, cap - k,
                        "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
                        "\"args\":{\"name\":\"rank %d\"}},\n"
                        "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
                        "\"args\":{\"sort_index\":%d}}",
                        t->rank, t->rank, t->rank, t->rank);
  for (int tr = 1; tr < TRACE_TRACKS; tr++)
    k += (size_t)snprintf(buf + k, cap - k, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,"
                          "\"tid\":%d,\"args\":{\"name\":\"%s\"}}", t->rank, tr, TRACK_NAMES[tr]);
  for (size_t i = 0; i < n && k < cap; i++) {
    const trace_event_t *e = &t->ev[i];
    const char *cat = TRACK_NAMES[e->track];
    if (e->async == 2) {
      k += (size_t)snprintf(buf + k, cap - k,
                            ",\n{\"ph\":\"C\",\"name\":\"%s\",\"pid\":%d,\"ts\":%.3f,"
                            "\"args\":{\"bytes\":%lld}}", e->name, t->rank, us(t, e->t0), e->arg);
    } else if (!e->async) {
      k += (size_t)snprintf(buf + k, cap - k,
                            ",\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,"
                            "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"rank\":%d,\"step\":%lld,\"arg\":%lld}}",
                            e->name, cat, t->rank, e->track, us(t, e->t0), (e->t1 - e->t0) * 1e6,
                            t->rank, e->step, e->arg);
    } else {
      /* an id unique in the file: rank and event index */
      long long id = (long long)t->rank << 32 | (long long)i;
      k += (size_t)snprintf(buf + k, cap - k,
                            ",\n{\"ph\":\"b\",\"name\":\"%s\",\"cat\":\"%s\",\"id\":%lld,\"pid\":%d,"
                            "\"tid\":%d,\"ts\":%.3f,\"args\":{\"rank\":%d,\"step\":%lld,\"bytes\":%lld}}"
                            ",\n{\"ph\":\"e\",\"name\":\"%s\",\"cat\":\"%s\",\"id\":%lld,\"pid\":%d,"
                            "\"tid\":%d,\"ts\":%.3f}",
                            e->name, cat, id, t->rank, e->track, us(t, e->t0), t->rank, e->step,
                            e->arg, e->name, cat, id, t->rank, e->track, us(t, e->t1));
    }
  }
  size_t dropped = atomic_load(&t->dropped);
  if (dropped && k < cap)
    k += (size_t)snprintf(buf + k, cap - k, ",\n{\"ph\":\"M\",\"name\":\"dropped_events\",\"pid\":%d,"
                          "\"tid\":0,\"args\":{\"count\":%zu}}", t->rank, dropped);
  if (k >= cap) {
    free(buf);
    return dt_error("trace: rank %d: the events do not fit the buffer (a bug)", t->rank);
  }
  *out = buf;
  *len = k;
  return 0;
}
