/* A synthetic classification task: one Gaussian prototype per class plus
 * isotropic Gaussian noise. Prototype scale 0.1 against noise of about 1
 * puts the best possible (nearest-prototype) accuracy near 87% for 10
 * classes of 1x28x28 -- about as hard as Fashion-MNIST, so learning curves
 * still mean something -- and makes every pixel roughly N(0, 1), i.e.
 * already normalised. */
#include "dtrain/data.h"

#include <math.h>
#include <string.h>

#define PROTO_SCALE 0.1f
/* rng_derive streams: the prototypes are shared by both splits; the
 * samples of each split come from their own stream. */
#define STREAM_PROTOTYPES 0x70726f746fULL /* "proto" */
#define STREAM_SAMPLES 0x73616d706cULL    /* "sampl" */

static int synthetic_check(size_t n, int c, int h, int w, int nclasses) {
  if (n == 0) return dt_error("synthetic dataset: 0 samples requested");
  if (c < 1 || h < 1 || w < 1 || c > 4096 || h > 32768 || w > 32768)
    return dt_error("synthetic dataset: sample shape %dx%dx%d is out of range", c, h, w);
  if (nclasses < 2 || nclasses > 65536)
    return dt_error("synthetic dataset: %d classes is out of range (2..65536)", nclasses);
  size_t dim = (size_t)c * h * w;
  if (n > SIZE_MAX / sizeof(float) / dim)
    return dt_error("synthetic dataset: %zu samples of %zu values do not fit in memory", n, dim);
  return 0;
}

static void fill_normal(rng_t *r, float scale, size_t n, float *x) {
  rng_fill_normal(r, n, x);
  for (size_t i = 0; i < n; i++) x[i] *= scale;
}

int dataset_synthetic_split(size_t n, int c, int h, int w, int nclasses, uint64_t seed,
                            int train, dataset_t *out) {
  memset(out, 0, sizeof *out);
  DT_TRY(synthetic_check(n, c, h, w, nclasses));
  size_t dim = (size_t)c * h * w;
  float *protos = dt_alloc_floats((size_t)nclasses * dim);
  out->x = dt_alloc_floats(n * dim);
  out->y = dt_alloc(n * sizeof *out->y);
  if (!protos || !out->x || !out->y) {
    dt_free(protos);
    dataset_free(out);
    return dt_error_prefix("synthetic dataset: ");
  }
  rng_t r;
  rng_seed(&r, rng_derive(seed, STREAM_PROTOTYPES, 0));
  fill_normal(&r, PROTO_SCALE, (size_t)nclasses * dim, protos);

  /* Noise variance 1 - PROTO_SCALE^2 keeps each pixel's variance at 1. */
  const float noise = sqrtf(1.0f - PROTO_SCALE * PROTO_SCALE);
  rng_seed(&r, rng_derive(seed, STREAM_SAMPLES, train ? 0 : 1));
  for (size_t i = 0; i < n; i++) {
    int32_t y = (int32_t)(i % (size_t)nclasses); /* balanced; epochs shuffle anyway */
    const float *p = protos + (size_t)y * dim;
    float *x = out->x + i * dim;
    rng_fill_normal(&r, dim, x);
    for (size_t j = 0; j < dim; j++) x[j] = p[j] + noise * x[j];
    out->y[i] = y;
  }
  dt_free(protos);
  out->n = n;
  out->c = c;
  out->h = h;
  out->w = w;
  out->dim = dim;
  out->nclasses = nclasses;
  snprintf(out->source, sizeof out->source, "synthetic %s (seed %llu)", train ? "train" : "test",
           (unsigned long long)seed);
  return 0;
}

int dataset_synthetic(size_t n, int c, int h, int w, int nclasses, uint64_t seed,
                      dataset_t *out) {
  return dataset_synthetic_split(n, c, h, w, nclasses, seed, 1, out);
}
