/* The sparse collectives (src/compress/sparse_coll.h) on 2..8 local ranks,
 * driven with constructed index sets: each rank holds k of n indices, a
 * share `overlap` of them common to all ranks, the rest its own. For every
 * algorithm (SparCML's recursive doubling and split allgather, Kylix's
 * butterfly at each factorization of P):
 *   - every rank ends with the same bits, and the same bits run to run;
 *   - the sum equals the rank-order sum the allgather computes: bit for
 *     bit for the split allgather and one-layer Kylix (rank order too),
 *     within (P - 1) eps sum |v| for the trees (another order of sums);
 *   - each rank's bytes sent and received equal the algorithm's formula
 *     (sparse_cost.c), its union counts taken from the sets;
 *   - the dense switch happens mid-reduction where the union passes half
 *     of n (bytes and sum checked, the same bits run to run);
 *   - a count past the break-even, or an index outside its range, on the
 *     wire is refused naming the peer.
 * Then the exchange (compressor_allreduce with top-k) under each
 * --sparse-collective: the allgather's sum, and the bytes inside the
 * bounds compress_exchange_bytes gives a step's description. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"
#include "compress/sparse_coll.h"
#include "dtrain/coll.h"
#include "test.h"

enum { ALG_RD, ALG_SPLIT, ALG_KYLIX };

typedef struct {
  int P, alg, deg[SPARSE_MAX_LAYERS], ndeg;
  size_t n;
  uint32_t *idx;        /* [P][n]: rank r's indices at r n, k[r] of them */
  float *val;
  size_t *k;
  unsigned char *has;   /* [P][n]: whether rank r holds index i */
  float *out;           /* [P][n] */
  uint64_t *sent, *recv;
} case_t;

