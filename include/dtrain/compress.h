/* compress: gradient compression, in the three parts of the GRACE framework
 * (Xu et al. 2021):
 *   the compressor - a codec: encode and decode, pure functions on a
 *                    buffer (codec.c, one file a family of codecs);
 *   the memory     - error feedback: what a biased codec did not send is
 *                    added to the next gradient (memory.c; DGC's momentum
 *                    correction and factor masking are a kind of it);
 *   the communicator - which collective carries the encoding (exchange.c:
 *                    dense encodings by a scatter-reduce that decodes and
 *                    sums in fp32, then an allgather of the re-encoded
 *                    sums; sparse ones by an allgather, dense again past
 *                    the break-even density, or by SparCML's or Kylix's
 *                    merging sparse allreduce (sparse_*.c); powersgd.c:
 *                    two allreduces of low-rank factors).
 * Sits above coll/ (it runs collectives) and below strategy/ (the gradient
 * reducer of data parallelism calls it, one bucket at a time). */
#ifndef DTRAIN_COMPRESS_H
#define DTRAIN_COMPRESS_H

#include "dtrain/coll.h"
#include "dtrain/nn.h"

typedef enum {
  CODEC_NONE = 0,   /* no compression: the plain allreduce path */
  CODEC_FP32,       /* passthrough: summable, carried by the plain allreduce */
  CODEC_FP16,       /* IEEE half, round to nearest even (or stochastic) */
  CODEC_BF16,       /* bfloat16, round to nearest even (or stochastic) */
  CODEC_INT8,       /* 8-bit integers, one fp32 scale per message */
  CODEC_ONEBIT,     /* 1-bit SGD: sign, with the means of each sign's values */
  CODEC_QSGD,       /* QSGD with S levels: stochastic, unbiased, plain bit packing */
  CODEC_TERNGRAD,   /* TernGrad: {-1, 0, 1} x max|g|, stochastic, unbiased (or clipped at C sigma);
                     * in the allreduce exchange a scaler a tensor, shared by the ranks */
  CODEC_TOPK,       /* the fraction R of largest magnitudes (Aji & Heafield) */
  CODEC_RANDOMK,    /* a random fraction R (not rescaled: biased, with memory) */
  CODEC_THRESHOLD,  /* every value with |g| >= T (Strom) */
  CODEC_DGC,        /* top-k + momentum correction, clipping, masking, warm-up */
  CODEC_POWERSGD,   /* rank-R approximation of each weight matrix */
  CODEC_STROM,      /* every value with |g| >= T sent as +-T: index and sign in 32 bits (Strom) */
  CODEC_TERNGRAD_CHUNKED, /* TernGrad with a scale a 512 values, not shared (CODEC_TERNGRAD's
                           * encoding where one sender encodes alone) */
  CODEC_COUNT
} codec_kind_t;

typedef struct {
  codec_kind_t kind;
  double param;     /* qsgd: levels S; topk, randomk, dgc: ratio R; threshold: T;
                     * terngrad, terngrad-chunked: the clip C in standard deviations
                     * (0: none);
                     * powersgd: rank R */
  int stochastic;   /* fp16, bf16, int8 with ":sr": unbiased stochastic rounding */
  size_t group;     /* onebit: how many consecutive values share a pair of means (0: 512);
                     * the exchange sets it to a column's length (compress/exchange.c) */
} codec_spec_t;

/* "none", "fp32", "fp16[:sr]", "bf16[:sr]", "int8[:sr]", "onebit", "qsgd:S",
 * "terngrad[:C]", "terngrad-chunked[:C]", "topk:R", "randomk:R", "threshold:T", "strom:T", "dgc:R", "powersgd:R".
 * A bad value is one line naming --compress and what it expects. */
int codec_parse(const char *text, codec_spec_t *out);
/* The spec as codec_parse reads it ("topk:0.001"). */
void codec_format(const codec_spec_t *s, char *buf, size_t cap);
/* Biased codecs need error feedback to converge (it is on by default for
 * them); the unbiased ones (stochastic rounding, qsgd, terngrad) refuse it. */
int codec_biased(const codec_spec_t *s);
/* Whether error feedback is on when --error-feedback is not given: for the
 * biased codecs but clipped TernGrad, whose error is mostly zero-mean noise
 * that a memory carries forward (the paper has none; with one lenet fell to
 * 45.77% in 3 epochs, against 89.36% without). */
