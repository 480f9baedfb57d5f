/* What compute costs on this machine, measured at the sizes a step runs
 * (the per-layer way of the issue: each layer's forward and backward at
 * the batch and micro-batch sizes the plan needs, rather than a FLOP
 * count). A layer is timed as a one-layer stage (nn/stage.c), the loop a
 * pipeline and the whole model run, so the loss is in the last layer's
 * forward as it is in a step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compress/compressor.h"
#include "dtrain/compress.h"
#include "perf/perf.h"

/* Timed runs after one warm-up; the least is kept: the work's own cost,
 * with no other thread's time in it. What other processes take of the
 * cores is the simulator's part (cluster.c's background load), so it is
 * not counted twice. */
#define REPS 5

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double least(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[0];
}

static void fill(float *x, size_t n, rng_t *rng) {
  for (size_t k = 0; k < n; k++) x[k] = rng_uniform(rng) - 0.5f;
}

/* Reads buf end to end: what the caches held is gone (the eviction buffer
 * is twice the last-level cache). */
static void evict(const float *buf, size_t n) {
  volatile float sink = 0;
  float acc = 0;
  for (size_t k = 0; k < n; k += 16) acc += buf[k];
  sink = acc;
  (void)sink;
}

/* Layer i on n samples: forward (its loss where it ends the model), then
 * backward from a small output gradient; the least of each. cold (an
 * eviction buffer of nevict floats): each pass starts with the caches
 * emptied and the backward adds to the gradients, as a pass runs whose
 * layer the rank's other work has pushed out of the cache (a pipeline
 * stage's micro-batches after the first): the weights (and the gradients)
 * come from memory, which at a few samples a pass costs more than the
 * products (a 1536 x 1536 layer on 4 samples: 9.4 MB streamed for 19
 * MFLOP). */
static int time_layer(model_t *m, int i, int n, rng_t *rng, const float *evict_buf, size_t nevict,
                      double *fwd, double *bwd) {
  stage_t *st;
  DT_TRY(stage_new(m, i, i, 1, n, &st));
  float *dx = dt_alloc_floats((size_t)n * st->in_size + 1);
  int32_t *labels = calloc((size_t)n, sizeof *labels);
  int rc = dx && labels ? 0 : dt_error("out of memory");
  if (rc == 0) fill(stage_input(st, 0), (size_t)n * st->in_size, rng);
  double f[REPS], b[REPS];
  for (int rep = 0; rc == 0 && rep <= REPS; rep++) {
    if (evict_buf) evict(evict_buf, nevict);
    double t0 = dt_now();
    rc = stage_forward(st, 0, stage_input(st, 0), n, 1, rng, NULL);
    if (rc == 0 && st->ends_model) rc = stage_loss(st, 0, labels, n, NULL, NULL);
    double t1 = dt_now();
    if (rc == 0 && !st->ends_model) {
      float *dy = stage_output_grad(st, 0);
      for (size_t k = 0; k < (size_t)n * st->out_size; k++) dy[k] = 1e-3f;
    }
    if (evict_buf) evict(evict_buf, nevict);
    double t2 = dt_now();
    if (rc == 0) rc = stage_backward(st, 0, NULL, i > 0 ? dx : NULL, evict_buf != NULL, NULL, NULL);
    double t3 = dt_now();
    if (rep > 0) f[rep - 1] = t1 - t0, b[rep - 1] = t3 - t2;
  }
  if (rc == 0) *fwd = least(f, REPS), *bwd = least(b, REPS);
  dt_free(dx);
  free(labels);
  stage_free(st);
  return rc;
}

/* A size in sysfs's form ("32768K", "1M") in bytes; 0 if unreadable. */
static size_t sysfs_size(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  unsigned long long v = 0;
  char unit = 0;
  int got = fscanf(f, "%llu%c", &v, &unit);
  fclose(f);
  if (got < 1) return 0;
  return (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1048576u : 1u);
}