static float value_of(int r, size_t i) {
  uint64_t z = (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  z ^= z >> 31, z *= 0x94D049BB133111EBull, z ^= z >> 29;
  float mag = ldexpf(0.5f + (float)(z >> 40) * 0x1p-24f, -(int)(z % 7));
  return (z >> 20) & 1 ? -mag : mag;
}

/* Rank r's set: the first c of a fixed permutation (shared), then k - c of
 * its own further on. */
static void build_sets(case_t *t, size_t k, double overlap) {
  size_t n = t->n, c = (size_t)(overlap * (double)k + 0.5);
  size_t *perm = malloc(n * sizeof *perm);
  for (size_t i = 0; i < n; i++) perm[i] = i;
  uint64_t z = 12345;
  for (size_t i = n - 1; i > 0; i--) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    size_t j = (size_t)(z >> 33) % (i + 1), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  memset(t->has, 0, (size_t)t->P * n);
  for (int r = 0; r < t->P; r++) {
    for (size_t j = 0; j < c; j++) t->has[(size_t)r * n + perm[j]] = 1;
    for (size_t j = 0; j < k - c; j++) t->has[(size_t)r * n + perm[c + (size_t)r * (k - c) + j]] = 1;
    t->k[r] = 0;
    for (size_t i = 0; i < n; i++)
      if (t->has[(size_t)r * n + i]) {
        t->idx[(size_t)r * n + t->k[r]] = (uint32_t)i;
        t->val[(size_t)r * n + t->k[r]++] = value_of(r, i);
      }
  }
  free(perm);
}

static size_t count_union(void *arg, uint64_t ranks, size_t lo, size_t hi) {
  case_t *t = arg;
  size_t u = 0;
  for (size_t i = lo; i < hi; i++) {
    int any = 0;
    for (int r = 0; r < t->P && !any; r++) any = (ranks >> r & 1) && t->has[(size_t)r * t->n + i];
    u += any;
  }
  return u;
}

static int run_rank(comm_t *c, void *arg) {
  case_t *t = arg;
  int r = comm_rank(c);
  sparse_ws_t w = {0};
  size_t n = t->n;
  comm_bytes_t b0 = comm_bytes(c);
  const uint32_t *idx = t->idx + (size_t)r * n;
  const float *val = t->val + (size_t)r * n;
  float *out = t->out + (size_t)r * n;
  int rc = t->alg == ALG_RD ? sparse_sparcml_rd(&w, c, idx, val, t->k[r], n, out)
         : t->alg == ALG_SPLIT ? sparse_sparcml_split(&w, c, idx, val, t->k[r], n, out)
         : sparse_kylix(&w, c, t->deg, t->ndeg, idx, val, t->k[r], n, out);
  t->sent[r] = comm_bytes(c).sent - b0.sent;
  t->recv[r] = comm_bytes(c).received - b0.received;
  sparse_ws_free(&w);
  return rc;
}

static case_t new_case(int P, size_t n) {
  case_t t = {.P = P, .n = n};
  t.idx = malloc((size_t)P * n * sizeof *t.idx + 4);
  t.val = malloc((size_t)P * n * sizeof *t.val + 4);
  t.k = calloc((size_t)P, sizeof *t.k);
  t.has = malloc((size_t)P * n + 1);
  t.out = malloc((size_t)P * n * sizeof *t.out + 4);
  t.sent = calloc((size_t)P, sizeof *t.sent);
  t.recv = calloc((size_t)P, sizeof *t.recv);
  return t;
}

static void free_case(case_t *t) {
  free(t->idx), free(t->val), free(t->k), free(t->has), free(t->out), free(t->sent), free(t->recv);
}

/* The allgather's sum: every rank's pairs added in rank order into zeros. */
static void rank_order_sum(const case_t *t, float *want, double *mag) {
  memset(want, 0, t->n * sizeof *want);
  for (size_t i = 0; i < t->n; i++) mag[i] = 0;
  for (int r = 0; r < t->P; r++)
    for (size_t j = 0; j < t->k[r]; j++) {
      size_t i = t->idx[(size_t)r * t->n + j];
      want[i] += t->val[(size_t)r * t->n + j];
      mag[i] += fabsf(t->val[(size_t)r * t->n + j]);
    }
}

/* One algorithm on the case's sets: same bits everywhere, the sum, the
 * bytes; returns whether the result is bitwise the rank-order sum. */
static void check_case(case_t *t, const char *what, double density, double overlap) {
  CHECK_OK(comm_local_run(t->P, NULL, run_rank, t));
  size_t n = t->n;
  for (int r = 1; r < t->P; r++) CHECK(memcmp(t->out, t->out + (size_t)r * n, n * sizeof(float)) == 0);
  float *want = malloc(n * sizeof *want + 4);
  double *mag = malloc(n * sizeof *mag + 8);
  rank_order_sum(t, want, mag);
  int bitwise = t->alg != ALG_RD && (t->alg == ALG_SPLIT || t->ndeg == 1);
  if (bitwise) CHECK(memcmp(want, t->out, n * sizeof *want) == 0);
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)t->out[i] - want[i]) <= (t->P - 1) * FLT_EPSILON * mag[i])) {
      fprintf(stderr, "  %s P=%d n=%zu density %g overlap %g: [%zu] = %.9g, want %.9g\n", what,
              t->P, n, density, overlap, i, t->out[i], want[i]);
      CHECK(0);
      break;
    }
  for (int r = 0; r < t->P; r++) {
    size_t s, rv;
    if (t->alg == ALG_RD) sparse_rd_bytes(t->P, r, n, count_union, t, &s, &rv);
    else if (t->alg == ALG_SPLIT) sparse_butterfly_bytes(&t->P, 1, t->P, r, n, count_union, t, &s, &rv);
    else sparse_butterfly_bytes(t->deg, t->ndeg, t->P, r, n, count_union, t, &s, &rv);
    if (t->sent[r] != s || t->recv[r] != rv) {
      fprintf(stderr, "  %s P=%d n=%zu density %g overlap %g rank %d: sent %llu received %llu, "
              "formula %zu %zu\n", what, t->P, n, density, overlap, r,
              (unsigned long long)t->sent[r], (unsigned long long)t->recv[r], s, rv);
      CHECK(0);
    }
  }
  free(want), free(mag);
}