int codec_default_feedback(const codec_spec_t *s);
/* Sparse: a variable set of (index, value) pairs, carried by allgather
 * or a merging sparse allreduce (--sparse-collective). */
int codec_sparse(const codec_spec_t *s);
/* Whether the exchange sends a bucket's small tensors (vectors, tensors of
 * at most 1024 values) by the plain allreduce instead: the sparse codecs
 * and 1-bit SGD (compress/exchange.c says why). */
int codec_small_dense(const codec_spec_t *s);
/* Whether the codec's scales are per column of a weight matrix, which the
 * exchange then sends transposed (1-bit SGD, as Seide et al. and CNTK). */
int codec_by_column(const codec_spec_t *s);
/* Whether codec_bytes gives every encoding's size; else (threshold, strom)
 * the size depends on the values and is read from the message's head. */
int codec_fixed_size(const codec_spec_t *s);
/* Whether decode(encode(x)) is x bit for bit (fp32). */
int codec_lossless(const codec_spec_t *s);

/* ---- the compressor: pure functions ---------------------------------------
 * An encoding of n floats. codec_bytes: its exact size, or 0 when it
 * depends on the values (threshold); codec_max_bytes: an upper bound.
 * encode writes at most codec_max_bytes bytes and returns how many; `seed`
 * drives the stochastic codecs (the same seed, the same bytes); scratch
 * holds n floats (top-k's selection). decode_add adds the decoded values
 * to acc[0..n); a message that is not a valid encoding of n values is
 * refused (-1, one line saying what is wrong) and nothing outside
 * acc[0..n) and in[0..bytes) is touched. PowerSGD is not a codec of this
 * kind (powersgd.c). */
size_t codec_bytes(const codec_spec_t *s, size_t n);
size_t codec_max_bytes(const codec_spec_t *s, size_t n);
size_t codec_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed, void *out,
                    float *scratch);
int codec_decode_add(const codec_spec_t *s, const void *in, size_t bytes, size_t n, float *acc);
/* Sparse codecs: the number of values kept of n (top-k, random-k, DGC). */
size_t codec_keep(double ratio, size_t n);
/* The size of the encoding of n values that starts at `in`, `avail` bytes
 * being there: codec_bytes when fixed, else (threshold) the size its
 * count gives, more than avail when there is no count to read. */
size_t codec_message_bytes(const codec_spec_t *s, const void *in, size_t avail, size_t n);

/* ---- the memory: error feedback ------------------------------------------
 * One float per gradient element (the residual v), and for DGC a second
 * (the velocity u). compensate: v += g, or under momentum correction
 * u = m u + g, v += u; the caller encodes v. update: v -= what was sent
 * (decoded), and under factor masking u is cleared where a value was sent. */
typedef struct {
  float *residual, *velocity;   /* velocity: NULL unless momentum correction */
  float momentum;
  int masking;                  /* momentum factor masking (DGC: u = 0 where sent) */
  size_t n;
} ef_memory_t;
int ef_init(ef_memory_t *m, size_t n, float momentum_correction, int masking);
void ef_free(ef_memory_t *m);
void ef_compensate(ef_memory_t *m, const float *g, size_t off, size_t len);
void ef_update(ef_memory_t *m, const float *sent, size_t off, size_t len);
/* The values sent whole (a sparse codec's dense tensors): v = 0; u is kept,
 * so that they step with momentum (DGC's uncompressed tensors). */
void ef_forget(ef_memory_t *m, size_t off, size_t len);
double ef_norm(const ef_memory_t *m);   /* ||v||_2 */

/* ---- the mirror: a model sent as its changes (mirror.c) --------------------
 * For what a sender sends again and again to one receiver (a parameter
 * server's pulls, EASGD's models): the sender keeps `mirror`, the copy its
 * receiver holds, sends encode(x - mirror) and adds the decoding to the
 * mirror; the receiver adds it to its copy (mirror_decode), so both hold
 * the same bits and what the codec drops waits in x - mirror for the next
 * message (error feedback whose memory is the mirror). A lossless codec
 * (fp32) sends x itself, so the copy is x bit for bit. scratch: 2n floats.
 * mirror_decode refuses a malformed message (-1) with the copy untouched. */
size_t mirror_encode(const codec_spec_t *s, const float *x, float *mirror, size_t n,
                     uint64_t seed, void *out, float *scratch);
