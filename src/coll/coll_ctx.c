/* The collective context: scratch allocated once and grown, the send list,
 * and the segmented send/receive helpers that every algorithm uses.
 * Tags: every algorithm has its own tag at or above COLL_TAG_BASE
 * (coll_internal.h), so collectives never match a strategy's messages. */
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"

#define MPI_SEGMENT_BYTES (1 << 20) /* measured: with single-copy (CMA) transfers fewer, larger messages win */
#define MAX_SEGMENT_BYTES (64 << 20) /* the scratch holds COLL_WINDOW of them */

int coll_ctx_new(comm_t *c, coll_ctx_t **out) {
  coll_ctx_t *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return dt_error("out of memory creating a collective context");
  ctx->comm = c;
  ctx->latency = c->link_latency > 0 ? c->link_latency : 5e-6;
  ctx->bandwidth = c->link_bandwidth > 0 ? c->link_bandwidth : 5e9;
  coll_ctx_set_segment(ctx, 0);
  /* more than one host, and at least two ranks on each (allreduce_auto.c) */
  if (comm_nhosts(c) > 1) {
    int *n = calloc((size_t)comm_nhosts(c), sizeof(int)), ok = 1;
    if (!n) {
      coll_ctx_free(ctx);
      return dt_error("out of memory creating a collective context");
    }
    for (int r = 0; r < c->size; r++) n[comm_host(c, r)]++;
    for (int h = 0; h < comm_nhosts(c); h++) ok &= n[h] >= 2;
    free(n);
    ctx->hosts_worth_it = ok;
  }
  *out = ctx;
  return 0;
}

void coll_ctx_free(coll_ctx_t *ctx) {
  if (!ctx) return;
  coll_free_hier(ctx);
  coll_free_shm(ctx);
  dt_free(ctx->seg_scratch);
  dt_free(ctx->work[0]);
  dt_free(ctx->work[1]);
  free(ctx->sends);
  free(ctx);
}

comm_t *coll_ctx_comm(coll_ctx_t *ctx) { return ctx->comm; }

int coll_barrier(coll_ctx_t *ctx, int tag) {
  comm_t *c = ctx->comm;
  for (int k = 1; k < c->size; k <<= 1) {
    comm_req_t *r[2];
    DT_TRY(comm_irecv(c, (c->rank - k + c->size) % c->size, tag, NULL, 0, &r[0]));
    if (comm_isend(c, (c->rank + k) % c->size, tag, NULL, 0, &r[1]) != 0) {
      comm_cancel(c, r[0]);
      return -1;
    }
    DT_TRY(comm_waitall(c, 2, r));
  }
  return 0;
}

void coll_ctx_set_group_size(coll_ctx_t *ctx, int ranks_per_group) {
  ctx->group_size = ranks_per_group > 0 ? ranks_per_group : 0;
}

void coll_ctx_set_link(coll_ctx_t *ctx, double latency, double bandwidth) {
  if (latency > 0) ctx->latency = latency;
  if (bandwidth > 0) ctx->bandwidth = bandwidth;
}

void coll_ctx_link(const coll_ctx_t *ctx, double *latency, double *bandwidth) {
  *latency = ctx->latency, *bandwidth = ctx->bandwidth;
}

/* On local the receiver reads the sender's buffer directly, so a whole
 * block is one message; elsewhere segments let the reduction of one
 * overlap the transfer of the next and keep the scratch in cache. */
void coll_ctx_set_segment(coll_ctx_t *ctx, size_t bytes) {
  if (bytes == 0) bytes = ctx->comm->ops->reduce_zero_copy ? 0 : MPI_SEGMENT_BYTES;
  if (!ctx->comm->ops->reduce_zero_copy && bytes > MAX_SEGMENT_BYTES) bytes = MAX_SEGMENT_BYTES;
  ctx->seg = bytes == 0 ? (size_t)-1 : (bytes + sizeof(float) - 1) / sizeof(float);
}

void coll_block(size_t count, int parts, int i, size_t *off, size_t *len) {
  size_t base = count / (size_t)parts, extra = count % (size_t)parts, ui = (size_t)i;
  *off = ui * base + (ui < extra ? ui : extra);
  *len = base + (ui < extra ? 1 : 0);
}

size_t coll_nsegs(const coll_ctx_t *ctx, size_t n) {
  if (n == 0) return 0;
  return n <= ctx->seg ? 1 : (n - 1) / ctx->seg + 1;
}