static void run_algorithms(int P, size_t n, double density, double overlap) {
  case_t t = new_case(P, n);
  size_t k = (size_t)(density * (double)n);
  if (k < 1) k = 1;
  while (k > 0 && (size_t)((1 - overlap) * (double)k + 0.5) * (size_t)P + k > n) k--;
  build_sets(&t, k, overlap);
  t.alg = ALG_RD;
  check_case(&t, "sparcml:rd", density, overlap);
  t.alg = ALG_SPLIT;
  check_case(&t, "sparcml:split", density, overlap);
  int lists[64][SPARSE_MAX_LAYERS], len[64], nl = sparse_degree_lists(P, lists, len, 64);
  t.alg = ALG_KYLIX;
  for (int l = 0; l < nl; l++) {
    t.ndeg = len[l];
    memcpy(t.deg, lists[l], sizeof t.deg);
    check_case(&t, "kylix", density, overlap);
  }
  free_case(&t);
}

/* 2..8 ranks, densities 0.5% .. 30%, overlaps none, half, all; and a
 * small n (ranges of one value or none). */
static void test_sums_and_bytes(void) {
  static const double densities[] = {0.005, 0.05, 0.3}, overlaps[] = {0, 0.5, 1};
  for (int P = 2; P <= 8; P++) {
    for (int d = 0; d < 3; d++)
      for (int o = 0; o < 3; o++) run_algorithms(P, 1000, densities[d], overlaps[o]);
    run_algorithms(P, 5, 0.2, 0);
  }
}

/* Closed forms from the algorithms' headers on the extreme overlaps. */
static void test_closed_forms(void) {
  for (int P = 2; P <= 8; P++) {
    case_t t = new_case(P, 4096);
    int pof2 = 1, lg = 0;
    while (2 * pof2 <= P) pof2 *= 2, lg++;
    build_sets(&t, 40, 1); /* identical sets: every message k pairs */
    t.alg = ALG_RD;
    CHECK_OK(comm_local_run(P, NULL, run_rank, &t));
    CHECK(t.sent[0] == (uint64_t)lg * (8 + 8 * 40) + (P > pof2 ? 8 + 8 * 40 : 0));
    build_sets(&t, 40, 0); /* disjoint: stage s sends 2^s k (P a power of two) */
    CHECK_OK(comm_local_run(P, NULL, run_rank, &t));
    if (P == pof2) CHECK(t.sent[0] == (uint64_t)lg * 8 + 8 * 40 * (uint64_t)(P - 1));
    free_case(&t);
  }
}

/* Past half of n mid-reduction: 8 ranks, 300 pairs each of 1000, 200 of
 * them common: unions of 300, 400, then 600 > 500 at the third stage,
 * which goes dense (4n bytes). Checked as a sum and as bytes, and the
 * same bits run to run. */
static void test_dense_switch_mid_reduction(void) {
  case_t t = new_case(8, 1000);
  build_sets(&t, 300, 2.0 / 3);
  t.alg = ALG_RD;
  check_case(&t, "sparcml:rd switch", 0.3, 2.0 / 3);
  CHECK(t.sent[0] == (8 + 8 * 300) + (8 + 8 * 400) + (8 + 4 * 1000));
  /* deterministic: the same bits again */
  float *first = malloc(1000 * sizeof *first);
  memcpy(first, t.out, 1000 * sizeof *first);
  CHECK_OK(comm_local_run(8, NULL, run_rank, &t));
  CHECK(memcmp(first, t.out, 1000 * sizeof *first) == 0);
  free(first);
  free_case(&t);
}

/* A malformed count on the wire is refused naming the peer. */
static int liar_rank(comm_t *c, void *arg) {
  (void)arg;
  sparse_ws_t w = {0};
  float out[16];
  uint32_t idx[1] = {3};
  float val[1] = {1};
  int rc;
  if (comm_rank(c) == 1) {
    uint64_t lie = 15; /* 15 pairs of a 16-value range: past the break-even */
    rc = comm_send(c, 0, TAG_SPARSE_COUNT, &lie, sizeof lie);
    sparse_ws_free(&w);
    return rc;
  }
  dt_error_clear();
  rc = sparse_sparcml_rd(&w, c, idx, val, 1, 16, out);
  sparse_ws_free(&w);
  RCHECK(rc != 0 && strstr(dt_errmsg(), "rank 1 announces 15 pairs"));
  return 0;
}

