/* gpt's training step with its matrix products only: every kern_gemm that
 * one fp32 step of the builtin gpt makes (src/nn/attention.c, linear.c,
 * lmhead.c: the same shapes, transposes, strides, alphas and betas, the
 * causal blocks of ATT_BLOCK as attention makes them, each layer its own
 * activations), and nothing else -- no bias, layer norm, GELU, softmax,
 * residual add, embedding or optimizer pass. Its time a step is the floor
 * that dtrain's step would reach with every pass outside its GEMMs free;
 * its FLOPs (2·m·n·k summed over the products it ran) are the step's count
 * from the shapes dtrain really computes; of it, the heads' causal products
 * (small, 32 rows) timed apart from the dense ones. Also the library's roof: the
 * best GFLOP/s of a square product of 1024 and of 2048 (bench/sgemm_roof.c's
 * measurement), with the same library and threads. Each also by the
 * process's CPU seconds (the 1-core figures a shared host's waits for the
 * core leave out; on more threads it counts their spinning too).
 *
 * usage: gpt_gemms [openblas|onednn] [threads] [batch] [steps]
 * (steps 0: the roof only); prints one JSON line (bench/gpt_vs_pytorch.py
 * reads it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/core.h"

enum { L = 4, H = 4, C = 256, T = 128, V = 256, HS = C / H, ATT_BLOCK = 32 }; /* gpt; attention.c's block */

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double flops;            /* 2·m·n·k of every product run since the last reset */
static double att_sec, att_cpu, att_flops; /* of those, the heads' causal products (s, CPU s, FLOPs) */

static void gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
  flops += 2.0 * m * n * (double)k;
  kern_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

typedef struct {               /* one block's weights and forward activations */
  float *x, *qkv, *p, *y, *x2, *h, *g; /* input, q|k|v, P, heads' out, ln_2 out, fc out, gelu out */
  float *wq, *wp, *wfc, *wfc2, *dwq, *dwp, *dwfc, *dwfc2;
} block_t;

typedef struct {
  int n, rows;
  block_t b[L];
  float *xf, *wte, *dwte, *logits;          /* ln_f's out, the tied table, the head's out */
  float *d_nc, *d_nc2, *d_n4c, *dqkv, *ds; /* gradients a layer passes down; one [T, T] dS */
} step_t;

static float *filled(size_t n, rng_t *r) {
  float *x = dt_alloc_floats(n);
  if (!x) exit(1);
  for (size_t i = 0; i < n; i++) x[i] = rng_uniform(r) - 0.5f; /* O(1) through chained products: no subnormals */
  return x;
}

static void step_alloc(step_t *s, int n, rng_t *r) {
  size_t R = (size_t)n * T;
  s->n = n, s->rows = (int)R;
  for (int i = 0; i < L; i++) {
    block_t *b = &s->b[i];
    b->x = filled(R * C, r), b->qkv = filled(R * 3 * C, r), b->p = filled((size_t)n * H * T * T, r);
    b->y = filled(R * C, r), b->x2 = filled(R * C, r), b->h = filled(R * 4 * C, r), b->g = filled(R * 4 * C, r);
    b->wq = filled(3 * C * C, r), b->wp = filled(C * C, r), b->wfc = filled(4 * C * C, r);
    b->wfc2 = filled(4 * C * C, r), b->dwq = filled(3 * C * C, r), b->dwp = filled(C * C, r);
    b->dwfc = filled(4 * C * C, r), b->dwfc2 = filled(4 * C * C, r);
  }
  s->xf = filled(R * C, r), s->wte = filled(V * C, r), s->dwte = filled(V * C, r);
  s->logits = filled(R * V, r), s->d_nc = filled(R * C, r), s->d_nc2 = filled(R * C, r);
  s->d_n4c = filled(R * 4 * C, r), s->dqkv = filled(R * 3 * C, r), s->ds = filled(T * T, r);
}

/* attention.c's head_forward, products only */
static void head_forward(const float *q, float *p, float *y, float scale) {
  const int C3 = 3 * C;
  const float *k = q + C, *val = q + 2 * C;
  for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
    int rows = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK, w = t0 + rows;
    float *pt = p + (size_t)t0 * T;
    gemm(0, 1, rows, w, HS, scale, q + (size_t)t0 * C3, C3, k, C3, 0.0f, pt, T);
    gemm(0, 0, rows, HS, w, 1.0f, pt, T, val, C3, 0.0f, y + (size_t)t0 * C, C);
  }
}