size_t perf_cache_bytes(void) {
  size_t best = 0;
  for (int k = 0; k < 8; k++) { /* the last level the kernel lists for cpu0 */
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", k);
    size_t v = sysfs_size(path);
    if (v > best) best = v;
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (best == 0) { /* glibc's from cpuid (a VM may report it oddly: sysfs first) */
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v > 0) best = (size_t)v;
  }
#endif
  if (best == 0) best = (size_t)8 << 20;
  return best < ((size_t)64 << 20) ? best : (size_t)64 << 20;
}

/* Every layer its own stage: a chain (no residual add, no tied head). */
static int layer_by_layer(const model_t *m) {
  int *cuts = malloc(((size_t)m->nlayers + 1) * sizeof *cuts);
  int n = cuts ? model_stage_cuts(m, cuts) : -1;
  free(cuts);
  return n == m->nlayers - 1;
}

/* A graph model (a transformer: residual adds, a tied head) has layers
 * no stage can hold alone: the whole model is timed on n samples (at most
 * its batch, scaled linearly past it) and the time shared among its layers
 * by each one's weights or outputs, whichever is more (stage.c's measure
 * of a layer's work). fwd and bwd: the model's nlayers cells of this size. */
static int time_whole(model_t *m, int n, rng_t *rng, double *fwd, double *bwd) {
  int k = n < m->max_batch ? n : m->max_batch;
  size_t in = shape_size(m->input), per = m->positions > 0 ? (size_t)m->positions : 1;
  float *x = dt_alloc_floats((size_t)k * in + 1);
  int32_t *labels = calloc((size_t)k * per + 1, sizeof *labels);
  int rc = x && labels ? 0 : dt_error("out of memory");
  for (size_t q = 0; rc == 0 && q < (size_t)k * in; q++) x[q] = (float)(rng_next(rng) % 7); /* valid token ids too */
  double f[REPS], b[REPS];
  for (int rep = 0; rc == 0 && rep <= REPS; rep++) {
    double t0 = dt_now();
    model_forward(m, x, k, 1, rng);
    model_loss(m, labels, k, k, NULL);
    double t1 = dt_now();
    model_backward(m, x, k, NULL, NULL);
    double t2 = dt_now();
    if (rep > 0) f[rep - 1] = t1 - t0, b[rep - 1] = t2 - t1;
  }
  double work = 0, scale = (double)n / (double)k;
  for (int i = 0; i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    double w = (double)shape_size(l->out_shape);
    work += (double)l->param_len > w ? (double)l->param_len : w;
  }
  for (int i = 0; rc == 0 && i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    double w = (double)shape_size(l->out_shape);
    double share = ((double)l->param_len > w ? (double)l->param_len : w) / (work > 0 ? work : 1);
    fwd[i] = least(f, REPS) * scale * share, bwd[i] = least(b, REPS) * scale * share;
  }
  dt_free(x);
  free(labels);
  return rc;
}

/* Seconds per element of an update over n parameters, of summing two
 * arrays of n floats into a third, and of copying n floats. */
static int time_memory_ops(const optim_config_t *oc, size_t n, perf_compute_t *p) {
  float *a = dt_alloc_floats(n), *b = dt_alloc_floats(n), *c = dt_alloc_floats(n);
  optimizer_t *o = NULL;
  int rc = a && b && c ? optim_new(oc, n, &o) : dt_error("out of memory");
  double u[REPS], s[REPS], k[REPS];
  if (rc == 0) {
    kern_zero(n, a), kern_zero(n, b), kern_zero(n, c);
    optim_segment_t seg = {0, n};
    for (int rep = 0; rep <= REPS; rep++) {
      const float *x[2] = {a, b};
      double t0 = dt_now();
      optim_step(o, a, b, &seg, 1, 1e-6f);
      double t1 = dt_now();
      kern_sum(n, 2, x, c);
      double t2 = dt_now();
      kern_copy(n, c, b);
      double t3 = dt_now();
      if (rep > 0) u[rep - 1] = t1 - t0, s[rep - 1] = t2 - t1, k[rep - 1] = t3 - t2;
    }
    p->update_sec = least(u, REPS) / (double)n;
    p->sum_sec = least(s, REPS) / (double)n;
    p->copy_sec = least(k, REPS) / (double)n;
    p->state_floats = o->nstate;
  }
  if (o) optim_free(o);
  dt_free(a), dt_free(b), dt_free(c);
  return rc;
}

