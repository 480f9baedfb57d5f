/* The partitioner's measurements (PipeDream's profiling step): each
 * layer's forward + backward time on one micro-batch, measured on this
 * rank's copy of the model, so that `--partition balanced` evens out the
 * stages' real times rather than a cost model's guess. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/pipe/pipe.h"

/* Layers [i, last] as a stage: the best of `reps` timed passes after a
 * warm-up one. The layers' gradients are overwritten (the first training
 * step writes them again). */
static int time_layers(model_t *m, int i, int last, int micro, rng_t *rng, double *sec) {
  stage_t *st;
  DT_TRY(stage_new(m, i, last, 1, micro, &st));
  float *dx = dt_alloc_floats((size_t)micro * st->in_size + 1);
  int32_t *labels = calloc((size_t)micro * (size_t)m->positions, sizeof *labels);
  int rc = dx && labels ? 0 : dt_error("out of memory");
  float *x = stage_input(st, 0);
  for (size_t k = 0; rc == 0 && k < (size_t)micro * st->in_size; k++) x[k] = rng_uniform(rng) - 0.5f;
  double best = DBL_MAX;
  for (int rep = 0; rc == 0 && rep < 4; rep++) {
    double t0 = dt_now();
    rc = stage_forward(st, 0, x, micro, 1, rng, NULL);
    if (rc == 0 && st->ends_model) rc = stage_loss(st, 0, labels, micro, NULL, NULL);
    if (rc == 0 && !st->ends_model) {
      float *dy = stage_output_grad(st, 0);
      for (size_t k = 0; k < (size_t)micro * st->out_size; k++) dy[k] = 1e-3f;
    }
    if (rc == 0) rc = stage_backward(st, 0, NULL, i > 0 ? dx : NULL, 0, NULL, NULL);
    double dt = dt_now() - t0;
    if (rep > 0 && dt < best) best = dt;
  }
  *sec = best;
  dt_free(dx);
  free(labels);
  stage_free(st);
  return rc;
}

int pipe_profile_layers(model_t *m, int micro, uint64_t seed, double *sec) {
  float *keep = dt_alloc_floats(m->nbuffers + 1); /* training forwards move batch-norm statistics */
  if (!keep) return -1;
  memcpy(keep, m->buffers, m->nbuffers * sizeof(float));
  rng_t rng;
  rng_seed(&rng, rng_derive(seed, 0x9f0f, 0));
  /* Each layer on its own where a stage may start at every layer (a
   * chain); in a graph (residual adds) the layers between two valid cuts
   * are timed together, their time on the first of them, which is all
   * the partitioner reads: it cuts at valid cuts only. */
  int *cuts = malloc((size_t)m->nlayers * sizeof *cuts);
  if (!cuts) return dt_free(keep), dt_error("out of memory");
  int ncuts = model_stage_cuts(m, cuts), rc = 0;
  for (int k = 0, i = 0; rc == 0 && i < m->nlayers; k++) {
    int last = k < ncuts ? cuts[k] - 1 : m->nlayers - 1;
    rc = time_layers(m, i, last, micro, &rng, &sec[i]);
    for (int j = i + 1; j <= last; j++) sec[j] = 0;
    i = last + 1;
  }
  free(cuts);
  memcpy(m->buffers, keep, m->nbuffers * sizeof(float));
  dt_free(keep);
  nn_activation_reset_peak(); /* the metrics' peak is training's, not these timings' */
  return rc;
}
