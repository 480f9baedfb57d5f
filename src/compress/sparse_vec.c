/* Sparse vectors for the sparse collectives (sparse_coll.h): their sum,
 * slices, the dense switch, and one exchange step's messages.
 *
 * A sum is per index (a + b where both have it, else the one that has
 * it): float addition is commutative, so two ranks that add the same two
 * vectors get the same bits whichever they call a; what fixes the bits
 * is the algorithm's tree of sums, the same on every rank and every run.
 * A dense vector holds 0 where no rank sent a value, and 0 + a = a, so a
 * sum comes to the same bits whether its operands were dense or sparse
 * (but for the sign of a zero, which sv_write makes +0 everywhere). */
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"
#include "compress/sparse_coll.h"

int sparse_ws_grow(sparse_ws_t *w, size_t n) {
  size_t cap = n + SPARSE_MAX_RANKS;
  if (cap <= w->cap) return 0;
  sparse_ws_free(w);
  for (int i = 0; i < 3; i++) {
    w->idx[i] = dt_alloc(cap * sizeof(uint32_t));
    w->val[i] = dt_alloc_floats(cap);
    if (!w->idx[i] || !w->val[i]) return -1;
  }
  w->in = dt_alloc(8 * cap), w->stage = dt_alloc(8 * cap);
  if (!w->in || !w->stage) return -1;
  w->cap = cap;
  return 0;
}

void sparse_ws_free(sparse_ws_t *w) {
  for (int i = 0; i < 3; i++) dt_free(w->idx[i]), dt_free(w->val[i]), w->idx[i] = NULL, w->val[i] = NULL;
  dt_free(w->in), dt_free(w->stage);
  w->in = w->stage = NULL;
  w->cap = 0;
}