int perf_compute_measure(model_t *m, const optim_config_t *oc, const int *sizes, int nsizes,
                         perf_compute_t *out) {
  *out = (perf_compute_t){.nlayers = m->nlayers};
  if (nsizes < 1 || nsizes > PERF_MAX_SIZES)
    return dt_error("perf: %d sample sizes to measure (1 to %d)", nsizes, PERF_MAX_SIZES);
  for (int k = 0; k < nsizes; k++) { /* ascending, each once */
    int v = sizes[k], j = out->nsizes;
    for (int q = 0; q < out->nsizes; q++)
      if (out->size[q] == v) j = -1;
    if (j < 0 || v < 1) continue;
    while (j > 0 && out->size[j - 1] > v) out->size[j] = out->size[j - 1], j--;
    out->size[j] = v;
    out->nsizes++;
  }
  size_t cells = (size_t)out->nsizes * (size_t)m->nlayers;
  out->fwd = calloc(cells + 1, sizeof *out->fwd);
  out->bwd = calloc(cells + 1, sizeof *out->bwd);
  out->params = calloc((size_t)m->nlayers + 1, sizeof *out->params);
  float *keep = dt_alloc_floats(m->nbuffers + 1); /* training forwards move batch-norm statistics */
  int rc = out->fwd && out->bwd && out->params && keep ? 0 : dt_error("out of memory");
  for (int i = 0; rc == 0 && i < m->nlayers; i++) out->params[i] = m->layers[i].param_len;
  if (rc == 0) memcpy(keep, m->buffers, m->nbuffers * sizeof(float));
  rng_t rng;
  rng_seed(&rng, 0x9e1f);
  int graph = !layer_by_layer(m);
  /* a chain's passes from memory too (a graph's layers are timed as one
   * model, its products large: the cache does not change them much) */
  out->cache_bytes = perf_cache_bytes();
  size_t nevict = graph ? 0 : out->cache_bytes / 2; /* floats: twice the cache's bytes */
  float *evict_buf = nevict ? dt_alloc_floats(nevict) : NULL;
  if (rc == 0 && evict_buf) {
    out->fwd_cold = calloc(cells + 1, sizeof *out->fwd_cold);
    out->bwd_cold = calloc(cells + 1, sizeof *out->bwd_cold);
    if (!out->fwd_cold || !out->bwd_cold) rc = dt_error("out of memory");
  }
  for (int s = 0; rc == 0 && s < out->nsizes; s++)
    for (int i = 0; rc == 0 && i < m->nlayers; i++) {
      size_t at = (size_t)s * (size_t)m->nlayers + (size_t)i;
      if (graph) {
        rc = i == 0 ? time_whole(m, out->size[s], &rng, out->fwd + at, out->bwd + at) : 0;
        continue;
      }
      rc = time_layer(m, i, out->size[s], &rng, NULL, 0, &out->fwd[at], &out->bwd[at]);
      if (rc == 0 && evict_buf)
        rc = time_layer(m, i, out->size[s], &rng, evict_buf, nevict, &out->fwd_cold[at], &out->bwd_cold[at]);
    }
  if (rc == 0) memcpy(m->buffers, keep, m->nbuffers * sizeof(float));
  dt_free(keep);
  dt_free(evict_buf);
  if (rc == 0) rc = time_memory_ops(oc, m->nparams > 4096 ? m->nparams : 4096, out);
  if (rc != 0) perf_compute_free(out);
  return rc;
}

