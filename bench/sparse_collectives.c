/* The sparse collectives against the allgather, under an emulated link.
 *
 *   make BUILD=build build/bench/sparse_collectives
 *   build/bench/sparse_collectives [NET] [N]   (NET: latency=50us,bandwidth=1Gbit;
 *                                               N: values, 1000000)
 *
 * For P = 4 and 8 ranks (local transport, each rank its own emulated
 * link), densities 0.1%, 1%, 10% and overlaps of the ranks' index sets of
 * none, half and 90%: one compressor_allreduce of N values with topk:R
 * (error feedback off; every rank's values built so that its top-k is its
 * constructed set), under each --sparse-collective, one after the other
 * in each of REPS rounds. A call's time is its slowest rank's; the
 * allgather's (the median over rounds) is the yardstick of the same run,
 * and each other algorithm is printed as the median over rounds of its
 * ratio to the allgather's call of the same round (below 1: faster), with
 * what auto picked and the bytes rank 0 sent. The time leaves out the encoding (top-k's selection, the same
 * for every algorithm), which on a shared machine is most of a call and
 * most of its noise. One JSON line per configuration follows the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "dtrain/comm.h"
#include "dtrain/compress.h"
#include "dtrain/core.h"
#include "compress/sparse_coll.h"

#define REPS 7
#define NALG 5
static const sparse_coll_t algs[NALG] = {SPARSE_COLL_ALLGATHER, SPARSE_COLL_SPARCML_RD,
                                         SPARSE_COLL_SPARCML_SPLIT, SPARSE_COLL_KYLIX,
                                         SPARSE_COLL_AUTO};

typedef struct {
  size_t n, k;
  double overlap;
  float *pristine;        /* [P][n] */
  double times[REPS][NALG][64];
  uint64_t sent0[NALG];
} bench_t;

/* Rank r's values: its set (c common indices, k - c its own) at 1 + a
 * little, the rest below 1e-3, so that top-k takes exactly the set. */
static void build(bench_t *b, int P) {
  size_t n = b->n, k = b->k, c = (size_t)(b->overlap * (double)k);
  uint64_t z = 99;
  for (int r = 0; r < P; r++) {
    float *x = b->pristine + (size_t)r * n;
    for (size_t i = 0; i < n; i++) {
      z = z * 6364136223846793005ull + 1442695040888963407ull;
      x[i] = (float)(z >> 40) * 0x1p-24f * 1e-3f;
    }
    /* the common indices at a stride through the range; the own ones
     * interleaved after them, rank by rank */
    size_t stride = n / (c + (size_t)P * (k - c) + 1);
    for (size_t j = 0; j < c; j++) x[j * stride] = 1.0f + (float)j * 1e-6f;
    for (size_t j = 0; j < k - c; j++) x[(c + (size_t)r * (k - c) + j) * stride] = -1.0f - (float)j * 1e-6f;
  }
}

/* Each rep runs the algorithms one after the other, so that a rep's
 * ratios compare calls made under the same load. */