static size_t lower_bound(const uint32_t *idx, size_t k, size_t key) {
  size_t lo = 0, hi = k;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (idx[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

svec_t sv_slice(const svec_t *v, size_t lo, size_t hi) {
  if (v->dense) return (svec_t){.val = v->val + (lo - v->lo), .lo = lo, .hi = hi, .dense = 1};
  size_t a = lower_bound(v->idx, v->k, lo), b = lower_bound(v->idx, v->k, hi);
  return (svec_t){.idx = v->idx + a, .val = v->val + a, .k = b - a, .lo = lo, .hi = hi};
}

/* acc[0, hi - lo) += v (acc indexed from v->lo). */
static void add_into(const svec_t *v, float *acc) {
  if (v->dense) {
    for (size_t i = 0; i < v->hi - v->lo; i++) acc[i] += v->val[i];
    return;
  }
  for (size_t j = 0; j < v->k; j++) acc[v->idx[j] - v->lo] += v->val[j];
}

void sv_densify(const svec_t *v, float *into, svec_t *out) {
  memset(into, 0, (v->hi - v->lo) * sizeof *into);
  add_into(v, into);
  *out = (svec_t){.val = into, .lo = v->lo, .hi = v->hi, .dense = 1};
}

void sv_add(const svec_t *a, const svec_t *b, svec_t *out) {
  out->lo = a->lo, out->hi = a->hi;
  if (a->dense || b->dense) {
    memset(out->val, 0, (a->hi - a->lo) * sizeof *out->val);
    add_into(a, out->val);
    add_into(b, out->val);
    out->dense = 1, out->k = 0;
    return;
  }
  size_t i = 0, j = 0, k = 0;
  while (i < a->k || j < b->k) {
    if (j == b->k || (i < a->k && a->idx[i] < b->idx[j])) {
      out->idx[k] = a->idx[i], out->val[k++] = a->val[i++];
    } else if (i == a->k || b->idx[j] < a->idx[i]) {
      out->idx[k] = b->idx[j], out->val[k++] = b->val[j++];
    } else {
      out->idx[k] = a->idx[i], out->val[k++] = a->val[i++] + b->val[j++];
    }
  }
  out->k = k, out->dense = 0;
}

int sv_wire_dense(const svec_t *v) { return v->dense || 2 * v->k > v->hi - v->lo; }

size_t sv_msg_bytes(size_t u, size_t len, int dense) {
  return 8 + (dense || 2 * u > len ? 4 * len : 8 * u);
}

void sv_write(const svec_t *v, float *out) {
  float *o = out + v->lo;
  memset(o, 0, (v->hi - v->lo) * sizeof *o);
  if (v->dense)
    for (size_t i = 0; i < v->hi - v->lo; i++) o[i] += v->val[i];
  else
    for (size_t j = 0; j < v->k; j++) out[v->idx[j]] += v->val[j];
}

/* A received sparse vector's indices: in its range and increasing. */
static int check_pairs(comm_t *c, int peer, const svec_t *v) {
  for (size_t j = 0; j < v->k; j++)
    if (v->idx[j] < v->lo || v->idx[j] >= v->hi || (j && v->idx[j] <= v->idx[j - 1]))
      return dt_error("rank %d: sparse allreduce: message from rank %d: index %u at position %zu "
                      "(expected increasing indices in [%zu, %zu))", comm_rank(c), peer,
                      v->idx[j], j, v->lo, v->hi);
  return 0;
}

static int post_out(posted_t *p, sparse_ws_t *w, size_t *staged, int split, int peer,
                    const svec_t *v) {
  size_t len = v->hi - v->lo;
  if (sv_wire_dense(v)) {
    const float *d = v->val;
    if (!v->dense) { /* past the break-even: its dense values staged */
      svec_t dv;
      sv_densify(v, (float *)(w->stage + *staged), &dv);
      d = dv.val, *staged += 4 * len;
    }
    return len ? post_send(p, peer, TAG_SPARSE_VALUE, d, 4 * len) : 0;
  }
  if (!v->k) return 0;
  if (split) {
    DT_TRY(post_send(p, peer, TAG_SPARSE_INDEX, v->idx, 4 * v->k));
    return post_send(p, peer, TAG_SPARSE_VALUE, v->val, 4 * v->k);
  }
  uint8_t *q = w->stage + *staged;
  memcpy(q, v->idx, 4 * v->k), memcpy(q + 4 * v->k, v->val, 4 * v->k);
  *staged += 8 * v->k;
  return post_send(p, peer, TAG_SPARSE_PAIRS, q, 8 * v->k);
}

static int post_in(posted_t *p, sparse_ws_t *w, size_t *used, int split, int peer,
                   uint64_t head, svec_t *v) {
  size_t len = v->hi - v->lo;
  uint8_t *q = w->in + *used;
  if (head == SV_DENSE) {
    v->dense = 1, v->val = (float *)q, v->k = 0;
    *used += 4 * len;
    return len ? post_recv(p, peer, TAG_SPARSE_VALUE, q, 4 * len) : 0;
  }
  size_t u = (size_t)head;
  v->dense = 0, v->k = u, v->idx = (uint32_t *)q, v->val = (float *)(q + 4 * u);
  *used += 8 * u;
  if (!u) return 0;
  if (split) {
    DT_TRY(post_recv(p, peer, TAG_SPARSE_INDEX, q, 4 * u));
    return post_recv(p, peer, TAG_SPARSE_VALUE, q + 4 * u, 4 * u);
  }
  return post_recv(p, peer, TAG_SPARSE_PAIRS, q, 8 * u);
}

int sv_exchange(sparse_ws_t *w, comm_t *c, int split, int nout, const int *out_peer,
                const svec_t *v_out, int nin, const int *in_peer, const svec_t *in_range,
                svec_t *v_in) {
  /* the sends (counts and payloads) all at once; the receives of the
   * payloads once their counts are in: one round, not two */
  comm_req_t **reqs = (comm_req_t **)w->reqs;
  posted_t in = {c, reqs, 0}, out = {c, reqs + 2 * SPARSE_MAX_RANKS, 0};
  for (int j = 0; j < nin; j++)
    DT_TRY(post_recv(&in, in_peer[j], TAG_SPARSE_COUNT, &w->heads_in[j], sizeof(uint64_t)));
  size_t used = 0, staged = 0;
  for (int i = 0; i < nout; i++) {
    w->heads_out[i] = sv_wire_dense(&v_out[i]) ? SV_DENSE : v_out[i].k;
    DT_TRY(post_send(&out, out_peer[i], TAG_SPARSE_COUNT, &w->heads_out[i], sizeof(uint64_t)));
    DT_TRY(post_out(&out, w, &staged, split, out_peer[i], &v_out[i]));
  }
  DT_TRY(wait_posted(&in));
  for (int j = 0; j < nin; j++) {
    size_t len = in_range[j].hi - in_range[j].lo;
    uint64_t h = w->heads_in[j];
    if (h != SV_DENSE && h > len / 2)
      return dt_error("rank %d: sparse allreduce: rank %d announces %llu pairs for a range of "
                      "%zu values (at most %zu go sparse)", comm_rank(c), in_peer[j],
                      (unsigned long long)h, len, len / 2);
    v_in[j] = (svec_t){.lo = in_range[j].lo, .hi = in_range[j].hi};
    DT_TRY(post_in(&in, w, &used, split, in_peer[j], h, &v_in[j]));
  }
  DT_TRY(wait_posted(&in));
  for (int j = 0; j < nin; j++) /* a malformed message named before our sends are waited */
    if (!v_in[j].dense) DT_TRY(check_pairs(c, in_peer[j], &v_in[j]));
  return wait_posted(&out);
}
