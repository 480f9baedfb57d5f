/* Sparse collectives: the sum over P ranks of sparse vectors of n values
 * (each rank's (index, value) pairs, indices increasing), ending dense in
 * every rank's `out` with the same bits on every rank. What the exchange
 * (exchange.c) runs for the sparse codecs, chosen by --sparse-collective:
 *
 *   allgather      every rank's encoding to every other (exchange.c)
 *   sparcml:rd     SparCML's recursive doubling (sparse_sparcml_rd.c)
 *   sparcml:split  SparCML's split allgather (sparse_sparcml_split.c)
 *   kylix          Kylix's nested butterfly, index then value
 *                  (sparse_kylix.c)
 *   sparcml        rd or split, by their cost (sparse_pick.c)
 *   auto           the cheapest of the four (sparse_pick.c)
 *
 * On the wire (sparse_vec.c) a vector of a range of len values goes as a
 * count message (8 bytes: the pairs it holds, or SV_DENSE) and its
 * payload, sent together (the receiver posts the payload's receive once
 * the count is in: an exchange is one round): 8u bytes of pairs (u32 indices, then f32 values), or, past
 * SparCML's break-even (2u > len: the pairs would take more than the
 * dense values), 4 len bytes of dense values. A vector that went dense
 * stays dense (the switch happens once, mid-reduction). Bytes of one
 * such message: msg(u, len) = 8 + (dense ? 4 len : 8u). */
#ifndef DTRAIN_COMPRESS_SPARSE_COLL_H
#define DTRAIN_COMPRESS_SPARSE_COLL_H

#include <stdint.h>

#include "dtrain/comm.h"
#include "dtrain/compress.h"

#define SV_DENSE UINT64_MAX
#define SPARSE_MAX_RANKS 64     /* the rank sets of the cost formulas are 64-bit masks */
#define SPARSE_MAX_LAYERS 6     /* a butterfly of 64 ranks has at most 6 layers */

/* Tags in the collectives' range, past the exchange's (compressor.h). */
enum { TAG_SPARSE_COUNT = (1 << 20) + 320, TAG_SPARSE_PAIRS, TAG_SPARSE_INDEX, TAG_SPARSE_VALUE };

/* A vector over the range [lo, hi) of the n values: sparse (k pairs,
 * idx increasing, global indices) or dense (val[0 .. hi - lo)). */
typedef struct {
  uint32_t *idx;
  float *val;
  size_t k, lo, hi;
  int dense;
} svec_t;

/* Scratch, grown to the largest n and reused: three vectors' room (the
 * current, and two for merging), the received messages, the packed
 * outgoing ones, the count messages. */
typedef struct {
  size_t cap;                 /* entries of each vector's room */
  uint32_t *idx[3];
  float *val[3];
  uint8_t *in, *stage;        /* 8 (cap + 64) bytes each */
  uint64_t heads_out[SPARSE_MAX_RANKS], heads_in[SPARSE_MAX_RANKS];
  void *reqs[5 * SPARSE_MAX_RANKS];   /* receives [0, 2 P), sends [2 P, 5 P) */
} sparse_ws_t;

int sparse_ws_grow(sparse_ws_t *w, size_t n);
void sparse_ws_free(sparse_ws_t *w);

/* ---- vectors and their messages (sparse_vec.c) ---------------------------- */
/* out = a + b over [lo, hi) (a sum per index; dense if either is). */
void sv_add(const svec_t *a, const svec_t *b, svec_t *out);
/* v's part in [lo, hi) as a view (no copy). */
svec_t sv_slice(const svec_t *v, size_t lo, size_t hi);
/* v made dense in place of `into` (room for hi - lo values). */
void sv_densify(const svec_t *v, float *into, svec_t *out);
/* Whether v goes on the wire dense (it is, or past the break-even). */
int sv_wire_dense(const svec_t *v);
/* out[lo, hi) = v (0 where v has no pair; every zero a +0). */
void sv_write(const svec_t *v, float *out);
/* The bytes of the message of u pairs (or dense) of a range of len values. */
size_t sv_msg_bytes(size_t u, size_t len, int dense);

