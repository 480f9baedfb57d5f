/* A codec's cost as the compressed exchange itself runs it: two local
 * ranks (threads) run compressor_allreduce (compress/exchange.c) on a
 * gradient-like buffer, each timing the CPU its thread spent in the call.
 * Their waits sleep (no spin), so that CPU time is the exchange's own work:
 * the codec's passes and what perf_codec_work's formula leaves out -- the
 * clearing and packing of buffers, the small tensors' allreduce, passes
 * over buffers larger than a core's caches.
 *
 * mlp (535,818 values) on 2 ranks, AMD EPYC, CPU seconds per value: the
 * passes timed one at a time (perf_codec_measure) gave fp16 0.46 ns, int8
 * 5.3, top-k 1% 5.7-6.0; the exchange in a training run (its thread's CPU
 * in compressor_allreduce, 400 steps) 1.28, 5.2, 8.3; measured here 1.7-2.0,
 * 6.1-6.4, 9.3. perf_codec_work scales its formula by the ratio of this
 * measurement to it (perf_codec_calibrate). */
#include <stdlib.h>
#include <time.h>

#include "dtrain/coll.h"
#include "dtrain/comm.h"
#include "dtrain/compress.h"
#include "perf/perf.h"

#define REPS 5
#define RANKS 2
#define MOST_VALUES ((size_t)1 << 20) /* the buffer measured: 4 MiB, past a core's caches */

typedef struct {
  const compress_config_t *cc;
  size_t n;
  const compress_matrix_t *mats;
  int nmats;
  double cpu[RANKS][REPS];
} exchange_run_t;

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int exchange_rank(comm_t *c, void *arg) {
  exchange_run_t *x = arg;
  int r = comm_rank(c);
  compressor_t *cx = NULL;
  coll_ctx_t *ctx = NULL;
  float *g = dt_alloc_floats(x->n);
  int rc = g ? 0 : dt_error("out of memory");
  if (rc == 0) rc = compressor_new(x->cc, x->n, r, comm_size(c), &cx);
  if (rc == 0) rc = coll_ctx_new(c, &ctx);
  comm_set_wait_spin(c, 0);
  rng_t rng;
  rng_seed(&rng, 0xc0dec + (uint64_t)r);
  for (int rep = 0; rc == 0 && rep <= REPS; rep++) {
    for (size_t i = 0; i < x->n; i++) g[i] = rng_uniform(&rng) - 0.5f; /* the backward's writes */
    rc = comm_barrier(c);
    double t0 = thread_cpu();
    if (rc == 0) rc = compressor_allreduce(cx, ctx, g, 0, x->n, rep, 0, x->mats, x->nmats);
    if (rep > 0) x->cpu[r][rep - 1] = thread_cpu() - t0;
  }
  if (ctx) coll_ctx_free(ctx);
  if (cx) compressor_free(cx);
  dt_free(g);
  return rc;
}

/* The model's matrices cut to the first `n` values: those that start
 * below n, the last one's rows cut to what fits. */
static int cut_matrices(const compress_matrix_t *mats, int nmats, size_t n, compress_matrix_t *out) {
  int k = 0;
  for (int i = 0; i < nmats; i++) {
    if (mats[i].off >= n) continue;
    out[k] = mats[i];
    size_t cols = out[k].cols ? out[k].cols : 1;
    if (out[k].off + out[k].rows * cols > n) out[k].rows = (n - out[k].off) / cols;
    if (out[k].rows > 0) k++;
  }
  return k;
}

int perf_codec_exchange_cpu(const compress_config_t *cc, size_t n, const compress_matrix_t *mats,
                            int nmats, double *sec_per_value) {
  *sec_per_value = 0;
  if (cc->codec.kind == CODEC_NONE || n == 0) return 0;
  exchange_run_t x = {.cc = cc, .n = n < MOST_VALUES ? n : MOST_VALUES};
  compress_matrix_t *cut = calloc((size_t)nmats + 1, sizeof *cut);
  if (!cut) return dt_error("out of memory");
  x.mats = cut, x.nmats = cut_matrices(mats, nmats, x.n, cut);
  int rc = comm_local_run(RANKS, NULL, exchange_rank, &x);
  double best = 0;
  for (int rep = 0; rc == 0 && rep < REPS; rep++) {
    double mean = 0;
    for (int r = 0; r < RANKS; r++) mean += x.cpu[r][rep] / RANKS;
    if (rep == 0 || mean < best) best = mean;
  }
  if (rc == 0) *sec_per_value = best / (double)x.n;
  free(cut);
  return rc;
}

int perf_codec_calibrate(const compress_config_t *cc, size_t n, const compress_matrix_t *mats,
                         int nmats, perf_compute_t *pc) {
  DT_TRY(perf_codec_measure(&cc->codec, cc->error_feedback, n, mats, nmats, pc));
  pc->codec_scale = 0;
  double measured = 0, passes = perf_codec_work(pc, 1.0, 2);
  DT_TRY(perf_codec_exchange_cpu(cc, n, mats, nmats, &measured));
  pc->codec_scale = passes > 0 && measured > 0 ? measured / passes : 0;
  return 0;
}