/* attention.c's head_backward, products only */
static void head_backward(const float *q, const float *p, const float *dy, float *dq, float *ds,
                          float scale) {
  const int C3 = 3 * C;
  const float *k = q + C, *val = q + 2 * C;
  float *dk = dq + C, *dv = dq + 2 * C;
  for (int t0 = 0; t0 < T; t0 += ATT_BLOCK) {
    int rows = T - t0 < ATT_BLOCK ? T - t0 : ATT_BLOCK, w = t0 + rows;
    size_t o = (size_t)t0 * T;
    gemm(0, 1, rows, w, HS, 1.0f, dy + (size_t)t0 * C, C, val, C3, 0.0f, ds + o, T);
    gemm(0, 0, rows, HS, w, scale, ds + o, T, k, C3, 0.0f, dq + (size_t)t0 * C3, C3);
  }
  for (int j0 = 0; j0 < T; j0 += ATT_BLOCK) {
    int cols = T - j0 < ATT_BLOCK ? T - j0 : ATT_BLOCK;
    size_t o = (size_t)j0 * T + j0;
    gemm(1, 0, cols, HS, T - j0, 1.0f, p + o, T, dy + (size_t)j0 * C, C, 0.0f, dv + (size_t)j0 * C3, C3);
    gemm(1, 0, cols, HS, T - j0, scale, ds + o, T, q + (size_t)j0 * C3, C3, 0.0f, dk + (size_t)j0 * C3, C3);
  }
}

static void forward(step_t *s) {
  int R = s->rows;
  float scale = 1.0f / sqrtf((float)HS);
  for (int i = 0; i < L; i++) {
    block_t *b = &s->b[i];
    gemm(0, 1, R, 3 * C, C, 1.0f, b->x, C, b->wq, C, 0.0f, b->qkv, 3 * C);
    double t0 = dt_now(), c0 = cpu_now(), f0 = flops;
    for (int n = 0; n < s->n; n++)
      for (int h = 0; h < H; h++)
        head_forward(b->qkv + (size_t)n * T * 3 * C + h * HS, b->p + ((size_t)n * H + h) * T * T,
                     b->y + (size_t)n * T * C + h * HS, scale);
    att_sec += dt_now() - t0, att_cpu += cpu_now() - c0, att_flops += flops - f0;
    float *out = i + 1 < L ? s->b[i + 1].x : s->xf; /* the next layer's input stands for the sum */
    gemm(0, 1, R, C, C, 1.0f, b->y, C, b->wp, C, 0.0f, out, C);
    gemm(0, 1, R, 4 * C, C, 1.0f, b->x2, C, b->wfc, C, 0.0f, b->h, 4 * C);
    gemm(0, 1, R, C, 4 * C, 1.0f, b->g, 4 * C, b->wfc2, 4 * C, 0.0f, out, C);
  }
  gemm(0, 1, R, V, C, 1.0f, s->xf, C, s->wte, C, 0.0f, s->logits, V);
}

static void backward(step_t *s) {
  int R = s->rows;
  float scale = 1.0f / sqrtf((float)HS);
  gemm(1, 0, V, C, R, 1.0f, s->logits, V, s->xf, C, 0.0f, s->dwte, C);
  gemm(0, 0, R, C, V, 1.0f, s->logits, V, s->wte, C, 0.0f, s->d_nc, C);
  for (int i = L - 1; i >= 0; i--) {
    block_t *b = &s->b[i];
    gemm(1, 0, C, 4 * C, R, 1.0f, s->d_nc, C, b->g, 4 * C, 0.0f, b->dwfc2, 4 * C);
    gemm(0, 0, R, 4 * C, C, 1.0f, s->d_nc, C, b->wfc2, 4 * C, 0.0f, s->d_n4c, 4 * C);
    gemm(1, 0, 4 * C, C, R, 1.0f, s->d_n4c, 4 * C, b->x2, C, 0.0f, b->dwfc, C);
    gemm(0, 0, R, C, 4 * C, 1.0f, s->d_n4c, 4 * C, b->wfc, C, 0.0f, s->d_nc2, C);
    gemm(1, 0, C, C, R, 1.0f, s->d_nc, C, b->y, C, 0.0f, b->dwp, C);
    gemm(0, 0, R, C, C, 1.0f, s->d_nc, C, b->wp, C, 0.0f, b->y, C); /* dy in y's room, as attention.c */
    double t0 = dt_now(), c0 = cpu_now(), f0 = flops;
    for (int n = 0; n < s->n; n++)
      for (int h = 0; h < H; h++) {
        size_t o = (size_t)n * T * 3 * C + h * HS;
        head_backward(b->qkv + o, b->p + ((size_t)n * H + h) * T * T, b->y + (size_t)n * T * C + h * HS,
                      s->dqkv + o, s->ds, scale);
      }
    att_sec += dt_now() - t0, att_cpu += cpu_now() - c0, att_flops += flops - f0;
    gemm(1, 0, 3 * C, C, R, 1.0f, s->dqkv, 3 * C, b->x, C, 0.0f, b->dwq, C);
    gemm(0, 0, R, C, 3 * C, 1.0f, s->dqkv, 3 * C, b->wq, C, 0.0f, s->d_nc, C);
  }
}