/* One exchange step: v_out[i] to out_peer[i] (i < nout) and, from
 * in_peer[j], a vector of the range in_range[j] into v_in[j] (pointing
 * into w->in); the count messages first, then the payloads, as pairs in
 * one message (split = 0) or as an index message then a value message
 * (split = 1, Kylix's). Messages are checked before use: a count past the
 * range, or indices out of it or not increasing, fail naming the peer. */
int sv_exchange(sparse_ws_t *w, comm_t *c, int split, int nout, const int *out_peer,
                const svec_t *v_out, int nin, const int *in_peer, const svec_t *in_range,
                svec_t *v_in);

/* ---- the algorithms: x (k pairs, global indices in [0, n)) summed into
 * out[0, n) on every rank ------------------------------------------------ */
int sparse_sparcml_rd(sparse_ws_t *w, comm_t *c, const uint32_t *idx, const float *val, size_t k,
                      size_t n, float *out);
int sparse_sparcml_split(sparse_ws_t *w, comm_t *c, const uint32_t *idx, const float *val,
                         size_t k, size_t n, float *out);
/* The butterfly both above split variants run on: degrees[0..ndeg) multiply
 * to P; split: Kylix's index-then-value messages. */
int sparse_butterfly(sparse_ws_t *w, comm_t *c, const int *degrees, int ndeg, int split,
                     const uint32_t *idx, const float *val, size_t k, size_t n, float *out);
int sparse_kylix(sparse_ws_t *w, comm_t *c, const int *degrees, int ndeg, const uint32_t *idx,
                 const float *val, size_t k, size_t n, float *out);

/* ---- bytes and cost (sparse_cost.c) ----------------------------------------
 * A rank's exact bytes, given how many distinct indices the ranks of a
 * set (a bit mask of ranks) hold in a range: union(arg, ranks, lo, hi).
 * The formulas follow the algorithms' rules, message by message (the
 * algorithms' headers give them in closed form). */
typedef size_t (*sparse_union_fn)(void *arg, uint64_t ranks, size_t lo, size_t hi);
void sparse_rd_bytes(int P, int rank, size_t n, sparse_union_fn u, void *arg, size_t *sent,
                     size_t *received);
void sparse_butterfly_bytes(const int *degrees, int ndeg, int P, int rank, size_t n,
                            sparse_union_fn u, void *arg, size_t *sent, size_t *received);

/* The ordered factorizations of P into factors >= 2 (Kylix's degree
 * choices): at most `cap` of them into out[i][0..len[i]); returns how many. */
int sparse_degree_lists(int P, int out[][SPARSE_MAX_LAYERS], int *len, int cap);
/* Alpha-beta time of each algorithm for P ranks, n values and K pairs a
 * rank, with the expected union of g ranks' sets n (1 - (1 - K/n)^g)
 * (independent, uniformly placed indices): messages a rank sends x alpha +
 * its bytes / beta. enc: the allgather's message (its encodings' bytes),
 * fixed: whether the allgather sends its sizes first (0) or not (1). */
double sparse_cost_allgather(int P, size_t enc, int fixed, double alpha, double beta);
double sparse_cost_rd(int P, size_t n, double K, double alpha, double beta);
double sparse_cost_butterfly(const int *degrees, int ndeg, int split, size_t n, double K,
                             double alpha, double beta);
/* Kylix's degrees: the factorization of P its cost makes cheapest. */
int sparse_kylix_degrees(int P, size_t n, double K, double alpha, double beta, int *degrees);
/* What `sparcml` and `auto` run: the algorithm the costs pick (never
 * SPARSE_COLL_SPARCML or _AUTO). */
sparse_coll_t sparse_pick(sparse_coll_t asked, int P, size_t n, double K, size_t enc, int fixed,
                          double alpha, double beta);
#endif