static int bench_rank(comm_t *c, void *arg) {
  bench_t *b = arg;
  int r = comm_rank(c), P = comm_size(c), rc = 0;
  coll_ctx_t *ctx;
  compressor_t *cx[NALG] = {0};
  DT_TRY(coll_ctx_new(c, &ctx));
  for (int a = 0; a < NALG && rc == 0; a++) {
    compress_config_t cc = {.algo = ALLREDUCE_RING, .sparse = algs[a], .seed = 1};
    cc.codec = (codec_spec_t){.kind = CODEC_TOPK, .param = (double)b->k / (double)b->n};
    rc = compressor_new(&cc, b->n, r, P, &cx[a]);
  }
  float *buf = dt_alloc_floats(b->n);
  compress_stats_t st;
  for (int rep = -1; rep < REPS && rc == 0 && buf; rep++) /* rep -1: buffers grown, not timed */
    for (int a = 0; a < NALG && rc == 0; a++) {
      memcpy(buf, b->pristine + (size_t)r * b->n, b->n * sizeof *buf);
      if ((rc = comm_barrier(c)) != 0) break;
      compressor_take_stats(cx[a], &st);
      comm_bytes_t b0 = comm_bytes(c);
      double t0 = dt_now();
      rc = compressor_allreduce(cx[a], ctx, buf, 0, b->n, rep, 0, NULL, 0);
      double t = dt_now() - t0;
      compressor_take_stats(cx[a], &st);
      if (rep < 0) continue;
      b->times[rep][a][r] = t - st.encode_sec; /* top-k's selection is every algorithm's alike */
      if (r == 0) b->sent0[a] = comm_bytes(c).sent - b0.sent;
    }
  dt_free(buf);
  for (int a = 0; a < NALG; a++) compressor_free(cx[a]);
  coll_ctx_free(ctx);
  return buf ? rc : -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A call's time: its slowest rank's. */
static double call_time(const bench_t *b, int rep, int a, int P) {
  double t = 0;
  for (int r = 0; r < P; r++) t = b->times[rep][a][r] > t ? b->times[rep][a][r] : t;
  return t;
}

/* The median over reps of algorithm a's time (den < 0), or of its ratio
 * to algorithm den's in the same rep. */
static double median(const bench_t *b, int a, int den, int P) {
  double v[REPS];
  for (int rep = 0; rep < REPS; rep++)
    v[rep] = call_time(b, rep, a, P) / (den < 0 ? 1 : call_time(b, rep, den, P));
  qsort(v, REPS, sizeof *v, cmp_double);
  return v[REPS / 2];
}

int main(int argc, char **argv) {
  const char *net_text = argc > 1 ? argv[1] : "latency=50us,bandwidth=1Gbit";
  size_t n = argc > 2 ? (size_t)atol(argv[2]) : 1000000;
  comm_net_t net = {0};
  if (comm_net_parse(net_text, &net) != 0) {
    fprintf(stderr, "sparse_collectives: %s\n", dt_errmsg());
    return 2;
  }
  static const double densities[] = {0.001, 0.01, 0.1}, overlaps[] = {0, 0.5, 0.9};
  static const int ranks[] = {4, 8};
  bench_t *b = calloc(1, sizeof *b);
  char json[4096];
  size_t jl = 0;
  printf("sparse collectives, %zu values, topk, --net %s (times: the slowest rank, median of %d)\n",
         n, net_text, REPS);
  printf("%-3s %-8s %-8s %12s %11s %11s %11s %-24s %s\n", "P", "density", "overlap",
         "allgather ms", "rd", "split", "kylix", "auto (picked)", "bytes sent by rank 0: allgather rd split kylix");
  for (int pi = 0; pi < 2; pi++)
    for (int di = 0; di < 3; di++)
      for (int oi = 0; oi < 3; oi++) {
        int P = ranks[pi];
        b->n = n, b->k = codec_keep(densities[di], n), b->overlap = overlaps[oi];
        b->pristine = malloc((size_t)P * n * sizeof(float));
        build(b, P);
        if (comm_local_run(P, &net, bench_rank, b) != 0) {
          fprintf(stderr, "sparse_collectives: %s\n", dt_errmsg());
          return 1;
        }
        double t[NALG];   /* t[0]: the allgather's time; t[a]: a's ratio to it */
        uint64_t *sent = b->sent0;
        t[0] = median(b, 0, -1, P);
        for (int a = 1; a < NALG; a++) t[a] = median(b, a, 0, P);
        /* what auto took, by its rule on the link coll_ctx reads (the
         * transport's defaults where --net sets none); checked against
         * the bytes it sent */
        double lat = net.latency > 0 ? net.latency : 5e-6, bw = net.bandwidth > 0 ? net.bandwidth : 5e9;
        sparse_coll_t p = sparse_pick(SPARSE_COLL_AUTO, P, n, (double)b->k, 4 + 8 * b->k, 1, lat, bw);
        const char *picked = sparse_coll_name(p);
        for (int a = 0; a < NALG - 1; a++)
          if (algs[a] == p && sent[a] != sent[NALG - 1]) picked = "? (bytes differ)";
        char autocol[64];
        snprintf(autocol, sizeof autocol, "%.2fx (%s)", t[4], picked);
        printf("%-3d %-8g %-8g %12.2f %10.2fx %10.2fx %10.2fx %-24s %llu %llu %llu %llu\n", P,
               densities[di], overlaps[oi], t[0] * 1e3, t[1], t[2], t[3],
               autocol, (unsigned long long)sent[0], (unsigned long long)sent[1],
               (unsigned long long)sent[2], (unsigned long long)sent[3]);
        jl += (size_t)snprintf(json + jl, sizeof json - jl > 0 ? sizeof json - jl : 0,
                               "{\"P\":%d,\"density\":%g,\"overlap\":%g,\"allgather_sec\":%.6f,"
                               "\"rd_ratio\":%.3f,\"split_ratio\":%.3f,\"kylix_ratio\":%.3f,"
                               "\"auto_ratio\":%.3f,\"auto_picked\":\"%s\"}\n",
                               P, densities[di], overlaps[oi], t[0], t[1], t[2], t[3], t[4], picked);
        if (jl >= sizeof json) jl = sizeof json - 1;
        free(b->pristine);
      }
  fputs(json, stdout);
  free(b);
  return 0;
}