/* A pair whose index lies outside the range is refused naming the peer. */
static int bad_index_rank(comm_t *c, void *arg) {
  (void)arg;
  sparse_ws_t w = {0};
  float out[16];
  uint32_t idx[1] = {3};
  float val[1] = {1};
  int rc;
  if (comm_rank(c) == 1) {
    uint64_t one = 1;
    uint8_t pair[8];
    uint32_t i = 99;
    float v = 1;
    memcpy(pair, &i, 4), memcpy(pair + 4, &v, 4);
    rc = comm_send(c, 0, TAG_SPARSE_COUNT, &one, sizeof one);
    if (rc == 0) rc = comm_send(c, 0, TAG_SPARSE_PAIRS, pair, sizeof pair);
    return rc;
  }
  dt_error_clear();
  rc = sparse_sparcml_rd(&w, c, idx, val, 1, 16, out);
  sparse_ws_free(&w);
  RCHECK(rc != 0 && strstr(dt_errmsg(), "message from rank 1: index 99"));
  return 0;
}

static void test_malformed_messages_refused(void) {
  CHECK_OK(comm_local_run(2, NULL, liar_rank, NULL));
  CHECK_OK(comm_local_run(2, NULL, bad_index_rank, NULL));
}

/* ---- through the exchange ------------------------------------------------- */

typedef struct {
  sparse_coll_t coll;
  const char *codec;
  size_t n;
  float *result;
  uint64_t *sent, *recv;
  uint64_t fallbacks;     /* the allgather went dense (its break-even): the ring's sums */
} ex_case_t;

static int ex_rank(comm_t *c, void *arg) {
  ex_case_t *e = arg;
  int r = comm_rank(c), P = comm_size(c);
  coll_ctx_t *ctx;
  compressor_t *cx;
  compress_config_t cc = {.seed = 3, .algo = ALLREDUCE_RING, .sparse = e->coll};
  RCHECK_OK(codec_parse(e->codec, &cc.codec));
  RCHECK_OK(coll_ctx_new(c, &ctx));
  RCHECK_OK(compressor_new(&cc, e->n, r, P, &cx));
  float *buf = e->result + (size_t)r * e->n;
  for (size_t i = 0; i < e->n; i++) buf[i] = value_of(r, i) * (i % 7 == 0 ? 4.0f : 1.0f);
  comm_bytes_t b0 = comm_bytes(c);
  int rc = compressor_allreduce(cx, ctx, buf, 0, e->n, 0, 0, NULL, 0);
  e->sent[r] = comm_bytes(c).sent - b0.sent;
  e->recv[r] = comm_bytes(c).received - b0.received;
  compress_stats_t st;
  compressor_take_stats(cx, &st);
  if (r == 0) e->fallbacks = st.dense_fallbacks;
  compressor_free(cx);
  coll_ctx_free(ctx);
  return rc;
}

static ex_case_t run_ex(sparse_coll_t coll, const char *codec, int P, size_t n) {
  ex_case_t e = {coll, codec, n, calloc((size_t)P * n, sizeof(float)),
                 calloc((size_t)P, sizeof(uint64_t)), calloc((size_t)P, sizeof(uint64_t)), 0};
  CHECK_OK(comm_local_run(P, NULL, ex_rank, &e));
  for (int r = 1; r < P; r++) CHECK(memcmp(e.result, e.result + (size_t)r * n, n * sizeof(float)) == 0);
  return e;
}

/* The allgather's sum (bit for bit for the split allgather, where the
 * allgather stays below its break-even and sums in rank order), every
 * rank alike, the bytes within the description's bounds. */