void perf_compute_free(perf_compute_t *p) {
  free(p->fwd), free(p->bwd), free(p->fwd_cold), free(p->bwd_cold), free(p->params);
  p->fwd = p->bwd = p->fwd_cold = p->bwd_cold = NULL;
  p->params = NULL;
}

double perf_layer_sec(const perf_compute_t *p, int i, int samples, int backward) {
  return perf_layer_sec_at(p, i, samples, backward, 0);
}

double perf_layer_sec_at(const perf_compute_t *p, int i, int samples, int backward, int cold) {
  if (i < 0 || i >= p->nlayers || p->nsizes == 0) return 0;
  const double *t = backward ? p->bwd : p->fwd;
  if (cold && p->fwd_cold) t = backward ? p->bwd_cold : p->fwd_cold;
  int hi = 0;
  while (hi < p->nsizes && p->size[hi] < samples) hi++;
  if (hi < p->nsizes && p->size[hi] == samples) return t[(size_t)hi * p->nlayers + i];
  if (hi == 0 || hi == p->nsizes) { /* past an end: in proportion to the nearest */
    int k = hi == 0 ? 0 : p->nsizes - 1;
    return t[(size_t)k * p->nlayers + i] * samples / p->size[k];
  }
  double a = t[(size_t)(hi - 1) * p->nlayers + i], b = t[(size_t)hi * p->nlayers + i];
  double x = (double)(samples - p->size[hi - 1]) / (p->size[hi] - p->size[hi - 1]);
  return a + x * (b - a);
}

/* PowerSGD's work on each matrix the codec approximates, as
 * powersgd_allreduce runs it: P = M Q, P's columns orthogonalized,
 * Q = M^T P, M = P Q^T; seconds per value of the n (the least of REPS). */
static int time_factors(const codec_spec_t *spec, const compress_matrix_t *mats, int nmats,
                        size_t n, double *out) {
  size_t most = 1;
  for (int i = 0; i < nmats; i++)
    if (powersgd_rank(spec, &mats[i]) && mats[i].rows * mats[i].cols > most) most = mats[i].rows * mats[i].cols;
  int r = (int)spec->param > 0 ? (int)spec->param : 1;
  float *m = dt_alloc_floats(most), *mt = dt_alloc_floats(most);
  float *pf = dt_alloc_floats(most * (size_t)r / 2 + (size_t)r * 4096 + 1);
  float *qf = dt_alloc_floats(most * (size_t)r / 2 + (size_t)r * 4096 + 1);
  int rc = m && mt && pf && qf ? 0 : dt_error("out of memory");
  rng_t rng;
  rng_seed(&rng, 0x9517);
  if (rc == 0) fill(m, most, &rng), fill(qf, most * (size_t)r / 2 + (size_t)r * 4096, &rng);
  double t[REPS];
  for (int rep = 0; rc == 0 && rep <= REPS; rep++) {
    double t0 = dt_now();
    for (int i = 0; i < nmats; i++) {
      int k = powersgd_rank(spec, &mats[i]), rows = (int)mats[i].rows, cols = (int)mats[i].cols;
      if (!k) continue;
      kern_gemm(0, 0, rows, k, cols, 1, m, cols, qf, k, 0, pf, k);
      powersgd_orthonormalize(pf, mats[i].rows, k);
      kern_gemm(1, 0, cols, k, rows, 1, m, cols, pf, k, 0, qf, k);
      kern_gemm(0, 1, rows, cols, k, 1, pf, k, qf, k, 0, mt, cols);
    }
    if (rep > 0) t[rep - 1] = dt_now() - t0;
  }
  if (rc == 0) *out = least(t, REPS) / (double)n;
  dt_free(m), dt_free(mt), dt_free(pf), dt_free(qf);
  return rc;
}