/* Best GFLOP/s of 5 square products of n (after one to warm up), by the
 * clock and (*by_cpu) by CPU seconds. */
static double roof(int n, rng_t *r, double *by_cpu) {
  float *a = filled((size_t)n * n, r), *b = filled((size_t)n * n, r), *c = filled((size_t)n * n, r);
  kern_gemm(0, 0, n, n, n, 1, a, n, b, n, 0, c, n);
  double best = 0, f = 2.0 * n * n * (double)n / 1e9;
  *by_cpu = 0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = dt_now(), c0 = cpu_now();
    kern_gemm(0, 0, n, n, n, 1, a, n, b, n, 0, c, n);
    double gf = f / (dt_now() - t0), cgf = f / (cpu_now() - c0);
    if (gf > best) best = gf;
    if (cgf > *by_cpu) *by_cpu = cgf;
  }
  dt_free(a), dt_free(b), dt_free(c);
  return best;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *lib = argc > 1 ? argv[1] : "onednn";
  int threads = argc > 2 ? atoi(argv[2]) : 1, batch = argc > 3 ? atoi(argv[3]) : 32;
  int steps = argc > 4 ? atoi(argv[4]) : 3;
  if (strcmp(lib, "openblas") && strcmp(lib, "onednn")) {
    fprintf(stderr, "gpt_gemms: library '%s' is not openblas or onednn\n", lib);
    return 2;
  }
  if (threads < 1 || batch < 1 || steps < 0 || steps > 64) {
    fprintf(stderr, "gpt_gemms: threads and batch must be >= 1, steps 0..64\n");
    return 2;
  }
  if (!strcmp(lib, "onednn") && !kern_onednn_available()) {
    fprintf(stderr, "gpt_gemms: built without oneDNN\n");
    return 2;
  }
  kern_set_gemm_lib(strcmp(lib, "onednn") ? GEMM_OPENBLAS : GEMM_ONEDNN);
  kern_set_threads(threads);
  rng_t r;
  rng_seed(&r, 1);
  double cpu1024, cpu2048, roof1024 = roof(1024, &r, &cpu1024), roof2048 = roof(2048, &r, &cpu2048);
  printf("{\"bench\":\"gpt_gemms\",\"lib\":\"%s\",\"threads\":%d,\"batch\":%d,\"roof_1024_gflops\":%.1f,"
         "\"roof_2048_gflops\":%.1f,\"roof_cpu_gflops\":%.1f", lib, threads, batch, roof1024, roof2048,
         cpu1024 > cpu2048 ? cpu1024 : cpu2048);
  if (steps == 0) return printf("}\n") < 0;
  step_t s;
  step_alloc(&s, batch, &r);
  forward(&s), backward(&s); /* warm-up */
  double sec[64], asec[64], csec[64], acsec[64], fwd_flops = 0;
  for (int i = 0; i < steps; i++) {
    flops = 0, att_sec = 0, att_cpu = 0, att_flops = 0;
    double t0 = dt_now(), c0 = cpu_now();
    forward(&s);
    fwd_flops = flops;
    backward(&s);
    sec[i] = dt_now() - t0, asec[i] = att_sec, csec[i] = cpu_now() - c0, acsec[i] = att_cpu;
  }
  printf(",\"flops_per_step\":%.0f,\"forward_flops_per_step\":%.0f,\"gemm_sec_per_step\":[", flops, fwd_flops);
  for (int i = 0; i < steps; i++) printf("%s%.4f", i ? "," : "", sec[i]);
  printf("],\"attention_flops_per_step\":%.0f,\"attention_sec_per_step\":[", att_flops);
  for (int i = 0; i < steps; i++) printf("%s%.4f", i ? "," : "", asec[i]);
  qsort(sec, (size_t)steps, sizeof sec[0], cmp);
  qsort(asec, (size_t)steps, sizeof asec[0], cmp);
  qsort(csec, (size_t)steps, sizeof csec[0], cmp);
  qsort(acsec, (size_t)steps, sizeof acsec[0], cmp);
  printf("],\"gemm_sec_median\":%.4f,\"attention_sec_median\":%.4f,\"gemm_cpu_sec_median\":%.4f,"
         "\"attention_cpu_sec_median\":%.4f}\n", sec[steps / 2], asec[steps / 2], csec[steps / 2], acsec[steps / 2]);
  return 0;
}
