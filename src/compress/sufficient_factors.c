/* Sufficient factor broadcasting (Poseidon, Zhang et al. 2017; Xie et al.
 * 2016): the weight gradient of a dense layer over a batch is a sum of
 * outer products, dW = dY^T X (dY: the batch's gradients at the layer's
 * output, n x out; X: its inputs, n x in). Instead of dW (in x out
 * floats) each rank sends its factors (n (in + out) floats) to every
 * other, and every rank rebuilds the sum from all ranks' rows:
 *   dW = [dY_0; ...; dY_{P-1}]^T [X_0; ...; X_{P-1}],  db = sum of the dY rows,
 * the rows in rank order, so every rank computes the same GEMM on the
 * same bytes (the same bits; another order of the sums than the ring's,
 * so equal to it to rounding). Lossless.
 * Bytes sent by a rank: (P - 1) (8 + 4 n (out + in)): its row count, then
 * its factors, to each peer. It gains over the ring's 2 (P - 1)/P 4 (in
 * out + out) when P n (in + out) < 2 (in out + out): reducer.c decides per
 * layer with the configured batch (Poseidon's rule, batch (in + out) <
 * in out, with the collective's factor of each side). */
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"
#include "dtrain/comm.h"

struct sfb {
  int nranks, rank;
  size_t max_rows;          /* per rank */
  size_t max_in, max_out;
  float *dy, *x;            /* every rank's rows, in rank order */
  uint64_t *rows;
  comm_req_t **reqs;
};

int sfb_gains(int nranks, int batch, size_t in, size_t out) {
  return nranks > 1 && (double)nranks * batch * (double)(in + out) < 2.0 * (double)(in * out + out);
}

/* The row count, then the rows (none sent when there are none). */
size_t sfb_message_bytes(size_t rows, size_t in, size_t out) {
  return sizeof(uint64_t) + rows * (in + out) * sizeof(float);
}

int sfb_new(int rank, int nranks, size_t max_rows, size_t max_in, size_t max_out, sfb_t **out) {
  sfb_t *s = calloc(1, sizeof *s);
  *out = s;
  if (!s) return dt_error("out of memory");
  s->rank = rank, s->nranks = nranks, s->max_rows = max_rows, s->max_in = max_in;
  s->max_out = max_out;
  size_t rows = (size_t)nranks * max_rows + 1;
  s->dy = dt_alloc_floats(rows * max_out);
  s->x = dt_alloc_floats(rows * max_in);
  s->rows = calloc((size_t)nranks, sizeof *s->rows);
  s->reqs = calloc(4 * (size_t)nranks, sizeof *s->reqs);
  if (!s->dy || !s->x || !s->rows || !s->reqs) return dt_error("out of memory");
  return 0;
}

void sfb_free(sfb_t *s) {
  if (!s) return;
  dt_free(s->dy), dt_free(s->x);
  free(s->rows), free(s->reqs), free(s);
}

/* Every rank's row count (8 bytes to each peer), checked against what
 * this layer's buffers hold. */
static int exchange_rows(sfb_t *s, comm_t *c, uint64_t mine) {
  posted_t p = {c, s->reqs, 0};
  s->rows[s->rank] = mine;
  for (int i = 0; i < s->nranks; i++)
    if (i != s->rank) DT_TRY(post_recv(&p, i, TAG_SFB_ROWS, &s->rows[i], sizeof *s->rows));
  for (int j = 0; j < s->nranks; j++)
    if (j != s->rank) DT_TRY(post_send(&p, j, TAG_SFB_ROWS, &mine, sizeof mine));
  DT_TRY(wait_posted(&p));
  for (int i = 0; i < s->nranks; i++)
    if (s->rows[i] > s->max_rows)
      return dt_error("rank %d: sufficient factors: rank %d announces %llu rows (at most %zu a "
                      "rank)", s->rank, i, (unsigned long long)s->rows[i], s->max_rows);
  return 0;
}

int sfb_allreduce(sfb_t *s, coll_ctx_t *ctx, const float *x, const float *dy, size_t n,
                  size_t in, size_t out, float *dw, float *db) {
  comm_t *c = coll_ctx_comm(ctx);
  if (in > s->max_in || out > s->max_out || n > s->max_rows)
    return dt_error("sufficient factors: a layer of %zu x %zu over %zu rows is larger than "
                    "planned (a bug)", out, in, n);
  DT_TRY(exchange_rows(s, c, n));
  size_t first[s->nranks], total = 0;
  for (int i = 0; i < s->nranks; i++) first[i] = total, total += s->rows[i];
  /* my rows in place, then every peer's dY and X straight into theirs */
  memcpy(s->dy + first[s->rank] * out, dy, n * out * sizeof(float));
  memcpy(s->x + first[s->rank] * in, x, n * in * sizeof(float));
  posted_t p = {c, s->reqs, 0};
  for (int i = 0; i < s->nranks; i++) {
    if (i == s->rank || !s->rows[i]) continue;
    DT_TRY(post_recv(&p, i, TAG_SFB_DY, s->dy + first[i] * out, s->rows[i] * out * sizeof(float)));
    DT_TRY(post_recv(&p, i, TAG_SFB_X, s->x + first[i] * in, s->rows[i] * in * sizeof(float)));
  }
  for (int j = 0; j < s->nranks && n; j++) {
    if (j == s->rank) continue;
    DT_TRY(post_send(&p, j, TAG_SFB_DY, dy, n * out * sizeof(float)));
    DT_TRY(post_send(&p, j, TAG_SFB_X, x, n * in * sizeof(float)));
  }
  DT_TRY(wait_posted(&p));
  if (total == 0) {
    memset(dw, 0, in * out * sizeof(float));
    memset(db, 0, out * sizeof(float));
    return 0;
  }
  kern_gemm(1, 0, (int)out, (int)in, (int)total, 1.0f, s->dy, (int)out, s->x, (int)in, 0.0f, dw,
            (int)in);
  memset(db, 0, out * sizeof(float));
  for (size_t k = 0; k < total; k++)
    for (size_t j = 0; j < out; j++) db[j] += s->dy[k * out + j];
  return 0;
}
