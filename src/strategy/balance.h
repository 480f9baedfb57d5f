/* Load balancing for synchronous data parallelism (balance.c). */
#ifndef DTRAIN_STRATEGY_DP_BALANCE_H
#define DTRAIN_STRATEGY_DP_BALANCE_H

#include <stddef.h>
#include <stdint.h>

/* Load-balanced synchronous steps (balance.c): each step's global batch
 * split over ranks in proportion to their measured speed. */
typedef struct balance {
  int nranks, lo, hi;           /* bounds of one rank's share of a step */
  double *speed;                /* samples/s of each rank, smoothed (0 = not yet measured) */
  double *want;                 /* scratch: each rank's exact share */
  int *count;                   /* this step's samples of each rank */
  int64_t *epoch_samples;       /* each rank's samples this epoch */
} balance_t;
/* Shares within [batch/8, max_share] (what a rank's buffers hold). */
int balance_new(int nranks, int batch, int max_share, balance_t **out);
void balance_free(balance_t *b);
/* This step's split of `in_step` samples; the slice [off, off+len) of `rank`. */
void balance_split(balance_t *b, size_t in_step, int rank, size_t *off, size_t *len);
/* Every rank's compute seconds in the step just split (the same on every rank). */
void balance_observe(balance_t *b, const float *sec);
void balance_begin_epoch(balance_t *b);
/* The epoch's split, as a JSON field for the metrics ("batch_per_rank":[...]). */
void balance_json(const balance_t *b, int64_t steps, char *buf, size_t cap);
/* The speed estimates as floats, for a checkpoint (out: nranks values), and
 * back from one: -1 (error set) unless every value is finite and >= 0. */
void balance_get_speeds(const balance_t *b, float *out);
int balance_set_speeds(balance_t *b, const float *speeds, const char *where);

#endif
