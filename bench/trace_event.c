/* The cost of one traced slice (--trace): dt_now() for its end plus
 * trace_slice, against the yardstick of dt_now() alone, in the same run.
 * A traced mlp step records about 20 slices (forward and backward per
 * layer, its collectives, the optimizer, the step), so the cost of a
 * traced step is about 20 times the figure printed here; untraced, each
 * site costs one test of a thread-local pointer.
 *   build/bench/trace_event [EVENTS] */
#include <stdio.h>
#include <stdlib.h>

#include "dtrain/core.h"

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 4000000;
  if (n < 1) n = 1;
  dt_trace_t *t = trace_new(0, dt_now(), 0, 1LL << 62, (size_t)n);
  if (!t) return fprintf(stderr, "trace_event: %s\n", dt_errmsg()), 1;
  double best_clock = 1e9, best_traced = 1e9, sink = 0;
  for (int round = 0; round < 5; round++) {
    double t0 = dt_now();
    for (long i = 0; i < n; i++) sink += dt_now();
    double clock = (dt_now() - t0) / (double)n;
    trace_free(t);
    t = trace_new(0, dt_now(), 0, 1LL << 62, (size_t)n);
    if (!t) return fprintf(stderr, "trace_event: %s\n", dt_errmsg()), 1;
    t0 = dt_now();
    for (long i = 0; i < n; i++) {
      double a = dt_now();
      trace_slice(t, TRACE_COMPUTE, "forward", i, a, a);
    }
    double traced = (dt_now() - t0) / (double)n;
    if (clock < best_clock) best_clock = clock;
    if (traced < best_traced) best_traced = traced;
    printf("round %d: dt_now %.1f ns, dt_now + trace_slice %.1f ns\n", round + 1, clock * 1e9, traced * 1e9);
  }
  printf("best: dt_now %.1f ns (yardstick), traced slice %.1f ns: %.2fx the clock read%s\n",
         best_clock * 1e9, best_traced * 1e9, best_traced / best_clock, sink < 0 ? "." : "");
  trace_free(t);
  return 0;
}
