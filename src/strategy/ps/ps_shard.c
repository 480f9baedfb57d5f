/* The key-range split of the parameter arena over K servers: contiguous
 * ranges balanced by size. A cut moves to a tensor boundary when one lies
 * within 5% of a shard of the ideal cut, so that small layers are not cut
 * in two for nothing; the large first layer of an MLP is cut where the
 * balance needs it. LARS computes its trust ratio per tensor, so under
 * LARS every cut is a tensor boundary. Under --ps-push factors a dense
 * layer's weight and bias stay on one server (their server computes the
 * gradient from the layer's factors): a cut that falls inside such a span
 * moves to its nearer end. */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

#define PS_ALIGN 16 /* floats: cuts inside a tensor fall on 64-byte lines */

/* The tensor boundary nearest to `ideal` strictly between lo and hi, or 0. */
static size_t nearest_boundary(const model_t *m, size_t ideal, size_t lo, size_t hi) {
  size_t best = 0, best_dist = (size_t)-1;
  for (int i = 0; i < m->ntensors; i++) {
    size_t b = m->tensors[i].off;
    if (b <= lo || b >= hi) continue;
    size_t d = b > ideal ? b - ideal : ideal - b;
    if (d < best_dist) best = b, best_dist = d;
  }
  return best;
}

static size_t choose_cut(const model_t *m, size_t ideal, size_t lo, size_t hi, size_t tol,
                         int whole_tensors) {
  size_t b = nearest_boundary(m, ideal, lo, hi);
  if (b && (whole_tensors || (b > ideal ? b - ideal : ideal - b) <= tol)) return b;
  size_t cut = ideal / PS_ALIGN * PS_ALIGN;
  return cut > lo && cut < hi ? cut : ideal;
}

/* A cut inside a kept span moved to the span's nearer end within (lo, hi). */
static size_t keep_whole(size_t cut, size_t lo, size_t hi, const ps_range_t *keep, int nkeep) {
  for (int i = 0; i < nkeep; i++) {
    ps_range_t k = keep[i];
    if (cut <= k.begin || cut >= k.end) continue;
    int begin_ok = k.begin > lo, end_ok = k.end < hi;
    if (begin_ok && (!end_ok || cut - k.begin <= k.end - cut)) return k.begin;
    return end_ok ? k.end : cut;
  }
  return cut;
}

int ps_shard_plan(const model_t *m, int nservers, int whole_tensors, ps_shard_map_t *out) {
  return ps_shard_plan_keep(m, nservers, whole_tensors, NULL, 0, out);
}

int ps_shard_plan_keep(const model_t *m, int nservers, int whole_tensors, const ps_range_t *keep,
                       int nkeep, ps_shard_map_t *out) {
  memset(out, 0, sizeof *out);
  size_t P = m->nparams;
  if (nservers < 1 || (size_t)nservers > P)
    return dt_error("option --exchange ps:%d: the model has %zu parameters to split", nservers, P);
  if (whole_tensors && nservers > m->ntensors)
    return dt_error("option --exchange ps:%d: LARS keeps tensors whole and the model has %d "
                    "tensors (use at most ps:%d)", nservers, m->ntensors, m->ntensors);
  out->shards = calloc((size_t)nservers, sizeof *out->shards);
  if (!out->shards) return dt_error("out of memory");
  out->nservers = nservers;
  out->nparams = P;
  size_t prev = 0, tol = P / (size_t)nservers / 20;
  for (int k = 0; k < nservers; k++) {
    size_t end = P;
    if (k + 1 < nservers) {
      size_t ideal = P * (size_t)(k + 1) / (size_t)nservers;
      /* leave at least one key for each server still to come */
      size_t hi = P - (size_t)(nservers - k - 1) + 1;
      end = keep_whole(choose_cut(m, ideal, prev, hi, tol, whole_tensors), prev, hi, keep, nkeep);
      /* a kept span ran past the ideal cut: the next boundary after it */
      if (end <= prev && nkeep) end = keep_whole(nearest_boundary(m, prev, prev, hi), prev, hi, keep, nkeep);
    }
    if (end <= prev || keep_whole(end, 0, P + 1, keep, nkeep) != end) {
      ps_shard_free(out);
      return dt_error("option --exchange ps:%d: cannot cut the model into %d non-empty ranges "
                      "at tensor boundaries", nservers, nservers);
    }
    out->shards[k] = (ps_range_t){prev, end};
    prev = end;
  }
  return 0;
}

void ps_shard_free(ps_shard_map_t *map) {
  free(map->shards);
  memset(map, 0, sizeof *map);
}

/* The parts of the tensors in r, in the shard's own offsets; only_1d: of
 * the 1-D tensors alone. */
static int shard_parts(const model_t *m, ps_range_t r, int only_1d, optim_segment_t **segs,
                       int *nsegs) {
  *segs = calloc((size_t)m->ntensors + 1, sizeof **segs);
  if (!*segs) return dt_error("out of memory");
  int n = 0;
  for (int i = 0; i < m->ntensors; i++) {
    size_t b = m->tensors[i].off, e = b + m->tensors[i].len;
    if (e <= r.begin || b >= r.end || (only_1d && m->tensors[i].ndim >= 2)) continue;
    size_t lo = b > r.begin ? b : r.begin, hi = e < r.end ? e : r.end;
    (*segs)[n++] = (optim_segment_t){lo - r.begin, hi - lo};
  }
  *nsegs = n;
  return 0;
}

int ps_shard_segments(const model_t *m, ps_range_t r, optim_segment_t **segs, int *nsegs) {
  return shard_parts(m, r, 0, segs, nsegs);
}

int ps_shard_no_decay(const model_t *m, ps_range_t r, optimizer_t *opt) {
  optim_segment_t *keep = NULL;
  int n = 0;
  DT_TRY(shard_parts(m, r, 1, &keep, &n));
  int rc = optim_set_no_decay(opt, keep, n);
  free(keep);
  return rc;
}
