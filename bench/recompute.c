/* --recompute on a transformer: the activation memory a training step
 * holds and the step's time with none, blocks and full, measured in one
 * run (the modes' steps interleaved, so shared load falls on all alike),
 * and a check that every mode gives the same bits (loss and gradients).
 *
 * The memory is the model's activation arena (out, dout, scratch of every
 * layer it keeps, the recompute workspace, the loss's probabilities): what
 * the process allocates and a step writes, the figure a run's metrics
 * report as activation_peak_bytes.
 *
 * usage: recompute [MODEL [BATCH [STEPS]]]   (defaults: gpt-deep 8 5) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/nn.h"

enum { MODES = 3 };

static int build(const char *name, int mode, int T, int batch, model_t **m) {
  model_spec_t spec;
  DT_TRY(model_spec_load(name, &spec));
  spec.recompute = mode;
  int rc = model_build(&spec, (shape_t){1, 1, T}, 256, batch, m);
  model_spec_free(&spec);
  if (rc == 0) model_init_params(*m, 1);
  return rc;
}

/* Process CPU seconds: under a shared machine's load the wall clock
 * counts other processes' turns; the CPU time is this step's work. */
static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One training step's wall and CPU seconds. */
static void step(model_t *m, const float *x, const int32_t *y, int batch, double *wall, double *cpu) {
  double t0 = dt_now(), c0 = cpu_now();
  model_forward(m, x, batch, 1, NULL);
  model_loss(m, y, batch, batch, NULL);
  model_backward(m, x, batch, NULL, NULL);
  *wall = dt_now() - t0, *cpu = cpu_now() - c0;
}

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "gpt-deep";
  int batch = argc > 2 ? atoi(argv[2]) : 8, steps = argc > 3 ? atoi(argv[3]) : 5, T = 128;
  if (batch < 1 || steps < 1) {
    fprintf(stderr, "usage: recompute [MODEL [BATCH >= 1 [STEPS >= 1]]]\n");
    return 2;
  }
  model_t *m[MODES] = {0};
  for (int k = 0; k < MODES; k++)
    if (build(name, k, T, batch, &m[k]) != 0) {
      fprintf(stderr, "recompute: %s\n", dt_errmsg());
      return 1;
    }
  float *x = malloc((size_t)batch * T * sizeof *x);
  int32_t *y = malloc((size_t)batch * T * sizeof *y);
  rng_t rng;
  rng_seed(&rng, 7);
  for (int i = 0; i < batch * T; i++) x[i] = (float)(rng_next(&rng) % 256), y[i] = (int32_t)(rng_next(&rng) % 256);
  double best[MODES], cbest[MODES], w, c;
  for (int k = 0; k < MODES; k++) step(m[k], x, y, batch, &w, &c), best[k] = cbest[k] = 1e30; /* warm-up */
  for (int s = 0; s < steps; s++)
    for (int k = 0; k < MODES; k++) {
      step(m[k], x, y, batch, &w, &c);
      if (w < best[k]) best[k] = w;
      if (c < cbest[k]) cbest[k] = c;
    }
  int same = 1;
  for (int k = 1; k < MODES; k++)
    same &= !memcmp(m[k]->grads, m[0]->grads, m[0]->nparams * sizeof(float)) &&
            !memcmp(m[k]->probs, m[0]->probs, (size_t)batch * T * 256 * sizeof(float));
  printf("model %s, batch %d x T %d, %zu parameters, %d timed steps each (interleaved)\n", name,
         batch, T, m[0]->nparams, steps);
  printf("%-8s %14s %10s %12s %10s %12s %10s\n", "mode", "act_bytes", "mem_cut", "wall_s_min",
         "wall_x", "cpu_s_min", "cpu_x");
  for (int k = 0; k < MODES; k++)
    printf("%-8s %14zu %9.2fx %12.4f %9.3fx %12.4f %9.3fx\n", recompute_name(k), m[k]->act_bytes,
           (double)m[0]->act_bytes / (double)m[k]->act_bytes, best[k], best[k] / best[0], cbest[k],
           cbest[k] / cbest[0]);
  printf("same bits (loss probabilities and gradients) in every mode: %s\n", same ? "yes" : "NO");
  for (int k = 0; k < MODES; k++) model_free(m[k]);
  free(x);
  free(y);
  return same ? 0 : 1;
}
