/* A server's update applied by several threads (--ps-server-threads T;
 * issue 36's reading of Project Adam, Chilimbi et al. 2014: updates
 * applied by several threads without locks). The shard is cut once into
 * T slices, each a list of the optimizer's segments: thread i writes only
 * slice i of the parameters and the optimizer state, so no write needs a
 * lock and the step is the one thread's step bit for bit (every optimizer
 * but LARS is element by element; LARS, whose trust ratio is per tensor,
 * is cut at whole segments). The server's thread takes slice 0; T - 1
 * helpers, started once, wait at a barrier for each update and meet at a
 * second one when their slices are written.
 *
 * The paper's lock-free threads, as far as the text we checked (and the
 * seeds) describe them, are on the model training machines: threads on
 * different images updating one weight copy, Hogwild-style, the writes
 * racing (strategy/dp/hogwild.c here). In the server, this file splits
 * one update into disjoint slices instead of applying different updates
 * at once: the same lock-free writes without the races, so async runs
 * stay what the rule makes them and ThreadSanitizer has nothing to
 * report. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

#define SLICE_ALIGN 16 /* floats: slices start on 64-byte lines */

typedef struct {
  optim_segment_t *segs;
  int nsegs;
} slice_t;

struct ps_apply {
  int T;
  slice_t *slice;            /* [T] */
  pthread_t *threads;        /* [T - 1] helpers */
  pthread_barrier_t start, done;
  int started;               /* helpers running (teardown stops them) */
  int barriers;              /* the barriers are set up */
  /* the update being applied, set by the server's thread before `start` */
  optimizer_t *opt;
  float *params;
  const float *grads;
  float lr;
  int stop;
};

typedef struct {
  ps_apply_t *a;
  int i;
} helper_arg_t;

static helper_arg_t *helper_args(ps_apply_t *a) { return (helper_arg_t *)(a->slice + a->T); }

/* Segments of [lo, hi) out of segs (element-wise optimizers). */
static int cut_range(const optim_segment_t *segs, int nsegs, size_t lo, size_t hi, optim_segment_t *out) {
  int n = 0;
  for (int s = 0; s < nsegs; s++) {
    size_t b = segs[s].off, e = b + segs[s].len;
    if (e <= lo || b >= hi) continue;
    size_t from = b > lo ? b : lo, to = e < hi ? e : hi;
    out[n++] = (optim_segment_t){from, to - from};
  }
  return n;
}

static size_t aligned_bound(size_t len, int i, int T) {
  if (i >= T) return len;
  size_t b = len * (size_t)i / (size_t)T / SLICE_ALIGN * SLICE_ALIGN;
  return b;
}

/* Slice i: its share of the keys, or under LARS the whole segments
 * whose start falls in that share. */
static void plan_slices(ps_apply_t *a, const optim_segment_t *segs, int nsegs, size_t len,
                        int whole_segments) {
  for (int i = 0; i < a->T; i++) {
    size_t lo = aligned_bound(len, i, a->T), hi = aligned_bound(len, i + 1, a->T);
    slice_t *sl = &a->slice[i];
    if (!whole_segments) {
      sl->nsegs = cut_range(segs, nsegs, lo, hi, sl->segs);
      continue;
    }
    sl->nsegs = 0;
    for (int s = 0; s < nsegs; s++)
      if (segs[s].off >= lo && (segs[s].off < hi || i == a->T - 1))
        sl->segs[sl->nsegs++] = segs[s];
  }
}

static void apply_slice(ps_apply_t *a, int i) {
  const slice_t *sl = &a->slice[i];
  optim_step_segments(a->opt, a->params, a->grads, sl->segs, sl->nsegs, a->lr);
}

static void *helper(void *arg) {
  helper_arg_t *h = arg;
  ps_apply_t *a = h->a;
  for (;;) {
    pthread_barrier_wait(&a->start);
    if (a->stop) return NULL;
    apply_slice(a, h->i);
    pthread_barrier_wait(&a->done);
  }
}

int ps_apply_new(int T, const optim_segment_t *segs, int nsegs, size_t len, int whole_segments,
                 ps_apply_t **out) {
  *out = NULL;
  if (T <= 1) return 0;
  ps_apply_t *a = calloc(1, sizeof *a);
  if (!a) return dt_error("out of memory");
  *out = a;
  a->T = T;
  /* T slices, then T helper arguments, in one block */
  a->slice = calloc((size_t)T, sizeof *a->slice + sizeof(helper_arg_t));
  a->threads = calloc((size_t)T, sizeof *a->threads);
  if (!a->slice || !a->threads) return dt_error("out of memory");
  for (int i = 0; i < T; i++)
    if (!(a->slice[i].segs = calloc((size_t)nsegs + 1, sizeof *a->slice[i].segs)))
      return dt_error("out of memory");
  plan_slices(a, segs, nsegs, len, whole_segments);
  if (pthread_barrier_init(&a->start, NULL, (unsigned)T) != 0 ||
      pthread_barrier_init(&a->done, NULL, (unsigned)T) != 0)
    return dt_error("--ps-server-threads %d: cannot set up the barriers", T);
  a->barriers = 1;
  for (int i = 1; i < T; i++) {
    helper_arg_t *h = &helper_args(a)[i];
    h->a = a, h->i = i;
    if (pthread_create(&a->threads[i - 1], NULL, helper, h) != 0) {
      a->stop = 1; /* the helpers started so far are stopped by ps_apply_free */
      a->started = i - 1;
      return dt_error("--ps-server-threads %d: cannot start thread %d", T, i);
    }
    a->started = i;
  }
  return 0;
}

void ps_apply_free(ps_apply_t *a) {
  if (!a) return;
  if (a->started == a->T - 1) { /* all running: release them at the start barrier */
    a->stop = 1;
    pthread_barrier_wait(&a->start);
    for (int i = 0; i < a->T - 1; i++) pthread_join(a->threads[i], NULL);
  } else if (a->started > 0) { /* a failed start: the barrier never fills; the run is
                                  * ending with an error, so those left waiting are let go */
    for (int i = 0; i < a->started; i++) pthread_detach(a->threads[i]);
    return;
  }
  if (a->barriers) {
    pthread_barrier_destroy(&a->start);
    pthread_barrier_destroy(&a->done);
  }
  for (int i = 0; a->slice && i < a->T; i++) free(a->slice[i].segs);
  free(a->slice);
  free(a->threads);
  free(a);
}

void ps_apply_step(ps_apply_t *a, optimizer_t *o, float *params, const float *grads, float lr) {
  optim_begin_step(o);
  a->opt = o, a->params = params, a->grads = grads, a->lr = lr;
  pthread_barrier_wait(&a->start);
  apply_slice(a, 0);
  pthread_barrier_wait(&a->done);
}