int perf_codec_measure(const codec_spec_t *spec, int feedback, size_t n,
                       const compress_matrix_t *mats, int nmats, perf_compute_t *p) {
  p->codec_family = PERF_CODEC_NONE;
  p->encode_sec = p->decode_sec = p->feedback_sec = p->factor_sec = 0;
  if (spec->kind == CODEC_NONE || spec->kind == CODEC_FP32 || n == 0) return 0;
  float *g = dt_alloc_floats(n), *acc = dt_alloc_floats(n), *scratch = dt_alloc_floats(n);
  void *msg = dt_alloc(codec_max_bytes(spec, n) + 64);
  ef_memory_t ef = {0};
  int rc = g && acc && scratch && msg ? 0 : dt_error("out of memory");
  if (rc == 0 && feedback) rc = ef_init(&ef, n, 0, 0);
  rng_t rng;
  rng_seed(&rng, 0x5eed);
  if (rc == 0) fill(g, n, &rng);
  int factors = spec->kind == CODEC_POWERSGD;
  double te[REPS], td[REPS], tf[REPS];
  for (int rep = 0; rc == 0 && rep <= REPS; rep++) {
    kern_zero(n, acc);
    double t0 = dt_now();
    if (feedback) ef_compensate(&ef, g, 0, n);
    double t1 = dt_now(), t2 = t1, t3 = t1;
    if (!factors) {
      size_t bytes = codec_encode(spec, feedback ? ef.residual : g, n, (uint64_t)rep, msg, scratch);
      t2 = dt_now();
      rc = codec_decode_add(spec, msg, bytes, n, acc);
      t3 = dt_now();
    }
    if (feedback && rc == 0) ef_update(&ef, acc, 0, n);
    double t4 = dt_now();
    if (rep > 0) te[rep - 1] = t2 - t1, td[rep - 1] = t3 - t2, tf[rep - 1] = (t1 - t0) + (t4 - t3);
  }
  if (rc == 0 && !factors) p->encode_sec = least(te, REPS) / (double)n, p->decode_sec = least(td, REPS) / (double)n;
  if (rc == 0 && feedback) p->feedback_sec = least(tf, REPS) / (double)n;
  if (rc == 0 && factors) rc = time_factors(spec, mats, nmats, n, &p->factor_sec);
  if (rc == 0)
    p->codec_family = factors ? PERF_CODEC_FACTORS : codec_sparse(spec) ? PERF_CODEC_SPARSE : PERF_CODEC_DENSE;
  if (feedback) ef_free(&ef);
  dt_free(g), dt_free(acc), dt_free(scratch), dt_free(msg);
  return rc;
}

/* The passes, each timed on its own with hot caches. */
static double codec_passes(const perf_compute_t *p, double coded, int P) {
  double e = p->encode_sec, d = p->decode_sec, f = p->feedback_sec, fb = f > 0, c = p->copy_sec;
  if (P < 1) P = 1;
  switch (p->codec_family) {
  case PERF_CODEC_DENSE: /* every block, then the owned sum; P contributions, P sums, the memory's */
    return coded * ((1 + 1.0 / P) * e + (2 + fb) * d + f);
  case PERF_CODEC_SPARSE: /* one encoding; P messages; pack, clear (twice with memory), unpack */
    return coded * (e + P * d + (fb ? d : 0) + f + (3 + fb) * c);
  case PERF_CODEC_FACTORS: /* the products; the memory and its correction */
    return coded * (p->factor_sec + f + (fb ? c : 0));
  default: return 0;
  }
}

/* The passes' shape in P, at the level the exchange itself was measured. */
double perf_codec_work(const perf_compute_t *p, double coded, int P) {
  return codec_passes(p, coded, P) * (p->codec_scale > 0 ? p->codec_scale : 1);
}