void coll_seg(const coll_ctx_t *ctx, size_t n, size_t k, size_t *off, size_t *len) {
  if (n <= ctx->seg) {
    *off = 0, *len = n;
    return;
  }
  *off = k * ctx->seg;
  *len = n - *off < ctx->seg ? n - *off : ctx->seg;
}

float *coll_slot(coll_ctx_t *ctx, size_t i) {
  if (ctx->comm->ops->reduce_zero_copy) return NULL;
  if (ctx->seg_scratch_cap < COLL_WINDOW * ctx->seg) { /* first use, or a larger segment */
    dt_free(ctx->seg_scratch);
    ctx->seg_scratch = dt_alloc_floats(COLL_WINDOW * ctx->seg);
    ctx->seg_scratch_cap = ctx->seg_scratch ? COLL_WINDOW * ctx->seg : 0;
    if (!ctx->seg_scratch) return NULL;
  }
  return ctx->seg_scratch + (i % COLL_WINDOW) * ctx->seg;
}

float *coll_work(coll_ctx_t *ctx, int which, size_t n) {
  if (n > ctx->work_cap) {
    for (int i = 0; i < 2; i++) {
      dt_free(ctx->work[i]);
      ctx->work[i] = dt_alloc_floats(n);
    }
    if (!ctx->work[0] || !ctx->work[1]) {
      ctx->work_cap = 0;
      return NULL;
    }
    ctx->work_cap = n;
  }
  return ctx->work[which];
}

int coll_track_send(coll_ctx_t *ctx, comm_req_t *req) {
  if (ctx->nsends == ctx->sends_cap) {
    size_t cap = ctx->sends_cap ? 2 * ctx->sends_cap : 64;
    comm_req_t **s = realloc(ctx->sends, cap * sizeof *s);
    if (!s) {
      comm_cancel(ctx->comm, req);
      return dt_error("out of memory tracking sends");
    }
    ctx->sends = s, ctx->sends_cap = cap;
  }
  ctx->sends[ctx->nsends++] = req;
  return 0;
}

int coll_send(coll_ctx_t *ctx, int dst, int tag, const float *buf, size_t n) {
  for (size_t k = 0, nk = coll_nsegs(ctx, n); k < nk; k++) {
    size_t off, len;
    comm_req_t *req;
    coll_seg(ctx, n, k, &off, &len);
    DT_TRY(comm_isend(ctx->comm, dst, tag, buf + off, len * sizeof(float), &req));
    DT_TRY(coll_track_send(ctx, req));
  }
  return 0;
}

int coll_wait_sends(coll_ctx_t *ctx) {
  int n = (int)ctx->nsends;
  ctx->nsends = 0;
  return comm_waitall(ctx->comm, n, ctx->sends);
}

void coll_cancel_sends(coll_ctx_t *ctx) {
  for (size_t i = 0; i < ctx->nsends; i++) comm_cancel(ctx->comm, ctx->sends[i]);
  ctx->nsends = 0;
}

int coll_post_recv(coll_ctx_t *ctx, int src, int tag, float *buf, size_t n, int reduce,
                   size_t slot, comm_req_t **req) {
  if (!reduce) return comm_irecv(ctx->comm, src, tag, buf, n * sizeof(float), req);
  float *scratch = coll_slot(ctx, slot);
  if (!scratch && !ctx->comm->ops->reduce_zero_copy) return -1;
  return comm_irecv_reduce(ctx->comm, src, tag, buf, n, scratch, req);
}

int coll_recv(coll_ctx_t *ctx, int src, int tag, float *buf, size_t n, int reduce) {
  comm_req_t *win[COLL_WINDOW];
  size_t nk = coll_nsegs(ctx, n), posted = 0, done = 0;
  int rc = 0;
  while (done < nk && rc == 0) {
    while (rc == 0 && posted < nk && posted < done + COLL_WINDOW) {
      size_t off, len;
      coll_seg(ctx, n, posted, &off, &len);
      rc = coll_post_recv(ctx, src, tag, buf + off, len, reduce, posted, &win[posted % COLL_WINDOW]);
      if (rc == 0) posted++;
    }
    if (rc == 0) rc = comm_wait(ctx->comm, win[done++ % COLL_WINDOW]);
  }
  for (; done < posted; done++) comm_cancel(ctx->comm, win[done % COLL_WINDOW]);
  return rc;
}

int coll_fail(coll_ctx_t *ctx, const char *what) {
  coll_cancel_sends(ctx);
  return dt_error_prefix("%s: ", what);
}