static void test_exchange(void) {
  static const char *codecs[] = {"topk:0.02", "topk:0.2", "threshold:0.3", "strom:0.3"};
  size_t n = 3000;
  for (int P = 2; P <= 8; P += 3)
    for (int ci = 0; ci < 4; ci++) {
      ex_case_t base = run_ex(SPARSE_COLL_ALLGATHER, codecs[ci], P, n);
      for (int a = SPARSE_COLL_SPARCML; a < SPARSE_COLL_COUNT; a++) {
        ex_case_t e = run_ex((sparse_coll_t)a, codecs[ci], P, n);
        if (a == SPARSE_COLL_SPARCML_SPLIT && !base.fallbacks && memcmp(base.result, e.result, n * sizeof(float)) != 0) {
          fprintf(stderr, "  split %s P=%d: not the allgather's bits\n", codecs[ci], P);
          CHECK(0);
        }
        for (size_t i = 0; i < n; i++)
          if (!(fabsf(base.result[i] - e.result[i]) <= 8 * P * FLT_EPSILON)) {
            fprintf(stderr, "  %s %s P=%d [%zu]: %g against the allgather's %g\n",
                    sparse_coll_name((sparse_coll_t)a), codecs[ci], P, i, e.result[i], base.result[i]);
            CHECK(0);
            break;
          }
        compress_config_t cc = {.algo = ALLREDUCE_RING, .sparse = (sparse_coll_t)a};
        CHECK_OK(codec_parse(codecs[ci], &cc.codec));
        for (int r = 0; r < P; r++) {
          compress_bytes_t b;
          CHECK_OK(compress_exchange_bytes(&cc, r, P, 0, n, 0, NULL, 0, &b));
          if (!(e.sent[r] >= b.sent_min && e.sent[r] <= b.sent && e.recv[r] >= b.received_min &&
                e.recv[r] <= b.received)) {
            fprintf(stderr, "  %s %s P=%d rank %d: sent %llu received %llu outside [%zu, %zu] "
                    "[%zu, %zu]\n", sparse_coll_name((sparse_coll_t)a), codecs[ci], P, r,
                    (unsigned long long)e.sent[r], (unsigned long long)e.recv[r], b.sent_min,
                    b.sent, b.received_min, b.received);
            CHECK(0);
          }
        }
        free(e.result), free(e.sent), free(e.recv);
      }
      free(base.result), free(base.sent), free(base.recv);
    }
}

static void test_names_and_pick(void) {
  sparse_coll_t a;
  CHECK_OK(sparse_coll_parse("sparcml:split", &a));
  CHECK(a == SPARSE_COLL_SPARCML_SPLIT);
  CHECK_FAILS_WITH(sparse_coll_parse("sparcl", &a), "--sparse-collective: unknown 'sparcl'");
  /* 1 Gbit/s, 50 us: at 8 ranks and 1% of a million values, merging
   * beats sending every rank's pairs to every rank */
  size_t n = 1000000;
  double K = 10000;
  sparse_coll_t p = sparse_pick(SPARSE_COLL_AUTO, 8, n, K, 4 + 8 * (size_t)K, 1, 50e-6, 125e6);
  CHECK(p != SPARSE_COLL_ALLGATHER);
  CHECK(sparse_cost_rd(8, n, K, 50e-6, 125e6) < sparse_cost_allgather(8, 4 + 8 * (size_t)K, 1, 50e-6, 125e6));
  /* 2 ranks: one exchange either way; the allgather sends no count */
  CHECK(sparse_pick(SPARSE_COLL_AUTO, 2, n, K, 4 + 8 * (size_t)K, 1, 50e-6, 125e6) == SPARSE_COLL_ALLGATHER);
  /* the picked algorithm is the least of the formulas */
  int deg[SPARSE_MAX_LAYERS], nd = sparse_kylix_degrees(8, n, K, 50e-6, 125e6, deg);
  double t[4] = {sparse_cost_allgather(8, 4 + 8 * (size_t)K, 1, 50e-6, 125e6),
                 sparse_cost_rd(8, n, K, 50e-6, 125e6),
                 sparse_cost_butterfly((int[]){8}, 1, 0, n, K, 50e-6, 125e6),
                 sparse_cost_butterfly(deg, nd, 1, n, K, 50e-6, 125e6)};
  static const sparse_coll_t algs[4] = {SPARSE_COLL_ALLGATHER, SPARSE_COLL_SPARCML_RD,
                                        SPARSE_COLL_SPARCML_SPLIT, SPARSE_COLL_KYLIX};
  int best = 0;
  for (int i = 1; i < 4; i++)
    if (t[i] < t[best]) best = i;
  CHECK(p == algs[best]);
}

int main(void) {
  RUN(test_sums_and_bytes);
  RUN(test_closed_forms);
  RUN(test_dense_switch_mid_reduction);
  RUN(test_malformed_messages_refused);
  RUN(test_names_and_pick);
  RUN(test_exchange);
  TEST_MAIN_END();
}