int mirror_decode(const codec_spec_t *s, const void *in, size_t bytes, size_t n, float *copy);
/* The seed of the count-th encoding on the link from -> to (tag: which of
 * a link's streams, 0 when it has one): the stochastic codecs draw the
 * same on both transports and in every run. */
uint64_t mirror_seed(uint64_t seed, int from, int to, int64_t count, int tag);

/* ---- the mirror tree (mirror_tree.c) ----------------------------------------
 * reduce_tree and broadcast_tree of a vector that moves a little each round,
 * every link of the binomial tree (root `root` of `size` ranks) sent as
 * the change since its other end last heard it (a mirror a link). start:
 * each non-root rank's first contribution; top: the first broadcast value;
 * both the same on every rank. reduce: x in, this rank's contribution; out,
 * its subtree's partial sum (the root: the total, its children's parts as
 * it holds them). broadcast: the root sends x; other ranks get x as they
 * hold it. `round` seeds the stochastic codecs. Fixed-size codecs only
 * (codec_bytes). */
typedef struct mirror_tree mirror_tree_t;
int mirror_tree_new(const codec_spec_t *s, size_t n, int rank, int size, int root, uint64_t seed,
                    const float *start, const float *top, mirror_tree_t **out);
void mirror_tree_free(mirror_tree_t *t);
int mirror_tree_reduce(mirror_tree_t *t, comm_t *c, float *x, int64_t round);
int mirror_tree_broadcast(mirror_tree_t *t, comm_t *c, float *x, int64_t round);

/* ---- the communicator ------------------------------------------------------
 * One per rank and communicator; sums a buffer's compressed contributions
 * over the ranks, in place, the same bits on every rank and both
 * transports (sums in rank order). */
typedef struct compressor compressor_t;
/* Which collective sums a sparse codec's pairs (--sparse-collective;
 * src/compress/sparse_coll.h): every encoding to every rank (allgather,
 * the default), SparCML's sparse allreduce by recursive doubling or by
 * its split allgather (sparcml: the cheaper by its cost), Kylix's
 * butterfly, or the cheapest of them by the alpha-beta cost (auto). */
typedef enum {
  SPARSE_COLL_ALLGATHER = 0,
  SPARSE_COLL_SPARCML,
  SPARSE_COLL_SPARCML_RD,
  SPARSE_COLL_SPARCML_SPLIT,
  SPARSE_COLL_KYLIX,
  SPARSE_COLL_AUTO,
  SPARSE_COLL_COUNT
} sparse_coll_t;
/* "allgather", "sparcml", "sparcml:rd", "sparcml:split", "kylix", "auto";
 * a bad name is one line naming --sparse-collective and the choices. */
int sparse_coll_parse(const char *text, sparse_coll_t *out);
const char *sparse_coll_name(sparse_coll_t a);
typedef struct {
  codec_spec_t codec;
  int error_feedback;       /* the memory (biased codecs only) */
  float momentum;           /* momentum correction: the optimizer's factor; 0: none */
  int shared_momentum;      /* 0: the memory holds each rank's velocity (DGC); 1: each
                             * rank sends g + m M (M the last decoded sum, the same on
                             * every rank) through the memory, and M = the new sum */
  double clip;              /* DGC: local gradient clipping of the global norm (0 = off) */
  int64_t warmup_steps;     /* DGC: steps over which the density falls to R */
  uint64_t seed;
  allreduce_algo_t algo;    /* the dense collective (fallbacks, powersgd's factors) */
  sparse_coll_t sparse;     /* the sparse codecs' collective */
} compress_config_t;
/* n: the length of the buffers summed (the gradient arena); their offsets
 * in it index the memory. */
int compressor_new(const compress_config_t *cfg, size_t n, int rank, int nranks,
                   compressor_t **out);
void compressor_free(compressor_t *c);
/* buf[0..len) (at offset `off` of the arena) summed over the ranks of ctx's
 * communicator, compressed; `step` and `stream` (a bucket's index) seed the
 * stochastic codecs. For powersgd, `shape` gives the matrices in it. */
typedef struct { size_t off, rows, cols; } compress_matrix_t;
/* Every parameter tensor of m as a matrix (rows = its first dimension: a
 * layer's outputs; a vector is one row), out[m->ntensors]. */
void compress_model_matrices(const model_t *m, compress_matrix_t *out);
/* The tensors of m that start in [off, off + len) (a bucket's): how many,
 * and the first's index in *first (m->ntensors when none). */
