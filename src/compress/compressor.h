/* The communicator's state (exchange.c), shared with powersgd.c. */
#ifndef DTRAIN_COMPRESS_COMPRESSOR_H
#define DTRAIN_COMPRESS_COMPRESSOR_H

#include "dtrain/comm.h"
#include "dtrain/compress.h"
#include "compress/sparse_coll.h"

/* Tags of the compressed exchanges: in the collectives' range (coll.h),
 * past the tags coll/ uses. */
enum { TAG_COMPRESS_SCATTER = COLL_TAG_BASE + 256, TAG_COMPRESS_GATHER, TAG_COMPRESS_SIZE,
       TAG_SFB_ROWS, TAG_SFB_DY, TAG_SFB_X, TAG_MIRROR_UP, TAG_MIRROR_DOWN,
       TAG_TERN_SCALERS };

struct compressor {
  compress_config_t cfg;
  int rank, nranks;
  size_t n;                 /* the arena the offsets index */
  ef_memory_t mem;          /* the workers' memory (error feedback), or residual NULL */
  float *tmp, *scratch;     /* n floats each */
  uint8_t *send, *recv, *out, *gather;  /* encodings, grown to the largest buffer */
  size_t cap;               /* bytes of each of those */
  uint64_t *sizes;          /* sparse: each rank's message size */
  void *reqs;               /* comm_req_t *[2 P] */
  /* powersgd.c */
  float *q;                 /* each matrix's Q (cols x rank), warm-started, by arena offset */
  float *q_ready;           /* q_ready[off] = 1: the matrix at off has its Q (floats: a
                             * checkpoint keeps them as it keeps q) */
  float *factors;           /* powersgd: the P and Q factors of a buffer's matrices, side by
                             * side; 1-bit and sparse codecs: the bucket packed (exchange.c's
                             * layout) */
  size_t factors_cap;
  float *shared_m;          /* --momentum-correction shared: M, the last decoded sum */
  float *server_e;          /* and the error of this rank's re-encoded blocks of the sum
                             * (by arena offset + packed position), fed back */
  compress_stats_t stats;
  /* the sparse collectives (sparse_coll.h): their scratch, and this
   * rank's pairs (indices into the packed buffer; values in scratch) */
  sparse_ws_t sw;
  uint32_t *pair_idx;
  size_t pair_cap;
};

/* The receives and sends of one exchange step, posted into reqs; one
 * that fails to post cancels those already posted, and wait_posted waits
 * for all (comm_waitall cancels the rest when one fails). */
typedef struct {
  comm_t *comm;
  comm_req_t **reqs;
  int n;
} posted_t;

static inline int post(posted_t *p, int rc) {
  if (rc == 0) return 0;
  for (int i = 0; i < p->n; i++) comm_cancel(p->comm, p->reqs[i]);
  p->n = 0;
  return -1;
}
static inline int post_recv(posted_t *p, int src, int tag, void *buf, size_t len) {
  return post(p, comm_irecv(p->comm, src, tag, buf, len, &p->reqs[p->n]) ? -1 : (p->n++, 0));
}
static inline int post_send(posted_t *p, int dst, int tag, const void *buf, size_t len) {
  return post(p, comm_isend(p->comm, dst, tag, buf, len, &p->reqs[p->n]) ? -1 : (p->n++, 0));
}
static inline int wait_posted(posted_t *p) {
  int rc = comm_waitall(p->comm, p->n, p->reqs);
  p->n = 0;
  return rc;
}

/* A range [lo, hi) of a buffer. */
typedef struct { size_t lo, hi; } range_t;

/* c->factors: room for n floats (powersgd's factors, the sparse
 * exchange's packed bucket). */
int compressor_grow_factors(compressor_t *c, size_t n);

/* c->send, recv, out and gather: `need` bytes each. */
int compressor_grow_buffers(compressor_t *c, size_t need);

/* terngrad_shared.c: TernGrad with its scalers shared (the paper's form),
 * and the bytes its exchange sends and receives on `rank` of P. */
int terngrad_allreduce(compressor_t *c, comm_t *comm, float *buf, size_t off, size_t len,
                       int64_t step, int stream, const compress_matrix_t *mats, int nmats);
void terngrad_shared_bytes(int rank, int P, size_t off, size_t len, const compress_matrix_t *mats,
                           int nmats, size_t *sent, size_t *received);

int powersgd_allreduce(compressor_t *c, coll_ctx_t *ctx, float *buf, size_t off, size_t len,
                       const compress_matrix_t *mats, int nmats);
int powersgd_init(compressor_t *c);
/* The rank a matrix is approximated at (0: it goes dense), and the
 * Gram-Schmidt of P's r columns (rows x r): what perf times (perf/compute.c). */
int powersgd_rank(const codec_spec_t *s, const compress_matrix_t *m);
void powersgd_orthonormalize(float *p, size_t rows, int r);
/* The floats of PowerSGD's two allreduces of buf[off, off + len): first,
 * the P factors and the values that go dense; second, the Q factors. */
void powersgd_counts(const codec_spec_t *s, const compress_matrix_t *mats, int nmats, size_t off,
                     size_t len, size_t *first, size_t *second);
#endif
