/* Per-epoch order, sharding and batch gathering. The order is a pure
 * function of (seed, epoch): every rank computes the same permutation
 * without talking to the others, and a run resumed at epoch E sees the
 * order it would have seen without stopping. */
#include "dtrain/data.h"

#include <string.h>

#define STREAM_EPOCH_ORDER 0x65706f6368ULL /* "epoch" */

void data_epoch_order(uint64_t seed, int64_t epoch, uint32_t *order, size_t n) {
  for (size_t i = 0; i < n; i++) order[i] = (uint32_t)i;
  rng_t r;
  rng_seed(&r, rng_derive(seed, STREAM_EPOCH_ORDER, (uint64_t)epoch));
  rng_shuffle_u32(&r, order, n);
}

/* The first n % parts shards take one sample more. */
void data_shard(size_t n, int r, int parts, size_t *off, size_t *len) {
  if (parts <= 0 || r < 0 || r >= parts) {
    *off = 0;
    *len = 0;
    return;
  }
  size_t p = (size_t)parts, i = (size_t)r, base = n / p, extra = n % p;
  *off = i * base + (i < extra ? i : extra);
  *len = base + (i < extra ? 1 : 0);
}

/* Normalising while copying: the pixels are read once either way. */
static void gather_pixels(const uint8_t *restrict px, size_t dim, float scale, float shift,
                          float *restrict x) {
  for (size_t j = 0; j < dim; j++) x[j] = (float)px[j] * scale + shift;
}

void data_gather(const dataset_t *d, const uint32_t *order, size_t count, float *x, int32_t *y) {
  const size_t dim = d->dim;
  if (d->text) {
    for (size_t i = 0; i < count; i++) text_gather(d, order[i], x ? x + i * dim : NULL, y + i * dim);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    size_t src = (size_t)order[i] * dim;
    if (!x) {
      /* labels only */
    } else if (d->pixels) gather_pixels(d->pixels + src, dim, d->scale, d->shift, x + i * dim);
    else memcpy(x + i * dim, d->x + src, dim * sizeof *x);
    y[i] = d->y[order[i]];
  }
}
