/* Load-balanced synchronous steps (--balance on). A synchronous step ends
 * when the slowest rank ends, so a rank that computes slower for a while
 * (a busier core, a noisy neighbour, --straggler) holds every other rank
 * at the barrier. Here the global batch of a step is still P·b samples, in
 * the same order, but rank r computes a share of it in proportion to its
 * measured speed, as in LB-BSP (Chen et al., "Semi-dynamic load balancing",
 * SoCC 2020). The gradient is the same sum over the same samples divided
 * by the same global count, so the run still equals one worker with batch
 * P·b, to float rounding; but the split follows timings, so runs are no
 * longer bitwise repeatable.
 *
 * Every rank keeps the same speed estimates from the same inputs (each
 * step's compute seconds of every rank, exchanged by the strategy), so
 * every rank computes the same split without further agreement. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/balance.h"
#include "dtrain/core.h"
#include "dtrain/data.h"

/* Weight of the newest step in the speed estimate: a core's speed on this
 * VM shifts by 10-30% for hundreds of milliseconds at a time (tens of
 * steps), while a single step's time jitters by ~10%. One step in ten is
 * slower still, up to a whole step or more (the host runs something else
 * on that core for a while); such a spike says nothing about the next step,
 * so one step's speed counts at most BALANCE_MAX_CHANGE off the estimate. */
#define BALANCE_SMOOTHING 0.2
#define BALANCE_MAX_CHANGE 0.25

int balance_new(int nranks, int batch, int max_share, balance_t **out) {
  balance_t *b = calloc(1, sizeof *b);
  if (!b) return dt_error("out of memory");
  b->nranks = nranks;
  b->lo = batch / 8 > 1 ? batch / 8 : 1;
  b->hi = max_share;
  b->speed = calloc((size_t)nranks, sizeof *b->speed);
  b->want = calloc((size_t)nranks, sizeof *b->want);
  b->count = calloc((size_t)nranks, sizeof *b->count);
  b->epoch_samples = calloc((size_t)nranks, sizeof *b->epoch_samples);
  if (!b->speed || !b->want || !b->count || !b->epoch_samples) {
    balance_free(b);
    return dt_error("out of memory");
  }
  *out = b;
  return 0;
}

void balance_free(balance_t *b) {
  if (!b) return;
  free(b->speed);
  free(b->want);
  free(b->count);
  free(b->epoch_samples);
  free(b);
}

/* Rounds the shares down, then gives the samples left one at a time to the
 * rank furthest below its share (lowest rank on ties), within [lo, hi].
 * Returns 0 if the bounds leave no such split. */
static int split_by_speed(balance_t *b, size_t in_step) {
  int p = b->nranks, measured = 1;
  double total = 0, *want = b->want;
  for (int r = 0; r < p; r++) measured &= b->speed[r] > 0;
  for (int r = 0; r < p; r++) total += measured ? b->speed[r] : 1;
  size_t given = 0;
  for (int r = 0; r < p; r++) {
    want[r] = (double)in_step * (measured ? b->speed[r] : 1) / total;
    double c = want[r] < b->lo ? b->lo : want[r] > b->hi ? b->hi : want[r];
    b->count[r] = (int)c;
    given += (size_t)b->count[r];
  }
  while (given != in_step) {
    int up = given < in_step, pick = -1;
    double best = 0;
    for (int r = 0; r < p; r++) {
      if (up ? b->count[r] >= b->hi : b->count[r] <= b->lo) continue;
      double gap = up ? want[r] - b->count[r] : b->count[r] - want[r];
      if (pick < 0 || gap > best) pick = r, best = gap;
    }
    if (pick < 0) return 0;
    b->count[pick] += up ? 1 : -1;
    given = up ? given + 1 : given - 1;
  }
  return 1;
}

static void split_evenly(balance_t *b, size_t in_step) {
  for (int r = 0; r < b->nranks; r++) {
    size_t o, l;
    data_shard(in_step, r, b->nranks, &o, &l);
    b->count[r] = (int)l;
  }
}

void balance_split(balance_t *b, size_t in_step, int rank, size_t *off, size_t *len) {
  int p = b->nranks;
  /* a short last step, below every rank's lower bound: the even split */
  if (in_step < (size_t)p * (size_t)b->lo || !split_by_speed(b, in_step)) split_evenly(b, in_step);
  size_t o = 0;
  for (int r = 0; r < rank; r++) o += (size_t)b->count[r];
  for (int r = 0; r < p; r++) b->epoch_samples[r] += b->count[r];
  *off = o;
  *len = (size_t)b->count[rank];
}

void balance_observe(balance_t *b, const float *sec) {
  for (int r = 0; r < b->nranks; r++) {
    if (b->count[r] <= 0 || !(sec[r] > 0)) continue;
    double v = b->count[r] / (double)sec[r], s = b->speed[r];
    if (s <= 0) { /* the first measurement */
      b->speed[r] = v;
      continue;
    }
    if (v < s * (1 - BALANCE_MAX_CHANGE)) v = s * (1 - BALANCE_MAX_CHANGE);
    if (v > s * (1 + BALANCE_MAX_CHANGE)) v = s * (1 + BALANCE_MAX_CHANGE);
    b->speed[r] = s + BALANCE_SMOOTHING * (v - s);
  }
}

void balance_begin_epoch(balance_t *b) {
  memset(b->epoch_samples, 0, (size_t)b->nranks * sizeof *b->epoch_samples);
}

void balance_json(const balance_t *b, int64_t steps, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "\"batch_per_rank\":[");
  for (int r = 0; r < b->nranks && n < cap; r++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%.1f", r ? "," : "",
                          steps > 0 ? (double)b->epoch_samples[r] / (double)steps : 0.0);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

void balance_get_speeds(const balance_t *b, float *out) {
  for (int r = 0; r < b->nranks; r++) out[r] = (float)b->speed[r];
}

int balance_set_speeds(balance_t *b, const float *speeds, const char *where) {
  for (int r = 0; r < b->nranks; r++)
    if (!isfinite(speeds[r]) || speeds[r] < 0)
      return dt_error("%s: rank %d's speed is %g, not a count of samples/s", where, r,
                      (double)speeds[r]);
  for (int r = 0; r < b->nranks; r++) b->speed[r] = speeds[r];
  return 0;
}
