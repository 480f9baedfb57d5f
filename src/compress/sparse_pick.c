/* --sparse-collective: its names, and the choice `sparcml` and `auto`
 * make by the alpha-beta costs of sparse_cost.c (the decision rule kept
 * apart from the algorithms, as allreduce_auto.c keeps the allreduce's).
 * `sparcml` takes recursive doubling or the split allgather, whichever
 * costs less, as SparCML takes the first for latency-bound sizes and the
 * second for many ranks and large unions; `auto` takes the least of the
 * allgather, those two and Kylix at its best degrees. Every input is the
 * same on every rank (P, n, K, the allgather's message, the link), so all
 * ranks pick the same. */
#include <math.h>
#include <string.h>

#include "compress/sparse_coll.h"

static const char *const names[SPARSE_COLL_COUNT] = {"allgather", "sparcml", "sparcml:rd",
                                                     "sparcml:split", "kylix", "auto"};

const char *sparse_coll_name(sparse_coll_t a) {
  return (unsigned)a < SPARSE_COLL_COUNT ? names[a] : "?";
}

int sparse_coll_parse(const char *text, sparse_coll_t *out) {
  for (int i = 0; i < SPARSE_COLL_COUNT; i++)
    if (!strcmp(text, names[i])) {
      *out = (sparse_coll_t)i;
      return 0;
    }
  return dt_error("--sparse-collective: unknown '%s' (expected allgather, sparcml, sparcml:rd, "
                  "sparcml:split, kylix or auto)", text);
}

sparse_coll_t sparse_pick(sparse_coll_t asked, int P, size_t n, double K, size_t enc, int fixed,
                          double alpha, double beta) {
  if (asked != SPARSE_COLL_SPARCML && asked != SPARSE_COLL_AUTO) return asked;
  int deg[SPARSE_MAX_LAYERS], nd = sparse_kylix_degrees(P, n, K, alpha, beta, deg);
  double t[SPARSE_COLL_COUNT];
  for (int i = 0; i < SPARSE_COLL_COUNT; i++) t[i] = INFINITY;
  t[SPARSE_COLL_SPARCML_RD] = sparse_cost_rd(P, n, K, alpha, beta);
  t[SPARSE_COLL_SPARCML_SPLIT] = sparse_cost_butterfly(&P, 1, 0, n, K, alpha, beta);
  if (asked == SPARSE_COLL_AUTO) {
    t[SPARSE_COLL_ALLGATHER] = sparse_cost_allgather(P, enc, fixed, alpha, beta);
    t[SPARSE_COLL_KYLIX] = sparse_cost_butterfly(deg, nd, 1, n, K, alpha, beta);
  }
  sparse_coll_t best = SPARSE_COLL_SPARCML_RD;
  for (int i = 0; i < SPARSE_COLL_COUNT; i++) /* ties to the earlier */
    if (t[i] < t[best]) best = (sparse_coll_t)i;
  return best;
}
