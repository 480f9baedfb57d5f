/* The memory of error feedback (Seide et al. 2014; Karimireddy et al. 2019):
 * a biased codec's error is not lost but added to the next gradient.
 *   v += g;   send C(v);   v -= decode(C(v)).
 * With momentum correction (DGC, Lin et al. 2018) the memory accumulates
 * the velocity instead, so that the momentum of the values not sent is
 * not lost either:
 *   u = m u + g;   v += u;   send C(v);   v -= decode(C(v));
 *   and, for a sparse codec, u_i = 0 where v_i was sent (momentum factor
 *   masking), so a sent value's stale momentum does not push it again.
 *   A dense codec (1-bit) sends every value: u is kept, and what the memory
 *   holds is the quantization error of the velocity, as 1-bit Adam's
 *   compressed momentum (Tang et al. 2021).
 * The optimizer then steps without momentum (the memory carries it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/compress.h"

int ef_init(ef_memory_t *m, size_t n, float momentum_correction, int masking) {
  *m = (ef_memory_t){.momentum = momentum_correction, .masking = masking, .n = n};
  if (!(m->residual = dt_alloc_floats(n ? n : 1))) return -1;
  if (momentum_correction > 0 && !(m->velocity = dt_alloc_floats(n ? n : 1))) return -1;
  return 0;
}

void ef_free(ef_memory_t *m) {
  dt_free(m->residual);
  dt_free(m->velocity);
  *m = (ef_memory_t){0};
}

void ef_compensate(ef_memory_t *m, const float *g, size_t off, size_t len) {
  float *v = m->residual + off, *u = m->velocity ? m->velocity + off : NULL;
  if (u) {
    for (size_t i = 0; i < len; i++) {
      u[i] = m->momentum * u[i] + g[i];
      v[i] += u[i];
    }
  } else {
    for (size_t i = 0; i < len; i++) v[i] += g[i];
  }
}

void ef_update(ef_memory_t *m, const float *sent, size_t off, size_t len) {
  float *v = m->residual + off, *u = m->velocity ? m->velocity + off : NULL;
  for (size_t i = 0; i < len; i++) {
    v[i] -= sent[i];
    if (u && m->masking && sent[i] != 0) u[i] = 0;
  }
}

void ef_forget(ef_memory_t *m, size_t off, size_t len) {
  memset(m->residual + off, 0, len * sizeof *m->residual);
}

double ef_norm(const ef_memory_t *m) {
  double s = 0;
  for (size_t i = 0; m->residual && i < m->n; i++) s += (double)m->residual[i] * m->residual[i];
  return sqrt(s);
}
