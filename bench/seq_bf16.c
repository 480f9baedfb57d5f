/* --precision bf16 on the sequence models: a training step's time in fp32
 * and in bf16 (every product of linear, attention, lmhead and lstm made in
 * bf16 by oneDNN, fp32 master weights), the two precisions' steps
 * interleaved in one run so that a shared machine's load falls on both
 * alike; wall and process CPU seconds, the fastest of STEPS, and the
 * ratio. Also the loss of the first step in each, and how many products
 * went bf16 and fp32.
 *
 * usage: seq_bf16 [MODEL [BATCH [STEPS]]]   (defaults: gpt 8 5) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dtrain/nn.h"

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "gpt";
  int batch = argc > 2 ? atoi(argv[2]) : 8, steps = argc > 3 ? atoi(argv[3]) : 5, T = 128;
  if (batch < 1 || steps < 1) {
    fprintf(stderr, "usage: seq_bf16 [MODEL [BATCH >= 1 [STEPS >= 1]]]\n");
    return 2;
  }
  if (!kern_bf16_available()) {
    fprintf(stderr, "seq_bf16: this CPU (or build) has no bf16: nothing to compare\n");
    return 1;
  }
  model_spec_t spec;
  model_t *m = NULL;
  if (model_spec_load(name, &spec) != 0 || model_build(&spec, (shape_t){1, 1, T}, 256, batch, &m) != 0) {
    fprintf(stderr, "seq_bf16: %s\n", dt_errmsg());
    return 1;
  }
  model_spec_free(&spec);
  model_init_params(m, 1);
  float *x = malloc((size_t)batch * T * sizeof *x);
  int32_t *y = malloc((size_t)batch * T * sizeof *y);
  rng_t rng;
  rng_seed(&rng, 7);
  for (int i = 0; i < batch * T; i++) x[i] = (float)(rng_next(&rng) % 256), y[i] = (int32_t)(rng_next(&rng) % 256);
  double wall[2] = {1e30, 1e30}, cpu[2] = {1e30, 1e30}, loss[2] = {0, 0};
  long b0, f0, b1, f1;
  kern_bf16_products(&b0, &f0);
  for (int s = 0; s <= steps; s++) /* step 0 of each: warm-up (oneDNN makes its primitives) */
    for (int p = 0; p < 2; p++) {
      kern_set_bf16(p);
      double t0 = dt_now(), c0 = cpu_now();
      model_forward(m, x, batch, 1, NULL);
      double l = model_loss(m, y, batch, batch, NULL) / batch;
      model_backward(m, x, batch, NULL, NULL);
      double w = dt_now() - t0, c = cpu_now() - c0;
      if (s == 0) loss[p] = l;
      if (s > 0 && w < wall[p]) wall[p] = w;
      if (s > 0 && c < cpu[p]) cpu[p] = c;
    }
  kern_set_bf16(0);
  kern_bf16_products(&b1, &f1);
  printf("model %s, batch %d x T %d, %zu parameters, %d timed steps each (interleaved)\n", name,
         batch, T, m->nparams, steps);
  printf("%-6s %10s %12s %12s %12s\n", "prec", "loss", "wall_s_min", "cpu_s_min", "tokens/s");
  for (int p = 0; p < 2; p++)
    printf("%-6s %10.6f %12.4f %12.4f %12.0f\n", p ? "bf16" : "fp32", loss[p], wall[p], cpu[p],
           batch * T / cpu[p]);
  printf("bf16 speed-up: %.2fx by CPU time, %.2fx by wall time; products under bf16: %ld bf16, "
         "%ld fp32\n", cpu[0] / cpu[1], wall[0] / wall[1], b1 - b0, f1 - f0);
  model_free(m);
  free(x);
  free(y);
  kern_bf16_release();
  return 0;
}