int compress_tensors_in(const model_t *m, size_t off, size_t len, int *first);
int compressor_allreduce(compressor_t *c, coll_ctx_t *ctx, float *buf, size_t off, size_t len,
                         int64_t step, int stream, const compress_matrix_t *mats, int nmats);
/* Figures since the last call: seconds encoding and decoding, and the
 * residual's norm (0 without memory). */
typedef struct {
  double encode_sec, decode_sec, residual_norm;
  uint64_t dense_fallbacks;   /* sparse exchanges that went dense (SparCML's switch) */
} compress_stats_t;
void compressor_take_stats(compressor_t *c, compress_stats_t *out);
int compressor_has_memory(const compressor_t *c);
/* Whether the compressor runs --compress-warmup-steps itself (DGC's
 * sparsity ramp; the shared momentum's exact dense steps), so its caller
 * sends every step through it. */
int compressor_takes_warmup(const compressor_t *c);
/* What a compressor carries from one step to the next, for checkpoints:
 * arrays of n floats (the arena's length), by name. per_rank: each rank's
 * own (the error-feedback memory, DGC's velocity); else the same on every
 * rank (PowerSGD's warm-started Q, and 1 where a matrix has one). A run
 * restored with them (written into data) continues bit for bit. */
typedef struct {
  const char *name;
  float *data;
  int per_rank;
} compress_state_t;
#define COMPRESS_MAX_STATE 6
int compressor_state(compressor_t *c, compress_state_t out[COMPRESS_MAX_STATE]);

/* ---- bytes on the wire (exchange.c): the formula a step's description uses
 * The codec step `step` sends with: during --compress-warmup-steps, DGC's
 * density ramp, and for every other codec kind CODEC_NONE: the step goes
 * by the plain allreduce (the reducer's dense warm-up, or the shared
 * momentum's). */
codec_spec_t compress_codec_at(const compress_config_t *c, int64_t step);
/* The first step after `from` whose exchange may differ from from's (a
 * phase of the warm-up ends); 0 when every step from `from` on is alike. */
int64_t compress_phase_end(const compress_config_t *c, int64_t from);
/* What compressor_allreduce(buf[off, off + len) of the arena, step, mats)
 * sends and receives on rank `rank` of `nranks`: from the same layout,
 * blocks, encoded sizes (codec_bytes), break-even switch and factor counts
 * that the exchange uses, so the two cannot disagree. c->algo must be one
 * coll_allreduce_bytes knows (not auto over 3+ ranks, nor hier). Exact for
 * every codec but threshold:T, whose messages depend on the values:
 * exact = 0 and [sent_min, sent], [received_min, received] bound them.
 * pattern: how it goes ("allreduce": plain, or sparse past the break-even
 * density; "scatter-reduce+allgather": dense encodings; "allgather":
 * sparse ones; "allreduce of factors": PowerSGD), a static string. */
typedef struct {
  size_t sent, received;
  size_t sent_min, received_min;   /* = sent, received when exact */
  int exact;
  const char *pattern;
} compress_bytes_t;
int compress_exchange_bytes(const compress_config_t *c, int rank, int nranks, size_t off,
                            size_t len, int64_t step, const compress_matrix_t *mats, int nmats,
                            compress_bytes_t *out);

/* ---- sufficient factor broadcasting (sufficient_factors.c) -----------------
 * A dense layer's gradient sum rebuilt from every rank's factors (its rows
 * of output gradients dY, n x out, and of inputs X, n x in): lossless,
 * (P - 1)(8 + 4 n (in + out)) bytes a rank. sfb_gains: whether that is
 * fewer bytes than the ring's for a batch of `batch` rows. */
typedef struct sfb sfb_t;
int sfb_gains(int nranks, int batch, size_t in, size_t out);
/* What a rank sends each peer for one layer of `rows` rows: its row count
 * (8 bytes) and its rows of dY and X. */
size_t sfb_message_bytes(size_t rows, size_t in, size_t out);
int sfb_new(int rank, int nranks, size_t max_rows, size_t max_in, size_t max_out, sfb_t **out);
void sfb_free(sfb_t *s);
/* dw (out x in) and db (out) = the sums over every rank's rows. */
int sfb_allreduce(sfb_t *s, coll_ctx_t *ctx, const float *x, const float *dy, size_t n,
                  size_t in, size_t out, float *dw, float *db);
#endif
